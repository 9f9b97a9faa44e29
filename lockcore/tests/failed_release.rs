//! A release that fails leaves the lock held, as the handle still says it
//! is: nobody else may get in while the holder believes it holds the lock.
//! Here `flock`'s state line is damaged while the lock is held, so its
//! release fails (`Corrupt`); the kernel lock must still be held, so a
//! second handle is told `Busy`, not let in.

mod common;

use common::*;
use lockcore::{CorruptKind, Error};

#[test]
fn a_failed_flock_release_keeps_the_kernel_lock() {
    let dir = TestDir::new("failed-release");
    let spec = Scheme::Flock.spec(dir.path(), "");
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    // Same inode, damaged content: the release reads it and fails.
    std::fs::write(Scheme::Flock.lock_path(dir.path()), b"not a state line\n").unwrap();
    assert_eq!(holder.release(std::time::Duration::ZERO), Err(Error::Corrupt(CorruptKind::GuardState)));
    assert!(holder.held().is_some(), "the handle still holds after a failed release");
    let mut other = open_lock(&spec);
    assert_eq!(other.try_acquire(), Err(Error::Busy), "a failed release let go of the kernel lock");
}

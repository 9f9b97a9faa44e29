//! A lock's guard file is as private as the lock: with `mode=0600` no other
//! user can open the guard and hold its flock, which would wedge the lock
//! for its owner. Without a `mode` the guard stays open to all (0666 less
//! the umask), as the lock is.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;

#[test]
fn the_guard_is_as_private_as_the_lock() {
    let dir = TestDir::new("guard-mode");
    // SAFETY: umask only changes this process's file creation mask; read it
    // (by setting it) so that the default case can be computed.
    let umask = unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    } as u32;
    for scheme in [Scheme::Lockfile, Scheme::Mkdir] {
        for (query, expected) in [("mode=0600", 0o600), ("mode=0640", 0o660), ("", 0o666 & !umask)] {
            let guard = scheme.guard_path(dir.path()).unwrap();
            let _ = std::fs::remove_file(&guard);
            let mut lock = open_lock(&scheme.spec(dir.path(), query));
            lock.try_acquire().unwrap_or_else(|e| panic!("{} {query}: {e:?}", scheme.name()));
            let mode = std::fs::metadata(&guard).unwrap().permissions().mode() & 0o777;
            lock.release(Duration::ZERO).unwrap();
            assert_eq!(mode, expected & !umask, "{} with {query:?}: guard mode {mode:o}", scheme.name());
        }
    }
}

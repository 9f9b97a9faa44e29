//! A release that fails leaves the lock held, as the handle still says it
//! is: nobody else may get in while the holder believes it holds the lock.
//!
//! On every scheme, the file the release must read is damaged in place
//! (same inode) while the lock is held, so the release fails with
//! `Corrupt` and the handle still holds; another handle is not let in; and
//! once the file is mended, the holder's release succeeds (`Released`): the
//! lock was kept throughout, not lost.
//!
//! * `flock`: its state lives in `<target>.guard`, not in the target, which
//!   is never written; the guard line is damaged (`Corrupt(GuardState)`;
//!   the holder's record after it decides nothing, the kernel lock does).
//!   The kernel lock must still be held, so the other handle is told
//!   `Busy`.
//! * `lockfile`, `mkdir`, `symlink`: the guard line (`Corrupt(GuardState)`);
//!   the other handle is refused by the same damage.
//! * `lease`, `toplock`: the lease line, the queue's header
//!   (`Corrupt(Record)`); the other handle is refused by the same damage.
//! * `shm`: the lease line in the active slot of its file, written where
//!   the holder's mapping sees it at once (`Corrupt(Record)`); the other
//!   handle is refused by the same damage.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use lockcore::{CorruptKind, ErrorKind, FileRole};

/// Where in its state file (`intact`, as the holder left it) the scheme
/// keeps what a release reads, as an offset of the first byte to damage,
/// and what the damage is refused as.
fn what_a_release_reads(scheme: Scheme, intact: &[u8]) -> (u64, FileRole, CorruptKind) {
    match scheme {
        // The guard line, after its marker `lockguard 2 `.
        Scheme::Flock | Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink => {
            (12, FileRole::Guard, CorruptKind::GuardState)
        }
        // The line after `lease 2 `, the header after `H 4 `.
        Scheme::Lease => (8, FileRole::Lock, CorruptKind::Record),
        Scheme::Toplock => (4, FileRole::Lock, CorruptKind::Record),
        // The active slot's line, after its `lease 2 `.
        Scheme::Shm => (shm_lock::active_slot(intact).start as u64 + 8, FileRole::Lock, CorruptKind::Record),
        other => unknown_format(other),
    }
}

fn write_at(path: &Path, bytes: &[u8], offset: u64) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset).unwrap();
}

#[test]
fn a_failed_release_keeps_the_lock() {
    each_file_scheme("failed-release", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let state = scheme.state_path(dir.path());
        let mut holder = open_lock(&spec);
        holder.try_acquire().unwrap();
        let intact = std::fs::read(&state).unwrap();

        let (offset, file, corrupt) = what_a_release_reads(scheme, &intact);
        let damage = b"#not-a-record-or-a-number#";
        assert!(intact.len() >= offset as usize + damage.len(), "{} bytes held", intact.len());
        write_at(&state, damage, offset);
        let failed = holder.release(std::time::Duration::ZERO).unwrap_err();
        assert_eq!((failed.kind(), failed.file()), (ErrorKind::Corrupt(corrupt), Some(file)), "{failed}");
        assert!(holder.held().is_some(), "the handle still holds after a failed release");

        let mut other = open_lock(&spec);
        let refused = other.try_acquire().map(|a| a.fence).map_err(|e| e.kind());
        // flock's exclusion is the kernel lock, which stops the other handle
        // before it reads anything; every other scheme's holder is judged
        // from its files, and the damage refuses the other handle too.
        if scheme.breaks_stale_locks() {
            assert_eq!(refused, Err(ErrorKind::Corrupt(corrupt)), "let in past a damaged lock");
        } else {
            assert_eq!(refused, Err(ErrorKind::Busy), "a failed release let go of the kernel lock");
        }

        write_at(&state, &intact[offset as usize..offset as usize + damage.len()], offset);
        assert_eq!(other.try_acquire().map_err(|e| e.kind()), Err(ErrorKind::Busy), "mended: still held");
        assert_eq!(holder.release(std::time::Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released));
        other.try_acquire().expect("free after the release");
    });
}

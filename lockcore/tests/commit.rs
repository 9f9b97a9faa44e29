//! The commit step's errors, on every scheme: a rename that fails is
//! `Error::Commit` with its errno and leaves the target alone; one of the
//! lock's own files given as temp file or target is `CommitOntoLock`
//! (renaming over the lock or its guard would destroy the lock). In every
//! case the lock is still held afterwards, and releases normally.
//!
//! The lock's own files are the ones the handle names: `Lock::path` and
//! `Lock::guard_path`. That includes `flock`'s state file, `<target>.guard`
//! (and its target, the flock'd file), so a commit onto either is refused
//! as for the other schemes' locks and guards. Every file a scheme keeps
//! its state in is among them.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use lockcore::{CPath, Errno, Error, ReleaseOutcome};

fn cpath(path: impl AsRef<Path>) -> CPath {
    CPath::from_parts(&[path.as_ref().as_os_str().as_bytes()]).unwrap()
}

#[test]
fn a_failed_or_forbidden_commit_changes_nothing_and_keeps_the_lock() {
    each_file_scheme("commit-errors", |scheme, dir| {
        let temp = dir.join("new");
        let target = dir.join("target");
        let a_directory = dir.join("a-directory");
        std::fs::create_dir(&a_directory).unwrap();
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=1h"));
        lock.try_acquire().unwrap();
        std::fs::write(&target, "old").unwrap();

        let missing = lock.commit_file(&cpath(&temp), &cpath(&target));
        assert_eq!(missing, Err(Error::Commit(Errno::ENOENT)), "no temp file");

        std::fs::write(&temp, "new").unwrap();
        let onto_directory = lock.commit_file(&cpath(&temp), &cpath(&a_directory));
        assert_eq!(onto_directory, Err(Error::Commit(Errno::EISDIR)), "a directory as target");

        let mut own_files = vec![path_of(&lock)];
        own_files.extend(lock.guard_path().map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes()))));
        assert!(own_files.contains(&scheme.state_path(dir.path())), "the state file is one of the lock's own");
        for own in &own_files {
            assert!(std::fs::symlink_metadata(own).is_ok(), "{} exists while the lock is held", own.display());
            assert_eq!(
                lock.commit_file(&cpath(&temp), &cpath(own)),
                Err(Error::CommitOntoLock),
                "onto {}",
                own.display()
            );
            assert_eq!(
                lock.commit_file(&cpath(own), &cpath(&target)),
                Err(Error::CommitOntoLock),
                "from {}",
                own.display()
            );
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old", "the target was changed");
        assert_eq!(std::fs::read_to_string(&temp).unwrap(), "new", "the temp file was moved");
        assert!(lock.held().is_some(), "a refused commit let go of the lock");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "the lock was damaged");
    });
}

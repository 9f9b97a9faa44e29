//! The commit step's errors, for every strategy: a rename that fails is
//! `Error::Commit` with its errno and leaves the target alone; one of the
//! lock's own files given as temp file or target is `CommitOntoLock`
//! (renaming over the lock or its guard would destroy the lock). In every
//! case the lock is still held afterwards, and releases normally.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use lockcore::sys::{CPath, Errno};
use lockcore::{Error, ReleaseOutcome};

fn cpath(path: impl AsRef<Path>) -> CPath {
    CPath::from_parts(&[path.as_ref().to_str().unwrap().as_bytes()]).unwrap()
}

#[test]
fn a_failed_or_forbidden_commit_changes_nothing_and_keeps_the_lock() {
    let dir = TestDir::new("commit-errors");
    let temp = dir.join("new").to_str().unwrap().to_owned();
    let target = dir.join("target").to_str().unwrap().to_owned();
    let a_directory = dir.join("a-directory").to_str().unwrap().to_owned();
    std::fs::create_dir(&a_directory).unwrap();
    for StrategyFiles { name, spec, lock: lock_path, guard: guard_path, .. } in every_strategy(dir.path()) {
        let mut lock = open_lock(&format!("{spec}?ttl=1h"));
        lock.try_acquire().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        std::fs::write(&target, "old").unwrap();
        let _ = std::fs::remove_file(&temp);

        let missing = lock.commit_file(&cpath(&temp), &cpath(&target));
        assert_eq!(missing, Err(Error::Commit(Errno::ENOENT)), "{name}: no temp file");

        std::fs::write(&temp, "new").unwrap();
        let onto_directory = lock.commit_file(&cpath(&temp), &cpath(&a_directory));
        assert_eq!(onto_directory, Err(Error::Commit(Errno::EISDIR)), "{name}: a directory as target");

        let mut own_files = vec![lock_path.clone()];
        own_files.extend(guard_path.clone());
        for own in &own_files {
            assert_eq!(
                lock.commit_file(&cpath(&temp), &cpath(own)),
                Err(Error::CommitOntoLock),
                "{name}: onto {}",
                own.display()
            );
            assert_eq!(
                lock.commit_file(&cpath(own), &cpath(&target)),
                Err(Error::CommitOntoLock),
                "{name}: from {}",
                own.display()
            );
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old", "{name}: the target was changed");
        assert!(lock.held().is_some(), "{name}: a refused commit let go of the lock");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "{name}: the lock was damaged");
    }
}

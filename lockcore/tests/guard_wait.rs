//! Time is read once the lock can no longer change, not before waiting for
//! it. Every scheme waits for something that excludes the other processes
//! while the lock changes (a guard file; for `flock`, its state file
//! `<target>.guard`; the lease file; the queue file; the section word in a `shm`
//! lock's file), and that wait can be long on a loaded machine. Here a
//! thread holds that exclusion as another process's guard section would:
//! with an open-file-description lock (`fcntl(F_OFD_SETLK)`, `F_WRLCK`) of
//! its own, which is what the library takes (a `flock(2)` would not
//! conflict with it); for `shm`, which takes no file lock, by holding that
//! word (`common::shm_lock::SectionWord`). On every scheme:
//! * a commit that waited past the TTL answers `Expired` and leaves the
//!   target alone (judged by the clock before the wait, it would commit);
//! * an acquisition that waited gets its whole TTL from the moment it
//!   wrote its record (counted from before the wait, it would be granted a
//!   lock already partly or wholly run out).
//!
//! The commit's exclusion is let go once the lock's TTL has passed (by the
//! lock's own clock), well inside the commit's wait (`CHANGE_PATIENCE`).
//! The acquisition's is held for 150 ms, inside one attempt's wait
//! (`ATTEMPT_PATIENCE`); the check holds whenever it is let go.

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use common::shm_lock::SectionWord;
use common::*;
use lockcore::{CPath, CommitOutcome, Moment, Owner, WallTime};

/// `fcntl(F_OFD_SETLK)` of the whole file, as the library takes it.
fn ofd_lock(file: &File, l_type: libc::c_int) -> std::io::Result<()> {
    // SAFETY: an all-zero `struct flock` is valid (start 0 and length 0
    // mean the whole file; l_pid must be 0 for OFD locks).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = l_type as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a descriptor `file` owns and a valid `struct flock`.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Holds what excludes other processes while `scheme`'s lock in `dir`
/// changes, from another thread until `let_go` says so: an exclusive OFD
/// lock on its state file, or the section word in a `shm` lock's file (files the
/// library made). Returns once it is taken, with the thread's handle,
/// which yields the wall-clock time just before it let go.
fn hold_exclusion(
    scheme: Scheme,
    dir: &Path,
    mut let_go: impl FnMut() -> bool + Send + 'static,
) -> std::thread::JoinHandle<WallTime> {
    let path = scheme.state_path(dir);
    let (taken, is_taken) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        if scheme == Scheme::Shm {
            let word = SectionWord::of(&path);
            word.take();
            taken.send(()).unwrap();
            wait_until("the time to let go", &mut let_go);
            let letting_go = wall_now();
            word.release();
            return letting_go;
        }
        let file = File::options().read(true).write(true).open(&path).unwrap();
        ofd_lock(&file, libc::F_WRLCK).expect("the exclusion is free");
        taken.send(()).unwrap();
        wait_until("the time to let go", &mut let_go);
        let letting_go = wall_now();
        ofd_lock(&file, libc::F_UNLCK).unwrap();
        letting_go
    });
    is_taken.recv().unwrap();
    holder
}

#[test]
fn a_commit_that_waited_past_the_ttl_is_expired() {
    each_file_scheme("guard-wait-commit", |scheme, dir| {
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=100ms"));
        lock.try_acquire().unwrap();
        let expires: Moment = lock.held().unwrap().expires.expect("a TTL was asked for");
        let (temp, target) = (dir.join("new"), dir.join("target"));
        std::fs::write(&temp, "new").unwrap();
        std::fs::write(&target, "old").unwrap();
        // The commit gets its turn only after the expiry.
        let owner = Owner::current().unwrap();
        let holder = hold_exclusion(scheme, dir.path(), move || expires.has_come(owner.now()));
        let outcome = lock.commit_file(&cpath(&temp), &cpath(&target));
        holder.join().unwrap();
        assert_eq!(outcome, Ok(CommitOutcome::Expired), "a commit whose turn came after the TTL");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old", "the target is untouched");
        lock.release(std::time::Duration::ZERO).unwrap();
    });
}

#[test]
fn an_acquisition_that_waited_gets_its_whole_ttl() {
    let ttl = Duration::from_secs(60);
    each_file_scheme("guard-wait-acquire", |scheme, dir| {
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=60s"));
        // The library makes its state file, in its own format, before the
        // thread locks it.
        assert_eq!(lock.inspect().unwrap().holder, None);
        // Whichever attempt succeeds, its record is written after the
        // holder let go; acquire retries an attempt that gave up waiting.
        let hold = std::time::Instant::now() + Duration::from_millis(150);
        let holder = hold_exclusion(scheme, dir.path(), move || std::time::Instant::now() >= hold);
        let acquired = lock.acquire(Some(Duration::from_secs(60))).unwrap();
        let let_go = holder.join().unwrap();
        let expires = acquired.expires.expect("a TTL was asked for");
        assert!(
            expires >= let_go.saturating_add(ttl),
            "the record, written after {let_go:?}, expires at {expires:?}: less than its TTL from then"
        );
        lock.release(Duration::ZERO).unwrap();
    });
}

fn cpath(path: &Path) -> CPath {
    CPath::from_parts(&[path.to_str().unwrap().as_bytes()]).unwrap()
}

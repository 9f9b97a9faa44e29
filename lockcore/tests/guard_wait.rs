//! Time is read once the lock can no longer change, not before waiting for
//! it. Every strategy but `flock` waits for something that excludes the
//! other processes (a guard file, the lease file, the queue file), and that
//! wait can be long on a loaded machine. Here a thread holds that exclusion
//! with its own flock, as another process's guard section would:
//! * a commit that waited past the TTL answers `Expired` and leaves the
//!   target alone (judged by the clock before the wait, it would commit);
//! * an acquisition that waited gets its whole TTL from the moment it
//!   wrote its record (counted from before the wait, it would be granted a
//!   lock already partly or wholly run out).

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use lockcore::{CommitOutcome, WallTime};

/// Each strategy that waits for an exclusion of its own (`flock` never
/// waits), with the file whose flock is that exclusion.
fn strategies(dir: &Path) -> Vec<(&'static str, String, PathBuf)> {
    every_strategy(dir).into_iter().filter(|s| s.name != "flock").map(|s| (s.name, s.spec, s.state)).collect()
}

/// Holds an exclusive flock on `path` from another thread until `hold`
/// has passed; returns once the flock is taken, with the thread's handle,
/// which yields the wall-clock time just before it let go.
fn hold_exclusion(path: &Path, hold: Duration) -> std::thread::JoinHandle<WallTime> {
    let file = File::options().read(true).write(true).create(true).truncate(false).open(path).unwrap();
    let (taken, is_taken) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        // SAFETY: flock on a descriptor this closure owns.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
        taken.send(()).unwrap();
        std::thread::sleep(hold);
        let letting_go = wall_now();
        // SAFETY: as above.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        letting_go
    });
    is_taken.recv().unwrap();
    holder
}

#[test]
fn a_commit_that_waited_past_the_ttl_is_expired() {
    let dir = TestDir::new("guard-wait-commit");
    for (name, spec, exclusion) in strategies(dir.path()) {
        let mut lock = open_lock(&format!("{spec}?ttl=300ms"));
        lock.try_acquire().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let (temp, target) = (dir.join(&format!("{name}.new")), dir.join(&format!("{name}.txt")));
        std::fs::write(&temp, "new").unwrap();
        std::fs::write(&target, "old").unwrap();
        // Held for three TTLs: the commit gets its turn only after expiry.
        let holder = hold_exclusion(&exclusion, Duration::from_millis(900));
        let outcome = lock.commit_file(&cpath(&temp), &cpath(&target));
        holder.join().unwrap();
        assert_eq!(outcome, Ok(CommitOutcome::Expired), "{name}: a commit whose turn came after the TTL");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old", "{name}: the target is untouched");
        lock.release(Duration::ZERO).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}

#[test]
fn an_acquisition_that_waited_gets_its_whole_ttl() {
    let dir = TestDir::new("guard-wait-acquire");
    let ttl = Duration::from_secs(60);
    for (name, spec, exclusion) in strategies(dir.path()) {
        let mut lock = open_lock(&format!("{spec}?ttl=60s"));
        // Whichever attempt succeeds, its record is written after the
        // holder let go; acquire retries an attempt that gave up waiting.
        let holder = hold_exclusion(&exclusion, Duration::from_millis(150));
        let acquired = lock.acquire(Some(Duration::from_secs(60))).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let let_go = holder.join().unwrap();
        let expires = acquired.expires.expect("a TTL was asked for");
        assert!(
            expires >= let_go.saturating_add(ttl),
            "{name}: the record, written after {let_go:?}, expires at {expires:?}: less than its TTL from then"
        );
        lock.release(Duration::ZERO).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}

fn cpath(path: &Path) -> lockcore::sys::CPath {
    lockcore::sys::CPath::from_parts(&[path.to_str().unwrap().as_bytes()]).unwrap()
}

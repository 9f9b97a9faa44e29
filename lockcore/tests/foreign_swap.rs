//! Breaking a peer's stale lock removes exactly the lock that was judged:
//! never a fresh one the peer put in its place in between.
//!
//! Peers take no guard, so between lockcore's judgement of a stale foreign
//! lock and its removal a peer can replace the lock. Nothing can stop
//! lockcore between the two from outside, so the window is made busy
//! instead: a peer process loops, each turn putting a stale lock of its own
//! format in place, then, after a random pause, renaming a fresh one (naming
//! itself, a live process) over it, and at the end of the turn checking
//! that its fresh lock is still there; meanwhile eight lockcore processes
//! try to acquire over and over (`stale=pid`), breaking every stale one
//! they judge. The peer keeps a descriptor of each fresh lock, so it tells
//! "removed" (its link count fell to zero) apart from "moved aside for a
//! moment" (lockcore renames a foreign lock aside to compare it with the
//! one it judged, and puts it back when it is not: the peer waits for that).
//!
//! The peers, by scheme:
//! * `lockfile`: LockFile::Simple stamps, `DEAD_PID` then the peer's pid;
//! * `mkdir`: a shell script's empty directories, two hours old then new;
//! * `symlink`: another program's links whose mtime is their expiry, an
//!   hour past then an hour ahead.
//!
//! `flock`, `lease` and `toplock` have no peer whose lock sits at the path
//! in a format of its own: `flock`'s lock is the kernel's and cannot be
//! broken, and whatever else is at a lease or queue path is no lock and is
//! never removed (see `hostile.rs`); so those schemes are only checked to
//! leave a file of another program at their path exactly as it was.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{Contention, Error, ReleaseOutcome};

const BREAKERS: usize = 8;
const TURNS: u64 = 200;

// Shared-memory slots.
const DONE: usize = 0;
const ACQUIRED: usize = 1;
const RACED: usize = 2;
const BUSY: usize = 3;
const ERRORS: usize = 4;
const CHECKED: usize = 5;
const REMOVED: usize = 6;
const MISPLACED: usize = 7;
const ATTEMPTS: usize = 8;
const PLACED: usize = 9;
const READY: usize = 10;
const GO: usize = 11;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    let shm = Shm::open(var("SHM").as_ref());
    let scheme = Scheme::from_name(var("SCHEME").as_bytes()).unwrap();
    let dir = PathBuf::from(var("DIR"));
    match role {
        "breaker" => {
            let mut lock = open_lock(&scheme.spec(&dir, "ttl=1h"));
            shm.at(READY).fetch_add(1, SeqCst);
            shm.wait_gate(GO);
            while shm.get(DONE) == 0 {
                shm.at(ATTEMPTS).fetch_add(1, SeqCst);
                match lock.try_acquire() {
                    Ok(_) => {
                        shm.at(ACQUIRED).fetch_add(1, SeqCst);
                        // The peer may have renamed its lock over ours since:
                        // that is its choice, and the release says so.
                        // Under heavy load the guard can stay taken for longer
                        // than a release waits: the lock is still held, and
                        // released by the next try.
                        let give_up = Instant::now() + PATIENCE;
                        loop {
                            match lock.release(Duration::ZERO) {
                                Ok(ReleaseOutcome::Released | ReleaseOutcome::Lost) => break,
                                Err(Error::Busy(Contention::GuardHeld)) if Instant::now() < give_up => {}
                                other => panic!("release: {other:?}"),
                            }
                        }
                    }
                    Err(Error::Busy(Contention::Raced)) => {
                        shm.at(RACED).fetch_add(1, SeqCst);
                    }
                    Err(Error::Busy(_)) => {
                        shm.at(BUSY).fetch_add(1, SeqCst);
                    }
                    Err(e) => {
                        eprintln!("breaker {}: {e:?}", std::process::id());
                        shm.at(ERRORS).fetch_add(1, SeqCst);
                    }
                }
            }
        }
        "peer" => {
            shm.at(READY).fetch_add(1, SeqCst);
            shm.wait_gate(GO);
            let dead: i32 = var("DEAD_PID").parse().unwrap();
            swap(scheme, &scheme.lock_path(&dir), &dir, dead, &shm);
            shm.at(DONE).store(1, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

/// A lock of the peer's format under a name of the peer's own, stale (a
/// dead owner, or past its time) or fresh (this process, or ahead of it).
fn make_peer_lock(scheme: Scheme, path: &Path, fresh: bool, dead: i32) {
    match scheme {
        Scheme::Lockfile => {
            let pid = if fresh { std::process::id() as i32 } else { dead };
            std::fs::write(path, format!("{pid}\n")).unwrap();
        }
        Scheme::Mkdir => {
            std::fs::create_dir(path).unwrap();
            if !fresh {
                set_mtime(path, ago(Duration::from_secs(7200)));
            }
        }
        Scheme::Symlink => {
            std::os::unix::fs::symlink("another-program", path).unwrap();
            let expiry = if fresh { from_now(Duration::from_secs(3600)) } else { ago(Duration::from_secs(3600)) };
            set_mtime(path, expiry);
        }
        other => panic!("{} has no peer lock format", other.name()),
    }
}

/// A descriptor of what is at `path` itself (a symlink not followed).
fn pin(path: &Path) -> OwnedFd {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; O_PATH opens nothing but the name's inode.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open {}: {}", path.display(), std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Inode and link count of a pinned file.
fn pinned_stat(fd: &OwnedFd) -> (u64, u64) {
    // SAFETY: stat is plain data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out-pointer; AT_EMPTY_PATH stats the descriptor itself.
    let r = unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) };
    assert_eq!(r, 0, "fstat: {}", std::io::Error::last_os_error());
    (st.st_ino, st.st_nlink)
}

/// The peer's turns: stale lock in place, a pause, its fresh lock renamed
/// over it, a pause, and the check that its fresh lock is still there.
fn swap(scheme: Scheme, lock: &Path, dir: &Path, dead: i32, shm: &Shm) {
    let mut rng = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut pause = |max_us: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(rng % max_us));
    };
    // Turns end when the peer has placed its fresh lock TURNS times, not
    // after TURNS tries: a holder descheduled while it holds the lock must
    // not use up every turn of the peer.
    let give_up_turns = Instant::now() + Duration::from_secs(60);
    let mut turn = 0u64;
    while shm.get(PLACED) < TURNS && Instant::now() < give_up_turns {
        turn += 1;
        let stale = dir.join(format!("peer-stale-{turn}"));
        make_peer_lock(scheme, &stale, false, dead);
        // A lock directory of lockcore's (with its record) cannot be
        // renamed over: the peer finds the lock taken and tries again.
        if std::fs::rename(&stale, lock).is_err() {
            let _ = std::fs::remove_dir(&stale);
            pause(1_000);
            continue;
        }
        pause(2_000);
        let fresh = dir.join(format!("peer-fresh-{turn}"));
        make_peer_lock(scheme, &fresh, true, dead);
        let pinned = pin(&fresh);
        if std::fs::rename(&fresh, lock).is_err() {
            let _ = std::fs::remove_dir(&fresh);
            pause(1_000);
            continue;
        }
        shm.at(PLACED).fetch_add(1, SeqCst);
        pause(1_000);
        let (ino, _) = pinned_stat(&pinned);
        // Moved aside by a breaker comparing it with what it judged, it comes back.
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, links) = pinned_stat(&pinned);
            if links == 0 {
                eprintln!("peer: turn {turn}: a breaker removed the peer's fresh lock");
                shm.at(REMOVED).fetch_add(1, SeqCst);
                break;
            }
            if std::fs::symlink_metadata(lock).is_ok_and(|m| m.ino() == ino) {
                break;
            }
            if Instant::now() > give_up {
                eprintln!("peer: turn {turn}: the peer's fresh lock is no longer at the lock's path");
                shm.at(MISPLACED).fetch_add(1, SeqCst);
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        shm.at(CHECKED).fetch_add(1, SeqCst);
    }
}

#[test]
fn a_fresh_peer_lock_put_in_place_of_a_judged_stale_one_is_never_removed() {
    each_file_scheme("foreign-swap", |scheme, dir| {
        if !matches!(scheme, Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink) {
            // No peer lock format at the path: a file of another program
            // there is left exactly as it is, by any number of attempts.
            let lock = scheme.lock_path(dir.path());
            std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
            let before = snapshot(&lock);
            let mut handle = open_lock(&scheme.spec(dir.path(), "ttl=1h"));
            for _ in 0..20 {
                let _ = handle.try_acquire();
            }
            assert_eq!(snapshot(&lock), before, "{}: a file of another program was changed", scheme.name());
            return;
        }
        let shm = Shm::create(&dir.join("shm"));
        let vars = [
            ("SHM", shm.path().display().to_string()),
            ("SCHEME", scheme.name().to_owned()),
            ("DIR", dir.path().display().to_string()),
            ("DEAD_PID", dead_pid().to_string()),
        ];
        let mut children = Children::new();
        children.push(spawn("peer", &vars));
        for _ in 0..BREAKERS {
            children.push(spawn("breaker", &vars));
        }
        wait_until("everyone at the gate", || shm.get(READY) == BREAKERS as u64 + 1 || children.any_exited());
        shm.open_gate(GO);
        children.expect_success("peer and breakers");

        let counts = [ACQUIRED, RACED, BUSY, ERRORS, ATTEMPTS, PLACED, CHECKED].map(|slot| shm.get(slot));
        eprintln!(
            "[{}] acquired {}, raced {}, busy {}, errors {}, attempts {}; peer placed {} fresh locks, checked {}",
            scheme.name(),
            counts[0],
            counts[1],
            counts[2],
            counts[3],
            counts[4],
            counts[5],
            counts[6]
        );
        assert_eq!(shm.get(REMOVED), 0, "a breaker removed a fresh lock of the peer's");
        assert_eq!(shm.get(MISPLACED), 0, "a fresh lock of the peer's was left away from the lock's path");
        assert_eq!(shm.get(ERRORS), 0, "a breaker failed");
        assert!(shm.get(CHECKED) > 0, "the peer never got its fresh lock in place");
        assert!(shm.get(ACQUIRED) > 0, "no breaker ever broke a stale lock of the peer's");
        // Hundreds of times a run: the window this test is about was open.
        assert!(shm.get(RACED) > 0, "no breaker ever met a lock replaced between its judgement and its change");
    });
}

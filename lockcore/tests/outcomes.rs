//! What release and prolong report, for every scheme.
//!
//! * `Released`: within the TTL; a second release is `NotHeld`.
//! * `Expired`: held past a TTL of 200 ms and nobody took it (for `release`
//!   and for `prolong`, which then holds the lock again).
//! * `Lost`: past its TTL the lock was broken by another process, which
//!   holds it now; `release` says `Lost` and removes nothing, `prolong` says
//!   `Lost` and writes nothing, and the handle holds nothing afterwards.
//!   `flock` cannot be broken (`Scheme::breaks_stale_locks`): the other
//!   process is told `Busy` and the holder's release says `Expired`. A flock
//!   holder loses its lock only when the flock'd file is deleted and another
//!   process makes and locks a new one; that is the `Lost` case for `flock`.
//! * Cooldown: after `release(1s)`, another handle is told `Busy` and
//!   `inspect` shows `cooldown_until`; an `acquire` with a budget gets the
//!   lock once it is over (on every scheme: `flock` keeps the cooldown in
//!   `<target>.guard`).
//! * `fork()`: the child's copy of a held handle refuses release, prolong,
//!   acquire and inspect with `Forked`, and dropping it leaves the parent's
//!   lock alone. The copy of a handle whose holding was forgotten before the
//!   fork leaves the child's own locks alone, whatever descriptor numbers
//!   the parent's handle kept.
//!
//! A TTL has passed when the lock's own clocks say so (`Moment::has_come`:
//! the boot clock on this boot), which is what the library judges by.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use lockcore::{Error, ErrorKind, Liveness, Lock, ProlongOutcome, ReleaseOutcome};

// Shared-memory slots.
const TAKEN: usize = 0;
const TAKER_FENCE: usize = 1;
const TAKER_RESULT: usize = 2;
const CHECKED: usize = 3;
const TAKER_RELEASE: usize = 4;
/// The pid of the holder the taker's acquisition took over from; 0: none.
const TAKER_TOOK_OVER_FROM: usize = 5;
/// Whether that holder was alive (`ALIVE`) or not when it was broken.
const TAKER_TOOK_OVER_ALIVE: usize = 6;
const ALIVE: u64 = 1;

const TOOK: u64 = 1;
const BUSY: u64 = 2;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "taker");
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = open_lock(&var("SPEC"));
    match lock.try_acquire() {
        Ok(acquired) => {
            if let Some(previous) = acquired.took_over_from {
                assert!(previous.stale, "a lock is taken over only once judged stale");
                shm.at(TAKER_TOOK_OVER_FROM).store(previous.pid as u64, SeqCst);
                shm.at(TAKER_TOOK_OVER_ALIVE).store(u64::from(previous.liveness == Liveness::Alive) * ALIVE, SeqCst);
            }
            shm.at(TAKER_FENCE).store(acquired.fence, SeqCst);
            shm.at(TAKER_RESULT).store(TOOK, SeqCst);
        }
        Err(e) if e.kind() == ErrorKind::Busy => shm.at(TAKER_RESULT).store(BUSY, SeqCst),
        Err(e) => panic!("taker: {e:?}"),
    }
    shm.at(TAKEN).store(1, SeqCst);
    shm.wait_gate(CHECKED);
    if lock.held().is_some() {
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        shm.at(TAKER_RELEASE).store(1, SeqCst);
    }
}

/// Spawns a process that makes one `try_acquire` and holds what it got
/// until the gate opens.
fn take(spec: &str, shm: &Shm) -> Children {
    let mut children = Children::new();
    children.push(spawn("taker", &[("SPEC", spec.to_owned()), ("SHM", shm.path().display().to_string())]));
    wait_until("the taker to try", || shm.get(TAKEN) == 1 || children.any_exited());
    assert_eq!(shm.get(TAKEN), 1, "the taker died");
    children
}

fn hold_past_ttl(scheme: Scheme, lock: &mut Lock) -> u64 {
    let acquired = lock.try_acquire().unwrap();
    let expires = lock.held().unwrap().expires.expect("a TTL was given");
    wait_until("the TTL to pass", || expires.has_come(lock.now()));
    wait_for_server_expiry(scheme, lock);
    acquired.fence
}

/// What a call came to, by the kinds of errors the tests match on.
fn kind<T>(result: Result<T, Error>) -> Result<T, ErrorKind> {
    result.map_err(|e| e.kind())
}

#[test]
fn released_then_release_twice_is_not_held() {
    each_scheme("outcome-released", |scheme, dir| {
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=1h"));
        lock.try_acquire().unwrap();
        assert_eq!(lock.prolong(None), Ok(ProlongOutcome::Prolonged));
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        assert_eq!(lock.release(Duration::ZERO), Err(Error::NotHeld));
        assert_eq!(lock.prolong(None), Err(Error::NotHeld));
        assert_eq!(lock.inspect().unwrap().holder, None);
        // And the lock is free for anyone.
        let mut other = open_lock(&scheme.spec(dir.path(), ""));
        other.try_acquire().unwrap();
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Busy));
    });
}

#[test]
fn held_past_ttl_and_nobody_took_it_is_expired() {
    each_scheme("outcome-expired", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=200ms");
        let mut lock = open_lock(&spec);
        hold_past_ttl(scheme, &mut lock);
        let holder = open_lock(&spec).inspect().unwrap().holder;
        if expires_on_server(scheme) {
            assert_eq!(holder, None, "free once the server expired it");
        } else {
            assert_eq!(holder.unwrap().stale, scheme.breaks_stale_locks(), "stale after the TTL (never for flock)");
        }
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Expired));
        assert_eq!(lock.release(Duration::ZERO), Err(Error::NotHeld));
        // Released late, but released: the next holder took over nothing.
        let mut next = open_lock(&spec);
        assert_eq!(next.try_acquire().map(|acquired| acquired.took_over_from), Ok(None));
        next.release(Duration::ZERO).unwrap();

        // prolong past the TTL: Expired, and the lock is held again.
        hold_past_ttl(scheme, &mut lock);
        assert_eq!(lock.prolong(Some(Duration::from_secs(3600))), Ok(ProlongOutcome::Expired));
        let mut other = open_lock(&spec);
        assert_eq!(kind(other.try_acquire()), Err(ErrorKind::Busy), "prolonged again");
        assert_eq!(lock.prolong(None), Ok(ProlongOutcome::Prolonged));
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// Sets up "lost": the holder overran its TTL and another process holds the
/// lock now. For flock, whose live holder cannot be broken, the flock'd file
/// is deleted first so that the other process makes and locks a new one.
/// Returns the other process (holding until `CHECKED` opens).
fn lose_the_lock(scheme: Scheme, dir: &TestDir, lock: &mut Lock, shm: &Shm) -> Children {
    let mine = hold_past_ttl(scheme, lock);
    let spec = scheme.spec(dir.path(), "ttl=1h");
    if !scheme.breaks_stale_locks() {
        std::fs::remove_file(scheme.lock_path(dir.path())).unwrap();
    }
    let taker = take(&spec, shm);
    assert_eq!(shm.get(TAKER_RESULT), TOOK, "the other process took the expired lock");
    if scheme.breaks_stale_locks() {
        assert!(shm.get(TAKER_FENCE) > mine);
    }
    taker
}

fn check_taker_still_holds(scheme: Scheme, dir: &TestDir, shm: &Shm, mut taker: Children) {
    let mut observer = open_lock(&scheme.spec(dir.path(), ""));
    let holder = observer.inspect().unwrap().holder.expect("the taker holds it");
    assert_eq!(holder.record.unwrap().fence, shm.get(TAKER_FENCE), "the taker's record is intact");
    assert_eq!(kind(observer.try_acquire()), Err(ErrorKind::Busy));
    shm.open_gate(CHECKED);
    taker.expect_success("taker");
    assert_eq!(shm.get(TAKER_RELEASE), 1, "the taker released normally");
}

#[test]
fn release_after_another_process_took_over_is_lost() {
    each_scheme("outcome-lost-release", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=200ms"));
        let taker = lose_the_lock(scheme, dir, &mut lock, &shm);
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
        assert_eq!(lock.release(Duration::ZERO), Err(Error::NotHeld));
        assert_eq!(lock.prolong(None), Err(Error::NotHeld), "prolong after a lost release");
        check_taker_still_holds(scheme, dir, &shm, taker);
    });
}

#[test]
fn prolong_after_another_process_took_over_is_lost() {
    each_scheme("outcome-lost-prolong", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=200ms"));
        let taker = lose_the_lock(scheme, dir, &mut lock, &shm);
        assert_eq!(lock.prolong(Some(Duration::from_secs(3600))), Ok(ProlongOutcome::Lost));
        assert_eq!(lock.held(), None, "a lost lock is no longer held");
        assert_eq!(lock.prolong(None), Err(Error::NotHeld));
        assert_eq!(lock.release(Duration::ZERO), Err(Error::NotHeld));
        check_taker_still_holds(scheme, dir, &shm, taker);
    });
}

/// A live holder past its TTL, and another process that tries: it breaks
/// the lock where the scheme breaks stale locks, its acquisition names the
/// holder it took over from (alive: it ran past its TTL, it did not die),
/// and the holder is told `Lost`; a live flock holder is never broken, the other process is told
/// `Busy`, and the holder's release says `Expired`.
#[test]
fn a_live_holder_past_its_ttl_is_broken_unless_the_kernel_holds_it() {
    each_scheme("outcome-overrun", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=200ms"));
        hold_past_ttl(scheme, &mut lock);
        let mut taker = take(&scheme.spec(dir.path(), "ttl=1h"), &shm);
        let (taken, outcome) =
            if scheme.breaks_stale_locks() { (TOOK, ReleaseOutcome::Lost) } else { (BUSY, ReleaseOutcome::Expired) };
        assert_eq!(shm.get(TAKER_RESULT), taken);
        let named = scheme.breaks_stale_locks();
        let me = if named { u64::from(std::process::id()) } else { 0 };
        assert_eq!(shm.get(TAKER_TOOK_OVER_FROM), me, "the holder the taker took over from");
        assert_eq!(shm.get(TAKER_TOOK_OVER_ALIVE), if named { ALIVE } else { 0 });
        assert_eq!(lock.release(Duration::ZERO), Ok(outcome));
        shm.open_gate(CHECKED);
        taker.expect_success("taker");
    });
}

#[test]
fn cooldown_keeps_the_lock_closed_to_everyone() {
    each_scheme("outcome-cooldown", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let mut lock = open_lock(&spec);
        lock.try_acquire().unwrap();
        let released_at = wall_now();
        assert_eq!(lock.release(Duration::from_secs(1)), Ok(ReleaseOutcome::Released));

        let mut other = open_lock(&spec);
        let seen = other.inspect().unwrap();
        assert_eq!(seen.holder, None, "released: nobody holds it");
        let until = seen.cooldown_until.expect("inspect shows the cooldown");
        assert!(until > released_at, "cooling down until after the release");
        // Closed to every handle, the releaser's too, until `until`. (Should
        // this test be descheduled for the whole second, a success is
        // allowed, but only after `until`.)
        for handle in [&mut other, &mut lock] {
            match handle.try_acquire() {
                Err(e) if e.kind() == ErrorKind::Busy => {}
                Ok(_) => {
                    assert!(wall_now() >= until, "acquired during the cooldown");
                    assert_eq!(handle.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
                }
                Err(e) => panic!("try_acquire during the cooldown: {e:?}"),
            }
        }
        // Waiting gets it once the cooldown is over.
        other.acquire(Some(PATIENCE)).expect("acquired after the cooldown");
        assert!(wall_now() >= until);
        assert_eq!(other.inspect().unwrap().cooldown_until, None);
        assert_eq!(other.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// Exit codes of the forked child of a process that stopped tracking its
/// holding: the child's own lock on a file of its own (`own`, opened after
/// the fork, so under a number its parent's handle may also have kept)
/// survives whatever the copy of the parent's handle does after the lock's
/// file was removed.
fn inherited_forgotten_holding_checks(lock: &mut Lock, own: &std::ffi::CStr, lock_path: &std::ffi::CStr) -> i32 {
    // SAFETY: plain calls on NUL-terminated paths; results checked.
    let fd = unsafe { libc::open(own.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 20;
    }
    // SAFETY: as above.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return 21;
    }
    // SAFETY: as above.
    unsafe { libc::unlink(lock_path.as_ptr()) };
    let _ = lock.try_acquire();
    let _ = lock.inspect();
    // Whether the child's own lock still holds: another description of the
    // file cannot take it.
    // SAFETY: as above.
    let probe = unsafe { libc::open(own.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: as above.
    if probe < 0 || unsafe { libc::flock(probe, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return 22;
    }
    0
}

#[test]
fn a_childs_copy_of_a_forgotten_holding_leaves_the_childs_own_locks_alone() {
    each_file_scheme("outcome-fork-forgotten", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let mut lock = open_lock(&spec);
        lock.try_acquire().unwrap();
        lock.forget();
        let own_path = dir.join("childs-own");
        std::fs::write(&own_path, b"").unwrap();
        let own = std::ffi::CString::new(own_path.into_os_string().into_encoded_bytes()).unwrap();
        let lock_path = std::ffi::CString::new(path_of(&lock).into_os_string().into_encoded_bytes()).unwrap();

        let code = exit_code_of_child(|| {
            let code = inherited_forgotten_holding_checks(&mut lock, &own, &lock_path);
            core::mem::forget(lock);
            code
        });
        assert_eq!(code, 0, "failed check (see inherited_forgotten_holding_checks)");
    });
}

/// Runs `checks` in a child of `fork()` and gives its exit code. The
/// checks run only lockcore calls and plain system calls (no allocation,
/// no lock of the test harness), and the child leaves with `_exit`,
/// without the parent's exit handlers or destructors.
fn exit_code_of_child(checks: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `checks` alone, as above, then `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = checks();
        // SAFETY: ends the forked child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above, into a valid status word.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

/// Exit codes of the forked child, one per check.
fn forked_child_checks(lock: &mut Lock, spec: &str) -> i32 {
    if lock.release(Duration::ZERO) != Err(Error::Forked) {
        return 10;
    }
    if lock.prolong(None) != Err(Error::Forked) {
        return 11;
    }
    if lock.try_acquire() != Err(Error::Forked) {
        return 12;
    }
    if lock.inspect().err() != Some(Error::Forked) {
        return 13;
    }
    // A handle of the child's own sees the parent holding.
    let Ok(mut own) = Lock::open(spec.as_bytes()) else { return 14 };
    if !matches!(own.try_acquire(), Err(Error::Busy(_))) {
        return 15;
    }
    0
}

#[test]
fn forked_child_cannot_release_and_its_drop_leaves_the_lock() {
    each_scheme("outcome-fork", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let mut lock = open_lock(&spec);
        let acquired = lock.try_acquire().unwrap();

        let code = exit_code_of_child(|| {
            let code = forked_child_checks(&mut lock, &spec);
            // SAFETY: the child's copy of the handle is dropped once, here,
            // and the child exits right after without touching it again.
            unsafe { std::ptr::drop_in_place(&mut lock) };
            code
        });
        assert_eq!(code, 0, "failed check (see forked_child_checks)");

        // The child's drop left the lock to us.
        let seen = lock.inspect().unwrap();
        let holder = seen.holder.expect("still held");
        assert!(holder.this_handle, "by this very handle");
        assert_eq!(holder.record.unwrap().fence, acquired.fence);
        assert_eq!(kind(open_lock(&spec).try_acquire()), Err(ErrorKind::Busy));
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

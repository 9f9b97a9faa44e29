//! `signal=`: taking over an expired lease signals the old holder only if
//! it is provably that process, alive, and not our own:
//! * a holder in another process, with its recorded start time, is signalled;
//! * a record whose pid now belongs to a process with another start time
//!   (the pid was reused) signals nobody: the process with that pid is a
//!   stranger;
//! * two handles of one process on the same lease (a library and its caller,
//!   say) must not have the second kill its own process when it takes over
//!   from the first;
//! * only a lease file nobody but this user could have written is believed:
//!   the spec refuses `signal=` with a mode that shares the lock (0660,
//!   0666), and with the private mode a lease file that belongs to another
//!   user (here: the same expired lease, handed to uid 65534 by root) is
//!   refused as `Untrusted` before it is read, and nobody is signalled.
//!
//! `signal=` is a `lease` option only: no other scheme keeps a holder's
//! record to signal by (the spec refuses the key elsewhere).
//!
//! Who signalled whom is read from the holder's exit: after the takeover the
//! test sends it SIGTERM itself, so it dies of SIGKILL only if the library
//! sent one first. No sleep decides anything.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use lockcore::internals::LeaseState;
use lockcore::{ErrorKind, FileRole, Problem, SpecErrorKind, Untrusted};

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "take-over-from-myself" => take_over_from_myself(),
        "hold-and-sleep" => {
            let mut lock = open_lock(&var("SPEC"));
            lock.try_acquire().expect("the lease is free");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn take_over_from_myself() {
    let spec = var("SPEC");
    let mut first = open_lock(&spec);
    let held = first.try_acquire().expect("the lease is free");
    let expires = held.expires.expect("a lease with a ttl");
    wait_until("the first handle's lease to expire", || wall_now() > expires);
    let mut second = open_lock(&spec);
    let taken = second.try_acquire();
    assert!(taken.as_ref().is_ok_and(|t| t.fence > held.fence), "the expired lease is taken over: {taken:?}");
    std::thread::sleep(Duration::from_millis(100)); // a signal sent to us is delivered by now
}

#[test]
fn taking_over_from_a_handle_of_ones_own_process_sends_no_signal() {
    let dir = TestDir::new("lease-signal-self");
    for signal in ["TERM", "KILL"] {
        let spec = format!("lease:{}?ttl=200ms&signal={signal}", dir.join(&format!("{signal}.lease")).display());
        let mut child = spawn("take-over-from-myself", &[("SPEC", spec)]);
        let status = wait_patiently(&mut child);
        assert_eq!(status.signal(), None, "signal={signal}: the process signalled itself");
        assert!(status.success(), "signal={signal}: the child failed: {status:?}");
    }
}

/// Rewrites a held lease so that its holder's start time is `start_ticks`:
/// the record then names whatever process has the pid, which is not the
/// one that wrote it.
fn rewrite_start_time(lease: &Path, start_ticks: u64) {
    let bytes = std::fs::read(lease).unwrap();
    let LeaseState::Held(mut record) = LeaseState::parse(&bytes).unwrap() else { panic!("a held lease") };
    record.owner.process.start_ticks = start_ticks;
    std::fs::write(lease, LeaseState::Held(record).encode().as_bytes()).unwrap();
}

/// A child that holds the lease at `lease` (with `signal=KILL`) and sleeps
/// past its TTL, and a handle of this process on it: the child, its pid,
/// this process's handle, and the child's record, once its lease expired.
fn expired_holder(lease: &Path) -> (std::process::Child, i32, lockcore::Lock, lockcore::Record) {
    let spec = format!("lease:{}?ttl=200ms&signal=KILL", lease.display());
    let mut children = Children::new();
    children.push(spawn("hold-and-sleep", &[("SPEC", spec.clone())]));
    let holder = children.pop().unwrap();
    let pid = holder.id() as i32;
    let mut lock = open_lock(&spec);
    wait_until("the child to hold the lease", || lock.inspect().unwrap().holder.is_some_and(|h| h.pid == pid));
    let held = lock.inspect().unwrap().holder.unwrap().record.unwrap();
    wait_until("the child's lease to expire", || lock.inspect().unwrap().holder.unwrap().stale);
    (holder, pid, lock, held)
}

/// Sends the child `pid` SIGTERM and returns the signal it died of: SIGKILL
/// only if the library sent it one first.
fn signal_it_died_of(holder: &mut std::process::Child, pid: i32) -> Option<i32> {
    // SAFETY: plain kill(2) of our own child, which we have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_patiently(holder).signal()
}

/// A child holds the lease and sleeps past its TTL; with `reused`, its
/// record is rewritten to name another start time first. A second process
/// (this one) takes the expired lease over with `signal=KILL`. Returns the
/// signal the child died of once this test has sent it SIGTERM.
fn take_over_with_signal_kill(dir: &TestDir, reused: bool) -> Option<i32> {
    let lease = dir.join(if reused { "reused.lease" } else { "alive.lease" });
    let (mut holder, pid, mut lock, held) = expired_holder(&lease);
    if reused {
        let (_, true_start) = proc_stat(pid).expect("the holder is alive");
        rewrite_start_time(&lease, true_start + 1000);
    }
    let taken = lock.try_acquire().expect("an expired lease is taken over");
    assert!(taken.fence > held.fence);
    let died_of = signal_it_died_of(&mut holder, pid);
    lock.release(Duration::ZERO).unwrap();
    died_of
}

#[test]
fn an_expired_holder_is_signalled_only_with_its_recorded_start_time() {
    let dir = TestDir::new("lease-signal-start-time");
    assert_eq!(
        take_over_with_signal_kill(&dir, false),
        Some(libc::SIGKILL),
        "the expired holder, alive with its recorded start time, is killed by the takeover"
    );
    assert_eq!(
        take_over_with_signal_kill(&dir, true),
        Some(libc::SIGTERM),
        "a record whose pid has another start time names a stranger, who must not be signalled"
    );
}

/// A child holds the lease and sleeps past its TTL, its record rewritten
/// to the largest fence: the takeover is refused, and the holder, which
/// keeps its lease, is not signalled. Returns the signal the child died of
/// once this test has sent it SIGTERM.
fn take_over_at_the_largest_fence_with_signal_kill(dir: &TestDir) -> Option<i32> {
    let lease = dir.join("largest-fence.lease");
    let (mut holder, pid, mut lock, mut record) = expired_holder(&lease);
    record.fence = u64::MAX;
    std::fs::write(&lease, LeaseState::Held(record).encode().as_bytes()).unwrap();
    let refused = lock.try_acquire().map(|taken| taken.fence).map_err(|e| e.kind());
    assert_eq!(refused, Err(ErrorKind::Corrupt(lockcore::CorruptKind::Record)), "no fence is left to hand out");
    signal_it_died_of(&mut holder, pid)
}

#[test]
fn a_takeover_refused_for_want_of_a_fence_signals_nobody() {
    let dir = TestDir::new("lease-signal-largest-fence");
    assert_eq!(
        take_over_at_the_largest_fence_with_signal_kill(&dir),
        Some(libc::SIGTERM),
        "the holder kept its lease, and must not have been signalled"
    );
}

#[test]
fn signal_is_refused_with_a_mode_that_shares_the_lock() {
    let dir = TestDir::new("lease-signal-mode");
    let lease = dir.join("shared.lease");
    for mode in ["0660", "0666"] {
        let spec = format!("lease:{}?ttl=1s&signal=KILL&mode={mode}", lease.display());
        let e = lockcore::Lock::open(spec.as_bytes()).expect_err("signal with a sharing mode");
        assert_eq!(e.kind(), ErrorKind::Spec(SpecErrorKind::BadValue), "mode={mode}");
        let lockcore::Error::Spec(e) = e else { unreachable!() };
        assert_eq!(e.key(), b"signal", "mode={mode}: the refusal names the key");
    }
    open_lock(&format!("lease:{}?ttl=1s&signal=KILL&mode=0600", lease.display()));
    assert!(!lease.exists(), "nothing is created by a refused or an unused spec");
}

/// The expired lease of a live child, as in the test above, but the lease
/// file now belongs to another user (root hands it to uid 65534, as if
/// that user had planted it naming our child): the private lock refuses
/// it as untrusted, writes nothing, and signals nobody.
#[test]
fn a_lease_file_of_another_user_is_refused_and_nobody_is_signalled() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to give the lease file to another user");
        return;
    }
    let dir = TestDir::new("lease-signal-planted");
    let lease = dir.join("planted.lease");
    let spec = format!("lease:{}?ttl=200ms&signal=KILL&mode=0600", lease.display());
    let mut children = Children::new();
    children.push(spawn("hold-and-sleep", &[("SPEC", spec.clone())]));
    let mut holder = children.pop().unwrap();
    let pid = holder.id() as i32;
    let mut lock = open_lock(&spec);
    wait_until("the child to hold the lease", || lock.inspect().unwrap().holder.is_some_and(|h| h.pid == pid));
    wait_until("the child's lease to expire", || lock.inspect().unwrap().holder.unwrap().stale);

    std::os::unix::fs::chown(&lease, Some(65534), Some(65534)).unwrap();
    let before = snapshot(&lease);
    let refused = lock.try_acquire().expect_err("a lease file of another user is not believed");
    assert_eq!(refused.kind(), ErrorKind::Untrusted);
    let lockcore::Error::File(e) = refused else { unreachable!() };
    assert_eq!((e.file, e.problem), (FileRole::Lock, Problem::Untrusted(Untrusted::OwnedByOther)));
    assert_eq!(e.owner_uid, Some(65534));
    assert_eq!(lock.inspect().map_err(|e| e.kind()), Err(ErrorKind::Untrusted), "not even read");
    assert_eq!(snapshot(&lease), before, "nothing was written");

    // SAFETY: plain kill(2) of our own child, which we have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = wait_patiently(&mut holder);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the holder was signalled by the refused takeover");
}

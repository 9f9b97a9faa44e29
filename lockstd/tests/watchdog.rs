//! The watchdog on every scheme of `lockcore::Scheme::ALL`, with real
//! threads and real files: it renews until it is dropped, reports a lock
//! taken over as lost (once, and renews no more), renews nothing while
//! paused, and reports the expiry it finds when resumed.
//!
//! `flock` has nothing to renew (the kernel holds the lock until it is
//! released; a `ttl` never lets another process break it): every test
//! asserts that its watchdog refuses to start instead.

#[path = "../../lockcore/tests/common/mod.rs"]
mod common;

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::files::ofd_lock;
use common::shm_lock::SectionWord;
use common::{each_scheme, open_lock, wait_until, Scheme, SchemeFiles, TestDir, PATIENCE};
use lockcore::{Lock, ReleaseOutcome};
use lockstd::{Lapse, StartError, Watchdog, RENEWAL_PATIENCE};

/// Renewals every 200 ms: quick tests, and room for a loaded machine.
const QUERY: &str = "ttl=600ms";

/// The holder's expiry on disk, in Unix milliseconds, and whether the next
/// acquirer would break the lock, as another handle inspects it.
fn on_disk(spec: &str) -> (i64, bool) {
    let holder = open_lock(spec).inspect().unwrap().holder.expect("the lock is held");
    (holder.expires.expect("a lock with a ttl expires").unix_millis(), holder.stale)
}

/// Whether the lock has run out: stale and there, or, for a lock whose
/// server expires it, gone.
fn expired(spec: &str) -> bool {
    open_lock(spec).inspect().unwrap().holder.map_or(true, |holder| holder.stale)
}

/// The expiry on disk, if the lock is still there: nothing moved it since
/// `then` (a renewal of an expired lock on a server would have put it back).
fn unchanged_since(spec: &str, then: i64) -> bool {
    open_lock(spec)
        .inspect()
        .unwrap()
        .holder
        .map_or(true, |holder| holder.expires.map(|at| at.unix_millis()) == Some(then))
}

/// A watchdog renewing `lock`, and the lapses it reports.
fn start(lock: &Lock) -> (Watchdog, Receiver<Lapse>) {
    let (lapsed, lapses) = mpsc::channel();
    let watchdog = Watchdog::start(lock, move |lapse| {
        let _ = lapsed.send(lapse);
    })
    .unwrap();
    (watchdog, lapses)
}

/// The lock of `scheme` in `dir`, taken; or, for `flock`, `None` once it
/// is shown that its watchdog does not start.
fn held(scheme: Scheme, dir: &TestDir) -> Option<(String, Lock)> {
    let spec = scheme.spec(dir.path(), QUERY);
    let mut lock = open_lock(&spec);
    lock.try_acquire().unwrap();
    if scheme == Scheme::Flock {
        assert!(matches!(Watchdog::start(&lock, |_| {}), Err(StartError::NeverExpires)));
        return None;
    }
    Some((spec, lock))
}

#[test]
fn a_lock_not_held_or_without_ttl_has_no_watchdog() {
    each_scheme("watchdog-refused", |scheme, dir| {
        let mut lock = open_lock(&scheme.spec(dir.path(), QUERY));
        assert!(matches!(Watchdog::start(&lock, |_| {}), Err(StartError::NotHeld)));
        lock.try_acquire().unwrap();
        lock.release(Duration::ZERO).unwrap();
        assert!(matches!(Watchdog::start(&lock, |_| {}), Err(StartError::NotHeld)), "after the release");
        let mut forever = open_lock(&scheme.spec(dir.path(), ""));
        forever.try_acquire().unwrap();
        assert!(matches!(Watchdog::start(&forever, |_| {}), Err(StartError::NeverExpires)));
    });
}

#[test]
fn renews_until_dropped_and_not_after() {
    each_scheme("watchdog-renews", |scheme, dir| {
        let Some((spec, mut lock)) = held(scheme, dir) else { return };
        let (taken_until, _) = on_disk(&spec);
        let (watchdog, _lapses) = start(&lock);
        // Renewed more than once: the expiry moves past what the first
        // renewal, at once, could give it.
        wait_until("two renewals", || on_disk(&spec).0 > taken_until + 300);
        drop(watchdog);
        let (stopped_at, _) = on_disk(&spec);
        wait_until("the lock to expire", || expired(&spec));
        assert!(unchanged_since(&spec, stopped_at), "a renewal ran after the watchdog was dropped");
        assert_eq!(lock.release(Duration::ZERO).unwrap(), ReleaseOutcome::Expired);
    });
}

#[test]
fn a_lock_taken_over_is_reported_lost_once_and_the_callback_may_drop_its_watchdog() {
    each_scheme("watchdog-lost", |scheme, dir| {
        let Some((spec, mut lock)) = held(scheme, dir) else { return };
        let slot: Arc<Mutex<Option<Watchdog>>> = Arc::new(Mutex::new(None));
        let (lapsed, lapses) = mpsc::channel();
        let in_callback = Arc::clone(&slot);
        let watchdog = Watchdog::start(&lock, move |lapse| {
            if lapse == Lapse::Lost {
                // The watchdog's own thread stops it: this must not wait
                // for itself.
                drop(in_callback.lock().unwrap().take());
            }
            let _ = lapsed.send(lapse);
        })
        .unwrap();
        *slot.lock().unwrap() = Some(watchdog);

        let mut other = open_lock(&spec);
        assert!(other.break_lock().unwrap());
        other.try_acquire().unwrap();
        let lost = loop {
            match lapses.recv_timeout(PATIENCE).expect("no lapse reported") {
                // A renewal delayed on a loaded machine may find the lock
                // expired before it was broken.
                Lapse::Expired => continue,
                Lapse::Lost => break Lapse::Lost,
            }
        };
        assert_eq!(lost, Lapse::Lost);
        assert!(slot.lock().unwrap().is_none(), "the callback dropped its watchdog");
        // Reported once: the thread ended, and dropped the sender.
        assert!(lapses.recv_timeout(PATIENCE).is_err(), "a second lapse after a lost lock");
        // The new holder keeps its lock: nothing renewed ours over it.
        assert!(other.inspect().unwrap().holder.is_some_and(|h| h.this_handle));
        assert_eq!(other.release(Duration::ZERO).unwrap(), ReleaseOutcome::Released);
        lock.forget();
    });
}

#[test]
fn a_paused_watchdog_renews_nothing_and_reports_the_expiry_it_finds_on_resuming() {
    each_scheme("watchdog-paused", |scheme, dir| {
        let Some((spec, mut lock)) = held(scheme, dir) else { return };
        let (watchdog, lapses) = start(&lock);
        watchdog.pause();
        let (paused_at, _) = on_disk(&spec);
        wait_until("the lock to expire", || expired(&spec));
        assert!(unchanged_since(&spec, paused_at), "a renewal ran while the watchdog was paused");
        watchdog.resume();
        assert_eq!(lapses.recv_timeout(PATIENCE), Ok(Lapse::Expired));
        // Held again, with a new expiry, and still ours (a machine loaded
        // enough may let it expire once more before the release).
        assert!(on_disk(&spec).0 > paused_at);
        drop(watchdog);
        let released = lock.release(Duration::ZERO).unwrap();
        assert!(matches!(released, ReleaseOutcome::Released | ReleaseOutcome::Expired), "{released:?}");
    });
}

/// What orders the changes of the lock of `scheme` in `dir`, held from
/// outside by a thread until told to stop, or for `at_most`: its guard,
/// lease or queue file by an exclusive open-file-description lock, as
/// another process's change holds it; `shm`'s section word; for `redis`,
/// the server `server`, stopped (SIGSTOP). Returns once it is held.
fn hold_from_outside(
    scheme: Scheme,
    dir: &TestDir,
    server: Option<&testkit::Redis>,
    at_most: Duration,
) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (stop, stopped) = mpsc::channel::<()>();
    let (held, holding) = mpsc::channel::<()>();
    let server_pid = server.map(|server| server.pid());
    // A lock on a server keeps no file.
    let state = server.is_none().then(|| scheme.state_path(dir.path()));
    let holder = std::thread::spawn(move || {
        let hold = || {
            let _ = held.send(());
            let _ = stopped.recv_timeout(at_most);
        };
        match (scheme, server_pid) {
            (_, Some(pid)) => {
                // SAFETY: signals to the server this test started.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                hold();
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            (Scheme::Shm, None) => {
                let word = SectionWord::of(&state.expect("a file lock"));
                word.take();
                hold();
                word.release();
            }
            (_, None) => {
                let state = state.expect("a file lock");
                let file = std::fs::OpenOptions::new().read(true).write(true).open(state).unwrap();
                // The library holds it for microseconds at a time.
                while !ofd_lock(&file, true).unwrap() {
                    std::thread::sleep(Duration::from_micros(200));
                }
                hold();
            }
        }
    });
    holding.recv_timeout(PATIENCE).expect("the guard was never held from outside");
    (stop, holder)
}

/// How long a pause or a drop may take while a renewal is stuck: the
/// renewal's patience, and room for a loaded machine; well under the time
/// the guard stays held, which a renewal that kept the watchdog's state
/// locked would make them wait out.
const STUCK_BOUND: Duration = Duration::from_millis(1500);
const HELD_FOR: Duration = Duration::from_secs(3);

#[test]
fn a_renewal_stuck_on_a_held_guard_keeps_pause_and_drop_waiting_no_longer_than_its_patience() {
    assert!(RENEWAL_PATIENCE * 2 < STUCK_BOUND);
    each_scheme("watchdog-stuck", |scheme, dir| {
        // A server of its own, to stop without stopping the other tests'.
        let server = (scheme == Scheme::Redis).then(|| testkit::Redis::start(&[]));
        let spec = match &server {
            Some(server) => server.spec("stuck", QUERY),
            None => scheme.spec(dir.path(), QUERY),
        };
        let mut lock = open_lock(&spec);
        lock.try_acquire().unwrap();
        if scheme == Scheme::Flock {
            return;
        }
        let (watchdog, _lapses) = start(&lock);
        let (stop, holder) = hold_from_outside(scheme, dir, server.as_ref(), HELD_FOR);
        // Renewals fall due every 200 ms and find the guard held.
        std::thread::sleep(Duration::from_millis(700));
        let paused = std::time::Instant::now();
        watchdog.pause();
        let paused_in = paused.elapsed();
        watchdog.resume();
        // At once a renewal, which finds the guard held.
        std::thread::sleep(Duration::from_millis(50));
        let dropped = std::time::Instant::now();
        drop(watchdog);
        let dropped_in = dropped.elapsed();
        let _ = stop.send(());
        holder.join().unwrap();
        assert!(paused_in < STUCK_BOUND, "pause waited {paused_in:?} for a stuck renewal");
        assert!(dropped_in < STUCK_BOUND, "drop waited {dropped_in:?} for a stuck renewal");
        // The lock ran out while its guard was held, or was renewed just
        // before: either way it is still this handle's to release.
        let released = lock.release(Duration::ZERO).unwrap();
        assert!(matches!(released, ReleaseOutcome::Released | ReleaseOutcome::Expired), "{released:?}");
    });
}

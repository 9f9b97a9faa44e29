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

use common::{each_scheme, open_lock, wait_until, Scheme, SchemeFiles, TestDir, PATIENCE};
use lockcore::{Lock, ReleaseOutcome};
use lockstd::{Lapse, StartError, Watchdog};

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

//! A thread that prolongs a held lock before it expires, and says so
//! through a callback when it finds the lock expired or lost.
//!
//! The thread works through its own handle on the same acquisition
//! ([`Lock::adopt_in`]), so the caller's handle stays free for the caller's own
//! calls; the strategies' guards order the two handles' operations.

use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::thread::JoinHandleExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockcore::{Ability, Error, Lock, ProlongOutcome};

/// What a renewal found, told to the watchdog's callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lapse {
    /// The lock had run past its TTL, but nobody took it: it is held again
    /// and the watchdog goes on. What the holder did meanwhile was not
    /// protected (another process could have broken the lock).
    Expired,
    /// Someone else holds the lock now (ours was broken after it expired or
    /// its owner was judged dead). The watchdog stops after the callback.
    Lost,
}

/// Why a watchdog could not start.
#[derive(Debug)]
pub enum StartError {
    /// The lock is not held by the handle given.
    NotHeld,
    /// The lock never expires, so there is nothing to renew: its spec has
    /// no `ttl`, or it is a `flock` lock, which the kernel holds until it is
    /// released.
    NeverExpires,
    /// The watchdog's own handle on the lock could not be made (a lock its
    /// process did not take: [`Error::Forked`]).
    Lock(Error),
    /// No thread could be made (`pthread_create`'s error).
    Thread(io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NotHeld => f.write_str("the lock is not held"),
            StartError::NeverExpires => f.write_str("the lock never expires (no ttl, or flock): nothing to renew"),
            StartError::Lock(error) => write!(f, "{error}"),
            StartError::Thread(error) => write!(f, "no thread for the watchdog: {error}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Lock(error) => Some(error),
            StartError::Thread(error) => Some(error),
            _ => None,
        }
    }
}

/// A thread that prolongs a held lock at once, then every third of its
/// spec's `ttl`, until the watchdog is dropped.
///
/// Each renewal sets the expiry to now + the spec's `ttl`. When a renewal
/// finds the lock expired (nobody took it; it is held again) or lost
/// (someone else holds it), the callback is called on the watchdog's thread
/// with a [`Lapse`]; after [`Lapse::Lost`] the watchdog stops renewing. A
/// renewal waits at most [`RENEWAL_PATIENCE`] for the lock's guard or its
/// server; one that fails so, or otherwise (an I/O error), is tried again
/// a tenth of a second later, or at the next tick if that comes sooner.
///
/// Dropping the watchdog stops it and waits for its thread, so that no
/// renewal runs once the drop has returned, and a running callback has
/// returned (the callback must not wait for a thread that may be dropping
/// it). The callback itself may drop the watchdog: the thread then ends as
/// soon as the callback returns. A watchdog dropped in a child of `fork()`
/// (which has the value but not the thread) neither waits nor renews.
///
/// ```no_run
/// use lockcore::Lock;
/// use lockstd::{Lapse, Watchdog};
/// use std::sync::mpsc;
///
/// let mut lock = Lock::open("mkdir:/var/lock/nightly?ttl=1m")?;
/// lock.try_acquire()?;
/// let (lapsed, lapses) = mpsc::channel();
/// let watchdog = Watchdog::start(&lock, move |lapse| {
///     let _ = lapsed.send(lapse);
/// })?;
/// // ... work for as long as it takes, checking now and then:
/// if lapses.try_recv() == Ok(Lapse::Lost) {
///     // someone else holds the lock: stop, and do not commit
/// }
/// drop(watchdog);
/// lock.release(std::time::Duration::ZERO)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Watchdog {
    /// The state shared with the thread, and the thread; taken by drop.
    running: Option<(Arc<Control>, JoinHandle<()>)>,
    /// The process that started the thread, by its incarnation (which pid 1
    /// forking into a new pid namespace does not share with its child, as
    /// it does its pid): a child of fork() has the value but not the
    /// thread, and must not wait for it.
    started_in: Option<u64>,
}

/// What the thread is to do, and the condition variable that wakes it when
/// that changes.
struct Control {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Clone, Copy)]
enum State {
    /// Renewing nothing: not started yet, or paused.
    Idle,
    /// Renew at that moment.
    RenewAt(Instant),
    /// End the thread.
    Stopped,
}

impl Control {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: State) {
        *self.state() = state;
        self.wake.notify_all();
    }
}

/// The callback, moved to the watchdog's thread.
type OnLapse = Box<dyn FnMut(Lapse) + Send>;

/// How long one renewal may wait for the file that orders the lock's
/// changes, or for its server. Whoever pauses or stops the watchdog waits
/// for a renewal under way, so no longer than this: a guard held, or a
/// server silent, for longer fails the renewal, which is tried again soon.
pub const RENEWAL_PATIENCE: Duration = lockcore::ATTEMPT_PATIENCE;

/// After a renewal that failed, the next try comes this soon (or at the
/// next tick, if that is sooner): the lease has little time to spare.
const RETRY_AFTER: Duration = Duration::from_millis(100);

impl Watchdog {
    /// Starts renewing `lock`, which this process holds: at once, then
    /// every third of its spec's `ttl`. `on_lapse` is called from the
    /// watchdog's thread when a renewal finds the lock expired or lost.
    pub fn start(lock: &Lock, on_lapse: impl FnMut(Lapse) + Send + 'static) -> Result<Watchdog, StartError> {
        let watchdog = Watchdog::paused(lock, on_lapse)?;
        watchdog.resume();
        Ok(watchdog)
    }

    /// As [`start`](Self::start), but renews nothing before
    /// [`resume`](Self::resume). For a caller that replaces a running
    /// watchdog: it makes the new thread first, so that a failure leaves
    /// the old one running, then drops the old one and resumes the new,
    /// so that the two never renew at once.
    pub fn paused(lock: &Lock, on_lapse: impl FnMut(Lapse) + Send + 'static) -> Result<Watchdog, StartError> {
        let held = *lock.held().ok_or(StartError::NotHeld)?;
        let spec = lock.spec().clone();
        // Only a lock that others may break once its TTL has passed needs
        // renewing (a flock lock lasts as long as its holder), and only one
        // that can be prolonged can be.
        let renewable = spec.scheme.breaks_stale_locks() && spec.scheme.supports(Ability::Prolong);
        let ttl = match spec.options.ttl {
            Some(ttl) if renewable => ttl,
            _ => return Err(StartError::NeverExpires),
        };
        // Made in place on the heap, and moved to the thread as a pointer:
        // a Lock is tens of KiB, and one made by value is copied through
        // every frame on its way, on the caller's stack.
        let mut slot = Box::new(MaybeUninit::<Lock>::uninit());
        Lock::adopt_in(spec, held, &mut slot).map_err(StartError::Lock)?;
        // SAFETY: `adopt_in` wrote the whole Lock; MaybeUninit<Lock> has
        // Lock's layout, so the allocation is freed as what it now holds.
        let shadow = unsafe { Box::from_raw(Box::into_raw(slot).cast::<Lock>()) };
        Watchdog::spawn(shadow, ttl / 3, Box::new(on_lapse)).map_err(StartError::Thread)
    }

    fn spawn(shadow: Box<Lock>, every: Duration, on_lapse: OnLapse) -> io::Result<Watchdog> {
        let control = Arc::new(Control { state: Mutex::new(State::Idle), wake: Condvar::new() });
        let seen = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name("lock-watchdog".into())
            .spawn(move || renew_until_stopped(&seen, shadow, every, on_lapse))?;
        Ok(Watchdog { running: Some((control, thread)), started_in: lockcore::process_incarnation() })
    }

    /// Renews at once, then every third of the `ttl`: after a pause the
    /// lock may have little time left, or none.
    pub fn resume(&self) {
        self.set(State::RenewAt(Instant::now()));
    }

    /// Renews nothing until [`resume`](Self::resume); waits for a renewal
    /// under way (at most [`RENEWAL_PATIENCE`]), so that none runs once
    /// this returns. For a release, which must not race a renewal, but may
    /// fail and leave the lock to renew.
    pub fn pause(&self) {
        self.set(State::Idle);
    }

    fn set(&self, state: State) {
        // Not in a child of fork(): see Drop.
        if let Some((control, _)) = self.running.as_ref().filter(|_| self.started_in == lockcore::process_incarnation())
        {
            control.set(state);
        }
    }
}

impl fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watchdog").field("started_in", &self.started_in).finish_non_exhaustive()
    }
}

/// The watchdog thread.
fn renew_until_stopped(control: &Control, mut shadow: Box<Lock>, every: Duration, mut on_lapse: OnLapse) {
    let mut state = control.state();
    loop {
        match *state {
            State::Stopped => break,
            State::Idle => state = control.wake.wait(state).unwrap_or_else(|e| e.into_inner()),
            State::RenewAt(when) => {
                let now = Instant::now();
                if now < when {
                    state = control.wake.wait_timeout(state, when - now).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
                // Renewed with the state locked: whoever changes the state
                // waits until no renewal is under way, at most
                // RENEWAL_PATIENCE.
                let renewed = shadow.prolong_within(None, RENEWAL_PATIENCE);
                // The next one counted from now, after this one, which may
                // have taken its whole patience: due at once, it would be
                // made with the state still locked, and again, for as long
                // as the guard or the server stays stuck.
                let after = Instant::now();
                let lapse = match renewed {
                    Ok(ProlongOutcome::Prolonged) => None,
                    Ok(ProlongOutcome::Expired) => Some(Lapse::Expired),
                    Ok(ProlongOutcome::Lost) | Err(Error::NotHeld) => Some(Lapse::Lost),
                    // A failed renewal (I/O, a guard held too long, a server
                    // that did not answer) is tried again soon.
                    Err(_) => {
                        *state = State::RenewAt(after + every.min(RETRY_AFTER));
                        continue;
                    }
                };
                *state = State::RenewAt(after + every);
                let Some(lapse) = lapse else { continue };
                // Unlocked first: the callback may pause or stop this very
                // watchdog, which takes the state.
                drop(state);
                on_lapse(lapse);
                if lapse == Lapse::Lost {
                    shadow.forget();
                    return;
                }
                state = control.state();
            }
        }
    }
    shadow.forget();
}

impl Drop for Watchdog {
    /// Stops the thread and waits for it, so that no renewal runs after
    /// the watchdog is gone.
    fn drop(&mut self) {
        let Some((control, thread)) = self.running.take() else { return };
        if self.started_in != lockcore::process_incarnation() {
            // A child of fork(): the thread was not copied, it may have held
            // the state's mutex at the fork (so locking it could hang), and
            // its thread id means nothing here (neither join nor detach it).
            // Leak both: a few bytes per inherited watchdog.
            std::mem::forget(control);
            std::mem::forget(thread);
            return;
        }
        control.set(State::Stopped);
        if is_current_thread(&thread) {
            // Dropped by the callback (it stopped, released or closed its
            // own lock): the thread cannot wait for itself, and ends as soon
            // as the callback returns. Dropping the handle detaches it.
            return;
        }
        let _ = thread.join();
    }
}

/// Whether `thread` is the calling thread. Compares pthread ids rather than
/// `std::thread::current()`, which needs this thread's locals, and those may
/// be gone when an exit hook runs.
fn is_current_thread(thread: &JoinHandle<()>) -> bool {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let me = unsafe { libc::pthread_self() };
    thread.as_pthread_t() == me
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// In a child of fork() the watchdog thread is gone, and may have left
    /// the state's mutex locked: dropping the watchdog there must not wait.
    #[test]
    fn drop_in_a_fork_child_leaves_state_and_thread_alone() {
        let control = Arc::new(Control { state: Mutex::new(State::Idle), wake: Condvar::new() });
        let thread = std::thread::spawn(|| {});
        // No process draws 0: the drop believes it runs in a child.
        let watchdog = Watchdog { running: Some((Arc::clone(&control), thread)), started_in: Some(0) };
        let locked_at_fork = control.state.lock().unwrap();
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            drop(watchdog);
            let _ = done.send(());
        });
        // A bound on a hang, not on speed: the drop takes microseconds.
        let outcome = finished.recv_timeout(Duration::from_secs(30));
        assert!(outcome.is_ok(), "the watchdog's drop in a fork child waited for the state's mutex");
        drop(locked_at_fork);
    }
}

//! Auto-renew: a thread that prolongs a held lock before it expires, and
//! says so through a callback when it finds the lock lost.
//!
//! The thread works through its own handle on the same acquisition
//! ([`Lock::adopt`]), so the caller's handle stays free for the caller's own
//! calls; the strategies' guards order the two handles' operations.

use std::ffi::c_void;
use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockcore::{Error, Lock, ProlongOutcome};

/// Called once, from the watchdog's thread, when the watchdog finds that
/// someone else holds the lock; the watchdog stops afterwards. What it may
/// call, on its own handle too, is in `lock_autorenew`.
#[allow(non_camel_case_types)]
pub type lock_lost_fn = Option<unsafe extern "C" fn(context: *mut c_void)>;

pub struct Watchdog {
    /// The state shared with the thread, and the thread; taken by drop.
    running: Option<(Arc<Control>, JoinHandle<()>)>,
    /// The process that started the thread: a child of fork() has the
    /// handle but not the thread, and must not wait for it.
    pid: u32,
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

/// The callback and its context, moved to the watchdog thread.
struct LostCallback {
    callback: unsafe extern "C" fn(*mut c_void),
    context: *mut c_void,
}

// SAFETY: lock_autorenew's contract makes the caller responsible for the
// callback and its context being usable from the watchdog thread.
unsafe impl Send for LostCallback {}

impl Watchdog {
    /// Starts the thread that will prolong `shadow` (an adopted handle), but
    /// renews nothing before [`start`](Self::start): a caller replacing a
    /// running watchdog makes the new thread first, so that a failure leaves
    /// the old one running, and stops the old one before the new one renews.
    /// Fails with pthread_create's error if no thread can be made.
    pub fn spawn(shadow: Lock, every: Duration, lost: lock_lost_fn, context: *mut c_void) -> io::Result<Watchdog> {
        let control = Arc::new(Control { state: Mutex::new(State::Idle), wake: Condvar::new() });
        let seen = Arc::clone(&control);
        let lost = lost.map(|callback| LostCallback { callback, context });
        let thread = std::thread::Builder::new()
            .name("lock-watchdog".into())
            .spawn(move || renew_until_stopped(&seen, shadow, every, lost))?;
        Ok(Watchdog { running: Some((control, thread)), pid: std::process::id() })
    }

    /// Renews at once, then every `every`: the watchdog may start, or
    /// resume after a pause, late in the TTL, with less than `every` left.
    pub fn start(&self) {
        self.set(State::RenewAt(Instant::now()));
    }

    /// Renews nothing until [`start`](Self::start); waits for a renewal
    /// under way, so that none runs once this returns. For a release, which
    /// must not race a renewal, but may fail and leave the lock to renew.
    pub fn pause(&self) {
        self.set(State::Idle);
    }

    fn set(&self, state: State) {
        // Not in a child of fork(): see Drop.
        if let Some((control, _)) = self.running.as_ref().filter(|_| self.pid == std::process::id()) {
            control.set(state);
        }
    }
}

/// The watchdog thread.
fn renew_until_stopped(control: &Control, mut shadow: Lock, every: Duration, lost: Option<LostCallback>) {
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
                // waits until no renewal is under way.
                let renewed = shadow.prolong(None);
                *state = State::RenewAt(now + every);
                match renewed {
                    Ok(ProlongOutcome::Prolonged) | Ok(ProlongOutcome::Expired) => {}
                    Ok(ProlongOutcome::Lost) | Err(Error::NotHeld) => {
                        // Unlocked first: the callback may stop this very
                        // watchdog, which takes the state.
                        drop(state);
                        if let Some(lost) = &lost {
                            // SAFETY: lock_autorenew's contract: the callback
                            // may be called once from this thread with its context.
                            unsafe { (lost.callback)(lost.context) };
                        }
                        shadow.forget();
                        return;
                    }
                    // A failed renewal (I/O, a guard held too long) is
                    // retried at the next tick; the lease has two more.
                    Err(_) => {}
                }
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
        if self.pid != std::process::id() {
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
            // Dropped by the lost callback (it stopped, released or closed
            // its own handle): the thread cannot wait for itself, and ends
            // as soon as the callback returns. Dropping the handle detaches it.
            return;
        }
        let _ = thread.join();
    }
}

/// Whether `thread` is the calling thread. Compares pthread ids rather than
/// `std::thread::current()`, which needs this thread's locals, and those may
/// be gone when the exit hook runs.
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
        // pid 0 is no process of ours: the drop believes it runs in a child.
        let watchdog = Watchdog { running: Some((Arc::clone(&control), thread)), pid: 0 };
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

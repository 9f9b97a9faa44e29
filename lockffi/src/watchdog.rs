//! Auto-renew: a thread that prolongs a held lock before it expires, and
//! says so through a callback when it finds the lock lost.
//!
//! The thread works through its own handle on the same acquisition
//! ([`Lock::adopt`]), so the caller's handle stays free for the caller's own
//! calls; the strategies' guards order the two handles' operations.

use std::ffi::c_void;
use std::os::unix::thread::JoinHandleExt;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use lockcore::{Error, Lock, ProlongOutcome};

/// Called once, from the watchdog's thread, when the watchdog finds that
/// someone else holds the lock; the watchdog stops afterwards.
#[allow(non_camel_case_types)]
pub type lock_lost_fn = Option<unsafe extern "C" fn(context: *mut c_void)>;

pub struct Watchdog {
    /// The stop flag shared with the thread, and the thread; taken by drop.
    running: Option<(Arc<StopFlag>, JoinHandle<()>)>,
    /// The process that started the thread: a child of fork() has the
    /// handle but not the thread, and must not wait for it.
    pid: u32,
}

/// Set to true, and the thread woken, to stop it.
type StopFlag = (Mutex<bool>, Condvar);

/// The callback and its context, moved to the watchdog thread.
struct LostCallback {
    callback: unsafe extern "C" fn(*mut c_void),
    context: *mut c_void,
}

// SAFETY: lock_autorenew's contract makes the caller responsible for the
// callback and its context being usable from the watchdog thread.
unsafe impl Send for LostCallback {}

impl Watchdog {
    /// Starts prolonging `shadow` (an adopted handle): at once, then every
    /// `every`.
    pub fn start(mut shadow: Lock, every: Duration, lost: lock_lost_fn, context: *mut c_void) -> Watchdog {
        let stop: Arc<StopFlag> = Arc::new((Mutex::new(false), Condvar::new()));
        let stop_seen = Arc::clone(&stop);
        let lost = lost.map(|callback| LostCallback { callback, context });
        let thread = std::thread::spawn(move || {
            let lost = lost;
            // The first renewal at once: the watchdog may start late in the
            // TTL, with less than `every` left.
            let mut pause = Duration::ZERO;
            loop {
                let (flag, wake) = &*stop_seen;
                let guard = flag.lock().unwrap_or_else(|e| e.into_inner());
                let (guard, _) =
                    wake.wait_timeout_while(guard, pause, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
                if *guard {
                    break;
                }
                drop(guard);
                pause = every;
                match shadow.prolong(None) {
                    Ok(ProlongOutcome::Prolonged) | Ok(ProlongOutcome::Expired) => {}
                    Ok(ProlongOutcome::Lost) | Err(Error::NotHeld) => {
                        if let Some(lost) = &lost {
                            // SAFETY: lock_autorenew's contract: the callback
                            // may be called once from this thread with its context.
                            unsafe { (lost.callback)(lost.context) };
                        }
                        break;
                    }
                    // A failed renewal (I/O, a guard held too long) is
                    // retried at the next tick; the lease has two more.
                    Err(_) => {}
                }
            }
            shadow.forget();
        });
        Watchdog { running: Some((stop, thread)), pid: std::process::id() }
    }
}

impl Drop for Watchdog {
    /// Stops the thread and waits for it, so that no renewal runs after
    /// the watchdog is gone.
    fn drop(&mut self) {
        let Some((stop, thread)) = self.running.take() else { return };
        if self.pid != std::process::id() {
            // A child of fork(): the thread was not copied, it may have held
            // the flag's mutex at the fork (so locking it could hang), and its
            // thread id means nothing here (neither join nor detach it).
            // Leak both: a few bytes per inherited watchdog.
            std::mem::forget(stop);
            std::mem::forget(thread);
            return;
        }
        let (flag, wake) = &*stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
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
    /// the flag's mutex locked: dropping the watchdog there must not wait.
    #[test]
    fn drop_in_a_fork_child_leaves_flag_and_thread_alone() {
        let stop: Arc<StopFlag> = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = std::thread::spawn(|| {});
        // pid 0 is no process of ours: the drop believes it runs in a child.
        let watchdog = Watchdog { running: Some((Arc::clone(&stop), thread)), pid: 0 };
        let locked_at_fork = stop.0.lock().unwrap();
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            drop(watchdog);
            let _ = done.send(());
        });
        // A bound on a hang, not on speed: the drop takes microseconds.
        let outcome = finished.recv_timeout(Duration::from_secs(30));
        assert!(outcome.is_ok(), "the watchdog's drop in a fork child waited for the stop flag's mutex");
        drop(locked_at_fork);
    }
}

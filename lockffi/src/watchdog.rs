//! Auto-renew: a thread that prolongs a held lock before it expires, and
//! says so through a callback when it finds the lock lost.
//!
//! The thread works through its own handle on the same acquisition
//! ([`Lock::adopt`]), so the caller's handle stays free for the caller's own
//! calls; the strategies' guards order the two handles' operations.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use lockcore::{Error, Lock, ProlongOutcome};

/// Called once, from the watchdog's thread, when the watchdog finds that
/// someone else holds the lock; the watchdog stops afterwards.
#[allow(non_camel_case_types)]
pub type lock_lost_fn = Option<unsafe extern "C" fn(context: *mut c_void)>;

pub struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: a child of fork() has the
    /// handle but not the thread, and must not wait for it.
    pid: u32,
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
    /// Starts prolonging `shadow` (an adopted handle) every `every`.
    pub fn start(mut shadow: Lock, every: Duration, lost: lock_lost_fn, context: *mut c_void) -> Watchdog {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop_seen = Arc::clone(&stop);
        let lost = lost.map(|callback| LostCallback { callback, context });
        let thread = std::thread::spawn(move || {
            let lost = lost;
            loop {
                let (flag, wake) = &*stop_seen;
                let guard = flag.lock().unwrap_or_else(|e| e.into_inner());
                let (guard, _) =
                    wake.wait_timeout_while(guard, every, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
                if *guard {
                    break;
                }
                drop(guard);
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
        Watchdog { stop, thread: Some(thread), pid: std::process::id() }
    }
}

impl Drop for Watchdog {
    /// Stops the thread and waits for it, so that no renewal runs after
    /// the watchdog is gone.
    fn drop(&mut self) {
        let (flag, wake) = &*self.stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            if self.pid == std::process::id() {
                let _ = thread.join();
            }
            // In a child of fork() the thread does not exist: there is
            // nothing to wait for, and the handle is simply dropped.
        }
    }
}

//! The opaque handle C callers hold, and how one call at a time gets to it.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use lockcore::Lock;
use lockstd::at_exit::{self, ReleaseAtExit};
use lockstd::{Registration, Watchdog};

use crate::boundary::{AtLock, Failure};
use crate::result::lock_result;

/// Called while `lock_acquire` waits: after `wmin`, then every `wafter`, with
/// the time waited so far in milliseconds and the context pointer given to
/// `lock_set_warning`. During the call, `lock_last_error_message()` on the
/// same thread tells what stands in the way: the lock, the time waited, and
/// its holder (pid, host, since, expiry), a cooldown, or the queue ahead.
#[allow(non_camel_case_types)]
pub type lock_warning_fn = Option<unsafe extern "C" fn(context: *mut c_void, waited_ms: u64)>;

/// Asked by `lock_acquire` before each attempt and at least every 40 ms
/// between them, with the context pointer given to `lock_set_cancel`: `true`
/// gives the wait up, and `lock_acquire` returns `LOCK_CANCELLED`. (An
/// attempt under way finishes first: at most 250 ms, if another process
/// keeps the lock's guard.) Called on the thread that waits; another thread
/// or a signal handler may set the flag it reads.
#[allow(non_camel_case_types)]
pub type lock_cancel_fn = Option<unsafe extern "C" fn(context: *mut c_void) -> bool>;

/// A lock named by a spec, and this process's hold on it. Opaque to C;
/// made by `lock_open`, freed by `lock_close`.
///
/// Threads: a handle may be used from any thread, but by one call at a time;
/// a call made while another thread's call on the same handle is running
/// returns `LOCK_ERR_HANDLE_IN_USE` and changes nothing. Separate handles,
/// even of the same lock, are independent and exclude each other exactly as
/// two processes would.
///
/// fork(): a lock held when the process forks belongs to the parent. In the
/// child, every call on the inherited handle but `lock_close` returns
/// `LOCK_ERR_FORKED`, before it looks at its other arguments, and
/// `lock_close` frees the child's copy without releasing anything. A child
/// may acquire through a handle that held nothing at fork time; it is then a
/// new owner with its own pid.
/// The descriptors a handle keeps and locks through from one call to the
/// next (`flock`'s target, the file that orders a lock's changes; up to 1024
/// per process, two per `flock` lock) are closed in the child before
/// `fork()` returns there, so a parent killed while it holds a lock leaves
/// it free, whatever its children do. One opened while another thread was
/// forking, or past those 1024, is not kept: it serves one acquisition, and
/// a child forked during it keeps a copy, as of any descriptor. So does a
/// child made by a raw `clone(2)`, which runs no fork handler, until it
/// closes them or execs (all are close-on-exec). A child's copy of a handle
/// never closes a descriptor number of its parent's.
/// Other threads may be inside `lock_*` calls when the process forks: the
/// child never waits for a thread it did not inherit. A handle that was in a
/// call at that instant answers `LOCK_ERR_HANDLE_IN_USE` in the child, and
/// `lock_close` frees it.
///
/// Exit: locks still held when the process exits normally (return from
/// `main`, `exit()`) are released, as LockFile::Simple's autoclean does. A
/// process killed by a signal cannot release; a same-host acquirer then
/// breaks its lock at once (`stale=pid`, the default), others after its TTL.
#[allow(non_camel_case_types)]
pub struct lock_handle {
    /// Declared first so that it is dropped first: the exit handler no
    /// longer reaches the handle once it is being freed.
    at_exit: UnsafeCell<Option<Registration>>,
    /// Declared before the lock so that it is dropped first: the watchdog
    /// stops before the lock it renews is released.
    watchdog: UnsafeCell<Option<Watchdog>>,
    /// Reached only through [`lock_handle::claim`], which makes the access
    /// exclusive.
    lock: UnsafeCell<Lock>,
    in_use: AtomicBool,
    pub(crate) warning: UnsafeCell<Option<Warning>>,
    pub(crate) cancel: UnsafeCell<Option<Cancel>>,
    /// Whether the watchdog's lost callback is running.
    lost_callback: Arc<CallbackGate>,
    /// The process that made the handle: in a child of fork() no thread is
    /// left inside it, whatever `in_use` and `lost_callback` say.
    made_by: Process,
}

/// A process, told from its children of fork(): its incarnation (see
/// `lockcore::process_incarnation`) and its pid, which stands in where no
/// incarnation can be had.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Process(Option<u64>, i32);

impl Process {
    fn this() -> Process {
        // SAFETY: getpid has no preconditions and cannot fail.
        Process(lockcore::process_incarnation(), unsafe { libc::getpid() })
    }
}

/// Whether the watchdog's lost callback is running, and on which thread.
/// `lock_close` made on another thread waits for it to return: the callback
/// may make calls on the handle, and once it has stopped the watchdog
/// itself (its `lock_prolong` or `lock_release` found the lock lost), no
/// join of the watchdog's thread waits for it any more.
pub(crate) struct CallbackGate {
    running_on: Mutex<Option<libc::pthread_t>>,
    returned: Condvar,
}

impl CallbackGate {
    fn new() -> CallbackGate {
        CallbackGate { running_on: Mutex::new(None), returned: Condvar::new() }
    }

    /// Runs `callback` on this thread, marked as running.
    pub(crate) fn run(&self, callback: impl FnOnce()) {
        // SAFETY: pthread_self has no preconditions and cannot fail.
        *self.running_on.lock().unwrap_or_else(PoisonError::into_inner) = Some(unsafe { libc::pthread_self() });
        callback();
        *self.running_on.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.returned.notify_all();
    }

    /// Waits until the callback is not running, unless it runs on this very
    /// thread (it is closing its own handle).
    fn wait_unless_inside(&self) {
        // SAFETY: pthread_self has no preconditions and cannot fail.
        let me = unsafe { libc::pthread_self() };
        let mut running_on = self.running_on.lock().unwrap_or_else(PoisonError::into_inner);
        while running_on.is_some_and(|thread| thread != me) {
            running_on = self.returned.wait(running_on).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// How long `lock_close` sleeps between looks while another thread is in a
/// call on the handle (a lost callback's): that call ends by its deadline.
const CLOSE_WAITS_FOR_A_CALL: Duration = Duration::from_millis(1);

#[derive(Clone, Copy)]
pub(crate) struct Warning {
    pub callback: unsafe extern "C" fn(*mut c_void, u64),
    pub context: *mut c_void,
}

#[derive(Clone, Copy)]
pub(crate) struct Cancel {
    pub callback: unsafe extern "C" fn(*mut c_void) -> bool,
    pub context: *mut c_void,
}

impl lock_handle {
    /// A handle for `lock`, with no watchdog, no warning or cancel
    /// callback, and no caller inside it.
    pub fn new(lock: Lock) -> lock_handle {
        lock_handle {
            at_exit: UnsafeCell::new(None),
            watchdog: UnsafeCell::new(None),
            lock: UnsafeCell::new(lock),
            in_use: AtomicBool::new(false),
            warning: UnsafeCell::new(None),
            cancel: UnsafeCell::new(None),
            lost_callback: Arc::new(CallbackGate::new()),
            made_by: Process::this(),
        }
    }

    /// Waits until no other thread is in a call on the handle, and claims it
    /// for good: what `lock_close` does first, before anything of the handle
    /// is touched, so that a lost callback running on the watchdog's thread
    /// is never inside the handle as it is freed (its calls answer
    /// `LOCK_ERR_HANDLE_IN_USE` from here on). In a child of fork() nothing
    /// is waited for: the threads that were in calls were not copied.
    pub fn quiesce(&self) {
        if self.made_by != Process::this() {
            return;
        }
        while self.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::thread::sleep(CLOSE_WAITS_FOR_A_CALL);
        }
    }

    /// What `lock_close` does before the handle is freed: unregisters it
    /// from the release at exit, stops the watchdog (waiting for it), then
    /// releases a lock this process holds, and answers how that went. A
    /// release that failed is not tried again when the lock is dropped:
    /// its error is the answer.
    pub fn close(self: Box<Self>) -> Result<lock_result, Failure> {
        let mut this = self;
        // Unregistered first, so that the exit handler cannot reach the
        // handle once it is freed; the watchdog is stopped after, without
        // the exit handler's list locked, since its lost callback may need
        // it.
        drop(this.at_exit.get_mut().take());
        drop(this.watchdog.get_mut().take());
        // A callback that stopped its own watchdog is not joined above.
        if this.made_by == Process::this() {
            this.lost_callback.wait_unless_inside();
        }
        let lock = this.lock.get_mut();
        if lock.held_here().is_err() {
            return Ok(lock_result::LOCK_OK);
        }
        let released = lock.release(std::time::Duration::ZERO);
        match released.at(lock) {
            Ok(outcome) => Ok(outcome.into()),
            Err(failure) => {
                lock.forget();
                Err(failure)
            }
        }
    }

    /// Exclusive access for one call. A second thread calling at the same
    /// moment gets `LOCK_ERR_HANDLE_IN_USE` instead of a data race.
    pub fn claim(&self) -> Result<Claimed<'_>, Failure> {
        self.in_use
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| Failure::Code(lock_result::LOCK_ERR_HANDLE_IN_USE))?;
        Ok(Claimed { handle: self })
    }
}

/// One call's exclusive access to a handle; gives it back on drop.
pub struct Claimed<'a> {
    handle: &'a lock_handle,
}

impl Claimed<'_> {
    pub fn lock(&mut self) -> &mut Lock {
        // SAFETY: `in_use` was swapped from false to true by `claim` and is
        // reset only when this value drops, so no other reference to the
        // Lock exists while this one lives.
        unsafe { &mut *self.handle.lock.get() }
    }

    pub(crate) fn warning(&mut self) -> &mut Option<Warning> {
        // SAFETY: exclusive for the same reason as `lock`.
        unsafe { &mut *self.handle.warning.get() }
    }

    pub(crate) fn cancel(&mut self) -> &mut Option<Cancel> {
        // SAFETY: exclusive for the same reason as `lock`.
        unsafe { &mut *self.handle.cancel.get() }
    }

    /// Marks the watchdog's lost callback as running (see [`CallbackGate`]).
    pub(crate) fn lost_callback(&self) -> Arc<CallbackGate> {
        Arc::clone(&self.handle.lost_callback)
    }

    pub(crate) fn watchdog(&mut self) -> &mut Option<Watchdog> {
        // SAFETY: exclusive for the same reason as `lock`.
        unsafe { &mut *self.handle.watchdog.get() }
    }

    /// Registers the handle, which now holds its lock, to be released at
    /// exit (once: a second call keeps the first registration).
    pub fn release_at_exit(&mut self) {
        // SAFETY: exclusive for the same reason as `lock`.
        let registration = unsafe { &mut *self.handle.at_exit.get() };
        if registration.is_none() {
            let address = self.handle as *const lock_handle as usize;
            *registration = Some(at_exit::register(Arc::new(HandleAtExit(address))));
        }
    }

    /// Unregisters the handle, which holds nothing now, from the release at
    /// exit, and stops its watchdog (waiting for it).
    pub fn holds_nothing(&mut self) {
        drop(self.watchdog().take());
        // SAFETY: exclusive for the same reason as `lock`.
        drop(unsafe { &mut *self.handle.at_exit.get() }.take());
    }
}

/// A handle, by address, as the exit handler reaches it.
///
/// Sound because the handle is registered only while it lives: `lock_close`
/// drops the registration before it frees the handle, and lockstd calls an
/// item only while it is registered (see [`lockstd::Registration`]).
struct HandleAtExit(usize);

impl HandleAtExit {
    fn handle(&self) -> &lock_handle {
        // SAFETY: registered, so alive (see the type's doc).
        unsafe { &*(self.0 as *const lock_handle) }
    }
}

impl ReleaseAtExit for HandleAtExit {
    fn take_watchdog(&self) -> Option<Watchdog> {
        // A handle busy in another thread is left alone.
        self.handle().claim().ok()?.watchdog().take()
    }

    fn release(&self) {
        // A handle busy in another thread is left alone, and so is one whose
        // owner started a new watchdog meanwhile (its lock runs out by its
        // TTL). The lock itself refuses to release a lock its process did
        // not take (fork).
        if let Ok(mut claimed) = self.handle().claim() {
            if claimed.watchdog().is_none() {
                at_exit::release_for_exit(claimed.lock());
            }
        }
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        self.handle.in_use.store(false, Ordering::Release);
    }
}

/// Claims the handle for one call, then answers `LOCK_ERR_FORKED` if it
/// holds a lock its process did not take: a parent's, inherited through
/// fork(). The core refuses every operation on such a lock, but only after
/// the call has judged its other arguments, and some calls touch no lock
/// file at all (`lock_autorenew_stop`, `lock_set_warning`, `lock_path`).
/// Every call but `lock_close` starts here, before it looks at any other
/// argument, so that an inherited handle gets one answer whatever else is
/// wrong with the call.
pub fn claim_own(handle: &lock_handle) -> Result<Claimed<'_>, Failure> {
    let mut claimed = handle.claim()?;
    match claimed.lock().held_here() {
        Err(lockcore::Error::Forked) => Err(Failure::Core(lockcore::Error::Forked)),
        _ => Ok(claimed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquire::{lock_release, lock_try_acquire};
    use crate::open::{lock_close, lock_open};

    #[test]
    fn a_handle_in_use_refuses_a_second_caller() {
        let path = std::env::temp_dir().join(format!("lockffi-in-use-{}", std::process::id()));
        let spec = std::ffi::CString::new(format!("flock:{}", path.display())).unwrap();
        let mut handle: *mut lock_handle = std::ptr::null_mut();
        // SAFETY: valid arguments; the handle is closed at the end.
        unsafe {
            assert_eq!(lock_open(spec.as_ptr(), &mut handle), lock_result::LOCK_OK);
            let claimed = (*handle).claim().unwrap();
            assert_eq!(lock_try_acquire(handle, std::ptr::null_mut()), lock_result::LOCK_ERR_HANDLE_IN_USE);
            drop(claimed);
            assert_eq!(lock_try_acquire(handle, std::ptr::null_mut()), lock_result::LOCK_OK);
            assert_eq!(lock_release(handle, 0), lock_result::LOCK_OK);
            lock_close(handle);
        }
        std::fs::remove_file(&path).unwrap();
        // flock keeps its fence and cooldown beside the target.
        let mut guard = path.into_os_string();
        guard.push(".guard");
        std::fs::remove_file(guard).unwrap();
    }
}

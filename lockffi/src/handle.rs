//! The opaque handle C callers hold, and how one call at a time gets to it.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::addr_of_mut;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// The process in a call on the handle ([`process_id`]), or 0.
    in_use: AtomicU64,
    /// The thread in that call, once it has written it here, or 0: what
    /// tells `lock_close` made from a callback of the call it would wait for.
    caller_thread: AtomicU64,
    pub(crate) warning: UnsafeCell<Option<Warning>>,
    pub(crate) cancel: UnsafeCell<Option<Cancel>>,
    /// The watchdogs' lost callbacks running.
    lost_callbacks: Arc<CallbackGate>,
    /// The lock's name, as its messages give it: written once when the
    /// handle is made, so that a call that cannot claim the handle (another
    /// is in it) can still name its lock.
    name: Box<str>,
}

/// This process, told from its children of fork(): its incarnation (see
/// `lockcore::process_incarnation`), or where none can be had its pid;
/// never 0.
fn process_id() -> u64 {
    // SAFETY: getpid has no preconditions and cannot fail.
    lockcore::process_incarnation().unwrap_or_else(|| (1 << 63) | u64::from(unsafe { libc::getpid() } as u32))
}

/// This thread, as a number.
fn thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}

/// The lost callbacks of a handle's watchdogs that are running, by process
/// and thread. A call that stops a watchdog, and `lock_close`, made on
/// another thread, wait for them to return: a callback may make calls on
/// the handle, and once it has stopped its own watchdog (its `lock_prolong`
/// or `lock_release` found the lock lost) no join of the watchdog's thread
/// waits for it any more. A callback may start another watchdog, whose
/// callback may run at the same time: each has a slot. Atomics, not a
/// mutex: a child of fork() must never find one locked by a thread it did
/// not inherit.
pub(crate) struct CallbackGate {
    slots: [CallbackSlot; CALLBACK_SLOTS],
}

/// A running callback's process ([`process_id`]) and thread, or 0s.
#[derive(Default)]
struct CallbackSlot {
    process: AtomicU64,
    thread: AtomicU64,
}

/// How many lost callbacks of one handle may run at once: each is started
/// by a watchdog that another's callback started, so a few at most.
const CALLBACK_SLOTS: usize = 8;

impl CallbackGate {
    fn new() -> CallbackGate {
        CallbackGate { slots: Default::default() }
    }

    /// Runs `callback` on this thread, in a slot of its own.
    pub(crate) fn run(&self, callback: impl FnOnce()) {
        let process = process_id();
        let slot = loop {
            let free = self
                .slots
                .iter()
                .find(|slot| slot.process.compare_exchange(0, process, Ordering::AcqRel, Ordering::Relaxed).is_ok());
            match free {
                Some(slot) => break slot,
                // Every slot taken by a callback that runs: one returns.
                None => std::thread::sleep(CLOSE_WAITS_FOR_A_CALL),
            }
        };
        slot.thread.store(thread_id(), Ordering::Release);
        callback();
        slot.thread.store(0, Ordering::Release);
        slot.process.store(0, Ordering::Release);
    }

    /// Waits until no callback runs in this process but on this very thread
    /// (one closing or stopping its own watchdog). Those of another process
    /// (a parent's, running when it forked) are not in this one.
    pub(crate) fn wait_unless_inside(&self) {
        let (process, thread) = (process_id(), thread_id());
        // A slot whose thread is not written yet (0) is another thread's.
        while self.slots.iter().any(|slot| {
            slot.process.load(Ordering::Acquire) == process && slot.thread.load(Ordering::Acquire) != thread
        }) {
            std::thread::sleep(CLOSE_WAITS_FOR_A_CALL);
        }
    }
}

/// How long `lock_close` sleeps between looks while another thread of this
/// process is in a call on the handle, or a lost callback runs.
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
    /// A handle for the lock `spec` names, on the heap, with no watchdog,
    /// no warning or cancel callback, and no caller inside it: what
    /// `lock_open` gives C. Made in place, field by field, the lock opened
    /// into its own field ([`Lock::open_in`]): a `Lock` is tens of KiB, and
    /// one made by value and moved into a box is copied through several
    /// frames, which took more stack than many programs give a thread.
    pub fn open(spec: &[u8]) -> Result<*mut lock_handle, lockcore::Error> {
        let slot: *mut lock_handle = Box::into_raw(Box::new(MaybeUninit::<lock_handle>::uninit())).cast();
        // SAFETY: `slot` is a live allocation of one lock_handle
        // (MaybeUninit<T> has T's layout); `addr_of_mut!` makes pointers to
        // its fields without reading them; UnsafeCell<Lock> and
        // MaybeUninit<Lock> both have Lock's layout.
        let lock_field = unsafe { &mut *addr_of_mut!((*slot).lock).cast::<MaybeUninit<Lock>>() };
        if let Err(e) = Lock::open_in(spec, lock_field) {
            // SAFETY: the allocation made above, freed as what it was made
            // as, with nothing in it to drop.
            drop(unsafe { Box::from_raw(slot.cast::<MaybeUninit<lock_handle>>()) });
            return Err(e);
        }
        // SAFETY: as above; each field is written once, before the handle is
        // used as a lock_handle; the lock, which `open_in` wrote whole, is
        // read for its name.
        unsafe {
            addr_of_mut!((*slot).at_exit).write(UnsafeCell::new(None));
            addr_of_mut!((*slot).watchdog).write(UnsafeCell::new(None));
            addr_of_mut!((*slot).in_use).write(AtomicU64::new(0));
            addr_of_mut!((*slot).caller_thread).write(AtomicU64::new(0));
            addr_of_mut!((*slot).warning).write(UnsafeCell::new(None));
            addr_of_mut!((*slot).cancel).write(UnsafeCell::new(None));
            addr_of_mut!((*slot).lost_callbacks).write(Arc::new(CallbackGate::new()));
            let name = (*addr_of_mut!((*slot).lock).cast::<Lock>()).name().to_string();
            addr_of_mut!((*slot).name).write(name.into_boxed_str());
            // Names every field, and so stops compiling when one is added
            // that the writes above leave out.
            let lock_handle {
                at_exit: _,
                watchdog: _,
                lock: _,
                in_use: _,
                caller_thread: _,
                warning: _,
                cancel: _,
                lost_callbacks: _,
                name: _,
            } = &*slot;
        }
        Ok(slot)
    }

    /// `lock_close`: claims the handle for good, waiting while another
    /// thread of this process is in a call on it (a lost callback's); unregisters
    /// it from the release at exit; stops the watchdog (waiting for it) and
    /// waits for a lost callback that still runs; releases a lock this
    /// process holds; frees the handle; and answers how the release went.
    /// A release that failed is not tried again when the lock is dropped:
    /// its error is the answer. Made from a callback of a call on this very
    /// handle, on the thread of that call: `LOCK_ERR_HANDLE_IN_USE`, and
    /// nothing is freed.
    ///
    /// # Safety
    /// `handle` came from [`lock_handle::open`] (a `Box`), is given back
    /// once, and no thread but a lost callback uses it during or after this.
    pub unsafe fn close(handle: NonNull<lock_handle>) -> Result<lock_result, Failure> {
        // Reached through a shared reference until every other thread is out
        // of it: only then is it owned again, and freed.
        // SAFETY: live until the Box below is dropped, by the contract.
        let this = unsafe { handle.as_ref() };
        let mut claimed = this.claim_for_close()?;
        // Unregistered first, so that the exit handler cannot reach the
        // handle once it is freed; the watchdog is stopped after, without
        // the exit handler's list locked, since its lost callback may need
        // it.
        claimed.leave_release_at_exit();
        drop(claimed.watchdog().take());
        this.lost_callbacks.wait_unless_inside();
        let answer = claimed.release_for_close();
        // Claimed for good: the handle goes.
        std::mem::forget(claimed);
        // SAFETY: from Box::into_raw, by the contract; no other thread is in
        // it or can get in (the claim above is never given back).
        drop(unsafe { Box::from_raw(handle.as_ptr()) });
        answer
    }

    /// The claim `lock_close` makes, waiting while another thread of this
    /// process is in a call. One left by a thread of another process (the
    /// parent that forked while in a call) is taken over: nothing will
    /// give it back here.
    fn claim_for_close(&self) -> Result<Claimed<'_>, Failure> {
        let me = process_id();
        loop {
            match self.in_use.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(other) if other != me => {
                    if self.in_use.compare_exchange(other, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                        break;
                    }
                }
                // A caller of this process has it; if it is this very thread,
                // the close comes from a callback of that call.
                Err(_) if self.caller_thread.load(Ordering::Acquire) == thread_id() => {
                    return Err(self.in_use_failure());
                }
                Err(_) => std::thread::sleep(CLOSE_WAITS_FOR_A_CALL),
            }
        }
        self.caller_thread.store(thread_id(), Ordering::Release);
        Ok(Claimed { handle: self })
    }

    /// Exclusive access for one call. A second thread calling at the same
    /// moment gets `LOCK_ERR_HANDLE_IN_USE` instead of a data race.
    pub fn claim(&self) -> Result<Claimed<'_>, Failure> {
        self.in_use
            .compare_exchange(0, process_id(), Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| self.in_use_failure())?;
        self.caller_thread.store(thread_id(), Ordering::Release);
        Ok(Claimed { handle: self })
    }

    /// `LOCK_ERR_HANDLE_IN_USE`, with the lock's name.
    fn in_use_failure(&self) -> Failure {
        Failure::named(lock_result::LOCK_ERR_HANDLE_IN_USE, &self.name)
    }
}

/// One call's exclusive access to a handle; gives it back on drop.
pub struct Claimed<'a> {
    handle: &'a lock_handle,
}

impl Claimed<'_> {
    pub fn lock(&mut self) -> &mut Lock {
        // SAFETY: `claim` (or `claim_for_close`) swapped `in_use` from 0 to
        // this process's id, and it goes back to 0 only when this value
        // drops; another thread of this process finds it taken, and a child
        // of fork() has a copy of the handle, not this one. So no other
        // reference to the Lock exists while this one lives.
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

    /// Where the watchdogs' lost callbacks are counted ([`CallbackGate`]).
    pub(crate) fn lost_callbacks(&self) -> Arc<CallbackGate> {
        Arc::clone(&self.handle.lost_callbacks)
    }

    /// Stops the watchdog, waiting for its thread and for any lost callback
    /// still running on another thread, so that none runs once this returns.
    pub(crate) fn stop_watchdog(&mut self) {
        drop(self.watchdog().take());
        self.handle.lost_callbacks.wait_unless_inside();
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
    /// exit, and stops its watchdog (waiting for it, and for its callback).
    pub fn holds_nothing(&mut self) {
        self.stop_watchdog();
        self.leave_release_at_exit();
    }

    /// Unregisters the handle from the release at exit.
    fn leave_release_at_exit(&mut self) {
        // SAFETY: exclusive for the same reason as `lock`.
        drop(unsafe { &mut *self.handle.at_exit.get() }.take());
    }

    /// `lock_close`'s release of a lock this process holds, and its answer.
    fn release_for_close(&mut self) -> Result<lock_result, Failure> {
        let lock = self.lock();
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
        // The thread first: whoever sees the handle claimed next never sees
        // this thread as its caller.
        self.handle.caller_thread.store(0, Ordering::Release);
        self.handle.in_use.store(0, Ordering::Release);
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
        Err(lockcore::Error::Forked) => Err(lockcore::Error::Forked).at(claimed.lock()),
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

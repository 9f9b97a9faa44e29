//! Locks released at process exit: locks still held when the process exits
//! normally (return from `main`, `exit()`) are released then, as
//! LockFile::Simple's `autoclean` does, so that a program that exits
//! without releasing does not leave a lock for others to wait out. A killed
//! process cannot run this; there, stale-lock detection takes over.
//!
//! [`release_at_exit`] registers a [`Lock`] shared as `Arc<Mutex<Lock>>`.
//! [`register`] takes anything that implements [`ReleaseAtExit`], such as
//! a type that keeps a lock and its [`Watchdog`] together (the C interface
//! registers its handles this way). Either returns a [`Registration`]:
//! while it lives, the lock is released at exit; dropping it unregisters.
//!
//! At exit (an `atexit(3)` handler, installed by the first registration in
//! each process), every registered item first gives up its watchdog, which
//! is stopped and waited for; then each item is released. The list is locked only for
//! moments, or at exit; a `pthread_atfork(3)` handler keeps it usable in a
//! child of `fork()` whatever another thread was doing at the fork.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use lockcore::Lock;

use crate::Watchdog;

/// Something to release when the process exits normally.
///
/// Both methods are called only at exit, from the thread that exits, with
/// the list of registered items locked, and never once the item's
/// [`Registration`] has been dropped. They must not wait for another thread
/// (it may never run again): take what they need with a `try_lock`, or
/// leave the item alone. Nor may they drop a `Registration` or register
/// anything: the list is locked.
pub trait ReleaseAtExit: Send + Sync {
    /// First pass: hands over the watchdog renewing this lock, if any. It
    /// is stopped, and waited for, after the list is unlocked (its callback
    /// may need the list), and before any item is released.
    fn take_watchdog(&self) -> Option<Watchdog> {
        None
    }

    /// Second pass: releases the lock, if this process still holds it
    /// (see [`release_for_exit`]).
    fn release(&self);
}

/// While this lives, its item is released at exit. Dropping it unregisters
/// the item: once the drop has returned, the exit handler never calls the
/// item again (the drop waits while the handler uses the list).
#[must_use = "dropping the registration unregisters the lock at once"]
#[derive(Debug)]
pub struct Registration {
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // The item is dropped once the list is unlocked: if this was its
        // last reference, its own drop may need the list.
        let item = {
            let mut held = list();
            held.iter().position(|(id, _)| *id == self.id).map(|at| held.remove(at))
        };
        drop(item);
    }
}

/// Registers `item` to be released at exit, until the registration drops.
pub fn register(item: Arc<dyn ReleaseAtExit>) -> Registration {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    once_in_this_process(&AT_EXIT, || {
        // SAFETY: `release_all_at_exit` is an `extern "C" fn()` that never
        // unwinds (it catches panics). glibc runs it at exit, or when this
        // library is dlclose()d, since atexit is tied to the calling object.
        unsafe { libc::atexit(release_all_at_exit) };
    });
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    list().push((id, item));
    Registration { id }
}

/// Registers `lock` to be released at exit if this process still holds it
/// then, until the registration drops.
///
/// At exit the lock is taken with `try_lock`: one that another thread holds
/// at that moment is left alone, and runs out by its TTL or is broken as a
/// dead process's lock. Stop a [`Watchdog`] on it before the process exits,
/// or register a type that hands the watchdog over
/// ([`ReleaseAtExit::take_watchdog`]).
///
/// ```no_run
/// use std::sync::{Arc, Mutex};
/// use lockcore::Lock;
///
/// let lock = Arc::new(Mutex::new(Lock::open("lockfile:/srv/board/data.txt?ttl=30s")?));
/// let _registration = lockstd::release_at_exit(&lock);
/// lock.lock().unwrap().try_acquire()?;
/// // ... an early exit anywhere below still releases the lock:
/// std::process::exit(2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn release_at_exit(lock: &Arc<Mutex<Lock>>) -> Registration {
    register(Arc::clone(lock) as Arc<dyn ReleaseAtExit>)
}

impl ReleaseAtExit for Mutex<Lock> {
    fn release(&self) {
        let mut lock = match self.try_lock() {
            Ok(lock) => lock,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        release_for_exit(&mut lock);
    }
}

/// What [`ReleaseAtExit::release`] does with a lock: releases it if this
/// process holds it (not a parent before `fork()`), and writes to stderr
/// why a release failed: nobody is left to tell but the person reading the
/// process's errors. The lock then runs out by its TTL, or is broken as
/// this process's once it has exited.
pub fn release_for_exit(lock: &mut Lock) {
    if lock.held().is_none() {
        return;
    }
    match lock.release(Duration::ZERO) {
        // A lock its parent took is not this child's to release, nor a
        // failure to report.
        Ok(_) | Err(lockcore::Error::Forked) => {}
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "lockstd: at exit, a held lock could not be released: {}",
                lock.describe(&error)
            );
        }
    }
}

/// The registered items, by the id of their registration.
type Items = Vec<(u64, Arc<dyn ReleaseAtExit>)>;

/// The registered items. An item is removed under the mutex, so the exit
/// handler may use any item it finds listed while it holds the mutex.
static HELD: Mutex<Items> = Mutex::new(Vec::new());
/// The process that installed the exit handler, and the fork handlers, by
/// its incarnation (see [`once_in_this_process`]).
static AT_EXIT: AtomicU64 = AtomicU64::new(0);
static FORK_HOOKS: AtomicU64 = AtomicU64::new(0);

/// Runs `install` unless this process has run it to the end, and waits
/// for nobody. A `std::sync::Once` waits for the thread that runs it; in a
/// child of fork() that thread does not exist, and a child forked while
/// another thread was installing would wait forever. So two threads may
/// both install, and a child installs again what its parent had: the
/// handlers are made to run twice harmlessly. `done` holds the process
/// that finished the installation, as `lockcore::process_incarnation` names
/// it (kept, not asked of the kernel, and different in every child, even
/// one that has its parent's pid in a new pid namespace).
fn once_in_this_process(done: &AtomicU64, install: impl FnOnce()) {
    let me = lockcore::process_incarnation().unwrap_or_else(|| u64::from(std::process::id()) | 1 << 63);
    if done.load(Ordering::Acquire) != me {
        install();
        done.store(me, Ordering::Release);
    }
}

thread_local! {
    /// HELD, held by the thread that calls fork() from just before the fork
    /// until just after it, in the parent and in the child.
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, Items>>> =
        const { RefCell::new(None) };
}

/// The list, locked; the fork handlers are installed before anyone can
/// first take it.
fn list() -> MutexGuard<'static, Items> {
    install_fork_hooks();
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child of fork() has only the thread that forked: had another thread
/// held HELD at that instant, the child's copy would stay locked, and its
/// first registration or drop would wait forever. So the forking thread
/// takes HELD before the fork (no other thread holds it at the copy) and
/// gives it back on both sides after. HELD is only ever held for a few
/// instructions, or a release at exit, and never while a callback runs, so
/// the wait before a fork is short.
fn install_fork_hooks() {
    once_in_this_process(&FORK_HOOKS, || {
        // SAFETY: both handlers are `extern "C" fn()`s that never unwind
        // (they catch panics). pthread_atfork fails only without memory for
        // its list; then a fork stays as unsafe as it was without handlers.
        unsafe {
            libc::pthread_atfork(Some(take_held_before_fork), Some(give_back_after_fork), Some(give_back_after_fork))
        };
    });
}

extern "C" fn take_held_before_fork() {
    let _ = std::panic::catch_unwind(|| {
        // Without its locals (a thread that forks while it exits) the thread
        // cannot keep the guard, and forks without it. Installed twice, the
        // handler finds the guard taken already.
        let _ = HELD_ACROSS_FORK.try_with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.is_none() {
                *slot = Some(HELD.lock().unwrap_or_else(|e| e.into_inner()));
            }
        });
    });
}

/// Runs in the parent and in the child, on the thread that forked, which
/// is the one that took HELD (installed twice, the second finds nothing).
extern "C" fn give_back_after_fork() {
    let _ = std::panic::catch_unwind(|| {
        let _ = HELD_ACROSS_FORK.try_with(|slot| drop(slot.borrow_mut().take()));
    });
}

/// The list, or `None` after a short wait: another thread may hold it at the
/// moment exit() is called (and will never run again), and exit must not hang.
fn list_patiently() -> Option<MutexGuard<'static, Items>> {
    let give_up = Instant::now() + Duration::from_millis(100);
    loop {
        match HELD.try_lock() {
            Ok(held) => return Some(held),
            Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < give_up => std::thread::yield_now(),
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

extern "C" fn release_all_at_exit() {
    // Installed twice (see once_in_this_process), it runs once.
    static RAN: AtomicBool = AtomicBool::new(false);
    if RAN.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // First stop the watchdogs, waiting for them without the list: a
        // watchdog's callback may release another lock, which needs it.
        let mut watchdogs = Vec::new();
        if let Some(held) = list_patiently() {
            watchdogs.extend(held.iter().filter_map(|(_, item)| item.take_watchdog()));
        }
        drop(watchdogs);
        let Some(held) = list_patiently() else { return };
        for (_, item) in held.iter() {
            item.release();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Run to the end once per process: again in a child of fork(), even
    /// one forked while another thread was still installing, where a
    /// `Once` would wait forever for a thread the child does not have.
    #[test]
    fn an_installation_is_made_once_per_process_and_never_waited_for() {
        static DONE: AtomicU64 = AtomicU64::new(0);
        let mut runs = 0;
        once_in_this_process(&DONE, || runs += 1);
        once_in_this_process(&DONE, || runs += 1);
        assert_eq!(runs, 1, "once in this process");

        static STARTED: AtomicU64 = AtomicU64::new(0);
        let (inside, wait_inside) = mpsc::channel();
        let (leave, wait_leave) = mpsc::channel::<()>();
        let installer = std::thread::spawn(move || {
            once_in_this_process(&STARTED, || {
                inside.send(()).unwrap();
                wait_leave.recv().unwrap();
            })
        });
        wait_inside.recv().unwrap();
        // SAFETY: the child only calls once_in_this_process (atomics and a
        // cached incarnation), then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let mut ran = false;
            once_in_this_process(&STARTED, || ran = true);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ran { 0 } else { 1 }) };
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        let status = loop {
            let mut status = 0;
            // SAFETY: our own child; a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break status;
            }
            if Instant::now() > give_up {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child waited for an installation its parent's thread was making");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        leave.send(()).unwrap();
        installer.join().unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child installed: status {status}");
    }
}

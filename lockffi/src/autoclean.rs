//! Autoclean: locks still held when the process exits normally are released
//! (LockFile::Simple's `autoclean`), so a program that returns from `main`
//! or calls `exit()` without `lock_release` does not leave a lock behind for
//! others to wait out. A killed process cannot run this; there, stale-lock
//! detection takes over.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Mutex, MutexGuard, Once, TryLockError};
use std::time::{Duration, Instant};

use crate::handle::lock_handle;

/// Addresses of handles that hold their lock. A handle is removed under the
/// mutex before it is freed, so the exit hook may use any address it finds
/// listed while it holds the mutex.
static HELD: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();
static FORK_HOOKS: Once = Once::new();

thread_local! {
    /// HELD, held by the thread that calls fork() from just before the fork
    /// until just after it, in the parent and in the child.
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, Vec<usize>>>> = const { RefCell::new(None) };
}

/// Installs the fork handlers; called by `lock_open`, before any handle can
/// take HELD. A child of fork() has only the thread that forked: had another
/// thread held HELD at that instant, the child's copy would stay locked, and
/// its first `lock_close` would wait forever. So the forking thread takes
/// HELD before the fork (no other thread holds it at the copy) and gives it
/// back on both sides after. HELD is only ever held for a few instructions,
/// or a release at exit, and never while a callback runs, so the wait before
/// a fork is short.
pub fn install_fork_hooks() {
    FORK_HOOKS.call_once(|| {
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
        // cannot keep the guard, and forks without it.
        let _ = HELD_ACROSS_FORK.try_with(|slot| {
            *slot.borrow_mut() = Some(HELD.lock().unwrap_or_else(|e| e.into_inner()));
        });
    });
}

/// Runs in the parent and in the child, on the thread that forked, which
/// is the one that took HELD.
extern "C" fn give_back_after_fork() {
    let _ = std::panic::catch_unwind(|| {
        let _ = HELD_ACROSS_FORK.try_with(|slot| drop(slot.borrow_mut().take()));
    });
}

pub fn register(handle: usize) {
    HOOK.call_once(|| {
        // SAFETY: `release_all_at_exit` is an `extern "C" fn()` that never
        // unwinds (it catches panics). glibc runs it at exit, or when this
        // library is dlclose()d, since atexit is tied to the calling object.
        unsafe { libc::atexit(release_all_at_exit) };
    });
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if !held.contains(&handle) {
        held.push(handle);
    }
}

/// Forgets a handle; once this returns, the exit hook no longer reaches it.
pub fn unregister(handle: usize) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.retain(|&h| h != handle);
}

/// The list, or `None` after a short wait: another thread may hold it at the
/// moment exit() is called (and will never run again), and exit must not hang.
fn lock_held_patiently() -> Option<MutexGuard<'static, Vec<usize>>> {
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
    let _ = std::panic::catch_unwind(|| {
        // First stop the watchdogs, waiting for them without the list: a
        // watchdog's lost callback may release another handle, which needs it.
        let mut watchdogs = Vec::new();
        if let Some(held) = lock_held_patiently() {
            for &address in held.iter() {
                // SAFETY: listed, and the list is locked (see HELD).
                let handle = unsafe { &*(address as *const lock_handle) };
                if let Ok(mut claimed) = handle.claim() {
                    watchdogs.extend(claimed.watchdog().take());
                }
            }
        }
        drop(watchdogs);
        let Some(held) = lock_held_patiently() else { return };
        for &address in held.iter() {
            // SAFETY: listed, and the list is locked (see HELD).
            let handle = unsafe { &*(address as *const lock_handle) };
            // A handle busy in another thread is left alone, and so is one
            // whose owner started a new watchdog meanwhile (its lock runs out
            // by its TTL). The Lock also refuses to release a lock its
            // process did not take (fork).
            if let Ok(mut claimed) = handle.claim() {
                if claimed.watchdog().is_none() {
                    match claimed.lock().release(Duration::ZERO) {
                        // A lock its parent took is not this child's to
                        // release, nor a failure to report.
                        Ok(_) | Err(lockcore::Error::Forked) => {}
                        Err(error) => {
                            // Nobody is left to tell but the person reading the
                            // process's errors; the lock runs out by its TTL, or
                            // is broken as this process's once it has exited.
                            let lock = claimed.lock();
                            let _ = writeln!(
                                std::io::stderr(),
                                "lockffi: at exit, a held lock could not be released: {}",
                                lock.describe(&error)
                            );
                        }
                    }
                }
            }
        }
    });
}

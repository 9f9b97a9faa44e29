//! Autoclean: locks still held when the process exits normally are released
//! (LockFile::Simple's `autoclean`), so a program that returns from `main`
//! or calls `exit()` without `lock_release` does not leave a lock behind for
//! others to wait out. A killed process cannot run this; there, stale-lock
//! detection takes over.

use std::sync::{Mutex, Once, TryLockError};
use std::time::{Duration, Instant};

use crate::handle::lock_handle;

/// Addresses of handles that hold their lock. The mutex also keeps
/// `lock_close` from freeing a handle while the exit hook walks the list.
static HELD: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

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

pub fn unregister(handle: usize) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.retain(|&h| h != handle);
}

/// Runs `free` while no exit hook can be walking the list.
pub fn unregister_and(handle: usize, free: impl FnOnce()) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.retain(|&h| h != handle);
    free();
}

extern "C" fn release_all_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // Another thread may hold the list at the moment exit() is called
        // (and will never run again): wait briefly, then give up rather than hang.
        let give_up = Instant::now() + Duration::from_millis(100);
        let held = loop {
            match HELD.try_lock() {
                Ok(held) => break held,
                Err(TryLockError::Poisoned(e)) => break e.into_inner(),
                Err(TryLockError::WouldBlock) if Instant::now() < give_up => std::thread::yield_now(),
                Err(TryLockError::WouldBlock) => return,
            }
        };
        for &address in held.iter() {
            // SAFETY: addresses are registered only for live handles and
            // removed under this mutex before a handle is freed.
            let handle = unsafe { &*(address as *const lock_handle) };
            // A handle busy in another thread is left alone; the Lock also
            // refuses to release a lock its process did not take (fork).
            if let Ok(mut claimed) = handle.claim() {
                drop(claimed.watchdog().take());
                let _ = claimed.lock().release(Duration::ZERO);
            }
        }
    });
}

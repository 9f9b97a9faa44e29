//! Renewing a held lock from a thread: `lock_autorenew`,
//! `lock_autorenew_stop`.

use std::ffi::c_void;

use lockcore::Lock;

use crate::boundary::{ffi_export, Failure};
use crate::handle::lock_handle;
use crate::result::lock_result;
use crate::watchdog::{lock_lost_fn, Watchdog};

/// A thread that could not be made: `LOCK_ERR_SYSTEM`, with its errno.
fn no_thread(error: std::io::Error) -> Failure {
    Failure::Core(lockcore::Error::Os(lockcore::sys::Errno(error.raw_os_error().unwrap_or(libc::EAGAIN))))
}

/// Starts a watchdog thread that prolongs the held lock at once, then every
/// third of its spec's `ttl`, until the lock is released or the handle
/// closed. Each renewal sets the expiry to now + the spec's `ttl`, whatever
/// `ttl_ms` a `lock_prolong` gave before or meanwhile: a longer expiry set
/// that way is cut back to the spec's `ttl` at the next renewal.
///
/// If a renewal finds that someone else holds the lock, the watchdog calls
/// `lost` (if not NULL) once, from its own thread, with `context`, and
/// stops. `LOCK_ERR_NOT_HELD` without a held lock; `LOCK_ERR_UNSUPPORTED`
/// for a spec without `ttl` (nothing expires) and for `flock` (the kernel
/// holds it until release); `LOCK_ERR_SYSTEM`, with `errno` set, if no
/// thread can be made. Starting it again replaces the running one; a start
/// that fails leaves the running one running.
///
/// # Safety
/// `handle` is NULL or a live handle. `lost` and `context` must be usable
/// from another thread until the watchdog stops: once `lock_close` or
/// `lock_autorenew_stop` on this handle has returned, or `lock_autorenew`
/// has answered `LOCK_OK` again, or `lock_release`, `lock_prolong` or
/// `lock_commit` has left the handle holding nothing, the callback is not
/// running (unless it made that call itself) and is never called again.
/// Made from another thread, each of these calls, and `exit()`, waits for a
/// running callback to return: the callback must not wait for a thread
/// that may be making one of them.
///
/// The callback runs on the watchdog's own thread, never the caller's, and
/// must not unwind or longjmp out of it. It may make any `lock_*` call on
/// any handle, this one included. One of its own calls that stops this
/// watchdog does not wait for it: the thread ends when the callback returns
/// and touches the handle no more, so the callback may even close the
/// handle, if no other thread uses it during or after that, as `lock_close`
/// requires. A call on this handle while another thread is in a call on it
/// answers `LOCK_ERR_HANDLE_IN_USE`.
#[no_mangle]
pub unsafe extern "C" fn lock_autorenew(
    handle: *mut lock_handle,
    lost: lock_lost_fn,
    context: *mut c_void,
) -> lock_result {
    ffi_export!(lock_autorenew, claim(handle), |claimed| {
        let lock = claimed.lock();
        let held = *lock.held().ok_or(Failure::Code(lock_result::LOCK_ERR_NOT_HELD))?;
        let spec = lock.spec().clone();
        let ttl = match (spec.scheme, spec.options.ttl) {
            (lockcore::Scheme::Flock, _) | (_, None) => return Err(Failure::Code(lock_result::LOCK_ERR_UNSUPPORTED)),
            (_, Some(ttl)) => ttl,
        };
        let shadow = Lock::adopt(spec, held)?;
        // The new thread first: a call that fails, here too, leaves a
        // running watchdog running. Then the old one stops (and is waited
        // for) before the new one renews, so the two never overlap.
        let watchdog = Watchdog::spawn(shadow, ttl / 3, lost, context).map_err(no_thread)?;
        drop(claimed.watchdog().replace(watchdog));
        if let Some(watchdog) = claimed.watchdog() {
            watchdog.start();
        }
        Ok(lock_result::LOCK_OK)
    })
}

/// Stops the watchdog started by `lock_autorenew`, waiting for it, so that
/// no renewal runs after this returns. The lock stays held.
///
/// # Safety
/// `handle` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lock_autorenew_stop(handle: *mut lock_handle) -> lock_result {
    ffi_export!(lock_autorenew_stop, claim(handle), |claimed| {
        drop(claimed.watchdog().take());
        Ok(lock_result::LOCK_OK)
    })
}

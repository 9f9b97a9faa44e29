//! Renewing a held lock from a thread: `lock_autorenew`,
//! `lock_autorenew_stop`.

use std::ffi::c_void;

use lockcore::Lock;
use lockstd::{Lapse, StartError, Watchdog};

use crate::boundary::{ffi_export, Failure};
use crate::handle::lock_handle;
use crate::result::lock_result;

/// Called once, from the watchdog's thread, when the watchdog finds that
/// someone else holds the lock; the watchdog stops afterwards. What it may
/// call, on its own handle too, is in `lock_autorenew`.
#[allow(non_camel_case_types)]
pub type lock_lost_fn = Option<unsafe extern "C" fn(context: *mut c_void)>;

/// The C callback and its context, moved to the watchdog's thread.
struct LostCallback {
    callback: unsafe extern "C" fn(*mut c_void),
    context: *mut c_void,
}

// SAFETY: lock_autorenew's contract makes the caller responsible for the
// callback and its context being usable from the watchdog thread.
unsafe impl Send for LostCallback {}

/// Why a watchdog could not start for `lock`, as a failure of
/// `lock_autorenew`, whose message names the lock and the cause.
fn not_started(lock: &Lock, error: StartError) -> Failure {
    let said = |code, why: &str| Failure::Located { code, errno: None, text: format!("{}: {why}", lock.name()) };
    match error {
        StartError::NotHeld => said(lock_result::LOCK_ERR_NOT_HELD, "the lock is not held by this handle"),
        StartError::NeverExpires if lock.spec().options.ttl.is_none() => said(
            lock_result::LOCK_ERR_UNSUPPORTED,
            "a lock without a ttl never expires: there is nothing to renew (give the spec a ttl)",
        ),
        StartError::NeverExpires => said(
            lock_result::LOCK_ERR_UNSUPPORTED,
            "a flock lock is held by the kernel until it is released: there is nothing to renew",
        ),
        StartError::Lock(error) => Failure::Core(error),
        // A thread that could not be made: `LOCK_ERR_SYSTEM`, with its errno.
        StartError::Thread(error) => {
            Failure::Core(lockcore::Error::Os(lockcore::Errno(error.raw_os_error().unwrap_or(libc::EAGAIN))))
        }
    }
}

/// Starts a watchdog thread that prolongs the held lock at once, then every
/// third of its spec's `ttl`, until the lock is released or the handle
/// closed. Each renewal sets the expiry to now + the spec's `ttl`, whatever
/// `ttl_ms` a `lock_prolong` gave before or meanwhile: a longer expiry set
/// that way is cut back to the spec's `ttl` at the next renewal. A renewal
/// waits at most a quarter of a second for the lock's guard or server; one
/// that fails is tried again a tenth of a second later (or at the next
/// third of the `ttl`, if sooner). A call on the handle that stops or
/// pauses the watchdog waits for a renewal under way, so no longer than
/// that; `lock_release` counts that wait in its 2 seconds.
///
/// If a renewal finds that someone else holds the lock, the watchdog calls
/// `lost` (if not NULL) once, from its own thread, with `context`, and
/// stops. `LOCK_ERR_NOT_HELD` without a held lock; `LOCK_ERR_UNSUPPORTED`
/// for a spec without `ttl` (nothing expires) and for `flock` (the kernel
/// holds it until release); `LOCK_ERR_SYSTEM`, with `errno` set, if no
/// thread can be made. Starting it again replaces the running one; a start
/// that fails leaves the running one running.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_NOT_HELD`,
/// `LOCK_ERR_FORKED`, `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_SYSTEM`, `LOCK_ERR_PANIC`.
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
        let lost = lost.map(|callback| LostCallback { callback, context });
        let gate = claimed.lost_callbacks();
        // The C callback hears of a lost lock only: an expired one is held
        // again, and goes on being renewed.
        let on_lapse = move |lapse| {
            if let (Lapse::Lost, Some(lost)) = (lapse, &lost) {
                // SAFETY: lock_autorenew's contract: the callback may be
                // called from the watchdog's thread with its context, once:
                // the watchdog stops after a lost lock.
                gate.run(|| unsafe { (lost.callback)(lost.context) });
            }
        };
        // The new thread first: a call that fails, here too, leaves a
        // running watchdog running. Then the old one stops (and is waited
        // for) before the new one renews, so the two never overlap.
        let watchdog = Watchdog::paused(claimed.lock(), on_lapse).map_err(|e| not_started(claimed.lock(), e))?;
        claimed.stop_watchdog();
        let watchdog = claimed.watchdog().insert(watchdog);
        watchdog.resume();
        Ok(lock_result::LOCK_OK)
    })
}

/// Stops the watchdog started by `lock_autorenew`, waiting for it, so that
/// no renewal runs after this returns. The lock stays held.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lock_autorenew_stop(handle: *mut lock_handle) -> lock_result {
    ffi_export!(lock_autorenew_stop, claim(handle), |claimed| {
        claimed.stop_watchdog();
        Ok(lock_result::LOCK_OK)
    })
}

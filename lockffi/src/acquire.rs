//! Holding a lock: `lock_try_acquire`, `lock_acquire`, `lock_release`,
//! `lock_prolong`, `lock_took_over`.

use std::time::Duration;

use std::fmt::Write;

use crate::boundary::{duration_arg, ffi_export, while_waiting_say, write_optional, AtLock};
use crate::handle::lock_handle;
use crate::inspect::{describe_holder, NOBODY};
use crate::result::lock_result;
use crate::types::{lock_info, LOCK_WAIT_FOREVER};

/// One attempt to take the lock, returning within a tenth of a second
/// whatever other processes do. `LOCK_BUSY` if someone else holds it, it is
/// cooling down, or its guard stayed held by another process for 50 ms
/// (the message says which, and names the holder). On `LOCK_OK`,
/// `*fence_out` (if not NULL) receives the fencing token: greater than that
/// of every earlier acquisition of this lock.
///
/// Returns: `LOCK_OK`, `LOCK_BUSY`, `LOCK_ERR_NULL_ARGUMENT`,
/// `LOCK_ERR_ALREADY_HELD`, `LOCK_ERR_FORKED`, `LOCK_ERR_HANDLE_IN_USE`,
/// `LOCK_ERR_UNSUPPORTED`, `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`,
/// `LOCK_ERR_PERMISSION`, `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`,
/// `LOCK_ERR_CORRUPT_RECORD`, `LOCK_ERR_RECORD_TOO_LONG`,
/// `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`, `LOCK_ERR_NOT_A_DIRECTORY`,
/// `LOCK_ERR_UNTRUSTED`, `LOCK_ERR_SERVER_UNKNOWN_HOST`,
/// `LOCK_ERR_SERVER_UNREACHABLE`, `LOCK_ERR_SERVER_NO_ANSWER`,
/// `LOCK_ERR_SERVER_DISCONNECTED`, `LOCK_ERR_SERVER_AUTH`,
/// `LOCK_ERR_SERVER_NOT_READY`, `LOCK_ERR_SERVER_READ_ONLY`,
/// `LOCK_ERR_SERVER_NO_WRITES`, `LOCK_ERR_SERVER_REFUSED`,
/// `LOCK_ERR_SERVER_FOREIGN_KEYS`, `LOCK_ERR_SERVER_PROTOCOL`,
/// `LOCK_ERR_SERVER_NOT_REPLICATED`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`; `fence_out` is NULL or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_try_acquire(handle: *mut lock_handle, fence_out: *mut u64) -> lock_result {
    ffi_export!(lock_try_acquire, claim(handle), |claimed| {
        let acquired = {
            let result = claimed.lock().try_acquire();
            result.at(claimed.lock())?
        };
        claimed.release_at_exit();
        write_optional(fence_out, acquired.fence);
        Ok(lock_result::LOCK_OK)
    })
}

/// Takes the lock, waiting at most `timeout_ms` milliseconds
/// (`LOCK_WAIT_FOREVER`: no limit; 0: one attempt, like `lock_try_acquire`
/// but answering `LOCK_TIMEOUT`). The wait is a deadline on the monotonic
/// clock, which every wait inside it (for the lock's guard too) keeps. On a
/// local file system, waiters take turns first come, first served (`fair=1`,
/// the default), each woken when its turn comes; a release by a tool outside
/// the library wakes them too (inotify). The warning callback, if set, is
/// called after `wmin` and every `wafter`; the cancel callback, if set, can
/// give the wait up (`LOCK_CANCELLED`). On `LOCK_TIMEOUT` the message names
/// what stood in the way at the end: the holder (pid, host, since, expiry),
/// a cooldown, the queue ahead, or a guard held too long.
///
/// Returns: `LOCK_OK`, `LOCK_TIMEOUT`, `LOCK_CANCELLED`,
/// `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_ALREADY_HELD`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`, `LOCK_ERR_PATH_TOO_LONG`,
/// `LOCK_ERR_NOT_FOUND`, `LOCK_ERR_PERMISSION`, `LOCK_ERR_SYMLINK`,
/// `LOCK_ERR_NOT_A_LOCK`, `LOCK_ERR_CORRUPT_RECORD`,
/// `LOCK_ERR_RECORD_TOO_LONG`, `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`,
/// `LOCK_ERR_NOT_A_DIRECTORY`, `LOCK_ERR_UNTRUSTED`,
/// `LOCK_ERR_SERVER_UNKNOWN_HOST`, `LOCK_ERR_SERVER_UNREACHABLE`,
/// `LOCK_ERR_SERVER_NO_ANSWER`, `LOCK_ERR_SERVER_DISCONNECTED`,
/// `LOCK_ERR_SERVER_AUTH`, `LOCK_ERR_SERVER_NOT_READY`,
/// `LOCK_ERR_SERVER_READ_ONLY`, `LOCK_ERR_SERVER_NO_WRITES`,
/// `LOCK_ERR_SERVER_REFUSED`, `LOCK_ERR_SERVER_FOREIGN_KEYS`,
/// `LOCK_ERR_SERVER_PROTOCOL`, `LOCK_ERR_SERVER_NOT_REPLICATED`,
/// `LOCK_ERR_PANIC`.
///
/// # Safety
/// As for `lock_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn lock_acquire(handle: *mut lock_handle, timeout_ms: u64, fence_out: *mut u64) -> lock_result {
    ffi_export!(lock_acquire, claim(handle), |claimed| {
        let budget = (timeout_ms != LOCK_WAIT_FOREVER).then(|| Duration::from_millis(timeout_ms));
        let (warning, cancel) = (*claimed.warning(), *claimed.cancel());
        let name = warning.map(|_| claimed.lock().name().to_string());
        let mut notify = |waited: Duration, why: &lockcore::Contention| {
            if let (Some(w), Some(name)) = (warning, name.as_deref()) {
                let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                // What the callback may read with lock_last_error_message().
                while_waiting_say(
                    |m| write!(m, "lock_acquire: {name}: waited {waited_ms} ms so far: {why}"),
                    || {
                        // SAFETY: lock_set_warning's contract: the callback and
                        // its context stay valid while the handle may call them.
                        unsafe { (w.callback)(w.context, waited_ms) }
                    },
                );
            }
        };
        let warn: Option<&mut lockcore::wait::Notify<'_>> = if warning.is_some() { Some(&mut notify) } else { None };
        let mut cancelled = || match cancel {
            // SAFETY: lock_set_cancel's contract, as lock_set_warning's.
            Some(c) => unsafe { (c.callback)(c.context) },
            None => false,
        };
        let acquired = {
            let result = claimed.lock().acquire_cancellable(budget, warn, &mut cancelled);
            result.at(claimed.lock())?
        };
        claimed.release_at_exit();
        write_optional(fence_out, acquired.fence);
        Ok(lock_result::LOCK_OK)
    })
}

/// Releases the lock. A non-zero `cooldown_ms` keeps it closed to everyone
/// for that long (at most 100 years: `LOCK_ERR_INVALID_ARGUMENT` beyond).
/// Returns `LOCK_OK`, `LOCK_EXPIRED` (held past its TTL; nobody took it;
/// released now) or `LOCK_LOST` (someone else holds it; nothing removed).
/// After any of these the handle holds nothing, and its watchdog, if any,
/// is stopped: no renewal runs after a release that succeeded. `LOCK_BUSY`
/// if the lock's guard stayed locked by another process for 2 seconds (see
/// `LOCK_BUSY`). A release that answers `LOCK_BUSY` or an error leaves the
/// lock held, and renewed as before by its watchdog, if any.
///
/// Returns: `LOCK_OK`, `LOCK_EXPIRED`, `LOCK_LOST`, `LOCK_BUSY`,
/// `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_NOT_HELD`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_INVALID_ARGUMENT`, `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`,
/// `LOCK_ERR_PERMISSION`, `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`,
/// `LOCK_ERR_CORRUPT_RECORD`, `LOCK_ERR_RECORD_TOO_LONG`,
/// `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`, `LOCK_ERR_NOT_A_DIRECTORY`,
/// `LOCK_ERR_UNTRUSTED`, `LOCK_ERR_SERVER_UNKNOWN_HOST`,
/// `LOCK_ERR_SERVER_UNREACHABLE`, `LOCK_ERR_SERVER_NO_ANSWER`,
/// `LOCK_ERR_SERVER_DISCONNECTED`, `LOCK_ERR_SERVER_AUTH`,
/// `LOCK_ERR_SERVER_NOT_READY`, `LOCK_ERR_SERVER_READ_ONLY`,
/// `LOCK_ERR_SERVER_NO_WRITES`, `LOCK_ERR_SERVER_REFUSED`,
/// `LOCK_ERR_SERVER_FOREIGN_KEYS`, `LOCK_ERR_SERVER_PROTOCOL`,
/// `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`.
#[no_mangle]
pub unsafe extern "C" fn lock_release(handle: *mut lock_handle, cooldown_ms: u64) -> lock_result {
    ffi_export!(lock_release, claim(handle), |claimed| {
        let cooldown = duration_arg(claimed.lock(), "cooldown_ms", cooldown_ms)?;
        // No renewal may run during or after the release; but the watchdog is
        // only paused until the release is known to have happened: one that
        // fails with an error leaves the lock held, to be renewed as before.
        // The wait for a renewal under way counts against the release's own
        // patience, so that the call keeps its deadline.
        let started = std::time::Instant::now();
        if let Some(watchdog) = claimed.watchdog() {
            watchdog.pause();
        }
        let patience = lockcore::CHANGE_PATIENCE.saturating_sub(started.elapsed());
        let released = claimed.lock().release_within(cooldown, patience);
        let outcome = match released.at(claimed.lock()) {
            Ok(outcome) => outcome,
            Err(failure) => {
                if let Some(watchdog) = claimed.watchdog() {
                    watchdog.resume();
                }
                return Err(failure);
            }
        };
        claimed.holds_nothing();
        Ok(outcome.into())
    })
}

/// Moves the expiry to now + `ttl_ms` (0: the spec's `ttl`; without one, the
/// lock no longer expires; at most 100 years: `LOCK_ERR_INVALID_ARGUMENT`
/// beyond). Returns `LOCK_OK`, `LOCK_EXPIRED` (it had run out but nobody
/// took it; held again now) or `LOCK_LOST` (someone else holds it; the
/// handle holds nothing, and its watchdog, if any, is stopped). While a
/// watchdog runs (`lock_autorenew`), its next renewal sets the expiry back
/// to now + the spec's `ttl`. `LOCK_BUSY` if the lock's files stayed locked
/// by another process for 2 seconds (nothing changed; see `LOCK_BUSY`).
///
/// Returns: `LOCK_OK`, `LOCK_EXPIRED`, `LOCK_LOST`, `LOCK_BUSY`,
/// `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_NOT_HELD`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_INVALID_ARGUMENT`, `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`,
/// `LOCK_ERR_PERMISSION`, `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`,
/// `LOCK_ERR_CORRUPT_RECORD`, `LOCK_ERR_RECORD_TOO_LONG`,
/// `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`, `LOCK_ERR_NOT_A_DIRECTORY`,
/// `LOCK_ERR_UNTRUSTED`, `LOCK_ERR_SERVER_UNKNOWN_HOST`,
/// `LOCK_ERR_SERVER_UNREACHABLE`, `LOCK_ERR_SERVER_NO_ANSWER`,
/// `LOCK_ERR_SERVER_DISCONNECTED`, `LOCK_ERR_SERVER_AUTH`,
/// `LOCK_ERR_SERVER_NOT_READY`, `LOCK_ERR_SERVER_READ_ONLY`,
/// `LOCK_ERR_SERVER_NO_WRITES`, `LOCK_ERR_SERVER_REFUSED`,
/// `LOCK_ERR_SERVER_FOREIGN_KEYS`, `LOCK_ERR_SERVER_PROTOCOL`,
/// `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`.
#[no_mangle]
pub unsafe extern "C" fn lock_prolong(handle: *mut lock_handle, ttl_ms: u64) -> lock_result {
    ffi_export!(lock_prolong, claim(handle), |claimed| {
        let ttl = if ttl_ms == 0 { None } else { Some(duration_arg(claimed.lock(), "ttl_ms", ttl_ms)?) };
        let outcome = {
            let result = claimed.lock().prolong(ttl);
            result.at(claimed.lock())?
        };
        if outcome == lockcore::ProlongOutcome::Lost {
            // The watchdog renews the acquisition that is gone; left running,
            // it would report the next one lost and stop.
            claimed.holds_nothing();
        }
        Ok(outcome.into())
    })
}

/// Whether the acquisition the handle holds took the lock over from a
/// holder that had died holding it or run past its expiry (`flock`: or let
/// go without a release, or had its file deleted under it), and who that
/// was: like a robust mutex's `EOWNERDEAD`, a sign that what the lock
/// protects may have been left half-done. On `LOCK_OK`, `*previous_out`
/// describes that holder, in `lock_inspect`'s fields, as the lock was
/// judged when it was broken (`held` and `stale` true; `owner_liveness`
/// `LOCK_OWNER_DEAD` for one that died), or is all zero (`held` false) if
/// the lock was free.
/// `last_fence`, `cooldown_until_unix_ms` and `queue_length` are always 0.
/// It reads no file and asks no server. `redis` cannot tell of a holder
/// whose record the server lost (restarted without its data, flushed): it
/// answers `held` false.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_NOT_HELD`,
/// `LOCK_ERR_FORKED`, `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle; `previous_out` is NULL or valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn lock_took_over(handle: *mut lock_handle, previous_out: *mut lock_info) -> lock_result {
    ffi_export!(lock_took_over, claim(handle), required(previous_out), |claimed| {
        let lock = claimed.lock();
        if lock.held().is_none() {
            return Err(lockcore::Error::NotHeld).at(lock);
        }
        let mut previous = NOBODY;
        if let Some(holder) = lock.took_over_from() {
            describe_holder(&mut previous, holder);
        }
        write_optional(previous_out, previous);
        Ok(lock_result::LOCK_OK)
    })
}

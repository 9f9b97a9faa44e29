//! # lockffi: the C interface of the lock library
//!
//! Built as `liblockffi.so` and `liblockffi.a`; the header is
//! `include/lockffi.h`, generated from this crate by cbindgen.
//!
//! ## API conventions
//! * Every function but `lock_version`, `lock_strerror`, `lock_close` and
//!   `lock_last_error_message` returns a `lock_result`. Codes below 100 are
//!   outcomes (`LOCK_OK`, `LOCK_EXPIRED`, `LOCK_LOST`, `LOCK_BUSY`,
//!   `LOCK_TIMEOUT`); 100 and above are errors. Numbers never change and are
//!   never reused. `lock_strerror` gives static text;
//!   `lock_last_error_message` the detail of this thread's last failing call
//!   (for a spec error: which key, and why).
//! * Arguments: the handle first, then inputs, then outputs. Outputs are
//!   written only when the call returns `LOCK_OK` (or, for release and
//!   prolong, any outcome below 100). Optional outputs may be NULL.
//! * `lock_open` / `lock_close` pair: the caller owns the handle between them.
//! * No call panics into C, and no input makes one misbehave: NULL pointers
//!   give `LOCK_ERR_NULL_ARGUMENT`, unknown result codes get a text.
//! * Threads: a handle may be used from any thread, one call at a time; a
//!   concurrent second call gets `LOCK_ERR_HANDLE_IN_USE`. Separate handles
//!   are independent, even for the same lock: they exclude each other as two
//!   processes would.
//! * fork(): a lock held before fork() belongs to the parent. In the child,
//!   every call on that handle but `lock_close` answers `LOCK_ERR_FORKED`
//!   whatever its other arguments, and `lock_close` frees it without
//!   releasing the parent's lock. A child may acquire with a handle that held
//!   nothing at fork time.
//! * Exit: locks still held at normal process exit (return from `main`,
//!   `exit()`) are released. A killed process's lock is stale at once for
//!   same-host processes (`stale=pid`, the default), or after its TTL.
//! * ABI stability: the functions, the result numbers and the layout of
//!   `lock_info` are stable within a major version; `lock_handle` is opaque.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

mod autoclean;
mod boundary;
mod handle;
mod result;
mod watchdog;

use std::ffi::{c_char, c_void, CStr};
use std::time::Duration;

use lockcore::{Liveness, Lock, WallTime};

use crate::boundary::{try_ref, write_optional, AtLock, Failure};
pub use crate::handle::{lock_handle, lock_warning_fn};
use crate::handle::{Claimed, Warning};
pub use crate::result::lock_result;
pub use crate::watchdog::lock_lost_fn;
use crate::watchdog::Watchdog;

/// Major version of this library; matches the crate version.
pub const LOCKFFI_VERSION_MAJOR: u32 = 0;
/// Minor version of this library.
pub const LOCKFFI_VERSION_MINOR: u32 = 1;
/// Patch version of this library.
pub const LOCKFFI_VERSION_PATCH: u32 = 0;

/// Pass as `timeout_ms` to `lock_acquire` to wait as long as it takes.
pub const LOCK_WAIT_FOREVER: u64 = u64::MAX;

/// The longest TTL or cooldown a call accepts: 100 years, as the spec's
/// `ttl` (a longer one is a mistake, and keeps time sums far from overflow).
const LONGEST_DURATION_MS: u64 = 100 * 365 * 86_400_000;

/// A TTL or cooldown argument, refused with `LOCK_ERR_INVALID_ARGUMENT`
/// beyond 100 years.
fn duration_arg(ms: u64) -> Result<Duration, Failure> {
    if ms > LONGEST_DURATION_MS {
        return Err(Failure::Code(lock_result::LOCK_ERR_INVALID_ARGUMENT));
    }
    Ok(Duration::from_millis(ms))
}

/// Claims the handle for one call, then answers `LOCK_ERR_FORKED` if it
/// holds a lock its process did not take: a parent's, inherited through
/// fork(). The core refuses every operation on such a lock, but only after
/// the call has judged its other arguments, and some calls touch no lock
/// file at all (`lock_autorenew_stop`, `lock_set_warning`, `lock_path`).
/// Every call but `lock_close` starts here, before it looks at any other
/// argument, so that an inherited handle gets one answer whatever else is
/// wrong with the call.
fn claim_own(handle: &lock_handle) -> Result<Claimed<'_>, Failure> {
    let mut claimed = handle.claim()?;
    match claimed.lock().held() {
        Some(held) if held.owner.process.pid != std::process::id() as i32 => {
            Err(Failure::Core(lockcore::Error::Forked))
        }
        _ => Ok(claimed),
    }
}

/// A thread that could not be made: `LOCK_ERR_SYSTEM`, with its errno.
fn no_thread(error: std::io::Error) -> Failure {
    Failure::Core(lockcore::Error::Os(lockcore::Errno(error.raw_os_error().unwrap_or(libc::EAGAIN))))
}

/// Size of `lock_info.owner_host`, terminator included.
pub const LOCK_HOST_CAPACITY: usize = 65;

/// Whether a lock's holder is alive, as far as this host can prove.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lock_liveness {
    /// On another host or boot, or not decidable: never treated as dead.
    LOCK_OWNER_UNKNOWN = 0,
    /// Same host and boot, and the process (pid and start time) exists.
    LOCK_OWNER_ALIVE = 1,
    /// Same host and boot, and the process is gone, a zombie, or its pid reused.
    LOCK_OWNER_DEAD = 2,
}

/// The state of a lock, as `lock_inspect` reads it without taking it.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct lock_info {
    /// Whether anyone holds the lock.
    pub held: bool,
    /// Whether the holder is the handle that was inspected.
    pub held_by_this_handle: bool,
    /// Whether the next acquirer would break the lock (expired, or dead owner).
    pub stale: bool,
    /// The holder's liveness.
    pub owner_liveness: lock_liveness,
    /// The holder's pid; 0 if unknown or free.
    pub owner_pid: i32,
    /// The holder's host name, NUL-terminated; empty if unknown or free.
    pub owner_host: [c_char; LOCK_HOST_CAPACITY],
    /// The holder's fencing token; 0 if free or held by a foreign program.
    pub fence: u64,
    /// The last fencing token handed out for this lock.
    pub last_fence: u64,
    /// When the holder's TTL runs out (others may break the lock), in Unix
    /// milliseconds; 0 for never or unknown.
    pub expires_unix_ms: i64,
    /// The lock stays closed until then (Unix milliseconds); 0 for no cooldown.
    pub cooldown_until_unix_ms: i64,
    /// Requests queued, the holder's included, for a queueing strategy
    /// (`toplock`); 0 for the others.
    pub queue_length: u32,
    /// When the holder took the lock (for a lock of another program: when
    /// its file was last written), in Unix milliseconds; 0 if unknown or free.
    pub since_unix_ms: i64,
}

/// The library's version as "MAJOR.MINOR.PATCH"; static, never NULL.
#[no_mangle]
pub extern "C" fn lock_version() -> *const c_char {
    const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };
    VERSION.as_ptr()
}

/// Static text for a result code; never NULL, also for unknown codes.
/// Takes an int so that any value, even one no enum member has, is safe.
#[no_mangle]
pub extern "C" fn lock_strerror(code: i32) -> *const c_char {
    lock_result::ALL.iter().find(|&&c| c as i32 == code).map_or(c"unknown lock result code", |c| c.text()).as_ptr()
}

/// Copies a description of this thread's last failing `lock_*` call into
/// `buf` (NUL-terminated, cut to fit `buf_len`) and returns the description's
/// full length. With `buf` NULL or `buf_len` 0 it only returns the length.
/// Empty after a call that succeeded.
///
/// # Safety
/// `buf` is NULL or valid for `buf_len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn lock_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    std::panic::catch_unwind(|| boundary::copy_last_message(buf, buf_len)).unwrap_or(0)
}

/// Parses `spec` (`scheme:target?key=value&...`) and makes a handle for the
/// lock it names. No file is touched until the handle is used.
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string; `handle_out` is NULL or valid
/// for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_open(spec: *const c_char, handle_out: *mut *mut lock_handle) -> lock_result {
    boundary::call("lock_open", || {
        if spec.is_null() || handle_out.is_null() {
            return Err(Failure::Code(lock_result::LOCK_ERR_NULL_ARGUMENT));
        }
        autoclean::install_fork_hooks();
        // SAFETY: non-NULL and NUL-terminated by the contract above.
        let spec = unsafe { CStr::from_ptr(spec) };
        let lock = Lock::open(spec.to_bytes())?;
        let handle = Box::into_raw(Box::new(lock_handle::new(lock)));
        // SAFETY: checked non-NULL above, valid for a write by contract.
        unsafe { handle_out.write(handle) };
        Ok(lock_result::LOCK_OK)
    })
}

/// Releases the lock if this process holds it (no cooldown), stops its
/// watchdog, and frees the handle, and says how the release went: `LOCK_OK`
/// (released, or nothing was held), `LOCK_EXPIRED`, `LOCK_LOST`, or the
/// error of a release that failed (`LOCK_BUSY` when the lock's guard stayed
/// locked by another process for 2 seconds, with a message as for
/// `lock_release`). The handle is freed whatever it answers; a lock it could
/// not release runs out by its TTL, or is broken as a dead process's once
/// this process has exited. NULL is ignored (`LOCK_OK`). In a child of
/// fork() the parent's lock is left held.
///
/// # Safety
/// `handle` is NULL or came from `lock_open` and was not closed yet; no other
/// thread uses it during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lock_close(handle: *mut lock_handle) -> lock_result {
    if handle.is_null() {
        return lock_result::LOCK_OK;
    }
    boundary::call("lock_close", || {
        // Unlisted first, so that the exit hook cannot reach the handle once
        // it is freed; freed without the list locked, because stopping its
        // watchdog waits for it, and its lost callback may need the list.
        autoclean::unregister(handle as usize);
        // SAFETY: by contract the pointer came from Box::into_raw in
        // lock_open and is freed exactly once, here.
        let owned = unsafe { Box::from_raw(handle) };
        owned.close()
    })
}

/// One attempt to take the lock, returning within a tenth of a second
/// whatever other processes do. `LOCK_BUSY` if someone else holds it, it is
/// cooling down, or its guard stayed held by another process for 50 ms
/// (the message says which, and names the holder). On `LOCK_OK`,
/// `*fence_out` (if not NULL) receives the fencing token: greater than that
/// of every earlier acquisition of this lock.
///
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`; `fence_out` is NULL or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_try_acquire(handle: *mut lock_handle, fence_out: *mut u64) -> lock_result {
    boundary::call("lock_try_acquire", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let acquired = {
            let result = claimed.lock().try_acquire();
            result.at(claimed.lock())?
        };
        autoclean::register(claimed.address());
        write_optional(fence_out, acquired.fence);
        Ok(lock_result::LOCK_OK)
    })
}

/// Takes the lock, waiting at most `timeout_ms` milliseconds
/// (`LOCK_WAIT_FOREVER`: no limit; 0: one attempt, like `lock_try_acquire`
/// but answering `LOCK_TIMEOUT`). The wait is a deadline on the monotonic
/// clock, which every wait inside it (for the lock's guard too) keeps, with
/// jittered exponential backoff between attempts; the warning callback, if
/// set, is called after `wmin` and every `wafter`. On `LOCK_TIMEOUT` the
/// message names what stood in the way at the end: the holder (pid, host,
/// since, expiry), a cooldown, the queue ahead, or a guard held too long.
///
/// # Safety
/// As for `lock_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn lock_acquire(handle: *mut lock_handle, timeout_ms: u64, fence_out: *mut u64) -> lock_result {
    boundary::call("lock_acquire", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let budget = (timeout_ms != LOCK_WAIT_FOREVER).then(|| Duration::from_millis(timeout_ms));
        let warning = *claimed.warning();
        let mut notify = |waited: Duration| {
            if let Some(w) = warning {
                let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                // SAFETY: lock_set_warning's contract: the callback and its
                // context stay valid while the handle may call them.
                unsafe { (w.callback)(w.context, waited_ms) };
            }
        };
        let warn: Option<&mut dyn FnMut(Duration)> = if warning.is_some() { Some(&mut notify) } else { None };
        let acquired = {
            let result = claimed.lock().acquire_with(budget, &mut lockcore::wait::Sleep, warn);
            result.at(claimed.lock())?
        };
        autoclean::register(claimed.address());
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
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`.
#[no_mangle]
pub unsafe extern "C" fn lock_release(handle: *mut lock_handle, cooldown_ms: u64) -> lock_result {
    boundary::call("lock_release", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let cooldown = duration_arg(cooldown_ms)?;
        // No renewal may run during or after the release; but the watchdog is
        // only paused until the release is known to have happened: one that
        // fails with an error leaves the lock held, to be renewed as before.
        if let Some(watchdog) = claimed.watchdog() {
            watchdog.pause();
        }
        let released = claimed.lock().release(cooldown);
        let outcome = match released.at(claimed.lock()) {
            Ok(outcome) => outcome,
            Err(failure) => {
                if let Some(watchdog) = claimed.watchdog() {
                    watchdog.start();
                }
                return Err(failure);
            }
        };
        drop(claimed.watchdog().take());
        autoclean::unregister(claimed.address());
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
/// # Safety
/// `handle` is NULL or a live handle from `lock_open`.
#[no_mangle]
pub unsafe extern "C" fn lock_prolong(handle: *mut lock_handle, ttl_ms: u64) -> lock_result {
    boundary::call("lock_prolong", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let ttl = if ttl_ms == 0 { None } else { Some(duration_arg(ttl_ms)?) };
        let outcome = {
            let result = claimed.lock().prolong(ttl);
            result.at(claimed.lock())?
        };
        if outcome == lockcore::ProlongOutcome::Lost {
            // The watchdog renews the acquisition that is gone; left running,
            // it would report the next one lost and stop.
            drop(claimed.watchdog().take());
            autoclean::unregister(claimed.address());
        }
        Ok(outcome.into())
    })
}

/// Replaces `target_path` with the finished file `temp_path` (by
/// rename(2), so readers see the old file or the new one) only if this
/// handle still holds the lock at that moment. Returns
/// `LOCK_OK` (committed), `LOCK_EXPIRED` (held past its TTL: not committed)
/// or `LOCK_LOST` (someone else holds it: not committed; the handle holds
/// nothing, and its watchdog, if any, is stopped). `LOCK_BUSY` if the lock's
/// guard stayed locked by another process for 2 seconds (not committed;
/// see `LOCK_BUSY`). `LOCK_ERR_COMMIT`, with `errno` set, if the rename
/// itself fails (the temp file is missing, the target is a directory, the
/// two are on different file systems); `LOCK_ERR_INVALID_ARGUMENT` if either
/// path is the lock itself or its guard, which a rename would destroy. In
/// both cases the lock is still held. Unless committed, the target is
/// untouched and the temp file is left to the caller. Both paths are plain
/// paths, not lock specs.
///
/// # Safety
/// `handle` is NULL or a live handle; the paths are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn lock_commit(
    handle: *mut lock_handle,
    temp_path: *const c_char,
    target_path: *const c_char,
) -> lock_result {
    boundary::call("lock_commit", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        if temp_path.is_null() || target_path.is_null() {
            return Err(Failure::Code(lock_result::LOCK_ERR_NULL_ARGUMENT));
        }
        // SAFETY: non-NULL and NUL-terminated by the contract above.
        let (temp, target) = unsafe { (CStr::from_ptr(temp_path), CStr::from_ptr(target_path)) };
        let as_path = |p: &CStr| {
            lockcore::CPath::from_parts(&[p.to_bytes()]).map_err(|_| Failure::Code(lock_result::LOCK_ERR_PATH_TOO_LONG))
        };
        let (temp, target) = (as_path(temp)?, as_path(target)?);
        let outcome = {
            let result = claimed.lock().commit_file(&temp, &target);
            result.at(claimed.lock())?
        };
        if outcome == lockcore::CommitOutcome::Lost {
            drop(claimed.watchdog().take());
            autoclean::unregister(claimed.address());
        }
        Ok(match outcome {
            lockcore::CommitOutcome::Committed => lock_result::LOCK_OK,
            lockcore::CommitOutcome::Expired => lock_result::LOCK_EXPIRED,
            lockcore::CommitOutcome::Lost => lock_result::LOCK_LOST,
        })
    })
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
    boundary::call("lock_autorenew", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let lock = claimed.lock();
        let held = *lock.held().ok_or(Failure::Code(lock_result::LOCK_ERR_NOT_HELD))?;
        let spec = lock.spec().clone();
        // A lock that cannot be broken (flock) never expires either.
        let ttl = match spec.options.ttl {
            Some(ttl) if spec.scheme.breaks_stale_locks() => ttl,
            _ => return Err(Failure::Code(lock_result::LOCK_ERR_UNSUPPORTED)),
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
    boundary::call("lock_autorenew_stop", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        drop(claimed.watchdog().take());
        Ok(lock_result::LOCK_OK)
    })
}

/// Reads who holds the lock, until when, its fences and cooldown, without
/// taking it. `LOCK_BUSY` if the lock's files stayed locked by other
/// process for 2 seconds (see `LOCK_BUSY`).
///
/// # Safety
/// `handle` is NULL or a live handle; `info_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_inspect(handle: *mut lock_handle, info_out: *mut lock_info) -> lock_result {
    boundary::call("lock_inspect", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        if info_out.is_null() {
            return Err(Failure::Code(lock_result::LOCK_ERR_NULL_ARGUMENT));
        }
        let inspection = {
            let result = claimed.lock().inspect();
            result.at(claimed.lock())?
        };
        let mut info = lock_info {
            held: false,
            held_by_this_handle: false,
            stale: false,
            owner_liveness: lock_liveness::LOCK_OWNER_UNKNOWN,
            owner_pid: 0,
            owner_host: [0; LOCK_HOST_CAPACITY],
            fence: 0,
            last_fence: inspection.last_fence,
            expires_unix_ms: 0,
            cooldown_until_unix_ms: inspection.cooldown_until.map_or(0, WallTime::unix_millis),
            queue_length: inspection.queue_length.unwrap_or(0),
            since_unix_ms: 0,
        };
        if let Some(holder) = inspection.holder {
            info.held = true;
            info.held_by_this_handle = holder.this_handle;
            info.stale = holder.stale;
            info.owner_liveness = match holder.liveness {
                Liveness::Alive => lock_liveness::LOCK_OWNER_ALIVE,
                Liveness::Dead => lock_liveness::LOCK_OWNER_DEAD,
                Liveness::Unknown => lock_liveness::LOCK_OWNER_UNKNOWN,
            };
            info.owner_pid = holder.pid;
            if let Some(host) = holder.host {
                // Host names are at most 64 bytes: the terminator always fits.
                for (dst, &src) in info.owner_host.iter_mut().zip(host.as_bytes()) {
                    *dst = src as c_char;
                }
            }
            if let Some(record) = holder.record {
                info.fence = record.fence;
            }
            info.expires_unix_ms = holder.expires.map_or(0, WallTime::unix_millis);
            info.since_unix_ms = holder.since.map_or(0, WallTime::unix_millis);
        }
        write_optional(info_out, info);
        Ok(lock_result::LOCK_OK)
    })
}

/// Removes the lock whoever holds it: an operator's tool for a holder known
/// to be gone. `*was_held_out` (if not NULL) tells whether there was a lock.
/// `LOCK_ERR_UNSUPPORTED` for flock, which only its holder's exit releases.
/// `LOCK_BUSY` if the lock's files stayed locked by other processes for 2
/// seconds (nothing removed; see `LOCK_BUSY`).
///
/// # Safety
/// `handle` is NULL or a live handle; `was_held_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_break(handle: *mut lock_handle, was_held_out: *mut bool) -> lock_result {
    boundary::call("lock_break", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        let was_held = {
            let result = claimed.lock().break_lock();
            result.at(claimed.lock())?
        };
        write_optional(was_held_out, was_held);
        Ok(lock_result::LOCK_OK)
    })
}

/// Sets (or, with NULL, clears) the callback `lock_acquire` calls while it
/// waits: after `wmin` (spec option, default 15s), then every `wafter`
/// (default 20s). `warn=0` in the spec silences it.
///
/// # Safety
/// `handle` is NULL or a live handle. `callback` and `context` must stay
/// valid while the handle can call them; the callback must not unwind or
/// longjmp out, and must not use this handle.
#[no_mangle]
pub unsafe extern "C" fn lock_set_warning(
    handle: *mut lock_handle,
    callback: lock_warning_fn,
    context: *mut c_void,
) -> lock_result {
    boundary::call("lock_set_warning", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        *claimed.warning() = callback.map(|callback| Warning { callback, context });
        Ok(lock_result::LOCK_OK)
    })
}

/// Copies the path that is the lock (lock file, lock directory, symlink,
/// flock'd file, lease or queue) into `buf` as a NUL-terminated string, and
/// its length without terminator into `*len_out` (if not NULL).
/// `LOCK_ERR_BUFFER_TOO_SMALL` if `buf_len` cannot hold it and its
/// terminator: nothing is written to `buf`, and, as with `snprintf`,
/// `*len_out` receives the length needed (less the terminator), the one
/// output written on failure.
///
/// # Safety
/// `handle` is NULL or a live handle; `buf` is valid for `buf_len` bytes;
/// `len_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_path(
    handle: *mut lock_handle,
    buf: *mut c_char,
    buf_len: usize,
    len_out: *mut usize,
) -> lock_result {
    boundary::call("lock_path", || {
        let handle = try_ref!(handle);
        let mut claimed = claim_own(handle)?;
        if buf.is_null() {
            return Err(Failure::Code(lock_result::LOCK_ERR_NULL_ARGUMENT));
        }
        let path = {
            let lock = claimed.lock();
            lock.path().at(lock)?.as_bytes()
        };
        write_optional(len_out, path.len());
        if path.len() >= buf_len {
            return Err(Failure::Code(lock_result::LOCK_ERR_BUFFER_TOO_SMALL));
        }
        // SAFETY: `buf` has `buf_len > path.len()` writable bytes by contract.
        unsafe {
            std::ptr::copy_nonoverlapping(path.as_ptr(), buf.cast::<u8>(), path.len());
            *buf.add(path.len()) = 0;
        }
        Ok(lock_result::LOCK_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_match_cargo() {
        assert_eq!(LOCKFFI_VERSION_MAJOR.to_string(), env!("CARGO_PKG_VERSION_MAJOR"));
        assert_eq!(LOCKFFI_VERSION_MINOR.to_string(), env!("CARGO_PKG_VERSION_MINOR"));
        assert_eq!(LOCKFFI_VERSION_PATCH.to_string(), env!("CARGO_PKG_VERSION_PATCH"));
        // SAFETY: lock_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(lock_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn strerror_answers_every_int() {
        for code in [-1, 5, 99, 901, i32::MIN, i32::MAX] {
            // SAFETY: static NUL-terminated text.
            let text = unsafe { CStr::from_ptr(lock_strerror(code)) };
            assert_eq!(text.to_str().unwrap(), "unknown lock result code");
        }
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(lock_strerror(lock_result::LOCK_BUSY as i32)) };
        assert_eq!(text.to_str().unwrap(), "the lock is held by someone else, cooling down, or its guard is held");
    }

    #[test]
    fn spec_errors_leave_a_message_naming_the_key() {
        let mut handle: *mut lock_handle = std::ptr::null_mut();
        // SAFETY: valid C string and out-pointer.
        let code = unsafe { lock_open(c"lockfile:/tmp/x?ttl=soon".as_ptr(), &mut handle) };
        assert_eq!(code, lock_result::LOCK_ERR_SPEC_BAD_VALUE);
        assert!(handle.is_null(), "outputs are written only on success");
        let mut buf = [0 as c_char; 128];
        // SAFETY: buf is valid for its length.
        let len = unsafe { lock_last_error_message(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by lock_last_error_message.
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(len, text.len());
        assert!(text.contains("'ttl'"), "{text}");
    }

    #[test]
    fn null_arguments_are_refused_not_dereferenced() {
        // SAFETY: NULL is allowed by every contract and must be refused.
        unsafe {
            assert_eq!(lock_open(std::ptr::null(), std::ptr::null_mut()), lock_result::LOCK_ERR_NULL_ARGUMENT);
            assert_eq!(
                lock_try_acquire(std::ptr::null_mut(), std::ptr::null_mut()),
                lock_result::LOCK_ERR_NULL_ARGUMENT
            );
            assert_eq!(lock_release(std::ptr::null_mut(), 0), lock_result::LOCK_ERR_NULL_ARGUMENT);
            assert_eq!(lock_inspect(std::ptr::null_mut(), std::ptr::null_mut()), lock_result::LOCK_ERR_NULL_ARGUMENT);
            lock_close(std::ptr::null_mut());
        }
    }

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

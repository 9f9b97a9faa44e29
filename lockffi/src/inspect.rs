//! Looking at a lock and managing it without holding it, and the handle's
//! settings: `lock_inspect`, `lock_break`, `lock_path`, `lock_set_warning`,
//! `lock_set_cancel`.

use std::ffi::{c_char, c_void};

use lockcore::{Holder, Liveness, WallTime};

use crate::boundary::{ffi_export, write_optional, AtLock, Failure};
use crate::handle::{lock_cancel_fn, lock_handle, lock_warning_fn, Cancel, Warning};
use crate::result::lock_result;
use crate::types::{lock_info, lock_liveness, LOCK_HOST_CAPACITY};

/// A lock's state with nobody holding it and nothing handed out.
pub(crate) const NOBODY: lock_info = lock_info {
    held: false,
    held_by_this_handle: false,
    stale: false,
    owner_liveness: lock_liveness::LOCK_OWNER_UNKNOWN,
    owner_pid: 0,
    owner_host: [0; LOCK_HOST_CAPACITY],
    fence: 0,
    last_fence: 0,
    expires_unix_ms: 0,
    cooldown_until_unix_ms: 0,
    queue_length: 0,
    since_unix_ms: 0,
};

/// Fills the holder's fields of `info` (`held` and those after it) from
/// `holder`.
pub(crate) fn describe_holder(info: &mut lock_info, holder: &Holder) {
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

/// Reads who holds the lock, until when, its fences and cooldown, without
/// taking it. `LOCK_BUSY` if the lock's files stayed locked by another
/// process for 2 seconds (see `LOCK_BUSY`).
///
/// Returns: `LOCK_OK`, `LOCK_BUSY`, `LOCK_ERR_NULL_ARGUMENT`,
/// `LOCK_ERR_FORKED`, `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`, `LOCK_ERR_PERMISSION`,
/// `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`, `LOCK_ERR_CORRUPT_RECORD`,
/// `LOCK_ERR_RECORD_TOO_LONG`, `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`,
/// `LOCK_ERR_NOT_A_DIRECTORY`, `LOCK_ERR_UNTRUSTED`,
/// `LOCK_ERR_SERVER_UNKNOWN_HOST`, `LOCK_ERR_SERVER_UNREACHABLE`,
/// `LOCK_ERR_SERVER_NO_ANSWER`, `LOCK_ERR_SERVER_DISCONNECTED`,
/// `LOCK_ERR_SERVER_AUTH`, `LOCK_ERR_SERVER_NOT_READY`,
/// `LOCK_ERR_SERVER_READ_ONLY`, `LOCK_ERR_SERVER_NO_WRITES`,
/// `LOCK_ERR_SERVER_REFUSED`, `LOCK_ERR_SERVER_FOREIGN_KEYS`,
/// `LOCK_ERR_SERVER_PROTOCOL`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle; `info_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_inspect(handle: *mut lock_handle, info_out: *mut lock_info) -> lock_result {
    ffi_export!(lock_inspect, claim(handle), required(info_out), |claimed| {
        let inspection = {
            let result = claimed.lock().inspect();
            result.at(claimed.lock())?
        };
        let mut info = lock_info {
            last_fence: inspection.last_fence,
            cooldown_until_unix_ms: inspection.cooldown_until.map_or(0, WallTime::unix_millis),
            queue_length: inspection.queue_length.unwrap_or(0),
            ..NOBODY
        };
        if let Some(holder) = inspection.holder {
            describe_holder(&mut info, &holder);
        }
        write_optional(info_out, info);
        Ok(lock_result::LOCK_OK)
    })
}

/// Removes the lock whoever holds it: an operator's tool for a holder known
/// to be gone. `*was_held_out` (if not NULL) tells whether there was a lock.
/// `LOCK_ERR_UNSUPPORTED`, before anything is touched, for a scheme whose
/// locks cannot be broken: flock, which only its holder's exit releases.
/// `LOCK_BUSY` if the lock's files stayed locked by other processes for 2
/// seconds (nothing removed; see `LOCK_BUSY`).
///
/// Returns: `LOCK_OK`, `LOCK_BUSY`, `LOCK_ERR_NULL_ARGUMENT`,
/// `LOCK_ERR_FORKED`, `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`, `LOCK_ERR_PERMISSION`,
/// `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`, `LOCK_ERR_CORRUPT_RECORD`,
/// `LOCK_ERR_RECORD_TOO_LONG`, `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`,
/// `LOCK_ERR_NOT_A_DIRECTORY`, `LOCK_ERR_UNTRUSTED`,
/// `LOCK_ERR_SERVER_UNKNOWN_HOST`, `LOCK_ERR_SERVER_UNREACHABLE`,
/// `LOCK_ERR_SERVER_NO_ANSWER`, `LOCK_ERR_SERVER_DISCONNECTED`,
/// `LOCK_ERR_SERVER_AUTH`, `LOCK_ERR_SERVER_NOT_READY`,
/// `LOCK_ERR_SERVER_READ_ONLY`, `LOCK_ERR_SERVER_NO_WRITES`,
/// `LOCK_ERR_SERVER_REFUSED`, `LOCK_ERR_SERVER_FOREIGN_KEYS`,
/// `LOCK_ERR_SERVER_PROTOCOL`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle; `was_held_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_break(handle: *mut lock_handle, was_held_out: *mut bool) -> lock_result {
    ffi_export!(lock_break, claim(handle), |claimed| {
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
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_PANIC`.
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
    ffi_export!(lock_set_warning, claim(handle), |claimed| {
        *claimed.warning() = callback.map(|callback| Warning { callback, context });
        Ok(lock_result::LOCK_OK)
    })
}

/// Sets (or, with NULL, clears) the callback that can give up a wait:
/// `lock_acquire` asks it before each attempt (so one that already answers
/// `true` returns at once, without trying) and at least every 40 ms between
/// them, and returns `LOCK_CANCELLED` once it answers `true`, having given
/// up its place in line. An attempt under way finishes first: at most
/// 250 ms, if another process keeps the lock's guard. `lock_try_acquire`
/// does not ask it.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// As for `lock_set_warning`.
#[no_mangle]
pub unsafe extern "C" fn lock_set_cancel(
    handle: *mut lock_handle,
    callback: lock_cancel_fn,
    context: *mut c_void,
) -> lock_result {
    ffi_export!(lock_set_cancel, claim(handle), |claimed| {
        *claimed.cancel() = callback.map(|callback| Cancel { callback, context });
        Ok(lock_result::LOCK_OK)
    })
}

/// Copies the path that is the lock (lock file, lock directory, symlink,
/// flock'd file, lease or queue) into `buf` as a NUL-terminated string, and
/// its length without terminator into `*len_out` (if not NULL).
/// `LOCK_ERR_BUFFER_TOO_SMALL` if `buf_len` cannot hold it and its
/// terminator: nothing is written to `buf`, and, as with `snprintf`,
/// `*len_out` receives the length needed (less the terminator), the one
/// output written on failure; `buf` may then be NULL, with `buf_len` 0,
/// to learn the length before allocating. `LOCK_ERR_UNSUPPORTED` for a lock that keeps
/// no file of this host (a network lock), whose spec names a server and a key.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_BUFFER_TOO_SMALL`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle; `buf` is valid for `buf_len` bytes
/// (NULL only with `buf_len` 0); `len_out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_path(
    handle: *mut lock_handle,
    buf: *mut c_char,
    buf_len: usize,
    len_out: *mut usize,
) -> lock_result {
    ffi_export!(lock_path, claim(handle), |claimed| {
        if buf.is_null() && buf_len > 0 {
            return Err(Failure::Null("buf"));
        }
        let lock = claimed.lock();
        let path = lock.path().at(lock)?.as_bytes();
        write_optional(len_out, path.len());
        if path.len() >= buf_len {
            let need = format!("the path and its terminator need {} bytes, buf_len is {buf_len}", path.len() + 1);
            return Err(Failure::named_with(lock_result::LOCK_ERR_BUFFER_TOO_SMALL, &lock.name().to_string(), &need));
        }
        // SAFETY: `buf` has `buf_len > path.len()` writable bytes by contract.
        unsafe {
            std::ptr::copy_nonoverlapping(path.as_ptr(), buf.cast::<u8>(), path.len());
            *buf.add(path.len()) = 0;
        }
        Ok(lock_result::LOCK_OK)
    })
}

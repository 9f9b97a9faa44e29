//! Replacing a file only while the lock is held: `lock_commit`.

use std::ffi::{c_char, CStr};

use crate::boundary::{ffi_export, AtLock, Failure};
use crate::handle::lock_handle;
use crate::result::lock_result;

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
/// path is empty, or the lock itself or its guard, which a rename would destroy. In
/// both cases the lock is still held. Unless committed, the target is
/// untouched and the temp file is left to the caller. Both paths are plain
/// paths, not lock specs. `LOCK_ERR_UNSUPPORTED`, before anything is
/// touched, for a lock that keeps no file of this host (a network lock) or
/// cannot commit.
///
/// Returns: `LOCK_OK`, `LOCK_EXPIRED`, `LOCK_LOST`, `LOCK_BUSY`,
/// `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_NOT_HELD`, `LOCK_ERR_FORKED`,
/// `LOCK_ERR_HANDLE_IN_USE`, `LOCK_ERR_UNSUPPORTED`,
/// `LOCK_ERR_INVALID_ARGUMENT`, `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_NOT_FOUND`,
/// `LOCK_ERR_PERMISSION`, `LOCK_ERR_SYMLINK`, `LOCK_ERR_NOT_A_LOCK`,
/// `LOCK_ERR_CORRUPT_RECORD`, `LOCK_ERR_RECORD_TOO_LONG`,
/// `LOCK_ERR_CORRUPT_GUARD`, `LOCK_ERR_SYSTEM`, `LOCK_ERR_COMMIT`,
/// `LOCK_ERR_NOT_A_DIRECTORY`, `LOCK_ERR_UNTRUSTED`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `handle` is NULL or a live handle; the paths are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn lock_commit(
    handle: *mut lock_handle,
    temp_path: *const c_char,
    target_path: *const c_char,
) -> lock_result {
    ffi_export!(lock_commit, claim(handle), required(temp_path, target_path), |claimed| {
        // SAFETY: non-NULL and NUL-terminated by the contract above.
        let (temp, target) = unsafe { (CStr::from_ptr(temp_path), CStr::from_ptr(target_path)) };
        // A path that cannot be one is refused naming the argument: an
        // empty one is no path to rename (a mistake of the caller's), a long
        // one no system call takes.
        let lock_name = claimed.lock().name().to_string();
        let as_path = |argument: &str, p: &CStr| {
            lockcore::CPath::from_parts(&[p.to_bytes()]).map_err(|_| {
                let (code, why) = match p.to_bytes().is_empty() {
                    true => (lock_result::LOCK_ERR_INVALID_ARGUMENT, "is empty"),
                    false => (lock_result::LOCK_ERR_PATH_TOO_LONG, "is longer than PATH_MAX"),
                };
                Failure::Located { code, errno: None, text: format!("{lock_name}: {argument} {why}") }
            })
        };
        let (temp, target) = (as_path("temp_path", temp)?, as_path("target_path", target)?);
        let outcome = {
            let result = claimed.lock().commit_file(&temp, &target);
            result.at(claimed.lock())?
        };
        if outcome == lockcore::CommitOutcome::Lost {
            claimed.holds_nothing();
        }
        Ok(outcome.into())
    })
}

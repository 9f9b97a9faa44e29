//! Making and freeing handles, and what needs none: `lock_open`,
//! `lock_close`, `lock_version`, `lock_strerror`, `lock_last_error_message`.

use std::ffi::{c_char, CStr};

use crate::boundary::{self, ffi_export};
use crate::handle::lock_handle;
use crate::result::lock_result;

/// The library's version, "MAJOR.MINOR.PATCH".
///
/// Returns: a static string, never NULL ("unknown" if the library failed
/// inside, which it cannot); no result code.
#[no_mangle]
pub extern "C" fn lock_version() -> *const c_char {
    ffi_export!(lock_version, fallback(c"unknown".as_ptr()), || {
        const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
        VERSION.as_ptr()
    })
}

/// Static text for a result code. Takes an int so that any value, even
/// one no enum member has, is safe.
///
/// Returns: static text, never NULL, also for a code no enum member has
/// ("unknown lock result code"); should the library fail inside, the text
/// of `LOCK_ERR_PANIC`. No result code, and this thread's last message is
/// left as it was.
#[no_mangle]
pub extern "C" fn lock_strerror(code: i32) -> *const c_char {
    ffi_export!(lock_strerror, fallback(lock_result::LOCK_ERR_PANIC.text().as_ptr()), || {
        lock_result::ALL.iter().find(|&&c| c as i32 == code).map_or(c"unknown lock result code", |c| c.text()).as_ptr()
    })
}

/// Copies a description of this thread's last failing `lock_*` call into
/// `buf` (NUL-terminated, cut to fit `buf_len` where a UTF-8 character
/// starts, so a short copy may hold up to 3 bytes fewer). With `buf` NULL or
/// `buf_len` 0 it only measures. Empty after a call that succeeded.
///
/// Returns: the description's full length, without its terminator, as
/// `snprintf` does (0 after a call that succeeded; 0 should the library fail
/// inside); no result code.
///
/// # Safety
/// `buf` is NULL or valid for `buf_len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn lock_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    ffi_export!(lock_last_error_message, fallback(0), || { boundary::copy_last_message(buf, buf_len) })
}

/// Parses `spec` (`scheme:target?key=value&...`) and makes a handle for the
/// lock it names. No file is touched until the handle is used.
///
/// Returns: `LOCK_OK`, `LOCK_ERR_NULL_ARGUMENT`, `LOCK_ERR_SPEC_SYNTAX`,
/// `LOCK_ERR_SPEC_UNKNOWN_SCHEME`, `LOCK_ERR_SPEC_UNKNOWN_KEY`,
/// `LOCK_ERR_SPEC_BAD_VALUE`, `LOCK_ERR_SPEC_DUPLICATE_KEY`,
/// `LOCK_ERR_PATH_TOO_LONG`, `LOCK_ERR_SPEC_BAD_URL`, `LOCK_ERR_PANIC`.
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string; `handle_out` is NULL or valid
/// for one write.
#[no_mangle]
pub unsafe extern "C" fn lock_open(spec: *const c_char, handle_out: *mut *mut lock_handle) -> lock_result {
    ffi_export!(lock_open, required(spec, handle_out), || {
        // SAFETY: non-NULL and NUL-terminated by the contract above.
        let spec = unsafe { CStr::from_ptr(spec) };
        let handle = lock_handle::open(spec.to_bytes())?;
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
/// Returns: `LOCK_OK`, `LOCK_EXPIRED`, `LOCK_LOST`, `LOCK_BUSY`,
/// `LOCK_ERR_HANDLE_IN_USE`,
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
/// `LOCK_ERR_PANIC`.
///
/// A lost callback of the handle's watchdog (`lock_autorenew`) that is
/// running on the watchdog's thread is waited for, even one that stopped the
/// watchdog itself; from the moment `lock_close` begins, the callback's
/// calls on this handle answer `LOCK_ERR_HANDLE_IN_USE`. Made from a warning
/// or cancel callback of a call on this very handle, which still uses it,
/// `lock_close` answers `LOCK_ERR_HANDLE_IN_USE` and frees nothing.
///
/// # Safety
/// `handle` is NULL or came from `lock_open` and was not closed yet; no other
/// thread uses it during or after this call, but that lost callback.
#[no_mangle]
pub unsafe extern "C" fn lock_close(handle: *mut lock_handle) -> lock_result {
    // SAFETY: the pointer's contract is this export's own.
    ffi_export!(lock_close, take(handle), |owned| { unsafe { lock_handle::close(owned) } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquire::{lock_release, lock_try_acquire};
    use crate::inspect::lock_inspect;
    use crate::types::{LOCKFFI_VERSION_MAJOR, LOCKFFI_VERSION_MINOR, LOCKFFI_VERSION_PATCH};

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
        for code in [-1, 6, 99, 901, i32::MIN, i32::MAX] {
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
}

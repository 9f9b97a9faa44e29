//! What every exported function does at the border with C: catch panics,
//! check pointers, and remember a detailed message for the failing call.
//!
//! Every export is written as
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn lock_x(handle: *mut lock_handle, ...) -> lock_result {
//!     boundary::call(|| { ... })
//! }
//! ```
//!
//! so that no panic unwinds into C (it becomes `LOCK_ERR_PANIC`), and every
//! failing code leaves a message for `lock_last_error_message` on this thread.

use std::cell::RefCell;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use lockcore::Error;

use crate::result::lock_result;

/// Runs an export's body: panics become `LOCK_ERR_PANIC`, and any code
/// other than `LOCK_OK` without a message of its own gets its static text.
pub fn call(body: impl FnOnce() -> Result<lock_result, Failure>) -> lock_result {
    clear_message();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(failure)) => failure.record(),
        Err(_) => Failure::Code(lock_result::LOCK_ERR_PANIC).record(),
    }
}

/// Why an export failed: a core error (with its detail) or a bare code.
#[derive(Debug)]
pub enum Failure {
    Core(Error),
    Code(lock_result),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Core(e)
    }
}

impl Failure {
    /// Stores the detailed message, sets `errno` for system errors, and
    /// returns the code.
    fn record(self) -> lock_result {
        match self {
            Failure::Core(error) => {
                if let Error::Os(errno) | Error::Commit(errno) = error {
                    // SAFETY: __errno_location returns this thread's errno.
                    unsafe { *libc::__errno_location() = errno.raw() };
                }
                set_message(|m| write!(m, "{error}"));
                lock_result::from(error)
            }
            Failure::Code(code) => {
                set_message(|m| m.write_str(code.text().to_str().unwrap_or("")));
                code
            }
        }
    }
}

/// Borrows a handle or other input; NULL becomes `LOCK_ERR_NULL_ARGUMENT`.
macro_rules! try_ref {
    ($ptr:expr) => {{
        // SAFETY: the export's contract (its "# Safety" section) is that this
        // pointer is NULL or valid and not aliased mutably for the call.
        match unsafe { $ptr.as_ref() } {
            Some(r) => r,
            None => return Err($crate::boundary::Failure::Code($crate::result::lock_result::LOCK_ERR_NULL_ARGUMENT)),
        }
    }};
}

pub(crate) use try_ref;

/// Writes `value` through an optional output pointer (NULL means "not wanted").
pub fn write_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: a non-NULL output pointer is valid for writes by the
        // export's contract; `write` does not read or drop the old value.
        unsafe { out.write(value) };
    }
}

const MESSAGE_CAPACITY: usize = 512;

thread_local! {
    static LAST_MESSAGE: RefCell<String> = RefCell::new(String::with_capacity(MESSAGE_CAPACITY));
}

// The message is reached with `try_with`: a lock_* call made during exit()
// (from an atexit handler) may run after this thread's locals were destroyed,
// and `with` would then panic outside `call`'s catch_unwind, aborting the
// process. Without its local the thread simply has no message.

fn clear_message() {
    let _ = LAST_MESSAGE.try_with(|m| m.borrow_mut().clear());
}

fn set_message(fill: impl FnOnce(&mut String) -> std::fmt::Result) {
    let _ = LAST_MESSAGE.try_with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        let _ = fill(&mut m);
    });
}

/// Copies the last message into `buf` (NUL-terminated, cut to fit) and
/// returns its full length, as snprintf does.
pub fn copy_last_message(buf: *mut libc::c_char, len: usize) -> usize {
    let copy = |bytes: &[u8]| {
        if !buf.is_null() && len > 0 {
            let n = bytes.len().min(len - 1);
            // SAFETY: the caller gives `len` writable bytes at `buf`; we write
            // `n + 1 <= len` of them, and the regions cannot overlap (ours is
            // Rust-owned).
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        bytes.len()
    };
    LAST_MESSAGE.try_with(|m| copy(m.borrow().as_bytes())).unwrap_or_else(|_| copy(b""))
}

//! What every exported function does at the border with C: catch panics,
//! check pointers, and remember a detailed message for the failing call.
//!
//! Every export is written as
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn lock_x(handle: *mut lock_handle, ...) -> lock_result {
//!     boundary::call("lock_x", || { ... })
//! }
//! ```
//!
//! so that no panic unwinds into C (it becomes `LOCK_ERR_PANIC`), and every
//! failing code leaves a message for `lock_last_error_message` on this
//! thread: the call, the path of the file it is about, the cause, the
//! system's word for the errno, and for a file that was refused its owner
//! (by name) and mode. An error of a lock's operation goes through
//! [`AtLock::at`] to get its path.

use std::cell::RefCell;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::time::Duration;

use lockcore::{Error, Lock};

use crate::result::lock_result;

/// Runs the body of the export `op`: panics become `LOCK_ERR_PANIC`, and
/// every failure leaves its message.
pub fn call(op: &'static str, body: impl FnOnce() -> Result<lock_result, Failure>) -> lock_result {
    clear_message();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(failure)) => failure.record(op),
        Err(_) => Failure::Code(lock_result::LOCK_ERR_PANIC).record(op),
    }
}

/// Why an export failed: a core error, the same with the text that names
/// its lock's file, or a bare code.
#[derive(Debug)]
pub enum Failure {
    Core(Error),
    /// An error of a lock's operation, its code and errno kept, its text
    /// written with the path of the file it is about.
    Located {
        code: lock_result,
        errno: Option<lockcore::sys::Errno>,
        text: String,
    },
    Code(lock_result),
}

/// Gives an error of a lock's operation the path of the file it is about.
pub trait AtLock<T> {
    fn at(self, lock: &Lock) -> Result<T, Failure>;
}

impl<T> AtLock<T> for Result<T, Error> {
    fn at(self, lock: &Lock) -> Result<T, Failure> {
        self.map_err(|error| {
            let owner = match error {
                Error::File(e) => e.owner_uid.and_then(user_name),
                _ => None,
            };
            Failure::Located {
                code: lock_result::from(error),
                errno: error.errno(),
                text: lock.describe(&error).with_owner_name(owner.as_deref()).to_string(),
            }
        })
    }
}

/// The name of the user `uid`, from the user database (`getpwuid_r(3)`).
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value to be overwritten.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` for its length.
        let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
        if rc == libc::ERANGE && buf.len() < 64 * 1024 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points at a NUL-terminated name in `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Core(e)
    }
}

impl Failure {
    /// Stores the detailed message, sets `errno` where a system call
    /// failed, and returns the code.
    fn record(self, op: &str) -> lock_result {
        let (code, errno) = match &self {
            Failure::Core(error) => (lock_result::from(*error), error.errno()),
            Failure::Located { code, errno, .. } => (*code, *errno),
            Failure::Code(code) => (*code, None),
        };
        if let Some(errno) = errno {
            // SAFETY: __errno_location returns this thread's errno.
            unsafe { *libc::__errno_location() = errno.raw() };
        }
        match &self {
            Failure::Core(error) => set_message(|m| write!(m, "{op}: {error}")),
            Failure::Located { text, .. } => set_message(|m| write!(m, "{op}: {text}")),
            Failure::Code(code) => set_message(|m| write!(m, "{op}: {}", code.text().to_str().unwrap_or(""))),
        }
        code
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

/// The longest TTL or cooldown a call accepts: 100 years, as the spec's
/// `ttl` (a longer one is a mistake, and keeps time sums far from overflow).
const LONGEST_DURATION_MS: u64 = 100 * 365 * 86_400_000;

/// A TTL or cooldown argument, refused with `LOCK_ERR_INVALID_ARGUMENT`
/// beyond 100 years.
pub fn duration_arg(ms: u64) -> Result<Duration, Failure> {
    if ms > LONGEST_DURATION_MS {
        return Err(Failure::Code(lock_result::LOCK_ERR_INVALID_ARGUMENT));
    }
    Ok(Duration::from_millis(ms))
}

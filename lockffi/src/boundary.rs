//! What every exported function does at the border with C: catch panics,
//! check pointers, claim the handle, and remember a detailed message for
//! the failing call.
//!
//! # One pattern for every export
//!
//! Every export is written out, with its doc comment and `#[no_mangle]`,
//! and its body is one [`ffi_export!`] call:
//!
//! ```ignore
//! /// What it does, for the header.
//! #[no_mangle]
//! pub unsafe extern "C" fn lock_x(handle: *mut lock_handle, out: *mut T) -> lock_result {
//!     ffi_export!(lock_x, claim(handle), required(out), |claimed| { ... Ok(code) })
//! }
//! ```
//!
//! The macro does, in this order, what no export may forget: catches every
//! panic (`LOCK_ERR_PANIC`, with the panic's text in the message), refuses
//! a NULL handle, claims the handle for this call (`LOCK_ERR_HANDLE_IN_USE`
//! while another thread is in a call on it; `LOCK_ERR_FORKED` for a lock a
//! parent took before fork(), whatever else is wrong with the call), then
//! refuses the other NULL pointers that are required, each
//! `LOCK_ERR_NULL_ARGUMENT` with a message that names the argument. The
//! body returns `Result<lock_result, Failure>`; a failure leaves its
//! message for `lock_last_error_message` on this thread: the call, the path
//! of the file it is about, the cause, the system's word for the errno, and
//! for a file that was refused its owner (by name) and mode. An error of a
//! lock's operation goes through [`AtLock::at`] to get its path.
//!
//! Why the function is written out rather than made by the macro, as
//! hyper's `ffi_fn!` makes it: cbindgen reads the source without expanding
//! macros (only `bitflags!` is understood), so a function a macro makes is
//! missing from the header. Its `[parse.expand]` runs `rustc
//! -Zunpretty=expanded`, which only a nightly compiler accepts. So, as in
//! rustls-ffi (`ffi_panic_boundary!`), the signature and docs stay in the
//! source where cbindgen reads them, and the body goes through the macro.
//! `tests/exports.rs` reads `src/` and fails for an `extern "C" fn` whose
//! body is anything else, and for a header that lacks one of them. The
//! macro's arguments are written as Rust expressions (a name, calls, a
//! closure) so that rustfmt formats the bodies as any other code.
//!
//! The forms:
//! * `name, claim(handle), required(p, q), |claimed| { ... }`: a call on a
//!   handle; the body gets the [`Claimed`](crate::handle::Claimed) handle.
//!   `required` (optional) lists the pointers that may not be NULL;
//!   optional outputs are not listed and go through [`write_optional`].
//! * `name, take(handle), |owned| { ... }`: `lock_close`, which takes the
//!   handle back to free it: NULL is a no-op that answers `LOCK_OK` and
//!   leaves the message, and no claim is made (the caller promises no other
//!   thread uses the handle; a handle caught in a call by fork() is freed).
//! * `name, required(p, q), || { ... }`: a call without a handle (`lock_open`).
//! * `name, fallback(value), || { ... }`: a call that returns something other
//!   than a `lock_result` (`lock_version`, `lock_strerror`,
//!   `lock_last_error_message`): the body returns the value itself; on a
//!   panic the call returns `fallback` (its doc says which) and the message
//!   says what happened. These calls do not clear the message, so that
//!   `lock_strerror(rc)` may be called before `lock_last_error_message`.

use std::any::Any;
use std::cell::RefCell;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use lockcore::{Error, Lock};

use crate::result::lock_result;

/// The body of every export; see the module's doc for its forms.
macro_rules! ffi_export {
    ($name:ident, claim($handle:ident) $(, required($($ptr:ident),+))?, |$claimed:ident| $body:block $(,)?) => {
        $crate::boundary::call(stringify!($name), || {
            // SAFETY: the export's contract (its "# Safety" section) is that
            // the handle is NULL or a live handle from lock_open.
            let Some(handle) = (unsafe { $handle.as_ref() }) else {
                return Err($crate::boundary::Failure::Null(stringify!($handle)));
            };
            #[allow(unused_mut)]
            let mut $claimed = $crate::handle::claim_own(handle)?;
            $($(
                if $ptr.is_null() {
                    return Err($crate::boundary::Failure::Null(stringify!($ptr)));
                }
            )+)?
            $body
        })
    };
    ($name:ident, take($handle:ident), |$owned:ident| $body:block $(,)?) => {
        if $handle.is_null() {
            // A call that succeeds leaves no message behind, this one too.
            $crate::boundary::clear_message();
            $crate::result::lock_result::LOCK_OK
        } else {
            $crate::boundary::call(stringify!($name), || {
                // Not null, checked above; by the export's contract it came
                // from lock_handle::open (a Box) and is given back once.
                let $owned = std::ptr::NonNull::new($handle).expect("checked not null");
                $body
            })
        }
    };
    ($name:ident $(, required($($ptr:ident),+))?, || $body:block $(,)?) => {
        $crate::boundary::call(stringify!($name), || {
            $($(
                if $ptr.is_null() {
                    return Err($crate::boundary::Failure::Null(stringify!($ptr)));
                }
            )+)?
            $body
        })
    };
    ($name:ident, fallback($fallback:expr), || $body:block $(,)?) => {
        $crate::boundary::call_returning(stringify!($name), $fallback, || $body)
    };
}

pub(crate) use ffi_export;

/// Thread cancellation held off for as long as it lives, then put back as
/// it was: a cancelled thread acts on it at its next cancellation point
/// after the call. glibc cancels a thread by unwinding its stack, and an
/// unwind that reached an export's `catch_unwind` would be swallowed there,
/// which glibc answers by aborting the process ("exception not rethrown").
/// Every call returns by its deadline, so the cancellation waits no longer
/// than that; a caller's callback made during the call runs with it held
/// off too.
struct CancellationHeldOff {
    before: libc::c_int,
}

// Not in the libc crate for glibc; the values are glibc's and musl's.
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;
extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, before: *mut libc::c_int) -> libc::c_int;
}

impl CancellationHeldOff {
    fn new() -> CancellationHeldOff {
        let mut before = PTHREAD_CANCEL_DISABLE;
        // SAFETY: a valid state and a valid out pointer; the call only sets
        // this thread's cancellation state, and cannot fail with these.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut before) };
        CancellationHeldOff { before }
    }
}

impl Drop for CancellationHeldOff {
    fn drop(&mut self) {
        let mut ignored = 0;
        // SAFETY: as in `new`, with the state `new` found.
        unsafe { pthread_setcancelstate(self.before, &mut ignored) };
    }
}

/// Runs the body of the export `op`: panics become `LOCK_ERR_PANIC`, and
/// every failure leaves its message. Called through [`ffi_export!`].
pub fn call(op: &'static str, body: impl FnOnce() -> Result<lock_result, Failure>) -> lock_result {
    let _held_off = CancellationHeldOff::new();
    clear_message();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(failure)) => failure.record(op),
        Err(payload) => Failure::Panic(panic_text(payload.as_ref())).record(op),
    }
}

/// Runs the body of the export `op`, which returns `T` rather than a
/// code: on a panic it returns `fallback`, and the message says what
/// happened. The message is otherwise left as it was. Called through
/// [`ffi_export!`].
pub fn call_returning<T>(op: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    let _held_off = CancellationHeldOff::new();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            Failure::Panic(panic_text(payload.as_ref())).record(op);
            fallback
        }
    }
}

/// The text a panic was raised with, if it was text.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_string(),
        (_, Some(text)) => text.clone(),
        _ => String::new(),
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
        errno: Option<lockcore::Errno>,
        text: String,
    },
    Code(lock_result),
    /// The named pointer argument was NULL: `LOCK_ERR_NULL_ARGUMENT`.
    Null(&'static str),
    /// A panic was caught, with its text: `LOCK_ERR_PANIC`.
    Panic(String),
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
            Failure::Null(_) => (lock_result::LOCK_ERR_NULL_ARGUMENT, None),
            Failure::Panic(_) => (lock_result::LOCK_ERR_PANIC, None),
        };
        if let Some(errno) = errno {
            // SAFETY: __errno_location returns this thread's errno.
            unsafe { *libc::__errno_location() = errno.raw() };
        }
        match &self {
            Failure::Core(error) => set_message(|m| write!(m, "{op}: {error}")),
            Failure::Located { text, .. } => set_message(|m| write!(m, "{op}: {text}")),
            Failure::Code(code) => set_message(|m| write!(m, "{op}: {}", code_text(*code))),
            Failure::Null(argument) => {
                set_message(|m| write!(m, "{op}: {argument}: {}", code_text(lock_result::LOCK_ERR_NULL_ARGUMENT)))
            }
            Failure::Panic(what) if what.is_empty() => {
                set_message(|m| write!(m, "{op}: {}", code_text(lock_result::LOCK_ERR_PANIC)))
            }
            Failure::Panic(what) => {
                set_message(|m| write!(m, "{op}: {}: {what}", code_text(lock_result::LOCK_ERR_PANIC)))
            }
        }
        code
    }
}

impl Failure {
    /// `code`, with a message that names the lock `name` (as
    /// [`Lock::name`] gives it) and says what the code says.
    pub fn named(code: lock_result, name: &str) -> Failure {
        Failure::Located { code, errno: None, text: format!("{name}: {}", code_text(code)) }
    }

    /// [`named`](Self::named), and then `detail`.
    pub fn named_with(code: lock_result, name: &str, detail: &str) -> Failure {
        Failure::Located { code, errno: None, text: format!("{name}: {}: {detail}", code_text(code)) }
    }
}

/// A code's static text, for a message.
fn code_text(code: lock_result) -> &'static str {
    code.text().to_str().unwrap_or("")
}

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

pub(crate) fn clear_message() {
    let _ = LAST_MESSAGE.try_with(|m| m.borrow_mut().clear());
}

fn set_message(fill: impl FnOnce(&mut String) -> std::fmt::Result) {
    let _ = LAST_MESSAGE.try_with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        let _ = fill(&mut m);
    });
}

/// Runs `callback`, a caller's callback made during a wait, with the
/// message `fill` writes as this thread's last message, and clears it
/// after: a wait that then succeeds leaves no message behind.
pub fn while_waiting_say<T>(fill: impl FnOnce(&mut String) -> std::fmt::Result, callback: impl FnOnce() -> T) -> T {
    set_message(fill);
    let answer = callback();
    clear_message();
    answer
}

/// Copies the last message into `buf` (NUL-terminated, cut to fit, at a
/// character's start) and returns its full length, as snprintf does.
pub fn copy_last_message(buf: *mut libc::c_char, len: usize) -> usize {
    let copy = |text: &str| {
        let bytes = text.as_bytes();
        if !buf.is_null() && len > 0 {
            // Cut where a character starts: a short buffer gets whole
            // characters, never the first bytes of one.
            let mut n = bytes.len().min(len - 1);
            while !text.is_char_boundary(n) {
                n -= 1;
            }
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
    LAST_MESSAGE.try_with(|m| copy(m.borrow().as_str())).unwrap_or_else(|_| copy(""))
}

/// The longest TTL or cooldown a call accepts: 100 years, as the spec's
/// `ttl` (a longer one is a mistake, and keeps time sums far from overflow).
const LONGEST_DURATION_MS: u64 = 100 * 365 * 86_400_000;

/// The argument `name`, a TTL or cooldown of `ms` milliseconds for `lock`,
/// refused with `LOCK_ERR_INVALID_ARGUMENT` beyond 100 years, with a message
/// that names the lock, the argument and the limit.
pub fn duration_arg(lock: &Lock, name: &str, ms: u64) -> Result<Duration, Failure> {
    if ms > LONGEST_DURATION_MS {
        return Err(Failure::Located {
            code: lock_result::LOCK_ERR_INVALID_ARGUMENT,
            errno: None,
            text: format!("{}: {name} of {ms} ms is longer than 100 years, the longest a call takes", lock.name()),
        });
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::lock_handle;

    fn message() -> String {
        let mut buf = [0 as libc::c_char; MESSAGE_CAPACITY];
        let len = copy_last_message(buf.as_mut_ptr(), buf.len());
        let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
        String::from_utf8(bytes).unwrap()
    }

    fn handle() -> *mut lock_handle {
        let path = std::env::temp_dir().join(format!("lockffi-boundary-{}", std::process::id()));
        lock_handle::open(format!("lease:{}", path.display()).as_bytes()).unwrap()
    }

    /// The shape of an export, for a body that panics.
    fn panicking_export(handle: *mut lock_handle, out: *mut u64) -> lock_result {
        ffi_export!(lock_test, claim(handle), required(out), |claimed| {
            let _ = claimed.lock();
            panic!("the body panicked");
        })
    }

    #[test]
    fn a_panic_becomes_lock_err_panic_with_its_text_and_gives_the_handle_back() {
        let handle = handle();
        let mut out = 0u64;
        assert_eq!(panicking_export(handle, &mut out), lock_result::LOCK_ERR_PANIC);
        assert_eq!(message(), "lock_test: internal error in the lock library (caught panic): the body panicked");
        // The claim was given back while unwinding: the next call gets in.
        assert_eq!(panicking_export(handle, &mut out), lock_result::LOCK_ERR_PANIC);
        // SAFETY: made by lock_handle::open above (a Box), freed once,
        // holding nothing.
        drop(unsafe { Box::from_raw(handle) });
    }

    #[test]
    fn a_null_argument_is_named_and_checked_after_the_claim() {
        assert_eq!(panicking_export(std::ptr::null_mut(), std::ptr::null_mut()), lock_result::LOCK_ERR_NULL_ARGUMENT);
        assert_eq!(message(), "lock_test: handle: a required pointer argument is NULL");
        let handle = handle();
        assert_eq!(panicking_export(handle, std::ptr::null_mut()), lock_result::LOCK_ERR_NULL_ARGUMENT);
        assert_eq!(message(), "lock_test: out: a required pointer argument is NULL");
        // SAFETY: a live handle from above; the claim is held until the end.
        let claimed = unsafe { &*handle }.claim().unwrap();
        assert_eq!(panicking_export(handle, std::ptr::null_mut()), lock_result::LOCK_ERR_HANDLE_IN_USE);
        drop(claimed);
        // SAFETY: made by lock_handle::open above (a Box), freed once,
        // holding nothing.
        drop(unsafe { Box::from_raw(handle) });
    }

    #[test]
    fn a_call_that_returns_a_value_answers_its_fallback_on_a_panic_and_keeps_the_message_otherwise() {
        set_message(|m| write!(m, "lock_open: an earlier failure"));
        assert_eq!(call_returning("lock_test", 7, || 3), 3);
        assert_eq!(message(), "lock_open: an earlier failure", "a call that succeeds leaves the message");
        assert_eq!(call_returning("lock_test", 7, || -> i32 { panic!("inside") }), 7);
        assert_eq!(message(), "lock_test: internal error in the lock library (caught panic): inside");
    }
}

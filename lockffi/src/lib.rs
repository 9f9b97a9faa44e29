//! # lockffi: the C interface of the lock library
//!
//! Built as `liblockffi.so` and `liblockffi.a`; the header is
//! `include/lockffi.h`, generated from this crate by cbindgen.
//!
//! ## API conventions
//! * Every function but `lock_version`, `lock_strerror` and
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
//!   give `LOCK_ERR_NULL_ARGUMENT` (the message names the argument), unknown
//!   result codes get a text, and a bug caught inside the library gives
//!   `LOCK_ERR_PANIC` (or, for the calls that return no code, a fallback
//!   their doc names). Every export goes through one macro that does this:
//!   see `boundary.rs`.
//! * Threads: a handle may be used from any thread, one call at a time; a
//!   concurrent second call gets `LOCK_ERR_HANDLE_IN_USE`. Separate handles
//!   are independent, even for the same lock: they exclude each other as two
//!   processes would. Every call fits in a thread stack of 160 KiB (built in
//!   release): a handle is made in place on the heap, never passed by value.
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

// The plumbing: the border with C, the handle, the result codes. The
// watchdog and the release at exit are lockstd's.
mod boundary;
mod handle;
mod result;

// The exports, by area, in the order the header shows them (cbindgen writes
// items in the order it meets them).
mod types;
// Handles, versions and errors.
mod open;
// Taking, releasing and prolonging.
mod acquire;
// Replacing a file while held.
mod commit;
// Renewing from a thread.
mod autorenew;
// Inspecting, breaking, the lock's path, the waiting callbacks.
mod inspect;

pub use crate::acquire::{lock_acquire, lock_prolong, lock_release, lock_took_over, lock_try_acquire};
pub use crate::autorenew::{lock_autorenew, lock_autorenew_stop, lock_lost_fn};
pub use crate::commit::lock_commit;
pub use crate::handle::{lock_cancel_fn, lock_handle, lock_warning_fn};
pub use crate::inspect::{lock_break, lock_inspect, lock_path, lock_set_cancel, lock_set_warning};
pub use crate::open::{lock_close, lock_last_error_message, lock_open, lock_strerror, lock_version};
pub use crate::result::lock_result;
pub use crate::types::{
    lock_info, lock_liveness, LOCKFFI_VERSION_MAJOR, LOCKFFI_VERSION_MINOR, LOCKFFI_VERSION_PATCH, LOCK_HOST_CAPACITY,
    LOCK_WAIT_FOREVER,
};

//! The plain types and constants of the C interface: version numbers,
//! `LOCK_WAIT_FOREVER`, and what `lock_inspect` fills in.

use std::ffi::c_char;

/// Major version of this library; matches the crate version.
pub const LOCKFFI_VERSION_MAJOR: u32 = 0;
/// Minor version of this library.
pub const LOCKFFI_VERSION_MINOR: u32 = 1;
/// Patch version of this library.
pub const LOCKFFI_VERSION_PATCH: u32 = 0;

/// Pass as `timeout_ms` to `lock_acquire` to wait as long as it takes.
pub const LOCK_WAIT_FOREVER: u64 = u64::MAX;

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
    /// The holder and this library's waiters in line (the turnstile every
    /// scheme has on a local file system, or `toplock`'s own queue).
    pub queue_length: u32,
    /// When the holder took the lock (for a lock of another program: when
    /// its file was last written), in Unix milliseconds; 0 if unknown or free.
    pub since_unix_ms: i64,
}

//! # lockcore
//!
//! Locks that keep a critical section to one process at a time, on one host
//! or across hosts sharing a file system, with no standard library and no
//! allocation: every buffer has a fixed size, every system call goes through
//! one small layer, and nothing here can panic on any input.
//!
//! ```no_run
//! use core::time::Duration;
//! use lockcore::{Lock, ReleaseOutcome};
//!
//! let mut lock = Lock::open(b"lockfile:/srv/board/data.txt?ttl=30s")?;
//! let held = lock.acquire(Some(Duration::from_secs(5)))?;
//! // read data.txt, change it, write it back; pass `held.fence` to storage
//! match lock.release(Duration::ZERO)? {
//!     ReleaseOutcome::Released => {}
//!     ReleaseOutcome::Expired => { /* we overran the TTL; nobody noticed */ }
//!     ReleaseOutcome::Lost => { /* someone broke our lock: our writes raced */ }
//! }
//! # Ok::<(), lockcore::Error>(())
//! ```
//!
//! ## The model
//! * A lock is named by a **spec** (`scheme:target?key=value&...`, see [`spec`]).
//!   The target is the lock's own path, except for `lockfile`, whose target
//!   is the file it protects (the lock is `<target>.lock`).
//! * An **owner** is host, boot id, pid and process start time ([`Owner`]);
//!   each acquisition adds a random nonce, so a record names one acquisition.
//! * Every acquisition gets a **fencing token**, strictly increasing per lock.
//! * **Stale** locks (expired, or a provably dead owner) are broken by the
//!   acquirer that judged them, atomically (under a short lock of a guard
//!   file beside the lock).
//! * **Who may take it**: the spec's `mode` ([`Sharing`]). Files are created
//!   with exactly those bits, and a file someone else could have written
//!   is refused. Nothing is written or removed that lacks this library's
//!   format or a peer's lock format.
//! * **Time**: expiries are judged by the boot clock on the boot that
//!   wrote them, so a stepped wall clock never ends a live lock ([`Moment`]).
//! * **Waiting** is a deadline with jittered backoff ([`wait`]); every wait
//!   inside an operation ends by the operation's deadline.
//! * Release and prolong tell apart done, **expired** and **lost**.
//!
//! ## Adding a strategy
//! The modules named below in plain code (`sys`, `files`, `guard`, `fence`)
//! are private to the crate: read them in `src/`.
//! 1. Add a file in `src/strategy/` (`strategy/example.rs` is the template,
//!    built with the `example-scheme` feature). If its lock is a path that
//!    is made in one step but broken in several (read, judge, remove),
//!    implement [`strategy::guarded::LockStore`] (read, create, replace,
//!    remove) and let [`strategy::guarded::Guarded`] supply every policy.
//!    Otherwise implement [`Strategy`] itself, and each optional ability
//!    ([`strategy::Prolong`], [`strategy::Break`], ...) it has; read the
//!    contract first.
//! 2. Make no system call except through `sys` (add a wrapper there if
//!    one is missing), and allocate nothing: buffers are fixed arrays.
//! 3. Create files complete, with exactly the sharing's mode, under helper
//!    names (`files`); check what you find with [`Sharing::check`];
//!    refuse what lacks your format with [`Problem::NotALock`]. A format
//!    of your own gets a fuzz target for its parser, and its encoder and
//!    parser go into the hidden `internals` module, through which the
//!    tests forge and read its files.
//! 4. Take the time once your exclusion is held (`guard::HeldGuard::now`,
//!    `guard::LockedFile::now`), never before waiting for it; end every
//!    wait by `cx.deadline`. Draw fences with `fence::next`. Answer
//!    `release`, `prolong` and `run_while_held` from the record on disk, not
//!    from the handle's memory.
//! 5. Give it one entry in [`registry`]: its name, its strategy type, what
//!    its target is, the options it takes beyond the common ones, and its
//!    abilities. Nothing else names schemes: the parser, the handle, the
//!    tests, the C tests, the torture suite, the demo and the benchmarks
//!    all iterate over [`Scheme::ALL`]. Run the torture suite.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

mod clock;
pub mod endpoint;
pub mod error;
mod fair;
mod fence;
mod files;
mod guard;
mod kept;
mod lock;
mod look;
mod owner;
mod process;
mod record;
pub mod registry;
mod resolver;
pub mod spec;
pub mod strategy;
mod sys;
mod text;
mod trust;
mod turnstile;
pub mod wait;

pub use clock::{BootId, BootTime, Moment, MonoTime, WallTime};
pub use error::{
    Contention, CorruptKind, EntryName, Error, ErrorKind, FileError, FileRole, HolderSummary, Problem, ServerError,
    ServerProblem, SpecError, SpecErrorKind, Unsupported, Untrusted, ENTRY_NAME_CAPACITY,
};
pub use fair::LONGEST_SLEEP_IN_LINE;
pub use lock::{Acquired, Described, Lock, LockGuard, LockName, ATTEMPT_PATIENCE, CHANGE_PATIENCE, TRY_PATIENCE};
pub use look::LOOK_BELIEVED_FOR;
pub use owner::{HostName, Liveness, Nonce, Owner, ProcessId, FOREIGN_CLOCK_TOLERANCE, HOST_CAPACITY};
pub use process::incarnation as process_incarnation;
pub use record::Record;
pub use registry::{Ability, AbilitySet, TargetKind};
pub use spec::{Scheme, Spec, Target};
pub use strategy::redis::local_lease as redis_local_lease;
pub use strategy::{CommitOutcome, Holder, Inspection, ProlongOutcome, ReleaseOutcome, Strategy};
pub use sys::{CPath, Errno, FileStat, PathError, PATH_CAPACITY};
pub use trust::Sharing;

/// The library's own file formats, for this workspace's tests, fuzz
/// targets and benchmarks: they forge, parse and measure what a lock leaves
/// on disk with the very code that writes and reads it, so that the formats
/// have one encoding.
///
/// **Not part of the API.** Hidden from the documentation, with no
/// stability promise: anything here may change or go in any release. A
/// program that uses locks has no need of it.
#[doc(hidden)]
pub mod internals {
    pub use crate::guard::{GuardState, GUARD_RECORD_LEN};
    pub use crate::record::{
        parse_lock_file, LockFileContent, Stamp, Unrecognised, MARKER as RECORD_MARKER, RECORD_CAPACITY,
    };
    pub use crate::strategy::lease::{LeaseState, LEASE_RECORD_LEN};
    pub use crate::strategy::redis::resp::{
        encode as encode_resp, parse as parse_resp, Parsed as RespParsed, Reply as RespReply,
        LONGEST_REPLY as RESP_LONGEST_REPLY,
    };
    pub use crate::strategy::redis::waiter_pid as redis_waiter_pid;
    pub use crate::strategy::shm::{SECTION_AT as SHM_SECTION_AT, TAG_BYTES_AT as SHM_TAG_BYTES_AT};
    pub use crate::strategy::toplock::line::{Grant, Header, Line, LINE_CAPACITY};
    pub use crate::strategy::toplock::queue_file::{COMPACT_AT, QUEUE_CAPACITY};
    pub use crate::strategy::toplock::replay::Replay;
    /// What the encoders here return.
    pub use crate::text::FixedText;

    /// The pid of the next waiter to be served in the turnstile beside the
    /// lock at `lock` (its path, as [`Lock::path`](crate::Lock::path) names
    /// it) of mode `mode`, if it has one and anyone waits: for tests that
    /// kill it.
    pub fn next_in_line(lock: &crate::CPath, mode: u32) -> Option<i32> {
        let line = crate::turnstile::Turnstile::open(lock, crate::Sharing::new(mode), false).ok()?;
        line.next_in_line()
    }
}

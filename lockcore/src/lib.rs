//! # lockcore
//!
//! Locks that keep a critical section to one process at a time, on one host
//! or across hosts sharing a file system, with no standard library and no
//! allocation: every buffer has a fixed size, every system call goes through
//! [`sys`], and nothing here can panic on any input.
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
//! * An **owner** is host, boot id, pid and process start time ([`owner`]);
//!   each acquisition adds a random nonce, so a record names one acquisition.
//! * Every acquisition gets a **fencing token**, strictly increasing per lock.
//! * **Stale** locks (expired, or a provably dead owner) are broken by the
//!   acquirer that judged them, atomically ([`guard`]).
//! * **Who may take it**: the spec's `mode` ([`trust`]). Files are created
//!   with exactly those bits, and a file someone else could have written
//!   is refused. Nothing is written or removed that lacks this library's
//!   format or a peer's lock format ([`files`]).
//! * **Time**: expiries are judged by the boot clock on the boot that
//!   wrote them, so a stepped wall clock never ends a live lock ([`clock`]).
//! * **Waiting** is a deadline with jittered backoff ([`wait`]); every wait
//!   inside an operation ends by the operation's deadline.
//! * Release and prolong tell apart done, **expired** and **lost**.
//!
//! ## Adding a strategy
//! 1. Add a file in `src/strategy/` (`strategy/example.rs` is the template,
//!    built with the `example-scheme` feature). If its lock is a path that
//!    is made in one step but broken in several (read, judge, remove),
//!    implement [`strategy::guarded::LockStore`] (read, create, replace,
//!    remove) and let [`strategy::guarded::Guarded`] supply every policy.
//!    Otherwise implement [`Strategy`] itself, and each optional ability
//!    ([`strategy::Prolong`], [`strategy::Break`], ...) it has; read the
//!    contract first.
//! 2. Make no system call except through [`sys`] (add a wrapper there if
//!    one is missing), and allocate nothing: buffers are fixed arrays.
//! 3. Create files complete, with exactly the sharing's mode, under helper
//!    names ([`files`]); check what you find with [`trust::Sharing::check`];
//!    refuse what lacks your format with [`Problem::NotALock`].
//! 4. Take the time once your exclusion is held ([`guard::HeldGuard::now`],
//!    [`guard::LockedFile::now`]), never before waiting for it; end every
//!    wait by `cx.deadline`. Draw fences with [`fence::next`]. Answer
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

#[cfg(test)]
extern crate std;

pub mod clock;
pub mod endpoint;
pub mod error;
pub mod fence;
pub mod files;
pub mod guard;
mod lock;
pub mod owner;
pub mod record;
pub mod registry;
pub mod spec;
pub mod strategy;
pub mod sys;
pub mod text;
pub mod trust;
pub mod wait;

pub use clock::{BootId, BootTime, Moment, MonoTime, WallTime};
pub use error::{
    Contention, CorruptKind, Error, ErrorKind, FileError, FileRole, HolderSummary, Problem, SpecError, SpecErrorKind,
    Unsupported, Untrusted,
};
pub use lock::{Acquired, Described, Lock, LockGuard, ATTEMPT_PATIENCE, CHANGE_PATIENCE, TRY_PATIENCE};
pub use owner::{Liveness, Nonce, Owner};
pub use registry::{Ability, AbilitySet, TargetKind};
pub use spec::{Scheme, Spec, Target};
pub use strategy::{CommitOutcome, Holder, Inspection, ProlongOutcome, ReleaseOutcome, Strategy};

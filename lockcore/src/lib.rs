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
//! * An **owner** is host, boot id, pid and process start time ([`owner`]);
//!   each acquisition adds a random nonce, so a record names one acquisition.
//! * Every acquisition gets a **fencing token**, strictly increasing per lock.
//! * **Stale** locks (expired, or a provably dead owner) are broken by the
//!   acquirer that judged them, atomically ([`guard`]).
//! * **Waiting** is a deadline with jittered backoff ([`wait`]).
//! * Release and prolong tell apart done, **expired** and **lost**.
//!
//! ## Adding a strategy
//! 1. Add a file in `src/strategy/` with a type that implements
//!    [`Strategy`]; read its contract first. Make no system call except
//!    through [`sys`] (add a wrapper there if one is missing), and allocate
//!    nothing: buffers are fixed arrays in the strategy's struct.
//! 2. If the mechanism cannot judge a stale record and remove it in one
//!    atomic step, do every change to the lock path inside a guard section
//!    ([`guard::GuardFile`]); keep the fence and the cooldown there.
//! 3. Answer `release`, `prolong` and `run_while_held` from the record on
//!    disk, not from the handle's memory: a watchdog or an operator may have
//!    moved the expiry. Read the clock once your guard is held
//!    ([`strategy::Context::renewed`]), never before waiting for it. Draw
//!    fences with [`fence::next`]. A queueing strategy keeps its place
//!    between attempts and gives it up in `abandon`.
//! 4. Give it a [`spec::Scheme`] variant (and a place in `Scheme::ALL`), the
//!    keys it accepts in `Scheme::accepts`, and a variant of the handle's
//!    dispatch in `lock.rs`.
//! 5. Add its row to the C tests' strategy table (`c-tests/c/harness.h`).
//!    The C ABI, the torture suite and the benchmarks iterate over
//!    `Scheme::ALL` and need no change. Run the torture suite.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

#[cfg(test)]
extern crate std;

pub mod clock;
pub mod error;
pub mod fence;
pub mod files;
pub mod guard;
mod lock;
pub mod owner;
pub mod record;
pub mod spec;
pub mod strategy;
pub mod sys;
pub mod text;
pub mod trust;
pub mod wait;

pub use clock::{BootId, BootTime, Moment, MonoTime, WallTime};
pub use error::{
    Contention, CorruptKind, Error, ErrorKind, FileError, FileRole, HolderSummary, Problem, SpecError, SpecErrorKind,
    Untrusted,
};
pub use lock::{Acquired, Described, Lock, LockGuard, ATTEMPT_PATIENCE, CHANGE_PATIENCE, TRY_PATIENCE};
pub use owner::{Liveness, Nonce, Owner};
pub use spec::{Scheme, Spec};
pub use strategy::{CommitOutcome, Holder, Inspection, ProlongOutcome, ReleaseOutcome, Strategy};

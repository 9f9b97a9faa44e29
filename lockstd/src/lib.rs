//! # lockstd: the lock library's parts that need threads and process exit
//!
//! `lockcore` takes, releases and prolongs locks without `std`. What needs
//! more lives here, for Rust programs and for the C interface (`lockffi`),
//! which is built on it:
//!
//! * [`Watchdog`]: a thread that prolongs a held [`lockcore::Lock`] every
//!   third of its `ttl`, until stopped, and tells a callback when it finds
//!   the lock expired ([`Lapse::Expired`]) or taken by someone else
//!   ([`Lapse::Lost`]).
//! * [`release_at_exit`]: a lock that is still held when the process exits
//!   normally (return from `main`, [`std::process::exit`]) is released then,
//!   as LockFile::Simple's `autoclean` does, so that others need not wait
//!   for its TTL. [`at_exit`] has the general form, for a type that holds
//!   a lock and a watchdog together.
//!
//! Both are safe across `fork()`: a child never waits for a thread it did
//! not inherit, and never releases a lock its parent took.
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//! use lockcore::Lock;
//! use lockstd::{release_at_exit, Lapse, Watchdog};
//!
//! let mut lock = Lock::open("lease:/run/lock/report.lease?ttl=30s")?;
//! lock.acquire(Some(std::time::Duration::from_secs(5)))?;
//! // Renewed every 10 s until `watchdog` is dropped.
//! let watchdog = Watchdog::start(&lock, |lapse| {
//!     if lapse == Lapse::Lost {
//!         eprintln!("someone broke our lock; stop writing");
//!     }
//! })?;
//! // ... long work ...
//! drop(watchdog);
//! // Released at exit, should the program call exit() before releasing.
//! let lock = Arc::new(Mutex::new(lock));
//! let _registration = release_at_exit(&lock);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod at_exit;
mod watchdog;

pub use crate::at_exit::{release_at_exit, Registration};
pub use crate::watchdog::{Lapse, StartError, Watchdog, RENEWAL_PATIENCE};

//! The lock handle: a parsed spec, the strategy it names, the caller's
//! identity, and the acquisition it holds.

use core::time::Duration;

use crate::clock::{MonoTime, WallTime};
use crate::error::Error;
use crate::owner::{Nonce, Owner};
use crate::record::Record;
use crate::spec::{Scheme, Spec};
use crate::strategy::{
    flock::Flock, lease::Lease, lockfile::LockFile, mkdir::Mkdir, symlink::Symlink, toplock::Toplock, CommitOutcome,
    Context, Inspection, ProlongOutcome, ReleaseOutcome, Strategy,
};
use crate::sys::{self, CPath};
use crate::wait::{self, Sleep, WakeSource, Warnings};

/// A successful acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// Strictly greater than the fence of every earlier acquisition of this
    /// lock, in any process: hand it to the resource so that it can refuse a
    /// holder whose lease has run out.
    pub fence: u64,
    /// When others may break the lock; `None` without a TTL.
    pub expires: Option<WallTime>,
}

// The variants differ in size because nothing is allocated: paths and the
// toplock replay buffer live inline. A `Lock` is a few tens of KiB; box it
// (lockffi does) rather than keep many on a small stack.
#[allow(clippy::large_enum_variant)]
enum AnyStrategy {
    Lockfile(LockFile),
    Mkdir(Mkdir),
    Flock(Flock),
    Symlink(Symlink),
    Lease(Lease),
    Toplock(Toplock),
}

impl AnyStrategy {
    fn get(&mut self) -> &mut dyn Strategy {
        match self {
            AnyStrategy::Lockfile(s) => s,
            AnyStrategy::Mkdir(s) => s,
            AnyStrategy::Flock(s) => s,
            AnyStrategy::Symlink(s) => s,
            AnyStrategy::Lease(s) => s,
            AnyStrategy::Toplock(s) => s,
        }
    }
}

/// A lock named by a spec, and this process's hold on it.
///
/// A `Lock` is `Send` but not `Sync`: move it between threads freely, use it
/// from one at a time. Dropping a `Lock` that holds its lock releases it
/// (without cooldown), but only in the process that acquired it: after
/// `fork()` the child's copy refuses to release or prolong the parent's lock
/// ([`Error::Forked`]) and its drop leaves it alone.
pub struct Lock {
    spec: Spec,
    me: Owner,
    strategy: AnyStrategy,
    held: Option<Record>,
    /// Made by [`Lock::adopt`]: prolongs, never releases on drop.
    adopted: bool,
}

impl core::fmt::Debug for Lock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lock")
            .field("scheme", &self.spec.scheme)
            .field("path", self.path())
            .field("held", &self.held)
            .finish()
    }
}

impl Lock {
    /// Parses `spec` and prepares the lock. No file is touched yet.
    pub fn open(spec: &[u8]) -> Result<Lock, Error> {
        Lock::with_spec(Spec::parse(spec)?)
    }

    pub fn with_spec(spec: Spec) -> Result<Lock, Error> {
        let me = Owner::current()?;
        let strategy = match spec.scheme {
            Scheme::Lockfile => AnyStrategy::Lockfile(LockFile::new(&spec, me.process.pid)?),
            Scheme::Mkdir => AnyStrategy::Mkdir(Mkdir::new(&spec)?),
            Scheme::Flock => AnyStrategy::Flock(Flock::new(&spec)),
            Scheme::Symlink => AnyStrategy::Symlink(Symlink::new(&spec)?),
            Scheme::Lease => AnyStrategy::Lease(Lease::new(&spec)),
            Scheme::Toplock => AnyStrategy::Toplock(Toplock::new(&spec)?),
        };
        Ok(Lock { spec, me, strategy, held: None, adopted: false })
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The path that is the lock: the lock file, the lock directory, the
    /// flock'd file.
    pub fn path(&self) -> &CPath {
        match &self.strategy {
            AnyStrategy::Lockfile(s) => s.path(),
            AnyStrategy::Mkdir(s) => s.path(),
            AnyStrategy::Flock(s) => s.path(),
            AnyStrategy::Symlink(s) => s.path(),
            AnyStrategy::Lease(s) => s.path(),
            AnyStrategy::Toplock(s) => s.path(),
        }
    }

    /// The record of the acquisition this handle holds.
    pub fn held(&self) -> Option<&Record> {
        self.held.as_ref()
    }

    /// One attempt: [`Error::Busy`] if someone else holds the lock or it is
    /// cooling down. A queueing strategy does not keep a place for a caller
    /// that does not wait.
    pub fn try_acquire(&mut self) -> Result<Acquired, Error> {
        let result = self.attempt();
        if result.is_err() {
            self.abandon();
        }
        result
    }

    /// One attempt that keeps a queueing strategy's place on failure, for
    /// the attempts of one `acquire`.
    fn attempt(&mut self) -> Result<Acquired, Error> {
        self.refresh_identity()?;
        if self.held.is_some() {
            return Err(Error::AlreadyHeld);
        }
        let nonce = Nonce::random()?;
        let now = WallTime::now();
        let expires = self.spec.options.ttl.map(|ttl| now.saturating_add(ttl));
        let cx = Context { me: &self.me, options: &self.spec.options, now };
        let record = self.strategy.get().try_acquire(&cx, nonce, expires)?;
        self.held = Some(record);
        Ok(Acquired { fence: record.fence, expires: record.expires })
    }

    /// Gives up a queue place kept by failed attempts (best effort: a
    /// request left behind is skipped once its owner is gone).
    fn abandon(&mut self) {
        if self.me.process.pid == sys::getpid() {
            let cx = Context { me: &self.me, options: &self.spec.options, now: WallTime::now() };
            let _ = self.strategy.get().abandon(&cx);
        }
    }

    /// Waits up to `budget` (`None`: as long as it takes) for the lock.
    pub fn acquire(&mut self, budget: Option<Duration>) -> Result<Acquired, Error> {
        self.acquire_with(budget, &mut Sleep, None)
    }

    /// [`acquire`](Self::acquire) with a wake source and a warning callback,
    /// called after `wmin` and every `wafter` of waiting (unless `warn=0`).
    pub fn acquire_with(
        &mut self,
        budget: Option<Duration>,
        wake: &mut dyn WakeSource,
        warn: Option<&mut dyn FnMut(Duration)>,
    ) -> Result<Acquired, Error> {
        let options = self.spec.options;
        let warnings =
            warn.filter(|_| options.warn).map(|notify| Warnings { first: options.wmin, every: options.wafter, notify });
        // Jitter only needs waiters to differ, not secrecy: the clock and the
        // pid do that without a getrandom call on every acquire.
        let seed = (MonoTime::now().since(MonoTime::EPOCH).as_nanos() as u64) ^ ((self.me.process.pid as u64) << 32);
        let result = wait::wait_for(budget, wake, warnings, seed, || self.attempt());
        if result.is_err() {
            self.abandon();
        }
        result
    }

    /// Acquires and returns a guard that releases on drop.
    pub fn lock(&mut self, budget: Option<Duration>) -> Result<LockGuard<'_>, Error> {
        let acquired = self.acquire(budget)?;
        Ok(LockGuard { lock: self, acquired })
    }

    /// Releases the lock; a non-zero `cooldown` keeps it closed to everyone
    /// for that long afterwards. The handle holds nothing afterwards, whatever
    /// the outcome; on an error it still holds.
    pub fn release(&mut self, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let held = self.held_here()?;
        let cx = Context { me: &self.me, options: &self.spec.options, now: WallTime::now() };
        let outcome = self.strategy.get().release(&cx, &held, cooldown)?;
        self.held = None;
        Ok(outcome)
    }

    /// Moves the expiry to now + `ttl` (`None`: the spec's TTL; without one,
    /// the lock no longer expires).
    pub fn prolong(&mut self, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        let held = self.held_here()?;
        let now = WallTime::now();
        let expires = ttl.or(self.spec.options.ttl).map(|ttl| now.saturating_add(ttl));
        let cx = Context { me: &self.me, options: &self.spec.options, now };
        let outcome = self.strategy.get().prolong(&cx, &held, expires)?;
        self.held = match outcome {
            ProlongOutcome::Lost => None,
            ProlongOutcome::Prolonged | ProlongOutcome::Expired => Some(Record { expires, ..held }),
        };
        Ok(outcome)
    }

    /// Runs `action` only if this handle still holds the lock and is within
    /// its TTL, at a moment when no other process can take it over. On
    /// `Lost` the handle holds nothing afterwards.
    pub fn run_while_held(&mut self, action: &mut dyn FnMut() -> Result<(), Error>) -> Result<CommitOutcome, Error> {
        let held = self.held_here()?;
        let cx = Context { me: &self.me, options: &self.spec.options, now: WallTime::now() };
        let outcome = self.strategy.get().run_while_held(&cx, &held, action)?;
        if outcome == CommitOutcome::Lost {
            self.held = None;
        }
        Ok(outcome)
    }

    /// The seed-000 commit step: replaces `target` with the finished file
    /// `temp` by `rename(2)`, only if this handle still holds the lock at that
    /// moment. On `Expired` or `Lost`, `target` is untouched and `temp` is
    /// left for the caller. A failed rename is [`Error::Commit`]; a temp
    /// file or target that is the lock itself or its guard is
    /// [`Error::CommitOntoLock`] (renaming over either would destroy the lock).
    pub fn commit_file(&mut self, temp: &CPath, target: &CPath) -> Result<CommitOutcome, Error> {
        let lock = self.path().clone();
        let guard = crate::guard::guard_path(&lock)?;
        self.run_while_held(&mut || {
            // Judged by inode, not by name (a relative path, a link to a
            // directory), and under the guard, so the lock's files stay put.
            for path in [temp, target] {
                let Ok(given) = sys::lstat(path) else { continue };
                if [&lock, &guard].into_iter().any(|own| sys::lstat(own).is_ok_and(|own| own.same_file(&given))) {
                    return Err(Error::CommitOntoLock);
                }
            }
            sys::rename(temp, target).map_err(Error::Commit)
        })
    }

    /// A second handle on an acquisition this process holds through another
    /// handle (same spec, same record): for a watchdog thread that prolongs
    /// the lock while its owner works. It never releases: dropping it, or
    /// [`forget`](Self::forget), leaves the lock to its owner.
    pub fn adopt(spec: Spec, held: Record) -> Result<Lock, Error> {
        let mut lock = Lock::with_spec(spec)?;
        if held.owner.process.pid != lock.me.process.pid {
            return Err(Error::Forked);
        }
        lock.held = Some(held);
        lock.adopted = true;
        Ok(lock)
    }

    /// Stops tracking the acquisition without releasing it.
    pub fn forget(&mut self) {
        self.held = None;
    }

    /// Reads the lock's state without taking it.
    pub fn inspect(&mut self) -> Result<Inspection, Error> {
        self.refresh_identity()?;
        let cx = Context { me: &self.me, options: &self.spec.options, now: WallTime::now() };
        let mut inspection = self.strategy.get().inspect(&cx)?;
        if let (Some(holder), Some(held)) = (inspection.holder.as_mut(), self.held.as_ref()) {
            holder.this_handle = holder.record.is_some_and(|rec| rec.nonce == held.nonce);
        }
        Ok(inspection)
    }

    /// Removes the lock whoever holds it: for an operator who knows the
    /// holder is gone. `Ok(false)` if it was free.
    pub fn break_lock(&mut self) -> Result<bool, Error> {
        self.refresh_identity()?;
        let cx = Context { me: &self.me, options: &self.spec.options, now: WallTime::now() };
        self.strategy.get().break_lock(&cx)
    }

    /// The held record, if this process (not a parent before `fork()`) took it.
    fn held_here(&self) -> Result<Record, Error> {
        let held = self.held.ok_or(Error::NotHeld)?;
        if held.owner.process.pid != sys::getpid() {
            return Err(Error::Forked);
        }
        Ok(held)
    }

    /// After `fork()` the child is a new owner: new pid, new start time.
    fn refresh_identity(&mut self) -> Result<(), Error> {
        if self.me.process.pid == sys::getpid() {
            return Ok(());
        }
        if self.held.is_some() {
            return Err(Error::Forked);
        }
        self.me = Owner::current()?;
        Ok(())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.adopted && self.held_here().is_ok() {
            let _ = self.release(Duration::ZERO);
        }
    }
}

/// A held lock that is released when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct LockGuard<'a> {
    lock: &'a mut Lock,
    acquired: Acquired,
}

impl LockGuard<'_> {
    pub fn fence(&self) -> u64 {
        self.acquired.fence
    }

    pub fn expires(&self) -> Option<WallTime> {
        self.acquired.expires
    }

    pub fn prolong(&mut self, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        self.lock.prolong(ttl)
    }

    /// Releases now, with a cooldown, and says how it went. (Should the
    /// release fail, the drop that follows tries once more without cooldown.)
    pub fn release(self, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        self.lock.release(cooldown)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.lock.held_here().is_ok() {
            let _ = self.lock.release(Duration::ZERO);
        }
    }
}

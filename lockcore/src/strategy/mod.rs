//! The strategies, each in its own file, behind one trait.
//!
//! A strategy knows how to make one attempt at a lock and how to change a
//! lock it holds. It never retries a busy lock and never decides policy:
//! waiting lives in [`crate::wait`], the handle and its bookkeeping in
//! [`crate::Lock`]. The three strategies whose lock is a path that only a
//! guard can make safe to break (`lockfile`, `mkdir`, `symlink`) are one
//! skeleton, [`guarded::Guarded`], with the mechanism plugged in.

#[cfg(feature = "example-scheme")]
pub mod example;
pub mod flock;
pub mod guarded;
pub mod lease;
pub mod lockfile;
pub mod mkdir;
pub mod redis;
pub mod shm;
pub mod symlink;
pub mod toplock;

use core::fmt;
use core::time::Duration;

use crate::clock::{Moment, MonoTime, WallTime};
use crate::error::{CorruptKind, Error, FileRole, HolderSummary};
use crate::owner::{HostName, Liveness, Nonce, Owner};
use crate::record::Record;
use crate::spec::{Options, Spec, StaleCheck};
use crate::sys::{CPath, FileStat};
use crate::trust::Sharing;

/// What every operation of a strategy is told.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The calling process.
    pub me: &'a Owner,
    /// The spec's options.
    pub options: &'a Options,
    /// Who the lock trusts and the modes of what it creates, from `mode`.
    pub sharing: Sharing,
    /// When the operation must have returned: every wait inside it (for a
    /// guard, a lease or a queue file that other processes hold) ends then.
    pub deadline: MonoTime,
    /// For an attempt to acquire: how much longer its caller will go on
    /// trying (`None`: as long as it takes). A queue tells the others, so
    /// that a request whose caller gave up is passed over soon.
    pub waits_for: Option<Duration>,
    /// For an attempt to acquire: whether a place it takes in the
    /// strategy's own queue is kept for its caller's next attempt (a wait
    /// outside any turnstile). An attempt that keeps none (a try, or a
    /// waiter whose turnstile is the queue) takes a place only with the
    /// lock, so that nobody shows as waiting who does not.
    pub keeps_place: bool,
}

impl Context<'_> {
    /// The time now, by both clocks. Read it once the operation holds what
    /// excludes the others, never before waiting for that.
    pub fn now(&self) -> Moment {
        self.me.now()
    }
}

/// A lock taken by one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The record that holds the lock now.
    pub record: Record,
    /// The holder whose lock the attempt found stale and broke, as judged
    /// then: it died holding the lock, or ran past its expiry. `None` when
    /// the lock was free, or when the strategy cannot tell (a server that
    /// lets an expired key go by itself).
    pub took_over_from: Option<Holder>,
}

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The lock was ours and within its TTL; it is released.
    Released,
    /// The lock was ours but held past its TTL; nobody took it; it is released.
    /// Whatever the caller did after the expiry was unprotected.
    Expired,
    /// Someone else holds the lock now (or broke ours); nothing was removed.
    Lost,
}

impl ReleaseOutcome {
    /// The outcome of releasing a record that was still ours, by its expiry.
    pub fn of_own(expires: Option<Moment>, now: Moment) -> ReleaseOutcome {
        if past_expiry(expires, now) {
            ReleaseOutcome::Expired
        } else {
            ReleaseOutcome::Released
        }
    }
}

/// How a prolong ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProlongOutcome {
    /// The lock was ours and within its TTL; the new expiry is written.
    Prolonged,
    /// The lock was ours but past its TTL; nobody took it; the new expiry is
    /// written and the lock is held again. The overrun was unprotected.
    Expired,
    /// Someone else holds the lock now; nothing was written.
    Lost,
}

impl ProlongOutcome {
    /// The outcome of prolonging a record that was still ours, by its old expiry.
    pub fn of_own(expires: Option<Moment>, now: Moment) -> ProlongOutcome {
        if past_expiry(expires, now) {
            ProlongOutcome::Expired
        } else {
            ProlongOutcome::Prolonged
        }
    }
}

/// Who holds a lock, as seen from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// 0 when the lock names no pid.
    pub pid: i32,
    /// `None` for a peer's stamp without host (same host assumed).
    pub host: Option<HostName>,
    /// The full record, when the holder is this library.
    pub record: Option<Record>,
    /// Whether its owner lives, as far as this host can tell.
    pub liveness: Liveness,
    /// Whether the next acquirer would break this lock.
    pub stale: bool,
    /// Whether the record is the one the inspecting handle holds.
    pub this_handle: bool,
    /// When it took the lock (or, for a peer's lock, last wrote it).
    pub since: Option<WallTime>,
    /// When others may break it, on the wall clock as seen now.
    pub expires: Option<WallTime>,
}

impl Holder {
    /// The few words an error message gives the holder.
    pub fn summary(&self) -> HolderSummary {
        HolderSummary { pid: self.pid, host: self.host, since: self.since, expires: self.expires }
    }
}

/// Whether an action that needs the lock ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The lock was ours and within its TTL; the action ran while no one
    /// could take the lock over.
    Committed,
    /// The lock was ours but past its TTL; the action did not run.
    Expired,
    /// Someone else holds the lock; the action did not run.
    Lost,
}

/// The state of a lock, read without taking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// `None` when the lock is free.
    pub holder: Option<Holder>,
    /// The last fencing token handed out for this lock.
    pub last_fence: u64,
    /// A released lock stays closed until then (wall clock, as seen now).
    pub cooldown_until: Option<WallTime>,
    /// Requests in the queue, the holder's included, for strategies that
    /// keep one (`toplock`); `None` for the others.
    pub queue_length: Option<u32>,
}

/// What every strategy does: take the lock once, give it back, and tell
/// who holds it. What only some can do is an optional trait below, each
/// handed out by [`Abilities`] as the scheme's registry entry lists it
/// ([`crate::registry`]), in the manner of lock_api's `RawMutex`,
/// `RawMutexFair` and `RawMutexTimed`.
///
/// # Contract
/// * Every wait inside an operation (for a guard, a lease or a queue file)
///   ends by `cx.deadline`, with [`Error::Busy`] and
///   [`Contention::GuardHeld`](crate::error::Contention::GuardHeld).
/// * Every operation reads the time it decides by, and computes the times it
///   writes (an expiry is that time plus the `ttl` it is given), only once
///   it holds whatever excludes the other processes, never before waiting
///   for it.
/// * `try_acquire` either creates a record for `nonce` that excludes every
///   other holder and returns it (with the holder whose stale lock it broke,
///   if it did), or returns [`Error::Busy`] (held by someone
///   else, or cooling down) or another error. Its fence is strictly greater
///   than the fence of every earlier successful `try_acquire` of this lock,
///   in any process, and never below the clock floor of `fence::next`.
/// * `release` (and every ability that changes a held lock) acts only on
///   the record it is given, and only if it is still the lock's; otherwise
///   it reports `Lost` and changes nothing.
/// * A stale record (expired, or a provably dead owner when
///   `stale=pid`) is removed only by the operation that judged it, with no
///   window in which another process can create a fresh record that the
///   removal would then take away.
/// * Nothing is written, truncated, renamed or removed that does not carry
///   this library's format or a peer's lock format (`files`).
pub trait Strategy: fmt::Debug {
    /// Prepares the lock `spec` names; touches no file yet.
    fn open(spec: &Spec, sharing: Sharing) -> Result<Self, Error>
    where
        Self: Sized;
    /// One attempt, which never waits for the lock itself (only, briefly,
    /// for whatever orders its changes).
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error>;
    /// Gives the lock back and tells whether it was still ours.
    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error>;
    /// The lock's state, read without taking it.
    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error>;
}

/// Hands out the optional abilities of a strategy: `None` for one it does
/// not have. Implemented for each strategy type by its registry entry,
/// never by hand, so that what a scheme can do is declared in one place.
pub trait Abilities {
    /// [`Prolong`], if the strategy has it.
    fn as_prolong(&mut self) -> Option<&mut dyn Prolong> {
        None
    }
    /// [`Cooldown`], if the strategy has it.
    fn as_cooldown(&mut self) -> Option<&mut dyn Cooldown> {
        None
    }
    /// [`Break`], if the strategy has it.
    fn as_break(&mut self) -> Option<&mut dyn Break> {
        None
    }
    /// [`Queue`], if the strategy has it.
    fn as_queue(&mut self) -> Option<&mut dyn Queue> {
        None
    }
    /// [`Commit`], if the strategy has it.
    fn as_commit(&mut self) -> Option<&mut dyn Commit> {
        None
    }
    /// [`Files`], if the strategy has it.
    fn as_files(&self) -> Option<&dyn Files> {
        None
    }
    /// [`OwnWake`], if the strategy has it.
    fn as_own_wake(&mut self) -> Option<&mut dyn OwnWake> {
        None
    }
    /// [`TimedAcquire`], if the strategy has it.
    fn as_timed_acquire(&mut self) -> Option<&mut dyn TimedAcquire> {
        None
    }
}

/// Moves a held lock's expiry.
pub trait Prolong {
    /// Moves `held`'s expiry to now + `ttl` (`None`: never), if `held` is
    /// still the lock's record; `held` then carries what was written.
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error>;
}

/// Keeps a released lock closed.
pub trait Cooldown {
    /// [`Strategy::release`], after which nobody can take the lock for
    /// `cooldown`.
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error>;
}

/// Takes the lock from its holder. A strategy without it has locks that
/// never go stale.
pub trait Break {
    /// Removes the lock whoever holds it (an operator's tool). `Ok(false)`
    /// when it was free.
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error>;
}

/// Keeps a place in a queue between the unsuccessful attempts of one
/// acquire (first come, first served), for attempts that ask it to
/// ([`Context::keeps_place`]).
pub trait Queue {
    /// Gives up the place that unsuccessful attempts kept; the caller must
    /// do so before its deadline.
    fn abandon(&mut self, cx: &Context<'_>) -> Result<(), Error>;
}

/// Runs an action while nobody can take the lock over: the commit step.
pub trait Commit {
    /// Runs `action` only if `held` is still the lock's record and within
    /// its TTL, at a moment when no other process can take the lock over
    /// (under the strategy's guard).
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error>;
}

/// Keeps the lock in files of this host, which callers may name.
pub trait Files {
    /// The path that is the lock.
    fn path(&self) -> &CPath;
    /// The guard beside it, for the strategies that keep one.
    fn guard_path(&self) -> Option<&CPath> {
        None
    }
}

/// Wakes its own waiters when the lock changes hands, instead of leaving
/// them to [`crate::wait::Sleep`].
pub trait OwnWake {
    /// The wake source that waiters for this lock wait on.
    fn wake_source(&mut self) -> &mut dyn crate::wait::WakeSource;

    /// Arms the wake source for an attempt at the lock that this very
    /// strategy is about to make: a strategy that reads what a release
    /// changes in every attempt may read it there instead, without a look
    /// of its own.
    fn arm_for_attempt(&mut self) -> Result<(), crate::error::Error> {
        self.wake_source().arm()
    }
}

/// Waits for the lock inside one call (a blocking system call, a server
/// that queues the request), until `cx.deadline`.
pub trait TimedAcquire {
    /// [`Strategy::try_acquire`] that waits for the lock itself until
    /// `cx.deadline`, then answers [`Error::Busy`]. The handle calls it
    /// again at once: an answer of busy before the deadline makes it spin.
    fn acquire_until(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error>;
}

/// Whether a held record has run past its expiry at `now`.
pub fn past_expiry(expires: Option<Moment>, now: Moment) -> bool {
    expires.is_some_and(|at| at.has_come(now))
}

/// A new record for this process, taken at `now`.
pub fn new_record(cx: &Context<'_>, nonce: Nonce, fence: u64, now: Moment, ttl: Option<Duration>) -> Record {
    Record { owner: *cx.me, nonce, fence, since: now.wall, expires: ttl.map(|ttl| now.saturating_add(ttl)) }
}

/// The commit decision once the current record is known: run `action` if
/// `on_disk` is ours and unexpired.
pub fn commit_if_current(
    on_disk: Option<Record>,
    now: Moment,
    action: &mut dyn FnMut() -> Result<(), Error>,
) -> Result<CommitOutcome, Error> {
    match on_disk {
        None => Ok(CommitOutcome::Lost),
        Some(record) if past_expiry(record.expires, now) => Ok(CommitOutcome::Expired),
        Some(_) => action().map(|()| CommitOutcome::Committed),
    }
}

/// Judges a record of this library at `now`: its holder, and whether the
/// next acquirer would break it (past its expiry, or, with `stale=pid`, its
/// owner provably dead).
pub fn judge_record(cx: &Context<'_>, rec: &Record, now: Moment) -> Holder {
    let liveness = cx.me.judge(&rec.owner);
    Holder {
        pid: rec.owner.process.pid,
        host: Some(rec.owner.host),
        record: Some(*rec),
        liveness,
        stale: past_expiry(rec.expires, now)
            || (cx.options.stale == StaleCheck::DeadOwner && liveness == Liveness::Dead),
        this_handle: false,
        since: Some(rec.since),
        expires: rec.expires.map(|at| at.wall_as_seen(now)),
    }
}

/// How liblockfile judges its own locks without a pid: stale once this long
/// after they were last written (or touched with `lockfile_touch`).
pub const PID_LESS_LIFETIME: Duration = Duration::from_secs(300);

/// What holds a lock found at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    /// A record of this library.
    Ours(Record),
    /// A lock made by a peer, judged by that peer's rules.
    Foreign {
        /// The pid the peer wrote; 0 when it wrote none.
        pid: i32,
        /// The host it wrote; `None`: this host.
        host: Option<HostName>,
        /// How the peer's locks go stale.
        rule: ForeignRule,
    },
    /// This library's format, damaged: no owner to judge, so stale by age
    /// only (its file's time plus the `ttl`).
    Corrupt(CorruptKind),
}

/// How a peer's lock goes stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForeignRule {
    /// A LockFile::Simple or liblockfile stamp with a pid, or a shell's
    /// `ln -s $$` link: by age (`ttl`) from its file's time, or, with
    /// `stale=pid`, when the pid is dead.
    Stamp,
    /// liblockfile's lock without a pid: [`PID_LESS_LIFETIME`] after its
    /// file's time, whatever the `ttl`.
    PidLess,
    /// A lock that names nobody (an empty lock file of a writer between its
    /// create and its write, an empty directory of a shell `mkdir`): by age.
    Anonymous,
    /// IPC::Lock::WithTTL's symlink (its target a name that names no
    /// file): once its mtime, the expiry, has passed.
    ExpiresAtMtime,
}

/// A lock found at its path: what holds it, when its file was written, and
/// which file it was (so that only that one is ever removed).
#[derive(Clone, Copy, Debug)]
pub struct Found {
    /// What holds it.
    pub holding: Holding,
    /// When its file was last written (its mtime).
    pub written_at: WallTime,
    /// The file itself, so that only it is ever removed.
    pub stat: FileStat,
}

impl Found {
    /// The record, if it names `nonce`, i.e. is the one this handle wrote.
    /// Its expiry is the one that counts: a watchdog or an operator may have
    /// moved it since this handle last did.
    pub fn ours(&self, nonce: Nonce) -> Option<Record> {
        match self.holding {
            Holding::Ours(rec) if rec.nonce == nonce => Some(rec),
            _ => None,
        }
    }

    /// The fence a record of ours carries: a guard must never hand out one
    /// below it (the guard file may have been lost).
    pub fn fence(&self) -> u64 {
        match self.holding {
            Holding::Ours(rec) => rec.fence,
            _ => 0,
        }
    }

    /// Judges the lock at `now`: who holds it and whether it may be broken.
    pub fn judge(&self, cx: &Context<'_>, now: Moment) -> Result<Holder, Error> {
        let aged_out = cx.options.ttl.is_some_and(|ttl| self.written_at.saturating_add(ttl) <= now.wall);
        let check_owner = cx.options.stale == StaleCheck::DeadOwner;
        let nobody = Holder {
            pid: 0,
            host: None,
            record: None,
            liveness: Liveness::Unknown,
            stale: aged_out,
            this_handle: false,
            since: Some(self.written_at),
            expires: cx.options.ttl.map(|ttl| self.written_at.saturating_add(ttl)),
        };
        Ok(match self.holding {
            Holding::Ours(rec) => judge_record(cx, &rec, now),
            Holding::Foreign { pid, host, rule: ForeignRule::Stamp } => {
                let liveness = cx.me.judge_foreign(pid, host.as_ref(), self.written_at);
                Holder { pid, host, liveness, stale: aged_out || (check_owner && liveness == Liveness::Dead), ..nobody }
            }
            Holding::Foreign { rule: ForeignRule::PidLess, .. } => {
                let expires = self.written_at.saturating_add(PID_LESS_LIFETIME);
                Holder { stale: expires <= now.wall, expires: Some(expires), ..nobody }
            }
            Holding::Foreign { rule: ForeignRule::Anonymous, .. } => nobody,
            Holding::Foreign { rule: ForeignRule::ExpiresAtMtime, .. } => {
                Holder { stale: self.written_at <= now.wall, since: None, expires: Some(self.written_at), ..nobody }
            }
            Holding::Corrupt(_) if aged_out => nobody,
            Holding::Corrupt(kind) => return Err(Error::corrupt(FileRole::Lock, kind)),
        })
    }
}

//! The skeleton of every strategy whose lock is a path made atomically but
//! broken in steps (`lockfile`, `mkdir`, `symlink`): each plugs in how its
//! lock is read, made, replaced and removed ([`LockStore`]), and
//! [`Guarded`] owns every policy once: the guard, the clock read under it,
//! the cooldown, judging what was found, fences, breaking a stale lock and
//! the outcomes of release, prolong and commit.
//!
//! Every operation runs inside one guard section (a short lock of
//! `<lock>.guard`), so
//! "judge the record, remove exactly it" cannot race with another breaker
//! or creator of this library. Programs that take no guard (LockFile::Simple,
//! liblockfile, a shell `mkdir`) can still create a lock at the path at any
//! moment, or rename one over whatever is there; [`LockStore::remove`], of
//! their locks and of ours, therefore checks, right before removing, that
//! it is still the file that was judged (`files::remove_judged`).

use core::time::Duration;

use crate::error::{Contention, Error, FileRole};
use crate::guard::{guard_path, GuardFile};
use crate::owner::Nonce;
use crate::record::Record;
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, new_record, Break, Commit, CommitOutcome, Context, Cooldown, Files, Found, Inspection, Prolong,
    ProlongOutcome, ReleaseOutcome, Strategy, Taken,
};
use crate::sys::CPath;
use crate::trust::Sharing;

/// How one strategy keeps its lock at its path. Every method is called
/// with the guard held.
pub trait LockStore: core::fmt::Debug {
    /// The store of the lock `spec` names; touches no file yet.
    fn open(spec: &Spec) -> Result<Self, Error>
    where
        Self: Sized;
    /// What is at the lock's path now; `None` when nothing is. Something
    /// that is no lock (a data file, a directory with files in it) is
    /// [`Problem::NotALock`](crate::error::Problem::NotALock); something
    /// another user could have written is refused by `cx.sharing`.
    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error>;
    /// Makes the lock, holding `record`, where nothing is, in one step, so
    /// that it never appears incomplete. `Ok(None)` if something appeared
    /// there meanwhile (only a program that takes no guard can make one);
    /// otherwise the record as stored (a file system may round its expiry).
    fn create(&self, cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error>;
    /// Replaces our lock `found` with one holding `record`, in one step, and
    /// only if it is still the one that was read: `Ok(false)` if a peer had
    /// put its lock there since (that one is left).
    fn replace(&self, cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error>;
    /// Removes the lock `found`, and nothing else: `Ok(false)` if a peer
    /// had put another lock there since it was read (that one is left).
    fn remove(&self, cx: &Context<'_>, found: &Found) -> Result<bool, Error>;
    /// The path that is the lock.
    fn path(&self) -> &CPath;
}

/// A [`LockStore`] with the guard beside it: a whole [`Strategy`].
#[derive(Debug)]
pub struct Guarded<S> {
    store: S,
    guard: GuardFile,
}

impl<S: LockStore> Guarded<S> {
    /// `store` with its guard at `<lock>.guard`, opened on first use. A
    /// spec error if that path is too long.
    pub fn new(store: S, sharing: Sharing) -> Result<Guarded<S>, Error> {
        let guard = GuardFile::new(guard_path(store.path())?, FileRole::Guard, sharing);
        Ok(Guarded { store, guard })
    }

    /// The store, for an ability of the strategy that lives in it (a wake
    /// source of its own).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }
}

impl<S: LockStore> Strategy for Guarded<S> {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Guarded<S>, Error> {
        Guarded::new(S::open(spec)?, sharing)
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let mut guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        let now = guard.now;
        if let Some(cooling) = guard.state.cooldown_contention(now) {
            return Err(Error::Busy(cooling));
        }
        let found = self.store.read(cx)?;
        let mut stale = None;
        if let Some(found) = &found {
            // Never a fence below one on disk: the guard file may have been
            // lost while the lock it guards was held.
            guard.state.fence = guard.state.fence.max(found.fence());
            let holder = found.judge(cx, now)?;
            if !holder.stale {
                return Err(Error::Busy(Contention::Held(holder.summary())));
            }
            stale = Some(holder);
        }
        // Drawn before a stale lock goes: one forged with the largest fence
        // is refused while it is still there, not forgotten.
        let fence = guard.state.next_fence(now)?;
        if let Some(found) = &found {
            // Judged and removed inside one guard section: this is the exact
            // lock that was judged stale, and none of ours can replace it in
            // between; a peer's that did is left alone.
            if !self.store.remove(cx, found)? {
                return Err(Error::Busy(Contention::Raced));
            }
        }
        // The fence is stored before the lock is created: a crash in between
        // skips a number, which is allowed, but never hands one out twice.
        guard.state.cooldown_until = None;
        guard.store()?;
        let record = self.store.create(cx, &new_record(cx, nonce, fence, now, ttl))?;
        let record = record.ok_or(Error::Busy(Contention::Raced))?;
        Ok(Taken { record, took_over_from: stale })
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        let found = self.store.read(cx)?;
        let holder = match &found {
            Some(found) => Some(found.judge(cx, guard.now)?),
            None => None,
        };
        Ok(Inspection {
            holder,
            last_fence: guard.state.fence.max(found.map_or(0, |found| found.fence())),
            cooldown_until: guard.state.cooldown_end_seen(guard.now),
            queue_length: None,
        })
    }
}

impl<S: LockStore> Prolong for Guarded<S> {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        let guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        let Some(found) = self.store.read(cx)? else { return Ok(ProlongOutcome::Lost) };
        let Some(on_disk) = found.ours(held.nonce) else { return Ok(ProlongOutcome::Lost) };
        let renewed = Record { expires: ttl.map(|ttl| guard.now.saturating_add(ttl)), ..on_disk };
        if !self.store.replace(cx, &found, &renewed)? {
            return Ok(ProlongOutcome::Lost);
        }
        held.expires = renewed.expires;
        Ok(ProlongOutcome::of_own(on_disk.expires, guard.now))
    }
}

impl<S: LockStore> Cooldown for Guarded<S> {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let mut guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        let Some(found) = self.store.read(cx)? else { return Ok(ReleaseOutcome::Lost) };
        let Some(on_disk) = found.ours(held.nonce) else { return Ok(ReleaseOutcome::Lost) };
        // A peer replaced it since it was read: ours was gone already.
        if !self.store.remove(cx, &found)? {
            return Ok(ReleaseOutcome::Lost);
        }
        if !cooldown.is_zero() {
            guard.set_cooldown(cooldown);
            guard.store()?;
        }
        Ok(ReleaseOutcome::of_own(on_disk.expires, guard.now))
    }
}

impl<S: LockStore> Break for Guarded<S> {
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        let _guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        match self.store.read(cx)? {
            Some(found) => self.store.remove(cx, &found),
            None => Ok(false),
        }
    }
}

impl<S: LockStore> Commit for Guarded<S> {
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        let guard = self.guard.lock(cx.deadline, cx.me.boot)?;
        let on_disk = self.store.read(cx)?.and_then(|found| found.ours(held.nonce));
        commit_if_current(on_disk, guard.now, action)
    }
}

impl<S: LockStore> Files for Guarded<S> {
    fn path(&self) -> &CPath {
        self.store.path()
    }

    fn guard_path(&self) -> Option<&CPath> {
        Some(self.guard.path())
    }
}

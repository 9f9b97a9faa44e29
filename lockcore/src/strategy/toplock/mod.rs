//! `toplock`: an append-only queue file; whoever's request is first among
//! the live ones holds the lock (Sajiro's "TOP LOCK" of Perl CGI boards).
//!
//! Every request appends one line, in one `write` to a file opened with
//! `O_APPEND`, so arrivals are totally ordered and served first come, first
//! served. The file is a log ([`mod@line`]); its meaning is the result of
//! replaying it ([`replay`]), which every process does alike; how it is
//! read, appended to and compacted is [`queue_file`]. This module is the
//! strategy: it queues a request, waits for it to reach the head, grants
//! itself the lock with a `G` line, and ends its turn with a `D` line.
//!
//! The log's times are the boot clock's, which nobody can step: a wall
//! clock stepped or skewed by an hour either way does not end a holder's
//! grant early, nor keep a dead one late. The fencing token of a grant is
//! the grantee's wall clock in microseconds, or one more than the last
//! token if that is greater (as every strategy draws them), so that a
//! queue file that was lost restarts above the tokens it gave.

pub mod line;
pub mod queue_file;
pub mod replay;

use core::cell::Cell;
use core::time::Duration;

use crate::clock::{BootTime, Moment, WallTime};
use crate::error::{Contention, CorruptKind, Error, FileRole};
use crate::owner::{Liveness, Nonce};
use crate::record::Record;
use crate::spec::{Spec, StaleCheck};
use crate::strategy::{
    Break, Commit, CommitOutcome, Context, Cooldown, Files, Holder, Inspection, Prolong, ProlongOutcome, Queue,
    ReleaseOutcome, Strategy, Taken,
};
use crate::sys::CPath;
use crate::trust::Sharing;
use line::{nanos, Grant, Line};
use queue_file::{Appended, Log, QueueFile};
use replay::{Ended, Replay};

/// A `toplock` lock: its queue file, and this handle's place in it.
#[derive(Debug)]
pub struct Toplock {
    queue: QueueFile,
    /// The request this handle has in the queue while it waits, so that
    /// repeated attempts keep its place.
    pending: Option<Nonce>,
}

/// A grant's end as a [`Moment`], its wall time read beside the log's.
fn grant_expiry(cx: &Context<'_>, grant: Grant, log: &Log) -> Option<Moment> {
    match grant {
        Grant::Until(until) => {
            let ahead = until.saturating_sub(log.now);
            let wall = WallTime::from_unix_nanos(log.wall.unix_nanos().saturating_add(ahead));
            Some(Moment { wall, boot: cx.me.boot.map(|id| (id, BootTime::from_nanos(until))) })
        }
        _ => None,
    }
}

/// The end of a grant made at `t` (the log's clock) for `ttl`.
fn grant_until(ttl: Option<Duration>, t: i64) -> Grant {
    ttl.map_or(Grant::Forever, |ttl| Grant::Until(t.saturating_add(nanos(ttl))))
}

fn grant_passed(grant: Grant, log_now: i64) -> bool {
    matches!(grant, Grant::Until(until) if until <= log_now)
}

/// The holder of the queue, for `inspect` and busy answers: request
/// `index` of `replay`, the replay of `log` (or of `log` and lines yet to
/// be appended to it).
fn holder_at(cx: &Context<'_>, log: &Log, replay: &Replay, index: usize) -> Holder {
    let request = replay.requests[index];
    let owner = replay.owner(log.bytes(), index);
    let expires = grant_expiry(cx, request.grant, log);
    // When its turn began, on the log's clock, as the wall clock reads it.
    let ago = log.now.saturating_sub(request.since).max(0);
    let since = WallTime::from_unix_nanos(log.wall.unix_nanos().saturating_sub(ago));
    let record = Record { owner, nonce: request.nonce, fence: request.fence, since, expires };
    let liveness = cx.me.judge(&owner);
    Holder {
        pid: owner.process.pid,
        host: Some(owner.host),
        record: Some(record),
        liveness,
        stale: grant_passed(request.grant, log.now)
            || (cx.options.stale == StaleCheck::DeadOwner && liveness == Liveness::Dead),
        this_handle: false,
        since: Some(since),
        expires: expires.map(|at| at.wall),
    }
}

/// The holder of request `index`, which left the queue without releasing,
/// as the holder a new grant took over from. One skipped as dead was
/// judged so by the process that wrote the skip, whatever this one can see
/// of it now (another pid namespace, a /proc that hides it).
fn taken_over(cx: &Context<'_>, log: &Log, replay: &Replay, index: usize) -> Holder {
    let holder = holder_at(cx, log, replay, index);
    let liveness = match replay.requests[index].ended {
        Ended::Dead => Liveness::Dead,
        _ => holder.liveness,
    };
    Holder { stale: true, liveness, ..holder }
}

/// When the cooldown of `log` ends, as its wall clock reads it (then, if it
/// has ended: the log may have been read again, by a compaction, since it
/// was judged).
fn cooldown_end(log: &Log) -> WallTime {
    let left = log.replay.header.not_before.saturating_sub(log.now).max(0);
    log.wall.saturating_add(Duration::from_nanos(left as u64))
}

/// Busy behind `ahead` requests, with the holder of `log`, if any.
fn queued_behind(cx: &Context<'_>, log: &Log, ahead: usize) -> Error {
    let holder = log.replay.holder(log.now).map(|h| holder_at(cx, log, &log.replay, h).summary());
    Error::Busy(Contention::Queued { ahead: ahead as u32, holder })
}

/// Why a new request was not granted in the write that made it.
#[derive(Clone, Copy, Debug)]
enum Refused {
    /// A request ahead of it would still be the head, with `ahead` before it.
    Behind { head: Nonce, ahead: usize },
    /// It would be the head, but the lock cools down.
    CoolingDown,
    /// The last fence is the largest there is: only a forged log says so.
    NoFence,
}

impl Toplock {
    /// Passes over request `index` of the log last read, a head that stands
    /// before the caller's, if the caller's `stale` option has it judge
    /// owners and it finds this one dead: `true` once the skip is written.
    fn skipped_if_dead(&mut self, cx: &Context<'_>, index: usize) -> Result<bool, Error> {
        let log = &self.queue.log;
        let owner = log.replay.owner(log.bytes(), index);
        if cx.options.stale != StaleCheck::DeadOwner || cx.me.judge(&owner) != Liveness::Dead {
            return Ok(false);
        }
        let dead = log.replay.requests[index].nonce;
        self.queue.append(cx, |t| Line::Skip { nonce: dead, t })?;
        Ok(true)
    }

    /// Makes a new request, `nonce`, granted in the same write if it would
    /// be the head at once (`Some`). Ungranted, it is written only for a
    /// caller that keeps its place ([`Context::keeps_place`], `None`); any
    /// other is told what stood in the way, and shows in nobody's queue.
    fn request(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Option<Taken>, Error> {
        // Passed over once it has stood at the head, unasked for, for its
        // ttl or for as long as its caller will wait, whichever is shorter:
        // so that the place of a caller that gave up, or stopped, holds
        // nobody up for long.
        let patience = match (cx.options.ttl, cx.waits_for) {
            (Some(ttl), Some(wait)) => Some(ttl.min(wait)),
            (ttl, wait) => ttl.or(wait),
        };
        let (owner, patience) = (*cx.me, patience.map(nanos));
        // Watched from now on, for its release to be told how it ended; no
        // line yet names it.
        self.queue.log.replay.watch_new(nonce);
        let took_over_from = Cell::new(None);
        let refused = Cell::new(None);
        let grant = |log: &Log, request: &Line| {
            let t = log.now;
            let Some(fence) = crate::fence::next(log.replay.header.last_fence, WallTime::now()) else {
                refused.set(Some(Refused::NoFence));
                return None;
            };
            let grant = Line::Grant { nonce, until: grant_until(ttl, t), t, fence };
            if log.replay.head().is_none() {
                // Nobody queued (perhaps because the last holder's grant
                // ran out and the waiter that ended it gave up since): the
                // request is the head at once.
                if t < log.replay.header.not_before {
                    refused.set(Some(Refused::CoolingDown));
                    return None;
                }
                took_over_from.set(log.replay.taken_over_last().map(|gone| taken_over(cx, log, &log.replay, gone)));
                return Some(grant);
            }
            // Someone queued, whom the request passes only if each one ahead
            // is over once somebody waits behind it (a grant run out, a head
            // that stopped asking): as the replay of the two lines says, the
            // judge of every reader.
            let after = log.replayed_with(&[*request, grant]).ok()?;
            let me = after.find(nonce)?;
            match after.head() {
                Some(head) if head != me => {
                    let head = after.requests[head].nonce;
                    refused.set(Some(Refused::Behind { head, ahead: after.ahead_of(me) }));
                    None
                }
                _ if after.requests[me].grant == Grant::No => {
                    refused.set(Some(Refused::CoolingDown));
                    None
                }
                _ => {
                    let gone = after.taken_over_before(me).map(|gone| taken_over(cx, log, &after, gone));
                    took_over_from.set(gone);
                    Some(grant)
                }
            }
        };
        // A few rounds for a caller that keeps no place: a dead head ahead
        // is passed over by a line of its own, and the request made again.
        for _ in 0..4 {
            refused.set(None);
            let request = |t| Line::Request { nonce, owner, patience, t };
            let appended = match self.queue.append_request_granting(cx, request, grant, cx.keeps_place) {
                Ok(appended) => appended,
                Err(e) => {
                    // A write that failed may have gone in, in part or whole:
                    // the request is then given up as a place kept is, by
                    // `abandon`, lest a grant that was written hold the lock
                    // for a caller told it failed. A busy answer wrote nothing.
                    if !matches!(e, Error::Busy(_)) {
                        self.pending = Some(nonce);
                    }
                    return Err(e);
                }
            };
            let log = &self.queue.log;
            match appended {
                Appended::Granted(Line::Grant { until, fence, .. }) => {
                    let record =
                        Record { owner: *cx.me, nonce, fence, since: log.wall, expires: grant_expiry(cx, until, log) };
                    return Ok(Some(Taken { record, took_over_from: took_over_from.get() }));
                }
                Appended::Granted(_) | Appended::Queued if cx.keeps_place => return Ok(None),
                Appended::Granted(_) | Appended::Queued => {
                    // Written, but not granted after all (lines written
                    // meanwhile by a hand that takes no lock stand before
                    // it): given up, as a place kept is, by `abandon`.
                    self.pending = Some(nonce);
                    return Err(Error::Busy(Contention::Raced));
                }
                Appended::Nothing => {}
            }
            match refused.get() {
                Some(Refused::Behind { head, ahead }) => {
                    let Some(index) = log.replay.find(head) else { break };
                    if self.skipped_if_dead(cx, index)? {
                        continue;
                    }
                    return Err(queued_behind(cx, &self.queue.log, ahead));
                }
                Some(Refused::CoolingDown) => {
                    return Err(Error::Busy(Contention::CoolingDown { until: cooldown_end(log) }));
                }
                Some(Refused::NoFence) => return Err(Error::corrupt(FileRole::Lock, CorruptKind::Record)),
                None => break,
            }
        }
        Err(Error::Busy(Contention::Raced))
    }
}

impl Strategy for Toplock {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Toplock, Error> {
        Ok(Toplock { queue: QueueFile::new(spec.file_target()?.clone(), sharing), pending: None })
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let mine = match self.pending {
            Some(pending) => pending,
            None => match self.request(cx, nonce, ttl)? {
                Some(taken) => return Ok(taken),
                None => {
                    self.pending = Some(nonce);
                    nonce
                }
            },
        };
        // A few rounds: skipping a dead head or granting ourselves changes
        // the log, and each change is judged by reading it back.
        for _ in 0..4 {
            self.queue.load(cx)?;
            let log = &self.queue.log;
            let Some(me) = log.replay.find(mine).filter(|&i| !log.replay.requests[i].done()) else {
                // Our request is gone (an operator broke it): queue again.
                self.pending = None;
                return Err(Error::Busy(Contention::Raced));
            };
            let Some(head) = log.replay.head() else { return Err(Error::Busy(Contention::Raced)) };
            if head != me {
                let ahead = log.replay.ahead_of(me);
                if self.skipped_if_dead(cx, head)? {
                    continue;
                }
                return Err(queued_behind(cx, &self.queue.log, ahead));
            }
            if log.now < log.replay.header.not_before {
                return Err(Error::Busy(Contention::CoolingDown { until: cooldown_end(log) }));
            }
            // Judged again and written in one exclusive section, so that
            // nothing (a late release of the holder before us, a compaction
            // that drops it) comes between the holder it names as taken over
            // from and the grant. The grant and its fence are stamped there
            // too, so they count from the moment they are written.
            let decided = self.queue.append_decided(cx, |log| {
                let Some(me) = log.replay.find(mine).filter(|&me| log.replay.head() == Some(me)) else {
                    return Ok((None, None));
                };
                if log.now < log.replay.header.not_before {
                    return Ok((None, None));
                }
                let fence = crate::fence::next(log.replay.header.last_fence, WallTime::now())
                    .ok_or(Error::corrupt(FileRole::Lock, CorruptKind::Record))?;
                let gone = log.replay.taken_over_before(me).map(|i| taken_over(cx, log, &log.replay, i));
                let t = log.now;
                Ok((Some(gone), Some(Line::Grant { nonce: mine, until: grant_until(ttl, t), t, fence })))
            })?;
            // Changed since it was read: judged again from the top.
            let Some(took_over_from) = decided else { continue };
            self.queue.load(cx)?;
            let log = &self.queue.log;
            // Looked up again: a compaction in between renumbers the table,
            // and our request may have ended (an operator's break) and gone.
            let me = log.replay.find(mine);
            if me.is_none() || log.replay.holder(log.now) != me {
                return Err(Error::Busy(Contention::Raced));
            }
            let Some(me) = me.filter(|&i| log.replay.requests[i].grant != Grant::No) else {
                return Err(Error::Busy(Contention::Raced));
            };
            let request = log.replay.requests[me];
            self.pending = None;
            let record = Record {
                owner: *cx.me,
                nonce: mine,
                fence: request.fence,
                since: log.wall,
                expires: grant_expiry(cx, request.grant, log),
            };
            return Ok(Taken { record, took_over_from });
        }
        Err(Error::Busy(Contention::Raced))
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        self.queue.load(cx)?;
        let log = &self.queue.log;
        let not_before = log.replay.header.not_before;
        Ok(Inspection {
            holder: log.replay.holder(log.now).map(|h| holder_at(cx, log, &log.replay, h)),
            last_fence: log.replay.header.last_fence,
            cooldown_until: (not_before > log.now).then(|| cooldown_end(log)),
            queue_length: Some(log.replay.pending_count() as u32),
        })
    }
}

impl Prolong for Toplock {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        self.queue.load(cx)?;
        let log = &self.queue.log;
        let me = log.replay.find(held.nonce);
        if me.is_none() || log.replay.holder(log.now) != me {
            return Ok(ProlongOutcome::Lost);
        }
        let request = me.map(|i| log.replay.requests[i]).ok_or(Error::NotHeld)?;
        let was_expired = grant_passed(request.grant, log.now);
        let (nonce, fence) = (held.nonce, request.fence);
        self.queue.append(cx, |t| Line::Grant { nonce, until: grant_until(ttl, t), t, fence })?;
        self.queue.load(cx)?;
        let log = &self.queue.log;
        // Looked up again: a compaction in between renumbers the table.
        let renewed = log.replay.find(nonce).map(|i| log.replay.requests[i]).filter(|r| {
            !r.done() && r.grant != Grant::No && !grant_passed(r.grant, log.now) && log.replay.holder(log.now).is_some()
        });
        let Some(renewed) = renewed else { return Ok(ProlongOutcome::Lost) };
        held.expires = grant_expiry(cx, renewed.grant, log);
        Ok(if was_expired { ProlongOutcome::Expired } else { ProlongOutcome::Prolonged })
    }
}

impl Cooldown for Toplock {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let (nonce, cooldown) = (held.nonce, nanos(cooldown));
        // Judged and ended in one section: nothing is granted in between.
        self.queue.log.replay.watch(nonce);
        self.queue.append_decided(cx, |log| {
            let replay = &log.replay;
            let me = replay.find(nonce);
            let outcome = match (me, replay.holder(log.now)) {
                (Some(i), Some(h)) if i == h => {
                    if grant_passed(replay.requests[i].grant, log.now) {
                        ReleaseOutcome::Expired
                    } else {
                        ReleaseOutcome::Released
                    }
                }
                (_, Some(_)) => ReleaseOutcome::Lost,
                // Passed over after its expiry, and nobody was granted it since.
                (_, None) if replay.watched_end == Ended::Expired && replay.header.last_fence <= held.fence => {
                    ReleaseOutcome::Expired
                }
                // Broken by an operator, taken (and perhaps released) by the
                // next in line, or no longer in the log at all.
                (_, None) => ReleaseOutcome::Lost,
            };
            // Written while the request is still queued, and also after an
            // overrun that nobody took over, so that its cooldown holds and
            // the next holder is not told it took the lock over.
            let overran_untaken = outcome == ReleaseOutcome::Expired;
            let done = me.is_some_and(|i| !replay.requests[i].done()) || overran_untaken;
            let t = log.now;
            let not_before = if cooldown == 0 { 0 } else { t.saturating_add(cooldown) };
            Ok((outcome, done.then_some(Line::Done { nonce, t, not_before })))
        })
    }
}

impl Break for Toplock {
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        self.queue.load(cx)?;
        let Some(head) = self.queue.log.replay.head() else { return Ok(false) };
        let nonce = self.queue.log.replay.requests[head].nonce;
        self.queue.append(cx, |t| Line::Broken { nonce, t })?;
        Ok(true)
    }
}

impl Queue for Toplock {
    fn abandon(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        // Forgotten whether or not the line is written: a request left in
        // the queue (its file held past the deadline) is passed over once
        // it has waited at the head as long as its caller said it would.
        match self.pending.take() {
            Some(pending) => self.queue.append(cx, |t| Line::Done { nonce: pending, t, not_before: 0 }),
            None => Ok(()),
        }
    }
}

impl Commit for Toplock {
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        // The exclusive lock keeps every other process from appending (a
        // grant included) while we check and act.
        self.queue.while_exclusive(cx, |log| match log.replay.find(held.nonce) {
            Some(i) if log.replay.holder(log.now) == Some(i) => {
                // Judged on the log's clock, as every other process judges it.
                if grant_passed(log.replay.requests[i].grant, log.now) {
                    Ok(CommitOutcome::Expired)
                } else {
                    action().map(|()| CommitOutcome::Committed)
                }
            }
            _ => Ok(CommitOutcome::Lost),
        })
    }
}

impl Files for Toplock {
    fn path(&self) -> &CPath {
        self.queue.path()
    }
}

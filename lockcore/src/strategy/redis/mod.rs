//! `redis`: a lease on a Redis server, for processes on several hosts.
//!
//! ```text
//! redis://[user[:password]@]host[:port][/db]/NAME?ttl=30s
//! redis://%2Frun%2Fredis%2Fredis.sock/NAME
//! ```
//!
//! The lock lives in a few keys that share the hash tag `{NAME}`, so that a
//! cluster keeps them on one node:
//!
//! | key | holds |
//! |---|---|
//! | `lockcore:{NAME}:lock` | the holder's record (its `ttl` is the key's), or `lockcore-cooldown` while a release's cooldown runs |
//! | `lockcore:{NAME}:fence` | the last fencing token handed out |
//! | `lockcore:{NAME}:queue` | the waiters' ids, first come first |
//! | `lockcore:{NAME}:alive` | each waiter's lease: a waiter that stops renewing it leaves the line |
//! | `lockcore:{NAME}:last` | for the next acquisition to report as the holder it took over from, with the fence then: the record of the last acquisition with a `ttl` until it is given back (its key may expire first), or of a holder broken as dead |
//! | `lockcore:{NAME}:released` | the record of the last release and its fence, for a minute: a release asked again after its answer was lost is told it happened |
//! | `lockcore:{NAME}:wake:<id>` | where a waiter's blocking pop finds its wake-up |
//!
//! Every operation is one Lua script, run by `EVALSHA` (by `EVAL` the first
//! time a server sees it): one round trip to acquire a free lock, one to
//! release. A waiter sleeps in `BLPOP` on its own wake list until the
//! release before it pushes there, or until the holder's key expires.
//!
//! What the server cannot see, the client judges: a holder on this host
//! whose process is gone (`stale=pid`) is broken at once, by a script that
//! removes exactly the record judged. A holder elsewhere is never judged
//! by this host's clock: only its key's expiry, on the server, frees it.
//! The holder's own view of its lease starts when its request was sent
//! and is cut by a drift margin ([`local_lease`]), so it runs out before
//! the server's.
//!
//! A fence is one more than the last, and never below the server's clock
//! in microseconds: a server restarted without its data, or flushed, still
//! hands out tokens above every earlier one. (The callers' clocks are left
//! out: one host whose clock ran ahead would otherwise push every later
//! token out of reach of the others once the server lost its data.)

mod conn;
pub(crate) mod resp;
mod sha1;

use core::fmt::Write;
use core::time::Duration;

use self::conn::{server_error, Connection, Script};
use self::resp::Reply;
use crate::clock::{Moment, MonoTime};
use crate::error::{Contention, Error, ServerError, ServerProblem, SpecError, SpecErrorKind};
use crate::owner::{Liveness, Nonce};
use crate::record::{Record, RECORD_LINE_CAPACITY};
use crate::spec::{Spec, StaleCheck, Target};
use crate::strategy::{
    judge_record, new_record, Break, Context, Cooldown, Holder, Inspection, Prolong, ProlongOutcome, Queue,
    ReleaseOutcome, Strategy, Taken, TimedAcquire,
};
use crate::text::FixedText;
use crate::trust::Sharing;

pub use self::conn::DEFAULT_PORT;

/// How long a waiter keeps its place in line without renewing it: each of
/// its attempts renews it, and a waiter that dies (or stops trying) leaves
/// the line this long after its last attempt.
pub const WAITER_LEASE: Duration = Duration::from_millis(400);

/// Longest single blocking pop: a waiter comes back this often to renew
/// its lease, well inside it, and to judge a holder that died without a
/// release (which wakes nobody).
const WAIT_SLICE: Duration = Duration::from_millis(120);

/// Time a wait leaves before its deadline for one more attempt, so that
/// a wake-up near the end is acted on instead of timing the attempt out.
const ATTEMPT_RESERVE: Duration = Duration::from_millis(50);

/// The least time an attempt is given for its round trips, whatever its
/// caller's deadline: a try, or an acquire with no budget, is one attempt,
/// and a network lock cannot be asked about in no time.
const ROUND_TRIP_FLOOR: Duration = Duration::from_millis(100);

/// The time given, past the caller's deadline if need be, to give up a
/// place in line, or the lock when its replicas do not have it.
const CLEAN_UP_PATIENCE: Duration = Duration::from_millis(50);

/// `cx`, its deadline moved to [`CLEAN_UP_PATIENCE`] from now if it is
/// sooner: for what a call that is ending must still undo.
fn cleaning_up<'c>(cx: &Context<'c>) -> Context<'c> {
    Context { deadline: cx.deadline.max(MonoTime::now().saturating_add(CLEAN_UP_PATIENCE)), ..*cx }
}

/// The time given, past the caller's deadline, to take back an acquisition
/// whose answer never came: on a new connection, a few round trips.
const WITHDRAW_PATIENCE: Duration = Duration::from_millis(250);

/// How long a wait pauses after a server's trouble that may pass, before
/// it asks again.
const TROUBLE_PAUSE: Duration = Duration::from_millis(50);

/// How late a server may end a blocking command's timeout (`BLPOP`,
/// `WAIT`): Redis checks them on its timer, `hz` times a second (10 by
/// default), so one may answer up to 100 ms after it was due.
const SERVER_TIMER_SLACK: Duration = Duration::from_millis(110);

/// How many times a break looks at the lock, if it changes hands between
/// each look and the removal of what was seen.
const BREAK_LOOKS: usize = 3;

/// The longest key name: the lock's name and the few words around it,
/// or a waiter's id ([`WaiterId`]).
const KEY_CAPACITY: usize = crate::spec::VALUE_CAPACITY + 160;

/// A waiter's id in line: `<host>:<pid>:<nonce>`, so that an operator who
/// lists the queue sees who waits, and the nonce tells apart two waits of
/// one process.
type WaiterId = FixedText<{ crate::owner::HOST_CAPACITY + 48 }>;

type KeyName = FixedText<KEY_CAPACITY>;

macro_rules! script {
    ($file:literal) => {
        Script {
            source: concat!(include_str!("lua/prelude.lua"), include_str!($file)),
            sha: sha1::sha1_hex(concat!(include_str!("lua/prelude.lua"), include_str!($file)).as_bytes()),
        }
    };
}

const ACQUIRE: Script = script!("lua/acquire.lua");
const RELEASE: Script = script!("lua/release.lua");
const PROLONG: Script = script!("lua/prolong.lua");
const INSPECT: Script = script!("lua/inspect.lua");
const BREAK: Script = script!("lua/break.lua");
const ABANDON: Script = script!("lua/abandon.lua");
const WITHDRAW: Script = script!("lua/withdraw.lua");

/// What the lock key holds during a release's cooldown.
const COOLDOWN_VALUE: &[u8] = b"lockcore-cooldown";

/// A `redis` lock.
#[derive(Debug)]
pub struct Redis {
    keys: Keys,
    connection: Connection,
    /// `fair=1`: only the first in line takes a free lock.
    fair: bool,
    /// With `stale=pid`, a dead holder on this host is broken at once.
    break_dead_owners: bool,
    /// `replicas`: how many replicas must have an acquisition.
    replicas: u8,
    /// The id this handle waits in line under, between the attempts of one
    /// acquire; `None` when it has no place.
    waiting_as: Option<WaiterId>,
    /// What the last attempt of this acquire found in the way.
    last_contention: Contention,
    /// The server's trouble that the wait is going on through, if its last
    /// attempt met one.
    trouble: Option<ServerError>,
}

#[derive(Debug)]
struct Keys {
    lock: KeyName,
    fence: KeyName,
    queue: KeyName,
    alive: KeyName,
    /// For the next taker: the record of the last acquisition with a ttl,
    /// until it is given back, or of a holder broken as dead.
    last_taken: KeyName,
    /// The last release, for a minute.
    released: KeyName,
    /// A waiter's wake list is this and its id.
    wake_prefix: KeyName,
}

impl Keys {
    fn of(name: &[u8]) -> Result<Keys, Error> {
        // A name that begins with `}` would make the hash tag empty, and
        // each key would then hash on its own: a cluster would scatter them.
        if name.first() == Some(&b'}') {
            return Err(Error::Spec(SpecError::new(
                SpecErrorKind::BadUrl,
                b"",
                "a redis lock's name may not begin with }",
            )));
        }
        let key = |suffix: &[u8]| {
            let mut key = KeyName::new();
            key.push_bytes(b"lockcore:{")
                .and_then(|()| key.push_bytes(name))
                .and_then(|()| key.push_bytes(b"}:"))
                .and_then(|()| key.push_bytes(suffix))
                .map(|()| key)
                .map_err(|_| Error::Spec(SpecError::new(SpecErrorKind::BadUrl, b"", "the lock's name is too long")))
        };
        Ok(Keys {
            lock: key(b"lock")?,
            fence: key(b"fence")?,
            queue: key(b"queue")?,
            alive: key(b"alive")?,
            last_taken: key(b"last")?,
            released: key(b"released")?,
            wake_prefix: key(b"wake:")?,
        })
    }

    fn wake_of(&self, id: &WaiterId) -> KeyName {
        let mut key = KeyName::new();
        // The prefix leaves room for an id (KEY_CAPACITY).
        let _ = key.push_bytes(self.wake_prefix.as_bytes());
        let _ = key.push_bytes(id.as_bytes());
        key
    }
}

/// The id the waits of `owner` under `nonce` stand in line under.
fn waiter_id(owner: &crate::owner::Owner, nonce: &Nonce) -> WaiterId {
    let mut id = WaiterId::new();
    // Bounded: a host name of HOST_CAPACITY, a pid, 32 hex digits.
    let _ = id.push_bytes(owner.host.as_bytes());
    let _ = write!(id, ":{}:", owner.process.pid);
    let _ = id.push_bytes(&nonce.hex());
    id
}

/// The pid in a waiter's id, as the queue key lists it.
#[doc(hidden)]
pub fn waiter_pid(id: &[u8]) -> Option<i32> {
    let mut fields = id.rsplitn(3, |&b| b == b':');
    let (_nonce, pid) = (fields.next()?, fields.next()?);
    fields.next()?;
    crate::text::parse_i64(pid).and_then(|pid| i32::try_from(pid).ok()).filter(|&pid| pid > 0)
}

/// How an attempt treats the line of waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Manner {
    /// Waits in line; takes the lock only as the first.
    Fair,
    /// Waits in line for the wake-ups; takes a free lock whatever its place.
    Barge,
    /// One try, without a place: only if nobody waits.
    TryFair,
    /// One try, without a place: whenever it is free.
    Try,
}

impl Manner {
    fn word(self) -> &'static [u8] {
        match self {
            Manner::Fair => b"fair",
            Manner::Barge => b"barge",
            Manner::TryFair => b"try-fair",
            Manner::Try => b"try",
        }
    }
}

/// What one attempt found.
enum Attempt {
    Taken {
        record: Record,
        /// The dead holder broken since the lock was last taken, by this
        /// attempt or by another client's.
        took_over_from: Option<Holder>,
    },
    Busy {
        contention: Contention,
        /// When the holder's key expires (a cooldown's included), if it does.
        expires_in: Option<Duration>,
        /// The record of a holder this host knows is dead, to break.
        dead_holder: Option<Record>,
    },
}

/// The holder's own view of its lease: from when its request was sent
/// (`sent`), less a margin for the two clocks' drift (1% and 2 ms, as
/// Redlock's implementations take), so that it ends before the key does.
pub fn local_lease(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl / 100 + Duration::from_millis(2))
}

impl Strategy for Redis {
    fn open(spec: &Spec, _: Sharing) -> Result<Redis, Error> {
        let Target::Url(endpoint) = spec.target() else {
            return Err(Error::Spec(SpecError::new(SpecErrorKind::BadUrl, b"", "a redis lock names a server")));
        };
        Ok(Redis {
            keys: Keys::of(endpoint.key.as_bytes())?,
            connection: Connection::new(endpoint.clone()),
            fair: spec.options.fair,
            break_dead_owners: spec.options.stale == StaleCheck::DeadOwner,
            replicas: spec.options.replicas,
            waiting_as: None,
            last_contention: Contention::Raced,
            trouble: None,
        })
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let manner = if self.fair { Manner::TryFair } else { Manner::Try };
        let cx = &with_round_trip_floor(cx);
        let id = waiter_id(cx.me, &nonce);
        let mut stale = None;
        // At most twice: once more only to break a dead holder.
        for _ in 0..2 {
            match self.attempt(cx, nonce, ttl, manner, &id, stale.as_ref())? {
                Attempt::Taken { record, took_over_from } => return Ok(Taken { record, took_over_from }),
                Attempt::Busy { dead_holder: Some(dead), .. } if stale.is_none() => stale = Some(dead),
                Attempt::Busy { contention, .. } => return Err(Error::Busy(contention)),
            }
        }
        Err(Error::Busy(Contention::Raced))
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        self.look(cx).map(|(inspection, _)| inspection)
    }
}

impl TimedAcquire for Redis {
    fn acquire_until(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let manner = if self.fair { Manner::Fair } else { Manner::Barge };
        let began = MonoTime::now();
        // Late in a wait, the handle may call with too little time left for
        // a round trip: that is no failure of the server's, and the lock
        // stays as the last attempt found it.
        if self.waiting_as.is_some() && cx.deadline.remaining_from(MonoTime::now()) < ATTEMPT_RESERVE {
            return Err(match self.trouble {
                Some(trouble) if last_slice(cx, began) => Error::Server(trouble),
                _ => Error::Busy(self.last_contention),
            });
        }
        let first = self.waiting_as.is_none();
        let floored = with_round_trip_floor(cx);
        let cx = if first { &floored } else { cx };
        let id = self.waiting_as.get_or_insert_with(|| waiter_id(cx.me, &nonce)).clone();
        let wake = self.keys.wake_of(&id);
        let mut stale: Option<Record> = None;
        loop {
            let attempted = self.attempt(cx, nonce, ttl, manner, &id, stale.take().as_ref());
            let attempted = match attempted {
                Err(Error::Server(e)) if e.problem.may_pass() => return Err(self.ride_out(cx, began, e)),
                other => other?,
            };
            let (contention, expires_in) = match attempted {
                Attempt::Taken { record, took_over_from } => {
                    self.waiting_as = None;
                    return Ok(Taken { record, took_over_from });
                }
                Attempt::Busy { dead_holder: Some(dead), .. } => {
                    stale = Some(dead);
                    continue;
                }
                Attempt::Busy { contention, expires_in, .. } => (contention, expires_in),
            };
            self.last_contention = contention;
            self.trouble = None;
            let left = cx.deadline.remaining_from(MonoTime::now()).saturating_sub(SERVER_TIMER_SLACK);
            // The holder's expiry wakes nobody: come back when it is due.
            let nap = left.min(WAIT_SLICE).min(expires_in.map_or(Duration::MAX, |d| d + Duration::from_millis(1)));
            if nap < Duration::from_millis(1) {
                // The caller tries again with a new deadline, at once.
                return Err(Error::Busy(contention));
            }
            let mut seconds = FixedText::<24>::new();
            let _ = write!(seconds, "{}.{:03}", nap.as_secs(), nap.subsec_millis());
            match self.connection.exchange(&[b"BLPOP", wake.as_bytes(), seconds.as_bytes()], cx.deadline) {
                // Woken, or the nap is over: either way, look again.
                Ok(()) => {
                    if let Reply::Error(said) = self.connection.reply() {
                        return Err(Error::Server(server_error(said)));
                    }
                }
                // An answer late for the deadline is no failure of the
                // server's: the wait ends here, and the next attempt
                // starts on a fresh connection.
                Err(Error::Server(e)) if e.problem == ServerProblem::NoAnswer => return Err(Error::Busy(contention)),
                Err(Error::Server(e)) if e.problem.may_pass() => return Err(self.ride_out(cx, began, e)),
                Err(e) => return Err(e),
            }
            if cx.deadline.remaining_from(MonoTime::now()) < ATTEMPT_RESERVE {
                return Err(Error::Busy(contention));
            }
        }
    }
}

impl Redis {
    /// What a wait does about `trouble` that may pass (a restart, a
    /// failover, a server stopped for a moment): it goes on, after a pause
    /// that keeps a server that is down from being asked in a tight loop,
    /// until its last slice, which answers with the trouble itself rather
    /// than with what the lock looked like before it.
    fn ride_out(&mut self, cx: &Context<'_>, began: MonoTime, trouble: ServerError) -> Error {
        self.trouble = Some(trouble);
        if last_slice(cx, began) {
            return Error::Server(trouble);
        }
        let left = cx.deadline.remaining_from(MonoTime::now());
        crate::sys::sleep(left.saturating_sub(ATTEMPT_RESERVE).min(TROUBLE_PAUSE));
        Error::Busy(self.last_contention)
    }
}

impl Queue for Redis {
    fn abandon(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        let Some(id) = self.waiting_as.take() else { return Ok(()) };
        // Called when the wait is over, often at its deadline: the place
        // is given up a moment after rather than left for its lease to end.
        let cx = &cleaning_up(cx);
        let wake = self.keys.wake_of(&id);
        let keys = [self.keys.lock.as_bytes(), self.keys.queue.as_bytes(), self.keys.alive.as_bytes(), wake.as_bytes()];
        let lease = millis(WAITER_LEASE);
        let args = [id.as_bytes(), self.keys.wake_prefix.as_bytes(), lease.as_bytes()];
        self.connection.eval(&ABANDON, &keys, &args, cx.deadline).map(drop)
    }
}

impl Cooldown for Redis {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let (identity, fence) = identity_of(held);
        let keys = [
            self.keys.lock.as_bytes(),
            self.keys.fence.as_bytes(),
            self.keys.queue.as_bytes(),
            self.keys.last_taken.as_bytes(),
            self.keys.released.as_bytes(),
        ];
        let (cooldown, lease) = (millis(cooldown), millis(WAITER_LEASE));
        let args = [
            identity.as_bytes(),
            fence.as_bytes(),
            cooldown.as_bytes(),
            self.keys.wake_prefix.as_bytes(),
            lease.as_bytes(),
        ];
        self.connection.eval(&RELEASE, &keys, &args, cx.deadline)?;
        match self.connection.reply() {
            Reply::Array(Some(mut items)) => {
                let kept = kept_record(&mut items)?;
                Ok(ReleaseOutcome::of_own(kept.expires, cx.now()))
            }
            // A release asked again after its answer was lost: the first
            // one gave the lock back (whether it had overrun, only its
            // answer could tell).
            Reply::Bulk(Some(b"released")) => Ok(ReleaseOutcome::Released),
            Reply::Bulk(Some(b"expired")) => Ok(ReleaseOutcome::Expired),
            Reply::Bulk(Some(b"lost")) => Ok(ReleaseOutcome::Lost),
            Reply::Bulk(Some(b"foreign")) => Err(foreign()),
            _ => Err(protocol()),
        }
    }
}

impl Prolong for Redis {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        let now = cx.now();
        let (identity, fence) = identity_of(held);
        let renewed_record = Record { expires: ttl.map(|ttl| now.saturating_add(local_lease(ttl))), ..*held };
        let renewed = renewed_record.encode_line();
        let ttl_ms = millis(ttl.unwrap_or(Duration::ZERO));
        let keys = [self.keys.lock.as_bytes(), self.keys.fence.as_bytes(), self.keys.last_taken.as_bytes()];
        let given_up_at = decimal(self.connection.server_deadline_ms(cx.deadline)?);
        let args =
            [identity.as_bytes(), fence.as_bytes(), renewed.as_bytes(), ttl_ms.as_bytes(), given_up_at.as_bytes()];
        self.connection.eval(&PROLONG, &keys, &args, cx.deadline)?;
        let outcome = match self.connection.reply() {
            Reply::Array(Some(mut items)) => {
                let kept = kept_record(&mut items)?;
                ProlongOutcome::of_own(kept.expires, cx.now())
            }
            Reply::Bulk(Some(b"expired")) => ProlongOutcome::Expired,
            Reply::Bulk(Some(b"lost")) => return Ok(ProlongOutcome::Lost),
            Reply::Bulk(Some(b"late")) => return Err(self.answered_late()),
            Reply::Bulk(Some(b"foreign")) => return Err(foreign()),
            _ => return Err(protocol()),
        };
        *held = renewed_record;
        Ok(outcome)
    }
}

impl Break for Redis {
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        let mut contention = Contention::Raced;
        for _ in 0..BREAK_LOOKS {
            // Only a value judged ours, byte for byte, is removed: the
            // script compares it with what it finds.
            let (seen, judged) = self.look(cx)?;
            if judged.as_bytes().is_empty() {
                return Ok(false);
            }
            if let Some(holder) = seen.holder {
                contention = Contention::Held(holder.summary());
            } else if let Some(until) = seen.cooldown_until {
                contention = Contention::CoolingDown { until };
            }
            let keys = [self.keys.lock.as_bytes(), self.keys.queue.as_bytes(), self.keys.fence.as_bytes()];
            let lease = millis(WAITER_LEASE);
            let given_up_at = decimal(self.connection.server_deadline_ms(cx.deadline)?);
            let args = [judged.as_bytes(), self.keys.wake_prefix.as_bytes(), lease.as_bytes(), given_up_at.as_bytes()];
            self.connection.eval(&BREAK, &keys, &args, cx.deadline)?;
            match self.connection.reply() {
                Reply::Integer(removed) => return Ok(removed == 1),
                // Taken, or given back, since the look: look again.
                Reply::Bulk(Some(b"changed")) => continue,
                Reply::Bulk(Some(b"late")) => return Err(self.answered_late()),
                Reply::Bulk(Some(b"foreign")) => return Err(foreign()),
                Reply::Bulk(Some(b"fence")) => return Err(fence_refused(&self.keys)),
                _ => return Err(protocol()),
            }
        }
        // The lock changed hands at every look: it is in use.
        Err(Error::Busy(contention))
    }
}

impl Redis {
    /// The lock's state, and the value of its key, judged: empty when it
    /// is free, else a holder's record or the cooldown, exactly as stored.
    fn look(&mut self, cx: &Context<'_>) -> Result<(Inspection, FixedText<RECORD_LINE_CAPACITY>), Error> {
        let keys = [self.keys.lock.as_bytes(), self.keys.fence.as_bytes(), self.keys.alive.as_bytes()];
        self.connection.eval(&INSPECT, &keys, &[], cx.deadline)?;
        let now = cx.now();
        let mut items = match self.connection.reply() {
            Reply::Bulk(Some(b"foreign")) => return Err(foreign()),
            Reply::Bulk(Some(b"fence")) => return Err(fence_refused(&self.keys)),
            reply => array_of(reply, 4)?,
        };
        let value = text_of(items.next())?;
        let pttl = items.next().and_then(|r| r.integer()).ok_or_else(protocol)?;
        let last_fence = items.next().and_then(|r| r.integer()).ok_or_else(protocol)?;
        let waiters = items.next().and_then(|r| r.integer()).ok_or_else(protocol)?;
        let expires_in = expiry_of(pttl);
        let mut inspection = Inspection {
            holder: None,
            last_fence: u64::try_from(last_fence).map_err(|_| protocol())?,
            cooldown_until: None,
            queue_length: Some(u32::try_from(waiters).unwrap_or(u32::MAX)),
        };
        if value == COOLDOWN_VALUE {
            inspection.cooldown_until = Some(now.wall.saturating_add(expires_in.unwrap_or(Duration::ZERO)));
        } else if !value.is_empty() {
            let holder = self.judge(cx, value, expires_in, now)?;
            inspection.queue_length = inspection.queue_length.map(|n| n.saturating_add(1));
            inspection.holder = Some(holder);
        }
        // A record judged is one this library encoded: it fits.
        let mut judged = FixedText::new();
        judged.push_bytes(value).map_err(|_| foreign())?;
        Ok((inspection, judged))
    }

    /// One attempt, in `manner`, under the waiter id `id`; `stale`: a dead
    /// holder's record to remove first, if it is still the lock's.
    fn attempt(
        &mut self,
        cx: &Context<'_>,
        nonce: Nonce,
        ttl: Option<Duration>,
        manner: Manner,
        id: &WaiterId,
        stale: Option<&Record>,
    ) -> Result<Attempt, Error> {
        // The lease starts when the request leaves, not when it is granted.
        let sent = cx.now();
        let local_ttl = ttl.map(local_lease);
        let draft = new_record(cx, nonce, 0, sent, local_ttl);
        let (before, after) = draft.encode_line_around_fence();
        let wake = self.keys.wake_of(id);
        let keys = [
            self.keys.lock.as_bytes(),
            self.keys.fence.as_bytes(),
            self.keys.queue.as_bytes(),
            self.keys.alive.as_bytes(),
            wake.as_bytes(),
            self.keys.last_taken.as_bytes(),
        ];
        let (ttl_ms, lease) = (millis(ttl.unwrap_or(Duration::ZERO)), millis(WAITER_LEASE));
        let stale_line = stale.map(Record::encode_line);
        let given_up_at = decimal(self.connection.server_deadline_ms(cx.deadline)?);
        let args = [
            before.as_bytes(),
            after.as_bytes(),
            ttl_ms.as_bytes(),
            id.as_bytes(),
            manner.word(),
            lease.as_bytes(),
            stale_line.as_ref().map_or(&b""[..], |line| line.as_bytes()),
            self.keys.wake_prefix.as_bytes(),
            given_up_at.as_bytes(),
        ];
        if let Err(error) = self.connection.eval(&ACQUIRE, &keys, &args, cx.deadline) {
            // No answer in time, or a stream cut or out of step once the
            // request may have left: the server may have run it all the
            // same, for a caller that no longer waits for it.
            let unanswered = |problem| {
                matches!(problem, ServerProblem::NoAnswer | ServerProblem::Disconnected | ServerProblem::Protocol)
            };
            if matches!(error, Error::Server(e) if unanswered(e.problem)) {
                self.withdraw(before.as_bytes(), id);
            }
            return Err(error);
        }
        let mut items = array_of(self.connection.reply(), 1)?;
        match text_of(items.next())? {
            b"taken" => {
                let fence =
                    items.next().and_then(|r| r.integer()).and_then(|n| u64::try_from(n).ok()).ok_or_else(protocol)?;
                // Only a script of ours writes it; anything else names nobody.
                let gone = match Record::parse_line(text_of(items.next())?) {
                    Some(Ok(gone)) => Some(gone),
                    _ => None,
                };
                let took_over_from = gone.map(|gone| {
                    let holder = Holder { stale: true, ..judge_record(cx, &gone, sent) };
                    match items.next() {
                        // Judged dead by the client that broke it, on its host.
                        Some(Reply::Bulk(Some(b"dead"))) => Holder { liveness: Liveness::Dead, ..holder },
                        // Its key expired: judged here, as far as this host can.
                        _ => holder,
                    }
                });
                let record = Record { fence, ..draft };
                self.confirm_replicated(cx, &record)?;
                Ok(Attempt::Taken { record, took_over_from })
            }
            b"busy" => {
                let value = text_of(items.next())?;
                let expires_in = expiry_of(items.next().and_then(|r| r.integer()).ok_or_else(protocol)?);
                // No script of ours counts below zero; a line longer than a
                // u32 counts is as long as it can be told.
                let ahead = items.next().and_then(|r| r.integer()).filter(|&n| n >= 0).ok_or_else(protocol)?;
                let ahead = u32::try_from(ahead).unwrap_or(u32::MAX);
                let now = cx.now();
                let mut dead_holder = None;
                let contention = if value == COOLDOWN_VALUE {
                    Contention::CoolingDown { until: now.wall.saturating_add(expires_in.unwrap_or(Duration::ZERO)) }
                } else if value.is_empty() {
                    Contention::Queued { ahead, holder: None }
                } else {
                    let holder = self.judge(cx, value, expires_in, now)?;
                    if holder.stale {
                        dead_holder = holder.record;
                    }
                    match (manner, ahead) {
                        (Manner::Fair, 1..) => Contention::Queued { ahead, holder: Some(holder.summary()) },
                        _ => Contention::Held(holder.summary()),
                    }
                };
                Ok(Attempt::Busy { contention, expires_in, dead_holder })
            }
            b"late" => {
                let _ = self.answered_late();
                Ok(Attempt::Busy { contention: self.last_contention, expires_in: None, dead_holder: None })
            }
            b"foreign" => Err(foreign()),
            b"fence" => Err(fence_refused(&self.keys)),
            _ => Err(protocol()),
        }
    }

    /// The server refused a request as come after its deadline, yet its
    /// answer came in time: the two clocks have moved apart since they
    /// were compared, and are compared anew on a new connection. Nothing
    /// was done: as if the answer had not come.
    fn answered_late(&mut self) -> Error {
        self.connection.reset();
        Error::Server(ServerError::said(ServerProblem::NoAnswer, b"the server took the request for one come too late"))
    }

    /// Takes back, on a new connection, an acquisition whose answer did not
    /// come: the lock if it holds the record that starts with `owner_nonce`,
    /// and the place of waiter `id`. Best effort: a request that reaches a
    /// stopped server only after its deadline is refused there anyway.
    fn withdraw(&mut self, owner_nonce: &[u8], id: &WaiterId) {
        let wake = self.keys.wake_of(id);
        let keys = [
            self.keys.lock.as_bytes(),
            self.keys.queue.as_bytes(),
            self.keys.alive.as_bytes(),
            wake.as_bytes(),
            self.keys.last_taken.as_bytes(),
        ];
        let lease = millis(WAITER_LEASE);
        let args = [owner_nonce, id.as_bytes(), self.keys.wake_prefix.as_bytes(), lease.as_bytes()];
        let deadline = MonoTime::now().saturating_add(WITHDRAW_PATIENCE);
        let _ = self.connection.eval(&WITHDRAW, &keys, &args, deadline);
    }

    /// With `replicas=N`, waits (`WAIT`) until N replicas have `taken`,
    /// within the attempt's deadline, and gives it back if they have not
    /// (a failover to a replica without it would hand the lock out twice),
    /// or if that cannot be known.
    fn confirm_replicated(&mut self, cx: &Context<'_>, taken: &Record) -> Result<(), Error> {
        if self.replicas == 0 {
            return Ok(());
        }
        let confirmed = self.replicas_acknowledge(cx);
        if confirmed.is_err() {
            // Too few, or `WAIT` refused or cut off: the caller hears the
            // lock was not taken, so it is given back. Best effort, given
            // a moment past the deadline if the wait took all of it: should
            // it fail, the lock runs out with its ttl.
            let _ = self.release_closed(&cleaning_up(cx), taken, Duration::ZERO);
        }
        confirmed
    }

    /// Waits, by the deadline, for the replicas asked for to acknowledge
    /// what was written last on this connection.
    fn replicas_acknowledge(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        // Room is left for the server's late timeout and to give the lock
        // back; `WAIT n 0` would wait for ever.
        let left = cx.deadline.remaining_from(MonoTime::now());
        let patience = left.saturating_sub(SERVER_TIMER_SLACK + CLEAN_UP_PATIENCE).max(Duration::from_millis(1));
        let (replicas, timeout) = (decimal(u64::from(self.replicas)), millis(patience));
        let acknowledged =
            match self.connection.exchange(&[b"WAIT", replicas.as_bytes(), timeout.as_bytes()], cx.deadline) {
                Ok(()) => match self.connection.reply() {
                    Reply::Integer(n) => n,
                    Reply::Error(said) => return Err(Error::Server(server_error(said))),
                    _ => return Err(protocol()),
                },
                // Too late to tell: as good as not acknowledged.
                Err(Error::Server(e)) if e.problem == ServerProblem::NoAnswer => 0,
                Err(e) => return Err(e),
            };
        if acknowledged >= i64::from(self.replicas) {
            return Ok(());
        }
        let mut said = FixedText::<64>::new();
        let _ = write!(said, "{acknowledged} of {} replicas acknowledged", self.replicas);
        Err(Error::Server(ServerError::said(ServerProblem::NotReplicated, said.as_bytes())))
    }

    /// Judges the record `value` of the lock key, which expires in
    /// `expires_in` on the server. Only a provably dead owner on this host
    /// makes it stale: its expiry is the server's to enforce, not this
    /// host's clock's.
    fn judge(
        &self,
        cx: &Context<'_>,
        value: &[u8],
        expires_in: Option<Duration>,
        now: Moment,
    ) -> Result<Holder, Error> {
        let record = match Record::parse_line(value) {
            // Only the exact bytes this library writes: a break names the
            // record by its bytes, re-encoded from what was parsed.
            Some(Ok(record)) if record.encode_line().as_bytes() == value => record,
            _ => return Err(foreign()),
        };
        let judged = judge_record(cx, &record, now);
        Ok(Holder {
            stale: self.break_dead_owners && judged.liveness == Liveness::Dead,
            expires: expires_in.map(|left| now.wall.saturating_add(left)),
            ..judged
        })
    }
}

/// Whether a call that began at `began` is the last of its wait: its
/// caller, which goes on trying for `cx.waits_for` from then, has no time
/// left for another attempt.
fn last_slice(cx: &Context<'_>, began: MonoTime) -> bool {
    let now = MonoTime::now();
    cx.waits_for.is_some_and(|waits| began.saturating_add(waits).remaining_from(now) < ATTEMPT_RESERVE)
}

/// `cx` with at least [`ROUND_TRIP_FLOOR`] left before its deadline.
fn with_round_trip_floor<'a>(cx: &Context<'a>) -> Context<'a> {
    Context { deadline: cx.deadline.max(MonoTime::now().saturating_add(ROUND_TRIP_FLOOR)), ..*cx }
}

/// What names an acquisition on the server, whatever its expiry: the
/// start of its record up to and with its fence (owner, nonce, fence), and
/// the fence alone. A watchdog, or another handle of the holder's, may have
/// moved the expiry since this handle wrote it.
fn identity_of(held: &Record) -> (FixedText<RECORD_LINE_CAPACITY>, FixedText<24>) {
    let (mut identity, _) = held.encode_line_around_fence();
    let fence = decimal(held.fence);
    // The record's own parts fit, with the fence and the space after it.
    let _ = identity.push_bytes(fence.as_bytes());
    let _ = identity.push_bytes(b" ");
    (identity, fence)
}

/// The record a release or prolong found still the holder's, from its
/// answer `{outcome, record}`: its expiry is the one that counts.
fn kept_record(items: &mut resp::Items<'_>) -> Result<Record, Error> {
    let _outcome = items.next();
    match Record::parse_line(text_of(items.next())?) {
        Some(Ok(record)) => Ok(record),
        _ => Err(foreign()),
    }
}

/// The refusal of a fence key that holds what no acquisition wrote: it is
/// left alone, and named.
fn fence_refused(keys: &Keys) -> Error {
    Error::Server(ServerError::said(ServerProblem::ForeignKeys, keys.fence.as_bytes()))
}

/// A number in decimal.
fn decimal(n: u64) -> FixedText<24> {
    let mut out = FixedText::new();
    let _ = write!(out, "{n}");
    out
}

/// A duration as whole milliseconds, rounded up (a lease of 0.5 ms is one
/// of 1 ms, never one without expiry), in decimal.
fn millis(d: Duration) -> FixedText<24> {
    decimal(u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

/// A key's `PTTL` as the time left: `None` for a key without expiry (-1)
/// or none at all (-2).
fn expiry_of(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// The items of an array answer with at least `min` of them.
fn array_of(reply: Reply<'_>, min: usize) -> Result<resp::Items<'_>, Error> {
    match reply {
        Reply::Array(Some(items)) if items.remaining() >= min => Ok(items),
        _ => Err(protocol()),
    }
}

/// The text of a bulk string item.
fn text_of<'a>(item: Option<Reply<'a>>) -> Result<&'a [u8], Error> {
    item.and_then(|reply| reply.text()).ok_or_else(protocol)
}

fn foreign() -> Error {
    Error::Server(ServerError::new(ServerProblem::ForeignKeys, None))
}

fn protocol() -> Error {
    Error::Server(ServerError::new(ServerProblem::Protocol, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_line_is_its_two_parts_around_its_fence() {
        let cx_owner = crate::owner::Owner::current().unwrap();
        let record = Record {
            owner: cx_owner,
            nonce: Nonce::random().unwrap(),
            fence: 1_795_000_000_000_042,
            since: crate::clock::WallTime::now(),
            expires: None,
        };
        let (before, after) = record.encode_line_around_fence();
        let mut joined = std::vec::Vec::from(before.as_bytes());
        joined.extend_from_slice(b"1795000000000042");
        joined.extend_from_slice(after.as_bytes());
        assert_eq!(joined, record.encode_line().as_bytes());
        assert_eq!(Record::parse_line(&joined), Some(Ok(record)));
    }

    #[test]
    fn the_local_lease_ends_before_the_servers() {
        assert_eq!(local_lease(Duration::from_secs(10)), Duration::from_millis(9_898));
        assert_eq!(local_lease(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(millis(Duration::from_micros(1_500)).as_bytes(), b"2");
        assert_eq!(expiry_of(-2), None);
        assert_eq!(expiry_of(-1), None);
        assert_eq!(expiry_of(1500), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn the_scripts_know_the_longest_record() {
        let prelude = include_str!("lua/prelude.lua");
        let line = std::format!("local LONGEST_RECORD = {}", crate::record::RECORD_CAPACITY);
        assert!(prelude.contains(&line), "prelude.lua: {line}");
    }

    #[test]
    fn a_waiter_id_names_its_host_and_pid() {
        let owner = crate::owner::Owner::current().unwrap();
        let id = waiter_id(&owner, &Nonce::random().unwrap());
        assert!(id.as_bytes().starts_with(owner.host.as_bytes()));
        assert_eq!(waiter_pid(id.as_bytes()), Some(owner.process.pid));
        assert_eq!(waiter_pid(b"host:0:abc"), None);
        assert_eq!(waiter_pid(b"4242:abc"), None, "no host");
        assert_eq!(waiter_pid(b"a:b:4242:abc"), Some(4242), "a host with a colon keeps its pid");
    }

    #[test]
    fn a_name_that_would_empty_the_hash_tag_is_refused() {
        assert!(Keys::of(b"}x").is_err());
        let keys = Keys::of(b"a}b").unwrap();
        assert_eq!(keys.lock.as_bytes(), b"lockcore:{a}b}:lock", "the tag is `a`, the same for every key");
        assert!(Keys::of(&[b'x'; crate::spec::VALUE_CAPACITY]).is_ok());
    }
}

//! The lock handle: a parsed spec, the strategy it names, the caller's
//! identity, and the acquisition it holds.

use core::cell::RefCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::time::Duration;

use crate::clock::{Moment, MonoTime, WallTime};
use crate::error::{Contention, Error, FileRole};
use crate::fair::{self, Try};
use crate::look::RecentLook;
use crate::owner::{Liveness, Nonce, Owner};
use crate::record::Record;
use crate::registry::{Ability, AnyStrategy};
use crate::spec::{Spec, Target};
use crate::strategy::{CommitOutcome, Context, Holder, Inspection, ProlongOutcome, ReleaseOutcome, Taken};
use crate::sys::{self, CPath};
use crate::trust::Sharing;
use crate::turnstile::{Ahead, Ticket, Turnstile, Unusable};
use crate::wait::{self, Backoff, Cancellable, Notify, Sleep, Wake, WakeSource, Warnings, WatchWhenBusy};

/// How long `try_acquire` may wait for the file that orders the lock's
/// changes (its guard, lease or queue), which its holders keep for a few
/// system calls: past this, another process is holding it on purpose or
/// is stopped inside one of them, and the lock is busy.
pub const TRY_PATIENCE: Duration = Duration::from_millis(50);

/// Within `acquire`, how long one attempt may wait for that file before
/// the waiting loop (its warnings, its deadline) gets control back.
pub const ATTEMPT_PATIENCE: Duration = Duration::from_millis(250);

/// Within `acquire`'s budget, the time kept back for giving up a queue
/// place (`toplock`) once the attempts are over.
const ABANDON_RESERVE: Duration = Duration::from_millis(5);

/// How long release, prolong, commit, inspect and break may wait for that
/// file. They have no wait budget of their own; past this they answer
/// [`Error::Busy`] with [`Contention::GuardHeld`](crate::error::Contention::GuardHeld)
/// and change nothing.
pub const CHANGE_PATIENCE: Duration = Duration::from_secs(2);

/// A successful acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// Strictly greater than the fence of every earlier acquisition of this
    /// lock, in any process: hand it to the resource so that it can refuse a
    /// holder whose lease has run out.
    pub fence: u64,
    /// When others may break the lock; `None` without a TTL.
    pub expires: Option<WallTime>,
    /// The holder whose lock this acquisition found stale and broke, as
    /// judged then: its process had died (`liveness` is
    /// [`Liveness::Dead`](crate::Liveness::Dead)), or it had run past its
    /// expiry (for `flock`: let go of the kernel lock without releasing,
    /// or had its file deleted under it). Whatever it protected may be
    /// half-done: check it, as after a robust mutex's `EOWNERDEAD`. `None`
    /// when the lock was free, or when nothing is left to tell (a `redis`
    /// server that lost its data, a `toplock` queue so full that it was
    /// compacted before the next grant).
    pub took_over_from: Option<Holder>,
}

impl Acquired {
    /// Whether the previous holder died holding the lock.
    pub fn previous_holder_died(&self) -> bool {
        self.took_over_from.is_some_and(|holder| holder.liveness == Liveness::Dead)
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
    /// The process that made or last used this handle: after `fork()` it
    /// differs from the caller's, and the handle takes the child's identity.
    /// Not `me`'s pid, which [`Lock::with_owner`] sets to another process's.
    pid: i32,
    /// That process's [`incarnation`](crate::process::incarnation), which
    /// tells a child from its parent where the pid does not: pid 1 forking
    /// into a new pid namespace has a child that is pid 1 too.
    incarnation: Option<u64>,
    sharing: Sharing,
    strategy: AnyStrategy,
    held: Option<Record>,
    /// The stale holder `held`'s acquisition broke; meaningless without
    /// `held`.
    took_over_from: Option<Holder>,
    /// Made by [`Lock::adopt_in`]: prolongs, never releases on drop.
    adopted: bool,
    /// The queue this handle's waits take their turns in.
    line: Line,
    /// The turn in it that this handle holds while it holds the lock:
    /// passed on when the lock is let go.
    turn: Option<Ticket>,
}

/// A handle's way into its lock's [`Turnstile`].
// Inline, like every path here: nothing is allocated.
#[allow(clippy::large_enum_variant)]
enum Line {
    /// Opened at the first acquisition.
    Unopened,
    /// None at the lock's path at the last look: looked for again once that
    /// look is no longer believed. Only a waiter makes one, so an
    /// acquisition that passes a turnstile made since can only pass the
    /// waiters of that moment, and only for as long as the look is believed.
    Absent(RecentLook),
    Open(Turnstile),
    /// `fair=0`, a lock that keeps no file, a file system shared with other
    /// hosts, or a turnstile that could not be used: waiters try whenever
    /// they wake.
    Unfair,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("scheme", &self.spec.scheme)
            .field("target", self.spec.target())
            .field("held", &self.held)
            .finish()
    }
}

impl Lock {
    /// Parses `spec` (a `&str`, or bytes: a path need not be UTF-8) and
    /// prepares the lock. No file is touched yet.
    pub fn open(spec: impl AsRef<[u8]>) -> Result<Lock, Error> {
        Lock::with_spec(Spec::parse(spec.as_ref())?)
    }

    /// [`open`](Self::open) for a spec already parsed.
    pub fn with_spec(spec: Spec) -> Result<Lock, Error> {
        Lock::with_owner(spec, Owner::current()?)
    }

    /// A handle that acts as `owner` rather than as the calling process:
    /// what tests need to leave a lock behind for a process that is dead, or
    /// whose pid was reused, in the strategy's own format. A program has no
    /// use for it: its locks would be judged by another process's liveness.
    #[doc(hidden)]
    pub fn with_owner(spec: Spec, owner: Owner) -> Result<Lock, Error> {
        let mut slot = MaybeUninit::uninit();
        Lock::with_owner_in(spec, owner, &mut slot)?;
        // SAFETY: `with_owner_in` wrote the whole Lock.
        Ok(unsafe { slot.assume_init() })
    }

    /// [`open`](Self::open), the handle written into `slot` rather than
    /// returned: for a caller that keeps it elsewhere than on its stack
    /// (the C ABI keeps it on the heap). A `Lock` is tens of KiB (nothing
    /// is allocated: paths and buffers are inline), and each function that
    /// returns one by value holds a copy in its frame, so that opening a
    /// handle by value takes a few hundred KiB of stack.
    pub fn open_in(spec: impl AsRef<[u8]>, slot: &mut MaybeUninit<Lock>) -> Result<&mut Lock, Error> {
        let spec = Spec::parse(spec.as_ref())?;
        Lock::with_owner_in(spec, Owner::current()?, slot)
    }

    /// [`with_owner`](Self::with_owner), written into `slot` as
    /// [`open_in`](Self::open_in) writes it.
    fn with_owner_in(spec: Spec, owner: Owner, slot: &mut MaybeUninit<Lock>) -> Result<&mut Lock, Error> {
        let sharing = Sharing::new(spec.options.mode);
        let lock = slot.as_mut_ptr();
        // SAFETY: `addr_of_mut!` makes a pointer to a field of the slot
        // without reading it; MaybeUninit<T> has T's layout. Nothing is
        // read from the slot until every field is written.
        AnyStrategy::open_into(&spec, sharing, unsafe { &mut *addr_of_mut!((*lock).strategy).cast() })?;
        let line = if spec.options.fair { Line::Unopened } else { Line::Unfair };
        // SAFETY: as above; each field but `strategy` (written by now) is
        // written once, and the pattern below names every field, so that a
        // field added to Lock and left out here stops the build.
        unsafe {
            addr_of_mut!((*lock).spec).write(spec);
            addr_of_mut!((*lock).me).write(owner);
            addr_of_mut!((*lock).pid).write(crate::process::pid());
            addr_of_mut!((*lock).incarnation).write(crate::process::incarnation());
            addr_of_mut!((*lock).sharing).write(sharing);
            addr_of_mut!((*lock).held).write(None);
            addr_of_mut!((*lock).took_over_from).write(None);
            addr_of_mut!((*lock).adopted).write(false);
            addr_of_mut!((*lock).line).write(line);
            addr_of_mut!((*lock).turn).write(None);
            let Lock {
                spec: _,
                me: _,
                pid: _,
                incarnation: _,
                sharing: _,
                strategy: _,
                held: _,
                took_over_from: _,
                adopted: _,
                line: _,
                turn: _,
            } = &*lock;
            Ok(slot.assume_init_mut())
        }
    }

    /// The spec this handle was opened with.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The path that is the lock: the lock file, the lock directory, the
    /// symlink, the flock'd file, the lease or the queue. A lock that keeps
    /// no file ([`Ability::Files`]) answers [`Error::Unsupported`].
    pub fn path(&self) -> Result<&CPath, Error> {
        match self.strategy.abilities_ref().as_files() {
            Some(files) => Ok(files.path()),
            None => Err(self.unsupported(Ability::Files)),
        }
    }

    /// The guard beside the lock, for the strategies that keep one
    /// (`lockfile`, `mkdir`, `symlink`, and `flock`'s state file).
    pub fn guard_path(&self) -> Option<&CPath> {
        self.strategy.abilities_ref().as_files().and_then(|files| files.guard_path())
    }

    /// The error for an ability this lock's scheme lacks.
    fn unsupported(&self, ability: Ability) -> Error {
        Error::Unsupported(crate::error::Unsupported::Ability { scheme: self.spec.scheme, ability })
    }

    /// The record of the acquisition this handle holds.
    pub fn held(&self) -> Option<&Record> {
        self.held.as_ref()
    }

    /// The stale holder that the acquisition this handle holds broke
    /// ([`Acquired::took_over_from`]); `None` when it holds nothing.
    pub fn took_over_from(&self) -> Option<&Holder> {
        self.held.as_ref().and(self.took_over_from.as_ref())
    }

    /// Puts the path back into an error of this lock, for a message:
    /// `<path>: <error>`.
    pub fn describe<'a>(&'a self, error: &'a Error) -> Described<'a> {
        Described { lock: self, error, owner_name: None }
    }

    /// The lock as messages name it: its path, or, for a lock that keeps
    /// no file of this host, its scheme, server and key.
    pub fn name(&self) -> LockName<'_> {
        LockName(self)
    }

    /// Runs one operation of the strategy, which must return by `deadline`.
    fn run<T>(&mut self, deadline: MonoTime, op: impl FnOnce(&mut AnyStrategy, &Context<'_>) -> T) -> T {
        self.run_waiting(deadline, None, false, op)
    }

    /// [`run`](Self::run), for an attempt whose caller goes on trying for
    /// `waits_for` (`None`: for ever), keeping its place in the strategy's
    /// queue between attempts if `keeps_place`.
    fn run_waiting<T>(
        &mut self,
        deadline: MonoTime,
        waits_for: Option<Duration>,
        keeps_place: bool,
        op: impl FnOnce(&mut AnyStrategy, &Context<'_>) -> T,
    ) -> T {
        let Lock { spec, me, sharing, strategy, .. } = self;
        let cx = Context { me, options: &spec.options, sharing: *sharing, deadline, waits_for, keeps_place };
        op(strategy, &cx)
    }

    fn change_deadline() -> MonoTime {
        MonoTime::now().saturating_add(CHANGE_PATIENCE)
    }

    /// One attempt: [`Error::Busy`] if someone else holds the lock or it is
    /// cooling down, within [`TRY_PATIENCE`] at the most. A queueing
    /// strategy does not keep a place for a caller that does not wait.
    ///
    /// With a turnstile (`fair=1`), it does not pass the waiters in line:
    /// it tries the lock only when nobody is, or when just the head is and
    /// that head has not taken it.
    pub fn try_acquire(&mut self) -> Result<Acquired, Error> {
        let deadline = MonoTime::now().saturating_add(TRY_PATIENCE);
        self.refresh_identity()?;
        let line = self.take_line(false);
        let result = match &line {
            Some(line) => self.try_in_line(line, deadline),
            None => self.attempt(deadline, Some(TRY_PATIENCE), false, Patience::Once),
        };
        self.put_line(line);
        if result.is_err() {
            self.abandon(MonoTime::now().saturating_add(TRY_PATIENCE));
        }
        result
    }

    /// [`try_acquire`](Self::try_acquire)'s one attempt, behind nobody in
    /// `line`, or behind a line that stands still: a ticket is taken only
    /// with the lock.
    fn try_in_line(&mut self, line: &Turnstile, deadline: MonoTime) -> Result<Acquired, Error> {
        let stalled = match line.look(self.pid) {
            Ahead::Waiters(ahead) => return Err(Error::Busy(Contention::Queued { ahead, holder: None })),
            Ahead::Stalled(ahead) => Some(ahead),
            Ahead::Nobody | Ahead::OnlyTheHead => None,
        };
        let acquired = match (self.attempt(deadline, Some(TRY_PATIENCE), false, Patience::Once), stalled) {
            // Not got past a stalled line: as busy as behind a moving one,
            // with the holder the attempt found.
            (Err(Error::Busy(why)), Some(ahead)) => {
                let holder = match why {
                    Contention::Held(holder) => Some(holder),
                    _ => None,
                };
                return Err(Error::Busy(Contention::Queued { ahead, holder }));
            }
            (result, _) => result?,
        };
        self.turn = line.take_turn(self.pid);
        if let Some(turn) = self.turn {
            line.hold(turn);
        }
        Ok(acquired)
    }

    /// The turnstile, out of the handle for the length of an acquisition
    /// (which also needs the handle); `None` where waiters poll, or where
    /// there is none yet and `create` is false.
    fn take_line(&mut self, create: bool) -> Option<Turnstile> {
        let now = MonoTime::now();
        let lock_path = self.strategy.abilities_ref().as_files().map(|files| files.path());
        let look_again = match &mut self.line {
            // Deleted (a cleaner of /tmp) and perhaps made anew: the others
            // queue in the file at the name now.
            Line::Open(line) => !lock_path.is_some_and(|path| line.is_current_at(path, now)),
            Line::Absent(looked) => create || !looked.is_believed(now),
            Line::Unopened | Line::Unfair => false,
        };
        if look_again {
            self.line = Line::Unopened;
        }
        if let Line::Unopened = self.line {
            let Ok(path) = self.path() else {
                self.line = Line::Unfair;
                return None;
            };
            match Turnstile::open(path, self.sharing, create) {
                Ok(line) => self.line = Line::Open(line),
                Err(Unusable::Missing) => {
                    self.line = Line::Absent(RecentLook::made(now));
                    return None;
                }
                Err(Unusable::Never) => self.line = Line::Unfair,
            }
        }
        match core::mem::replace(&mut self.line, Line::Unopened) {
            Line::Open(line) => Some(line),
            other => {
                self.line = other;
                None
            }
        }
    }

    fn put_line(&mut self, line: Option<Turnstile>) {
        if let Some(line) = line {
            self.line = Line::Open(line);
        }
    }

    /// Gives the turn this handle holds to the next in line.
    fn pass_turn(&mut self) {
        if let (Some(turn), Line::Open(line)) = (self.turn.take(), &self.line) {
            // A child of fork() does not hold its parent's turn.
            if turn.pid() == crate::process::pid() && self.in_its_own_process() {
                line.pass(turn);
            }
        }
    }

    /// One attempt, for the attempts of one `acquire`, ending by
    /// `deadline`; its caller goes on trying for `waits_for`. A queueing
    /// strategy keeps the place a failed attempt took for the next if
    /// `keeps_place`, and takes none otherwise (any it must take all the
    /// same is given up by [`abandon`](Self::abandon)).
    fn attempt(
        &mut self,
        deadline: MonoTime,
        waits_for: Option<Duration>,
        keeps_place: bool,
        patience: Patience,
    ) -> Result<Acquired, Error> {
        self.refresh_identity()?;
        if self.held.is_some() {
            return Err(Error::AlreadyHeld);
        }
        let nonce = Nonce::random()?;
        let ttl = self.spec.options.ttl;
        let Taken { record, took_over_from } =
            self.run_waiting(deadline, waits_for, keeps_place, |strategy, cx| {
                match (patience, strategy.abilities().as_timed_acquire()) {
                    (Patience::UntilDeadline, Some(timed)) => timed.acquire_until(cx, nonce, ttl),
                    _ => strategy.core().try_acquire(cx, nonce, ttl),
                }
            })?;
        self.held = Some(record);
        self.took_over_from = took_over_from;
        Ok(Acquired { fence: record.fence, expires: record.expires.map(|at| at.wall), took_over_from })
    }

    /// Gives up a queue place kept by failed attempts, by `deadline`. If
    /// the queue stays held past that, the place is left, and the others
    /// pass it over once it has waited at the head for as long as its
    /// caller said it would wait ([`Context::waits_for`]), or its owner is gone.
    fn abandon(&mut self, deadline: MonoTime) {
        if self.in_its_own_process() {
            let _ = self.run(deadline, |strategy, cx| match strategy.abilities().as_queue() {
                Some(queue) => queue.abandon(cx),
                None => Ok(()),
            });
        }
    }

    /// Waits up to `budget` (`None`: as long as it takes) for the lock.
    /// Every wait inside, for the lock's guard included, ends by the budget.
    ///
    /// With `fair=1` (the default) on a local file system, the wait is a
    /// place in the lock's turnstile: first come, first served among this
    /// library's waiters, whichever user they run as, each woken when its
    /// turn comes, and only the head tries the lock. Whoever tries it (the head, or every waiter with
    /// `fair=0`) waits between attempts on the strategy's own wake source,
    /// if its scheme has one ([`Ability::OwnWake`]), or on an inotify watch
    /// of the lock's name ([`WatchWhenBusy`]), for what the queue does not
    /// see (a peer's tool letting go), with a jittered backoff for what no
    /// event reports (a holder that died or expired). A scheme that waits
    /// inside one call ([`Ability::TimedAcquire`]) waits there, in slices of
    /// at most [`ATTEMPT_PATIENCE`].
    pub fn acquire(&mut self, budget: Option<Duration>) -> Result<Acquired, Error> {
        self.acquire_warned(budget, None)
    }

    /// [`acquire`](Self::acquire), with warnings after `wmin` and every
    /// `wafter` of waiting (unless `warn=0`), each told how long the caller
    /// has waited and what stands in its way.
    pub fn acquire_warned(
        &mut self,
        budget: Option<Duration>,
        warn: Option<&mut Notify<'_>>,
    ) -> Result<Acquired, Error> {
        self.acquire_cancellable(budget, warn, &mut || false)
    }

    /// [`acquire_warned`](Self::acquire_warned), given up with
    /// [`Error::Cancelled`] (and the place in line with it) once
    /// `cancelled` answers true. It is asked before every attempt, so one
    /// that already answers true ends the call without an attempt, and at
    /// least every [`LONGEST_SLEEP_IN_LINE`] of a wait in line; a wait
    /// outside the line asks it between attempts, which its backoff keeps
    /// at most [`Backoff::LONGEST`] apart (an attempt that waits inside
    /// itself, at most [`ATTEMPT_PATIENCE`]).
    ///
    /// [`LONGEST_SLEEP_IN_LINE`]: crate::LONGEST_SLEEP_IN_LINE
    pub fn acquire_cancellable(
        &mut self,
        budget: Option<Duration>,
        warn: Option<&mut Notify<'_>>,
        cancelled: &mut dyn FnMut() -> bool,
    ) -> Result<Acquired, Error> {
        if self.spec.scheme.supports(Ability::TimedAcquire) {
            // Each attempt waited for the lock itself: try again at once.
            return self.acquire_with(budget, &mut Cancellable::new(&mut AttemptsWait, cancelled), warn);
        }
        if self.spec.scheme.supports(Ability::OwnWake) {
            let this = RefCell::new(self);
            let mut wake = OwnWakeOf(&this);
            return Lock::acquire_shared(&this, budget, &mut Cancellable::new(&mut wake, cancelled), warn);
        }
        match self.watch_path().cloned() {
            Some(path) => {
                let mut watch = WatchWhenBusy::new(&path);
                self.acquire_with(budget, &mut Cancellable::new(&mut watch, cancelled), warn)
            }
            None => self.acquire_with(budget, &mut Cancellable::new(&mut Sleep, cancelled), warn),
        }
    }

    /// The name whose changes tell a waiter the lock may be free: the lock's
    /// own, but for `flock`, whose kernel lock changes no file when it is
    /// let go: its state file, which its holder rewrites just before.
    pub fn watch_path(&self) -> Option<&CPath> {
        match self.spec.scheme {
            crate::Scheme::Flock => self.guard_path(),
            _ => self.path().ok(),
        }
    }

    /// [`acquire_warned`](Self::acquire_warned) with a wake source of the
    /// caller's, for the attempts at the lock itself. An error from its
    /// `arm`, which is called at least once per [`SAFETY_SLICE`] of the
    /// wait and after every signal, ends the wait with that error (and
    /// gives up the place in line): that is how a wait is cancelled.
    ///
    /// [`SAFETY_SLICE`]: crate::turnstile::SAFETY_SLICE
    pub fn acquire_with(
        &mut self,
        budget: Option<Duration>,
        wake: &mut dyn WakeSource,
        warn: Option<&mut Notify<'_>>,
    ) -> Result<Acquired, Error> {
        Lock::acquire_shared(&RefCell::new(self), budget, wake, warn)
    }

    /// The waiting loop of [`acquire_with`](Self::acquire_with), on a
    /// handle that the wake source may also use between attempts (a
    /// strategy's own source lives in the strategy). The loop never holds
    /// the handle while it calls the source, so each borrow succeeds; one
    /// that did not would be answered as busy, never by a panic.
    fn acquire_shared(
        this: &RefCell<&mut Lock>,
        budget: Option<Duration>,
        wake: &mut dyn WakeSource,
        warn: Option<&mut Notify<'_>>,
    ) -> Result<Acquired, Error> {
        let Ok(mut lock) = this.try_borrow_mut() else { return Err(Error::Busy(Contention::Raced)) };
        lock.refresh_identity()?;
        if lock.held.is_some() {
            return Err(Error::AlreadyHeld);
        }
        let options = lock.spec.options;
        let warnings =
            warn.filter(|_| options.warn).map(|notify| Warnings { first: options.wmin, every: options.wafter, notify });
        // Jitter only needs waiters to differ, not secrecy: the clock and the
        // pid do that without a getrandom call on every acquire.
        let start = MonoTime::now();
        let seed = (start.since(MonoTime::EPOCH).as_nanos() as u64) ^ ((lock.me.process.pid as u64) << 32);
        let deadline = budget.map(|budget| start.saturating_add(budget));
        // A queue place is given up within the budget: the attempts leave
        // the few milliseconds that takes.
        let reserve = if lock.spec.scheme.supports(Ability::Queue) { ABANDON_RESERVE } else { Duration::ZERO };
        let attempts_end = budget.map(|budget| start.saturating_add(budget.saturating_sub(reserve).max(budget / 2)));
        let (mut line, pid) = (lock.take_line(false), lock.pid);
        let first_waiter = line.is_none() && matches!(lock.line, Line::Unopened | Line::Absent(_));
        drop(lock);
        // `keep_place`: whether a failed attempt keeps the strategy's own
        // queue place (`toplock`) for the next. Only a wait outside the
        // turnstile keeps one: in line, the turnstile is the queue, and a
        // place kept by a waiter that is no longer the head would stand
        // before the new head in the strategy's queue while its owner waits
        // for that head in the turnstile. An attempt that keeps no place
        // tells the strategy's queue it waits no longer than itself: should
        // its `abandon` fail (the queue file held past TRY_PATIENCE on a
        // loaded machine), the place left behind is passed over after
        // ATTEMPT_PATIENCE, not after the caller's whole budget.
        let attempt = |how: Patience, keep_place: bool| {
            let now = MonoTime::now();
            let cap = now.saturating_add(ATTEMPT_PATIENCE);
            let remaining = deadline.map(|deadline| deadline.remaining_from(now));
            let waits_for = match keep_place {
                true => remaining,
                false => Some(remaining.map_or(ATTEMPT_PATIENCE, |left| left.min(ATTEMPT_PATIENCE))),
            };
            let Ok(mut lock) = this.try_borrow_mut() else { return Err(Error::Busy(Contention::Raced)) };
            let result = lock.attempt(attempts_end.map_or(cap, |end| end.min(cap)), waits_for, keep_place, how);
            if result.is_err() && !keep_place {
                lock.abandon(MonoTime::now().saturating_add(TRY_PATIENCE));
            }
            result
        };
        let backoff = Backoff::new(seed);
        // Nobody has waited for this lock yet: one attempt first, and only a
        // caller that must wait makes the turnstile.
        // Armed first like every attempt, so that a wait cancelled before
        // it began makes none.
        let first = first_waiter.then(|| wake.arm().and_then(|()| attempt(Patience::UntilDeadline, false)));
        let must_wait = matches!(first, None | Some(Err(Error::Busy(_))));
        if first.is_some() && must_wait {
            line = this.try_borrow_mut().ok().and_then(|mut lock| lock.take_line(true));
        }
        let result = match (first, &line) {
            (Some(done), _) if !must_wait => done,
            (_, Some(line)) => fair::wait_in_line(
                line,
                pid,
                attempts_end,
                wake,
                warnings,
                backoff,
                options.window,
                |how| {
                    let patience = match how {
                        Try::AsHead => Patience::UntilDeadline,
                        Try::Probe => Patience::Once,
                    };
                    attempt(patience, false)
                },
                || this.try_borrow_mut().ok().and_then(|mut lock| lock.holder_summary()),
            )
            .map(|(acquired, turn)| {
                if let Some(turn) = turn {
                    line.hold(turn);
                }
                if let Ok(mut lock) = this.try_borrow_mut() {
                    lock.turn = turn;
                }
                acquired
            }),
            (_, None) => {
                wait::wait_for(attempts_end, wake, warnings, backoff, || attempt(Patience::UntilDeadline, true))
            }
        };
        if let Ok(mut lock) = this.try_borrow_mut() {
            lock.put_line(line);
        }
        if result.is_err() {
            let now = MonoTime::now();
            if let Ok(mut lock) = this.try_borrow_mut() {
                lock.abandon(deadline.map_or_else(Lock::change_deadline, |deadline| deadline.max(now)));
            }
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
        self.release_within(cooldown, CHANGE_PATIENCE)
    }

    /// [`release`](Self::release) within `patience` rather than
    /// [`CHANGE_PATIENCE`]: for a caller that has spent part of its own
    /// deadline already (a renewal it waited for).
    pub fn release_within(&mut self, cooldown: Duration, patience: Duration) -> Result<ReleaseOutcome, Error> {
        if !cooldown.is_zero() {
            self.spec.scheme.require(Ability::Cooldown)?;
        }
        let held = self.held_here()?;
        let deadline = MonoTime::now().saturating_add(patience);
        let outcome = self.run(deadline, |strategy, cx| match strategy.abilities().as_cooldown() {
            Some(closing) => closing.release_closed(cx, &held, cooldown),
            None => strategy.core().release(cx, &held),
        })?;
        self.held = None;
        self.pass_turn();
        Ok(outcome)
    }

    /// Moves the expiry to now + `ttl` (`None`: the spec's TTL; without one,
    /// the lock no longer expires).
    pub fn prolong(&mut self, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        self.prolong_within(ttl, CHANGE_PATIENCE)
    }

    /// [`prolong`](Self::prolong) within `patience` rather than
    /// [`CHANGE_PATIENCE`]: for a renewal that others may be waiting out,
    /// and that is tried again soon if it fails.
    pub fn prolong_within(&mut self, ttl: Option<Duration>, patience: Duration) -> Result<ProlongOutcome, Error> {
        self.spec.scheme.require(Ability::Prolong)?;
        let mut held = self.held_here()?;
        let ttl = ttl.or(self.spec.options.ttl);
        let unsupported = self.unsupported(Ability::Prolong);
        let deadline = MonoTime::now().saturating_add(patience);
        let outcome = self.run(deadline, |strategy, cx| match strategy.abilities().as_prolong() {
            Some(prolonging) => prolonging.prolong(cx, &mut held, ttl),
            None => Err(unsupported),
        })?;
        self.held = match outcome {
            ProlongOutcome::Lost => None,
            ProlongOutcome::Prolonged | ProlongOutcome::Expired => Some(held),
        };
        if self.held.is_none() {
            self.pass_turn();
        }
        Ok(outcome)
    }

    /// Runs `action` only if this handle still holds the lock and is within
    /// its TTL, at a moment when no other process can take it over. On
    /// `Lost` the handle holds nothing afterwards.
    pub fn run_while_held(&mut self, action: &mut dyn FnMut() -> Result<(), Error>) -> Result<CommitOutcome, Error> {
        self.spec.scheme.require(Ability::Commit)?;
        let held = self.held_here()?;
        let unsupported = self.unsupported(Ability::Commit);
        let outcome = self.run(Lock::change_deadline(), |strategy, cx| match strategy.abilities().as_commit() {
            Some(committing) => committing.run_while_held(cx, &held, action),
            None => Err(unsupported),
        })?;
        if outcome == CommitOutcome::Lost {
            self.held = None;
            self.pass_turn();
        }
        Ok(outcome)
    }

    /// The commit step: replaces `target` with the finished file `temp` by
    /// `rename(2)`, only if this handle still holds the lock at that moment.
    /// On `Expired` or `Lost`, `target` is untouched and `temp` is left for
    /// the caller. A failed rename is [`Error::Commit`]; a temp file or
    /// target that is the lock itself or its guard is
    /// [`Error::CommitOntoLock`] (renaming over either would destroy the lock).
    pub fn commit_file(&mut self, temp: &CPath, target: &CPath) -> Result<CommitOutcome, Error> {
        let lock = self.path()?.clone();
        self.held_here()?;
        let guard = self.guard_path().cloned();
        self.run_while_held(&mut || {
            // Judged by inode, not by name (a relative path, a link to a
            // directory), and under the guard, so the lock's files stay put.
            for path in [temp, target] {
                let Ok(given) = sys::lstat(path) else { continue };
                let own = [Some(&lock), guard.as_ref()];
                if own.into_iter().flatten().any(|own| sys::lstat(own).is_ok_and(|own| own.same_file(&given))) {
                    return Err(Error::CommitOntoLock);
                }
            }
            sys::rename(temp, target).map_err(Error::Commit)
        })
    }

    /// A second handle on an acquisition this process holds through another
    /// handle (same spec, same record), written into `slot` as
    /// [`open_in`](Self::open_in) writes it: for a watchdog thread, which
    /// keeps it on the heap, and prolongs the lock while its owner works.
    /// It never releases: dropping it, or [`forget`](Self::forget), leaves
    /// the lock to its owner.
    pub fn adopt_in(spec: Spec, held: Record, slot: &mut MaybeUninit<Lock>) -> Result<&mut Lock, Error> {
        let lock = Lock::with_owner_in(spec, Owner::current()?, slot)?;
        if held.owner.process.pid != lock.me.process.pid {
            // SAFETY: written whole just above, and never used again: the
            // caller is told the slot holds nothing.
            unsafe { slot.assume_init_drop() };
            return Err(Error::Forked);
        }
        lock.held = Some(held);
        lock.adopted = true;
        // SAFETY: written whole by `with_owner_in`.
        Ok(unsafe { slot.assume_init_mut() })
    }

    /// Stops tracking the acquisition without releasing it. The turn goes
    /// to the next in line, who waits for the lock itself as for any holder
    /// from outside the line.
    pub fn forget(&mut self) {
        self.held = None;
        self.pass_turn();
    }

    /// Reads the lock's state without taking it, within [`CHANGE_PATIENCE`].
    pub fn inspect(&mut self) -> Result<Inspection, Error> {
        self.inspect_within(CHANGE_PATIENCE)
    }

    /// [`inspect`](Self::inspect) within `patience`: a look that must not
    /// outlast its caller's own deadline (a wait's report, a wait with a
    /// budget). A guard held, or a server silent, for that long answers
    /// busy or no answer.
    pub fn inspect_within(&mut self, patience: Duration) -> Result<Inspection, Error> {
        self.refresh_identity()?;
        let deadline = MonoTime::now().saturating_add(patience);
        let mut inspection = self.run(deadline, |strategy, cx| strategy.core().inspect(cx))?;
        if let (Some(holder), Some(held)) = (inspection.holder.as_mut(), self.held.as_ref()) {
            holder.this_handle = holder.record.is_some_and(|rec| rec.nonce == held.nonce);
        }
        // The holder and every waiter: a strategy's own queue counts so,
        // and the line holds the waiters of every strategy.
        let in_line = self.waiting_in_line().unwrap_or(0) + u32::from(inspection.holder.is_some());
        inspection.queue_length = Some(inspection.queue_length.unwrap_or(0).max(in_line));
        Ok(inspection)
    }

    /// Who holds the lock, by a look that takes nothing, for a waiter in
    /// line that has made no attempt to learn it.
    fn holder_summary(&mut self) -> Option<crate::error::HolderSummary> {
        let deadline = MonoTime::now().saturating_add(TRY_PATIENCE);
        let inspection = self.run(deadline, |strategy, cx| strategy.core().inspect(cx)).ok()?;
        inspection.holder.map(|holder| holder.summary())
    }

    /// How many wait in the lock's turnstile, the holder not counted, if
    /// it has one; a look makes none.
    fn waiting_in_line(&mut self) -> Option<u32> {
        let line = self.take_line(false);
        let waiting = line.as_ref().map(|line| line.waiting(self.pid));
        self.put_line(line);
        waiting
    }

    /// Removes the lock whoever holds it: for an operator who knows the
    /// holder is gone. `Ok(false)` if it was free.
    pub fn break_lock(&mut self) -> Result<bool, Error> {
        self.refresh_identity()?;
        self.spec.scheme.require(Ability::Break)?;
        let unsupported = self.unsupported(Ability::Break);
        self.run(Lock::change_deadline(), |strategy, cx| match strategy.abilities().as_break() {
            Some(breaking) => breaking.break_lock(cx),
            None => Err(unsupported),
        })
    }

    /// The held record, if this process (not a parent before `fork()`)
    /// took it: [`Error::NotHeld`], or [`Error::Forked`] in a child of the
    /// process that did.
    pub fn held_here(&self) -> Result<Record, Error> {
        let held = self.held.ok_or(Error::NotHeld)?;
        if held.owner.process.pid != crate::process::pid() || !self.in_its_own_process() {
            return Err(Error::Forked);
        }
        Ok(held)
    }

    /// Whether the caller is the process that made or last used this
    /// handle, not a child of `fork()`.
    fn in_its_own_process(&self) -> bool {
        self.pid == crate::process::pid() && self.incarnation == crate::process::incarnation()
    }

    /// After `fork()` the child is a new owner: new pid (or namespace), new
    /// start time.
    fn refresh_identity(&mut self) -> Result<(), Error> {
        if self.in_its_own_process() {
            return Ok(());
        }
        if self.held.is_some() {
            return Err(Error::Forked);
        }
        self.me = Owner::current()?;
        self.pid = self.me.process.pid;
        self.incarnation = crate::process::incarnation();
        Ok(())
    }

    /// The strategy itself, for the tests of how `acquire` uses a
    /// strategy's abilities.
    #[cfg(test)]
    pub(crate) fn strategy_for_tests(&mut self) -> &mut AnyStrategy {
        &mut self.strategy
    }

    /// The time now, by both clocks of this lock's owner.
    pub fn now(&self) -> Moment {
        self.me.now()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.adopted && self.held_here().is_ok() {
            let _ = self.release(Duration::ZERO);
        }
    }
}

/// How long one attempt may wait for the lock itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    /// Not at all: `try_acquire`.
    Once,
    /// Until the attempt's deadline, if the strategy can
    /// ([`Ability::TimedAcquire`]); otherwise not at all.
    UntilDeadline,
}

/// The wake source for a strategy whose attempts wait for the lock
/// themselves: the next attempt follows at once.
struct AttemptsWait;

impl WakeSource for AttemptsWait {
    fn wait(&mut self, _: Duration) -> Wake {
        Wake::Woken
    }
}

/// The wake source of a handle's strategy ([`Ability::OwnWake`]), reached
/// through the handle that the waiting loop also makes its attempts with.
struct OwnWakeOf<'c, 'l>(&'c RefCell<&'l mut Lock>);

impl WakeSource for OwnWakeOf<'_, '_> {
    fn arm(&mut self) -> Result<(), Error> {
        let Ok(mut lock) = self.0.try_borrow_mut() else { return Ok(()) };
        match lock.strategy.abilities().as_own_wake() {
            // The waiting loop arms it before each attempt of this handle.
            Some(own) => own.arm_for_attempt(),
            None => Ok(()),
        }
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        if let Ok(mut lock) = self.0.try_borrow_mut() {
            if let Some(own) = lock.strategy.abilities().as_own_wake() {
                return own.wake_source().wait(timeout);
            }
        }
        Sleep.wait(timeout)
    }
}

/// An error of a lock with the path of the file it is about: what
/// [`Lock::describe`] returns.
#[derive(Debug)]
pub struct Described<'a> {
    lock: &'a Lock,
    error: &'a Error,
    owner_name: Option<&'a str>,
}

impl<'a> Described<'a> {
    /// Names the owner of the file the error is about by this user name.
    pub fn with_owner_name(self, owner_name: Option<&'a str>) -> Described<'a> {
        Described { owner_name, ..self }
    }
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock = match self.lock.path() {
            Ok(lock) => lock,
            Err(_) => {
                write_target(f, self.lock.spec())?;
                return write!(f, ": {}", self.error);
            }
        };
        // A guard held too long is about the guard (the lease or queue file
        // itself, for the strategies that keep none): the file to look for
        // its holder on.
        let guard_held =
            matches!(self.error, Error::Busy(Contention::GuardHeld) | Error::Timeout(Contention::GuardHeld));
        let file = if guard_held { Some(FileRole::Guard) } else { self.error.file() };
        let path: &[u8] = match file {
            Some(FileRole::Guard) => self.lock.guard_path().unwrap_or(lock).as_bytes(),
            Some(FileRole::Directory) | Some(FileRole::Helper) | Some(FileRole::Way) => lock.parent(),
            Some(FileRole::Lock) | None => lock.as_bytes(),
        };
        // A path is bytes: those that are no printable text show as escapes.
        write_escaped(f, path)?;
        if let Some(entry) = self.error.entry() {
            // An entry of the lock's directory, or a name on the way to it.
            f.write_str(if file == Some(FileRole::Way) { " (by way of " } else { "/" })?;
            write_escaped(f, entry.as_bytes())?;
            if entry.is_cut() {
                f.write_str("...")?;
            }
            if file == Some(FileRole::Way) {
                f.write_str(")")?;
            }
        }
        match self.error {
            Error::File(e) => write!(f, ": {}", e.text(self.owner_name)),
            other => write!(f, ": {other}"),
        }
    }
}

/// What [`Lock::name`] returns.
#[derive(Debug)]
pub struct LockName<'a>(&'a Lock);

impl fmt::Display for LockName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.path() {
            Ok(path) => write_escaped(f, path.as_bytes()),
            Err(_) => write_target(f, self.0.spec()),
        }
    }
}

/// A target that is no path, for a message: scheme, server and key,
/// never the password.
fn write_target(f: &mut fmt::Formatter<'_>, spec: &Spec) -> fmt::Result {
    use crate::endpoint::Host;
    let Target::Url(endpoint) = spec.target() else { return Ok(()) };
    write!(f, "{}://", spec.scheme.name())?;
    match &endpoint.host {
        Host::Net { name, port } => {
            write_escaped(f, name.as_bytes())?;
            if let Some(port) = port {
                write!(f, ":{port}")?;
            }
        }
        Host::Socket(path) => write_escaped(f, path.as_bytes())?,
    }
    if let Some(db) = endpoint.db {
        write!(f, "/{db}")?;
    }
    f.write_str("/")?;
    write_escaped(f, endpoint.key.as_bytes())
}

/// Bytes as text, with those that are no printable ASCII as escapes.
fn write_escaped(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    match core::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => f.write_str(text),
        _ => bytes.iter().try_for_each(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                write!(f, "{}", b as char)
            } else {
                write!(f, "\\x{b:02x}")
            }
        }),
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
    /// The acquisition's fencing token ([`Acquired::fence`]).
    pub fn fence(&self) -> u64 {
        self.acquired.fence
    }

    /// When others may break the lock, as acquired; `None` without a TTL.
    pub fn expires(&self) -> Option<WallTime> {
        self.acquired.expires
    }

    /// [`Lock::prolong`] of the held lock.
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

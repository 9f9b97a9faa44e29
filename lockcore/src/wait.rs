//! Waiting for a busy lock: one loop that arms a wake source, makes an
//! attempt, and then waits for the source or a jittered backoff delay,
//! whichever comes first, until a deadline.
//!
//! [`wait_for`] is every wait of the crate: `acquire`'s wait for the lock,
//! with [`Backoff::new`]'s range and the caller's [`WakeSource`], and each
//! operation's wait for the file that orders the lock's changes (a guard,
//! a lease or a queue file: `GuardFile::lock_file`), with a shorter range
//! and [`Sleep`]. Each round arms the source, makes one attempt and, while
//! the lock is busy, asks the source to block until something has happened
//! since it was armed, or the delay passes. The source is armed *before*
//! the attempt, so that a release that comes between the attempt and the
//! wait is not lost: the wait then returns at once ([`Wake::Woken`]). A
//! wake-up is followed by an attempt at once and leaves the backoff where
//! it was; a timeout ([`Wake::TimedOut`]) doubles it, up to its cap.
//! [`Sleep`] knows of no events and only sleeps; [`Inotify`] wakes the
//! waiter when the lock's name changes in its directory.
//!
//! The wait budget is a deadline on the monotonic clock, not a retry count,
//! so slow attempts do not stretch it and clock steps do not shorten it. A
//! source that wakes the waiter again and again costs one attempt per
//! wake-up, and the deadline ends that wait like any other. Warnings come
//! as the deadline does, from the loop's own clock, whatever the source says.
//!

use core::time::Duration;

use crate::clock::MonoTime;
use crate::error::{Contention, Error, FileError, FileRole};
use crate::kept::KeptFd;
use crate::sys::{self, CPath, Errno};

/// How a [`WakeSource::wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Something that may have freed the lock happened since the source
    /// was armed (perhaps before `wait` was called): try again now. It may
    /// also turn out to be nothing (another waiter got in first, or the
    /// change was not a release); the attempt tells.
    Woken,
    /// The timeout passed with no such news. A source that knows of no
    /// events ([`Sleep`]) always answers this.
    TimedOut,
}

/// Tells a waiter when the lock may have changed, so that it need not
/// only poll.
///
/// The waiting loop ([`wait_for`]) calls [`arm`](Self::arm) before every
/// attempt and, when the attempt finds the lock busy,
/// [`wait`](Self::wait) with the time until the next one. `wait` must
/// answer [`Wake::Woken`] for whatever may have freed the lock since the
/// last `arm`, also for what happened before `wait` itself was called:
/// otherwise a release between the attempt and the wait is lost, and the
/// waiter sleeps out its delay while the lock is free.
///
/// A source sees only what it watches. A holder that dies, a record that
/// expires, a cooldown that ends change no file, and a change made on
/// another host reaches no local watch: the waiter's timeouts are there
/// for those, so a source never replaces the backoff. Every wake-up costs
/// the waiter one attempt; a source should keep those that are no release
/// few.
pub trait WakeSource {
    /// Starts watching, before an attempt: what happens from here on ends
    /// the next [`wait`](Self::wait) at once. What happened before may be
    /// forgotten, since the attempt that follows sees it. An error ends the
    /// whole wait with that error; a source that would rather fall back to
    /// timeouts returns `Ok` and answers [`Wake::TimedOut`]. The default
    /// does nothing, for a source that knows of no events.
    fn arm(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Blocks until something that may have freed the lock has happened
    /// since the last [`arm`](Self::arm) ([`Wake::Woken`], at once if it
    /// already has), or until `timeout` passes ([`Wake::TimedOut`]). It
    /// must not block much longer than `timeout`: the waiter's deadline
    /// counts on it.
    fn wait(&mut self, timeout: Duration) -> Wake;
}

/// The wake source that knows of no events: it sleeps for the whole
/// timeout and answers [`Wake::TimedOut`]. The fallback wherever no event
/// says when a lock is let go (an open-file-description lock, a file system
/// shared with other hosts), and the only place lockcore sleeps.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sleep;

impl WakeSource for Sleep {
    fn wait(&mut self, timeout: Duration) -> Wake {
        sys::sleep(timeout);
        Wake::TimedOut
    }
}

/// Another source, given up with [`Error::Cancelled`] as soon as its
/// caller says so: `cancelled` is asked at every [`arm`](WakeSource::arm),
/// that is before every attempt, at least once every safety slice of a
/// wait in line, and after every signal.
pub struct Cancellable<'a> {
    inner: &'a mut dyn WakeSource,
    cancelled: &'a mut dyn FnMut() -> bool,
}

impl<'a> Cancellable<'a> {
    /// `inner`, asking `cancelled` before each of its arms.
    pub fn new(inner: &'a mut dyn WakeSource, cancelled: &'a mut dyn FnMut() -> bool) -> Cancellable<'a> {
        Cancellable { inner, cancelled }
    }
}

impl core::fmt::Debug for Cancellable<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Cancellable")
    }
}

impl WakeSource for Cancellable<'_> {
    fn arm(&mut self) -> Result<(), Error> {
        if (self.cancelled)() {
            return Err(Error::Cancelled);
        }
        self.inner.arm()
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        self.inner.wait(timeout)
    }
}

/// Wakes a waiter when the lock's name changes in its directory, by
/// `inotify(7)`: removed or renamed away (the releases of `lockfile`,
/// `mkdir` and `symlink`, and of the peers that share their formats:
/// LockFile::Simple, dotlockfile, a shell's `rmdir`), rewritten in place
/// (a `lease` or `toplock` file, `flock`'s state file), or given other
/// attributes (an operator's `touch` or `chmod`). One inotify instance,
/// with one watch on the directory; events for other names there are read
/// and let pass. No allocation: the names live in fixed buffers.
///
/// Which path to give it: the lock's own ([`Lock::path`]) for every scheme
/// but `flock`, whose kernel lock changes no file when it is let go; for
/// `flock`, its state file ([`Lock::guard_path`]), which its holder
/// rewrites just before, so that a waiter may now and then wake a moment
/// too early and then wait out its delay. A `toplock` waiter's own first
/// attempt, which joins the queue, wakes it once.
///
/// It sees what happens on this host only (on NFS, nothing that another
/// host does), and nothing that frees a lock without touching it: a holder
/// that dies, a record that expires, a cooldown that ends. The waiter's
/// timeouts find those. A directory that goes away wakes the waiter; its
/// watch is added again at the next [`arm`](WakeSource::arm), and until
/// that succeeds the source only sleeps.
///
/// [`Lock::path`]: crate::Lock::path
/// [`Lock::guard_path`]: crate::Lock::guard_path
pub struct Inotify {
    inotify: KeptFd,
    dir: CPath,
    name: [u8; NAME_CAPACITY],
    name_len: usize,
    /// The watch on `dir`, while the kernel keeps it.
    watch: Option<i32>,
}

impl core::fmt::Debug for Inotify {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Inotify")
            .field("dir", &self.dir)
            .field("name", &core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("(not UTF-8)"))
            .field("watch", &self.watch)
            .finish()
    }
}

/// The longest name in a directory (Linux `NAME_MAX`).
const NAME_CAPACITY: usize = 255;

/// What may have freed a lock at a name, seen from its directory.
const RELEASES: u32 = libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_ATTRIB;

impl Inotify {
    /// Watches the directory of the lock at `path` for changes to its
    /// name. Fails if the process has no inotify instance left (`EMFILE`:
    /// [`Error::Os`]) or the directory cannot be watched (an error about
    /// it); a caller may then wait with [`Sleep`].
    pub fn new(path: &CPath) -> Result<Inotify, Error> {
        let name = path.file_name();
        if name.is_empty() {
            return Err(FileError::from_errno(FileRole::Lock, path, Errno::EINVAL));
        }
        if name.len() > NAME_CAPACITY {
            return Err(FileError::from_errno(FileRole::Lock, path, Errno::ENAMETOOLONG));
        }
        let dir = CPath::from_parts(&[path.parent()])
            .map_err(|_| FileError::from_errno(FileRole::Directory, path, Errno::ENAMETOOLONG))?;
        let mut source = Inotify {
            inotify: KeptFd::unlisted(sys::inotify_init().map_err(Error::Os)?),
            dir,
            name: [0; NAME_CAPACITY],
            name_len: name.len(),
            watch: None,
        };
        source.name[..name.len()].copy_from_slice(name);
        let watch = source.add_watch().map_err(|e| FileError::from_errno(FileRole::Directory, &source.dir, e))?;
        source.watch = Some(watch);
        Ok(source)
    }

    fn add_watch(&self) -> Result<i32, Errno> {
        // Only a directory; and no events of files already unlinked (a
        // helper file still open, a lock removed while a reader had it).
        // The directory itself moved or removed: the path names another
        // one now, or none, and the watch must follow the path.
        let mask = RELEASES | libc::IN_MOVE_SELF | libc::IN_DELETE_SELF | libc::IN_ONLYDIR | libc::IN_EXCL_UNLINK;
        sys::inotify_add_watch(self.inotify.fd(), &self.dir, mask)
    }

    /// Reads every queued event; `true` if one may have freed the lock.
    /// Notes a watch the kernel dropped (its directory is gone).
    fn read_events(&mut self) -> Result<bool, Errno> {
        let (watch, name) = (self.watch, &self.name[..self.name_len]);
        let (mut woken, mut dropped, mut moved) = (false, false, false);
        sys::read_inotify_events(self.inotify.fd(), |event| {
            let ours = Some(event.wd) == watch;
            moved |= ours && event.mask & libc::IN_MOVE_SELF != 0;
            let gone = ours && event.mask & (libc::IN_IGNORED | libc::IN_MOVE_SELF | libc::IN_DELETE_SELF) != 0;
            dropped |= gone;
            // Events lost to an overflow may have held the release; a lock
            // whose directory is gone is to be looked at again too.
            woken |= event.mask & libc::IN_Q_OVERFLOW != 0
                || gone
                || (ours && event.mask & RELEASES != 0 && event.name == name);
        })?;
        if let (true, Some(old)) = (moved, self.watch) {
            // A moved directory keeps its watch: end it, or its events
            // (for names no longer ours) would go on costing reads.
            let _ = sys::inotify_rm_watch(self.inotify.fd(), old);
        }
        if dropped {
            self.watch = None;
        }
        Ok(woken)
    }
}

impl WakeSource for Inotify {
    /// Forgets the events so far, which the attempt that follows sees the
    /// effect of, and watches the directory again if its watch was dropped.
    fn arm(&mut self) -> Result<(), Error> {
        self.read_events().map_err(Error::Os)?;
        if self.watch.is_none() {
            self.watch = self.add_watch().ok();
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        if self.watch.is_none() {
            return Sleep.wait(timeout);
        }
        let end = MonoTime::now().saturating_add(timeout);
        loop {
            let left = end.remaining_from(MonoTime::now());
            let news = match sys::poll_readable(self.inotify.fd(), left) {
                Ok(true) => self.read_events(),
                Ok(false) => Ok(false),
                Err(e) => Err(e),
            };
            match news {
                Ok(true) => return Wake::Woken,
                // Other names, or a signal: wait for what is left.
                Ok(false) if !left.is_zero() && MonoTime::now() < end => {}
                Ok(false) => return Wake::TimedOut,
                // The instance failed (it cannot, short of a kernel bug):
                // sleep rather than spin.
                Err(_) => return Sleep.wait(end.remaining_from(MonoTime::now())),
            }
        }
    }
}

/// An [`Inotify`] made only once a wait needs one: an acquisition that finds
/// the lock free, or its turn come, never pays for an inotify instance, and
/// a process holding many handles keeps few of them (there are 128 per user
/// by default). Until it is made, and where it cannot be, the waiter sleeps.
#[derive(Debug)]
pub struct WatchWhenBusy {
    path: CPath,
    watch: Option<Inotify>,
    unavailable: bool,
}

impl WatchWhenBusy {
    /// Will watch the name at `path` (see [`Inotify`] for which path).
    pub fn new(path: &CPath) -> WatchWhenBusy {
        WatchWhenBusy { path: path.clone(), watch: None, unavailable: false }
    }
}

impl WakeSource for WatchWhenBusy {
    fn arm(&mut self) -> Result<(), Error> {
        match self.watch.as_mut() {
            Some(watch) => watch.arm(),
            None => Ok(()),
        }
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        if let Some(watch) = self.watch.as_mut() {
            return watch.wait(timeout);
        }
        if !self.unavailable {
            match Inotify::new(&self.path) {
                // Watching from now on; what happened since the attempt the
                // watch did not see: try again at once, armed this time.
                Ok(watch) => {
                    self.watch = Some(watch);
                    return Wake::Woken;
                }
                Err(_) => self.unavailable = true,
            }
        }
        Sleep.wait(timeout)
    }
}

/// Exponential backoff with "equal jitter": each delay is drawn from
/// `[c/2, c)`, where the ceiling `c` starts at the first delay of its range
/// and doubles at every [`grow`](Self::grow), up to the longest. The jitter
/// keeps waiters that started together from retrying in lock step.
#[derive(Clone, Debug)]
pub struct Backoff {
    ceiling: Duration,
    longest: Duration,
    rng: u64,
}

impl Backoff {
    /// The first ceiling of a wait for a lock (`acquire`).
    pub const FIRST: Duration = Duration::from_micros(100);
    /// The last ceiling of a wait for a lock: how often it still polls for
    /// what no wake source sees.
    pub const LONGEST: Duration = Duration::from_millis(10);

    /// The backoff of a wait for a lock, from [`FIRST`](Self::FIRST) up to
    /// [`LONGEST`](Self::LONGEST). `seed` should differ between waiters;
    /// any value works.
    pub fn new(seed: u64) -> Backoff {
        Backoff::with_range(Self::FIRST, Self::LONGEST, seed)
    }

    /// A backoff whose ceiling starts at `first` and doubles up to
    /// `longest` (at least `first`, and at least a nanosecond). `seed` as
    /// for [`new`](Self::new).
    pub fn with_range(first: Duration, longest: Duration, seed: u64) -> Backoff {
        let first = first.max(Duration::from_nanos(1));
        Backoff { ceiling: first, longest: longest.max(first), rng: seed | 1 }
    }

    /// The next delay, drawn from below the current ceiling, which stays.
    pub fn delay(&mut self) -> Duration {
        let half = self.ceiling / 2;
        let span = u64::try_from((self.ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(self.random() % span.max(1))
    }

    /// Doubles the ceiling, up to the longest: for a wait that timed out.
    pub fn grow(&mut self) {
        self.ceiling = self.ceiling.saturating_mul(2).min(self.longest);
    }

    /// xorshift64*: plenty for jitter, and no state beyond one word.
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A waiting warning's callback: the time waited so far, and what the
/// last attempt or look at the queue found in the way.
pub type Notify<'a> = dyn FnMut(Duration, &Contention) + 'a;

/// LockFile::Simple's warnings: the first after `first` of waiting, then one
/// every `every`, each told how long the caller has waited so far and what
/// stands in its way (the holder, a cooldown, the waiters before it).
pub struct Warnings<'a> {
    /// How long the caller waits before the first warning.
    pub first: Duration,
    /// How long after one warning the next is due.
    pub every: Duration,
    /// Called at each warning with the time waited so far and what the
    /// last attempt or look at the queue found.
    pub notify: &'a mut Notify<'a>,
}

impl Warnings<'_> {
    /// When the first warning of a wait that began at `start` is due.
    pub(crate) fn first_due(&self, start: MonoTime) -> MonoTime {
        start.saturating_add(self.first)
    }

    /// Gives the warning due at `due`, if `now` is past it, and returns
    /// when the next one is due.
    pub(crate) fn give_if_due(&mut self, due: MonoTime, now: MonoTime, start: MonoTime, why: &Contention) -> MonoTime {
        if now < due {
            return due;
        }
        (self.notify)(now.since(start), why);
        now.saturating_add(self.every)
    }
}

impl core::fmt::Debug for Warnings<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Warnings").field("first", &self.first).field("every", &self.every).finish()
    }
}

/// Retries `attempt` until it succeeds, fails with something other than
/// [`Error::Busy`], or `deadline` passes ([`Error::Timeout`], with what
/// stood in the way at the last attempt). `None` waits for as long as it
/// takes. Each round arms `wake`, makes the attempt and, if it was busy,
/// waits on `wake` for `backoff`'s next delay (shortened to the deadline
/// and to the next warning); an error from arming ends the wait with it.
/// An attempt should itself end by `deadline`, so that the whole wait does.
pub fn wait_for<T>(
    deadline: Option<MonoTime>,
    wake: &mut dyn WakeSource,
    mut warnings: Option<Warnings<'_>>,
    mut backoff: Backoff,
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let start = MonoTime::now();
    let mut next_warning = warnings.as_ref().map(|w| w.first_due(start));
    loop {
        wake.arm()?;
        let contention = match attempt() {
            Err(Error::Busy(why)) => why,
            other => return other,
        };
        let now = MonoTime::now();
        if let (Some(w), Some(due)) = (warnings.as_mut(), next_warning) {
            next_warning = Some(w.give_if_due(due, now, start, &contention));
        }
        let mut delay = backoff.delay();
        if let Some(deadline) = deadline {
            if now >= deadline {
                return Err(Error::Timeout(contention));
            }
            delay = delay.min(deadline.remaining_from(now));
        }
        if let Some(at) = next_warning {
            // Wake for the warning too, so it is not late by a whole backoff.
            delay = delay.min(at.remaining_from(now).max(Duration::from_micros(1)));
        }
        match wake.wait(delay) {
            // Nothing came in all that time: poll less often.
            Wake::TimedOut => backoff.grow(),
            // A wake-up leaves the backoff as it was, neither grown nor
            // reset. Not grown: it is news that the lock changed, not that
            // it stays held, and the next timeout is the fallback for what
            // the source cannot see (a holder that died or expired, a change
            // made on another host), which should come as often as before.
            // Not reset: a storm of wake-ups that are no hand-offs (another
            // waiter winning each time, a holder rewriting its lease file)
            // would bring that fallback back to its fastest polling after
            // every one of them. Each wake-up costs one attempt, and the
            // deadline above ends a storm like any other wait.
            Wake::Woken => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Contention, ErrorKind};
    use std::io::{ErrorKind as IoKind, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::vec::Vec;

    const BUSY: Error = Error::Busy(Contention::GuardHeld);

    /// A wake source backed by a socket pair, as an event source is backed
    /// by its descriptor: [`release`](Channel::release), the test's holder
    /// letting go, sends a byte; `arm` drains what was sent so far; `wait`
    /// reads with the timeout.
    struct Channel {
        rx: UnixStream,
        tx: UnixStream,
    }

    impl Channel {
        fn new() -> Channel {
            let (tx, rx) = UnixStream::pair().unwrap();
            Channel { rx, tx }
        }

        fn release(&self) {
            (&self.tx).write_all(b"r").unwrap();
        }

        /// Reads one byte, waiting at most `timeout` (none: not at all).
        fn read_one(&self, timeout: Option<Duration>) -> Option<u8> {
            self.rx.set_nonblocking(timeout.is_none()).unwrap();
            self.rx.set_read_timeout(timeout).unwrap();
            let mut byte = [0u8; 1];
            match (&self.rx).read(&mut byte) {
                Ok(1) => Some(byte[0]),
                Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => None,
                other => panic!("read from the socket pair: {other:?}"),
            }
        }
    }

    impl WakeSource for Channel {
        fn arm(&mut self) -> Result<(), Error> {
            while self.read_one(None).is_some() {}
            Ok(())
        }

        fn wait(&mut self, timeout: Duration) -> Wake {
            // std refuses a zero read timeout: a zero wait only looks.
            let timeout = Some(timeout).filter(|t| !t.is_zero());
            match self.read_one(timeout) {
                Some(_) => Wake::Woken,
                None => Wake::TimedOut,
            }
        }
    }

    /// Answers every wait at once, as `answer` says for the n-th, and
    /// keeps the timeouts it was given.
    struct Scripted {
        answer: fn(usize) -> Wake,
        timeouts: Vec<Duration>,
    }

    impl WakeSource for Scripted {
        fn wait(&mut self, timeout: Duration) -> Wake {
            self.timeouts.push(timeout);
            (self.answer)(self.timeouts.len() - 1)
        }
    }

    /// Runs `attempts` busy attempts, then a successful one, with no
    /// deadline; returns the timeouts the source was given.
    fn timeouts_of(answer: fn(usize) -> Wake, attempts: usize) -> Vec<Duration> {
        let mut wake = Scripted { answer, timeouts: Vec::new() };
        let mut left = attempts;
        let r = wait_for(None, &mut wake, None, Backoff::new(11), || match left {
            0 => Ok(()),
            _ => {
                left -= 1;
                Err(BUSY)
            }
        });
        assert_eq!(r, Ok(()));
        assert_eq!(wake.timeouts.len(), attempts, "one wait after each busy attempt");
        wake.timeouts
    }

    /// Whether each delay lies in `[c/2, c)` of its ceiling `c`, the
    /// ceilings being `ceilings(i)`.
    fn drawn_below(delays: &[Duration], ceiling: impl Fn(usize) -> Duration) -> bool {
        delays.iter().enumerate().all(|(i, &d)| d >= ceiling(i) / 2 && d < ceiling(i))
    }

    fn doubled(times: usize) -> Duration {
        (Backoff::FIRST * (1u32 << times.min(20))).min(Backoff::LONGEST)
    }

    #[test]
    fn backoff_grows_to_its_cap_and_stays_jittered() {
        let mut b = Backoff::new(42);
        let mut ceiling = Backoff::FIRST;
        for _ in 0..20 {
            let d = b.delay();
            assert!(d >= ceiling / 2 && d < ceiling, "{d:?} below {ceiling:?}");
            b.grow();
            ceiling = (ceiling * 2).min(Backoff::LONGEST);
        }
        assert_eq!(ceiling, Backoff::LONGEST);
        let a: [Duration; 8] = core::array::from_fn(|_| b.delay());
        assert!(a.windows(2).any(|w| w[0] != w[1]), "jitter must vary delays");
        assert!(a.iter().all(|&d| d >= Backoff::LONGEST / 2 && d < Backoff::LONGEST), "{a:?}");
    }

    #[test]
    fn a_backoff_keeps_to_the_range_it_was_given() {
        let (first, longest) = (Duration::from_micros(20), Duration::from_millis(2));
        let mut b = Backoff::with_range(first, longest, 5);
        let first_delay = b.delay();
        assert!(first_delay >= first / 2 && first_delay < first, "{first_delay:?}");
        for _ in 0..20 {
            b.grow();
        }
        let d = b.delay();
        assert!(d >= longest / 2 && d < longest, "{d:?}");
        // A range given upside down, or empty, still waits and still ends.
        let mut b = Backoff::with_range(Duration::from_millis(3), Duration::from_millis(1), 5);
        assert!(b.delay() < Duration::from_millis(3));
        assert_eq!(Backoff::with_range(Duration::ZERO, Duration::ZERO, 5).delay(), Duration::ZERO);
    }

    /// A range up to the longest duration there is: the delays stay within
    /// it and growing stops there, with no overflow.
    #[test]
    fn a_backoff_of_the_longest_range_neither_overflows_nor_leaves_it() {
        let mut b = Backoff::with_range(Duration::from_secs(1), Duration::MAX, 7);
        for _ in 0..80 {
            b.grow();
        }
        let d = b.delay();
        assert!(d >= Duration::MAX / 2 && d < Duration::MAX, "{d:?}");
        let mut b = Backoff::with_range(Duration::MAX, Duration::MAX, 7);
        let d = b.delay();
        assert!(d >= Duration::MAX / 2 && d < Duration::MAX, "{d:?}");
    }

    /// The source is armed before the attempt: a release right after the
    /// attempt, before the wait, ends the wait at once.
    #[test]
    fn a_release_between_arming_and_waiting_is_not_missed() {
        let mut wake = Channel::new();
        wake.arm().unwrap();
        wake.release();
        // Missed, this would sleep out the whole minute and time out.
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken);
        // A release before arming is forgotten: the attempt after the
        // arming sees the lock it freed.
        wake.release();
        wake.arm().unwrap();
        assert_eq!(wake.wait(Duration::from_millis(1)), Wake::TimedOut);
    }

    /// A cancellable source asks its caller at every arm, and the loop
    /// stops at the first arm after the caller says so, before an attempt.
    #[test]
    fn a_cancelled_wait_ends_at_the_next_arm_without_an_attempt() {
        let mut asked = 0;
        let mut cancelled = || {
            asked += 1;
            asked >= 3
        };
        let mut inner = Sleep;
        let mut wake = Cancellable::new(&mut inner, &mut cancelled);
        let mut attempts = 0;
        let r: Result<(), Error> = wait_for(
            None,
            &mut wake,
            None,
            Backoff::with_range(Duration::from_micros(1), Duration::from_micros(2), 5),
            || {
                attempts += 1;
                Err(BUSY)
            },
        );
        assert_eq!(r, Err(Error::Cancelled));
        assert_eq!((asked, attempts), (3, 2), "two attempts, then cancelled before the third");
    }

    /// The same through the loop: the holder lets go just after an attempt
    /// found the lock busy; the wait that follows is woken, not timed out,
    /// and the next attempt gets the lock.
    #[test]
    fn the_loop_arms_before_each_attempt() {
        let mut wake = Channel::new();
        let holder = wake.tx.try_clone().unwrap();
        let mut attempts = 0;
        let mut answers = Vec::new();
        struct Noting<'a> {
            inner: &'a mut Channel,
            answers: &'a mut Vec<Wake>,
        }
        impl WakeSource for Noting<'_> {
            fn arm(&mut self) -> Result<(), Error> {
                self.inner.arm()
            }
            fn wait(&mut self, timeout: Duration) -> Wake {
                let answer = self.inner.wait(timeout);
                self.answers.push(answer);
                answer
            }
        }
        let mut noting = Noting { inner: &mut wake, answers: &mut answers };
        let r = wait_for(None, &mut noting, None, Backoff::new(3), || {
            attempts += 1;
            match attempts {
                1 => {
                    // Released after it was judged busy, before the wait.
                    (&holder).write_all(b"r").unwrap();
                    Err(BUSY)
                }
                _ => Ok(attempts),
            }
        });
        assert_eq!(r, Ok(2));
        assert_eq!(answers, [Wake::Woken], "the release was seen, not slept through");
    }

    #[test]
    fn wake_ups_do_not_grow_the_backoff() {
        let delays = timeouts_of(|_| Wake::Woken, 30);
        assert!(drawn_below(&delays, |_| Backoff::FIRST), "{delays:?}");
    }

    #[test]
    fn timeouts_grow_the_backoff_to_its_cap() {
        let delays = timeouts_of(|_| Wake::TimedOut, 30);
        assert!(drawn_below(&delays, doubled), "{delays:?}");
        assert!(delays[29] >= Backoff::LONGEST / 2, "capped at LONGEST: {delays:?}");
    }

    /// A wake-up keeps the ceiling the timeouts before it earned; it does
    /// not start it again from the first delay either.
    #[test]
    fn a_wake_up_keeps_the_backoff_where_it_was() {
        // Three timeouts, three wake-ups, then timeouts again.
        let delays = timeouts_of(|i| if (3..6).contains(&i) { Wake::Woken } else { Wake::TimedOut }, 8);
        let grown_by = [0, 1, 2, 3, 3, 3, 3, 4];
        assert!(drawn_below(&delays, |i| doubled(grown_by[i])), "{delays:?}");
    }

    /// A source that wakes the waiter over and over (none of it a release)
    /// neither stretches the deadline nor delays the warnings.
    #[test]
    fn a_storm_of_wake_ups_ends_by_the_deadline() {
        struct Storm {
            waits: u64,
            longest: Duration,
        }
        impl WakeSource for Storm {
            fn wait(&mut self, timeout: Duration) -> Wake {
                self.waits += 1;
                self.longest = self.longest.max(timeout);
                Wake::Woken
            }
        }
        let mut storm = Storm { waits: 0, longest: Duration::ZERO };
        let mut warned = Vec::new();
        let mut notify = |waited: Duration, _: &Contention| warned.push(waited);
        let warnings =
            Warnings { first: Duration::from_millis(10), every: Duration::from_millis(15), notify: &mut notify };
        let start = MonoTime::now();
        let deadline = start.saturating_add(Duration::from_millis(50));
        let r: Result<(), Error> = wait_for(Some(deadline), &mut storm, Some(warnings), Backoff::new(9), || Err(BUSY));
        assert_eq!(r, Err(Error::Timeout(Contention::GuardHeld)));
        assert!(MonoTime::now() >= deadline, "it waited out its budget");
        assert!(storm.waits > 1);
        assert!(storm.longest < Backoff::FIRST, "the storm never grew the backoff: {:?}", storm.longest);
        // Due at 10, 25 and 40 ms: never early, never closer than `every`.
        assert!((1..=3).contains(&warned.len()), "{warned:?}");
        assert!(warned[0] >= Duration::from_millis(10));
        assert!(warned.windows(2).all(|w| w[1] >= w[0] + Duration::from_millis(15)), "{warned:?}");
    }

    #[test]
    fn an_error_from_arming_ends_the_wait() {
        struct Broken;
        impl WakeSource for Broken {
            fn arm(&mut self) -> Result<(), Error> {
                Err(Error::Os(crate::sys::Errno::EINVAL))
            }
            fn wait(&mut self, _: Duration) -> Wake {
                unreachable!("never armed, never waited on")
            }
        }
        let mut attempts = 0;
        let r: Result<(), Error> = wait_for(None, &mut Broken, None, Backoff::new(1), || {
            attempts += 1;
            Err(BUSY)
        });
        assert_eq!(r, Err(Error::Os(crate::sys::Errno::EINVAL)));
        assert_eq!(attempts, 0, "armed before the first attempt");
    }

    /// A directory of its own for one test, and the path of a lock in it.
    fn lock_in_test_dir(name: &str) -> (std::path::PathBuf, CPath) {
        let dir = std::env::temp_dir().join(std::format!("lockcore-wait-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lock = CPath::from_parts(&[dir.join("lock").to_str().unwrap().as_bytes()]).unwrap();
        (dir, lock)
    }

    /// The inotify source, armed before the "attempt": the lock file
    /// removed between arming and waiting ends the wait at once.
    #[test]
    fn inotify_sees_a_release_between_arming_and_waiting() {
        let (dir, lock) = lock_in_test_dir("release");
        std::fs::write(dir.join("lock"), "held").unwrap();
        let mut wake = Inotify::new(&lock).unwrap();
        wake.arm().unwrap();
        std::fs::remove_file(dir.join("lock")).unwrap();
        // Missed, this would wait out the whole minute and time out.
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken);

        // Made and removed again before arming: forgotten by the arming.
        std::fs::write(dir.join("lock"), "held").unwrap();
        std::fs::remove_file(dir.join("lock")).unwrap();
        wake.arm().unwrap();
        assert_eq!(wake.wait(Duration::from_millis(5)), Wake::TimedOut);

        // Rewritten in place, as a lease or a queue file is.
        std::fs::write(dir.join("lock"), "lease 2 held").unwrap();
        wake.arm().unwrap();
        std::fs::OpenOptions::new().write(true).open(dir.join("lock")).unwrap().write_all(b"lease 2 free").unwrap();
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Changes to other names in the lock's directory (helper files, the
    /// guard, other locks) do not wake the waiter.
    #[test]
    fn inotify_lets_other_names_pass() {
        let (dir, lock) = lock_in_test_dir("others");
        std::fs::write(dir.join("lock"), "held").unwrap();
        let mut wake = Inotify::new(&lock).unwrap();
        wake.arm().unwrap();
        std::fs::write(dir.join("lock.guard"), "lockguard 2 1").unwrap();
        std::fs::write(dir.join("lock.0123456789abcdef"), "helper").unwrap();
        std::fs::remove_file(dir.join("lock.0123456789abcdef")).unwrap();
        std::fs::write(dir.join("lockx"), "another lock").unwrap();
        std::fs::remove_file(dir.join("lockx")).unwrap();
        assert_eq!(wake.wait(Duration::from_millis(5)), Wake::TimedOut);
        assert_eq!(wake.wait(Duration::ZERO), Wake::TimedOut, "a zero wait only looks");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A directory that goes away wakes the waiter (its lock is gone too);
    /// after that the source sleeps until the directory is back and armed.
    #[test]
    fn inotify_wakes_when_the_directory_goes_and_watches_it_again() {
        let (dir, lock) = lock_in_test_dir("gone");
        let mut wake = Inotify::new(&lock).unwrap();
        wake.arm().unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken);
        wake.arm().unwrap();
        assert_eq!(wake.wait(Duration::from_millis(1)), Wake::TimedOut, "nothing to watch: it sleeps");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("lock"), "held").unwrap();
        wake.arm().unwrap();
        std::fs::remove_file(dir.join("lock")).unwrap();
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken, "watched again");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A directory renamed away keeps its inode, and a watch on it would
    /// follow it: the waiter wakes, and watches the path, which now names
    /// a new directory, not the moved one.
    #[test]
    fn inotify_follows_the_path_when_the_directory_is_moved() {
        let (dir, lock) = lock_in_test_dir("moved");
        let aside = dir.with_file_name(std::format!("{}-aside", dir.file_name().unwrap().to_str().unwrap()));
        let _ = std::fs::remove_dir_all(&aside);
        let mut wake = Inotify::new(&lock).unwrap();
        wake.arm().unwrap();
        std::fs::rename(&dir, &aside).unwrap();
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken, "the directory moved away");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("lock"), "held").unwrap();
        wake.arm().unwrap();
        // The moved directory is watched no more ...
        std::fs::write(aside.join("lock"), "held").unwrap();
        std::fs::remove_file(aside.join("lock")).unwrap();
        assert_eq!(wake.wait(Duration::from_millis(5)), Wake::TimedOut, "the old directory still watched");
        // ... and the one at the path is.
        std::fs::remove_file(dir.join("lock")).unwrap();
        assert_eq!(wake.wait(Duration::from_secs(60)), Wake::Woken, "the new directory not watched");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&aside).unwrap();
    }

    #[test]
    fn inotify_refuses_what_it_cannot_watch() {
        let (dir, _) = lock_in_test_dir("refused");
        let missing = CPath::from_parts(&[dir.join("no-such-dir/lock").to_str().unwrap().as_bytes()]).unwrap();
        assert_eq!(Inotify::new(&missing).map(drop).map_err(|e| e.kind()), Err(ErrorKind::NotFound));
        std::fs::write(dir.join("file"), "").unwrap();
        let under_a_file = CPath::from_parts(&[dir.join("file/lock").to_str().unwrap().as_bytes()]).unwrap();
        assert_eq!(Inotify::new(&under_a_file).map(drop).map_err(|e| e.kind()), Err(ErrorKind::NotADirectory));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn budget_is_a_deadline_not_a_retry_count() {
        struct Recorder {
            total: Duration,
            calls: u32,
        }
        impl WakeSource for Recorder {
            fn wait(&mut self, timeout: Duration) -> Wake {
                self.total += timeout;
                self.calls += 1;
                Sleep.wait(timeout)
            }
        }
        let mut wake = Recorder { total: Duration::ZERO, calls: 0 };
        let start = MonoTime::now();
        let deadline = Some(start.saturating_add(Duration::from_millis(30)));
        let r: Result<(), Error> =
            wait_for(deadline, &mut wake, None, Backoff::new(7), || Err(Error::Busy(Contention::Raced)));
        assert_eq!(r, Err(Error::Timeout(Contention::Raced)), "the timeout says what stood in the way");
        assert!(MonoTime::now().since(start) >= Duration::from_millis(30));
        assert!(wake.total <= Duration::from_millis(30));
        assert!(wake.calls > 1);
    }

    #[test]
    fn success_and_hard_errors_end_the_wait() {
        let mut tries = 0;
        let r = wait_for(None, &mut Sleep, None, Backoff::new(1), || {
            tries += 1;
            if tries < 3 {
                Err(BUSY)
            } else {
                Ok(tries)
            }
        });
        assert_eq!(r, Ok(3));
        let r: Result<(), Error> = wait_for(None, &mut Sleep, None, Backoff::new(1), || Err(Error::NotHeld));
        assert_eq!(r, Err(Error::NotHeld));
    }

    #[test]
    fn warnings_come_after_first_and_then_every() {
        let mut seen = [Duration::ZERO; 8];
        let mut count = 0;
        let mut notify = |waited: Duration, _: &Contention| {
            if count < seen.len() {
                seen[count] = waited;
            }
            count += 1;
        };
        let warnings =
            Warnings { first: Duration::from_millis(20), every: Duration::from_millis(30), notify: &mut notify };
        let deadline = Some(MonoTime::now().saturating_add(Duration::from_millis(95)));
        let r: Result<(), Error> = wait_for(deadline, &mut Sleep, Some(warnings), Backoff::new(3), || Err(BUSY));
        assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::Timeout));
        // Due at 20, 50 and 80 ms: a loaded machine may run late, but never
        // early, and never more often than `every`.
        assert!((1..=3).contains(&count), "{count} warnings: {seen:?}");
        assert!(seen[0] >= Duration::from_millis(20));
        for pair in seen[..count].windows(2) {
            assert!(pair[1] >= pair[0] + Duration::from_millis(30), "{seen:?}");
        }
    }
}

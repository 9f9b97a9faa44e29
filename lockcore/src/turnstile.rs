//! The turnstile: the queue in which this library's waiters for one lock
//! take their turns, first come, first served, and are woken one at a time.
//!
//! It lives in a small file beside the lock (`<lock>.turnstile`), mapped
//! shared into every process that waits, and holds two counters and a ring
//! of slots. A waiter takes a ticket (`next`, counting up) and sleeps on a
//! futex word of its own slot until `serving` reaches its number; then it
//! is the head, and only the head tries the lock itself. When the holder
//! lets the lock go, it moves `serving` on to the next live ticket and
//! wakes that waiter alone: one wake-up per hand-off, and a releaser that
//! asks again queues behind the others.
//!
//! The turnstile orders attempts; it never decides who holds the lock. The
//! lock's own files do that, exactly as without it, so every mistake the
//! queue can make (a waiter judged gone that was only slow, a file another
//! user of the lock scribbled on, a queue split by a deleted file) costs a
//! turn, never exclusion. That is why no state in it needs to be trusted,
//! and why every waiter bounds its sleep by [`SAFETY_SLICE`]: after a slice
//! in which the queue did not move, the waiter looks at who stands before it
//! ([`Turnstile::unstick`]): tickets whose process has died or given up are
//! passed over, and the waiter just behind a head that does not take the
//! lock (killed between its turn and its attempt, stopped, holding a lock
//! that has expired) tries the lock itself and, if it gets it, takes the
//! head's turn ([`Turnstile::seize`]). Should that waiter do nothing either
//! (stopped too, or dead and not yet reaped, which `kill(pid, 0)` counts as
//! alive), the line is stalled: it has not moved, nor been tried or probed,
//! for a slice per waiter ahead (up to [`STALLED_AFTER_SLICES`]), and the
//! first waiter behind that can probes in its place, as does a caller that
//! will not wait ([`Ahead::Stalled`]). Each probe is noted in the line, so
//! that those further back leave it to the first that can.
//!
//! A slot's claim word holds its ticket and the pid of the process that
//! took it, written in one compare-and-swap, so that there is no moment in
//! which a ticket is sold but its owner unknown. A ticket given up is kept
//! with pid 0. Processes are judged alive by `kill(pid, 0)`: a reused pid
//! makes a dead waiter look alive, which the slice then finds out.
//!
//! Only for local file systems: a futex in a file mapped on two hosts
//! wakes nobody on the other, so on network and user-space file systems
//! there is no turnstile and waiters poll.
//!
//! Where the words live depends on who may write the lock. For a lock kept
//! to its owner (`mode=0600`, `0640`, `0644`) they are the file itself,
//! mapped shared. A lock shared with a group or with everyone (`mode=0660`,
//! `0666`) cannot be queued in a mapped file: whoever may write a file may
//! also truncate it, and a process that touches a shared mapping past its
//! file's end dies of SIGBUS, so one user of the lock could kill the
//! others' waiters, or a holder in its release. Its words live in a System
//! V shared memory segment instead, whose size is fixed when it is made,
//! and the file only names it ([`Naming`]). The segment is given the
//! file's group and mode, and marked for removal as soon as it is attached: it
//! lasts as long as some process has it attached (an open handle that has
//! waited), and the next to need one when it has gone makes another. An id
//! in the file is attached only if the segment is exactly of our size, its
//! memory can be had (a segment of huge pages that none backs would fault
//! at the first touch) and it carries our header and the file's identity;
//! a user who may write the file may point it at a segment of their own,
//! which, like a scribble, costs turns and nothing else.

use core::sync::atomic::Ordering::SeqCst;
use core::time::Duration;

use crate::clock::MonoTime;
use crate::error::FileRole;
use crate::files;
use crate::kept::KeptFd;
use crate::look::RecentLook;
use crate::sys::{self, CPath, Fd, FutexWait, OfdLock, SharedMapping};
use crate::trust::Sharing;

/// How long a waiter sleeps, at most, before it looks at the queue itself:
/// the longest a killed or stopped waiter can hold up the ones behind it.
pub const SAFETY_SLICE: Duration = Duration::from_millis(10);

/// How many tickets may be out at once; a waiter that finds them all taken
/// waits without a place (it polls).
pub const SLOTS: u32 = 128;

/// A line with live waiters that has stood still for a slice per waiter,
/// up to this many slices, is stalled ([`Ahead::Stalled`]).
pub const STALLED_AFTER_SLICES: u32 = 4;

/// What the file's name adds to the lock's.
pub const SUFFIX: &[u8] = b".turnstile";

/// The file: a line that says what it is, then the words.
const HEADER: &[u8] = b"turnstile 1 lockcore: a queue of waiters, binary from byte 64\n";
const FILE_LEN: usize = 4096;
/// Each counter on a cache line of its own.
const NEXT_AT: usize = 64;
const SERVING_AT: usize = 128;
/// When the last turn ended, in nanoseconds of the monotonic clock.
const PASSED_AT: usize = 192;
/// The ticket whose owner holds the lock (`HOLDING | number`), or 0.
const HOLDER_AT: usize = 200;
const HOLDING: u64 = 1 << 32;
/// When a head last tried the lock, in nanoseconds of the monotonic clock.
const TRIED_AT: usize = 208;
/// The last probe by a waiter behind the head: its ticket's number in the
/// high half, the monotonic clock's milliseconds (wrapping) in the low.
const PROBED_AT: usize = 240;
/// When `serving` last moved (a turn passed, taken over or seized), in
/// nanoseconds of the monotonic clock.
const MOVED_AT: usize = 248;
const SLOTS_AT: usize = 256;
/// A slot: the claim (`u64`), then the futex word its waiter sleeps on.
const SLOT_LEN: usize = 16;
const GO_IN_SLOT: usize = 8;

/// In a segment: the device and inode of the file that names it, so that
/// an id found in another lock's file (copied, or the kernel's id given to
/// a new segment of someone else's) is not taken for this lock's queue.
const NAMED_BY_DEV_AT: usize = 224;
const NAMED_BY_INO_AT: usize = 232;

const _: () = assert!(HEADER.len() <= NEXT_AT && SLOTS_AT + SLOTS as usize * SLOT_LEN <= FILE_LEN);
const _: () = assert!(
    TRIED_AT + 8 <= NAMED_BY_DEV_AT
        && NAMED_BY_INO_AT + 8 <= PROBED_AT
        && PROBED_AT + 8 <= MOVED_AT
        && MOVED_AT + 8 <= SLOTS_AT
);

/// The file of a lock others may write: a line that says what it is, and
/// the id of the segment that holds the words, at [`SEGMENT_ID_AT`].
const NAMING_HEADER: &[u8] =
    b"turnstile-segment 1 lockcore: a queue of waiters in the System V segment whose id is at byte 128\n";
const SEGMENT_ID_AT: usize = 128;
/// The id of no segment (`shmget` gives none below 0).
const NO_SEGMENT: i32 = -1;
const NAMING_LEN: usize = SEGMENT_ID_AT + 4;
const _: () = assert!(NAMING_HEADER.len() <= SEGMENT_ID_AT);

/// How many times an open asks for the naming file's lock, a millisecond
/// apart, before it leaves the turnstile for the next acquisition: the
/// lock is held for the few calls that check or make a segment.
const NAMING_TRIES: u32 = 5;

/// A place in the queue: the ticket's number and the process that took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    number: u32,
    pid: i32,
}

impl Ticket {
    /// The process that took the ticket.
    pub fn pid(self) -> i32 {
        self.pid
    }
}

/// Where a ticket stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Its turn: it may try the lock.
    Head,
    /// Behind this many tickets (the head's among them).
    Behind(u32),
    /// The queue went past it (it was judged gone, or its file was
    /// rewritten): it needs a new ticket.
    Passed,
}

/// What [`Turnstile::unstick`] found before a ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Nobody live: the ticket is the head now.
    Nobody,
    /// Only a live head, which may not be taking the lock: the caller may
    /// try the lock itself, and [`seize`](Turnstile::seize) the turn.
    OnlyTheHead,
    /// Live waiters, this many, the head first, in a line that has not
    /// moved, nor been tried or probed from ahead of the caller, for a
    /// while: they are stopped, or dead and not yet reaped, as a live
    /// head's one behind would otherwise have probed. The caller may try
    /// the lock and seize the turn, as behind a lone head.
    Stalled(u32),
    /// Live waiters: this many tickets stand before it.
    Waiters(u32),
}

/// Why a lock has no turnstile to wait in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// None yet: nobody has had to wait.
    Missing,
    /// None to be had here.
    Never,
}

/// An open turnstile.
///
/// It keeps no path (the lock's path, with [`SUFFIX`], names it): a handle
/// moves its turnstile out of itself and back at every acquisition, and a
/// path is most of a page.
pub struct Turnstile {
    map: SharedMapping,
    /// The file mapped, or the one that names the segment: to see whether
    /// the path still names it.
    file: sys::FileStat,
    /// For a lock others may write, the segment attached and its file.
    named: Option<Naming>,
    /// The last look that found the path naming `file`.
    looked: RecentLook,
}

/// The file that names the segment a shared lock's queue lives in, and the
/// id it named when the segment was attached.
struct Naming {
    fd: KeptFd,
    id: i32,
}

impl Naming {
    /// The id the file names now; `None` for none, or a file cut short.
    fn read(fd: &Fd) -> Option<i32> {
        let mut id = [0u8; 4];
        match sys::pread_full(fd, &mut id, SEGMENT_ID_AT as u64) {
            Ok(4) => Some(i32::from_ne_bytes(id)).filter(|&id| id != NO_SEGMENT),
            _ => None,
        }
    }
}

impl core::fmt::Debug for Turnstile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Turnstile").field("file", &self.file).finish()
    }
}

impl Turnstile {
    /// The turnstile of the lock at `lock`; with `create`, made with the
    /// lock's mode if missing (only a waiter that found the lock held makes
    /// it: a lock whose files are not to be trusted gets nothing new beside
    /// it). [`Unusable::Missing`] if it is not there and not to be made (or,
    /// for a lock others may write, its file is busy just now);
    /// [`Unusable::Never`] where there can be none (a file system shared
    /// with other hosts) or where it cannot be used (a file of another
    /// format or owner at its name, a full disk, no System V shared memory
    /// to be had): the waiters then poll, and the lock works as before.
    pub fn open(lock: &CPath, sharing: Sharing, create: bool) -> Result<Turnstile, Unusable> {
        let path = files::with_suffix(lock, SUFFIX).map_err(|_| Unusable::Never)?;
        if !create && matches!(sys::lstat(&path), Err(sys::Errno::ENOENT)) {
            return Err(Unusable::Missing);
        }
        let dir = CPath::from_parts(&[lock.parent()]).map_err(|_| Unusable::Never)?;
        if !files::on_one_host(&dir) {
            return Err(Unusable::Never);
        }
        if sharing.writable_by_others() {
            return Turnstile::open_segment(&path, sharing, create);
        }
        let initial = initial_content();
        let (fd, file) = open_file(&path, sharing, &initial)?;
        if file.size < FILE_LEN as u64 {
            // Shorter than ours: not one of ours, or cut short; a mapping
            // past its end would fault.
            return Err(Unusable::Never);
        }
        let map = SharedMapping::new(&fd, FILE_LEN).map_err(|_| Unusable::Never)?;
        // Opened just now: a look at the path.
        Ok(Turnstile { map, file, named: None, looked: RecentLook::made(MonoTime::now()) })
    }

    /// [`open`](Self::open) for a lock others may write: attaches the
    /// segment its file names, or, with `create`, makes one if it names
    /// none that is ours. One process at a time, under the file's lock, so
    /// that two who find none do not each make their own.
    fn open_segment(path: &CPath, sharing: Sharing, create: bool) -> Result<Turnstile, Unusable> {
        let (fd, file) = open_file(path, sharing, &initial_naming())?;
        let mut tries = 0;
        while !sys::try_ofd_lock(&fd, OfdLock::Exclusive).map_err(|_| Unusable::Never)? {
            tries += 1;
            if tries == NAMING_TRIES {
                return Err(Unusable::Missing);
            }
            sys::sleep(Duration::from_millis(1));
        }
        let attached = match Naming::read(&fd).and_then(|id| attach_ours(id, &file).map(|map| (id, map))) {
            Some(found) => Ok(found),
            None if create => make_segment(&fd, &file),
            None => Err(Unusable::Missing),
        };
        let _ = sys::ofd_unlock(&fd);
        let (id, map) = attached?;
        Ok(Turnstile {
            map,
            file,
            named: Some(Naming { fd: KeptFd::unlisted(fd), id }),
            looked: RecentLook::made(MonoTime::now()),
        })
    }

    /// Whether the turnstile's path beside the lock at `lock` still names
    /// the file mapped (or, for a lock others may write, the file that
    /// names the segment attached, and whether it still names that one): a
    /// turnstile deleted and made anew splits the queue until every waiter
    /// has the new one.
    pub fn is_current(&self, lock: &CPath) -> bool {
        files::with_suffix(lock, SUFFIX).is_ok_and(|path| sys::lstat(&path).is_ok_and(|now| now.same_file(&self.file)))
            && self.named.as_ref().map_or(true, |named| Naming::read(named.fd.fd()) == Some(named.id))
    }

    /// [`is_current`](Self::is_current), by a look made at `now` unless the
    /// last one is still believed ([`RecentLook`]).
    pub fn is_current_at(&mut self, lock: &CPath, now: MonoTime) -> bool {
        if self.looked.is_believed(now) {
            return true;
        }
        let current = self.is_current(lock);
        self.looked = if current { RecentLook::made(now) } else { RecentLook::default() };
        current
    }

    fn next(&self) -> &core::sync::atomic::AtomicU32 {
        self.map.word32(NEXT_AT)
    }

    fn serving(&self) -> &core::sync::atomic::AtomicU32 {
        self.map.word32(SERVING_AT)
    }

    fn claim(&self, number: u32) -> &core::sync::atomic::AtomicU64 {
        self.map.word64(SLOTS_AT + (number % SLOTS) as usize * SLOT_LEN)
    }

    fn go(&self, number: u32) -> &core::sync::atomic::AtomicU32 {
        self.map.word32(SLOTS_AT + (number % SLOTS) as usize * SLOT_LEN + GO_IN_SLOT)
    }

    /// Takes the next ticket for process `pid`; `None` while all
    /// [`SLOTS`] are out.
    pub fn take(&self, pid: i32) -> Option<Ticket> {
        // Each round either sells a ticket or sees one sold: bounded by the
        // other takers, and by a count for a file that lies.
        for _ in 0..4 * SLOTS {
            // `serving` first: it never passes `next`, so read in this order
            // the two tell how many are out.
            let serving = self.serving().load(SeqCst);
            let number = self.next().load(SeqCst);
            let out = number.wrapping_sub(serving);
            if out > SLOTS {
                // More out than there are slots: the counters were written
                // by something else. Start the queue afresh; whoever had a
                // place finds itself passed and takes a new one.
                let _ = self.serving().compare_exchange(serving, number, SeqCst, SeqCst);
                continue;
            }
            if out == SLOTS {
                return None;
            }
            let claim = self.claim(number);
            let old = claim.load(SeqCst);
            if claim_number(old) == number {
                // Sold to someone who has not yet moved `next`: move it for them.
                let _ = self.next().compare_exchange(number, number.wrapping_add(1), SeqCst, SeqCst);
                continue;
            }
            if claim.compare_exchange(old, claim_of(number, pid), SeqCst, SeqCst).is_ok() {
                let _ = self.next().compare_exchange(number, number.wrapping_add(1), SeqCst, SeqCst);
                if number == serving {
                    // The turn is this ticket's at once: the line moved.
                    self.moved();
                }
                return Some(Ticket { number, pid });
            }
        }
        None
    }

    /// Where `ticket` stands now.
    pub fn place(&self, ticket: Ticket) -> Place {
        place_of(ticket.number, self.serving().load(SeqCst))
    }

    /// Notes that `ticket`'s owner holds the lock, so that a look can tell
    /// the holder from the waiters ([`waiting`](Self::waiting)).
    pub fn hold(&self, ticket: Ticket) {
        self.map.word64(HOLDER_AT).store(HOLDING | u64::from(ticket.number), SeqCst);
    }

    /// How many of this library's processes wait in line, the holder's
    /// ticket not counted; `me` as for [`look`](Self::look).
    pub fn waiting(&self, me: i32) -> u32 {
        self.live_waiters(me).count() as u32
    }

    /// The tickets out, from the head on, whose owner lives and does not
    /// hold the lock; none for counters that lie.
    fn live_waiters(&self, me: i32) -> impl Iterator<Item = u32> + '_ {
        let head = self.serving().load(SeqCst);
        let out = self.next().load(SeqCst).wrapping_sub(head);
        let holder = self.map.word64(HOLDER_AT).load(SeqCst);
        (0..if out > SLOTS { 0 } else { out })
            .map(move |i| head.wrapping_add(i))
            .filter(move |&n| holder != HOLDING | u64::from(n) && self.is_live(n, me))
    }

    /// Sleeps until `ticket` may have become the head, for at most
    /// `timeout`; returns at once if it is the head already or was passed.
    pub fn wait(&self, ticket: Ticket, timeout: Duration) -> FutexWait {
        let go = self.go(ticket.number);
        // Read before `serving`: a turn given after that read changes the
        // word, and the kernel then refuses to sleep.
        let seen = go.load(SeqCst);
        match self.place(ticket) {
            Place::Behind(_) => sys::futex_wait(go, seen, timeout),
            Place::Head | Place::Passed => FutexWait::Woken,
        }
    }

    /// The head's turn is over (it released the lock, or gave up): the next
    /// live ticket becomes the head and is woken. Nothing if the turn was
    /// already taken from it.
    pub fn pass(&self, ticket: Ticket) {
        let held = HOLDING | u64::from(ticket.number);
        let _ = self.map.word64(HOLDER_AT).compare_exchange(held, 0, SeqCst, SeqCst);
        if self.serving().compare_exchange(ticket.number, ticket.number.wrapping_add(1), SeqCst, SeqCst).is_ok() {
            let now = nanos(MonoTime::now());
            self.map.word64(PASSED_AT).store(now, SeqCst);
            self.map.word64(MOVED_AT).store(now, SeqCst);
            self.announce(ticket.number.wrapping_add(1), ticket.pid);
        }
    }

    /// Notes that the head is trying the lock now: a head that keeps trying
    /// (for a holder from outside the line) is not one to go past.
    pub fn trying(&self) {
        self.map.word64(TRIED_AT).store(nanos(MonoTime::now()), SeqCst);
    }

    /// Whether a head tried the lock within `recently`.
    pub fn tried_within(&self, recently: Duration) -> bool {
        self.tried_within_at(recently, MonoTime::now())
    }

    fn tried_within_at(&self, recently: Duration, now: MonoTime) -> bool {
        self.since_at(TRIED_AT, now).is_some_and(|ago| ago < recently)
    }

    /// Notes that the owner of `ticket`, behind the head, is probing the
    /// lock now: those further back leave it to the first of them that can.
    pub fn probing(&self, ticket: Ticket) {
        let word = u64::from(ticket.number) << 32 | u64::from(millis(MonoTime::now()));
        self.map.word64(PROBED_AT).store(word, SeqCst);
    }

    /// Whether a waiter ahead of `ticket` probed the lock within `recently`
    /// (with `ticket` `None`: any waiter).
    pub fn probed_within(&self, recently: Duration, ahead_of: Option<Ticket>) -> bool {
        self.probed_within_at(recently, ahead_of, MonoTime::now())
    }

    fn probed_within_at(&self, recently: Duration, ahead_of: Option<Ticket>, now: MonoTime) -> bool {
        let word = self.map.word64(PROBED_AT).load(SeqCst);
        let (prober, at) = ((word >> 32) as u32, word as u32);
        // A stamp from a wrap of the clock ago, or ahead of it, reads as long
        // past or far off: never as recent for long.
        let recent = u128::from(millis(now).wrapping_sub(at)) < recently.as_millis();
        let ahead = ahead_of.map_or(true, |mine| matches!(mine.number.wrapping_sub(prober), 1..SLOTS));
        word != 0 && recent && ahead
    }

    /// Stamps the moment `serving` moved other than by a pass.
    fn moved(&self) {
        self.map.word64(MOVED_AT).store(nanos(MonoTime::now()), SeqCst);
    }

    /// Whether the line has stood still for `at_least` as of `now`:
    /// `serving` has not moved, no head has tried the lock and no waiter
    /// probed it.
    fn stalled_for(&self, at_least: Duration, now: MonoTime) -> bool {
        self.since_at(MOVED_AT, now).map_or(true, |ago| ago >= at_least)
            && !self.tried_within_at(at_least, now)
            && !self.probed_within_at(at_least, None, now)
    }

    /// When a `window` after the last turn ended closes (the next head
    /// leaves the lock to tools outside the line until then); `None` for
    /// no window, or one that has closed.
    pub fn window_open_until(&self, window: Duration) -> Option<MonoTime> {
        let ago = self.since(PASSED_AT)?;
        (ago < window).then(|| MonoTime::now().saturating_add(window - ago))
    }

    /// How long ago the monotonic time in the word at `at` was; `None` for
    /// a time ahead of now, which counts as long past: it was written on
    /// an earlier boot (the monotonic clock starts again at each), or by
    /// someone who lies, and must not keep the line waiting on it.
    fn since(&self, at: usize) -> Option<Duration> {
        self.since_at(at, MonoTime::now())
    }

    /// [`since`](Self::since) as of `now`.
    fn since_at(&self, at: usize, now: MonoTime) -> Option<Duration> {
        let stamp = self.map.word64(at).load(SeqCst);
        nanos(now).checked_sub(stamp).map(Duration::from_nanos)
    }

    /// Gives up a place, wherever it is: the ticket is kept with no owner,
    /// so that the turn goes past it; if the turn is already its own, it is
    /// passed on now.
    pub fn leave(&self, ticket: Ticket) {
        let _ = self.claim(ticket.number).compare_exchange(
            claim_of(ticket.number, ticket.pid),
            claim_of(ticket.number, 0),
            SeqCst,
            SeqCst,
        );
        // Either the one who gave us the turn saw the mark and went past,
        // or we see the turn here.
        if self.place(ticket) == Place::Head {
            self.pass(ticket);
        }
    }

    /// After a slice in which the queue did not move: passes over the
    /// tickets before `ticket` whose owner is gone, up to the first live
    /// one, and says who stands before it now.
    pub fn unstick(&self, ticket: Ticket) -> Ahead {
        let head = self.serving().load(SeqCst);
        let ahead = match place_of(ticket.number, head) {
            Place::Behind(ahead) => ahead,
            Place::Head | Place::Passed => return Ahead::Nobody,
        };
        let mut live = (0..ahead).map(|i| head.wrapping_add(i)).filter(|&n| self.is_live(n, ticket.pid));
        let Some(first_live) = live.next() else {
            // Everyone before us is gone.
            return match self.serving().compare_exchange(head, ticket.number, SeqCst, SeqCst) {
                Ok(_) => Ahead::Nobody,
                Err(_) => Ahead::Waiters(ahead),
            };
        };
        let behind_it = live.count() as u32;
        if first_live != head {
            // The turn goes to the first live waiter, which gets a slice of
            // its own before anyone behind it may try the lock.
            if self.serving().compare_exchange(head, first_live, SeqCst, SeqCst).is_ok() {
                self.moved();
                self.wake(first_live);
            }
            return Ahead::Waiters(behind_it + 1);
        }
        // The caller comes here only once its place has not moved, nor the
        // line been tried or probed from ahead of it, for as many slices as
        // stand before it (up to a few): every live waiter ahead that could
        // have probed had its chance first.
        match behind_it {
            0 => Ahead::OnlyTheHead,
            more => Ahead::Stalled(more + 1),
        }
    }

    /// Who stands in line, as a newcomer would find it: for a caller that
    /// will not wait, and takes no ticket unless it gets the lock.
    pub fn look(&self, me: i32) -> Ahead {
        self.look_at(me, MonoTime::now())
    }

    /// [`look`](Self::look) as of `now`.
    fn look_at(&self, me: i32, now: MonoTime) -> Ahead {
        let head = self.serving().load(SeqCst);
        let out = self.next().load(SeqCst).wrapping_sub(head);
        if out > SLOTS {
            return Ahead::Nobody;
        }
        match (0..out).filter(|&i| self.is_live(head.wrapping_add(i), me)).count() as u32 {
            0 => Ahead::Nobody,
            1 => Ahead::OnlyTheHead,
            live if self.stalled_for(SAFETY_SLICE * live.min(STALLED_AFTER_SLICES), now) => Ahead::Stalled(live),
            live => Ahead::Waiters(live),
        }
    }

    /// A ticket whose turn it is at once, for a caller that has just taken
    /// the lock without waiting in line ([`look`](Self::look) found nobody
    /// live, or a head that did not have the lock): whoever still stood
    /// before it finds itself passed. `None` while all slots are out.
    pub fn take_turn(&self, pid: i32) -> Option<Ticket> {
        let ticket = self.take(pid)?;
        self.seize(ticket);
        Some(ticket)
    }

    /// Makes `ticket` the head, over whoever stands before it, after its
    /// owner took the lock itself: [`unstick`](Self::unstick) found only a
    /// head that did not take it, or nobody live. Those passed queue again.
    pub fn seize(&self, ticket: Ticket) {
        for _ in 0..SLOTS {
            let head = self.serving().load(SeqCst);
            if !matches!(place_of(ticket.number, head), Place::Behind(_)) {
                return;
            }
            if self.serving().compare_exchange(head, ticket.number, SeqCst, SeqCst).is_ok() {
                self.moved();
                return;
            }
        }
    }

    /// Gives the turn to `number`, or past it while its owner is gone.
    /// `me` is the caller's pid, alive by definition.
    fn announce(&self, mut number: u32, me: i32) {
        for _ in 0..SLOTS {
            if number == self.next().load(SeqCst) {
                // Nobody waits.
                return;
            }
            if let Some(pid) = self.claimant(number) {
                // Woken before its owner is judged alive, so that the system
                // call that judges it is not on the way to the next holder:
                // one judged gone was woken for nothing. A sleeper woken is
                // alive, and needs no judging; only an owner that was not
                // asleep on its word (between two looks, or dead) is judged.
                // (A sleeper of the slot's ticket a round of the ring
                // earlier, passed over while it slept, would pass for it: a
                // dead owner is then found by the waiter behind it, after a
                // few slices, as one that stopped is.)
                if self.wake(number) > 0 || lives(pid, me) {
                    return;
                }
            }
            if self.serving().compare_exchange(number, number.wrapping_add(1), SeqCst, SeqCst).is_err() {
                return;
            }
            number = number.wrapping_add(1);
        }
    }

    /// Wakes the owner of ticket `number`: how many slept on its word.
    fn wake(&self, number: u32) -> usize {
        let go = self.go(number);
        go.store(number, SeqCst);
        sys::futex_wake(go)
    }

    /// The pid of the first live waiter in line that does not hold the
    /// lock: the next to be served. For tests that aim a fault at it.
    pub fn next_in_line(&self) -> Option<i32> {
        self.live_waiters(0).map(|n| claim_pid(self.claim(n).load(SeqCst))).next()
    }

    /// Whether ticket `number` is held by a process that lives.
    fn is_live(&self, number: u32, me: i32) -> bool {
        self.claimant(number).is_some_and(|pid| lives(pid, me))
    }

    /// The process that holds ticket `number`; `None` for a ticket given up,
    /// or a slot that holds another ticket's claim.
    fn claimant(&self, number: u32) -> Option<i32> {
        let claim = self.claim(number).load(SeqCst);
        let pid = claim_pid(claim);
        (claim_number(claim) == number && pid > 0).then_some(pid)
    }
}

/// Whether process `pid` lives; `me` is the caller's pid, alive by definition.
fn lives(pid: i32, me: i32) -> bool {
    pid == me || !matches!(sys::kill(pid, 0), Err(sys::Errno::ESRCH))
}

/// Opens (or makes, with `initial`) the turnstile's file. Its errors do not
/// surface: without a turnstile the lock still works.
fn open_file(path: &CPath, sharing: Sharing, initial: &[u8]) -> Result<(Fd, sys::FileStat), Unusable> {
    files::open_state_file(path, FileRole::Guard, sharing, initial, 0).map_err(|e| match e.kind() {
        // The directory is missing: the attempt says so. Leased to another
        // process for now: looked at again later, as a missing one.
        crate::error::ErrorKind::NotFound | crate::error::ErrorKind::Busy => Unusable::Missing,
        _ => Unusable::Never,
    })
}

/// Segment `id` attached, if it is one of our turnstiles, made for the
/// file `naming`.
fn attach_ours(id: i32, naming: &sys::FileStat) -> Option<SharedMapping> {
    let map = SharedMapping::attach_segment(id, FILE_LEN).ok()?;
    let mut header = [0u8; HEADER.len()];
    map.read_bytes(0, &mut header);
    let ours = header == *HEADER
        && map.word64(NAMED_BY_DEV_AT).load(SeqCst) == naming.dev
        && map.word64(NAMED_BY_INO_AT).load(SeqCst) == naming.ino;
    ours.then_some(map)
}

/// Makes a segment for the file `naming` (open as `fd`, whose lock the
/// caller holds): laid out as a new turnstile file, given the file's group
/// and mode, marked to go with its last user, and named in the file.
fn make_segment(fd: &Fd, naming: &sys::FileStat) -> Result<(i32, SharedMapping), Unusable> {
    // Already marked for removal: it lasts as long as an attachment.
    let (id, map) = SharedMapping::new_segment(FILE_LEN).map_err(|_| Unusable::Never)?;
    map.write_bytes(0, &initial_content());
    map.word64(NAMED_BY_DEV_AT).store(naming.dev, SeqCst);
    map.word64(NAMED_BY_INO_AT).store(naming.ino, SeqCst);
    sys::share_segment(id, naming.gid, naming.mode).map_err(|_| Unusable::Never)?;
    sys::pwrite_all(fd, &id.to_ne_bytes(), SEGMENT_ID_AT as u64).map_err(|_| Unusable::Never)?;
    Ok((id, map))
}

fn nanos(at: MonoTime) -> u64 {
    u64::try_from(at.since(MonoTime::EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// `at` in milliseconds of the monotonic clock, wrapping: for a stamp that
/// shares its word with a ticket's number.
fn millis(at: MonoTime) -> u32 {
    (nanos(at) / 1_000_000) as u32
}

fn place_of(number: u32, serving: u32) -> Place {
    match number.wrapping_sub(serving) {
        0 => Place::Head,
        ahead if ahead < SLOTS => Place::Behind(ahead),
        _ => Place::Passed,
    }
}

fn claim_of(number: u32, pid: i32) -> u64 {
    (u64::from(number) << 32) | u64::from(pid as u32)
}

fn claim_number(claim: u64) -> u32 {
    (claim >> 32) as u32
}

fn claim_pid(claim: u64) -> i32 {
    claim as u32 as i32
}

/// A new file: the header, both counters at 0, and every slot claimed by
/// nobody for the ticket one round before its first, so that no ticket
/// looks sold before it is.
fn initial_content() -> [u8; FILE_LEN] {
    let mut bytes = [0u8; FILE_LEN];
    bytes[..HEADER.len()].copy_from_slice(HEADER);
    for slot in 0..SLOTS {
        let at = SLOTS_AT + slot as usize * SLOT_LEN;
        let unsold = claim_of(slot.wrapping_sub(SLOTS), 0);
        bytes[at..at + 8].copy_from_slice(&unsold.to_ne_bytes());
    }
    bytes
}

/// A new naming file: the header, and no segment named.
fn initial_naming() -> [u8; NAMING_LEN] {
    let mut bytes = [0u8; NAMING_LEN];
    bytes[..NAMING_HEADER.len()].copy_from_slice(NAMING_HEADER);
    bytes[SEGMENT_ID_AT..].copy_from_slice(&NO_SEGMENT.to_ne_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::path::PathBuf;

    /// A turnstile in a fresh directory, and a second mapping of the same
    /// file, as another process would have.
    struct Pair {
        dir: PathBuf,
        one: Turnstile,
        other: Turnstile,
    }

    impl Drop for Pair {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A new, empty directory for the test `name`.
    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lockcore-turnstile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    /// The lock `lock` in `dir`.
    fn lock_in(dir: &std::path::Path) -> CPath {
        CPath::from_parts(&[dir.join("lock").as_os_str().as_encoded_bytes()]).unwrap()
    }

    fn pair(name: &str) -> Pair {
        let dir = fresh_dir(name);
        let lock = lock_in(&dir);
        let sharing = Sharing::new(0o600);
        assert_eq!(Turnstile::open(&lock, sharing, false).map(drop), Err(Unusable::Missing));
        let one = Turnstile::open(&lock, sharing, true).expect("a turnstile on a local file system");
        let other = Turnstile::open(&lock, sharing, false).unwrap();
        Pair { dir, one, other }
    }

    fn me() -> i32 {
        std::process::id() as i32
    }

    /// A turnstile removed (a cleaner of /tmp), or removed and made anew,
    /// is no longer the current one at the lock's path, and a look that is
    /// still believed says so only once it is not.
    #[test]
    fn a_turnstile_removed_or_made_anew_is_no_longer_current() {
        let mut p = pair("current");
        let lock = lock_in(&p.dir);
        assert!(p.one.is_current(&lock) && p.other.is_current(&lock));
        std::fs::remove_file(p.dir.join("lock.turnstile")).unwrap();
        assert!(!p.one.is_current(&lock), "removed");
        let anew = Turnstile::open(&lock, Sharing::new(0o600), true).unwrap();
        assert!(anew.is_current(&lock) && !p.one.is_current(&lock), "made anew: another file");
        let now = MonoTime::now();
        assert!(p.other.is_current_at(&lock, now), "its look at opening is still believed");
        let later = now.saturating_add(Duration::from_secs(1));
        assert!(!p.other.is_current_at(&lock, later), "looked again");
        assert!(!p.other.is_current_at(&lock, later), "and not believed after a look that failed");
    }

    /// Tickets taken through two mappings of one file are one queue, served
    /// in the order they were taken; a turn passed twice moves once.
    #[test]
    fn turns_come_in_ticket_order_across_mappings() {
        let p = pair("order");
        let a = p.one.take(me()).unwrap();
        let b = p.other.take(me()).unwrap();
        let c = p.one.take(me()).unwrap();
        assert_eq!(
            [p.other.place(a), p.one.place(b), p.other.place(c)],
            [Place::Head, Place::Behind(1), Place::Behind(2)]
        );
        p.one.hold(a);
        assert_eq!(p.one.waiting(me()), 2, "the holder is not waiting");
        p.one.pass(a);
        assert_eq!(
            [p.other.place(a), p.other.place(b), p.other.place(c)],
            [Place::Passed, Place::Head, Place::Behind(1)]
        );
        p.other.pass(a);
        assert_eq!(p.one.place(b), Place::Head, "a turn passed twice moves once");
        p.other.leave(b);
        assert_eq!(p.one.place(c), Place::Head, "a head that gives up passes the turn on");
        p.one.pass(c);
        assert_eq!(p.one.waiting(me()), 0);
    }

    #[test]
    fn the_turn_goes_past_those_who_gave_up_or_died() {
        let p = pair("skip");
        let head = p.one.take(me()).unwrap();
        let gave_up = p.one.take(me()).unwrap();
        let died = p.other.take(crate::process::dead_pid()).unwrap();
        let live = p.other.take(me()).unwrap();
        p.one.leave(gave_up);
        assert_eq!(p.one.place(live), Place::Behind(3), "places are not given back");
        p.other.pass(head);
        assert_eq!(p.one.place(live), Place::Head);
        assert_eq!(p.one.place(died), Place::Passed);
    }

    #[test]
    fn a_stalled_line_is_looked_at_by_the_one_behind() {
        let p = pair("unstick");
        let dead_head = p.one.take(crate::process::dead_pid()).unwrap();
        let mine = p.other.take(me()).unwrap();
        assert_eq!(p.other.unstick(mine), Ahead::Nobody, "a dead head is passed over");
        assert_eq!(p.one.place(mine), Place::Head);
        assert_eq!(p.one.place(dead_head), Place::Passed);

        let behind = p.one.take(me()).unwrap();
        assert_eq!(p.one.unstick(behind), Ahead::OnlyTheHead, "a live head that may not be taking the lock");
        p.one.seize(behind);
        assert_eq!(p.other.place(behind), Place::Head);
        assert_eq!(p.other.place(mine), Place::Passed, "the head it went past queues again");
    }

    /// The monotonic time a turnstile word at `at` holds.
    fn stamp(t: &Turnstile, at: usize) -> MonoTime {
        MonoTime::EPOCH.saturating_add(Duration::from_nanos(t.map.word64(at).load(SeqCst)))
    }

    /// Two live waiters at the head that do nothing (stopped, or dead and
    /// not reaped): the one behind them may probe, once nobody ahead of it
    /// has; a try may, once the line has stood still.
    #[test]
    fn a_stalled_line_is_probed_by_the_first_that_can() {
        let p = pair("stalled");
        let head = p.one.take(me()).unwrap();
        let second = p.one.take(me()).unwrap();
        let mine = p.other.take(me()).unwrap();
        assert_eq!(p.other.unstick(mine), Ahead::Stalled(2), "two live before it, the head unmoved");
        assert_eq!(p.one.unstick(second), Ahead::OnlyTheHead);

        let moved = stamp(&p.one, MOVED_AT);
        let still = |slices: u32| moved.saturating_add(SAFETY_SLICE * slices);
        assert!(moved > MonoTime::EPOCH, "the first ticket was the head at once: the line moved");
        assert_eq!(p.other.look_at(me(), moved), Ahead::Waiters(3), "a line that just moved");
        assert_eq!(p.other.look_at(me(), still(2)), Ahead::Waiters(3), "a slice a waiter, three of them");
        assert_eq!(p.other.look_at(me(), still(3)), Ahead::Stalled(3), "a line that stood still");

        p.one.trying();
        let tried = stamp(&p.one, TRIED_AT);
        assert_eq!(p.other.look_at(me(), tried), Ahead::Waiters(3), "a head at work");
        assert_eq!(p.other.look_at(me(), tried.saturating_add(SAFETY_SLICE * 3)), Ahead::Stalled(3));

        p.one.probing(second);
        let probed = MonoTime::now();
        assert!(p.other.probed_within_at(SAFETY_SLICE * 2, Some(mine), probed), "a probe from ahead of it");
        assert!(!p.other.probed_within_at(SAFETY_SLICE * 2, Some(head), probed), "one from behind the head is not");
        assert!(!p.other.probed_within_at(SAFETY_SLICE * 2, Some(mine), probed.saturating_add(SAFETY_SLICE * 3)));
        assert_eq!(p.other.look_at(me(), probed), Ahead::Waiters(3), "a waiter probing past the head");

        let taken = p.other.take_turn(me()).unwrap();
        assert_eq!(p.one.place(head), Place::Passed, "the stalled queue again");
        assert_eq!(p.one.place(taken), Place::Head);
        assert!(stamp(&p.one, MOVED_AT) >= moved, "a seized turn is a move");
    }

    #[test]
    fn a_look_counts_the_live_only() {
        let p = pair("look");
        assert_eq!(p.one.look(me()), Ahead::Nobody);
        let head = p.one.take(me()).unwrap();
        assert_eq!(p.other.look(me()), Ahead::OnlyTheHead);
        let gone = p.one.take(me()).unwrap();
        p.one.leave(gone);
        let _dead = p.one.take(crate::process::dead_pid()).unwrap();
        assert_eq!(p.other.look(me()), Ahead::OnlyTheHead, "the gone and the dead are nobody");
        let _waiter = p.one.take(me()).unwrap();
        // As of the moment the line last moved: a line standing still since
        // is another test's.
        assert_eq!(p.other.look_at(me(), stamp(&p.one, MOVED_AT)), Ahead::Waiters(2));
        let taken = p.other.take_turn(me()).unwrap();
        assert_eq!(p.one.place(taken), Place::Head);
        assert_eq!(p.one.place(head), Place::Passed);
    }

    #[test]
    fn a_full_line_gives_no_place_and_a_lying_one_starts_afresh() {
        let p = pair("full");
        let tickets: std::vec::Vec<Ticket> = (0..SLOTS).map(|_| p.one.take(me()).unwrap()).collect();
        assert_eq!(p.other.take(me()), None, "every slot is out");
        p.one.pass(tickets[0]);
        assert!(p.other.take(me()).is_some(), "a slot again once the head passed");
        // Counters no queue can have: more out than there are slots.
        p.one.next().store(p.one.serving().load(SeqCst).wrapping_add(SLOTS * 3), SeqCst);
        let fresh = p.other.take(me()).expect("a place in a line started afresh");
        assert_eq!(p.one.place(fresh), Place::Head);
        assert_eq!(p.one.place(tickets[5]), Place::Passed);
    }

    #[test]
    fn a_waiter_sleeps_until_its_turn_is_given() {
        let p = pair("wake");
        let head = p.one.take(me()).unwrap();
        let waiter = p.other.take(me()).unwrap();
        std::thread::scope(|scope| {
            let sleeper = scope.spawn(|| {
                // Woken by the pass, or by the long timeout on a very slow
                // machine: either way the place must then be the head.
                while p.other.place(waiter) != Place::Head {
                    p.other.wait(waiter, Duration::from_secs(5));
                }
            });
            p.one.pass(head);
            sleeper.join().unwrap();
        });
        assert_eq!(p.other.wait(waiter, Duration::from_secs(60)), FutexWait::Woken, "the head does not sleep");
    }

    /// Times from an earlier boot, or planted, lie ahead of this boot's
    /// monotonic clock: they must not keep a head counted as trying, nor a
    /// window open, for ever.
    #[test]
    fn times_ahead_of_the_clock_count_as_long_past() {
        let p = pair("future");
        let ahead = nanos(MonoTime::now()) + 3_600_000_000_000;
        p.one.map.word64(TRIED_AT).store(ahead, SeqCst);
        p.one.map.word64(PASSED_AT).store(ahead, SeqCst);
        assert!(!p.other.tried_within(SAFETY_SLICE * 2), "a head that tried an hour from now");
        assert_eq!(p.other.window_open_until(Duration::from_millis(20)), None, "a window open from an hour from now");
        p.one.trying();
        assert!(p.other.tried_within(SAFETY_SLICE * 2), "a head that tries now");
        p.one.map.word64(PASSED_AT).store(nanos(MonoTime::now()), SeqCst);
        let until = p.other.window_open_until(Duration::from_millis(20)).expect("a window just opened");
        assert!(until <= MonoTime::now().saturating_add(Duration::from_millis(20)));
    }

    fn named_id(dir: &std::path::Path) -> i32 {
        let bytes = std::fs::read(dir.join("lock.turnstile")).unwrap();
        i32::from_ne_bytes(bytes[SEGMENT_ID_AT..SEGMENT_ID_AT + 4].try_into().unwrap())
    }

    /// A lock other users may write queues in a System V segment that its
    /// file names: every handle attaches the same one, with the file's
    /// mode, and the segment goes with the last of them.
    #[test]
    fn a_lock_shared_with_other_users_queues_in_a_segment_its_file_names() {
        use std::os::unix::fs::PermissionsExt;
        let dir = fresh_dir("shared");
        let lock = lock_in(&dir);
        for mode in [0o660, 0o666, 0o620] {
            let sharing = Sharing::new(mode);
            assert_eq!(Turnstile::open(&lock, sharing, false).map(drop), Err(Unusable::Missing), "{mode:o}");
            let one = Turnstile::open(&lock, sharing, true).expect("a turnstile in a segment");
            let other = Turnstile::open(&lock, sharing, false).expect("the same segment, attached");
            let file = std::fs::metadata(dir.join("lock.turnstile")).unwrap();
            assert_eq!(file.permissions().mode() & 0o777, mode, "the file has exactly the mode");
            assert!(file.len() < FILE_LEN as u64, "the file names the segment; it holds no words");
            let id = named_id(&dir);
            let segment_mode = sys::segment_status(id).unwrap().shm_perm.mode;
            assert_eq!(segment_mode & 0o777, (mode & 0o666) as u16);
            // SHM_DEST: marked for removal from the start, so that a process killed later leaks nothing.
            assert_ne!(segment_mode & 0o1000, 0, "marked to go with its last user");
            let a = one.take(me()).unwrap();
            let b = other.take(me()).unwrap();
            assert_eq!([other.place(a), one.place(b)], [Place::Head, Place::Behind(1)], "one queue");
            assert!(one.is_current(&lock) && other.is_current(&lock));
            drop(one);
            assert!(sys::segment_exists(id), "attached by the other");
            drop(other);
            assert!(!sys::segment_exists(id), "gone with its last user");
            assert_eq!(Turnstile::open(&lock, sharing, false).map(drop), Err(Unusable::Missing), "names none now");
            let again = Turnstile::open(&lock, sharing, true).unwrap();
            assert_ne!(named_id(&dir), id, "a new one, named in the file");
            assert_eq!(again.look(me()), Ahead::Nobody, "a fresh queue");
            drop(again);
            std::fs::remove_file(dir.join("lock.turnstile")).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Another user who may write the file can cut it short, rewrite the
    /// id, or point it at a segment that is not a turnstile: the handles
    /// attached keep their memory (nothing faults), find the name changed,
    /// and a segment not of ours is left exactly as it was.
    #[test]
    fn a_shared_lock_survives_its_file_cut_short_or_pointed_elsewhere() {
        let dir = fresh_dir("cut");
        let lock = lock_in(&dir);
        let sharing = Sharing::new(0o666);
        let line = Turnstile::open(&lock, sharing, true).unwrap();
        let ticket = line.take(me()).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(dir.join("lock.turnstile")).unwrap();
        file.set_len(0).unwrap();
        assert!(!line.is_current(&lock), "the file names no segment now");
        assert_eq!(line.place(ticket), Place::Head, "the words are where they were");
        line.pass(ticket);

        // A segment of someone else's, of our size, named in the file.
        let (foreign, theirs) = SharedMapping::new_segment(FILE_LEN).unwrap();
        theirs.write_bytes(0, b"not a turnstile");
        file.set_len(0).unwrap();
        std::fs::write(
            dir.join("lock.turnstile"),
            [&initial_naming()[..SEGMENT_ID_AT], &foreign.to_ne_bytes()].concat(),
        )
        .unwrap();
        let fresh = Turnstile::open(&lock, sharing, true).expect("a segment of ours, made anew");
        assert_ne!(named_id(&dir), foreign);
        let mut kept = [0u8; 16];
        theirs.read_bytes(0, &mut kept);
        assert_eq!(&kept[..15], b"not a turnstile", "the foreign segment is untouched");
        assert_eq!(theirs.word64(NEXT_AT).load(SeqCst), 0);
        drop(fresh);
        drop(line);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A user of the lock who may make segments of huge pages names one
    /// made with `SHM_NORESERVE`, which says it is exactly our size and
    /// faults at the first touch while no huge page is free: it is refused
    /// before it is touched, and a segment of ours is made instead.
    #[test]
    fn a_segment_of_huge_pages_that_none_backs_is_refused_untouched() {
        let dir = fresh_dir("hugetlb");
        let lock = lock_in(&dir);
        let sharing = Sharing::new(0o666);
        drop(Turnstile::open(&lock, sharing, true).unwrap());
        // SAFETY: plain call; the segment is removed below.
        let huge = unsafe {
            libc::shmget(libc::IPC_PRIVATE, FILE_LEN, libc::IPC_CREAT | libc::SHM_HUGETLB | libc::SHM_NORESERVE | 0o600)
        };
        if huge < 0 {
            std::fs::remove_dir_all(&dir).unwrap();
            std::eprintln!(
                "skipped: no SHM_HUGETLB segment for this user (root, or vm.hugetlb_shm_group, may make one)"
            );
            return;
        }
        let file = std::fs::OpenOptions::new().write(true).open(dir.join("lock.turnstile")).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &huge.to_ne_bytes(), SEGMENT_ID_AT as u64).unwrap();
        let opened = Turnstile::open(&lock, sharing, true);
        sys::remove_segment(huge).unwrap();
        let line = opened.expect("a segment of ours, made anew");
        assert_ne!(named_id(&dir), huge);
        assert_eq!(line.place(line.take(me()).unwrap()), Place::Head);
        drop(line);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A lock kept to its owner queues in its mapped file, as before.
    #[test]
    fn a_private_lock_queues_in_its_file() {
        let dir = fresh_dir("private");
        let lock = lock_in(&dir);
        for mode in [0o600, 0o640, 0o644] {
            let line = Turnstile::open(&lock, Sharing::new(mode), true).unwrap();
            assert!(line.named.is_none(), "{mode:o}");
            assert_eq!(std::fs::metadata(dir.join("lock.turnstile")).unwrap().len(), FILE_LEN as u64);
            std::fs::remove_file(dir.join("lock.turnstile")).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn places_count_round_the_wrap() {
        assert_eq!(place_of(5, 5), Place::Head);
        assert_eq!(place_of(7, 5), Place::Behind(2));
        assert_eq!(place_of(4, 5), Place::Passed);
        assert_eq!(place_of(2, u32::MAX), Place::Behind(3));
        assert_eq!(place_of(5 + SLOTS, 5), Place::Passed, "further than any queue can be: a lie");
    }

    #[test]
    fn a_claim_keeps_ticket_and_pid_apart() {
        let claim = claim_of(0xdead_beef, 4_194_304);
        assert_eq!((claim_number(claim), claim_pid(claim)), (0xdead_beef, 4_194_304));
        assert_eq!(claim_pid(claim_of(3, 0)), 0);
    }

    #[test]
    fn a_new_file_has_sold_no_ticket() {
        let bytes = initial_content();
        assert!(bytes.starts_with(b"turnstile "));
        for slot in 0..SLOTS {
            let at = SLOTS_AT + slot as usize * SLOT_LEN;
            let claim = u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
            assert_ne!(claim_number(claim), slot, "slot {slot} looks sold");
            assert_eq!(claim_pid(claim), 0);
        }
    }
}

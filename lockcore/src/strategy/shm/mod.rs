//! `shm`: the lease of [`lease`](super::lease), kept in a shared mapping of
//! a small file and changed under a word of that page instead of a file
//! lock, for the processes of one host that want the cheapest lock with
//! the same promises (owner, TTL, prolong, cooldown, fence, expired and
//! lost told apart).
//!
//! The file is made complete before it appears, then only ever changed
//! through the mapping (and the locks on bytes past its end):
//!
//! ```text
//! 0     shm 3 lockcore: ...\n        what the file is
//! 64    u64 the section word: who holds it, orders every change (section.rs)
//! 128   u32 active slot (0 or 1)
//! 192   u32 releases                  futex word: moves on whenever the lease is let go
//! 196   u32 sleepers                  waiters asleep on it
//! 256   slot 0, 640 slot 1            a lease line each, as `lease` writes it
//! 2^32  one byte per handle's tag     locked, never written, by each handle
//!                                     that has the file mapped (section.rs)
//! ```
//!
//! A change writes the new line into the slot that is not active and then
//! flips the active index, so a holder of the section word killed half-way
//! through leaves the old line whole, and the next process takes the word
//! from it once it is provably gone. The word is held for the few hundred
//! nanoseconds of one change, never for the caller's critical section, so
//! the lock itself goes stale exactly as a lease does: at its expiry, or, by
//! default (`stale=pid`), at once when its holder is provably dead, which
//! on one host and boot it always can be (pid and start time).
//!
//! A release moves the futex word on and wakes whoever sleeps on it, so a
//! waiter that polls nothing hears of it at once ([`OwnWake`]). The queue
//! of fair waiting is the handle's turnstile, as for every local lock.
//!
//! Only for a lock no other user may write: a process that touches a
//! shared mapping past the end of its file dies of `SIGBUS`, and whoever
//! may write the file may shorten it. The spec refuses a mode that lets
//! others write; a file of another user, or one others may write, is
//! refused before it is mapped ([`files::open_state_file`]), and the
//! file is judged again (its length and bits) before the page is touched
//! whenever the last look is no longer believed ([`RecentLook`]), its header
//! at every call. Its owner can still shorten it after a look, and kill its
//! own processes so: that is no one else's power.
//! Only for local file systems too, where one host's processes share one
//! page.

use core::sync::atomic::Ordering::SeqCst;
use core::time::Duration;

use crate::clock::{Moment, MonoTime};
use crate::error::{Contention, CorruptKind, Error, ErrorKind, FileError, FileRole};
use crate::files;
use crate::look::RecentLook;
use crate::owner::Nonce;
use crate::record::Record;
use crate::spec::Spec;
use crate::strategy::lease::{LeaseState, LEASE_RECORD_LEN, NEW_LEASE};
use crate::strategy::{
    commit_if_current, Break, Commit, CommitOutcome, Context, Cooldown, Files, Inspection, OwnWake, Prolong,
    ProlongOutcome, ReleaseOutcome, Strategy, Taken,
};
use crate::sys::{self, CPath, FileStat, FutexWait, SharedMapping};
use crate::trust::Sharing;
use crate::wait::{Wake, WakeSource};

pub use section::TAG_BYTES_AT;
use section::{NotTaken, PageFile, SectionWord, Tag};

mod section;

const HEADER: &[u8] = b"shm 3 lockcore: a lease in shared memory, binary from byte 64\n";
const FILE_LEN: usize = 4096;
/// Where the section word lies in the file (8 bytes: the holder's pid in
/// the low half, its tag in the high half), for tests that hold it from
/// outside.
pub const SECTION_AT: usize = 64;
const ACTIVE_AT: usize = 128;
const RELEASES_AT: usize = 192;
const SLEEPERS_AT: usize = 196;
const SLOTS_AT: usize = 256;
const SLOT_STRIDE: usize = LEASE_RECORD_LEN.next_multiple_of(64);

const _: () = assert!(
    HEADER.len() <= SECTION_AT && SECTION_AT + section::LEN <= ACTIVE_AT && SLOTS_AT + 2 * SLOT_STRIDE <= FILE_LEN
);

/// A `shm` lock: its file, mapped once opened.
pub struct Shm {
    path: CPath,
    sharing: Sharing,
    signal: Option<i32>,
    mapped: Option<Mapped>,
    /// The releases counted when the wake source was last armed, read
    /// where the file is judged: by `arm`, or for an attempt of this handle
    /// ([`OwnWake::arm_for_attempt`]) by that attempt, before it reads the
    /// lease.
    armed_at: Option<u32>,
    /// Armed, and the count is yet to be read.
    arming: bool,
    /// Whether the call under way looked at the path, rather than believe
    /// an earlier look.
    looked_in_this_call: bool,
    seen: Option<SeenLine>,
}

impl core::fmt::Debug for Shm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shm").field("path", &self.path).finish()
    }
}

/// The file, mapped, and which file it was, with the tag of this handle.
/// The mapping is the process's that made it ([`Mapped::incarnation`]): a
/// child of `fork()` inherits neither it nor its tag's lock, and maps the
/// file anew.
struct Mapped {
    map: core::mem::ManuallyDrop<SharedMapping>,
    file: FileStat,
    tag: Tag,
    incarnation: u64,
    /// The last look that found the path naming `file`, whole and with
    /// bits the lock allows. A cell, so that a call that finds the file
    /// changed through the page it borrows can say so.
    looked: core::cell::Cell<RecentLook>,
}

impl Mapped {
    /// Whether the mapping is this process's: made here, not inherited.
    fn is_here(&self) -> bool {
        crate::process::incarnation() == Some(self.incarnation)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `map` is taken once, here, at the end of `self`.
        let map = unsafe { core::mem::ManuallyDrop::take(&mut self.map) };
        if self.is_here() {
            drop(map);
        } else {
            // A child's copy: whatever lies at those addresses is not it.
            map.forget();
        }
    }
}

/// The file behind a handle's page, found again by its path.
struct OnDisk<'a> {
    path: &'a CPath,
    file: &'a FileStat,
}

impl PageFile for OnDisk<'_> {
    fn still_whole(&mut self) -> bool {
        Shm::whole_at(self.path, self.file).is_some()
    }

    fn reopen(&mut self) -> sys::SysResult<Option<sys::Fd>> {
        let fd = sys::open(self.path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
        Ok(sys::fstat(&fd)?.same_file(self.file).then_some(fd))
    }
}

/// The section word held, and the lease as it stood when it was taken.
/// Dropping it lets the word go, and wakes the sleepers if the lease was
/// let go.
struct Section<'m> {
    map: &'m SharedMapping,
    word: SectionWord<'m>,
    state: LeaseState,
    now: Moment,
    freed: bool,
    seen: &'m mut Option<SeenLine>,
}

/// The last lease line a handle read or wrote, and what it says: a line
/// found again byte for byte is not parsed again (what a line says depends
/// on its bytes alone).
struct SeenLine {
    bytes: [u8; LEASE_RECORD_LEN],
    state: LeaseState,
}

impl Section<'_> {
    /// Writes `state` into the slot that is not active, then makes it the
    /// active one: a death between the two leaves the old state whole. Not
    /// if the word was found taken over just before either (this process
    /// was stopped, and judged gone): the change is then not made, and the
    /// caller told to try again.
    fn write(&mut self, state: &LeaseState) -> Result<(), Error> {
        let active = self.map.word32(ACTIVE_AT).load(SeqCst) & 1;
        let spare = active ^ 1;
        let held = || if self.word.is_held() { Ok(()) } else { Err(Error::Busy(Contention::Raced)) };
        // Before the spare slot is written, which its new holder may be
        // writing too, and before it is made current.
        held()?;
        let line = state.encode();
        self.map.write_bytes(slot_at(spare), line.as_bytes());
        held()?;
        self.map.word32(ACTIVE_AT).store(spare, SeqCst);
        *self.seen = line.as_bytes().try_into().ok().map(|bytes| SeenLine { bytes, state: *state });
        self.freed |= matches!(state, LeaseState::Free { .. });
        Ok(())
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        self.word.release();
        if self.freed {
            // The count first, then the sleepers: a waiter counts itself
            // first, then sleeps only while the count is unchanged, so one of
            // the two sees the other. A waiter killed in its sleep leaves
            // the sleepers one too many: releases then make a wake-up call
            // that wakes nobody, never miss one.
            self.map.word32(RELEASES_AT).fetch_add(1, SeqCst);
            if self.map.word32(SLEEPERS_AT).load(SeqCst) > 0 {
                sys::futex_wake(self.map.word32(RELEASES_AT));
            }
        }
    }
}

fn slot_at(slot: u32) -> usize {
    SLOTS_AT + slot as usize * SLOT_STRIDE
}

/// A new file: the header, the section word free (zero), and a free lease
/// in both slots.
fn initial_content() -> [u8; FILE_LEN] {
    let mut bytes = [0u8; FILE_LEN];
    bytes[..HEADER.len()].copy_from_slice(HEADER);
    let free = NEW_LEASE.encode();
    for slot in 0..2 {
        bytes[slot_at(slot)..slot_at(slot) + LEASE_RECORD_LEN].copy_from_slice(free.as_bytes());
    }
    bytes
}

/// Whether `now`, a file found at the lock's path, is the file `mapped`,
/// still as long as the mapping.
fn is_whole(now: &FileStat, mapped: &FileStat) -> bool {
    now.same_file(mapped) && now.size >= FILE_LEN as u64
}

impl Shm {
    /// The mapping of the file at the path, opened (and made, if missing)
    /// the first time and again whenever the path has come to name another
    /// file (a cleaner of `/tmp` removed it and someone made it anew). The
    /// file is judged again as it is now, at every call whose last look is
    /// no longer believed ([`RecentLook`]): its length (a mapping past its
    /// end would fault), its owner and bits (`chmod` since it was mapped);
    /// its header (written over in place), at every call.
    fn mapping(&mut self) -> Result<&SharedMapping, Error> {
        let now = MonoTime::now();
        let believed =
            self.mapped.as_ref().is_some_and(|mapped| mapped.is_here() && mapped.looked.get().is_believed(now));
        if !believed {
            self.looked_in_this_call = true;
            self.look_at_path(now)?;
        }
        let Some(mapped) = &self.mapped else { return Err(Error::not_a_lock(FileRole::Lock)) };
        let mut header = [0u8; HEADER.len()];
        mapped.map.read_bytes(0, &mut header);
        if !header.starts_with(b"shm ") {
            // Written over since it was mapped, as a new handle would find it.
            return Err(Error::not_a_lock(FileRole::Lock));
        }
        if header != *HEADER {
            // Another version of the format: the layout after the header is
            // not known to be this one.
            return Err(Error::corrupt(FileRole::Lock, CorruptKind::Record));
        }
        if core::mem::take(&mut self.arming) {
            self.armed_at = Some(mapped.map.word32(RELEASES_AT).load(SeqCst));
        }
        Ok(&mapped.map)
    }

    /// Judges the file at the path as it is `now`: keeps the mapping if it
    /// is still of that file, whole, or maps the file anew.
    fn look_at_path(&mut self, now: MonoTime) -> Result<(), Error> {
        // A file cut short since it was mapped is opened again, as a new
        // handle would open it, and judged by what it holds now, without a
        // touch of the page past its end.
        let still_mapped = self
            .mapped
            .as_ref()
            .filter(|mapped| mapped.is_here())
            .and_then(|mapped| Shm::whole_at(&self.path, &mapped.file).map(|at_path| (mapped, at_path)));
        if let Some((mapped, at_path)) = still_mapped {
            // Its owner may have changed its bits since it was mapped.
            self.sharing.check_locked(FileRole::Lock, &at_path)?;
            mapped.looked.set(RecentLook::made(now));
        } else {
            self.mapped = None;
            // Each host would map a page of its own: two holders.
            let (fd, file) = files::open_state_file_on_one_host(
                &self.path,
                FileRole::Lock,
                self.sharing,
                &initial_content(),
                0,
                "a shm lock on a file system shared with other hosts or served from user space",
            )?;
            if file.size < FILE_LEN as u64 {
                return Err(Error::corrupt(FileRole::Lock, CorruptKind::Record));
            }
            let Some(incarnation) = crate::process::incarnation() else {
                // A child would take its parent's mapping, kept from it, for
                // its own.
                return Err(Error::Unsupported(crate::error::Unsupported::Here(
                    "a shm lock where a child of fork cannot be told from its parent (no page wiped on fork, no /proc)",
                )));
            };
            let io = |e| FileError::io(FileRole::Lock, e);
            let map = SharedMapping::new(&fd, FILE_LEN).map_err(io)?;
            map.keep_from_children().map_err(io)?;
            let in_word = Tag::of_word(map.word64(SECTION_AT).load(SeqCst));
            let tag = match Tag::draw(&fd, in_word) {
                Ok(tag) => tag,
                // Every byte drawn locked: someone locks the file's bytes
                // wholesale.
                Err(sys::Errno::EAGAIN) => return Err(Error::Busy(Contention::GuardHeld)),
                Err(e) => return Err(io(e)),
            };
            // The descriptor goes; the mapping keeps the description, and
            // with it the tag's lock, where the file mapped is the file
            // opened. Overlayfs maps the file beneath instead: there the
            // lock would go now, and with it what tells this handle alive.
            drop(fd);
            let reopened = (OnDisk { path: &self.path, file: &file }).reopen();
            let Some(seen_by_others) = reopened.map_err(|e| FileError::from_errno(FileRole::Lock, &self.path, e))?
            else {
                // Replaced meanwhile: the next attempt judges the new file.
                return Err(Error::Busy(Contention::Raced));
            };
            if !tag.is_locked_through(&seen_by_others).map_err(io)? {
                return Err(Error::Unsupported(crate::error::Unsupported::Here(
                    "a shm lock on a file system that maps another file than the one opened (overlayfs)",
                )));
            }
            let map = core::mem::ManuallyDrop::new(map);
            self.mapped = Some(Mapped { map, file, tag, incarnation, looked: RecentLook::made(now).into() });
        }
        Ok(())
    }

    /// `op` on the file as last looked at. An error about what the file
    /// holds or who may write it is reported only as the file at the path
    /// is now: if the call believed an earlier look, it is made again after
    /// a look (the operator may just have removed a damaged file). Only for
    /// operations that change nothing before they fail so; not for a
    /// system call's failure, which a second run past the deadline would
    /// hide.
    fn on_file<T>(&mut self, mut op: impl FnMut(&mut Shm) -> Result<T, Error>) -> Result<T, Error> {
        self.looked_in_this_call = false;
        let arming = self.arming;
        match op(self) {
            Err(e) if e.file().is_some() && e.errno().is_none() && !self.looked_in_this_call => {
                if let Some(mapped) = &self.mapped {
                    mapped.looked.take();
                }
                // The count of releases is read again, from the file judged.
                if arming {
                    self.arming = true;
                    self.armed_at = None;
                }
                op(self)
            }
            result => result,
        }
    }

    /// The file at the path as it is now, if it is still the file mapped,
    /// whole: a page of a file cut short since it was mapped must not be
    /// touched.
    fn whole_at(path: &CPath, mapped: &FileStat) -> Option<FileStat> {
        sys::lstat(path).ok().filter(|now| is_whole(now, mapped))
    }

    /// Takes the section word by `cx.deadline` and reads the lease and the
    /// time.
    fn section(&mut self, cx: &Context<'_>) -> Result<Section<'_>, Error> {
        self.mapping()?;
        let Some(mapped) = &self.mapped else { return Err(Error::not_a_lock(FileRole::Lock)) };
        let map = &*mapped.map;
        let word = SectionWord::at(map, SECTION_AT, mapped.tag);
        match word.take(cx.me.process.pid, cx.deadline, &mut OnDisk { path: &self.path, file: &mapped.file }) {
            // A holder that died mid-change left the active slot whole.
            Ok(_) => {}
            Err(NotTaken::TimedOut) => return Err(Error::Busy(Contention::GuardHeld)),
            Err(NotTaken::Unasked(e)) => return Err(FileError::from_errno(FileRole::Lock, &self.path, e)),
            // The next attempt judges the file as it is now.
            Err(NotTaken::FileChanged) => {
                mapped.looked.take();
                return Err(Error::Busy(Contention::Raced));
            }
        }
        let seen = &mut self.seen;
        let mut section = Section { map, word, state: NEW_LEASE, now: Moment::now(cx.me.boot), freed: false, seen };
        let mut line = [0u8; LEASE_RECORD_LEN];
        map.read_bytes(slot_at(map.word32(ACTIVE_AT).load(SeqCst) & 1), &mut line);
        section.state = match &*section.seen {
            Some(seen) if seen.bytes == line => seen.state,
            _ => {
                // The file is ours (its header said so): a slot that holds no
                // lease line is damage, not someone else's file. An error
                // lets the word go as the section drops.
                let state = LeaseState::parse(&line).map_err(|e| match e.kind() {
                    ErrorKind::NotALock => Error::corrupt(FileRole::Lock, CorruptKind::Record),
                    _ => e,
                })?;
                *section.seen = Some(SeenLine { bytes: line, state });
                state
            }
        };
        Ok(section)
    }
}

impl Strategy for Shm {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Shm, Error> {
        let path = spec.file_target()?.clone();
        Ok(Shm {
            path,
            sharing,
            signal: spec.options.signal,
            mapped: None,
            armed_at: None,
            arming: false,
            looked_in_this_call: false,
            seen: None,
        })
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        self.on_file(|shm| {
            let signal = shm.signal;
            let mut section = shm.section(cx)?;
            let taken = section.state.take(cx, nonce, ttl, section.now, signal)?;
            section.write(&LeaseState::Held(taken.record))?;
            Ok(taken)
        })
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        self.on_file(|shm| {
            let section = shm.section(cx)?;
            Ok(section.state.inspection(cx, section.now))
        })
    }
}

impl Prolong for Shm {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        self.on_file(|shm| {
            let mut section = shm.section(cx)?;
            let (outcome, renewed) = section.state.renew(held, section.now, ttl);
            if let Some(renewed) = renewed {
                section.write(&LeaseState::Held(renewed))?;
                held.expires = renewed.expires;
            }
            Ok(outcome)
        })
    }
}

impl Cooldown for Shm {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        self.on_file(|shm| {
            let mut section = shm.section(cx)?;
            let (outcome, free) = section.state.give_back(held, section.now, cooldown);
            if let Some(free) = free {
                section.write(&free)?;
            }
            Ok(outcome)
        })
    }
}

impl Break for Shm {
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        self.on_file(|shm| {
            let mut section = shm.section(cx)?;
            match section.state.broken() {
                Some(free) => {
                    section.write(&free)?;
                    Ok(true)
                }
                None => Ok(false),
            }
        })
    }
}

impl Commit for Shm {
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        // The action is not run twice: only the judging of the file and its
        // lease is.
        self.on_file(|shm| shm.section(cx).map(drop))?;
        let section = self.section(cx)?;
        commit_if_current(section.state.ours(held), section.now, action)
    }
}

impl Files for Shm {
    fn path(&self) -> &CPath {
        &self.path
    }
}

impl OwnWake for Shm {
    fn wake_source(&mut self) -> &mut dyn WakeSource {
        self
    }

    fn arm_for_attempt(&mut self) -> Result<(), Error> {
        self.armed_at = None;
        self.arming = true;
        Ok(())
    }
}

/// Waiting for a release: a futex wait on the count of releases, which a
/// release moves on and wakes. A lock whose file cannot be mapped yet (its
/// directory missing) is waited for by timeouts: the attempt reports why.
impl WakeSource for Shm {
    fn arm(&mut self) -> Result<(), Error> {
        // Read by `mapping`, which judges the file first: one cut short in
        // place since the last call is not touched.
        self.arm_for_attempt()?;
        let _ = self.mapping();
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        if self.arming {
            // No attempt has judged the file since it was armed.
            let _ = self.mapping();
        }
        let (Some(seen), Some(mapped)) = (self.armed_at, self.mapped.as_ref().filter(|m| m.is_here())) else {
            sys::sleep(timeout);
            return Wake::TimedOut;
        };
        let (releases, sleepers) = (mapped.map.word32(RELEASES_AT), mapped.map.word32(SLEEPERS_AT));
        sleepers.fetch_add(1, SeqCst);
        let woke = match sys::futex_wait(releases, seen, timeout) {
            FutexWait::TimedOut => Wake::TimedOut,
            FutexWait::Woken | FutexWait::Interrupted => Wake::Woken,
        };
        let now = MonoTime::now();
        let mut fresh_look = None;
        if !mapped.looked.get().is_believed(now) {
            // Asleep for longer than a look is believed: the file is looked
            // at before its page is touched again.
            let Some(at_path) = Shm::whole_at(&self.path, &mapped.file) else {
                // Cut short while we slept: the page is not touched again;
                // the attempt that follows judges the file as it is now.
                self.armed_at = None;
                return Wake::Woken;
            };
            // Whole, and with bits the lock allows: the look serves the
            // attempt that follows.
            fresh_look = self.sharing.check_locked(FileRole::Lock, &at_path).is_ok().then_some(RecentLook::made(now));
        }
        sleepers.fetch_sub(1, SeqCst);
        let released = releases.load(SeqCst) != seen;
        if let Some(look) = fresh_look {
            mapped.looked.set(look);
        }
        if released {
            return Wake::Woken;
        }
        woke
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MonoTime;
    use crate::lock::Lock;
    use crate::owner::Owner;
    use std::format;
    use std::path::PathBuf;
    use std::string::String;

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("lockcore-shm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        Dir(dir)
    }

    fn spec(dir: &Dir, options: &str) -> String {
        format!("shm:{}{options}", dir.0.join("lock").display())
    }

    fn mapped(lock: &mut Lock) -> &mut Shm {
        match lock.strategy_for_tests() {
            crate::registry::AnyStrategy::Shm(shm) => shm,
            other => panic!("not a shm lock: {other:?}"),
        }
    }

    /// Another handle's tag on the same file, as another process would draw
    /// it, held while the descriptor is open.
    fn other_tag(shm: &Shm) -> (sys::Fd, Tag) {
        let fd = sys::open(&shm.path, libc::O_RDWR, 0).unwrap();
        let tag = Tag::draw(&fd, 0).unwrap();
        (fd, tag)
    }

    /// The file behind the handle's page.
    fn on_disk(shm: &Shm) -> OnDisk<'_> {
        OnDisk { path: &shm.path, file: &shm.mapped.as_ref().unwrap().file }
    }

    /// The file behind a page, as if cut short during every sleep.
    struct CutShort<'a>(OnDisk<'a>);

    impl PageFile for CutShort<'_> {
        fn still_whole(&mut self) -> bool {
            false
        }

        fn reopen(&mut self) -> sys::SysResult<Option<sys::Fd>> {
            self.0.reopen()
        }
    }

    /// A file that cannot be opened again: too many files open.
    struct Unopenable;

    impl PageFile for Unopenable {
        fn still_whole(&mut self) -> bool {
            true
        }

        fn reopen(&mut self) -> sys::SysResult<Option<sys::Fd>> {
            Err(sys::Errno(libc::EMFILE))
        }
    }

    /// A process killed while it holds the section word, half-way through
    /// writing the spare slot: the next one takes the word from the dead,
    /// and finds the lease whole.
    #[test]
    fn a_death_inside_a_change_leaves_the_lease_whole() {
        let d = dir("death");
        let mut lock = Lock::open(spec(&d, "?ttl=30s")).unwrap();
        let first = lock.acquire(Some(Duration::from_secs(5))).unwrap();
        let shm = mapped(&mut lock);
        let far = MonoTime::now().saturating_add(Duration::from_secs(5));
        // SAFETY: the child maps the file, takes the word, scribbles and
        // exits, as another process would: no allocation, no lock that
        // another thread of the harness might hold.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let took = (|| {
                let fd = sys::open(&shm.path, libc::O_RDWR, 0).ok()?;
                let map = SharedMapping::new(&fd, FILE_LEN).ok()?;
                let tag = Tag::draw(&fd, 0).ok()?;
                SectionWord::at(&map, SECTION_AT, tag).take(sys::getpid(), far, &mut on_disk(shm)).ok()?;
                let spare = (map.word32(ACTIVE_AT).load(SeqCst) & 1) ^ 1;
                map.write_bytes(slot_at(spare), b"lease 2 held half-writ");
                Some(())
            })();
            // SAFETY: ends the child at once, holding the word: the death
            // under test (or, had it not got the word, a failure below).
            unsafe { libc::_exit(if took.is_some() { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child took the word");
        let mapping = shm.mapped.as_ref().unwrap();
        let word = SectionWord::at(&mapping.map, SECTION_AT, mapping.tag);
        let pid = sys::getpid();
        let taken = word.take(pid, far, &mut on_disk(shm));
        assert_eq!(taken, Ok(section::Taken::FromTheDead), "taken from the dead");
        word.release();
        assert_eq!(word.take(pid, far, &mut on_disk(shm)), Ok(section::Taken::Free), "and let go as usual");
        word.release();
        let seen = lock.inspect().unwrap();
        assert_eq!(seen.holder.map(|h| h.this_handle), Some(true), "the lease is still ours: {seen:?}");
        assert_eq!(seen.last_fence, first.fence);
        assert_eq!(lock.release(Duration::ZERO).unwrap(), ReleaseOutcome::Released);
    }

    /// The lock on a tag's byte outlasts the descriptor that took it, for
    /// as long as the page is mapped, and goes with the mapping: what a
    /// handle holds and what others see of it.
    #[test]
    fn a_tag_is_held_for_as_long_as_the_page_is_mapped() {
        with_section_word("tag-held", |shm, _, _, _| {
            let fd = sys::open(&shm.path, libc::O_RDWR, 0).unwrap();
            let map = SharedMapping::new(&fd, FILE_LEN).unwrap();
            let tag = Tag::draw(&fd, 0).unwrap();
            drop(fd);
            let byte = section::TAG_BYTES_AT + u64::from(tag.0);
            let look = || sys::ofd_byte_locked_elsewhere(&on_disk(shm).reopen().unwrap().unwrap(), byte).unwrap();
            assert!(look(), "held through the mapping");
            drop(map);
            assert!(!look(), "let go with it");
        });
    }

    /// A child of fork inherits neither the page nor its tag: it maps the
    /// file anew under a tag of its own the first time it uses the lock (a
    /// tag shared with a parent that lives on would make the child, dead in
    /// a change, look alive), and a child that never uses it keeps nothing
    /// of the parent's alive.
    #[test]
    fn a_child_of_fork_draws_a_tag_of_its_own() {
        let d = dir("fork-tag");
        let mut lock = Lock::open(spec(&d, "")).unwrap();
        lock.inspect().unwrap();
        let parents = mapped(&mut lock).mapped.as_ref().unwrap().tag;
        // SAFETY: the child uses the lock and exits at once; the lock's
        // calls allocate nothing.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let looked = lock.inspect().is_ok();
            let own = mapped(&mut lock).mapped.as_ref().map(|m| (m.tag, m.is_here()));
            let fine = looked && matches!(own, Some((tag, true)) if tag != parents);
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(if fine { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child drew its own tag");
        assert_eq!(mapped(&mut lock).mapped.as_ref().unwrap().tag, parents, "the parent keeps its own");
    }

    /// Armed for the attempt of its own handle, the wake source reads the
    /// count of releases in that attempt: a release between the attempt
    /// and the wait still wakes the waiter.
    #[test]
    fn a_release_after_an_attempt_armed_for_wakes_the_waiter() {
        let d = dir("armed-for-attempt");
        let mut holder = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        holder.try_acquire().unwrap();
        let mut waiter = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        waiter.inspect().unwrap();
        mapped(&mut waiter).arm_for_attempt().unwrap();
        assert!(mapped(&mut waiter).arming, "armed, with nothing read yet");
        assert!(matches!(waiter.try_acquire(), Err(Error::Busy(_))));
        assert!(!mapped(&mut waiter).arming, "the attempt read the count");
        assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        assert_eq!(mapped(&mut waiter).wait(Duration::from_secs(30)), Wake::Woken);
        waiter.try_acquire().expect("free after the release");
    }

    /// A holder that is provably dead loses the lock at once, whatever its
    /// TTL.
    #[test]
    fn a_dead_holder_is_broken_at_once() {
        let d = dir("dead-holder");
        let mut gone = Owner::current().unwrap();
        gone.process.pid = crate::process::dead_pid();
        let parsed = crate::spec::Spec::parse(spec(&d, "?ttl=1h").as_bytes()).unwrap();
        let mut dead = Lock::with_owner(parsed, gone).unwrap();
        let theirs = dead.try_acquire().unwrap();
        core::mem::forget(dead);
        let mut lock = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        let mine = lock.try_acquire().expect("a dead holder's lock is free");
        assert!(mine.fence > theirs.fence);
    }

    /// Runs `test` on the section word of a new lock's page (the handle,
    /// the page, the word, and this process's pid).
    fn with_section_word(name: &str, test: impl FnOnce(&Shm, &SharedMapping, &SectionWord<'_>, i32)) {
        let d = dir(name);
        let mut lock = Lock::open(spec(&d, "")).unwrap();
        lock.inspect().unwrap();
        let shm = mapped(&mut lock);
        let mapping = shm.mapped.as_ref().unwrap();
        test(shm, &mapping.map, &SectionWord::at(&mapping.map, SECTION_AT, mapping.tag), sys::getpid());
    }

    /// A word is taken only from a holder whose tag's byte nobody holds:
    /// never from a live handle, whatever its pid looks like here (dead,
    /// or another namespace's); at once from a handle whose page is gone
    /// (its process died), and from a word no holder wrote.
    #[test]
    fn a_word_is_taken_only_from_a_holder_whose_tag_nobody_holds() {
        with_section_word("judged", |shm, map, word, pid| {
            let soon = || MonoTime::now().saturating_add(Duration::from_millis(100));
            let far = || MonoTime::now().saturating_add(Duration::from_secs(10));
            let gone = u64::from(crate::process::dead_pid() as u32);
            let (live, tag) = other_tag(shm);
            let holding = (u64::from(tag.0) << 32) | gone;
            map.word64(SECTION_AT).store(holding, SeqCst);
            assert_eq!(word.take(pid, soon(), &mut on_disk(shm)), Err(NotTaken::TimedOut));
            // And a file cut short during the wait is not touched again.
            assert_eq!(word.take(pid, far(), &mut CutShort(on_disk(shm))), Err(NotTaken::FileChanged));
            // A holder that cannot be asked about lives, and the deadline
            // says why it was not asked.
            assert_eq!(word.take(pid, soon(), &mut Unopenable), Err(NotTaken::Unasked(sys::Errno(libc::EMFILE))));
            drop(live);
            assert_eq!(word.take(pid, far(), &mut on_disk(shm)), Ok(section::Taken::FromTheDead));
            word.release();
            // Written over: no tag of a holder, whatever its pid.
            map.word64(SECTION_AT).store((0x1234 << 32) | u64::from(pid as u32), SeqCst);
            assert_eq!(word.take(pid, far(), &mut on_disk(shm)), Ok(section::Taken::FromTheDead));
            word.release();
            assert_eq!(map.word64(SECTION_AT).load(SeqCst), 0);
        });
    }

    /// A tag is never one another handle holds, nor the one in the word;
    /// a file whose bytes are all locked by someone gives no tag.
    #[test]
    fn tags_are_drawn_apart() {
        with_section_word("tags", |shm, map, _, _| {
            let tags: std::vec::Vec<(sys::Fd, Tag)> = (0..50).map(|_| other_tag(shm)).collect();
            let mut seen: std::vec::Vec<Tag> = tags.iter().map(|(_, t)| *t).collect();
            seen.push(shm.mapped.as_ref().unwrap().tag);
            seen.sort_unstable_by_key(|t| t.0);
            seen.dedup();
            assert_eq!(seen.len(), 51, "every handle holds its own tag");
            let held = tags[0].1 .0;
            map.word64(SECTION_AT).store(u64::from(held) << 32 | 1, SeqCst);
            let fd = sys::open(&shm.path, libc::O_RDWR, 0).unwrap();
            assert!(Tag::draw(&fd, held).is_ok_and(|t| t.0 != held));
            map.word64(SECTION_AT).store(0, SeqCst);
            // A file whose bytes someone locked wholesale, past every tag.
            let other = CPath::from_parts(&[shm.path.as_bytes(), b".wholesale"]).unwrap();
            let wholesale = sys::open(&other, libc::O_RDWR | libc::O_CREAT, 0o600).unwrap();
            assert_eq!(sys::try_ofd_lock(&wholesale, sys::OfdLock::Exclusive), Ok(true));
            let fd = sys::open(&other, libc::O_RDWR, 0).unwrap();
            assert_eq!(Tag::draw(&fd, 0), Err(sys::Errno::EAGAIN));
        });
    }

    /// A holder that had the word taken over (written over, then taken)
    /// neither lets the new holder's word go nor makes its own change
    /// current when it goes on.
    #[test]
    fn a_holder_whose_word_was_taken_over_changes_nothing() {
        let d = dir("taken-over");
        let mut lock = Lock::open(spec(&d, "?ttl=30s")).unwrap();
        let before = lock.inspect().unwrap();
        let shm = mapped(&mut lock);
        let far = MonoTime::now().saturating_add(Duration::from_secs(5));
        let (_other, other) = other_tag(shm);
        let mapping = shm.mapped.as_ref().unwrap();
        let map = &*mapping.map;
        let stale = SectionWord::at(map, SECTION_AT, mapping.tag);
        assert_eq!(stale.take(sys::getpid(), far, &mut on_disk(shm)), Ok(section::Taken::Free));
        assert!(stale.is_held());
        let new_holder = (u64::from(other.0) << 32) | u64::from(sys::getpid() as u32);
        map.word64(SECTION_AT).store(new_holder, SeqCst);
        assert!(!stale.is_held());
        let active = map.word32(ACTIVE_AT).load(SeqCst);
        let mut seen = None;
        let mut section =
            Section { map, word: stale, state: NEW_LEASE, now: Moment::now(None), freed: false, seen: &mut seen };
        let free = LeaseState::Free { not_before: None, fence: 1 << 40 };
        assert_eq!(section.write(&free), Err(Error::Busy(Contention::Raced)));
        drop(section);
        assert_eq!(map.word32(ACTIVE_AT).load(SeqCst), active, "the change was not made current");
        assert_eq!(map.word64(SECTION_AT).load(SeqCst), new_holder, "the new holder's word stands");
        map.word64(SECTION_AT).store(0, SeqCst);
        assert_eq!(lock.inspect().unwrap().last_fence, before.last_fence);
    }

    #[test]
    fn a_sleeper_wakes_when_the_lease_is_let_go() {
        let d = dir("wake");
        let mut holder = Lock::open(spec(&d, "")).unwrap();
        holder.try_acquire().unwrap();
        let mut waiter = Lock::open(spec(&d, "")).unwrap();
        assert!(waiter.try_acquire().is_err());
        let shm = mapped(&mut waiter);
        shm.arm().unwrap();
        assert_eq!(shm.wait(Duration::from_millis(1)), Wake::TimedOut, "nothing let go yet");
        std::thread::scope(|scope| {
            let sleeper = scope.spawn(move || shm.wait(Duration::from_secs(60)));
            std::thread::sleep(Duration::from_millis(20));
            holder.release(Duration::ZERO).unwrap();
            assert_eq!(sleeper.join().unwrap(), Wake::Woken);
        });
        assert!(waiter.try_acquire().is_ok());
    }

    #[test]
    fn a_file_that_is_no_shm_lock_is_left_alone() {
        let d = dir("foreign");
        let path = d.0.join("lock");
        std::fs::write(&path, b"precious data\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let mut lock = Lock::open(spec(&d, "")).unwrap();
        assert_eq!(lock.try_acquire().unwrap_err().kind(), ErrorKind::NotALock);
        assert_eq!(std::fs::read(&path).unwrap(), b"precious data\n");
        // Ours, but cut short: a mapping would fault past its end.
        std::fs::write(&path, &initial_content()[..1000]).unwrap();
        assert_eq!(lock.try_acquire().unwrap_err().kind(), ErrorKind::Corrupt(CorruptKind::Record));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1000, "nothing was written");
    }

    #[test]
    fn a_handle_judges_its_file_again_once_its_look_is_no_longer_believed() {
        let d = dir("believed");
        let path = d.0.join("lock");
        let mut lock = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        let first = lock.try_acquire().unwrap().fence;
        lock.release(Duration::ZERO).unwrap();

        // Replaced at its path, and held there by another handle.
        std::fs::rename(&path, d.0.join("old")).unwrap();
        let mut other = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        let held = other.try_acquire().unwrap().fence;
        assert!(held > first);
        std::thread::sleep(crate::LOOK_BELIEVED_FOR);
        assert_eq!(lock.inspect().unwrap().last_fence, held, "the new file is the one judged");
        assert_eq!(lock.try_acquire().unwrap_err().kind(), ErrorKind::Busy);
        other.release(Duration::ZERO).unwrap();
        assert!(lock.try_acquire().unwrap().fence > held);
        lock.release(Duration::ZERO).unwrap();

        // Cut short in place: judged, not touched past its end (which would
        // kill this process with SIGBUS).
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(1000).unwrap();
        std::thread::sleep(crate::LOOK_BELIEVED_FOR);
        assert_eq!(lock.try_acquire().unwrap_err().kind(), ErrorKind::Corrupt(CorruptKind::Record));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1000, "nothing was written");
    }

    #[test]
    fn an_error_from_a_believed_look_is_checked_by_a_look_before_it_is_told() {
        let d = dir("error-looked");
        let path = d.0.join("lock");
        let mut lock = Lock::open(spec(&d, "")).unwrap();
        lock.try_acquire().unwrap();
        lock.release(Duration::ZERO).unwrap();
        // Damaged in place, then removed by the operator: the very next call
        // works on a new file, however soon it comes.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..4].copy_from_slice(b"junk");
        std::fs::write(&path, &bytes).unwrap();
        std::fs::remove_file(&path).unwrap();
        lock.try_acquire().expect("a new file at the path");
        lock.release(Duration::ZERO).unwrap();
    }

    #[test]
    fn a_lease_line_changed_since_a_handle_read_it_is_read_anew() {
        let d = dir("seen");
        let mut lock = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        let mut other = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        let first = lock.try_acquire().unwrap().fence;
        lock.release(Duration::ZERO).unwrap();
        // Changed by another handle: held, then let go at a later fence.
        let held = other.try_acquire().unwrap().fence;
        let seen = lock.inspect().unwrap();
        assert!(seen.holder.is_some() && seen.last_fence == held, "{seen:?}");
        other.release(Duration::ZERO).unwrap();
        assert!(held > first);
        assert!(lock.inspect().unwrap().holder.is_none());
        // Written over in place, one byte of the fence: the line read is
        // judged as it is, not as it was.
        let shm = mapped(&mut lock);
        let map = &*shm.mapped.as_ref().unwrap().map;
        let at = slot_at(map.word32(ACTIVE_AT).load(SeqCst) & 1) + b"lease 2 free ".len();
        map.write_bytes(at, b"x");
        assert_eq!(lock.inspect().unwrap_err().kind(), ErrorKind::Corrupt(CorruptKind::Record));
    }

    #[test]
    fn a_commit_after_a_damaged_file_was_removed_judges_the_new_one() {
        let d = dir("commit-looked");
        let path = d.0.join("lock");
        let mut lock = Lock::open(spec(&d, "?ttl=1h")).unwrap();
        lock.try_acquire().unwrap();
        // The active lease line damaged in place, then the file removed by
        // the operator: the commit, however soon it comes, is judged by the
        // file at the path now, which this handle does not hold.
        let shm = mapped(&mut lock);
        let map = &*shm.mapped.as_ref().unwrap().map;
        map.write_bytes(slot_at(map.word32(ACTIVE_AT).load(SeqCst) & 1), b"junk");
        std::fs::remove_file(&path).unwrap();
        let mut ran = false;
        let outcome = lock.run_while_held(&mut || {
            ran = true;
            Ok(())
        });
        assert_eq!(outcome, Ok(CommitOutcome::Lost));
        assert!(!ran, "the action ran on a lock not held");
    }

    #[test]
    fn a_new_file_holds_a_free_lease_in_both_slots() {
        let bytes = initial_content();
        assert!(bytes.starts_with(b"shm 3 "));
        for slot in 0..2 {
            let line = &bytes[slot_at(slot)..slot_at(slot) + LEASE_RECORD_LEN];
            assert_eq!(LeaseState::parse(line), Ok(NEW_LEASE));
        }
    }
}

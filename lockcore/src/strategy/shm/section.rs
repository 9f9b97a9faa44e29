//! The section word: what orders the changes to a `shm` lock's page, held
//! for the few hundred nanoseconds of one change.
//!
//! It is a word of the page, taken with one compare-and-swap and waited for
//! on a futex, that names its holder: the low half holds the holder's pid
//! (and a bit that says someone sleeps on it), the high half the holder's
//! tag ([`Tag`]). Every handle that maps the page holds, for as long as it
//! keeps the page mapped, an open-file-description lock on one byte past
//! the file's end, chosen by its tag, that no other handle holds. The
//! kernel lets that lock go when nothing refers to the description any
//! more: the handle's mapping, its only reference once it is made, is
//! undone when the process ends, however it ends, or calls `exec`, and no
//! child of `fork()` inherits it. Nothing but holding that lock makes the
//! byte look locked. So a process that finds the word held by the same
//! holding for a while asks the kernel, through a description of its own
//! made for the question, whether the byte of its tag is locked, and takes
//! the word only if it is not: its holder is gone.
//!
//! No pid is judged: a holder in another pid namespace (where its pid means
//! another process here, or none), a pid taken by another process since,
//! and a holder stopped before it could name itself anywhere are all told
//! apart by the lock alone. A word written over with anything but a live
//! handle's tag names nobody who holds a byte, and is taken.
//!
//! A holder lets the word go only if it still holds it, and looks again
//! that it holds the word just before it writes a change and makes it
//! current: a word taken from it in error (written over, then taken) leaves
//! its change uncounted, unless it was stopped between that look and the
//! write.
//!
//! Nothing in the word is a pointer and no list of it is kept by anyone
//! (glibc's robust mutexes keep one, through pointers stored in the
//! mutex, which a scribble on the file turns into a crash): whatever the
//! page holds, taking the word is a compare-and-swap and a timed futex
//! wait, and ends by the caller's deadline.

use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::SeqCst;
use core::time::Duration;

use crate::clock::MonoTime;
use crate::sys::{self, Errno, Fd, SharedMapping, SysResult};

/// The file behind the page, as a waiter for the word needs it.
pub trait PageFile {
    /// Whether the path still names the file mapped, whole: asked after
    /// every sleep, before the page is touched again.
    fn still_whole(&mut self) -> bool;
    /// A new open file description of the file mapped; `None` if the path
    /// names another file now, an error if it could not be opened.
    fn reopen(&mut self) -> SysResult<Option<Fd>>;
}

/// How long a holding must last, unchanged, before its holder is looked
/// at: a change takes microseconds, and a look is a system call.
const JUDGE_AFTER: Duration = Duration::from_millis(1);

/// The bit of the low half that says someone sleeps on the word.
const SLEEPING: u64 = 1 << 31;

/// Where the tags' bytes start in the file: far past the end of its page,
/// where no byte is ever read or written.
pub const TAG_BYTES_AT: u64 = 1 << 32;

/// The bit set in every tag: a word whose high half lacks it was written
/// by no holder.
const TAG_BIT: u32 = 1 << 31;

/// How many tags a handle draws before it gives up: one drawn is already
/// held by another handle with a chance of one in millions.
const TAG_DRAWS: usize = 8;

/// The bytes the word takes.
pub const LEN: usize = 8;

/// A handle's tag: the high half of every word it writes, and a byte of the
/// file, past its end, that it holds locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub(super) u32);

impl Tag {
    /// Draws a tag that no other handle holds, and locks its byte through
    /// `fd`, a description of the file that this handle alone opened and
    /// maps (the mapping keeps the lock once the descriptor is closed).
    /// `avoid`: the tag of the word now, whose byte is free if its holder
    /// died in a change, and must stay free for the next process to find
    /// it so. `EAGAIN` when every draw found its byte locked.
    pub fn draw(fd: &Fd, avoid: u32) -> SysResult<Tag> {
        for _ in 0..TAG_DRAWS {
            let mut drawn = [0u8; 4];
            crate::process::random(&mut drawn)?;
            let tag = u32::from_ne_bytes(drawn) | TAG_BIT;
            if tag != avoid && sys::try_ofd_lock_byte(fd, byte_of(tag))? {
                return Ok(Tag(tag));
            }
        }
        Err(Errno(libc::EAGAIN))
    }

    /// Whether this tag's byte shows locked through `fd`, a description
    /// of the file other than the one that locked it.
    pub fn is_locked_through(self, fd: &Fd) -> SysResult<bool> {
        sys::ofd_byte_locked_elsewhere(fd, byte_of(self.0))
    }

    /// The tag of the holding in `word`.
    pub fn of_word(word: u64) -> u32 {
        (word >> 32) as u32
    }
}

/// Where the byte of `tag` lies in the file.
fn byte_of(tag: u32) -> u64 {
    TAG_BYTES_AT + u64::from(tag)
}

/// The section word at `at` in a page, taken as the handle with tag `own`.
pub struct SectionWord<'m> {
    map: &'m SharedMapping,
    at: usize,
    own: Tag,
    /// The value of the word while this one holds it (0: not taken).
    holding: core::cell::Cell<u64>,
}

/// How a holding began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// From a holder that let the word go.
    Free,
    /// From a holder that is gone: it died in the middle of a change.
    FromTheDead,
}

/// Why the word was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotTaken {
    /// Still held at the deadline.
    TimedOut,
    /// Still held at the deadline, by a holder that could not be looked
    /// at: the file could not be opened again to ask (too many files open,
    /// a security module's refusal).
    Unasked(Errno),
    /// The page's file was cut short or replaced during the wait: the page
    /// is not to be touched again before it is judged anew.
    FileChanged,
}

impl<'m> SectionWord<'m> {
    /// The word at byte `at` of `map` (8-aligned), for the handle whose
    /// tag is `own`.
    pub fn at(map: &'m SharedMapping, at: usize, own: Tag) -> SectionWord<'m> {
        SectionWord { map, at, own, holding: core::cell::Cell::new(0) }
    }

    fn word(&self) -> &AtomicU64 {
        self.map.word64(self.at)
    }

    /// The half of the word a futex waits on: the pid and the sleeping bit.
    fn futex(&self) -> &core::sync::atomic::AtomicU32 {
        // The kernel compares and wakes this half; Rust code only ever
        // reaches the word as a whole, through `word`.
        let low_half = if cfg!(target_endian = "little") { 0 } else { 4 };
        self.map.word32(self.at + low_half)
    }

    /// Takes the word as process `pid` by `deadline`.
    pub fn take(&self, pid: i32, deadline: MonoTime, file: &mut dyn PageFile) -> Result<Taken, NotTaken> {
        let mine = (u64::from(self.own.0) << 32) | u64::from(pid as u32);
        // A free word is taken before any clock is read.
        if self.word().compare_exchange(0, mine, SeqCst, SeqCst).is_ok() {
            self.holding.set(mine);
            return Ok(Taken::Free);
        }
        // The holding seen, and since when.
        let mut seen = (0u64, MonoTime::now());
        // Why the last look at its holder could not be made, if it could not.
        let mut unasked = None;
        loop {
            let held = self.word().load(SeqCst);
            let now = MonoTime::now();
            if held == 0 {
                if self.word().compare_exchange(0, mine, SeqCst, SeqCst).is_ok() {
                    self.holding.set(mine);
                    return Ok(Taken::Free);
                }
                continue;
            }
            let holding = held & !SLEEPING;
            if holding != seen.0 {
                seen = (holding, now);
            } else if now.since(seen.1) >= JUDGE_AFTER {
                match judge(holding, file) {
                    Ok(true) => {
                        if self.word().compare_exchange(held, mine, SeqCst, SeqCst).is_ok() {
                            self.holding.set(mine);
                            return Ok(Taken::FromTheDead);
                        }
                        continue;
                    }
                    Ok(false) => unasked = None,
                    Err(e) => unasked = Some(e),
                }
            }
            if now >= deadline {
                return Err(unasked.map_or(NotTaken::TimedOut, NotTaken::Unasked));
            }
            let asleep = held | SLEEPING;
            if held != asleep && self.word().compare_exchange(held, asleep, SeqCst, SeqCst).is_err() {
                continue;
            }
            let nap = deadline.remaining_from(now).min(JUDGE_AFTER);
            // Woken, timed out or interrupted alike: the next round looks.
            let _ = sys::futex_wait(self.futex(), asleep as u32, nap);
            if !file.still_whole() {
                return Err(NotTaken::FileChanged);
            }
        }
    }

    /// Whether this one holds the word now: not if it never took it, let
    /// it go, or had it taken over.
    pub fn is_held(&self) -> bool {
        let mine = self.holding.get();
        mine != 0 && self.word().load(SeqCst) & !SLEEPING == mine
    }

    /// Lets the word go, if this one still holds it, and wakes whoever
    /// sleeps on it.
    pub fn release(&self) {
        let mine = self.holding.replace(0);
        if mine == 0 {
            return;
        }
        // Whoever else changes a word held as `mine` marks a sleeper once,
        // or takes it over: a few rounds at most.
        let mut held = self.word().load(SeqCst);
        while held & !SLEEPING == mine {
            match self.word().compare_exchange(held, 0, SeqCst, SeqCst) {
                Ok(_) => {
                    if held & SLEEPING != 0 {
                        sys::futex_wake(self.futex());
                    }
                    return;
                }
                Err(now) => held = now,
            }
        }
    }
}

/// Whether the holder of `holding` is gone: no description of `file` holds
/// the byte of its tag. One that cannot be asked about lives.
fn judge(holding: u64, file: &mut dyn PageFile) -> SysResult<bool> {
    let tag = Tag::of_word(holding);
    if tag & TAG_BIT == 0 {
        // No holder writes such a word: it was written over.
        return Ok(true);
    }
    // A description of our own, made for the question, holds no tag: every
    // tag's lock shows through it. A path that names another file now is
    // found out after the next sleep.
    let Some(fd) = file.reopen()? else { return Ok(false) };
    Tag(tag).is_locked_through(&fd).map(|locked| !locked)
}

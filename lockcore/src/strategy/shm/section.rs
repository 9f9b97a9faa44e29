//! The section word: what orders the changes to a `shm` lock's page, held
//! for the few hundred nanoseconds of one change.
//!
//! It is a word of the page, taken with one compare-and-swap and waited for
//! on a futex, that names its holder: the low half holds the holder's pid
//! (and a bit that says someone sleeps on it), the high half a tag for
//! this one holding: a fold of the holder's pid namespace, and bits drawn
//! at random. Beside it the holder then writes who it is (pid namespace,
//! start time) under the same tag. A process that finds the word held by
//! the same holding for a while looks at that holder, and takes the word
//! from it only if it is provably gone: by pid and start time, in its own
//! pid namespace, and only if the holder named itself under the tag of
//! this holding. A holder killed between taking the word and naming itself
//! (or between unnaming itself and letting the word go) is judged by its
//! pid alone, if the tag says it was of the judge's namespace. A holder
//! from another namespace is never judged by a pid, which means something
//! else here, nor is a word whose tag carries no fold of the judge's
//! namespace and names nobody: a holder of another namespace stopped
//! before it named itself looks exactly like that, and so does a word
//! written over with something else, which only removing the file mends.
//!
//! A holder lets the word go (and its name beside it) only if it still
//! holds it, and looks again that it holds the word just before it writes
//! a change and makes it current: a holder stopped in the middle and taken
//! over from in error (the rare case above) finds, when it goes on, that
//! its change no longer counts, unless it was stopped between that look
//! and the write.
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
use crate::owner::ProcessId;
use crate::sys::{self, SharedMapping};

/// How long a holding must last, unchanged, before its holder is looked
/// at: a change takes microseconds, and a look reads `/proc`.
const JUDGE_AFTER: Duration = Duration::from_millis(1);

/// The bit of the low half that says someone sleeps on the word.
const SLEEPING: u64 = 1 << 31;

/// The section word and the holder's name beside it, at `at` in a page.
pub struct SectionWord<'m> {
    map: &'m SharedMapping,
    at: usize,
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
    /// The page's file was cut short or replaced during the wait: the page
    /// is not to be touched again before it is judged anew.
    FileChanged,
}

/// The bytes the word and the holder's name take from `at` on.
pub const LEN: usize = 32;

/// Where the holder's name lies, from the word: the holding it names (the
/// word's value, written last), then the holder's pid namespace and start
/// time.
pub(super) const NAMED_AT: usize = 8;
pub(super) const NAMESPACE_AT: usize = 16;
pub(super) const START_AT: usize = 24;
const _: () = assert!(START_AT + 8 == LEN);

impl<'m> SectionWord<'m> {
    /// The word at byte `at` of `map` (8-aligned, [`LEN`] bytes).
    pub fn at(map: &'m SharedMapping, at: usize) -> SectionWord<'m> {
        SectionWord { map, at, holding: core::cell::Cell::new(0) }
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

    /// Takes the word as process `me` by `deadline`; `still_whole` is asked
    /// after every sleep, before the page is touched again.
    pub fn take(
        &self,
        me: &ProcessId,
        deadline: MonoTime,
        still_whole: &mut dyn FnMut() -> bool,
    ) -> Result<Taken, NotTaken> {
        let mut drawn = [0u8; 2];
        // Without random bytes, the time tells holdings apart well enough.
        if crate::process::random(&mut drawn).is_err() {
            drawn = (MonoTime::now().since(MonoTime::EPOCH).as_nanos() as u16).to_ne_bytes();
        }
        let tag = (u32::from(namespace_fold(me.namespace)) << 16) | u32::from(u16::from_ne_bytes(drawn));
        let mine = (u64::from(tag) << 32) | u64::from(me.pid as u32);
        // The holding seen, and since when.
        let mut seen = (0u64, MonoTime::now());
        loop {
            let held = self.word().load(SeqCst);
            let now = MonoTime::now();
            if held == 0 {
                if self.word().compare_exchange(0, mine, SeqCst, SeqCst).is_ok() {
                    self.hold(mine, me);
                    return Ok(Taken::Free);
                }
                continue;
            }
            let holding = held & !SLEEPING;
            if holding != seen.0 {
                seen = (holding, now);
            } else if now.since(seen.1) >= JUDGE_AFTER && self.holder_is_gone(holding, me) {
                if self.word().compare_exchange(held, mine, SeqCst, SeqCst).is_ok() {
                    self.hold(mine, me);
                    return Ok(Taken::FromTheDead);
                }
                continue;
            }
            if now >= deadline {
                return Err(NotTaken::TimedOut);
            }
            let asleep = held | SLEEPING;
            if held != asleep && self.word().compare_exchange(held, asleep, SeqCst, SeqCst).is_err() {
                continue;
            }
            let nap = deadline.remaining_from(now).min(JUDGE_AFTER);
            // Woken, timed out or interrupted alike: the next round looks.
            let _ = sys::futex_wait(self.futex(), asleep as u32, nap);
            if !still_whole() {
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
    /// sleeps on it. The holder's name goes first, so that the page is as
    /// it was before the holding (a judge that reads the word still held
    /// finds it unnamed, and judges it by its pid: alive).
    pub fn release(&self) {
        let mine = self.holding.replace(0);
        // The name only if it is still this holding's: one that took the
        // word over has named itself there.
        if mine == 0 || self.map.word64(self.at + NAMED_AT).compare_exchange(mine, 0, SeqCst, SeqCst).is_err() {
            return;
        }
        for name_at in [NAMESPACE_AT, START_AT] {
            self.map.word64(self.at + name_at).store(0, SeqCst);
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

    /// Keeps `holding`, the word just taken, as this one's, and writes who
    /// holds it beside it, under the holding's tag: the tag and pid last,
    /// so that a reader who finds them finds the rest.
    fn hold(&self, holding: u64, me: &ProcessId) {
        self.holding.set(holding);
        self.map.word64(self.at + NAMED_AT).store(0, SeqCst);
        self.map.word64(self.at + NAMESPACE_AT).store(me.namespace, SeqCst);
        self.map.word64(self.at + START_AT).store(me.start_ticks, SeqCst);
        self.map.word64(self.at + NAMED_AT).store(holding, SeqCst);
    }

    /// Whether the holder of `holding` is provably gone, as `me` can tell.
    fn holder_is_gone(&self, holding: u64, me: &ProcessId) -> bool {
        let named = self.map.word64(self.at + NAMED_AT).load(SeqCst);
        let holder = ProcessId {
            namespace: self.map.word64(self.at + NAMESPACE_AT).load(SeqCst),
            start_ticks: self.map.word64(self.at + START_AT).load(SeqCst),
            pid: holding as u32 as i32,
        };
        if named == holding && self.map.word64(self.at + NAMED_AT).load(SeqCst) == holding {
            return holder.is_gone_as_seen_by(me);
        }
        // Not named under this holding: a holder killed or stopped between
        // taking the word and naming itself, or the word written over. Its
        // pid judges it only if its tag says it was of this namespace (a
        // holder of another one whose fold is the same, stopped in those
        // few instructions, is the one case this gets wrong), and only a
        // pid that no process has makes it gone.
        let of_this_namespace = (holding >> 48) as u16 == namespace_fold(me.namespace);
        of_this_namespace && (holder.pid <= 0 || matches!(sys::kill(holder.pid, 0), Err(sys::Errno::ESRCH)))
    }
}

/// The 16 bits of a holding's tag that say which pid namespace its holder
/// was in (the id of a namespace, folded).
pub fn namespace_fold(namespace: u64) -> u16 {
    (namespace ^ (namespace >> 16) ^ (namespace >> 32) ^ (namespace >> 48)) as u16
}

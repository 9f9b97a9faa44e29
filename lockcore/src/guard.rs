//! The guard: a small file beside a lock that serialises every change to it.
//!
//! Why a guard. A file-system lock is created atomically (`link`, `mkdir`),
//! but *breaking* a stale one is "read the record, judge it, remove it", and no
//! system call does that as one step. If breakers and creators do not exclude
//! each other, two breakers that judged the same stale record both remove
//! something, and the second removes the fresh lock the first one just made
//! (LockFile::Simple's BUGS section; the seed-001 mkdir lock). The guard is a
//! `flock(2)` on `<lock>.guard`, held for the few system calls of one
//! create, break, prolong or release, never for the caller's critical section.
//! Because every change to the lock path happens under it, "remove exactly the
//! record that was judged stale" is a read and an unlink inside one guard
//! section, and two breakers can never both get in.
//!
//! The guard file also keeps what must outlive any single lock record: the
//! last fencing token handed out, and the time before which a released lock
//! stays closed (cooldown). It is one fixed-size line, rewritten with one
//! `pwrite` while the guard is held, so it is never seen half-written.
//!
//! The guard file is never deleted: a process holding the flock on an
//! unlinked guard would exclude nobody. If an operator or a tmp cleaner
//! deletes it anyway, [`GuardFile::lock`] notices (the path no longer names the
//! inode it locked) and locks the new file instead.

use core::fmt::Write;
use core::time::Duration;

use crate::clock::{MonoTime, WallTime};
use crate::error::{CorruptKind, Error};
use crate::sys::{self, CPath, Fd, FlockOp};
use crate::text::{parse_i64, parse_u64, FixedText};

/// Size of the guard record: one line, padded with spaces.
pub const GUARD_RECORD_LEN: usize = 96;

/// How long an operation waits for the guard before it reports the lock
/// busy. Guards are held for microseconds; only a process stopped inside its
/// guard section (SIGSTOP, a debugger) makes this run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// An acquisition attempt: it is retried anyway, so give up soon and let
    /// the caller's backoff and deadline decide.
    Attempt,
    /// Release, prolong, inspect, break: the caller holds or watches the lock
    /// and has no retry loop; wait long enough to outlast any live contender.
    Change,
}

impl Patience {
    fn duration(self) -> Duration {
        match self {
            Patience::Attempt => Duration::from_millis(250),
            Patience::Change => Duration::from_secs(10),
        }
    }
}

/// The guard file of the lock at `lock`: `<lock>.guard`. One name for the
/// strategies that keep a guard and for the commit step, which must never
/// rename over it.
pub fn guard_path(lock: &CPath) -> Result<CPath, Error> {
    crate::strategy::with_suffix(lock, b".guard")
}

/// The permissions of a lock's guard file, from the lock's own `mode`:
/// whoever may read the lock may take it, and taking it means writing the
/// guard, so each read bit grants read and write. A private lock
/// (`mode=0600`) gets a private guard, which no other user can open and
/// flock to wedge the lock; without a `mode`, anyone may take it (0666,
/// less the umask).
pub fn mode_for(lock_mode: Option<u32>) -> libc::mode_t {
    let readers = lock_mode.unwrap_or(0o444) & 0o444;
    readers | (readers >> 1)
}

/// What the guard file remembers about its lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuardState {
    /// The last fencing token handed out for this lock.
    pub fence: u64,
    /// A released lock stays closed until then.
    pub cooldown_until: Option<WallTime>,
}

impl GuardState {
    /// Draws the next fencing token at `now` ([`crate::fence::next`]). A
    /// guard (or a record it was raised to) that already holds the largest
    /// one was forged: no token is left that is greater than every earlier one.
    pub fn next_fence(&mut self, now: WallTime) -> Result<u64, Error> {
        self.fence = crate::fence::next(self.fence, now).ok_or(Error::Corrupt(CorruptKind::GuardState))?;
        Ok(self.fence)
    }

    pub fn encode(&self) -> FixedText<GUARD_RECORD_LEN> {
        let mut out = FixedText::new();
        let cooldown = self.cooldown_until.map_or(0, WallTime::unix_nanos);
        // Bounded numbers: the line always fits; the tests check the length.
        let _ = write!(out, "lockguard 1 fence {} cooldown {}", self.fence, cooldown);
        let _ = out.pad_to(GUARD_RECORD_LEN - 1, b' ');
        let _ = out.push_bytes(b"\n");
        out
    }

    pub fn parse(bytes: &[u8]) -> Result<GuardState, Error> {
        let corrupt = Error::Corrupt(CorruptKind::GuardState);
        if bytes.is_empty() {
            return Ok(GuardState::default());
        }
        if bytes.len() != GUARD_RECORD_LEN || bytes[GUARD_RECORD_LEN - 1] != b'\n' {
            return Err(corrupt);
        }
        let line = &bytes[..GUARD_RECORD_LEN - 1];
        let end = line.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let mut words = line[..end].split(|&b| b == b' ');
        let mut expect = |word: &[u8]| if words.next() == Some(word) { Ok(()) } else { Err(corrupt) };
        expect(b"lockguard")?;
        expect(b"1")?;
        expect(b"fence")?;
        let fence = words.next().and_then(parse_u64).ok_or(corrupt)?;
        if words.next() != Some(b"cooldown") {
            return Err(corrupt);
        }
        let cooldown = words.next().and_then(parse_i64).ok_or(corrupt)?;
        if words.next().is_some() {
            return Err(corrupt);
        }
        Ok(GuardState { fence, cooldown_until: (cooldown != 0).then(|| WallTime::from_unix_nanos(cooldown)) })
    }

    /// Never hands out a fence below one already on disk: if the guard file
    /// was deleted (a tmp cleaner, an operator), the record it guards still
    /// remembers the last fence.
    pub fn raise_fence_to(&mut self, found: &crate::strategy::Found) {
        if let Ok(crate::record::Parsed::Ours(record)) = found.content {
            self.fence = self.fence.max(record.fence);
        }
    }

    /// What `inspect` reports for a guarded lock with this `holder`.
    pub fn inspection(&self, holder: Option<crate::strategy::Holder>, now: WallTime) -> crate::strategy::Inspection {
        crate::strategy::Inspection {
            holder,
            last_fence: self.fence,
            cooldown_until: self.cooldown_until.filter(|&until| now < until),
            queue_length: None,
        }
    }

    /// Whether a cooldown keeps the lock closed at `now`.
    pub fn cooling_down(&self, now: WallTime) -> bool {
        self.cooldown_until.is_some_and(|until| now < until)
    }
}

/// A guard file opened by this process, kept open between operations.
#[derive(Debug)]
pub struct GuardFile {
    path: CPath,
    /// The descriptor and the pid that opened it. A child of `fork()` shares
    /// the parent's open file description, and flock belongs to the
    /// description, so a child that reused it would "hold" the guard whenever
    /// its parent does: it must open its own.
    open: Option<(Fd, i32)>,
    mode: libc::mode_t,
    /// Extra open flags (`O_APPEND` for an append-only log).
    flags: libc::c_int,
}

impl GuardFile {
    pub fn new(path: CPath, mode: libc::mode_t) -> GuardFile {
        GuardFile { path, open: None, mode, flags: 0 }
    }

    /// A guard file whose writes all go to its end (`O_APPEND`), for a log
    /// that many processes append to under a shared flock.
    pub fn new_append_only(path: CPath, mode: libc::mode_t) -> GuardFile {
        GuardFile { path, open: None, mode, flags: libc::O_APPEND }
    }

    pub fn path(&self) -> &CPath {
        &self.path
    }

    /// Takes the guard, or reports [`Error::Busy`] once `patience` runs out,
    /// and reads the state it keeps.
    pub fn lock(&mut self, patience: Patience) -> Result<HeldGuard<'_>, Error> {
        let file = self.lock_file(patience)?;
        let mut bytes = [0u8; GUARD_RECORD_LEN + 1];
        let n = sys::pread_full(file.fd, &mut bytes, 0).map_err(Error::Os)?;
        let state = GuardState::parse(&bytes[..n])?;
        Ok(HeldGuard { file, state })
    }

    /// Takes the flock only, for a strategy that keeps its own record in the
    /// file (`lease`).
    pub fn lock_file(&mut self, patience: Patience) -> Result<LockedFile<'_>, Error> {
        self.lock_file_as(patience, FlockOp::Exclusive)
    }

    /// Takes the flock, exclusive or shared, and makes sure the path still
    /// names the locked file.
    pub fn lock_file_as(&mut self, patience: Patience, op: FlockOp) -> Result<LockedFile<'_>, Error> {
        let give_up = MonoTime::now().saturating_add(patience.duration());
        let mut pause = Duration::from_micros(20);
        let pid = sys::getpid();
        loop {
            if self.open.as_ref().map_or(true, |&(_, opener)| opener != pid) {
                let fd = sys::open(&self.path, libc::O_RDWR | libc::O_CREAT | self.flags, self.mode)
                    .map_err(Error::from_path_errno)?;
                if !sys::fstat(&fd).map_err(Error::Os)?.is_file() {
                    return Err(Error::NotALock);
                }
                self.open = Some((fd, pid));
            }
            let Some((fd, _)) = self.open.as_ref() else { continue };
            if sys::try_flock(fd, op).map_err(Error::Os)? {
                // The path must still name the inode we locked; otherwise the
                // file was deleted or replaced and our flock excludes nobody.
                let locked = sys::fstat(fd).map_err(Error::Os)?;
                match sys::lstat(&self.path) {
                    Ok(now) if now.same_file(&locked) => break,
                    // Reopen, but within the same patience: a file replaced
                    // over and over must not keep us here.
                    _ => self.open = None,
                }
            }
            if MonoTime::now() >= give_up {
                return Err(Error::Busy);
            }
            sys::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
        match self.open.as_ref() {
            Some((fd, _)) => Ok(LockedFile { fd }),
            None => Err(Error::NotALock),
        }
    }
}

/// A guard file with its flock held; unlocked on drop.
#[must_use = "the flock is released as soon as this is dropped"]
#[derive(Debug)]
pub struct LockedFile<'a> {
    pub fd: &'a Fd,
}

impl Drop for LockedFile<'_> {
    fn drop(&mut self) {
        let _ = sys::try_flock(self.fd, FlockOp::Unlock);
    }
}

/// The guard, held, with the state it keeps; released on drop.
#[must_use = "the guard is released as soon as this is dropped"]
#[derive(Debug)]
pub struct HeldGuard<'a> {
    file: LockedFile<'a>,
    pub state: GuardState,
}

impl HeldGuard<'_> {
    /// Closes the lock to everyone for `cooldown` from `now` (nothing for zero).
    pub fn start_cooldown(&mut self, now: WallTime, cooldown: Duration) -> Result<(), Error> {
        if cooldown.is_zero() {
            return Ok(());
        }
        self.state.cooldown_until = Some(now.saturating_add(cooldown));
        self.store()
    }

    /// Writes `state` back in one `pwrite`.
    pub fn store(&mut self) -> Result<(), Error> {
        sys::pwrite_all(self.file.fd, self.state.encode().as_bytes(), 0).map_err(Error::Os)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_state_round_trips_at_fixed_length() {
        let state = GuardState { fence: u64::MAX, cooldown_until: Some(WallTime::from_unix_nanos(i64::MIN + 1)) };
        let text = state.encode();
        assert_eq!(text.as_bytes().len(), GUARD_RECORD_LEN);
        assert_eq!(GuardState::parse(text.as_bytes()), Ok(state));
        assert_eq!(GuardState::parse(b""), Ok(GuardState::default()));
    }

    #[test]
    fn damaged_guard_state_is_corrupt() {
        let text = GuardState { fence: 5, cooldown_until: None }.encode();
        let bytes = text.as_bytes();
        let corrupt = Err(Error::Corrupt(CorruptKind::GuardState));
        assert_eq!(GuardState::parse(&bytes[..40]), corrupt);
        let mut flipped = [0u8; GUARD_RECORD_LEN];
        flipped.copy_from_slice(bytes);
        flipped[18] = b'x';
        assert_eq!(GuardState::parse(&flipped), corrupt);
        assert_eq!(GuardState::parse(&[b' '; GUARD_RECORD_LEN]), corrupt);
    }
}

//! The guard: a small file beside a lock that serialises every change to it.
//!
//! Why a guard. A file-system lock is created atomically (`link`, `mkdir`),
//! but *breaking* a stale one is "read the record, judge it, remove it", and no
//! system call does that as one step. If breakers and creators do not exclude
//! each other, two breakers that judged the same stale record both remove
//! something, and the second removes the fresh lock the first one just made
//! (LockFile::Simple's BUGS section; the classic `mkdir` lock of CGI scripts).
//! The guard is a lock on `<lock>.guard`, held for the few system calls of
//! one create, break, prolong or release, never for the caller's critical
//! section. Because every change to the lock path happens under it,
//! "remove exactly the record that was judged stale" is a read and an
//! unlink inside one guard section, and two breakers can never both get in.
//!
//! The lock on the guard is an open-file-description lock (`F_OFD_SETLK`):
//! released by the kernel whatever kills its holder, like `flock`, but an
//! exclusive one needs the file open for writing, so a user who may only
//! read the guard cannot hold it to wedge the lock. Every wait for it ends
//! by the caller's deadline, with [`Contention::GuardHeld`].
//!
//! The guard file also keeps what must outlive any single lock record: the
//! last fencing token handed out, and the moment before which a released
//! lock stays closed (cooldown). It is one fixed-size line, made complete
//! before it appears and rewritten with one `pwrite` while the guard is
//! held, so it is never seen half-written:
//!
//! ```text
//! lockguard 2 <fence> <cooldown: - | <wall ns> <boot id|-> <boot ns|->>   (spaces to 160 bytes, then \n)
//! ```
//!
//! [`GuardFile`] is also how `lease` and `toplock` lock their own files,
//! which keep their state themselves.
//!
//! The guard file is never deleted: a process holding the lock on an
//! unlinked guard would exclude nobody. If an operator or a tmp cleaner
//! deletes it anyway, [`GuardFile::lock_file`] notices (the path no longer
//! names the inode it locked) and locks the new file instead.

use core::fmt::Write;
use core::time::Duration;

use crate::clock::{Moment, MonoTime, WallTime};
use crate::error::{Contention, CorruptKind, Error, FileError, FileRole};
use crate::files::{self, with_suffix};
use crate::kept::KeptFd;
use crate::owner::BootId;
use crate::record::{parse_moment, write_moment, Record, RECORD_LINE_CAPACITY};
use crate::sys::{self, CPath, Fd, FileStat, OfdLock};
use crate::text::{parse_u64, FixedText, Words};
use crate::trust::Sharing;
use crate::wait::{self, Backoff, Sleep, WakeSource};

/// Size of the guard record: one line, padded with spaces.
pub const GUARD_RECORD_LEN: usize = 160;

/// The words every guard line starts with.
const MARKER: &[u8] = b"lockguard 2 ";

/// The guard file of the lock at `lock`: `<lock>.guard`. One name for the
/// strategies that keep a guard and for the commit step, which must never
/// rename over it.
pub fn guard_path(lock: &CPath) -> Result<CPath, Error> {
    with_suffix(lock, b".guard")
}

/// What the guard file remembers about its lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuardState {
    /// The last fencing token handed out for this lock.
    pub fence: u64,
    /// A released lock stays closed until then.
    pub cooldown_until: Option<Moment>,
}

impl GuardState {
    /// Draws the next fencing token at `now` ([`crate::fence::next`]). A
    /// guard (or a record it was raised to) that already holds the largest
    /// one was forged: no token is left that is greater than every earlier one.
    pub fn next_fence(&mut self, now: Moment) -> Result<u64, Error> {
        self.fence =
            crate::fence::next(self.fence, now.wall).ok_or(Error::corrupt(FileRole::Guard, CorruptKind::GuardState))?;
        Ok(self.fence)
    }

    /// The guard line: [`GUARD_RECORD_LEN`] bytes, padded with spaces and
    /// ending with a newline, as [`parse`](Self::parse) reads it.
    pub fn encode(&self) -> FixedText<GUARD_RECORD_LEN> {
        let mut out = FixedText::new();
        // Bounded numbers: the line always fits; the tests check the longest.
        let _ = out.push_bytes(MARKER);
        let _ = write!(out, "{} ", self.fence);
        let _ = write_moment(&mut out, self.cooldown_until, b"-");
        let _ = out.pad_to(GUARD_RECORD_LEN - 1, b' ');
        let _ = out.push_bytes(b"\n");
        out
    }

    /// Parses a guard file's bytes (at most one more than a line). A file
    /// without the marker is no guard of ours: [`Problem::NotALock`].
    ///
    /// [`Problem::NotALock`]: crate::error::Problem::NotALock
    pub fn parse(bytes: &[u8], role: FileRole) -> Result<GuardState, Error> {
        if !bytes.starts_with(b"lockguard ") {
            return Err(Error::not_a_lock(role));
        }
        let corrupt = Error::corrupt(role, CorruptKind::GuardState);
        if bytes.len() != GUARD_RECORD_LEN || bytes[GUARD_RECORD_LEN - 1] != b'\n' {
            return Err(corrupt);
        }
        let line = &bytes[..GUARD_RECORD_LEN - 1];
        let end = line.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let mut words = Words::new(line[..end].strip_prefix(MARKER).ok_or(corrupt)?);
        let fence = words.next().and_then(parse_u64).ok_or(corrupt)?;
        let cooldown_until = parse_moment(&mut words, b"-").ok_or(corrupt)?;
        if !words.is_done() {
            return Err(corrupt);
        }
        Ok(GuardState { fence, cooldown_until })
    }

    /// Whether a cooldown keeps the lock closed at `now`.
    pub fn cooling_down(&self, now: Moment) -> bool {
        self.cooldown_until.is_some_and(|until| !until.has_come(now))
    }

    /// When the cooldown that keeps the lock closed at `now` ends, as the
    /// wall clock reads it at `now`; `None` if none does.
    pub fn cooldown_end_seen(&self, now: Moment) -> Option<WallTime> {
        self.cooldown_until.filter(|_| self.cooling_down(now)).map(|until| until.wall_as_seen(now))
    }

    /// Why the lock is closed at `now`, if it is cooling down.
    pub fn cooldown_contention(&self, now: Moment) -> Option<Contention> {
        self.cooldown_end_seen(now).map(|until| Contention::CoolingDown { until })
    }
}

/// A file that orders the changes to a lock (a guard, a lease, a queue),
/// opened by this process and kept open between operations.
#[derive(Debug)]
pub struct GuardFile {
    path: CPath,
    role: FileRole,
    sharing: Sharing,
    /// The descriptor, used again by the next operation if it is kept
    /// ([`KeptFd`]: no child of `fork()` keeps a copy, through which a
    /// parent killed in a guard section would leave the guard held), and
    /// which file it was, to tell whether the path still names it. A
    /// child's copy of the handle opens its own: the lock belongs to the
    /// description, so a child that reused its parent's would "hold" the
    /// guard whenever its parent does.
    open: Option<(KeptFd, FileStat)>,
    /// Extra open flags (`O_APPEND` for an append-only log).
    flags: libc::c_int,
}

/// The first pause of a wait for a guard (or a lease or queue file),
/// whose holders keep it for a few system calls: shorter than `acquire`'s
/// ([`Backoff::FIRST`]).
const FIRST_POLL: Duration = Duration::from_micros(20);

/// How long a guard section may keep a waiter waiting before it polls
/// again: the longest pause of that wait.
const LONGEST_POLL: Duration = Duration::from_millis(2);

impl GuardFile {
    /// The file at `path`, in the part `role` (named in its errors), whose
    /// mode and owner `sharing` trusts. Nothing is opened yet.
    pub fn new(path: CPath, role: FileRole, sharing: Sharing) -> GuardFile {
        GuardFile { path, role, sharing, open: None, flags: 0 }
    }

    /// A file whose writes all go to its end (`O_APPEND`), for a log that
    /// many processes append to.
    pub fn new_append_only(path: CPath, role: FileRole, sharing: Sharing) -> GuardFile {
        GuardFile { flags: libc::O_APPEND, ..GuardFile::new(path, role, sharing) }
    }

    /// The file's path.
    pub fn path(&self) -> &CPath {
        &self.path
    }

    /// Takes the guard by `deadline`, reads the state it keeps, and reads
    /// the time once it is held.
    pub fn lock(&mut self, deadline: MonoTime, boot: Option<BootId>) -> Result<HeldGuard<'_>, Error> {
        let role = self.role;
        let initial = GuardState::default().encode();
        let file = self.lock_file(OfdLock::Exclusive, deadline, initial.as_bytes(), boot)?;
        // The line, and in the same read what follows it (`flock` keeps
        // its holder's record there).
        let mut read = [0u8; GUARD_RECORD_LEN + AFTER_CAPACITY];
        let read_len = file.read(&mut read)?;
        let state = GuardState::parse(&read[..read_len.min(GUARD_RECORD_LEN)], role)?;
        Ok(HeldGuard { now: file.now, file, state, read, read_len })
    }

    /// Takes the lock on the file, exclusive or shared, by `deadline`
    /// ([`Contention::GuardHeld`] after it), creating the file complete with
    /// `initial` if it is missing; makes sure the path still names the
    /// locked file and that the file is still to be trusted, and reads the
    /// time once all that holds. While another description holds it, the
    /// wait is [`wait::wait_for`]'s, with pauses from 20 µs up to 2 ms: a
    /// guard section lasts a few system calls.
    pub fn lock_file(
        &mut self,
        kind: OfdLock,
        deadline: MonoTime,
        initial: &[u8],
        boot: Option<BootId>,
    ) -> Result<LockedFile<'_>, Error> {
        // No event says when an OFD lock is let go: the wait polls.
        self.lock_file_waking(kind, deadline, initial, boot, &mut Sleep)
    }

    /// [`lock_file`](Self::lock_file), waiting between tries on `wake`.
    fn lock_file_waking(
        &mut self,
        kind: OfdLock,
        deadline: MonoTime,
        initial: &[u8],
        boot: Option<BootId>,
        wake: &mut dyn WakeSource,
    ) -> Result<LockedFile<'_>, Error> {
        let pid = crate::process::pid();
        // Jitter needs waiters to differ, not secrecy: processes differ by
        // pid, the handles of one process by address.
        let seed = ((pid as u64) << 32) ^ (self as *const GuardFile as usize as u64);
        let backoff = Backoff::with_range(FIRST_POLL, LONGEST_POLL, seed);
        let size = wait::wait_for(Some(deadline), wake, None, backoff, || self.try_lock_file(kind, initial))
            // Past the deadline the file is busy: the caller's budget, if it
            // has one, is its own to judge (`acquire` tries again within it).
            .map_err(|e| match e {
                Error::Timeout(why) => Error::Busy(why),
                other => other,
            })?;
        match self.open.as_ref() {
            Some((kept, _)) => Ok(LockedFile { fd: kept.fd(), role: self.role, size, now: Moment::now(boot) }),
            None => Err(Error::not_a_lock(self.role)),
        }
    }

    /// One try of [`lock_file`](Self::lock_file): the file's size once it
    /// is locked, still at its path and still to be trusted;
    /// [`Contention::GuardHeld`] while another description holds it.
    ///
    /// A path found naming another file (`toplock` compacts its queue by
    /// renaming a new file over it) is opened again within the same try, so
    /// that a single try, a zero budget's, is not lost to a replacement
    /// another process made while the descriptor sat idle. Only once: a file
    /// replaced over and over is [`Contention::GuardHeld`] too, and the next
    /// try, by the same deadline, opens it again.
    fn try_lock_file(&mut self, kind: OfdLock, initial: &[u8]) -> Result<u64, Error> {
        for _ in 0..2 {
            if let Some(size) = self.try_lock_opened(kind, initial)? {
                return Ok(size);
            }
            self.open = None;
        }
        Err(Error::Busy(Contention::GuardHeld))
    }

    /// Opens the file unless this process already has it open, and tries
    /// its lock once: the file's size, or `None` when the path no longer
    /// names the file that was opened (deleted, or replaced), whose lock
    /// guards nothing, held or not.
    ///
    /// Busy is judged only for the file still at the path: a description
    /// that keeps a lock on a replaced file (a process stopped in its guard
    /// section, or a forked child that inherited a description) must not
    /// keep this one polling the old file to its deadline. And a lock taken
    /// on a replaced file is let go explicitly, not by closing the
    /// descriptor: a description shared with a forked child outlives our
    /// close, and its lock with it.
    fn try_lock_opened(&mut self, kind: OfdLock, initial: &[u8]) -> Result<Option<u64>, Error> {
        let role = self.role;
        if self.open.as_ref().is_some_and(|(kept, opened)| kept.is_reusable() && !kept.still_names(opened)) {
            // Closed by the program and reused for a file of its own.
            if let Some((kept, _)) = self.open.take() {
                kept.abandon();
            }
        }
        let (kept, opened) = match self.open {
            Some((ref kept, ref opened)) if kept.is_reusable() => (kept, opened),
            _ => {
                self.open = None;
                let before = crate::kept::before_open();
                let (fd, opened) = match self.flags & libc::O_APPEND {
                    0 => files::open_state_file(&self.path, role, self.sharing, initial, self.flags)?,
                    _ => files::open_state_file_on_one_host(
                        &self.path,
                        role,
                        self.sharing,
                        initial,
                        self.flags,
                        APPENDS_NOT_KEPT,
                    )?,
                };
                let (kept, opened) = self.open.insert((KeptFd::keep(fd, before), opened));
                (&*kept, &*opened)
            }
        };
        let fd = kept.fd();
        let locked = sys::try_ofd_lock(fd, kind).map_err(|e| FileError::io(role, e))?;
        // The file at the path now, if it is the one opened: its bits, owner
        // and size as they are now, as `fstat` of the descriptor would tell.
        let at_path = sys::lstat(&self.path).ok().filter(|now| now.same_file(opened));
        match (locked, at_path) {
            (false, Some(_)) => Err(Error::Busy(Contention::GuardHeld)),
            (false, None) => Ok(None),
            (true, None) => {
                let _ = sys::ofd_unlock(fd);
                Ok(None)
            }
            (true, Some(now)) => {
                // Its owner may have changed its bits since we opened it:
                // judged again, under the lock.
                if let Err(e) = self.sharing.check_locked(role, &now) {
                    let _ = sys::ofd_unlock(fd);
                    return Err(e);
                }
                Ok(Some(now.size))
            }
        }
    }
}

/// Why an append-only file is refused on a file system that is not
/// [`files::on_one_host`]. It is rewritten in place with `O_APPEND` turned
/// off for a moment (`fcntl(F_SETFL)`), which a FUSE file system never
/// passes on to its server, whose own descriptor goes on appending: the
/// rewrite lands at the end, and the cut that follows tears the log. Over
/// NFS, appends from two hosts are not kept apart at all.
const APPENDS_NOT_KEPT: &str = "a toplock queue on a file system shared with other hosts or served from user space, \
     which does not keep its appends and its rewrites in place apart";

/// A file with its lock held; unlocked on drop.
#[must_use = "the lock is released as soon as this is dropped"]
#[derive(Debug)]
pub struct LockedFile<'a> {
    /// The descriptor whose open file description holds the lock.
    pub fd: &'a Fd,
    /// The file's part in the lock, for its errors.
    pub role: FileRole,
    /// Its length when locked, as far as reads go: it changes only under
    /// an exclusive lock. The guard's writes keep it up to date; a queue's
    /// appends do not, and [`grew_only_by`](Self::grew_only_by) measures
    /// them against it.
    size: u64,
    /// The time, read once the lock was held: every decision made under it
    /// counts from here, not from before a wait for it.
    pub now: Moment,
}

impl LockedFile<'_> {
    /// Reads the whole file, up to `buf.len()` bytes.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.read_at(buf, 0)
    }

    /// Reads from `offset` to the end, up to `buf.len()` bytes: no more
    /// than the file holds is asked for, so the read that would only find
    /// the end is never made.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let left = usize::try_from(self.size.saturating_sub(offset)).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        sys::pread_full(self.fd, &mut buf[..want], offset).map_err(|e| FileError::io(self.role, e))
    }

    /// Writes `bytes` at the start, in one `pwrite`.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.write_at(bytes, 0)
    }

    fn write_at(&mut self, bytes: &[u8], offset: u64) -> Result<(), Error> {
        sys::pwrite_all(self.fd, bytes, offset).map_err(|e| FileError::io(self.role, e))?;
        self.size = self.size.max(offset + bytes.len() as u64);
        Ok(())
    }

    /// Whether the file is `appended` bytes longer than when it was locked
    /// (or last looked at here): that the holder's own appends of that many
    /// bytes are all that was written to it, by nobody who ignores the lock
    /// (a hand, or another user of a file others may write). What is read
    /// from then on reads the file to its length now.
    pub fn grew_only_by(&mut self, appended: usize) -> Result<bool, Error> {
        let size = sys::fstat(self.fd).map_err(|e| FileError::io(self.role, e))?.size;
        let grew_only_by = size == self.size.saturating_add(appended as u64);
        self.size = size;
        Ok(grew_only_by)
    }

    /// Cuts the file to `len` bytes, if it is longer.
    fn truncate(&mut self, len: u64) -> Result<(), Error> {
        if self.size > len {
            sys::ftruncate(self.fd, len).map_err(|e| FileError::io(self.role, e))?;
            self.size = len;
        }
        Ok(())
    }
}

impl Drop for LockedFile<'_> {
    fn drop(&mut self) {
        let _ = sys::ofd_unlock(self.fd);
    }
}

/// The guard, held, with the state it keeps; released on drop.
#[must_use = "the guard is released as soon as this is dropped"]
#[derive(Debug)]
pub struct HeldGuard<'a> {
    file: LockedFile<'a>,
    /// The state as read once the guard was held; [`store`](Self::store)
    /// writes it back.
    pub state: GuardState,
    /// The time, read once the guard was held.
    pub now: Moment,
    /// The file's start as read once the guard was held: the guard line,
    /// then up to [`AFTER_CAPACITY`] bytes of what followed it.
    read: [u8; GUARD_RECORD_LEN + AFTER_CAPACITY],
    read_len: usize,
}

/// How much of what follows the guard line is read with it: a holder's
/// record and its newline, and one byte more, so that a longer one shows.
pub const AFTER_CAPACITY: usize = RECORD_LINE_CAPACITY + 2;

impl HeldGuard<'_> {
    /// Closes the lock to everyone for `cooldown` from now (nothing for
    /// zero), in the state the next [`store`](Self::store) writes.
    pub fn set_cooldown(&mut self, cooldown: Duration) {
        if !cooldown.is_zero() {
            self.state.cooldown_until = Some(self.now.saturating_add(cooldown));
        }
    }

    /// Writes `state` back in one `pwrite`.
    pub fn store(&mut self) -> Result<(), Error> {
        self.file.write(self.state.encode().as_bytes())
    }

    /// What followed the guard line when the guard was taken, up to
    /// [`AFTER_CAPACITY`] bytes (the holder's record, for a `flock` lock,
    /// whose locked file is not the library's to write).
    pub fn after(&self) -> &[u8] {
        &self.read[self.read_len.min(GUARD_RECORD_LEN)..self.read_len]
    }

    /// Writes `state` back with `record` after it (nothing for `None`), in
    /// one `pwrite`, and cuts off whatever followed before.
    pub fn store_with_record(&mut self, record: Option<&Record>) -> Result<(), Error> {
        // Sized for the longest line and record: the pushes cannot fail.
        let mut whole = FixedText::<{ GUARD_RECORD_LEN + RECORD_LINE_CAPACITY + 1 }>::new();
        let _ = whole.push_bytes(self.state.encode().as_bytes());
        if let Some(record) = record {
            let _ = record.write_line(&mut whole);
            let _ = whole.push_bytes(b"\n");
        }
        self.file.write(whole.as_bytes())?;
        self.file.truncate(whole.as_bytes().len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{BootTime, WallTime};
    use crate::error::ErrorKind;

    use crate::wait::Wake;
    use std::vec::Vec;

    /// A fresh directory for one test.
    fn test_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(std::format!("lockcore-guard-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A guard file, made, and another open file description of it holding
    /// its lock, as another process in its guard section would.
    fn held_guard(dir: &std::path::Path) -> (GuardFile, Fd) {
        let path = CPath::from_parts(&[dir.join("lock.guard").to_str().unwrap().as_bytes()]).unwrap();
        let mut guard = GuardFile::new(path.clone(), FileRole::Guard, Sharing::new(0o600));
        drop(guard.lock(MonoTime::now().saturating_add(Duration::from_secs(5)), None).expect("a free guard"));
        let other = sys::open(&path, libc::O_RDWR, 0).unwrap();
        assert_eq!(sys::try_ofd_lock(&other, OfdLock::Exclusive), Ok(true));
        (guard, other)
    }

    /// Keeps the pauses it is asked for, without taking them: the tries
    /// come as fast as they can, and only the deadline ends them.
    struct Pauses(Vec<Duration>);

    impl WakeSource for Pauses {
        fn wait(&mut self, timeout: Duration) -> Wake {
            self.0.push(timeout);
            Wake::TimedOut
        }
    }

    /// A guard held throughout: the wait answers `Busy(GuardHeld)` once its
    /// deadline has passed, and not before; its pauses start below 20 µs
    /// and grow to, never past, 2 ms.
    #[test]
    fn a_wait_for_a_held_guard_ends_by_its_deadline() {
        let dir = test_dir("deadline");
        let (mut guard, _other) = held_guard(&dir);
        let deadline = MonoTime::now().saturating_add(Duration::from_millis(60));
        let mut pauses = Pauses(Vec::new());
        let initial = GuardState::default().encode();
        let result = guard.lock_file_waking(OfdLock::Exclusive, deadline, initial.as_bytes(), None, &mut pauses);
        assert_eq!(result.map(|_| ()), Err(Error::Busy(Contention::GuardHeld)));
        assert!(MonoTime::now() >= deadline, "it gave up before its deadline");
        let pauses = pauses.0;
        assert!(pauses[0] < FIRST_POLL, "{pauses:?}");
        assert!(pauses.iter().all(|&p| p < LONGEST_POLL), "{pauses:?}");
        assert!(pauses.iter().any(|&p| p >= LONGEST_POLL / 2), "the pauses grew to the longest poll: {pauses:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The holder lets go during the third pause: the try right after it
    /// takes the guard, which excludes the holder's description from then on.
    #[test]
    fn a_guard_is_taken_at_the_first_try_after_it_is_freed() {
        struct LetGoAt<'a> {
            other: &'a Fd,
            waits: u32,
        }
        impl WakeSource for LetGoAt<'_> {
            fn wait(&mut self, _: Duration) -> Wake {
                self.waits += 1;
                if self.waits == 3 {
                    sys::ofd_unlock(self.other).unwrap();
                }
                Wake::TimedOut
            }
        }
        let dir = test_dir("freed");
        let (mut guard, other) = held_guard(&dir);
        let mut wake = LetGoAt { other: &other, waits: 0 };
        let far = MonoTime::now().saturating_add(Duration::from_secs(60));
        let initial = GuardState::default().encode();
        let file = guard.lock_file_waking(OfdLock::Exclusive, far, initial.as_bytes(), None, &mut wake).unwrap();
        assert_eq!(wake.waits, 3, "taken by the try right after the holder let go");
        assert_eq!(sys::try_ofd_lock(&other, OfdLock::Exclusive), Ok(false), "and held");
        drop(file);
        assert_eq!(sys::try_ofd_lock(&other, OfdLock::Exclusive), Ok(true), "until dropped");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A guard file at `dir/lock.guard`, made and let go, so that the
    /// guard keeps its descriptor open; and the path.
    fn opened_guard(dir: &std::path::Path) -> (GuardFile, CPath) {
        let path = CPath::from_parts(&[dir.join("lock.guard").to_str().unwrap().as_bytes()]).unwrap();
        let mut guard = GuardFile::new(path.clone(), FileRole::Guard, Sharing::new(0o600));
        drop(guard.lock(MonoTime::now().saturating_add(Duration::from_secs(5)), None).expect("a free guard"));
        (guard, path)
    }

    /// Renames a fresh guard file over `dir/lock.guard`, as an operator, or
    /// a cleaner of /tmp that removes it and a process that makes it anew,
    /// can.
    fn replace(dir: &std::path::Path) {
        let fresh = dir.join("lock.guard.new");
        std::fs::write(&fresh, GuardState::default().encode().as_bytes()).unwrap();
        std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::fs::rename(&fresh, dir.join("lock.guard")).unwrap();
    }

    /// The file was replaced while this guard's descriptor sat idle: a zero
    /// budget, one try, still takes the new file, and locks the file now at
    /// the path.
    #[test]
    fn a_replaced_file_is_taken_by_a_single_try() {
        let dir = test_dir("replaced");
        let (mut guard, path) = opened_guard(&dir);
        replace(&dir);
        let held = guard.lock(MonoTime::now(), None).expect("one try takes the replacement");
        drop(held);
        let other = sys::open(&path, libc::O_RDWR, 0).unwrap();
        let held = guard.lock(MonoTime::now(), None).expect("and keeps it open");
        assert_eq!(sys::try_ofd_lock(&other, OfdLock::Exclusive), Ok(false), "the file at the path is the one locked");
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Another description keeps a lock on the file that was replaced (a
    /// process stopped in its guard section there): it guards nothing, and
    /// does not keep this guard, whose descriptor still names the old
    /// file, from the new one.
    #[test]
    fn a_lock_left_on_a_replaced_file_holds_nobody_up() {
        let dir = test_dir("left-on-replaced");
        let (mut guard, path) = opened_guard(&dir);
        let stopped = sys::open(&path, libc::O_RDWR, 0).unwrap();
        assert_eq!(sys::try_ofd_lock(&stopped, OfdLock::Shared), Ok(true));
        replace(&dir);
        let held = guard.lock(MonoTime::now(), None).expect("one try takes the file at the path");
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A lock this guard took on a file it then found replaced is let go
    /// at once, also when its descriptor's description lives on in another
    /// descriptor (as in a child forked while the file was open).
    #[test]
    fn a_lock_taken_on_a_replaced_file_is_let_go_though_its_description_is_shared() {
        let dir = test_dir("shared-description");
        let (mut guard, path) = opened_guard(&dir);
        let raw = guard.open.as_ref().map(|(kept, _)| kept.fd().raw()).unwrap();
        // SAFETY: `raw` is this guard's open descriptor; dup makes another
        // descriptor of the same description, closed at the end.
        let inherited = unsafe { libc::dup(raw) };
        assert!(inherited >= 0);
        let old = sys::open(&path, libc::O_RDWR, 0).unwrap();
        replace(&dir);
        drop(guard.lock(MonoTime::now(), None).expect("one try takes the file at the path"));
        assert_eq!(sys::try_ofd_lock(&old, OfdLock::Exclusive), Ok(true), "the old file's lock was let go");
        // SAFETY: the descriptor dup made above, closed once.
        unsafe { libc::close(inherited) };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn guard_state_round_trips_at_fixed_length() {
        let widest = GuardState {
            fence: u64::MAX,
            cooldown_until: Some(Moment {
                wall: WallTime::from_unix_nanos(i64::MIN),
                boot: Some((BootId([0xff; 16]), BootTime::from_nanos(i64::MIN))),
            }),
        };
        let wall_only =
            GuardState { fence: 3, cooldown_until: Some(Moment { wall: WallTime::from_unix_nanos(5), boot: None }) };
        for state in [widest, wall_only, GuardState::default()] {
            let text = state.encode();
            assert_eq!(text.as_bytes().len(), GUARD_RECORD_LEN);
            assert_eq!(GuardState::parse(text.as_bytes(), FileRole::Guard), Ok(state));
        }
    }

    #[test]
    fn a_file_without_the_marker_is_no_guard_and_a_damaged_one_is_corrupt() {
        let kind = |bytes: &[u8]| GuardState::parse(bytes, FileRole::Guard).map_err(|e| e.kind());
        assert_eq!(kind(b""), Err(ErrorKind::NotALock), "we never leave a guard empty");
        assert_eq!(kind(b"some data\n"), Err(ErrorKind::NotALock));
        let text = GuardState { fence: 5, cooldown_until: None }.encode();
        let bytes = text.as_bytes();
        let corrupt = Err(ErrorKind::Corrupt(CorruptKind::GuardState));
        assert_eq!(kind(&bytes[..40]), corrupt);
        let mut flipped = [0u8; GUARD_RECORD_LEN];
        flipped.copy_from_slice(bytes);
        flipped[12] = b'x';
        assert_eq!(kind(&flipped), corrupt);
        let mut older = [b' '; GUARD_RECORD_LEN];
        older[..13].copy_from_slice(b"lockguard 1 f");
        older[GUARD_RECORD_LEN - 1] = b'\n';
        assert_eq!(kind(&older), corrupt);
    }
}

//! The strategies, each in its own file, behind one trait.
//!
//! A strategy knows how to make one attempt at a lock and how to change a
//! lock it holds. It never waits, never retries a busy lock, and never
//! decides policy: waiting lives in [`crate::wait`], the handle and its
//! bookkeeping in [`crate::Lock`].

pub mod flock;
pub mod lease;
pub mod lockfile;
pub mod mkdir;
pub mod symlink;
pub mod toplock;

use core::time::Duration;

use crate::clock::WallTime;
use crate::error::{CorruptKind, Error};
use crate::owner::{HostName, Liveness, Nonce, Owner};
use crate::record::{self, Parsed, Record, RECORD_CAPACITY};
use crate::spec::{Options, StaleCheck};
use crate::sys::{self, CPath, Errno, Fd, FileStat};

/// What every operation of a strategy is told.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The calling process.
    pub me: &'a Owner,
    pub options: &'a Options,
    /// One reading of the wall clock for the whole operation, so that a
    /// decision and the record it writes agree.
    pub now: WallTime,
}

impl<'a> Context<'a> {
    /// This context with the wall clock read again, for an operation that
    /// has just got its guard (or flock, or log). The wait for it may have
    /// been long (a loaded machine, others' guard sections), and every
    /// decision made under it (is the record expired, is the cooldown over)
    /// and every time written under it must count from the moment the lock
    /// could no longer change, not from before the wait: otherwise a lock
    /// can be granted already expired, or a commit judged in time after its
    /// TTL ran out.
    pub fn renewed(&self) -> Context<'a> {
        Context { now: WallTime::now(), ..*self }
    }

    /// [`renewed`](Self::renewed), and `expires` (asked for as of this
    /// context's `now`) moved on by the time the wait took, so that a TTL
    /// counts from the moment the record is written.
    pub fn renewed_with(&self, expires: Option<WallTime>) -> (Context<'a>, Option<WallTime>) {
        let renewed = self.renewed();
        let waited = renewed.now.since(self.now);
        (renewed, expires.map(|at| at.saturating_add(waited)))
    }
}

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The lock was ours and within its TTL; it is released.
    Released,
    /// The lock was ours but held past its TTL; nobody took it; it is released.
    /// Whatever the caller did after the expiry was unprotected.
    Expired,
    /// Someone else holds the lock now (or broke ours); nothing was removed.
    Lost,
}

impl ReleaseOutcome {
    /// The outcome of releasing a record that was still ours, by its expiry.
    pub fn of_own(expires: Option<WallTime>, now: WallTime) -> ReleaseOutcome {
        if past_expiry(expires, now) {
            ReleaseOutcome::Expired
        } else {
            ReleaseOutcome::Released
        }
    }
}

/// How a prolong ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProlongOutcome {
    /// The lock was ours and within its TTL; the new expiry is written.
    Prolonged,
    /// The lock was ours but past its TTL; nobody took it; the new expiry is
    /// written and the lock is held again. The overrun was unprotected.
    Expired,
    /// Someone else holds the lock now; nothing was written.
    Lost,
}

impl ProlongOutcome {
    /// The outcome of prolonging a record that was still ours, by its old expiry.
    pub fn of_own(expires: Option<WallTime>, now: WallTime) -> ProlongOutcome {
        if past_expiry(expires, now) {
            ProlongOutcome::Expired
        } else {
            ProlongOutcome::Prolonged
        }
    }
}

/// Who holds a lock, as seen from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: i32,
    /// `None` for a LockFile::Simple stamp without host (same host assumed).
    pub host: Option<HostName>,
    /// The full record, when the holder is this library.
    pub record: Option<Record>,
    pub liveness: Liveness,
    /// Whether the next acquirer would break this lock.
    pub stale: bool,
    /// Whether the record is the one the inspecting handle holds.
    pub this_handle: bool,
}

/// Whether an action that needs the lock ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The lock was ours and within its TTL; the action ran while no one
    /// could take the lock over.
    Committed,
    /// The lock was ours but past its TTL; the action did not run.
    Expired,
    /// Someone else holds the lock; the action did not run.
    Lost,
}

/// The state of a lock, read without taking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// `None` when the lock is free.
    pub holder: Option<Holder>,
    /// The last fencing token handed out for this lock.
    pub last_fence: u64,
    /// A released lock stays closed until then.
    pub cooldown_until: Option<WallTime>,
    /// Requests in the queue, the holder's included, for strategies that
    /// keep one (`toplock`); `None` for the others.
    pub queue_length: Option<u32>,
}

/// The operations every strategy offers.
///
/// # Contract
/// * Every operation reads the time it decides by, and computes the times it
///   writes, only once it holds whatever excludes the other processes (its
///   guard, flock or log): [`Context::renewed`], [`Context::renewed_with`].
/// * `try_acquire` either creates a record for `nonce` that excludes every
///   other holder and returns it, or returns [`Error::Busy`] (held by someone
///   else, or cooling down) or another error. Its fence is strictly greater
///   than the fence of every earlier successful `try_acquire` of this lock,
///   in any process.
/// * `release` and `prolong` act only on the record they are given, and only
///   if it is still the one on disk; otherwise they report `Lost` and change
///   nothing.
/// * A stale record (expired, or a provably dead owner when
///   `stale=pid`) is removed only by the operation that judged it, with no
///   window in which another process can create a fresh record that the
///   removal would then take away.
pub trait Strategy {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error>;
    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error>;
    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error>;
    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error>;
    /// Runs `action` only if `held` is still the lock's record and within its
    /// TTL, at a moment when no other process can take the lock over (under
    /// the strategy's guard). The seed-000 commit step is built on this.
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error>;
    /// Gives up a place in the queue that unsuccessful attempts kept (a
    /// strategy with first-come-first-served order keeps it between attempts
    /// of one `acquire`). A no-op for strategies without a queue.
    fn abandon(&mut self, _cx: &Context<'_>) -> Result<(), Error> {
        Ok(())
    }
    /// Removes the lock whoever holds it (an operator's tool). `Ok(false)`
    /// when it was free.
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error>;
}

/// Whether a held record has run past its expiry at `now`.
pub fn past_expiry(expires: Option<WallTime>, now: WallTime) -> bool {
    expires.is_some_and(|at| at <= now)
}

/// The commit decision once the current record is known: run `action` if
/// `on_disk` is ours and unexpired.
pub fn commit_if_current(
    on_disk: Option<Record>,
    now: WallTime,
    action: &mut dyn FnMut() -> Result<(), Error>,
) -> Result<CommitOutcome, Error> {
    match on_disk {
        None => Ok(CommitOutcome::Lost),
        Some(record) if past_expiry(record.expires, now) => Ok(CommitOutcome::Expired),
        Some(_) => action().map(|()| CommitOutcome::Committed),
    }
}

/// A lock record found on disk, with the time it was written.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub content: Result<Parsed, CorruptKind>,
    pub written_at: WallTime,
}

impl Found {
    pub fn from_bytes(bytes: &[u8], stat: &FileStat) -> Found {
        let content =
            if bytes.len() > RECORD_CAPACITY { Err(CorruptKind::RecordTooLong) } else { record::parse(bytes) };
        Found { content, written_at: WallTime::from_unix_nanos(stat.mtime_ns) }
    }

    /// The record, if it names `nonce`, i.e. is the one this handle wrote.
    /// Its expiry is the one that counts: a watchdog or an operator may have
    /// moved it since this handle last did.
    pub fn ours(&self, nonce: Nonce) -> Option<Record> {
        match self.content {
            Ok(Parsed::Ours(rec)) if rec.nonce == nonce => Some(rec),
            _ => None,
        }
    }

    /// Judges the record: who holds it and whether it may be broken.
    /// A corrupt record has no holder to judge; it is stale by age only, and
    /// otherwise an error the caller must see.
    pub fn judge(&self, cx: &Context<'_>) -> Result<Holder, Error> {
        let aged_out = cx.options.ttl.is_some_and(|ttl| self.written_at.saturating_add(ttl) <= cx.now);
        let check_owner = cx.options.stale == StaleCheck::DeadOwner;
        let holder = match self.content {
            Ok(Parsed::Ours(rec)) => {
                let liveness = cx.me.judge(&rec.owner);
                Holder {
                    pid: rec.owner.process.pid,
                    host: Some(rec.owner.host),
                    record: Some(rec),
                    liveness,
                    // Our records carry their own expiry, set by the writer's TTL.
                    stale: past_expiry(rec.expires, cx.now) || (check_owner && liveness == Liveness::Dead),
                    this_handle: false,
                }
            }
            Ok(Parsed::Foreign { pid, host }) => {
                let liveness = cx.me.judge_foreign(pid, host.as_ref(), self.written_at);
                Holder {
                    pid,
                    host,
                    record: None,
                    liveness,
                    stale: aged_out || (check_owner && liveness == Liveness::Dead),
                    this_handle: false,
                }
            }
            Ok(Parsed::Empty) => Holder {
                pid: 0,
                host: None,
                record: None,
                liveness: Liveness::Unknown,
                stale: aged_out,
                this_handle: false,
            },
            Err(_) if aged_out => Holder {
                pid: 0,
                host: None,
                record: None,
                liveness: Liveness::Unknown,
                stale: true,
                this_handle: false,
            },
            Err(kind) => return Err(Error::Corrupt(kind)),
        };
        Ok(holder)
    }
}

/// Reads a lock record through an open directory (`dir`) or a path, never
/// following a symlink, never blocking on a planted fifo, never reading more
/// than one byte past the longest record. `Ok(None)` when there is none.
pub fn read_record(
    open: impl FnOnce() -> Result<Fd, Errno>,
    path_for_errors: Option<&CPath>,
) -> Result<Option<Found>, Error> {
    let fd = match open() {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => return Err(Error::Symlink),
        Err(Errno::ENOTDIR) if path_for_errors.is_some() => return Err(Error::NotALock),
        Err(e) => return Err(Error::from_path_errno(e)),
    };
    let stat = sys::fstat(&fd).map_err(Error::Os)?;
    if !stat.is_file() {
        return Err(Error::NotALock);
    }
    let mut bytes = [0u8; RECORD_CAPACITY + 1];
    let n = sys::read_full(&fd, &mut bytes).map_err(Error::Os)?;
    Ok(Some(Found::from_bytes(&bytes[..n], &stat)))
}

/// Flags for reading a record: `O_NONBLOCK` so that a fifo planted where a
/// record belongs cannot hang the reader (the type is checked after open).
pub const READ_RECORD_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;

/// Flags for creating a file that must not exist yet.
pub const CREATE_NEW_FLAGS: libc::c_int = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY;

/// Writes `bytes` into a new file made by `create`; on a failed write the
/// half-written file is removed by `remove`, so no partial record is left.
pub fn write_new_file(
    create: impl FnOnce() -> Result<Fd, Errno>,
    bytes: &[u8],
    remove: impl FnOnce() -> Result<(), Errno>,
) -> Result<(), Error> {
    let fd = create().map_err(Error::from_path_errno)?;
    if let Err(e) = sys::write_all(&fd, bytes) {
        drop(fd);
        let _ = remove();
        return Err(Error::Os(e));
    }
    Ok(())
}

/// Ignores "it was not there": removal of something that may be gone already.
pub fn ignore_missing(result: Result<(), Errno>) -> Result<(), Error> {
    match result {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(Error::from_path_errno(e)),
    }
}

/// Renames a finished `temp` (file, directory or symlink) to `lock` only if
/// nothing is at `lock`. `Ok(false)` when something is; `temp` is then left
/// for the caller to remove.
pub fn rename_into_place(temp: &CPath, lock: &CPath) -> Result<bool, Error> {
    match sys::rename_noreplace(temp, lock) {
        Ok(()) => Ok(true),
        Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => Ok(false),
        // No RENAME_NOREPLACE here (NFS, old kernels): a plain rename onto a
        // missing name is as atomic. Our creators hold the guard, so only a
        // foreign program can create the lock between the lstat and the
        // rename; an empty directory it made there would be replaced.
        Err(e) if e.raw() == libc::EINVAL || e.raw() == libc::ENOSYS => match sys::lstat(lock) {
            Err(Errno::ENOENT) => sys::rename(temp, lock).map(|()| true).map_err(Error::from_path_errno),
            _ => Ok(false),
        },
        Err(e) => Err(Error::from_path_errno(e)),
    }
}

/// `path` + `suffix`, as a lock-path error if too long.
pub fn with_suffix(path: &CPath, suffix: &[u8]) -> Result<CPath, Error> {
    CPath::from_parts(&[path.as_bytes(), suffix]).map_err(|_| path_too_long())
}

pub fn path_too_long() -> Error {
    Error::Spec(crate::error::SpecError::new(
        crate::error::SpecErrorKind::PathTooLong,
        b"",
        "a path derived from the target is longer than PATH_MAX",
    ))
}

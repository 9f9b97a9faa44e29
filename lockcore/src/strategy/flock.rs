//! `flock`: the kernel's advisory lock on a file, the baseline the other
//! strategies are measured against, shared with `flock(1)` and every other
//! program that flocks the same file.
//!
//! The target is the file to lock, as for `flock(1)`: often the data file
//! itself, whose content the library never reads, writes or truncates (a
//! missing target is created empty, with exactly the spec's mode). The
//! kernel releases the lock when the holder's last descriptor closes,
//! which includes every kind of death, so a flock lock is never stale and
//! never broken.
//!
//! What the other strategies keep in their records lives beside it, in
//! `<target>.guard`, written only by the holder of the kernel lock under a
//! short lock of that file: the guard line (last fence,
//! cooldown), then the holder's record, removed on release.
//!
//! TTL, prolong and cooldown, for this strategy:
//! * `ttl` is advisory: it is written into the record and reported by
//!   `inspect`, and release or prolong past it answer `Expired`, but nobody
//!   can take the lock from a live holder.
//! * `prolong` moves that advisory expiry.
//! * a cooldown is kept: release writes "closed until", and an acquirer that
//!   gets the flock during a cooldown lets go of it and reports busy.
//!
//! Like every flock, it is tied to the open file description: a child of
//! `fork()` shares it, which is why the handle refuses to release a lock its
//! process did not take ([`Error::Forked`]).

use core::time::Duration;

use crate::error::{Contention, Error, FileError, FileRole, HolderSummary};
use crate::files::{self, READ_RECORD_FLAGS};
use crate::guard::{guard_path, GuardFile, HeldGuard};
use crate::owner::{Liveness, Nonce};
use crate::record::{Record, RECORD_LINE_CAPACITY};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, judge_record, new_record, Commit, CommitOutcome, Context, Cooldown, Files, Holder, Inspection,
    Prolong, ProlongOutcome, ReleaseOutcome, Strategy, Taken,
};
use crate::sys::{self, CPath, Errno, Fd, FileStat, FlockOp};
use crate::trust::Sharing;

/// A `flock` lock: the target, flocked, and its guard file beside it.
#[derive(Debug)]
pub struct Flock {
    path: CPath,
    state: GuardFile,
    /// The locked descriptor while this handle holds the lock, and which
    /// file it is (a descriptor's file never changes).
    held: Option<(Fd, FileStat)>,
}

impl Flock {
    /// The lock `spec` names, with its guard at `<target>.guard`; opens
    /// nothing yet. A spec error if the guard's path is too long.
    pub fn new(spec: &Spec, sharing: Sharing) -> Result<Flock, Error> {
        let path = spec.file_target()?.clone();
        Ok(Flock { state: GuardFile::new(guard_path(&path)?, FileRole::Guard, sharing), path, held: None })
    }

    /// Opens the target to flock it, as `flock(1)` does: read-only, and
    /// made (empty, complete with the lock's mode, under a helper name and
    /// linked into place) if it is missing. A file or a directory; nothing
    /// else is locked. Its content is never read, but its owner could
    /// replace it under a holder's feet (a sticky directory lets the owner
    /// of a file remove it): it is held to the lock's `mode` like every file
    /// of the lock.
    fn open_target(&self, cx: &Context<'_>) -> Result<(Fd, FileStat), Error> {
        let role = FileRole::Lock;
        for _ in 0..2 {
            let fd = match sys::open(&self.path, READ_RECORD_FLAGS, 0) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => {
                    // Made with its bits under a random name and linked into
                    // place: created at its path, it would stand there with
                    // no bits until its fchmod, and another user of the lock
                    // opening it then would be refused.
                    files::check_directory(&self.path, cx.sharing)?;
                    let helper = files::create_helper_file(&self.path, cx.sharing.mode(), b"")?;
                    let linked = sys::link(&helper, &self.path);
                    let _ = sys::unlink(&helper);
                    match linked {
                        Ok(()) | Err(Errno::EEXIST) => continue,
                        Err(e) => return Err(FileError::from_errno(role, &self.path, e)),
                    }
                }
                Err(e) => return Err(FileError::from_errno(role, &self.path, e)),
            };
            let stat = sys::fstat(&fd).map_err(|e| FileError::io(role, e))?;
            if !stat.is_file() && !stat.is_dir() {
                return Err(Error::not_a_lock(role));
            }
            cx.sharing.check(role, &stat)?;
            return Ok((fd, stat));
        }
        Err(FileError::from_errno(role, &self.path, Errno::ENOENT))
    }

    /// Whether the path still names `locked`, the file of the descriptor
    /// flocked: a lock file that was deleted or replaced no longer excludes
    /// anyone who opens the path.
    fn still_linked(&self, locked: &FileStat) -> bool {
        matches!(sys::lstat(&self.path), Ok(now) if now.same_file(locked))
    }
}

/// The holder's record kept after the guard line, if there is one.
fn read_record(guard: &HeldGuard<'_>) -> Result<Option<Record>, Error> {
    let mut bytes = [0u8; RECORD_LINE_CAPACITY + 2];
    let n = guard.read_after(&mut bytes)?;
    if n == 0 {
        return Ok(None);
    }
    let line = bytes[..n].strip_suffix(b"\n").unwrap_or(&[]);
    match Record::parse_line(line) {
        Some(Ok(record)) => Ok(Some(record)),
        _ => Err(Error::corrupt(FileRole::Guard, crate::error::CorruptKind::Record)),
    }
}

impl Strategy for Flock {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Flock, Error> {
        Flock::new(spec, sharing)
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let (fd, opened) = self.open_target(cx)?;
        if !sys::try_flock(&fd, FlockOp::Exclusive).map_err(|e| FileError::io(FileRole::Lock, e))? {
            drop(fd);
            return Err(Error::Busy(Contention::Held(self.holder_now(cx))));
        }
        if !self.still_linked(&opened) {
            return Err(Error::Busy(Contention::Raced));
        }
        // From here the lock is ours; dropping `fd` on any error releases it.
        let mut guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let now = guard.now;
        if let Some(cooling) = guard.state.cooldown_contention(now) {
            return Err(Error::Busy(cooling));
        }
        // A record left behind is a holder that let go of the kernel lock
        // without releasing (it died, or closed its descriptor) or whose
        // file was deleted under it. One that cannot be read names nobody,
        // and is overwritten all the same.
        let left_behind =
            read_record(&guard).ok().flatten().map(|rec| Holder { stale: true, ..judge_record(cx, &rec, now) });
        let fence = guard.state.next_fence(now)?;
        guard.state.cooldown_until = None;
        let record = new_record(cx, nonce, fence, now, ttl);
        guard.store_with_record(Some(&record))?;
        drop(guard);
        self.held = Some((fd, opened));
        Ok(Taken { record, took_over_from: left_behind })
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let held_here = self.held.is_some();
        let free = if held_here {
            false
        } else {
            match sys::open(&self.path, READ_RECORD_FLAGS, 0) {
                Ok(probe) => {
                    let stat = sys::fstat(&probe).map_err(|e| FileError::io(FileRole::Lock, e))?;
                    if !stat.is_file() && !stat.is_dir() {
                        return Err(Error::not_a_lock(FileRole::Lock));
                    }
                    // A shared flock succeeds only when nobody holds the lock.
                    let free = sys::try_flock(&probe, FlockOp::Shared).map_err(|e| FileError::io(FileRole::Lock, e))?;
                    if free {
                        let _ = sys::try_flock(&probe, FlockOp::Unlock);
                    }
                    free
                }
                Err(Errno::ENOENT) => true,
                Err(e) => return Err(FileError::from_errno(FileRole::Lock, &self.path, e)),
            }
        };
        let guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let record = if free { None } else { read_record(&guard)? };
        let holder = (!free).then(|| holder_of(cx, record, &guard));
        Ok(Inspection {
            holder,
            last_fence: guard.state.fence,
            cooldown_until: guard.state.cooldown_end_seen(guard.now),
            queue_length: None,
        })
    }
}

impl Prolong for Flock {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        let Some((_, locked)) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(locked) {
            return Ok(ProlongOutcome::Lost);
        }
        let mut guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let now = guard.now;
        let old = read_record(&guard)?.filter(|rec| rec.nonce == held.nonce).map_or(held.expires, |rec| rec.expires);
        let renewed = Record { expires: ttl.map(|ttl| now.saturating_add(ttl)), ..*held };
        guard.store_with_record(Some(&renewed))?;
        held.expires = renewed.expires;
        Ok(ProlongOutcome::of_own(old, now))
    }
}

impl Cooldown for Flock {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        // The descriptor leaves the handle only once nothing can fail:
        // closing it lets go of the kernel lock, and a release that fails
        // must leave the lock held, as the handle still says it is.
        let Some((fd, locked)) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(locked) {
            self.held = None;
            return Ok(ReleaseOutcome::Lost);
        }
        let mut guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let expires =
            read_record(&guard)?.filter(|rec| rec.nonce == held.nonce).map_or(held.expires, |rec| rec.expires);
        guard.set_cooldown(cooldown);
        guard.store_with_record(None)?;
        let now = guard.now;
        drop(guard);
        sys::try_flock(fd, FlockOp::Unlock).map_err(|e| FileError::io(FileRole::Lock, e))?;
        self.held = None;
        Ok(ReleaseOutcome::of_own(expires, now))
    }
}

impl Commit for Flock {
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        // The kernel lock excludes everyone while we hold it; the TTL is
        // advisory, but a commit past it is refused all the same, so that
        // the caller's contract does not depend on the strategy.
        let Some((_, locked)) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(locked) {
            return Ok(CommitOutcome::Lost);
        }
        let guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let on_disk = read_record(&guard)?.filter(|rec| rec.nonce == held.nonce);
        commit_if_current(on_disk, guard.now, action)
    }
}

impl Files for Flock {
    fn path(&self) -> &CPath {
        &self.path
    }

    fn guard_path(&self) -> Option<&CPath> {
        Some(self.state.path())
    }
}

impl Flock {
    /// Who holds the kernel lock, as far as the state beside it tells, for
    /// a busy answer: nobody named if it cannot be read by the deadline.
    fn holder_now(&mut self, cx: &Context<'_>) -> HolderSummary {
        let unknown = HolderSummary { pid: 0, host: None, since: None, expires: None };
        let Ok(guard) = self.state.lock(cx.deadline, cx.me.boot) else { return unknown };
        let Ok(record) = read_record(&guard) else { return unknown };
        holder_of(cx, record, &guard).summary()
    }
}

/// The holder of a flock lock the kernel says is held, from the record
/// beside it: a record whose owner is gone is an old one (its holder was
/// killed), and the lock is held by a program that writes none (`flock(1)`).
fn holder_of(cx: &Context<'_>, record: Option<Record>, guard: &HeldGuard<'_>) -> Holder {
    let now = guard.now;
    let record = record.filter(|rec| cx.me.judge(&rec.owner) != Liveness::Dead);
    Holder {
        pid: record.map_or(0, |rec| rec.owner.process.pid),
        host: record.map(|rec| rec.owner.host),
        record,
        liveness: record.map_or(Liveness::Unknown, |rec| cx.me.judge(&rec.owner)),
        // The kernel guarantees a flock holder is alive; age never breaks it.
        stale: false,
        this_handle: false,
        since: record.map(|rec| rec.since),
        expires: record.and_then(|rec| rec.expires).map(|at| at.wall_as_seen(now)),
    }
}

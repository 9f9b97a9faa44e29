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
//! The target's descriptor stays open between acquisitions, so that a
//! cycle opens nothing, if the target was an empty file or a directory at
//! the last release (a data file's would keep a replaced version on the
//! disk): listed where every child of `fork(3)` closes its copy at once
//! ([`KeptFd`]), since a child sharing the description would keep a lock
//! its parent took through it held past the parent's death.
//! Each acquisition still looks at the path once it holds the lock: a
//! target deleted or replaced (`flock(1)` users often remove it after use)
//! is opened anew, and a lock taken on the old one is let go.
//!
//! Like every flock, it is tied to the open file description: the handle
//! refuses to release a lock its process did not take ([`Error::Forked`]).

use core::time::Duration;

use crate::clock::Moment;
use crate::error::{Contention, Error, FileError, FileRole, HolderSummary};
use crate::files::{self, READ_RECORD_FLAGS};
use crate::guard::{guard_path, GuardFile, HeldGuard};
use crate::kept::KeptFd;
use crate::owner::{Liveness, Nonce};
use crate::record::Record;
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, judge_record, new_record, Commit, CommitOutcome, Context, Cooldown, Files, Holder, Inspection,
    Prolong, ProlongOutcome, ReleaseOutcome, Strategy, Taken,
};
use crate::sys::{self, CPath, Errno, FileStat, FlockOp};
use crate::trust::Sharing;

/// A `flock` lock: the target, flocked, and its guard file beside it.
#[derive(Debug)]
pub struct Flock {
    path: CPath,
    state: GuardFile,
    /// The target opened, and which file it is (a descriptor's file never
    /// changes), as last seen: between acquisitions, only if it is kept.
    target: Option<(KeptFd, FileStat)>,
    /// Whether this handle holds the kernel lock, through `target`.
    held: bool,
}

impl Flock {
    /// The lock `spec` names, with its guard at `<target>.guard`; opens
    /// nothing yet. A spec error if the guard's path is too long.
    pub fn new(spec: &Spec, sharing: Sharing) -> Result<Flock, Error> {
        let path = spec.file_target()?.clone();
        Ok(Flock {
            state: GuardFile::new(guard_path(&path)?, FileRole::Guard, sharing),
            path,
            target: None,
            held: false,
        })
    }

    /// Opens the target to flock it, as `flock(1)` does: read-only, and
    /// made (empty, complete with the lock's mode, under a helper name and
    /// linked into place) if it is missing. A file or a directory; nothing
    /// else is locked. Its content is never read, but its owner could
    /// replace it under a holder's feet (a sticky directory lets the owner
    /// of a file remove it): it is held to the lock's `mode` like every file
    /// of the lock.
    fn open_target(&self, cx: &Context<'_>) -> Result<(KeptFd, FileStat), Error> {
        let role = FileRole::Lock;
        for _ in 0..2 {
            let before = crate::kept::before_open();
            let fd = match sys::open(&self.path, READ_RECORD_FLAGS, 0) {
                Ok(fd) => KeptFd::keep(fd, before),
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
                Err(e) => return Err(files::open_error(role, &self.path, e)),
            };
            let stat = sys::fstat(fd.fd()).map_err(|e| FileError::io(role, e))?;
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
        file_at(&self.path, locked).is_some()
    }

    /// The target's descriptor for an attempt, opened unless one is kept
    /// (by this process: a child's copy of the handle lets its parent's
    /// go), and whether it was opened just now.
    fn target_for_attempt(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        self.forget_unusable();
        if self.target.as_ref().is_some_and(|(kept, _)| kept.is_reusable()) {
            return Ok(false);
        }
        self.target = None;
        self.target = Some(self.open_target(cx)?);
        Ok(true)
    }

    /// Forgets a target whose number is not ours to use: in a child of
    /// `fork()`, the copy of its parent's handle holds nothing, and the
    /// number it kept may name another file of the child's by now; and a
    /// number the program closed names a file of its own once it opens one
    /// (the kernel lock went with our description then): `true` when it
    /// forgot a lock this process held.
    fn forget_unusable(&mut self) -> bool {
        let unusable = |(kept, opened): &(KeptFd, FileStat)| !kept.is_here() || !kept.still_names(opened);
        if !self.target.as_ref().is_some_and(unusable) {
            return false;
        }
        let Some((kept, _)) = self.target.take() else { return false };
        let lost_here = self.held && kept.is_here();
        kept.abandon();
        self.held = false;
        lost_here
    }

    /// Lets go of a kernel lock this handle took and must not keep
    /// (something failed after it, or its file is no longer at the path),
    /// explicitly: a description a child of `fork()` shares would outlive
    /// a close.
    fn let_go(&mut self, still_the_lock: bool) {
        self.forget_unusable();
        if let Some((kept, _)) = &self.target {
            let _ = sys::try_flock(kept.fd(), FlockOp::Unlock);
        }
        self.unlocked(still_the_lock);
    }

    /// Once the kernel lock is not held through the target: its descriptor
    /// goes unless it is kept, its file is still the lock's, and it held
    /// nothing to pin when last looked at (at this release, or the attempt
    /// that failed). A data file locked in place is often replaced by its
    /// writers (written anew, renamed over): a descriptor kept on the old
    /// one would keep its blocks on the disk until this handle's next call.
    /// An empty file, made to be locked (as `flock(1)` makes one), or a
    /// directory pins nothing.
    fn unlocked(&mut self, still_the_lock: bool) {
        self.held = false;
        let keep = |(kept, file): &(KeptFd, FileStat)| kept.is_kept() && (file.size == 0 || file.is_dir());
        if !(still_the_lock && self.target.as_ref().is_some_and(keep)) {
            self.target = None;
        }
    }

    /// One try at the kernel lock on the file at the path: `Ok(true)` once
    /// it is held and the path still names the file locked, `Ok(false)`
    /// when the kept descriptor's file is no longer at the path (deleted or
    /// replaced), and must be opened anew.
    fn try_lock_target(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        let role = FileRole::Lock;
        let opened_now = self.target_for_attempt(cx)?;
        let Some((kept, opened)) = &self.target else { return Err(Error::not_a_lock(role)) };
        if !sys::try_flock(kept.fd(), FlockOp::Exclusive).map_err(|e| FileError::io(role, e))? {
            // Busy is judged for the file at the path only (one opened just
            // now was there); a kept one gone from it is opened anew.
            if !opened_now && !self.still_linked(opened) {
                self.target = None;
                return Ok(false);
            }
            let holder = self.holder_now(cx);
            self.unlocked(true);
            return Err(Error::Busy(Contention::Held(holder)));
        }
        let Some(now) = file_at(&self.path, opened) else {
            self.let_go(false);
            return if opened_now { Err(Error::Busy(Contention::Raced)) } else { Ok(false) };
        };
        // Its owner may have changed its bits since it was opened.
        if let Err(e) = cx.sharing.check(role, &now) {
            self.let_go(false);
            return Err(e);
        }
        // The same file, as it is now: its size tells whether to keep it.
        if let Some((_, opened)) = &mut self.target {
            *opened = now;
        }
        self.held = true;
        Ok(true)
    }

    /// Takes the lock's record and fence once the kernel lock is held.
    fn take_held(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
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
        Ok(Taken { record, took_over_from: left_behind })
    }

    /// Whether the path still names the file this handle holds the kernel
    /// lock on, which is then as the path's look found it (its size tells
    /// whether to keep its descriptor after a release); [`Error::NotHeld`]
    /// if it holds none.
    fn held_still_linked(&mut self) -> Result<bool, Error> {
        if self.forget_unusable() {
            return Ok(false);
        }
        let Some((_, locked)) = self.target.as_mut().filter(|_| self.held) else { return Err(Error::NotHeld) };
        let now = file_at(&self.path, locked);
        if let Some(now) = now {
            *locked = now;
        }
        Ok(now.is_some())
    }
}

/// The file at `path` now, if it is `opened`.
fn file_at(path: &CPath, opened: &FileStat) -> Option<FileStat> {
    sys::lstat(path).ok().filter(|now| now.same_file(opened))
}

/// The holder's record kept after the guard line, if there is one.
fn read_record(guard: &HeldGuard<'_>) -> Result<Option<Record>, Error> {
    let bytes = guard.after();
    if bytes.is_empty() {
        return Ok(None);
    }
    let line = bytes.strip_suffix(b"\n").unwrap_or(&[]);
    match Record::parse_line(line) {
        Some(Ok(record)) => Ok(Some(record)),
        _ => Err(Error::corrupt(FileRole::Guard, crate::error::CorruptKind::Record)),
    }
}

/// The expiry of `held`, the holder's acquisition, as its record in the
/// guard says (a prolong of another handle on it may have moved it), or as
/// the holder knows it. A record that does not parse (another user of a
/// shared lock wrote after the guard's line) decides nothing: the kernel
/// lock says who holds the lock, and the holder's write puts the guard
/// whole again.
fn expiry_on_disk(guard: &HeldGuard<'_>, held: &Record) -> Option<Moment> {
    read_record(guard).ok().flatten().filter(|rec| rec.nonce == held.nonce).map_or(held.expires, |rec| rec.expires)
}

impl Strategy for Flock {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Flock, Error> {
        Flock::new(spec, sharing)
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        self.forget_unusable();
        if self.held {
            // An acquisition the caller stopped tracking still holds the
            // kernel lock through this description, which would grant it
            // again: busy while its file is the lock's, as for anyone.
            match &self.target {
                Some((_, locked)) if self.still_linked(locked) => {
                    return Err(Error::Busy(Contention::Held(self.holder_now(cx))));
                }
                _ => self.let_go(false),
            }
        }
        // A kept descriptor whose file is gone from the path is opened anew
        // within the same try: a single try, a zero budget's, is not lost
        // to a target removed while the descriptor sat idle.
        if !self.try_lock_target(cx)? && !self.try_lock_target(cx)? {
            return Err(Error::Busy(Contention::Raced));
        }
        // From here the kernel lock is ours, and let go on any error.
        let taken = self.take_held(cx, nonce, ttl);
        if taken.is_err() {
            self.let_go(true);
        }
        taken
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        self.forget_unusable();
        let held_here = self.held;
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
        if !self.held_still_linked()? {
            return Ok(ProlongOutcome::Lost);
        }
        let mut guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let now = guard.now;
        let old = expiry_on_disk(&guard, held);
        let renewed = Record { expires: ttl.map(|ttl| now.saturating_add(ttl)), ..*held };
        guard.store_with_record(Some(&renewed))?;
        held.expires = renewed.expires;
        Ok(ProlongOutcome::of_own(old, now))
    }
}

impl Cooldown for Flock {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        // The kernel lock is let go only once nothing can fail: a release
        // that fails must leave the lock held, as the handle still says it
        // is.
        if !self.held_still_linked()? {
            self.let_go(false);
            // Lost all the same: a program that writes no record (`flock(1)`)
            // may have locked a new file at the path. But a record still
            // ours says no acquisition of this library came since, and left
            // there it would tell the next holder that it took the lock over
            // from us, dead (its process gone by then), though we let go.
            if let Ok(mut guard) = self.state.lock(cx.deadline, cx.me.boot) {
                if read_record(&guard).ok().flatten().is_some_and(|rec| rec.nonce == held.nonce) {
                    let _ = guard.store_with_record(None);
                }
            }
            return Ok(ReleaseOutcome::Lost);
        }
        let mut guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let expires = expiry_on_disk(&guard, held);
        guard.set_cooldown(cooldown);
        guard.store_with_record(None)?;
        let now = guard.now;
        drop(guard);
        if let Some((kept, _)) = &self.target {
            sys::try_flock(kept.fd(), FlockOp::Unlock).map_err(|e| FileError::io(FileRole::Lock, e))?;
        }
        self.unlocked(true);
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
        if !self.held_still_linked()? {
            return Ok(CommitOutcome::Lost);
        }
        let guard = self.state.lock(cx.deadline, cx.me.boot)?;
        let on_disk = match read_record(&guard) {
            Ok(record) => record.filter(|rec| rec.nonce == held.nonce),
            // Scribbled on: the holder's own record decides, as in
            // `expiry_on_disk`.
            Err(_) => Some(*held),
        };
        commit_if_current(on_disk, guard.now, action)
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        // Explicitly, not by the close alone: a fork between the descriptor's
        // unlisting and its close would leave the child a copy still locked.
        if self.held {
            self.let_go(false);
        }
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

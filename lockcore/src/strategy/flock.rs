//! `flock`: the kernel's advisory lock on a file, the baseline the other
//! strategies are measured against.
//!
//! The kernel releases the lock when the holder's last descriptor closes,
//! which includes every kind of death, so a flock lock is never stale and
//! never broken. What the other strategies keep in records lives here in the
//! locked file itself, written only by the holder:
//!
//! * bytes `0..96`: the guard line (last fence, cooldown), as in
//!   [`crate::guard`];
//! * then the holder's owner record, removed on release.
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

use crate::clock::WallTime;
use crate::error::Error;
use crate::guard::{GuardState, GUARD_RECORD_LEN};
use crate::owner::{Liveness, Nonce};
use crate::record::{Record, Stamp, RECORD_CAPACITY};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, CommitOutcome, Context, Found, Holder, Inspection, ProlongOutcome, ReleaseOutcome, Strategy,
    READ_RECORD_FLAGS,
};
use crate::sys::{self, CPath, Errno, Fd, FlockOp};
use crate::text::FixedText;

const DEFAULT_MODE: u32 = 0o644;

#[derive(Debug)]
pub struct Flock {
    path: CPath,
    mode: libc::mode_t,
    /// The locked descriptor while this handle holds the lock.
    held: Option<Fd>,
}

impl Flock {
    pub fn new(spec: &Spec) -> Flock {
        Flock { path: spec.target().clone(), mode: spec.options.mode.unwrap_or(DEFAULT_MODE), held: None }
    }

    pub fn path(&self) -> &CPath {
        &self.path
    }

    /// Whether the path still names the inode behind `fd`: a lock file that
    /// was deleted or replaced no longer excludes anyone who opens the path.
    fn still_linked(&self, fd: &Fd) -> Result<bool, Error> {
        let locked = sys::fstat(fd).map_err(Error::Os)?;
        Ok(matches!(sys::lstat(&self.path), Ok(now) if now.same_file(&locked)))
    }

    fn write_state(fd: &Fd, state: &GuardState, record: Option<&Record>) -> Result<(), Error> {
        let mut content = FixedText::<{ GUARD_RECORD_LEN + RECORD_CAPACITY }>::new();
        let _ = content.push_bytes(state.encode().as_bytes());
        if let Some(record) = record {
            let _ = content.push_bytes(record.encode(Stamp::Pid).as_bytes());
        }
        sys::pwrite_all(fd, content.as_bytes(), 0).map_err(Error::Os)?;
        sys::ftruncate(fd, content.as_bytes().len() as u64).map_err(Error::Os)
    }
}

fn read_state(fd: &Fd) -> Result<(GuardState, Option<Found>), Error> {
    let mut bytes = [0u8; GUARD_RECORD_LEN + RECORD_CAPACITY + 1];
    let n = sys::pread_full(fd, &mut bytes, 0).map_err(Error::Os)?;
    let state = GuardState::parse(&bytes[..n.min(GUARD_RECORD_LEN)])?;
    if n <= GUARD_RECORD_LEN {
        return Ok((state, None));
    }
    let stat = sys::fstat(fd).map_err(Error::Os)?;
    Ok((state, Some(Found::from_bytes(&bytes[GUARD_RECORD_LEN..n], &stat))))
}

impl Strategy for Flock {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error> {
        let fd = sys::open(&self.path, libc::O_RDWR | libc::O_CREAT | libc::O_NOCTTY | libc::O_NONBLOCK, self.mode)
            .map_err(Error::from_path_errno)?;
        if !sys::fstat(&fd).map_err(Error::Os)?.is_file() {
            return Err(Error::NotALock);
        }
        if !sys::try_flock(&fd, FlockOp::Exclusive).map_err(Error::Os)? || !self.still_linked(&fd)? {
            return Err(Error::Busy);
        }
        // From here the lock is ours; dropping `fd` on any error releases it.
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let (mut state, _) = read_state(&fd)?;
        if state.cooling_down(cx.now) {
            return Err(Error::Busy);
        }
        let fence = state.next_fence(cx.now)?;
        state.cooldown_until = None;
        let record = Record { owner: *cx.me, nonce, fence, expires };
        Self::write_state(&fd, &state, Some(&record))?;
        self.held = Some(fd);
        Ok(record)
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        // The descriptor leaves the handle only once nothing can fail:
        // closing it lets go of the kernel lock, and a release that fails
        // must leave the lock held, as the handle still says it is.
        let Some(fd) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(fd)? {
            self.held = None;
            return Ok(ReleaseOutcome::Lost);
        }
        let (mut state, _) = read_state(fd)?;
        if !cooldown.is_zero() {
            state.cooldown_until = Some(cx.now.saturating_add(cooldown));
        }
        Self::write_state(fd, &state, None)?;
        sys::try_flock(fd, FlockOp::Unlock).map_err(Error::Os)?;
        self.held = None;
        Ok(ReleaseOutcome::of_own(held.expires, cx.now))
    }

    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error> {
        let Some(fd) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(fd)? {
            return Ok(ProlongOutcome::Lost);
        }
        let (state, _) = read_state(fd)?;
        Self::write_state(fd, &state, Some(&Record { expires, ..*held }))?;
        Ok(ProlongOutcome::of_own(held.expires, cx.now))
    }

    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        // The kernel lock excludes everyone while we hold it; the TTL is
        // advisory, but a commit past it is refused all the same, so that
        // the caller's contract does not depend on the strategy.
        let Some(fd) = self.held.as_ref() else { return Err(Error::NotHeld) };
        if !self.still_linked(fd)? {
            return Ok(CommitOutcome::Lost);
        }
        let on_disk = match read_state(fd)? {
            (_, Some(found)) => found.ours(held.nonce),
            (_, None) => None,
        };
        commit_if_current(on_disk, cx.now, action)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let probe;
        let fd = match self.held.as_ref() {
            Some(fd) => fd,
            None => {
                probe = match sys::open(&self.path, READ_RECORD_FLAGS, 0) {
                    Ok(fd) => fd,
                    Err(Errno::ENOENT) => {
                        return Ok(Inspection { holder: None, last_fence: 0, cooldown_until: None, queue_length: None })
                    }
                    Err(e) => return Err(Error::from_path_errno(e)),
                };
                if !sys::fstat(&probe).map_err(Error::Os)?.is_file() {
                    return Err(Error::NotALock);
                }
                &probe
            }
        };
        // A shared flock succeeds only when nobody holds the lock; while we
        // have it, no holder can appear either, so the read is consistent.
        let free = self.held.is_none() && sys::try_flock(fd, FlockOp::Shared).map_err(Error::Os)?;
        let (state, found) = read_state(fd)?;
        if free {
            let _ = sys::try_flock(fd, FlockOp::Unlock);
        }
        let holder = match (free, found) {
            (true, _) => None,
            (false, Some(found)) => {
                let mut holder = found.judge(cx)?;
                // The kernel guarantees a flock holder is alive; age never breaks it.
                holder.stale = false;
                Some(holder)
            }
            // Held by a process that has not written its record yet.
            (false, None) => Some(Holder {
                pid: 0,
                host: None,
                record: None,
                liveness: Liveness::Unknown,
                stale: false,
                this_handle: false,
            }),
        };
        Ok(Inspection {
            holder,
            last_fence: state.fence,
            cooldown_until: state.cooldown_until.filter(|&until| cx.now < until),
            queue_length: None,
        })
    }

    fn break_lock(&mut self, _cx: &Context<'_>) -> Result<bool, Error> {
        Err(Error::Unsupported("breaking a flock lock (the kernel releases it when its holder exits)"))
    }
}

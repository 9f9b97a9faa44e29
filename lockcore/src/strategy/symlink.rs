//! `symlink`: the lock is a symbolic link whose target names the owner and
//! whose own mtime is the expiry time (seed 004, IPC::Lock::WithTTL).
//!
//! `ls -l` shows who holds the lock, `stat` shows when it expires, and an
//! operator can extend it from a shell with `touch -h -d <later> <lock>`. The
//! link is expired when its mtime is at or before now. The target never
//! points at a real file: it is the owner record on one line,
//!
//! ```text
//! lockcore1:<host>:<boot>:<pid>:<start>:<nonce>:<fence>:ttl
//! ```
//!
//! ending in `never` instead of `ttl` for a lock without TTL (its mtime is
//! then only the creation time).
//!
//! The seed's comment thread shows two processes that both judge an expired
//! link stale, both delete and both create. Here breaking and creating happen
//! under the guard ([`crate::guard`]), and a new link is built under
//! `<lock>.tmp` with its final mtime before it is renamed into place, so the
//! lock never appears with a wrong expiry.

use core::ffi::CStr;
use core::fmt::Write;
use core::time::Duration;

use crate::clock::WallTime;
use crate::error::Error;
use crate::guard::{GuardFile, Patience};
use crate::owner::{BootId, HostName, Liveness, Nonce, Owner, ProcessId};
use crate::record::{Parsed, Record};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, ignore_missing, rename_into_place, with_suffix, CommitOutcome, Context, Found, Holder,
    Inspection, ProlongOutcome, ReleaseOutcome, Strategy,
};
use crate::sys::{self, CPath, Errno};
use crate::text::{parse_u64, FixedText};

/// Longest link target we write or accept.
const TARGET_CAPACITY: usize = 256;

#[derive(Debug)]
pub struct Symlink {
    links: Links,
    guard: GuardFile,
}

#[derive(Debug)]
struct Links {
    lock: CPath,
    temp: CPath,
}

/// What the lock path holds.
enum Seen {
    Ours(Record),
    /// A symlink we did not write: stale when its mtime has passed.
    Foreign {
        expires: WallTime,
    },
}

impl Symlink {
    pub fn new(spec: &Spec) -> Result<Symlink, Error> {
        let lock = spec.target().clone();
        Ok(Symlink {
            guard: GuardFile::new(crate::guard::guard_path(&lock)?, 0o666),
            links: Links { temp: with_suffix(&lock, b".tmp")?, lock },
        })
    }

    pub fn path(&self) -> &CPath {
        &self.links.lock
    }
}

impl Links {
    fn read(&self) -> Result<Option<Seen>, Error> {
        let stat = match sys::lstat(&self.lock) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(Error::from_path_errno(e)),
        };
        if !stat.is_symlink() {
            return Err(Error::NotALock);
        }
        let mtime = WallTime::from_unix_nanos(stat.mtime_ns);
        let mut target = [0u8; TARGET_CAPACITY + 1];
        let n = match sys::readlink(&self.lock, &mut target) {
            Ok(n) => n,
            // Removed between lstat and readlink: no lock.
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(Error::from_path_errno(e)),
        };
        Ok(Some(match parse_target(&target[..n], mtime) {
            Some(record) => Seen::Ours(record),
            None => Seen::Foreign { expires: mtime },
        }))
    }

    /// Makes the link under the temp name with its final mtime, then renames
    /// it into place, and returns the record as stored. `Ok(None)` if a link
    /// appeared there meanwhile.
    fn create(&self, record: &Record, now: WallTime) -> Result<Option<Record>, Error> {
        let target = encode_target(record);
        ignore_missing(sys::unlink(&self.temp))?;
        let text =
            CStr::from_bytes_until_nul(target.as_bytes()).map_err(|_| Error::Corrupt(crate::CorruptKind::Record))?;
        sys::symlink(text, &self.temp).map_err(Error::from_path_errno)?;
        let mtime = record.expires.unwrap_or(now);
        // The file system keeps the mtime at its own granularity (whole
        // seconds on some) and range: the expiry the others will judge by
        // is the one read back, not the one asked for.
        let stored = sys::set_times_nofollow(&self.temp, mtime.unix_nanos()).and_then(|()| sys::lstat(&self.temp));
        let stored = match stored {
            Ok(stat) => stat,
            Err(e) => {
                let _ = sys::unlink(&self.temp);
                return Err(Error::from_path_errno(e));
            }
        };
        let record = Record { expires: record.expires.map(|_| WallTime::from_unix_nanos(stored.mtime_ns)), ..*record };
        let placed = rename_into_place(&self.temp, &self.lock)?;
        if !placed {
            let _ = sys::unlink(&self.temp);
        }
        Ok(placed.then_some(record))
    }
}

fn encode_target(record: &Record) -> FixedText<{ TARGET_CAPACITY + 1 }> {
    let mut out = FixedText::new();
    let owner = &record.owner;
    // Bounded fields (64-byte host, fixed-width numbers): always fits.
    let _ = out.push_bytes(b"lockcore1:");
    let _ = out.push_bytes(owner.host.as_bytes());
    let _ = match owner.boot {
        Some(boot) => write!(out, ":{boot:?}"),
        None => out.push_bytes(b":-"),
    };
    let _ = write!(out, ":{}:{}:", owner.process.pid, owner.process.start_ticks);
    let _ = out.push_bytes(&record.nonce.hex());
    let _ = write!(out, ":{}:{}\0", record.fence, if record.expires.is_some() { "ttl" } else { "never" });
    out
}

fn parse_target(target: &[u8], mtime: WallTime) -> Option<Record> {
    let rest = target.strip_prefix(b"lockcore1:")?;
    let mut fields = rest.split(|&b| b == b':');
    let host = HostName::from_bytes(fields.next()?)?;
    let boot = match fields.next()? {
        b"-" => None,
        hex => Some(BootId::parse_uuid(hex)?),
    };
    let pid = parse_u64(fields.next()?).and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0)?;
    let start_ticks = parse_u64(fields.next()?)?;
    let nonce = Nonce::parse_hex(fields.next()?)?;
    let fence = parse_u64(fields.next()?)?;
    let expires = match fields.next()? {
        b"ttl" => Some(mtime),
        b"never" => None,
        _ => return None,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Record { owner: Owner { host, boot, process: ProcessId { pid, start_ticks } }, nonce, fence, expires })
}

fn judge(seen: &Seen, cx: &Context<'_>) -> Result<Holder, Error> {
    match seen {
        Seen::Ours(record) => {
            Found { content: Ok(Parsed::Ours(*record)), written_at: record.expires.unwrap_or(cx.now) }.judge(cx)
        }
        Seen::Foreign { expires } => Ok(Holder {
            pid: 0,
            host: None,
            record: None,
            liveness: Liveness::Unknown,
            stale: *expires <= cx.now,
            this_handle: false,
        }),
    }
}

fn is_ours(seen: &Option<Seen>, nonce: Nonce) -> Option<Record> {
    match seen {
        Some(Seen::Ours(record)) if record.nonce == nonce => Some(*record),
        _ => None,
    }
}

impl Strategy for Symlink {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error> {
        let mut guard = self.guard.lock(Patience::Attempt)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        if guard.state.cooling_down(cx.now) {
            return Err(Error::Busy);
        }
        let stale = match self.links.read()? {
            Some(seen) => {
                if let Seen::Ours(record) = &seen {
                    guard.state.fence = guard.state.fence.max(record.fence);
                }
                if !judge(&seen, cx)?.stale {
                    return Err(Error::Busy);
                }
                true
            }
            None => false,
        };
        // Drawn before a stale link goes (see lockfile.rs).
        let fence = guard.state.next_fence(cx.now)?;
        if stale {
            // Judged and removed inside one guard section.
            ignore_missing(sys::unlink(&self.links.lock))?;
        }
        guard.state.cooldown_until = None;
        guard.store()?;
        let record = Record { owner: *cx.me, nonce, fence, expires };
        self.links.create(&record, cx.now)?.ok_or(Error::Busy)
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let mut guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        // The link's mtime, not our memory, says when it expires: an
        // operator may have extended it with `touch -h`.
        let Some(on_disk) = is_ours(&self.links.read()?, held.nonce) else { return Ok(ReleaseOutcome::Lost) };
        ignore_missing(sys::unlink(&self.links.lock))?;
        guard.start_cooldown(cx.now, cooldown)?;
        Ok(ReleaseOutcome::of_own(on_disk.expires, cx.now))
    }

    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let Some(on_disk) = is_ours(&self.links.read()?, held.nonce) else { return Ok(ProlongOutcome::Lost) };
        if on_disk.expires.is_some() == expires.is_some() {
            let mtime = expires.unwrap_or(cx.now);
            sys::set_times_nofollow(&self.links.lock, mtime.unix_nanos()).map_err(Error::from_path_errno)?;
        } else {
            // "ttl" becomes "never" or back: the target changes, so a new
            // link replaces the old one in one rename.
            let record = Record { expires, ..on_disk };
            let target = encode_target(&record);
            let text = CStr::from_bytes_until_nul(target.as_bytes())
                .map_err(|_| Error::Corrupt(crate::CorruptKind::Record))?;
            ignore_missing(sys::unlink(&self.links.temp))?;
            sys::symlink(text, &self.links.temp).map_err(Error::from_path_errno)?;
            sys::set_times_nofollow(&self.links.temp, expires.unwrap_or(cx.now).unix_nanos())
                .and_then(|()| sys::rename(&self.links.temp, &self.links.lock))
                .map_err(|e| {
                    let _ = sys::unlink(&self.links.temp);
                    Error::from_path_errno(e)
                })?;
        }
        Ok(ProlongOutcome::of_own(on_disk.expires, cx.now))
    }

    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        commit_if_current(is_ours(&self.links.read()?, held.nonce), cx.now, action)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        let holder = match self.links.read()? {
            Some(seen) => Some(judge(&seen, cx)?),
            None => None,
        };
        Ok(guard.state.inspection(holder, cx.now))
    }

    fn break_lock(&mut self, _cx: &Context<'_>) -> Result<bool, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        match self.links.read()? {
            None => Ok(false),
            Some(_) => {
                ignore_missing(sys::unlink(&self.links.lock))?;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_targets_round_trip_and_foreign_ones_are_not_ours() {
        let now = WallTime::now();
        for expires in [Some(now), None] {
            let record = Record { owner: Owner::current().unwrap(), nonce: Nonce(7 << 100 | 9), fence: 42, expires };
            let text = encode_target(&record);
            let bytes = text.as_bytes();
            let parsed = parse_target(&bytes[..bytes.len() - 1], now).unwrap();
            assert_eq!(parsed, record);
        }
        assert!(parse_target(b"ipc-lock-withttl.4242", now).is_none());
        assert!(parse_target(b"lockcore1:host:-:1:2:zz:3:ttl", now).is_none());
        assert!(parse_target(b"lockcore1:host:-:0:2:00000000000000000000000000000000:3:ttl", now).is_none());
    }
}

//! `symlink`: the lock is a symbolic link whose target names the owner and
//! whose own mtime is the expiry time (the scheme of IPC::Lock::WithTTL).
//!
//! `ls -l` shows who holds the lock, `stat` shows when it expires, and an
//! operator can extend it from a shell with `touch -h -d <later> <lock>`. The
//! target never points at a real file: it is the owner record, one line
//! (the text form of a [`Record`]). The record's expiry is a [`Moment`]
//! of both clocks; the link's mtime is its wall-clock part, and `touch -h`
//! moves the whole expiry by as much as it moves the mtime.
//!
//! Two programs that judge an expired link stale must not both break it and
//! both create a new one (IPC::Lock::WithTTL's bug). Here breaking and
//! creating happen under the guard (`<lock>.guard`), and a new link is
//! built under a helper name with its final mtime before it is renamed into
//! place, so the lock never appears with a wrong expiry.
//!
//! A link of another program is a lock only if its target is one name, no
//! path, that names nothing beside it ([`peer_lock`]): a shell script's
//! `ln -s $$ lock` (the target is the holder's pid, the mtime when it took
//! the lock), judged as a LockFile::Simple stamp is; or IPC::Lock::WithTTL's
//! link, whose target is a name of its own and whose mtime is its expiry.
//! Either is removed only if it is still the link that was judged. Any
//! other link (`/var/lock -> /run/lock`, one to a file or directory) is no
//! lock, and is never removed.

use core::ffi::CStr;

use crate::clock::{Moment, WallTime};
use crate::error::{Error, FileError, FileRole};
use crate::files::{self, helper_path, rename_into_place};
use crate::record::{Record, RECORD_LINE_CAPACITY};
use crate::spec::Spec;
use crate::strategy::guarded::LockStore;
use crate::strategy::{Context, ForeignRule, Found, Holding};
use crate::sys::{self, CPath, Errno};

/// The symlink of a `symlink` lock.
#[derive(Debug)]
pub struct Symlink {
    lock: CPath,
}

impl Symlink {
    /// Makes a link holding `record` under a helper name, with the mtime
    /// its expiry (or its start, without one) asks for, and returns the name
    /// and the record as the file system keeps it.
    fn build(&self, record: &Record) -> Result<(CPath, Record), Error> {
        let line = record.encode_line();
        let mut target = [0u8; RECORD_LINE_CAPACITY + 1];
        target[..line.as_bytes().len()].copy_from_slice(line.as_bytes());
        let text = CStr::from_bytes_until_nul(&target).map_err(|_| Error::not_a_lock(FileRole::Helper))?;
        let helper = helper_path(&self.lock)?;
        sys::symlink(text, &helper).map_err(|e| FileError::from_errno(FileRole::Helper, &helper, e))?;
        let asked = record.expires.map_or(record.since, |at| at.wall);
        // The file system keeps the mtime at its own granularity (whole
        // seconds on some): the expiry the others will judge by is the one
        // read back, and the boot clock's part moves with it.
        let stored = sys::set_times_nofollow(&helper, asked.unix_nanos()).and_then(|()| sys::lstat(&helper));
        match stored {
            Ok(stat) => {
                let kept = WallTime::from_unix_nanos(stat.mtime_ns);
                let record = Record { expires: record.expires.map(|at| moved(at, asked, kept)), ..*record };
                Ok((helper, record))
            }
            Err(e) => {
                let _ = sys::unlink(&helper);
                Err(FileError::from_errno(FileRole::Helper, &helper, e))
            }
        }
    }
}

/// The longest name of a file (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// What holds a lock whose link `lock` has `target`, not a record of ours:
/// a peer's lock, or none ([`Problem::NotALock`]). The peers' targets are
/// one short name, never a path, and name no file: a target with a `/`,
/// `.`, `..`, a name that is there beside the link, or one longer than a
/// name can be (`target` is cut after the longest record), is a link to
/// something, or nonsense, which no peer makes.
///
/// [`Problem::NotALock`]: crate::error::Problem::NotALock
fn peer_lock(lock: &CPath, target: &[u8]) -> Result<Holding, Error> {
    let no_lock = || Err(Error::not_a_lock(FileRole::Lock));
    let path_like = target.contains(&b'/') || target == b"." || target == b"..";
    if target.is_empty() || target.len() > NAME_MAX || path_like {
        return no_lock();
    }
    let named = CPath::from_parts(&[lock.parent(), b"/", target]).map_err(|_| files::path_too_long())?;
    match sys::lstat(&named) {
        Err(Errno::ENOENT) => {}
        Ok(_) => return no_lock(),
        Err(e) => return Err(FileError::from_errno(FileRole::Lock, &named, e)),
    }
    if target.iter().all(u8::is_ascii_digit) {
        // A shell's `ln -s $$`: its pid, as in a LockFile::Simple stamp.
        return match crate::text::parse_u64(target).and_then(|pid| i32::try_from(pid).ok()).filter(|&pid| pid > 0) {
            Some(pid) => Ok(Holding::Foreign { pid, host: None, rule: ForeignRule::Stamp }),
            // Digits no process can have as its pid: no shell wrote them.
            None => no_lock(),
        };
    }
    Ok(Holding::Foreign { pid: 0, host: None, rule: ForeignRule::ExpiresAtMtime })
}

/// `at` moved by as much as the wall-clock time `from` moved to `to`.
fn moved(at: Moment, from: WallTime, to: WallTime) -> Moment {
    let (forward, by) = if to >= from { (true, to.since(from)) } else { (false, from.since(to)) };
    let shift = |nanos: i64| {
        let by = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        if forward {
            nanos.saturating_add(by)
        } else {
            nanos.saturating_sub(by)
        }
    };
    Moment {
        wall: WallTime::from_unix_nanos(shift(at.wall.unix_nanos())),
        boot: at.boot.map(|(id, t)| (id, crate::clock::BootTime::from_nanos(shift(t.nanos())))),
    }
}

impl LockStore for Symlink {
    fn open(spec: &Spec) -> Result<Symlink, Error> {
        Ok(Symlink { lock: spec.file_target()?.clone() })
    }

    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error> {
        let stat = match sys::lstat(&self.lock) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(FileError::from_errno(FileRole::Lock, &self.lock, e)),
        };
        if !stat.is_symlink() {
            return Err(Error::not_a_lock(FileRole::Lock));
        }
        cx.sharing.check(FileRole::Lock, &stat)?;
        let mtime = WallTime::from_unix_nanos(stat.mtime_ns);
        let mut target = [0u8; RECORD_LINE_CAPACITY + 1];
        let n = match sys::readlink(&self.lock, &mut target) {
            Ok(n) => n,
            // Removed between lstat and readlink: no lock.
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(FileError::from_errno(FileRole::Lock, &self.lock, e)),
        };
        let holding = match Record::parse_line(&target[..n]) {
            // An operator's `touch -h` moved the mtime: the expiry moves with it.
            Some(Ok(record)) => {
                Holding::Ours(Record { expires: record.expires.map(|at| moved(at, at.wall, mtime)), ..record })
            }
            Some(Err(kind)) => Holding::Corrupt(kind),
            None => peer_lock(&self.lock, &target[..n])?,
        };
        Ok(Some(Found { holding, written_at: mtime, stat }))
    }

    fn create(&self, _cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error> {
        let (helper, record) = self.build(record)?;
        let placed = rename_into_place(&helper, &self.lock);
        if !matches!(placed, Ok(true)) {
            let _ = sys::unlink(&helper);
        }
        Ok(placed?.then_some(record))
    }

    fn replace(&self, _cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error> {
        let (helper, _) = self.build(record)?;
        files::replace_judged(&self.lock, &found.stat, &helper)
    }

    fn remove(&self, _cx: &Context<'_>, found: &Found) -> Result<bool, Error> {
        // Ours or a peer's, only the very file that was read goes: a peer
        // takes no guard, and rename(2) can put its lock in place of ours
        // between our read and our removal.
        files::unlink_judged(&self.lock, &found.stat)
    }

    fn path(&self) -> &CPath {
        &self.lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{BootId, BootTime};

    #[test]
    fn touching_the_link_moves_the_whole_expiry() {
        let at = Moment {
            wall: WallTime::from_unix_nanos(10_000),
            boot: Some((BootId([1; 16]), BootTime::from_nanos(500))),
        };
        let later = moved(at, at.wall, WallTime::from_unix_nanos(12_000));
        assert_eq!(later.wall, WallTime::from_unix_nanos(12_000));
        assert_eq!(later.boot.map(|(_, t)| t.nanos()), Some(2_500));
        let earlier = moved(at, at.wall, WallTime::from_unix_nanos(9_000));
        assert_eq!(earlier.boot.map(|(_, t)| t.nanos()), Some(-500));
        assert_eq!(moved(at, at.wall, at.wall), at);
    }
}

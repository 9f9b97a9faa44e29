//! `lockfile`: a lock file holding the owner record, shared with Perl's
//! LockFile::Simple and with liblockfile.
//!
//! The target is the file you protect; the lock file is `<target>.lock` by
//! default (options `ext` and `format` as in LockFile::Simple), never the
//! target itself. It is made complete and read-only under a helper name and
//! `link(2)`ed into place, so a reader never sees it without its record,
//! and `link` fails with `EEXIST` on anything already there, a planted
//! symlink included. On NFS, where a `link` reply can be lost, success is
//! confirmed by the inode (liblockfile checks the link count). Release is
//! one `unlink`, prolong one `rename` of a new lock file over the old.
//!
//! Peers do not take the guard. A LockFile::Simple or liblockfile process
//! sees our lock file and waits, and we see its stamp (`PID`, `PID:HOST`,
//! or liblockfile's pid-less `0`) and wait, so the two exclude each other;
//! a peer's stale lock is broken only if it is still the file that was
//! judged. A file at the lock path in no format of ours or theirs (a data
//! file) is never removed.

use crate::clock::WallTime;
use crate::error::{Error, FileRole};
use crate::files::{self, create_helper_file, with_suffix};
use crate::record::{parse_lock_file, LockFileContent, Record, Stamp, Unrecognised, RECORD_CAPACITY};
use crate::spec::{ShortText, Spec};
use crate::strategy::guarded::LockStore;
use crate::strategy::{Context, ForeignRule, Found, Holding};
use crate::sys::{self, CPath};

/// The lock file of a `lockfile` lock.
#[derive(Debug)]
pub struct LockFile {
    lock: CPath,
    /// The protected file: never taken for a lock, whatever it holds.
    target: CPath,
    stamp: Stamp,
}

impl LockFile {
    /// The lock file `spec` names: `<target>.lock`, or as its `ext` or
    /// `format` says. A spec error if that path is too long or is the
    /// target itself.
    fn new(spec: &Spec) -> Result<LockFile, Error> {
        let options = &spec.options;
        let target = spec.file_target()?;
        let lock = match (&options.format, &options.ext) {
            (Some(format), _) => expand_format(format, target)?,
            (None, Some(ext)) => with_suffix(target, ext.as_bytes())?,
            (None, None) => with_suffix(target, b".lock")?,
        };
        if names_the_target(&lock, target) {
            return Err(Error::Spec(crate::error::SpecError::new(
                crate::error::SpecErrorKind::BadValue,
                if options.format.is_some() { b"format" } else { b"ext" },
                "names the protected file itself as its lock file",
            )));
        }
        Ok(LockFile { lock, target: target.clone(), stamp: if options.nfs { Stamp::PidHost } else { Stamp::Pid } })
    }
}

/// Whether `lock` is the target itself, written the same way or as
/// `<dir>/<name>` (`%D/%F`, `./data` for `data`).
fn names_the_target(lock: &CPath, target: &CPath) -> bool {
    if lock.as_bytes() == target.as_bytes() {
        return true;
    }
    let (dir, name) = (target.parent(), target.file_name());
    let bytes = lock.as_bytes();
    bytes.len() == dir.len() + 1 + name.len()
        && bytes.starts_with(dir)
        && bytes[dir.len()] == b'/'
        && bytes.ends_with(name)
}

impl LockStore for LockFile {
    fn open(spec: &Spec) -> Result<LockFile, Error> {
        LockFile::new(spec)
    }

    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error> {
        let mut bytes = [0u8; RECORD_CAPACITY + 1];
        let Some((stat, n)) = files::read_lock_file(&self.lock, cx.sharing, &mut bytes)? else { return Ok(None) };
        let holding = match parse_lock_file(&bytes[..n]) {
            Ok(LockFileContent::Ours(record)) => Holding::Ours(record),
            Ok(LockFileContent::Stamp { pid, host }) => Holding::Foreign { pid, host, rule: ForeignRule::Stamp },
            Ok(LockFileContent::PidLess) => Holding::Foreign { pid: 0, host: None, rule: ForeignRule::PidLess },
            Ok(LockFileContent::Empty) => Holding::Foreign { pid: 0, host: None, rule: ForeignRule::Anonymous },
            Err(Unrecognised::Corrupt(kind)) => Holding::Corrupt(kind),
            Err(Unrecognised::NotALock) => return Err(Error::not_a_lock(FileRole::Lock)),
        };
        // A format can name the protected file by another spelling of its
        // path (`%D/./%F`), or the lock path be a hard link to it: its
        // content (a counter's `12345`) is then data, not a peer's stamp.
        if !matches!(holding, Holding::Ours(_)) && sys::lstat(&self.target).is_ok_and(|t| t.same_file(&stat)) {
            return Err(Error::not_a_lock(FileRole::Lock));
        }
        Ok(Some(Found { holding, written_at: WallTime::from_unix_nanos(stat.mtime_ns), stat }))
    }

    fn create(&self, cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error> {
        let content = record.encode_lock_file(self.stamp);
        let linked = files::link_lock_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        Ok(linked.then_some(*record))
    }

    fn replace(&self, cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error> {
        let content = record.encode_lock_file(self.stamp);
        let helper = create_helper_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        // Readers see the old lock file or the new one, never neither.
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

/// Expands LockFile::Simple's macros: `%f` the target, `%D` its directory,
/// `%F` its base name, `%%` a percent sign. The spec parser has already
/// refused any other macro.
fn expand_format(format: &ShortText, target: &CPath) -> Result<CPath, Error> {
    let mut out = CPath::empty();
    let bytes = format.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let piece: &[u8] = if bytes[i] == b'%' && i + 1 < bytes.len() {
            i += 1;
            match bytes[i] {
                b'f' => target.as_bytes(),
                b'D' => target.parent(),
                b'F' => target.file_name(),
                _ => b"%",
            }
        } else {
            &bytes[i..=i]
        };
        out.push(piece).map_err(|_| files::path_too_long())?;
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorKind, SpecErrorKind};

    fn lock_path(spec: &str) -> Result<CPath, Error> {
        let spec = Spec::parse(spec.as_bytes()).unwrap();
        LockFile::new(&spec).map(|lock| lock.lock)
    }

    #[test]
    fn lock_paths_follow_lockfile_simple() {
        assert_eq!(lock_path("lockfile:/srv/data.txt").unwrap().as_bytes(), b"/srv/data.txt.lock");
        assert_eq!(lock_path("lockfile:/srv/data.txt?ext=.lck").unwrap().as_bytes(), b"/srv/data.txt.lck");
        assert_eq!(
            lock_path("lockfile:/srv/data.txt?format=%25D/.%25F.lock%25%25").unwrap().as_bytes(),
            b"/srv/.data.txt.lock%"
        );
        assert_eq!(lock_path("lockfile:data.txt?format=%25D/%25F.l").unwrap().as_bytes(), b"./data.txt.l");
        assert_eq!(lock_path("lockfile:/data?format=%25D%25F.l").unwrap().as_bytes(), b"/data.l");
    }

    #[test]
    fn the_protected_file_is_never_its_own_lock_file() {
        for spec in [
            "lockfile:/srv/data.txt?format=%25f",
            "lockfile:/srv/data.txt?format=%25D/%25F",
            "lockfile:data?format=%25D/%25F",
        ] {
            let err = lock_path(spec).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Spec(SpecErrorKind::BadValue), "{spec}");
        }
    }
}

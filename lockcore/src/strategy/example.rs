//! `example`: the smallest whole strategy, and the template for a new one.
//!
//! Built only with the `example-scheme` feature. Its lock is a file at the
//! target holding this library's record and nothing else, made complete
//! under a helper name and `link(2)`ed into place; [`Guarded`] supplies the
//! guard, the fences, the cooldown and the judging of stale locks. Its
//! registry entry ([`crate::registry`]) is all the rest of the workspace
//! needs: the test suites, the C tests, the contention report and the demo
//! pick it up from [`crate::Scheme::ALL`], which a test checks.
//!
//! [`Guarded`]: crate::strategy::guarded::Guarded

use crate::clock::WallTime;
use crate::error::{Error, FileError, FileRole};
use crate::files::{self, create_helper_file, READ_RECORD_FLAGS};
use crate::record::{parse_lock_file, LockFileContent, Record, Stamp, Unrecognised, RECORD_CAPACITY};
use crate::spec::Spec;
use crate::strategy::guarded::LockStore;
use crate::strategy::{Context, Found, Holding};
use crate::sys::{self, CPath, Errno};

/// The lock file of an `example` lock: the target itself.
#[derive(Debug)]
pub struct Example {
    lock: CPath,
}

impl LockStore for Example {
    fn open(spec: &Spec) -> Result<Example, Error> {
        Ok(Example { lock: spec.file_target()?.clone() })
    }

    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error> {
        let fd = match sys::open(&self.lock, READ_RECORD_FLAGS, 0) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(FileError::from_errno(FileRole::Lock, &self.lock, e)),
        };
        let stat = sys::fstat(&fd).map_err(|e| FileError::io(FileRole::Lock, e))?;
        if !stat.is_file() {
            return Err(Error::not_a_lock(FileRole::Lock));
        }
        cx.sharing.check(FileRole::Lock, &stat)?;
        let mut bytes = [0u8; RECORD_CAPACITY + 1];
        let n = sys::read_full(&fd, &mut bytes).map_err(|e| FileError::io(FileRole::Lock, e))?;
        // No peer writes this format: anything but our record is no lock.
        let holding = match parse_lock_file(&bytes[..n]) {
            Ok(LockFileContent::Ours(record)) => Holding::Ours(record),
            Err(Unrecognised::Corrupt(kind)) => Holding::Corrupt(kind),
            Ok(_) | Err(Unrecognised::NotALock) => return Err(Error::not_a_lock(FileRole::Lock)),
        };
        Ok(Some(Found { holding, written_at: WallTime::from_unix_nanos(stat.mtime_ns), stat }))
    }

    fn create(&self, cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error> {
        let content = record.encode_lock_file(Stamp::Pid);
        let helper = create_helper_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        let linked = match sys::link(&helper, &self.lock) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => Ok(false),
            Err(e) => Err(FileError::from_errno(FileRole::Lock, &self.lock, e)),
        };
        let _ = sys::unlink(&helper);
        Ok(linked?.then_some(*record))
    }

    fn replace(&self, cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error> {
        let content = record.encode_lock_file(Stamp::Pid);
        let helper = create_helper_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        files::replace_judged(&self.lock, &found.stat, &helper)
    }

    fn remove(&self, _cx: &Context<'_>, found: &Found) -> Result<bool, Error> {
        files::remove_judged(&self.lock, &found.stat, |aside| {
            files::ignore_missing(sys::unlink(aside), FileRole::Helper, aside)
        })
    }

    fn path(&self) -> &CPath {
        &self.lock
    }
}

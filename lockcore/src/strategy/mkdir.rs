//! `mkdir`: the lock is a directory, with the owner record inside it.
//!
//! `mkdir(2)` is the classic atomic test-and-set of CGI scripts (seed 001),
//! and works on NFS. A directory that appears before its record would look
//! like a foreign lock, so ours never does: the directory is built complete
//! under `<lock>.new` (record included) and renamed into place with
//! `RENAME_NOREPLACE`. Release and break rename the directory away to a
//! unique `<lock>.old.<nonce>` in one step and clean it up afterwards, so a
//! crash at any point leaves either a complete lock or none, never a wedged
//! empty directory. Every change happens under the guard ([`crate::guard`]).
//!
//! An empty directory made by a plain `mkdir` (a shell script, a seed-001 Perl
//! CGI) is a foreign lock: it excludes us, and is stale only by age (`ttl`).

use core::ffi::CStr;
use core::time::Duration;

use crate::clock::WallTime;
use crate::error::Error;
use crate::guard::{GuardFile, Patience};
use crate::owner::Nonce;
use crate::record::{Parsed, Record, Stamp};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, ignore_missing, read_record, rename_into_place, with_suffix, write_new_file, CommitOutcome,
    Context, Found, Inspection, ProlongOutcome, ReleaseOutcome, Strategy, CREATE_NEW_FLAGS, READ_RECORD_FLAGS,
};
use crate::sys::{self, CPath, Errno, Fd};

const RECORD_NAME: &CStr = c"owner";
const RECORD_TEMP_NAME: &CStr = c"owner.tmp";
const DEFAULT_MODE: u32 = 0o755;

#[derive(Debug)]
pub struct Mkdir {
    dirs: Dirs,
    guard: GuardFile,
}

/// The lock's paths and how its directories are made; apart from the guard
/// so that both can be used while the guard is held.
#[derive(Debug)]
struct Dirs {
    lock: CPath,
    staging: CPath,
    mode: libc::mode_t,
}

impl Mkdir {
    pub fn new(spec: &Spec) -> Result<Mkdir, Error> {
        let lock = spec.target().clone();
        Ok(Mkdir {
            guard: GuardFile::new(crate::guard::guard_path(&lock)?, crate::guard::mode_for(spec.options.mode)),
            dirs: Dirs { staging: with_suffix(&lock, b".new")?, lock, mode: spec.options.mode.unwrap_or(DEFAULT_MODE) },
        })
    }

    pub fn path(&self) -> &CPath {
        &self.dirs.lock
    }

    pub fn guard_path(&self) -> &CPath {
        self.guard.path()
    }
}

impl Dirs {
    /// The lock directory and its record; `Ok(None)` when there is no lock.
    /// A directory without a record is a foreign lock, dated by its mtime.
    fn read(&self) -> Result<Option<(Fd, Found)>, Error> {
        let dir = match open_dir(&self.lock)? {
            Some(dir) => dir,
            None => return Ok(None),
        };
        let found = match read_record(|| sys::openat(&dir, RECORD_NAME, READ_RECORD_FLAGS, 0), None)? {
            Some(found) => found,
            None => Found {
                content: Ok(Parsed::Empty),
                written_at: WallTime::from_unix_nanos(sys::fstat(&dir).map_err(Error::Os)?.mtime_ns),
            },
        };
        Ok(Some((dir, found)))
    }

    /// Moves the lock directory out of the way in one rename, then empties
    /// and removes it. Files we did not put there are left in the retired
    /// directory rather than deleted.
    fn retire(&self, tag: Nonce) -> Result<(), Error> {
        let retired = CPath::from_parts(&[self.lock.as_bytes(), b".old.", &tag.hex()])
            .map_err(|_| crate::strategy::path_too_long())?;
        match sys::rename(&self.lock, &retired) {
            Ok(()) => {}
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(Error::from_path_errno(e)),
        }
        match remove_lock_dir(&retired) {
            Err(Error::NotALock) => Ok(()),
            other => other,
        }
    }

    fn write_record(&self, dir: &Fd, name: &CStr, record: &Record) -> Result<(), Error> {
        ignore_missing(sys::unlinkat(dir, name))?;
        write_new_file(
            || sys::openat(dir, name, CREATE_NEW_FLAGS, 0o444),
            record.encode(Stamp::Pid).as_bytes(),
            || sys::unlinkat(dir, name),
        )
    }

    /// Builds the complete lock under the staging name and renames it into
    /// place. `Ok(false)` if a lock appeared there meanwhile (only a foreign
    /// `mkdir` can, since ours hold the guard).
    fn create(&self, record: &Record) -> Result<bool, Error> {
        // A leftover staging directory is a crashed creator's: the guard is
        // ours, so nobody else is building one now.
        remove_lock_dir(&self.staging)?;
        sys::mkdir(&self.staging, self.mode).map_err(Error::from_path_errno)?;
        let staged = open_dir(&self.staging)?.ok_or(Error::NotFound)?;
        self.write_record(&staged, RECORD_NAME, record)?;
        drop(staged);
        if rename_into_place(&self.staging, &self.lock)? {
            Ok(true)
        } else {
            remove_lock_dir(&self.staging)?;
            Ok(false)
        }
    }
}

impl Strategy for Mkdir {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error> {
        let mut guard = self.guard.lock(Patience::Attempt)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        if guard.state.cooling_down(cx.now) {
            return Err(Error::Busy);
        }
        let stale = match self.dirs.read()? {
            Some((_, found)) => {
                guard.state.raise_fence_to(&found);
                if !found.judge(cx)?.stale {
                    return Err(Error::Busy);
                }
                true
            }
            None => false,
        };
        // Drawn before a stale record goes (see lockfile.rs).
        let fence = guard.state.next_fence(cx.now)?;
        if stale {
            // Judged and retired inside one guard section (see lockfile.rs).
            // Under a tag of its own: `nonce` names our record, and our
            // release retires under it; a retired directory that could not
            // be emptied (foreign files in it) must not block that rename.
            self.dirs.retire(Nonce::random()?)?;
        }
        guard.state.cooldown_until = None;
        guard.store()?;
        let record = Record { owner: *cx.me, nonce, fence, expires };
        if self.dirs.create(&record)? {
            Ok(record)
        } else {
            Err(Error::Busy)
        }
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let mut guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        let Some(on_disk) = self.dirs.read()?.and_then(|(_, found)| found.ours(held.nonce)) else {
            return Ok(ReleaseOutcome::Lost);
        };
        self.dirs.retire(held.nonce)?;
        guard.start_cooldown(cx.now, cooldown)?;
        Ok(ReleaseOutcome::of_own(on_disk.expires, cx.now))
    }

    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let (dir, on_disk) = match self.dirs.read()? {
            Some((dir, found)) => match found.ours(held.nonce) {
                Some(on_disk) => (dir, on_disk),
                None => return Ok(ProlongOutcome::Lost),
            },
            None => return Ok(ProlongOutcome::Lost),
        };
        self.dirs.write_record(&dir, RECORD_TEMP_NAME, &Record { expires, ..on_disk })?;
        sys::renameat(&dir, RECORD_TEMP_NAME, RECORD_NAME).map_err(Error::from_path_errno)?;
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
        commit_if_current(self.dirs.read()?.and_then(|(_, found)| found.ours(held.nonce)), cx.now, action)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        let holder = match self.dirs.read()? {
            Some((_, found)) => Some(found.judge(cx)?),
            None => None,
        };
        Ok(guard.state.inspection(holder, cx.now))
    }

    fn break_lock(&mut self, _cx: &Context<'_>) -> Result<bool, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        if open_dir(&self.dirs.lock)?.is_none() {
            return Ok(false);
        }
        self.dirs.retire(Nonce::random()?)?;
        Ok(true)
    }
}

/// Opens a lock directory without following a symlink. `Ok(None)` if absent.
fn open_dir(path: &CPath) -> Result<Option<Fd>, Error> {
    match sys::open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::ELOOP) => Err(Error::Symlink),
        Err(Errno::ENOTDIR) => Err(match sys::lstat(path) {
            Ok(st) if st.is_symlink() => Error::Symlink,
            _ => Error::NotALock,
        }),
        Err(e) => Err(Error::from_path_errno(e)),
    }
}

/// Removes a lock directory that holds nothing but our record files.
/// `Error::NotALock` if something else is inside.
fn remove_lock_dir(path: &CPath) -> Result<(), Error> {
    let Some(dir) = open_dir(path)? else { return Ok(()) };
    ignore_missing(sys::unlinkat(&dir, RECORD_NAME))?;
    ignore_missing(sys::unlinkat(&dir, RECORD_TEMP_NAME))?;
    drop(dir);
    match sys::rmdir(path) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => Err(Error::NotALock),
        Err(e) => Err(Error::from_path_errno(e)),
    }
}

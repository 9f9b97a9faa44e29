//! `mkdir`: the lock is a directory, with the owner record inside it.
//!
//! `mkdir(2)` is the classic atomic test-and-set of CGI scripts, and works
//! on NFS. A directory that appears before its record would look like a
//! peer's lock, so ours never does: the directory is built complete under a
//! helper name (record included) and renamed into place with
//! `RENAME_NOREPLACE`. Release and break rename the directory aside to a
//! fresh helper name in one step and only then empty and remove it, so a
//! crash at any point leaves either a complete lock or none, never a
//! wedged empty directory.
//!
//! What a directory at the lock path can be:
//! * ours: nothing in it but `owner`, a record of this library (and
//!   perhaps the new record of a prolong that died before its rename, a
//!   file of the holder's: see [`made_here`]);
//! * a peer's lock: an empty directory, made by a plain `mkdir` (a shell
//!   script, a Perl CGI); it excludes us, and is stale only by age (`ttl`),
//!   and is then removed with `rmdir`, which cannot remove anything in it;
//! * anything else (a data directory, one with a file called `owner` that
//!   is not our record): not a lock, and left exactly as it is.

use core::ffi::CStr;

use crate::clock::WallTime;
use crate::error::{EntryName, Error, FileError, FileRole};
use crate::files::{self, helper_path, rename_into_place, CREATE_NEW_FLAGS, READ_RECORD_FLAGS};
use crate::record::{parse_lock_file, LockFileContent, Record, Stamp, Unrecognised, RECORD_CAPACITY};
use crate::spec::Spec;
use crate::strategy::guarded::LockStore;
use crate::strategy::{Context, ForeignRule, Found, Holding};
use crate::sys::{self, CPath, Errno, Fd};

const RECORD_NAME: &CStr = c"owner";

/// The lock directory of a `mkdir` lock.
#[derive(Debug)]
pub struct Mkdir {
    lock: CPath,
}

/// What a lock directory holds.
enum Entries {
    Empty,
    /// Our record, and perhaps the new record of a prolong that died
    /// before its rename (`owner.<32 hex digits>`, [`made_here`]).
    OnlyOurs,
    /// Something else, named by the first entry that shows it.
    Other(EntryName),
}

/// Whether `name` is a record being written beside `owner` by a prolong.
fn is_record_helper(name: &[u8]) -> bool {
    name.len() == 6 + 32
        && name.starts_with(b"owner.")
        && name[6..].iter().all(|&b| crate::text::hex_value(b).is_some())
}

/// Whether the entry `name` of the lock directory `dir` (owned by
/// `dir_owner`) can be one this library made there: a regular file of the
/// caller's, or of the directory's owner, the holder that made it, whose
/// prolong writes its new record beside `owner`. A lock shared with
/// `mode=0666` has a directory every user may write, so anyone can give a
/// file or a directory one of our names; what is another's is never ours
/// to remove. The content is not looked at: a prolong killed between its
/// create and its write leaves a file of ours that holds no record.
fn made_here(dir: &Fd, dir_owner: u32, name: &[u8]) -> bool {
    let mut terminated = [0u8; 6 + 32 + 1];
    if name.len() >= terminated.len() {
        return false;
    }
    terminated[..name.len()].copy_from_slice(name);
    let Ok(name) = CStr::from_bytes_until_nul(&terminated) else { return false };
    sys::lstatat(dir, name).is_ok_and(|st| st.is_file() && (st.uid == sys::geteuid() || st.uid == dir_owner))
}

fn entries(dir: &Fd, dir_owner: u32) -> Result<Entries, Error> {
    let (mut record, mut any) = (false, false);
    let (mut other, mut helper) = (None, None);
    sys::each_dir_entry(dir, |name| {
        any = true;
        if name == RECORD_NAME.to_bytes() {
            record = true;
        } else if is_record_helper(name) && made_here(dir, dir_owner, name) {
            helper = Some(EntryName::new(name));
        } else {
            other = Some(EntryName::new(name));
        }
        other.is_none()
    })
    .map_err(|e| FileError::io(FileRole::Lock, e))?;
    // A prolong's new record without the record it was to replace is no
    // lock of ours either.
    let foreign = other.or(if record { None } else { helper });
    Ok(match (any, foreign) {
        (false, _) => Entries::Empty,
        (true, Some(name)) => Entries::Other(name),
        (true, None) => Entries::OnlyOurs,
    })
}

impl LockStore for Mkdir {
    fn open(spec: &Spec) -> Result<Mkdir, Error> {
        Ok(Mkdir { lock: spec.file_target()?.clone() })
    }

    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error> {
        let Some(dir) = open_dir(&self.lock)? else { return Ok(None) };
        let stat = sys::fstat(&dir).map_err(|e| FileError::io(FileRole::Lock, e))?;
        cx.sharing.check(FileRole::Lock, &stat)?;
        let written_at = WallTime::from_unix_nanos(stat.mtime_ns);
        let listed = match entries(&dir, stat.uid) {
            // Removed since it was opened (a peer's rmdir, or a directory it
            // renamed over this one): listing a removed directory says
            // ENOENT. Nothing is there as far as this read goes; a lock made
            // there meanwhile is found by the create.
            Err(Error::File(e)) if e.errno == Some(Errno::ENOENT) => return Ok(None),
            other => other?,
        };
        let holding = match listed {
            Entries::Empty => Holding::Foreign { pid: 0, host: None, rule: ForeignRule::Anonymous },
            Entries::Other(name) => return Err(Error::not_a_lock_for_entry(name)),
            Entries::OnlyOurs => {
                let fd = match sys::openat(&dir, RECORD_NAME, READ_RECORD_FLAGS, 0) {
                    Ok(fd) => fd,
                    // A symlink called `owner`, which O_NOFOLLOW refuses:
                    // the lock path is a directory, with no record of ours.
                    Err(Errno::ELOOP) => return Err(not_our_record()),
                    Err(e) => return Err(FileError::from_errno(FileRole::Lock, &self.lock, e)),
                };
                let record_stat = sys::fstat(&fd).map_err(|e| FileError::io(FileRole::Lock, e))?;
                if !record_stat.is_file() {
                    return Err(not_our_record());
                }
                cx.sharing.check(FileRole::Lock, &record_stat)?;
                let mut bytes = [0u8; RECORD_CAPACITY + 1];
                let n = files::read_record_file(&fd, &record_stat, &mut bytes)?;
                match parse_lock_file(&bytes[..n]) {
                    Ok(LockFileContent::Ours(record)) => Holding::Ours(record),
                    Err(Unrecognised::Corrupt(kind)) => Holding::Corrupt(kind),
                    // A file called `owner` that is not our record: someone's
                    // directory, not a lock.
                    Ok(_) | Err(Unrecognised::NotALock) => return Err(not_our_record()),
                }
            }
        };
        Ok(Some(Found { holding, written_at, stat }))
    }

    fn create(&self, cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error> {
        let staging = helper_path(&self.lock)?;
        // Private until its bits are set, but open to its owner: a directory
        // made with no bits at all cannot be opened to set them, except by root.
        sys::mkdir(&staging, 0o700).map_err(|e| FileError::from_errno(FileRole::Helper, &staging, e))?;
        let built = open_dir(&staging)?.ok_or(Error::not_a_lock(FileRole::Helper)).and_then(|dir| {
            // The setgid bit a directory inherits in a group-shared parent
            // is kept: it is what gives the record the shared group. In a
            // parent without it, the directory is given the parent's group
            // and the bit, for the record to get that group too.
            let io = |e| FileError::io(FileRole::Helper, e);
            let inherited = sys::fstat(&dir).map_err(io)?.permissions() & 0o2000;
            let given = files::to_directory_group(&dir, &staging, cx.sharing.dir_mode()).map_err(io)?;
            let setgid = if given { 0o2000 } else { inherited };
            sys::fchmod(&dir, cx.sharing.dir_mode() | setgid).map_err(io)?;
            write_record(&dir, RECORD_NAME, record, cx.sharing.record_mode())
        });
        let placed = built.and_then(|()| rename_into_place(&staging, &self.lock));
        match placed {
            Ok(true) => Ok(Some(*record)),
            other => {
                remove_own_dir(&staging)?;
                other.map(|_| None)
            }
        }
    }

    fn replace(&self, cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error> {
        let Some(dir) = open_dir(&self.lock)? else { return Ok(false) };
        let same = sys::fstat(&dir).map_err(|e| FileError::io(FileRole::Lock, e))?;
        if !same.same_file(&found.stat) {
            return Ok(false);
        }
        // Built beside the record under a name nobody can guess, then renamed
        // over it: readers (all under the guard) see the old or the new.
        let random = crate::owner::Nonce::random()?.hex();
        let mut name = [0u8; 6 + 32 + 1];
        name[..6].copy_from_slice(b"owner.");
        name[6..38].copy_from_slice(&random);
        let name = CStr::from_bytes_until_nul(&name).map_err(|_| Error::not_a_lock(FileRole::Helper))?;
        // Nobody but the lock's users may write in our directory, and they
        // change it only under the guard: the record there is the one read.
        write_record(&dir, name, record, cx.sharing.record_mode())?;
        sys::renameat(&dir, name, RECORD_NAME).map(|()| true).map_err(|e| {
            let _ = sys::unlinkat(&dir, name);
            FileError::from_errno(FileRole::Lock, &self.lock, e)
        })
    }

    fn remove(&self, _cx: &Context<'_>, found: &Found) -> Result<bool, Error> {
        match found.holding {
            Holding::Ours(_) | Holding::Corrupt(_) => files::remove_judged(&self.lock, &found.stat, remove_own_dir),
            // A peer's empty directory: rmdir removes it only if it is
            // still empty, and nothing that is in it.
            _ => files::remove_judged(&self.lock, &found.stat, |aside| match sys::rmdir(aside) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                // Something was put in it meanwhile: it stays, aside.
                Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => Ok(()),
                Err(e) => Err(FileError::from_errno(FileRole::Helper, aside, e)),
            }),
        }
    }

    fn path(&self) -> &CPath {
        &self.lock
    }
}

/// A lock directory whose `owner` is not a record of ours.
fn not_our_record() -> Error {
    Error::not_a_lock_for_entry(EntryName::new(RECORD_NAME.to_bytes()))
}

fn write_record(dir: &Fd, name: &CStr, record: &Record, mode: u32) -> Result<(), Error> {
    let fd = sys::openat(dir, name, CREATE_NEW_FLAGS, 0).map_err(|e| FileError::io(FileRole::Helper, e))?;
    let written =
        sys::fchmod(&fd, mode).and_then(|()| sys::write_all(&fd, record.encode_lock_file(Stamp::Pid).as_bytes()));
    drop(fd);
    written.map_err(|e| {
        let _ = sys::unlinkat(dir, name);
        FileError::io(FileRole::Helper, e)
    })
}

/// Opens a lock directory without following a symlink. `Ok(None)` if absent.
fn open_dir(path: &CPath) -> Result<Option<Fd>, Error> {
    match sys::open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::ENOTDIR) => Err(match sys::lstat(path) {
            Ok(st) if st.is_symlink() => Error::file_problem(FileRole::Lock, crate::error::Problem::Symlink),
            Ok(_) => Error::not_a_lock(FileRole::Lock),
            Err(e) => FileError::from_errno(FileRole::Lock, path, e),
        }),
        Err(e) => Err(FileError::from_errno(FileRole::Lock, path, e)),
    }
}

/// Empties and removes a directory this library made or renamed aside: its
/// record (and a prolong's leftover new record), each only if
/// [`made_here`], and nothing else. Whatever else is in it (put there since
/// it was judged: the directory is open to every user of a shared lock)
/// stays, and so does the directory, aside: the lock is gone from its path
/// all the same.
fn remove_own_dir(path: &CPath) -> Result<(), Error> {
    let Some(dir) = open_dir(path)? else { return Ok(()) };
    let dir_owner = sys::fstat(&dir).map_err(|e| FileError::io(FileRole::Helper, e))?.uid;
    if made_here(&dir, dir_owner, RECORD_NAME.to_bytes()) {
        match sys::unlinkat(&dir, RECORD_NAME) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(FileError::from_errno(FileRole::Helper, path, e)),
        }
    }
    drop(dir);
    let rmdir = || match sys::rmdir(path) {
        Ok(()) | Err(Errno::ENOENT) => Ok(true),
        Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => Ok(false),
        Err(e) => Err(FileError::from_errno(FileRole::Helper, path, e)),
    };
    if rmdir()? {
        return Ok(());
    }
    // Not empty: a helper left by a prolong that died, found one at a time,
    // each search on a fresh descriptor (reading a directory moves its
    // offset), or someone else's file, which stays.
    loop {
        let Some(dir) = open_dir(path)? else { return Ok(()) };
        let mut helper = [0u8; 6 + 32 + 1];
        let mut found = false;
        sys::each_dir_entry(&dir, |name| {
            found = is_record_helper(name) && made_here(&dir, dir_owner, name);
            if found {
                helper[..name.len()].copy_from_slice(name);
            }
            !found
        })
        .map_err(|e| FileError::io(FileRole::Helper, e))?;
        if !found {
            break;
        }
        let name = CStr::from_bytes_until_nul(&helper).map_err(|_| Error::not_a_lock(FileRole::Helper))?;
        match sys::unlinkat(&dir, name) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(FileError::from_errno(FileRole::Helper, path, e)),
        }
    }
    rmdir().map(drop)
}

//! How the library makes and takes away files in a directory that other
//! users and other programs share.
//!
//! * **Helper names nobody can predict.** A lock, its guard, its lease or
//!   its queue is built under a name of 128 random bits beside it
//!   ([`helper_path`]), created exclusively, and only then linked or renamed
//!   into place. No fixed name (`<lock>.tmp`, `<lock>.new`) exists that
//!   another lock could be called, that a crashed creator's leftover could
//!   sit on, or that another user could plant to make every acquisition
//!   fail.
//! * **Complete or absent.** A file appears under its real name whole
//!   ([`open_state_file`], and the strategies' own `link`/`rename`), so a
//!   reader never sees one empty or half-written, and an empty file at a
//!   lock's path is never one of ours.
//! * **Exact modes.** What is created gets exactly the bits asked for
//!   (`fchmod` after the create), whatever the umask.
//! * **Remove only what was judged.** Taking away a file another program
//!   may replace at any moment goes through [`remove_judged`]: the entry is
//!   renamed aside in one step, and removed only if it is the very file that
//!   was judged; otherwise it is put back.

use crate::error::{EntryName, Error, FileError, FileRole, Problem, ENTRY_NAME_CAPACITY};
use crate::owner::Nonce;
use crate::sys::{self, CPath, Errno, Fd, FileStat};
use crate::trust::Sharing;

/// `<path>.<32 random hex digits>`: a name beside `path` that nobody can
/// guess, so nobody can have planted anything there.
pub fn helper_path(path: &CPath) -> Result<CPath, Error> {
    let random = Nonce::random()?.hex();
    CPath::from_parts(&[path.as_bytes(), b".", &random]).map_err(|_| path_too_long())
}

/// Creates a file under a fresh helper name beside `beside`, with exactly
/// `mode` and holding `bytes`, and returns its name. On any failure nothing
/// is left behind.
pub fn create_helper_file(beside: &CPath, mode: u32, bytes: &[u8]) -> Result<CPath, Error> {
    let helper = helper_path(beside)?;
    let fd = sys::open(&helper, CREATE_NEW_FLAGS, 0).map_err(|e| create_error(&helper, e))?;
    let written = to_directory_group(&fd, &helper, mode)
        .and_then(|_| sys::fchmod(&fd, mode))
        .and_then(|()| sys::write_all(&fd, bytes));
    drop(fd);
    if let Err(e) = written {
        let _ = sys::unlink(&helper);
        return Err(FileError::io(FileRole::Helper, e));
    }
    Ok(helper)
}

/// Gives a file or directory shared with a group (and with nobody else),
/// just made at `path` with `mode` to come, the group of the directory
/// that holds it, when the members of that group may write there (they
/// are the lock's users), as a setgid directory would: `Ok(true)` if it
/// took that group now. Made with its creator's own group instead, it
/// would shut out every other user of the lock not in that group (no
/// class of its bits would be theirs) until someone removes it by hand.
/// Where the creator may not give it that group, it keeps its own.
pub(crate) fn to_directory_group(fd: &Fd, path: &CPath, mode: u32) -> Result<bool, Errno> {
    if mode & 0o070 == 0 || mode & 0o007 != 0 {
        return Ok(false);
    }
    let Ok(dir) = CPath::from_parts(&[path.parent()]) else { return Ok(false) };
    let (Ok(dir), made) = (sys::stat(&dir), sys::fstat(fd)?) else { return Ok(false) };
    if dir.permissions() & 0o020 == 0 || dir.gid == made.gid {
        return Ok(false);
    }
    match sys::fchown_group(fd, dir.gid) {
        Ok(()) => Ok(true),
        // Best effort: where it cannot be given (the group unmapped in a
        // user namespace, a file system that keeps no groups), the file
        // keeps its maker's, as it did before.
        Err(_) => Ok(false),
    }
}

/// The error of the exclusive create of `helper`. `ENOENT` from a directory
/// that is there says that its file system makes no files (procfs, sysfs),
/// or that it was removed meanwhile, not that a directory on the path is
/// missing.
fn create_error(helper: &CPath, errno: Errno) -> Error {
    let directory_is_there =
        || CPath::from_parts(&[helper.parent()]).is_ok_and(|dir| sys::stat(&dir).is_ok_and(|stat| stat.is_dir()));
    if errno == Errno::ENOENT && directory_is_there() {
        return Error::File(FileError { errno: Some(errno), ..FileError::new(FileRole::Directory, Problem::Io) });
    }
    FileError::from_errno(FileRole::Helper, helper, errno)
}

/// Flags for creating a file that must not exist yet.
pub const CREATE_NEW_FLAGS: libc::c_int = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY;

/// Flags for reading a record: `O_NONBLOCK` so that a fifo planted where a
/// record belongs cannot hang the reader (the type is checked after open).
pub const READ_RECORD_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;

/// Opens a file that keeps a lock's state (a guard, a lease, a queue) for
/// reading and writing, first creating it, complete with `initial` and with
/// exactly the sharing's mode, if it does not exist. The file is checked
/// before it is returned: a regular file that starts with the first word of
/// `initial`, the format's marker ([`Problem::NotALock`] otherwise: a data
/// file is no lock of ours, whoever may write it), then trusted by
/// `sharing`, in a directory that keeps untrusted users from replacing it.
/// The rest of its content is the caller's to check, before it writes
/// anything.
///
/// [`Problem::NotALock`]: crate::error::Problem::NotALock
pub fn open_state_file(
    path: &CPath,
    role: FileRole,
    sharing: Sharing,
    initial: &[u8],
    extra_flags: libc::c_int,
) -> Result<(Fd, FileStat), Error> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | extra_flags;
    // Two rounds: a file removed between our link and our open (an
    // operator, a cleaner of /tmp) is made once more.
    for _ in 0..2 {
        match sys::open(path, flags, 0) {
            Ok(fd) => {
                let stat = sys::fstat(&fd).map_err(|e| FileError::io(role, e))?;
                if !stat.is_file() {
                    return Err(Error::not_a_lock(role));
                }
                let marker = &initial[..initial.iter().position(|&b| b == b' ').map_or(0, |space| space + 1)];
                // The marker's first 32 bytes, the most any format's needs.
                let marker = &marker[..marker.len().min(32)];
                let mut start = [0u8; 32];
                let start = &mut start[..marker.len()];
                let n = sys::pread_full(&fd, start, 0).map_err(|e| FileError::io(role, e))?;
                if start[..n] != *marker {
                    return Err(Error::not_a_lock(role));
                }
                sharing.check_locked(role, &stat)?;
                check_directory(path, sharing)?;
                return Ok((fd, stat));
            }
            Err(Errno::ENOENT) => {
                check_directory(path, sharing)?;
                let helper = create_helper_file(path, sharing.mode(), initial)?;
                let linked = sys::link(&helper, path);
                let _ = sys::unlink(&helper);
                match linked {
                    // Someone else made it first: theirs is as good as ours.
                    Ok(()) | Err(Errno::EEXIST) => continue,
                    Err(e) => return Err(FileError::from_errno(role, path, e)),
                }
            }
            Err(e) => return Err(open_error(role, path, e)),
        }
    }
    Err(FileError::from_errno(role, path, Errno::ENOENT))
}

/// The error of an `O_NONBLOCK` open of the lock's file `path`. `EAGAIN`
/// says another process holds a lease on the file (`fcntl(F_SETLEASE)`,
/// its owner's to take) that the open would have to wait out: the lock is
/// busy, the open has asked the kernel to break the lease, and the call may
/// try again by its deadline.
pub fn open_error(role: FileRole, path: &CPath, errno: Errno) -> Error {
    match errno {
        Errno::EAGAIN => Error::Busy(crate::error::Contention::Leased),
        _ => FileError::from_errno(role, path, errno),
    }
}

/// Checks the directory that holds `path` ([`Sharing::check_dir`]), and
/// every name on the way to it ([`check_way_to`]).
pub fn check_directory(path: &CPath, sharing: Sharing) -> Result<(), Error> {
    let dir = CPath::from_parts(&[path.parent()]).map_err(|_| path_too_long())?;
    check_way_to(&dir, sharing)?;
    // Followed through symlinks (`/var/lock` -> `/run/lock`), as the path is.
    let stat = sys::stat(&dir).map_err(|e| FileError::from_errno(FileRole::Directory, &dir, e))?;
    sharing.check_dir(&stat)
}

/// The most symlinks followed on the way to a directory, as the kernel
/// counts them (`ELOOP` past it).
const MAX_LINKS: u32 = 40;

/// Judges each name looked up on the way to `dir`, as the kernel resolves
/// it, with the directory that holds it ([`Sharing::check_way`]): a link
/// or a parent that someone outside the lock's users may replace (a
/// symlink another user made in `/tmp`, a directory in another user's
/// home) lets them send later opens of the lock's files elsewhere, so that
/// two processes hold the lock at once, each in its own directory. A
/// relative way starts at the working directory, which no rename moves for
/// this process; each `..` judges the directory it leaves in the one it
/// goes to, since whoever may move the first moves what `..` names. A way
/// that cannot be followed to its end (a name missing or replaced midway,
/// a search refused, a loop, more than a path can hold) is refused as the
/// kernel would refuse it: a name not judged could be anyone's.
fn check_way_to(dir: &CPath, sharing: Sharing) -> Result<(), Error> {
    // Three paths' room on the stack, whatever the way: where it is, what
    // is left of it, and a link's target.
    let mut at =
        CPath::from_parts(&[if dir.as_bytes().starts_with(b"/") { b"/" } else { b"." }]).map_err(|_| way_too_long())?;
    let refused = |at: &CPath, errno| match errno {
        // Told as the lock's directory's, as opening a file there would.
        Errno::ENOENT => FileError::from_errno(FileRole::Directory, dir, errno),
        _ => way_error(at.as_bytes(), FileError::from_errno(FileRole::Way, at, errno)),
    };
    let mut at_stat = sys::stat(&at).map_err(|e| refused(&at, e))?;
    let mut way = dir.clone();
    let mut pos = 0;
    let mut links = 0;
    let mut target = [0u8; sys::PATH_CAPACITY];
    loop {
        let left = &way.as_bytes()[pos..];
        let Some(start) = left.iter().position(|&b| b != b'/') else { return Ok(()) };
        let end = left[start..].iter().position(|&b| b == b'/').map_or(left.len(), |len| start + len);
        let name = &left[start..end];
        pos += end;
        if name == b"." {
            continue;
        }
        let at_len = at.as_bytes().len();
        let slash: &[u8] = if at.as_bytes() == b"/" { b"" } else { b"/" };
        if at.push(slash).and_then(|()| at.push(name)).is_err() {
            return Err(way_too_long());
        }
        let entry = sys::lstat(&at).map_err(|e| refused(&at, e))?;
        // Whichever was refused, the directory that holds the name or the
        // name, is the one the error names.
        let (holder, held) = (&at.as_bytes()[..at_len], at.as_bytes());
        let judged = match name {
            b".." => sharing.check_way(&entry, &at_stat).map_err(|e| (e, held, holder)),
            _ => sharing.check_way(&at_stat, &entry).map_err(|e| (e, holder, held)),
        };
        if let Err((e, of_dir, of_entry)) = judged {
            let lock_dir = entry.is_dir() && way.as_bytes()[pos..].iter().all(|&b| b == b'/');
            return Err(match e {
                // The lock's directory itself, judged where it stands: told
                // as the lock's directory, as its own judgement would be.
                Error::File(e) if lock_dir && e.file == FileRole::Way => {
                    Error::File(FileError { file: FileRole::Directory, ..e })
                }
                e if e.file() == Some(FileRole::Directory) => way_error(of_dir, e),
                e => way_error(of_entry, e),
            });
        }
        if entry.is_dir() {
            at_stat = entry;
            continue;
        }
        if !entry.is_symlink() {
            return Err(refused(&at, Errno::ENOTDIR));
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(refused(&at, Errno::ELOOP));
        }
        let len = sys::readlink(&at, &mut target).map_err(|e| refused(&at, e))?;
        at.truncate(at_len);
        // The link's target, then what was left after it, is the way on.
        let rest = &way.as_bytes()[pos..];
        let whole = len + 1 + rest.len();
        if whole >= target.len() {
            return Err(way_too_long());
        }
        target[len] = b'/';
        target[len + 1..whole].copy_from_slice(rest);
        way.truncate(0);
        way.push(&target[..whole]).map_err(|_| way_too_long())?;
        pos = 0;
        if len > 0 && target[0] == b'/' {
            at.truncate(0);
            at.push(b"/").map_err(|_| way_too_long())?;
            at_stat = sys::stat(&at).map_err(|e| refused(&at, e))?;
        }
    }
}

/// `error`, about `path`, a directory or link on the way to the lock's
/// directory: told as that path (as much of it as an entry name holds),
/// not as the lock's directory.
fn way_error(path: &[u8], error: Error) -> Error {
    // Its end, which tells it from the lock's directory, if it is long.
    let mut shown = [0u8; ENTRY_NAME_CAPACITY];
    let name = if path.len() <= shown.len() {
        path
    } else {
        let tail = &path[path.len() - (shown.len() - 3)..];
        let tail = &tail[tail.iter().position(|&b| b == b'/').unwrap_or(0)..];
        shown[..3].copy_from_slice(b"...");
        shown[3..3 + tail.len()].copy_from_slice(tail);
        &shown[..3 + tail.len()]
    };
    match error {
        Error::File(e) => Error::File(FileError { file: FileRole::Way, entry: Some(EntryName::new(name)), ..e }),
        other => other,
    }
}

/// The error of a way to a lock's directory too long to follow here (its
/// links' targets and the names after them add up to more than PATH_MAX):
/// a part of it that is not judged could be anyone's to replace.
fn way_too_long() -> Error {
    Error::Spec(crate::error::SpecError::new(
        crate::error::SpecErrorKind::PathTooLong,
        b"",
        "the way to the lock's directory, its symbolic links followed, is longer than PATH_MAX",
    ))
}

/// Removes what is at `path` only if it is still the file, directory or
/// link `judged` (same device and inode, same mtime): renamed aside under a helper
/// name in one step, compared there, and then removed by `remove` (a
/// directory needs more than an unlink). If another program put a new lock
/// at `path` since it was judged, that one is renamed back untouched, and
/// the answer is `Ok(false)`; `Ok(true)` once the judged one is gone (or
/// was gone already).
pub fn remove_judged(
    path: &CPath,
    judged: &FileStat,
    remove: impl FnOnce(&CPath) -> Result<(), Error>,
) -> Result<bool, Error> {
    let aside = helper_path(path)?;
    match sys::rename_noreplace(path, &aside) {
        Ok(()) => {}
        Err(Errno::ENOENT) => return Ok(true),
        // No RENAME_NOREPLACE here (NFS, old kernels): the helper name is
        // fresh and unguessable, so a plain rename replaces nothing.
        Err(e) if e == Errno::EINVAL || e == Errno::ENOSYS => {
            sys::rename(path, &aside).map_err(|e| FileError::from_errno(FileRole::Lock, path, e))?
        }
        Err(e) => return Err(FileError::from_errno(FileRole::Lock, path, e)),
    }
    match sys::lstat(&aside) {
        Ok(moved) if is_judged(&moved, judged) => {
            remove(&aside)?;
            Ok(true)
        }
        _ => {
            // Not the one we judged: give it back its name. If yet another
            // one took that name meanwhile, the one we hold aside is left
            // there rather than destroyed.
            let _ = sys::rename_noreplace(&aside, path);
            Ok(false)
        }
    }
}

/// [`remove_judged`] of a file or a link, removed by `unlink`.
pub fn unlink_judged(path: &CPath, judged: &FileStat) -> Result<bool, Error> {
    remove_judged(path, judged, |aside| ignore_missing(sys::unlink(aside), FileRole::Helper, aside))
}

/// Reads the lock file at `path` into `buf`, for a caller that judges what
/// it holds: `None` if nothing is there; the file's status and the length
/// read (up to `buf`'s length: a longer file fills it). Links are not
/// followed; what is no regular file is
/// [`Problem::NotALock`](crate::error::Problem::NotALock); a file someone
/// outside `sharing` could have written is refused.
pub fn read_lock_file(path: &CPath, sharing: Sharing, buf: &mut [u8]) -> Result<Option<(FileStat, usize)>, Error> {
    let fd = match sys::open(path, READ_RECORD_FLAGS, 0) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(FileError::from_errno(FileRole::Lock, path, e)),
    };
    let stat = sys::fstat(&fd).map_err(|e| FileError::io(FileRole::Lock, e))?;
    if !stat.is_file() {
        return Err(Error::not_a_lock(FileRole::Lock));
    }
    sharing.check(FileRole::Lock, &stat)?;
    let n = read_record_file(&fd, &stat, buf)?;
    Ok(Some((stat, n)))
}

/// Reads the record file `fd`, whose `stat` was just taken, into `buf`
/// (which is one byte longer than any record, to tell one that is too
/// long). No more than the file holds is asked for, so that the read that
/// would only find its end is never made. A file that grew since (a peer
/// that creates its lock file first and writes it after) is read as far as
/// it was, as a read a moment earlier would have found it.
pub fn read_record_file(fd: &Fd, stat: &FileStat, buf: &mut [u8]) -> Result<usize, Error> {
    let want = usize::try_from(stat.size).map_or(buf.len(), |size| size.min(buf.len()));
    sys::read_full(fd, &mut buf[..want]).map_err(|e| FileError::io(FileRole::Lock, e))
}

/// Makes the lock file `lock` holding `content`, complete and with `mode`,
/// under a helper name, and links it into place: `Ok(false)` if something
/// is there already (`link(2)` never replaces, a planted symlink included).
pub fn link_lock_file(lock: &CPath, mode: u32, content: &[u8]) -> Result<bool, Error> {
    let helper = create_helper_file(lock, mode, content)?;
    let linked = match sys::link(&helper, lock) {
        Ok(()) => Ok(true),
        // Over NFS the reply to a link that succeeded can be lost and the
        // retransmission answer EEXIST; whether the lock path now names
        // our helper's inode tells the truth either way.
        Err(e) => match (sys::lstat(&helper), sys::lstat(lock)) {
            (Ok(ours), Ok(there)) if ours.same_file(&there) => Ok(true),
            _ if e == Errno::EEXIST => Ok(false),
            _ => Err(FileError::from_errno(FileRole::Lock, lock, e)),
        },
    };
    let _ = sys::unlink(&helper);
    linked
}

/// Puts the finished helper `replacement` at `path` in place of the file
/// `judged` there, only if it is still that file: the two swap names in one
/// step (`RENAME_EXCHANGE`); if what came out is not the judged file (a peer
/// renamed its lock over ours since), the swap is undone and the answer is
/// `Ok(false)`. The helper name is gone afterwards either way. Where the
/// file system cannot swap names (NFS), a plain rename replaces what is
/// there, as before that check existed.
pub fn replace_judged(path: &CPath, judged: &FileStat, replacement: &CPath) -> Result<bool, Error> {
    match sys::rename_exchange(replacement, path) {
        Ok(()) => {
            // The helper name now names what was at `path`.
            let replaced = sys::lstat(replacement).is_ok_and(|old| is_judged(&old, judged));
            if !replaced {
                let _ = sys::rename_exchange(replacement, path);
            }
            let _ = sys::unlink(replacement);
            Ok(replaced)
        }
        Err(Errno::ENOENT) => {
            let _ = sys::unlink(replacement);
            Ok(false)
        }
        Err(e) if e == Errno::EINVAL || e == Errno::ENOSYS => {
            sys::rename(replacement, path).map(|()| true).map_err(|e| {
                let _ = sys::unlink(replacement);
                FileError::from_errno(FileRole::Lock, path, e)
            })
        }
        Err(e) => {
            let _ = sys::unlink(replacement);
            Err(FileError::from_errno(FileRole::Lock, path, e))
        }
    }
}

/// Whether `now` is still the file `judged`: the same inode, unchanged since
/// (a rename leaves the mtime be). An inode number alone may have been given
/// to a new file since the judged one was removed, and ext4 does so at once.
fn is_judged(now: &FileStat, judged: &FileStat) -> bool {
    now.same_file(judged) && now.mtime_ns == judged.mtime_ns
}

/// Ignores "it was not there": removal of something that may be gone already.
pub fn ignore_missing(result: Result<(), Errno>, role: FileRole, path: &CPath) -> Result<(), Error> {
    match result {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(FileError::from_errno(role, path, e)),
    }
}

/// Renames a finished helper (file, directory or symlink) to `lock` only if
/// nothing is at `lock`. `Ok(false)` when something is; the helper is then
/// left for the caller to remove.
pub fn rename_into_place(helper: &CPath, lock: &CPath) -> Result<bool, Error> {
    match sys::rename_noreplace(helper, lock) {
        Ok(()) => Ok(true),
        Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => Ok(false),
        // No RENAME_NOREPLACE here (NFS, old kernels): a plain rename onto a
        // missing name is as atomic. Our creators hold the guard, so only a
        // foreign program can create the lock between the lstat and the
        // rename; an empty directory it made there would be replaced.
        Err(e) if e == Errno::EINVAL || e == Errno::ENOSYS => match sys::lstat(lock) {
            Err(Errno::ENOENT) => {
                sys::rename(helper, lock).map(|()| true).map_err(|e| FileError::from_errno(FileRole::Lock, lock, e))
            }
            _ => Ok(false),
        },
        Err(e) => Err(FileError::from_errno(FileRole::Lock, lock, e)),
    }
}

/// `path` + `suffix`, as a lock-path error if too long.
pub fn with_suffix(path: &CPath, suffix: &[u8]) -> Result<CPath, Error> {
    CPath::from_parts(&[path.as_bytes(), suffix]).map_err(|_| path_too_long())
}

/// The spec error for a path derived from the target (a lock file, a
/// guard, a helper name) that does not fit in a [`CPath`].
pub fn path_too_long() -> Error {
    Error::Spec(crate::error::SpecError::new(
        crate::error::SpecErrorKind::PathTooLong,
        b"",
        "a path derived from the target is longer than PATH_MAX",
    ))
}

/// Whether every process that can open a file of this directory shares
/// its pages (a futex in it reaches them all, a write through a mapping is
/// seen by all): not on a file system other hosts share, nor on one served
/// from user space. `false` where the directory cannot be looked at.
pub fn on_one_host(dir: &CPath) -> bool {
    sys::fs_type_of(dir).is_ok_and(is_of_one_host)
}

/// [`on_one_host`] for a file already open.
pub fn open_file_on_one_host(fd: &Fd) -> bool {
    sys::fs_type_of_open(fd).is_ok_and(is_of_one_host)
}

/// [`open_state_file`] for a file that only works [`on_one_host`] (one
/// mapped shared, one rewritten in place with `O_APPEND` switched off):
/// refused with [`Unsupported::Here`]`(what)` elsewhere. The directory is
/// asked first, so that no file is made for nothing; where it cannot be
/// looked at, the open says why, and the file opened has the last word.
///
/// [`Unsupported::Here`]: crate::error::Unsupported::Here
pub fn open_state_file_on_one_host(
    path: &CPath,
    role: FileRole,
    sharing: Sharing,
    initial: &[u8],
    flags: libc::c_int,
    what: &'static str,
) -> Result<(Fd, FileStat), Error> {
    let refused = || Error::Unsupported(crate::error::Unsupported::Here(what));
    let dir_elsewhere = CPath::from_parts(&[path.parent()])
        .is_ok_and(|dir| sys::fs_type_of(&dir).is_ok_and(|kind| !is_of_one_host(kind)));
    if dir_elsewhere {
        return Err(refused());
    }
    let (fd, file) = open_state_file(path, role, sharing, initial, flags)?;
    if !open_file_on_one_host(&fd) {
        return Err(refused());
    }
    Ok((fd, file))
}

/// Whether a file system of this `statfs` type keeps its pages on one host.
fn is_of_one_host(kind: i64) -> bool {
    const SHARED_WITH_OTHER_HOSTS: &[i64] = &[
        0x6969,      // NFS
        0x517b,      // SMB
        0xff53_4d42, // CIFS
        0xfe53_4d42, // SMB2
        0x0102_1997, // 9P
        0x00c3_6400, // Ceph
        0x5346_414f, // AFS
        0x6b41_4653, // kAFS
        0x0116_1970, // GFS2
        0x7461_636f, // OCFS2
        0x0bd0_0bd0, // Lustre
        0x7375_7245, // Coda
        0x6573_5546, // FUSE
        0x4750_4653, // GPFS
        0x1983_0326, // BeeGFS
        0x2003_0528, // OrangeFS
        0x786f_4256, // VirtualBox shared folders
    ];
    !SHARED_WITH_OTHER_HOSTS.contains(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_makes_no_files_is_not_called_missing() {
        let problem_with = |beside: &[u8]| match create_helper_file(&CPath::from_parts(&[beside]).unwrap(), 0o600, b"")
        {
            Err(Error::File(e)) => (e.file, e.problem, e.errno),
            other => panic!("{other:?}"),
        };
        // procfs answers ENOENT to a create in a directory that is there.
        assert_eq!(problem_with(b"/proc/self/lock"), (FileRole::Directory, Problem::Io, Some(Errno::ENOENT)));
        let missing = problem_with(b"/nonexistent-directory/lock");
        assert_eq!(missing, (FileRole::Helper, Problem::NotFound, Some(Errno::ENOENT)));
    }

    #[test]
    fn network_and_user_space_file_systems_are_not_of_one_host() {
        const NFS: i64 = 0x6969;
        const FUSE: i64 = 0x6573_5546;
        const TMPFS: i64 = 0x0102_1994;
        const EXT4: i64 = 0xef53;
        assert!(!is_of_one_host(NFS) && !is_of_one_host(FUSE));
        assert!(is_of_one_host(TMPFS) && is_of_one_host(EXT4));
        let dir = std::env::temp_dir();
        assert!(on_one_host(&cpath(&dir)), "{} is local here", dir.display());
        let fd = sys::open(&cpath(&dir), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
        assert!(open_file_on_one_host(&fd));
        assert!(!on_one_host(&cpath(&dir.join("no-such-directory-here"))), "what cannot be looked at is not");
    }

    fn cpath(path: &std::path::Path) -> CPath {
        CPath::from_parts(&[path.to_str().unwrap().as_bytes()]).unwrap()
    }

    /// A replacement goes in only over the very file that was judged; over
    /// one a peer put there since, it is undone and that file stays.
    #[test]
    fn a_replacement_goes_in_only_over_the_judged_file() {
        let dir = std::env::temp_dir().join(std::format!("lockcore-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = cpath(&dir.join("lock"));
        std::fs::write(dir.join("lock"), "ours").unwrap();
        let judged = sys::lstat(&lock).unwrap();

        let helper = create_helper_file(&lock, 0o600, b"renewed").unwrap();
        assert_eq!(replace_judged(&lock, &judged, &helper), Ok(true));
        assert_eq!(std::fs::read(dir.join("lock")).unwrap(), b"renewed");
        assert!(sys::lstat(&helper).is_err(), "the helper name is gone");

        // A peer's lock renamed over ours after we read ours.
        let judged = sys::lstat(&lock).unwrap();
        std::fs::write(dir.join("peer"), "peer's").unwrap();
        std::fs::rename(dir.join("peer"), dir.join("lock")).unwrap();
        let helper = create_helper_file(&lock, 0o600, b"renewed again").unwrap();
        assert_eq!(replace_judged(&lock, &judged, &helper), Ok(false));
        assert_eq!(std::fs::read(dir.join("lock")).unwrap(), b"peer's", "the peer's lock stays");
        assert!(sys::lstat(&helper).is_err(), "the helper name is gone");

        // And removal: only the judged file goes.
        assert_eq!(
            remove_judged(&lock, &judged, |aside| ignore_missing(sys::unlink(aside), FileRole::Helper, aside)),
            Ok(false)
        );
        assert_eq!(std::fs::read(dir.join("lock")).unwrap(), b"peer's");
        let peer = sys::lstat(&lock).unwrap();
        assert_eq!(
            remove_judged(&lock, &peer, |aside| ignore_missing(sys::unlink(aside), FileRole::Helper, aside)),
            Ok(true)
        );
        assert!(sys::lstat(&lock).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The identity a breaker checks before removing what it judged must
    /// survive the file's inode number being given to a new file: ext4 hands
    /// the number of a file just removed to the next file made in the same
    /// directory. A stale lock is judged; it is then replaced and removed (by
    /// the peer that replaced it, say) and a fresh lock made, under the same
    /// number, is put at the path. Removing "the file that was judged" must
    /// not take the fresh one.
    #[test]
    fn a_fresh_lock_that_reuses_the_judged_ones_inode_number_is_not_removed() {
        let dir = std::env::temp_dir().join(std::format!("lockcore-files-reuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("lock");
        let two_hours_ago = crate::clock::WallTime::now().unix_nanos() - 7200 * 1_000_000_000;
        let mut reused = false;
        for attempt in 0..20 {
            std::fs::write(&lock, "1\n").unwrap();
            sys::set_times_nofollow(&cpath(&lock), two_hours_ago).unwrap();
            let judged = sys::lstat(&cpath(&lock)).unwrap();
            std::fs::remove_file(&lock).unwrap();
            let fresh = dir.join(std::format!("fresh-{attempt}"));
            std::fs::write(&fresh, std::format!("{}\n", std::process::id())).unwrap();
            if sys::lstat(&cpath(&fresh)).unwrap().ino != judged.ino {
                std::fs::remove_file(&fresh).unwrap();
                continue;
            }
            reused = true;
            std::fs::rename(&fresh, &lock).unwrap();
            let removed = remove_judged(&cpath(&lock), &judged, |aside| {
                ignore_missing(sys::unlink(aside), FileRole::Helper, aside)
            });
            assert_eq!(removed, Ok(false), "the fresh lock was taken for the judged one");
            assert_eq!(std::fs::read_to_string(&lock).unwrap(), std::format!("{}\n", std::process::id()));
            break;
        }
        std::fs::remove_dir_all(&dir).unwrap();
        if !reused {
            std::eprintln!("skipped: this file system did not reuse the inode number (the case cannot arise here)");
        }
    }
}

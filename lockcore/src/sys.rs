//! The system-call layer: every `libc::` call of lockcore lives here.
//!
//! Each wrapper names the call it makes (see its man page), turns `-1` into an
//! [`Errno`] through `cvt`, and retries `EINTR` in one place (`retry`), so
//! the strategies above never see a raw return value or a signal interruption.
//! Paths are [`CPath`]s: NUL-terminated bytes in a fixed buffer, no allocation.

use core::ffi::CStr;
use core::fmt;
use core::time::Duration;

/// An `errno` value, kept as it came from the kernel.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// `ENOENT`: no such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// `EEXIST`: the file exists.
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// `EINTR`: a signal interrupted the call (retried by every wrapper here).
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// `EACCES`: permission denied.
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// `EPERM`: the operation is not permitted.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// `ELOOP`: a symbolic link where `O_NOFOLLOW` forbids one, or too many links.
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    /// `ESRCH`: no such process.
    pub const ESRCH: Errno = Errno(libc::ESRCH);
    /// `EWOULDBLOCK`: the call would block (the same number as `EAGAIN` on Linux).
    pub const EWOULDBLOCK: Errno = Errno(libc::EWOULDBLOCK);
    /// `ENOTDIR`: a component of the path is not a directory.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// `EISDIR`: a directory where a file was expected.
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// `ENOTEMPTY`: the directory is not empty.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// `ENAMETOOLONG`: the path, or a component of it, is too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// `EROFS`: a read-only file system.
    pub const EROFS: Errno = Errno(libc::EROFS);
    /// `EINVAL`: an invalid argument (also: a flag the file system does not support).
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// `ENOSYS`: the kernel does not have this system call.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// `EAGAIN`: try again: the resource is busy (a lock held elsewhere).
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    /// `ENXIO`: no such device (opening a socket, or a fifo without a reader).
    pub const ENXIO: Errno = Errno(libc::ENXIO);

    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        // SAFETY: __errno_location returns a valid pointer to this thread's errno.
        Errno(unsafe { *libc::__errno_location() })
    }

    /// The number, as `errno` holds it.
    pub fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({})", self.0)
    }
}

/// What a system call wrapper returns: its value, or the `errno` it set.
pub type SysResult<T> = Result<T, Errno>;

/// Turns a C return value into a result: `-1` means "see errno".
fn cvt<T: PartialEq + From<i8>>(ret: T) -> SysResult<T> {
    if ret == T::from(-1) {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Repeats a call for as long as a signal interrupts it.
fn retry<T>(mut call: impl FnMut() -> SysResult<T>) -> SysResult<T> {
    loop {
        match call() {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

/// Longest path we accept, terminator included (Linux `PATH_MAX`).
pub const PATH_CAPACITY: usize = 4096;

/// A NUL-terminated path in a fixed buffer.
#[derive(Clone)]
pub struct CPath {
    buf: [u8; PATH_CAPACITY],
    len: usize,
}

impl PartialEq for CPath {
    fn eq(&self, other: &CPath) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CPath {}

/// Why bytes could not become a [`CPath`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// It would not fit in [`PATH_CAPACITY`] bytes with its terminator.
    TooLong,
    /// It holds a NUL byte, which no path can.
    InteriorNul,
    /// It has no bytes at all.
    Empty,
}

impl CPath {
    /// The path of no bytes: only a start for [`push`](Self::push), since
    /// no system call accepts it.
    pub const fn empty() -> CPath {
        CPath { buf: [0; PATH_CAPACITY], len: 0 }
    }

    /// Builds a path from pieces, in order.
    pub fn from_parts(parts: &[&[u8]]) -> Result<CPath, PathError> {
        let mut path = CPath::empty();
        for part in parts {
            path.push(part)?;
        }
        if path.len == 0 {
            return Err(PathError::Empty);
        }
        Ok(path)
    }

    /// Appends `bytes` (no separator is added). On an error the path is
    /// unchanged.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), PathError> {
        if bytes.contains(&0) {
            return Err(PathError::InteriorNul);
        }
        // One byte stays free for the terminator.
        if self.len + bytes.len() >= PATH_CAPACITY {
            return Err(PathError::TooLong);
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        self.buf[self.len] = 0;
        Ok(())
    }

    /// Cuts the path back to its first `len` bytes (no change if it is not
    /// longer).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            self.buf[len] = 0;
        }
    }

    /// The path's bytes, without the terminator.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The path with its terminator, for a C call.
    pub fn as_cstr(&self) -> &CStr {
        // The buffer always holds a terminator at `len` and no NUL before it
        // (push rejects interior NULs).
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or(c"")
    }

    /// The directory part, as `dirname(3)` would give it ("." when there is none).
    pub fn parent(&self) -> &[u8] {
        let bytes = self.as_bytes();
        match bytes.iter().rposition(|&b| b == b'/') {
            Some(0) => b"/",
            Some(slash) => &bytes[..slash],
            None => b".",
        }
    }

    /// The last component, as `basename(3)` would give it.
    pub fn file_name(&self) -> &[u8] {
        let bytes = self.as_bytes();
        match bytes.iter().rposition(|&b| b == b'/') {
            Some(slash) => &bytes[slash + 1..],
            None => bytes,
        }
    }
}

impl fmt::Debug for CPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_cstr())
    }
}

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(libc::c_int);

impl Fd {
    /// The descriptor's number, still owned by this `Fd`.
    pub fn raw(&self) -> libc::c_int {
        self.0
    }

    /// Gives up the descriptor without closing it: for a copy whose number
    /// another owner closed already.
    pub fn leak(self) {
        core::mem::forget(self);
    }
}

/// Closes descriptor `fd`, which no `Fd` of this process owns: for the
/// child of a fork, closing its copies of descriptors its parent listed
/// by number before any `Fd` of the child is dropped. `close(2)` alone, so
/// a handler run in a child of a threaded process may call it.
pub fn close_inherited(fd: libc::c_int) {
    // SAFETY: closes a number only; whoever listed it does not close it
    // again in this process (its copy of the `Fd` is leaked).
    unsafe { libc::close(fd) };
}

/// Registers `prepare`, run in the parent before every `fork(3)`, `parent`,
/// run there after it, and `child`, run in the child before `fork` returns
/// there. The C library forgets them when the library that registered
/// them is unloaded.
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) -> SysResult<()> {
    // SAFETY: all are functions of this library, which take nothing and
    // stay valid for as long as it is loaded.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno(rc))
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own this descriptor and nobody else closes it. close(2) is
        // not retried on EINTR: on Linux the descriptor is released anyway.
        unsafe { libc::close(self.0) };
    }
}

/// Flags every open of ours carries: no symlink is ever followed in the last
/// component, and no descriptor leaks into a child that execs.
const SAFE_OPEN: libc::c_int = libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// `open(2)` with `O_NOFOLLOW | O_CLOEXEC` added.
pub fn open(path: &CPath, flags: libc::c_int, mode: libc::mode_t) -> SysResult<Fd> {
    retry(|| {
        // SAFETY: the path is NUL-terminated; the mode is passed as the C
        // variadic argument open expects (promoted to unsigned int).
        cvt(unsafe { libc::open(path.as_cstr().as_ptr(), flags | SAFE_OPEN, mode as libc::c_uint) })
    })
    .map(Fd)
}

/// `openat(2)` relative to a directory descriptor, with `O_NOFOLLOW | O_CLOEXEC`.
pub fn openat(dir: &Fd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> SysResult<Fd> {
    retry(|| {
        // SAFETY: as for open; `dir` is an open descriptor we own.
        cvt(unsafe { libc::openat(dir.0, name.as_ptr(), flags | SAFE_OPEN, mode as libc::c_uint) })
    })
    .map(Fd)
}

/// Reads until `buf` is full or end of file; returns the byte count.
/// A file longer than `buf` fills it exactly, so callers detect "too long" by
/// passing one byte more than they accept.
pub fn read_full(fd: &Fd, buf: &mut [u8]) -> SysResult<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = retry(|| cvt(unsafe { libc::read(fd.0, rest.as_mut_ptr().cast(), rest.len()) }))?;
        if n == 0 {
            break;
        }
        filled += n as usize;
    }
    Ok(filled)
}

/// `pread(2)` until `buf` is full or end of file.
pub fn pread_full(fd: &Fd, buf: &mut [u8], offset: u64) -> SysResult<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        let at = (offset + filled as u64) as libc::off_t;
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = retry(|| cvt(unsafe { libc::pread(fd.0, rest.as_mut_ptr().cast(), rest.len(), at) }))?;
        if n == 0 {
            break;
        }
        filled += n as usize;
    }
    Ok(filled)
}

/// Writes all of `buf` at the current offset.
pub fn write_all(fd: &Fd, buf: &[u8]) -> SysResult<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: `rest` is a valid readable buffer of `rest.len()` bytes.
        let n = retry(|| cvt(unsafe { libc::write(fd.0, rest.as_ptr().cast(), rest.len()) }))?;
        done += n as usize;
    }
    Ok(())
}

/// `pwrite(2)` of all of `buf` at `offset`.
pub fn pwrite_all(fd: &Fd, buf: &[u8], offset: u64) -> SysResult<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        let at = (offset + done as u64) as libc::off_t;
        // SAFETY: `rest` is a valid readable buffer of `rest.len()` bytes.
        let n = retry(|| cvt(unsafe { libc::pwrite(fd.0, rest.as_ptr().cast(), rest.len(), at) }))?;
        done += n as usize;
    }
    Ok(())
}

/// `ftruncate(2)`.
pub fn ftruncate(fd: &Fd, len: u64) -> SysResult<()> {
    // SAFETY: plain call on a descriptor we own.
    retry(|| cvt(unsafe { libc::ftruncate(fd.0, len as libc::off_t) })).map(drop)
}

/// Turns `O_APPEND` on or off for the open file description of `fd`: a
/// file opened to append is written only at its end, `pwrite` included.
pub fn set_append(fd: &Fd, append: bool) -> SysResult<()> {
    // SAFETY: plain calls on a descriptor we own.
    let flags = cvt(unsafe { libc::fcntl(fd.0, libc::F_GETFL) })?;
    let flags = if append { flags | libc::O_APPEND } else { flags & !libc::O_APPEND };
    // SAFETY: as above; F_SETFL takes an int.
    cvt(unsafe { libc::fcntl(fd.0, libc::F_SETFL, flags) }).map(drop)
}

/// What lockcore needs of a `struct stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// The device the file is on; with `ino`, the file's identity.
    pub dev: u64,
    /// The inode number on that device, which the file system may give to
    /// a new file once this one is removed.
    pub ino: u64,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// The owner's user id.
    pub uid: u32,
    /// The owning group's id.
    pub gid: u32,
    /// How many names the file has.
    pub nlink: u64,
    /// Length in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

impl FileStat {
    fn from_raw(st: &libc::stat) -> FileStat {
        FileStat {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime.saturating_mul(1_000_000_000).saturating_add(st.st_mtime_nsec),
        }
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// Whether it is a symbolic link (as `lstat(2)` reports one; `stat(2)`
    /// follows it).
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    /// The permission bits, setuid, setgid and sticky included.
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Whether both describe one file now: the same device and inode.
    /// (Not proof that it is unchanged, nor, once one of them was removed,
    /// that it is the same file at all.)
    pub fn same_file(&self, other: &FileStat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// `fstat(2)`.
pub fn fstat(fd: &Fd) -> SysResult<FileStat> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the whole struct when it returns 0.
    retry(|| cvt(unsafe { libc::fstat(fd.0, st.as_mut_ptr()) }))?;
    // SAFETY: initialised by the successful call above.
    Ok(FileStat::from_raw(unsafe { st.assume_init_ref() }))
}

/// `lstat(2)`: never follows a symlink in the last component.
pub fn lstat(path: &CPath) -> SysResult<FileStat> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: NUL-terminated path; lstat fills the struct when it returns 0.
    retry(|| cvt(unsafe { libc::lstat(path.as_cstr().as_ptr(), st.as_mut_ptr()) }))?;
    // SAFETY: initialised by the successful call above.
    Ok(FileStat::from_raw(unsafe { st.assume_init_ref() }))
}

/// `fstatat(2)` with `AT_SYMLINK_NOFOLLOW`: the status of an entry of a
/// directory we hold open, a symlink itself rather than what it names.
pub fn lstatat(dir: &Fd, name: &CStr) -> SysResult<FileStat> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: NUL-terminated name; `dir` is an open descriptor; fstatat
    // fills the struct when it returns 0.
    retry(|| cvt(unsafe { libc::fstatat(dir.0, name.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) }))?;
    // SAFETY: initialised by the successful call above.
    Ok(FileStat::from_raw(unsafe { st.assume_init_ref() }))
}

/// `mkdir(2)`.
pub fn mkdir(path: &CPath, mode: libc::mode_t) -> SysResult<()> {
    // SAFETY: NUL-terminated path.
    retry(|| cvt(unsafe { libc::mkdir(path.as_cstr().as_ptr(), mode) })).map(drop)
}

/// `rmdir(2)`.
pub fn rmdir(path: &CPath) -> SysResult<()> {
    // SAFETY: NUL-terminated path.
    retry(|| cvt(unsafe { libc::rmdir(path.as_cstr().as_ptr()) })).map(drop)
}

/// `unlink(2)`.
pub fn unlink(path: &CPath) -> SysResult<()> {
    // SAFETY: NUL-terminated path.
    retry(|| cvt(unsafe { libc::unlink(path.as_cstr().as_ptr()) })).map(drop)
}

/// `unlinkat(2)` of a file inside a directory we hold open.
pub fn unlinkat(dir: &Fd, name: &CStr) -> SysResult<()> {
    // SAFETY: NUL-terminated name; `dir` is an open descriptor.
    retry(|| cvt(unsafe { libc::unlinkat(dir.0, name.as_ptr(), 0) })).map(drop)
}

/// `fchmod(2)`: sets exactly `mode` on a file we hold open, whatever the
/// umask made of the mode it was created with.
pub fn fchmod(fd: &Fd, mode: u32) -> SysResult<()> {
    // SAFETY: plain call on a descriptor we own.
    retry(|| cvt(unsafe { libc::fchmod(fd.0, mode as libc::mode_t) })).map(drop)
}

/// `fchown(2)` of the group only, the owner left as it is.
pub fn fchown_group(fd: &Fd, gid: u32) -> SysResult<()> {
    // SAFETY: plain call on a descriptor we own; -1 leaves the owner be.
    retry(|| cvt(unsafe { libc::fchown(fd.0, u32::MAX as libc::uid_t, gid as libc::gid_t) })).map(drop)
}

/// `stat(2)`: the status of what `path` names, following symlinks all the
/// way (for a directory reached through one, as `/var/lock` is).
pub fn stat(path: &CPath) -> SysResult<FileStat> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: NUL-terminated path; stat fills the struct when it returns 0.
    retry(|| cvt(unsafe { libc::stat(path.as_cstr().as_ptr(), st.as_mut_ptr()) }))?;
    // SAFETY: initialised by the successful call above.
    Ok(FileStat::from_raw(unsafe { st.assume_init_ref() }))
}

/// The groups this process's permissions include: `getegid(2)` and
/// `getgroups(2)`, at most `GROUPS_CAPACITY` of them (the rest are left
/// out, which can only make a file's group look foreign).
pub fn groups() -> ([u32; GROUPS_CAPACITY], usize) {
    let mut list = [0 as libc::gid_t; GROUPS_CAPACITY];
    // SAFETY: getegid cannot fail.
    list[0] = unsafe { libc::getegid() };
    // SAFETY: the buffer holds GROUPS_CAPACITY - 1 gids after the first;
    // getgroups writes at most that many, or fails with EINVAL.
    let n = unsafe { libc::getgroups((GROUPS_CAPACITY - 1) as libc::c_int, list[1..].as_mut_ptr()) };
    let count = 1 + usize::try_from(n).unwrap_or(0);
    let mut out = [0u32; GROUPS_CAPACITY];
    for (dst, &src) in out.iter_mut().zip(&list[..count]) {
        *dst = src;
    }
    (out, count)
}

/// How many groups [`groups`] keeps.
pub const GROUPS_CAPACITY: usize = 64;

/// `geteuid(2)`: the user whose permissions this process has.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Calls `visit` with the name of every entry of the directory `dir` but
/// `.` and `..`, read with `getdents64(2)` into a fixed buffer; stops early
/// when `visit` returns `false`. The directory's offset moves: use a
/// descriptor opened for this.
pub fn each_dir_entry(dir: &Fd, mut visit: impl FnMut(&[u8]) -> bool) -> SysResult<()> {
    // Aligned for the kernel's `struct linux_dirent64` records.
    #[repr(C, align(8))]
    struct Buffer([u8; 2048]);
    let mut buf = Buffer([0; 2048]);
    loop {
        // SAFETY: the buffer is valid for writes of its whole length, and the
        // kernel writes at most that many bytes of whole records into it.
        let n = retry(|| cvt(unsafe { libc::syscall(libc::SYS_getdents64, dir.0, buf.0.as_mut_ptr(), buf.0.len()) }))?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0usize;
        while at + 19 <= n as usize {
            // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, then the
            // NUL-terminated name. Read field by field from the bytes.
            let reclen = u16::from_ne_bytes([buf.0[at + 16], buf.0[at + 17]]) as usize;
            if reclen < 20 || at + reclen > n as usize {
                return Err(Errno(libc::EIO));
            }
            let name = &buf.0[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." && !visit(name) {
                return Ok(());
            }
            at += reclen;
        }
    }
}

/// `link(2)`: creates `new` as a second name of `old`; fails with `EEXIST`
/// if `new` exists in any form, a symlink included, and never follows one.
pub fn link(old: &CPath, new: &CPath) -> SysResult<()> {
    // SAFETY: NUL-terminated paths.
    retry(|| cvt(unsafe { libc::link(old.as_cstr().as_ptr(), new.as_cstr().as_ptr()) })).map(drop)
}

/// `renameat(2)` inside one directory we hold open.
pub fn renameat(dir: &Fd, old: &CStr, new: &CStr) -> SysResult<()> {
    // SAFETY: NUL-terminated names; `dir` is an open descriptor.
    retry(|| cvt(unsafe { libc::renameat(dir.0, old.as_ptr(), dir.0, new.as_ptr()) })).map(drop)
}

/// `rename(2)`.
pub fn rename(old: &CPath, new: &CPath) -> SysResult<()> {
    // SAFETY: NUL-terminated paths.
    retry(|| cvt(unsafe { libc::rename(old.as_cstr().as_ptr(), new.as_cstr().as_ptr()) })).map(drop)
}

/// `flock(2)` operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlockOp {
    /// `LOCK_EX`: excludes every other lock on the file.
    Exclusive,
    /// `LOCK_SH`: excludes only exclusive locks.
    Shared,
    /// `LOCK_UN`: gives up the lock this description holds.
    Unlock,
}

/// `flock(2)` without blocking: `Ok(false)` when another description holds it.
pub fn try_flock(fd: &Fd, op: FlockOp) -> SysResult<bool> {
    let op = match op {
        FlockOp::Exclusive => libc::LOCK_EX | libc::LOCK_NB,
        FlockOp::Shared => libc::LOCK_SH | libc::LOCK_NB,
        FlockOp::Unlock => libc::LOCK_UN,
    };
    // SAFETY: plain call on a descriptor we own.
    match retry(|| cvt(unsafe { libc::flock(fd.0, op) })) {
        Ok(_) => Ok(true),
        Err(Errno::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// How an open-file-description lock ([`try_ofd_lock`]) is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfdLock {
    /// Excludes every other description; needs a descriptor open for writing.
    Exclusive,
    /// Shared with other readers; needs a descriptor open for reading.
    Shared,
}

/// `fcntl(2)` with `F_OFD_SETLK` over the whole file, without blocking:
/// `Ok(false)` when another open file description holds a conflicting lock.
///
/// Like `flock(2)` the lock belongs to the open file description (so two
/// descriptions in one process exclude each other, and it is released when
/// the last descriptor closes, whatever kills the process), but unlike
/// `flock` an exclusive lock needs a descriptor open for *writing*: a user
/// who may only read a guard file cannot hold it locked to wedge the lock.
/// Linux 3.15 and later; it does not interact with `flock(2)` locks.
pub fn try_ofd_lock(fd: &Fd, kind: OfdLock) -> SysResult<bool> {
    let l_type = match kind {
        OfdLock::Exclusive => libc::F_WRLCK,
        OfdLock::Shared => libc::F_RDLCK,
    };
    try_ofd_setlk(fd, l_type as libc::c_short, WHOLE_FILE)
}

/// Releases the lock [`try_ofd_lock`] took on this description.
pub fn ofd_unlock(fd: &Fd) -> SysResult<()> {
    ofd_setlk(fd, libc::F_UNLCK as libc::c_short, WHOLE_FILE)
}

/// [`try_ofd_lock`], exclusive, of the one byte at `offset` alone (which
/// may lie past the file's end, where nothing is ever read or written).
pub fn try_ofd_lock_byte(fd: &Fd, offset: u64) -> SysResult<bool> {
    try_ofd_setlk(fd, libc::F_WRLCK as libc::c_short, one_byte(offset)?)
}

/// Whether an open file description other than `fd`'s holds an exclusive
/// lock on the byte at `offset` (`F_OFD_GETLK`): the kernel's word, which
/// no process can fake but by holding that lock.
pub fn ofd_byte_locked_elsewhere(fd: &Fd, offset: u64) -> SysResult<bool> {
    let (start, len) = one_byte(offset)?;
    let mut lock = flock_of(libc::F_RDLCK as libc::c_short, (start, len));
    // SAFETY: plain call on a descriptor we own; the kernel writes into our
    // valid struct flock.
    retry(|| cvt(unsafe { libc::fcntl(fd.0, libc::F_OFD_GETLK, &mut lock) }))?;
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

/// Start 0 and length 0: the whole file, however long it grows.
const WHOLE_FILE: (libc::off_t, libc::off_t) = (0, 0);

fn one_byte(offset: u64) -> SysResult<(libc::off_t, libc::off_t)> {
    Ok((libc::off_t::try_from(offset).map_err(|_| Errno(libc::EINVAL))?, 1))
}

fn flock_of(l_type: libc::c_short, (start, len): (libc::off_t, libc::off_t)) -> libc::flock {
    // SAFETY: an all-zero `struct flock` is valid (l_pid must be 0 for OFD
    // locks).
    let mut lock: libc::flock = unsafe { core::mem::zeroed() };
    lock.l_type = l_type;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    lock
}

/// [`ofd_setlk`] of a lock: `Ok(false)` when another description holds a
/// conflicting one.
fn try_ofd_setlk(fd: &Fd, l_type: libc::c_short, range: (libc::off_t, libc::off_t)) -> SysResult<bool> {
    match ofd_setlk(fd, l_type, range) {
        Ok(()) => Ok(true),
        Err(Errno::EAGAIN) | Err(Errno::EACCES) => Ok(false),
        Err(e) => Err(e),
    }
}

fn ofd_setlk(fd: &Fd, l_type: libc::c_short, range: (libc::off_t, libc::off_t)) -> SysResult<()> {
    let lock = flock_of(l_type, range);
    // SAFETY: plain call on a descriptor we own, with a valid struct flock.
    retry(|| cvt(unsafe { libc::fcntl(fd.0, libc::F_OFD_SETLK, &lock) })).map(drop)
}

/// `strerror_r(3)` (the XSI one): the kernel's text for `errno`, in `buf`.
pub fn strerror(errno: Errno, buf: &mut [u8; 128]) -> Option<&str> {
    // SAFETY: `buf` is valid for its length; on success strerror_r leaves a
    // NUL-terminated string in it, and on failure we do not read it.
    let rc = unsafe { libc::strerror_r(errno.0, buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    CStr::from_bytes_until_nul(buf).ok().and_then(|text| text.to_str().ok())
}

/// A private, anonymous, read-write mapping of `len` bytes that the kernel
/// fills with zeros in the child of every fork (`MADV_WIPEONFORK`); `None`
/// if the kernel cannot make or mark it. Never unmapped but by
/// [`unmap_page`].
pub fn wiped_on_fork_page(len: usize) -> Option<*mut u8> {
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses.
    let addr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping just made, with its length.
    if unsafe { libc::madvise(addr, len, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: as above; nobody has seen it.
        unsafe { libc::munmap(addr, len) };
        return None;
    }
    Some(addr.cast())
}

/// Unmaps a mapping of [`wiped_on_fork_page`].
///
/// # Safety
/// `addr` and `len` are one such mapping's, and nothing refers into it.
pub unsafe fn unmap_page(addr: *mut u8, len: usize) {
    // SAFETY: the caller's promise.
    unsafe { libc::munmap(addr.cast(), len) };
}

/// `getpid(2)`: the kernel's answer, each time. [`crate::process::pid`]
/// keeps it.
pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// `kill(2)` with signal 0 or a real signal.
pub fn kill(pid: i32, signal: i32) -> SysResult<()> {
    // SAFETY: plain call; pid is checked positive by callers so that it never
    // addresses a process group.
    cvt(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// `pidfd_open(2)`: a descriptor for the process that has `pid` now. Unlike
/// the pid, it never comes to name another process: once that one has
/// exited, signals through it fail with `ESRCH`. Linux 5.3 and later;
/// `ENOSYS` before.
pub fn pidfd_open(pid: i32) -> SysResult<Fd> {
    // SAFETY: a plain system call on two integers; on success the kernel
    // returns a new descriptor, which the Fd owns and closes.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(Fd(fd as libc::c_int))
}

/// `pidfd_send_signal(2)`: sends `signal` to exactly the process `pidfd`
/// names, as `kill` would with the same permission checks.
pub fn pidfd_send_signal(pidfd: &Fd, signal: i32) -> SysResult<()> {
    // SAFETY: a null siginfo is allowed (the kernel fills it in as kill(2)
    // does) and flags must be 0; pidfd is a descriptor we own.
    cvt(unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.raw(), signal, core::ptr::null::<libc::siginfo_t>(), 0)
    })
    .map(drop)
}

/// `clock_gettime(2)` in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec out-pointer; the realtime and monotonic clocks
    // always exist on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec)
}

/// `nanosleep(2)` for the whole duration, resuming after signals.
pub fn sleep(duration: Duration) {
    let mut request = libc::timespec {
        tv_sec: duration.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: duration.subsec_nanos() as libc::c_long,
    };
    loop {
        let mut remaining = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: both pointers are valid timespecs.
        if unsafe { libc::nanosleep(&request, &mut remaining) } == 0 {
            return;
        }
        if Errno::last() != Errno::EINTR {
            return;
        }
        request = remaining;
    }
}

/// `ppoll(2)` on one descriptor, for input, for at most `timeout` (to the
/// nanosecond, unlike `poll`'s milliseconds): `Ok(true)` once it has
/// something to read (or an error to report, which the read then gives),
/// `Ok(false)` when the time passed first or a signal cut the wait short.
/// A caller that must wait the whole time reads its clock and waits again
/// for what is left: the kernel's own count of it is not kept.
pub fn poll_readable(fd: &Fd, timeout: Duration) -> SysResult<bool> {
    ppoll_one(fd, libc::POLLIN, timeout)
}

/// `ppoll(2)` on one descriptor for `events`: `Ok(true)` once one of them
/// (or an error) is there, `Ok(false)` when `timeout` passed first or a
/// signal cut the wait short.
fn ppoll_one(fd: &Fd, events: libc::c_short, timeout: Duration) -> SysResult<bool> {
    let mut pollfd = libc::pollfd { fd: fd.0, events, revents: 0 };
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, counted as one; a valid timespec; a null
    // signal mask, which leaves the thread's own in force.
    match cvt(unsafe { libc::ppoll(&mut pollfd, 1, &timeout, core::ptr::null()) }) {
        Ok(ready) => Ok(ready > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `inotify_init1(2)` with `IN_NONBLOCK | IN_CLOEXEC`: a new inotify
/// instance, whose reads never block (wait for it with [`poll_readable`]).
/// `EMFILE` once the user has `max_user_instances` of them (128 by default).
pub fn inotify_init() -> SysResult<Fd> {
    // SAFETY: a plain call with flags; on success the kernel returns a new
    // descriptor, which the Fd owns and closes.
    cvt(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) }).map(Fd)
}

/// `inotify_add_watch(2)`: watches `path` (symlinks followed, unless `mask`
/// has `IN_DONT_FOLLOW`) for the events in `mask`; returns the watch
/// descriptor. Watching a file already watched replaces its mask and
/// returns the same descriptor.
pub fn inotify_add_watch(inotify: &Fd, path: &CPath, mask: u32) -> SysResult<i32> {
    // SAFETY: NUL-terminated path; a descriptor we own (one that is no
    // inotify instance fails with EINVAL).
    retry(|| cvt(unsafe { libc::inotify_add_watch(inotify.0, path.as_cstr().as_ptr(), mask) }))
}

/// `inotify_rm_watch(2)`: ends the watch `wd`; the kernel queues its
/// `IN_IGNORED`.
pub fn inotify_rm_watch(inotify: &Fd, wd: i32) -> SysResult<()> {
    // SAFETY: a plain call on a descriptor we own and a watch number; a
    // number that is no watch of it fails with EINVAL.
    cvt(unsafe { libc::inotify_rm_watch(inotify.0, wd) }).map(|_| ())
}

/// One event of an inotify instance, as [`read_inotify_events`] gives it.
#[derive(Clone, Copy, Debug)]
pub struct InotifyEvent<'a> {
    /// The watch it came from (`-1` for `IN_Q_OVERFLOW`).
    pub wd: i32,
    /// What happened: `IN_*` bits.
    pub mask: u32,
    /// The name, in the watched directory, of the file it happened to;
    /// empty for an event of the watched file itself.
    pub name: &'a [u8],
}

/// Reads what the non-blocking inotify instance `inotify` has queued, into
/// a fixed buffer, and calls `visit` with each event; returns once the
/// queue is empty, or after 16 full reads, so that events that keep coming
/// cannot hold the caller here (the rest stay queued).
pub fn read_inotify_events(inotify: &Fd, mut visit: impl FnMut(InotifyEvent<'_>)) -> SysResult<()> {
    // `struct inotify_event`: i32 wd, u32 mask, u32 cookie, u32 len, then
    // `len` bytes of NUL-padded name. Room for at least one event with the
    // longest name (255 bytes), and aligned for the kernel's records.
    const HEADER: usize = 16;
    #[repr(C, align(8))]
    struct Buffer([u8; 4096]);
    let mut buf = Buffer([0; 4096]);
    for _ in 0..16 {
        // SAFETY: the buffer is valid for writes of its whole length, and
        // the kernel writes at most that many bytes of whole events into it.
        let n = match retry(|| cvt(unsafe { libc::read(inotify.0, buf.0.as_mut_ptr().cast(), buf.0.len()) })) {
            Ok(n) => n as usize,
            Err(Errno::EAGAIN) => return Ok(()),
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        let mut at = 0usize;
        while at + HEADER <= n {
            let field = |offset: usize| {
                let b = &buf.0[at + offset..at + offset + 4];
                [b[0], b[1], b[2], b[3]]
            };
            let wd = i32::from_ne_bytes(field(0));
            let mask = u32::from_ne_bytes(field(4));
            let end = at + HEADER + u32::from_ne_bytes(field(12)) as usize;
            if end > n {
                return Err(Errno(libc::EIO));
            }
            let name = &buf.0[at + HEADER..end];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            visit(InotifyEvent { wd, mask, name });
            at = end;
        }
    }
    Ok(())
}

/// `getrandom(2)`, filling all of `buf` from the kernel's CSPRNG.
pub fn getrandom(buf: &mut [u8]) -> SysResult<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = retry(|| cvt(unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) }))?;
        filled += n as usize;
    }
    Ok(())
}

/// `gethostname(2)` into `buf`; returns the name's length.
pub fn gethostname(buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    cvt(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) })?;
    Ok(buf.iter().position(|&b| b == 0).unwrap_or(buf.len()))
}

/// `sysconf(_SC_CLK_TCK)`: the unit of process start times in /proc.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: plain call.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// `renameat2(2)` with `RENAME_NOREPLACE`: fails with `EEXIST` instead of
/// replacing `new`. Where the file system does not support the flag (NFS,
/// older kernels) the error is `EINVAL` and the caller decides.
pub fn rename_noreplace(old: &CPath, new: &CPath) -> SysResult<()> {
    retry(|| {
        // SAFETY: NUL-terminated paths, relative to the working directory.
        cvt(unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                old.as_cstr().as_ptr(),
                libc::AT_FDCWD,
                new.as_cstr().as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        })
    })
    .map(drop)
}

/// `renameat2(2)` with `RENAME_EXCHANGE`: `a` and `b` swap names in one
/// step; both must exist. `EINVAL` where the file system does not support
/// it (NFS, older kernels).
pub fn rename_exchange(a: &CPath, b: &CPath) -> SysResult<()> {
    retry(|| {
        // SAFETY: NUL-terminated paths, relative to the working directory.
        cvt(unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_cstr().as_ptr(),
                libc::AT_FDCWD,
                b.as_cstr().as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        })
    })
    .map(drop)
}

/// `symlink(2)`: creates `link` pointing at `target`; `EEXIST` if `link`
/// exists in any form.
pub fn symlink(target: &CStr, link: &CPath) -> SysResult<()> {
    // SAFETY: NUL-terminated strings.
    retry(|| cvt(unsafe { libc::symlink(target.as_ptr(), link.as_cstr().as_ptr()) })).map(drop)
}

/// `readlink(2)` into `buf`; returns the target's length. A target as long as
/// `buf` may have been cut: callers pass one byte more than they accept.
pub fn readlink(path: &CPath, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes; readlink writes at most that.
    let n = retry(|| cvt(unsafe { libc::readlink(path.as_cstr().as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }))?;
    Ok(n as usize)
}

/// `utimensat(2)` with `AT_SYMLINK_NOFOLLOW`: sets the access and
/// modification times of `path` itself, a symlink included.
pub fn set_times_nofollow(path: &CPath, unix_nanos: i64) -> SysResult<()> {
    let ts = libc::timespec {
        tv_sec: unix_nanos.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: unix_nanos.rem_euclid(1_000_000_000) as libc::c_long,
    };
    let times = [ts, ts];
    retry(|| {
        // SAFETY: NUL-terminated path; `times` holds the two timespecs utimensat reads.
        cvt(unsafe {
            libc::utimensat(libc::AT_FDCWD, path.as_cstr().as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
        })
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Both ways of making a segment's pages present answer an error for a
    /// page the kernel cannot give (one huge page, `SHM_NORESERVE`, while
    /// none is free), where a touch would raise `SIGBUS`, and succeed for
    /// an ordinary segment.
    #[test]
    fn a_page_that_cannot_be_had_is_an_error_not_a_fault() {
        let (_, ordinary) = SharedMapping::new_segment(4096).unwrap();
        assert_eq!(populate(ordinary.base, 4096), Ok(()));
        assert_eq!(read_through_kernel(ordinary.base, 4096), Ok(()));
        let free_huge_pages = std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("HugePages_Free:").map(|n| n.trim().parse::<u64>().unwrap()));
        if free_huge_pages.is_some_and(|free| free > 0) {
            std::eprintln!("skipped: free huge pages here; a segment of them would be backed");
            return;
        }
        // SAFETY: plain call; the segment is removed below.
        let id = unsafe {
            libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | libc::SHM_HUGETLB | libc::SHM_NORESERVE | 0o600)
        };
        if id < 0 {
            std::eprintln!(
                "skipped: no SHM_HUGETLB segment for this user (root, or vm.hugetlb_shm_group, may make one)"
            );
            return;
        }
        let base = shmat(id);
        remove_segment(id).unwrap();
        let huge = SharedMapping { base: base.unwrap(), len: 4096, segment: true };
        assert!(populate(huge.base, 4096).is_err());
        assert!(read_through_kernel(huge.base, 4096).is_err());
        drop(huge);
    }

    /// What `Owner::signal_if_alive` relies on: a pidfd signals the process
    /// it was opened for, and once that process is reaped (its pid free for
    /// reuse) it signals nobody.
    #[test]
    fn a_pidfd_signals_its_own_process_and_no_later_one() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("sleep(1)");
        let pid = child.id() as i32;
        let pidfd = match pidfd_open(pid) {
            Err(e) if e.raw() == libc::ENOSYS => {
                let _ = child.kill();
                let _ = child.wait();
                std::eprintln!("skipped: this kernel has no pidfd_open (before Linux 5.3)");
                return;
            }
            other => other.expect("pidfd_open of a live child"),
        };
        pidfd_send_signal(&pidfd, libc::SIGTERM).expect("signal through the pidfd");
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM), "the child died of the pidfd's signal");
        assert_eq!(pidfd_send_signal(&pidfd, libc::SIGTERM), Err(Errno::ESRCH), "a reaped process's pidfd");
    }
}

/// Memory shared with other processes, read and written through atomics:
/// what several processes that map the same file, or attach the same System
/// V segment, see alike, and what futex words live in ([`futex_wait`]).
/// Unmapped or detached on drop.
///
/// A file mapping lasts only as long as its file: a page past the file's
/// end faults with `SIGBUS`, and every user who may write the file may
/// shorten it. A segment's size is fixed when it is made.
pub struct SharedMapping {
    base: core::ptr::NonNull<u8>,
    len: usize,
    /// Attached with `shmat(2)`, to be detached with `shmdt`, rather than
    /// mapped with `mmap`.
    segment: bool,
}

impl SharedMapping {
    /// `mmap(2)` with `MAP_SHARED` of `fd` (open for reading and writing)
    /// from offset 0.
    pub fn new(fd: &Fd, len: usize) -> SysResult<SharedMapping> {
        // SAFETY: a fresh mapping at an address the kernel chooses; it
        // aliases no memory of ours. The descriptor may be closed later:
        // the mapping keeps its own reference to the file.
        let addr = unsafe {
            libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0)
        };
        if addr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        match core::ptr::NonNull::new(addr.cast::<u8>()) {
            Some(base) => Ok(SharedMapping { base, len, segment: false }),
            None => Err(Errno::EINVAL),
        }
    }

    /// Keeps the mapping from every child of `fork()` (`MADV_DONTFORK`): a
    /// child finds nothing at its addresses, and holds no reference to the
    /// file through it. A child's copy of the value must be let go with
    /// [`forget`](Self::forget), never dropped: whatever the child mapped
    /// since at those addresses is not this mapping.
    pub fn keep_from_children(&self) -> SysResult<()> {
        // SAFETY: advice on our own mapping, of its exact range; it changes
        // what a child inherits, nothing of what this process sees.
        cvt(unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_DONTFORK) }).map(drop)
    }

    /// Lets go of the value of a mapping that this process does not have
    /// (its parent's, kept from it), leaving its addresses alone.
    pub fn forget(self) {
        core::mem::forget(self);
    }

    /// Makes a System V shared memory segment of exactly `len` bytes (zeroed
    /// by the kernel), attaches it and marks it for removal
    /// ([`remove_segment`]): its id, for other processes to
    /// [`attach`](Self::attach_segment) while it lasts, and the attachment.
    /// Readable and writable by its creator only, until [`share_segment`]
    /// says otherwise. A process killed between the two calls that make and
    /// attach it leaves it behind (`ipcrm` removes it); after them, nothing.
    pub fn new_segment(len: usize) -> SysResult<(i32, SharedMapping)> {
        // SAFETY: plain call; IPC_PRIVATE always makes a new segment.
        let id = cvt(unsafe { libc::shmget(libc::IPC_PRIVATE, len, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) })?;
        let attached = shmat(id);
        // Marked at once, attached or not: unattached, it goes now.
        let removed = remove_segment(id);
        let mapping = SharedMapping { base: attached?, len, segment: true };
        removed.map(|()| (id, mapping))
    }

    /// Attaches the System V segment `id`, read and write, if it is exactly
    /// `len` bytes long (`EINVAL` otherwise) and its memory can be had: an
    /// id read from a file may name any segment the caller may use, of any
    /// size, and one shorter than `len` would fault; so would one of huge
    /// pages made with `SHM_NORESERVE` when none is free, which says it is
    /// exactly `len` long.
    pub fn attach_segment(id: i32, len: usize) -> SysResult<SharedMapping> {
        // Not touched before its size is known.
        let mapping = SharedMapping { base: shmat(id)?, len, segment: true };
        // Asked once attached: the segment cannot go while attached, so the
        // size is the size of what `base` points at, not of a segment that
        // took the id after the one attached was removed.
        if segment_status(id)?.shm_segsz != len {
            return Err(Errno::EINVAL);
        }
        // Its pages, once present, stay: a segment cannot be cut short.
        populate(mapping.base, len)?;
        Ok(mapping)
    }

    /// The 32-bit word at byte `offset`, which other processes change at
    /// any moment: to be read and written only atomically.
    pub fn word32(&self, offset: usize) -> &core::sync::atomic::AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.len, "word outside the mapping");
        // SAFETY: in bounds and aligned (the mapping is page-aligned; the
        // assertion keeps the offset aligned and inside it), valid for as
        // long as `self`, and shared memory that every process touches only
        // through atomics, so no reference aliases a plain access.
        unsafe { &*self.base.as_ptr().add(offset).cast::<core::sync::atomic::AtomicU32>() }
    }

    /// The 64-bit word at byte `offset`; as [`word32`](Self::word32).
    pub fn word64(&self, offset: usize) -> &core::sync::atomic::AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len, "word outside the mapping");
        // SAFETY: as in `word32`, with 8-byte alignment.
        unsafe { &*self.base.as_ptr().add(offset).cast::<core::sync::atomic::AtomicU64>() }
    }

    /// Copies the bytes at `offset` into `out`. For bytes that change only
    /// under a lock the caller holds (a word of the mapping), so
    /// that no other process writes them meanwhile; bytes that a process
    /// outside that rule scribbles on are read as whatever they hold, and
    /// must be checked like any file content.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(offset <= self.len && out.len() <= self.len - offset, "bytes outside the mapping");
        // Shared memory may not be assumed to hold still between reads: a
        // relaxed atomic load of each aligned 8 bytes (what orders them is
        // the lock the caller holds), a volatile read of any byte outside
        // those. Every process splits a range the same way, by its offset.
        let mut i = 0;
        while i < out.len() {
            let at = offset + i;
            if at % 8 == 0 && out.len() - i >= 8 {
                let word = self.word64(at).load(core::sync::atomic::Ordering::Relaxed);
                out[i..i + 8].copy_from_slice(&word.to_ne_bytes());
                i += 8;
            } else {
                // SAFETY: in bounds (asserted); `out` is our own memory,
                // which the mapping cannot overlap.
                out[i] = unsafe { core::ptr::read_volatile(self.base.as_ptr().add(at)) };
                i += 1;
            }
        }
    }

    /// Writes `bytes` at `offset`; as [`read_bytes`](Self::read_bytes),
    /// under the lock that orders writers, and split alike.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        assert!(offset <= self.len && bytes.len() <= self.len - offset, "bytes outside the mapping");
        let mut i = 0;
        while i < bytes.len() {
            let at = offset + i;
            if at % 8 == 0 && bytes.len() - i >= 8 {
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes[i..i + 8]);
                self.word64(at).store(u64::from_ne_bytes(word), core::sync::atomic::Ordering::Relaxed);
                i += 8;
            } else {
                // SAFETY: in bounds (asserted), into the writable mapping,
                // from memory of ours.
                unsafe { core::ptr::write_volatile(self.base.as_ptr().add(at), bytes[i]) };
                i += 1;
            }
        }
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping or attachment made in `new` or
        // `attach_segment`, with its length; no reference into it outlives
        // `self` (they all borrow it).
        unsafe {
            match self.segment {
                true => libc::shmdt(self.base.as_ptr().cast()),
                false => libc::munmap(self.base.as_ptr().cast(), self.len),
            }
        };
    }
}

/// `shmat(2)` of segment `id`, read and write, where the kernel chooses.
fn shmat(id: i32) -> SysResult<core::ptr::NonNull<u8>> {
    // SAFETY: the kernel chooses the address (NULL), so the attachment
    // aliases no memory of ours.
    let addr = unsafe { libc::shmat(id, core::ptr::null(), 0) };
    if addr as isize == -1 {
        return Err(Errno::last());
    }
    core::ptr::NonNull::new(addr.cast::<u8>()).ok_or(Errno::EINVAL)
}

/// Makes the `len` bytes at `base` present in memory, where the kernel
/// answers an error for a page it cannot give, rather than the `SIGBUS`
/// that a first touch would raise: `MADV_POPULATE_WRITE` (Linux 5.14), or
/// on an older kernel, a read of each page by this very process through
/// `process_vm_readv`.
fn populate(base: core::ptr::NonNull<u8>, len: usize) -> SysResult<()> {
    // SAFETY: the caller's mapping, whole; populating changes no byte.
    if unsafe { libc::madvise(base.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) } == 0 {
        return Ok(());
    }
    match Errno::last() {
        Errno::EINVAL => read_through_kernel(base, len),
        other => Err(other),
    }
}

/// Reads a byte of each page of the `len` bytes at `base` (page-aligned)
/// through the kernel, which answers `EFAULT` for a page it cannot give.
fn read_through_kernel(base: core::ptr::NonNull<u8>, len: usize) -> SysResult<()> {
    let mut byte = 0u8;
    for offset in (0..len).step_by(4096) {
        let local = libc::iovec { iov_base: (&mut byte as *mut u8).cast(), iov_len: 1 };
        // The address is only handed to the kernel, which checks it.
        let remote = libc::iovec { iov_base: base.as_ptr().wrapping_add(offset).cast(), iov_len: 1 };
        // SAFETY: one valid iovec each way; the kernel writes one byte of
        // ours and reads this process's memory as a debugger would.
        let read = unsafe { libc::process_vm_readv(crate::process::pid(), &local, 1, &remote, 1, 0) };
        if read != 1 {
            return Err(if read < 0 { Errno::last() } else { Errno(libc::EFAULT) });
        }
    }
    Ok(())
}

/// `shmctl(2)` `IPC_STAT` of segment `id`.
pub(crate) fn segment_status(id: i32) -> SysResult<libc::shmid_ds> {
    let mut status = core::mem::MaybeUninit::<libc::shmid_ds>::uninit();
    // SAFETY: IPC_STAT fills the whole struct when it returns 0.
    cvt(unsafe { libc::shmctl(id, libc::IPC_STAT, status.as_mut_ptr()) })?;
    // SAFETY: filled by the successful call.
    Ok(unsafe { status.assume_init() })
}

/// Gives segment `id` (one the caller made) to group `gid` with the
/// permission bits `mode` (read and write bits count; execute bits are
/// ignored), as a file of that group and mode would be.
pub fn share_segment(id: i32, gid: u32, mode: u32) -> SysResult<()> {
    let mut status = segment_status(id)?;
    status.shm_perm.gid = gid;
    status.shm_perm.mode = (mode & 0o666) as libc::c_ushort;
    // SAFETY: IPC_SET reads the struct filled by IPC_STAT, as changed.
    cvt(unsafe { libc::shmctl(id, libc::IPC_SET, &mut status) }).map(drop)
}

/// Marks segment `id` to be destroyed once the last process has detached
/// it. Linux lets processes attach it by its id until then: a segment so
/// marked lives exactly as long as someone has it attached.
pub fn remove_segment(id: i32) -> SysResult<()> {
    // SAFETY: IPC_RMID reads no buffer.
    cvt(unsafe { libc::shmctl(id, libc::IPC_RMID, core::ptr::null_mut()) }).map(drop)
}

/// Whether System V segment `id` exists (for tests of its lifetime).
#[cfg(test)]
pub fn segment_exists(id: i32) -> bool {
    segment_status(id).is_ok()
}

// SAFETY: the mapping is plain shared memory, reached only through atomics
// (`word32`, `word64`), which any thread may use at any time.
unsafe impl Send for SharedMapping {}
// SAFETY: as for Send: `&SharedMapping` hands out nothing but atomics.
unsafe impl Sync for SharedMapping {}

/// How a [`futex_wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FutexWait {
    /// A [`futex_wake`] on the word, or the word no longer held the value
    /// expected when the wait began (`EAGAIN`): look again.
    Woken,
    /// The timeout passed.
    TimedOut,
    /// A signal handler ran (`EINTR`).
    Interrupted,
}

/// `futex(2)` `FUTEX_WAIT` on a word of a [`SharedMapping`], across
/// processes (never `FUTEX_PRIVATE_FLAG`): sleeps while the word holds
/// `expected`, for at most `timeout`. The kernel compares the word and
/// queues the caller in one step, so a wake that follows a change of the
/// word is never lost.
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, expected: u32, timeout: Duration) -> FutexWait {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the word is a valid, aligned u32 for the duration of the
    // call; a relative timespec; the other arguments are unused by WAIT.
    let rc = unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &timeout as *const libc::timespec)
    };
    if rc == 0 {
        return FutexWait::Woken;
    }
    match Errno::last() {
        Errno::EINTR => FutexWait::Interrupted,
        Errno(libc::ETIMEDOUT) => FutexWait::TimedOut,
        // EAGAIN: the word changed already. Anything else (EFAULT, ENOSYS)
        // cannot come of a valid mapping: the caller looks again.
        _ => FutexWait::Woken,
    }
}

/// `futex(2)` `FUTEX_WAKE` of every process waiting on the word: how many
/// it woke (none, too, on an error, which a valid word cannot give).
pub fn futex_wake(word: &core::sync::atomic::AtomicU32) -> usize {
    // SAFETY: the word is a valid, aligned u32; WAKE reads no other argument.
    let woken = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    usize::try_from(woken).unwrap_or(0)
}

/// `statfs(2)`'s `f_type`: which kind of file system holds `path`.
pub fn fs_type_of(path: &CPath) -> SysResult<i64> {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut info: libc::statfs = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    retry(|| cvt(unsafe { libc::statfs(path.as_cstr().as_ptr(), &mut info) }))?;
    Ok(info.f_type as i64)
}

/// `fstatfs(2)`'s `f_type`: which kind of file system holds the open file `fd`.
pub fn fs_type_of_open(fd: &Fd) -> SysResult<i64> {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut info: libc::statfs = unsafe { core::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out-pointer.
    retry(|| cvt(unsafe { libc::fstatfs(fd.0, &mut info) }))?;
    Ok(info.f_type as i64)
}

// ---------------------------------------------------------------------------
// Stream sockets, for the locks that live on a server. Every socket is
// non-blocking: a caller waits for it with `poll_socket` and its own
// deadline, never inside a call that could outlast it.
// ---------------------------------------------------------------------------

/// A socket address: an IPv4 or IPv6 address and port, or a unix socket's
/// path, in the form `connect(2)` takes.
#[derive(Clone, Copy)]
pub struct SocketAddress {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl fmt::Debug for SocketAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SocketAddress(family {}, {} bytes)", self.storage.ss_family, self.len)
    }
}

impl SocketAddress {
    /// The address of a `getaddrinfo(3)` entry, with `port`; `None` for a
    /// family other than IPv4 and IPv6.
    pub fn from_addrinfo(entry: &libc::addrinfo, port: u16) -> Option<SocketAddress> {
        if entry.ai_addr.is_null() {
            return None;
        }
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        let len = (entry.ai_addrlen as usize).min(core::mem::size_of::<libc::sockaddr_storage>());
        // SAFETY: `ai_addr` points at `ai_addrlen` valid bytes (getaddrinfo
        // made the entry), of which no more than the storage holds are copied.
        unsafe {
            core::ptr::copy_nonoverlapping(
                entry.ai_addr.cast::<u8>(),
                (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
                len,
            )
        };
        // The port goes in by hand, at its place in each family.
        match storage.ss_family as libc::c_int {
            // SAFETY: the storage holds a sockaddr_in (its family says so).
            libc::AF_INET => unsafe {
                (*(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()).sin_port = port.to_be()
            },
            // SAFETY: the storage holds a sockaddr_in6.
            libc::AF_INET6 => unsafe {
                (*(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()).sin6_port = port.to_be()
            },
            _ => return None,
        }
        Some(SocketAddress { storage, len: len as libc::socklen_t })
    }

    /// The address of an IP host and port.
    pub fn ip(ip: core::net::IpAddr, port: u16) -> SocketAddress {
        // SAFETY: an all-zero sockaddr_storage is a valid value (family 0).
        let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        let len = match ip {
            core::net::IpAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: port.to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr.
                unsafe { core::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
                core::mem::size_of::<libc::sockaddr_in>()
            }
            core::net::IpAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: port.to_be(),
                    sin6_flowinfo: 0,
                    sin6_addr: libc::in6_addr { s6_addr: v6.octets() },
                    sin6_scope_id: 0,
                };
                // SAFETY: as above.
                unsafe { core::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
                core::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        SocketAddress { storage, len: len as libc::socklen_t }
    }

    /// The address of a unix socket; `Err(ENAMETOOLONG)` for a path longer
    /// than `sun_path` holds (107 bytes).
    pub fn unix(path: &CPath) -> SysResult<SocketAddress> {
        // SAFETY: an all-zero sockaddr_un is a valid value.
        let mut sun: libc::sockaddr_un = unsafe { core::mem::zeroed() };
        let bytes = path.as_bytes();
        if bytes.len() >= sun.sun_path.len() {
            return Err(Errno::ENAMETOOLONG);
        }
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (slot, &b) in sun.sun_path.iter_mut().zip(bytes) {
            *slot = b as libc::c_char;
        }
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_un.
        unsafe { core::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sun) };
        let len = core::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
        Ok(SocketAddress { storage, len: len as libc::socklen_t })
    }

    /// Whether the two name the same place.
    pub fn same_as(&self, other: &SocketAddress) -> bool {
        let bytes = |address: &SocketAddress| {
            // SAFETY: the storage is plain bytes, of which `len` were filled.
            unsafe {
                core::slice::from_raw_parts(
                    (&address.storage as *const libc::sockaddr_storage).cast::<u8>(),
                    address.len as usize,
                )
            }
        };
        self.len == other.len && bytes(self) == bytes(other)
    }

    /// Whether it is an IP address (whose socket wants `TCP_NODELAY`).
    fn is_ip(&self) -> bool {
        matches!(self.storage.ss_family as libc::c_int, libc::AF_INET | libc::AF_INET6)
    }
}

/// A non-blocking, close-on-exec stream socket whose `connect(2)` to
/// `address` has begun; `Ok((socket, true))` if it is connected already
/// (a unix socket, usually), `Ok((socket, false))` if the connection is in
/// progress: wait for [`Ready::Write`] and then ask [`socket_error`].
/// An IP socket has `TCP_NODELAY`: a lock's commands are small and each
/// waits for its answer.
pub fn connect_start(address: &SocketAddress) -> SysResult<(Fd, bool)> {
    let family = address.storage.ss_family as libc::c_int;
    // SAFETY: a plain call; on success the descriptor is ours (Fd closes it).
    let fd = Fd(cvt(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?);
    if address.is_ip() {
        let on: libc::c_int = 1;
        // SAFETY: a valid int option of its size on a socket we own. A
        // failure only costs latency, so it is ignored.
        unsafe {
            libc::setsockopt(
                fd.0,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&on as *const libc::c_int).cast(),
                core::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
    // SAFETY: the address is `len` valid bytes of a sockaddr.
    let rc = unsafe { libc::connect(fd.0, (&address.storage as *const libc::sockaddr_storage).cast(), address.len) };
    match cvt(rc) {
        Ok(_) => Ok((fd, true)),
        // EINTR: the connection goes on in the background, as EINPROGRESS.
        Err(Errno(libc::EINPROGRESS)) | Err(Errno::EINTR) => Ok((fd, false)),
        // A unix socket whose listener's backlog is full.
        Err(Errno::EAGAIN) => Err(Errno(libc::ECONNREFUSED)),
        Err(e) => Err(e),
    }
}

/// `getsockopt(SO_ERROR)`: how a connection begun by [`connect_start`]
/// ended, once the socket is ready to write.
pub fn socket_error(fd: &Fd) -> SysResult<()> {
    let mut error: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid int out-buffer and its length, on a socket we own.
    cvt(unsafe {
        libc::getsockopt(fd.0, libc::SOL_SOCKET, libc::SO_ERROR, (&mut error as *mut libc::c_int).cast(), &mut len)
    })?;
    match error {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// What [`poll_socket`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Something to read, or the peer's end of the stream.
    Read,
    /// Room to write, or a connection that has ended (well or not).
    Write,
}

/// `ppoll(2)` on one socket for `ready`, for at most `timeout`: `Ok(true)`
/// once it is ready (or has an error, which the next call reports),
/// `Ok(false)` when the time passed or a signal cut the wait short.
pub fn poll_socket(fd: &Fd, ready: Ready, timeout: Duration) -> SysResult<bool> {
    let events = match ready {
        Ready::Read => libc::POLLIN,
        Ready::Write => libc::POLLOUT,
    };
    ppoll_one(fd, events, timeout)
}

/// `send(2)` of what fits now, with `MSG_NOSIGNAL` (a closed peer is
/// `EPIPE`, never a `SIGPIPE` that would kill the caller's process).
/// `Err(EAGAIN)`: nothing fits; wait for [`Ready::Write`].
pub fn send_some(fd: &Fd, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: `buf` is a valid readable buffer of its length.
    retry(|| cvt(unsafe { libc::send(fd.0, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) })).map(|n| n as usize)
}

/// `recv(2)` of what has arrived; `Ok(0)` at the end of the stream.
/// `Err(EAGAIN)`: nothing yet; wait for [`Ready::Read`].
pub fn recv_some(fd: &Fd, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: `buf` is a valid writable buffer of its length.
    retry(|| cvt(unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) })).map(|n| n as usize)
}

/// Whether a kept connection is still as it was left: open, with nothing
/// unread. `recv(2)` with `MSG_PEEK | MSG_DONTWAIT` of one byte: the end of
/// the stream (the peer closed it, or restarted) or bytes nobody asked for
/// both mean it is no longer fit to carry a question.
pub fn socket_is_idle(fd: &Fd) -> bool {
    let mut byte = 0u8;
    // SAFETY: a one-byte writable buffer; MSG_PEEK leaves the stream as it is.
    let n = unsafe { libc::recv(fd.0, (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    n < 0 && matches!(Errno::last(), Errno::EAGAIN | Errno::EINTR)
}

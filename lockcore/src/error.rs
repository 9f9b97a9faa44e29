//! The errors of lockcore: one enum, `Copy`, no allocation.
//!
//! Outcomes that are not failures (a release that ran past its TTL, a lock
//! that someone else took over) are *not* errors: they are
//! [`ReleaseOutcome`](crate::ReleaseOutcome) and
//! [`ProlongOutcome`](crate::ProlongOutcome) values.

use core::fmt;

use crate::sys::Errno;

/// Why a lock spec was refused. The key it names is kept in [`SpecError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecErrorKind {
    /// The spec does not have the shape `scheme:target?key=value&...`.
    Syntax,
    /// The scheme is not one this library implements.
    UnknownScheme,
    /// The key is not an option of this scheme.
    UnknownKey,
    /// The key's value does not parse, or is out of range.
    BadValue,
    /// The key appears twice (or with an alias of itself).
    DuplicateKey,
    /// The target, or a path derived from it, is longer than `PATH_MAX`.
    PathTooLong,
}

/// Longest key name an error keeps; longer names are cut (they are unknown anyway).
pub const KEY_TEXT_CAPACITY: usize = 32;

/// A refused lock spec: which key (empty for the spec as a whole) and why.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SpecError {
    pub kind: SpecErrorKind,
    key: [u8; KEY_TEXT_CAPACITY],
    key_len: u8,
    /// A short reason, such as "expected a duration like 250ms, 30s, 10m or 1h".
    pub reason: &'static str,
}

impl SpecError {
    pub fn new(kind: SpecErrorKind, key: &[u8], reason: &'static str) -> SpecError {
        let len = key.len().min(KEY_TEXT_CAPACITY);
        let mut text = [0u8; KEY_TEXT_CAPACITY];
        text[..len].copy_from_slice(&key[..len]);
        SpecError { kind, key: text, key_len: len as u8, reason }
    }

    /// The key the error is about; empty when it is about the spec as a whole.
    pub fn key(&self) -> &[u8] {
        &self.key[..self.key_len as usize]
    }
}

impl fmt::Debug for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpecError({:?}, {self})", self.kind)
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key_len == 0 {
            return write!(f, "lock spec: {}", self.reason);
        }
        f.write_str("lock spec key '")?;
        for &b in self.key() {
            // Keys come from the caller; show them without letting control
            // bytes into a log line.
            if b.is_ascii_graphic() {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        write!(f, "': {}", self.reason)
    }
}

/// Which part of a lock on disk did not hold what it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorruptKind {
    /// The owner record does not parse.
    Record,
    /// The owner record is longer than any record this library writes.
    RecordTooLong,
    /// The guard file (fence and cooldown state) does not parse.
    GuardState,
}

/// Every way an operation of lockcore can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The lock spec was refused.
    Spec(SpecError),
    /// Someone else holds the lock (or it is cooling down); `try_acquire` only.
    Busy,
    /// The wait budget ran out before the lock could be taken.
    Timeout,
    /// The operation needs a held lock and this handle holds none.
    NotHeld,
    /// `acquire` on a handle that already holds its lock.
    AlreadyHeld,
    /// The strategy cannot keep this promise (for example a cooldown).
    Unsupported(&'static str),
    /// The handle's lock was taken by the parent process; a child of `fork()`
    /// may neither release nor prolong it.
    Forked,
    /// A directory on the lock's path does not exist.
    NotFound,
    /// The file system refused access to the lock's path.
    PermissionDenied,
    /// The lock's path is a symbolic link: refused, never followed.
    Symlink,
    /// The lock's path holds something this strategy never creates there
    /// (a directory where a file belongs, a fifo, a file where a directory belongs).
    NotALock,
    /// The lock's record is unreadable; see [`CorruptKind`].
    Corrupt(CorruptKind),
    /// The commit step could not rename the caller's temp file over its
    /// target (the temp file is missing, the target is a directory, the two
    /// are on different file systems, ...); the target is untouched.
    Commit(Errno),
    /// The commit step was given one of the lock's own files (the lock or
    /// its guard) as its temp file or its target; nothing was renamed.
    CommitOntoLock,
    /// Any other system error, with its errno.
    Os(Errno),
}

impl Error {
    /// Maps an errno from an operation on the lock's path to the error a
    /// caller can act on.
    pub fn from_path_errno(errno: Errno) -> Error {
        match errno {
            Errno::ENOENT | Errno::ENOTDIR => Error::NotFound,
            Errno::EACCES | Errno::EPERM | Errno::EROFS => Error::PermissionDenied,
            Errno::ELOOP => Error::Symlink,
            // A directory where a file belongs (open for writing, unlink, rename over it).
            Errno::EISDIR => Error::NotALock,
            Errno::ENAMETOOLONG => {
                Error::Spec(SpecError::new(SpecErrorKind::PathTooLong, b"", "a lock path is too long"))
            }
            other => Error::Os(other),
        }
    }
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Error {
        Error::Spec(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spec(e) => write!(f, "{e}"),
            Error::Busy => f.write_str("the lock is held by someone else"),
            Error::Timeout => f.write_str("the wait budget ran out before the lock was free"),
            Error::NotHeld => f.write_str("this handle does not hold its lock"),
            Error::AlreadyHeld => f.write_str("this handle already holds its lock"),
            Error::Unsupported(what) => write!(f, "this strategy does not support {what}"),
            Error::Forked => f.write_str("the lock belongs to the parent process of this fork"),
            Error::NotFound => f.write_str("a directory on the lock's path does not exist"),
            Error::PermissionDenied => f.write_str("permission denied on the lock's path"),
            Error::Symlink => f.write_str("the lock's path is a symbolic link; refusing to follow it"),
            Error::NotALock => f.write_str("the lock's path holds something that is not a lock"),
            Error::Corrupt(CorruptKind::Record) => f.write_str("the lock's owner record is corrupt"),
            Error::Corrupt(CorruptKind::RecordTooLong) => f.write_str("the lock's owner record is too long"),
            Error::Corrupt(CorruptKind::GuardState) => f.write_str("the lock's guard file is corrupt"),
            Error::Commit(errno) => write!(
                f,
                "the commit could not rename the temp file over the target (errno {}); the target is untouched",
                errno.raw()
            ),
            Error::CommitOntoLock => f.write_str("the commit's temp file or target is one of the lock's own files"),
            Error::Os(errno) => write!(f, "system error (errno {})", errno.raw()),
        }
    }
}

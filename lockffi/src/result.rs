//! The result codes of the C interface: one enum, fixed numbers, one place
//! that maps core errors to codes, one table of static texts.

use lockcore::{CorruptKind, Error, ErrorKind, ProlongOutcome, ReleaseOutcome, SpecErrorKind};

/// What every `lock_*` call returns.
///
/// The numbers are part of the ABI: a code keeps its number forever, and a
/// retired code's number is never given to another. Codes below 100 are
/// outcomes a correct program meets in normal operation; 100 and above are
/// errors.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lock_result {
    /// Success.
    LOCK_OK = 0,
    /// Release or prolong: the lock was held past its TTL, but nobody took it.
    /// A release has released it; a prolong holds it again with the new TTL.
    /// What the caller did after the expiry was not protected.
    LOCK_EXPIRED = 1,
    /// Release or prolong: someone else holds the lock now (ours was broken
    /// after it expired or its owner was judged dead). Nothing was changed and
    /// the handle no longer holds the lock.
    LOCK_LOST = 2,
    /// Try-acquire: someone else holds the lock, it is cooling down, or
    /// the file that orders every change to it stayed locked for 50 ms.
    ///
    /// Release, prolong, commit, inspect, break, close: that file (the
    /// guard `<lock>.guard`; for `lease` and `toplock` the lock file itself)
    /// stayed locked by another process for the call's whole patience of
    /// 2 seconds. Its holders keep it for a few system calls, so only a
    /// process stopped inside one of them (SIGSTOP, a debugger) or another
    /// user who may open that file and holds it locked on purpose can do
    /// that; `lock_last_error_message` says so. Nothing was changed: a held
    /// lock is still held (and still renewed by its watchdog); try again.
    LOCK_BUSY = 3,
    /// Acquire: the wait budget ran out before the lock was free.
    LOCK_TIMEOUT = 4,

    /// A required pointer argument was NULL.
    LOCK_ERR_NULL_ARGUMENT = 100,
    /// Release or prolong on a handle that does not hold its lock.
    LOCK_ERR_NOT_HELD = 101,
    /// Acquire on a handle that already holds its lock.
    LOCK_ERR_ALREADY_HELD = 102,
    /// The handle's lock was acquired by the parent process before fork();
    /// only the parent may use it. Every call on the child's copy of the
    /// handle but `lock_close` answers this, whatever its other arguments.
    LOCK_ERR_FORKED = 103,
    /// The handle is in use by another thread at this moment.
    LOCK_ERR_HANDLE_IN_USE = 104,
    /// The strategy cannot do this (for example, break a flock lock).
    LOCK_ERR_UNSUPPORTED = 105,
    /// An output buffer is too small; nothing was written.
    LOCK_ERR_BUFFER_TOO_SMALL = 106,
    /// A duration argument is out of range, or `lock_commit` was given one
    /// of the lock's own files (the lock or its guard) to rename.
    LOCK_ERR_INVALID_ARGUMENT = 107,

    /// The lock spec is not `scheme:target?key=value&...`.
    LOCK_ERR_SPEC_SYNTAX = 200,
    /// The spec's scheme is not one this library implements.
    LOCK_ERR_SPEC_UNKNOWN_SCHEME = 201,
    /// The spec names an option its scheme does not have.
    LOCK_ERR_SPEC_UNKNOWN_KEY = 202,
    /// An option's value does not parse or is out of range.
    LOCK_ERR_SPEC_BAD_VALUE = 203,
    /// An option is given twice (ttl and hold are one option).
    LOCK_ERR_SPEC_DUPLICATE_KEY = 204,
    /// The target, or a path derived from it, is longer than PATH_MAX.
    LOCK_ERR_PATH_TOO_LONG = 205,
    /// The target of a network lock is no
    /// `//[user[:password]@]host[:port][/db]/key`.
    LOCK_ERR_SPEC_BAD_URL = 206,

    /// A directory on the lock's path does not exist.
    LOCK_ERR_NOT_FOUND = 300,
    /// The file system refused access to the lock's path.
    LOCK_ERR_PERMISSION = 301,
    /// The lock's path is a symbolic link; it is never followed.
    LOCK_ERR_SYMLINK = 302,
    /// The lock's path holds something that is not a lock of this scheme
    /// (a directory where a file belongs, a fifo, ...).
    LOCK_ERR_NOT_A_LOCK = 303,
    /// The lock's owner record does not parse.
    LOCK_ERR_CORRUPT_RECORD = 304,
    /// The lock's owner record is longer than any record this library writes.
    LOCK_ERR_RECORD_TOO_LONG = 305,
    /// The lock's guard file (`<lock>.guard`: fence and cooldown) does not parse.
    LOCK_ERR_CORRUPT_GUARD = 306,
    /// Another system error; `errno` holds it.
    LOCK_ERR_SYSTEM = 307,
    /// `lock_commit` could not rename the temp file over the target (the
    /// temp file is missing, the target is a directory, the two are on
    /// different file systems, ...); `errno` holds why. The lock is still
    /// held and the target untouched.
    LOCK_ERR_COMMIT = 308,
    /// A component of the lock's path is a file, not a directory.
    LOCK_ERR_NOT_A_DIRECTORY = 309,
    /// One of the lock's files (or its directory) could have been written
    /// by a user the spec's `mode` does not let take the lock, or belongs to
    /// another user while the `mode` keeps the lock private: it is neither
    /// read nor written. The message names the file, its owner and mode.
    LOCK_ERR_UNTRUSTED = 310,

    /// A bug in this library was caught before it could cross into C.
    LOCK_ERR_PANIC = 900,
}

use lock_result::*;

impl lock_result {
    /// Every code, for tests and for `lock_strerror`.
    pub const ALL: &'static [lock_result] = &[
        LOCK_OK,
        LOCK_EXPIRED,
        LOCK_LOST,
        LOCK_BUSY,
        LOCK_TIMEOUT,
        LOCK_ERR_NULL_ARGUMENT,
        LOCK_ERR_NOT_HELD,
        LOCK_ERR_ALREADY_HELD,
        LOCK_ERR_FORKED,
        LOCK_ERR_HANDLE_IN_USE,
        LOCK_ERR_UNSUPPORTED,
        LOCK_ERR_BUFFER_TOO_SMALL,
        LOCK_ERR_INVALID_ARGUMENT,
        LOCK_ERR_SPEC_SYNTAX,
        LOCK_ERR_SPEC_UNKNOWN_SCHEME,
        LOCK_ERR_SPEC_UNKNOWN_KEY,
        LOCK_ERR_SPEC_BAD_VALUE,
        LOCK_ERR_SPEC_DUPLICATE_KEY,
        LOCK_ERR_PATH_TOO_LONG,
        LOCK_ERR_SPEC_BAD_URL,
        LOCK_ERR_NOT_FOUND,
        LOCK_ERR_PERMISSION,
        LOCK_ERR_SYMLINK,
        LOCK_ERR_NOT_A_LOCK,
        LOCK_ERR_CORRUPT_RECORD,
        LOCK_ERR_RECORD_TOO_LONG,
        LOCK_ERR_CORRUPT_GUARD,
        LOCK_ERR_SYSTEM,
        LOCK_ERR_COMMIT,
        LOCK_ERR_NOT_A_DIRECTORY,
        LOCK_ERR_UNTRUSTED,
        LOCK_ERR_PANIC,
    ];

    /// Static, NUL-terminated text for a code.
    pub fn text(self) -> &'static core::ffi::CStr {
        match self {
            LOCK_OK => c"success",
            LOCK_EXPIRED => c"the lock was held past its TTL, but nobody took it",
            LOCK_LOST => c"the lock was lost: someone else holds it now",
            LOCK_BUSY => c"the lock is held by someone else, cooling down, or its guard is held",
            LOCK_TIMEOUT => c"the wait budget ran out before the lock was free",
            LOCK_ERR_NULL_ARGUMENT => c"a required pointer argument is NULL",
            LOCK_ERR_NOT_HELD => c"this handle does not hold its lock",
            LOCK_ERR_ALREADY_HELD => c"this handle already holds its lock",
            LOCK_ERR_FORKED => c"the lock was taken by the parent process before fork()",
            LOCK_ERR_HANDLE_IN_USE => c"the handle is in use by another thread",
            LOCK_ERR_UNSUPPORTED => c"this strategy does not support the operation",
            LOCK_ERR_BUFFER_TOO_SMALL => c"the output buffer is too small",
            LOCK_ERR_INVALID_ARGUMENT => c"an argument is out of range",
            LOCK_ERR_SPEC_SYNTAX => c"the lock spec is malformed; expected scheme:target?key=value&...",
            LOCK_ERR_SPEC_UNKNOWN_SCHEME => c"the lock spec names an unknown scheme",
            LOCK_ERR_SPEC_UNKNOWN_KEY => c"the lock spec names an option its scheme does not have",
            LOCK_ERR_SPEC_BAD_VALUE => c"a lock spec option has a bad value",
            LOCK_ERR_SPEC_DUPLICATE_KEY => c"a lock spec option is given twice",
            LOCK_ERR_PATH_TOO_LONG => c"a lock path is longer than PATH_MAX",
            LOCK_ERR_SPEC_BAD_URL => c"the lock spec's network target is malformed",
            LOCK_ERR_NOT_FOUND => c"a directory on the lock's path does not exist",
            LOCK_ERR_PERMISSION => c"permission denied on the lock's path",
            LOCK_ERR_SYMLINK => c"the lock's path is a symbolic link; refusing to follow it",
            LOCK_ERR_NOT_A_LOCK => c"the lock's path holds something that is not a lock",
            LOCK_ERR_CORRUPT_RECORD => c"the lock's owner record is corrupt",
            LOCK_ERR_RECORD_TOO_LONG => c"the lock's owner record is too long",
            LOCK_ERR_CORRUPT_GUARD => c"the lock's guard file is corrupt",
            LOCK_ERR_SYSTEM => c"system error; see errno",
            LOCK_ERR_COMMIT => c"the commit could not rename the temp file over the target; see errno",
            LOCK_ERR_NOT_A_DIRECTORY => c"a component of the lock's path is not a directory",
            LOCK_ERR_UNTRUSTED => c"a file of the lock could have been written by a user its mode does not trust",
            LOCK_ERR_PANIC => c"internal error in the lock library (caught panic)",
        }
    }
}

impl From<Error> for lock_result {
    fn from(error: Error) -> lock_result {
        lock_result::from(error.kind())
    }
}

/// The one place where the kinds of core errors become codes.
impl From<ErrorKind> for lock_result {
    fn from(kind: ErrorKind) -> lock_result {
        match kind {
            ErrorKind::Spec(kind) => match kind {
                SpecErrorKind::Syntax => LOCK_ERR_SPEC_SYNTAX,
                SpecErrorKind::UnknownScheme => LOCK_ERR_SPEC_UNKNOWN_SCHEME,
                SpecErrorKind::UnknownKey => LOCK_ERR_SPEC_UNKNOWN_KEY,
                SpecErrorKind::BadValue => LOCK_ERR_SPEC_BAD_VALUE,
                SpecErrorKind::DuplicateKey => LOCK_ERR_SPEC_DUPLICATE_KEY,
                SpecErrorKind::PathTooLong => LOCK_ERR_PATH_TOO_LONG,
                SpecErrorKind::BadUrl => LOCK_ERR_SPEC_BAD_URL,
            },
            ErrorKind::Busy => LOCK_BUSY,
            ErrorKind::Timeout => LOCK_TIMEOUT,
            ErrorKind::NotHeld => LOCK_ERR_NOT_HELD,
            ErrorKind::AlreadyHeld => LOCK_ERR_ALREADY_HELD,
            ErrorKind::Unsupported => LOCK_ERR_UNSUPPORTED,
            ErrorKind::Forked => LOCK_ERR_FORKED,
            ErrorKind::NotFound => LOCK_ERR_NOT_FOUND,
            ErrorKind::NotADirectory => LOCK_ERR_NOT_A_DIRECTORY,
            ErrorKind::PermissionDenied => LOCK_ERR_PERMISSION,
            ErrorKind::Symlink => LOCK_ERR_SYMLINK,
            ErrorKind::NotALock => LOCK_ERR_NOT_A_LOCK,
            ErrorKind::Corrupt(CorruptKind::Record) => LOCK_ERR_CORRUPT_RECORD,
            ErrorKind::Corrupt(CorruptKind::RecordTooLong) => LOCK_ERR_RECORD_TOO_LONG,
            ErrorKind::Corrupt(CorruptKind::GuardState) => LOCK_ERR_CORRUPT_GUARD,
            ErrorKind::Untrusted => LOCK_ERR_UNTRUSTED,
            ErrorKind::Commit => LOCK_ERR_COMMIT,
            ErrorKind::CommitOntoLock => LOCK_ERR_INVALID_ARGUMENT,
            ErrorKind::Os => LOCK_ERR_SYSTEM,
        }
    }
}

impl From<ReleaseOutcome> for lock_result {
    fn from(outcome: ReleaseOutcome) -> lock_result {
        match outcome {
            ReleaseOutcome::Released => LOCK_OK,
            ReleaseOutcome::Expired => LOCK_EXPIRED,
            ReleaseOutcome::Lost => LOCK_LOST,
        }
    }
}

impl From<ProlongOutcome> for lock_result {
    fn from(outcome: ProlongOutcome) -> lock_result {
        match outcome {
            ProlongOutcome::Prolonged => LOCK_OK,
            ProlongOutcome::Expired => LOCK_EXPIRED,
            ProlongOutcome::Lost => LOCK_LOST,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_texts_are_distinct() {
        let mut codes: Vec<i32> = lock_result::ALL.iter().map(|&c| c as i32).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), lock_result::ALL.len());
        let mut texts: Vec<&str> = lock_result::ALL.iter().map(|c| c.text().to_str().unwrap()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), lock_result::ALL.len());
    }

    #[test]
    fn the_abi_numbers_do_not_move() {
        assert_eq!(LOCK_OK as i32, 0);
        assert_eq!(LOCK_LOST as i32, 2);
        assert_eq!(LOCK_TIMEOUT as i32, 4);
        assert_eq!(LOCK_ERR_NULL_ARGUMENT as i32, 100);
        assert_eq!(LOCK_ERR_SPEC_SYNTAX as i32, 200);
        assert_eq!(LOCK_ERR_SYSTEM as i32, 307);
        assert_eq!(LOCK_ERR_COMMIT as i32, 308);
        assert_eq!(LOCK_ERR_NOT_A_DIRECTORY as i32, 309);
        assert_eq!(LOCK_ERR_UNTRUSTED as i32, 310);
        assert_eq!(LOCK_ERR_PANIC as i32, 900);
    }
}

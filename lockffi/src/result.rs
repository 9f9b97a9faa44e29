//! The result codes of the C interface: one enum with fixed numbers, and
//! one table from which everything else about a code comes.
//!
//! The enum [`lock_result`] is written out, with its numbers and doc
//! comments, because that is what cbindgen reads to write the header: it
//! does not expand macros, so an enum made by one would be missing from
//! `lockffi.h` (see `boundary.rs`). Everything else about a code comes from
//! the one table below, `code_table!`, one row per code: its static text
//! (`lock_strerror`), the core error kinds and the outcomes that become it.
//! From that table the macro makes [`lock_result::ALL`], [`lock_result::text`]
//! and the conversions, each a `match` the compiler checks:
//! * `text` matches every row's code against the enum, so a code added to
//!   the enum without a row, or a row for no code, does not compile (and a
//!   row given twice is an unreachable pattern, denied); `ALL` is made from
//!   the same rows, so it holds every code once;
//! * `From<ErrorKind>` matches the rows' kinds, so a kind lockcore adds
//!   without a row does not compile, and a kind given twice is denied;
//! * the outcome conversions match the rows' outcomes in the same way.
//!
//! The rows, not the enum, are the place to add a code, after its line in
//! the enum. Tests check what the compiler cannot: numbers and texts are
//! distinct, and `ALL` is the header's enum, names and numbers
//! (`tests/header.rs`). A simpler scheme, the text taken from the doc
//! comment, would have changed the texts `lock_strerror` has always given.

use core::ffi::CStr;

use lockcore::{
    CommitOutcome, CorruptKind, Error, ErrorKind, ProlongOutcome, ReleaseOutcome, ServerProblem, SpecErrorKind,
};

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
    /// Acquire: the caller's cancel callback (`lock_set_cancel`) asked the
    /// wait to end; the place in line is given up and nothing is held.
    LOCK_CANCELLED = 5,

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
    /// The handle is in another call at this moment: another thread's, or
    /// the call whose callback (a warning, a cancel) makes this one.
    LOCK_ERR_HANDLE_IN_USE = 104,
    /// The lock cannot do this: its scheme lacks the ability (break a
    /// `flock` lock, renew one that never expires, name the file of a lock
    /// that keeps none), answered before any file is touched; or this host
    /// lacks what it needs (a `shm` or `toplock` lock on a file system
    /// shared with other hosts or served from user space, such as NFS or
    /// FUSE; a `shm` lock on overlayfs; a `toplock` queue also written by
    /// processes of another time namespace, whose times cannot be read here,
    /// or whose header names no kernel boot; `toplock` in a process that
    /// cannot read the boot id, without `/proc`).
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
    /// The target, or a path derived from it (or a path given to
    /// `lock_commit`), is longer than PATH_MAX; or the system found a name
    /// on the lock's path too long (`ENAMETOOLONG`).
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

    /// The server's host name does not resolve.
    LOCK_ERR_SERVER_UNKNOWN_HOST = 400,
    /// No connection to the server could be made (refused, unreachable, no
    /// socket at the path: `errno` holds why), or its host name was not
    /// looked up by the call's deadline.
    LOCK_ERR_SERVER_UNREACHABLE = 401,
    /// The server did not answer by the call's deadline (stopped,
    /// overloaded, cut off). The connection was dropped; a release or
    /// prolong that ends so did not happen as far as the caller can tell,
    /// and the handle still holds its lock.
    LOCK_ERR_SERVER_NO_ANSWER = 402,
    /// The server closed the connection before its answer was whole.
    LOCK_ERR_SERVER_DISCONNECTED = 403,
    /// The server refused the target's user and password, or wants a
    /// login the target does not give.
    LOCK_ERR_SERVER_AUTH = 404,
    /// The server cannot serve now: loading its data, running a long
    /// script, or a cluster without a quorum. Try again later.
    LOCK_ERR_SERVER_NOT_READY = 405,
    /// The server is a read-only replica.
    LOCK_ERR_SERVER_READ_ONLY = 406,
    /// The server refuses writes: out of memory, or unable to save.
    LOCK_ERR_SERVER_NO_WRITES = 407,
    /// The server refused the command otherwise (an ACL user without the
    /// permission, a database that does not exist, scripting disabled).
    LOCK_ERR_SERVER_REFUSED = 408,
    /// The lock's keys on the server hold values this library never writes
    /// there; they were left untouched.
    LOCK_ERR_SERVER_FOREIGN_KEYS = 409,
    /// The server's answer is not one the protocol or this library's
    /// scripts give.
    LOCK_ERR_SERVER_PROTOCOL = 410,
    /// Fewer of the server's replicas than the spec's `replicas` acknowledged
    /// the acquisition in time; the lock was given back.
    LOCK_ERR_SERVER_NOT_REPLICATED = 411,

    /// A bug in this library was caught before it could cross into C.
    LOCK_ERR_PANIC = 900,
}

use lock_result::*;

/// Makes `ALL`, `text` and the conversions from one row per code:
/// `CODE: text [, kind(<ErrorKind pattern>)] [, outcome(<release>, <prolong>, <commit>)];`
macro_rules! code_table {
    ($(
        $code:ident: $text:literal
        $(, kind($kind:pat))?
        $(, outcome($release:ident, $prolong:ident, $commit:ident))?
        ;
    )*) => {
        impl lock_result {
            /// Every code, in the order of the enum, for tests and for
            /// `lock_strerror`.
            pub const ALL: &'static [lock_result] = &[$($code),*];

            /// Static, NUL-terminated text for a code.
            #[deny(unreachable_patterns)]
            pub fn text(self) -> &'static CStr {
                match self {
                    $($code => $text,)*
                }
            }
        }

        /// The one place where the kinds of core errors become codes.
        impl From<ErrorKind> for lock_result {
            #[deny(unreachable_patterns)]
            fn from(kind: ErrorKind) -> lock_result {
                match kind {
                    $($($kind => $code,)?)*
                }
            }
        }

        impl From<ReleaseOutcome> for lock_result {
            #[deny(unreachable_patterns)]
            fn from(outcome: ReleaseOutcome) -> lock_result {
                match outcome {
                    $($(ReleaseOutcome::$release => $code,)?)*
                }
            }
        }

        impl From<ProlongOutcome> for lock_result {
            #[deny(unreachable_patterns)]
            fn from(outcome: ProlongOutcome) -> lock_result {
                match outcome {
                    $($(ProlongOutcome::$prolong => $code,)?)*
                }
            }
        }

        impl From<CommitOutcome> for lock_result {
            #[deny(unreachable_patterns)]
            fn from(outcome: CommitOutcome) -> lock_result {
                match outcome {
                    $($(CommitOutcome::$commit => $code,)?)*
                }
            }
        }
    };
}

// Codes without a kind or an outcome are made by lockffi itself (the
// argument checks, the handle's claim, the panic boundary).
code_table! {
    LOCK_OK: c"success", outcome(Released, Prolonged, Committed);
    LOCK_EXPIRED: c"the lock was held past its TTL, but nobody took it", outcome(Expired, Expired, Expired);
    LOCK_LOST: c"the lock was lost: someone else holds it now", outcome(Lost, Lost, Lost);
    LOCK_BUSY: c"the lock is held by someone else, cooling down, or its guard is held", kind(ErrorKind::Busy);
    LOCK_TIMEOUT: c"the wait budget ran out before the lock was free", kind(ErrorKind::Timeout);
    LOCK_CANCELLED: c"the wait was cancelled by its caller", kind(ErrorKind::Cancelled);
    LOCK_ERR_NULL_ARGUMENT: c"a required pointer argument is NULL";
    LOCK_ERR_NOT_HELD: c"this handle does not hold its lock", kind(ErrorKind::NotHeld);
    LOCK_ERR_ALREADY_HELD: c"this handle already holds its lock", kind(ErrorKind::AlreadyHeld);
    LOCK_ERR_FORKED: c"the lock was taken by the parent process before fork()", kind(ErrorKind::Forked);
    LOCK_ERR_HANDLE_IN_USE: c"the handle is in another call (another thread's, or the one whose callback this is)";
    LOCK_ERR_UNSUPPORTED: c"this strategy does not support the operation", kind(ErrorKind::Unsupported);
    LOCK_ERR_BUFFER_TOO_SMALL: c"the output buffer is too small";
    LOCK_ERR_INVALID_ARGUMENT: c"an argument is out of range", kind(ErrorKind::CommitOntoLock);
    LOCK_ERR_SPEC_SYNTAX: c"the lock spec is malformed; expected scheme:target?key=value&...",
        kind(ErrorKind::Spec(SpecErrorKind::Syntax));
    LOCK_ERR_SPEC_UNKNOWN_SCHEME: c"the lock spec names an unknown scheme",
        kind(ErrorKind::Spec(SpecErrorKind::UnknownScheme));
    LOCK_ERR_SPEC_UNKNOWN_KEY: c"the lock spec names an option its scheme does not have",
        kind(ErrorKind::Spec(SpecErrorKind::UnknownKey));
    LOCK_ERR_SPEC_BAD_VALUE: c"a lock spec option has a bad value", kind(ErrorKind::Spec(SpecErrorKind::BadValue));
    LOCK_ERR_SPEC_DUPLICATE_KEY: c"a lock spec option is given twice",
        kind(ErrorKind::Spec(SpecErrorKind::DuplicateKey));
    LOCK_ERR_PATH_TOO_LONG: c"a lock path, or a name made from it, is too long", kind(ErrorKind::Spec(SpecErrorKind::PathTooLong));
    LOCK_ERR_SPEC_BAD_URL: c"the lock spec's network target is malformed", kind(ErrorKind::Spec(SpecErrorKind::BadUrl));
    LOCK_ERR_NOT_FOUND: c"a directory on the lock's path does not exist", kind(ErrorKind::NotFound);
    LOCK_ERR_PERMISSION: c"permission denied on the lock's path", kind(ErrorKind::PermissionDenied);
    LOCK_ERR_SYMLINK: c"the lock's path is a symbolic link; refusing to follow it", kind(ErrorKind::Symlink);
    LOCK_ERR_NOT_A_LOCK: c"the lock's path holds something that is not a lock", kind(ErrorKind::NotALock);
    LOCK_ERR_CORRUPT_RECORD: c"the lock's owner record is corrupt", kind(ErrorKind::Corrupt(CorruptKind::Record));
    LOCK_ERR_RECORD_TOO_LONG: c"the lock's owner record is too long",
        kind(ErrorKind::Corrupt(CorruptKind::RecordTooLong));
    LOCK_ERR_CORRUPT_GUARD: c"the lock's guard file is corrupt", kind(ErrorKind::Corrupt(CorruptKind::GuardState));
    LOCK_ERR_SYSTEM: c"system error; see errno", kind(ErrorKind::Os);
    LOCK_ERR_COMMIT: c"the commit could not rename the temp file over the target; see errno",
        kind(ErrorKind::Commit);
    LOCK_ERR_NOT_A_DIRECTORY: c"a component of the lock's path is not a directory", kind(ErrorKind::NotADirectory);
    LOCK_ERR_UNTRUSTED: c"a file of the lock could have been written by a user its mode does not trust",
        kind(ErrorKind::Untrusted);
    LOCK_ERR_SERVER_UNKNOWN_HOST: c"the server's host name does not resolve",
        kind(ErrorKind::Server(ServerProblem::UnknownHost));
    LOCK_ERR_SERVER_UNREACHABLE: c"no connection to the server; see errno",
        kind(ErrorKind::Server(ServerProblem::Unreachable));
    LOCK_ERR_SERVER_NO_ANSWER: c"the server did not answer in time", kind(ErrorKind::Server(ServerProblem::NoAnswer));
    LOCK_ERR_SERVER_DISCONNECTED: c"the server closed the connection",
        kind(ErrorKind::Server(ServerProblem::Disconnected));
    LOCK_ERR_SERVER_AUTH: c"the server refused the login", kind(ErrorKind::Server(ServerProblem::AuthRefused));
    LOCK_ERR_SERVER_NOT_READY: c"the server cannot serve now (loading, busy)",
        kind(ErrorKind::Server(ServerProblem::NotReady));
    LOCK_ERR_SERVER_READ_ONLY: c"the server is a read-only replica", kind(ErrorKind::Server(ServerProblem::ReadOnly));
    LOCK_ERR_SERVER_NO_WRITES: c"the server refuses writes (out of memory, cannot save)",
        kind(ErrorKind::Server(ServerProblem::NoWrites));
    LOCK_ERR_SERVER_REFUSED: c"the server refused the command", kind(ErrorKind::Server(ServerProblem::Refused));
    LOCK_ERR_SERVER_FOREIGN_KEYS: c"the lock's keys on the server hold values of another program",
        kind(ErrorKind::Server(ServerProblem::ForeignKeys));
    LOCK_ERR_SERVER_PROTOCOL: c"the server's answer makes no sense to this library",
        kind(ErrorKind::Server(ServerProblem::Protocol));
    LOCK_ERR_SERVER_NOT_REPLICATED: c"fewer replicas than asked for acknowledged the acquisition",
        kind(ErrorKind::Server(ServerProblem::NotReplicated));
    LOCK_ERR_PANIC: c"internal error in the lock library (caught panic)";
}

impl From<Error> for lock_result {
    fn from(error: Error) -> lock_result {
        lock_result::from(error.kind())
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
        assert_eq!(LOCK_CANCELLED as i32, 5);
        assert_eq!(LOCK_ERR_NULL_ARGUMENT as i32, 100);
        assert_eq!(LOCK_ERR_SPEC_SYNTAX as i32, 200);
        assert_eq!(LOCK_ERR_SYSTEM as i32, 307);
        assert_eq!(LOCK_ERR_COMMIT as i32, 308);
        assert_eq!(LOCK_ERR_NOT_A_DIRECTORY as i32, 309);
        assert_eq!(LOCK_ERR_UNTRUSTED as i32, 310);
        assert_eq!(LOCK_ERR_PANIC as i32, 900);
    }
}

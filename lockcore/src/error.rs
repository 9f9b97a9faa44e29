//! The errors of lockcore: `Copy`, no allocation, and enough facts to say
//! what went wrong where.
//!
//! Outcomes that are not failures (a release that ran past its TTL, a lock
//! that someone else took over) are *not* errors: they are
//! [`ReleaseOutcome`](crate::ReleaseOutcome) and
//! [`ProlongOutcome`](crate::ProlongOutcome) values.
//!
//! An error about a file names the file by its [`FileRole`] (the lock, its
//! guard, a helper beside it, the directory that holds them) rather than by
//! path, so that it stays small; [`Lock::describe`](crate::Lock::describe)
//! puts the path back for a message. What to match on is
//! [`Error::kind`]: one flat list, the one the C interface turns into codes.

use core::fmt;

use crate::clock::WallTime;
use crate::owner::HostName;
use crate::sys::{self, CPath, Errno};

/// Why a lock spec was refused. The key it names is kept in [`SpecError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecErrorKind {
    /// The spec does not have the shape `scheme:target?key=value&...`.
    Syntax,
    /// The scheme is not one this library implements.
    UnknownScheme,
    /// The key is not an option of this scheme.
    UnknownKey,
    /// The key's value does not parse, is out of range, or would make
    /// exclusion impossible.
    BadValue,
    /// The key appears twice (or with an alias of itself).
    DuplicateKey,
    /// The target, or a path derived from it, is longer than `PATH_MAX`.
    PathTooLong,
    /// The target of a network lock is no
    /// `//[user[:password]@]host[:port][/db]/key` ([`crate::endpoint`]).
    BadUrl,
}

/// Longest key name an error keeps; longer names are cut (they are unknown anyway).
pub const KEY_TEXT_CAPACITY: usize = 32;

/// A refused lock spec: which key (empty for the spec as a whole) and why.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SpecError {
    /// What was wrong.
    pub kind: SpecErrorKind,
    key: [u8; KEY_TEXT_CAPACITY],
    key_len: u8,
    /// A short reason, such as "expected a duration like 250ms, 30s, 10m or 1h".
    pub reason: &'static str,
}

impl SpecError {
    /// The error of `kind` about `key` (empty: the spec as a whole), whose
    /// first [`KEY_TEXT_CAPACITY`] bytes are kept.
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
        // The scheme is not a key, but it is shown the same way.
        let part = if self.kind == SpecErrorKind::UnknownScheme { "scheme" } else { "key" };
        write!(f, "lock spec {part} '")?;
        for &b in self.key() {
            // Keys come from the caller; show them without letting control
            // bytes into a log line.
            if b.is_ascii_graphic() {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        write!(f, "': {}", self.reason)?;
        if self.kind == SpecErrorKind::UnknownScheme {
            // The list comes from the registry, so it is this build's.
            for (i, scheme) in crate::registry::Scheme::ALL.iter().enumerate() {
                write!(f, "{}{}", if i == 0 { " " } else { ", " }, scheme.name())?;
            }
        }
        Ok(())
    }
}

/// Which part of a lock of this library did not hold what it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorruptKind {
    /// The owner record (or lease, or queue) carries this library's marker
    /// but does not parse.
    Record,
    /// The record carries this library's marker but is longer than any
    /// record this library writes.
    RecordTooLong,
    /// The guard file (fence and cooldown) carries its marker but does not
    /// parse, or holds the largest fence, so that no greater one is left.
    GuardState,
}

/// Which of a lock's files an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileRole {
    /// The path that is the lock: the lock file, the lock directory, the
    /// symlink, the flock'd file, the lease or the queue.
    Lock,
    /// The guard beside the lock (`<lock>.guard`), which orders every change
    /// to it and keeps its fence and cooldown.
    Guard,
    /// A file the library makes under a name of its own beside the lock
    /// while it builds or retires one.
    Helper,
    /// The directory that holds the lock.
    Directory,
    /// A directory or symbolic link on the way to the lock's directory (its
    /// error names it as an entry).
    Way,
}

impl FileRole {
    fn noun(self) -> &'static str {
        match self {
            FileRole::Lock => "the lock",
            FileRole::Guard => "the lock's guard",
            FileRole::Helper => "a helper file beside the lock",
            FileRole::Directory => "the lock's directory",
            FileRole::Way => "this name on the way to the lock's directory",
        }
    }
}

/// What was wrong with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A directory on its path does not exist.
    NotFound,
    /// A component of its path is a file, not a directory.
    NotADirectory,
    /// The file system refused access.
    PermissionDenied,
    /// It is a symbolic link where the lock needs a file or directory: refused, never followed.
    Symlink,
    /// It holds something that this scheme never makes there and that is no
    /// lock a peer makes either (a data file, a directory with files in it,
    /// a fifo): it is left untouched.
    NotALock,
    /// It carries this library's format but does not parse.
    Corrupt(CorruptKind),
    /// Someone the spec's `mode` does not trust could have written it.
    Untrusted(Untrusted),
    /// Any other system error.
    Io,
}

/// Why a file was not trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// Its permissions let a class of users write it (or, for a file that is
    /// locked, even read it) that the spec's `mode` does not let take the lock.
    WritableByOthers,
    /// The lock is shared with a group, and its group may write it (or, for
    /// a file that is locked, read it), but that group (this gid) is none of
    /// the caller's: the lock is another group's, or the caller forgot to
    /// join it.
    OtherGroup(u32),
    /// It belongs to another user, and the spec's `mode` keeps the lock to
    /// its owner.
    OwnedByOther,
}

/// An operation on one of the lock's files failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileError {
    /// Which of the lock's files.
    pub file: FileRole,
    /// What was wrong with it.
    pub problem: Problem,
    /// The system call's errno, when one failed.
    pub errno: Option<Errno>,
    /// The file's owner and permission bits, where they explain the error
    /// (a permission error, an untrusted file).
    pub owner_uid: Option<u32>,
    /// Its permission bits (setuid, setgid and sticky included), where they
    /// explain the error; see `owner_uid`.
    pub mode: Option<u32>,
    /// The entry of the lock, a directory, that the error is about (a
    /// `mkdir` lock's `owner`, or whatever else is in it), when the lock
    /// itself is not.
    pub entry: Option<EntryName>,
}

/// The name of an entry inside a lock directory, for a message: its first
/// [`ENTRY_NAME_CAPACITY`] bytes (a name may be 255), kept in the error
/// itself, which names every other file by its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryName {
    bytes: [u8; ENTRY_NAME_CAPACITY],
    len: u8,
    cut: bool,
}

/// The longest part of an entry's name an [`EntryName`] keeps.
pub const ENTRY_NAME_CAPACITY: usize = 64;

impl EntryName {
    /// `name`, cut after [`ENTRY_NAME_CAPACITY`] bytes.
    pub fn new(name: &[u8]) -> EntryName {
        let len = name.len().min(ENTRY_NAME_CAPACITY);
        let mut bytes = [0u8; ENTRY_NAME_CAPACITY];
        bytes[..len].copy_from_slice(&name[..len]);
        EntryName { bytes, len: len as u8, cut: len < name.len() }
    }

    /// The bytes kept.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Whether the name is longer than what is kept.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

/// What the kernel's `ENAMETOOLONG` means for a lock: a component longer
/// than its file system's NAME_MAX (255 bytes on most), the lock's own name
/// or one made from it (its guard, a helper beside it, up to 34 bytes more).
const NAME_TOO_LONG: &str =
    "a name made from the lock's (the lock, its guard or a helper beside it) is longer than the file system allows";

impl FileError {
    /// The error of `problem` with `file`, with no errno, owner or mode.
    pub fn new(file: FileRole, problem: Problem) -> FileError {
        FileError { file, problem, errno: None, owner_uid: None, mode: None, entry: None }
    }

    /// The error for `errno` from a system call on `path`. For a permission
    /// error, the owner and mode of the file, or of the directory that
    /// refused to let it be made, are looked up to be named.
    pub fn from_errno(file: FileRole, path: &CPath, errno: Errno) -> Error {
        let problem = match errno {
            Errno::ENOENT => Problem::NotFound,
            Errno::ENOTDIR => Problem::NotADirectory,
            Errno::EACCES | Errno::EPERM | Errno::EROFS => Problem::PermissionDenied,
            Errno::ELOOP => Problem::Symlink,
            // A directory where a file belongs (open for writing, unlink,
            // rename over it), or a socket where a file belongs (open).
            Errno::EISDIR | Errno::ENXIO => Problem::NotALock,
            Errno::ENAMETOOLONG => return Error::Spec(SpecError::new(SpecErrorKind::PathTooLong, b"", NAME_TOO_LONG)),
            _ => Problem::Io,
        };
        let mut error = FileError { errno: Some(errno), ..FileError::new(file, problem) };
        if problem == Problem::PermissionDenied {
            let parent = CPath::from_parts(&[path.parent()]);
            let (role, stat) = match sys::lstat(path) {
                Ok(stat) => (file, Some(stat)),
                Err(_) => (FileRole::Directory, parent.ok().and_then(|dir| sys::lstat(&dir).ok())),
            };
            if let Some(stat) = stat {
                error.file = role;
                error.owner_uid = Some(stat.uid);
                error.mode = Some(stat.permissions());
            }
        }
        Error::File(error)
    }

    /// The error for a file that is there but not to be trusted.
    pub fn untrusted(file: FileRole, why: Untrusted, stat: &sys::FileStat) -> Error {
        Error::File(FileError {
            owner_uid: Some(stat.uid),
            mode: Some(stat.permissions()),
            ..FileError::new(file, Problem::Untrusted(why))
        })
    }

    /// An I/O error (a read or write that failed) on a file already open.
    pub fn io(file: FileRole, errno: Errno) -> Error {
        Error::File(FileError { errno: Some(errno), ..FileError::new(file, Problem::Io) })
    }
}

/// Who holds a lock, in the few words an error message needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderSummary {
    /// 0 when no pid is known (a liblockfile lock without one, an empty directory).
    pub pid: i32,
    /// The holder's host; `None` when its lock names none (a peer's stamp
    /// without `:HOST`, which means this host).
    pub host: Option<HostName>,
    /// When it took (or last renewed) the lock, as far as is known.
    pub since: Option<WallTime>,
    /// When others may break it; `None` for never or unknown.
    pub expires: Option<WallTime>,
}

/// Why a lock could not be taken just now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contention {
    /// Someone holds it.
    Held(HolderSummary),
    /// It was released with a cooldown that is not over.
    CoolingDown {
        /// When the cooldown ends, on the wall clock as seen now.
        until: WallTime,
    },
    /// Others are queued before this caller (`toplock`).
    Queued {
        /// How many pending requests come before this caller's (the
        /// holder's among them, if there is one).
        ahead: u32,
        /// Who holds the lock now; `None` while its head has no valid grant.
        holder: Option<HolderSummary>,
    },
    /// The queue has no room for another request (`toplock`).
    QueueFull,
    /// Another process kept the file that orders every change to the lock
    /// (its guard; the lease or queue file itself) locked for as long as
    /// the call could wait: a process stopped inside one of its few system
    /// calls, or another user who can open that file and holds it locked.
    GuardHeld,
    /// Another process holds a lease (`fcntl(F_SETLEASE)`) on one of the
    /// lock's files, which only the file's owner can take: an open for this
    /// call would have to wait for the lease to go. The open asks the
    /// kernel to break it (the holder is told, and loses it after the
    /// system's lease-break time), and the call tries again, by its
    /// deadline, as for a guard held.
    Leased,
    /// Another process made the lock between this one's look and its create
    /// (only a program that does not take the guard can).
    Raced,
}

/// Every way an operation of lockcore can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The lock spec was refused.
    Spec(SpecError),
    /// The lock is not to be had now; `try_acquire`, and release, prolong,
    /// commit, inspect and break when its guard stayed held ([`Contention::GuardHeld`]).
    Busy(Contention),
    /// The wait budget ran out; what stood in the way at the end.
    Timeout(Contention),
    /// The caller cancelled the wait (its wake source's `arm` answered
    /// this); the place in line is given up.
    Cancelled,
    /// The operation needs a held lock and this handle holds none.
    NotHeld,
    /// `acquire` on a handle that already holds its lock.
    AlreadyHeld,
    /// The lock cannot do this: its scheme lacks the ability, or this host
    /// lacks what it needs.
    Unsupported(Unsupported),
    /// The handle's lock was taken by the parent process; a child of `fork()`
    /// may neither release nor prolong it.
    Forked,
    /// Something about one of the lock's files.
    File(FileError),
    /// The commit step could not rename the caller's temp file over its
    /// target (the temp file is missing, the target is a directory, the two
    /// are on different file systems, ...); the target is untouched.
    Commit(Errno),
    /// The commit step was given one of the lock's own files (the lock or
    /// its guard) as its temp file or its target; nothing was renamed.
    CommitOntoLock,
    /// A system error that concerns no file of the lock (no randomness, no clock).
    Os(Errno),
    /// The lock's server could not be reached or did not do what was asked.
    Server(ServerError),
}

/// What went wrong with the server of a network lock. Each is its own
/// [`ErrorKind`]: a caller retries some (`NotReady`, `NoAnswer`) and
/// reports others (`AuthRefused`) at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerProblem {
    /// Its host name does not resolve.
    UnknownHost,
    /// No connection could be made: refused, unreachable, no socket there.
    Unreachable,
    /// It did not answer by the call's deadline (stopped, overloaded, or
    /// cut off); the connection was dropped.
    NoAnswer,
    /// It closed the connection before its answer was whole.
    Disconnected,
    /// It refused the user and password, or wants a login the target does
    /// not give (`WRONGPASS`, `NOAUTH`).
    AuthRefused,
    /// It cannot serve now: loading its data, running a long script, or a
    /// cluster without a quorum (`LOADING`, `BUSY`, `MASTERDOWN`, `TRYAGAIN`,
    /// `CLUSTERDOWN`).
    NotReady,
    /// It is a read-only replica (`READONLY`).
    ReadOnly,
    /// It refuses writes: out of memory, or unable to save (`OOM`, `MISCONF`).
    NoWrites,
    /// It refused the command otherwise: a user without the permission, a
    /// database that does not exist, scripting turned off.
    Refused,
    /// Fewer replicas than the spec's `replicas` acknowledged the
    /// acquisition in time (`WAIT`); it was given back.
    NotReplicated,
    /// The lock's keys hold values this library never writes there (another
    /// program's key of the same name); they were left untouched.
    ForeignKeys,
    /// Its answer is not one the protocol, or this library's scripts, give.
    Protocol,
}

impl ServerProblem {
    /// Whether the trouble may pass by itself in a moment (a server
    /// restarting, loading its data, failing over, out of memory for a
    /// while): a wait goes on through it. The others (a refused login, a
    /// foreign key, an unknown host) stay until someone changes something.
    pub fn may_pass(self) -> bool {
        matches!(
            self,
            ServerProblem::Unreachable
                | ServerProblem::NoAnswer
                | ServerProblem::Disconnected
                | ServerProblem::NotReady
                | ServerProblem::ReadOnly
                | ServerProblem::NoWrites
                | ServerProblem::NotReplicated
        )
    }
}

/// Longest part of a server's own error text an error keeps.
pub const SERVER_TEXT_CAPACITY: usize = 96;

/// A failure of the server of a network lock: what, the errno of a system
/// call that failed, and the first words of the server's own answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ServerError {
    /// What went wrong.
    pub problem: ServerProblem,
    /// The errno of the socket call that failed, if one did.
    pub errno: Option<Errno>,
    said: [u8; SERVER_TEXT_CAPACITY],
    said_len: u8,
}

impl ServerError {
    /// The error of `problem`, with the errno that caused it.
    pub fn new(problem: ServerProblem, errno: Option<Errno>) -> ServerError {
        ServerError { problem, errno, said: [0; SERVER_TEXT_CAPACITY], said_len: 0 }
    }

    /// The error of `problem` that the server put in `said` (an error reply),
    /// whose first [`SERVER_TEXT_CAPACITY`] bytes are kept.
    pub fn said(problem: ServerProblem, said: &[u8]) -> ServerError {
        let len = said.len().min(SERVER_TEXT_CAPACITY);
        let mut error = ServerError::new(problem, None);
        error.said[..len].copy_from_slice(&said[..len]);
        error.said_len = len as u8;
        error
    }

    /// What the server said, if the error is its answer.
    pub fn server_text(&self) -> &[u8] {
        &self.said[..self.said_len as usize]
    }
}

impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerError({:?}, {self})", self.problem)
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.problem {
            ServerProblem::UnknownHost => "the server's host name does not resolve",
            ServerProblem::Unreachable => "no connection to the server",
            ServerProblem::NoAnswer => "the server did not answer in time; the connection was dropped",
            ServerProblem::Disconnected => "the server closed the connection",
            ServerProblem::AuthRefused => "the server refused the login",
            ServerProblem::NotReady => "the server cannot serve now",
            ServerProblem::ReadOnly => "the server is a read-only replica",
            ServerProblem::NoWrites => "the server refuses writes",
            ServerProblem::Refused => "the server refused the command",
            ServerProblem::NotReplicated => {
                "fewer replicas than asked for acknowledged the acquisition in time; it was given back"
            }
            ServerProblem::ForeignKeys => {
                "the lock's keys hold values this library never writes; they were left untouched"
            }
            ServerProblem::Protocol => "the server's answer makes no sense to this library",
        })?;
        if let Some(errno) = self.errno {
            write_errno(f, errno)?;
        }
        if self.said_len > 0 {
            f.write_str(": \"")?;
            for &b in self.server_text() {
                if b.is_ascii_graphic() || b == b' ' {
                    write!(f, "{}", b as char)?;
                } else {
                    write!(f, "\\x{b:02x}")?;
                }
            }
            f.write_str("\"")?;
        }
        Ok(())
    }
}

/// Why a lock cannot do what it was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsupported {
    /// The scheme's registry entry does not list the ability: known when the
    /// lock is opened ([`Scheme::supports`](crate::Scheme::supports)), and
    /// answered before any file is touched.
    Ability {
        /// The lock's scheme.
        scheme: crate::registry::Scheme,
        /// What it cannot do.
        ability: crate::registry::Ability,
    },
    /// The scheme can, but not here: the words say what is missing.
    Here(&'static str),
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::Ability { scheme, ability } => write!(f, "a {} lock cannot {}", scheme.name(), ability.what()),
            Unsupported::Here(what) => write!(f, "this strategy does not support {what}"),
        }
    }
}

/// What an [`Error`] is, without its details: the list to match on, and
/// the one the C interface gives a code each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// [`Error::Spec`], by what was wrong with the spec.
    Spec(SpecErrorKind),
    /// [`Error::Busy`].
    Busy,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::Cancelled`].
    Cancelled,
    /// [`Error::NotHeld`].
    NotHeld,
    /// [`Error::AlreadyHeld`].
    AlreadyHeld,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::Forked`].
    Forked,
    /// [`Problem::NotFound`] with one of the lock's files.
    NotFound,
    /// [`Problem::NotADirectory`] with one of the lock's files.
    NotADirectory,
    /// [`Problem::PermissionDenied`] on one of the lock's files.
    PermissionDenied,
    /// [`Problem::Symlink`]: one of the lock's files is a symbolic link.
    Symlink,
    /// [`Problem::NotALock`]: one of the lock's paths holds something else.
    NotALock,
    /// [`Problem::Corrupt`]: a file of this library's format that does not parse.
    Corrupt(CorruptKind),
    /// [`Problem::Untrusted`], whichever the reason.
    Untrusted,
    /// [`Error::Commit`].
    Commit,
    /// [`Error::CommitOntoLock`].
    CommitOntoLock,
    /// [`Error::Os`], and [`Problem::Io`] with one of the lock's files.
    Os,
    /// [`Error::Server`], by what went wrong.
    Server(ServerProblem),
}

impl Error {
    /// What the error is, for matching on: one flat list, the one the C
    /// interface turns into its result codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Spec(e) => ErrorKind::Spec(e.kind),
            Error::Busy(_) => ErrorKind::Busy,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::NotHeld => ErrorKind::NotHeld,
            Error::AlreadyHeld => ErrorKind::AlreadyHeld,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Forked => ErrorKind::Forked,
            Error::File(e) => match e.problem {
                Problem::NotFound => ErrorKind::NotFound,
                Problem::NotADirectory => ErrorKind::NotADirectory,
                Problem::PermissionDenied => ErrorKind::PermissionDenied,
                Problem::Symlink => ErrorKind::Symlink,
                Problem::NotALock => ErrorKind::NotALock,
                Problem::Corrupt(kind) => ErrorKind::Corrupt(kind),
                Problem::Untrusted(_) => ErrorKind::Untrusted,
                Problem::Io => ErrorKind::Os,
            },
            Error::Commit(_) => ErrorKind::Commit,
            Error::CommitOntoLock => ErrorKind::CommitOntoLock,
            Error::Os(_) => ErrorKind::Os,
            Error::Server(e) => ErrorKind::Server(e.problem),
        }
    }

    /// The file the error is about, if it is about one.
    pub fn file(&self) -> Option<FileRole> {
        match self {
            Error::File(e) => Some(e.file),
            _ => None,
        }
    }

    /// The entry of the lock directory the error is about, if it is about one.
    pub fn entry(&self) -> Option<EntryName> {
        match self {
            Error::File(e) => e.entry,
            _ => None,
        }
    }

    /// The errno behind the error, if a system call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::File(e) => e.errno,
            Error::Commit(errno) | Error::Os(errno) => Some(*errno),
            Error::Server(e) => e.errno,
            _ => None,
        }
    }

    /// A shorthand for the errors about one of the lock's files that carry
    /// no errno (a file that is not a lock, a corrupt record).
    pub fn file_problem(file: FileRole, problem: Problem) -> Error {
        Error::File(FileError::new(file, problem))
    }

    /// A corrupt record or guard of this library's format.
    pub fn corrupt(file: FileRole, kind: CorruptKind) -> Error {
        Error::file_problem(file, Problem::Corrupt(kind))
    }

    /// Something at one of the lock's paths that is not a lock of this scheme.
    pub fn not_a_lock(file: FileRole) -> Error {
        Error::file_problem(file, Problem::NotALock)
    }

    /// A lock directory that is no lock of this scheme because of its
    /// entry `entry`, which the message names.
    pub fn not_a_lock_for_entry(entry: EntryName) -> Error {
        Error::File(FileError { entry: Some(entry), ..FileError::new(FileRole::Lock, Problem::NotALock) })
    }
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Error {
        Error::Spec(e)
    }
}

impl fmt::Display for HolderSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            0 => f.write_str("held by a process that named no pid")?,
            pid => write!(f, "held by pid {pid}")?,
        }
        if let Some(host) = &self.host {
            write!(f, " on {host:?}")?;
        }
        if let Some(since) = self.since {
            write!(f, " since {since}")?;
        }
        match self.expires {
            Some(at) => write!(f, ", expiring {at}"),
            None => f.write_str(", with no expiry"),
        }
    }
}

impl fmt::Display for Contention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contention::Held(holder) => write!(f, "{holder}"),
            Contention::CoolingDown { until } => write!(f, "cooling down until {until}"),
            Contention::Queued { ahead, holder } => {
                write!(f, "{ahead} request(s) queued ahead")?;
                match holder {
                    Some(holder) => write!(f, ", {holder}"),
                    None => Ok(()),
                }
            }
            Contention::QueueFull => f.write_str("the queue is full"),
            Contention::GuardHeld => f.write_str(
                "another process kept the lock's guard locked for as long as this call could wait \
                 (stopped inside a guard section, or another user holding the guard)",
            ),
            Contention::Leased => f.write_str(
                "another process holds a lease on one of the lock's files (fcntl F_SETLEASE, which only \
                 the file's owner can take); the kernel has asked it to give the lease up",
            ),
            Contention::Raced => f.write_str("a program that takes no guard made the lock at the same moment"),
        }
    }
}

impl FileError {
    /// The error's text, naming the file's owner by `owner_name` (its user
    /// name, which a caller with a user database can look up) beside its uid.
    pub fn text<'a>(&'a self, owner_name: Option<&'a str>) -> FileErrorText<'a> {
        FileErrorText { error: self, owner_name }
    }
}

/// A [`FileError`] as text: what went wrong with which of the lock's files,
/// the system's word for the errno, and the file's owner and mode.
#[derive(Clone, Copy, Debug)]
pub struct FileErrorText<'a> {
    error: &'a FileError,
    owner_name: Option<&'a str>,
}

impl fmt::Display for FileErrorText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.error;
        let what = e.file.noun();
        match e.problem {
            Problem::NotFound => write!(f, "a directory on the path of {what} does not exist")?,
            Problem::NotADirectory => write!(f, "a component of the path of {what} is not a directory")?,
            Problem::PermissionDenied => write!(f, "permission denied on {what}")?,
            Problem::Symlink => write!(f, "{what} is a symbolic link; refusing to follow it")?,
            Problem::NotALock if e.entry.is_some() => write!(
                f,
                "{what} holds this entry, which is none of this scheme's, so it is no lock; \
                 both were left untouched"
            )?,
            Problem::NotALock => {
                write!(f, "{what} holds something that is not a lock of this scheme; it was left untouched")?
            }
            Problem::Corrupt(CorruptKind::Record) => write!(f, "the record of {what} is corrupt")?,
            Problem::Corrupt(CorruptKind::RecordTooLong) => write!(f, "the record of {what} is too long")?,
            Problem::Corrupt(CorruptKind::GuardState) => write!(f, "{what} is corrupt")?,
            Problem::Untrusted(Untrusted::WritableByOthers) => {
                write!(f, "{what} is open to users the lock's mode does not trust; refusing to use it")?
            }
            Problem::Untrusted(Untrusted::OtherGroup(gid)) => write!(
                f,
                "{what} is open to its group (gid {gid}), which this process is not in (every user of a lock \
                 shared with a group must be in that group); refusing to use it"
            )?,
            Problem::Untrusted(Untrusted::OwnedByOther) => {
                write!(f, "{what} belongs to another user, and the lock's mode keeps it private; refusing to use it")?
            }
            Problem::Io => write!(f, "an operation on {what} failed")?,
        }
        if let Some(errno) = e.errno {
            write_errno(f, errno)?;
        }
        if let (Some(uid), Some(mode)) = (e.owner_uid, e.mode) {
            match self.owner_name {
                Some(name) => write!(f, " [owner {name} (uid {uid}), mode {mode:04o}]")?,
                None => write!(f, " [owner uid {uid}, mode {mode:04o}]")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.text(None))
    }
}

fn write_errno(f: &mut fmt::Formatter<'_>, errno: Errno) -> fmt::Result {
    let mut buf = [0u8; 128];
    match sys::strerror(errno, &mut buf) {
        Some(text) => write!(f, " ({text}, errno {})", errno.raw()),
        None => write!(f, " (errno {})", errno.raw()),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spec(e) => write!(f, "{e}"),
            Error::Busy(why) => write!(f, "the lock is busy: {why}"),
            Error::Timeout(why) => write!(f, "the wait budget ran out: {why}"),
            Error::Cancelled => f.write_str("the wait was cancelled by its caller"),
            Error::NotHeld => f.write_str("this handle does not hold its lock"),
            Error::AlreadyHeld => f.write_str("this handle already holds its lock"),
            Error::Unsupported(why) => write!(f, "{why}"),
            Error::Forked => f.write_str("the lock belongs to the parent process of this fork"),
            Error::File(e) => write!(f, "{e}"),
            Error::Commit(errno) => {
                f.write_str("the commit could not rename the temp file over the target")?;
                write_errno(f, *errno)?;
                f.write_str("; the target is untouched")
            }
            Error::CommitOntoLock => f.write_str("the commit's temp file or target is one of the lock's own files"),
            Error::Os(errno) => {
                f.write_str("system error")?;
                write_errno(f, *errno)
            }
            Error::Server(e) => write!(f, "{e}"),
        }
    }
}

// The inner errors are part of each Display text, so none is also given as
// a `source`: an error chain would print it twice.
impl core::error::Error for Error {}
impl core::error::Error for SpecError {}
impl core::error::Error for FileError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an application does with the library's errors: `?` into its
    /// own error type, and the same text as `Display` when printed.
    #[test]
    fn errors_go_into_an_applications_boxed_error_with_question_mark() {
        fn open(spec: &str) -> Result<crate::Lock, std::boxed::Box<dyn std::error::Error>> {
            Ok(crate::Lock::open(spec)?)
        }
        let err = open("nosuchscheme:/tmp/x").expect_err("an unknown scheme");
        let Err(direct) = crate::Lock::open("nosuchscheme:/tmp/x") else { panic!("an unknown scheme") };
        use std::string::ToString;
        assert_eq!(err.to_string(), direct.to_string());
        assert!(err.downcast_ref::<Error>().is_some(), "the boxed error is lockcore's: {err:?}");
    }

    #[test]
    fn a_permission_error_names_the_owner_and_mode_of_what_refused() {
        let dir = std::env::temp_dir().join(std::format!("lockcore-error-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = CPath::from_parts(&[dir.join("absent").to_str().unwrap().as_bytes()]).unwrap();
        let Error::File(e) = FileError::from_errno(FileRole::Guard, &missing, Errno::EACCES) else { panic!() };
        // The file is not there: the directory refused to let it be made.
        assert_eq!((e.file, e.problem), (FileRole::Directory, Problem::PermissionDenied));
        assert_eq!(e.owner_uid, Some(sys::geteuid()));
        assert_eq!(
            e.mode.map(|m| m & 0o777),
            Some(
                std::fs::metadata(&dir)
                    .map(|m| {
                        use std::os::unix::fs::PermissionsExt;
                        m.permissions().mode() & 0o777
                    })
                    .unwrap()
            )
        );
        let Error::File(e) = FileError::from_errno(FileRole::Lock, &missing, Errno::ENOTDIR) else { panic!() };
        assert_eq!(e.problem, Problem::NotADirectory, "ENOTDIR is not a missing directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

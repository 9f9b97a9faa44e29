//! Exit statuses, and the failures that carry one with their message.
//!
//! Where `flock(1)` has a status for the same case, it is the same one: 1
//! (or `-E`) when the lock cannot be had, `<sysexits.h>` values for
//! everything else, and a command's own status (128 + N when it died of
//! signal N). The table is in `lockctl --help` and the man page.

use std::borrow::Cow;
use std::ffi::{CStr, OsStr};
use std::fmt::Display;

use lockcore::{Contention, Error, ErrorKind, Lock, ServerProblem};

/// Done; for `status`, the lock is available; for `wait`, it became so.
pub const OK: u8 = 0;
/// The lock cannot be had (held, cooling down, queued for): `run -n`,
/// `run -w` and `wait -w` unless `-E` says otherwise, and `status`.
pub const CONFLICT: u8 = 1;
/// The command line is wrong (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// The lock spec was refused, or a lock path holds something that is no
/// lock of its scheme, or a corrupt one (`EX_DATAERR`).
pub const DATA: u8 = 65;
/// A directory on the lock's path is missing or is no directory (`EX_NOINPUT`).
pub const NO_INPUT: u8 = 66;
/// The lock's server has a host name that does not resolve (`EX_NOHOST`).
pub const NO_HOST: u8 = 68;
/// The command could not be executed, as `flock(1)` says it; or the
/// scheme cannot do what was asked, such as breaking a `flock` lock
/// (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// A state this program should never reach (`EX_SOFTWARE`).
pub const SOFTWARE: u8 = 70;
/// The system refused a resource: a process, a thread, randomness (`EX_OSERR`).
pub const OS: u8 = 71;
/// A lock file could not be created: read-only file system, no space (`EX_CANTCREAT`).
pub const CANT_CREATE: u8 = 73;
/// An input/output error on one of the lock's files (`EX_IOERR`).
pub const IO: u8 = 74;
/// The lock's server answered what makes no sense to this library
/// (`EX_PROTOCOL`).
pub const PROTOCOL: u8 = 76;
/// The run was not protected to its end, or the lock could not be read
/// now: the lock was lost while the command ran (someone else holds it),
/// or another process kept its guard locked for as long as the call could
/// wait. Worth trying again (`EX_TEMPFAIL`).
pub const TEMP_FAIL: u8 = 75;
/// Permission denied on a lock file, or a file the lock's `mode` does not
/// trust (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// Added to a signal's number: a command that died of that signal, or
/// lockctl stopped by it while waiting, as shells report it.
pub const SIGNALLED: u8 = 128;

/// Why lockctl stops with a status other than the command's: the status,
/// and what to print on stderr (nothing when the message is empty).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// A usage error: the message is followed by a pointer to `--help`.
    pub usage: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into(), usage: false }
    }

    /// A command line that does not parse.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: USAGE, message: message.into(), usage: true }
    }

    /// An exit with `code` and nothing to say (a `-q` conflict).
    pub fn silent(code: u8) -> Failure {
        Failure { code, message: String::new(), usage: false }
    }

    /// A failed `operation` on the lock `spec` names: the spec as given,
    /// then the library's account, which names the file (when the lock is
    /// open), the cause and the file's owner and mode.
    pub fn lock(operation: &str, spec: &OsStr, lock: Option<&Lock>, error: &Error) -> Failure {
        Failure::new(code_of(error), lock_message(operation, spec, lock, error))
    }
}

/// The spec as lockctl shows it: as given, but with the password of a
/// network target (`redis://user:PASSWORD@host/...`) shown as `***`, so
/// that no message, report or terminal line carries it.
pub fn shown_spec(spec: &OsStr) -> String {
    let text = spec.to_string_lossy().into_owned();
    let Some((scheme, target)) = text.split_once(':') else { return text };
    let is_url = lockcore::Scheme::from_name(scheme.as_bytes())
        .is_some_and(|scheme| scheme.target_kind() == lockcore::TargetKind::Url);
    let Some(rest) = target.strip_prefix("//").filter(|_| is_url) else { return text };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let Some((user_info, _)) = authority.rsplit_once('@') else { return text };
    let Some((user, _password)) = user_info.split_once(':') else { return text };
    format!("{scheme}://{user}:***{}", &rest[user_info.len()..])
}

/// The message for a failed `operation` on the lock `spec` names.
pub fn lock_message(operation: &str, spec: &OsStr, lock: Option<&Lock>, error: &Error) -> String {
    let spec = shown_spec(spec);
    match lock {
        Some(lock) => {
            let owner = match error {
                Error::File(file) => file.owner_uid.and_then(user_name),
                _ => None,
            };
            let described = lock.describe(error).with_owner_name(owner.as_deref());
            format!("cannot {operation} '{spec}': {described}")
        }
        None => format!("cannot {operation} '{spec}': {error}"),
    }
}

/// The exit status for an error of the library.
pub fn code_of(error: &Error) -> u8 {
    let errno = error.errno().map(|errno| errno.raw());
    match error.kind() {
        ErrorKind::Spec(_) | ErrorKind::NotALock | ErrorKind::Corrupt(_) | ErrorKind::Symlink => DATA,
        // Busy and Timeout reach here only from calls that do not acquire
        // (inspect, break, release): their guard stayed held.
        ErrorKind::Busy | ErrorKind::Timeout => match error {
            Error::Busy(Contention::GuardHeld | Contention::Leased)
            | Error::Timeout(Contention::GuardHeld | Contention::Leased) => TEMP_FAIL,
            _ => CONFLICT,
        },
        // A wait ended by a signal; lockctl reports the signal itself.
        ErrorKind::Cancelled => TEMP_FAIL,
        ErrorKind::Unsupported => UNAVAILABLE,
        ErrorKind::NotFound | ErrorKind::NotADirectory => NO_INPUT,
        ErrorKind::PermissionDenied if errno == Some(libc::EROFS) => CANT_CREATE,
        ErrorKind::PermissionDenied | ErrorKind::Untrusted => NO_PERMISSION,
        ErrorKind::Os if errno == Some(libc::ENOSPC) || errno == Some(libc::EDQUOT) => CANT_CREATE,
        ErrorKind::Os if error.file().is_some() => IO,
        ErrorKind::Os => OS,
        ErrorKind::Server(problem) => match problem {
            ServerProblem::UnknownHost => NO_HOST,
            ServerProblem::Unreachable | ServerProblem::ReadOnly | ServerProblem::NoWrites | ServerProblem::Refused => {
                UNAVAILABLE
            }
            ServerProblem::NoAnswer
            | ServerProblem::Disconnected
            | ServerProblem::NotReady
            | ServerProblem::NotReplicated => TEMP_FAIL,
            ServerProblem::AuthRefused => NO_PERMISSION,
            ServerProblem::ForeignKeys => DATA,
            ServerProblem::Protocol => PROTOCOL,
        },
        ErrorKind::NotHeld
        | ErrorKind::AlreadyHeld
        | ErrorKind::Forked
        | ErrorKind::Commit
        | ErrorKind::CommitOntoLock => SOFTWARE,
    }
}

/// The status a shell gives a command that ended with `status`.
pub fn of_command(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => SIGNALLED.wrapping_add(signal as u8),
        // Neither exited nor killed: only a stopped or continued child,
        // which wait() does not report without WUNTRACED.
        (None, None) => OS,
    }
}

/// The user name of `uid`, from the user database.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value of this plain C struct;
    // getpwuid_r fills it in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and the buffer's length
    // is the one given.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string in `buf`,
    // which is still alive.
    let name = unsafe { CStr::from_ptr(entry.pw_name) };
    name.to_str().ok().map(str::to_owned)
}

/// Writes `text` on stdout. A reader that has gone (`lockctl status | head
/// -1`) is no failure; any other write error is.
pub fn output(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::new(IO, format!("cannot write to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

/// Prints `lockctl: <message>` on stderr, its control characters escaped.
/// A stderr that cannot be written (a pipe whose reader has gone) loses the
/// message and nothing else: the exit status still tells, and a watchdog
/// thread that reports a lapse must go on renewing the lock.
pub fn say(message: impl Display) {
    say_line(&format!("lockctl: {}", visible(&message.to_string())));
}

/// Writes `line` and a newline on stderr, whatever becomes of the write.
pub fn say_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`). A path may
/// hold any byte but NUL: printed as it is, a newline would fake a line of
/// the report for whatever reads it line by line, and an escape sequence
/// would command the terminal.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let escaped = text.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() });
    Cow::Owned(escaped.collect())
}

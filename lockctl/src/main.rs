//! lockctl: the lock library from the shell. It runs a command under a
//! lock, as `flock(1)` does, with every scheme of the library, and looks
//! at, waits for and breaks locks. The man page is `man/lockctl.1`.

mod args;
mod exit;
mod json;
mod progress;
mod report;
mod run;
mod signals;
mod status;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::time::Duration;

use lockcore::wait::{Inotify, Sleep, WakeSource};
use lockcore::{Ability, Error, Lock, Scheme, Spec, TargetKind};

use crate::exit::{say, Failure};

const HELP: &str = "\
lockctl: run a command under a lock; look at, wait for or break a lock

Usage:
  lockctl run SPEC [options] [--] COMMAND [ARGUMENT...]
  lockctl run SPEC [options] -c 'COMMAND LINE'
  lockctl status SPEC [--json]
  lockctl wait SPEC [-w SECONDS] [-E CODE] [-q]
  lockctl break SPEC [-q]
  lockctl schemes
  lockctl --help | --version

SPEC names the lock: scheme:target?key=value&..., such as
  flock:/run/lock/backup   lockfile:/srv/board/data.txt?ttl=30s&mode=0660
(`lockctl schemes` lists the schemes; man 7 lockffi-spec has every key).

Options of run (most as in flock(1)):
  -n, --nonblock              fail at once if the lock cannot be had
  -w, --wait SECONDS          wait at most this long (fractions allowed; 0 is -n)
  -E, --conflict-exit-code N  the exit status when the lock cannot be had (default 1)
  -c, --command LINE          run LINE with /bin/sh -c instead of COMMAND
  -q, --quiet                 no waiting report, no conflict message, no ttl warning
      --ttl DURATION          the lock's ttl (250ms, 30s, 10m, 1h, 2d; 0: none),
                              instead of the spec's ttl=
      --autorenew             renew the lock every third of its ttl while COMMAND runs
      --lost-signal SIGNAL    sent to COMMAND if the lock is lost or lockctl dies
                              (default TERM)
      --cooldown DURATION     keep the lock closed this long after the release
COMMAND finds this acquisition's fencing token in LOCK_FENCE and the spec in
LOCK_SPEC; LOCK_TOOK_OVER is set (dead, stale) only if the lock was taken
over from a holder that died or whose lock had gone stale. SIGTERM, SIGINT
and SIGHUP sent to lockctl go on to COMMAND; the lock is released once
COMMAND has ended. While lockctl waits, stderr says who holds the lock and
for how long.

status prints the holder, its pid, host, since, expiry and fence, the last
fence and the queue (--json: one JSON object). wait returns once the lock is
available, without taking it. break removes the lock whoever holds it.

Exit status:
    0  done; status: the lock is available; wait: it became available
    1  the lock cannot be had: run -n, run -w or wait -w ran out (-E sets
       another status); status: it is held or cooling down
    N  run: COMMAND's own status; 128+N if it died of signal N
   64  the command line is wrong
   65  the spec was refused, or a lock path holds no lock of its scheme or a
       corrupt one
   66  a directory on the lock's path is missing
   68  a redis lock's host name does not resolve
   69  COMMAND could not be executed, or the scheme cannot do it (break flock)
   70  internal error
   71  system error (no process, no thread)
   73  a lock file cannot be created (read-only file system, disk full)
   74  input/output error on a lock file
   75  the lock was lost while COMMAND ran (someone else holds it), or (status,
       wait, break) its guard stayed held by another process: try again
   76  a redis server's answer makes no sense to this library
   77  permission denied, or a lock file the spec's mode does not trust
128+N  lockctl was stopped by signal N before COMMAND started
";

fn main() -> ExitCode {
    let code = match dispatch(std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                say(&failure.message);
            }
            if failure.usage {
                exit::say_line("Try 'lockctl --help'.");
            }
            failure.code
        }
    };
    ExitCode::from(code)
}

fn dispatch(mut args: Vec<OsString>) -> Result<u8, Failure> {
    if args.is_empty() {
        return Err(Failure::usage("no command given"));
    }
    let command = args.remove(0);
    // `lockctl run --help`, as git and cargo take it: no spec is `--help`.
    let help_of_a_command = matches!(command.as_bytes(), b"run" | b"status" | b"wait" | b"break" | b"schemes")
        && args.len() == 1
        && matches!(args[0].as_bytes(), b"-h" | b"--help");
    if help_of_a_command {
        exit::output(HELP)?;
        return Ok(exit::OK);
    }
    match command.as_bytes() {
        b"run" => run::run(args),
        b"status" => status::status(args),
        b"wait" => status::wait(args),
        b"break" => status::break_lock(args),
        b"schemes" => schemes(args),
        b"-h" | b"--help" | b"help" => {
            no_arguments("help", &args)?;
            exit::output(HELP)?;
            Ok(exit::OK)
        }
        b"-V" | b"--version" => {
            no_arguments("--version", &args)?;
            exit::output(&format!("lockctl {}\n", env!("CARGO_PKG_VERSION")))?;
            Ok(exit::OK)
        }
        other => Err(Failure::usage(format!("unknown command '{}'", other.escape_ascii()))),
    }
}

/// A usage error if `command`, which takes no argument, was given one.
fn no_arguments(command: &str, args: &[OsString]) -> Result<(), Failure> {
    match args.first() {
        Some(extra) => Err(Failure::usage(format!(
            "'lockctl {command}' takes no argument; unexpected '{}'",
            extra.to_string_lossy()
        ))),
        None => Ok(()),
    }
}

/// `lockctl schemes`: every scheme this build has, what its target is, and
/// what its locks can do beyond taking and releasing.
fn schemes(args: Vec<OsString>) -> Result<u8, Failure> {
    no_arguments("schemes", &args)?;
    let mut table = String::new();
    for &scheme in Scheme::ALL {
        let target = match scheme.target_kind() {
            TargetKind::Path => "path",
            TargetKind::Url => "url",
        };
        let abilities: Vec<String> = Ability::ALL
            .iter()
            .filter(|&&ability| scheme.supports(ability))
            .map(|ability| format!("{ability:?}").to_lowercase())
            .collect();
        table.push_str(&format!("{:<9} {target:<5} {}\n", scheme.name(), abilities.join(" ")));
    }
    exit::output(&table)?;
    Ok(exit::OK)
}

/// Parses `text` and opens its lock; `ttl`, if given, replaces the spec's.
fn open(text: &OsStr, ttl: Option<Option<Duration>>) -> Result<(Spec, Box<Lock>), Failure> {
    let mut spec = Spec::parse(text.as_bytes()).map_err(|e| Failure::lock("open", text, None, &Error::Spec(e)))?;
    if let Some(ttl) = ttl {
        spec.options.ttl = ttl;
    }
    let lock = Lock::with_spec(spec.clone()).map_err(|e| Failure::lock("open", text, None, &e))?;
    Ok((spec, Box::new(lock)))
}

/// What tells a watcher that the lock may have changed hands: inotify on
/// the name the lock's holders change ([`Lock::watch_path`]). Without
/// inotify (no instance left, a lock that keeps no file), it polls.
fn watch(lock: &Lock) -> Box<dyn WakeSource> {
    match lock.watch_path().map(Inotify::new) {
        Some(Ok(inotify)) => Box::new(inotify),
        _ => Box::new(Sleep),
    }
}

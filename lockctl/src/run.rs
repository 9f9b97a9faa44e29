//! `lockctl run`: a command run under a lock, as `flock(1)` runs one.
//!
//! The lock is taken (at once with `-n`, within `-w`, or whenever it
//! comes), the command started with the fence in `LOCK_FENCE`, renewed
//! while it runs with `--autorenew`, and released (with `--cooldown`) once
//! the command has ended. lockctl's status is the command's, unless the
//! lock was lost meanwhile.

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use lockcore::{Ability, Acquired, Error, Lock, ReleaseOutcome, Spec, WallTime};
use lockstd::{Lapse, StartError, Watchdog};

use crate::args::{self, signal_name, Arg, Args};
use crate::exit::{self, lock_message, say, Failure};
use crate::progress::Progress;
use crate::signals::{Signals, Start};

/// What to run.
enum Program {
    Argv(Vec<OsString>),
    /// `-c`: a command line for `/bin/sh -c`.
    Shell(OsString),
}

/// The shell that runs `-c`: always `/bin/sh`, whatever `$SHELL` is, so
/// that a cron job and an interactive test run the same shell.
const SHELL: &str = "/bin/sh";

struct Options {
    spec: OsString,
    nonblock: bool,
    budget: Option<Duration>,
    conflict: u8,
    program: Program,
    quiet: bool,
    /// `--ttl`: replaces the spec's `ttl` (`Some(None)`: `--ttl 0`, never).
    ttl: Option<Option<Duration>>,
    autorenew: bool,
    lost_signal: libc::c_int,
    cooldown: Duration,
}

impl Options {
    fn parse(args: Vec<OsString>) -> Result<Options, Failure> {
        let mut args = Args::new(args);
        let mut spec = None;
        let mut argv = Vec::new();
        let mut shell = None;
        let mut options = Options {
            spec: OsString::new(),
            nonblock: false,
            budget: None,
            conflict: exit::CONFLICT,
            program: Program::Argv(Vec::new()),
            quiet: false,
            ttl: None,
            autorenew: false,
            lost_signal: libc::SIGTERM,
            cooldown: Duration::ZERO,
        };
        while let Some(arg) = args.next()? {
            let option = match arg {
                Arg::Option(option) => option,
                Arg::Operand(value) if spec.is_none() => {
                    spec = Some(value);
                    continue;
                }
                // The command starts at the first operand after the spec,
                // as flock(1)'s does: its options are its own.
                Arg::Operand(value) => {
                    argv.push(value);
                    argv.extend(args.rest());
                    break;
                }
                Arg::EndOfOptions => {
                    argv.extend(args.rest());
                    if spec.is_none() && !argv.is_empty() {
                        spec = Some(argv.remove(0));
                    }
                    break;
                }
            };
            match option.as_str() {
                "-n" | "--nonblock" | "--nb" => options.nonblock = true,
                "-w" | "--wait" | "--timeout" => options.budget = Some(args::seconds(&option, &args.text()?)?),
                "-E" | "--conflict-exit-code" => options.conflict = args::exit_code(&option, &args.text()?)?,
                "-c" | "--command" => shell = Some(args.value()?),
                "-q" | "--quiet" => options.quiet = true,
                "--ttl" => {
                    let ttl = args::duration(&option, &args.text()?)?;
                    options.ttl = Some(Some(ttl).filter(|ttl| !ttl.is_zero()));
                }
                "--autorenew" => options.autorenew = true,
                "--lost-signal" => options.lost_signal = args::signal(&option, &args.text()?)?,
                "--cooldown" => options.cooldown = args::duration(&option, &args.text()?)?,
                _ => return Err(args.unknown()),
            }
        }
        options.spec = spec.ok_or_else(|| Failure::usage("'lockctl run' needs a lock spec and a command"))?;
        options.program = match (shell, argv.is_empty()) {
            (Some(line), true) => Program::Shell(line),
            (None, false) => Program::Argv(argv),
            (Some(_), false) => {
                return Err(Failure::usage("give either -c 'command line' or a command with its arguments, not both"))
            }
            (None, true) => return Err(Failure::usage("'lockctl run' needs a command to run under the lock")),
        };
        // -w 0 is -n, as in flock(1).
        options.nonblock |= options.budget == Some(Duration::ZERO);
        Ok(options)
    }

    fn label(&self) -> String {
        exit::shown_spec(&self.spec)
    }

    fn command(&self, acquired: &Acquired) -> Command {
        let mut command = match &self.program {
            Program::Argv(argv) => {
                let mut command = Command::new(&argv[0]);
                command.args(&argv[1..]);
                command
            }
            Program::Shell(line) => {
                let mut command = Command::new(SHELL);
                command.arg("-c").arg(line);
                command
            }
        };
        command.env("LOCK_FENCE", acquired.fence.to_string()).env("LOCK_SPEC", &self.spec);
        // Set only by this acquisition: never inherited from an outer run.
        match took_over(acquired) {
            Some(how) => command.env(TOOK_OVER_VAR, how),
            None => command.env_remove(TOOK_OVER_VAR),
        };
        command
    }

    fn program_name(&self) -> String {
        match &self.program {
            Program::Argv(argv) => argv[0].to_string_lossy().into_owned(),
            Program::Shell(_) => SHELL.to_owned(),
        }
    }
}

pub fn run(args: Vec<OsString>) -> Result<u8, Failure> {
    let options = Options::parse(args)?;
    let signals = Signals::take()?;
    let (spec, mut lock) = crate::open(&options.spec, options.ttl)?;
    if !options.cooldown.is_zero() {
        spec.scheme
            .require(Ability::Cooldown)
            .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("--cooldown with '{}': {e}", options.label())))?;
    }
    if options.autorenew && spec.options.ttl.is_none() {
        return Err(Failure::usage("--autorenew renews a lock that has a ttl: give --ttl, or ttl= in the spec"));
    }
    let acquired = acquire(&mut lock, &spec, &options, &signals)?;
    if let Some(line) = took_over_line(&acquired, &options.label()).filter(|_| !options.quiet) {
        say(line);
    }
    // A flock lock's ttl is advisory: nobody can take it from a live
    // holder, so one run with --autorenew has nothing to report past it.
    let expiry_moot = options.quiet || (options.autorenew && !spec.scheme.breaks_stale_locks());
    let release_then = |lock: &mut Lock, code| finish(lock, &options, &signals, code, expiry_moot, acquired.expires);

    let renewal = match renew(&lock, &options, &signals) {
        Ok(renewal) => renewal,
        Err(failure) => {
            let _ = lock.release(Duration::ZERO);
            return Err(failure);
        }
    };
    let mut command = options.command(&acquired);
    let mut child = match signals.start(&mut command, &options.program_name(), options.lost_signal) {
        Start::Started(child) => child,
        Start::Interrupted(signal) => {
            drop(renewal);
            let code = exit::SIGNALLED.wrapping_add(signal as u8);
            if !options.quiet {
                say(format!("stopped by {} before the command started", signal_name(signal)));
            }
            return release_then(&mut lock, code);
        }
        // finish() reports the loss.
        Start::Lost => {
            drop(renewal);
            return release_then(&mut lock, exit::TEMP_FAIL);
        }
        Start::Failed(cause) => {
            drop(renewal);
            let code = if cause.raw_os_error() == Some(libc::ENOMEM) { exit::OS } else { exit::UNAVAILABLE };
            let failure = Failure::new(code, format!("cannot execute '{}': {cause}", options.program_name()));
            return release_then(&mut lock, code).and(Err(failure));
        }
    };
    let status = signals.wait(&mut child);
    // Stopped before the release, which must not race a renewal.
    drop(renewal);
    let code = match status {
        Ok(status) => exit::of_command(status),
        Err(cause) => {
            let failure = Failure::new(exit::OS, format!("cannot wait for '{}': {cause}", options.program_name()));
            return release_then(&mut lock, exit::OS).and(Err(failure));
        }
    };
    release_then(&mut lock, code)
}

/// Where the command learns that the lock was taken over from a holder
/// that died or ran past its TTL, whose work may be half-done.
const TOOK_OVER_VAR: &str = "LOCK_TOOK_OVER";

/// What `LOCK_TOOK_OVER` says of a taken-over lock: `dead` if its holder
/// is known to have died, `stale` otherwise (it ran past its TTL, or, for
/// flock, let go without a release).
fn took_over(acquired: &Acquired) -> Option<&'static str> {
    acquired.took_over_from.map(|_| if acquired.previous_holder_died() { "dead" } else { "stale" })
}

/// The line that tells the user whose lock was taken over.
fn took_over_line(acquired: &Acquired, label: &str) -> Option<String> {
    let who = crate::report::who(&acquired.took_over_from?);
    let why = match acquired.previous_holder_died() {
        true => "which died holding it",
        false => "whose lock had gone stale (past its ttl, or let go without a release)",
    };
    Some(format!("took '{label}' over from {who}, {why}"))
}

/// Takes the lock as the options say; a failure carries the conflict
/// status, or 128 + N when signal N stopped the wait.
fn acquire(lock: &mut Lock, spec: &Spec, options: &Options, signals: &Signals) -> Result<Acquired, Failure> {
    let result = if options.nonblock {
        lock.try_acquire()
    } else {
        let _progress = (!options.quiet).then(|| Progress::start(spec.clone(), options.label()));
        // A forwarded signal ends the wait, and gives up its place in line.
        lock.acquire_cancellable(options.budget, None, &mut || signals.received().is_some())
    };
    let error = match result {
        Ok(acquired) => return Ok(acquired),
        Err(error) => error,
    };
    if let Some(signal) = signals.received() {
        if !options.quiet {
            say(format!("stopped by {} while waiting for '{}'", signal_name(signal), options.label()));
        }
        return Err(Failure::silent(exit::SIGNALLED.wrapping_add(signal as u8)));
    }
    match error {
        Error::Busy(_) | Error::Timeout(_) if options.quiet => Err(Failure::silent(options.conflict)),
        Error::Busy(_) | Error::Timeout(_) => {
            Err(Failure::new(options.conflict, lock_message("acquire", &options.spec, Some(lock), &error)))
        }
        other => Err(Failure::lock("acquire", &options.spec, Some(lock), &other)),
    }
}

/// With `--autorenew`, the watchdog that renews the lock every third of
/// its ttl; when it finds the lock lost, the command gets the lost signal.
fn renew(lock: &Lock, options: &Options, signals: &Signals) -> Result<Option<Watchdog>, Failure> {
    if !options.autorenew {
        return Ok(None);
    }
    let (signals, lost_signal, quiet, label) = (signals.clone(), options.lost_signal, options.quiet, options.label());
    let on_lapse = move |lapse| match lapse {
        Lapse::Lost => signals.lock_lost(lost_signal),
        Lapse::Expired if quiet => {}
        Lapse::Expired => say(format!(
            "'{label}' had run past its ttl before it was renewed; nobody took it, and it is held again, \
             but what the command did meanwhile was unprotected"
        )),
    };
    match Watchdog::start(lock, on_lapse) {
        Ok(watchdog) => Ok(Some(watchdog)),
        // The ttl is advisory (flock): nobody can take the lock from a live
        // holder, so there is nothing to renew.
        Err(StartError::NeverExpires) => Ok(None),
        Err(StartError::Lock(error)) => Err(Failure::lock("renew", &options.spec, Some(lock), &error)),
        Err(other) => Err(Failure::new(exit::OS, format!("cannot renew '{}': {other}", options.label()))),
    }
}

/// Releases the lock after the command and gives lockctl's status: the
/// command's `code`, unless the lock was lost meanwhile or the release failed.
/// `expiry_moot`: a release past the ttl goes without a warning.
/// `expires`: when the lock taken ran out, to tell a lock that ran past its
/// ttl from one broken before it.
fn finish(
    lock: &mut Lock,
    options: &Options,
    signals: &Signals,
    code: u8,
    expiry_moot: bool,
    expires: Option<WallTime>,
) -> Result<u8, Failure> {
    let released = lock.release(options.cooldown);
    let label = options.label();
    if let Some(signal) = signals.lost() {
        return Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "lost '{label}' while the command ran: it was broken, or someone else holds it now; the command was sent {}",
                signal_name(signal)
            ),
        ));
    }
    match released {
        Ok(ReleaseOutcome::Released) => Ok(code),
        Ok(ReleaseOutcome::Expired) if expiry_moot => Ok(code),
        Ok(ReleaseOutcome::Expired) => {
            say(format!(
                "'{label}' was held past its ttl; nobody took it meanwhile, but what the command did after the \
                 ttl was unprotected (--autorenew renews it)"
            ));
            Ok(code)
        }
        Ok(ReleaseOutcome::Lost) => {
            // Lost before its ttl ran out, with none, or while renewed: it
            // was broken (`lockctl break`, an operator) or its file removed.
            let ran_out = !options.autorenew && expires.is_some_and(|at| WallTime::now() >= at);
            let how = match ran_out {
                true => "it ran past the ttl and someone else took the lock; what the command did after the ttl",
                false => {
                    "it was broken or its file removed, and someone else took the lock; what the command did after \
                     that"
                }
            };
            Err(Failure::new(exit::TEMP_FAIL, format!("lost '{label}' while the command ran: {how} was unprotected")))
        }
        Err(error) => Err(Failure::lock("release", &options.spec, Some(lock), &error)),
    }
}

//! `lockctl status`, `lockctl break` and `lockctl wait`: a lock looked at,
//! broken, or waited for, without taking it.

use std::ffi::{OsStr, OsString};
use std::fmt::Write;
use std::time::{Duration, Instant};

use lockcore::{Error, Inspection, WallTime};

use crate::args::{self, Arg, Args};
use crate::exit::{self, Failure};
use crate::json::{Object, Value};
use crate::progress::Progress;
use crate::report::{self, host, liveness_name, span, State};
use crate::signals::Signals;

/// `lockctl status SPEC [--json]`: exit 0 if the lock is available now,
/// 1 if it is held or cooling down.
pub fn status(args: Vec<OsString>) -> Result<u8, Failure> {
    let mut json = false;
    let spec = one_spec(args, "status", |option, _| {
        match option {
            "--json" => json = true,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let mut lock = crate::open(&spec, None)?.1;
    let inspection = lock.inspect().map_err(|e| Failure::lock("inspect", &spec, Some(&lock), &e))?;
    let now = WallTime::now();
    let path = lock.path().ok().map(|path| String::from_utf8_lossy(path.as_bytes()).into_owned());
    let spec_text = exit::shown_spec(&spec);
    let state = State::of(&inspection, now);
    if json {
        let json = as_json(&spec_text, lock.spec().scheme.name(), path.as_deref(), &inspection, now);
        exit::output(&format!("{json}\n"))?;
    } else {
        exit::output(&as_text(&spec_text, path.as_deref(), &inspection, now))?;
    }
    Ok(if state.available() { exit::OK } else { exit::CONFLICT })
}

fn as_text(spec: &str, path: Option<&str>, inspection: &Inspection, now: WallTime) -> String {
    let state = State::of(inspection, now);
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{:<11} {}", format!("{label}:"), exit::visible(value));
    };
    line("spec", spec);
    if let Some(path) = path {
        line("path", path);
    }
    line("state", state.name());
    if let Some(holder) = inspection.holder {
        let mut who = report::who(&holder);
        let _ = write!(who, " ({}{})", liveness_name(holder.liveness), if holder.stale { ", stale" } else { "" });
        line("holder", &who);
        if let Some(since) = holder.since {
            line("since", &format!("{since} ({} ago)", span(now.since(since))));
        }
        match holder.expires {
            Some(at) if at > now => line("expires", &format!("{at} (in {})", span(at.since(now)))),
            Some(at) => line("expires", &format!("{at} ({} ago)", span(now.since(at)))),
            None => line("expires", "never"),
        }
        if let Some(record) = holder.record {
            line("fence", &record.fence.to_string());
        }
    }
    line("last fence", &inspection.last_fence.to_string());
    if let Some(until) = inspection.cooldown_until.filter(|&until| until > now) {
        line("cooldown", &format!("until {until} (in {})", span(until.since(now))));
    }
    if let Some(queued) = inspection.queue_length {
        line("queue", &queued.to_string());
    }
    out
}

/// One JSON object; every key is always there, `null` where it does not apply.
fn as_json(spec: &str, scheme: &str, path: Option<&str>, inspection: &Inspection, now: WallTime) -> String {
    let state = State::of(inspection, now);
    let time = |object: Object, key: &str, at: Option<WallTime>| {
        let text = at.map(|at| at.to_string());
        object.text(key, text.as_deref()).member(&format!("{key}_unix_ms"), at.map(WallTime::unix_millis))
    };
    let holder = inspection.holder.map(|holder| {
        let host = host(&holder);
        let object = Object::new()
            .member("pid", (holder.pid != 0).then_some(i64::from(holder.pid)))
            .text("host", host.as_deref())
            .text("liveness", Some(liveness_name(holder.liveness)))
            .member("stale", holder.stale);
        let object = time(object, "since", holder.since);
        let object = time(object, "expires", holder.expires);
        object.member("fence", holder.record.map(|record| record.fence))
    });
    let cooldown = inspection.cooldown_until.filter(|&until| until > now);
    let object = Object::new()
        .text("spec", Some(spec))
        .text("scheme", Some(scheme))
        .text("path", path)
        .text("state", Some(state.name()))
        .member("available", state.available())
        .member("holder", holder.map_or(Value::Null, Value::Object))
        .member("last_fence", inspection.last_fence);
    let object = time(object, "cooldown_until", cooldown);
    object.member("queue_length", inspection.queue_length.map(u64::from)).finish()
}

/// `lockctl break SPEC [-q]`: removes the lock whoever holds it.
pub fn break_lock(args: Vec<OsString>) -> Result<u8, Failure> {
    let mut quiet = false;
    let spec = one_spec(args, "break", |option, _| {
        match option {
            "-q" | "--quiet" => quiet = true,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let mut lock = crate::open(&spec, None)?.1;
    // Who held it, for the report only: the break itself decides, and has
    // the command's whole patience for the lock's guard.
    let before = lock.inspect_within(lockcore::TRY_PATIENCE).ok();
    let broken = lock.break_lock().map_err(|e| Failure::lock("break", &spec, Some(&lock), &e))?;
    if !quiet {
        let spec = exit::shown_spec(&spec);
        let spec = exit::visible(&spec);
        let said = match (broken, before) {
            (true, Some(before)) => format!("broke '{spec}', {}\n", report::obstacle(&before, WallTime::now())),
            (true, None) => format!("broke '{spec}'\n"),
            (false, _) => format!("'{spec}' was not held: nothing to break\n"),
        };
        exit::output(&said)?;
    }
    Ok(exit::OK)
}

/// How often `wait` looks at the lock when no event has said it changed:
/// a holder that dies, and a `flock(1)` user that lets go, change no file.
pub const WAIT_POLL: Duration = Duration::from_millis(200);

/// The least time a look of `wait` is given, even at the end of its
/// budget: the lock's guard or server a moment.
const MIN_LOOK: Duration = Duration::from_millis(20);

/// `lockctl wait SPEC [-w SECONDS] [-E CODE] [-q]`: returns once the lock
/// is available, without taking it (a take and release would draw a fence
/// and start a cooldown).
pub fn wait(args: Vec<OsString>) -> Result<u8, Failure> {
    let (mut quiet, mut budget, mut conflict) = (false, None, exit::CONFLICT);
    let spec = one_spec(args, "wait", |option, rest| {
        match option {
            "-q" | "--quiet" => quiet = true,
            "-w" | "--wait" | "--timeout" => budget = Some(args::seconds(option, &rest.text()?)?),
            "-E" | "--conflict-exit-code" => conflict = args::exit_code(option, &rest.text()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let signals = Signals::take()?;
    let (parsed, mut lock) = crate::open(&spec, None)?;
    let mut wake = crate::watch(&lock);
    let _progress = (!quiet).then(|| Progress::start(parsed, exit::shown_spec(&spec)));
    // A budget past what the clock can count is no deadline at all.
    let deadline = budget.and_then(|budget| Instant::now().checked_add(budget));
    let mut trouble = None;
    loop {
        if let Some(signal) = signals.received() {
            return Ok(exit::SIGNALLED.wrapping_add(signal as u8));
        }
        wake.arm().map_err(|e| Failure::lock("watch", &spec, Some(&lock), &e))?;
        let mut next = WAIT_POLL;
        // Never a look that outlasts the budget.
        let patience = deadline.map_or(lockcore::CHANGE_PATIENCE, |deadline| {
            deadline.saturating_duration_since(Instant::now()).clamp(MIN_LOOK, lockcore::CHANGE_PATIENCE)
        });
        match lock.inspect_within(patience) {
            Ok(inspection) => {
                let now = WallTime::now();
                if State::of(&inspection, now).available() {
                    return Ok(exit::OK);
                }
                // An expiry or a cooldown's end is known: look again then.
                let ends = [inspection.holder.and_then(|h| h.expires), inspection.cooldown_until];
                for end in ends.into_iter().flatten().filter(|&end| end > now) {
                    next = next.min(end.since(now));
                }
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    let obstacle = report::obstacle(&inspection, now);
                    return Err(timed_out(conflict, quiet, &spec, &obstacle));
                }
            }
            // Its guard was held for a while: someone is changing it.
            Err(Error::Busy(_)) => trouble = None,
            // A server restarting or failing over: the wait goes on.
            Err(Error::Server(e)) if e.problem.may_pass() => trouble = Some(e),
            Err(e) => return Err(Failure::lock("inspect", &spec, Some(&lock), &e)),
        }
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let obstacle = trouble.map_or_else(|| "its guard stayed held".to_string(), |e| e.to_string());
                return Err(timed_out(conflict, quiet, &spec, &obstacle));
            }
            next = next.min(left);
        }
        wake.wait(next);
    }
}

fn timed_out(code: u8, quiet: bool, spec: &OsStr, obstacle: &str) -> Failure {
    if quiet {
        return Failure::silent(code);
    }
    Failure::new(code, format!("gave up waiting for '{}': {obstacle}", exit::shown_spec(spec)))
}

/// Reads `SPEC` and the options of a subcommand that takes one spec;
/// `option` takes the options of its own, and answers `false` for one it
/// does not know.
fn one_spec(
    args: Vec<OsString>,
    command: &str,
    mut option: impl FnMut(&str, &mut Args) -> Result<bool, Failure>,
) -> Result<OsString, Failure> {
    let mut args = Args::new(args);
    let mut spec = None;
    let mut operands = Vec::new();
    while let Some(arg) = args.next()? {
        match arg {
            Arg::Operand(value) if spec.is_none() => spec = Some(value),
            Arg::Operand(value) => operands.push(value),
            Arg::EndOfOptions => {
                operands.extend(args.rest());
                break;
            }
            Arg::Option(name) => {
                if !option(&name, &mut args)? {
                    return Err(args.unknown());
                }
            }
        }
    }
    if spec.is_none() && !operands.is_empty() {
        spec = Some(operands.remove(0));
    }
    let spec = spec.ok_or_else(|| Failure::usage(format!("'lockctl {command}' needs a lock spec")))?;
    if let Some(extra) = operands.first() {
        return Err(Failure::usage(format!(
            "'lockctl {command}' takes one lock spec; unexpected '{}'",
            extra.to_string_lossy()
        )));
    }
    Ok(spec)
}

//! The command line, read as `getopt_long(3)` reads it: short options
//! alone or clustered (`-nq`), a short option's value attached (`-w5`) or
//! in the next argument (`-w 5`), long options as `--name=value` or
//! `--name value`, and `--` to end the options. Values are parsed here
//! too, each refusal naming the option and what it expects.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::Duration;

use crate::exit::Failure;

/// One item of the command line.
#[derive(Debug, PartialEq, Eq)]
pub enum Arg {
    /// An option as written, without its value: `-n`, `--wait`.
    Option(String),
    /// An argument that is no option.
    Operand(OsString),
    /// `--`: what follows is operands only.
    EndOfOptions,
}

/// The arguments still to read.
pub struct Args {
    rest: std::vec::IntoIter<OsString>,
    /// The letters of a short-option cluster not read yet.
    cluster: Vec<u8>,
    /// The value given as `--name=value`, until the option takes it.
    attached: Option<OsString>,
    /// The last option read, as written, for messages.
    last: String,
}

impl Args {
    pub fn new(args: Vec<OsString>) -> Args {
        Args { rest: args.into_iter(), cluster: Vec::new(), attached: None, last: String::new() }
    }

    /// The next item; `None` at the end.
    pub fn next(&mut self) -> Result<Option<Arg>, Failure> {
        if self.attached.is_some() {
            return Err(Failure::usage(format!("option '{}' takes no value", self.last)));
        }
        if !self.cluster.is_empty() {
            let letter = self.cluster.remove(0);
            if !letter.is_ascii_alphanumeric() {
                return Err(Failure::usage(format!("unknown option '-{}'", letter.escape_ascii())));
            }
            self.last = format!("-{}", letter as char);
            return Ok(Some(Arg::Option(self.last.clone())));
        }
        let Some(arg) = self.rest.next() else { return Ok(None) };
        let bytes = arg.as_bytes();
        if bytes == b"--" {
            return Ok(Some(Arg::EndOfOptions));
        }
        if let Some(long) = bytes.strip_prefix(b"--") {
            let (name, value) = match long.iter().position(|&b| b == b'=') {
                Some(at) => (&long[..at], Some(OsString::from_vec(long[at + 1..].to_vec()))),
                None => (long, None),
            };
            self.last = format!("--{}", String::from_utf8_lossy(name));
            self.attached = value;
            return Ok(Some(Arg::Option(self.last.clone())));
        }
        if bytes.len() > 1 && bytes[0] == b'-' {
            self.cluster = bytes[1..].to_vec();
            return self.next();
        }
        Ok(Some(Arg::Operand(arg)))
    }

    /// The value of the option just read: attached to it, or the next
    /// argument.
    pub fn value(&mut self) -> Result<OsString, Failure> {
        if let Some(value) = self.attached.take() {
            return Ok(value);
        }
        if !self.cluster.is_empty() {
            return Ok(OsString::from_vec(std::mem::take(&mut self.cluster)));
        }
        self.rest.next().ok_or_else(|| Failure::usage(format!("option '{}' needs a value", self.last)))
    }

    /// [`value`](Self::value), as text.
    pub fn text(&mut self) -> Result<String, Failure> {
        let value = self.value()?;
        value.into_string().map_err(|_| Failure::usage(format!("the value of '{}' is not text", self.last)))
    }

    /// Every argument not read yet, as operands.
    pub fn rest(self) -> Vec<OsString> {
        self.rest.collect()
    }

    /// The refusal of the option just read.
    pub fn unknown(&self) -> Failure {
        Failure::usage(format!("unknown option '{}'", self.last))
    }
}

/// Seconds as `flock -w` takes them: `5`, `0.5`, `.25`; at most nanosecond
/// precision (further digits are dropped).
pub fn seconds(option: &str, text: &str) -> Result<Duration, Failure> {
    let refuse = || Failure::usage(format!("option '{option}' expects seconds (such as 5 or 0.5), not '{text}'"));
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return Err(refuse());
    }
    let secs = if whole.is_empty() { 0 } else { whole.parse::<u64>().map_err(|_| refuse())? };
    let nanos = fraction.bytes().chain(std::iter::repeat(b'0')).take(9).fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    Ok(Duration::new(secs, nanos))
}

/// A duration as the spec's keys take it (`250ms`, `30s`, `10m`, `1h`, `2d`).
pub fn duration(option: &str, text: &str) -> Result<Duration, Failure> {
    lockcore::spec::parse_duration(text.as_bytes())
        .map_err(|why| Failure::usage(format!("option '{option}': '{text}' {why}")))
}

/// An exit status, 0 to 255, as `flock -E` takes it.
pub fn exit_code(option: &str, text: &str) -> Result<u8, Failure> {
    text.parse::<u8>()
        .map_err(|_| Failure::usage(format!("option '{option}' expects an exit status from 0 to 255, not '{text}'")))
}

/// The signals a name may give, as `kill -l` spells them.
const SIGNALS: &[(&str, libc::c_int)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ABRT", libc::SIGABRT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
];

/// The signals that stop or continue a process rather than end it or ask
/// it to: told to a command that no longer runs under the lock, they would
/// leave it at its work, unprotected.
const NOT_AN_END: [libc::c_int; 5] = [libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGCONT];

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number (`15`), as the
/// names list them: by number too, none that stops or continues a process.
pub fn signal(option: &str, text: &str) -> Result<libc::c_int, Failure> {
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let by_name = SIGNALS.iter().find(|(known, _)| *known == name).map(|&(_, number)| number);
    let by_number =
        text.parse::<libc::c_int>().ok().filter(|n| (1..=libc::SIGRTMAX()).contains(n) && !NOT_AN_END.contains(n));
    by_name.or(by_number).ok_or_else(|| {
        let names: Vec<&str> = SIGNALS.iter().map(|(name, _)| *name).collect();
        Failure::usage(format!("option '{option}' expects a signal ({} or a number), not '{text}'", names.join(", ")))
    })
}

/// A signal's name for messages: `SIGTERM`, or `signal 34`.
pub fn signal_name(signal: libc::c_int) -> String {
    match SIGNALS.iter().find(|&&(_, number)| number == signal) {
        Some((name, _)) => format!("SIG{name}"),
        None => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        Args::new(list.iter().map(OsString::from).collect())
    }

    #[test]
    fn clusters_attached_values_and_long_values_read_as_getopt_reads_them() {
        let mut a = args(&["-nqw5", "--ttl=30s", "--cooldown", "1m", "spec", "--", "-x"]);
        assert_eq!(a.next().unwrap(), Some(Arg::Option("-n".into())));
        assert_eq!(a.next().unwrap(), Some(Arg::Option("-q".into())));
        assert_eq!(a.next().unwrap(), Some(Arg::Option("-w".into())));
        assert_eq!(a.value().unwrap(), "5");
        assert_eq!(a.next().unwrap(), Some(Arg::Option("--ttl".into())));
        assert_eq!(a.value().unwrap(), "30s");
        assert_eq!(a.next().unwrap(), Some(Arg::Option("--cooldown".into())));
        assert_eq!(a.value().unwrap(), "1m");
        assert_eq!(a.next().unwrap(), Some(Arg::Operand("spec".into())));
        assert_eq!(a.next().unwrap(), Some(Arg::EndOfOptions));
        assert_eq!(a.rest(), vec![OsString::from("-x")]);
    }

    #[test]
    fn a_value_given_to_a_flag_or_missing_for_an_option_is_a_usage_error() {
        let mut a = args(&["--autorenew=yes", "x"]);
        assert_eq!(a.next().unwrap(), Some(Arg::Option("--autorenew".into())));
        let refused = a.next().unwrap_err();
        assert_eq!((refused.code, refused.message.as_str()), (64, "option '--autorenew' takes no value"));
        let mut a = args(&["-w"]);
        a.next().unwrap();
        assert_eq!(a.value().unwrap_err().message, "option '-w' needs a value");
    }

    #[test]
    fn seconds_take_fractions_as_flock_does_and_refuse_the_rest() {
        assert_eq!(seconds("-w", "5").unwrap(), Duration::from_secs(5));
        assert_eq!(seconds("-w", "0.25").unwrap(), Duration::from_millis(250));
        assert_eq!(seconds("-w", ".007").unwrap(), Duration::from_millis(7));
        assert_eq!(seconds("-w", "2.").unwrap(), Duration::from_secs(2));
        assert_eq!(seconds("-w", "1.0000000019").unwrap(), Duration::new(1, 1));
        for bad in ["", ".", "-1", "1e3", "inf", "1.2.3", "5s"] {
            assert_eq!(seconds("-w", bad).unwrap_err().code, 64, "{bad:?}");
        }
    }

    #[test]
    fn signals_by_name_with_or_without_sig_and_by_number() {
        assert_eq!(signal("--lost-signal", "TERM").unwrap(), libc::SIGTERM);
        assert_eq!(signal("--lost-signal", "sigkill").unwrap(), libc::SIGKILL);
        assert_eq!(signal("--lost-signal", "10").unwrap(), 10);
        let stop = libc::SIGSTOP.to_string();
        for bad in ["", "0", "TERMINATE", "999", "STOP", &stop] {
            assert_eq!(signal("--lost-signal", bad).unwrap_err().code, 64, "{bad:?}");
        }
        assert_eq!(signal_name(libc::SIGUSR1), "SIGUSR1");
    }

    #[test]
    fn exit_codes_are_0_to_255() {
        assert_eq!(exit_code("-E", "0").unwrap(), 0);
        assert_eq!(exit_code("-E", "255").unwrap(), 255);
        assert!(exit_code("-E", "256").is_err());
        assert!(exit_code("-E", "-1").is_err());
    }
}

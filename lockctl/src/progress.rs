//! While lockctl waits, who holds the lock and for how long, on stderr:
//! on a terminal one line rewritten in place every second and wiped when
//! the wait ends; otherwise (a log, cron's mail) a line every five
//! seconds. A thread of its own does it, with its own handle on the lock,
//! so that the waiting loop and its deadline are left alone.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockcore::{Lock, Spec, WallTime};

use crate::exit::visible;
use crate::report::{obstacle, span};

/// On a terminal: the first look after this much waiting, then one a second.
const TERMINAL_FIRST: Duration = Duration::from_millis(500);
const TERMINAL_EVERY: Duration = Duration::from_secs(1);
/// Elsewhere: the first line after a second of waiting, then one every five.
const LOG_FIRST: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(5);
/// The longest look a report line takes: the wait it reports on joins
/// this thread when it ends, and must not wait for a slow look.
const REPORT_PATIENCE: Duration = Duration::from_millis(100);

/// The reporting thread; dropping it ends the report (and wipes the line).
pub struct Progress {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Reports on the lock `spec` names, called `label` in the lines.
    /// Without a thread there is no report, and the wait goes on.
    pub fn start(spec: Spec, label: String) -> Progress {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let seen = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lockctl-progress".into())
            .spawn(move || report_until_stopped(&seen, spec, &label))
            .ok();
        Progress { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn report_until_stopped(stop: &(Mutex<bool>, Condvar), spec: Spec, label: &str) {
    let Ok(mut lock) = Lock::with_spec(spec) else { return };
    let mut line = Line::new();
    let (first, every) = if line.terminal { (TERMINAL_FIRST, TERMINAL_EVERY) } else { (LOG_FIRST, LOG_EVERY) };
    let start = Instant::now();
    let mut next = start + first;
    let (stopped, wake) = stop;
    let mut done = stopped.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        if *done {
            break;
        }
        if now < next {
            done = wake.wait_timeout(done, next - now).unwrap_or_else(|e| e.into_inner()).0;
            continue;
        }
        drop(done);
        // An inspection that fails (a guard held a moment, a server slow)
        // skips a line; a short one never keeps the wait, which joins this
        // thread at its end, past its deadline.
        if let Ok(inspection) = lock.inspect_within(REPORT_PATIENCE) {
            let waited = span(start.elapsed());
            // The spec comes last: a terminal's line is cut at its width.
            line.show(&format!("waiting {waited}; {}; lock {label}", obstacle(&inspection, WallTime::now())));
        }
        next = Instant::now() + every;
        done = stopped.lock().unwrap_or_else(|e| e.into_inner());
    }
    line.clear();
}

/// Stderr, as a line rewritten in place (a terminal) or as a log.
struct Line {
    terminal: bool,
    /// The width of what is on the terminal's line now.
    shown: usize,
}

impl Line {
    fn new() -> Line {
        Line { terminal: std::io::stderr().is_terminal(), shown: 0 }
    }

    fn show(&mut self, text: &str) {
        let text = visible(text);
        let mut err = std::io::stderr().lock();
        if !self.terminal {
            let _ = writeln!(err, "lockctl: {text}");
            return;
        }
        // Cut to the terminal's width: a line that wrapped could not be
        // rewritten with a carriage return.
        let text: String = format!("lockctl: {text}").chars().take(terminal_width().saturating_sub(1)).collect();
        let width = text.chars().count();
        let pad = self.shown.saturating_sub(width);
        let _ = write!(err, "\r{text}{:pad$}", "");
        let _ = err.flush();
        self.shown = width;
    }

    fn clear(&mut self) {
        if self.terminal && self.shown > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:width$}\r", "", width = self.shown);
            let _ = err.flush();
            self.shown = 0;
        }
    }
}

fn terminal_width() -> usize {
    // SAFETY: an all-zero winsize is a valid value of this plain C struct.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize through the valid pointer given.
    let rc = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}

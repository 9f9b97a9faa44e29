//! SIGTERM, SIGINT and SIGHUP: blocked in every thread and taken by one
//! thread with `sigwaitinfo(2)`. Before the command runs, they stop a wait
//! for the lock (which gives up its queue place, if any, on the way out);
//! while it runs, they are passed on to it. The command starts with them
//! unblocked again: a mask is inherited across exec, and a program that
//! found SIGTERM blocked would never die of it.
//!
//! The same lock on one mutex keeps the command's pid, so that nothing is
//! sent to it once it has been reaped (the pid may be another process's by
//! then): [`Signals::wait`] takes the pid away before it reaps.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::exit::{visible, Failure};

/// The signals lockctl passes on to the command.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// `si_code` of a signal the kernel sent itself: the terminal's SIGINT
/// (Ctrl-C) and SIGHUP go to its whole foreground process group, so a
/// command still in lockctl's group has had its own copy.
const SENT_BY_THE_KERNEL: libc::c_int = 0x80;

/// The signals taken, and the command they go to.
#[derive(Clone)]
pub struct Signals {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The command, from its start until it is about to be reaped.
    child: Option<libc::pid_t>,
    /// A signal that came while no command ran.
    received: Option<libc::c_int>,
    /// The signal the command is to get because the lock was lost; set
    /// once the loss is known.
    lost: Option<libc::c_int>,
}

/// Whether process `pid` is in lockctl's process group, where a signal the
/// terminal sends to its foreground group reaches it as it reaches lockctl.
/// A command that left the group (`setsid`, a shell's job control) gets
/// none of those, and lockctl passes them on.
fn in_our_process_group(pid: libc::pid_t) -> bool {
    // SAFETY: getpgid and getpgrp have no memory preconditions; getpgid of a
    // process in another session may fail, which counts as another group.
    unsafe { libc::getpgid(pid) == libc::getpgrp() }
}

/// What became of a request to start the command.
pub enum Start {
    Started(Child),
    /// A signal came before the command could start; it did not.
    Interrupted(libc::c_int),
    /// The lock was lost before the command could start; it did not.
    Lost,
    Failed(io::Error),
}

impl Signals {
    /// Blocks the forwarded signals and starts the thread that takes them.
    /// Call it before any other thread is made: a thread inherits the mask
    /// of the one that makes it, and a thread that had them unblocked would
    /// die of them.
    pub fn take() -> Result<Signals, Failure> {
        let set = forwarded_set();
        // SAFETY: `set` is an initialised signal set; the old mask is not asked for.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            let cause = io::Error::from_raw_os_error(rc);
            return Err(Failure::new(crate::exit::OS, format!("cannot block SIGTERM, SIGINT and SIGHUP: {cause}")));
        }
        let signals = Signals { state: Arc::new(Mutex::new(State::default())) };
        let taker = signals.clone();
        std::thread::Builder::new()
            .name("lockctl-signals".into())
            .spawn(move || taker.take_forever(set))
            .map_err(|cause| Failure::new(crate::exit::OS, format!("cannot start the signal thread: {cause}")))?;
        Ok(signals)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn take_forever(&self, set: libc::sigset_t) {
        loop {
            // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` and `info` are valid for the call.
            let signal = unsafe { libc::sigwaitinfo(&set, &mut info) };
            if signal < 0 {
                // EINTR, from a signal outside the set: wait again.
                continue;
            }
            let mut state = self.state();
            match state.child {
                Some(pid) if info.si_code != SENT_BY_THE_KERNEL || !in_our_process_group(pid) => send(pid, signal),
                Some(_) => {}
                None => state.received = Some(signal),
            }
        }
    }

    /// The signal that came while no command ran, if one did.
    pub fn received(&self) -> Option<libc::c_int> {
        self.state().received
    }

    /// Starts `command` (`program`, for a message), unless a signal came or
    /// the lock was lost first. Should lockctl die before the command ends,
    /// the command is sent `orphan_signal`: it no longer runs under the
    /// lock; should it die before the command starts, the command never
    /// does.
    pub fn start(&self, command: &mut Command, program: &str, orphan_signal: libc::c_int) -> Start {
        let parent = std::process::id() as libc::pid_t;
        let set = forwarded_set();
        // Made here: the child may only make async-signal-safe calls.
        let not_run = format!("lockctl: ended before '{}' could start; it was not run\n", visible(program));
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe functions (sigprocmask, prctl,
        // getppid, write, _exit), on memory made before the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, orphan_signal as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // lockctl died before the prctl: no signal will come, and the
                // lock is no longer held for the command. The child leaves
                // here: an error returned would go to a pipe nobody reads any
                // more, and the standard library aborts on that failed write
                // (a "fatal runtime error" on stderr, and a core file where
                // they are kept).
                if libc::getppid() != parent {
                    let _ = libc::write(libc::STDERR_FILENO, not_run.as_ptr().cast(), not_run.len());
                    libc::_exit(libc::c_int::from(crate::exit::TEMP_FAIL));
                }
                Ok(())
            });
        }
        let mut state = self.state();
        if let Some(signal) = state.received {
            return Start::Interrupted(signal);
        }
        if state.lost.is_some() {
            return Start::Lost;
        }
        match command.spawn() {
            Ok(child) => {
                state.child = Some(child.id() as libc::pid_t);
                Start::Started(child)
            }
            Err(cause) => Start::Failed(cause),
        }
    }

    /// The lock was lost: the command, if it runs, gets `signal` now, and
    /// one that has not started yet never will.
    pub fn lock_lost(&self, signal: libc::c_int) {
        let mut state = self.state();
        state.lost = Some(signal);
        if let Some(pid) = state.child {
            send(pid, signal);
        }
    }

    /// The signal the command was sent because the lock was lost, if it was.
    pub fn lost(&self) -> Option<libc::c_int> {
        self.state().lost
    }

    /// Waits for the command to end, and reaps it once no signal can be
    /// sent to its pid any more.
    pub fn wait(&self, child: &mut Child) -> io::Result<ExitStatus> {
        let pid = child.id() as libc::id_t;
        loop {
            // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is valid for the call. WNOWAIT leaves the child
            // to be reaped below.
            let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
            if rc == 0 {
                break;
            }
            let cause = io::Error::last_os_error();
            if cause.kind() != io::ErrorKind::Interrupted {
                return Err(cause);
            }
        }
        self.state().child = None;
        child.wait()
    }
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it;
    // both are given a valid pointer and signals that exist.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in FORWARDED {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

fn send(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory preconditions. The pid is a child not yet
    // reaped (the caller holds the state, and `wait` takes the pid away
    // before reaping), so it is the command's and no other process's.
    unsafe {
        libc::kill(pid, signal);
    }
}

//! Signals sent to `lockctl run`, on every scheme: SIGTERM, SIGINT and
//! SIGHUP go on to the command, whose status is then lockctl's, and the
//! lock is released after it; one that comes while lockctl waits for the
//! lock ends the wait (128 + N) without taking the lock or keeping a place
//! in its queue.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;

use common::*;

#[test]
fn term_int_and_hup_go_on_to_the_command_and_the_lock_is_released_after_it() {
    each_scheme("forward", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        for (name, signal) in [("TERM", libc::SIGTERM), ("INT", libc::SIGINT), ("HUP", libc::SIGHUP)] {
            let (got, ready) = (dir.join(&format!("got-{name}")), dir.join(&format!("ready-{name}")));
            let child = lockctl()
                .args(["run", &spec, "--", "sh", "-c", TRAPPING, "sh"])
                .args([got.as_os_str(), ready.as_os_str(), name.as_ref()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            wait_until("the command to run", || ready.exists());
            send_signal(child.id(), signal);
            let out = finish(child);
            assert_eq!(out.code(), 3, "{spec} {name}: the command's own status: {out:?}");
            assert_eq!(std::fs::read_to_string(&got).unwrap(), format!("{name}\n"));
            assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0, "{spec}: released after {name}");
        }

        // A command that does not trap it dies of it, as a shell reports.
        let ready = dir.join("ready-plain");
        let child = lockctl()
            .args(["run", &spec, "--", "sh", "-c", r#": > "$1"; exec sleep 1000"#, "sh"])
            .arg(&ready)
            .spawn()
            .unwrap();
        wait_until("the command to run", || ready.exists());
        // The shell, or the sleep it has become: either dies of it.
        send_signal(child.id(), libc::SIGTERM);
        let out = finish(child);
        assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{out:?}");
    });
}

#[test]
fn a_signal_while_waiting_ends_the_wait_without_the_lock_or_a_queue_place() {
    each_scheme("interrupt", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let holder = Holder::start(dir, &spec, &[]);
        let ran = dir.join("ran");
        let mut waiter = lockctl()
            .args(["run", &spec, "--", "touch"])
            .arg(&ran)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Its report on stderr says it waits.
        let (said, lines) = mpsc::channel();
        let stderr = BufReader::new(waiter.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let _ = said.send(line.unwrap());
            }
        });
        let report = lines.recv_timeout(PATIENCE).expect("a report of the wait");
        assert!(report.contains(&format!("held by pid {}", holder.pid())), "{report}");
        send_signal(waiter.id(), libc::SIGTERM);
        let status = wait_exit(&mut waiter);
        assert_eq!(status.code(), Some(128 + libc::SIGTERM));
        let rest: Vec<String> = lines.iter().collect();
        assert!(rest.iter().any(|line| line.contains("stopped by SIGTERM while waiting")), "{rest:?}");
        assert!(!ran.exists(), "the command ran without the lock");

        assert_eq!(holder.release().code(), 0);
        // Nobody is ahead in a queue: the next caller gets it at once.
        let (code, json) = status_json(&spec);
        assert_eq!(code, 0, "{json:?}");
        assert_eq!(json.get("queue_length").u64(), 0, "{json:?}");
        assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0);
    });
}

/// A lockctl killed outright no longer holds the lock for its command
/// (the kernel lets go of a flock lock; the others are broken by the next
/// acquirer, who finds lockctl dead): the command gets the lost signal.
#[test]
fn a_command_whose_lockctl_is_killed_gets_the_lost_signal() {
    each_scheme("orphan", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let (got, ready) = (dir.join("got"), dir.join("ready"));
        let mut child = lockctl()
            .args(["run", "--lost-signal", "USR1", &spec, "--", "sh", "-c", TRAPPING, "sh"])
            .args([got.as_os_str(), ready.as_os_str(), "USR1".as_ref()])
            .spawn()
            .unwrap();
        wait_until("the command to run", || ready.exists());
        send_signal(child.id(), libc::SIGKILL);
        assert_eq!(wait_exit(&mut child).code(), None, "killed");
        // The trap's `echo > got` makes the file before it writes the line.
        wait_until("the command to get the lost signal", || {
            std::fs::read_to_string(&got).is_ok_and(|said| said.ends_with('\n'))
        });
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "USR1\n");
        // The next acquirer gets the lock of the dead lockctl at once, and
        // its command and its user are told that the holder died.
        let out = lockctl_run(&["run", "-n", &spec, "-c", "echo \"$LOCK_TOOK_OVER\""]);
        assert_eq!((out.code(), out.stdout.as_str()), (0, "dead\n"), "{out:?}");
        let said = format!("over from pid {} on ", child.id());
        assert!(out.stderr.contains(&said) && out.stderr.contains("which died holding it"), "{out:?}");
        // Only that acquisition: the next one follows a release.
        let out = lockctl_run(&["run", "-n", &spec, "-c", "echo \"${LOCK_TOOK_OVER-unset}\""]);
        assert_eq!((out.code(), out.stdout.as_str(), out.stderr.as_str()), (0, "unset\n", ""), "{out:?}");
    });
}

/// A library preloaded into lockctl that holds its child back before it
/// arms the signal of its parent's death (`PR_SET_PDEATHSIG`), long enough
/// for a test to kill lockctl between the fork and the exec; it makes the
/// file named by `LOCKCTL_TEST_FORKED` first. Built with the system's C
/// compiler, in `dir`; `None` without one.
fn late_orphan_shim(dir: &TestDir) -> Option<std::path::PathBuf> {
    const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int prctl(int option, ...) {
    va_list ap;
    va_start(ap, option);
    unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long);
    unsigned long c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
    va_end(ap);
    const char *forked = getenv("LOCKCTL_TEST_FORKED");
    if (option == PR_SET_PDEATHSIG && forked) {
        int fd = open(forked, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
        struct timespec pause = { 0, 500 * 1000 * 1000 };
        nanosleep(&pause, 0);
    }
    return syscall(SYS_prctl, option, a, b, c, d);
}
"#;
    let (source, shim) = (dir.join("late_orphan.c"), dir.join("late_orphan.so"));
    std::fs::write(&source, SOURCE).ok()?;
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .args([shim.as_os_str(), source.as_os_str()])
        .status()
        .is_ok_and(|status| status.success());
    built.then_some(shim)
}

/// A lockctl killed after it forked its command's process and before that
/// process could arm the signal of its parent's death: the command never
/// runs (the lock is no longer held for it), and the process says so and
/// leaves quietly, with no abort of the runtime on the way.
#[test]
fn a_command_whose_lockctl_dies_before_it_starts_never_runs() {
    let shim_dir = TestDir::new("unborn-shim");
    let Some(shim) = late_orphan_shim(&shim_dir) else {
        eprintln!("skipped: no C compiler (cc) to build the preloaded library");
        return;
    };
    each_scheme("unborn", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let (forked, ran) = (dir.join("forked"), dir.join("ran"));
        let mut child = lockctl()
            .env("LD_PRELOAD", &shim)
            .env("LOCKCTL_TEST_FORKED", &forked)
            .args(["run", &spec, "--", "touch"])
            .arg(&ran)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until("lockctl to fork the command's process", || forked.exists());
        send_signal(child.id(), libc::SIGKILL);
        assert_eq!(wait_exit(&mut child).code(), None, "killed");
        // The end of the pipe: the orphan, its last writer, is gone.
        let mut said = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
        assert_eq!(said, "lockctl: ended before 'touch' could start; it was not run\n");
        assert!(!ran.exists(), "the command ran without the lock");
    });
}

/// `LOCK_TOOK_OVER` is this acquisition's: a value in lockctl's own
/// environment (an outer run's) does not reach the command.
#[test]
fn a_lock_taken_over_from_nobody_unsets_an_inherited_took_over() {
    each_scheme("inherited", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let child = lockctl()
            .args(["run", "-n", &spec, "-c", "echo \"${LOCK_TOOK_OVER-unset}\""])
            .env("LOCK_TOOK_OVER", "dead")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish(child);
        assert_eq!((out.code(), out.stdout.as_str()), (0, "unset\n"), "{out:?}");
    });
}

/// Ctrl-C typed at lockctl's terminal: the terminal sends SIGINT to its
/// whole foreground process group, lockctl's. A command still in that group
/// has its own copy, and is not sent another (its trap sees one); a command
/// that left the group (`setsid`) gets none from the terminal, and lockctl
/// passes it on. Run on a pseudo-terminal whose session lockctl leads.
#[test]
fn ctrl_c_at_the_terminal_reaches_the_command_once_wherever_its_process_group() {
    each_scheme("ctrl-c", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        // In lockctl's group: the trap counts the SIGINTs it gets.
        let (got, ready) = (dir.join("got-own-group"), dir.join("ready-own-group"));
        let counting =
            r#"trap 'echo INT >> "$1"' INT; : > "$2"; while [ ! -s "$1" ]; do sleep 0.01; done; sleep 0.2; exit 3"#;
        let out = at_a_terminal_type_ctrl_c(&["run", &spec, "--", "sh", "-c", counting, "sh"], &got, &ready);
        assert_eq!(out.code(), Some(3), "{spec}: the command's own status: {out:?}");
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "INT\n", "{spec}: one SIGINT, not two");
        // In a session of its own: only lockctl can tell it.
        let (got, ready) = (dir.join("got-own-session"), dir.join("ready-own-session"));
        let leaving = r#": > "$2"; exec setsid sleep 1000"#;
        let out = at_a_terminal_type_ctrl_c(&["run", &spec, "--", "sh", "-c", leaving, "sh"], &got, &ready);
        assert_eq!(
            out.code(),
            Some(128 + libc::SIGINT),
            "{spec}: the command died of the SIGINT lockctl sent: {out:?}"
        );
        assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0, "{spec}: released");
    });
}

/// Runs lockctl with `args` and then `got ready` as the command's last
/// arguments, in a session of its own whose controlling terminal is a new
/// pseudo-terminal; once the command has made `ready`, types Ctrl-C there.
fn at_a_terminal_type_ctrl_c(
    args: &[&str],
    got: &std::path::Path,
    ready: &std::path::Path,
) -> std::process::ExitStatus {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors through the valid pointers and
    // reads no name, termios or window size (all NULL).
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty made both descriptors, and nothing else owns them.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let terminal = slave.try_clone().unwrap();
    let mut command = lockctl();
    command.args(args).args([got, ready]);
    command.stdin(Stdio::from(slave.try_clone().unwrap()));
    command.stdout(Stdio::from(slave.try_clone().unwrap())).stderr(Stdio::from(slave));
    let terminal_fd = std::os::fd::AsRawFd::as_raw_fd(&terminal);
    // SAFETY: between fork and exec the closure calls only setsid and
    // ioctl, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(terminal_fd, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    drop(terminal);
    // What lockctl writes to the terminal is read and dropped, so that no
    // write of its blocks.
    let mut reader = std::fs::File::from(master.try_clone().unwrap());
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    wait_until("the command to run", || ready.exists() || child.try_wait().unwrap().is_some());
    let mut typing = std::fs::File::from(master);
    std::io::Write::write_all(&mut typing, b"\x03").unwrap();
    wait_exit(&mut child)
}

/// How long a look at a lock waits for its guard: a guard section lasts a
/// few system calls.
const GUARD_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

/// A `lockctl run` waiting in line, stopped with SIGSTOP; continued (and
/// killed, if the test did not wait for it) when dropped.
struct StoppedWaiter(std::process::Child);

impl StoppedWaiter {
    /// Starts a waiter for `spec`, waits until the line holds `in_line`
    /// (the holder counted), and stops it outside the few system calls in
    /// which it holds the lock's guard (a probe of the lock, a try of the
    /// head): a waiter stopped inside one keeps every other caller busy,
    /// which is the guard's case, not the line's.
    fn join(spec: &str, in_line: u64) -> StoppedWaiter {
        let child = lockctl()
            .args(["run", "-q", spec, "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the waiter in line", || status_json(spec).1.get("queue_length").u64() >= in_line);
        let mut look = lockcore::Lock::open(spec.as_bytes()).unwrap();
        wait_until("the waiter stopped outside a guard section", || {
            send_signal(child.id(), libc::SIGSTOP);
            let guard_held =
                matches!(look.inspect_within(GUARD_LOOK), Err(lockcore::Error::Busy(lockcore::Contention::GuardHeld)));
            if guard_held {
                send_signal(child.id(), libc::SIGCONT);
            }
            !guard_held
        });
        StoppedWaiter(child)
    }

    /// Continues it, and waits for it to take its turn and end.
    fn resume_and_finish(mut self) -> Option<i32> {
        send_signal(self.0.id(), libc::SIGCONT);
        wait_exit(&mut self.0).code()
    }
}

impl Drop for StoppedWaiter {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            send_signal(self.0.id(), libc::SIGCONT);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Two waiters stopped at the head of a lock's line (Ctrl-Z; a process dead
/// and not yet reaped looks the same to the line), and the lock let go: a
/// waiter behind them gets it once the line has stood still, and so does a
/// caller that will not wait; the stopped ones, continued, queue again and
/// take their turns.
#[test]
fn two_stopped_waiters_at_the_head_of_the_line_keep_a_free_lock_from_nobody() {
    each_of("stopped-line", &file_schemes(), |scheme, dir| {
        let spec = dir.spec(scheme, "");
        for caller_waits in [true, false] {
            let holder = Holder::start(dir, &spec, &[]);
            let first = StoppedWaiter::join(&spec, 2);
            let second = StoppedWaiter::join(&spec, 3);
            // While the lock is held, a try is busy, queued behind them,
            // before the line counts as stalled and after.
            let trying = std::time::Instant::now();
            while trying.elapsed() < std::time::Duration::from_millis(100) {
                let out = lockctl_run(&["run", "-n", &spec, "--", "true"]);
                assert_eq!(out.code(), CONFLICT, "a try while the lock is held: {out:?}");
                assert!(out.stderr.contains("queued ahead"), "a try while the lock is held: {out:?}");
            }
            assert_eq!(holder.release().code(), 0);
            if caller_waits {
                let out = lockctl_run(&["run", "-w", "30", &spec, "--", "true"]);
                assert_eq!(out.code(), 0, "a waiter behind the stopped line: {out:?}");
            } else {
                wait_until("a try to get the free lock past the stopped line", || {
                    lockctl_run(&["run", "-n", &spec, "--", "true"]).code() == 0
                });
            }
            assert_eq!(first.resume_and_finish(), Some(0), "the first stopped waiter, continued");
            assert_eq!(second.resume_and_finish(), Some(0), "the second stopped waiter, continued");
        }
    });
}

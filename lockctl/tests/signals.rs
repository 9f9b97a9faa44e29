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

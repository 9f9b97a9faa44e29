//! `lockctl run` as a script uses it, on every scheme: the command's
//! status and environment, `-c`, and the flock(1) flags that say what to do
//! when the lock is held (`-n`, `-w`, `-E`), with their exit statuses.

mod common;

use std::process::Stdio;

use common::*;

#[test]
fn the_command_gets_the_fence_and_spec_and_its_status_becomes_lockctls() {
    each_scheme("status", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let mut fences = Vec::new();
        for exit in [0, 7, 255] {
            let script = format!("echo \"$LOCK_FENCE\"; echo \"$LOCK_SPEC\"; exit {exit}");
            let out = lockctl_run(&["run", &spec, "--", "sh", "-c", &script]);
            assert_eq!(out.code(), exit, "{spec}: {out:?}");
            let mut lines = out.stdout.lines();
            fences.push(lines.next().unwrap().parse::<u64>().unwrap());
            assert_eq!(lines.next(), Some(spec.as_str()), "{out:?}");
        }
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{spec}: fences must increase: {fences:?}");
    });
}

#[test]
fn a_command_line_runs_with_sh_dash_c() {
    each_scheme("dash-c", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let out = lockctl_run(&["run", &spec, "-c", "echo \"fence $LOCK_FENCE\" | tr a-z A-Z; exit 3"]);
        assert_eq!(out.code(), 3, "{out:?}");
        assert!(out.stdout.starts_with("FENCE "), "{out:?}");
        // Options may also come before the spec, as with flock(1).
        let out = lockctl_run(&["run", "-c", "exit 4", &spec]);
        assert_eq!(out.code(), 4, "{out:?}");
    });
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_its_number() {
    each_scheme("signal-death", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        for signal in [libc::SIGKILL, libc::SIGTERM, libc::SIGSEGV] {
            let out = lockctl_run(&["run", &spec, "--", "sh", "-c", &format!("kill -{signal} $$")]);
            assert_eq!(out.code(), 128 + signal, "{spec}: {out:?}");
        }
        // The lock was released all the same.
        assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0);
    });
}

#[test]
fn a_held_lock_gives_the_conflict_status_at_once_with_n_and_after_w() {
    each_scheme("conflict", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let holder = Holder::start(dir, &spec, &[]);
        let ran = dir.join("ran");
        let command = format!("touch {}", ran.display());

        let out = lockctl_run(&["run", "-n", &spec, "-c", &command]);
        assert_eq!(out.code(), CONFLICT, "{out:?}");
        // The message names the spec, the operation and the holder.
        let expected = format!("cannot acquire '{spec}'");
        assert!(out.stderr.contains(&expected), "{out:?}");
        assert!(out.stderr.contains(&format!("held by pid {}", holder.pid())), "{out:?}");

        assert_eq!(lockctl_run(&["run", "-n", "-E", "42", &spec, "-c", &command]).code(), 42);
        assert_eq!(lockctl_run(&["run", "--nonblock", "--conflict-exit-code=0", &spec, "-c", &command]).code(), 0);
        // -w 0 is -n, as in flock(1).
        assert_eq!(lockctl_run(&["run", "-w", "0", &spec, "-c", &command]).code(), CONFLICT);
        let out = lockctl_run(&["run", "-w", "0.3", "-E", "9", &spec, "-c", &command]);
        assert_eq!(out.code(), 9, "{out:?}");
        assert!(out.stderr.contains("the wait budget ran out"), "{out:?}");
        // -q: the status only.
        let out = lockctl_run(&["run", "-q", "-w", ".2", &spec, "-c", &command]);
        assert_eq!((out.code(), out.stderr.as_str()), (CONFLICT, ""), "{out:?}");
        assert!(!ran.exists(), "{spec}: a command ran without the lock");

        assert_eq!(holder.release().code(), 0);
        assert_eq!(lockctl_run(&["run", "-n", &spec, "-c", &command]).code(), 0);
        assert!(ran.exists());
    });
}

#[test]
fn a_waiter_says_on_stderr_who_holds_the_lock_and_for_how_long() {
    each_scheme("report", |scheme, dir| {
        let spec = dir.spec(scheme, "ttl=1h");
        let holder = Holder::start(dir, &spec, &[]);
        // Not a terminal: a line after a second of waiting, then every five.
        let out = lockctl_run(&["run", "-w", "1.5", &spec, "true"]);
        assert_eq!(out.code(), CONFLICT, "{out:?}");
        let report = out.stderr.lines().find(|line| line.contains("waiting")).unwrap_or_else(|| panic!("{out:?}"));
        let holder_for = format!("lockctl: waiting 1s; held by pid {} on ", holder.pid());
        assert!(report.starts_with(&holder_for), "{report}");
        // An hour's ttl, a second or two of it gone.
        assert!(report.contains(", expires in 59m"), "{report}");
        assert!(report.ends_with(&format!("; lock {spec}")), "{report}");
        assert_eq!(holder.release().code(), 0);
    });
}

#[test]
fn a_cooldown_keeps_the_lock_closed_after_the_command() {
    each_scheme("cooldown", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        assert_eq!(lockctl_run(&["run", "--cooldown", "1h", &spec, "true"]).code(), 0);
        let out = lockctl_run(&["run", "-n", &spec, "true"]);
        assert_eq!(out.code(), CONFLICT, "{out:?}");
        assert!(out.stderr.contains("cooling down until"), "{out:?}");
        let (code, json) = status_json(&spec);
        assert_eq!((code, json.get("state").str()), (CONFLICT, "cooling-down"), "{json:?}");
    });
}

#[test]
fn usage_spec_and_command_errors_have_their_own_statuses_and_say_why() {
    let dir = TestDir::new("errors");
    let spec = dir.spec(Scheme::ALL[0], "");
    let usage: &[&[&str]] = &[
        &[],
        &["frobnicate"],
        &["run"],
        &["run", &spec],
        &["run", "-x", &spec, "true"],
        &["run", "-w", "soon", &spec, "true"],
        &["run", "-E", "256", &spec, "true"],
        &["run", "--lost-signal", "NOPE", &spec, "true"],
        &["run", "--ttl", "5", &spec, "true"],
        &["run", "--autorenew", &spec, "true"],
        &["run", "-c", "true", &spec, "false"],
        &["status"],
        &["status", &spec, &spec],
        &["wait", "-w"],
        &["--version", "extra"],
        &["--help", "extra"],
        &["schemes", "extra"],
    ];
    for args in usage {
        let out = lockctl_run(args);
        assert_eq!(out.code(), USAGE, "{args:?}: {out:?}");
        assert!(out.stderr.starts_with("lockctl: ") && out.stderr.ends_with("Try 'lockctl --help'.\n"), "{out:?}");
    }

    let out = lockctl_run(&["run", "nosuch:/tmp/x", "true"]);
    assert_eq!(out.code(), DATA, "{out:?}");
    assert!(out.stderr.contains("cannot open 'nosuch:/tmp/x'") && out.stderr.contains("unknown scheme"), "{out:?}");
    let bad_ttl = format!("{spec}?ttl=soon");
    let out = lockctl_run(&["run", &bad_ttl, "true"]);
    assert_eq!(out.code(), DATA, "{out:?}");
    assert!(out.stderr.contains("'ttl'"), "{out:?}");

    let missing = format!("{}:{}/no/such/dir/lock", Scheme::ALL[0].name(), dir.path().display());
    let out = lockctl_run(&["run", &missing, "true"]);
    assert_eq!(out.code(), 66, "{out:?}");
    assert!(out.stderr.contains("cannot acquire") && out.stderr.contains("does not exist"), "{out:?}");

    let out = lockctl_run(&["run", &spec, "--", "/no/such/program"]);
    assert_eq!(out.code(), UNAVAILABLE, "{out:?}");
    assert!(out.stderr.contains("cannot execute '/no/such/program'"), "{out:?}");
    // The lock was released after the failed start.
    assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0);
}

#[test]
fn help_and_version_and_schemes_list_what_this_build_has() {
    let help = lockctl_run(&["--help"]);
    assert_eq!(help.code(), 0);
    for needle in ["lockctl run SPEC", "-w, --wait SECONDS", "LOCK_FENCE", "Exit status:", "75", "128+N"] {
        assert!(help.stdout.contains(needle), "{needle:?} missing from --help");
    }
    // Every status the manual lists, the help lists too.
    let manual = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/lockctl.1")).unwrap();
    let statuses = manual
        .split(".SH EXIT STATUS")
        .nth(1)
        .and_then(|rest| rest.split("\n.SH ").next())
        .expect("the manual has an EXIT STATUS section");
    let listed: Vec<&str> = statuses
        .lines()
        .filter_map(|line| line.strip_prefix(".B "))
        .filter(|word| word.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert!(listed.len() > 10, "the manual's statuses: {listed:?}");
    for status in listed {
        let line_start = format!("\n{status:>5}  ");
        assert!(help.stdout.contains(&line_start), "status {status} of the manual missing from --help");
    }
    for command in ["run", "status", "wait", "break", "schemes"] {
        let asked = lockctl_run(&[command, "--help"]);
        assert_eq!((asked.code(), &asked.stdout), (0, &help.stdout), "lockctl {command} --help");
    }
    let version = lockctl_run(&["--version"]);
    assert_eq!(version.stdout, format!("lockctl {}\n", env!("CARGO_PKG_VERSION")));
    let schemes = lockctl_run(&["schemes"]);
    let listed: Vec<&str> = schemes.stdout.lines().map(|line| line.split_whitespace().next().unwrap()).collect();
    let expected: Vec<&str> = Scheme::ALL.iter().map(|scheme| scheme.name()).collect();
    assert_eq!(listed, expected);
}

/// `lockctl` with its stderr a pipe that nobody reads any more (a cron
/// job's mailer that died, `2>&1 | head -1`): its messages are lost, and
/// nothing else. The status is the one it would have given, and a lock
/// taken over from a dead holder, which it reports, still runs the command.
#[test]
fn a_stderr_that_nobody_reads_changes_no_status() {
    let with_stderr_unread = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = lockctl().args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(writer).status().unwrap();
        status.code().unwrap_or_else(|| panic!("{args:?}: lockctl died of a signal: {status:?}"))
    };
    each_scheme("stderr-unread", |scheme, dir| {
        let spec = dir.spec(scheme, "ttl=30s");
        assert_eq!(with_stderr_unread(&["run"]), USAGE);
        assert_eq!(with_stderr_unread(&["run", "nosuch:/tmp/x", "true"]), DATA);
        let mut holder = Holder::start(dir, &spec, &[]);
        assert_eq!(with_stderr_unread(&["run", "-n", &spec, "true"]), 1, "{spec}: held");
        if scheme.breaks_stale_locks() {
            send_signal(holder.pid(), libc::SIGKILL);
            holder.child.wait().unwrap();
            let ran = dir.join("ran");
            let command = format!("touch {}", ran.display());
            assert_eq!(with_stderr_unread(&["run", &spec, "-c", &command]), 0, "{spec}: taken over from the dead");
            assert!(ran.exists(), "{spec}: the command did not run");
        }
        // Ends the holder's command, which outlives a killed lockctl.
        holder.release();
    });
}

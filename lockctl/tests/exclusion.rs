//! Mutual exclusion, proven with several concurrent processes and an
//! overlap detector (a directory only one critical section may make, and
//! a counter that loses updates when two run at once): lockctl processes
//! among themselves on every scheme; lockctl and util-linux `flock(1)` on
//! one file (`flock:` is flock(2) on the target itself); lockctl and
//! Perl's LockFile::Simple on `lockfile:`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Contending processes of each kind, and critical sections each runs.
const PROCESSES: usize = 4;
const ROUNDS: usize = 5;

/// Runs `PROCESSES` threads at once, each running `command(process)` to
/// its end `ROUNDS` times; every run must succeed.
fn contend(command: impl Fn(usize) -> Command + Sync) {
    std::thread::scope(|scope| {
        for process in 0..PROCESSES {
            let command = &command;
            scope.spawn(move || {
                for _ in 0..ROUNDS {
                    let mut command = command(process);
                    let out = finish(command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
                    assert!(out.status.success(), "{command:?}: {out:?}");
                }
            });
        }
    });
}

fn lockctl_section(spec: &str, dir: &Path) -> Command {
    let mut command = lockctl();
    command.args(["run", "-q", spec, "--", "sh", "-c", CRITICAL_SECTION, "sh"]).arg(dir);
    command
}

#[test]
fn lockctl_processes_exclude_each_other_on_every_scheme() {
    each_scheme("exclusion", |scheme, dir| {
        let spec = dir.spec(scheme, "ttl=1h");
        prepare_counter(dir.path());
        contend(|_| lockctl_section(&spec, dir.path()));
        assert_exclusive(dir.path(), PROCESSES * ROUNDS, &spec);
    });
}

#[test]
fn lockctl_and_util_linux_flock_exclude_each_other_on_one_file() {
    if !tool_present("flock", &["--version"]) {
        assert!(std::env::var_os("CI").is_none(), "CI must have util-linux flock(1)");
        eprintln!("skipped: util-linux flock(1) is not installed");
        return;
    }
    let dir = TestDir::new("flock-interop");
    let data = dir.join("data");
    let spec = format!("flock:{}", data.display());
    prepare_counter(dir.path());
    contend(|process| {
        if process % 2 == 0 {
            lockctl_section(&spec, dir.path())
        } else {
            let mut command = Command::new("flock");
            command.arg(&data).args(["sh", "-c", CRITICAL_SECTION, "sh"]).arg(dir.path());
            command
        }
    });
    assert_exclusive(dir.path(), PROCESSES * ROUNDS, "lockctl and flock(1)");

    // And a flock(1) holder keeps lockctl out, as lockctl keeps flock(1) out.
    let holder = Holder::start(&dir, &spec, &[]);
    let out = Command::new("flock").args(["-n", "-E", "7"]).arg(&data).arg("true").status().unwrap();
    assert_eq!(out.code(), Some(7), "flock(1) took a file lockctl holds");
    assert_eq!(holder.release().code(), 0);
    let mut flock_holder = Command::new("flock")
        .arg(&data)
        .args(["sh", "-c", r#": > "$1"; read line; exit 0"#, "sh"])
        .arg(dir.join("flock-ready"))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("flock(1) to hold the file", || dir.join("flock-ready").exists());
    let out = lockctl_run(&["run", "-n", &spec, "true"]);
    assert_eq!(out.code(), CONFLICT, "lockctl took a file flock(1) holds: {out:?}");
    drop(flock_holder.stdin.take());
    assert!(wait_exit(&mut flock_holder).success());
    assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), 0);
}

/// Makes sleep() sub-second inside LockFile::Simple, so that a waiting
/// Perl process retries every few milliseconds instead of every second.
const PERL_CONTENDER: &str = r#"
BEGIN { require Time::HiRes; no warnings; *CORE::GLOBAL::sleep = \&Time::HiRes::sleep; }
use strict; use warnings; use LockFile::Simple;
my ($data, $dir, $section, $rounds) = @ARGV;
my $m = LockFile::Simple->make(-delay => 0.01, -max => 100000, -warn => 0, -hold => 0);
for (1 .. $rounds) {
    $m->lock($data) or die "lock failed\n";
    system('sh', '-c', $section, 'sh', $dir) == 0 or die "critical section failed\n";
    $m->unlock($data) or die "unlock failed\n";
}
"#;

#[test]
fn lockctl_and_perl_lockfile_simple_exclude_each_other_on_lockfile() {
    if !tool_present("perl", &["-MLockFile::Simple", "-e1"]) {
        assert!(std::env::var_os("CI").is_none(), "CI must install liblockfile-simple-perl");
        eprintln!("skipped: perl with LockFile::Simple is not installed");
        return;
    }
    let dir = TestDir::new("perl-interop");
    let data = dir.join("data");
    prepare_counter(dir.path());
    // Perl runs as an unprivileged user where we can: LockFile::Simple
    // tests for the lock file, then opens it with open(">"), and only the
    // permission check on a lock file that is read-only keeps that open
    // from truncating a lock made in between; root passes every check.
    // Two users then share the lock (mode=0666) and the counter's files.
    let as_nobody = is_root();
    let spec = match as_nobody {
        true => format!("lockfile:{}?mode=0666", data.display()),
        false => format!("lockfile:{}", data.display()),
    };
    if as_nobody {
        std::fs::write(dir.join("overlaps"), "").unwrap();
        for (path, mode) in
            [(dir.path().to_path_buf(), 0o777), (dir.join("counter"), 0o666), (dir.join("overlaps"), 0o666)]
        {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        }
    }
    contend(|process| {
        if process % 2 == 0 {
            lockctl_section(&spec, dir.path())
        } else {
            let mut command = Command::new("perl");
            command.args(["-e", PERL_CONTENDER]).arg(&data).arg(dir.path()).args([CRITICAL_SECTION, "1"]);
            if as_nobody {
                std::os::unix::process::CommandExt::uid(&mut command, 65534);
                std::os::unix::process::CommandExt::gid(&mut command, 65534);
            }
            command
        }
    });
    assert_exclusive(dir.path(), PROCESSES * ROUNDS, "lockctl and LockFile::Simple");
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

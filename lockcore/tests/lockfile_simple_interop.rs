//! `lockfile` and Perl's LockFile::Simple, on the same lock file, exclude
//! each other: a Perl CGI script and a C program using this library can share
//! a data file. Needs `perl` and LockFile::Simple (Debian package
//! liblockfile-simple-perl); without them the tests say they are skipped,
//! except under CI, where that is a failure. Only `lockfile` keeps its lock
//! in LockFile::Simple's format; no other scheme's lock is a file that
//! module reads or writes, so these tests are about that scheme alone.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockcore::{Contention, Error, Liveness, Lock};

/// Makes sleep() sub-second inside LockFile::Simple, so a waiting Perl
/// process retries every few milliseconds instead of every second.
const PERL_PRELUDE: &str = r#"
BEGIN { require Time::HiRes; no warnings; *CORE::GLOBAL::sleep = \&Time::HiRes::sleep; }
use strict; use warnings; use LockFile::Simple; use Fcntl;
$| = 1;
"#;

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcore-perl-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn spec(data: &Path) -> String {
    format!("lockfile:{}", data.display())
}

/// A Perl process that takes the lock, says "locked", and unlocks when its
/// stdin closes.
fn perl_holder(data: &Path, options: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let script = format!(
        "{PERL_PRELUDE}
         my $m = LockFile::Simple->make(-delay => 0.01, -max => 500, -warn => 0 {options});
         $m->lock($ARGV[0]) or die qq(lock failed\\n);
         print qq(locked\\n);
         my $ignored = <STDIN>;
         $m->unlock($ARGV[0]) or die qq(unlock failed\\n);"
    );
    let mut child = Command::new("perl")
        .args(["-e", &script, data.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "locked\n", "perl did not take the lock");
    (child, out)
}

fn perl_trylock(data: &Path) -> bool {
    let script = format!(
        "{PERL_PRELUDE}
         my $m = LockFile::Simple->make(-warn => 0, -stale => 1);
         exit($m->trylock($ARGV[0]) ? 0 : 3);"
    );
    let status = Command::new("perl").args(["-e", &script, data.to_str().unwrap()]).status().unwrap();
    match status.code() {
        Some(0) => true,
        Some(3) => false,
        other => panic!("perl trylock failed to run: {other:?}"),
    }
}

#[test]
fn a_perl_holder_excludes_us_until_it_unlocks() {
    if !common::perl_available() {
        return;
    }
    let dir = temp_dir("holder");
    let data = dir.join("board.txt");
    let (mut perl, _out) = perl_holder(&data, "");

    let mut lock = Lock::open(spec(&data).as_bytes()).unwrap();
    match lock.try_acquire() {
        Err(Error::Busy(Contention::Held(holder))) => assert_eq!(holder.pid, perl.id() as i32, "busy, held by perl"),
        other => panic!("perl's lock: {other:?}"),
    }
    let seen = lock.inspect().unwrap().holder.expect("perl's lock is visible");
    assert_eq!(seen.pid, perl.id() as i32);
    assert_eq!(seen.liveness, Liveness::Alive);
    assert!(seen.record.is_none(), "a LockFile::Simple stamp is a foreign record");

    drop(perl.stdin.take()); // perl unlocks and exits
    assert!(perl.wait().unwrap().success());
    lock.try_acquire().expect("free once perl unlocked");
    lock.release(Duration::ZERO).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn our_lock_excludes_perl_and_perl_reads_our_pid() {
    if !common::perl_available() {
        return;
    }
    let dir = temp_dir("ours");
    let data = dir.join("board.txt");
    let mut lock = Lock::open(spec(&data).as_bytes()).unwrap();
    lock.try_acquire().unwrap();
    // Perl's trylock with -stale => 1 reads our first line, finds our pid
    // alive, and must not break the lock.
    assert!(!perl_trylock(&data), "perl got a lock we hold");
    lock.release(Duration::ZERO).unwrap();
    assert!(perl_trylock(&data), "perl could not lock a free file");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_perl_holder_is_broken_at_once_and_perl_breaks_ours() {
    if !common::perl_available() {
        return;
    }
    let dir = temp_dir("killed");
    let data = dir.join("board.txt");
    let (mut perl, _out) = perl_holder(&data, "");
    perl.kill().unwrap();
    perl.wait().unwrap();

    // The stamp names a dead pid: stale at once under the default stale=pid,
    // with no TTL at all.
    let mut lock = Lock::open(spec(&data).as_bytes()).unwrap();
    let fence = lock.try_acquire().expect("a dead perl holder's lock is broken").fence;
    assert!(fence >= 1);

    // And the other way round: a lock of ours left by a holder that died
    // (SIGKILLed, say), in our own format. Perl's stale check reads its
    // first line, the pid, and finds it dead.
    lock.release(Duration::ZERO).unwrap();
    let lock_path = dir.join("board.txt.lock");
    let dead_pid = common::dead_pid();
    common::leave_lock(&spec(&data), common::owner_as(dead_pid, 1));
    let first_line = std::fs::read_to_string(&lock_path).unwrap().lines().next().unwrap().to_owned();
    assert_eq!(first_line, dead_pid.to_string());
    assert!(perl_trylock(&data), "perl did not break our dead holder's lock");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Perl and Rust processes increment one counter under one lock file; an
/// `O_EXCL` marker file, created on entry and removed on exit, catches two
/// inside at once in either language.
#[test]
fn perl_and_lockcore_processes_share_a_counter_without_overlap() {
    if !common::perl_available() {
        return;
    }
    const EACH: u32 = 100;
    const PER_LANGUAGE: u32 = 3;
    let dir = temp_dir("counter");
    let data = dir.join("counter.txt");
    let marker = dir.join("inside");
    // Every contender waits for this file, so that all of them run at once.
    let go = dir.join("go");
    std::fs::write(&data, "0\n").unwrap();
    // Perl runs as an unprivileged user where we can: as root, its
    // open(">lockfile") would truncate our read-only lock file, which
    // LockFile::Simple's design relies on the permission check to prevent.
    let as_nobody = is_root();
    // Two users then share the lock: the spec says so (mode=0666), or
    // lockcore would not trust the directory nobody may write to, nor the
    // lock files nobody makes in it.
    let lock_spec = if as_nobody { format!("{}?mode=0666", spec(&data)) } else { spec(&data) };
    if as_nobody {
        set_mode(&dir, 0o777);
        set_mode(&data, 0o666);
    }

    let script = format!(
        "{PERL_PRELUDE}
         my ($file, $marker, $n, $go) = @ARGV;
         Time::HiRes::sleep(0.001) until -e $go;
         my $m = LockFile::Simple->make(-delay => 0.002, -max => 1_000_000, -hold => 0, -stale => 0, -warn => 0);
         my $overlaps = 0;
         for (1 .. $n) {{
             $m->lock($file) or die qq(lock failed\\n);
             if (sysopen(my $mk, $marker, O_CREAT | O_EXCL | O_WRONLY)) {{ close $mk }} else {{ $overlaps++ }}
             open(my $in, '<', $file) or die; my $v = <$in>; close $in;
             open(my $out, '>', $file) or die; print $out ($v + 1), qq(\\n); close $out;
             unlink $marker;
             $m->unlock($file) or die qq(unlock failed\\n);
         }}
         print qq(overlaps $overlaps\\n);"
    );
    let mut children = Vec::new();
    for _ in 0..PER_LANGUAGE {
        let mut perl = Command::new("perl");
        perl.args(["-e", &script, data.to_str().unwrap(), marker.to_str().unwrap(), &EACH.to_string()]);
        perl.arg(&go);
        if as_nobody {
            use std::os::unix::process::CommandExt;
            perl.uid(65534).gid(65534);
        }
        children.push(perl.stdout(Stdio::piped()).spawn().unwrap());
        let ours = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "lockcore_counter_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(
                "INTEROP_COUNTER",
                format!("{}\n{}\n{EACH}\n{}\n{lock_spec}", data.display(), marker.display(), go.display()),
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        children.push(ours);
    }
    std::fs::write(&go, "").unwrap();
    let mut overlaps = 0;
    for child in children {
        let output = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "a contender failed: {text}");
        // The test harness may print "test name ... " on the same line first.
        let reported = text
            .lines()
            .find_map(|l| l.split_once("overlaps ").map(|(_, n)| n.trim().parse::<u32>()))
            .unwrap_or_else(|| panic!("a contender did not report its overlaps: {text}"));
        overlaps += reported.unwrap();
    }
    let count: u32 = std::fs::read_to_string(&data).unwrap().trim().parse().unwrap();
    assert_eq!(overlaps, 0, "two processes were inside at once");
    assert_eq!(count, 2 * PER_LANGUAGE * EACH, "an update was lost");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lockcore side of the shared counter, run in its own process.
#[test]
#[ignore = "run by perl_and_lockcore_processes_share_a_counter_without_overlap"]
fn lockcore_counter_child() {
    let Ok(args) = std::env::var("INTEROP_COUNTER") else { return };
    let mut args = args.lines();
    let (data, marker) = (PathBuf::from(args.next().unwrap()), PathBuf::from(args.next().unwrap()));
    let each: u32 = args.next().unwrap().parse().unwrap();
    let go = PathBuf::from(args.next().unwrap());
    let lock_spec = args.next().unwrap().to_owned();
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut lock = Lock::open(lock_spec.as_bytes()).unwrap();
    let mut overlaps = 0;
    for _ in 0..each {
        lock.acquire(Some(Duration::from_secs(60))).unwrap();
        let fresh = std::fs::OpenOptions::new().write(true).create_new(true).open(&marker).is_ok();
        if !fresh {
            overlaps += 1;
        }
        let v: u32 = std::fs::read_to_string(&data).unwrap().trim().parse().unwrap();
        std::fs::File::create(&data).unwrap().write_all(format!("{}\n", v + 1).as_bytes()).unwrap();
        if fresh {
            std::fs::remove_file(&marker).unwrap();
        }
        lock.release(Duration::ZERO).unwrap();
    }
    println!("overlaps {overlaps}");
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

//! A wall clock that is wrong never breaks a live holder.
//!
//! The contender is a re-executed child of this test binary run under
//! libfaketime (Debian package `faketime`) with only the wall clock shifted
//! (`LD_PRELOAD=.../libfaketime.so.1 FAKETIME_DONT_FAKE_MONOTONIC=1
//! NO_FAKE_STAT=1 FAKETIME=+3600s` or `-3600s`): as after an operator's or
//! NTP's step, or on a host whose clock is off. The boot and monotonic
//! clocks stay true, as they do under any real step, and so do the file
//! times `stat` reports: without `NO_FAKE_STAT` libfaketime shifts those by
//! the same hour, which no clock step does (a `symlink` lock, whose expiry
//! is its link's mtime, then looks expired or moved, as after an operator's
//! `touch -h`, and a stamp's age looks unskewed). The child first checks
//! both (its `SystemTime::now()` is about an hour off the parent's, a file
//! the parent just made is not), so that no test here passes because the
//! clock was never shifted. Without libfaketime the tests say they are
//! skipped, except under CI, where that is a failure.
//!
//! * A live Perl LockFile::Simple holder (`stale=pid`): its stamp has no
//!   start time, only the file's mtime, so its liveness is judged by
//!   comparing its process's start with that mtime across clocks; an hour
//!   of skew either way, of the contender's clock or of the clock that
//!   stamped the file (its mtime set an hour back while Perl holds it), is
//!   within `lockcore::FOREIGN_CLOCK_TOLERANCE` (2 h). The contender is told
//!   `Busy`. The two skews together (2 h) are at that tolerance, not
//!   within it, and are not tried.
//! * A foreign stamp's age is its mtime against the wall clock: that is the
//!   peer's own rule (LockFile::Simple's `hold`), and a `ttl` shorter than
//!   the skew is met early by the contender whose clock runs ahead. Here
//!   the `ttl` is longer than the skew, and the stamp holds.
//! * Our own holder, on every scheme, with `ttl=60s`: its expiry is judged
//!   by the boot clock on this boot, so the contender an hour ahead is told
//!   `Busy`; with `ttl=1s`, once that second has really passed, the same
//!   contender gets in (`flock`, whose live holder nobody can take the lock
//!   from, gets in once the holder has released it).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{Contention, Error, ReleaseOutcome};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

// Shared-memory slots.
const OUTCOME: usize = 0;
const HOLDER_PID: usize = 1;
const SKEW_SEEN: usize = 2;

// What the contender's attempt came to.
const GOT_IN: u64 = 1;
const BUSY: u64 = 2;
const FAILED: u64 = 3;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "contender" => {
            let shm = Shm::open(var("SHM").as_ref());
            // The preload took effect: this process's wall clock is off by
            // the offset asked for (give or take the seconds the start took).
            let parent_now: i128 = var("PARENT_NOW").parse().unwrap();
            let offset: i128 = var("OFFSET").parse().unwrap();
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i128;
            let seen = now - parent_now;
            assert!((seen - offset).abs() < 300, "the wall clock is off by {seen} s, not {offset} s");
            // Only the clock: file times are what the file system keeps (the
            // shared memory file was made by the parent just now).
            let made = std::fs::metadata(var("SHM")).unwrap().modified().unwrap();
            let made = made.duration_since(UNIX_EPOCH).unwrap().as_secs() as i128;
            assert!((made - parent_now).abs() < 300, "file times are faked too: {} s off", made - parent_now);
            shm.at(SKEW_SEEN).store(1, SeqCst);

            let mut lock = open_lock(&var("SPEC"));
            let outcome = match lock.try_acquire() {
                Ok(_) => {
                    lock.release(Duration::ZERO).unwrap();
                    GOT_IN
                }
                Err(Error::Busy(Contention::Held(holder) | Contention::Queued { holder: Some(holder), .. })) => {
                    shm.at(HOLDER_PID).store(holder.pid as u64, SeqCst);
                    BUSY
                }
                Err(Error::Busy(_)) => BUSY,
                Err(e) => {
                    eprintln!("contender: {e:?}");
                    FAILED
                }
            };
            shm.at(OUTCOME).store(outcome, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

fn libfaketime_available() -> bool {
    let ok = Path::new(LIBFAKETIME).exists();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must install faketime");
        eprintln!("skipped: libfaketime (package faketime) is not installed");
    }
    ok
}

/// Runs one attempt on `spec` in a child whose wall clock is `offset_secs`
/// off; returns what it came to, and the pid a busy answer named.
fn contend(dir: &TestDir, spec: &str, offset_secs: i64) -> (u64, u64) {
    let shm_path = dir.join(&format!("shm-{}", std::process::id() as u64 ^ now_nanos()));
    let shm = Shm::create(&shm_path);
    let parent_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1", "--quiet"])
        .env(ROLE_VAR, "contender")
        .env("LOCKCORE_TEST_SHM", shm.path())
        .env("LOCKCORE_TEST_SPEC", spec)
        .env("LOCKCORE_TEST_OFFSET", offset_secs.to_string())
        .env("LOCKCORE_TEST_PARENT_NOW", parent_now.to_string())
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("NO_FAKE_STAT", "1")
        .env("FAKETIME", format!("{offset_secs:+}s"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_patiently(&mut child);
    assert!(status.success(), "the contender ({offset_secs:+} s) failed: {status:?}");
    assert_eq!(shm.get(SKEW_SEEN), 1, "the contender never checked its clock");
    let outcome = (shm.get(OUTCOME), shm.get(HOLDER_PID));
    drop(shm);
    std::fs::remove_file(&shm_path).unwrap();
    outcome
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

const HOUR: i64 = 3600;

// ---------------------------------------------------------------------------
// A live LockFile::Simple holder
// ---------------------------------------------------------------------------

/// A Perl process that takes the lock of `data`, says so, and unlocks when
/// its stdin closes.
fn perl_holder(data: &Path) -> std::process::Child {
    let script = "use strict; use warnings; use LockFile::Simple; $| = 1;
         my $m = LockFile::Simple->make(-max => 1, -warn => 0);
         $m->lock($ARGV[0]) or die qq(lock failed\\n);
         print qq(locked\\n);
         my $ignored = <STDIN>;
         $m->unlock($ARGV[0]) or die qq(unlock failed\\n);";
    let mut child = Command::new("perl")
        .args(["-e", script])
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "locked\n", "perl did not take the lock");
    child
}

#[test]
fn a_skewed_contender_never_breaks_a_live_lockfile_simple_holder() {
    if !libfaketime_available() || !perl_available() {
        return;
    }
    let dir = TestDir::new("skew-perl");
    let data = Scheme::Lockfile.target(dir.path());
    let lock_path = Scheme::Lockfile.lock_path(dir.path());
    let mut perl = perl_holder(&data);
    let perl_pid = perl.id() as u64;

    // stale=pid alone, and with a ttl longer than the skew.
    for query in ["", "ttl=3h"] {
        let spec = Scheme::Lockfile.spec(dir.path(), query);
        for offset in [HOUR, -HOUR, 0] {
            let (outcome, holder) = contend(&dir, &spec, offset);
            assert_eq!((outcome, holder), (BUSY, perl_pid), "{query:?}, wall clock {offset:+} s");
        }
    }

    // The stamp's mtime an hour back: written by a clock that lags.
    let stamp = std::fs::read(&lock_path).unwrap();
    set_mtime(&lock_path, ago(Duration::from_secs(HOUR as u64)));
    for query in ["", "ttl=3h"] {
        let spec = Scheme::Lockfile.spec(dir.path(), query);
        for offset in [0, -HOUR] {
            let (outcome, holder) = contend(&dir, &spec, offset);
            assert_eq!((outcome, holder), (BUSY, perl_pid), "mtime an hour back, {query:?}, wall clock {offset:+} s");
        }
    }
    assert_eq!(std::fs::read(&lock_path).unwrap(), stamp, "perl's lock was never touched");

    drop(perl.stdin.take());
    assert!(perl.wait().unwrap().success(), "perl unlocked its own lock");
    // Once perl is gone, the same contender gets in.
    let (outcome, _) = contend(&dir, &Scheme::Lockfile.spec(dir.path(), ""), HOUR);
    assert_eq!(outcome, GOT_IN, "the contender an hour ahead, once perl unlocked");
}

// ---------------------------------------------------------------------------
// Our own holder, every scheme
// ---------------------------------------------------------------------------

#[test]
fn a_skewed_contender_never_breaks_our_live_holder_but_a_real_expiry_lets_it_in() {
    if !libfaketime_available() {
        return;
    }
    each_scheme("skew-ours", |scheme, dir| {
        let mut holder = open_lock(&scheme.spec(dir.path(), "ttl=60s"));
        holder.try_acquire().unwrap();
        let spec = scheme.spec(dir.path(), "");
        for offset in [HOUR, -HOUR] {
            let (outcome, pid) = contend(dir, &spec, offset);
            assert_eq!(outcome, BUSY, "{}: a live holder with 60 s left, wall clock {offset:+} s", scheme.name());
            assert_eq!(pid, u64::from(std::process::id()), "{}: busy, held by the holder", scheme.name());
        }
        assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "{}", scheme.name());

        // A real expiry: a holder with one second, waited out by the
        // lock's own judgement on the true clocks.
        let mut short = open_lock(&scheme.spec(dir.path(), "ttl=1s"));
        short.try_acquire().unwrap();
        if scheme.breaks_stale_locks() {
            let mut observer = open_lock(&spec);
            wait_until("the second to pass", || observer.inspect().unwrap().holder.map_or(true, |holder| holder.stale));
            let (outcome, _) = contend(dir, &spec, HOUR);
            assert_eq!(outcome, GOT_IN, "{}: an expired holder, wall clock an hour ahead", scheme.name());
            assert_eq!(short.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
        } else {
            // flock: a live holder keeps the lock past its ttl; released,
            // the lock is the contender's.
            let released = short.release(Duration::ZERO);
            assert!(matches!(released, Ok(ReleaseOutcome::Released | ReleaseOutcome::Expired)), "{released:?}");
            let (outcome, _) = contend(dir, &spec, HOUR);
            assert_eq!(outcome, GOT_IN, "flock, released, wall clock an hour ahead");
        }
    });
}

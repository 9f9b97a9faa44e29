//! `lockfile` and liblockfile (its command `dotlockfile`, Debian package
//! liblockfile-bin), on the same lock file `<target>.lock`. Without
//! `dotlockfile` the tests say they are skipped, except under CI, where
//! that is a failure. Only `lockfile` keeps its lock in that format; no
//! other scheme's lock is a file liblockfile reads or makes.
//!
//! What liblockfile writes, and how it judges a lock (lockfile_check in
//! its lockfile.c, version 1.17 here):
//! * `dotlockfile -l LOCK` writes `0\n`: a lock without a pid, valid until
//!   300 s after its mtime. lockcore reads it as liblockfile does: held
//!   (`Busy`, not an error) until then, whatever the spec's `ttl`, and
//!   broken once older.
//! * `dotlockfile -p -l LOCK` writes the pid of its parent (the program
//!   that ran it): valid while that pid is alive. lockcore judges it as any
//!   stamp: a live pid holds; a dead one is broken at once with `stale=pid`.
//! * Our lock file's first line is our pid, so `dotlockfile -p` reads our
//!   pid and waits; `dotlockfile` without `-p` reads no pid at all and
//!   goes by the mtime alone: our lock file is valid to it for 300 s after
//!   it was written (a `prolong` writes a new one).
//! * `dotlockfile -r 0 -l` on a valid lock exits with 4, lockfile_create's
//!   `L_MAXTRYS` ("exit status 2" would be `L_TMPLOCK`, a temp file it
//!   could not make).
//!
//! Ages are set by moving the lock file's mtime back, the access time left
//! alone: liblockfile 1.17 takes the access time from *before* its read of
//! the file as "now" when the read moved it, so a lock file whose access
//! time was moved back with its mtime would never look old to it.

mod common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{Contention, Error, Liveness, ReleaseOutcome};

fn dotlockfile_available() -> bool {
    let ok = Command::new("dotlockfile").arg("-h").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must install liblockfile-bin");
        eprintln!("skipped: dotlockfile (liblockfile-bin) is not installed");
    }
    ok
}

fn dotlockfile(args: &[&str], lock: &Path) -> ExitStatus {
    Command::new("dotlockfile").args(args).arg(lock).stderr(Stdio::null()).status().unwrap()
}

/// Moves `path`'s mtime to `age` ago and leaves its access time alone.
fn set_age(path: &Path, age: Duration) {
    let at = (SystemTime::now() - age).duration_since(UNIX_EPOCH).unwrap();
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: at.as_secs() as libc::time_t, tv_nsec: at.subsec_nanos() as libc::c_long },
    ];
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path and an array of two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {}: {}", path.display(), std::io::Error::last_os_error());
}

/// The pid a busy answer names, or a panic saying what came instead.
fn held_by<T: std::fmt::Debug>(result: Result<T, Error>) -> i32 {
    match result {
        Err(Error::Busy(Contention::Held(holder))) => holder.pid,
        other => panic!("expected busy, held: {other:?}"),
    }
}

#[test]
fn a_pid_less_lock_holds_for_300_seconds_after_its_mtime() {
    if !dotlockfile_available() {
        return;
    }
    each_of("dotlock-pidless", &[Scheme::Lockfile], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        assert!(dotlockfile(&["-l"], &lock_path).success());
        assert_eq!(std::fs::read(&lock_path).unwrap(), b"0\n", "dotlockfile without -p writes no pid");

        // Fresh, and just short of 300 s: held, whatever our own ttl.
        for (age, query) in [(0, ""), (0, "ttl=1s"), (299, "ttl=1s")] {
            set_age(&lock_path, Duration::from_secs(age));
            let mut lock = open_lock(&scheme.spec(dir.path(), query));
            let holder = lock.inspect().unwrap().holder.expect("liblockfile's lock is a lock");
            assert_eq!((holder.pid, holder.liveness, holder.stale), (0, Liveness::Unknown, false), "{age} s old");
            let expires = holder.expires.expect("a pid-less lock expires");
            let written = lockcore::WallTime::from_unix_nanos(
                (SystemTime::now() - Duration::from_secs(age)).duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64,
            );
            let lifetime = expires.since(written).as_secs_f64();
            assert!((299.0..=301.0).contains(&lifetime), "{age} s old: expires {lifetime} s after its mtime");
            assert_eq!(held_by(lock.try_acquire()), 0, "{age} s old, {query:?}: held, by nobody named");
            // liblockfile agrees.
            assert_eq!(dotlockfile(&["-r", "0", "-l"], &lock_path).code(), Some(4), "{age} s old");
        }
        assert_eq!(std::fs::read(&lock_path).unwrap(), b"0\n", "never touched while valid");

        // Past 300 s: stale, for us as for liblockfile.
        set_age(&lock_path, Duration::from_secs(301));
        let mut lock = open_lock(&scheme.spec(dir.path(), ""));
        assert!(lock.inspect().unwrap().holder.unwrap().stale);
        lock.try_acquire().expect("a pid-less lock 301 s old is broken");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        assert!(dotlockfile(&["-l"], &lock_path).success());
        set_age(&lock_path, Duration::from_secs(301));
        assert!(dotlockfile(&["-r", "0", "-l"], &lock_path).success(), "liblockfile breaks it too");
        assert!(dotlockfile(&["-u"], &lock_path).success());
    });
}

#[test]
fn a_lock_with_a_pid_holds_while_that_process_lives() {
    if !dotlockfile_available() {
        return;
    }
    each_of("dotlock-pid", &[Scheme::Lockfile], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        // A shell takes the lock with -p (dotlockfile writes its parent's
        // pid: the shell's) and lives until its stdin closes.
        let mut shell = Command::new("sh")
            .args(["-c", "dotlockfile -p -l \"$1\" && echo locked && { read ignored; true; }", "sh"])
            .arg(&lock_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(shell.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line, "locked\n");
        let pid = shell.id() as i32;
        assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), format!("{pid}\n"));

        let mut lock = open_lock(&scheme.spec(dir.path(), ""));
        let holder = lock.inspect().unwrap().holder.unwrap();
        assert_eq!((holder.pid, holder.liveness, holder.stale), (pid, Liveness::Alive, false));
        assert_eq!(held_by(lock.try_acquire()), pid, "a live pid holds");
        let mut patient = open_lock(&scheme.spec(dir.path(), "stale=none"));

        drop(shell.stdin.take()); // the shell exits, leaving its lock behind
        assert!(shell.wait().unwrap().success());
        let holder = lock.inspect().unwrap().holder.unwrap();
        assert_eq!((holder.pid, holder.liveness, holder.stale), (pid, Liveness::Dead, true));
        // Without dead-owner detection and without a ttl, nothing proves it stale.
        assert_eq!(held_by(patient.try_acquire()), pid, "stale=none");
        lock.try_acquire().expect("a dead pid's lock is broken at once with stale=pid");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

#[test]
fn our_lock_keeps_dotlockfile_out_and_what_its_unlock_does() {
    if !dotlockfile_available() {
        return;
    }
    each_of("dotlock-ours", &[Scheme::Lockfile], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        let mut lock = open_lock(&scheme.spec(dir.path(), ""));
        lock.try_acquire().unwrap();
        let ours = std::fs::read(&lock_path).unwrap();
        // With -p it reads our pid, alive; without, it goes by the mtime,
        // which is fresh. Either way: L_MAXTRYS, and our lock untouched.
        assert_eq!(dotlockfile(&["-r", "0", "-l"], &lock_path).code(), Some(4));
        assert_eq!(dotlockfile(&["-p", "-r", "0", "-l"], &lock_path).code(), Some(4));
        assert_eq!(std::fs::read(&lock_path).unwrap(), ours);

        // Five minutes after it was written, liblockfile without -p no
        // longer sees our lock (it reads no pid); with -p it still does.
        set_age(&lock_path, Duration::from_secs(301));
        assert_eq!(dotlockfile(&["-p", "-r", "0", "-l"], &lock_path).code(), Some(4), "our pid is alive");
        let aged = dotlockfile(&["-r", "0", "-l"], &lock_path);
        assert!(aged.success(), "liblockfile without -p judges any lock file by its mtime alone");
        // It broke ours and made its own: we find ours lost, and leave its lock.
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
        assert_eq!(std::fs::read(&lock_path).unwrap(), b"0\n", "dotlockfile's lock is left in place");
        assert!(dotlockfile(&["-u"], &lock_path).success());
        lock.try_acquire().unwrap();

        // `dotlockfile -u` is a plain unlink of whatever is there: run on
        // the path of our lock, it removes it. That is the peer's choice;
        // what follows is only observed.
        let unlock = dotlockfile(&["-u"], &lock_path);
        let still_there = lock_path.exists();
        let release = lock.release(Duration::ZERO);
        eprintln!(
            "dotlockfile -u on our held lock: {unlock}; lock file still there: {still_there}; our release: {release:?}"
        );
        assert!(unlock.code().is_some(), "dotlockfile -u ran");
    });
}

//! PID reuse: a record that names a live pid is judged by pid *and* start
//! time, never by pid alone.
//!
//! A lock is left, in each scheme's own format, for an owner that names a
//! process that is certainly alive (a child of this test, its parent, and
//! pid 1), on this host and boot, with a TTL of an hour:
//! * with another start time, the pid has been reused since the record was
//!   written: the owner is dead, the lock stale, `try_acquire` succeeds;
//! * with the true start time, the owner is alive: `Busy`.
//!
//! A LockFile::Simple stamp (`PID` or `PID:HOST`, no start time) is judged by
//! the record's mtime: a live pid that started *after* the record was written
//! is a reuse. A stamp naming another host is never judged by pid.
//!
//! `flock`: the kernel lock went with the process that left it, and the
//! record beside it decides nothing; with nobody holding the flock both
//! owners' locks are simply taken (`try_acquire` succeeds) and `inspect`
//! reports the lock free.

mod common;

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use common::*;
use lockcore::{ErrorKind, Liveness};

#[test]
fn child_entry() {
    child_main(|role| match role {
        "sleeper" => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        "zombie-leader" => {
            // Only the main thread (the leader, whose id is the pid) shows the
            // process as a zombie when it leaves, and libtest runs this role
            // on another thread: a signal aimed at the main thread makes it
            // leave, through a handler making the raw exit(2) system call,
            // which ends one thread (as pthread_exit does in the kernel).
            extern "C" fn leave_this_thread(_: libc::c_int) {
                // SAFETY: a raw system call, async-signal-safe; it ends only
                // the main thread, whose stack nothing else uses.
                unsafe { libc::syscall(libc::SYS_exit, 0) };
            }
            // SAFETY: installs a handler that is async-signal-safe, then
            // aims the signal at this process's main thread.
            unsafe {
                libc::signal(libc::SIGUSR1, leave_this_thread as extern "C" fn(libc::c_int) as libc::sighandler_t);
                libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::getpid(), libc::SIGUSR1);
            }
            // This thread lives on until the parent closes our stdin.
            let mut byte = [0u8; 1];
            let _ = std::io::Read::read(&mut std::io::stdin(), &mut byte);
        }
        other => panic!("unknown role {other}"),
    });
}

/// Live processes to impersonate: a child of ours, our parent (the test
/// runner) and init.
fn live_pids(child: &std::process::Child) -> Vec<i32> {
    let mut pids = vec![child.id() as i32, getppid()];
    if !pids.contains(&1) {
        pids.push(1);
    }
    // Where /proc hides other users' processes, only our own are judged.
    pids.retain(|&pid| proc_stat(pid).is_some());
    pids
}

/// A fresh directory inside `dir` for one case (a lock of each case of
/// its own, rather than one cleaned up by hand between cases).
fn case_dir(dir: &TestDir, case: &mut u32) -> PathBuf {
    *case += 1;
    let path = dir.join(&format!("case{case}"));
    std::fs::create_dir(&path).unwrap();
    path
}

/// Leaves the lock held by `pid` started at `start_ticks` (with a TTL of an
/// hour), then judges it: the liveness `inspect` reports, and what a
/// `try_acquire` of this process comes to (its fence, or why not).
fn judge_left(
    scheme: Scheme,
    dir: &std::path::Path,
    pid: i32,
    start_ticks: u64,
) -> (Option<Liveness>, Result<u64, ErrorKind>) {
    let spec = scheme.spec(dir, "ttl=1h");
    let left = leave_lock(&spec, owner_as(pid, start_ticks));
    assert_eq!((left.owner.process.pid, left.owner.process.start_ticks), (pid, start_ticks));
    let mut lock = open_lock(&spec);
    if !scheme.breaks_stale_locks() {
        // flock's kernel lock went with the handle's descriptor, or goes a
        // moment later: a child that another test of this binary forked
        // while the descriptor was open holds a copy of it until its exec.
        wait_until("the left flock lock to be let go", || lock.inspect().is_ok_and(|seen| seen.holder.is_none()));
    }
    let holder = lock.inspect().unwrap().holder;
    if let Some(holder) = holder {
        // The lock names the owner it was left for, not the process that wrote it.
        assert_eq!(holder.pid, pid, "{}: the left lock's holder", scheme.name());
        if let Some(record) = holder.record {
            assert_eq!(record.owner.process.start_ticks, start_ticks);
        }
    }
    let verdict = lock.try_acquire().map(|a| a.fence).map_err(|e| e.kind());
    if verdict.is_ok() {
        lock.release(Duration::ZERO).unwrap();
    }
    (holder.map(|h| h.liveness), verdict)
}

#[test]
fn live_pid_with_another_start_time_is_stale_and_with_its_own_is_not() {
    let mut children = Children::new();
    children.push(spawn("sleeper", &[]));
    let sleeper = children.pop().unwrap();
    let pids = live_pids(&sleeper);
    children.push(sleeper);
    each_scheme("pid-reuse", |scheme, dir| {
        let mut case = 0;
        for &pid in &pids {
            let (_, true_start) = proc_stat(pid).expect("the impersonated process is alive");
            let reused_start = true_start + 1000;

            let (liveness, verdict) = judge_left(scheme, &case_dir(dir, &mut case), pid, reused_start);
            if scheme.breaks_stale_locks() {
                assert_eq!(liveness, Some(Liveness::Dead), "pid {pid} with start {reused_start}");
                assert!(verdict.is_ok(), "pid {pid} reused: {verdict:?}");
            } else {
                assert_eq!(liveness, None, "flock: nobody holds it");
                assert!(verdict.is_ok(), "flock: {verdict:?}");
            }

            let (liveness, verdict) = judge_left(scheme, &case_dir(dir, &mut case), pid, true_start);
            if scheme.breaks_stale_locks() {
                // A start time of 0 means "unknown" (no /proc when written):
                // never judged dead either.
                let expected = if true_start == 0 { Liveness::Unknown } else { Liveness::Alive };
                assert_eq!(liveness, Some(expected), "pid {pid} with its own start {true_start}");
                assert_eq!(verdict, Err(ErrorKind::Busy), "pid {pid} is alive");
            } else {
                assert_eq!(liveness, None);
                assert!(verdict.is_ok(), "flock: {verdict:?}");
            }
        }
    });
}

/// Only `lockfile` reads LockFile::Simple's stamps: the other schemes'
/// locks are no file a Perl script writes (a stamp where a `mkdir` lock's
/// record belongs is no lock at all; see `hostile.rs`).
#[test]
fn lockfile_simple_stamp_of_a_live_pid_is_judged_by_the_record_age() {
    each_of("pid-reuse-stamp", &[Scheme::Lockfile], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        let pid = getppid();
        let host = lockcore::Owner::current().unwrap().host;
        let host = std::str::from_utf8(host.as_bytes()).unwrap().to_owned();
        // Long before any process of this boot started.
        let before_boot = UNIX_EPOCH + Duration::from_secs(86_400);

        for stamp in [format!("{pid}\n"), format!("{pid}:{host}\n")] {
            std::fs::write(&lock_path, &stamp).unwrap();
            let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=1h"));
            // Written now by a process that was running: alive.
            let holder = lock.inspect().unwrap().holder.unwrap();
            assert_eq!((holder.pid, holder.liveness, holder.stale), (pid, Liveness::Alive, false));
            assert_eq!(lock.try_acquire().map_err(|e| e.kind()), Err(ErrorKind::Busy), "stamp {stamp:?} of a live pid");

            // Written before the process with that pid started: the pid was
            // reused, the writer is dead. (The TTL does not apply: a record
            // dated 1970 would also be stale by age, so use stale=pid alone.)
            set_mtime(&lock_path, before_boot);
            let mut lock = open_lock(&scheme.spec(dir.path(), ""));
            let holder = lock.inspect().unwrap().holder.unwrap();
            assert_eq!((holder.liveness, holder.stale), (Liveness::Dead, true), "stamp {stamp:?}");
            lock.try_acquire().expect("a reused pid's stamp is stale");
            lock.release(Duration::ZERO).unwrap();
        }

        // Another host's pid means nothing here, however old the stamp.
        std::fs::write(&lock_path, format!("{pid}:some-other-host\n")).unwrap();
        set_mtime(&lock_path, before_boot);
        let mut lock = open_lock(&scheme.spec(dir.path(), ""));
        let holder = lock.inspect().unwrap().holder.unwrap();
        assert_eq!((holder.liveness, holder.stale), (Liveness::Unknown, false));
        assert_eq!(lock.try_acquire().map_err(|e| e.kind()), Err(ErrorKind::Busy));
    });
}

/// A process whose main thread called `pthread_exit` shows as a zombie in
/// `/proc/PID/stat` while its other threads run: it is alive, and its lock
/// must not be broken. Once its last thread is gone it is dead.
#[test]
fn a_zombie_leader_with_live_threads_is_alive() {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1", "--quiet"])
        .env(ROLE_VAR, "zombie-leader")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    wait_until("the child's main thread to leave", || proc_stat(pid).is_some_and(|(state, _)| state == 'Z'));
    let (_, start) = proc_stat(pid).unwrap();
    // `flock`: the process that left the lock let go of the kernel lock,
    // whoever it names; the lock is free whatever becomes of that process.
    each_scheme("zombie-leader", |scheme, dir| {
        let (liveness, verdict) = judge_left(scheme, dir.path(), pid, start);
        if scheme.breaks_stale_locks() {
            assert_eq!(liveness, Some(Liveness::Alive), "{}: a zombie leader with a live thread", scheme.name());
            assert_eq!(verdict, Err(ErrorKind::Busy), "{}: its lock is not broken", scheme.name());
        } else {
            assert_eq!((liveness, verdict.is_ok()), (None, true), "flock: free");
        }
    });
    drop(child.stdin.take()); // the live thread reads EOF and exits the process
    wait_exit_keep_zombie(child.id());
    each_scheme("zombie-leader-gone", |scheme, dir| {
        let (liveness, verdict) = judge_left(scheme, dir.path(), pid, start);
        if scheme.breaks_stale_locks() {
            assert_eq!(liveness, Some(Liveness::Dead), "{}: every thread has exited", scheme.name());
            assert!(verdict.is_ok(), "{}: its lock is broken: {verdict:?}", scheme.name());
        } else {
            assert_eq!((liveness, verdict.is_ok()), (None, true), "flock: free");
        }
    });
    child.wait().unwrap();
}

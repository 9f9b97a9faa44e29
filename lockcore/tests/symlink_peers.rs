//! Which symlinks at a `symlink` lock's path are another program's locks.
//!
//! A link without our record is a peer's lock only if its target is one
//! name, no path, that names nothing beside it. Then:
//! * all digits: a shell script's `ln -s $$ lock`, the holder's pid, its
//!   mtime the moment it took the lock; judged as a LockFile::Simple stamp
//!   is, by that pid (`stale=pid`) or by age (`ttl`);
//! * any other name: IPC::Lock::WithTTL's link, whose mtime is its expiry.
//!
//! What the tests hold the library to:
//! * `a_link_that_points_at_something_is_no_lock`: links as an admin
//!   leaves them (a copy of Debian's `/var/lock -> /run/lock`, a link to
//!   `/etc`), links to a file or directory beside them by name, `.`, `..`,
//!   a path that names nothing, digits that are no pid: each, two hours
//!   old with a TTL of a second, is `NotALock` for `try_acquire`,
//!   `inspect` and `break_lock`, and it and what it points at are left
//!   exactly as they were.
//! * `a_shell_lock_is_judged_by_its_pid`: a shell lock of a running
//!   process, made just now, is held (`Busy`, its pid shown by `inspect`),
//!   with `stale=none` and with `stale=pid`, and left as it was; one of a
//!   dead process is taken over at once with `stale=pid`, naming that pid;
//!   one of a running process older than the TTL is taken over by age.
//!   IPC::Lock::WithTTL's link is held until its mtime and taken over after.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::files::tree;
use common::*;
use lockcore::{ErrorKind, Lock};

const LONG_AGO: Duration = Duration::from_secs(2 * 3600);

#[test]
fn child_entry() {
    child_main(|role| panic!("unknown role {role}"));
}

/// A link at `lock` to `target`, with its mtime `mtime`.
fn link(lock: &Path, target: &str, mtime: std::time::SystemTime) {
    let _ = fs::remove_file(lock);
    std::os::unix::fs::symlink(target, lock).unwrap();
    set_mtime(lock, mtime);
}

fn outcomes(lock: &mut Lock) -> [Result<(), ErrorKind>; 3] {
    [
        lock.try_acquire().map(drop).map_err(|e| e.kind()),
        lock.inspect().map(drop).map_err(|e| e.kind()),
        lock.break_lock().map(drop).map_err(|e| e.kind()),
    ]
}

#[test]
fn a_link_that_points_at_something_is_no_lock() {
    let dir = TestDir::new("symlink-peers");
    let run_lock = dir.join("run-lock");
    fs::create_dir(&run_lock).unwrap();
    fs::write(run_lock.join("a-lock-of-its-own"), b"1\n").unwrap();
    fs::write(dir.join("victim.txt"), b"precious\n").unwrap();
    fs::create_dir(dir.join("victim-dir")).unwrap();
    let nowhere = dir.join("never-created");
    let targets = [
        run_lock.to_str().unwrap(),
        "/etc",
        "victim.txt",
        "victim-dir",
        ".",
        "..",
        nowhere.to_str().unwrap(),
        "sub/never-created",
        "0",
        "99999999999",
    ];
    let lock_path = dir.join("lk");
    // All but the guard, which the first attempt makes.
    let watched = || ["lk", "run-lock", "victim.txt", "victim-dir"].map(|name| tree(&dir.join(name)));
    let mut failures = Vec::new();
    for target in targets {
        link(&lock_path, target, ago(LONG_AGO));
        let before = watched();
        let mut lock = open_lock(&format!("symlink:{}?ttl=1s", lock_path.display()));
        let got = outcomes(&mut lock);
        if got != [Err(ErrorKind::NotALock); 3] {
            failures.push(format!("{target}: {got:?}"));
        }
        if watched() != before {
            failures.push(format!("{target}: changed"));
        }
        if nowhere.exists() {
            failures.push(format!("{target}: followed"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_shell_lock_is_judged_by_its_pid() {
    let dir = TestDir::new("symlink-peers");
    let lock_path = dir.join("lk");
    let spec = |query: &str| format!("symlink:{}?{query}", lock_path.display());
    let mut running = Command::new("sleep").arg("100").stdin(Stdio::null()).spawn().unwrap();
    let pid = running.id() as i32;

    link(&lock_path, &pid.to_string(), ago(Duration::ZERO));
    let before = tree(&lock_path);
    for query in ["stale=none", "stale=pid"] {
        let mut lock = open_lock(&spec(query));
        let acquired = lock.try_acquire().map(drop).map_err(|e| e.kind());
        assert_eq!(acquired, Err(ErrorKind::Busy), "{query}: a running shell's lock");
        let holder = lock.inspect().unwrap().holder.expect("held");
        assert_eq!((holder.pid, holder.stale), (pid, false), "{query}");
    }
    assert_eq!(tree(&lock_path), before, "a running shell's lock was changed");

    link(&lock_path, &pid.to_string(), ago(LONG_AGO));
    let mut lock = open_lock(&spec("stale=none&ttl=1s"));
    let taken = lock.try_acquire().expect("a shell's lock older than the TTL");
    assert_eq!(taken.took_over_from.map(|h| h.pid), Some(pid));
    lock.release(Duration::ZERO).unwrap();
    running.kill().unwrap();
    running.wait().unwrap();

    let dead = dead_pid();
    link(&lock_path, &dead.to_string(), ago(Duration::ZERO));
    let mut lock = open_lock(&spec("stale=pid"));
    let taken = lock.try_acquire().expect("a dead shell's lock");
    assert_eq!(taken.took_over_from.map(|h| h.pid), Some(dead));
    lock.release(Duration::ZERO).unwrap();

    // IPC::Lock::WithTTL's link: its mtime is its expiry.
    link(&lock_path, "lockme.4242", from_now(Duration::from_secs(3600)));
    let mut lock = open_lock(&spec("stale=pid"));
    assert_eq!(lock.try_acquire().map(drop).map_err(|e| e.kind()), Err(ErrorKind::Busy));
    link(&lock_path, "lockme.4242", ago(Duration::from_secs(1)));
    lock.try_acquire().expect("a link past its expiry");
    lock.release(Duration::ZERO).unwrap();
}

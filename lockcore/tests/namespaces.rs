//! A contender in another pid or time namespace of the same host (a
//! container sharing the host name: `--net=host`, systemd `PrivatePIDs=`,
//! `bwrap --unshare-pid`, `unshare --time`) never breaks a live holder's
//! lock. It sees the same host name and boot id, but other pids (the
//! holder's pid is missing from its `/proc`, or names another process) and
//! another boot clock; it must judge the holder neither dead nor expired.
//!
//! The contender is this test binary run through `unshare(1)`; the tests
//! need root and a kernel with those namespaces, and say they were skipped
//! otherwise. `flock` is held by the kernel whatever the contender thinks.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use common::*;
use lockcore::internals::COMPACT_AT;
use lockcore::ErrorKind;

#[test]
fn child_entry() {
    child_main(run_role);
}

/// Exit status of a contender that got the lock (it releases it at once).
const GOT_IT: i32 = 10;
/// Exit status of a contender told the lock is busy.
const BUSY: i32 = 11;
/// Exit status of a contender told it cannot share the lock at all.
const REFUSED: i32 = 12;

fn run_role(role: &str) {
    let spec = var("SPEC");
    let mut lock = open_lock(&spec);
    if role == "pid1-fork" {
        pid1_fork(&spec, lock);
    }
    // Whether the call took the lock.
    let tried = match role {
        "contend" => lock.try_acquire().map(|_| true),
        // A call that waits for a `shm` page's section word as long as any.
        "inspect" => lock.inspect().map(|_| false),
        other => panic!("no role {other}"),
    };
    match tried {
        Ok(acquired) => {
            if acquired {
                let _ = lock.release(Duration::ZERO);
            }
            std::process::exit(GOT_IT)
        }
        Err(e) if e.kind() == ErrorKind::Busy => std::process::exit(BUSY),
        Err(e) if e.kind() == ErrorKind::Unsupported => std::process::exit(REFUSED),
        Err(e) => panic!("{spec}: {}", lock.describe(&e)),
    }
}

/// As pid 1 of a pid namespace: holds the lock, forks into a new pid
/// namespace, where the child is pid 1 too, and checks that the child can
/// neither release the parent's lock nor let it go as its copy of the
/// handle drops. Exits with [`GOT_IT`] when all holds.
fn pid1_fork(spec: &str, mut lock: lockcore::Lock) -> ! {
    assert_eq!(std::process::id(), 1, "run as pid 1 of a pid namespace");
    lock.try_acquire().unwrap();
    // SAFETY: plain call; it changes the pid namespace of later children only.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWPID) }, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: the child only calls the lock, which allocates nothing, and
    // leaves by _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let refused = matches!(lock.release(Duration::ZERO), Err(lockcore::Error::Forked));
        drop(lock);
        // SAFETY: ends the child without the harness's exit handlers.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child, into a valid status word.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{spec}: the child released the lock");
    let other = open_lock(spec).try_acquire();
    assert!(matches!(other, Err(ref e) if e.kind() == ErrorKind::Busy), "{spec}: let go by the child: {other:?}");
    assert_eq!(lock.release(Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released));
    std::process::exit(GOT_IT)
}

/// Whether `unshare` with `args` can run a program here.
fn unshare_works(args: &[&str]) -> bool {
    Command::new("unshare").args(args).arg("true").status().is_ok_and(|status| status.success())
}

/// For every scheme: this process holds the lock (`query`); a contender run
/// through `wrapper` must be told it is busy, or, where `refused` says so,
/// that it cannot share the lock at all.
fn a_contender_in(label: &str, wrapper: &[&str], query: &str, refused: &[Scheme]) {
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and the namespace)", wrapper.join(" "));
        return;
    }
    each_scheme(label, |scheme, dir| {
        let spec = scheme.spec(dir.path(), query);
        let mut holder = open_lock(&spec);
        holder.try_acquire().unwrap();
        let status = child_command(wrapper, "contend", &[("SPEC", spec.clone())]).status().unwrap();
        let expected = if refused.contains(&scheme) { REFUSED } else { BUSY };
        assert_eq!(
            status.code(),
            Some(expected),
            "{spec}: the contender in another namespace ({}) was not told the live holder holds it: {status}",
            wrapper.join(" ")
        );
        assert_eq!(holder.release(Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released));
    });
}

#[test]
fn a_contender_in_another_pid_namespace_does_not_break_a_live_holder() {
    a_contender_in("pidns", &["unshare", "--pid", "--fork", "--mount-proc"], "ttl=1h", &[]);
}

#[test]
fn a_contender_in_another_time_namespace_does_not_break_a_live_holder() {
    // Its boot clock two hours ahead: an hour's TTL looks run out, and the
    // holder's start time looks like another process's. A `toplock` queue
    // keeps its times on the boot clock of the processes that share it: one
    // on another clock is refused, rather than passed over as an earlier
    // boot's.
    let wrapper = ["unshare", "--time", "--boottime", "7200"];
    a_contender_in("timens", &wrapper, "ttl=1h", &[Scheme::Toplock]);
    a_contender_in("timens-stale-none", &wrapper, "ttl=1h&stale=none", &[Scheme::Toplock]);
}

/// A `toplock` queue compacted while it is held: its header must still name
/// the kernel's boot, or a contender on another clock of this boot (another
/// time namespace) takes the queue for one of an earlier boot, starts it
/// afresh and takes the lock under its live holder.
#[test]
fn a_compacted_toplock_queue_is_still_refused_from_another_time_namespace() {
    let wrapper = ["unshare", "--time", "--boottime", "7200"];
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and the namespace)", wrapper.join(" "));
        return;
    }
    let dir = TestDir::new("timens-compacted");
    let queue = dir.join("queue");
    let spec = format!("toplock:{}?ttl=1h", queue.display());
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    // Releases of requests never made: no-ops in the replay that grow the
    // log as the traffic of others does, until the next read compacts it.
    let filler: String = (1..=COMPACT_AT / 39 + 1).map(|n| format!("D {n:032x} 0 0\n")).collect();
    OpenOptions::new().append(true).open(&queue).unwrap().write_all(filler.as_bytes()).unwrap();
    open_lock(&spec).inspect().unwrap();
    let compacted = std::fs::read_to_string(&queue).unwrap();
    assert!(compacted.len() < COMPACT_AT, "the read compacted the log: {} bytes", compacted.len());
    let status = child_command(&wrapper, "contend", &[("SPEC", spec.clone())]).status().unwrap();
    assert_eq!(
        status.code(),
        Some(REFUSED),
        "{spec}: the contender in another time namespace, after a compaction: {status}"
    );
    assert_eq!(holder.release(Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released), "the holder kept its lock");
}

/// A contender that cannot read the boot id (a chroot or a sandbox without
/// `/proc`) can tell neither a queue of an earlier boot from one in use
/// on another clock, nor write a header that lets others tell: it is
/// refused before it touches the queue, neither starting a held queue
/// afresh nor making one.
#[test]
fn a_toplock_contender_without_proc_neither_takes_nor_makes_a_queue() {
    let wrapper = ["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /proc && exec \"$@\"", "sh"];
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and a mount namespace)", wrapper.join(" "));
        return;
    }
    let dir = TestDir::new("no-proc");
    let queue = dir.join("queue");
    let spec = format!("toplock:{}?ttl=1h", queue.display());
    let contend = || child_command(&wrapper, "contend", &[("SPEC", spec.clone())]).status().unwrap();
    let status = contend();
    assert_eq!(status.code(), Some(REFUSED), "{spec}: a contender without /proc and no queue yet: {status}");
    assert!(!queue.exists(), "{spec}: a contender without /proc made a queue");
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    let before = std::fs::read(&queue).unwrap();
    let status = contend();
    assert_eq!(status.code(), Some(REFUSED), "{spec}: a contender without /proc while the queue is held: {status}");
    assert_eq!(std::fs::read(&queue).unwrap(), before, "{spec}: a contender without /proc wrote the queue");
    assert_eq!(holder.release(Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released), "the holder kept its lock");
}

/// A live holder of the section word of a `shm` page (this process, as a
/// process stopped in the middle of a change would hold it), whose pid
/// means nothing in a child pid namespace. A process there must not take
/// the word from it, however long it waits: the byte of the holder's tag
/// is locked, which every namespace sees alike.
#[test]
fn a_stopped_holder_of_a_shm_section_word_is_not_taken_over_from_another_pid_namespace() {
    let wrapper = ["unshare", "--pid", "--fork", "--mount-proc"];
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and the namespace)", wrapper.join(" "));
        return;
    }
    let dir = TestDir::new("pidns-section");
    let path = dir.join("lock");
    let spec = format!("shm:{}", path.display());
    open_lock(&spec).inspect().unwrap();
    let word = common::shm_lock::SectionWord::of(&path);
    word.take();
    let status = child_command(&wrapper, "inspect", &[("SPEC", spec.clone())]).status().unwrap();
    word.release();
    assert_eq!(status.code(), Some(BUSY), "{spec}: the section word taken from its live holder: {status}");
    assert!(open_lock(&spec).inspect().is_ok(), "the word, let go, is taken again");
}

/// Pid 1 of a pid namespace (a container's init) that forks into a new pid
/// namespace has a child that is pid 1 too: the child is still told apart
/// from its parent, and neither releases the parent's lock nor lets it go
/// when its copy of the handle drops.
#[test]
fn a_child_with_its_parents_pid_does_not_release_the_parents_lock() {
    let wrapper = ["unshare", "--pid", "--fork", "--mount-proc"];
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and the namespace)", wrapper.join(" "));
        return;
    }
    each_scheme("pid1-fork", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let status = child_command(&wrapper, "pid1-fork", &[("SPEC", spec.clone())]).status().unwrap();
        assert_eq!(status.code(), Some(GOT_IT), "{spec}: {status}");
    });
}

/// On overlayfs (a container's `/tmp`, often) a mapping is of the file
/// beneath, not of the file opened: a `shm` handle's lock on its tag's byte
/// would go with its descriptor, and a live holder would be taken for dead.
/// `shm` is refused there; a scheme without a mapping takes the lock.
#[test]
fn shm_is_refused_on_overlayfs() {
    let dir = TestDir::new("overlayfs");
    let part = |name: &str| {
        let path = dir.join(name);
        std::fs::create_dir(&path).unwrap();
        path.display().to_string()
    };
    let (lower, upper, work, merged) = (part("lower"), part("upper"), part("work"), part("merged"));
    let mount =
        format!("mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={work} {merged} && exec \"$@\"");
    let wrapper = ["unshare", "--mount", "sh", "-c", &mount, "sh"];
    if !unshare_works(&wrapper[1..]) {
        eprintln!("skipped: `{}` does not run here (it needs root and overlayfs)", wrapper.join(" "));
        return;
    }
    for (scheme, expected) in [(Scheme::Shm, REFUSED), (Scheme::Lease, GOT_IT)] {
        // A directory of each scheme's own, made in the upper layer.
        std::fs::create_dir(dir.join("upper").join(scheme.name())).unwrap();
        let spec = scheme.spec(&std::path::Path::new(&merged).join(scheme.name()), "");
        let status = child_command(&wrapper, "contend", &[("SPEC", spec.clone())]).status().unwrap();
        assert_eq!(status.code(), Some(expected), "{spec} on overlayfs: {status}");
    }
}

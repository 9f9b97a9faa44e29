//! `signal=`: taking over an expired lease signals the old holder only if
//! it is provably that process, alive, and not our own:
//! * a holder in another process, with its recorded start time, is signalled;
//! * a record whose pid now belongs to a process with another start time
//!   (the pid was reused) signals nobody: the process with that pid is a
//!   stranger;
//! * two handles of one process on the same lease (a library and its caller,
//!   say) must not have the second kill its own process when it takes over
//!   from the first.
//!
//! Who signalled whom is read from the holder's exit: after the takeover the
//! test sends it SIGTERM itself, so it dies of SIGKILL only if the library
//! sent one first. No sleep decides anything.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use common::*;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "take-over-from-myself" => take_over_from_myself(),
        "hold-and-sleep" => {
            let mut lock = open_lock(&var("SPEC"));
            lock.try_acquire().expect("the lease is free");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn take_over_from_myself() {
    let spec = var("SPEC");
    let mut first = open_lock(&spec);
    let held = first.try_acquire().expect("the lease is free");
    let expires = held.expires.expect("a lease with a ttl");
    wait_until("the first handle's lease to expire", || wall_now() > expires);
    let mut second = open_lock(&spec);
    let taken = second.try_acquire();
    assert!(taken.as_ref().is_ok_and(|t| t.fence > held.fence), "the expired lease is taken over: {taken:?}");
    std::thread::sleep(Duration::from_millis(100)); // a signal sent to us is delivered by now
}

#[test]
fn taking_over_from_a_handle_of_ones_own_process_sends_no_signal() {
    let dir = TestDir::new("lease-signal-self");
    for signal in ["TERM", "KILL"] {
        let spec = format!("lease:{}?ttl=200ms&signal={signal}", dir.join(&format!("{signal}.lease")).display());
        let mut child = spawn("take-over-from-myself", &[("SPEC", spec)]);
        let status = wait_patiently(&mut child);
        assert_eq!(status.signal(), None, "signal={signal}: the process signalled itself");
        assert!(status.success(), "signal={signal}: the child failed: {status:?}");
    }
}

/// Field 6 of a lease record (tab-separated, padded with spaces to a fixed
/// length) is the holder's start time; this rewrites it in place.
fn rewrite_start_time(lease: &Path, start_ticks: u64) {
    let bytes = std::fs::read(lease).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let mut fields: Vec<String> = text.trim_end().split('\t').map(str::to_owned).collect();
    assert_eq!(fields.len(), 7, "a held lease record: {text:?}");
    fields[5] = start_ticks.to_string();
    let mut line = fields.join("\t");
    assert!(line.len() < bytes.len());
    line.extend(std::iter::repeat(' ').take(bytes.len() - 1 - line.len()));
    line.push('\n');
    std::fs::write(lease, line).unwrap();
}

/// A child holds the lease and sleeps past its TTL; with `reused`, its
/// record is rewritten to name another start time first. A second process
/// (this one) takes the expired lease over with `signal=KILL`. Returns the
/// signal the child died of once this test has sent it SIGTERM.
fn take_over_with_signal_kill(dir: &TestDir, reused: bool) -> Option<i32> {
    let lease = dir.join(if reused { "reused.lease" } else { "alive.lease" });
    let spec = format!("lease:{}?ttl=200ms&signal=KILL", lease.display());
    let mut children = Children::new();
    children.push(spawn("hold-and-sleep", &[("SPEC", spec.clone())]));
    let mut holder = children.pop().unwrap();
    let pid = holder.id() as i32;
    let mut lock = open_lock(&spec);
    wait_until("the child to hold the lease", || lock.inspect().unwrap().holder.is_some_and(|h| h.pid == pid));
    let held = lock.inspect().unwrap().holder.unwrap().record.unwrap();
    wait_until("the child's lease to expire", || wall_now() > held.expires.unwrap());
    if reused {
        let (_, true_start) = proc_stat(pid).expect("the holder is alive");
        rewrite_start_time(&lease, true_start + 1000);
    }
    let taken = lock.try_acquire().expect("an expired lease is taken over");
    assert!(taken.fence > held.fence);
    // SAFETY: plain kill(2) of our own child, which we have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = wait_patiently(&mut holder);
    lock.release(Duration::ZERO).unwrap();
    status.signal()
}

#[test]
fn an_expired_holder_is_signalled_only_with_its_recorded_start_time() {
    let dir = TestDir::new("lease-signal-start-time");
    assert_eq!(
        take_over_with_signal_kill(&dir, false),
        Some(libc::SIGKILL),
        "the expired holder, alive with its recorded start time, is killed by the takeover"
    );
    assert_eq!(
        take_over_with_signal_kill(&dir, true),
        Some(libc::SIGTERM),
        "a record whose pid has another start time names a stranger, who must not be signalled"
    );
}

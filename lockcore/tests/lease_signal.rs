//! `signal=`: taking over an expired lease signals the old holder only if
//! it is another process. Two handles of one process on the same lease (a
//! library and its caller, say) must not have the second kill its own
//! process when it takes over from the first. (That a live holder in
//! another process is signalled is checked by the C tests, `strategies.c`.)

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::*;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "take-over-from-myself");
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

//! Fencing tokens after a stale break: the fence handed out after breaking a
//! dead owner's (or an expired) lock is greater than the fence that owner
//! had, so a storage layer that saw the old owner's token refuses it from
//! then on.
//!
//! * A chain of processes, each of which acquires (breaking the lock of the
//!   previous one, who died holding it) and dies holding it: their fences
//!   strictly increase, and so does the next one after the last.
//! * A live holder past its TTL, broken by another process: the breaker's
//!   fence is greater, and the overrunning holder's release says `Lost`.
//!
//! `flock`: the chain runs as well (the kernel released each dead holder's
//! lock; the last fence lives in `<target>.guard`). A live flock holder is
//! never broken (`Scheme::breaks_stale_locks`), so the second case checks
//! that the other process is told `Busy` and that the holder's release says
//! `Expired`.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use lockcore::{ErrorKind, ReleaseOutcome};

const CHAIN: usize = 6;

// Shared-memory slots.
const HELD: usize = 0;
const OVERRUN_FENCE: usize = 1;
const BREAK_DONE: usize = 2;
const RELEASE_OUTCOME: usize = 3;
const CHAIN_FENCES: usize = 16;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = open_lock(&var("SPEC"));
    match role {
        // Acquires (breaking a dead predecessor's lock) and dies holding it.
        "link" => {
            let acquired = lock.try_acquire().expect("the previous owner is dead");
            shm.at(CHAIN_FENCES + var_usize("INDEX")).store(acquired.fence, SeqCst);
            die_holding();
        }
        // Holds with a short TTL, lets it run out, waits until the parent
        // has tried to break it, then reports how its release went.
        "overrun" => {
            let acquired = lock.try_acquire().unwrap();
            shm.at(OVERRUN_FENCE).store(acquired.fence, SeqCst);
            shm.at(HELD).store(1, SeqCst);
            shm.wait_gate(BREAK_DONE);
            let outcome = match lock.release(Duration::ZERO) {
                Ok(ReleaseOutcome::Released) => 1,
                Ok(ReleaseOutcome::Expired) => 2,
                Ok(ReleaseOutcome::Lost) => 3,
                Err(e) => panic!("release: {e:?}"),
            };
            shm.at(RELEASE_OUTCOME).store(outcome, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn fences_increase_along_a_chain_of_dead_owners() {
    each_scheme("fence-chain", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let spec = scheme.spec(dir.path(), "ttl=1h");
        for i in 0..CHAIN {
            let mut children = Children::new();
            children.push(spawn(
                "link",
                &[("SPEC", spec.clone()), ("SHM", shm.path().display().to_string()), ("INDEX", i.to_string())],
            ));
            children.expect_success("chain link");
        }
        let fences: Vec<u64> = (0..CHAIN).map(|i| shm.get(CHAIN_FENCES + i)).collect();
        for pair in fences.windows(2) {
            assert!(pair[0] < pair[1], "fences {fences:?}");
        }
        let mut next = open_lock(&spec);
        let acquired = next.try_acquire().expect("the last owner is dead");
        assert!(acquired.fence > fences[CHAIN - 1], "{} after {fences:?}", acquired.fence);
        assert_eq!(next.inspect().unwrap().last_fence, acquired.fence);
    });
}

#[test]
fn breaking_an_expired_holder_gives_a_greater_fence() {
    each_scheme("fence-expired", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        children.push(spawn(
            "overrun",
            &[("SPEC", scheme.spec(dir.path(), "ttl=100ms")), ("SHM", shm.path().display().to_string())],
        ));
        wait_until("the holder to acquire", || shm.get(HELD) == 1 || children.any_exited());
        let mut breaker = open_lock(&scheme.spec(dir.path(), "ttl=1h"));
        let expires = breaker.inspect().unwrap().holder.unwrap().record.unwrap().expires.unwrap();
        wait_until("the holder's TTL to pass", || expires.has_come(breaker.now()));
        wait_for_server_expiry(scheme, &mut breaker);

        let result = breaker.try_acquire();
        shm.open_gate(BREAK_DONE);
        children.expect_success("overrunning holder");
        if scheme.breaks_stale_locks() {
            let acquired = result.expect("an expired lock is broken");
            assert!(acquired.fence > shm.get(OVERRUN_FENCE));
            assert_eq!(shm.get(RELEASE_OUTCOME), 3, "the overrunning holder lost it");
            assert_eq!(breaker.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        } else {
            assert_eq!(result.map_err(|e| e.kind()), Err(ErrorKind::Busy), "a live flock holder is never broken");
            assert_eq!(shm.get(RELEASE_OUTCOME), 2, "the overrunning holder kept it past its TTL");
            let acquired = breaker.try_acquire().unwrap();
            assert!(acquired.fence > shm.get(OVERRUN_FENCE));
        }
    });
}

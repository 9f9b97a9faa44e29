//! Racing stale-breakers: a stale lock, 16 processes released at once by
//! one futex wake-up, each makes one `try_acquire`. Exactly one gets in.
//!
//! Three kinds of stale lock:
//! * the record of a dead owner (a process that acquired and exited without
//!   releasing), with a TTL of an hour, so only dead-owner detection makes
//!   it stale;
//! * an expired record whose owner cannot be judged (another host), so only
//!   its expiry makes it stale;
//! * the expired record of a *live* holder (this test process).
//!
//! For `flock` there is nothing to break: the kernel released the dead
//! owner's lock and the record left in the file decides nothing, so exactly
//! one racer gets in as well; but a live holder past its TTL keeps the lock
//! (`flock`'s TTL is advisory), so there exactly *zero* racers get in, and
//! the holder's release answers `Expired`, not `Lost`.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use lockcore::{Error, Liveness, ReleaseOutcome};

const RACERS: usize = 16;

// Shared-memory slots.
const GO: usize = 0;
const READY: usize = 1;
const INSIDE: usize = 2;
const MAX_INSIDE: usize = 3;
const WINNERS: usize = 4;
const BUSY: usize = 5;
const OTHER_ERRORS: usize = 6;
const TRIED: usize = 7;
const FINISH: usize = 8;
const WINNER_FENCE: usize = 9;
const WINNER_PID: usize = 10;
const VANISHED_FENCE: usize = 11;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = open_lock(&var("SPEC"));
    match role {
        // Acquire and die holding the lock (exit skips every destructor).
        "vanish" => {
            let acquired = lock.try_acquire().expect("the vanishing owner acquires");
            shm.at(VANISHED_FENCE).store(acquired.fence, SeqCst);
            die_holding();
        }
        "racer" => {
            shm.at(READY).fetch_add(1, SeqCst);
            shm.wait_gate(GO);
            match lock.try_acquire() {
                Ok(acquired) => {
                    shm.enter(INSIDE, MAX_INSIDE);
                    shm.at(WINNERS).fetch_add(1, SeqCst);
                    shm.at(WINNER_FENCE).store(acquired.fence, SeqCst);
                    shm.at(WINNER_PID).store(std::process::id().into(), SeqCst);
                    // Hold a little while others are still trying.
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(Error::Busy) => {
                    shm.at(BUSY).fetch_add(1, SeqCst);
                }
                Err(e) => {
                    eprintln!("racer {}: unexpected {e:?}", std::process::id());
                    shm.at(OTHER_ERRORS).fetch_add(1, SeqCst);
                }
            }
            shm.at(TRIED).fetch_add(1, SeqCst);
            // The winner stays holding until the parent has counted, then
            // exits without releasing.
            shm.wait_gate(FINISH);
            die_holding();
        }
        other => panic!("unknown role {other}"),
    }
}

/// Releases 16 racers on the lock and returns (winners, fence of the winner).
/// Checks that every racer either got in or was told `Busy`, and that never
/// more than one was inside.
fn race(scheme: Scheme, dir: &TestDir, shm: &Shm, expect_winners: u64) -> Option<u64> {
    let spec = scheme.spec(dir.path(), "ttl=1h");
    let vars = [("SPEC", spec.clone()), ("SHM", shm.path().display().to_string())];
    let mut children = Children::new();
    for _ in 0..RACERS {
        children.push(spawn("racer", &vars));
    }
    wait_until("every racer at the gate", || shm.get(READY) == RACERS as u64 || children.any_exited());
    assert_eq!(shm.get(READY), RACERS as u64, "a racer died before the start");
    shm.open_gate(GO);
    wait_until("every racer to try once", || shm.get(TRIED) == RACERS as u64 || children.any_exited());

    let winners = shm.get(WINNERS);
    assert_eq!(shm.get(OTHER_ERRORS), 0, "a racer got an error other than Busy");
    assert_eq!(winners, expect_winners, "winners");
    assert_eq!(shm.get(BUSY), RACERS as u64 - winners, "losers told Busy");
    assert!(shm.get(MAX_INSIDE) <= 1, "{} racers inside at once", shm.get(MAX_INSIDE));

    // While the winner still holds, an outsider sees it as the live holder.
    let mut observer = open_lock(&spec);
    let seen = observer.inspect().unwrap();
    let fence = if winners == 1 {
        let holder = seen.holder.expect("the winner holds the lock");
        assert_eq!(holder.pid as u64, shm.get(WINNER_PID));
        assert_eq!(holder.liveness, Liveness::Alive);
        assert!(!holder.stale);
        assert_eq!(holder.record.unwrap().fence, shm.get(WINNER_FENCE));
        assert_eq!(seen.last_fence, shm.get(WINNER_FENCE));
        assert_eq!(observer.try_acquire(), Err(Error::Busy));
        Some(shm.get(WINNER_FENCE))
    } else {
        None
    };
    shm.open_gate(FINISH);
    children.expect_success("racers");
    fence
}

/// A process acquires the lock with a TTL of an hour and exits holding it.
/// Returns its fence.
fn leave_dead_owner(scheme: Scheme, dir: &TestDir, shm: &Shm) -> u64 {
    let spec = scheme.spec(dir.path(), "ttl=1h");
    let vars = [("SPEC", spec), ("SHM", shm.path().display().to_string())];
    let mut child = Children::new();
    child.push(spawn("vanish", &vars));
    child.expect_success("vanishing owner");
    shm.get(VANISHED_FENCE)
}

#[test]
fn dead_owner_lock_lets_exactly_one_of_16_in() {
    each_scheme("race-dead", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let dead_fence = leave_dead_owner(scheme, dir, &shm);

        let mut observer = open_lock(&scheme.spec(dir.path(), ""));
        let seen = observer.inspect().unwrap();
        if scheme.breaks_stale() {
            let holder = seen.holder.expect("the dead owner's record is still there");
            assert_eq!(holder.liveness, Liveness::Dead);
            assert!(holder.stale, "a dead owner's lock is stale at once");
        } else {
            assert_eq!(seen.holder, None, "the kernel released the dead owner's flock");
        }
        drop(observer);

        let fence = race(scheme, dir, &shm, 1).unwrap();
        assert!(fence > dead_fence, "fence {fence} after the break, dead owner had {dead_fence}");
    });
}

#[test]
fn expired_record_lets_exactly_one_of_16_in() {
    each_scheme("race-expired", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        // An owner on another host (never judged dead here) whose lease ran
        // out ten seconds ago: stale by its expiry alone.
        let record = forged_record(4242, 1, Some("elsewhere"), 7, Some(ago(Duration::from_secs(10))));
        plant_record(scheme, dir.path(), &record, 7);

        let mut observer = open_lock(&scheme.spec(dir.path(), ""));
        let seen = observer.inspect().unwrap();
        if scheme.breaks_stale() {
            let holder = seen.holder.expect("the expired record is there");
            assert_eq!(holder.liveness, Liveness::Unknown);
            assert!(holder.stale, "an expired record is stale");
        } else {
            assert_eq!(seen.holder, None, "nobody holds the flock");
        }
        drop(observer);

        race(scheme, dir, &shm, 1).unwrap();
    });
}

#[test]
fn live_holder_past_its_ttl_is_broken_by_exactly_one_of_16() {
    each_scheme("race-overrun", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut holder = open_lock(&scheme.spec(dir.path(), "ttl=100ms"));
        let held = holder.try_acquire().unwrap();
        let expires = held.expires.unwrap();
        wait_until("the holder's TTL to pass", || wall_now() > expires);

        if scheme.breaks_stale() {
            let fence = race(scheme, dir, &shm, 1).unwrap();
            assert!(fence > held.fence);
            // The racers' winner has exited holding its lock (a dead owner);
            // the overrunning holder must not remove that record.
            assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
        } else {
            // flock: a live holder is never broken, whatever its TTL.
            assert_eq!(race(scheme, dir, &shm, 0), None);
            assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Expired));
        }
    });
}

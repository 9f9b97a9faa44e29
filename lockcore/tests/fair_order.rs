//! Turns in line, with real processes, on every scheme: waiters get the lock
//! in the order they queued, and waiters killed in line, the next in line
//! among them, hold up nobody. Each file scheme runs twice: with a lock kept
//! to its owner, whose queue is a mapped file, and with one other users may
//! write (`mode=0666`), whose queue is a System V segment.
//!
//! The order of arrival is made, not hoped for: each waiter is started only
//! once the one before it shows in the lock's queue (`queue_length`, which
//! counts the holder and every waiter in line). Each waiter, once it has the
//! lock, writes its number into the next free slot of a shared log, holds
//! the lock a moment and lets go; an overlap counter checks exclusion.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::*;

// Shared-memory slots.
const INSIDE: usize = 0;
const OVERLAPS: usize = 1;
const TAKEN: usize = 2;
/// Slot `ORDER + k`: the number of the waiter that had the lock k-th.
const ORDER: usize = 16;

const WAITERS: usize = 5;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "waiter" => {
            let shm = Shm::open(var("SHM").as_ref());
            let mut lock = open_lock(&var("SPEC"));
            lock.acquire(Some(PATIENCE)).expect("a waiter gets its turn");
            if shm.at(INSIDE).fetch_add(1, SeqCst) != 0 {
                shm.at(OVERLAPS).fetch_add(1, SeqCst);
            }
            let k = shm.at(TAKEN).fetch_add(1, SeqCst) as usize;
            shm.at(ORDER + k).store(var_usize("NUMBER") as u64, SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            shm.at(INSIDE).fetch_sub(1, SeqCst);
            lock.release(Duration::ZERO).expect("the waiter lets go");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Takes the lock on `spec`, then starts waiters 1..=WAITERS one after
/// another, each once the one before it shows in the queue behind the
/// holder: the holder's handle, and the waiters.
fn queue_behind_a_holder(spec: &str, shm: &Shm) -> (lockcore::Lock, Children) {
    let mut holder = open_lock(spec);
    let mut observer = open_lock(spec);
    holder.try_acquire().unwrap();
    let mut children = Children::new();
    for number in 1..=WAITERS {
        let vars =
            [("SPEC", spec.to_string()), ("SHM", shm.path().display().to_string()), ("NUMBER", number.to_string())];
        children.push(spawn("waiter", &vars));
        let want = 1 + number as u32;
        wait_until("the waiter to show in the queue", || {
            observer.inspect().is_ok_and(|i| i.queue_length.unwrap_or(0) >= want) || children.any_exited()
        });
    }
    (holder, children)
}

/// The specs a scheme's tests run on: private, and shared with every user
/// where the scheme's locks may be.
fn specs(scheme: lockcore::Scheme, dir: &TestDir) -> Vec<String> {
    let mut specs = vec![scheme.spec(dir.path(), "ttl=1h")];
    if scheme.supports(lockcore::Ability::Files) && !private_only(scheme) {
        std::fs::create_dir(dir.join("shared")).unwrap();
        specs.push(scheme.spec(&dir.join("shared"), "ttl=1h&mode=0666"));
    }
    specs
}

fn order(shm: &Shm) -> Vec<u64> {
    (0..shm.get(TAKEN) as usize).map(|k| shm.get(ORDER + k)).collect()
}

#[test]
fn waiters_get_the_lock_in_the_order_they_queued() {
    each_scheme("fair-order", |scheme, dir| {
        for (i, spec) in specs(scheme, dir).iter().enumerate() {
            in_order(spec, &dir.join(&format!("shm-{i}")));
        }
    });
}

fn in_order(spec: &str, shm: &std::path::Path) {
    let shm = Shm::create(shm);
    let (mut holder, mut children) = queue_behind_a_holder(spec, &shm);
    holder.release(Duration::ZERO).unwrap();
    children.expect_success("waiter");
    assert_eq!(order(&shm), (1..=WAITERS as u64).collect::<Vec<_>>(), "{spec}: the order of the turns");
    assert_eq!(shm.get(OVERLAPS), 0, "{spec}");
}

#[test]
fn waiters_killed_in_line_hold_up_nobody() {
    each_scheme("fair-killed", |scheme, dir| {
        for (i, spec) in specs(scheme, dir).iter().enumerate() {
            killed_in_line(spec, &dir.join(&format!("shm-{i}")));
        }
    });
}

fn killed_in_line(spec: &str, shm: &std::path::Path) {
    let shm = Shm::create(shm);
    let (mut holder, mut children) = queue_behind_a_holder(spec, &shm);
    // The next in line (waiter 1) and one in the middle (waiter 3).
    for number in [3, 1] {
        let mut child = children.take(number - 1);
        sigkill(child.id());
        child.wait().unwrap();
    }
    let released = Instant::now();
    holder.release(Duration::ZERO).unwrap();
    wait_until("the first survivor's turn", || shm.get(TAKEN) >= 1 || children.any_exited());
    let first_turn = released.elapsed();
    children.expect_success("surviving waiter");
    assert_eq!(order(&shm), vec![2, 4, 5], "{spec}: the survivors, in their order");
    assert_eq!(shm.get(OVERLAPS), 0, "{spec}");
    // The dead are passed over at the hand-off, or after one 10 ms
    // slice at most; a second is a bound with room for a loaded machine.
    assert!(first_turn < Duration::from_secs(1), "{spec}: the first survivor waited {first_turn:?}");
}

#[test]
fn a_handle_that_found_no_line_sees_one_made_since() {
    each_file_scheme("fair-line-made-since", |scheme, dir| {
        for (i, spec) in specs(scheme, dir).iter().enumerate() {
            line_made_since(spec, &dir.join(&format!("shm-{i}")));
        }
    });
}

/// A handle that took the lock while nobody waited (and so found no
/// turnstile) does not pass the waiters that queued since, once its look
/// for the turnstile is no longer believed.
fn line_made_since(spec: &str, shm: &std::path::Path) {
    let shm = Shm::create(shm);
    let mut early = open_lock(spec);
    early.try_acquire().unwrap();
    early.release(Duration::ZERO).unwrap();
    let (mut holder, mut children) = queue_behind_a_holder(spec, &shm);
    std::thread::sleep(lockcore::LOOK_BELIEVED_FOR);
    match early.try_acquire() {
        Err(lockcore::Error::Busy(lockcore::Contention::Queued { ahead, .. })) => {
            assert!(ahead >= 1, "{spec}: {ahead} ahead, with {WAITERS} waiting")
        }
        other => panic!("{spec}: a try with {WAITERS} waiting in line answered {other:?}"),
    }
    holder.release(Duration::ZERO).unwrap();
    children.expect_success("waiter");
    assert_eq!(order(&shm), (1..=WAITERS as u64).collect::<Vec<_>>(), "{spec}: the order of the turns");
}

//! The counter test: 16 processes x 200 read-increment-write cycles of a
//! plain text counter file, each cycle under the lock (`acquire` with a wait
//! budget), for every scheme. The final count is exact and the shared-memory
//! overlap oracle never saw two processes inside at once.
//!
//! Fencing: while it holds the lock, each process appends the fence of its
//! acquisition to an array in shared memory (the slot is taken while holding
//! the lock, so the array is in acquisition order); the parent checks the
//! sequence is strictly increasing and that `inspect` reports its last entry.
//!
//! `flock` runs the same test: its mutual exclusion is the kernel's, and its
//! fences come from its state file beside the flock'd one, `<target>.guard`.
//! The counter file is a separate file for every scheme.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use lockcore::ReleaseOutcome;

const PROCESSES: usize = 16;
const CYCLES: usize = 200;
/// Generous: the budget only turns a wedged lock into a failure.
const BUDGET: Duration = Duration::from_secs(120);

// Shared-memory slots.
const GO: usize = 0;
const READY: usize = 1;
const INSIDE: usize = 2;
const MAX_INSIDE: usize = 3;
const OVERLAPS: usize = 4;
const SEQ: usize = 5;
const TORN_READS: usize = 6;
const BAD_RELEASES: usize = 7;
const FENCES: usize = 16;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "counter");
    let shm = Shm::open(var("SHM").as_ref());
    let counter = std::path::PathBuf::from(var("COUNTER"));
    let cycles = var_usize("CYCLES");
    let mut lock = open_lock(&var("SPEC"));
    shm.at(READY).fetch_add(1, SeqCst);
    shm.wait_gate(GO);
    for _ in 0..cycles {
        let acquired = lock.acquire(Some(BUDGET)).expect("acquire within the budget");
        if shm.enter(INSIDE, MAX_INSIDE) != 0 {
            shm.at(OVERLAPS).fetch_add(1, SeqCst);
        }
        let seq = shm.at(SEQ).fetch_add(1, SeqCst) as usize;
        shm.at(FENCES + seq).store(acquired.fence, SeqCst);

        // A read that does not parse caught another writer half way: count
        // it and go on, so that the parent reports the overlap.
        let text = std::fs::read_to_string(&counter).unwrap();
        let n: u64 = text.trim().parse().unwrap_or_else(|_| {
            shm.at(TORN_READS).fetch_add(1, SeqCst);
            0
        });
        std::fs::write(&counter, format!("{}\n", n + 1)).unwrap();

        shm.leave(INSIDE);
        if lock.release(Duration::ZERO) != Ok(ReleaseOutcome::Released) {
            shm.at(BAD_RELEASES).fetch_add(1, SeqCst);
        }
    }
}

#[test]
fn sixteen_processes_count_exactly_with_increasing_fences() {
    let total = PROCESSES * CYCLES;
    assert!(FENCES + total < SHM_SLOTS);
    each_scheme("counter", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let counter = dir.join("counter.txt");
        std::fs::write(&counter, "0\n").unwrap();
        let spec = scheme.spec(dir.path(), "");
        let vars = [
            ("SPEC", spec.clone()),
            ("SHM", shm.path().display().to_string()),
            ("COUNTER", counter.display().to_string()),
            ("CYCLES", CYCLES.to_string()),
        ];
        let mut children = Children::new();
        for _ in 0..PROCESSES {
            children.push(spawn("counter", &vars));
        }
        wait_until("every counter at the gate", || shm.get(READY) == PROCESSES as u64 || children.any_exited());
        shm.open_gate(GO);
        children.expect_success("counters");

        let count: usize = std::fs::read_to_string(&counter).unwrap().trim().parse().unwrap();
        assert_eq!(shm.get(OVERLAPS), 0, "two processes inside at once");
        assert_eq!(shm.get(TORN_READS), 0, "a read saw another process's write half done");
        assert_eq!(shm.get(BAD_RELEASES), 0, "a release did not say Released");
        assert_eq!(shm.get(MAX_INSIDE), 1);
        assert_eq!(count, total, "lost updates");
        assert_eq!(shm.get(SEQ) as usize, total);

        let fences: Vec<u64> = (0..total).map(|i| shm.get(FENCES + i)).collect();
        assert!(fences[0] > 0);
        for (i, pair) in fences.windows(2).enumerate() {
            assert!(pair[0] < pair[1], "fence {} then {} at acquisition {}", pair[0], pair[1], i + 1);
        }
        let seen = open_lock(&spec).inspect().unwrap();
        assert_eq!(seen.holder, None);
        assert_eq!(seen.last_fence, *fences.last().unwrap());
    });
}

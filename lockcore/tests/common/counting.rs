//! The counter that processes keep under a lock: each cycle of each process
//! reads a plain text counter file, adds one and writes it back while it
//! holds the lock (`acquire` with a wait budget). The final count must be
//! exact, the shared-memory overlap oracle must never see two processes
//! inside at once, and the fences, appended to an array in shared memory
//! while the lock is held (so in acquisition order), must only grow.
//!
//! A test binary that counts dispatches its child role [`COUNTING_ROLE`] to
//! [`count_as_child`], and runs the children with [`count_in_processes`].

use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use lockcore::ReleaseOutcome;

use super::{open_lock, spawn, var, var_usize, wait_until, Children, Shm, SHM_SLOTS};

/// The role a counting child plays.
pub const COUNTING_ROLE: &str = "counter";

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

/// A counting child's cycles, as the parent's environment says.
pub fn count_as_child() {
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

/// Runs `processes` children that each count `cycles` times under the lock
/// `spec`, on the counter file `counter` (made here, at 0), with their
/// shared memory in `shm_dir`; checks the count, the oracle and the
/// releases, and that the fences only grow, and returns the fences in
/// acquisition order.
pub fn count_in_processes(spec: &str, shm_dir: &Path, counter: &Path, processes: usize, cycles: usize) -> Vec<u64> {
    let total = processes * cycles;
    assert!(FENCES + total < SHM_SLOTS);
    let shm = Shm::create(&shm_dir.join("counting-shm"));
    std::fs::write(counter, "0\n").unwrap();
    let vars = [
        ("SPEC", spec.to_owned()),
        ("SHM", shm.path().display().to_string()),
        ("COUNTER", counter.display().to_string()),
        ("CYCLES", cycles.to_string()),
    ];
    let mut children = Children::new();
    for _ in 0..processes {
        children.push(spawn(COUNTING_ROLE, &vars));
    }
    wait_until("every counter at the gate", || shm.get(READY) == processes as u64 || children.any_exited());
    shm.open_gate(GO);
    children.expect_success("counters");

    let count: usize = std::fs::read_to_string(counter).unwrap().trim().parse().unwrap();
    assert_eq!(shm.get(OVERLAPS), 0, "{spec}: two processes inside at once");
    assert_eq!(shm.get(TORN_READS), 0, "{spec}: a read saw another process's write half done");
    assert_eq!(shm.get(BAD_RELEASES), 0, "{spec}: a release did not say Released");
    assert_eq!(shm.get(MAX_INSIDE), 1, "{spec}");
    assert_eq!(count, total, "{spec}: lost updates");
    assert_eq!(shm.get(SEQ) as usize, total, "{spec}");

    let fences: Vec<u64> = (0..total).map(|i| shm.get(FENCES + i)).collect();
    assert!(fences[0] > 0, "{spec}");
    for (i, pair) in fences.windows(2).enumerate() {
        assert!(pair[0] < pair[1], "{spec}: fence {} then {} at acquisition {}", pair[0], pair[1], i + 1);
    }
    fences
}

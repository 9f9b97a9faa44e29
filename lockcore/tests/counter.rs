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

use common::counting::{count_as_child, count_in_processes, COUNTING_ROLE};
use common::*;

const PROCESSES: usize = 16;
const CYCLES: usize = 200;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, COUNTING_ROLE);
    count_as_child();
}

#[test]
fn sixteen_processes_count_exactly_with_increasing_fences() {
    each_scheme("counter", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "");
        let fences = count_in_processes(&spec, dir.path(), &dir.join("counter.txt"), PROCESSES, CYCLES);
        let seen = open_lock(&spec).inspect().unwrap();
        assert_eq!(seen.holder, None);
        assert_eq!(seen.last_fence, *fences.last().unwrap());
    });
}

//! A lock's state file lost while the lock is free (a cleaner that removes
//! idle files from /tmp or /run, an operator tidying up) must not send
//! fences back: the next acquisition's fence is still greater than every
//! earlier one, so a fencing store keeps accepting the new holder.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn fences_still_grow_after_the_state_file_is_lost() {
    let dir = TestDir::new("fence-after-loss");
    for StrategyFiles { name, spec, state: state_file, .. } in every_strategy(dir.path()) {
        let mut lock = open_lock(&format!("{spec}?ttl=1h"));
        let mut fences = Vec::new();
        for _ in 0..3 {
            fences.push(lock.try_acquire().unwrap_or_else(|e| panic!("{name}: {e:?}")).fence);
            lock.release(Duration::ZERO).unwrap();
        }
        assert!(fences.windows(2).all(|w| w[1] > w[0]), "{name}: fences {fences:?}");
        std::fs::remove_file(&state_file).unwrap_or_else(|e| panic!("{name}: remove {}: {e}", state_file.display()));
        let after = open_lock(&format!("{spec}?ttl=1h")).try_acquire().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(
            after.fence > *fences.last().unwrap(),
            "{name}: fence {} after the loss, {fences:?} before",
            after.fence
        );
    }
}

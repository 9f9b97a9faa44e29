//! A lock's state file lost while the lock is free (a cleaner that removes
//! idle files from /tmp or /run, an operator tidying up) must not send
//! fences back: the next acquisition's fence is still greater than every
//! earlier one, so a fencing store keeps accepting the new holder.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// Each strategy's spec and the file that remembers its last fence.
fn strategies(dir: &Path) -> Vec<(&'static str, String, std::path::PathBuf)> {
    let at = |name: &str| dir.join(name).to_str().expect("UTF-8 test path").to_owned();
    vec![
        ("lockfile", format!("lockfile:{}", at("data")), dir.join("data.lock.guard")),
        ("mkdir", format!("mkdir:{}", at("dirlock")), dir.join("dirlock.guard")),
        ("flock", format!("flock:{}", at("flocked")), dir.join("flocked")),
        ("symlink", format!("symlink:{}", at("link")), dir.join("link.guard")),
        ("lease", format!("lease:{}", at("lease")), dir.join("lease")),
        ("toplock", format!("toplock:{}", at("queue")), dir.join("queue")),
    ]
}

#[test]
fn fences_still_grow_after_the_state_file_is_lost() {
    let dir = TestDir::new("fence-after-loss");
    for (name, spec, state_file) in strategies(dir.path()) {
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

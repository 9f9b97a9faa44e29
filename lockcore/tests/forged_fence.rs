//! A lock whose files were forged to carry the largest fencing token: no
//! token is left that is greater than every earlier one, so the lock is
//! refused as corrupt, for every strategy that draws tokens from a file.
//! It never panics, and never wraps around to hand out a small token that
//! a storage layer would take for an old holder's.

mod common;

use std::fs;

use common::*;
use lockcore::guard::{GuardState, GUARD_RECORD_LEN};
use lockcore::strategy::lease::LEASE_RECORD_LEN;
use lockcore::{CorruptKind, Error};

fn guard_at_largest_fence() -> Vec<u8> {
    let state = GuardState { fence: u64::MAX, cooldown_until: None };
    let bytes = state.encode().as_bytes().to_vec();
    assert_eq!(bytes.len(), GUARD_RECORD_LEN);
    bytes
}

#[test]
fn a_guard_at_the_largest_fence_refuses_every_guarded_strategy() {
    for scheme in ["lockfile", "mkdir", "symlink"] {
        let dir = TestDir::new(&format!("fence-max-{scheme}"));
        let lock_path = dir.join("data.lock");
        let guard_path = dir.join("data.lock.guard");
        fs::write(&guard_path, guard_at_largest_fence()).unwrap();
        let target = if scheme == "lockfile" { dir.join("data") } else { lock_path.clone() };
        let mut lock = open_lock(&format!("{scheme}:{}?ttl=10s", target.display()));
        assert_eq!(
            lock.try_acquire(),
            Err(Error::Corrupt(CorruptKind::GuardState)),
            "{scheme}: the guard has no fence left"
        );
        assert!(fs::symlink_metadata(&lock_path).is_err(), "{scheme}: no lock was made");
        assert_eq!(fs::read(&guard_path).unwrap(), guard_at_largest_fence(), "{scheme}: the guard is untouched");
    }
}

#[test]
fn a_flock_state_line_at_the_largest_fence_is_refused() {
    let dir = TestDir::new("fence-max-flock");
    let path = dir.join("data.lock");
    fs::write(&path, guard_at_largest_fence()).unwrap();
    let mut lock = open_lock(&format!("flock:{}", path.display()));
    assert_eq!(lock.try_acquire(), Err(Error::Corrupt(CorruptKind::GuardState)));
    assert_eq!(fs::read(&path).unwrap(), guard_at_largest_fence());
}

/// The symlink's own record (its target) carries the fence: an expired one
/// at the largest raises the guard to it, and nothing is left.
#[test]
fn an_expired_symlink_at_the_largest_fence_is_refused() {
    let dir = TestDir::new("fence-max-symlink-target");
    let path = dir.join("data.lock");
    let target = format!("lockcore1:elsewhere:-:1:1:{}:{}:ttl", "0".repeat(32), u64::MAX);
    std::os::unix::fs::symlink(&target, &path).unwrap();
    set_mtime(&path, ago(std::time::Duration::from_secs(3600)));
    let mut lock = open_lock(&format!("symlink:{}?ttl=10s", path.display()));
    assert_eq!(lock.try_acquire(), Err(Error::Corrupt(CorruptKind::GuardState)));
    assert_eq!(fs::read_link(&path).unwrap().to_str(), Some(target.as_str()), "the link was not replaced");
}

#[test]
fn a_free_lease_at_the_largest_fence_is_refused() {
    let dir = TestDir::new("fence-max-lease");
    let path = dir.join("data.lease");
    let mut line = format!("0\t0\t{}\t-\t-\t0\t-", u64::MAX).into_bytes();
    line.resize(LEASE_RECORD_LEN - 1, b' ');
    line.push(b'\n');
    fs::write(&path, &line).unwrap();
    let mut lock = open_lock(&format!("lease:{}?ttl=10s", path.display()));
    assert_eq!(lock.inspect().map(|i| i.last_fence), Ok(u64::MAX), "the forged line parses as a free lease");
    assert_eq!(lock.try_acquire(), Err(Error::Corrupt(CorruptKind::Record)));
    assert_eq!(fs::read(&path).unwrap(), line, "the lease file is untouched");
}

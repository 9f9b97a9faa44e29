//! A lock whose files were forged to carry the largest fencing token: no
//! token is left that is greater than every earlier one, so the lock is
//! refused as corrupt, on every scheme. It never panics, and never wraps
//! around to hand out a small token that a storage layer would take for an
//! old holder's.
//!
//! * The state file that keeps the last fence (the guard, `flock`'s
//!   `<target>.guard`, the lease, the queue's header) at the largest: the
//!   forged file parses (`inspect` reports its fence), and `try_acquire`
//!   is refused: `Corrupt(GuardState)` where the scheme keeps a guard,
//!   `Corrupt(Record)` for the lease and the queue, which keep their own.
//! * An expired holder whose own record carries the largest fence (a lock
//!   file, a `mkdir` lock's record, a symlink's target, a held lease, a
//!   queue's grant): the fence is raised to it before the lock is broken,
//!   so the lock is refused while it is still there, not broken and
//!   forgotten. `flock` keeps its holder's record after the guard line of
//!   the same file, written in the same guard section as the fence it
//!   carries, and its lock is the kernel's, never stale
//!   (`Scheme::breaks_stale_locks`): a record left behind decides nothing,
//!   and the next fence follows the guard line.
//!
//! A `shm` lock's state is the lease line in the active slot of its file:
//! the forger writes a whole file of that format with its line there.
//!
//! A refused attempt writes nothing, except that a queue is a log: there the
//! attempt leaves its request and its withdrawal behind. (A `shm` attempt
//! takes the section word in its file, which writes the word and so moves
//! the mtime: the rest of the file is what must not change.) After an operator
//! removes the forged file, every fence handed out is strictly greater
//! than every earlier one and never below the wall clock in microseconds
//! at the moment it was handed out.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use lockcore::internals::{Grant, GuardState, Header, LeaseState, Line};
use lockcore::{BootTime, CorruptKind, ErrorKind, Lock, Moment, Nonce, Owner, Record, WallTime};

/// The fences a test has seen handed out, in order.
#[derive(Default)]
struct Fences(Vec<u64>);

impl Fences {
    /// One acquisition and release, whose fence must be above every
    /// earlier one and not below the clock when it was asked for.
    fn take(&mut self, lock: &mut Lock, what: &str) {
        let floor = (WallTime::now().unix_nanos() / 1_000) as u64;
        let fence = lock.try_acquire().unwrap_or_else(|e| panic!("{what}: {e}")).fence;
        assert!(fence >= floor, "{what}: fence {fence} below the clock's {floor} µs");
        if let Some(&last) = self.0.last() {
            assert!(fence > last, "{what}: fence {fence} after {:?}", self.0);
        }
        self.0.push(fence);
        lock.release(Duration::ZERO).unwrap_or_else(|e| panic!("{what}: release: {e}"));
    }
}

/// What a fence that leaves none to hand out is refused as: the guard's
/// kind where the scheme keeps a guard, a damaged record for the lease and
/// the queue, which keep their fences themselves.
fn refusal(scheme: Scheme, dir: &Path) -> ErrorKind {
    if scheme.guard_path(dir).is_some() {
        ErrorKind::Corrupt(CorruptKind::GuardState)
    } else {
        ErrorKind::Corrupt(CorruptKind::Record)
    }
}

/// A queue's header on this boot, with `last_fence`.
fn queue_header(last_fence: u64) -> Line {
    let boot = Owner::current().unwrap().boot;
    Line::Header(Header {
        kernel_boot: lockcore::BootId::kernel(),
        boot,
        not_before: 0,
        last_end: 0,
        floor: 0,
        last_fence,
        head_since: None,
    })
}

/// The scheme's state file as a forger leaves it: its own format, free,
/// with the largest fence.
fn state_at_largest_fence(scheme: Scheme, dir: &Path) -> Vec<u8> {
    if scheme.guard_path(dir).is_some() {
        return GuardState { fence: u64::MAX, cooldown_until: None }.encode().as_bytes().to_vec();
    }
    match scheme {
        Scheme::Lease => LeaseState::Free { not_before: None, fence: u64::MAX }.encode().as_bytes().to_vec(),
        Scheme::Toplock => queue_header(u64::MAX).encode().as_bytes().to_vec(),
        Scheme::Shm => {
            shm_lock::with_state(&shm_lock::new_file(), &LeaseState::Free { not_before: None, fence: u64::MAX })
        }
        Scheme::Lockfile | Scheme::Mkdir | Scheme::Flock | Scheme::Symlink => {
            unreachable!("{} keeps a guard", scheme.name())
        }
        other => unknown_format(other),
    }
}

#[test]
fn a_state_file_at_the_largest_fence_is_refused() {
    each_file_scheme("fence-max-state", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=10s");
        let state = scheme.state_path(dir.path());
        let mut fences = Fences::default();
        let mut lock = open_lock(&spec);
        for _ in 0..3 {
            fences.take(&mut lock, "before the forgery");
        }
        let forged = state_at_largest_fence(scheme, dir.path());
        std::fs::write(&state, &forged).unwrap();

        let seen = lock.inspect().expect("the forged file parses");
        assert_eq!((seen.last_fence, seen.holder), (u64::MAX, None));
        let is_a_log = seen.queue_length.is_some();
        assert_eq!(lock.try_acquire().map_err(|e| e.kind()), Err(refusal(scheme, dir.path())), "no fence is left");
        assert_eq!(lock.held(), None);
        let after = lock.inspect().unwrap();
        assert_eq!((after.last_fence, after.holder), (u64::MAX, None), "nobody was let in");
        if !is_a_log {
            // Of a `shm` file, but for the section word the attempts took.
            let (after, forged) =
                (shm_lock::without_section(&std::fs::read(&state).unwrap()), shm_lock::without_section(&forged));
            assert_eq!(after, forged, "the forged file was written");
        }

        std::fs::remove_file(&state).unwrap();
        fences.take(&mut lock, "after the forged file was removed");
        fences.take(&mut open_lock(&spec), "another handle, after");
    });
}

/// An owner that is alive, so that only the expiry makes its lock stale:
/// this test's parent, with its true start time.
fn live_owner() -> Owner {
    let parent = getppid();
    let (_, start) = proc_stat(parent).expect("the parent is alive");
    owner_as(parent, start)
}

/// Leaves, in the scheme's own format, the lock of a live process that
/// expired a second ago and whose record carries the largest fence.
fn leave_expired_at_largest_fence(scheme: Scheme, dir: &Path) {
    let lock = scheme.lock_path(dir);
    let a_second_ago = ago(Duration::from_secs(1));
    let record = Record {
        owner: live_owner(),
        nonce: Nonce::random().unwrap(),
        fence: u64::MAX,
        since: wall_time(ago(Duration::from_secs(2))),
        expires: Some(Moment { wall: wall_time(a_second_ago), boot: None }),
    };
    let owner = record.owner.process;
    let lock_file = || forged_record(owner.pid, owner.start_ticks, None, u64::MAX, Some(a_second_ago));
    match scheme {
        Scheme::Lockfile => std::fs::write(&lock, lock_file()).unwrap(),
        Scheme::Mkdir => {
            std::fs::create_dir(&lock).unwrap();
            std::fs::write(lock.join("owner"), lock_file()).unwrap();
        }
        Scheme::Symlink => {
            // The link's mtime is its expiry.
            let target = std::ffi::OsStr::from_bytes(record.encode_line().as_bytes()).to_owned();
            std::os::unix::fs::symlink(target, &lock).unwrap();
            set_mtime(&lock, a_second_ago);
        }
        Scheme::Lease => std::fs::write(&lock, LeaseState::Held(record).encode().as_bytes()).unwrap(),
        Scheme::Shm => shm_lock::forge(&lock, &LeaseState::Held(record)),
        Scheme::Toplock => {
            // A request granted until a second ago, at the largest fence.
            let now = BootTime::now().nanos();
            let second = Duration::from_secs(1).as_nanos() as i64;
            let (t, until) = (now - 2 * second, Grant::Until(now - second));
            let (nonce, owner) = (record.nonce, record.owner);
            let mut log = queue_header(0).encode().as_bytes().to_vec();
            log.extend_from_slice(Line::Request { nonce, owner, patience: Some(second), t }.encode().as_bytes());
            log.extend_from_slice(Line::Grant { nonce, until, t, fence: u64::MAX }.encode().as_bytes());
            std::fs::write(&lock, log).unwrap();
        }
        Scheme::Flock => unreachable!("a flock lock is never stale"),
        other => unknown_format(other),
    }
    if matches!(scheme, Scheme::Lease | Scheme::Toplock) {
        // As private as the library makes it, so that it is judged by its
        // content and not refused as open to others.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// What is at `path`, to the inode and mtime, but for what a `shm`
/// attempt changes by taking the section word in its file: that word, and so the
/// mtime ([`shm_lock::lease_only`]).
fn what_a_refusal_keeps(path: &Path) -> common::files::Tree {
    shm_lock::lease_only(common::files::tree(path))
}

#[test]
fn an_expired_holder_at_the_largest_fence_is_refused_not_broken() {
    each_file_scheme("fence-max-record", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=10s");
        let lock_path = scheme.lock_path(dir.path());
        let mut fences = Fences::default();
        let mut lock = open_lock(&spec);
        for _ in 0..3 {
            fences.take(&mut lock, "before the forgery");
        }
        if !scheme.breaks_stale_locks() {
            // What flock does instead: the kernel let go with the holder,
            // and the record it left beside the lock decides nothing.
            let left = leave_lock(&spec, Owner::current().unwrap());
            assert_eq!(lock.inspect().unwrap().holder, None, "the kernel lock went with its handle");
            fences.take(&mut lock, "after a holder left its record");
            assert!(fences.0.last() > Some(&left.fence));
            return;
        }
        if scheme.state_path(dir.path()) == lock_path {
            std::fs::remove_file(&lock_path).unwrap();
        }
        leave_expired_at_largest_fence(scheme, dir.path());
        // A handle that keeps its file mapped sees a new one at its path
        // once its last look is no longer believed.
        std::thread::sleep(lockcore::LOOK_BELIEVED_FOR);
        let before = what_a_refusal_keeps(&lock_path);

        let seen = lock.inspect().expect("the forged lock parses");
        assert_eq!(seen.last_fence, u64::MAX);
        let is_a_log = seen.queue_length.is_some();
        assert_eq!(lock.try_acquire().map_err(|e| e.kind()), Err(refusal(scheme, dir.path())), "no fence is left");
        assert_eq!(lock.held(), None);
        assert_eq!(lock.inspect().unwrap().last_fence, u64::MAX, "the forged fence still counts");
        if !is_a_log {
            assert_eq!(what_a_refusal_keeps(&lock_path), before, "the stale lock was broken and forgotten");
        }

        match std::fs::symlink_metadata(&lock_path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&lock_path).unwrap(),
            _ => std::fs::remove_file(&lock_path).unwrap(),
        }
        fences.take(&mut lock, "after the forged lock was removed");
        fences.take(&mut open_lock(&spec), "another handle, after");
    });
}

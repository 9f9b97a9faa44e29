//! A process killed between creating the lock and writing its record: the
//! lock must be neither wedged forever nor broken while fresh.
//!
//! lockcore itself never shows a lock without its record: every lock, guard,
//! lease and queue file is built complete under a helper name of its own
//! (`<path>.<32 random hex digits>`) and only then linked or renamed into
//! place, and a lease or queue changes in one write. So what a crash can
//! leave behind is:
//! * a helper beside the lock, complete or partial (a file, a directory, a
//!   symlink): no lock, never read, never in anyone's way, and never
//!   removed either (nobody else knows its name; it is harmless garbage);
//! * a lock with a complete record of the dead process: stale at once.
//!
//! Foreign tools do have the window: LockFile::Simple creates the lock file
//! and writes its pid afterwards (an empty lock file), and a seed-001 CGI
//! script does a plain `mkdir` (an empty lock directory). Such a lock names
//! no owner, so it is judged by age only: busy while younger than `ttl`,
//! broken once older (its mtime is set back to show this, no sleeping).
//! Without a `ttl` nothing can prove it stale: it stays busy until an
//! operator's `break_lock`. Those are the lock formats of `lockfile` and
//! `mkdir` only; the other schemes have no peer that writes in steps.
//!
//! `flock`: the kernel releases the flock of a killed process at any point;
//! a file it created but never wrote (empty), or a guard whose record was
//! written in part, is taken over at once.
//!
//! The first test kills a process that takes and releases the lock in a
//! tight loop at random moments (sled-style), covering every intermediate
//! state at once, on every scheme: after each kill the next `try_acquire`
//! (with `ttl=1h`) must succeed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{CorruptKind, ErrorKind, Liveness, ReleaseOutcome};

// Shared-memory slots.
const LOOPS: usize = 0;
const LAST_FENCE: usize = 1;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = open_lock(&var("SPEC"));
    match role {
        // Takes and releases the lock until killed.
        "churner" => loop {
            let acquired = lock.try_acquire().expect("nobody else touches the lock");
            shm.at(LAST_FENCE).store(acquired.fence, SeqCst);
            assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
            shm.at(LOOPS).fetch_add(1, SeqCst);
        },
        other => panic!("unknown role {other}"),
    }
}

/// What an attempt came to, without the details of a refusal.
fn kind<T>(result: Result<T, lockcore::Error>) -> Result<T, ErrorKind> {
    result.map_err(|e| e.kind())
}

/// A small xorshift generator: kill moments vary from run to run.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A name the library could have given a helper beside `path`.
fn helper_beside(path: &Path, rng: &mut Rng) -> PathBuf {
    with_suffix(path, &format!(".{:016x}{:016x}", rng.next(), rng.next()))
}

/// Whether `name` is `<base>.<32 lowercase hex digits>`.
fn is_helper_of(name: &str, base: &str) -> bool {
    name.strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

#[test]
fn holder_killed_at_random_moments_never_wedges_the_lock() {
    const KILLS: usize = 25;
    let mut rng = Rng::new();
    each_file_scheme("torn-random-kill", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let mut next = open_lock(&spec);
        for round in 0..KILLS {
            let shm = Shm::create(&dir.join(&format!("shm{round}")));
            let mut children = Children::new();
            children.push(spawn("churner", &[("SPEC", spec.clone()), ("SHM", shm.path().display().to_string())]));
            wait_until("the churner to get going", || shm.get(LOOPS) > 0 || children.any_exited());
            std::thread::sleep(Duration::from_micros(rng.below(5_000)));
            let mut child = children.pop().unwrap();
            sigkill(child.id());
            let status = child.wait().unwrap();
            assert!(!status.success(), "round {round}: the churner failed on its own: {status:?}");

            let acquired = next.try_acquire().unwrap_or_else(|e| panic!("round {round}: wedged after a kill: {e:?}"));
            assert!(acquired.fence > shm.get(LAST_FENCE), "round {round}: fence went back");
            assert_eq!(next.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
            std::fs::remove_file(shm.path()).unwrap();
        }
        // Whatever a killed churner left half done is a helper beside the
        // lock or its guard, under a name of the library's own: nothing else.
        let lock = scheme.lock_path(dir.path());
        let lock_name = lock.file_name().unwrap().to_str().unwrap().to_owned();
        let guard_name = scheme.guard_path(dir.path()).map(|g| g.file_name().unwrap().to_str().unwrap().to_owned());
        let target_name = scheme.target(dir.path()).file_name().unwrap().to_str().unwrap().to_owned();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let expected = name == lock_name
                || Some(&name) == guard_name.as_ref()
                || name == target_name
                || is_helper_of(&name, &lock_name)
                || guard_name.as_ref().is_some_and(|guard| is_helper_of(&name, guard));
            assert!(expected, "{name} left beside the lock");
        }
    });
}

/// Helpers of a creator killed half way, beside the lock and its guard: a
/// record written in part, an empty file, a directory built in part or
/// complete, a symlink to part of a record. None of them wedges the lock
/// or breaks its holder, and none is touched.
#[test]
fn leftover_helpers_neither_wedge_nor_break_the_lock() {
    let mut rng = Rng::new();
    each_file_scheme("torn-helpers", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let lock_path = scheme.lock_path(dir.path());
        let full = forged_record(4242, 1, Some("elsewhere"), 1, Some(from_now(Duration::from_secs(3600))));
        let line = std::str::from_utf8(&full).unwrap().lines().nth(1).unwrap().to_owned();

        let mut leftovers = Vec::new();
        for beside in std::iter::once(lock_path.clone()).chain(scheme.guard_path(dir.path())) {
            let half_file = helper_beside(&beside, &mut rng);
            std::fs::write(&half_file, &full[..full.len() / 2]).unwrap();
            let empty_file = helper_beside(&beside, &mut rng);
            std::fs::write(&empty_file, b"").unwrap();
            let empty_dir = helper_beside(&beside, &mut rng);
            std::fs::create_dir(&empty_dir).unwrap();
            let half_dir = helper_beside(&beside, &mut rng);
            std::fs::create_dir(&half_dir).unwrap();
            std::fs::write(half_dir.join("owner"), &full[..full.len() / 3]).unwrap();
            let full_dir = helper_beside(&beside, &mut rng);
            std::fs::create_dir(&full_dir).unwrap();
            std::fs::write(full_dir.join("owner"), &full).unwrap();
            let half_link = helper_beside(&beside, &mut rng);
            std::os::unix::fs::symlink(&line[..line.len() / 2], &half_link).unwrap();
            leftovers.extend([half_file, empty_file, empty_dir, half_dir, full_dir, half_link]);
        }
        let before: Vec<Snapshot> = leftovers.iter().map(|p| snapshot(p)).collect();

        let mut lock = open_lock(&spec);
        let first = lock.try_acquire().expect("leftover helpers do not wedge the lock");
        let mut other = open_lock(&spec);
        assert_eq!(kind(other.try_acquire()), Err(ErrorKind::Busy), "nor do they break its holder");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        let again = other.try_acquire().expect("free after the release");
        assert!(again.fence > first.fence);
        assert_eq!(other.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        let after: Vec<Snapshot> = leftovers.iter().map(|p| snapshot(p)).collect();
        assert_eq!(after, before, "a leftover helper was touched");
    });
}

/// `lockfile`: a creator killed after its `link`, before it removed its
/// helper's name: the lock file of a dead owner has a second name. The lock
/// is stale and broken at once; the second name is left alone.
#[test]
fn dead_owners_lock_file_with_a_second_name_is_broken() {
    let mut rng = Rng::new();
    each_of("torn-lockfile-linked", &[Scheme::Lockfile], |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let lock_path = scheme.lock_path(dir.path());
        let left = leave_lock(&spec, owner_as(dead_pid(), 1));
        let second = helper_beside(&lock_path, &mut rng);
        std::fs::hard_link(&lock_path, &second).unwrap();
        let before = snapshot(&second);

        let mut lock = open_lock(&spec);
        let holder = lock.inspect().unwrap().holder.unwrap();
        assert_eq!((holder.liveness, holder.stale), (Liveness::Dead, true));
        let acquired = lock.try_acquire().expect("a dead owner's linked lock is stale");
        assert!(acquired.fence > left.fence);
        assert_eq!(snapshot(&second), before, "the second name is not the lock's");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// `mkdir`: a prolong killed before it renamed its new record over `owner`
/// leaves `owner.<hex>` beside it, inside the lock directory. The lock is
/// still the dead owner's, stale at once, and goes whole.
#[test]
fn dead_owners_lock_directory_with_a_prolongs_leftover_is_broken() {
    let mut rng = Rng::new();
    each_of("torn-mkdir-prolong", &[Scheme::Mkdir], |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let lock_path = scheme.lock_path(dir.path());
        let left = leave_lock(&spec, owner_as(dead_pid(), 1));
        let full = std::fs::read(lock_path.join("owner")).unwrap();
        std::fs::write(helper_beside(&lock_path.join("owner"), &mut rng), &full[..full.len() / 2]).unwrap();

        let mut lock = open_lock(&spec);
        let holder = lock.inspect().unwrap().holder.expect("still the dead owner's lock");
        assert_eq!((holder.pid, holder.liveness, holder.stale), (left.owner.process.pid, Liveness::Dead, true));
        let acquired = lock.try_acquire().expect("stale at once");
        assert!(acquired.fence > left.fence);
        let inside: Vec<_> = std::fs::read_dir(&lock_path).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(inside, ["owner"], "the new lock directory holds our record alone");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

#[test]
fn empty_lock_file_of_a_lockfile_simple_writer_is_judged_by_age() {
    each_of("torn-lockfile-empty", &[Scheme::Lockfile], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        std::fs::write(&lock_path, b"").unwrap();

        // Fresh: the writer may still be about to write its pid.
        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=2s"));
        let holder = lock.inspect().unwrap().holder.expect("an empty lock file is a lock");
        assert_eq!((holder.pid, holder.liveness, holder.stale), (0, Liveness::Unknown, false));
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Busy));
        assert_eq!(std::fs::read(&lock_path).unwrap(), b"", "not broken while fresh");

        // Older than the TTL: broken.
        set_mtime(&lock_path, ago(Duration::from_secs(3600)));
        assert!(lock.inspect().unwrap().holder.unwrap().stale);
        lock.try_acquire().expect("an empty lock file older than the TTL is stale");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // Without a TTL nothing can prove it stale: busy until an operator breaks it.
        std::fs::write(&lock_path, b"").unwrap();
        set_mtime(&lock_path, ago(Duration::from_secs(3600)));
        let mut no_ttl = open_lock(&scheme.spec(dir.path(), ""));
        assert_eq!(kind(no_ttl.try_acquire()), Err(ErrorKind::Busy));
        assert_eq!(no_ttl.break_lock(), Ok(true));
        no_ttl.try_acquire().expect("free after break_lock");
    });
}

#[test]
fn foreign_empty_lock_directory_is_busy_while_young_and_broken_when_old() {
    each_of("torn-mkdir-empty", &[Scheme::Mkdir], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        // A seed-001 script's lock: a plain mkdir, nothing inside.
        std::fs::create_dir(&lock_path).unwrap();

        let mut lock = open_lock(&scheme.spec(dir.path(), "ttl=2s"));
        let holder = lock.inspect().unwrap().holder.expect("an empty directory is a lock");
        assert_eq!((holder.pid, holder.liveness, holder.stale), (0, Liveness::Unknown, false));
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Busy), "younger than the TTL");
        assert!(lock_path.is_dir(), "not broken while fresh");

        set_mtime(&lock_path, ago(Duration::from_secs(3600)));
        assert!(lock.inspect().unwrap().holder.unwrap().stale);
        lock.try_acquire().expect("older than the TTL: broken");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        assert!(!lock_path.exists());

        // Without a TTL: busy however old, until an operator breaks it.
        std::fs::create_dir(&lock_path).unwrap();
        set_mtime(&lock_path, ago(Duration::from_secs(3600)));
        let mut no_ttl = open_lock(&scheme.spec(dir.path(), ""));
        assert_eq!(kind(no_ttl.try_acquire()), Err(ErrorKind::Busy));
        assert_eq!(no_ttl.break_lock(), Ok(true));
        no_ttl.try_acquire().expect("free after break_lock");
        assert_eq!(no_ttl.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // A writer killed half way through a record of ours, written in
        // place (no version of this library does; a program imitating it
        // might): an error while young, broken once the directory is older
        // than the TTL (a damaged record is judged by its directory's time).
        let full = forged_record(4242, 1, None, 1, None);
        std::fs::create_dir(&lock_path).unwrap();
        std::fs::write(lock_path.join("owner"), &full[..full.len() / 2]).unwrap();
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Corrupt(CorruptKind::Record)));
        assert!(lock_path.join("owner").exists(), "not broken while fresh");
        set_mtime(&lock_path, ago(Duration::from_secs(3600)));
        lock.try_acquire().expect("a torn record older than the TTL is stale");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

#[test]
fn flock_file_created_but_not_written_is_taken_at_once() {
    each_of("torn-flock", &[Scheme::Flock], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        let guard_path = scheme.guard_path(dir.path()).unwrap();
        let spec = scheme.spec(dir.path(), "ttl=1h");

        // Created (as `flock(1)` creates it) and killed at once.
        std::fs::write(&lock_path, b"").unwrap();
        let mut lock = open_lock(&spec);
        assert_eq!(lock.inspect().unwrap().holder, None);
        let first = lock.try_acquire().expect("an empty flock file is free");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // A holder killed half way through writing its record after the
        // guard line (the flock'd file itself is never written).
        let guard = lockcore::internals::GuardState { fence: first.fence, cooldown_until: None }.encode();
        let full = forged_record(4242, 1, None, first.fence, None);
        let line = std::str::from_utf8(&full).unwrap().lines().nth(1).unwrap().to_owned();
        let mut torn = guard.as_bytes().to_vec();
        torn.extend_from_slice(&line.as_bytes()[..line.len() / 2]);
        std::fs::write(&guard_path, &torn).unwrap();
        let again = lock.try_acquire().expect("a torn record does not wedge a flock");
        assert!(again.fence > first.fence, "the fence survives in the guard line");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

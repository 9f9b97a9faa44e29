//! A process killed between creating the lock and writing its record: the
//! lock must be neither wedged forever nor broken while fresh.
//!
//! lockcore itself never shows a lock without its record (`lockfile` links a
//! finished temp file into place, `mkdir` renames a finished staging
//! directory into place), so what a crash can leave behind is:
//! * a temp file `<lock>.tmp` (`lockfile`) or a staging directory
//!   `<target>.new` (`mkdir`), complete or partial: ignored and cleaned up
//!   by the next acquirer;
//! * a lock with a complete record of the dead process: stale at once.
//!
//! Foreign tools do have the window: LockFile::Simple creates the lock file
//! and writes its pid afterwards (an empty lock file), and a seed-001 CGI
//! script does a plain `mkdir` (an empty lock directory). Such a lock names
//! no owner, so it is judged by age only: busy while younger than `ttl`,
//! broken once older (its mtime is set back to show this, no sleeping).
//! Without a `ttl` nothing can prove it stale: it stays busy until an
//! operator's `break_lock`.
//!
//! `flock`: the kernel releases the flock of a killed process at any point;
//! a file it created but never wrote (empty) or wrote in part is taken over
//! at once.
//!
//! The first test kills a process that takes and releases the lock in a
//! tight loop at random moments (sled-style), covering every intermediate
//! state at once: after each kill the next `try_acquire` (with `ttl=1h`)
//! must succeed.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{CorruptKind, Error, Liveness, ReleaseOutcome};

// Shared-memory slots.
const LOOPS: usize = 0;
const LAST_FENCE: usize = 1;
const VANISHED_FENCE: usize = 2;

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
        "vanish" => {
            let acquired = lock.try_acquire().expect("the vanishing owner acquires");
            shm.at(VANISHED_FENCE).store(acquired.fence, SeqCst);
            die_holding();
        }
        other => panic!("unknown role {other}"),
    }
}

/// A small xorshift generator: kill moments vary from run to run.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn holder_killed_at_random_moments_never_wedges_the_lock() {
    const KILLS: usize = 25;
    let mut rng = Rng::new();
    each_scheme("torn-random-kill", |scheme, dir| {
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
        // Whatever the churner left half done has been cleaned up.
        if let Some(staging) = scheme.staging_path(dir.path()) {
            assert!(!staging.exists(), "{} left behind", staging.display());
        }
    });
}

#[test]
fn leftover_temp_file_neither_wedges_nor_breaks_the_lockfile() {
    each_of("torn-lockfile-tmp", &[Scheme::Lockfile], |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let tmp = scheme.staging_path(dir.path()).unwrap();
        let lock_path = scheme.lock_path(dir.path());
        let full = forged_record(4242, 1, Some("elsewhere"), 1, Some(from_now(Duration::from_secs(3600))));

        // Killed while writing the temp file, before the link.
        std::fs::write(&tmp, &full[..full.len() / 2]).unwrap();
        let mut lock = open_lock(&spec);
        lock.try_acquire().expect("a half-written temp file does not wedge the lock");
        assert!(!tmp.exists(), "the leftover temp file is gone");

        // A fresh holder exists and another half-written temp file appears:
        // the holder's lock is not broken.
        std::fs::write(&tmp, &full[..10]).unwrap();
        let before = snapshot(&lock_path);
        let mut other = open_lock(&spec);
        assert_eq!(other.try_acquire(), Err(Error::Busy));
        assert_eq!(snapshot(&lock_path), before, "the fresh lock was not touched");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        let _ = std::fs::remove_file(&tmp);

        // Killed after the link, before the temp name was removed: the lock
        // file (a dead owner's record) has a second name.
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        children.push(spawn("vanish", &[("SPEC", spec.clone()), ("SHM", shm.path().display().to_string())]));
        children.expect_success("vanishing owner");
        std::fs::hard_link(&lock_path, &tmp).unwrap();
        let acquired = other.try_acquire().expect("a dead owner's linked lock is stale");
        assert!(acquired.fence > shm.get(VANISHED_FENCE));
        assert!(!tmp.exists());
        assert_eq!(other.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
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
        assert_eq!(lock.try_acquire(), Err(Error::Busy));
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
        assert_eq!(no_ttl.try_acquire(), Err(Error::Busy));
        assert_eq!(no_ttl.break_lock(), Ok(true));
        no_ttl.try_acquire().expect("free after break_lock");
    });
}

#[test]
fn leftover_staging_directory_neither_wedges_nor_breaks_the_mkdir_lock() {
    each_of("torn-mkdir-staging", &[Scheme::Mkdir], |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let staging = scheme.staging_path(dir.path()).unwrap();
        let lock_path = scheme.lock_path(dir.path());
        let full = forged_record(4242, 1, Some("elsewhere"), 1, Some(from_now(Duration::from_secs(3600))));

        let leftovers: [&[(&str, &[u8])]; 4] = [
            &[],                                       // killed right after mkdir
            &[("owner", &full[..full.len() / 3])],     // killed while writing the record
            &[("owner", &full)],                       // killed before the rename
            &[("owner.tmp", &full[..full.len() / 2])], // a prolong's temp name
        ];
        let mut lock = open_lock(&spec);
        for files in leftovers {
            std::fs::create_dir(&staging).unwrap();
            for (name, bytes) in files {
                std::fs::write(staging.join(name), bytes).unwrap();
            }
            lock.try_acquire().unwrap_or_else(|e| panic!("staging with {:?} wedged the lock: {e:?}", files.len()));
            assert!(!staging.exists(), "the staging directory is cleaned up");
            assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        }

        // A fresh holder and a leftover staging directory: the holder keeps it.
        lock.try_acquire().unwrap();
        std::fs::create_dir(&staging).unwrap();
        std::fs::write(staging.join("owner"), &full[..20]).unwrap();
        let before = snapshot(&lock_path.join("owner"));
        let mut other = open_lock(&spec);
        assert_eq!(other.try_acquire(), Err(Error::Busy));
        assert_eq!(snapshot(&lock_path.join("owner")), before, "the fresh lock was not touched");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        other.try_acquire().expect("after the release the leftover does not wedge it");
        assert!(!staging.exists());
        assert_eq!(other.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // A retired lock directory left by a release killed half way.
        let retired = with_suffix(&lock_path, ".old.0123456789abcdef0123456789abcdef");
        std::fs::create_dir(&retired).unwrap();
        std::fs::write(retired.join("owner"), &full).unwrap();
        other.try_acquire().expect("a retired directory is not a lock");
        assert_eq!(other.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
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
        assert_eq!(lock.try_acquire(), Err(Error::Busy), "younger than the TTL");
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
        assert_eq!(no_ttl.try_acquire(), Err(Error::Busy));
        assert_eq!(no_ttl.break_lock(), Ok(true));
        no_ttl.try_acquire().expect("free after break_lock");
        assert_eq!(no_ttl.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // A foreign writer killed half way through its record: not ours to
        // read, so an error while young and broken once older than the TTL.
        let full = forged_record(4242, 1, None, 1, None);
        std::fs::create_dir(&lock_path).unwrap();
        std::fs::write(lock_path.join("owner"), &full[..full.len() / 2]).unwrap();
        assert_eq!(lock.try_acquire(), Err(Error::Corrupt(CorruptKind::Record)));
        assert!(lock_path.join("owner").exists(), "not broken while fresh");
        set_mtime(&lock_path.join("owner"), ago(Duration::from_secs(3600)));
        lock.try_acquire().expect("a torn record older than the TTL is stale");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

#[test]
fn flock_file_created_but_not_written_is_taken_at_once() {
    each_of("torn-flock", &[Scheme::Flock], |scheme, dir| {
        let lock_path = scheme.lock_path(dir.path());
        let spec = scheme.spec(dir.path(), "ttl=1h");

        // Created (O_CREAT) and killed before the first write.
        std::fs::write(&lock_path, b"").unwrap();
        let mut lock = open_lock(&spec);
        assert_eq!(lock.inspect().unwrap().holder, None);
        let first = lock.try_acquire().expect("an empty flock file is free");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));

        // Killed half way through writing its record after the state line.
        let full = forged_record(4242, 1, None, first.fence, None);
        plant_record(scheme, dir.path(), &full[..full.len() / 2], first.fence);
        let again = lock.try_acquire().expect("a torn record does not wedge a flock");
        assert!(again.fence > first.fence, "the fence survives in the state line");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

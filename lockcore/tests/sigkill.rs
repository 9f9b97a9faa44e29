//! A holder killed with SIGKILL: the next process gets in at once, without
//! waiting for the TTL.
//!
//! The holder takes the lock with `ttl=1h`, so nothing but dead-owner
//! detection (pid *and* start time, or a zombie) can explain a successful
//! `try_acquire` afterwards; success is asserted with a single `try_acquire`,
//! never with a clock. Two cases: the killed holder reaped, and the killed
//! holder still an unreaped zombie (its pid still exists).
//!
//! * every scheme that can break a stale lock (`lockfile`, `mkdir`,
//!   `symlink`, `lease`, `toplock`): the record (the lease, the queue's
//!   request) is left behind and judged stale because its owner is dead;
//!   with `stale=none` the same record is *not* broken (Busy), which shows
//!   that owner death, not age, is what let us in.
//! * `flock`: the kernel drops the lock when the holder dies (a zombie holds
//!   no files), so the next `try_acquire` succeeds for every `stale` setting.
//!
//! Either way the acquisition says whose lock it took over and that its
//! holder died; one that follows an ordinary release took over nothing.
//!
//! And a holder that forked a child before it acquired, after a cycle that
//! left its handle's descriptors open: the child, alive and idle, shares no
//! description through which its parent's lock outlives the parent.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use lockcore::{ErrorKind, Liveness};

// Shared-memory slots.
const HELD: usize = 0;
const HOLDER_FENCE: usize = 1;
const FORKED_CHILD: usize = 2;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        // Takes the lock, says so, and waits to be killed.
        "holder" => {
            let shm = Shm::open(var("SHM").as_ref());
            let mut lock = open_lock(&var("SPEC"));
            if var("FORK_FIRST") == "1" {
                lock.try_acquire().expect("the holder acquires a free lock");
                lock.release(Duration::ZERO).expect("and releases it");
                // SAFETY: the child stores a number and sleeps until it is
                // killed.
                let child = unsafe { libc::fork() };
                assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
                if child == 0 {
                    // Returned from fork(3), so the library's handler has
                    // closed the child's copies: until then (a child not yet
                    // run, on a busy machine) a copy shares the description,
                    // and a lock taken through it outlives the parent.
                    // SAFETY: getpid has no preconditions.
                    shm.at(FORKED_CHILD).store(unsafe { libc::getpid() } as u64, SeqCst);
                    loop {
                        // SAFETY: waits for a signal; nothing else.
                        unsafe { libc::pause() };
                    }
                }
                let give_up = std::time::Instant::now() + Duration::from_secs(60);
                while shm.at(FORKED_CHILD).load(SeqCst) != child as u64 {
                    assert!(std::time::Instant::now() < give_up, "the forked child never ran");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let acquired = lock.try_acquire().expect("the holder acquires a free lock");
            shm.at(HOLDER_FENCE).store(acquired.fence, SeqCst);
            shm.at(HELD).store(1, SeqCst);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// What an attempt came to, without the details of a refusal.
fn kind<T>(result: Result<T, lockcore::Error>) -> Result<T, ErrorKind> {
    result.map_err(|e| e.kind())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Corpse {
    Reaped,
    Zombie,
    /// Reaped, and survived by the idle child it forked after a cycle.
    SurvivedByAChild,
}

/// Kills the holder's forked child when the test ends, however it ends.
struct Orphan<'a>(&'a Shm);

impl Drop for Orphan<'_> {
    fn drop(&mut self) {
        let pid = self.0.get(FORKED_CHILD);
        if pid != 0 {
            // SAFETY: plain call; the pid is the orphan's, whom nobody reaps
            // but init, so it names no other process while it is unreaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

fn killed_holder_lets_the_next_in(scheme: Scheme, dir: &TestDir, corpse: Corpse) {
    let shm = Shm::create(&dir.join("shm"));
    let _orphan = Orphan(&shm);
    let spec = scheme.spec(dir.path(), "ttl=1h");
    let fork_first = if corpse == Corpse::SurvivedByAChild { "1" } else { "0" };
    let mut children = Children::new();
    children.push(spawn(
        "holder",
        &[("SPEC", spec.clone()), ("SHM", shm.path().display().to_string()), ("FORK_FIRST", fork_first.into())],
    ));
    wait_until("the holder to acquire", || shm.get(HELD) == 1 || children.any_exited());
    assert_eq!(shm.get(HELD), 1, "the holder died before acquiring");
    if corpse == Corpse::SurvivedByAChild {
        assert_ne!(shm.get(FORKED_CHILD), 0, "the holder forked a child first");
    }

    let mut next = open_lock(&spec);
    let mut patient = open_lock(&scheme.spec(dir.path(), "ttl=1h&stale=none"));
    assert_eq!(kind(next.try_acquire()), Err(ErrorKind::Busy), "a live holder keeps its lock");

    let mut child = children.pop().unwrap();
    let pid = child.id();
    sigkill(pid);
    match corpse {
        Corpse::Reaped | Corpse::SurvivedByAChild => {
            let status = child.wait().unwrap();
            assert!(!status.success());
        }
        Corpse::Zombie => {
            wait_exit_keep_zombie(pid);
            let (state, _) = proc_stat(pid as i32).expect("an unreaped child still has /proc/PID");
            assert_eq!(state, 'Z', "the killed holder is a zombie");
        }
    }

    if scheme.breaks_stale_locks() {
        let seen = next.inspect().unwrap();
        let holder = seen.holder.expect("the killed holder's record is still there");
        assert_eq!(holder.pid, pid as i32);
        assert_eq!(holder.liveness, Liveness::Dead, "{corpse:?} holder");
        assert!(holder.stale);
        // Without dead-owner detection the hour-long TTL keeps it closed.
        assert_eq!(kind(patient.try_acquire()), Err(ErrorKind::Busy), "stale=none waits for the TTL");
    } else {
        assert_eq!(next.inspect().unwrap().holder, None, "the kernel released the flock");
    }

    let acquired = next.try_acquire().expect("the next process gets in at once");
    assert!(acquired.fence > shm.get(HOLDER_FENCE));
    // Its outcome says whose lock it took over, and that the holder died.
    let previous = acquired.took_over_from.expect("the acquisition names the holder it took over from");
    assert_eq!((previous.pid, previous.liveness), (pid as i32, Liveness::Dead), "{corpse:?} holder");
    assert!(previous.stale && acquired.previous_holder_died());
    assert_eq!(next.took_over_from(), Some(&previous));
    let seen = patient.inspect().unwrap();
    assert_eq!(seen.holder.unwrap().pid, std::process::id() as i32);
    assert_eq!(seen.last_fence, acquired.fence);
    assert_eq!(kind(patient.try_acquire()), Err(ErrorKind::Busy));

    // A lock released in the ordinary way is taken over from nobody.
    next.release(Duration::ZERO).unwrap();
    assert_eq!(next.took_over_from(), None, "a handle that holds nothing took nothing over");
    let acquired = patient.try_acquire().unwrap();
    assert_eq!(acquired.took_over_from, None);
    assert!(!acquired.previous_holder_died());
    patient.release(Duration::ZERO).unwrap();

    if corpse == Corpse::Zombie {
        assert!(!child.wait().unwrap().success());
    }
}

#[test]
fn sigkilled_and_reaped_holder_is_replaced_at_once() {
    each_scheme("kill-reaped", |scheme, dir| killed_holder_lets_the_next_in(scheme, dir, Corpse::Reaped));
}

#[test]
fn sigkilled_holder_survived_by_its_forked_child_is_replaced_at_once() {
    each_scheme("kill-forked", |scheme, dir| killed_holder_lets_the_next_in(scheme, dir, Corpse::SurvivedByAChild));
}

#[test]
fn sigkilled_zombie_holder_is_replaced_at_once() {
    each_scheme("kill-zombie", |scheme, dir| killed_holder_lets_the_next_in(scheme, dir, Corpse::Zombie));
}

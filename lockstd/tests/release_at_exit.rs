//! Locks released at exit, in real processes: a child of this test binary
//! takes a lock and exits with `exit()`, which runs no destructor; the
//! parent then finds the lock free if it was registered, and left behind
//! (with the dead child's record) if it was not, or if its registration was
//! dropped first. On every scheme of `lockcore::Scheme::ALL`.
//!
//! And the registry stays usable in a child of `fork()` whatever another
//! thread was doing with it at the fork.

#[path = "../../lockcore/tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{child_main, die_holding, each_scheme, open_lock, spawn, var, wait_patiently, Scheme, SchemeFiles};
use lockstd::at_exit::{register, ReleaseAtExit};
use lockstd::release_at_exit;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "hold" | "hold-registered" | "hold-unregistered" => {
            let lock = Arc::new(Mutex::new(open_lock(&var("SPEC"))));
            let registration = (role != "hold").then(|| release_at_exit(&lock));
            lock.lock().unwrap().try_acquire().unwrap();
            if role == "hold-unregistered" {
                drop(registration);
            } else {
                // Kept to the end; exit() drops nothing.
                std::mem::forget(registration);
            }
            std::mem::forget(lock);
            die_holding();
        }
        "fork-while-registering" => fork_while_registering(),
        other => panic!("unknown role {other}"),
    }
}

/// Whether a child of this binary that took the lock of `spec` in `role`
/// and exited left it held.
fn left_held(role: &str, spec: &str) -> bool {
    let mut child = spawn(role, &[("SPEC", spec.to_string())]);
    assert!(wait_patiently(&mut child).success(), "the child in {role} failed");
    open_lock(spec).inspect().unwrap().holder.is_some()
}

#[test]
fn a_registered_lock_is_released_at_exit() {
    each_scheme("at-exit", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        assert!(!left_held("hold-registered", &spec), "a registered lock was left held at exit");
        if scheme == Scheme::Flock {
            // The kernel lets go of a flock when its holder exits, and the
            // record beside it says free once the lock is: there is nothing
            // left behind to tell the two cases apart.
            assert!(!left_held("hold", &spec));
            return;
        }
        // Without the registration the lock stays, with the dead child's
        // record, for the next acquirer to break: the check above can tell.
        assert!(left_held("hold", &spec), "a lock not registered was released at exit");
        open_lock(&spec).break_lock().unwrap();
        assert!(left_held("hold-unregistered", &spec), "a lock whose registration was dropped was released at exit");
    });
}

/// Does nothing at exit: an item for the registry only.
struct Nothing;

impl ReleaseAtExit for Nothing {
    fn release(&self) {}
}

#[test]
fn the_registry_works_in_a_child_forked_while_another_thread_uses_it() {
    let mut child = spawn("fork-while-registering", &[]);
    assert!(wait_patiently(&mut child).success(), "a child forked while another thread registered hung or failed");
}

/// A thread registers and unregisters without pause while this thread
/// forks 200 times; each child registers and unregisters too, and exits.
/// Without the fork handlers, a child forked while the thread held the
/// registry's lock would wait for it forever.
fn fork_while_registering() {
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(register(Arc::new(Nothing)));
            }
        })
    };
    for _ in 0..200 {
        // SAFETY: the child calls only what the registry needs (malloc and
        // a mutex, both made consistent at fork by glibc and lockstd), then
        // _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            drop(register(Arc::new(Nothing)));
            // SAFETY: ends the child at once, running no handler.
            unsafe { libc::_exit(0) };
        }
        wait_for_child(pid);
    }
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
}

/// Waits for `pid` to exit with status 0; kills it and fails if it hangs,
/// before the test's own patience with this process runs out, so that no
/// hung grandchild outlives the test.
fn wait_for_child(pid: libc::pid_t) {
    let give_up = Instant::now() + common::PATIENCE / 2;
    loop {
        let mut status = 0;
        // SAFETY: a child of this process; a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child {pid}: status {status}");
            return;
        }
        if Instant::now() > give_up {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("child {pid} hung in the registry after fork()");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

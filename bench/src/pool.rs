//! Contending workers for the criterion benches: threads, or processes forked
//! once, each with its own lock handle made once and kept across samples.
//!
//! [`Pool::run`] hands out `iters` operations among the workers, releases
//! them together (a futex on shared memory) and returns the time until the
//! last one finished: the shape `Bencher::iter_custom` wants, so criterion
//! reports the time per operation with all workers contending.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sys::{self, SharedMap, Zeroable};

/// Threads of this process, or forked processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Threads,
    Processes,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Threads, Mode::Processes];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Threads => "threads",
            Mode::Processes => "processes",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Most workers a pool (or a report cell) can have.
pub const MAX_WORKERS: usize = 128;

#[repr(C)]
struct Control {
    /// Bumped to release the workers for a batch (or to quit).
    generation: AtomicU32,
    /// Workers that finished the current batch.
    done: AtomicU32,
    /// Workers that made their operation and are waiting.
    ready: AtomicU32,
    quit: AtomicU32,
    /// Operations that reported failure (an error from the lock).
    failures: AtomicU64,
    quota: [AtomicU64; MAX_WORKERS],
}

// SAFETY: atomics only.
unsafe impl Zeroable for Control {}

/// What each worker does once per operation, made in the worker (so a lock
/// handle belongs to its thread or process). The operation returns `false`
/// when it failed (the lock answered an error): the pool counts failures
/// instead of dying, so one broken strategy does not stop the whole run.
pub type MakeOp = Arc<dyn Fn(usize) -> Box<dyn FnMut() -> bool> + Send + Sync>;

pub struct Pool {
    control: Arc<SharedMap<Control>>,
    workers: usize,
    threads: Vec<std::thread::JoinHandle<()>>,
    children: Vec<libc::pid_t>,
}

impl Pool {
    /// Starts `workers` workers and waits until each has made its operation.
    pub fn new(mode: Mode, workers: usize, make: MakeOp) -> Pool {
        assert!((1..=MAX_WORKERS).contains(&workers), "1..={MAX_WORKERS} workers");
        let control = Arc::new(SharedMap::<Control>::new());
        let mut pool = Pool { control: control.clone(), workers, threads: Vec::new(), children: Vec::new() };
        for index in 0..workers {
            let (control, make) = (control.clone(), make.clone());
            match mode {
                Mode::Threads => {
                    pool.threads.push(std::thread::spawn(move || worker(&control, index, make(index).as_mut())))
                }
                Mode::Processes => pool.children.push(sys::fork_child(move || {
                    let mut op = make(index);
                    worker(&control, index, op.as_mut())
                })),
            }
        }
        pool.wait_count(&pool.control.ready);
        pool
    }

    /// Runs `iters` operations spread over the workers, all released at
    /// once; returns the time until the last worker is done.
    pub fn run(&mut self, iters: u64) -> Duration {
        let c = &self.control;
        let n = self.workers as u64;
        for (i, quota) in c.quota.iter().take(self.workers).enumerate() {
            quota.store(iters / n + u64::from((i as u64) < iters % n), Ordering::Relaxed);
        }
        c.done.store(0, Ordering::Release);
        let start = Instant::now();
        sys::bump_and_wake(&c.generation);
        self.wait_count(&c.done);
        start.elapsed()
    }

    /// Operations that failed so far.
    pub fn failures(&self) -> u64 {
        self.control.failures.load(Ordering::Acquire)
    }

    /// Waits until `counter` reaches the number of workers; panics if a
    /// worker died (rather than hanging the bench).
    fn wait_count(&self, counter: &AtomicU32) {
        loop {
            let seen = counter.load(Ordering::Acquire);
            if seen as usize >= self.workers {
                return;
            }
            sys::futex_wait(counter, seen, Some(Duration::from_millis(200)));
            for &pid in &self.children {
                if let Some(code) = sys::reap(pid, false) {
                    panic!("bench worker process {pid} died (status {code})");
                }
            }
            if self.threads.iter().any(|t| t.is_finished()) {
                panic!("a bench worker thread died");
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.control.quit.store(1, Ordering::Release);
        sys::bump_and_wake(&self.control.generation);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        for pid in self.children.drain(..) {
            let _ = sys::reap(pid, true);
        }
    }
}

fn worker(c: &Control, index: usize, op: &mut dyn FnMut() -> bool) {
    let mut generation = c.generation.load(Ordering::Acquire);
    sys::bump_and_wake(&c.ready);
    loop {
        sys::wait_while_equal(&c.generation, generation);
        generation = c.generation.load(Ordering::Acquire);
        if c.quit.load(Ordering::Acquire) != 0 {
            return;
        }
        let mut failed = 0;
        for _ in 0..c.quota[index].load(Ordering::Relaxed) {
            failed += u64::from(!op());
        }
        c.failures.fetch_add(failed, Ordering::AcqRel);
        sys::bump_and_wake(&c.done);
    }
}

//! The torture suite: one harness, every strategy, real processes, faults.
//!
//! For each scheme in [`Scheme::ALL`] on a private lock, and then for each
//! scheme whose locks may be shared on one every user may write
//! (`mode=0666`, whose waiters queue in a System V segment rather than a
//! mapped file), 16 worker processes (this test binary,
//! re-executed) take the lock until a number of critical sections have been
//! entered, while the parent injects faults at random: SIGKILL of a holder,
//! of a waiter, and of a holder again after a random delay of up to 300 µs,
//! which lands inside its section, its release or its next acquire (the
//! table says where each landed); SIGKILL of the next in line (the first
//! waiter the lock's turnstile will serve) after a random delay of up to
//! 300 µs, asleep in line, woken and trying, or just in; and SIGSTOP of a
//! holder until its TTL has passed, then SIGCONT. Inside the critical section a worker updates a counter file
//! through a *fenced resource* in shared memory, which refuses a writer whose
//! fencing token is lower than one it has already seen, and an oracle counts
//! processes inside at once.
//!
//! Required for every strategy: no overlap; every paused holder that wakes
//! after someone else took its expired lock is refused by its fence and told
//! `Lost` by its release, and no other holder is; the lock is usable again
//! within TTL + 1 s after any fault, and after a SIGKILL long before the TTL
//! could have freed it (the dead owner is detected); an acquisition that
//! says it took the lock over from a holder that died names a process that
//! is gone, no more often than processes were killed, and one that says its
//! holder ran past its TTL follows a pause. The parent prints a summary
//! table.
//!
//! Default: 2,000 critical sections per strategy. Long run:
//!
//! ```sh
//! LOCK_TORTURE_SECTIONS=100000 cargo test --release -p lockcore --test torture -- --nocapture
//! ```
//!
//! `LOCK_TORTURE_STRATEGIES=toplock,lease` limits a run to some strategies;
//! `LOCK_TORTURE_SEED` repeats a run's fault schedule.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use lockcore::{Lock, ReleaseOutcome, Scheme, TargetKind};

const WORKERS: usize = 16;
const TTL: Duration = Duration::from_secs(2);
/// The promised bound on recovery after any fault: the TTL and a second.
const RECOVERY_BOUND: Duration = Duration::from_secs(3); // TTL + 1 s
/// After a SIGKILL the lock must be free again well before the dead
/// holder's TTL could have freed it: a holder is killed within milliseconds
/// of its acquisition, so a recovery this quick was the dead owner being
/// detected, not its record running out. (A bound on what freed the lock,
/// with seconds of slack, not on speed.)
const KILL_RECOVERY_BOUND: Duration = Duration::from_secs(1); // TTL / 2

/// Where a worker is, as the parent sees it.
const IDLE: u32 = 0;
const ACQUIRING: u32 = 1;
const HOLDING: u32 = 2;
const RELEASING: u32 = 3;

/// The steps of a pause, in `Slot::pause`. Only the parent lets a paused
/// worker go on: a worker that stopped itself could (and in long runs did)
/// run on before the parent saw it stopped, and then a later holder looked
/// like one that had overtaken it.
const PAUSE_NONE: u32 = 0;
/// The parent asks the worker to wait, holding the lock, once it has it.
const PAUSE_ASKED: u32 = 1;
/// The worker holds the lock and waits; the parent stops it with SIGSTOP.
const PAUSE_HOLDING: u32 = 2;
/// The parent lets the worker go on (set just before its SIGCONT).
const PAUSE_RESUMED: u32 = 3;
/// The worker has written and released; `Slot::outcome` and `Slot::refused`
/// tell how.
const PAUSE_REPORTED: u32 = 4;

/// `Slot::outcome`: how a release ended.
const OUTCOME_RELEASED: u32 = 1;
const OUTCOME_EXPIRED: u32 = 2;
const OUTCOME_LOST: u32 = 3;

#[repr(C)]
struct Slot {
    pid: AtomicI32,
    state: AtomicU32,
    fence: AtomicU64,
    /// `PAUSE_*`: where this worker is in a pause the parent asked for.
    pause: AtomicU32,
    /// For a paused acquisition: whether the resource refused its write, and
    /// how its release ended (`OUTCOME_*`).
    refused: AtomicU32,
    outcome: AtomicU32,
    /// For a paused acquisition: its fence, and the resource's highest fence
    /// just before it entered (the parent prints them if a check fails).
    used_fence: AtomicU64,
    max_before_entering: AtomicU64,
}

/// Shared between the parent and its workers through a mapped file.
#[repr(C)]
struct Shared {
    /// The fenced resource: the highest fence that has written.
    max_fence: AtomicU64,
    /// The oracle: one bit per slot inside the critical section. The parent
    /// clears the bit of a worker it killed, which cannot be inside anymore.
    inside: AtomicU32,
    overlaps: AtomicU32,
    entered: AtomicU64,
    completed: AtomicU64,
    refusals: AtomicU64,
    /// Releases that answered `Lost`: only an overtaken paused holder may.
    lost_releases: AtomicU64,
    /// Monotonic nanoseconds of the latest successful acquisition.
    last_acquired: AtomicI64,
    target: AtomicU64,
    errors: AtomicU64,
    /// Acquisitions that said they took the lock over from a holder that
    /// had died, and from one that had run past its TTL.
    took_over_dead: AtomicU64,
    took_over_expired: AtomicU64,
    /// Of those that said the holder had died: how many named a process
    /// that was still running.
    live_named_dead: AtomicU64,
    slots: [Slot; WORKERS],
}

struct Mapping {
    shared: *mut Shared,
}

impl Mapping {
    fn create(path: &Path) -> Mapping {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).unwrap();
        file.set_len(std::mem::size_of::<Shared>() as u64).unwrap();
        Mapping::open(path)
    }

    fn open(path: &Path) -> Mapping {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new().read(true).write(true).open(path).unwrap();
        // SAFETY: a fresh shared mapping of a file at least size_of::<Shared>()
        // long; all-zero bytes are a valid Shared (atomics of zero).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Mapping { shared: ptr.cast() }
    }

    fn get(&self) -> &Shared {
        // SAFETY: the mapping lives as long as self and holds only atomics,
        // which other processes change concurrently by design.
        unsafe { &*self.shared }
    }
}

fn now_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock_gettime(2)` in nanoseconds. The monotonic clock is one for every
/// process on the machine, so the workers' readings compare.
fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write to; the realtime and monotonic
    // clocks always exist, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec)
}

/// A worker process: takes the lock until the target number of sections
/// has been entered.
#[test]
#[ignore = "a worker of `every_strategy_survives_the_torture`"]
fn torture_worker() {
    let Ok(spec) = std::env::var("TORTURE_SPEC") else { return };
    let slot_index: usize = std::env::var("TORTURE_SLOT").unwrap().parse().unwrap();
    let map = Mapping::open(Path::new(&std::env::var("TORTURE_SHM").unwrap()));
    let counter = PathBuf::from(std::env::var("TORTURE_COUNTER").unwrap());
    let shared = map.get();
    let slot = &shared.slots[slot_index];
    let mut lock = Lock::open(spec.as_bytes()).unwrap();
    while shared.entered.load(SeqCst) < shared.target.load(SeqCst) {
        slot.state.store(ACQUIRING, SeqCst);
        let acquired = match lock.acquire(Some(Duration::from_secs(30))) {
            Ok(acquired) => acquired,
            Err(lockcore::Error::Timeout(_)) => continue,
            Err(e) => {
                eprintln!("worker {slot_index}: acquire: {e}");
                shared.errors.fetch_add(1, SeqCst);
                std::process::exit(2);
            }
        };
        slot.fence.store(acquired.fence, SeqCst);
        slot.state.store(HOLDING, SeqCst);
        if let Some(previous) = acquired.took_over_from {
            if acquired.previous_holder_died() {
                shared.took_over_dead.fetch_add(1, SeqCst);
                if runs(previous.pid) {
                    eprintln!("worker {slot_index}: took over from pid {}, said dead, still running", previous.pid);
                    shared.live_named_dead.fetch_add(1, SeqCst);
                }
            } else {
                shared.took_over_expired.fetch_add(1, SeqCst);
            }
        }
        shared.last_acquired.store(now_ns(), SeqCst);
        let paused = slot.pause.compare_exchange(PAUSE_ASKED, PAUSE_HOLDING, SeqCst, SeqCst).is_ok();
        if paused {
            // Stopped by the parent (SIGSTOP) in here, and let go by it.
            while slot.pause.load(SeqCst) != PAUSE_RESUMED {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let max_before_entering = shared.max_fence.load(SeqCst);
        let admitted = enter_resource(shared, acquired.fence);
        if admitted {
            let me = 1u32 << slot_index;
            let others = shared.inside.fetch_or(me, SeqCst) & !me;
            if others != 0 && live_slots(shared, others) {
                shared.overlaps.fetch_add(1, SeqCst);
            }
            shared.entered.fetch_add(1, SeqCst);
            increment(&counter);
            // Long enough for the parent to catch holders to kill or pause.
            std::thread::sleep(Duration::from_micros(100));
            shared.inside.fetch_and(!me, SeqCst);
            shared.completed.fetch_add(1, SeqCst);
        }
        slot.state.store(RELEASING, SeqCst);
        let outcome = match lock.release(Duration::ZERO) {
            Ok(ReleaseOutcome::Released) => OUTCOME_RELEASED,
            Ok(ReleaseOutcome::Expired) => OUTCOME_EXPIRED,
            Ok(ReleaseOutcome::Lost) => OUTCOME_LOST,
            Err(e) => {
                eprintln!("worker {slot_index}: release: {e}");
                shared.errors.fetch_add(1, SeqCst);
                std::process::exit(2);
            }
        };
        if outcome == OUTCOME_LOST {
            shared.lost_releases.fetch_add(1, SeqCst);
        }
        if paused {
            slot.used_fence.store(acquired.fence, SeqCst);
            slot.max_before_entering.store(max_before_entering, SeqCst);
            slot.refused.store(u32::from(!admitted), SeqCst);
            slot.outcome.store(outcome, SeqCst);
            slot.pause.store(PAUSE_REPORTED, SeqCst);
        }
        slot.state.store(IDLE, SeqCst);
    }
}

/// Whether any slot in `mask` belongs to a process that can still run its
/// own code. A worker killed inside its section leaves its bit set until the
/// parent has reaped it; a process that is exiting (the kernel's
/// `PF_EXITING`, set as the kernel starts tearing it down, before it closes
/// its files, which is when the kernel lets go of its `flock`), a zombie or
/// a reaped process is inside nothing.
fn live_slots(shared: &Shared, mask: u32) -> bool {
    (0..WORKERS).filter(|&s| mask & (1 << s) != 0).any(|s| runs(shared.slots[s].pid.load(SeqCst)))
}

/// Whether process `pid` can still run its own code: it exists and is
/// neither exiting, nor a zombie. (The kernel hands out pids in turn: a
/// killed worker's comes back only after every other pid below `pid_max`
/// has been used, never in the moments between a kill and this check.)
fn runs(pid: i32) -> bool {
    /// `PF_EXITING` in the flags of `/proc/<pid>/stat` (include/linux/sched.h).
    const PF_EXITING: u64 = 0x4;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: state, ppid, pgrp,
    // session, tty_nr, tpgid, flags, ...
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let exiting = fields.get(6).and_then(|flags| flags.parse::<u64>().ok()).is_some_and(|f| f & PF_EXITING != 0);
    !exiting && !matches!(fields.first(), None | Some(&"Z") | Some(&"X"))
}

/// The fenced resource: accepts a writer only if no higher fence has
/// written, as a storage layer that checks fencing tokens would.
fn enter_resource(shared: &Shared, fence: u64) -> bool {
    let mut seen = shared.max_fence.load(SeqCst);
    loop {
        if fence < seen {
            shared.refusals.fetch_add(1, SeqCst);
            return false;
        }
        match shared.max_fence.compare_exchange(seen, fence, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
}

fn increment(counter: &Path) {
    let file = OpenOptions::new().read(true).write(true).open(counter).unwrap();
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0).unwrap();
    let value: u64 = std::str::from_utf8(&buf[..n]).unwrap().trim().parse().unwrap();
    let text = format!("{:<20}\n", value + 1);
    file.write_at(text.as_bytes(), 0).unwrap();
}

fn read_counter(counter: &Path) -> u64 {
    std::fs::read_to_string(counter).unwrap().trim().parse().unwrap()
}

/// A tiny deterministic generator, seeded per run and printed, so a failing
/// run can be repeated with LOCK_TORTURE_SEED.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillHolder,
    KillWaiter,
    /// A holder killed after a random delay: most waiters sleep in their
    /// backoff, so this is how kills reach the middle of a release or of an
    /// acquire that is changing the lock's files.
    KillMidOperation,
    PauseHolder,
    /// The first waiter the turnstile will serve, killed after a random
    /// delay: asleep in line, woken for its turn, or in its attempt.
    KillNextInLine,
}

#[derive(Default)]
struct Report {
    sections: u64,
    counter: u64,
    faults: [u32; 5],
    /// Where the `KillMidOperation` victims were when killed, by state
    /// (idle, acquiring, holding, releasing).
    killed_in: [u32; 4],
    /// Where the `KillNextInLine` victims were when killed, likewise.
    next_killed_in: [u32; 4],
    overlaps: u32,
    refusals: u64,
    overtaken_pauses: u64,
    /// Overtaken paused holders whose write was refused and whose release
    /// answered `Lost`: all of them, if the strategy is right.
    caught_pauses: u64,
    lost_releases: u64,
    /// Acquisitions that took over from a dead holder, from an expired one,
    /// and those that called a running process dead.
    took_over_dead: u64,
    took_over_expired: u64,
    live_named_dead: u64,
    worst_recovery_after_kill: Duration,
    worst_recovery_after_pause: Duration,
    /// Faults after which the lock was not usable again in time, and paused
    /// holders that were overtaken but not caught.
    failures: Vec<String>,
    took: Duration,
}

struct Torture<'a> {
    scheme: Scheme,
    spec: String,
    /// Where the lock's waiters stand in line.
    line: Line,
    shm: PathBuf,
    counter: PathBuf,
    map: &'a Mapping,
    workers: Vec<Option<Child>>,
}

/// Where a lock's waiters stand in line, to find the next one.
enum Line {
    /// The turnstile beside a lock at this path, of this mode.
    Turnstile(Box<lockcore::CPath>, u32),
    /// The queue key of a lock on this server.
    OnServer { server: &'static testkit::Redis, queue: String },
}

impl Line {
    /// The pid of the waiter to be served next, if anyone waits.
    fn next_pid(&self) -> Option<i32> {
        match self {
            Line::Turnstile(path, mode) => lockcore::internals::next_in_line(path, *mode),
            Line::OnServer { server, queue } => {
                let head = server.command(&["LINDEX", queue, "0"]);
                lockcore::internals::redis_waiter_pid(head.as_bytes())
            }
        }
    }
}

impl Torture<'_> {
    fn spawn(&mut self, slot: usize) {
        let shared = self.map.get();
        shared.slots[slot].state.store(IDLE, SeqCst);
        shared.slots[slot].pause.store(PAUSE_NONE, SeqCst);
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "torture_worker", "--ignored", "--nocapture", "--test-threads=1"])
            .env("TORTURE_SPEC", &self.spec)
            .env("TORTURE_SLOT", slot.to_string())
            .env("TORTURE_SHM", &self.shm)
            .env("TORTURE_COUNTER", &self.counter)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        shared.slots[slot].pid.store(child.id() as i32, SeqCst);
        self.workers[slot] = Some(child);
    }

    /// Replaces workers that exited (killed, or done).
    fn reap_and_respawn(&mut self) {
        let shared = self.map.get();
        for slot in 0..WORKERS {
            let exited = match self.workers[slot].as_mut() {
                Some(child) => child.try_wait().unwrap().is_some(),
                None => true,
            };
            if exited && shared.entered.load(SeqCst) < shared.target.load(SeqCst) {
                self.spawn(slot);
            }
        }
    }

    /// A worker in one of `states`, watching for up to a second.
    fn pick(&self, rng: &mut Rng, states: &[u32]) -> Option<usize> {
        let shared = self.map.get();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            let candidates: Vec<usize> = (0..WORKERS)
                .filter(|&s| self.workers[s].is_some() && states.contains(&shared.slots[s].state.load(SeqCst)))
                .collect();
            if !candidates.is_empty() {
                return Some(candidates[rng.below(candidates.len() as u64) as usize]);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        None
    }

    fn kill(&mut self, slot: usize) {
        if let Some(mut child) = self.workers[slot].take() {
            let _ = child.kill();
            let _ = child.wait();
            // Dead, so no longer inside the critical section.
            self.map.get().inside.fetch_and(!(1u32 << slot), SeqCst);
        }
    }

    /// Waits until someone acquires the lock after `since`; the time it took.
    fn wait_for_acquisition(&mut self, since: i64, limit: Duration) -> Option<Duration> {
        let shared = self.map.get();
        let start = Instant::now();
        while start.elapsed() < limit {
            if shared.last_acquired.load(SeqCst) > since {
                return Some(Duration::from_nanos((shared.last_acquired.load(SeqCst) - since) as u64));
            }
            if shared.entered.load(SeqCst) >= shared.target.load(SeqCst) {
                return Some(Duration::ZERO);
            }
            self.reap_and_respawn();
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    fn inject(&mut self, fault: Fault, rng: &mut Rng, report: &mut Report) {
        let shared = self.map.get();
        let slot = match fault {
            Fault::KillWaiter => self.pick(rng, &[ACQUIRING]),
            Fault::KillHolder | Fault::KillMidOperation | Fault::PauseHolder => self.pick(rng, &[HOLDING]),
            Fault::KillNextInLine => self.next_in_line(),
        };
        let Some(slot) = slot else { return };
        report.faults[fault as usize] += 1;
        match fault {
            Fault::KillHolder | Fault::KillWaiter => {
                let at = now_ns();
                self.kill(slot);
                self.check_recovery(fault, at, report);
            }
            Fault::KillMidOperation | Fault::KillNextInLine => {
                // After a random delay: wherever the victim has got to.
                std::thread::sleep(Duration::from_micros(rng.below(300)));
                let at = now_ns();
                let state = (shared.slots[slot].state.load(SeqCst) as usize).min(3);
                self.kill(slot);
                match fault {
                    Fault::KillMidOperation => report.killed_in[state] += 1,
                    _ => report.next_killed_in[state] += 1,
                }
                self.check_recovery(fault, at, report);
            }
            Fault::PauseHolder => self.pause(slot, report),
        }
        let _ = shared;
    }

    /// The worker the lock's turnstile will serve next, watching for up to
    /// a second; `None` for a scheme whose waiters keep no turnstile here.
    fn next_in_line(&self) -> Option<usize> {
        let shared = self.map.get();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            if let Some(pid) = self.line.next_pid() {
                let slot = (0..WORKERS).find(|&s| self.workers[s].is_some() && shared.slots[s].pid.load(SeqCst) == pid);
                if slot.is_some() {
                    return slot;
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        None
    }

    fn check_recovery(&mut self, fault: Fault, at: i64, report: &mut Report) {
        match self.wait_for_acquisition(at, RECOVERY_BOUND + Duration::from_secs(2)) {
            Some(took) => {
                report.worst_recovery_after_kill = report.worst_recovery_after_kill.max(took);
                if took > KILL_RECOVERY_BOUND {
                    report.fail(format!(
                        "{fault:?}: next acquisition {took:.2?} after the SIGKILL, beyond {KILL_RECOVERY_BOUND:?}: \
                         the dead owner was not detected"
                    ));
                }
            }
            None => report.fail(format!("{fault:?}: no acquisition within {RECOVERY_BOUND:?}")),
        }
    }

    /// Asks a worker to wait the next time it holds the lock, stops it there
    /// with SIGSTOP, waits for someone else to take the expired lock (or for
    /// TTL + 1 s where nobody can: flock), lets it go on with SIGCONT, and
    /// waits for it to say how its write and its release went.
    fn pause(&mut self, slot: usize, report: &mut Report) {
        let shared = self.map.get();
        let worker = &shared.slots[slot];
        let pid = worker.pid.load(SeqCst);
        worker.pause.store(PAUSE_ASKED, SeqCst);
        let asked = Instant::now();
        while worker.pause.load(SeqCst) != PAUSE_HOLDING {
            // The worker never got the lock again (the run ended): withdraw
            // the request, unless it took it at this very moment.
            let gave_up = asked.elapsed() > Duration::from_secs(30) || self.workers[slot].is_none();
            if gave_up && worker.pause.compare_exchange(PAUSE_ASKED, PAUSE_NONE, SeqCst, SeqCst).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // SAFETY: plain kill(2) of our own child, which waits for us anyway;
        // stopped, it cannot even poll.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        while !is_stopped(pid) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let paused_at = now_ns();
        let fence = worker.fence.load(SeqCst);
        let start = Instant::now();
        let mut overtaken = false;
        let mut max_when_overtaken = 0;
        while start.elapsed() < RECOVERY_BOUND {
            max_when_overtaken = shared.max_fence.load(SeqCst);
            if max_when_overtaken > fence {
                overtaken = true;
                break;
            }
            if shared.entered.load(SeqCst) >= shared.target.load(SeqCst) {
                break;
            }
            self.reap_and_respawn();
            std::thread::sleep(Duration::from_millis(1));
        }
        if overtaken {
            report.overtaken_pauses += 1;
            let took = Duration::from_nanos((shared.last_acquired.load(SeqCst) - paused_at).max(0) as u64);
            report.worst_recovery_after_pause = report.worst_recovery_after_pause.max(took);
        } else if self.scheme != Scheme::Flock && shared.entered.load(SeqCst) < shared.target.load(SeqCst) {
            report.fail(format!("pause: nobody took the expired lock within {RECOVERY_BOUND:?}"));
        }
        worker.pause.store(PAUSE_RESUMED, SeqCst);
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGCONT) };

        // No fault is injected until the woken worker has released, so its
        // report cannot be lost to a kill. Its release waits for no one.
        let resumed = Instant::now();
        while worker.pause.load(SeqCst) != PAUSE_REPORTED {
            if resumed.elapsed() > Duration::from_secs(30) {
                let failure = format!(
                    "pause: the woken worker {slot} (pid {pid}, /proc state {}, pause step {}) did not release within 30 s",
                    proc_state(pid),
                    worker.pause.load(SeqCst)
                );
                report.fail(failure);
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        worker.pause.store(PAUSE_NONE, SeqCst);
        let refused = worker.refused.load(SeqCst) == 1;
        let told_lost = worker.outcome.load(SeqCst) == OUTCOME_LOST;
        if overtaken && refused && told_lost {
            report.caught_pauses += 1;
        } else if overtaken {
            report.fail(format!(
                "pause: an overtaken holder (fence {fence}) was {} by the resource and told {} at release \
                 (overtaken {:?} into the pause by fence {max_when_overtaken}; the worker entered with fence {}, \
                 the resource's highest then {})",
                if refused { "refused" } else { "admitted" },
                outcome_name(worker.outcome.load(SeqCst)),
                Duration::from_nanos((shared.last_acquired.load(SeqCst) - paused_at).max(0) as u64),
                worker.used_fence.load(SeqCst),
                worker.max_before_entering.load(SeqCst)
            ));
        }
    }
}

/// Whether `pid` is stopped by a signal (state `T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    proc_state(pid) == 'T'
}

/// The state letter of `pid` in `/proc/PID/stat` (`?` if it cannot be read).
fn proc_state(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap_or('?')
}

impl Report {
    /// Records a failure, and prints it at once: a long run reports at its
    /// end, and what the machine looked like by then is gone.
    fn fail(&mut self, failure: String) {
        eprintln!("torture: {failure}");
        self.failures.push(failure);
    }
}

fn outcome_name(outcome: u32) -> &'static str {
    match outcome {
        OUTCOME_RELEASED => "Released",
        OUTCOME_EXPIRED => "Expired",
        OUTCOME_LOST => "Lost",
        _ => "nothing",
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn run(scheme: Scheme, shared: bool, sections: u64, rng: &mut Rng) -> Report {
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("lockcore-torture-{}-{}", scheme.name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shm = dir.join("shared");
    let counter = dir.join("counter");
    std::fs::write(&counter, format!("{:<20}\n", 0)).unwrap();
    let map = Mapping::create(&shm);
    map.get().target.store(sections, SeqCst);
    let mode = if shared { 0o666 } else { 0o600 };
    let query = format!("ttl={}ms&mode={mode:04o}", TTL.as_millis());
    let (spec, line) = match scheme.target_kind() {
        TargetKind::Url => {
            let server = testkit::shared_redis().expect("the caller skips a server scheme without a server");
            let name = format!("torture-{}", std::process::id());
            let queue = format!("lockcore:{{{name}}}:queue");
            (server.spec(&name, &query), Line::OnServer { server, queue })
        }
        _ => {
            let spec = format!("{}:{}/lock?{query}", scheme.name(), dir.display());
            let path = Lock::open(spec.as_bytes()).unwrap().path().unwrap().clone();
            (spec, Line::Turnstile(Box::new(path), mode))
        }
    };
    let mut torture = Torture {
        scheme,
        spec,
        line,
        shm,
        counter: counter.clone(),
        map: &map,
        workers: (0..WORKERS).map(|_| None).collect(),
    };
    for slot in 0..WORKERS {
        torture.spawn(slot);
    }

    // About one fault per 150 sections, at least a dozen, in a fixed mix.
    let faults = (sections / 150).max(12);
    let mix =
        [Fault::KillHolder, Fault::KillWaiter, Fault::KillMidOperation, Fault::PauseHolder, Fault::KillNextInLine];
    let mut report = Report::default();
    let shared = map.get();
    let mut injected = 0;
    // A wedged lock shows as no section entered for a long while (a long
    // run may take many minutes in all, which is no failure).
    let mut last_progress = (0, Instant::now());
    while shared.entered.load(SeqCst) < sections {
        torture.reap_and_respawn();
        let progress = shared.entered.load(SeqCst);
        if progress != last_progress.0 {
            last_progress = (progress, Instant::now());
        }
        if injected < faults && progress >= injected * sections / faults {
            let fault = mix[(injected % mix.len() as u64) as usize];
            torture.inject(fault, rng, &mut report);
            injected += 1;
        }
        std::thread::sleep(Duration::from_millis(1 + rng.below(5)));
        assert!(
            last_progress.1.elapsed() < Duration::from_secs(60),
            "{}: no section entered for a minute, at {progress} of {sections}",
            scheme.name()
        );
        assert_eq!(shared.errors.load(SeqCst), 0, "{}: a worker failed (see its stderr)", scheme.name());
    }
    for slot in 0..WORKERS {
        if let Some(mut child) = torture.workers[slot].take() {
            // SAFETY: resume anything still paused, so that it can finish.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
            let _ = child.wait();
        }
    }
    report.sections = shared.completed.load(SeqCst);
    report.counter = read_counter(&counter);
    report.overlaps = shared.overlaps.load(SeqCst);
    report.refusals = shared.refusals.load(SeqCst);
    report.lost_releases = shared.lost_releases.load(SeqCst);
    report.took_over_dead = shared.took_over_dead.load(SeqCst);
    report.took_over_expired = shared.took_over_expired.load(SeqCst);
    report.live_named_dead = shared.live_named_dead.load(SeqCst);
    let entered = shared.entered.load(SeqCst);
    // A worker killed inside its section may have entered without writing,
    // or written without counting the completion.
    assert!(
        report.counter >= report.sections && report.counter <= entered,
        "{}: counter {} outside [{}, {entered}]",
        scheme.name(),
        report.counter,
        report.sections
    );
    std::fs::remove_dir_all(&dir).unwrap();
    report.took = began.elapsed();
    report
}

#[test]
fn every_strategy_survives_the_torture() {
    let sections = env_number("LOCK_TORTURE_SECTIONS", 2000);
    let seed = env_number("LOCK_TORTURE_SEED", clock_ns(libc::CLOCK_REALTIME) as u64 | 1);
    let mut rng = Rng(seed);
    println!("torture: {WORKERS} processes, {sections} sections per strategy, ttl {TTL:?}, seed {seed}");
    println!();
    println!(
        "| strategy | sections | counter | kill holder | kill waiter | kill mid-operation (idle/acquiring/holding/releasing) | \
         kill next in line (idle/acquiring/holding/releasing) | pause | overlaps | \
         fence refusals | overtaken pauses | caught (refused + told lost) | releases told lost | \
         took over from dead / expired | worst recovery after kill | after pause | time |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let mut failures = Vec::new();
    // LOCK_TORTURE_STRATEGIES=toplock,lease runs only those.
    let only = std::env::var("LOCK_TORTURE_STRATEGIES").unwrap_or_default();
    let chosen = Scheme::ALL.iter().copied().filter(|s| only.is_empty() || only.split(',').any(|o| o == s.name()));
    // Every scheme on a private lock; then every scheme whose locks may be
    // shared on one that every user may write (its waiters queue in a
    // System V segment rather than a mapped file).
    let private = chosen.clone().map(|scheme| (scheme, false));
    let shared = chosen.filter(|s| s.supports(lockcore::Ability::Files) && *s != Scheme::Shm).map(|s| (s, true));
    for (scheme, shared) in private.chain(shared) {
        if scheme.target_kind() == TargetKind::Url && testkit::shared_redis().is_none() {
            println!("| {} | skipped: no server |", scheme.name());
            continue;
        }
        let r = run(scheme, shared, sections, &mut rng);
        let name = if shared { format!("{} mode=0666", scheme.name()) } else { scheme.name().to_string() };
        println!(
            "| {} | {} | {} | {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {} | {} | {} | {} / {} | {:.2?} | {} | {:.0?} |",
            name,
            r.sections,
            r.counter,
            r.faults[0],
            r.faults[1],
            r.faults[2],
            r.killed_in.map(|n| n.to_string()).join("/"),
            r.faults[4],
            r.next_killed_in.map(|n| n.to_string()).join("/"),
            r.faults[3],
            r.overlaps,
            r.refusals,
            r.overtaken_pauses,
            r.caught_pauses,
            r.lost_releases,
            r.took_over_dead,
            r.took_over_expired,
            r.worst_recovery_after_kill,
            // Nobody can overtake a paused flock holder: nothing to recover.
            if r.overtaken_pauses == 0 { "–".to_string() } else { format!("{:.2?}", r.worst_recovery_after_pause) },
            r.took,
        );
        if r.overlaps != 0 {
            failures.push(format!("{name}: {} overlaps", r.overlaps));
        }
        // Each overtaken pause was caught (its own check, in `pause`); no
        // other holder was refused or told it lost.
        if r.refusals != r.overtaken_pauses || r.lost_releases != r.overtaken_pauses {
            failures.push(format!(
                "{name}: {} paused holders were overtaken, but {} writes were refused and {} releases told lost",
                r.overtaken_pauses, r.refusals, r.lost_releases
            ));
        }
        if r.worst_recovery_after_pause > RECOVERY_BOUND {
            failures.push(format!("{name}: recovery after a pause took {:?}", r.worst_recovery_after_pause));
        }
        failures.extend(r.failures.iter().map(|f| format!("{name}: {f}")));
        // Every local scheme's waiters queue in a turnstile: its next in
        // line must have been found, and killed, at least once.
        if r.faults[Fault::KillNextInLine as usize] == 0 {
            failures.push(format!("{name}: no next in line was found in the turnstile to kill"));
        }
        // An acquisition names a dead holder only if that one is gone, and
        // each killed process held at most one lock to take over.
        if r.live_named_dead != 0 {
            failures.push(format!("{name}: {} acquisitions called a running holder dead", r.live_named_dead));
        }
        let kills: u32 = [Fault::KillHolder, Fault::KillWaiter, Fault::KillMidOperation, Fault::KillNextInLine]
            .iter()
            .map(|&fault| r.faults[fault as usize])
            .sum();
        if r.took_over_dead > u64::from(kills) {
            failures
                .push(format!("{name}: {} takeovers from dead holders, {kills} processes killed", r.took_over_dead));
        }
        // A live holder is taken over only once past its TTL: here, only a
        // paused one. (A flock holder killed but still exiting has let go of
        // its kernel lock while its pid still runs: it counts as expired.)
        if scheme != Scheme::Flock && r.took_over_expired > r.overtaken_pauses {
            failures.push(format!(
                "{name}: {} takeovers from live holders past their TTL, but {} pauses overtaken",
                r.took_over_expired, r.overtaken_pauses
            ));
        }
        if scheme == Scheme::Flock && r.overtaken_pauses != 0 {
            failures.push("flock: a paused holder's kernel lock was taken".into());
        }
    }
    assert!(failures.is_empty(), "torture failures (seed {seed}):\n{}", failures.join("\n"));
}

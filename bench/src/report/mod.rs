//! The contention report: for each strategy x {threads, processes} x number
//! of contenders, how fast, how fair and how costly the lock is when many
//! want it at once, and proof that it never let two in.
//!
//! ```text
//! cargo run --release -p bench --bin contention -- [--duration 1s] [--rounds 3]
//!     [--strategies lockfile,mkdir,flock] [--contenders 1,2,4,8,16]
//!     [--modes threads,processes] [--critical-us 50] [--busy]
//!     [--dir /tmp] [--redis-transport tcp] [--out target/contention] [--quick]
//! ```
//!
//! Each worker (a thread with its own [`Lock`] handle, or a forked process)
//! loops: acquire (waiting as long as it takes), hold the lock for
//! `--critical-us` (sleeping by default, so the holder leaves the CPU to the
//! waiters as a program doing file I/O would; `--busy` spins instead), release.
//! All workers of a cell are released together and stopped together after
//! `--duration`. Cells run round-robin `--rounds` times, so a burst of noise
//! from other work on the machine is spread over every cell instead of
//! spoiling one.
//!
//! Measured, per cell:
//! * acquisitions per second (all workers, over the time from release to the
//!   last worker's stop);
//! * fairness: Jain's index over the per-worker acquisition counts (1 = all
//!   equal, 1/n = one worker got everything), averaged over rounds, and the
//!   smallest and largest per-worker count of any round;
//! * wait: from the acquire call to the lock held, p50 / p99 / max;
//! * handoff: from the holder's release (a CLOCK_MONOTONIC timestamp stored in
//!   shared memory just before it calls `release`) to the next holder inside
//!   (its timestamp when `acquire` returns), p50 / p99, counting only handoffs
//!   to *another* worker; the share of re-acquisitions by the releaser itself
//!   is reported beside it;
//! * CPU per acquisition: the workers' own CPU clocks
//!   (`CLOCK_THREAD_CPUTIME_ID`) from release to stop, summed, divided by the
//!   acquisitions; in process mode `getrusage(RUSAGE_CHILDREN)` is recorded
//!   too, as a cross-check. Polling shows here: a waiter that spins or wakes
//!   often pays CPU for every acquisition it does not get. Beside it, the
//!   same time on perf's task clock (`perf_event_open`, where allowed): the
//!   scheduler's clock can charge a thread for time around each wake-up
//!   that perf's does not (15 µs for every short sleep on some virtual
//!   machines), which weighs on a cheap lock's figure;
//! * the oracle, in a `MAP_SHARED | MAP_ANONYMOUS` page: a counter of workers
//!   inside the critical section, which must never exceed one, and the
//!   fencing tokens, which must only grow. Any violation fails the run. No
//!   figure of time is ever judged.
//!
//! A scheme whose lock is a file keeps it in a fresh directory under
//! `--dir`. `redis` keeps it on a `redis-server` that the run starts for
//! itself (once, with no persistence), reached over loopback TCP unless
//! `--redis-transport unix` says its unix socket: TCP is what a client on
//! another host uses, and the table's notes say which it was. Without
//! `redis-server` the redis cells are skipped with a line that says so,
//! except under CI (`CI` set), where the run fails: CI installs it.

pub mod floor;
pub mod hist;
pub mod output;
pub mod svg;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use lockcore::{Lock, ReleaseOutcome, Scheme, TargetKind};

use crate::pool::{Mode, MAX_WORKERS};
use crate::redis::Transport;
use crate::sys::{self, SharedMap, Zeroable};
use floor::FifoFloor;
use hist::{Hist, SharedHist};

/// What a cell measures: a lock of this library, or the floor beside them
/// ([`floor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contestant {
    Lock(Scheme),
    Floor,
}

impl Contestant {
    /// Every scheme of this build, then the floor: the default run.
    pub fn all() -> Vec<Contestant> {
        Scheme::ALL.iter().map(|&s| Contestant::Lock(s)).chain([Contestant::Floor]).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Contestant::Lock(scheme) => scheme.name(),
            Contestant::Floor => floor::NAME,
        }
    }

    pub fn from_name(name: &str) -> Option<Contestant> {
        Contestant::all().into_iter().find(|c| c.name() == name)
    }

    pub fn scheme(self) -> Option<Scheme> {
        match self {
            Contestant::Lock(scheme) => Some(scheme),
            Contestant::Floor => None,
        }
    }
}

/// How the holder spends the critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// `nanosleep`: the CPU goes to others, as during file I/O.
    Sleep,
    /// Spinning on the monotonic clock: the holder keeps a CPU.
    Busy,
}

impl Hold {
    pub fn name(self) -> &'static str {
        match self {
            Hold::Sleep => "sleep",
            Hold::Busy => "busy",
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Length of one cell in one round; `None`: `budget` shared out.
    pub duration: Option<Duration>,
    /// Measuring time of the whole run when `duration` is not given.
    pub budget: Duration,
    pub rounds: u32,
    pub strategies: Vec<Contestant>,
    pub contenders: Vec<usize>,
    pub modes: Vec<Mode>,
    /// Time held inside the critical section.
    pub critical: Duration,
    pub hold: Hold,
    /// Time each worker spends outside the lock between a release and its
    /// next acquire (0: it asks again at once).
    pub outside: Duration,
    /// Where the CSV and the plots go.
    pub out: PathBuf,
    /// Where the locks live (the file system measured).
    pub dir: PathBuf,
    /// How the workers reach the redis server, for `redis` cells.
    pub redis_transport: Transport,
    /// The `mode=` of file locks (`None`: the spec's default, 0600): with a
    /// group or other write bit, the lock of several users, whose waiters
    /// queue in a System V segment rather than a mapped file.
    pub lock_mode: Option<u32>,
    pub quick: bool,
}

impl Default for Config {
    /// The default run: about two minutes on a 2-core machine.
    fn default() -> Config {
        Config {
            duration: None,
            budget: Duration::from_secs(105),
            rounds: 3,
            strategies: Contestant::all(),
            contenders: vec![1, 2, 4, 8, 16],
            modes: Mode::ALL.to_vec(),
            critical: Duration::from_micros(50),
            hold: Hold::Sleep,
            outside: Duration::ZERO,
            out: PathBuf::from("target/contention"),
            dir: std::env::temp_dir(),
            redis_transport: Transport::Tcp,
            lock_mode: None,
            quick: false,
        }
    }
}

impl Config {
    /// The CI smoke run: every strategy and mode, a few contender counts,
    /// short cells, one round; the oracle is checked all the same.
    pub fn quick() -> Config {
        Config {
            budget: Duration::from_secs(6),
            rounds: 1,
            contenders: vec![1, 2, 8],
            quick: true,
            ..Config::default()
        }
    }

    pub fn cells(&self) -> usize {
        self.strategies.len() * self.modes.len() * self.contenders.len()
    }

    /// How long each cell runs in each round: `--duration`, or the budget
    /// shared out over cells and rounds (1 s at most; at least 200 ms, or
    /// 100 ms with `--quick`), in whole 10 ms.
    pub fn cell_duration(&self) -> Duration {
        if let Some(d) = self.duration {
            return d;
        }
        let (least, most) = if self.quick { (100, 200) } else { (200, 1000) };
        let share = self.budget.as_millis() as u64 / (self.cells() as u64 * u64::from(self.rounds)).max(1);
        Duration::from_millis((share / 10 * 10).clamp(least, most))
    }

    /// The command's help, listing the schemes of `Scheme::ALL` and the floor.
    pub fn usage() -> String {
        let names: Vec<&str> = Contestant::all().into_iter().map(Contestant::name).collect();
        format!(
            "\
contention: throughput, fairness, wait, handoff and CPU of every lock strategy under contention

usage: cargo run --release -p bench --bin contention -- [options]

  --duration D        length of each cell in each round; units ns us ms s (default: the budget
                      shared out, at most 1s per cell and round)
  --budget D          measuring time of the whole run when --duration is not given (105s; --quick: 6s)
  --rounds N          cells run round-robin N times and are merged (3; --quick: 1)
  --strategies LIST   comma-separated schemes, and `floor`, a fair futex lock with nothing else to
                      do, measured beside them (all: {})
  --contenders LIST   comma-separated worker counts (1,2,4,8,16; --quick: 1,2,8)
  --modes LIST        threads,processes (both)
  --critical-us N     time the holder keeps the lock (50)
  --busy              spin through the critical section instead of sleeping
  --outside-us N      time each worker stays away between release and its next acquire (0)
  --dir PATH          where the lock files live (the default temp directory)
  --lock-mode OCTAL   the mode= of file locks (0600); 0666 measures a lock other users may share
                      (shm, which is private only, is left out)
  --redis-transport T how the workers reach the run's own redis-server for redis cells: tcp, over
                      loopback as a client on another host would (the default), or unix, its socket
  --out PATH          where results.csv and the SVG plots go (target/contention)
  --quick             the short CI run; explicit options still win

Exits 1 if the overlap oracle saw two holders at once (or a fence go back), 2 on bad usage.",
            names.join(",")
        )
    }

    /// Parses the command line (without the program name).
    pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Config, ArgError> {
        let mut given: Vec<(String, Option<String>)> = Vec::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            match flag.as_str() {
                "-h" | "--help" => return Err(ArgError::Help),
                "--quick" | "--busy" => given.push((flag, None)),
                "--duration" | "--budget" | "--outside-us" | "--rounds" | "--strategies" | "--contenders"
                | "--modes" | "--critical-us" | "--dir" | "--out" | "--redis-transport" | "--lock-mode" => {
                    let value = match inline {
                        Some(v) => v,
                        None => args.next().ok_or_else(|| ArgError::Bad(format!("{flag} needs a value")))?,
                    };
                    given.push((flag, Some(value)));
                }
                _ => return Err(ArgError::Bad(format!("unknown argument {arg:?}"))),
            }
        }
        let mut config = if given.iter().any(|(f, _)| f == "--quick") { Config::quick() } else { Config::default() };
        for (flag, value) in given {
            let value = value.unwrap_or_default();
            let bad = |why: &str| ArgError::Bad(format!("{flag} {value:?}: {why}"));
            match flag.as_str() {
                "--busy" => config.hold = Hold::Busy,
                "--duration" => config.duration = Some(parse_duration(&value).ok_or_else(|| bad("not a duration"))?),
                "--budget" => config.budget = parse_duration(&value).ok_or_else(|| bad("not a duration"))?,
                "--outside-us" => {
                    config.outside = Duration::from_micros(value.parse().map_err(|_| bad("microseconds"))?)
                }
                "--rounds" => config.rounds = value.parse().ok().filter(|&r| r > 0).ok_or_else(|| bad("1 or more"))?,
                "--critical-us" => {
                    config.critical = Duration::from_micros(value.parse().map_err(|_| bad("microseconds"))?)
                }
                "--dir" => config.dir = PathBuf::from(&value),
                "--lock-mode" => {
                    let mode = u32::from_str_radix(&value, 8).ok().filter(|&m| m & !0o666 == 0 && m & 0o600 == 0o600);
                    config.lock_mode = Some(mode.ok_or_else(|| bad("octal, read and write for the owner, no x"))?)
                }
                "--out" => config.out = PathBuf::from(&value),
                "--redis-transport" => {
                    config.redis_transport = Transport::from_name(&value).ok_or_else(|| bad("tcp or unix"))?
                }
                "--strategies" => {
                    config.strategies = list(&value)
                        .map(|name| {
                            Contestant::from_name(name).ok_or_else(|| {
                                let known: Vec<_> = Contestant::all().into_iter().map(Contestant::name).collect();
                                bad(&format!("unknown strategy {name:?} (known: {})", known.join(",")))
                            })
                        })
                        .collect::<Result<_, _>>()?
                }
                "--modes" => {
                    config.modes = list(&value)
                        .map(|name| Mode::from_name(name).ok_or_else(|| bad("threads or processes")))
                        .collect::<Result<_, _>>()?
                }
                "--contenders" => {
                    config.contenders = list(&value)
                        .map(|n| {
                            n.parse()
                                .ok()
                                .filter(|n| (1..=MAX_WORKERS).contains(n))
                                .ok_or_else(|| bad(&format!("counts from 1 to {MAX_WORKERS}")))
                        })
                        .collect::<Result<_, _>>()?
                }
                _ => {}
            }
        }
        if config.strategies.is_empty() || config.modes.is_empty() || config.contenders.is_empty() {
            return Err(ArgError::Bad("empty list of strategies, modes or contenders".into()));
        }
        Ok(config)
    }
}

/// Why the command line was not run.
#[derive(Debug, PartialEq, Eq)]
pub enum ArgError {
    Help,
    Bad(String),
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `250ms`, `1s`, `1.5s`, `100us`, `20000ns`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" => 60.0,
        _ => return None,
    };
    let secs = number * scale;
    (secs.is_finite() && secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

/// One worker's slot in shared memory.
#[repr(C)]
struct Slot {
    acquisitions: AtomicU64,
    errors: AtomicU64,
    lost: AtomicU64,
    self_handoffs: AtomicU64,
    wait_max_ns: AtomicU64,
    /// Time inside the critical section, summed (the real hold, timer slack included).
    held_ns: AtomicU64,
    /// Time in `release`, summed.
    release_ns: AtomicU64,
    cpu_ns: AtomicU64,
    /// The same time on perf's task clock, if every read of it succeeded
    /// (`task_clock_read` is then 1).
    task_clock_ns: AtomicU64,
    task_clock_read: AtomicU64,
    end_ns: AtomicU64,
    wait: SharedHist,
    /// Handoffs to this worker from another one.
    handoff: SharedHist,
    /// Every handoff to this worker, from itself included.
    handoff_all: SharedHist,
}

/// Everything a cell's workers share: the start and stop gates, the oracle,
/// the last release, and a slot per worker.
#[repr(C)]
struct Arena {
    ready: AtomicU32,
    go: AtomicU32,
    stop: AtomicU32,
    /// Workers inside the critical section right now: the overlap oracle.
    inside: AtomicU32,
    overlaps: AtomicU64,
    last_fence: AtomicU64,
    fence_regressions: AtomicU64,
    /// Worker index + 1 of the last releaser; 0 before the first release.
    last_release_by: AtomicU64,
    last_release_ns: AtomicU64,
    slots: [Slot; MAX_WORKERS],
    /// The lock of a floor cell.
    floor: FifoFloor,
}

// SAFETY: atomics and arrays of atomics only.
unsafe impl Zeroable for Slot {}
// SAFETY: atomics and arrays of zero-valid slots only.
unsafe impl Zeroable for Arena {}

/// How long one `acquire` may wait before it counts as an error (never hit
/// unless a strategy wedges; it keeps a wedged run from hanging forever).
const ACQUIRE_BUDGET: Duration = Duration::from_secs(60);

/// What a worker does with the lock, from the config.
#[derive(Clone, Copy)]
struct Work {
    critical: Duration,
    hold: Hold,
    outside: Duration,
}

/// What a cell's workers take turns at: a lock opened from a spec, each
/// worker its own handle, or the arena's floor.
#[derive(Clone, Copy)]
enum Target<'a> {
    Spec(&'a [u8]),
    Floor,
}

/// One worker's way to the lock.
enum Contender<'a> {
    // Boxed: a handle keeps its buffers inline.
    Lock(Box<Lock>),
    Floor(&'a FifoFloor),
}

impl Contender<'_> {
    /// The fence of the acquisition.
    fn acquire(&mut self) -> Result<u64, ()> {
        match self {
            Contender::Lock(lock) => lock.acquire(Some(ACQUIRE_BUDGET)).map(|acquired| acquired.fence).map_err(drop),
            Contender::Floor(floor) => Ok(floor.acquire()),
        }
    }

    fn release(&mut self) -> Result<ReleaseOutcome, ()> {
        match self {
            Contender::Lock(lock) => lock.release(Duration::ZERO).map_err(drop),
            Contender::Floor(floor) => {
                floor.release();
                Ok(ReleaseOutcome::Released)
            }
        }
    }
}

fn worker(arena: &Arena, index: usize, target: Target<'_>, work: Work) {
    let Work { critical, hold, outside } = work;
    let slot = &arena.slots[index];
    let me = index as u64 + 1;
    let contender = match target {
        Target::Spec(spec) => Lock::open(spec).map(|lock| Contender::Lock(Box::new(lock))).map_err(drop),
        Target::Floor => Ok(Contender::Floor(&arena.floor)),
    };
    sys::bump_and_wake(&arena.ready);
    let Ok(mut lock) = contender else {
        slot.errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let task_clock = sys::TaskClock::of_this_thread();
    sys::wait_while_equal(&arena.go, 0);
    let task_clock_start = task_clock.as_ref().and_then(sys::TaskClock::ns);
    let cpu_start = sys::thread_cpu_ns();
    // At least one acquisition per worker, however late it was scheduled, so
    // that the oracle always sees every worker take the lock.
    let mut first = true;
    while std::mem::take(&mut first) || arena.stop.load(Ordering::Relaxed) == 0 {
        let asked = sys::mono_ns();
        let acquired = lock.acquire();
        let inside = sys::mono_ns();
        let fence = match acquired {
            Ok(fence) => fence,
            Err(_) => {
                slot.errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        if arena.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            arena.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if arena.last_fence.fetch_max(fence, Ordering::SeqCst) >= fence {
            arena.fence_regressions.fetch_add(1, Ordering::SeqCst);
        }
        let released_at = arena.last_release_ns.load(Ordering::SeqCst);
        if released_at != 0 {
            let handoff = inside.saturating_sub(released_at);
            slot.handoff_all.record(handoff);
            if arena.last_release_by.load(Ordering::SeqCst) == me {
                slot.self_handoffs.fetch_add(1, Ordering::Relaxed);
            } else {
                slot.handoff.record(handoff);
            }
        }
        let waited = inside - asked;
        slot.wait.record(waited);
        slot.wait_max_ns.fetch_max(waited, Ordering::Relaxed);
        slot.acquisitions.fetch_add(1, Ordering::Relaxed);

        match hold {
            Hold::Sleep if !critical.is_zero() => std::thread::sleep(critical),
            Hold::Sleep => {}
            Hold::Busy => {
                let until = inside + critical.as_nanos() as u64;
                while sys::mono_ns() < until {
                    std::hint::spin_loop();
                }
            }
        }

        arena.inside.fetch_sub(1, Ordering::SeqCst);
        arena.last_release_by.store(me, Ordering::SeqCst);
        let releasing = sys::mono_ns();
        arena.last_release_ns.store(releasing, Ordering::SeqCst);
        slot.held_ns.fetch_add(releasing - inside, Ordering::Relaxed);
        let released = lock.release();
        slot.release_ns.fetch_add(sys::mono_ns() - releasing, Ordering::Relaxed);
        match released {
            Ok(ReleaseOutcome::Released) => {}
            Ok(ReleaseOutcome::Expired) | Ok(ReleaseOutcome::Lost) => {
                slot.lost.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => {
                slot.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !outside.is_zero() {
            std::thread::sleep(outside);
        }
    }
    slot.cpu_ns.store(sys::thread_cpu_ns() - cpu_start, Ordering::Relaxed);
    if let (Some(start), Some(end)) = (task_clock_start, task_clock.as_ref().and_then(sys::TaskClock::ns)) {
        slot.task_clock_ns.store(end - start, Ordering::Relaxed);
        slot.task_clock_read.store(1, Ordering::Relaxed);
    }
    slot.end_ns.store(sys::mono_ns(), Ordering::Release);
}

/// Releases the workers once all are ready, lets them run for `duration`,
/// and stops them. Returns the release time. Gives up waiting for workers
/// that never report ready (a child that died) after a while.
fn drive(arena: &Arena, workers: usize, duration: Duration) -> u64 {
    let give_up = sys::mono_ns() + 30_000_000_000;
    loop {
        let ready = arena.ready.load(Ordering::Acquire);
        if ready as usize >= workers || sys::mono_ns() > give_up {
            break;
        }
        sys::futex_wait(&arena.ready, ready, Some(Duration::from_millis(100)));
    }
    let go = sys::mono_ns();
    arena.go.store(1, Ordering::Release);
    sys::futex_wake_all(&arena.go);
    std::thread::sleep(duration);
    arena.stop.store(1, Ordering::Release);
    go
}

/// The merged figures of one strategy x mode x contenders.
#[derive(Clone, Debug)]
pub struct Cell {
    pub contestant: Contestant,
    /// The contestant's name.
    pub strategy: &'static str,
    pub mode: Mode,
    pub contenders: usize,
    /// Where its locks lived: the file system type, or the server and its
    /// transport (`redis-tcp`).
    pub place: String,
    pub rounds: u32,
    /// Summed over rounds: from release to the last worker's stop.
    pub elapsed_ns: u64,
    pub acquisitions: u64,
    jain_sum: f64,
    jain_rounds: u32,
    /// Smallest and largest per-worker count in any one round.
    pub worker_min: u64,
    pub worker_max: u64,
    pub wait: Hist,
    pub wait_max_ns: u64,
    /// Handoffs to another worker.
    pub handoff: Hist,
    /// Every handoff, re-acquisitions by the releaser included.
    pub handoff_all: Hist,
    pub self_handoffs: u64,
    /// Time inside the critical section, summed over acquisitions.
    pub held_ns: u64,
    /// Time spent in `release`, summed.
    pub release_ns: u64,
    /// The workers' own CPU clocks, summed.
    pub cpu_ns: u64,
    /// getrusage(RUSAGE_CHILDREN) over the round (process mode only).
    pub rusage_cpu_ns: Option<u64>,
    /// The workers' perf task clocks, summed; `None` unless every worker of
    /// every round could read its own.
    pub task_clock_ns: Option<u64>,
    pub overlaps: u64,
    pub fence_regressions: u64,
    pub lost: u64,
    pub errors: u64,
}

impl Cell {
    fn new(contestant: Contestant, mode: Mode, contenders: usize, place: String) -> Cell {
        Cell {
            contestant,
            strategy: contestant.name(),
            mode,
            contenders,
            place,
            rounds: 0,
            elapsed_ns: 0,
            acquisitions: 0,
            jain_sum: 0.0,
            jain_rounds: 0,
            worker_min: u64::MAX,
            worker_max: 0,
            wait: Hist::default(),
            wait_max_ns: 0,
            handoff: Hist::default(),
            handoff_all: Hist::default(),
            self_handoffs: 0,
            held_ns: 0,
            release_ns: 0,
            cpu_ns: 0,
            rusage_cpu_ns: None,
            task_clock_ns: Some(0),
            overlaps: 0,
            fence_regressions: 0,
            lost: 0,
            errors: 0,
        }
    }

    pub fn acquisitions_per_second(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.acquisitions as f64 * 1e9 / self.elapsed_ns as f64
    }

    /// Jain's fairness index, averaged over rounds; NaN if nothing was acquired.
    pub fn jain(&self) -> f64 {
        if self.jain_rounds == 0 {
            f64::NAN
        } else {
            self.jain_sum / self.jain_rounds as f64
        }
    }

    /// The real time held per acquisition (the critical section plus timer
    /// slack and the bookkeeping around it).
    pub fn hold_us(&self) -> f64 {
        per_acquisition_us(self.held_ns, self.acquisitions)
    }

    /// A quantile of the wait, never above the largest wait seen (a bucket's
    /// middle can be).
    pub fn wait_quantile(&self, q: f64) -> Option<u64> {
        self.wait.quantile(q).map(|ns| ns.min(self.wait_max_ns))
    }

    /// The mean time of one `release` call.
    pub fn release_us(&self) -> f64 {
        per_acquisition_us(self.release_ns, self.acquisitions)
    }

    pub fn cpu_us_per_acquisition(&self) -> f64 {
        per_acquisition_us(self.cpu_ns, self.acquisitions)
    }

    pub fn rusage_cpu_us_per_acquisition(&self) -> Option<f64> {
        self.rusage_cpu_ns.map(|ns| per_acquisition_us(ns, self.acquisitions))
    }

    pub fn task_clock_us_per_acquisition(&self) -> Option<f64> {
        self.task_clock_ns.map(|ns| per_acquisition_us(ns, self.acquisitions))
    }

    /// Share of acquisitions taken by the worker that had just released.
    pub fn self_handoff_share(&self) -> f64 {
        if self.handoff_all.total() == 0 {
            f64::NAN
        } else {
            self.self_handoffs as f64 / self.handoff_all.total() as f64
        }
    }

    /// Oracle violations: two holders at once, a fence that did not grow,
    /// or a release that found its lock taken by someone else.
    pub fn violations(&self) -> u64 {
        self.overlaps + self.fence_regressions + self.lost
    }
}

fn per_acquisition_us(ns: u64, acquisitions: u64) -> f64 {
    if acquisitions == 0 {
        f64::NAN
    } else {
        ns as f64 / 1e3 / acquisitions as f64
    }
}

/// Jain's fairness index of `counts`: (sum x)^2 / (n * sum x^2).
pub fn jain_index(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        f64::NAN
    } else {
        sum * sum / (counts.len() as f64 * squares)
    }
}

/// A finished run.
#[derive(Debug)]
pub struct Report {
    pub config: Config,
    /// The file system the locks lived on, as /proc/self/mounts names it.
    pub fs: String,
    pub cells: Vec<Cell>,
    /// What the caption does not say: where the locks of a scheme that keeps
    /// no file lived, and the schemes skipped, with why.
    pub notes: Vec<String>,
}

impl Report {
    pub fn violations(&self) -> u64 {
        self.cells.iter().map(Cell::violations).sum()
    }
}

/// Runs every cell, `config.rounds` times round-robin; `log` hears progress,
/// and the schemes skipped. The report's config lists only the schemes run.
pub fn run(config: &Config, log: &mut dyn FnMut(&str)) -> Report {
    let schemes: Vec<Scheme> = config.strategies.iter().filter_map(|c| c.scheme()).collect();
    let (homes, skipped) = crate::Homes::new(&config.dir, "contention", &schemes, config.redis_transport);
    let mut config = config.clone();
    let mut notes = Vec::new();
    for (scheme, why) in &skipped {
        let line = format!("`{}` cells skipped: {why}", scheme.name());
        log(&line);
        notes.push(line);
        config.strategies.retain(|s| *s != Contestant::Lock(*scheme));
    }
    if config.strategies.contains(&Contestant::Floor) {
        notes.push(format!(
            "`{}`: no lock of this library, but a ticket lock in shared memory whose waiters each sleep on a \
             futex word of their own, woken one at a time: the least a fair hand-off that sleeps costs here.",
            floor::NAME
        ));
    }
    if let Some(server) = homes.redis().filter(|_| config.strategies.iter().any(|s| s.name() == "redis")) {
        let how = match server.transport() {
            Transport::Tcp => "as a client on another host reaches its server (`--redis-transport unix`: its socket)",
            Transport::Unix => "which only clients on its own host can use (`--redis-transport tcp`: over TCP)",
        };
        // The server's CPU is a process of its own, which no worker's clock sees.
        notes.push(format!(
            "`redis` locks: keys on a server started for this run, {}, {how}; specs `{}`, one NAME per cell \
             and round; CPU µs / acq is the workers' own, without the server's.",
            server.describe(),
            server.spec("NAME", crate::redis::QUERY)
        ));
    }
    if let Some(mode) = config.lock_mode {
        if mode & 0o022 != 0 && config.strategies.contains(&Contestant::Lock(Scheme::Shm)) {
            let line = format!("`shm` cells skipped: its locks are private, and mode={mode:04o} shares them");
            log(&line);
            notes.push(line);
            config.strategies.retain(|s| *s != Contestant::Lock(Scheme::Shm));
        }
        notes.push(format!("File locks made with `mode={mode:04o}`."));
    }
    let mut cells = Vec::new();
    for &contestant in &config.strategies {
        let place = contestant.scheme().map_or_else(|| floor::PLACE.to_string(), |scheme| homes.place(scheme));
        for &mode in &config.modes {
            for &n in &config.contenders {
                cells.push(Cell::new(contestant, mode, n, place.clone()));
            }
        }
    }
    for round in 0..config.rounds {
        for cell in cells.iter_mut() {
            let spec = cell.contestant.scheme().map(|scheme| {
                let name = format!("{}-{}-{}-r{round}", cell.strategy, cell.mode.name(), cell.contenders);
                let mut spec = homes.spec(scheme, &name);
                if let (Some(mode), TargetKind::Path) = (config.lock_mode, scheme.target_kind()) {
                    spec.push_str(&format!("?mode={mode:04o}"));
                }
                spec
            });
            run_round(&config, cell, spec.as_ref().map_or(Target::Floor, |spec| Target::Spec(spec.as_bytes())));
            log(&format!(
                "round {}/{} {:>8} {:>9} x{:<3} {:>9.0} acq/s  oracle {}",
                round + 1,
                config.rounds,
                cell.strategy,
                cell.mode.name(),
                cell.contenders,
                cell.acquisitions_per_second(),
                if cell.violations() == 0 { "ok".to_string() } else { format!("FAILED ({})", cell.violations()) }
            ));
        }
    }
    let fs = homes.fs().to_string();
    Report { config, fs, cells, notes }
}

fn run_round(config: &Config, cell: &mut Cell, target: Target<'_>) {
    let arena = SharedMap::<Arena>::new();
    let n = cell.contenders;
    let work = Work { critical: config.critical, hold: config.hold, outside: config.outside };
    let duration = config.cell_duration();
    let go = match cell.mode {
        Mode::Threads => std::thread::scope(|scope| {
            for index in 0..n {
                let arena = &*arena;
                scope.spawn(move || worker(arena, index, target, work));
            }
            drive(&arena, n, duration)
        }),
        Mode::Processes => {
            let cpu_before = sys::children_cpu_ns();
            let children: Vec<_> =
                (0..n).map(|index| sys::fork_child(|| worker(&arena, index, target, work))).collect();
            let go = drive(&arena, n, duration);
            for pid in children {
                if sys::reap(pid, true) != Some(0) {
                    cell.errors += 1;
                }
            }
            *cell.rusage_cpu_ns.get_or_insert(0) += sys::children_cpu_ns() - cpu_before;
            go
        }
    };

    let slots = &arena.slots[..n];
    let counts: Vec<u64> = slots.iter().map(|s| s.acquisitions.load(Ordering::Acquire)).collect();
    let end = slots.iter().map(|s| s.end_ns.load(Ordering::Acquire)).max().unwrap_or(go);
    cell.rounds += 1;
    cell.elapsed_ns += end.saturating_sub(go);
    cell.acquisitions += counts.iter().sum::<u64>();
    let jain = jain_index(&counts);
    if jain.is_finite() {
        cell.jain_sum += jain;
        cell.jain_rounds += 1;
    }
    cell.worker_min = cell.worker_min.min(counts.iter().copied().min().unwrap_or(0));
    cell.worker_max = cell.worker_max.max(counts.iter().copied().max().unwrap_or(0));
    for slot in slots {
        cell.wait.add(&slot.wait);
        cell.handoff.add(&slot.handoff);
        cell.handoff_all.add(&slot.handoff_all);
        cell.wait_max_ns = cell.wait_max_ns.max(slot.wait_max_ns.load(Ordering::Relaxed));
        cell.self_handoffs += slot.self_handoffs.load(Ordering::Relaxed);
        cell.cpu_ns += slot.cpu_ns.load(Ordering::Relaxed);
        cell.task_clock_ns = match slot.task_clock_read.load(Ordering::Relaxed) {
            1 => cell.task_clock_ns.map(|sum| sum + slot.task_clock_ns.load(Ordering::Relaxed)),
            _ => None,
        };
        cell.held_ns += slot.held_ns.load(Ordering::Relaxed);
        cell.release_ns += slot.release_ns.load(Ordering::Relaxed);
        cell.lost += slot.lost.load(Ordering::Relaxed);
        cell.errors += slot.errors.load(Ordering::Relaxed);
    }
    cell.overlaps += arena.overlaps.load(Ordering::SeqCst);
    cell.fence_regressions += arena.fence_regressions.load(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), 1.0);
        assert!((jain_index(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
        assert!(jain_index(&[0, 0]).is_nan());
    }

    #[test]
    fn durations_and_flags_parse() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("10 parsecs"), None);
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let c = Config::parse_args(args("--contenders 2,3 --duration=2s --quick --modes threads")).unwrap();
        assert_eq!((c.cell_duration(), c.rounds), (Duration::from_secs(2), 1));
        assert_eq!(c.contenders, vec![2, 3]);
        let auto = Config::parse_args(args("--budget 30s --rounds 1 --strategies flock --contenders 1,2")).unwrap();
        assert_eq!(auto.cell_duration(), Duration::from_secs(1));
        let auto = Config::parse_args(args("--budget 1s --rounds 2 --strategies flock --contenders 1,2")).unwrap();
        assert_eq!(auto.cell_duration(), Duration::from_millis(200));
        assert_eq!(c.modes, vec![Mode::Threads]);
        assert!(matches!(Config::parse_args(args("--strategies nosuch")), Err(ArgError::Bad(_))));
        assert!(matches!(Config::parse_args(args("--contenders 0")), Err(ArgError::Bad(_))));
        assert_eq!(c.redis_transport, Transport::Tcp, "TCP unless asked");
        let unix = Config::parse_args(args("--redis-transport unix")).unwrap();
        assert_eq!(unix.redis_transport, Transport::Unix);
        assert!(matches!(Config::parse_args(args("--redis-transport udp")), Err(ArgError::Bad(_))));
        assert_eq!(Config::parse_args(args("--help")).unwrap_err(), ArgError::Help);
        assert_eq!(Config::parse_args(args("--lock-mode 0666")).unwrap().lock_mode, Some(0o666));
        assert_eq!(c.lock_mode, None);
        for bad in ["0777", "0466", "rw", "0400"] {
            assert!(matches!(Config::parse_args(args(&format!("--lock-mode {bad}"))), Err(ArgError::Bad(_))), "{bad}");
        }
    }
}

//! The `redis` lock beside its peers, in one run: acquire + release pairs
//! per second of this library's lock (through lockcore's Rust API), of
//! redis-py's `Lock`, and of the floor, on one redis-server that the run
//! starts, every client reaching it by the same transport.
//!
//! ```text
//! bench/redis-setup        # once: redis-py, from PyPI, in target/redis-venv
//! cargo run --release -p bench --bin redis_peers -- [--duration 1s] [--rounds 3]
//!     [--clients 16] [--requests 20000] [--transport tcp|unix] [--python PATH]
//!     [--out target/redis-peers]
//! ```
//!
//! The clients, each cell `--duration` long (redis-benchmark: `--requests`
//! per test), every cell run once per round, round-robin, and the rounds
//! merged:
//! * `lockcore-try`: a [`Lock`] on a `redis://...?ttl=30s` spec,
//!   `try_acquire` + `release`, a failed try made again at once;
//! * `lockcore-wait`: the same with `acquire`, which waits in the lock's
//!   line on the server and is woken by the release before it;
//! * `set-nx-del`: the floor of a lock on a server, `SET key token NX PX
//!   30000` + `DEL key` on one bare connection (Rust, no fence, no queue,
//!   no owner check): two round trips, as each pair above takes;
//! * `redis-py`: `r.lock(name, timeout=30)`, `acquire(blocking=False)` +
//!   `release()`, a failed try made again at once, one Python process per
//!   client (`bench/redis_py_lock.py`, run with the Python of
//!   `bench/redis-setup`; without it these rows are skipped, and the output
//!   says why);
//! * `redis-benchmark-set` and `-get`: `redis-benchmark -t set -n N -c C`
//!   and `-t get`, the server's own pace for one round trip; a pair is two
//!   round trips, so their pairs/s is their requests/s halved.
//!
//! One client alone, on a lock of its own; then `--clients` clients each on
//! a lock of its own (uncontended throughput: threads and processes for
//! this library, processes for redis-py, connections for redis-benchmark);
//! then `--clients` clients on one lock (contended). Every client has a
//! handle and a connection of its own. Besides pairs per second: each
//! client's share, the failed tries per pair, the clients' own CPU per pair
//! (their threads' CPU clocks during the loop; redis-benchmark's whole
//! process) and the server's (`INFO cpu`). The table goes to stdout and to
//! `--out` (`results.md`, beside `results.csv`). The run fails (exit status 1) if two of
//! this library's clients were ever inside one lock at once, or if its lock
//! answered an error.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bench::pool::{Mode, MAX_WORKERS};
use bench::redis::{self, RedisServer, Transport};
use bench::report::parse_duration;
use bench::sys::{self, SharedMap, Zeroable};
use lockcore::{Lock, ReleaseOutcome};

/// The redis-py client's loop, run with `python -c`.
const PY_CLIENT: &str = include_str!("../../redis_py_lock.py");

/// What to measure.
#[derive(Clone, Debug)]
struct Config {
    duration: Duration,
    rounds: u32,
    clients: usize,
    requests: u64,
    transport: Transport,
    python: PathBuf,
    out: PathBuf,
}

impl Config {
    fn usage() -> String {
        format!(
            "\
redis_peers: pairs per second of this library's redis lock, redis-py's Lock and the floor, on one server

usage: cargo run --release -p bench --bin redis_peers -- [options]

  --duration D      length of each cell in each round (1s)
  --rounds N        cells run round-robin N times and are merged (3)
  --clients N       clients of the many-client cells (16)
  --requests N      requests of each redis-benchmark test in each round (20000)
  --transport T     tcp: loopback TCP, as a client on another host reaches its server (the
                    default); unix: the server's socket
  --python PATH     the Python that has redis-py ({}; bench/redis-setup makes it)
  --out PATH        where results.csv and results.md go (target/redis-peers)

Exits 1 if two of this library's clients held one lock at once or its lock answered an error,
2 on bad usage or without redis-server.",
            default_python().display()
        )
    }

    fn parse(args: impl Iterator<Item = String>) -> Result<Config, String> {
        let mut config = Config {
            duration: Duration::from_secs(1),
            rounds: 3,
            clients: 16,
            requests: 20_000,
            transport: Transport::Tcp,
            python: default_python(),
            out: PathBuf::from("target/redis-peers"),
        };
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value.to_string())),
                _ => (arg.clone(), None),
            };
            if flag == "--help" || flag == "-h" {
                return Err(String::new());
            }
            let value = inline.or_else(|| args.next()).ok_or(format!("{flag} needs a value"))?;
            let bad = |why: &str| format!("{flag} {value:?}: {why}");
            match flag.as_str() {
                "--duration" => config.duration = parse_duration(&value).ok_or_else(|| bad("not a duration"))?,
                "--rounds" => config.rounds = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad("1 or more"))?,
                "--clients" => {
                    config.clients = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_WORKERS).contains(n))
                        .ok_or_else(|| bad(&format!("from 1 to {MAX_WORKERS}")))?
                }
                "--requests" => {
                    config.requests = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad("1 or more"))?
                }
                "--transport" => config.transport = Transport::from_name(&value).ok_or_else(|| bad("tcp or unix"))?,
                "--python" => config.python = PathBuf::from(value),
                "--out" => config.out = PathBuf::from(value),
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Ok(config)
    }
}

/// Where bench/redis-setup makes its virtual environment.
fn default_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/redis-venv/bin/python")
}

/// The kinds of client, each a row's first column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    LockcoreTry,
    LockcoreWait,
    SetNxDel,
    RedisPy,
    BenchmarkSet,
    BenchmarkGet,
}

impl Client {
    /// The CSV's name.
    fn key(self) -> &'static str {
        match self {
            Client::LockcoreTry => "lockcore-try",
            Client::LockcoreWait => "lockcore-wait",
            Client::SetNxDel => "set-nx-del",
            Client::RedisPy => "redis-py",
            Client::BenchmarkSet => "redis-benchmark-set",
            Client::BenchmarkGet => "redis-benchmark-get",
        }
    }

    /// The table's.
    fn label(self) -> &'static str {
        match self {
            Client::LockcoreTry => "lockcore `redis`: `try_acquire` + `release`",
            Client::LockcoreWait => "lockcore `redis`: `acquire` + `release`",
            Client::SetNxDel => "floor: `SET NX PX` + `DEL`, bare (Rust)",
            Client::RedisPy => "redis-py `Lock`: `acquire(blocking=False)` + `release`",
            Client::BenchmarkSet => "redis-benchmark `SET` (requests ÷ 2)",
            Client::BenchmarkGet => "redis-benchmark `GET` (requests ÷ 2)",
        }
    }
}

/// Whose locks the clients of a cell take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Locks {
    /// Each client one of its own: uncontended throughput.
    Own,
    /// All clients one: contended.
    One,
    /// No lock (redis-benchmark).
    None,
}

impl Locks {
    fn name(self) -> &'static str {
        match self {
            Locks::Own => "own",
            Locks::One => "one",
            Locks::None => "–",
        }
    }
}

/// One cell's figures.
#[derive(Clone, Debug)]
struct Row {
    client: Client,
    /// threads, processes or connections.
    by: &'static str,
    clients: usize,
    locks: Locks,
    seconds: f64,
    pairs: u64,
    /// redis-benchmark's requests (`pairs` is half of them).
    requests: Option<u64>,
    /// Smallest and largest count of one client.
    per_client: Option<(u64, u64)>,
    failed_tries: Option<u64>,
    client_cpu_ns: Option<u64>,
    server_cpu_ns: Option<u64>,
    overlaps: u64,
    errors: u64,
}

impl Row {
    fn pairs_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.pairs as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn requests_per_s(&self) -> Option<f64> {
        self.requests.filter(|_| self.seconds > 0.0).map(|n| n as f64 / self.seconds)
    }

    /// Adds the figures of another round of the same cell.
    fn merge(&mut self, round: Row) {
        let add = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a + b);
        self.seconds += round.seconds;
        self.pairs += round.pairs;
        self.requests = add(self.requests, round.requests);
        self.per_client = self.per_client.zip(round.per_client).map(|((lo, hi), (l, h))| (lo.min(l), hi.max(h)));
        self.failed_tries = add(self.failed_tries, round.failed_tries);
        self.client_cpu_ns = add(self.client_cpu_ns, round.client_cpu_ns);
        self.server_cpu_ns = add(self.server_cpu_ns, round.server_cpu_ns);
        self.overlaps += round.overlaps;
        self.errors += round.errors;
    }

    fn per_pair_us(&self, ns: Option<u64>) -> Option<f64> {
        ns.filter(|_| self.pairs > 0).map(|ns| ns as f64 / 1e3 / self.pairs as f64)
    }

    fn failed_per_pair(&self) -> Option<f64> {
        self.failed_tries.filter(|_| self.pairs > 0).map(|n| n as f64 / self.pairs as f64)
    }
}

fn fixed(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".into(),
    }
}

fn csv_num(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => String::new(),
    }
}

/// The CSV's columns, in order. CPU figures are microseconds per pair.
const CSV_COLUMNS: &[&str] = &[
    "client",
    "by",
    "clients",
    "locks",
    "transport",
    "seconds",
    "pairs",
    "pairs_per_s",
    "requests_per_s",
    "client_min",
    "client_max",
    "failed_tries",
    "client_cpu_us_per_pair",
    "server_cpu_us_per_pair",
    "overlaps",
    "errors",
];

/// A finished run.
struct Report {
    caption: String,
    notes: Vec<String>,
    transport: Transport,
    rows: Vec<Row>,
}

impl Report {
    fn find(&self, client: Client, by: &str, clients: usize, locks: Locks) -> Option<&Row> {
        self.rows.iter().find(|r| r.client == client && r.by == by && r.clients == clients && r.locks == locks)
    }

    /// This library's pairs per second over redis-py's, where both ran.
    fn ratios(&self, many: usize) -> Vec<String> {
        let cells = [
            ("one client", Client::LockcoreTry, "threads", 1, Locks::Own, "the target: at least 5x"),
            ("clients on locks of their own, processes", Client::LockcoreTry, "processes", many, Locks::Own, ""),
            (
                "clients on one lock, processes, each failed try made again",
                Client::LockcoreTry,
                "processes",
                many,
                Locks::One,
                "",
            ),
        ];
        let mut lines = Vec::new();
        for (what, ours, by, clients, locks, target) in cells {
            let (Some(ours), Some(theirs)) =
                (self.find(ours, by, clients, locks), self.find(Client::RedisPy, "processes", clients, locks))
            else {
                continue;
            };
            let ratio = ours.pairs_per_s() / theirs.pairs_per_s();
            let target = if target.is_empty() { String::new() } else { format!(" ({target})") };
            let clients = if clients == 1 { String::new() } else { format!("{clients} ") };
            lines.push(format!(
                "lockcore / redis-py, {clients}{what}: {:.0} / {:.0} pairs/s = **{}x**{target}",
                ours.pairs_per_s(),
                theirs.pairs_per_s(),
                fixed(Some(ratio), 1)
            ));
        }
        // What any lock of two round trips could reach against redis-py here.
        let floor = self.find(Client::SetNxDel, "threads", 1, Locks::Own);
        if let (Some(floor), Some(theirs)) = (floor, self.find(Client::RedisPy, "processes", 1, Locks::Own)) {
            lines.push(format!(
                "floor / redis-py, one client: {:.0} / {:.0} pairs/s = {}x, the most a lock of two round trips reaches",
                floor.pairs_per_s(),
                theirs.pairs_per_s(),
                fixed(Some(floor.pairs_per_s() / theirs.pairs_per_s()), 1)
            ));
        }
        lines
    }

    fn markdown(&self, many: usize) -> String {
        let mut s = format!("{}\n\n", self.caption);
        for note in &self.notes {
            s.push_str(&format!("{note}\n\n"));
        }
        s.push_str(
            "| client | by | n | locks | pairs/s | per client min–max | failed tries / pair | client CPU µs / pair | server CPU µs / pair |\n",
        );
        s.push_str("|---|---|--:|---|--:|--:|--:|--:|--:|\n");
        for r in &self.rows {
            let per_client = r.per_client.map_or("–".into(), |(lo, hi)| format!("{lo}–{hi}"));
            let errors = match (r.overlaps, r.errors) {
                (0, 0) => String::new(),
                (o, e) => format!(" (**{o} overlaps, {e} errors**)"),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.0}{errors} | {per_client} | {} | {} | {} |\n",
                r.client.label(),
                r.by,
                r.clients,
                r.locks.name(),
                r.pairs_per_s(),
                fixed(r.failed_per_pair(), 2),
                fixed(r.per_pair_us(r.client_cpu_ns), 1),
                fixed(r.per_pair_us(r.server_cpu_ns), 1),
            ));
        }
        let ratios = self.ratios(many);
        if !ratios.is_empty() {
            s.push('\n');
            for line in ratios {
                s.push_str(&format!("{line}\n"));
            }
        }
        s
    }

    fn csv(&self) -> String {
        let mut s = CSV_COLUMNS.join(",");
        s.push('\n');
        for r in &self.rows {
            let row = [
                r.client.key().to_string(),
                r.by.to_string(),
                r.clients.to_string(),
                r.locks.name().replace('–', ""),
                self.transport.name().to_string(),
                csv_num(Some(r.seconds)),
                r.pairs.to_string(),
                csv_num(Some(r.pairs_per_s())),
                csv_num(r.requests_per_s()),
                r.per_client.map_or(String::new(), |(lo, _)| lo.to_string()),
                r.per_client.map_or(String::new(), |(_, hi)| hi.to_string()),
                r.failed_tries.map_or(String::new(), |n| n.to_string()),
                csv_num(r.per_pair_us(r.client_cpu_ns)),
                csv_num(r.per_pair_us(r.server_cpu_ns)),
                r.overlaps.to_string(),
                r.errors.to_string(),
            ];
            debug_assert_eq!(row.len(), CSV_COLUMNS.len());
            s.push_str(&row.join(","));
            s.push('\n');
        }
        s
    }
}

/// One client's slot in shared memory.
#[repr(C)]
struct Slot {
    pairs: AtomicU64,
    failed: AtomicU64,
    errors: AtomicU64,
    cpu_ns: AtomicU64,
    end_ns: AtomicU64,
}

/// What a cell's Rust clients share: the gates, the overlap oracle of a
/// shared lock, and a slot each.
#[repr(C)]
struct Arena {
    ready: AtomicU32,
    go: AtomicU32,
    stop: AtomicU32,
    inside: AtomicU32,
    overlaps: AtomicU64,
    slots: [Slot; MAX_WORKERS],
}

// SAFETY: atomics only.
unsafe impl Zeroable for Slot {}
// SAFETY: atomics and an array of zero-valid slots only.
unsafe impl Zeroable for Arena {}

/// What one pair came to.
enum Outcome {
    Pair,
    Busy,
    Error,
}

/// A Rust client's pair, made in the thread or process that runs it.
type Pair<'a> = Box<dyn FnMut() -> Outcome + 'a>;

fn released(outcome: Result<ReleaseOutcome, lockcore::Error>) -> Outcome {
    match outcome {
        Ok(ReleaseOutcome::Released) => Outcome::Pair,
        _ => Outcome::Error,
    }
}

/// The pair of `client` on the lock `name`; with `shared`, the lock is
/// every client's, and the oracle counts the clients inside it.
fn make_pair<'a>(
    client: Client,
    server: &RedisServer,
    name: &str,
    shared: bool,
    arena: &'a Arena,
) -> Result<Pair<'a>, String> {
    let spec = server.spec(name, redis::QUERY);
    let open = || Lock::open(spec.as_bytes()).map_err(|e| format!("{spec}: {e}"));
    let inside = move || {
        if shared {
            let overlap = arena.inside.fetch_add(1, Ordering::SeqCst) != 0;
            arena.overlaps.fetch_add(u64::from(overlap), Ordering::SeqCst);
            arena.inside.fetch_sub(1, Ordering::SeqCst);
        }
    };
    Ok(match client {
        Client::LockcoreTry => {
            let mut lock = open()?;
            Box::new(move || match lock.try_acquire() {
                Ok(_) => {
                    inside();
                    released(lock.release(Duration::ZERO))
                }
                Err(lockcore::Error::Busy(_)) => Outcome::Busy,
                Err(_) => Outcome::Error,
            })
        }
        Client::LockcoreWait => {
            let mut lock = open()?;
            Box::new(move || match lock.acquire(Some(Duration::from_secs(30))) {
                Ok(_) => {
                    inside();
                    released(lock.release(Duration::ZERO))
                }
                Err(_) => Outcome::Error,
            })
        }
        Client::SetNxDel => {
            let connection = server.connect().map_err(|e| format!("connect to {}: {e}", server.address()))?;
            let mut cycle = redis::set_nx_del_cycle(connection, name);
            Box::new(move || if cycle() { Outcome::Pair } else { Outcome::Error })
        }
        other => return Err(format!("{other:?} is no Rust client")),
    })
}

/// One Rust client: its pair made and made once (the connection opened,
/// the scripts loaded), then pairs from the start gate to the stop.
fn rust_client(arena: &Arena, index: usize, client: Client, server: &RedisServer, name: &str, shared: bool) {
    let slot = &arena.slots[index];
    let pair = make_pair(client, server, name, shared, arena);
    let mut pair = match pair {
        Ok(mut pair) => {
            let _ = pair();
            pair
        }
        Err(why) => {
            eprintln!("redis_peers: {why}");
            slot.errors.fetch_add(1, Ordering::Relaxed);
            sys::bump_and_wake(&arena.ready);
            return;
        }
    };
    sys::bump_and_wake(&arena.ready);
    sys::wait_while_equal(&arena.go, 0);
    let cpu = sys::thread_cpu_ns();
    let (mut pairs, mut failed, mut errors) = (0u64, 0u64, 0u64);
    while arena.stop.load(Ordering::Relaxed) == 0 {
        match pair() {
            Outcome::Pair => pairs += 1,
            Outcome::Busy => failed += 1,
            Outcome::Error => {
                errors += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    slot.cpu_ns.store(sys::thread_cpu_ns() - cpu, Ordering::Relaxed);
    slot.pairs.store(pairs, Ordering::Relaxed);
    slot.failed.store(failed, Ordering::Relaxed);
    slot.errors.fetch_add(errors, Ordering::Relaxed);
    slot.end_ns.store(sys::mono_ns(), Ordering::Release);
}

/// Runs `clients` Rust clients of `client` as `mode` for the cell's time.
fn run_rust(
    config: &Config,
    server: &RedisServer,
    (client, mode, clients, locks): (Client, Mode, usize, Locks),
    round: u32,
) -> Row {
    let arena = SharedMap::<Arena>::new();
    let label = format!("{}-{}-{clients}-{}-r{round}", client.key(), mode.name(), locks.name());
    let names: Vec<String> = (0..clients)
        .map(|index| if locks == Locks::One { label.clone() } else { format!("{label}-{index}") })
        .collect();
    let mut server_cpu = (0, 0);
    let mut drive = || {
        let give_up = sys::mono_ns() + 60_000_000_000;
        loop {
            let ready = arena.ready.load(Ordering::Acquire);
            if ready as usize >= clients || sys::mono_ns() > give_up {
                break;
            }
            sys::futex_wait(&arena.ready, ready, Some(Duration::from_millis(100)));
        }
        server_cpu.0 = server.cpu_ns().unwrap_or(0);
        let go = sys::mono_ns();
        arena.go.store(1, Ordering::Release);
        sys::futex_wake_all(&arena.go);
        std::thread::sleep(config.duration);
        arena.stop.store(1, Ordering::Release);
        go
    };
    let mut errors = 0;
    let go = match mode {
        Mode::Threads => std::thread::scope(|scope| {
            for (index, name) in names.iter().enumerate() {
                let arena = &*arena;
                scope.spawn(move || rust_client(arena, index, client, server, name, locks == Locks::One));
            }
            drive()
        }),
        Mode::Processes => {
            let children: Vec<_> = names
                .iter()
                .enumerate()
                .map(|(index, name)| {
                    sys::fork_child(|| rust_client(&arena, index, client, server, name, locks == Locks::One))
                })
                .collect();
            let go = drive();
            for pid in children {
                if sys::reap(pid, true) != Some(0) {
                    errors += 1;
                }
            }
            go
        }
    };
    server_cpu.1 = server.cpu_ns().unwrap_or(0);
    let slots = &arena.slots[..clients];
    let counts: Vec<u64> = slots.iter().map(|s| s.pairs.load(Ordering::Acquire)).collect();
    let end = slots.iter().map(|s| s.end_ns.load(Ordering::Acquire)).max().unwrap_or(go);
    Row {
        client,
        by: mode.name(),
        clients,
        locks,
        seconds: end.saturating_sub(go) as f64 / 1e9,
        pairs: counts.iter().sum(),
        requests: None,
        per_client: Some((counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0))),
        failed_tries: Some(slots.iter().map(|s| s.failed.load(Ordering::Relaxed)).sum()),
        client_cpu_ns: Some(slots.iter().map(|s| s.cpu_ns.load(Ordering::Relaxed)).sum()),
        server_cpu_ns: Some(server_cpu.1.saturating_sub(server_cpu.0)),
        overlaps: arena.overlaps.load(Ordering::SeqCst),
        errors: errors + slots.iter().map(|s| s.errors.load(Ordering::Relaxed)).sum::<u64>(),
    }
}

/// redis-py's version and its Python's, or why it cannot be run.
fn redis_py(python: &Path) -> Result<String, String> {
    if !python.exists() {
        return Err(format!(
            "no {}: bench/redis-setup makes that virtual environment and pip-installs the PyPI package redis into it",
            python.display()
        ));
    }
    let probe = Command::new(python)
        .args(["-c", "import redis, sys; print(redis.__version__, sys.version.split()[0])"])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let said = String::from_utf8_lossy(&probe.stdout);
    match said.split_whitespace().collect::<Vec<_>>()[..] {
        [redis, python] if probe.status.success() => Ok(format!("redis-py {redis} (Python {python})")),
        _ => {
            let why = String::from_utf8_lossy(&probe.stderr);
            Err(format!(
                "{} cannot import redis ({}); bench/redis-setup installs it",
                python.display(),
                why.trim().lines().last().unwrap_or("no reason given")
            ))
        }
    }
}

/// Runs `clients` redis-py processes for the cell's time.
fn run_python(config: &Config, server: &RedisServer, clients: usize, locks: Locks, round: u32) -> Result<Row, String> {
    let label = format!("{}-processes-{clients}-{}-r{round}", Client::RedisPy.key(), locks.name());
    let target: Vec<String> = match server.transport() {
        Transport::Tcp => vec!["--port".into(), server.port().to_string()],
        Transport::Unix => vec!["--socket".into(), server.socket().display().to_string()],
    };
    let mut workers = Vec::new();
    for index in 0..clients {
        let name = if locks == Locks::One { label.clone() } else { format!("{label}-{index}") };
        let child = Command::new(&config.python)
            .args(["-c", PY_CLIENT])
            .args(&target)
            .args(["--name", &name, "--seconds", &config.duration.as_secs_f64().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", config.python.display()))?;
        workers.push(child);
    }
    // Every process has imported redis-py and made its first pair before
    // any starts: a slow start on a loaded machine must not shorten its run.
    let mut outs = Vec::new();
    let mut failed = None;
    for child in workers.iter_mut() {
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        if out.read_line(&mut line).is_err() || line != "ready\n" {
            failed.get_or_insert_with(|| format!("a redis-py client did not start: {line:?}"));
        }
        outs.push(out);
    }
    let cpu_before = server.cpu_ns().unwrap_or(0);
    for child in workers.iter_mut() {
        let mut stdin = child.stdin.take().expect("piped");
        let _ = stdin.write_all(if failed.is_some() { b"" } else { b"go\n" });
    }
    let mut tallies = Vec::new();
    for (mut child, mut out) in workers.into_iter().zip(outs) {
        let mut said = String::new();
        let _ = out.read_to_string(&mut said);
        let mut why = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut why);
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let tally = said.lines().find_map(|line| {
            let fields: Vec<f64> = line.strip_prefix("tally ")?.split(' ').filter_map(|f| f.parse().ok()).collect();
            (fields.len() == 4).then(|| (fields[0] as u64, fields[1] as u64, fields[2], fields[3]))
        });
        match tally {
            Some(tally) if status.success() => tallies.push(tally),
            _ => {
                failed.get_or_insert_with(|| {
                    format!("a redis-py client failed ({status}): {}", why.trim().lines().last().unwrap_or(""))
                });
            }
        }
    }
    let cpu_after = server.cpu_ns().unwrap_or(0);
    if let Some(why) = failed {
        return Err(why);
    }
    let counts: Vec<u64> = tallies.iter().map(|t| t.0).collect();
    Ok(Row {
        client: Client::RedisPy,
        by: "processes",
        clients,
        locks,
        // Each process timed its own loop; they ran side by side.
        seconds: tallies.iter().map(|t| t.3).sum::<f64>() / tallies.len() as f64,
        pairs: counts.iter().sum(),
        requests: None,
        per_client: Some((counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0))),
        failed_tries: Some(tallies.iter().map(|t| t.1).sum()),
        client_cpu_ns: Some((tallies.iter().map(|t| t.2).sum::<f64>() * 1e9) as u64),
        server_cpu_ns: Some(cpu_after.saturating_sub(cpu_before)),
        overlaps: 0,
        errors: 0,
    })
}

/// redis-benchmark's version, or why it cannot be run.
fn redis_benchmark() -> Result<String, String> {
    let out = Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .map_err(|e| format!("redis-benchmark: {e} (Debian: apt-get install redis-tools)"))?;
    let said = String::from_utf8_lossy(&out.stdout);
    Ok(said.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
}

/// `redis-benchmark -t test -n requests -c clients` against the server.
fn run_benchmark(config: &Config, server: &RedisServer, client: Client, clients: usize) -> Result<Row, String> {
    let test = match client {
        Client::BenchmarkSet => "set",
        _ => "get",
    };
    let (cpu_before, children_before) = (server.cpu_ns().unwrap_or(0), sys::children_cpu_ns());
    let out = Command::new("redis-benchmark")
        .args(server.benchmark_target())
        .args(["-t", test, "-n", &config.requests.to_string(), "-c", &clients.to_string(), "--csv"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let (cpu_after, children_after) = (server.cpu_ns().unwrap_or(0), sys::children_cpu_ns());
    let said = String::from_utf8_lossy(&out.stdout);
    let name = format!("\"{}\"", test.to_uppercase());
    let rps = said
        .lines()
        .find_map(|line| {
            let mut fields = line.split(',');
            (fields.next()? == name).then_some(())?;
            fields.next()?.trim_matches('"').parse::<f64>().ok()
        })
        .filter(|_| out.status.success())
        .ok_or_else(|| format!("redis-benchmark -t {test} said: {said}{}", String::from_utf8_lossy(&out.stderr)))?;
    Ok(Row {
        client,
        by: "connections",
        clients,
        locks: Locks::None,
        seconds: config.requests as f64 / rps,
        pairs: config.requests / 2,
        requests: Some(config.requests),
        per_client: None,
        failed_tries: None,
        client_cpu_ns: Some(children_after.saturating_sub(children_before)),
        server_cpu_ns: Some(cpu_after.saturating_sub(cpu_before)),
        overlaps: 0,
        errors: 0,
    })
}

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(why) if why.is_empty() => {
            println!("{}", Config::usage());
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("redis_peers: {why}\n\n{}", Config::usage());
            return ExitCode::from(2);
        }
    };
    let server = match RedisServer::start(config.transport) {
        Ok(server) => server,
        Err(why) => {
            eprintln!("redis_peers: skipped: {why}");
            return ExitCode::from(2);
        }
    };
    let many = config.clients;
    let mut notes = Vec::new();
    let python = redis_py(&config.python);
    let benchmark = redis_benchmark();
    let mut peers = Vec::new();
    match &python {
        Ok(version) => peers.push(version.clone()),
        Err(why) => notes.push(format!("redis-py skipped: {why}")),
    }
    match &benchmark {
        Ok(version) => peers.push(version.clone()),
        Err(why) => notes.push(format!("redis-benchmark skipped: {why}")),
    }
    let caption = format!(
        "{}, {} per cell x {} round(s), {} requests per redis-benchmark test and round, {}, {} CPUs; \
         locks with ttl=30s (redis-py: timeout=30)",
        server.describe(),
        bench::report::output::human_duration(config.duration),
        config.rounds,
        config.requests,
        peers.join(", "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    eprintln!("redis_peers: {caption}");
    for note in &notes {
        eprintln!("redis_peers: {note}");
    }
    notes.push(
        "locks: `own`, each client a lock of its own (uncontended throughput); `one`, all of them on one lock \
         (contended). Every client has its own handle and connection. A failed try is made again at once; \
         `acquire` waits in the lock's line on the server, woken by the release before it."
            .to_string(),
    );

    // Cells in order: one client, then many on locks of their own, then many on one lock.
    #[derive(Clone, Copy)]
    enum Cell {
        Rust(Client, Mode, usize, Locks),
        Python(usize, Locks),
        Benchmark(Client, usize),
    }
    let mut cells = Vec::new();
    for (clients, locks) in [(1, Locks::Own), (many, Locks::Own)] {
        let modes: &[Mode] = if clients == 1 { &[Mode::Threads] } else { &Mode::ALL };
        for &mode in modes {
            cells.push(Cell::Rust(Client::LockcoreTry, mode, clients, locks));
        }
        cells.push(Cell::Rust(Client::SetNxDel, Mode::Threads, clients, locks));
        cells.push(Cell::Python(clients, locks));
        cells.push(Cell::Benchmark(Client::BenchmarkSet, clients));
        cells.push(Cell::Benchmark(Client::BenchmarkGet, clients));
    }
    for mode in Mode::ALL {
        cells.push(Cell::Rust(Client::LockcoreWait, mode, many, Locks::One));
    }
    cells.push(Cell::Rust(Client::LockcoreTry, Mode::Processes, many, Locks::One));
    cells.push(Cell::Python(many, Locks::One));

    // Round-robin, so that a burst of other work on the machine is spread
    // over every cell instead of spoiling one. A cell that fails is named
    // and left out of the table.
    let mut merged: Vec<Option<Row>> = cells.iter().map(|_| None).collect();
    let mut failed = vec![false; cells.len()];
    for round in 0..config.rounds {
        for (index, &cell) in cells.iter().enumerate() {
            if failed[index] {
                continue;
            }
            let row = match cell {
                Cell::Rust(client, mode, clients, locks) => {
                    Ok(run_rust(&config, &server, (client, mode, clients, locks), round))
                }
                Cell::Python(clients, locks) if python.is_ok() => run_python(&config, &server, clients, locks, round),
                Cell::Benchmark(client, clients) if benchmark.is_ok() => {
                    run_benchmark(&config, &server, client, clients)
                }
                Cell::Python(..) | Cell::Benchmark(..) => continue,
            };
            match row {
                Ok(row) => {
                    eprintln!(
                        "round {}/{} {:>20} {:>11} x{:<3} {:>4} lock(s) {:>9.0} pairs/s",
                        round + 1,
                        config.rounds,
                        row.client.key(),
                        row.by,
                        row.clients,
                        row.locks.name(),
                        row.pairs_per_s()
                    );
                    match &mut merged[index] {
                        Some(earlier) => earlier.merge(row),
                        slot => *slot = Some(row),
                    }
                }
                Err(why) => {
                    eprintln!("redis_peers: a cell was left out: {why}");
                    notes.push(format!("A cell was left out: {why}"));
                    failed[index] = true;
                    merged[index] = None;
                }
            }
        }
    }
    let rows = merged.into_iter().flatten().collect();

    let report = Report { caption, notes, transport: config.transport, rows };
    let markdown = report.markdown(many);
    println!("{markdown}");
    let written = std::fs::create_dir_all(&config.out)
        .and_then(|()| std::fs::write(config.out.join("results.csv"), report.csv()))
        .and_then(|()| std::fs::write(config.out.join("results.md"), &markdown));
    match written {
        Ok(()) => eprintln!("wrote {}/results.csv and results.md", config.out.display()),
        Err(e) => {
            eprintln!("redis_peers: writing {}: {e}", config.out.display());
            return ExitCode::from(3);
        }
    }
    let ours = |r: &&Row| matches!(r.client, Client::LockcoreTry | Client::LockcoreWait | Client::SetNxDel);
    let (overlaps, errors): (u64, u64) =
        report.rows.iter().filter(ours).fold((0, 0), |(o, e), r| (o + r.overlaps, e + r.errors));
    if overlaps + errors > 0 {
        eprintln!("redis_peers: FAILED: {overlaps} overlap(s), {errors} error(s) of this library's clients");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

//! Foreign peers' share of one `lockfile:` lock: processes of this library
//! and Perl LockFile::Simple processes loop on the same lock at once, and
//! the report says how the acquisitions were shared, for each `window=`
//! the library's waiters were given.
//!
//! ```text
//! cargo run --release -p bench --bin peers -- [--duration 5s] [--library 2]
//!     [--perl 2] [--perl-delay 2ms] [--hold 50us] [--windows 0,20ms] [--dir /tmp]
//! ```
//!
//! The library's waiters queue in the lock's turnstile and are woken by
//! events; LockFile::Simple knows nothing of them and polls, sleeping
//! `-delay` between tries (sub-second here, with `Time::HiRes::sleep` in
//! place of `sleep`). A poller finds the lock free only between a release
//! and the next holder's take, which the turnstile makes a matter of
//! microseconds: `window=` leaves the lock to such peers for that long after
//! every turn.
//!
//! Every participant, in either language, increments a counter file inside
//! the critical section and holds an `O_EXCL` marker file while it does: the
//! run fails (exit status 1) if a marker was found taken (two inside at
//! once) or if the counter is not exactly the sum of the acquisitions each
//! participant counted. As root, every participant runs as `nobody`, in a
//! directory of `nobody`'s: LockFile::Simple relies on the permission check
//! of `open(">lock")` on a read-only lock file, which root bypasses (it
//! would truncate a lock file it did not make), and a lock kept to one user
//! is the one whose waiters queue in a turnstile (a lock other users may
//! write has none).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use bench::report::parse_duration;
use lockcore::Lock;

/// A duration as the table shows it: µs below a millisecond, ms below a
/// second.
fn human_duration(d: Duration) -> String {
    match d.as_micros() {
        0 => "0".into(),
        us if us < 1_000 => format!("{us}µs"),
        us if us < 1_000_000 => format!("{}ms", us as f64 / 1e3),
        us => format!("{}s", us as f64 / 1e6),
    }
}

/// What to measure.
#[derive(Clone, Debug)]
struct Config {
    duration: Duration,
    library: u32,
    perl: u32,
    perl_delay: Duration,
    hold: Duration,
    windows: Vec<Duration>,
    dir: PathBuf,
}

impl Config {
    fn usage() -> &'static str {
        "usage: peers [--duration 5s] [--library 2] [--perl 2] [--perl-delay 2ms] [--hold 50us] \
         [--windows 0,20ms] [--dir /tmp]\n\
         Library and Perl LockFile::Simple processes loop on one lockfile: lock for --duration, \
         once per window; a markdown table of their shares goes to stdout."
    }

    fn parse(args: impl Iterator<Item = String>) -> Result<Config, String> {
        let mut config = Config {
            duration: Duration::from_secs(5),
            library: 2,
            perl: 2,
            perl_delay: Duration::from_millis(2),
            hold: Duration::from_micros(50),
            windows: vec![Duration::ZERO, Duration::from_millis(20)],
            dir: std::env::temp_dir(),
        };
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = || inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs a value"));
            let duration = |text: String| parse_duration(&text).ok_or(format!("{flag}: not a duration: {text}"));
            let count = |text: String| text.parse::<u32>().map_err(|_| format!("{flag}: not a count: {text}"));
            match flag.as_str() {
                "--duration" => config.duration = duration(value()?)?,
                "--library" => config.library = count(value()?)?,
                "--perl" => config.perl = count(value()?)?,
                "--perl-delay" => config.perl_delay = duration(value()?)?,
                "--hold" => config.hold = duration(value()?)?,
                "--windows" => {
                    // A window may be zero: none at all.
                    let window = |w: &str| match w.trim() {
                        "0" => Ok(Duration::ZERO),
                        w => duration(w.to_string()),
                    };
                    config.windows = value()?.split(',').map(window).collect::<Result<_, _>>()?;
                    // The spec's `window` counts in whole milliseconds here.
                    if config.windows.iter().any(|w| w.subsec_nanos() % 1_000_000 != 0) {
                        return Err("--windows: whole milliseconds only".into());
                    }
                }
                "--dir" => config.dir = PathBuf::from(value()?),
                "--help" | "-h" => return Err(String::new()),
                other => return Err(format!("unknown argument {other}")),
            }
        }
        if config.library + config.perl < 2 {
            return Err("at least two participants are needed".into());
        }
        Ok(config)
    }
}

/// What one participant reported when it stopped.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    acquisitions: u64,
    overlaps: u64,
}

impl Tally {
    fn parse(text: &str) -> Option<Tally> {
        let line = text.lines().find(|l| l.starts_with("tally "))?;
        let mut words = line.split_whitespace().skip(1);
        let acquisitions = words.next()?.parse().ok()?;
        let overlaps = words.next()?.parse().ok()?;
        Some(Tally { acquisitions, overlaps })
    }
}

/// One window's run.
struct Cell {
    window: Duration,
    seconds: f64,
    library: Vec<Tally>,
    perl: Vec<Tally>,
    counter: u64,
}

impl Cell {
    fn total(tallies: &[Tally]) -> u64 {
        tallies.iter().map(|t| t.acquisitions).sum()
    }

    fn overlaps(&self) -> u64 {
        self.library.iter().chain(&self.perl).map(|t| t.overlaps).sum()
    }

    fn exact(&self) -> bool {
        self.counter == Cell::total(&self.library) + Cell::total(&self.perl)
    }

    fn row(&self) -> String {
        let (ours, theirs) = (Cell::total(&self.library), Cell::total(&self.perl));
        let share = if ours + theirs == 0 { 0.0 } else { 100.0 * theirs as f64 / (ours + theirs) as f64 };
        let each =
            |tallies: &[Tally]| tallies.iter().map(|t| t.acquisitions.to_string()).collect::<Vec<_>>().join(" / ");
        format!(
            "| {} | {:.0} | {} | {:.1} | {} | {:.1}% | {} | {} |",
            human_duration(self.window),
            ours as f64 / self.seconds,
            each(&self.library),
            theirs as f64 / self.seconds,
            each(&self.perl),
            share,
            self.overlaps(),
            if self.exact() { format!("{} (exact)", self.counter) } else { format!("{} (LOST UPDATES)", self.counter) },
        )
    }
}

/// Makes LockFile::Simple's `sleep` sub-second, then loops: lock, the
/// critical section, unlock, until the stop file appears.
const PERL_WORKER: &str = r#"
BEGIN { require Time::HiRes; no warnings; *CORE::GLOBAL::sleep = \&Time::HiRes::sleep; }
use strict; use warnings; use LockFile::Simple; use Fcntl;
my ($data, $marker, $go, $stop, $delay, $hold) = @ARGV;
# Tries for about a second per lock() call, so that the stop file is seen.
my $m = LockFile::Simple->make(-delay => $delay, -max => int(1 / $delay) + 1, -hold => 0, -stale => 0, -warn => 0);
$| = 1;
print "ready\n";
Time::HiRes::sleep(0.001) until -e $go;
my ($count, $overlaps) = (0, 0);
until (-e $stop) {
    next unless $m->lock($data);
    my $mine = sysopen(my $mk, $marker, O_CREAT | O_EXCL | O_WRONLY);
    if ($mine) { close $mk } else { $overlaps++ }
    open(my $in, '<', $data) or die "$data: $!\n"; my $v = <$in>; close $in;
    open(my $out, '>', $data) or die "$data: $!\n"; print $out ($v + 1), "\n"; close $out;
    Time::HiRes::sleep($hold) if $hold > 0;
    unlink $marker if $mine;
    $m->unlock($data) or die "unlock failed\n";
    $count++;
}
print "tally $count $overlaps\n";
"#;

/// The files of one run.
struct Files {
    dir: PathBuf,
    data: PathBuf,
    marker: PathBuf,
    go: PathBuf,
    stop: PathBuf,
}

impl Files {
    fn new(parent: &Path, label: &str) -> std::io::Result<Files> {
        let dir = parent.join(format!("lockbench-peers-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let data = dir.join("counter");
        std::fs::write(&data, "0\n")?;
        if as_root() {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY))?;
            std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY))?;
        }
        Ok(Files { marker: dir.join("inside"), go: dir.join("go"), stop: dir.join("stop"), data, dir })
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The user and group every participant runs as when the report is run
/// as root.
const NOBODY: u32 = 65534;

/// Runs `command` as [`NOBODY`] when the report runs as root.
fn as_participant(command: &mut Command) -> &mut Command {
    if as_root() {
        use std::os::unix::process::CommandExt;
        command.uid(NOBODY).gid(NOBODY);
    }
    command
}

fn as_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The spec the library's processes use for `window`.
fn spec(data: &Path, window: Duration) -> String {
    format!("lockfile:{}?window={}ms", data.display(), window.as_millis())
}

fn run_cell(config: &Config, window: Duration) -> Result<Cell, String> {
    let files = Files::new(&config.dir, &format!("{}us", window.as_micros())).map_err(|e| format!("set-up: {e}"))?;
    let path = |p: &Path| p.to_str().map(str::to_owned).ok_or("a path that is no UTF-8");
    let (data, marker, go, stop) = (path(&files.data)?, path(&files.marker)?, path(&files.go)?, path(&files.stop)?);
    let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut library = Vec::new();
    for _ in 0..config.library {
        let child = as_participant(&mut Command::new(&me))
            .args(["--library-worker", &spec(&files.data, window), &data, &marker, &go, &stop])
            .arg(config.hold.as_micros().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting a library worker: {e}"))?;
        library.push(child);
    }
    let mut perl = Vec::new();
    for _ in 0..config.perl {
        let mut command = Command::new("perl");
        as_participant(&mut command).args(["-e", PERL_WORKER, &data, &marker, &go, &stop]);
        command.args([config.perl_delay.as_secs_f64().to_string(), config.hold.as_secs_f64().to_string()]);
        perl.push(command.stdout(Stdio::piped()).spawn().map_err(|e| format!("starting perl: {e}"))?);
    }
    // Every worker started and ready before any begins: a slow start (a
    // loaded machine, Perl loading its modules) must not shorten its share.
    let mut library: Vec<Worker> = library.into_iter().map(Worker::new).collect();
    let mut perl: Vec<Worker> = perl.into_iter().map(Worker::new).collect();
    let ready = library.iter_mut().chain(perl.iter_mut()).all(Worker::ready);
    std::fs::write(&files.go, "").map_err(|e| format!("go: {e}"))?;
    if !ready {
        std::fs::write(&files.stop, "").map_err(|e| format!("stop: {e}"))?;
    }
    let start = Instant::now();
    std::thread::sleep(config.duration);
    std::fs::write(&files.stop, "").map_err(|e| format!("stop: {e}"))?;
    let collect = |workers: Vec<Worker>, who: &str| -> Result<Vec<Tally>, String> {
        workers.into_iter().map(|worker| worker.finish().map_err(|why| format!("a {who} worker {why}"))).collect()
    };
    // Both collected before either's error is answered: no worker is left
    // behind, waiting in a directory that is about to go.
    let (library, perl) = (collect(library, "library"), collect(perl, "Perl"));
    let (library, perl) = (library?, perl?);
    let seconds = start.elapsed().as_secs_f64();
    let counter = std::fs::read_to_string(&files.data)
        .map_err(|e| format!("{data}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{data}: {e}"))?;
    Ok(Cell { window, seconds, library, perl, counter })
}

/// A running participant, its output read as it comes.
struct Worker {
    child: Child,
    out: BufReader<ChildStdout>,
    said: String,
}

impl Worker {
    fn new(mut child: Child) -> Worker {
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Worker { child, out, said: String::new() }
    }

    /// Waits for its "ready" line; false if it ended or said something else.
    fn ready(&mut self) -> bool {
        let mut line = String::new();
        let read = self.out.read_line(&mut line);
        self.said.push_str(&line);
        matches!(read, Ok(n) if n > 0) && line == "ready\n"
    }

    /// Its tally, once it has stopped.
    fn finish(mut self) -> Result<Tally, String> {
        let _ = self.out.read_to_string(&mut self.said);
        let status = self.child.wait().map_err(|e| e.to_string())?;
        match (status.success(), Tally::parse(&self.said)) {
            (true, Some(tally)) => Ok(tally),
            _ => Err(format!("failed ({status}): {}", self.said)),
        }
    }
}

/// A library process: the same loop as the Perl one, with this library.
fn library_worker(args: &[String]) -> Result<Tally, String> {
    let [spec, data, marker, go, stop, hold_us] = args else { return Err("bad worker arguments".into()) };
    let hold = Duration::from_micros(hold_us.parse().map_err(|_| "bad hold")?);
    let (data, marker, go, stop) = (Path::new(data), Path::new(marker), Path::new(go), Path::new(stop));
    let mut lock = Lock::open(spec.as_bytes()).map_err(|e| format!("{spec}: {e}"))?;
    println!("ready");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut tally = Tally::default();
    while !stop.exists() {
        // A bounded wait, so that the stop file is seen even while others hold on.
        match lock.acquire(Some(Duration::from_millis(100))) {
            Ok(_) => {}
            Err(lockcore::Error::Timeout(_)) => continue,
            Err(e) => return Err(format!("acquire: {}", lock.describe(&e))),
        }
        let mine = std::fs::OpenOptions::new().write(true).create_new(true).open(marker).is_ok();
        if !mine {
            tally.overlaps += 1;
        }
        let text = std::fs::read_to_string(data).map_err(|e| format!("{}: {e}", data.display()))?;
        let value: u64 = text.trim().parse().map_err(|_| format!("{}: not a number: {text:?}", data.display()))?;
        std::fs::write(data, format!("{}\n", value + 1)).map_err(|e| format!("{}: {e}", data.display()))?;
        if !hold.is_zero() {
            std::thread::sleep(hold);
        }
        if mine {
            std::fs::remove_file(marker).map_err(|e| format!("{}: {e}", marker.display()))?;
        }
        lock.release(Duration::ZERO).map_err(|e| format!("release: {}", lock.describe(&e)))?;
        tally.acquisitions += 1;
    }
    Ok(tally)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--library-worker") {
        return match library_worker(&args[1..]) {
            Ok(tally) => {
                println!("tally {} {}", tally.acquisitions, tally.overlaps);
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("peers worker: {why}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match Config::parse(args.into_iter()) {
        Ok(config) => config,
        Err(why) if why.is_empty() => {
            println!("{}", Config::usage());
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("peers: {why}\n\n{}", Config::usage());
            return ExitCode::from(2);
        }
    };
    if !Command::new("perl").args(["-MLockFile::Simple", "-e1"]).status().is_ok_and(|s| s.success()) {
        eprintln!("peers: perl with LockFile::Simple is needed (Debian: apt-get install liblockfile-simple-perl)");
        return ExitCode::from(2);
    }
    eprintln!(
        "peers: {} library + {} Perl process(es), {} per window, holding {}, Perl polling every {}, in {}{}",
        config.library,
        config.perl,
        human_duration(config.duration),
        human_duration(config.hold),
        human_duration(config.perl_delay),
        config.dir.display(),
        if as_root() { " (every participant as nobody)" } else { "" }
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "| window | library acq/s | per library process | Perl acq/s | per Perl process | Perl share | overlaps | counter |"
    );
    let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|");
    let mut failed = false;
    for &window in &config.windows {
        match run_cell(&config, window) {
            Ok(cell) => {
                failed |= cell.overlaps() > 0 || !cell.exact();
                let _ = writeln!(out, "{}", cell.row());
            }
            Err(why) => {
                eprintln!("peers: window {}: {why}", human_duration(window));
                failed = true;
            }
        }
    }
    if failed {
        eprintln!("peers: FAILED: an overlap, a lost update or a worker's error; see above");
        return ExitCode::FAILURE;
    }
    eprintln!("peers: oracle ok: never two inside at once, the counter exact");
    ExitCode::SUCCESS
}

//! What the tests of the `lockctl` binary share: the binary, a fresh
//! directory per scheme, a holder process to contend with, bounded waits
//! for what a process shows, and a small JSON reader to check what
//! `status --json` prints.

#![allow(dead_code)] // Each test file uses its own part of this.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use lockcore::Scheme;

/// A bound on hangs, never on speed: what a test waits for comes long before.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A command (`sh -c TRAPPING sh GOT READY SIGNAL`) that traps the signal
/// named `SIGNAL`, notes its name in the file `GOT`, and exits 3, a status
/// of its own; it makes the file `READY` once the trap is set.
pub const TRAPPING: &str = r#"
trap 'echo "$3" > "$1"; kill $pid; exit 3' "$3"
sleep 1000 & pid=$!
: > "$2"
wait
"#;

/// lockctl's statuses that the tests check (the table in `lockctl --help`).
pub const CONFLICT: i32 = 1;
pub const USAGE: i32 = 64;
pub const DATA: i32 = 65;
pub const UNAVAILABLE: i32 = 69;
pub const TEMP_FAIL: i32 = 75;

/// The binary, as a command whose SIGTERM, SIGINT and SIGHUP are not
/// ignored: a test started in the background by a shell without job
/// control inherits SIGINT ignored, and lockctl, rightly, neither undoes
/// that nor passes on a signal it never gets.
pub fn lockctl() -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    // SAFETY: between fork and exec the closure calls only signal(2), which
    // is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command
}

/// A directory of its own for one scheme's run of one test, removed after.
pub struct TestDir(PathBuf);

static DIRS: AtomicUsize = AtomicUsize::new(0);

impl TestDir {
    pub fn new(label: &str) -> TestDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lockctl-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The spec of `scheme`'s lock here: for `lockfile`, of the data file
    /// `lock` (the lock is `lock.lock`), for the others the lock itself.
    pub fn spec(&self, scheme: Scheme, query: &str) -> String {
        if scheme.target_kind() == lockcore::TargetKind::Url {
            // On the server this test process shares, under this directory's name.
            let server = testkit::shared_redis().expect("each_of skips a server scheme without a server");
            return server.spec(self.0.to_str().expect("test paths are UTF-8"), query);
        }
        let mut spec = format!("{}:{}", scheme.name(), self.join("lock").display());
        if !query.is_empty() {
            spec.push('?');
            spec.push_str(query);
        }
        spec
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `body` for every scheme of the library, each in a fresh directory
/// and on a thread of its own (the slow scenarios wait for ttls to pass),
/// and names the scheme of a failure.
pub fn each_scheme(label: &str, body: impl Fn(Scheme, &TestDir) + Sync) {
    each_of(label, Scheme::ALL, body);
}

/// The schemes whose locks are files, for the tests about paths.
pub fn file_schemes() -> Vec<Scheme> {
    Scheme::ALL.iter().copied().filter(|scheme| scheme.supports(lockcore::Ability::Files)).collect()
}

pub fn each_of(label: &str, schemes: &[Scheme], body: impl Fn(Scheme, &TestDir) + Sync) {
    let body = &body;
    std::thread::scope(|scope| {
        let runs: Vec<_> = schemes
            .iter()
            .filter(|scheme| scheme.target_kind() != lockcore::TargetKind::Url || testkit::shared_redis().is_some())
            .map(|&scheme| {
                let thread = scope.spawn(move || body(scheme, &TestDir::new(&format!("{label}-{}", scheme.name()))));
                (scheme, thread)
            })
            .collect();
        for (scheme, run) in runs {
            if let Err(panic) = run.join() {
                eprintln!("failed on scheme {}", scheme.name());
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// What a finished lockctl did.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| panic!("lockctl died of a signal: {self:?}"))
    }
}

/// Runs lockctl with `args` to its end.
pub fn lockctl_run(args: &[&str]) -> Outcome {
    finish(lockctl().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
}

/// Waits for `child` (whose stdout and stderr are piped) to end, within
/// [`PATIENCE`].
pub fn finish(mut child: Child) -> Outcome {
    let status = wait_exit(&mut child);
    let stdout = child.stdout.take().map(written_before_exit).unwrap_or_default();
    let stderr = child.stderr.take().map(written_before_exit).unwrap_or_default();
    Outcome { status, stdout, stderr }
}

/// What a process that has exited wrote to `pipe`. Read without waiting for
/// the end of the pipe: a process it left behind (a command's background
/// child, say) may hold the pipe open long after, and what it writes is not
/// the exited process's output.
fn written_before_exit(mut pipe: impl Read + std::os::fd::AsRawFd) -> String {
    // SAFETY: F_GETFL and F_SETFL on a descriptor this pipe owns.
    unsafe {
        let flags = libc::fcntl(pipe.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("cannot read the output of an exited process: {e}"),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Waits for `child` to end, within [`PATIENCE`]; kills it after that.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let end = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("process {} still running after {PATIENCE:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `condition` holds, within [`PATIENCE`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < end, "still waiting after {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

static HOLDERS: AtomicUsize = AtomicUsize::new(0);

/// A `lockctl run` whose command says when it runs, with its fence, and
/// ends when told to.
pub struct Holder {
    pub child: Child,
    /// LOCK_FENCE, as the command saw it.
    pub fence: u64,
    release: PathBuf,
}

impl Holder {
    /// Starts `lockctl run <options> <spec> -- <command>` and waits until
    /// the command runs (so the lock is held).
    pub fn start(dir: &TestDir, spec: &str, options: &[&str]) -> Holder {
        let n = HOLDERS.fetch_add(1, Ordering::Relaxed);
        let (ready, release) = (dir.join(&format!("ready-{n}")), dir.join(&format!("release-{n}")));
        mkfifo(&release);
        let script = r#"echo "$LOCK_FENCE" > "$1.tmp" && mv "$1.tmp" "$1" && read line < "$2""#;
        let mut child = lockctl()
            .arg("run")
            .args(options)
            .args([spec, "--", "sh", "-c", script, "sh"])
            .args([&ready, &release])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ended = None;
        wait_until("the holder's command to run", || {
            ended = child.try_wait().unwrap();
            ready.exists() || ended.is_some()
        });
        if ended.is_some() {
            panic!("the holder of {spec} ended before its command ran: {:?}", finish(child));
        }
        let fence = std::fs::read_to_string(&ready).unwrap().trim().parse().unwrap();
        Holder { child, fence, release }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells the command to end, and waits for lockctl to end.
    pub fn release(mut self) -> Outcome {
        // Non-blocking: a command that has ended already has no reader on
        // the fifo, and a blocking open would wait for ever.
        let mut ended = None;
        let mut writer = None;
        wait_until("the holder's command to read its fifo, or to end", || {
            writer = OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&self.release).ok();
            ended = self.child.try_wait().unwrap();
            writer.is_some() || ended.is_some()
        });
        if let Some(mut writer) = writer {
            let _ = writer.write_all(b"\n");
        }
        finish(self.child)
    }
}

pub fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `name` is a NUL-terminated path that lives across the call.
    let rc = unsafe { libc::mkfifo(name.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

pub fn send_signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory preconditions; the pid is a child of this
    // test that it has not reaped.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// `lockctl status --json SPEC`, parsed, with its exit status.
pub fn status_json(spec: &str) -> (i32, Json) {
    let out = lockctl_run(&["status", "--json", spec]);
    let json = Json::parse(out.stdout.trim_end()).unwrap_or_else(|why| panic!("{why}: {out:?}"));
    (out.code(), json)
}

/// A JSON value, as RFC 8259 has them; numbers are kept as written, so
/// that a 64-bit fence compares exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    /// Parses one JSON value that is all of `text`.
    pub fn parse(text: &str) -> Result<Json, String> {
        let mut reader = Reader { bytes: text.as_bytes(), at: 0 };
        let value = reader.value()?;
        reader.space();
        if reader.at != reader.bytes.len() {
            return Err(format!("text after the JSON value at byte {}", reader.at));
        }
        Ok(value)
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(members) => members.get(key).unwrap_or_else(|| panic!("no key {key:?} in {self:?}")),
            other => panic!("not an object: {other:?}"),
        }
    }

    pub fn keys(&self) -> Vec<&str> {
        match self {
            Json::Object(members) => members.keys().map(String::as_str).collect(),
            other => panic!("not an object: {other:?}"),
        }
    }

    pub fn str(&self) -> &str {
        match self {
            Json::String(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    pub fn u64(&self) -> u64 {
        match self {
            Json::Number(n) => n.parse().unwrap_or_else(|_| panic!("not a u64: {n}")),
            other => panic!("not a number: {other:?}"),
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b" \t\r\n".contains(b)) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        match self.peek() {
            Some(b) if b == byte => {
                self.at += 1;
                Ok(())
            }
            other => Err(format!("expected {:?} at byte {}, found {:?}", byte as char, self.at, other.map(char::from))),
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => Ok(self.number()),
            other => Err(format!("unexpected {:?} at byte {}", other.map(char::from), self.at)),
        }
    }

    fn word(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(format!("bad literal at byte {}", self.at))
        }
    }

    fn number(&mut self) -> Json {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(|b| b"+-.eE0123456789".contains(b)) {
            self.at += 1;
        }
        Json::Number(String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned())
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let b = *self.bytes.get(self.at).ok_or("unterminated string")?;
            self.at += 1;
            match b {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let escape = *self.bytes.get(self.at).ok_or("unterminated escape")?;
                    self.at += 1;
                    let c = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = std::str::from_utf8(self.bytes.get(self.at..self.at + 4).ok_or("short \\u")?)
                                .map_err(|e| e.to_string())?;
                            self.at += 4;
                            char::from_u32(u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?)
                                .ok_or("a \\u escape that is no character")?
                        }
                        other => return Err(format!("bad escape \\{}", other as char)),
                    };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                b if b < 0x20 => return Err(format!("unescaped control byte {b:#x} in a string")),
                b => out.push(b),
            }
        }
    }

    fn array(&mut self) -> Result<Json, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek() {
                Some(b',') => self.at += 1,
                _ => break,
            }
        }
        self.expect(b']')?;
        Ok(Json::Array(items))
    }

    fn object(&mut self) -> Result<Json, String> {
        self.expect(b'{')?;
        let mut members = BTreeMap::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.space();
            let key = self.string()?;
            self.expect(b':')?;
            let value = self.value()?;
            if members.insert(key.clone(), value).is_some() {
                return Err(format!("key {key:?} twice"));
            }
            match self.peek() {
                Some(b',') => self.at += 1,
                _ => break,
            }
        }
        self.expect(b'}')?;
        Ok(Json::Object(members))
    }
}

/// Whether `program --version` runs: for the tests that need a peer tool.
pub fn tool_present(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// A critical section for `sh -c`, run under the lock by every contender:
/// it fails to make the directory `inside` if another contender is in it
/// (an overlap, noted in `overlaps`), and adds one to `counter` by a read,
/// a pause and a write, which loses updates if two run at once.
pub const CRITICAL_SECTION: &str = r#"
d="$1"
mkdir "$d/inside" 2>/dev/null || echo overlap >> "$d/overlaps"
n=$(cat "$d/counter")
sleep 0.005
echo $((n + 1)) > "$d/counter"
rmdir "$d/inside" 2>/dev/null
exit 0
"#;

/// Prepares `dir` for [`CRITICAL_SECTION`].
pub fn prepare_counter(dir: &Path) {
    std::fs::write(dir.join("counter"), "0\n").unwrap();
}

/// Checks that `runs` critical sections ran in `dir`, one at a time.
pub fn assert_exclusive(dir: &Path, runs: usize, what: &str) {
    let overlaps = std::fs::read_to_string(dir.join("overlaps")).unwrap_or_default();
    assert!(overlaps.is_empty(), "{what}: {} overlapping critical sections", overlaps.lines().count());
    let counter = std::fs::read_to_string(dir.join("counter")).unwrap();
    assert_eq!(counter.trim().parse::<usize>().unwrap(), runs, "{what}: updates were lost");
}

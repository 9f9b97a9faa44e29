//! The harness shared by the multi-process tests of lockcore.
//!
//! Every "process" in these tests is a real process. As in sled's crash
//! tests, a test binary re-executes itself ([`spawn`]): the child runs the
//! binary's `child_entry` test only (`child_entry --exact --nocapture`), and
//! an environment variable ([`ROLE_VAR`]) tells it which role to play. Each
//! test file declares
//!
//! ```ignore
//! #[test]
//! fn child_entry() {
//!     common::child_main(run_role);
//! }
//! ```
//!
//! which does nothing in the parent and, in a child, runs the role and exits
//! without running destructors (so a child can "die" holding its lock).
//!
//! What the parent and its children share lives in a [`Shm`]: a file in the
//! test directory mapped `MAP_SHARED` by every process, holding atomic
//! counters (the overlap oracle: how many processes are inside the critical
//! section right now, and the most ever seen), small arrays (fences in
//! acquisition order) and futex gates that release many children at once.

#![allow(dead_code)]

use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockcore::internals::Stamp;
use lockcore::{Lock, Nonce, Owner, Record, WallTime};
pub mod counting;
pub mod files;
pub mod shm_lock;
pub mod users;

/// Names the role a re-executed test binary plays.
pub const ROLE_VAR: &str = "LOCKCORE_TEST_ROLE";
/// Every other variable passed to a child starts with this.
const VAR_PREFIX: &str = "LOCKCORE_TEST_";
/// The test every child runs.
const CHILD_TEST: &str = "child_entry";

/// Longest a test waits for something that should take milliseconds: a guard
/// against hangs, never an assertion about speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Schemes
// ---------------------------------------------------------------------------

pub use lockcore::{Scheme, TargetKind};

/// Where the tests keep each scheme's lock in a test directory, and what
/// the lock is made of there, for every scheme of lockcore's own list
/// (`Scheme::ALL`): a scheme added to lockcore is tested without a change
/// here. The paths come from lockcore itself (`Lock::path`,
/// `Lock::guard_path`), never from a table of the tests' own.
pub trait SchemeFiles: Copy {
    /// The target named in the spec: the protected file for `lockfile`
    /// (whose lock file is `<target>.lock`), the lock's own path otherwise.
    fn target(self, dir: &Path) -> PathBuf;
    /// `scheme:target?query`.
    fn spec(self, dir: &Path, query: &str) -> String;
    /// The path that is the lock.
    fn lock_path(self, dir: &Path) -> PathBuf;
    /// The guard beside the lock, for the schemes that keep one (`flock`
    /// keeps its state there too).
    fn guard_path(self, dir: &Path) -> Option<PathBuf>;
    /// The file whose lock excludes other processes while the lock
    /// changes, and that keeps the last fence: the guard, or the lock file
    /// itself (`lease`, `toplock`).
    fn state_path(self, dir: &Path) -> PathBuf {
        self.guard_path(dir).unwrap_or_else(|| self.lock_path(dir))
    }
}

impl SchemeFiles for Scheme {
    fn target(self, dir: &Path) -> PathBuf {
        match self {
            Scheme::Lockfile => dir.join("data"),
            _ => dir.join("lock"),
        }
    }

    fn spec(self, dir: &Path, query: &str) -> String {
        if self.target_kind() == TargetKind::Url {
            // A lock on the server this test process shares, named by the
            // test directory, which no other test has.
            let server = testkit::shared_redis().expect("each_scheme skips a server scheme without a server");
            return server.spec(dir.to_str().expect("test paths are UTF-8"), query);
        }
        let target = self.target(dir);
        let target = target.to_str().expect("test paths are UTF-8");
        assert!(!target.contains(['?', '%', '&']), "test directory {target} would need percent-encoding");
        if query.is_empty() {
            format!("{}:{target}", self.name())
        } else {
            format!("{}:{target}?{query}", self.name())
        }
    }

    fn lock_path(self, dir: &Path) -> PathBuf {
        path_of(&open_lock(&self.spec(dir, "")))
    }

    fn guard_path(self, dir: &Path) -> Option<PathBuf> {
        open_lock(&self.spec(dir, "")).guard_path().map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes())))
    }
}

/// Runs `body` once per scheme, each in a fresh directory, and reports every
/// scheme that failed (not only the first). A scheme whose lock lives on a
/// server runs against one this process starts ([`testkit::shared_redis`]),
/// and is skipped, saying so, where none can run.
pub fn each_scheme(label: &str, body: impl FnMut(Scheme, &TestDir)) {
    each_of(label, Scheme::ALL, body);
}

/// Whether a scheme's locks expire on their server, by the server's clock:
/// once the holder's own lease has run out, its lock is free a moment later
/// (its key expires there), never found stale and broken by a client.
pub fn expires_on_server(scheme: Scheme) -> bool {
    scheme.target_kind() == TargetKind::Url
}

/// After the holder of `lock`'s own lease has run out: waits, for a scheme
/// whose locks expire on their server, until the server has let it go too
/// (the holder's own lease ends a drift margin before the server's).
pub fn wait_for_server_expiry(scheme: Scheme, lock: &mut Lock) {
    if expires_on_server(scheme) {
        wait_until("the server to expire the lock", || lock.inspect().is_ok_and(|seen| seen.holder.is_none()));
    }
}

/// The schemes whose locks are files of this host, which tests about
/// files (modes, owners, planted files, helper names) cover.
pub fn file_schemes() -> Vec<Scheme> {
    Scheme::ALL.iter().copied().filter(|scheme| scheme.supports(lockcore::Ability::Files)).collect()
}

/// [`each_scheme`] over the schemes whose locks are files ([`file_schemes`]).
pub fn each_file_scheme(label: &str, body: impl FnMut(Scheme, &TestDir)) {
    each_of(label, &file_schemes(), body);
}

/// [`each_scheme`] over a chosen list of schemes.
pub fn each_of(label: &str, schemes: &[Scheme], mut body: impl FnMut(Scheme, &TestDir)) {
    let mut failed = Vec::new();
    for &scheme in schemes {
        if scheme.target_kind() == TargetKind::Url && testkit::shared_redis().is_none() {
            eprintln!("[{label}] scheme {} skipped: no server", scheme.name());
            continue;
        }
        note_scheme_run(label, scheme);
        let dir = TestDir::new(&format!("{label}-{}", scheme.name()));
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| body(scheme, &dir)));
        if let Err(payload) = outcome {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("[{label}] scheme {} FAILED: {text}", scheme.name());
            dir.keep();
            failed.push(scheme.name());
        }
    }
    assert!(failed.is_empty(), "{label}: failed for {failed:?}");
}

/// Whether `scheme` takes only locks private to their owner (`mode=0600`):
/// every process that uses a `shm` lock maps its file, and whoever may
/// write a mapped file may shorten it under the others, who die of
/// `SIGBUS` at their next touch. So its spec refuses a mode that lets
/// others write (`0660`, `0666`), and tests that share a lock with a group
/// or with everyone check that refusal instead.
pub fn private_only(scheme: Scheme) -> bool {
    scheme == Scheme::Shm
}

/// Opens `spec`, whose `mode` lets others write the lock's files: the
/// lock, or, for a scheme that is [`private_only`], `None` once it is
/// checked that the spec was refused, and for its `mode`.
pub fn open_shared(scheme: Scheme, spec: &str) -> Option<Lock> {
    let opened = Lock::open(spec.as_bytes());
    if !private_only(scheme) {
        return Some(opened.unwrap_or_else(|e| panic!("open {spec}: {e}")));
    }
    match opened {
        Err(lockcore::Error::Spec(e)) => {
            assert_eq!((e.kind, e.key()), (lockcore::SpecErrorKind::BadValue, &b"mode"[..]), "{spec}: {e}");
            None
        }
        Err(e) => panic!("{spec}: refused, but not for its mode: {e:?}"),
        Ok(_) => panic!("{spec}: a lock that others may write, accepted by a scheme that maps its file"),
    }
}

/// For the few tests that forge or read a scheme's own files byte by byte:
/// a scheme they have not been taught fails them, saying so. (Every other
/// test knows a scheme only through `Scheme::ALL` and the library.)
pub fn unknown_format(scheme: Scheme) -> ! {
    panic!("{}: this test reads or forges each scheme's own files; add this scheme's format to it", scheme.name())
}

/// With `LOCKCORE_TEST_SCHEME_LOG` set, appends `<label> <scheme>` to that
/// file: how the workspace's own test proves that a scheme registered in
/// lockcore's registry, and nowhere else, is run by the suites.
fn note_scheme_run(label: &str, scheme: Scheme) {
    use std::io::Write;
    if let Some(log) = std::env::var_os("LOCKCORE_TEST_SCHEME_LOG") {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open the scheme log");
        writeln!(file, "{label} {}", scheme.name()).expect("write the scheme log");
    }
}

/// Leaves the lock of `spec` held by `owner`, in the scheme's own format,
/// as if that process had taken it and then died (or lived on): a handle
/// acting as `owner` acquires, and forgets the acquisition. For `flock` the
/// kernel lock goes with the handle; only its record stays.
pub fn leave_lock(spec: &str, owner: Owner) -> Record {
    let spec_parsed = lockcore::Spec::parse(spec.as_bytes()).unwrap_or_else(|e| panic!("parse {spec}: {e}"));
    let mut lock = Lock::with_owner(spec_parsed, owner).unwrap_or_else(|e| panic!("open {spec}: {e}"));
    lock.try_acquire().unwrap_or_else(|e| panic!("leave {spec} held by {owner:?}: {e}"));
    let record = *lock.held().expect("held after try_acquire");
    lock.forget();
    record
}

/// A pid that no process has: one that just exited and was reaped.
pub fn dead_pid() -> i32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    child.wait().unwrap();
    pid
}

/// This process, as an owner that is someone else: the same host and
/// boot, `pid`, started at `start_ticks`.
pub fn owner_as(pid: i32, start_ticks: u64) -> Owner {
    let mut owner = Owner::current().unwrap();
    owner.process.pid = pid;
    owner.process.start_ticks = start_ticks;
    owner
}

pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

// ---------------------------------------------------------------------------
// Directories
// ---------------------------------------------------------------------------

/// A fresh directory under `std::env::temp_dir()`, world-writable with the
/// sticky bit like `/tmp` (the setting where planted symlinks matter),
/// removed when the test passes and kept (and named) when it fails.
pub struct TestDir {
    path: PathBuf,
    keep: std::cell::Cell<bool>,
}

impl TestDir {
    pub fn new(label: &str) -> TestDir {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let name =
            format!("lockcore-{label}-{}-{nanos}-{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o1777)).unwrap();
        TestDir { path, keep: std::cell::Cell::new(false) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Keeps the directory after the test, for a post-mortem.
    pub fn keep(&self) {
        self.keep.set(true);
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if self.keep.get() || std::thread::panicking() {
            eprintln!("keeping {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------

pub fn open_lock(spec: &str) -> Lock {
    Lock::open(spec.as_bytes()).unwrap_or_else(|e| panic!("open {spec}: {e}"))
}

/// The lock's own idea of its path, as a `PathBuf`.
pub fn path_of(lock: &Lock) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(lock.path().expect("a lock that keeps files").as_bytes()))
}

/// Sets a path's modification (and access) time, without following a symlink.
pub fn set_mtime(path: &Path, at: SystemTime) {
    let since = at.duration_since(UNIX_EPOCH).expect("after the epoch");
    let ts = libc::timespec { tv_sec: since.as_secs() as libc::time_t, tv_nsec: since.subsec_nanos() as libc::c_long };
    let times = [ts, ts];
    let c = cstring(path);
    // SAFETY: a NUL-terminated path and an array of two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {}: {}", path.display(), std::io::Error::last_os_error());
}

/// `SystemTime::now() - ago`.
pub fn ago(ago: Duration) -> SystemTime {
    SystemTime::now() - ago
}

/// `SystemTime::now() + ahead`.
pub fn from_now(ahead: Duration) -> SystemTime {
    SystemTime::now() + ahead
}

pub fn mkfifo(path: &Path) {
    let c = cstring(path);
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
    assert_eq!(r, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL in test paths")
}

/// A lock file as `lockfile` (and the record inside a `mkdir` lock)
/// holds it, for an owner of our choosing: this host and boot unless `host`
/// says otherwise.
pub fn forged_record(
    pid: i32,
    start_ticks: u64,
    host: Option<&str>,
    fence: u64,
    expires: Option<SystemTime>,
) -> Vec<u8> {
    let mut owner = owner_as(pid, start_ticks);
    if let Some(host) = host {
        owner.host = lockcore::HostName::from_bytes(host.as_bytes()).expect("a valid host name");
    }
    let expires = expires.map(|at| lockcore::Moment { wall: wall_time(at), boot: None });
    let record = Record { owner, nonce: Nonce::random().unwrap(), fence, since: WallTime::now(), expires };
    record.encode_lock_file(Stamp::Pid).as_bytes().to_vec()
}

pub fn wall_time(at: SystemTime) -> WallTime {
    let nanos = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    };
    WallTime::from_unix_nanos(nanos)
}

pub fn wall_now() -> WallTime {
    WallTime::now()
}

/// Field 3 (state) and field 22 (start time in ticks) of `/proc/PID/stat`.
pub fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let text = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

pub fn getppid() -> i32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() }
}

/// A file's bytes and identity, to prove a victim was never written,
/// truncated or replaced.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    bytes: Option<Vec<u8>>,
    ino: Option<u64>,
    mtime: Option<(i64, i64)>,
    exists: bool,
}

pub fn snapshot(path: &Path) -> Snapshot {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(path) {
        Ok(meta) => Snapshot {
            bytes: if meta.is_file() { fs::read(path).ok() } else { None },
            ino: Some(meta.ino()),
            mtime: Some((meta.mtime(), meta.mtime_nsec())),
            exists: true,
        },
        Err(_) => Snapshot { bytes: None, ino: None, mtime: None, exists: false },
    }
}

// ---------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------

/// Slots of a [`Shm`] (8 bytes each).
pub const SHM_SLOTS: usize = 8192;

/// A file mapped `MAP_SHARED` into every process of a test: slots of
/// `AtomicU64` that all processes see.
pub struct Shm {
    base: *mut u8,
    path: PathBuf,
}

// SAFETY: the mapping is only ever accessed through atomics.
unsafe impl Send for Shm {}
// SAFETY: as above.
unsafe impl Sync for Shm {}

impl Shm {
    /// Creates the file (zero-filled) and maps it.
    pub fn create(path: &Path) -> Shm {
        let file = fs::OpenOptions::new().read(true).write(true).create_new(true).open(path).unwrap();
        file.set_len((SHM_SLOTS * 8) as u64).unwrap();
        Shm::map(&file, path)
    }

    /// Maps a file made by [`Shm::create`] (in a child).
    pub fn open(path: &Path) -> Shm {
        let file = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
        Shm::map(&file, path)
    }

    fn map(file: &fs::File, path: &Path) -> Shm {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file at least this long; the
        // mapping outlives the descriptor, as mmap allows.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SHM_SLOTS * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        Shm { base: base.cast(), path: path.to_owned() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn at(&self, slot: usize) -> &AtomicU64 {
        assert!(slot < SHM_SLOTS, "slot {slot} out of range");
        // SAFETY: in bounds, 8-byte aligned (the mapping is page-aligned),
        // and only ever used atomically by every process.
        unsafe { &*(self.base.add(slot * 8) as *const AtomicU64) }
    }

    pub fn get(&self, slot: usize) -> u64 {
        self.at(slot).load(Ordering::SeqCst)
    }

    fn word(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < SHM_SLOTS, "slot {slot} out of range");
        // SAFETY: as for `at`; a gate slot is only ever used as a u32.
        unsafe { &*(self.base.add(slot * 8) as *const AtomicU32) }
    }

    /// Blocks until [`open_gate`](Self::open_gate) on the same slot. Every
    /// waiter sleeps on one futex, so one wake-up releases them all at once.
    /// Gives up (and exits the process) after [`PATIENCE`]: an orphaned
    /// child must not wait forever for a parent that failed.
    pub fn wait_gate(&self, slot: usize) {
        let word = self.word(slot);
        let give_up = Instant::now() + PATIENCE;
        while word.load(Ordering::SeqCst) == 0 {
            if Instant::now() > give_up {
                eprintln!("child {}: gate {slot} never opened", std::process::id());
                std::process::exit(3);
            }
            futex_wait(word, 0, Duration::from_millis(100));
        }
    }

    pub fn open_gate(&self, slot: usize) {
        let word = self.word(slot);
        word.store(1, Ordering::SeqCst);
        futex_wake_all(word);
    }

    /// The overlap oracle, on entry to a critical section: counts this
    /// process in, records the most ever inside, and returns how many were
    /// already inside (0 when the lock works).
    pub fn enter(&self, inside: usize, max_inside: usize) -> u64 {
        let before = self.at(inside).fetch_add(1, Ordering::SeqCst);
        self.at(max_inside).fetch_max(before + 1, Ordering::SeqCst);
        before
    }

    pub fn leave(&self, inside: usize) {
        self.at(inside).fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), SHM_SLOTS * 8) };
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: a valid, aligned u32 in a shared mapping (hence the
    // non-private futex op) and a valid timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: a valid, aligned u32 in a shared mapping.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

/// Runs the child's role when this process is a re-executed child; returns
/// at once in the parent. A role that returns has dropped its locals (a
/// `Lock` still held is released by its drop) and the process exits with
/// status 0; a role that panics fails the child's test, which exits
/// non-zero. A role that must die holding its lock calls [`die_holding`].
pub fn child_main(run_role: fn(&str)) {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    run_role(&role);
    std::process::exit(0);
}

/// Exits with status 0 at once, running no destructor: every lock this
/// process holds stays on disk with its record, as after a crash (the kernel
/// still lets go of flocks, as it does for any exit).
pub fn die_holding() -> ! {
    std::process::exit(0)
}

/// A variable the parent passed to this child.
pub fn var(name: &str) -> String {
    std::env::var(format!("{VAR_PREFIX}{name}")).unwrap_or_else(|_| panic!("child needs {VAR_PREFIX}{name}"))
}

pub fn var_usize(name: &str) -> usize {
    var(name).parse().unwrap()
}

/// Re-executes this test binary as a child playing `role`, with `vars`
/// (names without the prefix). Its stdout (libtest's chatter) is dropped;
/// its stderr is the parent's, so a failing child explains itself.
pub fn spawn(role: &str, vars: &[(&str, String)]) -> Child {
    child_command(&[], role, vars).spawn().unwrap_or_else(|e| panic!("spawn {role}: {e}"))
}

/// The command that re-executes this test binary in `role`, run through
/// `wrapper` (a program and its arguments, such as `unshare --pid --fork`)
/// when it is not empty.
pub fn child_command(wrapper: &[&str], role: &str, vars: &[(&str, String)]) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    cmd.args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1", "--quiet"])
        .env(ROLE_VAR, role)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (name, value) in vars {
        cmd.env(format!("{VAR_PREFIX}{name}"), value);
    }
    cmd
}

/// Children that are killed and reaped if the test fails before it waited
/// for them, so that no test leaves processes behind.
#[derive(Default)]
pub struct Children(Vec<Child>);

impl Children {
    pub fn new() -> Children {
        Children(Vec::new())
    }

    pub fn push(&mut self, child: Child) {
        self.0.push(child);
    }

    /// Takes the last child out, to be waited for (or killed) by hand.
    pub fn pop(&mut self) -> Option<Child> {
        self.0.pop()
    }

    /// Takes out the child at `index`, in the order they were pushed, to be
    /// killed or waited for by hand.
    pub fn take(&mut self, index: usize) -> Child {
        self.0.remove(index)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Waits for every child; panics unless all exited with status 0.
    pub fn expect_success(&mut self, what: &str) {
        let mut bad = Vec::new();
        for child in self.0.iter_mut() {
            let status = wait_patiently(child);
            if !status.success() {
                bad.push((child.id(), status));
            }
        }
        self.0.clear();
        assert!(bad.is_empty(), "{what}: children failed: {bad:?}");
    }

    /// Whether any child has already exited (a parent waiting on shared
    /// memory should stop waiting then).
    pub fn any_exited(&mut self) -> bool {
        self.0.iter_mut().any(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in self.0.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for a child, killing it after [`PATIENCE`] (a hung child is a failure).
pub fn wait_patiently(child: &mut Child) -> ExitStatus {
    let give_up = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {} hung", child.id());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Polls `cond` until it holds; panics after [`PATIENCE`]. Waits for an
/// event, never asserts how fast it came.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < give_up, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `pid` (a child of this process) has exited, *without reaping
/// it*: afterwards it is a zombie until someone waits for it.
pub fn wait_exit_keep_zombie(pid: u32) {
    // SAFETY: siginfo_t is plain data; zeroed is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: a valid out-pointer; WNOWAIT leaves the child waitable.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(err.raw_os_error(), Some(libc::EINTR), "waitid {pid}: {err}");
    }
}

pub fn sigkill(pid: u32) {
    // SAFETY: plain call on a positive pid of our own child.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// Whether Perl with LockFile::Simple can run here: the peer of the
/// interoperation tests. Without it they say they are skipped, except under
/// CI, which must install it.
pub fn perl_available() -> bool {
    let ok = Command::new("perl")
        .args(["-MLockFile::Simple", "-e1"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must install liblockfile-simple-perl");
        eprintln!("skipped: perl with LockFile::Simple is not installed");
    }
    ok
}

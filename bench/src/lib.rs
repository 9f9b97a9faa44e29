//! Shared pieces of the benchmarks and of the contention report: where to put
//! lock files, the raw system-call loops each strategy is measured against
//! (its floor: the calls the scheme cannot avoid), the peers it is compared
//! with, a pool of contending workers (threads or pre-forked processes), and
//! the report itself ([`report`], run by `src/bin/contention.rs`).
//!
//! Everything iterates over [`lockcore::Scheme::ALL`]: a new strategy whose
//! lock is a file is benchmarked and reported with no change here. Its
//! floor is looked up by scheme name in [`floor::for_scheme`]; a scheme
//! without one is measured alone until a floor is added there. A scheme
//! whose target is a URL needs a server, which [`Homes`] starts: `redis`
//! has one ([`redis`]); another is skipped, and the output says so.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use lockcore::{Scheme, TargetKind};

pub mod peer;
pub mod pool;
pub mod redis;
pub mod report;
pub mod sys;

/// A fresh directory for one benchmark run, removed on drop.
pub struct BenchDir(PathBuf);

impl BenchDir {
    pub fn new(parent: &Path, label: &str) -> BenchDir {
        let dir = parent.join(format!("lockbench-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create benchmark directory");
        BenchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn spec(&self, scheme: &str, name: &str) -> String {
        format!("{scheme}:{}/{name}", self.0.display())
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        // A forked worker that unwinds must not remove its parent's directory.
        if self.0.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(&format!("-{}", std::process::id())))
        {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Where the locks of one run live: files in a fresh directory, and for a
/// scheme whose target is a URL, keys on a server the run started.
pub struct Homes {
    dir: BenchDir,
    fs: String,
    redis: Option<redis::RedisServer>,
}

impl Homes {
    /// Homes for `schemes` under `parent`, a server started if one of them
    /// needs it (its clients to come by `transport`); each scheme that can
    /// have none here comes back with why.
    pub fn new(
        parent: &Path,
        label: &str,
        schemes: &[Scheme],
        transport: redis::Transport,
    ) -> (Homes, Vec<(Scheme, String)>) {
        let dir = BenchDir::new(parent, label);
        let fs = fs_type(parent).unwrap_or_else(|| "unknown".into());
        let mut skipped = Vec::new();
        let mut redis = None;
        for &scheme in schemes.iter().filter(|s| s.target_kind() == TargetKind::Url) {
            match scheme.name() {
                "redis" if redis.is_none() => match redis::RedisServer::start(transport) {
                    Ok(server) => redis = Some(server),
                    Err(why) => skipped.push((scheme, why)),
                },
                "redis" => {}
                other => skipped.push((scheme, format!("this harness starts no server for {other} locks"))),
            }
        }
        (Homes { dir, fs, redis }, skipped)
    }

    pub fn dir(&self) -> &BenchDir {
        &self.dir
    }

    /// The file system type of the directory (tmpfs, ext4...).
    pub fn fs(&self) -> &str {
        &self.fs
    }

    pub fn redis(&self) -> Option<&redis::RedisServer> {
        self.redis.as_ref()
    }

    /// The spec of the lock `name` of `scheme`: a file in the directory, or
    /// a key on the server ([`redis::QUERY`] with it). Panics for a scheme
    /// [`Homes::new`] skipped.
    pub fn spec(&self, scheme: Scheme, name: &str) -> String {
        match scheme.target_kind() {
            TargetKind::Path => self.dir.spec(scheme.name(), name),
            TargetKind::Url => match (scheme.name(), &self.redis) {
                ("redis", Some(server)) => server.spec(name, redis::QUERY),
                _ => panic!("no server for {} locks: Homes::new skipped it", scheme.name()),
            },
        }
    }

    /// Where `scheme`'s locks live, for a CSV column: the file system type,
    /// or the server and its transport (`redis-tcp`).
    pub fn place(&self, scheme: Scheme) -> String {
        match (scheme.target_kind(), &self.redis) {
            (TargetKind::Url, Some(server)) => format!("{}-{}", scheme.name(), server.transport().name()),
            (TargetKind::Url, None) => scheme.name().to_string(),
            (TargetKind::Path, _) => self.fs.clone(),
        }
    }
}

/// The file systems to measure on: the default temp directory, and tmpfs
/// (/dev/shm) when the machine has it.
pub fn bench_roots() -> Vec<(&'static str, PathBuf)> {
    let mut roots = vec![("tmp", std::env::temp_dir())];
    if Path::new("/dev/shm").is_dir() {
        roots.push(("shm", PathBuf::from("/dev/shm")));
    }
    roots
}

/// The file system type of `path` as `/proc/self/mounts` names it (overlay,
/// tmpfs, ext4...), for labelling figures; `None` off Linux.
pub fn fs_type(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, mount, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(mount).then(|| (mount.len(), kind.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
}

pub(crate) fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in bench paths")
}

/// Raw floors: exactly the system calls each scheme cannot avoid.
pub mod floor {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::atomic::{AtomicU32, AtomicU64};

    /// A floor: a label and a loop body made for a path in the bench directory.
    pub type Floor = (&'static str, fn(&Path) -> Box<dyn FnMut()>);

    /// The floors of a scheme, by name, so that a new scheme needs no change
    /// to the benches: an unknown name has none (yet).
    pub fn for_scheme(name: &str) -> Vec<Floor> {
        match name {
            "lockfile" => vec![
                ("floor: temp create+write, link, unlink x2", |p| Box::new(temp_link_unlink(p))),
                ("floor: O_EXCL create+write+unlink", |p| Box::new(excl_create_write_unlink(p))),
                ("floor: O_EXCL in place, with guard, read-back, rename aside", |p| Box::new(guarded_lock_file(p))),
            ],
            "mkdir" => vec![("floor: mkdir+rmdir", |p| Box::new(mkdir_rmdir(p)))],
            "flock" => vec![
                ("floor: flock lock+unlock", |p| Box::new(flock_on_open_fd(p))),
                ("floor: flock, fence read+written, unlock", |p| Box::new(flock_with_fence(p))),
            ],
            "symlink" => vec![("floor: symlink+unlink", |p| Box::new(symlink_unlink(p)))],
            "lease" => vec![("floor: (OFD lock, pread, pwrite, unlock) x2", |p| Box::new(locked_rewrite_twice(p)))],
            "toplock" => {
                vec![("floor: (OFD lock, pread, append, unlock) x2", |p| Box::new(locked_append_twice(p)))]
            }
            "shm" => vec![
                ("floor: lock word, fence, expiry (clock, CAS) x2", |p| Box::new(word_fence_expiry(p, Clock::Precise))),
                ("floor: lock word, fence, expiry on the coarse clock", |p| {
                    Box::new(word_fence_expiry(p, Clock::Coarse))
                }),
            ],
            _ => Vec::new(),
        }
    }

    /// mkdir + rmdir.
    pub fn mkdir_rmdir(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        move || {
            // SAFETY: NUL-terminated path; return values checked.
            unsafe {
                assert_eq!(libc::mkdir(p.as_ptr(), 0o755), 0);
                assert_eq!(libc::rmdir(p.as_ptr()), 0);
            }
        }
    }

    /// open(O_CREAT|O_EXCL) + write(pid) + close + unlink.
    pub fn excl_create_write_unlink(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        let stamp = format!("{}\n", std::process::id());
        move || {
            // SAFETY: NUL-terminated path, valid buffer; return values checked.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o444);
                assert!(fd >= 0);
                assert_eq!(libc::write(fd, stamp.as_ptr().cast(), stamp.len()), stamp.len() as isize);
                libc::close(fd);
                assert_eq!(libc::unlink(p.as_ptr()), 0);
            }
        }
    }

    /// The link-based lock file (liblockfile's and lockcore's): open a temp
    /// file O_EXCL, write the stamp, close, link it to the lock name, unlink
    /// the temp name; to release, unlink the lock.
    pub fn temp_link_unlink(path: &Path) -> impl FnMut() {
        let lock = c_path(path);
        let mut temp_path = path.as_os_str().to_owned();
        temp_path.push(".tmp");
        let temp = c_path(Path::new(&temp_path));
        let stamp = format!("{}\n", std::process::id());
        move || {
            // SAFETY: NUL-terminated paths, valid buffer; return values checked.
            unsafe {
                let fd =
                    libc::open(temp.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o444);
                assert!(fd >= 0);
                assert_eq!(libc::write(fd, stamp.as_ptr().cast(), stamp.len()), stamp.len() as isize);
                libc::close(fd);
                assert_eq!(libc::link(temp.as_ptr(), lock.as_ptr()), 0);
                assert_eq!(libc::unlink(temp.as_ptr()), 0);
                assert_eq!(libc::unlink(lock.as_ptr()), 0);
            }
        }
    }

    /// The fewest calls a lock file can make and keep `lockfile`'s promises,
    /// with its cheapest creation: to take it, a section under the guard
    /// (OFD lock, `lstat` of the guard's path, `pread` of its state, a look
    /// at the lock's path, `pwrite` of the fence, unlock) around the lock
    /// file made in place (`O_EXCL` create, write, close; `lockfile` links a
    /// helper instead, so that no reader ever sees it empty); to give it
    /// back, a section around the record read back (open, `fstat`, read,
    /// close) and the file renamed aside to a name of its own, looked at
    /// and removed, so that only the file judged goes.
    pub fn guarded_lock_file(path: &Path) -> impl FnMut() {
        let lock = c_path(path);
        let with = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            c_path(Path::new(&name))
        };
        let (guard, aside) = (with(".guard"), with(".9a1780af7dc9608fd914fca0ca43bf6c"));
        // SAFETY: NUL-terminated path; the descriptor is leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let guard_fd = unsafe { libc::open(guard.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o600) };
        assert!(guard_fd >= 0);
        let state = [b' '; 160];
        let record = [b'x'; 152];
        let mut buf = [0u8; 256];
        move || {
            // SAFETY: NUL-terminated paths, open descriptors, buffers that
            // outlive the calls; return values checked.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                ofd_set(guard_fd, libc::F_WRLCK);
                assert_eq!(libc::lstat(guard.as_ptr(), &mut st), 0);
                assert!(libc::pread(guard_fd, buf.as_mut_ptr().cast(), state.len(), 0) >= 0);
                assert!(libc::open(lock.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC) < 0);
                assert_eq!(libc::pwrite(guard_fd, state.as_ptr().cast(), state.len(), 0), state.len() as isize);
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
                let fd = libc::open(lock.as_ptr(), flags, 0o400);
                assert!(fd >= 0);
                assert_eq!(libc::write(fd, record.as_ptr().cast(), record.len()), record.len() as isize);
                libc::close(fd);
                ofd_set(guard_fd, libc::F_UNLCK);

                ofd_set(guard_fd, libc::F_WRLCK);
                assert_eq!(libc::lstat(guard.as_ptr(), &mut st), 0);
                assert!(libc::pread(guard_fd, buf.as_mut_ptr().cast(), state.len(), 0) >= 0);
                let fd = libc::open(lock.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
                assert!(fd >= 0);
                assert_eq!(libc::fstat(fd, &mut st), 0);
                assert_eq!(libc::read(fd, buf.as_mut_ptr().cast(), record.len()), record.len() as isize);
                libc::close(fd);
                let moved = libc::renameat2(
                    libc::AT_FDCWD,
                    lock.as_ptr(),
                    libc::AT_FDCWD,
                    aside.as_ptr(),
                    libc::RENAME_NOREPLACE,
                );
                assert_eq!(moved, 0);
                assert_eq!(libc::lstat(aside.as_ptr(), &mut st), 0);
                assert_eq!(libc::unlink(aside.as_ptr()), 0);
                ofd_set(guard_fd, libc::F_UNLCK);
            }
        }
    }

    /// symlink(owner, lock) + unlink(lock).
    pub fn symlink_unlink(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        let target = CString::new(format!("{}", std::process::id())).expect("digits");
        move || {
            // SAFETY: NUL-terminated strings; return values checked.
            unsafe {
                assert_eq!(libc::symlink(target.as_ptr(), p.as_ptr()), 0);
                assert_eq!(libc::unlink(p.as_ptr()), 0);
            }
        }
    }

    /// `F_OFD_SETLK` of the whole file `fd` to `kind` (`F_WRLCK`, `F_UNLCK`),
    /// which must succeed: the floors run alone.
    fn ofd_set(fd: libc::c_int, kind: libc::c_int) {
        // SAFETY: an all-zero flock is a valid value; fields set below.
        let mut range: libc::flock = unsafe { std::mem::zeroed() };
        range.l_type = kind as libc::c_short;
        range.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: a plain fcntl with a valid flock; a bad fd fails the assert.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &range) }, 0);
    }

    /// A record rewritten in place under an open-file-description lock (as
    /// `lease` locks its file), once to take and once to give back: (lock,
    /// pread, pwrite, unlock) x 2 of a lease line, on a descriptor kept open.
    pub fn locked_rewrite_twice(path: &Path) -> impl FnMut() {
        const LINE: usize = lockcore::internals::LEASE_RECORD_LEN;
        let p = c_path(path);
        // SAFETY: NUL-terminated path; the descriptor is leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o600) };
        assert!(fd >= 0);
        let record = [b' '; LINE];
        let mut buf = [0u8; LINE];
        let ofd = move |kind: libc::c_int| ofd_set(fd, kind);
        move || {
            for _ in 0..2 {
                ofd(libc::F_WRLCK);
                // SAFETY: fd is open; the buffers outlive the calls.
                unsafe {
                    assert!(libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) >= 0);
                    assert_eq!(libc::pwrite(fd, record.as_ptr().cast(), record.len(), 0), record.len() as isize);
                }
                ofd(libc::F_UNLCK);
            }
        }
    }

    /// A queue appended to under an open-file-description lock (as
    /// `toplock` keeps its queue), once to ask and once to give back: (lock,
    /// pread of the last line, append of a line, unlock) x 2 on a descriptor
    /// kept open, the file cut back to nothing every 1024 appends (toplock
    /// compacts its queue too, less often).
    pub fn locked_append_twice(path: &Path) -> impl FnMut() {
        const LINE: usize = lockcore::internals::LINE_CAPACITY;
        let p = c_path(path);
        // SAFETY: NUL-terminated path; the descriptor is leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let fd =
            unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o600) };
        assert!(fd >= 0);
        let mut line = [b' '; LINE];
        line[LINE - 1] = b'\n';
        let mut last = [0u8; LINE];
        let mut appended = 0u64;
        let ofd = move |kind: libc::c_int| ofd_set(fd, kind);
        move || {
            for _ in 0..2 {
                ofd(libc::F_WRLCK);
                let end = (appended * LINE as u64).saturating_sub(LINE as u64) as libc::off_t;
                // SAFETY: fd is open; the buffers outlive the calls.
                unsafe {
                    assert!(libc::pread(fd, last.as_mut_ptr().cast(), last.len(), end) >= 0);
                    assert_eq!(libc::write(fd, line.as_ptr().cast(), line.len()), line.len() as isize);
                }
                appended += 1;
                if appended == 1024 {
                    // SAFETY: fd is open for writing.
                    assert_eq!(unsafe { libc::ftruncate(fd, 0) }, 0);
                    appended = 0;
                }
                ofd(libc::F_UNLCK);
            }
        }
    }

    /// flock(LOCK_EX) + flock(LOCK_UN) on a descriptor kept open.
    pub fn flock_on_open_fd(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        // SAFETY: NUL-terminated path; the descriptor is leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o644) };
        assert!(fd >= 0);
        move || {
            // SAFETY: fd is open for the closure's lifetime.
            unsafe {
                assert_eq!(libc::flock(fd, libc::LOCK_EX), 0);
                assert_eq!(libc::flock(fd, libc::LOCK_UN), 0);
            }
        }
    }

    /// What a flock lock with a fence cannot do without: flock(LOCK_EX) on
    /// a descriptor kept open, the last fence read from a file beside it
    /// and the next written there (the holder alone writes it, so no other
    /// lock is taken), flock(LOCK_UN).
    pub fn flock_with_fence(path: &Path) -> impl FnMut() {
        const LINE: usize = lockcore::internals::LEASE_RECORD_LEN;
        let target = c_path(path);
        let mut state_path = path.as_os_str().to_owned();
        state_path.push(".fence");
        let state = c_path(Path::new(&state_path));
        // SAFETY: NUL-terminated paths; the descriptors are leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let (fd, state_fd) = unsafe {
            (
                libc::open(target.as_ptr(), libc::O_RDONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644),
                libc::open(state.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o600),
            )
        };
        assert!(fd >= 0 && state_fd >= 0);
        let line = [b' '; LINE];
        let mut buf = [0u8; LINE];
        move || {
            // SAFETY: both descriptors are open for the closure's lifetime;
            // the buffers outlive the calls.
            unsafe {
                assert_eq!(libc::flock(fd, libc::LOCK_EX), 0);
                assert!(libc::pread(state_fd, buf.as_mut_ptr().cast(), buf.len(), 0) >= 0);
                assert_eq!(libc::pwrite(state_fd, line.as_ptr().cast(), line.len(), 0), line.len() as isize);
                assert_eq!(libc::flock(fd, libc::LOCK_UN), 0);
            }
        }
    }

    /// Which monotonic clock a floor reads.
    #[derive(Clone, Copy)]
    pub enum Clock {
        /// `CLOCK_MONOTONIC`, to the nanosecond.
        Precise,
        /// `CLOCK_MONOTONIC_COARSE`: the time of the last tick (4 ms apart at
        /// HZ=250), read without asking the clock source; an expiry judged by
        /// it needs a tick's margin.
        Coarse,
    }

    /// A lock word in a page shared by the processes of one host, with a
    /// fencing token and an expiry, and nothing else.
    #[repr(C)]
    #[derive(Default)]
    pub struct WordLease {
        /// The holder's pid, 0 when free.
        word: AtomicU32,
        /// Moved on by every release: what a waiter sleeps on.
        releases: AtomicU32,
        /// Waiters asleep on `releases`.
        sleepers: AtomicU32,
        fence: AtomicU64,
        /// When the holder's lease runs out, on the monotonic clock.
        expires: AtomicU64,
    }

    // SAFETY: atomics only, for which zero is a valid value.
    unsafe impl sys::Zeroable for WordLease {}

    /// What a lock word in shared memory that keeps a fencing token and an
    /// expiry cannot avoid (`shm` keeps these and an owner's record beside
    /// them): to take it, the clock read for the expiry, the word taken from
    /// free (a compare-and-swap), the fence moved on and the expiry stored;
    /// to give it back, the clock read again to tell a release from one
    /// that came after the expiry, the word let go (a compare-and-swap that
    /// fails if another took it over), the count of releases moved on and
    /// its sleepers looked at (none here: no system call).
    pub fn word_fence_expiry(_path: &Path, clock: Clock) -> impl FnMut() {
        const TTL_NS: u64 = 30_000_000_000;
        let page = sys::SharedMap::<WordLease>::new();
        let me = std::process::id();
        let read_clock = move || match clock {
            Clock::Precise => sys::mono_ns(),
            Clock::Coarse => sys::coarse_mono_ns(),
        };
        move || {
            let now = read_clock();
            assert!(page.word.compare_exchange(0, me, SeqCst, SeqCst).is_ok(), "the floor runs alone");
            page.fence.fetch_add(1, SeqCst);
            page.expires.store(now + TTL_NS, SeqCst);

            let now = read_clock();
            assert!(now < page.expires.load(SeqCst));
            assert!(page.word.compare_exchange(me, 0, SeqCst, SeqCst).is_ok(), "the floor runs alone");
            page.releases.fetch_add(1, SeqCst);
            if page.sleepers.load(SeqCst) != 0 {
                sys::futex_wake(&page.releases, 1);
            }
        }
    }
}

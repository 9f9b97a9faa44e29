//! No name the library builds a file under can hit another lock, or be
//! squatted to stop it.
//!
//! The library used to build and retire locks under fixed names beside them
//! (`<lock>.new`, `<lock>.tmp`, `<queue>.compact`, `<lock>.old.<nonce>`).
//! Such a name is another lock's name too (a lock called `X.new` beside a
//! lock `X`), a leftover a crash can leave, and a name another user can
//! plant something at. Its helpers are now `<path>.<32 random hex digits>`:
//! * **neighbours**: lock `X`, of each scheme, and locks at `X.new`,
//!   `X.tmp`, `X.compact` and `X.old.<nonce>`, of each scheme (the same and
//!   the others), are independent. While one process holds the neighbours,
//!   two others take `X` in turn (the overlap oracle: never two inside), the
//!   neighbours' files do not change, a third process cannot take a
//!   neighbour, and the holder releases each as still its own; and the
//!   same with the roles swapped.
//! * **squatters**: another user (without root: this user, in a separate
//!   process, which says so) plants files, or directories, at every one of
//!   those fixed names of the lock and of its guard (the nonce read from
//!   the holder's record), and, watching the directory with inotify as any
//!   user who may read it can, at every name of the helper pattern the
//!   moment the library lets go of it, from before the lock's first use and
//!   while the owner acquires, prolongs, inspects and releases it thirty
//!   times (a queue is compacted meanwhile). Every call succeeds, and
//!   nothing planted is removed or changed.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::files::{is_helper_name, tree, tree_changes, Tree};
use common::users::{check_identity, shm_for_everyone, SharedDir, TestUser, TestUsers, UserChild};
use common::*;
use lockcore::{Contention, Error, ProlongOutcome, ReleaseOutcome};

/// The fixed names of the old helpers, as suffixes of a lock's path.
const OLD_SUFFIXES: [&str; 3] = [".new", ".tmp", ".compact"];
/// Rounds of acquisitions in each process.
const ROUNDS: usize = 4;
/// Rounds of the owner's use of a squatted lock: enough for a queue to be
/// compacted.
const SQUATTED_ROUNDS: usize = 30;
const BUDGET: Duration = Duration::from_secs(60);

// Shared-memory slots.
const READY: usize = 0;
const GO: usize = 1;
const RELEASE: usize = 2;
const STOP: usize = 3;
const PLANTED: usize = 4;
/// Per lock `j` of a cycling process: inside, most inside, count.
const ORACLE: usize = 64;
/// Per name planted by a squatter: the base it extends (0: the lock, 1:
/// the guard) and its 32 hex digits as two words.
const NAMES: usize = 1024;
/// The nonce the owner publishes: set (1), then its two words.
const NONCE: usize = 8;
const MAX_NAMES: usize = 2000;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    if std::env::var("LOCKCORE_TEST_AS_UID").is_ok() {
        check_identity();
    }
    let shm = Shm::open(var("SHM").as_ref());
    let specs: Vec<String> = var("SPECS").lines().map(str::to_owned).collect();
    match role {
        "hold" => hold(&shm, &specs),
        "cycle" => cycle(&shm, &specs),
        "squat" => squat(&shm, &specs),
        other => panic!("unknown role {other}"),
    }
}

/// Takes every lock of `specs`, holds them until [`RELEASE`], and releases
/// each, which must still be its own.
fn hold(shm: &Shm, specs: &[String]) {
    let mut locks: Vec<_> = specs.iter().map(|spec| open_lock(spec)).collect();
    for (lock, spec) in locks.iter_mut().zip(specs) {
        lock.try_acquire().unwrap_or_else(|e| panic!("hold {spec}: {e:?}"));
    }
    shm.at(READY).fetch_add(1, SeqCst);
    shm.wait_gate(RELEASE);
    for (lock, spec) in locks.iter_mut().zip(specs) {
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "{spec}: not still its own");
    }
}

/// Takes every lock of `specs` in turn, [`ROUNDS`] times, each time counted
/// in and out of its overlap oracle.
fn cycle(shm: &Shm, specs: &[String]) {
    let mut locks: Vec<_> = specs.iter().map(|spec| open_lock(spec)).collect();
    shm.at(READY).fetch_add(1, SeqCst);
    shm.wait_gate(GO);
    for _ in 0..ROUNDS {
        for (j, (lock, spec)) in locks.iter_mut().zip(specs).enumerate() {
            lock.acquire(Some(BUDGET)).unwrap_or_else(|e| panic!("cycle {spec}: {e:?}"));
            shm.enter(ORACLE + 3 * j, ORACLE + 3 * j + 1);
            std::thread::yield_now();
            shm.at(ORACLE + 3 * j + 2).fetch_add(1, SeqCst);
            shm.leave(ORACLE + 3 * j);
            assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "cycle {spec}");
        }
    }
}

/// The files a lock keeps: its path and its guard.
fn files_of(spec: &str) -> Vec<PathBuf> {
    let lock = open_lock(spec);
    let mut paths = vec![path_of(&lock)];
    if let Some(guard) = lock.guard_path() {
        paths.push(PathBuf::from(std::ffi::OsStr::new(guard.as_cstr().to_str().unwrap())));
    }
    paths
}

fn trees(specs: &[String]) -> Vec<Tree> {
    specs.iter().flat_map(|spec| files_of(spec)).map(|path| tree(&path)).collect()
}

/// A spec of `scheme` whose lock is at `path`: for `lockfile`, whose lock is
/// its target plus an extension, the extension is the path's last suffix.
fn spec_at(scheme: Scheme, base: &Path, suffix: &str) -> String {
    let base = base.to_str().unwrap();
    match scheme {
        Scheme::Lockfile => format!("lockfile:{base}?ttl=1h&ext={suffix}"),
        _ => format!("{}:{base}{suffix}?ttl=1h", scheme.name()),
    }
}

/// One process holds `held` while two others cycle `cycled`; checks the
/// oracle, that `held`'s files stayed the same, that a third process (this
/// one) cannot take them, and that the holder releases them as its own.
fn held_and_cycled(label: &str, held: &[String], cycled: &[String]) -> Vec<String> {
    let dir = TestDir::new(&format!("helper-names-shm-{label}"));
    let shm = Shm::create(&dir.join("shm"));
    let mut children = Children::new();
    let vars = |specs: &[String]| vec![("SHM", shm.path().display().to_string()), ("SPECS", specs.join("\n"))];
    children.push(spawn("hold", &vars(held)));
    wait_until("the holder", || {
        assert!(!children.any_exited(), "{label}: the holder exited early");
        shm.get(READY) == 1
    });
    let before = trees(held);
    let mut cyclers = Children::new();
    for _ in 0..2 {
        cyclers.push(spawn("cycle", &vars(cycled)));
    }
    wait_until("the cyclers", || shm.get(READY) == 3 || cyclers.any_exited());
    shm.open_gate(GO);
    cyclers.expect_success(&format!("{label}: cycling"));
    let mut wrong = Vec::new();
    for (j, spec) in cycled.iter().enumerate() {
        let (most, count) = (shm.get(ORACLE + 3 * j + 1), shm.get(ORACLE + 3 * j + 2));
        if most != 1 || count != 2 * ROUNDS as u64 {
            wrong.push(format!("{spec}: at most {most} inside at once, {count} turns of {}", 2 * ROUNDS));
        }
    }
    for (old, new) in before.iter().zip(trees(held)) {
        if let Some(change) = tree_changes(old, &new) {
            wrong.push(format!("a held lock's files changed while its neighbour was taken: {change}"));
        }
    }
    for spec in held {
        match open_lock(spec).try_acquire() {
            Err(Error::Busy(Contention::Held(_) | Contention::Queued { holder: Some(_), .. })) => {}
            other => wrong.push(format!("{spec}: a third process's try_acquire answered {other:?}")),
        }
    }
    shm.open_gate(RELEASE);
    children.expect_success(&format!("{label}: holding"));
    wrong
}

/// Lock X of `scheme`, in one directory per scheme of its neighbours,
/// both ways round.
fn neighbours_of(scheme: Scheme) -> Vec<String> {
    let dirs: Vec<(Scheme, TestDir)> = file_schemes()
        .iter()
        .map(|&other| (other, TestDir::new(&format!("helper-names-{}-{}", scheme.name(), other.name()))))
        .collect();
    let xs: Vec<String> = dirs.iter().map(|(_, dir)| scheme.spec(dir.path(), "ttl=1h")).collect();
    let mut neighbours = Vec::new();
    for ((other, _), x) in dirs.iter().zip(&xs) {
        let lock = path_of(&open_lock(x));
        let old = ".old.fedcba9876543210fedcba9876543210";
        for suffix in OLD_SUFFIXES.iter().copied().chain([old]) {
            neighbours.push(spec_at(*other, &lock, suffix));
        }
    }
    let label = scheme.name();
    let mut wrong: Vec<String> = held_and_cycled(label, &neighbours, &xs)
        .into_iter()
        .map(|w| format!("X taken, neighbours held: {w}"))
        .collect();
    wrong
        .extend(held_and_cycled(label, &xs, &neighbours).into_iter().map(|w| format!("X held, neighbours taken: {w}")));
    wrong
}

#[test]
fn locks_at_the_old_helper_names_are_independent_of_each_other() {
    // The schemes of X side by side: each is mostly waiting for its turn.
    let failures: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> =
            file_schemes().iter().map(|&scheme| (scheme, s.spawn(move || neighbours_of(scheme)))).collect();
        runs.into_iter()
            .flat_map(|(scheme, run)| {
                let wrong = run.join().unwrap_or_else(|_| vec!["panicked".to_owned()]);
                wrong.into_iter().map(move |w| format!("{} X: {w}", scheme.name()))
            })
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Squatters
// ---------------------------------------------------------------------------

/// What a squatter puts at a name: a file or an empty directory.
fn squat_at(path: &Path, dirs: bool) -> bool {
    if dirs {
        fs::create_dir(path).is_ok()
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"squatted\n"))
            .is_ok()
    }
}

/// Watches the directory of the lock (inotify, as any user who may read it
/// can), plants at each of `names` (the old fixed names), says so; once the
/// owner has published its record's nonce, plants at `<base>.old.<nonce>`
/// for each base (the lock, its guard) and says so again. Meanwhile, and
/// until [`STOP`], plants at every name of the helper pattern of a base as
/// soon as the library has let go of it, and records those names in the
/// shared memory.
fn squat(shm: &Shm, names: &[String]) {
    use std::os::unix::ffi::OsStrExt;
    let dirs = var("KIND") == "dir";
    let bases: Vec<PathBuf> = var("BASES").lines().map(PathBuf::from).collect();
    let dir = bases[0].parent().unwrap().to_owned();
    let base_names: Vec<String> = bases.iter().map(|b| b.file_name().unwrap().to_str().unwrap().to_owned()).collect();
    // SAFETY: plain calls; the path is NUL-terminated.
    let watch = unsafe {
        let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let mask = libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
        assert!(libc::inotify_add_watch(fd, path.as_ptr(), mask) >= 0, "inotify_add_watch");
        fd
    };
    for name in names {
        assert!(squat_at(Path::new(name), dirs), "{name}: could not plant");
    }
    shm.at(READY).store(1, SeqCst);
    let mut planted = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while shm.get(STOP) == 0 {
        if shm.get(READY) == 1 && shm.get(NONCE) != 0 {
            let nonce = (u128::from(shm.get(NONCE + 1)) << 64) | u128::from(shm.get(NONCE + 2));
            for base in &bases {
                let name = with_suffix(base, &format!(".old.{nonce:032x}"));
                assert!(squat_at(&name, dirs), "{}: could not plant", name.display());
            }
            shm.at(READY).store(2, SeqCst);
        }
        let mut poll = libc::pollfd { fd: watch, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a valid buffer of its length.
        let n = unsafe {
            libc::poll(&mut poll, 1, 5);
            libc::read(watch, buf.as_mut_ptr().cast(), buf.len())
        };
        let mut at = 0;
        while n > 0 && at + 16 <= n as usize {
            // struct inotify_event: wd, mask, cookie, len, then the name.
            let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
            let raw = &buf[at + 16..at + 16 + len];
            let name = String::from_utf8_lossy(&raw[..raw.iter().position(|&b| b == 0).unwrap_or(len)]).into_owned();
            at += 16 + len;
            let Some(base) = base_names.iter().position(|base| is_helper_name(&name, base)) else { continue };
            // Taken while the library still has it, the name is refused
            // (EEXIST); once it has gone, the squatter has it.
            if planted < MAX_NAMES && squat_at(&dir.join(&name), dirs) {
                let hex = u128::from_str_radix(&name[name.len() - 32..], 16).unwrap();
                shm.at(NAMES + 3 * planted).store(base as u64, SeqCst);
                shm.at(NAMES + 3 * planted + 1).store((hex >> 64) as u64, SeqCst);
                shm.at(NAMES + 3 * planted + 2).store(hex as u64, SeqCst);
                planted += 1;
                shm.at(PLANTED).store(planted as u64, SeqCst);
            }
        }
    }
}

/// The squatter: another user when this is root, else this user.
enum Squatter {
    Other(UserChild),
    Same(Children),
}

impl Squatter {
    fn exited(&mut self) -> bool {
        match self {
            Squatter::Other(child) => child.has_exited(),
            Squatter::Same(children) => children.any_exited(),
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        match self {
            Squatter::Other(child) => child.finish().map(|_| ()),
            Squatter::Same(children) => {
                children.expect_success("squatter");
                Ok(())
            }
        }
    }
}

/// One round: the squatter (`dirs`: planting directories, else files)
/// watches from before the lock of `scheme` is first used, and the owner
/// uses it over and over.
fn squatted_round(scheme: Scheme, dirs: bool, users: Option<&TestUsers>) -> Result<(), String> {
    let label = format!("helper-names-squat-{}", scheme.name());
    let (shared, test_dir);
    let dir: &Path = match users {
        Some(_) => {
            shared = SharedDir::like_tmp(&label);
            shared.path()
        }
        None => {
            test_dir = TestDir::new(&label);
            test_dir.path()
        }
    };
    let spec = scheme.spec(dir, "ttl=1h");
    let bases = files_of(&spec);
    let mut fixed: Vec<PathBuf> =
        bases.iter().flat_map(|base| OLD_SUFFIXES.iter().map(|suffix| with_suffix(base, suffix))).collect();
    let shm = match users {
        Some(_) => shm_for_everyone(dir),
        None => Shm::create(&dir.join("shm")),
    };
    let vars = [
        ("SHM", shm.path().display().to_string()),
        ("SPECS", fixed.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join("\n")),
        ("BASES", bases.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join("\n")),
        ("KIND", if dirs { "dir" } else { "file" }.to_owned()),
    ];
    let mut squatter = match users {
        Some(users) => Squatter::Other(users.spawn_as(TestUser::Other, 0o022, "squat", &vars)),
        None => {
            let mut children = Children::new();
            children.push(spawn("squat", &vars));
            Squatter::Same(children)
        }
    };
    wait_until("the squatter to plant", || squatter.exited() || shm.get(READY) == 1);

    let mut wrong = Vec::new();
    let mut expect = |what: &str, ok: bool, got: String| {
        if !ok {
            wrong.push(format!("{what}: {got}"));
        }
    };
    // The first use makes the lock's files; its record's nonce is what the
    // old code named a retired lock after.
    let mut lock = open_lock(&spec);
    let acquired = lock.acquire(Some(BUDGET));
    expect("first acquire", acquired.is_ok(), format!("{acquired:?}"));
    if let Some(held) = lock.held() {
        shm.at(NONCE + 1).store((held.nonce.0 >> 64) as u64, SeqCst);
        shm.at(NONCE + 2).store(held.nonce.0 as u64, SeqCst);
        shm.at(NONCE).store(1, SeqCst);
        wait_until("the squatter to plant the nonce's names", || squatter.exited() || shm.get(READY) == 2);
        fixed.extend(bases.iter().map(|base| with_suffix(base, &format!(".old.{:032x}", held.nonce.0))));
    }
    let planted_before: Vec<Tree> = fixed.iter().map(|p| tree(p)).collect();
    let released = lock.release(Duration::ZERO);
    expect("release", released == Ok(ReleaseOutcome::Released), format!("{released:?}"));
    for _ in 0..SQUATTED_ROUNDS {
        let acquired = lock.acquire(Some(BUDGET));
        expect("acquire", acquired.is_ok(), format!("{acquired:?}"));
        let prolonged = lock.prolong(None);
        expect("prolong", prolonged == Ok(ProlongOutcome::Prolonged), format!("{prolonged:?}"));
        let inspected = lock.inspect();
        expect("inspect", inspected.is_ok(), format!("{inspected:?}"));
        let released = lock.release(Duration::ZERO);
        expect("release", released == Ok(ReleaseOutcome::Released), format!("{released:?}"));
    }
    shm.at(STOP).store(1, SeqCst);
    if let Err(why) = squatter.finish() {
        wrong.push(format!("the squatter failed: {why}"));
    }
    for (path, before) in fixed.iter().zip(&planted_before) {
        if before.is_empty() {
            wrong.push(format!("{} was never planted", path.display()));
        } else if let Some(change) = tree_changes(before, &tree(path)) {
            wrong.push(format!("{} was not left alone: {change}", path.display()));
        }
    }
    let squatter_uid = users.map_or_else(|| fs::metadata(dir.join("shm")).unwrap().uid(), |u| u.uid(TestUser::Other));
    let planted = shm.get(PLANTED) as usize;
    for i in 0..planted {
        let base = &bases[shm.get(NAMES + 3 * i) as usize];
        let hex = (u128::from(shm.get(NAMES + 3 * i + 1)) << 64) | u128::from(shm.get(NAMES + 3 * i + 2));
        let path = with_suffix(base, &format!(".{hex:032x}"));
        let intact = match fs::symlink_metadata(&path) {
            Ok(meta) if meta.uid() == squatter_uid => {
                if dirs {
                    meta.is_dir() && fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none())
                } else {
                    meta.is_file() && fs::read(&path).is_ok_and(|bytes| bytes == b"squatted\n")
                }
            }
            _ => false,
        };
        if !intact {
            wrong.push(format!("{}, planted where a helper had been, was removed or changed", path.display()));
        }
    }
    // A lock's first use makes its files (guard, lease, queue) under helper
    // names, and the squatter watched from before it.
    if planted == 0 {
        wrong.push("the squatter saw no helper name go".to_owned());
    }
    eprintln!("{spec}: {planted} name(s) of the helper pattern squatted after the library let go of them");
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[test]
fn squatted_helper_names_stop_nothing_and_are_left_alone() {
    let users = TestUsers::get();
    if users.is_none() {
        eprintln!("not root: the squatter runs as this same user, in a separate process");
    }
    let mut failures = Vec::new();
    for scheme in file_schemes() {
        for dirs in [false, true] {
            if let Err(why) = squatted_round(scheme, dirs, users.as_ref()) {
                failures.push(format!("{} ({}): {why}", scheme.name(), if dirs { "directories" } else { "files" }));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A lock whose name fits the file system but leaves no room for the names
/// made from it (its guard, a helper beside it) is refused as a path too
/// long, saying so, and leaves nothing behind.
#[test]
fn a_name_with_no_room_for_its_helpers_is_refused_as_too_long() {
    each_file_scheme("long-name", |scheme, dir| {
        let name = "n".repeat(250);
        let spec = format!("{}:{}", scheme.name(), dir.join(&name).display());
        let mut lock = open_lock(&spec);
        let refused = lock.try_acquire().expect_err("a name with no room for its helpers");
        assert!(matches!(&refused, Error::Spec(e) if e.kind == lockcore::SpecErrorKind::PathTooLong), "{refused:?}");
        let told = lock.describe(&refused).to_string();
        assert!(told.contains("longer than the file system allows"), "{spec}: {told}");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{spec}: left {left:?}");
    });
}

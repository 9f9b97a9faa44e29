//! Locks shared between real Unix users.
//!
//! On a multi-user host one lock is taken by several accounts (a CGI as
//! `www-data`, a cron job, root's scripts) in a directory the admin shares
//! with a group. What these tests hold the library to: a spec's `mode` says
//! who may take the lock, `0600` its owner only (the default), `0660` the
//! owner's group, `0666` everyone; every file the library creates gets
//! exactly those bits, whatever the creator's umask (a `lockfile` lock file
//! only the read bits, 0440, since LockFile::Simple overwrites a writable
//! one; a `mkdir` lock directory a search bit with each read bit, 0770); and
//! a file that another user could have planted is not trusted.
//!
//! The tests run their lock holders as the real users of
//! [`common::users`]: making those needs root, and without it each test says
//! it was skipped and passes.
//!
//! * `web_and_cron_share_a_group_lock_whatever_their_umasks`: in a directory
//!   of the group (2770), two processes as `lockcore-web` (umask 022) and two
//!   as `lockcore-cron` (umask 077) take a `mode=0660` lock in turn, for
//!   every scheme. No two are ever inside at once, the shared counter is
//!   exact, no child fails, and what the library leaves in the directory is
//!   the group's with exactly the mode's bits.
//! * `files_planted_by_another_user_are_not_trusted`: in a directory like
//!   `/tmp` (1777), `lockcore-other` plants a file where a lock of
//!   `lockcore-web` will keep its state, before its first use, with mode 0666
//!   and a valid content: one that keeps the lock closed for ten years, or
//!   one that lets it be taken. `lockcore-web` opens the lock private
//!   (`mode=0600`) and tries it once: the attempt fails and the planted file
//!   is untouched. Where `fs.protected_regular` is set, the kernel itself
//!   refuses an `O_CREAT` open of another user's file in a sticky
//!   world-writable directory (`EACCES`), before the library sees the file.

mod common;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, SystemTime};

use common::users::{
    check_identity, child_user, file_kind, path_text, shm_for_everyone, SharedDir, TestUser, TestUsers, UserChild,
};
use common::{child_main, snapshot, var, var_usize, wait_until, wall_time, with_suffix, Shm};
use lockcore::guard::GuardState;
use lockcore::{Lock, ReleaseOutcome, Scheme};

/// Acquisitions per holder: enough for every holder to meet the others'
/// files, few enough to take well under a second per scheme.
const CYCLES: usize = 50;
/// Generous: the budget only turns a wedged lock into a failure.
const BUDGET: Duration = Duration::from_secs(60);

// Shared-memory slots.
const GO: usize = 0;
const READY: usize = 1;
const INSIDE: usize = 2;
const MAX_INSIDE: usize = 3;
const OVERLAPS: usize = 4;
const COUNT: usize = 5;
/// A probe's outcome as text: its length, then its bytes, eight a slot.
const OUTCOME: usize = 16;
const OUTCOME_BYTES: usize = 1024;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    check_identity();
    match role {
        "count" => count(),
        "plant" => plant(),
        "probe" => probe(),
        other => panic!("unknown role {other}"),
    }
}

/// Takes the lock `CYCLES` times, and inside adds one to the shared count
/// in two steps, so that an overlap would lose an update.
fn count() {
    let who = child_user();
    let spec = var("SPEC");
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = Lock::open(spec.as_bytes()).unwrap_or_else(|e| panic!("{who}: open {spec}: {e} ({e:?})"));
    shm.at(READY).fetch_add(1, SeqCst);
    shm.wait_gate(GO);
    for i in 0..var_usize("CYCLES") {
        if let Err(e) = lock.acquire(Some(BUDGET)) {
            panic!("{who}: acquisition {i} of {spec}: {e} ({e:?})");
        }
        if shm.enter(INSIDE, MAX_INSIDE) != 0 {
            shm.at(OVERLAPS).fetch_add(1, SeqCst);
        }
        let n = shm.get(COUNT);
        // Gives another process that got in too the moment to read the same n.
        std::thread::yield_now();
        shm.at(COUNT).store(n + 1, SeqCst);
        shm.leave(INSIDE);
        match lock.release(Duration::ZERO) {
            Ok(ReleaseOutcome::Released) => {}
            other => panic!("{who}: release {i} of {spec}: {other:?}"),
        }
    }
}

/// Creates `PATH` with `CONTENT`, mode 0666 whatever the umask.
fn plant() {
    let path = PathBuf::from(var("PATH"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: create {}: {e}", child_user(), path.display()));
    std::io::Write::write_all(&mut file, var("CONTENT").as_bytes()).unwrap();
    file.set_permissions(std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// Opens `SPEC` and tries it once; the outcome goes to the shared memory
/// as text (`open: ...` or `try_acquire: ...`) for the parent to judge.
fn probe() {
    let shm = Shm::open(var("SHM").as_ref());
    let spec = var("SPEC");
    let outcome = match Lock::open(spec.as_bytes()) {
        Err(e) => format!("open: Err({e:?}): {e}"),
        Ok(mut lock) => match lock.try_acquire() {
            Ok(acquired) => format!("try_acquire: Ok({acquired:?})"),
            Err(e) => format!("try_acquire: Err({e:?}): {e}"),
        },
    };
    put_text(&shm, OUTCOME, &outcome);
}

fn put_text(shm: &Shm, at: usize, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(OUTCOME_BYTES)];
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        shm.at(at + 1 + i).store(u64::from_le_bytes(word), SeqCst);
    }
    shm.at(at).store(bytes.len() as u64, SeqCst);
}

fn text_at(shm: &Shm, at: usize) -> String {
    let len = shm.get(at) as usize;
    let bytes: Vec<u8> = (0..len.div_ceil(8)).flat_map(|i| shm.get(at + 1 + i).to_le_bytes()).take(len).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Where each scheme's lock lives in `dir`: the target of its spec, and the
/// path that is the lock.
fn target(scheme: Scheme, dir: &Path) -> PathBuf {
    match scheme {
        // The data file the lock protects; the lock is `board.txt.lock`.
        Scheme::Lockfile => dir.join("board.txt"),
        other => dir.join(format!("board.{}", other.name())),
    }
}

fn lock_path(scheme: Scheme, dir: &Path) -> PathBuf {
    match scheme {
        Scheme::Lockfile => with_suffix(&target(scheme, dir), ".lock"),
        _ => target(scheme, dir),
    }
}

fn spec(scheme: Scheme, dir: &Path, query: &str) -> String {
    format!("{}:{}?{query}", scheme.name(), path_text(&target(scheme, dir)))
}

/// Runs `body` for every case, each apart, and reports every case that
/// failed, not only the first. A case's directories are kept when it fails
/// (they are dropped while panicking).
fn each_case<T>(label: &str, cases: &[(String, T)], mut body: impl FnMut(&T)) {
    let mut failed = Vec::new();
    for (name, case) in cases {
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| body(case))) {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("[{label}] {name} FAILED: {text}\n");
            failed.push(name.as_str());
        }
    }
    assert!(failed.is_empty(), "{label}: failed for {failed:?}");
}

#[test]
fn web_and_cron_share_a_group_lock_whatever_their_umasks() {
    let Some(users) = TestUsers::get() else { return };
    let holders = [(TestUser::Web, 0o022), (TestUser::Cron, 0o077), (TestUser::Web, 0o022), (TestUser::Cron, 0o077)];
    let cases: Vec<(String, Scheme)> = Scheme::ALL.iter().map(|&s| (s.name().to_owned(), s)).collect();
    each_case("group lock", &cases, |&scheme| {
        let dir = SharedDir::for_group(&users, &format!("group-{}", scheme.name()));
        let shm_dir = SharedDir::like_tmp(&format!("group-{}-shm", scheme.name()));
        let shm = shm_for_everyone(shm_dir.path());
        let vars = [
            ("SPEC", spec(scheme, dir.path(), "mode=0660")),
            ("SHM", shm.path().display().to_string()),
            ("CYCLES", CYCLES.to_string()),
        ];
        let mut children: Vec<UserChild> =
            holders.iter().map(|&(user, umask)| users.spawn_as(user, umask, "count", &vars)).collect();
        wait_until("every holder at the gate", || {
            shm.get(READY) == holders.len() as u64 || children.iter_mut().any(UserChild::has_exited)
        });
        shm.open_gate(GO);

        // Every finding at once: which child failed and how, and what that
        // left in the directory, tell more together than the first alone.
        let mut problems: Vec<String> = children.iter_mut().filter_map(|child| child.finish().err()).collect();
        if shm.get(OVERLAPS) != 0 || shm.get(MAX_INSIDE) > 1 {
            problems.push(format!("{} overlaps, at most {} inside at once", shm.get(OVERLAPS), shm.get(MAX_INSIDE)));
        }
        let expected = (holders.len() * CYCLES) as u64;
        if shm.get(COUNT) != expected {
            problems.push(format!("the count is {}, not {expected}", shm.get(COUNT)));
        }
        problems.extend(files_left_wrongly(scheme, &dir, &users));
        assert!(problems.is_empty(), "\n{}\n{}", problems.join("\n"), dir.listing(&users));
    });
}

/// What is wrong with what the library left in a group directory once every
/// holder has released: each entry must be the group's, a file exactly
/// 0660, a directory 0770 (and setgid, as its parent makes it), and nothing
/// of another type; and no lock may remain, only what outlives it.
fn files_left_wrongly(scheme: Scheme, dir: &SharedDir, users: &TestUsers) -> Vec<String> {
    let mut problems = Vec::new();
    let entries: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    if entries.is_empty() {
        // Every scheme keeps a file between acquisitions (a guard, or the
        // lock file itself): without one there was nothing to judge.
        problems.push("the library left no file at all".to_owned());
    }
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.mode() & 0o7777;
        let wrong_mode = match file_kind(&meta) {
            '-' => mode != 0o660,
            'd' => mode != 0o2770,
            _ => true,
        };
        if wrong_mode {
            problems.push(format!("{name}: {} {mode:04o}", file_kind(&meta)));
        }
        if meta.gid() != users.share_gid() {
            problems.push(format!("{name}: group {}, not the shared group", meta.gid()));
        }
    }
    // Released locks of these schemes leave only their guard; the others'
    // lock is the file that keeps their state.
    if matches!(scheme, Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink) {
        let lock = lock_path(scheme, dir.path());
        if std::fs::symlink_metadata(&lock).is_ok() {
            problems.push(format!("the lock {} remains after the last release", lock.display()));
        }
    }
    problems
}

/// What a hostile user plants where a lock will keep its state.
#[derive(Clone, Copy, Debug)]
enum Planted {
    /// A valid state that keeps the lock closed for ten years: trusting it
    /// wedges the lock.
    ClosedForYears,
    /// A valid state with the lock free: trusting it means writing the
    /// lock's state (its fences) into a file its planter can rewrite.
    Open,
}

/// The file of `scheme`'s lock in `dir` that a hostile user can plant
/// before first use: the guard beside the lock, or the file that is the lock.
fn planted_path(scheme: Scheme, dir: &Path) -> PathBuf {
    match scheme {
        Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink => with_suffix(&lock_path(scheme, dir), ".guard"),
        Scheme::Flock | Scheme::Lease | Scheme::Toplock => lock_path(scheme, dir),
    }
}

/// Content that each scheme parses as valid: a guard line (a guard, and the
/// first line of a flock'd file), a free lease line, a queue header.
fn planted_content(scheme: Scheme, planted: Planted) -> String {
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    let closed_until = match planted {
        Planted::ClosedForYears => Some(wall_time(SystemTime::now() + ten_years)),
        Planted::Open => None,
    };
    let not_before = closed_until.map_or(0, |at| at.unix_nanos());
    let fence = 7;
    match scheme {
        Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink | Scheme::Flock => {
            let line =
                GuardState { fence, cooldown_until: closed_until.map(|wall| lockcore::Moment { wall, boot: None }) }
                    .encode();
            String::from_utf8(line.as_bytes().to_vec()).unwrap()
        }
        // lease.rs: a free lease, "0 <not before> <fence> - - 0 -" with
        // tabs, padded with spaces to 255 bytes and a newline.
        Scheme::Lease => format!("{:<255}\n", format!("0\t{not_before}\t{fence}\t-\t-\t0\t-")),
        // toplock.rs: a compacted queue with nothing pending, "H 3 <seq
        // before> <not before> <last end> <time floor> <last fence> -".
        Scheme::Toplock => format!("H 3 {fence} {not_before} 0 0 {fence} -\n"),
    }
}

#[test]
fn files_planted_by_another_user_are_not_trusted() {
    let Some(users) = TestUsers::get() else { return };
    let mut cases = Vec::new();
    for &scheme in Scheme::ALL {
        for planted in [Planted::ClosedForYears, Planted::Open] {
            cases.push((format!("{} {planted:?}", scheme.name()), (scheme, planted)));
        }
    }
    each_case("planted", &cases, |&(scheme, planted)| {
        let dir = SharedDir::like_tmp(&format!("planted-{}", scheme.name()));
        let shm_dir = SharedDir::like_tmp(&format!("planted-{}-shm", scheme.name()));
        let shm = shm_for_everyone(shm_dir.path());
        let path = planted_path(scheme, dir.path());
        let vars = [("PATH", path.display().to_string()), ("CONTENT", planted_content(scheme, planted))];
        users.spawn_as(TestUser::Other, 0o022, "plant", &vars).finish().unwrap_or_else(|e| panic!("{e}"));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (users.uid(TestUser::Other), 0o666), "the planted file");
        let before = snapshot(&path);
        let before_text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();

        let vars = [("SPEC", spec(scheme, dir.path(), "mode=0600")), ("SHM", shm.path().display().to_string())];
        users.spawn_as(TestUser::Web, 0o022, "probe", &vars).finish().unwrap_or_else(|e| panic!("{e}"));
        let outcome = text_at(&shm, OUTCOME);
        // Shown with the failures of other cases, for the whole picture.
        eprintln!("{} {planted:?}: {outcome}", scheme.name());
        let listing = dir.listing(&users);
        let after_text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(
            snapshot(&path) == before,
            "{} was changed from {before_text:?} to {after_text:?}; probe: {outcome}\n{listing}",
            path.display()
        );
        assert!(outcome.starts_with("try_acquire: Err("), "probe: {outcome}\n{listing}");
        // TODO(untrusted): the error must be `lockcore::Error::Untrusted(..)`
        // (Debug text `try_acquire: Err(Untrusted(`), its message naming the
        // planted file, its owner lockcore-other and its mode 0666.
    });
}

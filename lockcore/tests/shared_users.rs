//! Locks shared between real Unix users.
//!
//! On a multi-user host one lock is taken by several accounts (a CGI as
//! `www-data`, a cron job, root's scripts) in a directory the admin shares
//! with a group. What these tests hold the library to: a spec's `mode` says
//! who may take the lock, `0600` its owner only (the default), `0660` the
//! owner's group, `0666` everyone; every file the library creates gets
//! exactly those bits, whatever the creator's umask (a record nobody
//! rewrites in place, `lockfile`'s lock file or the `owner` inside a `mkdir`
//! lock, only the read bits, 0440, since LockFile::Simple overwrites a
//! writable one; a `mkdir` lock directory a search bit with each read bit,
//! 0770); and a file that another user could have planted is not trusted.
//!
//! The tests run their lock holders as the real users of
//! [`common::users`]: making those needs root, and without it each test says
//! it was skipped and passes.
//!
//! * `web_and_cron_share_a_group_lock_whatever_their_umasks`: in a directory
//!   of the group (2770), two processes as `lockcore-web` (umask 022) and two
//!   as `lockcore-cron` (umask 077) take a `mode=0660` lock in turn, for
//!   every scheme. No two are ever inside at once, the shared counter is
//!   exact, no child fails, each holder finds the lock it holds made with
//!   exactly the mode's bits and the group, and once the last has released,
//!   what the library leaves in the directory is the files that keep the
//!   lock's state, the group's and exactly 0660: no lock, no directory.
//!   Again in a group directory whose admin forgot the setgid bit (0770):
//!   what a member makes there gets the directory's group all the same, not
//!   its maker's own, which would shut the other members out.
//!   A `shm` lock cannot be shared (`common::private_only`: every process
//!   maps its file, and another who may write it may shorten it under
//!   them): its `mode=0660` spec is refused for its `mode`, and nothing is
//!   made in the directory.
//! * `files_planted_by_another_user_are_not_trusted`: in a directory like
//!   `/tmp` (1777), `lockcore-other` plants a file where a private lock of
//!   `lockcore-web` will keep its state (its guard, or the lock file itself
//!   for a scheme without one), before its first use, with mode 0666 and a
//!   valid content made by the library's own encoders (for `shm`, a whole
//!   file of its format, made by the library): one that keeps
//!   the lock closed for ten years, or one that lets it be taken.
//!   `lockcore-web` opens the lock private (`mode=0600`) and tries it once:
//!   the attempt fails with `ErrorKind::Untrusted`, naming the planted file,
//!   its owner and its mode, and the planted file is untouched. (The library
//!   opens an existing state file without `O_CREAT`, so the kernel's
//!   `fs.protected_regular` never answers for it.)
//! * `users_of_a_lock_for_everyone_take_turns_in_the_order_they_came`: in a
//!   directory like `/tmp`, root holds a `mode=0666` lock while waiters as
//!   `lockcore-web`, `lockcore-cron` and `lockcore-other` (each umask
//!   different) queue behind it one after another, each started once the
//!   one before it shows in the lock's queue. Once root lets go they get
//!   the lock in exactly that order, one at a time, every scheme whose
//!   locks others may share. The queue is a System V segment that the
//!   first waiter made and the others attached, named by a `0666` file.
//! * `a_dead_holder_of_another_user_in_a_sticky_directory`: there only a
//!   file's owner may remove it, so root's dead holder of a `mode=0666`
//!   lock is taken over by `lockcore-web` on `lease`, `flock` and
//!   `toplock`, and refused with a permission error naming root on
//!   `lockfile`, `mkdir` and `symlink`, as docs/SPECS.md says.

mod common;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::users::{
    check_identity, child_user, file_kind, shm_for_everyone, SharedDir, TestUser, TestUsers, UserChild,
};
use common::{child_main, file_schemes, open_shared, shm_lock, snapshot, var, var_usize, wait_until, SchemeFiles, Shm};
use lockcore::internals::{GuardState, Header, LeaseState, Line};
use lockcore::{BootTime, Error, FileRole, Lock, Moment, Owner, Problem, ReleaseOutcome, Scheme};

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
/// Slot `TURNS + k`: the number of the waiter that had the lock k-th.
const TURNS: usize = OUTCOME + OUTCOME_BYTES / 8;

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
        "turn" => turn(),
        other => panic!("unknown role {other}"),
    }
}

/// Takes the lock `CYCLES` times, and inside adds one to the shared count
/// in two steps, so that an overlap would lose an update. On its first
/// acquisition it checks what it holds: made with exactly the spec's bits,
/// and the group's.
fn count() {
    let who = child_user();
    let spec = var("SPEC");
    let share_gid: u32 = var("SHARE_GID").parse().unwrap();
    let setgid = var("SETGID") == "1";
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = Lock::open(spec.as_bytes()).unwrap_or_else(|e| panic!("{who}: open {spec}: {e} ({e:?})"));
    let scheme = lock.spec().scheme;
    let lock_path = common::path_of(&lock);
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
        let held_wrongly = if i == 0 { held_files_wrongly(scheme, &lock_path, share_gid, setgid) } else { Vec::new() };
        shm.leave(INSIDE);
        assert!(held_wrongly.is_empty(), "{who}: the lock it holds: {}", held_wrongly.join("; "));
        match lock.release(Duration::ZERO) {
            Ok(ReleaseOutcome::Released) => {}
            other => panic!("{who}: release {i} of {spec}: {other:?}"),
        }
    }
}

/// Waits for the lock, once, and inside notes its `NUMBER` as the next
/// turn taken.
fn turn() {
    let who = child_user();
    let spec = var("SPEC");
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = Lock::open(spec.as_bytes()).unwrap_or_else(|e| panic!("{who}: open {spec}: {e} ({e:?})"));
    lock.acquire(Some(BUDGET)).unwrap_or_else(|e| panic!("{who}: acquire {spec}: {e} ({e:?})"));
    if shm.enter(INSIDE, MAX_INSIDE) != 0 {
        shm.at(OVERLAPS).fetch_add(1, SeqCst);
    }
    let k = shm.at(COUNT).fetch_add(1, SeqCst) as usize;
    shm.at(TURNS + k).store(var_usize("NUMBER") as u64, SeqCst);
    std::thread::sleep(Duration::from_millis(2));
    shm.leave(INSIDE);
    match lock.release(Duration::ZERO) {
        Ok(ReleaseOutcome::Released) => {}
        other => panic!("{who}: release of {spec}: {other:?}"),
    }
}

/// Creates `PATH` with the bytes `CONTENT` spells in hex (a state file may
/// hold NULs, which no environment variable can), mode 0666 whatever the
/// umask.
fn plant() {
    let path = PathBuf::from(var("PATH"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: create {}: {e}", child_user(), path.display()));
    std::io::Write::write_all(&mut file, &from_hex(&var("CONTENT"))).unwrap();
    file.set_permissions(std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// Opens `SPEC` and tries it once; the outcome goes to the shared memory
/// as text for the parent to judge: `open: ...`, `try_acquire: Ok(...)`, or
/// `try_acquire: Err(<kind>) file=<role> problem=<problem> owner=<uid>
/// mode=<octal>: <the error as Lock::describe gives it, path first>`.
fn probe() {
    let shm = Shm::open(var("SHM").as_ref());
    let spec = var("SPEC");
    let outcome = match Lock::open(spec.as_bytes()) {
        Err(e) => format!("open: Err({e:?}): {e}"),
        Ok(mut lock) => match lock.try_acquire() {
            Ok(acquired) => format!("try_acquire: Ok({acquired:?})"),
            Err(e) => {
                let facts = match e {
                    Error::File(f) => format!(
                        " file={:?} problem={:?} owner={} mode={}",
                        f.file,
                        f.problem,
                        f.owner_uid.map_or("-".to_owned(), |uid| uid.to_string()),
                        f.mode.map_or("-".to_owned(), |mode| format!("{mode:04o}"))
                    ),
                    _ => String::new(),
                };
                format!("try_acquire: Err({:?}){facts}: {}", e.kind(), lock.describe(&e))
            }
        },
    };
    put_text(&shm, OUTCOME, &outcome);
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
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
    // The directory as the set-up says (2770), and without its setgid bit,
    // where each member's files would get that member's own group.
    let cases: Vec<(String, (Scheme, bool))> = file_schemes()
        .iter()
        .flat_map(|&s| [(s.name().to_owned(), (s, true)), (format!("{} without setgid", s.name()), (s, false))])
        .collect();
    each_case("group lock", &cases, |&(scheme, setgid)| {
        let label = format!("group-{}{}", scheme.name(), if setgid { "" } else { "-nosetgid" });
        let dir = if setgid {
            SharedDir::for_group(&users, &label)
        } else {
            SharedDir::for_group_without_setgid(&users, &label)
        };
        let spec = scheme.spec(dir.path(), "mode=0660");
        if open_shared(scheme, &spec).is_none() {
            let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert!(made.is_empty(), "{spec}: refused, but made {made:?}");
            return;
        }
        let shm_dir = SharedDir::like_tmp(&format!("group-{}-shm", scheme.name()));
        let shm = shm_for_everyone(shm_dir.path());
        let vars = [
            ("SPEC", spec),
            ("SHM", shm.path().display().to_string()),
            ("CYCLES", CYCLES.to_string()),
            ("SHARE_GID", users.share_gid().to_string()),
            ("SETGID", u8::from(setgid).to_string()),
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
        problems.extend(files_left_wrongly(&dir, &users));
        assert!(problems.is_empty(), "\n{}\n{}", problems.join("\n"), dir.listing(&users));
    });
}

#[test]
fn users_of_a_lock_for_everyone_take_turns_in_the_order_they_came() {
    let Some(users) = TestUsers::get() else { return };
    let waiters = [
        (TestUser::Web, 0o022),
        (TestUser::Cron, 0o077),
        (TestUser::Other, 0o002),
        (TestUser::Cron, 0o077),
        (TestUser::Web, 0o022),
    ];
    let cases: Vec<(String, Scheme)> = file_schemes().iter().map(|&s| (s.name().to_owned(), s)).collect();
    each_case("turns across users", &cases, |&scheme| {
        let dir = SharedDir::like_tmp(&format!("turns-{}", scheme.name()));
        let spec = scheme.spec(dir.path(), "mode=0666&ttl=1h");
        let Some(mut holder) = open_shared(scheme, &spec) else { return };
        let mut observer = open_shared(scheme, &spec).unwrap();
        let shm = shm_for_everyone(dir.path());
        holder.try_acquire().unwrap_or_else(|e| panic!("root takes {spec}: {e}"));
        let mut children: Vec<UserChild> = Vec::new();
        for (number, &(user, umask)) in (1..).zip(&waiters) {
            let vars =
                [("SPEC", spec.clone()), ("SHM", shm.path().display().to_string()), ("NUMBER", number.to_string())];
            children.push(users.spawn_as(user, umask, "turn", &vars));
            wait_until("the waiter to show in the queue", || {
                observer.inspect().is_ok_and(|i| i.queue_length.unwrap_or(0) > number)
                    || children.iter_mut().any(UserChild::has_exited)
            });
        }
        let mut turnstile = common::path_of(&holder).into_os_string();
        turnstile.push(".turnstile");
        let turnstile = std::fs::metadata(&turnstile).expect("the queue's file");
        assert_eq!(turnstile.mode() & 0o7777, 0o666, "{spec}: the queue's file has the lock's mode");
        assert_eq!(turnstile.uid(), users.uid(TestUser::Web), "{spec}: made by the first to wait");
        holder.release(Duration::ZERO).unwrap();
        let problems: Vec<String> = children.iter_mut().filter_map(|child| child.finish().err()).collect();
        assert!(problems.is_empty(), "{spec}:\n{}", problems.join("\n"));
        let turns: Vec<u64> = (0..shm.get(COUNT) as usize).map(|k| shm.get(TURNS + k)).collect();
        assert_eq!(turns, (1..=waiters.len() as u64).collect::<Vec<_>>(), "{spec}: the order of the turns");
        assert_eq!(shm.get(OVERLAPS), 0, "{spec}");
    });
}

/// In a sticky directory (like `/tmp`) only a file's owner, or root, may
/// remove or rename it. A `mode=0666` lock that root left to a process that
/// has died is taken over by another user where nothing must be removed
/// (`lease`, `flock`, `toplock` rewrite their files in place), and refused
/// with a permission error naming root where the holder's name must go
/// (`lockfile`, `mkdir`, `symlink`): what the docs tell users to expect.
#[test]
fn a_dead_holder_of_another_user_in_a_sticky_directory() {
    let Some(users) = TestUsers::get() else { return };
    let cases: Vec<(String, Scheme)> = file_schemes().iter().map(|&s| (s.name().to_owned(), s)).collect();
    each_case("sticky directory", &cases, |&scheme| {
        let dir = SharedDir::like_tmp(&format!("sticky-{}", scheme.name()));
        let spec = scheme.spec(dir.path(), "mode=0666&ttl=1h");
        if open_shared(scheme, &spec).is_none() {
            return;
        }
        common::leave_lock(&spec, common::owner_as(common::dead_pid(), 1));
        let shm = shm_for_everyone(dir.path());
        let vars = [("SPEC", spec.clone()), ("SHM", shm.path().display().to_string())];
        users.spawn_as(TestUser::Web, 0o022, "probe", &vars).finish().unwrap_or_else(|e| panic!("{e}"));
        let outcome = text_at(&shm, OUTCOME);
        match scheme {
            Scheme::Lockfile | Scheme::Mkdir | Scheme::Symlink => {
                assert!(outcome.contains("Err(PermissionDenied)") && outcome.contains("owner=0 "), "{spec}: {outcome}")
            }
            _ => assert!(outcome.starts_with("try_acquire: Ok("), "{spec}: {outcome}"),
        }
    });
}

/// What is wrong with the lock at `lock` while it is held, in a directory of
/// the group made setgid (2770) for a `mode=0660` lock, as the briefing of
/// `mode` lists it: everything has the group; a record nobody rewrites in
/// place (`lockfile`'s lock file, `mkdir`'s `owner`) exactly 0440; a file
/// every holder writes (the `lease`, the `toplock` queue, the target `flock`
/// made) exactly 0660; a `mkdir` lock directory 0770, a search bit with
/// each read bit. A directory made in a setgid directory inherits the
/// setgid bit, as it must for what is made inside it to get the group: for
/// it, exactly the mode asked for is 0770 plus that inherited bit, 2770.
/// The symlink's own bits mean nothing; its group does where the directory
/// gives it (setgid). Without that bit a link keeps its maker's group: it
/// is never opened, so its group shuts nobody out, and the library leaves
/// it be.
fn held_files_wrongly(scheme: Scheme, lock: &Path, share_gid: u32, setgid: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check = |path: &Path, kind: char, mode: Option<u32>| match std::fs::symlink_metadata(path) {
        Err(e) => problems.push(format!("{}: {e}", path.display())),
        Ok(meta) => {
            let (found_kind, found_mode) = (file_kind(&meta), meta.mode() & 0o7777);
            if found_kind != kind || mode.is_some_and(|mode| mode != found_mode) {
                problems.push(format!(
                    "{}: {found_kind} {found_mode:04o}, not {kind} {}",
                    path.display(),
                    mode.map_or("(any mode)".to_owned(), |mode| format!("{mode:04o}"))
                ));
            }
            if meta.gid() != share_gid && (setgid || kind != 'l') {
                problems.push(format!("{}: group {}, not the shared group", path.display(), meta.gid()));
            }
        }
    };
    match scheme {
        Scheme::Lockfile => check(lock, '-', Some(0o440)),
        Scheme::Mkdir => {
            check(lock, 'd', Some(0o2770));
            check(&lock.join("owner"), '-', Some(0o440));
            let inside: Vec<_> =
                std::fs::read_dir(lock).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
            if inside.len() != 1 {
                problems.push(format!("{}: holds {inside:?}, not only its owner record", lock.display()));
            }
        }
        Scheme::Flock | Scheme::Lease | Scheme::Toplock => check(lock, '-', Some(0o660)),
        Scheme::Symlink => check(lock, 'l', None),
        other => common::unknown_format(other),
    }
    problems
}

/// What is wrong with what the library left in a group directory once every
/// holder has released: no lock may remain, only the files that keep the
/// lock's state between acquisitions (a guard, the lease, the queue, and
/// the target a `flock` lock made), each the group's and exactly 0660. A
/// directory left behind (a `mkdir` lock, or a temporary one) is an error, and so
/// is a symlink (a `symlink` lock) or a read-only record (a `lockfile` lock).
fn files_left_wrongly(dir: &SharedDir, users: &TestUsers) -> Vec<String> {
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
        let (kind, mode) = (file_kind(&meta), meta.mode() & 0o7777);
        match kind {
            '-' if mode == 0o660 => {}
            '-' => problems.push(format!("{name}: mode {mode:04o}, not the 0660 asked for (a record left behind?)")),
            'd' => problems.push(format!("{name}: a directory left behind after the last release ({mode:04o})")),
            other => problems.push(format!("{name}: {other} {mode:04o} left behind after the last release")),
        }
        if meta.gid() != users.share_gid() {
            problems.push(format!("{name}: group {}, not the shared group", meta.gid()));
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

/// Content that the state file of each scheme parses as valid, made by the
/// library's own encoders: a guard line (a guard, flock's guard included),
/// a free lease (alone, or in the active slot of a `shm` file), a queue
/// header with nothing pending, all on this boot.
fn planted_content(scheme: Scheme, planted: Planted) -> Vec<u8> {
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    let boot = Owner::current().unwrap().boot;
    let closed_until = match planted {
        Planted::ClosedForYears => Some(Moment::now(boot).saturating_add(ten_years)),
        Planted::Open => None,
    };
    let fence = 7;
    let free = LeaseState::Free { not_before: closed_until, fence };
    match scheme {
        Scheme::Lease => free.encode().as_bytes().to_vec(),
        Scheme::Shm => shm_lock::with_state(&shm_lock::new_file(), &free),
        Scheme::Toplock => {
            let now = BootTime::now().nanos();
            let not_before = closed_until.map_or(0, |_| now.saturating_add(ten_years.as_nanos() as i64));
            let kernel_boot = lockcore::BootId::kernel();
            let header = Header {
                kernel_boot,
                boot,
                not_before,
                last_end: now,
                floor: now,
                last_fence: fence,
                head_since: None,
            };
            let mut line = Line::Header(header).encode().as_bytes().to_vec();
            line.push(b'\n');
            line
        }
        _ => GuardState { fence, cooldown_until: closed_until }.encode().as_bytes().to_vec(),
    }
}

#[test]
fn files_planted_by_another_user_are_not_trusted() {
    let Some(users) = TestUsers::get() else { return };
    let mut cases = Vec::new();
    for scheme in file_schemes() {
        for planted in [Planted::ClosedForYears, Planted::Open] {
            cases.push((format!("{} {planted:?}", scheme.name()), (scheme, planted)));
        }
    }
    each_case("planted", &cases, |&(scheme, planted)| {
        let dir = SharedDir::like_tmp(&format!("planted-{}", scheme.name()));
        let shm_dir = SharedDir::like_tmp(&format!("planted-{}-shm", scheme.name()));
        let shm = shm_for_everyone(shm_dir.path());
        // Where the lock keeps its state, as lockcore names it: its guard,
        // or the lock file itself for a scheme without one.
        let path = scheme.state_path(dir.path());
        let role = if scheme.guard_path(dir.path()).is_some() { FileRole::Guard } else { FileRole::Lock };
        let vars = [("PATH", path.display().to_string()), ("CONTENT", to_hex(&planted_content(scheme, planted)))];
        users.spawn_as(TestUser::Other, 0o022, "plant", &vars).finish().unwrap_or_else(|e| panic!("{e}"));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (users.uid(TestUser::Other), 0o666), "the planted file");
        let before = snapshot(&path);
        let before_text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();

        let vars = [("SPEC", scheme.spec(dir.path(), "mode=0600")), ("SHM", shm.path().display().to_string())];
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
        // Refused as untrusted before it was read: the file that may be
        // written by others, named by its role and its path, its owner
        // lockcore-other and its mode 0666. (Whether because others may
        // write it or because it is not lockcore-web's: both hold here, and
        // the writable bits are judged first.)
        let other = users.uid(TestUser::Other);
        let expected = format!(
            "try_acquire: Err(Untrusted) file={role:?} problem={:?} owner={other} mode=0666: {}: ",
            Problem::Untrusted(lockcore::Untrusted::WritableByOthers),
            path.display()
        );
        assert!(outcome.starts_with(&expected), "probe: {outcome}\nexpected it to start: {expected}\n{listing}");
        assert!(
            outcome.ends_with(&format!("[owner uid {other}, mode 0666]")),
            "the message does not name the owner and mode: {outcome}\n{listing}"
        );
        // Nothing else was made there: no lock, no temporary file, no guard. At
        // most the lock's own path as an empty file of lockcore-web's with
        // the spec's bits, which is what `flock` makes of a missing target
        // (as flock(1) does) before it turns to its guard.
        let lock = scheme.lock_path(dir.path());
        for entry in std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()) {
            let meta = std::fs::symlink_metadata(&entry).unwrap();
            let made_target = entry == lock
                && meta.is_file()
                && meta.len() == 0
                && (meta.uid(), meta.mode() & 0o7777) == (users.uid(TestUser::Web), 0o600);
            assert!(entry == path || made_target, "{} was made beside the planted file\n{listing}", entry.display());
        }
    });
}

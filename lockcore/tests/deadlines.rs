//! Every call returns by its deadline, even while another process holds the
//! file that orders the lock's changes (its guard; the lease or queue file
//! itself) for as long as it likes: a process stopped inside a guard
//! section, or another user who can open that file for writing.
//!
//! The flooding process is a child that holds that file with an exclusive
//! open-file-description lock (`fcntl(F_OFD_SETLK)`, as the library takes
//! it), or, for `flock`, also holds `flock(2)` on the target (as `flock(1)`
//! would). A `shm` lock takes no file lock: its changes are ordered by the
//! section word in its mapped file, which the flooder holds instead
//! (`common::shm_lock::SectionWord`). What the library promises, and these
//! tests hold it to:
//! * `try_acquire` waits at most 50 ms for that file and answers `Busy`
//!   (checked here against a generous bound, well under 2 s);
//! * `acquire(budget)` answers `Timeout` by its budget (checked with a
//!   second of slack: before, an attempt could take 250 ms to 10 s), and
//!   never answers `Ok` once the budget is spent, also when the flood ends
//!   right after it; a flood that starts while it waits does not stretch it
//!   either, nor does giving up a `toplock` queue place;
//! * release, prolong, inspect and break wait at most 2 s and then answer
//!   `Busy(GuardHeld)`, having changed nothing; the lock is still held and
//!   releasable once the flood stops. These take their 2 s each, so the
//!   schemes run side by side.
//!
//! And what may not wedge a lock at all: a process that may only read the
//! guard. Opened read-only it cannot take an exclusive OFD lock (`EBADF`),
//! and `flock(2)` on it, which it can take, no longer excludes anybody.
//! As root, another user whom the lock's mode would let read its files
//! but not write them tries the one lock such a reader can take, a shared
//! OFD lock, which would keep every writer out: such a mode must be
//! refused, or the attempt harmless. With the default private mode that
//! user cannot open the guard at all.

mod common;

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::files::{ofd_lock, tree, tree_changes, try_flock};
use common::shm_lock::{self, SectionWord};
use common::users::{check_identity, shm_for_everyone, SharedDir, TestUser, TestUsers};
use common::*;
use lockcore::wait::{Sleep, Wake, WakeSource};
use lockcore::{Contention, Error, Lock, MonoTime, ReleaseOutcome, SpecErrorKind, CHANGE_PATIENCE};

/// "Well under 2 s": a bound on a call that promises 50 ms.
const TRY_BOUND: Duration = Duration::from_millis(1500);
/// Slack past a deadline, for a loaded machine.
const SLACK: Duration = Duration::from_secs(1);
/// How long after an acquisition's deadline a flood ends, in the tests
/// where it ends by itself.
const FLOOD_OVERRUN: Duration = Duration::from_millis(300);

// Shared-memory slots.
/// The flooder or reader holds what it was asked to hold.
const READY: usize = 0;
/// Gate: stop holding and exit.
const STOP: usize = 1;
/// Monotonic nanoseconds of the deadline a flood outlasts by [`FLOOD_OVERRUN`].
const DEADLINE: usize = 2;
/// Gate: start flooding (for a flood that starts during a call).
const START: usize = 3;
/// The reader's errno of its open (0: opened).
const OPEN_ERRNO: usize = 8;
/// The reader's errno of an exclusive OFD lock on its read-only descriptor.
const WRLCK_ERRNO: usize = 9;
/// Whether the reader took `flock(2)` on the file (1) or not (2).
const FLOCKED: usize = 10;
/// Whether the reader took a shared OFD lock (1) or not (2).
const RDLCKED: usize = 11;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    if std::env::var("LOCKCORE_TEST_AS_UID").is_ok() {
        check_identity();
    }
    let shm = Shm::open(var("SHM").as_ref());
    match role {
        "flood" => flood(&shm, Path::new(&var("PATH")), &var("HOW"), &var("UNTIL")),
        "reader" => reader(&shm, Path::new(&var("PATH")), var("SHARED") == "1"),
        other => panic!("unknown role {other}"),
    }
}

fn mono_ns() -> u64 {
    MonoTime::now().since(MonoTime::EPOCH).as_nanos() as u64
}

/// Holds `path` (`how`: `ofd`, an exclusive OFD lock; `flock`, `flock(2)`;
/// `section`, the section word of a `shm` lock's mapping)
/// until the gate [`STOP`] opens (`until`: `gate`) or [`FLOOD_OVERRUN`]
/// after the deadline in [`DEADLINE`] (`until`: `deadline`). With `until`
/// `deadline-after-start`, waits for the gate [`START`] first.
fn flood(shm: &Shm, path: &Path, how: &str, until: &str) {
    if until == "deadline-after-start" {
        shm.wait_gate(START);
    }
    if how == "section" {
        let word = SectionWord::of(path);
        word.take();
        shm.at(READY).store(1, SeqCst);
        hold_until(shm, until);
        word.release();
        return;
    }
    let file = match how {
        "ofd" => OpenOptions::new().read(true).write(true).open(path),
        "flock" => File::open(path),
        other => panic!("no flood {other}"),
    }
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // The library's own processes hold it for microseconds at a time.
    let give_up = Instant::now() + PATIENCE;
    loop {
        let taken = match how {
            "ofd" => ofd_lock(&file, true).unwrap(),
            _ => try_flock(&file, libc::LOCK_EX).unwrap(),
        };
        if taken {
            break;
        }
        assert!(Instant::now() < give_up, "never got {}", path.display());
        std::thread::sleep(Duration::from_micros(200));
    }
    shm.at(READY).store(1, SeqCst);
    hold_until(shm, until);
    drop(file);
}

/// Waits until the gate [`STOP`] opens (`until`: `gate`), or until
/// [`FLOOD_OVERRUN`] after the deadline in [`DEADLINE`].
fn hold_until(shm: &Shm, until: &str) {
    if until == "gate" {
        shm.wait_gate(STOP);
    } else {
        let give_up = Instant::now() + PATIENCE;
        while shm.get(DEADLINE) == 0 || mono_ns() < shm.get(DEADLINE) + FLOOD_OVERRUN.as_nanos() as u64 {
            assert!(Instant::now() < give_up, "no deadline came");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// How a flooder holds what orders `scheme`'s changes.
fn guard_kind(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Shm => "section",
        _ => "ofd",
    }
}

fn errno_of(result: std::io::Result<bool>) -> u64 {
    match result {
        Ok(true) => 0,
        Ok(false) => libc::EAGAIN as u64,
        Err(e) => e.raw_os_error().unwrap_or(-1) as u64,
    }
}

/// Opens `path` read-only and tries what a reader can hold on it: an
/// exclusive OFD lock (refused), `flock(2)`, and with `shared` a shared OFD
/// lock; records each result, then holds what it got until [`STOP`].
fn reader(shm: &Shm, path: &Path, shared: bool) {
    match File::open(path) {
        Err(e) => shm.at(OPEN_ERRNO).store(e.raw_os_error().unwrap_or(-1) as u64, SeqCst),
        Ok(file) => {
            shm.at(WRLCK_ERRNO).store(errno_of(ofd_lock(&file, true)), SeqCst);
            let flocked = try_flock(&file, libc::LOCK_EX).unwrap_or(false);
            shm.at(FLOCKED).store(if flocked { 1 } else { 2 }, SeqCst);
            if shared {
                let rdlocked = ofd_lock(&file, false).unwrap_or(false);
                shm.at(RDLCKED).store(if rdlocked { 1 } else { 2 }, SeqCst);
            }
            shm.at(READY).store(1, SeqCst);
            shm.wait_gate(STOP);
            drop(file);
            return;
        }
    }
    shm.at(READY).store(1, SeqCst);
    shm.wait_gate(STOP);
}

/// Starts a flooder of `path` and waits until it holds it.
fn start_flood(children: &mut Children, shm: &Shm, path: &Path, how: &str, until: &str) {
    shm.at(READY).store(0, SeqCst);
    children.push(spawn(
        "flood",
        &[
            ("SHM", shm.path().display().to_string()),
            ("PATH", path.display().to_string()),
            ("HOW", how.to_owned()),
            ("UNTIL", until.to_owned()),
        ],
    ));
    if until != "deadline-after-start" {
        wait_for_ready(children, shm);
    }
}

fn wait_for_ready(children: &mut Children, shm: &Shm) {
    wait_until("the flooder to hold its file", || {
        assert!(!children.any_exited(), "the flooder exited early");
        shm.get(READY) == 1
    });
}

/// Runs `body` for every scheme at once, each on a thread of its own and in
/// a directory of its own (most of these tests wait out deadlines), and
/// reports every scheme that failed.
fn each_scheme_at_once(label: &str, body: fn(Scheme, &TestDir)) {
    let failed: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = file_schemes()
            .iter()
            .map(|&scheme| {
                let run = s.spawn(move || body(scheme, &TestDir::new(&format!("{label}-{}", scheme.name()))));
                (scheme, run)
            })
            .collect();
        runs.into_iter()
            .filter_map(|(scheme, run)| {
                run.join().err().map(|payload| {
                    let text = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    format!("{}: {text}", scheme.name())
                })
            })
            .collect()
    });
    assert!(failed.is_empty(), "{label}: failed for\n{}", failed.join("\n"));
}

/// The lock of `scheme` in `dir`, with its files made (taken and released
/// once), so that a flooder has something to hold.
fn made_lock(scheme: Scheme, dir: &Path, query: &str) -> (String, Lock) {
    let spec = scheme.spec(dir, query);
    let mut lock = open_lock(&spec);
    lock.try_acquire().unwrap_or_else(|e| panic!("{spec}: {e:?}"));
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    (spec, lock)
}

fn timed<T>(call: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = call();
    (out, start.elapsed())
}

/// What `try_acquire` and `acquire` answer while `flood` holds its file,
/// and how fast. `busy` is the contention they must report.
fn check_acquisitions(lock: &mut Lock, busy: fn(&Contention) -> bool, what: &str) {
    let (result, took) = timed(|| lock.try_acquire());
    assert!(matches!(&result, Err(Error::Busy(c)) if busy(c)), "{what}: try_acquire answered {result:?}");
    assert!(took < TRY_BOUND, "{what}: try_acquire took {took:?}");
    for budget in [Duration::ZERO, Duration::from_millis(100)] {
        let (result, took) = timed(|| lock.acquire(Some(budget)));
        assert!(
            matches!(&result, Err(Error::Timeout(c)) if busy(c)),
            "{what}: acquire({budget:?}) answered {result:?}"
        );
        assert!(took < budget + SLACK, "{what}: acquire({budget:?}) took {took:?}");
    }
}

#[test]
fn acquisitions_answer_by_their_deadlines_while_the_guard_is_flooded() {
    each_scheme_at_once("deadlines-acquire", |scheme, dir| {
        let (_, mut lock) = made_lock(scheme, dir.path(), "ttl=1h");
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        start_flood(&mut children, &shm, &scheme.state_path(dir.path()), guard_kind(scheme), "gate");
        check_acquisitions(&mut lock, |c| *c == Contention::GuardHeld, "guard flooded");
        shm.open_gate(STOP);
        children.expect_success("flooder");
        if scheme == Scheme::Flock {
            // flock's lock is flock(2) on the target, which flock(1) (or any
            // process that can open the target) holds as long as it likes:
            // that is a holder, answered by the same deadlines.
            shm.at(STOP).store(0, SeqCst);
            start_flood(&mut children, &shm, &scheme.lock_path(dir.path()), "flock", "gate");
            check_acquisitions(&mut lock, |c| matches!(c, Contention::Held(_)), "target flocked");
            shm.open_gate(STOP);
            children.expect_success("flooder");
        }
        lock.try_acquire().expect("free once the flood stopped");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// The flood ends [`FLOOD_OVERRUN`] after the acquisition's deadline: an
/// `Ok` could only come from a wait that outlived the deadline.
#[test]
fn no_acquisition_answers_ok_after_its_deadline() {
    each_scheme_at_once("deadlines-never-late", |scheme, dir| {
        let (_, mut lock) = made_lock(scheme, dir.path(), "ttl=1h");
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        start_flood(&mut children, &shm, &scheme.state_path(dir.path()), guard_kind(scheme), "deadline");
        let budget = Duration::from_millis(100);
        shm.at(DEADLINE).store(mono_ns() + budget.as_nanos() as u64, SeqCst);
        let (result, took) = timed(|| lock.acquire(Some(budget)));
        assert!(
            matches!(result, Err(Error::Timeout(Contention::GuardHeld))),
            "acquire({budget:?}) answered {result:?} after {took:?}, the flood ending {FLOOD_OVERRUN:?} after its deadline"
        );
        assert!(took < budget + SLACK, "acquire({budget:?}) took {took:?}");
        children.expect_success("flooder");
        lock.try_acquire().expect("free once the flood stopped");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// A wake source that starts the flood the first time the waiter sleeps:
/// after one attempt found the lock held, and before the next.
struct FloodOnFirstWait<'a> {
    shm: &'a Shm,
    started: bool,
}

impl WakeSource for FloodOnFirstWait<'_> {
    fn wait(&mut self, timeout: Duration) -> Wake {
        if !self.started {
            self.started = true;
            self.shm.open_gate(START);
            let give_up = Instant::now() + PATIENCE;
            while self.shm.get(READY) == 0 && Instant::now() < give_up {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Sleep.wait(timeout)
    }
}

/// The lock is held; an `acquire` waits for it; after its first attempt
/// the guard is flooded until [`FLOOD_OVERRUN`] after its deadline.
#[test]
fn a_flood_that_starts_while_an_acquire_waits_does_not_stretch_it() {
    each_scheme_at_once("deadlines-flood-later", |scheme, dir| {
        // The wake source's first wait starts the flood: with `fair=0`, so
        // that the waiter makes its attempts (and its waits) at once, not
        // after its turn in the line.
        let (spec, mut holder) = made_lock(scheme, dir.path(), "ttl=1h&fair=0");
        holder.try_acquire().unwrap();
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        start_flood(&mut children, &shm, &scheme.state_path(dir.path()), guard_kind(scheme), "deadline-after-start");
        let mut waiter = open_lock(&spec);
        let budget = Duration::from_millis(300);
        let mut wake = FloodOnFirstWait { shm: &shm, started: false };
        shm.at(DEADLINE).store(mono_ns() + budget.as_nanos() as u64, SeqCst);
        let (result, took) = timed(|| waiter.acquire_with(Some(budget), &mut wake, None));
        assert!(wake.started && shm.get(READY) == 1, "the flood never started");
        assert!(matches!(result, Err(Error::Timeout(_))), "acquire({budget:?}) answered {result:?}");
        // toplock keeps a place in its queue between attempts, and gives it
        // up when the wait ends, by the same deadline: a queue still held
        // then keeps the place for the handle's next try (or its drop).
        assert!(took < budget + SLACK, "acquire({budget:?}) took {took:?}");
        children.expect_success("flooder");
        assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        // The waiter's queue place, if it could not be given up in time,
        // is passed over once it has stood at the head as long as the waiter
        // said it would wait.
        waiter.acquire(Some(budget + SLACK)).expect("free for the waiter, past its old request");
        assert_eq!(waiter.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

/// Release, prolong, inspect and break under a flood, one scheme: `Err`
/// says what went wrong.
fn changes_under_a_flood(scheme: Scheme) -> Result<(), String> {
    let dir = TestDir::new(&format!("deadlines-changes-{}", scheme.name()));
    let locks = dir.join("locks");
    std::fs::create_dir(&locks).unwrap();
    let (spec, mut holder) = made_lock(scheme, &locks, "ttl=1h");
    holder.try_acquire().unwrap();
    let shm = Shm::create(&dir.join("shm"));
    let mut children = Children::new();
    start_flood(&mut children, &shm, &scheme.state_path(&locks), guard_kind(scheme), "gate");
    let before = tree(&locks);

    let answers = std::thread::scope(|s| {
        let inspect = s.spawn(|| timed(|| open_lock(&spec).inspect().map(|_| ())));
        let break_lock = s.spawn(|| timed(|| open_lock(&spec).break_lock().map(|_| ())));
        let release = timed(|| holder.release(Duration::ZERO).map(|_| ()));
        let prolong = timed(|| holder.prolong(None).map(|_| ()));
        [
            ("release", release),
            ("prolong", prolong),
            ("inspect", inspect.join().unwrap()),
            ("break", break_lock.join().unwrap()),
        ]
    });
    let after = tree(&locks);
    // A `shm` lock's waiters mark its section word (a sleeping bit) through
    // the mapping, which the kernel dates as a write: the lease beside it is
    // what must not change.
    let (before, after) = (shm_lock::lease_only(before), shm_lock::lease_only(after));
    shm.open_gate(STOP);
    children.expect_success("flooder");

    let mut wrong = Vec::new();
    for (what, (result, took)) in answers {
        if what == "break" && !scheme.breaks_stale_locks() {
            // Nobody breaks a flock lock; the answer needs no guard.
            if !matches!(result, Err(Error::Unsupported(_))) {
                wrong.push(format!("break answered {result:?}"));
            }
            continue;
        }
        if result != Err(Error::Busy(Contention::GuardHeld)) {
            wrong.push(format!("{what} answered {result:?}"));
        }
        if took < CHANGE_PATIENCE || took > CHANGE_PATIENCE + Duration::from_secs(5) {
            wrong.push(format!("{what} answered after {took:?}, not after its patience of {CHANGE_PATIENCE:?}"));
        }
    }
    if let Some(change) = tree_changes(&before, &after) {
        wrong.push(format!("the lock's files changed under the flood: {change}"));
    }
    // toplock names its holder behind the queue place its try put in.
    match open_lock(&spec).try_acquire() {
        Err(Error::Busy(Contention::Held(_) | Contention::Queued { holder: Some(_), .. })) => {}
        other => wrong.push(format!("after the flood, another handle's try_acquire answered {other:?}: not held")),
    }
    match holder.release(Duration::ZERO) {
        Ok(ReleaseOutcome::Released) => {}
        other => wrong.push(format!("after the flood, the holder's release answered {other:?}")),
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[test]
fn changes_under_a_flood_answer_busy_after_their_patience_and_change_nothing() {
    // Two calls of 2 s each on the holder's handle, and the schemes side by side.
    let outcomes: Vec<(Scheme, Result<(), String>)> = std::thread::scope(|s| {
        let runs: Vec<_> =
            file_schemes().iter().map(|&scheme| (scheme, s.spawn(move || changes_under_a_flood(scheme)))).collect();
        runs.into_iter()
            .map(|(scheme, run)| (scheme, run.join().unwrap_or_else(|_| Err("panicked".to_owned()))))
            .collect()
    });
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(scheme, r)| r.as_ref().err().map(|why| format!("{}: {why}", scheme.name())))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A reader started on `path` as this user; returns once it holds what it could get.
fn start_reader(children: &mut Children, shm: &Shm, path: &Path) {
    children.push(spawn(
        "reader",
        &[("SHM", shm.path().display().to_string()), ("PATH", path.display().to_string()), ("SHARED", "0".to_owned())],
    ));
    wait_for_ready(children, shm);
}

#[test]
fn flock_on_a_guard_opened_read_only_no_longer_wedges_the_lock() {
    each_scheme_at_once("deadlines-reader", |scheme, dir| {
        let (_, mut lock) = made_lock(scheme, dir.path(), "ttl=1h");
        let shm = Shm::create(&dir.join("shm"));
        let mut children = Children::new();
        start_reader(&mut children, &shm, &scheme.state_path(dir.path()));
        assert_eq!(shm.get(OPEN_ERRNO), 0, "the owner's own process opens its guard");
        assert_eq!(shm.get(WRLCK_ERRNO), libc::EBADF as u64, "an exclusive OFD lock needs the file open for writing");
        assert_eq!(shm.get(FLOCKED), 1, "flock(2) is anyone's who can open the file");
        // (For `flock`, whose state is in its guard, the same holds; flock(2)
        // on its target is its lock, as in the flood tests above.)
        lock.try_acquire().expect("flock(2) on the guard keeps nobody out");
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        shm.open_gate(STOP);
        children.expect_success("reader");
    });
}

#[test]
fn another_user_who_may_read_the_guard_cannot_wedge_the_lock() {
    let Some(users) = TestUsers::get() else { return };
    let mut failures = Vec::new();
    for scheme in file_schemes() {
        // A mode that lets everyone read the lock's files but only the owner
        // write them; and the default, private mode.
        for mode in ["0644", "0604", "0600"] {
            let dir = SharedDir::like_tmp(&format!("deadlines-other-reader-{}", scheme.name()));
            let spec = scheme.spec(dir.path(), &format!("ttl=1h&mode={mode}"));
            let mut lock = match Lock::open(spec.as_bytes()) {
                Err(Error::Spec(e)) if e.kind == SpecErrorKind::BadValue && e.key() == b"mode" => continue,
                Err(e) => panic!("{spec}: {e:?}"),
                Ok(lock) => lock,
            };
            lock.try_acquire().unwrap_or_else(|e| panic!("{spec}: {e:?}"));
            assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
            let shm = shm_for_everyone(dir.path());
            let state = scheme.state_path(dir.path());
            let vars = [
                ("SHM", shm.path().display().to_string()),
                ("PATH", state.display().to_string()),
                ("SHARED", "1".to_owned()),
            ];
            let mut reader = users.spawn_as(TestUser::Other, 0o022, "reader", &vars);
            wait_until("the reader to hold what it could", || reader.has_exited() || shm.get(READY) == 1);
            let taken = lock.try_acquire();
            if taken.is_ok() {
                assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
            }
            shm.open_gate(STOP);
            if let Err(why) = reader.finish() {
                failures.push(format!("{spec}: {why}"));
                continue;
            }
            let opened = shm.get(OPEN_ERRNO) == 0;
            if mode == "0600" && opened {
                failures.push(format!("{spec}: another user opened the private guard {}", state.display()));
            }
            if opened && shm.get(WRLCK_ERRNO) != libc::EBADF as u64 {
                failures.push(format!("{spec}: a reader's exclusive OFD lock answered errno {}", shm.get(WRLCK_ERRNO)));
            }
            if let Err(e) = taken {
                let how = if shm.get(RDLCKED) == 1 { "a shared OFD lock" } else { "what it could take" };
                failures.push(format!(
                    "{spec}: {} (mode {mode}), holding {how} on {}, wedged the lock: try_acquire answered {e:?}",
                    TestUser::Other.name(),
                    state.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A child of this process that holds a read lease (`fcntl(F_SETLEASE)`,
/// which the file's owner may take) on `path` until dropped, when it is
/// killed: every open of the file for writing by another process would
/// wait for the lease to go. The child ignores the SIGIO that tells it to
/// give the lease up, as a hostile owner would.
struct LeaseHolder(libc::pid_t);

impl LeaseHolder {
    fn start(path: &Path) -> LeaseHolder {
        let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let mut ready = [0; 2];
        // SAFETY: a pipe into an array of two descriptors.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only async-signal-safe calls (signal,
        // close, open, fcntl, nanosleep, write, pause) on memory made before
        // the fork.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::signal(libc::SIGIO, libc::SIG_IGN);
                // A read lease is refused while any process has the file open
                // for writing: first the copies this child got of the test's
                // descriptors; then, a few times over, the moment another
                // test's child holds one between its fork and its exec.
                for fd in 3..4096 {
                    if fd != ready[1] {
                        libc::close(fd);
                    }
                }
                let mut leased = false;
                for _ in 0..200 {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                    leased = fd >= 0 && libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) == 0;
                    if leased {
                        break;
                    }
                    libc::close(fd);
                    let pause = libc::timespec { tv_sec: 0, tv_nsec: 5_000_000 };
                    libc::nanosleep(&pause, std::ptr::null_mut());
                }
                let said = [u8::from(leased)];
                libc::write(ready[1], said.as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
        let holder = LeaseHolder(pid);
        let mut said = [0u8];
        // SAFETY: the read end of a pipe the child writes one byte to (other
        // threads' children may hold its write end too: the byte comes all
        // the same).
        let read = unsafe { libc::read(ready[0], said.as_mut_ptr().cast(), 1) };
        // SAFETY: descriptors this process uses no more.
        unsafe {
            libc::close(ready[0]);
            libc::close(ready[1]);
        }
        assert_eq!((read, said[0]), (1, 1), "the child could not take a read lease on {path:?}");
        holder
    }
}

impl Drop for LeaseHolder {
    fn drop(&mut self) {
        // SAFETY: the child this value made; its death lets the lease go.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// A lease that another process holds on the file that orders the lock's
/// changes makes the lock busy, as a guard held does, never an I/O error:
/// tries and acquisitions answer by their deadlines, and once the lease is
/// gone the lock is taken.
#[test]
fn a_lease_on_the_lock_s_file_is_waited_for_as_a_guard_held() {
    each_scheme_at_once("deadlines-lease", |scheme, dir| {
        let (spec, lock) = made_lock(scheme, dir.path(), "ttl=1h");
        // Its descriptors closed: a read lease needs no writer to be open.
        drop(lock);
        let holder = LeaseHolder::start(&scheme.state_path(dir.path()));
        let mut lock = open_lock(&spec);
        check_acquisitions(&mut lock, |c| *c == Contention::Leased, "leased");
        drop(holder);
        lock.try_acquire().unwrap_or_else(|e| panic!("once the lease is gone: {e:?}"));
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

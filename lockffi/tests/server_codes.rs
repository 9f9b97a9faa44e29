//! The codes the calls answer on a lock kept by a server (the `redis`
//! scheme), driven through their usual outcomes and misuses as
//! `tests/header.rs` drives the file schemes, and through what only a
//! server does: stop answering (SIGSTOP), die, want a password, refuse
//! writes, run a script too long, keep another program's keys under the
//! lock's names, or talk nonsense. Each code must be one the function's
//! "Returns:" list in `include/lockffi.h` names, and the one the case
//! expects; a server that does not answer must not hold up a call past its
//! deadline.
//!
//! Each test starts the servers it needs ([`testkit`]), and says it is
//! skipped where no `redis-server` can run (under `CI` that fails: CI
//! installs it).

mod returns;

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CString};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use lockffi::lock_result::{self, *};
use lockffi::*;
use testkit::Redis;

/// How far past its deadline a call may return on a loaded machine: a
/// guard against hangs, not a measure of speed.
const SLACK: Duration = Duration::from_secs(1);

/// What `lock_try_acquire` promises: an answer within a tenth of a second.
const TRY_DEADLINE: Duration = Duration::from_millis(100);

/// What the calls that change or read a lock promise: at most 2 seconds.
const CHANGE_DEADLINE: Duration = Duration::from_secs(2);

/// Longer than the library takes any duration (100 years).
const TOO_LONG_MS: u64 = 101 * 365 * 86_400_000;

/// The answers of one test, judged against the header's lists; the
/// problems are reported together at the end.
struct Codes {
    lists: BTreeMap<String, Vec<lock_result>>,
    problems: Vec<String>,
}

impl Codes {
    fn new() -> Codes {
        Codes { lists: returns::returns_lists(), problems: Vec::new() }
    }

    /// `function` answered `answered`: it must be in its list, and one of `expected`.
    fn check(&mut self, function: &str, answered: lock_result, expected: &[lock_result]) {
        let list = self.lists.get(function).unwrap_or_else(|| panic!("the header declares no {function}"));
        if !list.contains(&answered) {
            self.problems.push(format!("{function} answered {answered:?}, which its Returns: list lacks"));
        }
        if !expected.contains(&answered) {
            self.problems.push(format!("{function} answered {answered:?} ({}), not one of {expected:?}", message()));
        }
    }

    /// [`check`](Self::check) of a call that must return by `deadline`.
    fn by(&mut self, function: &str, deadline: Duration, call: impl FnOnce() -> lock_result, expected: &[lock_result]) {
        let start = Instant::now();
        let answered = call();
        let took = start.elapsed();
        if took > deadline + SLACK {
            self.problems
                .push(format!("{function} answered {answered:?} after {took:?}; its deadline is {deadline:?}"));
        }
        self.check(function, answered, expected);
    }

    fn assert_none(self) {
        assert!(self.problems.is_empty(), "{}", self.problems.join("\n"));
    }
}

/// This thread's last message.
fn message() -> String {
    let mut buf = [0 as c_char; 1024];
    // SAFETY: a buffer of its length.
    unsafe { lock_last_error_message(buf.as_mut_ptr(), buf.len()) };
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `lock_open(spec)`, checked; the handle.
fn open(codes: &mut Codes, spec: &str) -> *mut lock_handle {
    let spec = CString::new(spec).expect("no NUL in a spec");
    let mut handle = null_mut();
    // SAFETY: a NUL-terminated spec and a valid output.
    let answered = unsafe { lock_open(spec.as_ptr(), &mut handle) };
    codes.check("lock_open", answered, &[LOCK_OK]);
    assert!(!handle.is_null(), "lock_open answered {answered:?}");
    handle
}

/// A private server, or `None` (the test says it is skipped) without one.
fn server(extra: &[&str]) -> Option<Redis> {
    if !testkit::redis_available() {
        eprintln!("skipped: redis-server is not installed");
        return None;
    }
    Some(Redis::start(extra))
}

/// Waits until the server has let the expired lock of `observer` go.
fn wait_until_free(observer: *mut lock_handle) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
        // SAFETY: a live handle and a valid output.
        let answered = unsafe { lock_inspect(observer, info.as_mut_ptr()) };
        assert_eq!(answered, LOCK_OK, "{}", message());
        // SAFETY: written on LOCK_OK.
        if !unsafe { info.assume_init() }.held {
            return;
        }
        assert!(Instant::now() < deadline, "the server never let the expired lock go");
        std::thread::sleep(Duration::from_millis(10));
    }
}

unsafe extern "C" fn cancel_at_once(_: *mut c_void) -> bool {
    true
}

unsafe extern "C" fn ignore_warning(_: *mut c_void, _: u64) {}

/// Every call, on a server that serves: its outcomes (a lock taken, busy,
/// timed out, cancelled, prolonged, expired, broken, lost) and its misuses
/// (NULL, a lock not held or held already, durations out of range, a path
/// or a commit that a lock without files has not, a watchdog without TTL).
#[test]
fn the_usual_outcomes_and_misuses_on_a_server_lock_are_in_the_lists() {
    let Some(redis) = server(&[]) else { return };
    let mut codes = Codes::new();
    let mut spare = null_mut();
    for (spec, code) in [
        ("redis:/tmp/x", LOCK_ERR_SPEC_BAD_URL),
        ("redis://127.0.0.1", LOCK_ERR_SPEC_BAD_URL),
        ("redis://127.0.0.1/%7Dname", LOCK_ERR_SPEC_BAD_URL),
        ("redis://127.0.0.1/name?ext=.lock", LOCK_ERR_SPEC_UNKNOWN_KEY),
        ("redis://127.0.0.1/name?ttl=soon", LOCK_ERR_SPEC_BAD_VALUE),
        ("redis://127.0.0.1/name?ttl=1s&hold=1s", LOCK_ERR_SPEC_DUPLICATE_KEY),
    ] {
        let spec = CString::new(spec).expect("no NUL");
        // SAFETY: a NUL-terminated spec and a valid output.
        codes.check("lock_open", unsafe { lock_open(spec.as_ptr(), &mut spare) }, &[code]);
    }

    let holder = open(&mut codes, &redis.spec("usual", "ttl=30s"));
    let other = open(&mut codes, &redis.spec("usual", "ttl=30s"));
    let forever = open(&mut codes, &redis.spec("usual", ""));
    let brief = open(&mut codes, &redis.spec("usual", "ttl=100ms"));
    let dir = std::env::temp_dir().join(format!("lockffi-server-codes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("make a directory");
    let temp = CString::new(dir.join("data.new").to_str().expect("UTF-8")).expect("no NUL");
    let target = CString::new(dir.join("data").to_str().expect("UTF-8")).expect("no NUL");
    std::fs::write(dir.join("data.new"), b"new").expect("write the temp file");
    let mut path = [0 as c_char; 256];
    let mut path_len = 0usize;
    let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
    let mut was_held = false;
    // SAFETY: live handles from lock_open, valid buffers and outputs; NULL
    // only where the calls refuse it.
    unsafe {
        codes.check("lock_release", lock_release(holder, 0), &[LOCK_ERR_NOT_HELD]);
        codes.check("lock_prolong", lock_prolong(holder, 0), &[LOCK_ERR_NOT_HELD]);
        codes.check("lock_autorenew", lock_autorenew(holder, None, null_mut()), &[LOCK_ERR_NOT_HELD]);
        codes.check("lock_commit", lock_commit(holder, temp.as_ptr(), target.as_ptr()), &[LOCK_ERR_UNSUPPORTED]);
        codes.check("lock_inspect", lock_inspect(holder, info.as_mut_ptr()), &[LOCK_OK]);
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_OK]);
        codes.check("lock_try_acquire", lock_try_acquire(other, null_mut()), &[LOCK_BUSY]);
        codes.by("lock_acquire", Duration::from_millis(300), || lock_acquire(other, 300, null_mut()), &[LOCK_TIMEOUT]);
        codes.check("lock_acquire", lock_acquire(holder, 300, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
        // No file, so no path: whatever the buffer, after its NULL check.
        codes.check(
            "lock_path",
            lock_path(holder, path.as_mut_ptr(), path.len(), &mut path_len),
            &[LOCK_ERR_UNSUPPORTED],
        );
        codes.check("lock_path", lock_path(holder, path.as_mut_ptr(), 0, &mut path_len), &[LOCK_ERR_UNSUPPORTED]);
        codes.check("lock_path", lock_path(holder, null_mut(), 0, null_mut()), &[LOCK_ERR_UNSUPPORTED]);
        codes.check("lock_path", lock_path(holder, null_mut(), 1, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_inspect", lock_inspect(holder, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_inspect", lock_inspect(other, info.as_mut_ptr()), &[LOCK_OK]);
        codes.check("lock_release", lock_release(holder, TOO_LONG_MS), &[LOCK_ERR_INVALID_ARGUMENT]);
        codes.check("lock_prolong", lock_prolong(holder, TOO_LONG_MS), &[LOCK_ERR_INVALID_ARGUMENT]);
        codes.check("lock_prolong", lock_prolong(holder, 0), &[LOCK_OK]);
        codes.check("lock_commit", lock_commit(holder, temp.as_ptr(), target.as_ptr()), &[LOCK_ERR_UNSUPPORTED]);
        codes.check("lock_commit", lock_commit(holder, null(), target.as_ptr()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_autorenew", lock_autorenew(holder, None, null_mut()), &[LOCK_OK]);
        codes.check("lock_autorenew_stop", lock_autorenew_stop(holder), &[LOCK_OK]);
        codes.check("lock_autorenew_stop", lock_autorenew_stop(null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_break", lock_break(other, &mut was_held), &[LOCK_OK]);
        assert!(was_held, "the break found no lock");
        codes.check("lock_prolong", lock_prolong(holder, 0), &[LOCK_LOST]);
        codes.check("lock_release", lock_release(holder, 0), &[LOCK_ERR_NOT_HELD]);

        // A cooldown, then a wait given up by its caller.
        codes.check("lock_acquire", lock_acquire(forever, 1000, null_mut()), &[LOCK_OK]);
        codes.check("lock_autorenew", lock_autorenew(forever, None, null_mut()), &[LOCK_ERR_UNSUPPORTED]);
        codes.check("lock_release", lock_release(forever, 60_000), &[LOCK_OK]);
        codes.check("lock_try_acquire", lock_try_acquire(other, null_mut()), &[LOCK_BUSY]);
        codes.check("lock_set_cancel", lock_set_cancel(other, Some(cancel_at_once), null_mut()), &[LOCK_OK]);
        codes.check("lock_acquire", lock_acquire(other, 1000, null_mut()), &[LOCK_CANCELLED]);
        codes.check("lock_set_cancel", lock_set_cancel(other, None, null_mut()), &[LOCK_OK]);
        codes.check("lock_set_cancel", lock_set_cancel(null_mut(), None, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_set_warning", lock_set_warning(other, Some(ignore_warning), null_mut()), &[LOCK_OK]);
        codes.check("lock_set_warning", lock_set_warning(other, None, null_mut()), &[LOCK_OK]);
        codes.check("lock_set_warning", lock_set_warning(null_mut(), None, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        codes.check("lock_break", lock_break(other, null_mut()), &[LOCK_OK]);

        // Past a short TTL that the server let run out, nobody taking the
        // lock: prolong holds it again, release and close let it go.
        codes.check("lock_try_acquire", lock_try_acquire(brief, null_mut()), &[LOCK_OK]);
        wait_until_free(other);
        codes.check("lock_prolong", lock_prolong(brief, 100), &[LOCK_EXPIRED]);
        wait_until_free(other);
        codes.check("lock_release", lock_release(brief, 0), &[LOCK_EXPIRED]);
        codes.check("lock_try_acquire", lock_try_acquire(brief, null_mut()), &[LOCK_OK]);
        wait_until_free(other);
        codes.check("lock_close", lock_close(brief), &[LOCK_EXPIRED]);

        // Taken by another once the server let it run out: lost.
        let brief = open(&mut codes, &redis.spec("usual", "ttl=100ms"));
        codes.check("lock_try_acquire", lock_try_acquire(brief, null_mut()), &[LOCK_OK]);
        wait_until_free(other);
        codes.check("lock_try_acquire", lock_try_acquire(other, null_mut()), &[LOCK_OK]);
        codes.check("lock_release", lock_release(brief, 0), &[LOCK_LOST]);
        codes.check("lock_try_acquire", lock_try_acquire(brief, null_mut()), &[LOCK_BUSY]);
        codes.check("lock_release", lock_release(other, 0), &[LOCK_OK]);
        codes.check("lock_try_acquire", lock_try_acquire(brief, null_mut()), &[LOCK_OK]);
        wait_until_free(other);
        codes.check("lock_try_acquire", lock_try_acquire(other, null_mut()), &[LOCK_OK]);
        codes.check("lock_close", lock_close(brief), &[LOCK_LOST]);
        codes.check("lock_close", lock_close(other), &[LOCK_OK]);

        codes.check("lock_close", lock_close(forever), &[LOCK_OK]);
        codes.check("lock_close", lock_close(holder), &[LOCK_OK]);
        codes.check("lock_close", lock_close(null_mut()), &[LOCK_OK]);
    }
    std::fs::remove_dir_all(&dir).expect("remove the test's directory");
    codes.assert_none();
}

/// A stopped server (SIGSTOP) answers nothing: every call that asks it
/// answers LOCK_ERR_SERVER_NO_ANSWER by its deadline, and a release or
/// prolong that got no answer leaves the handle holding its lock. Once the
/// server runs again, what was queued in its buffers while it was stopped
/// took nothing for nobody.
#[test]
fn a_stopped_server_answers_no_answer_by_each_deadline() {
    let Some(redis) = server(&[]) else { return };
    let mut codes = Codes::new();
    // The calls that got no answer are still in the server's buffers when
    // it resumes, and it runs them then: the breaks of `other` and `fresh`
    // are kept off the holder's lock.
    let holder = open(&mut codes, &redis.spec("stopped", "ttl=1h"));
    let closer = open(&mut codes, &redis.spec("stopped-closed", "ttl=1h"));
    let other = open(&mut codes, &redis.spec("stopped-other", "ttl=1h"));
    let fresh = open(&mut codes, &redis.spec("stopped-other", "ttl=1h"));
    let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
    // SAFETY: live handles from lock_open and valid outputs.
    unsafe {
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_OK]);
        codes.check("lock_acquire", lock_acquire(closer, 1000, null_mut()), &[LOCK_OK]);
        codes.check("lock_inspect", lock_inspect(other, info.as_mut_ptr()), &[LOCK_OK]);
        redis.pause();
        // On a connection made before, and on one made now (the socket
        // accepts it; the server never reads it).
        for handle in [other, fresh] {
            codes.by(
                "lock_try_acquire",
                TRY_DEADLINE,
                || lock_try_acquire(handle, null_mut()),
                &[LOCK_ERR_SERVER_NO_ANSWER],
            );
            let budget = Duration::from_millis(600);
            codes.by("lock_acquire", budget, || lock_acquire(handle, 600, null_mut()), &[LOCK_ERR_SERVER_NO_ANSWER]);
            codes.by(
                "lock_inspect",
                CHANGE_DEADLINE,
                || lock_inspect(handle, info.as_mut_ptr()),
                &[LOCK_ERR_SERVER_NO_ANSWER],
            );
            codes.by("lock_break", CHANGE_DEADLINE, || lock_break(handle, null_mut()), &[LOCK_ERR_SERVER_NO_ANSWER]);
        }
        codes.by("lock_release", CHANGE_DEADLINE, || lock_release(holder, 0), &[LOCK_ERR_SERVER_NO_ANSWER]);
        codes.check("lock_acquire", lock_acquire(holder, 100, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
        codes.by("lock_prolong", CHANGE_DEADLINE, || lock_prolong(holder, 0), &[LOCK_ERR_SERVER_NO_ANSWER]);
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
        // lock_close frees the handle whatever the release answered.
        codes.by("lock_close", CHANGE_DEADLINE, || lock_close(closer), &[LOCK_ERR_SERVER_NO_ANSWER]);
        redis.resume();
        // Still the holder's to release. The server ran the release and
        // the prolong queued in its buffers, in an order of its own: the
        // lock is there still (held again by the prolong), or gone.
        codes.check("lock_release", lock_release(holder, 0), &[LOCK_OK, LOCK_EXPIRED]);
        // The acquisitions queued there came too late to take anything.
        codes.check("lock_inspect", lock_inspect(other, info.as_mut_ptr()), &[LOCK_OK]);
        let seen = info.assume_init();
        if seen.held {
            codes.problems.push(format!(
                "after the server resumed, the lock is held (pid {}, fence {}) though no handle took it",
                seen.owner_pid, seen.fence
            ));
        }
        codes.check("lock_try_acquire", lock_try_acquire(fresh, null_mut()), &[LOCK_OK]);
        codes.check("lock_close", lock_close(fresh), &[LOCK_OK]);
        codes.check("lock_close", lock_close(other), &[LOCK_OK]);
        codes.check("lock_close", lock_close(holder), &[LOCK_OK]);
    }
    codes.assert_none();
}

/// A killed server: every call that asks it answers
/// LOCK_ERR_SERVER_UNREACHABLE, also on a connection made before it died,
/// and a release that could not reach it leaves the lock held.
#[test]
fn a_killed_server_is_unreachable() {
    let Some(mut redis) = server(&[]) else { return };
    let mut codes = Codes::new();
    let holder = open(&mut codes, &redis.spec("killed", "ttl=1h"));
    let other = open(&mut codes, &redis.spec("killed", "ttl=1h"));
    let fresh = open(&mut codes, &redis.spec("killed", "ttl=1h"));
    let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
    // SAFETY: live handles from lock_open and valid outputs.
    unsafe {
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_OK]);
        codes.check("lock_inspect", lock_inspect(other, info.as_mut_ptr()), &[LOCK_OK]);
        redis.kill();
        let unreachable = &[LOCK_ERR_SERVER_UNREACHABLE];
        for handle in [other, fresh] {
            codes.by("lock_try_acquire", TRY_DEADLINE, || lock_try_acquire(handle, null_mut()), unreachable);
            codes.by("lock_acquire", Duration::from_millis(500), || lock_acquire(handle, 500, null_mut()), unreachable);
            codes.by("lock_inspect", CHANGE_DEADLINE, || lock_inspect(handle, info.as_mut_ptr()), unreachable);
            codes.by("lock_break", CHANGE_DEADLINE, || lock_break(handle, null_mut()), unreachable);
        }
        codes.by("lock_prolong", CHANGE_DEADLINE, || lock_prolong(holder, 0), unreachable);
        codes.by("lock_release", CHANGE_DEADLINE, || lock_release(holder, 0), unreachable);
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
        codes.by("lock_close", CHANGE_DEADLINE, || lock_close(holder), unreachable);
        codes.check("lock_close", lock_close(other), &[LOCK_OK]);
        codes.check("lock_close", lock_close(fresh), &[LOCK_OK]);
    }
    codes.assert_none();
}

/// What a server refuses, each as its own code: a login it wants and the
/// spec does not give (or gives wrong), a database it has not, writes on a
/// full server or a replica, any command while a script runs too long, and
/// keys of another program under the lock's names, which stay as they were.
#[test]
fn refusals_of_a_server_are_in_the_lists() {
    let Some(redis) = server(&["--busy-reply-threshold", "50"]) else { return };
    let Some(guarded) = server(&["--requirepass", "s3cret"]) else { return };
    let mut codes = Codes::new();
    let socket = |redis: &Redis| testkit::percent_encode(redis.socket().to_str().expect("UTF-8"));
    // Each call that asks the server, on a handle that holds nothing; and
    // the release, prolong and close of one that holds, if given.
    let refused = |codes: &mut Codes, handle: *mut lock_handle, held: Option<*mut lock_handle>, code: lock_result| {
        let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
        // SAFETY: live handles from lock_open and valid outputs.
        unsafe {
            codes.check("lock_try_acquire", lock_try_acquire(handle, null_mut()), &[code]);
            codes.check("lock_acquire", lock_acquire(handle, 500, null_mut()), &[code]);
            codes.check("lock_inspect", lock_inspect(handle, info.as_mut_ptr()), &[code]);
            codes.check("lock_break", lock_break(handle, null_mut()), &[code]);
            if let Some(held) = held {
                codes.check("lock_prolong", lock_prolong(held, 0), &[code]);
                codes.check("lock_release", lock_release(held, 0), &[code]);
            }
        }
    };

    let nobody = open(&mut codes, &guarded.spec("login", ""));
    refused(&mut codes, nobody, None, LOCK_ERR_SERVER_AUTH);
    let wrong = open(&mut codes, &format!("redis://:wrong@{}/login", socket(&guarded)));
    refused(&mut codes, wrong, None, LOCK_ERR_SERVER_AUTH);
    let no_such_db = open(&mut codes, &format!("redis://:s3cret@{}/99/login", socket(&guarded)));
    refused(&mut codes, no_such_db, None, LOCK_ERR_SERVER_REFUSED);

    let holder = open(&mut codes, &redis.spec("refusals", "ttl=1h"));
    let other = open(&mut codes, &redis.spec("refusals", "ttl=1h"));
    // A try that finds the lock held writes nothing: this one finds it free.
    let writer = open(&mut codes, &redis.spec("refusals-free", "ttl=1h"));
    // SAFETY: live handles from lock_open.
    unsafe {
        codes.check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_OK]);
        redis.command(&["CONFIG", "SET", "maxmemory", "1"]);
        codes.check("lock_try_acquire", lock_try_acquire(writer, null_mut()), &[LOCK_ERR_SERVER_NO_WRITES]);
        codes.check("lock_acquire", lock_acquire(writer, 500, null_mut()), &[LOCK_ERR_SERVER_NO_WRITES]);
        codes.check("lock_prolong", lock_prolong(holder, 0), &[LOCK_ERR_SERVER_NO_WRITES]);
        redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
        // A replica of a master that is not there: read-only all the same.
        redis.command(&["REPLICAOF", "127.0.0.1", "1"]);
        codes.check("lock_try_acquire", lock_try_acquire(writer, null_mut()), &[LOCK_ERR_SERVER_READ_ONLY]);
        codes.check("lock_prolong", lock_prolong(holder, 0), &[LOCK_ERR_SERVER_READ_ONLY]);
        codes.check("lock_release", lock_release(holder, 0), &[LOCK_ERR_SERVER_READ_ONLY]);
        codes.check("lock_break", lock_break(other, null_mut()), &[LOCK_ERR_SERVER_READ_ONLY]);
        redis.command(&["REPLICAOF", "NO", "ONE"]);
    }

    // A script that runs past the server's threshold: the server answers
    // BUSY to everything else until it is killed.
    std::thread::scope(|scope| {
        let spinner = scope.spawn(|| redis.try_command(&["EVAL", "while true do end", "0"]));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
            // SAFETY: a live handle and a valid output.
            if unsafe { lock_inspect(other, info.as_mut_ptr()) } == LOCK_ERR_SERVER_NOT_READY {
                break;
            }
            assert!(Instant::now() < deadline, "the server never answered BUSY: {}", message());
            std::thread::sleep(Duration::from_millis(20));
        }
        refused(&mut codes, other, Some(holder), LOCK_ERR_SERVER_NOT_READY);
        // The script stops now; its client, which waits two seconds for an
        // answer, gets an error or none.
        assert_eq!(redis.command(&["SCRIPT", "KILL"]), "OK");
        let _ = spinner.join();
    });
    // SAFETY: a live handle.
    codes.check("lock_release", unsafe { lock_release(holder, 0) }, &[LOCK_OK]);

    // More replicas asked for than the server has: given back.
    let replicated = open(&mut codes, &redis.spec("refusals-replicated", "ttl=1h&replicas=1"));
    // SAFETY: a live handle from lock_open.
    unsafe {
        codes.check("lock_try_acquire", lock_try_acquire(replicated, null_mut()), &[LOCK_ERR_SERVER_NOT_REPLICATED]);
        codes.check("lock_acquire", lock_acquire(replicated, 500, null_mut()), &[LOCK_ERR_SERVER_NOT_REPLICATED]);
        codes.check("lock_release", lock_release(replicated, 0), &[LOCK_ERR_NOT_HELD]);
        codes.check("lock_close", lock_close(replicated), &[LOCK_OK]);
    }

    // Another program's value at the lock key, and another type there.
    for plant in
        [&["SET", "lockcore:{refusals}:lock", "their session"][..], &["HSET", "lockcore:{refusals}:lock", "f", "v"]]
    {
        redis.command(&["DEL", "lockcore:{refusals}:lock"]);
        redis.command(plant);
        refused(&mut codes, other, None, LOCK_ERR_SERVER_FOREIGN_KEYS);
    }
    redis.command(&["DEL", "lockcore:{refusals}:lock"]);
    // SAFETY: handles from lock_open, not used after.
    unsafe {
        for handle in [nobody, wrong, no_such_db, holder, other, writer] {
            codes.check("lock_close", lock_close(handle), &[LOCK_OK]);
        }
    }
    codes.assert_none();
}

/// A peer at the server's address that is no Redis server: one that closes
/// every connection it is given (LOCK_ERR_SERVER_DISCONNECTED), and one
/// that answers what no Redis command answers (LOCK_ERR_SERVER_PROTOCOL).
#[test]
fn a_peer_that_is_no_server_is_in_the_lists() {
    let mut codes = Codes::new();
    for (answer, code) in
        [(None, LOCK_ERR_SERVER_DISCONNECTED), (Some(&b"+nonsense\r\n"[..]), LOCK_ERR_SERVER_PROTOCOL)]
    {
        let peer = FakePeer::start(answer);
        let handle = open(&mut codes, &format!("redis://{}/fake?ttl=1h", peer.encoded()));
        let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
        // SAFETY: a live handle from lock_open and a valid output.
        unsafe {
            codes.check("lock_try_acquire", lock_try_acquire(handle, null_mut()), &[code]);
            codes.check("lock_acquire", lock_acquire(handle, 500, null_mut()), &[code]);
            codes.check("lock_inspect", lock_inspect(handle, info.as_mut_ptr()), &[code]);
            codes.check("lock_break", lock_break(handle, null_mut()), &[code]);
            codes.check("lock_close", lock_close(handle), &[LOCK_OK]);
        }
    }
    // A host name that does not resolve (`.invalid` never does).
    let handle = open(&mut codes, "redis://no-such-host.invalid/name");
    // SAFETY: a live handle from lock_open.
    unsafe {
        codes.check("lock_try_acquire", lock_try_acquire(handle, null_mut()), &[LOCK_ERR_SERVER_UNKNOWN_HOST]);
        codes.check("lock_break", lock_break(handle, null_mut()), &[LOCK_ERR_SERVER_UNKNOWN_HOST]);
        codes.check("lock_close", lock_close(handle), &[LOCK_OK]);
    }
    codes.assert_none();
}

/// A unix socket that accepts every connection and either closes it at
/// once or answers each read with `answer`, until dropped.
struct FakePeer {
    dir: PathBuf,
}

impl FakePeer {
    fn start(answer: Option<&'static [u8]>) -> FakePeer {
        use std::sync::atomic::{AtomicU32, Ordering};
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = Path::new("/tmp").join(format!("lk-fake-{}-{serial}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("make the peer's directory");
        let listener = UnixListener::bind(dir.join("peer.sock")).expect("bind the peer's socket");
        // Lives as long as the test process; its socket goes with the directory.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(answer) = answer else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                        if stream.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakePeer { dir }
    }

    fn encoded(&self) -> String {
        testkit::percent_encode(self.dir.join("peer.sock").to_str().expect("UTF-8"))
    }
}

impl Drop for FakePeer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

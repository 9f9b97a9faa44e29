//! The `redis` scheme against real servers this test starts: what no file
//! scheme has. The scenarios every scheme shares (FIFO order, killed
//! waiters and holders, expiry, outcomes, the torture suite) run against it
//! from the other test files; these are about the server:
//!
//! * one lock whether reached by its unix socket or by TCP, and an ACL user
//!   and a database of the target's choosing;
//! * fences that never go back, also after `FLUSHALL` and after a restart
//!   without persistence;
//! * keys of another program under the lock's names, left alone;
//! * every call returning by its deadline while the server is stopped
//!   (SIGSTOP) or killed, and a release that cannot reach it never
//!   reported as done;
//! * each of the server's refusals (LOADING, BUSY, READONLY, OOM, NOAUTH,
//!   WRONGPASS, NOPERM) as its own error kind;
//! * holders judged only where that is sound: dead on this host, broken at
//!   once; elsewhere, left to the server's expiry;
//! * waiters woken by the release, not polling.

mod common;

use std::time::{Duration, Instant};

use common::{leave_lock, open_lock, owner_as, wait_until, TestDir, PATIENCE};
use lockcore::{
    Contention, Error, ErrorKind, HostName, Liveness, ProlongOutcome, ReleaseOutcome, ServerProblem, SpecErrorKind,
};
use testkit::Redis;

/// How far past its deadline a call may return on a loaded machine: a
/// bound against hangs, not a measure of speed.
const SLACK: Duration = Duration::from_secs(1);

#[test]
fn child_entry() {
    common::child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "acquire");
    let spec = common::var("SPEC");
    let budget = Duration::from_millis(300);
    let got = by_deadline(budget, || open_lock(&spec).acquire(Some(budget)));
    assert!(matches!(got, Err(Error::Timeout(_) | Error::Server(_))), "{spec}: {got:?}");
}

/// A private server, or `None` (the test says it is skipped) without one.
fn server(extra: &[&str]) -> Option<Redis> {
    if !testkit::redis_available() {
        eprintln!("skipped: redis-server is not installed");
        return None;
    }
    Some(Redis::start(extra))
}

fn server_problem(result: Result<impl std::fmt::Debug, Error>) -> ServerProblem {
    match result {
        Err(Error::Server(e)) => e.problem,
        other => panic!("expected a server error, got {other:?}"),
    }
}

/// Runs `call`, and checks it returned within `deadline` (and the slack).
fn by_deadline<T>(deadline: Duration, call: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let result = call();
    let took = start.elapsed();
    assert!(took <= deadline + SLACK, "returned after {took:?}, deadline {deadline:?}");
    result
}

#[test]
fn a_lock_reached_by_its_socket_or_by_tcp_is_one_lock() {
    let Some(redis) = server(&[]) else { return };
    let mut by_socket = open_lock(&redis.spec("one", "ttl=1h"));
    let mut by_tcp = open_lock(&redis.tcp_spec("one", "ttl=1h"));
    let asked = by_socket.now().wall;
    let first = by_socket.try_acquire().unwrap();
    let answered = by_socket.now().wall;
    // The holder's own lease counts from when its request left, less the
    // drift margin: it ends before the server's.
    let lease = by_socket.held().unwrap().expires.unwrap().wall;
    let own = lockcore::redis_local_lease(Duration::from_secs(3600));
    assert!(own < Duration::from_secs(3600));
    assert!(asked.saturating_add(own) <= lease && lease <= answered.saturating_add(own), "{lease:?}");
    assert!(matches!(by_tcp.try_acquire(), Err(Error::Busy(Contention::Held(_)))));
    let seen = by_tcp.inspect().unwrap();
    let holder = seen.holder.expect("held");
    assert_eq!((holder.pid, holder.record.map(|r| r.fence)), (std::process::id() as i32, Some(first.fence)));
    assert_eq!(seen.last_fence, first.fence);
    assert_eq!(by_socket.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    let second = by_tcp.try_acquire().unwrap();
    assert!(second.fence > first.fence);
    assert_eq!(by_tcp.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    // Nothing of a released lock stays but its fence, and for a minute the
    // release, for a caller that asks again.
    let mut keys: Vec<String> = redis.command(&["KEYS", "lockcore:{one}:*"]).lines().map(String::from).collect();
    keys.sort();
    assert_eq!(keys, ["lockcore:{one}:fence", "lockcore:{one}:released"]);
    let remembered: u64 = redis.command(&["PTTL", "lockcore:{one}:released"]).parse().unwrap();
    assert!((1..=60_000).contains(&remembered), "remembered for {remembered} ms");
}

#[test]
fn fences_never_go_back_after_a_flush_or_a_restart_without_data() {
    let Some(mut redis) = server(&[]) else { return };
    let spec = redis.spec("fence", "ttl=1h");
    let mut fences = Vec::new();
    let mut take = |lock: &mut lockcore::Lock| {
        fences.push(lock.try_acquire().unwrap().fence);
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    };
    let mut lock = open_lock(&spec);
    take(&mut lock);
    take(&mut lock);
    assert_eq!(redis.command(&["FLUSHALL"]), "OK");
    take(&mut lock);
    redis.restart();
    let mut lock = open_lock(&spec);
    take(&mut lock);
    assert!(fences.windows(2).all(|pair| pair[1] > pair[0]), "fences {fences:?}");
}

#[test]
fn keys_another_program_wrote_are_refused_and_left_alone() {
    let Some(redis) = server(&[]) else { return };
    let mut lock = open_lock(&redis.spec("theirs", "ttl=1h"));
    // A string that is no record of ours, under the lock key.
    redis.command(&["SET", "lockcore:{theirs}:lock", "their session data"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys);
    assert_eq!(server_problem(lock.break_lock()), ServerProblem::ForeignKeys);
    assert_eq!(server_problem(lock.inspect()), ServerProblem::ForeignKeys);
    assert_eq!(redis.command(&["GET", "lockcore:{theirs}:lock"]), "their session data");
    // A string that starts as a record of ours does and is none.
    redis.command(&["SET", "lockcore:{theirs}:lock", "lockcore 2 their session data"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys);
    assert_eq!(server_problem(lock.break_lock()), ServerProblem::ForeignKeys);
    assert_eq!(server_problem(lock.inspect()), ServerProblem::ForeignKeys);
    assert_eq!(redis.command(&["GET", "lockcore:{theirs}:lock"]), "lockcore 2 their session data");
    // Another type altogether.
    redis.command(&["DEL", "lockcore:{theirs}:lock"]);
    redis.command(&["HSET", "lockcore:{theirs}:lock", "field", "value"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys);
    assert_eq!(server_problem(lock.inspect()), ServerProblem::ForeignKeys);
    assert_eq!(redis.command(&["HGET", "lockcore:{theirs}:lock", "field"]), "value");
    // A key of another type among the lock's: nothing is written, not even
    // before the script finds it (Redis would not undo it).
    redis.command(&["DEL", "lockcore:{theirs}:lock", "lockcore:{theirs}:fence"]);
    redis.command(&["SET", "lockcore:{theirs}:alive", "not a sorted set"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys);
    assert_eq!(redis.command(&["EXISTS", "lockcore:{theirs}:lock", "lockcore:{theirs}:fence"]), "0");
    redis.command(&["DEL", "lockcore:{theirs}:alive"]);
    lock.try_acquire().unwrap();
    redis.command(&["SET", "lockcore:{theirs}:queue", "not a list"]);
    assert_eq!(server_problem(lock.release(Duration::ZERO)), ServerProblem::ForeignKeys);
    assert!(lock.held().is_some(), "nothing was released");
    assert_eq!(redis.command(&["EXISTS", "lockcore:{theirs}:lock"]), "1", "the lock is still there");
    redis.command(&["DEL", "lockcore:{theirs}:queue"]);
    lock.release(Duration::ZERO).unwrap();
    // A fence key no acquisition wrote: not a number, or one so large that
    // the next could not be told from it.
    redis.command(&["DEL", "lockcore:{theirs}:lock"]);
    for forged in ["twelve", "9007199254740993", "-5"] {
        redis.command(&["SET", "lockcore:{theirs}:fence", forged]);
        let refused = lock.try_acquire();
        assert_eq!(server_problem(refused), ServerProblem::ForeignKeys, "fence {forged}");
        assert_eq!(server_problem(lock.inspect()), ServerProblem::ForeignKeys, "fence {forged}");
        assert_eq!(redis.command(&["GET", "lockcore:{theirs}:fence"]), forged);
        assert_eq!(redis.command(&["EXISTS", "lockcore:{theirs}:lock"]), "0", "nothing taken over {forged}");
    }
    // Where a holder's record is kept for the next taker, a string that no
    // lock of ours left there.
    redis.command(&["DEL", "lockcore:{theirs}:fence"]);
    for planted in ["12\ntheir session data", "12 dead\nlockcore-cooldown", "twelve\nlockcore 2 ..."] {
        redis.command(&["SET", "lockcore:{theirs}:last", planted]);
        assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys, "{planted}");
        assert_eq!(redis.command(&["GET", "lockcore:{theirs}:last"]), planted);
        assert_eq!(redis.command(&["EXISTS", "lockcore:{theirs}:lock"]), "0", "nothing taken with {planted}");
    }
    redis.command(&["DEL", "lockcore:{theirs}:last"]);
    redis.command(&["HSET", "lockcore:{theirs}:last", "field", "value"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ForeignKeys);
    assert_eq!(redis.command(&["HGET", "lockcore:{theirs}:last", "field"]), "value");
    redis.command(&["DEL", "lockcore:{theirs}:last"]);
    // Planted while the lock is held: the holder still prolongs and gives it
    // back, and leaves it alone.
    lock.try_acquire().unwrap();
    redis.command(&["SET", "lockcore:{theirs}:last", "their session data"]);
    redis.command(&["SET", "lockcore:{theirs}:released", "their session data"]);
    assert_eq!(lock.prolong(None), Ok(ProlongOutcome::Prolonged));
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert_eq!(redis.command(&["GET", "lockcore:{theirs}:last"]), "their session data");
    assert_eq!(redis.command(&["GET", "lockcore:{theirs}:released"]), "their session data");
    redis.command(&["DEL", "lockcore:{theirs}:released"]);
    // A wake list planted for the first in line: a release leaves it as it
    // was, without an expiry; the wake list of the next in line is one
    // wake-up that runs out with a waiter's lease.
    redis.command(&["DEL", "lockcore:{theirs}:last"]);
    for (first, planted) in [("planted", true), ("waiting", false)] {
        lock.try_acquire().unwrap();
        redis.command(&["DEL", "lockcore:{theirs}:queue"]);
        redis.command(&["RPUSH", "lockcore:{theirs}:queue", first]);
        let wake = format!("lockcore:{{theirs}}:wake:{first}");
        if planted {
            redis.command(&["RPUSH", &wake, "their", "data"]);
        }
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        if planted {
            assert_eq!(redis.command(&["LRANGE", &wake, "0", "-1"]), "their\ndata");
            assert_eq!(redis.command(&["PTTL", &wake]), "-1");
        } else {
            assert_eq!(redis.command(&["LRANGE", &wake, "0", "-1"]), "1");
            let pttl: u64 = redis.command(&["PTTL", &wake]).parse().unwrap();
            assert!(pttl > 0 && u128::from(pttl) <= lockcore::strategy::redis::WAITER_LEASE.as_millis(), "pttl {pttl}");
        }
    }
}

#[test]
fn every_call_returns_by_its_deadline_while_the_server_is_stopped() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("stopped", "ttl=1h");
    let mut holder = open_lock(&spec);
    let mut other = open_lock(&spec);
    holder.try_acquire().unwrap();
    other.inspect().unwrap();
    redis.pause();
    let budget = Duration::from_millis(600);
    let waited = by_deadline(budget, || other.acquire(Some(budget)));
    assert_eq!(server_problem(waited), ServerProblem::NoAnswer);
    let tried = by_deadline(lockcore::TRY_PATIENCE, || other.try_acquire());
    assert_eq!(server_problem(tried), ServerProblem::NoAnswer);
    assert_eq!(server_problem(by_deadline(lockcore::CHANGE_PATIENCE, || other.inspect())), ServerProblem::NoAnswer);
    // A release that cannot reach the server did not happen: the handle
    // still holds, and can release once the server answers again.
    let released = by_deadline(lockcore::CHANGE_PATIENCE, || holder.release(Duration::ZERO));
    assert_eq!(server_problem(released), ServerProblem::NoAnswer);
    let prolonged = by_deadline(lockcore::CHANGE_PATIENCE, || holder.prolong(None));
    assert_eq!(server_problem(prolonged), ServerProblem::NoAnswer);
    assert!(holder.held().is_some(), "a failed release keeps the lock held");
    redis.resume();
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    other.try_acquire().expect("free once released");
}

#[test]
fn a_killed_server_is_unreachable_and_a_restarted_one_serves_again() {
    let Some(mut redis) = server(&[]) else { return };
    let spec = redis.spec("killed", "ttl=1h");
    let mut holder = open_lock(&spec);
    let taken = holder.try_acquire().unwrap();
    redis.kill();
    let released = by_deadline(lockcore::CHANGE_PATIENCE, || holder.release(Duration::ZERO));
    assert_eq!(server_problem(released), ServerProblem::Unreachable);
    assert!(holder.held().is_some());
    redis.restart();
    // The restart lost the lock and its fence: nobody took the lock since.
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Expired));
    let again = open_lock(&spec).try_acquire().unwrap();
    assert!(again.fence > taken.fence);
}

#[test]
fn a_server_that_is_loading_its_data_is_not_ready() {
    let Some(mut redis) = server(&[]) else { return };
    // Enough keys, each loaded slowly, to keep the server loading for
    // seconds after a restart.
    redis.command(&["DEBUG", "POPULATE", "20000"]);
    assert_eq!(redis.command(&["SAVE"]), "OK");
    redis.restart_with(&["--key-load-delay", "100", "--loading-process-events-interval-bytes", "1024"]);
    let mut lock = open_lock(&redis.spec("loading", "ttl=1h"));
    let refused = lock.try_acquire();
    let Err(Error::Server(e)) = refused else { panic!("{refused:?}") };
    assert_eq!(e.problem, ServerProblem::NotReady, "{e}");
    assert!(e.server_text().starts_with(b"LOADING"), "{e}");
}

#[test]
fn a_server_busy_with_a_script_is_not_ready() {
    let Some(redis) = server(&["--busy-reply-threshold", "50"]) else { return };
    let mut lock = open_lock(&redis.spec("busy", "ttl=1h"));
    lock.try_acquire().unwrap();
    lock.release(Duration::ZERO).unwrap();
    let socket = redis.socket();
    let spinner = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .arg("-s")
            .arg(socket)
            .args(["EVAL", "while true do end", "0"])
            .output()
            .expect("redis-cli runs")
    });
    wait_until(
        "the script to run past the threshold",
        || matches!(lock.inspect(), Err(Error::Server(e)) if e.problem == ServerProblem::NotReady),
    );
    assert_eq!(redis.command(&["SCRIPT", "KILL"]), "OK");
    spinner.join().unwrap();
    lock.try_acquire().expect("ready again once the script is killed");
}

#[test]
fn a_replica_or_a_full_server_refuses_writes_with_its_own_kind() {
    let Some(redis) = server(&[]) else { return };
    let mut lock = open_lock(&redis.spec("writes", "ttl=1h"));
    redis.command(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::NoWrites);
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
    // A replica of a master that is not there: read-only all the same.
    redis.command(&["REPLICAOF", "127.0.0.1", "1"]);
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::ReadOnly);
    redis.command(&["REPLICAOF", "NO", "ONE"]);
    lock.try_acquire().expect("a master again");
}

#[test]
fn the_login_and_the_database_are_the_targets() {
    let Some(redis) = server(&["--requirepass", "s3cret"]) else { return };
    let socket = testkit::percent_encode(redis.socket().to_str().unwrap());
    let spec = |login: &str, db: &str| format!("redis://{login}{socket}{db}/login?ttl=1h");
    let admin = |db: u32, args: &[&str]| redis.command_as(Some("s3cret"), db, args);
    // No password: the server asks for one; a wrong one: refused.
    assert_eq!(server_problem(open_lock(&spec("", "")).try_acquire()), ServerProblem::AuthRefused);
    assert_eq!(server_problem(open_lock(&spec(":wrong@", "")).try_acquire()), ServerProblem::AuthRefused);
    // The default user's password, and database 3.
    let mut lock = open_lock(&spec(":s3cret@", "/3"));
    lock.try_acquire().unwrap();
    assert_eq!(admin(3, &["EXISTS", "lockcore:{login}:lock"]), "1");
    assert_eq!(admin(0, &["EXISTS", "lockcore:{login}:lock"]), "0");
    lock.release(Duration::ZERO).unwrap();
    // An ACL user with every command on the lock's keys, and one without
    // scripting.
    admin(0, &["ACL", "SETUSER", "cron", "on", ">cronpass", "~lockcore:*", "+@all"]);
    admin(0, &["ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-@scripting"]);
    let mut cron = open_lock(&spec("cron:cronpass@", "/2"));
    cron.try_acquire().unwrap();
    assert_eq!(admin(2, &["EXISTS", "lockcore:{login}:lock"]), "1");
    assert_eq!(cron.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert_eq!(server_problem(open_lock(&spec("noscript:pw@", "")).try_acquire()), ServerProblem::Refused);
    // The least a user needs, as docs/SPECS.md lists it, is enough for
    // every operation, a wait in line included.
    let least = "+evalsha +eval +blpop +time +select +get +set +del +type +pttl +pexpire +lindex +lpop +rpush +lrem \
                 +llen +lpos +zscore +zadd +zrem +zcount";
    let mut acl = vec!["ACL", "SETUSER", "least", "on", ">leastpw", "~lockcore:*"];
    acl.extend(least.split_whitespace());
    assert_eq!(admin(0, &acl), "OK");
    let (mut holder, mut waiter) = (open_lock(&spec("least:leastpw@", "/1")), open_lock(&spec("least:leastpw@", "/1")));
    holder.try_acquire().unwrap();
    holder.prolong(None).unwrap();
    assert!(holder.inspect().unwrap().holder.is_some());
    assert!(matches!(waiter.acquire(Some(Duration::from_millis(300))), Err(Error::Timeout(_))));
    holder.release(Duration::ZERO).unwrap();
    waiter.acquire(Some(PATIENCE)).unwrap();
    assert!(waiter.break_lock().unwrap());
    // A database the server does not have.
    assert_eq!(server_problem(open_lock(&spec(":s3cret@", "/99")).try_acquire()), ServerProblem::Refused);
}

#[test]
fn a_dead_holder_here_is_broken_at_once_and_one_elsewhere_waits_for_its_expiry() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("judged", "ttl=1h");
    // A process of this host that is gone (pid 1 never has start time 1).
    leave_lock(&spec, owner_as(1, 1));
    let mut lock = open_lock(&spec);
    lock.try_acquire().expect("a dead holder on this host is broken");
    lock.release(Duration::ZERO).unwrap();
    // The same pid on another host is never judged by this one.
    let mut elsewhere = owner_as(1, 1);
    elsewhere.host = HostName::from_bytes(b"elsewhere").unwrap();
    leave_lock(&spec, elsewhere);
    let busy = lock.try_acquire();
    assert!(matches!(busy, Err(Error::Busy(Contention::Held(h))) if h.host == Some(elsewhere.host)), "{busy:?}");
    let seen = lock.inspect().unwrap().holder.unwrap();
    assert!(!seen.stale, "only its server's expiry frees it");
}

/// A dead holder's lock broken by one client (one not first in line, that
/// leaves the lock to the head) is reported by whoever takes it next, and
/// only by that one: a record of a break older than the last fence names
/// nobody.
#[test]
fn the_next_taker_after_a_dead_holder_was_broken_is_told_so() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("broken", "ttl=1h");
    leave_lock(&spec, owner_as(1, 1));
    let (lock_key, fence_key, last_key) =
        ("lockcore:{broken}:lock", "lockcore:{broken}:fence", "lockcore:{broken}:last");
    // What a breaker leaves: the lock gone, the record and the fence then.
    let left = format!("{} dead\n{}", redis.command(&["GET", fence_key]), redis.command(&["GET", lock_key]));
    redis.command(&["DEL", lock_key]);
    redis.command(&["SET", last_key, &left]);
    let mut lock = open_lock(&spec);
    let acquired = lock.try_acquire().unwrap();
    let previous = acquired.took_over_from.expect("the next taker is told");
    assert_eq!((previous.pid, previous.liveness), (1, Liveness::Dead));
    assert!(acquired.previous_holder_died());
    assert_ne!(redis.command(&["GET", last_key]), left, "told once");
    lock.release(Duration::ZERO).unwrap();
    // The same record, left while another took and released the lock.
    redis.command(&["SET", last_key, &left]);
    assert_eq!(lock.try_acquire().unwrap().took_over_from, None, "a fence has been drawn since");
    assert_ne!(redis.command(&["GET", last_key]), left);
    lock.release(Duration::ZERO).unwrap();
}

/// A holder that overran its ttl, whose key expired on the server: the next
/// taker is told whose lock it took over (a holder still alive, so not
/// dead), and the overrun holder that it lost it. A lock given back names
/// nobody.
#[test]
fn the_next_taker_after_a_holder_overran_is_told_so() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("overrun", "ttl=300ms");
    let last_key = "lockcore:{overrun}:last";
    let mut holder = open_lock(&spec);
    let overrun = holder.try_acquire().unwrap();
    let mut next = open_lock(&spec);
    wait_until("the key to expire", || redis.command(&["EXISTS", "lockcore:{overrun}:lock"]) == "0");
    let acquired = next.try_acquire().unwrap();
    let previous = acquired.took_over_from.expect("the next taker is told");
    assert_eq!((previous.pid, previous.record.map(|r| r.fence)), (std::process::id() as i32, Some(overrun.fence)));
    assert!(previous.stale && !acquired.previous_holder_died(), "overran, not dead: {previous:?}");
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
    assert_eq!(next.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert_eq!(redis.command(&["EXISTS", last_key]), "0", "gone with the release");
    let released = redis.command(&["GET", "lockcore:{overrun}:released"]);
    assert!(released.starts_with(&format!("{}\n", acquired.fence)), "{released}");
    assert_eq!(holder.try_acquire().unwrap().took_over_from, None, "given back: nobody taken over");
    holder.release(Duration::ZERO).unwrap();
    // Without a ttl nothing can expire, and nothing is kept for it.
    let mut forever = open_lock(&redis.spec("overrun", ""));
    forever.try_acquire().unwrap();
    assert_eq!(redis.command(&["EXISTS", last_key]), "0");
    forever.release(Duration::ZERO).unwrap();
}

#[test]
fn a_waiter_sleeps_until_the_release_instead_of_polling() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("sleeper", "ttl=1h");
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    let calls = || -> u64 {
        let stats = redis.command(&["INFO", "commandstats"]);
        stats
            .lines()
            .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
            .filter_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
            .sum()
    };
    let waiter = std::thread::spawn(move || open_lock(&spec).acquire(Some(PATIENCE)).map(|_| Instant::now()));
    std::thread::sleep(Duration::from_millis(100));
    let before = calls();
    let quiet = Duration::from_secs(1);
    std::thread::sleep(quiet);
    let attempts = calls() - before;
    // A waiter comes back every 120 ms to renew its place; one that polled
    // like the file schemes' backoff would make a hundred calls a second.
    assert!(attempts <= 20, "{attempts} attempts in {quiet:?} of waiting");
    let released_at = Instant::now();
    holder.release(Duration::ZERO).unwrap();
    let got_at = waiter.join().unwrap().expect("the waiter gets the lock");
    assert!(got_at >= released_at);
}

#[test]
fn malformed_targets_and_options_are_refused_by_name() {
    let refused = |spec: &str| match lockcore::Lock::open(spec) {
        Err(Error::Spec(e)) => e.kind,
        other => panic!("{spec}: {other:?}"),
    };
    assert_eq!(refused("redis:/tmp/x"), SpecErrorKind::BadUrl);
    assert_eq!(refused("redis://localhost"), SpecErrorKind::BadUrl);
    assert_eq!(refused("redis://localhost/%7Dx"), SpecErrorKind::BadUrl);
    assert_eq!(refused("redis://localhost/x?format=%25f"), SpecErrorKind::UnknownKey);
    assert_eq!(refused("redis://localhost/x?ttl=soon"), SpecErrorKind::BadValue);
    let Err(unknown) = lockcore::Lock::open("redis://no-such-host.invalid/x").and_then(|mut l| l.try_acquire()) else {
        panic!("a host that does not resolve")
    };
    assert_eq!(unknown.kind(), ErrorKind::Server(ServerProblem::UnknownHost));
}

#[test]
fn a_cluster_sends_each_lock_to_the_node_of_its_slot_also_while_the_slot_moves() {
    if !testkit::redis_available() {
        eprintln!("skipped: redis-server is not installed");
        return;
    }
    let cluster = testkit::RedisCluster::start(3);
    // Every lock through the first node: most live elsewhere.
    let mut owners = std::collections::BTreeSet::new();
    for n in 0..12 {
        let name = format!("spread-{n}");
        owners.insert(cluster.owner_of(&format!("lockcore:{{{name}}}:lock")).0);
        let mut lock = open_lock(&cluster.nodes[0].tcp_spec(&name, "ttl=1h"));
        let mut rival = open_lock(&cluster.nodes[2].tcp_spec(&name, "ttl=1h"));
        let taken = lock.try_acquire().unwrap();
        assert!(matches!(rival.try_acquire(), Err(Error::Busy(_))), "{name}");
        assert_eq!(rival.inspect().unwrap().holder.map(|h| h.record.unwrap().fence), Some(taken.fence));
        assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        assert!(rival.try_acquire().unwrap().fence > taken.fence);
    }
    assert!(owners.len() > 1, "the names all landed on one node: {owners:?}");

    // A slot on its way from one node to another: the old node sends the
    // lock, whose keys it no longer has, to the new one (ASK), which runs no
    // script over keys of a slot it is still taking in (TRYAGAIN): the lock
    // is not ready until the move is done, and then the new node serves it.
    let name = "moving";
    let (from, slot) = cluster.owner_of(&format!("lockcore:{{{name}}}:lock"));
    let to = (from + 1) % cluster.nodes.len();
    let slot = slot.to_string();
    assert_eq!(cluster.nodes[to].command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &cluster.id_of(from)]), "OK");
    assert_eq!(cluster.nodes[from].command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &cluster.id_of(to)]), "OK");
    let mut rival = open_lock(&cluster.nodes[from].tcp_spec(name, "ttl=1h"));
    match rival.try_acquire() {
        Err(Error::Server(e)) => {
            assert_eq!(e.problem, ServerProblem::NotReady, "{e}");
            assert!(e.server_text().starts_with(b"TRYAGAIN"), "the new node's answer, after ASKING: {e}");
        }
        other => panic!("a lock of a slot that moves: {other:?}"),
    }
    for node in &cluster.nodes {
        node.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &cluster.id_of(to)]);
    }
    rival.try_acquire().expect("the slot has moved: its new node serves it");
    assert_eq!(cluster.nodes[to].command(&["EXISTS", &format!("lockcore:{{{name}}}:lock")]), "1");
}

#[test]
fn an_acquisition_counts_only_once_the_replicas_asked_for_have_it() {
    let Some(master) = server(&[]) else { return };
    let port = master.port().to_string();
    let replica = Redis::start(&["--replicaof", "127.0.0.1", &port]);
    wait_until("the replica to follow its master", || {
        replica.command(&["INFO", "replication"]).contains("master_link_status:up")
    });
    let mut lock = open_lock(&master.spec("replicated", "ttl=1h&replicas=1"));
    lock.acquire(Some(Duration::from_secs(2))).expect("one replica acknowledges");
    assert!(replica.command(&["GET", "lockcore:{replicated}:lock"]).starts_with("lockcore 2 "));
    lock.release(Duration::ZERO).unwrap();

    // More replicas than there are, or a replica that stopped: refused by
    // the deadline, and given back.
    let mut greedy = open_lock(&master.spec("replicated", "ttl=1h&replicas=2"));
    let refused = by_deadline(Duration::from_secs(2), || greedy.acquire(Some(Duration::from_secs(1))));
    assert_eq!(server_problem(refused), ServerProblem::NotReplicated);
    assert_eq!(master.command(&["EXISTS", "lockcore:{replicated}:lock"]), "0", "given back");
    replica.pause();
    let refused = by_deadline(Duration::from_millis(300), || lock.acquire(Some(Duration::from_millis(300))));
    replica.resume();
    assert_eq!(server_problem(refused), ServerProblem::NotReplicated);
    assert_eq!(master.command(&["EXISTS", "lockcore:{replicated}:lock"]), "0", "given back");
    assert!(lock.held().is_none());
}

#[test]
fn a_free_lock_is_taken_in_one_round_trip_and_given_back_in_another() {
    let Some(redis) = server(&[]) else { return };
    let mut lock = open_lock(&redis.spec("trips", "ttl=1h"));
    // The first use connects, compares clocks and teaches the server the
    // scripts (EVAL after NOSCRIPT).
    lock.try_acquire().unwrap();
    lock.release(Duration::ZERO).unwrap();
    assert_eq!(redis.command(&["CONFIG", "RESETSTAT"]), "OK");
    for _ in 0..10 {
        lock.try_acquire().unwrap();
        lock.release(Duration::ZERO).unwrap();
    }
    let stats = redis.command(&["INFO", "commandstats"]);
    let calls: Vec<(&str, u64)> = stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            Some((name, rest.split("calls=").nth(1)?.split(',').next()?.parse().ok()?))
        })
        .collect();
    let count = |command: &str| calls.iter().find(|&&(name, _)| name == command).map_or(0, |&(_, n)| n);
    // Commands the scripts call (GET, SET, TIME, ...) are counted too;
    // none of these is one.
    assert_eq!(count("evalsha"), 20, "ten acquisitions and releases, one script each: {stats}");
    for extra in ["eval", "blpop", "auth", "select", "ping"] {
        assert_eq!(count(extra), 0, "{extra}: {stats}");
    }
}

#[test]
fn a_line_stuffed_with_waiters_that_are_gone_holds_up_nobody_for_long() {
    let Some(redis) = server(&[]) else { return };
    // Ten thousand ids in line without a lease: dead, or planted.
    let mut command = vec!["RPUSH", "lockcore:{stuffed}:queue"];
    let ids: Vec<String> = (0..10_000).map(|n| format!("elsewhere:{n}:{n:032x}")).collect();
    command.extend(ids.iter().map(String::as_str));
    assert_eq!(redis.command(&command), "10000");
    let mut lock = open_lock(&redis.spec("stuffed", "ttl=1h"));
    let budget = Duration::from_secs(20);
    by_deadline(budget, || lock.acquire(Some(budget))).expect("the dead are passed over");
    assert_eq!(redis.command(&["LLEN", "lockcore:{stuffed}:queue"]), "0");
}

/// A unix socket in front of `server` whose answers come back `delay`
/// late, as over a slow network; questions go through at once.
fn slow_answers(server: &Redis, delay: Duration) -> std::path::PathBuf {
    link(server, Link { answers: delay, ..Link::default() })
}

/// A unix socket in front of `server` that holds each question for as many
/// milliseconds as `questions_ms` says when it arrives, and each answer for
/// `answers`; a question already on its way still reaches the server after
/// its client has hung up.
fn slow_link(
    server: &Redis,
    questions_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    answers: Duration,
) -> std::path::PathBuf {
    link(server, Link { questions_ms, answers, ..Link::default() })
}

/// What a [`link`] does to what passes through it.
#[derive(Default)]
struct Link {
    /// How long each question is held, read as it arrives.
    questions_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// How long each answer is held.
    answers: Duration,
    /// On the first connection, the answer to this script run (0: the
    /// first) is not passed on: the client is cut off instead, after the
    /// server ran it.
    cut_at_script: Option<usize>,
}

/// A unix socket in front of `server`, as `faults` say.
fn link(server: &Redis, faults: Link) -> std::path::PathBuf {
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;
    static LINKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("link-{}.sock", LINKS.fetch_add(1, SeqCst));
    let path = server.socket().with_file_name(name);
    let listener = UnixListener::bind(&path).unwrap();
    let upstream = server.socket();
    std::thread::spawn(move || {
        for (connection, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let Ok(server) = UnixStream::connect(&upstream) else { return };
            let (mut to_server, mut from_client) = (server.try_clone().unwrap(), client.try_clone().unwrap());
            let questions_ms = Arc::clone(&faults.questions_ms);
            let cut_at = faults.cut_at_script.filter(|_| connection == 0);
            // Set once a script went to the server, on a connection to cut.
            let cut = Arc::new(AtomicBool::new(false));
            let cut_by_question = Arc::clone(&cut);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut scripts = 0;
                while let Ok(n @ 1..) = from_client.read(&mut buf) {
                    let held = questions_ms.load(SeqCst);
                    std::thread::sleep(Duration::from_millis(held));
                    if buf[..n].windows(7).any(|w| w == b"EVALSHA") {
                        if cut_at == Some(scripts) {
                            cut_by_question.store(true, SeqCst);
                        }
                        scripts += 1;
                    }
                    let _ = to_server.write_all(&buf[..n]);
                }
            });
            let (mut from_server, mut to_client) = (server, client);
            let answers = faults.answers;
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = from_server.read(&mut buf) {
                    std::thread::sleep(answers);
                    if cut.load(SeqCst) {
                        let _ = to_client.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                    if to_client.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    path
}

#[test]
fn an_acquisition_whose_answer_came_too_late_is_taken_back() {
    let Some(redis) = server(&[]) else { return };
    // The server learns the scripts first, over the direct socket.
    let mut direct = open_lock(&redis.spec("late", ""));
    direct.try_acquire().unwrap();
    direct.release(Duration::ZERO).unwrap();
    let slow = testkit::percent_encode(slow_answers(&redis, Duration::from_millis(70)).to_str().unwrap());
    // A lock left behind would stay for the hour.
    let mut lock = open_lock(&format!("redis://{slow}/late?ttl=1h"));
    let tried = lock.try_acquire();
    assert_eq!(server_problem(tried), ServerProblem::NoAnswer);
    assert!(lock.held().is_none());
    assert_eq!(redis.command(&["EXISTS", "lockcore:{late}:lock"]), "0", "taken back");
    assert_eq!(redis.command(&["EXISTS", "lockcore:{late}:last"]), "0", "with its record");
    let next = direct.try_acquire().expect("free for the others");
    assert_eq!(next.took_over_from, None, "nobody held it");
}

#[test]
fn a_wait_of_no_time_is_one_attempt() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("instant", "");
    let (mut first, mut second) = (open_lock(&spec), open_lock(&spec));
    first.acquire(Some(Duration::ZERO)).expect("a free lock is taken by one attempt");
    let busy = second.acquire(Some(Duration::ZERO));
    assert!(matches!(busy, Err(Error::Timeout(Contention::Held(_)))), "{busy:?}");
    first.release(Duration::ZERO).unwrap();
    second.acquire(Some(Duration::ZERO)).expect("taken once released");
}

#[test]
fn a_wait_goes_on_through_a_dropped_connection_and_a_server_that_pauses() {
    let Some(redis) = server(&["--enable-debug-command", "yes"]) else { return };
    let spec = redis.spec("hiccup", "ttl=1h");
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    let waiter = {
        let spec = spec.clone();
        std::thread::spawn(move || open_lock(&spec).acquire(Some(PATIENCE)).map(|_| ()))
    };
    wait_until("the waiter to queue", || holder.inspect().unwrap().queue_length == Some(2));
    // Every connection dropped, then the server deaf for longer than a
    // slice of the wait.
    redis.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    redis.command(&["DEBUG", "SLEEP", "0.6"]);
    holder.release(Duration::ZERO).expect("the holder reconnects to let go");
    assert_eq!(waiter.join().unwrap(), Ok(()), "the waiter waited on");
}

#[test]
fn a_prolong_that_reaches_the_server_too_late_does_not_bring_the_lock_back() {
    let Some(redis) = server(&[]) else { return };
    let mut other = open_lock(&redis.spec("revived", ""));
    other.inspect().unwrap();
    // The server learns the prolong script, so that a late EVALSHA runs.
    let mut warm = open_lock(&redis.spec("warm", "ttl=1h"));
    warm.try_acquire().unwrap();
    warm.prolong(None).unwrap();
    warm.release(Duration::ZERO).unwrap();
    let questions_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let link = slow_link(&redis, std::sync::Arc::clone(&questions_ms), Duration::ZERO);
    let mut holder =
        open_lock(&format!("redis://{}/revived?ttl=500ms", testkit::percent_encode(link.to_str().unwrap())));
    holder.try_acquire().unwrap();
    wait_until("the lock to run out", || other.inspect().unwrap().holder.is_none());
    // From now on a question takes longer on its way than a prolong waits
    // for its answer.
    questions_ms.store(2500, std::sync::atomic::Ordering::Relaxed);
    let prolonged = by_deadline(lockcore::CHANGE_PATIENCE, || holder.prolong(Some(Duration::from_secs(60))));
    assert_eq!(server_problem(prolonged), ServerProblem::NoAnswer);
    // The prolong reaches the server after its caller gave up on it.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(redis.command(&["EXISTS", "lockcore:{revived}:lock"]), "0", "a lock that ran out is not brought back");
    other.try_acquire().expect("free for the others");
}

#[test]
fn an_acquisition_cut_off_before_its_answer_is_taken_back() {
    let Some(redis) = server(&[]) else { return };
    // The server learns the scripts first, over the direct socket.
    let mut direct = open_lock(&redis.spec("cut", ""));
    direct.try_acquire().unwrap();
    direct.release(Duration::ZERO).unwrap();
    let cut = link(&redis, Link { cut_at_script: Some(0), ..Link::default() });
    // Without a ttl, a lock left behind would stay for good.
    let mut lock = open_lock(&format!("redis://{}/cut", testkit::percent_encode(cut.to_str().unwrap())));
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::Disconnected);
    assert!(lock.held().is_none());
    assert_eq!(redis.command(&["EXISTS", "lockcore:{cut}:lock"]), "0", "taken back");
    direct.try_acquire().expect("free for the others");
}

/// The first release ran, but its answer was lost: asked again, it is told
/// that the lock was given back (not that it expired, nor, during its own
/// cooldown or after another took the lock, that it was lost), and the next
/// taker took over from nobody.
#[test]
fn a_release_asked_again_after_its_answer_was_lost_is_told_it_released() {
    let Some(redis) = server(&[]) else { return };
    for (options, cooldown) in [("", Duration::ZERO), ("?ttl=1h", Duration::ZERO), ("?ttl=1h", Duration::from_secs(1))]
    {
        let name = format!("again{}", options.len() + cooldown.as_secs() as usize);
        // The server learns the scripts first, over the direct socket.
        let mut direct = open_lock(&redis.spec(&name, ""));
        direct.try_acquire().unwrap();
        direct.release(Duration::ZERO).unwrap();
        // The acquisition is the first script, its release the second.
        let cut = link(&redis, Link { cut_at_script: Some(1), ..Link::default() });
        let socket = testkit::percent_encode(cut.to_str().unwrap());
        let mut lock = open_lock(&format!("redis://{socket}/{name}{options}"));
        lock.try_acquire().unwrap();
        let lost = lock.release(cooldown);
        assert_eq!(server_problem(lost), ServerProblem::Disconnected, "{options} {cooldown:?}");
        assert!(lock.held().is_some(), "{options} {cooldown:?}: unanswered, still held");
        // Taken by another since, where no cooldown keeps it shut.
        let next = cooldown.is_zero().then(|| direct.try_acquire().expect("free for the others"));
        assert_eq!(lock.release(cooldown), Ok(ReleaseOutcome::Released), "{options} {cooldown:?}");
        if let Some(next) = next {
            assert_eq!(next.took_over_from, None, "{options}: it was given back");
            assert_eq!(direct.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "{options}: and still held");
        }
    }
}

#[test]
fn a_refused_wait_for_replicas_gives_the_lock_back() {
    let Some(redis) = server(&[]) else { return };
    redis.command(&["ACL", "SETUSER", "nowait", "on", ">pw", "~lockcore:*", "+@all", "-wait"]);
    let socket = testkit::percent_encode(redis.socket().to_str().unwrap());
    let mut lock = open_lock(&format!("redis://nowait:pw@{socket}/refused?replicas=1"));
    let refused = lock.try_acquire();
    assert!(matches!(&refused, Err(Error::Server(_))), "{refused:?}");
    assert!(lock.held().is_none());
    assert_eq!(redis.command(&["EXISTS", "lockcore:{refused}:lock"]), "0", "given back after {refused:?}");
}

/// A record this library would never write (a fence with a leading zero)
/// of a holder that is dead on this host: refused as foreign, in one
/// attempt, rather than judged dead and broken by bytes that are not its
/// own, again and again.
#[test]
fn a_holder_record_not_as_this_library_writes_it_is_refused_at_once() {
    let Some(redis) = server(&[]) else { return };
    let spec = redis.spec("odd", "");
    let fence = leave_lock(&spec, owner_as(common::dead_pid(), 1)).fence.to_string();
    let value = redis.command(&["GET", "lockcore:{odd}:lock"]);
    let odd = value.replacen(&format!(" {fence} "), &format!(" 0{fence} "), 1);
    assert_ne!(odd, value, "the record carries its fence");
    redis.command(&["SET", "lockcore:{odd}:lock", &odd]);
    redis.command(&["CONFIG", "RESETSTAT"]);
    let mut lock = open_lock(&spec);
    let budget = Duration::from_millis(500);
    let got = by_deadline(budget, || lock.acquire(Some(budget)));
    assert_eq!(server_problem(got), ServerProblem::ForeignKeys);
    let stats = redis.command(&["INFO", "commandstats"]);
    let scripts: u64 = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0);
    assert!(scripts <= 2, "{scripts} scripts run for one refusal");
    assert_eq!(redis.command(&["GET", "lockcore:{odd}:lock"]), odd, "left alone");
}

/// A server at `maxclients` answers a new client's first command with an
/// error and hangs up: trouble that passes when a client leaves, not a
/// refused login.
#[test]
fn a_full_server_is_waited_through_and_not_called_a_refused_login() {
    let Some(redis) = server(&["--maxclients", "1", "--requirepass", "pw"]) else { return };
    // The one client there is room for, logged in and answered.
    let mut hog = std::os::unix::net::UnixStream::connect(redis.socket()).unwrap();
    std::io::Write::write_all(&mut hog, b"AUTH pw\r\n").unwrap();
    let mut ok = [0u8; 5];
    std::io::Read::read_exact(&mut hog, &mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let socket = testkit::percent_encode(redis.socket().to_str().unwrap());
    let mut lock = open_lock(&format!("redis://:pw@{socket}/full?ttl=1s"));
    // The error line, or the connection closed under the login (which one
    // depends on whether the login went out before the server hung up).
    let full = server_problem(lock.try_acquire());
    assert!(full.may_pass() && full != ServerProblem::AuthRefused, "{full:?}");
    let leaves = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(hog);
    });
    lock.acquire(Some(PATIENCE)).expect("taken once the server has room");
    leaves.join().unwrap();
}

/// A node on loopback that answers `TIME` itself, as every node does, and
/// every other question with what `answer` makes of it: what a client
/// cannot tell from a server that answers so.
fn fake_node(answer: impl Fn(&[u8]) -> String + Clone + Send + 'static) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                // One question per read: the client waits for each answer.
                while let Ok(n @ 1..) = client.read(&mut buf) {
                    let reply = if buf[..n].windows(4).any(|w| w == b"TIME") {
                        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
                        let (secs, micros) = (now.as_secs().to_string(), now.subsec_micros().to_string());
                        format!("*2\r\n${}\r\n{secs}\r\n${}\r\n{micros}\r\n", secs.len(), micros.len())
                    } else {
                        answer(&buf[..n])
                    };
                    if client.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A cluster's seed, as far as a client can tell: it sends every script to
/// the node whose port `to` holds, with `MOVED`.
fn moving_seed(to: std::sync::Arc<std::sync::atomic::AtomicU16>) -> u16 {
    fake_node(move |_| format!("-MOVED 1 127.0.0.1:{}\r\n", to.load(std::sync::atomic::Ordering::SeqCst)))
}

/// A script's answer no script of ours gives (a line of waiters counted
/// below zero) is the server's protocol broken, not a line to report.
#[test]
fn an_answer_no_script_gives_is_a_protocol_error() {
    let node = fake_node(|_| "*4\r\n$4\r\nbusy\r\n$0\r\n\r\n:-1\r\n:-1\r\n".to_string());
    let mut lock = open_lock(&format!("redis://127.0.0.1:{node}/liar"));
    assert_eq!(server_problem(lock.try_acquire()), ServerProblem::Protocol);
}

/// Once the node a redirection named is gone (its slot moved to another
/// after a failover), the handle asks the node its spec names again.
#[test]
fn a_handle_goes_back_to_its_seed_when_the_node_it_was_sent_to_is_gone() {
    let Some(mut first) = server(&[]) else { return };
    let second = Redis::start(&[]);
    let to = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(first.port()));
    let seed = moving_seed(std::sync::Arc::clone(&to));
    let mut lock = open_lock(&format!("redis://127.0.0.1:{seed}/moving?ttl=10s"));
    lock.try_acquire().expect("sent to the first node");
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    first.kill();
    to.store(second.port(), std::sync::atomic::Ordering::SeqCst);
    lock.acquire(Some(PATIENCE)).expect("the seed sends it to the second node");
    assert_eq!(second.command(&["EXISTS", "lockcore:{moving}:lock"]), "1");
}

/// With a name server that never answers, a target named by a host name
/// costs a call no more than its deadline: the lookup is waited for only
/// that long (the resolver's own timeout is 3 s here, tried twice).
#[test]
fn a_host_name_no_name_server_answers_for_costs_no_more_than_the_deadline() {
    let own_mounts = ["unshare", "--mount", "--propagation", "private", "true"];
    if !std::process::Command::new(own_mounts[0]).args(&own_mounts[1..]).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: `unshare --mount` does not run here (it needs root)");
        return;
    }
    // Bound, never read: queries to it go unanswered.
    let Ok(_silent) = std::net::UdpSocket::bind("127.9.9.9:53") else {
        eprintln!("skipped: no port 53 to bind on 127.9.9.9 (it needs root)");
        return;
    };
    let dir = TestDir::new("silent-resolver");
    let conf = dir.join("resolv.conf");
    std::fs::write(&conf, "nameserver 127.9.9.9\noptions timeout:3 attempts:2\n").unwrap();
    let bind = format!("mount --bind '{}' /etc/resolv.conf && exec \"$@\"", conf.display());
    let wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", &bind, "sh"];
    let spec = "redis://never-answered.invalid:6379/silent?ttl=1s".to_string();
    let status = common::child_command(&wrapper, "acquire", &[("SPEC", spec)]).status().unwrap();
    assert!(status.success(), "the call waited for the resolver past its deadline, or failed otherwise: {status}");
}

//! The toplock queue file under states a plain run rarely reaches: each test
//! writes the log into the state (as a process with a stepped-back clock, a
//! burst of waiters, an operator or a compaction would leave it) and checks
//! that the queue still admits one holder at a time, with strictly
//! increasing fences, and never wedges.
//!
//! Lines are appended here the way the library appends them: one `write` to
//! a file opened with `O_APPEND`, to a queue the library made (a file whose
//! first line is no header is not a queue, and is never written). Their
//! times are the boot clock's, as every time in a queue is. Nonces of
//! requests that no process owns are made up; their owners are on another
//! host (`elsewhere`), so only their own TTL, written in their request, can
//! end them.
//!
//! Waiters whose request a test counts, pads around or breaks wait with
//! `fair=0`: these tests are about toplock's own queue, in which such a
//! waiter keeps one request between its attempts. A waiter in the
//! turnstile (`fair=1`) writes a request only with its grant, so it would
//! not show in the log at all.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::files::{ofd_lock, ofd_unlock};
use common::*;
use lockcore::internals::{COMPACT_AT, QUEUE_CAPACITY};
use lockcore::{BootTime, CorruptKind, ErrorKind, Lock, ProlongOutcome, ReleaseOutcome};

const HOUR_NS: i64 = 3_600_000_000_000;

/// Now on the queue's clock: the boot clock, in nanoseconds.
fn now_ns() -> i64 {
    BootTime::now().nanos()
}

/// Now on the wall clock, in Unix nanoseconds.
fn wall_ns() -> i64 {
    wall_now().unix_nanos()
}

fn open(queue: &Path, query: &str) -> Lock {
    open_lock(&format!("toplock:{}?{query}", queue.display()))
}

/// Appends to a queue that must exist (made by [`queue_in`]).
fn append(queue: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(queue).unwrap();
    file.write_all(bytes).unwrap();
}

fn len(queue: &Path) -> usize {
    fs::metadata(queue).map_or(0, |m| m.len() as usize)
}

/// A nonce no process owns.
fn made_up_nonce() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{:032x}", 0xdead_0000_0000u128 + NEXT.fetch_add(1, Ordering::Relaxed) as u128)
}

/// A request by a process on another host, which may stay head without a
/// grant for `ttl` before the others skip it.
fn foreign_request(nonce: &str, pid: u32, ttl: Duration) -> String {
    format!("R {nonce} elsewhere - 0 {pid} 777 {} {}\n", ttl.as_nanos(), now_ns())
}

/// Appends `D` lines for requests that were never made (no-ops in replay;
/// their times, all zeros, do not move the log's clock either) until the
/// file is exactly `target` bytes: what the traffic of others does to the
/// log's length, without changing who holds or waits.
fn pad_to(queue: &Path, target: usize) {
    // "D <32 hex> <t> <not before>\n": 37 bytes and two fields of 1 to 20 digits.
    const SHORTEST: usize = 39;
    const LONGEST: usize = 77;
    let mut remaining = target - len(queue);
    assert!(remaining == 0 || remaining >= SHORTEST, "cannot pad {remaining} bytes");
    let mut lines = String::new();
    while remaining > 0 {
        let line_len = if remaining <= LONGEST {
            remaining
        } else if remaining - LONGEST >= SHORTEST {
            LONGEST
        } else {
            remaining - SHORTEST
        };
        let digits = line_len - 37;
        lines.push_str(&format!(
            "D {} {} {}\n",
            made_up_nonce(),
            "0".repeat(digits / 2),
            "0".repeat(digits - digits / 2)
        ));
        remaining -= line_len;
    }
    append(queue, lines.as_bytes());
    assert_eq!(len(queue), target);
}

fn requests_in(queue: &Path) -> Vec<String> {
    let text = fs::read_to_string(queue).unwrap_or_default();
    text.lines().filter(|l| l.starts_with("R ")).map(|l| l[2..34].to_string()).collect()
}

/// Waits until the log holds `n` requests (waiters queue in threads).
fn wait_for_requests(queue: &Path, n: usize) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while requests_in(queue).len() < n {
        assert!(Instant::now() < give_up, "{n} requests never reached the queue");
        thread::sleep(Duration::from_millis(5));
    }
}

/// A new, empty queue in `dir`, made by the library (its header first).
fn queue_in(dir: &TestDir) -> PathBuf {
    let queue = dir.join("queue");
    let info = open(&queue, "ttl=1h").inspect().expect("a new queue");
    assert_eq!(info.queue_length, Some(0));
    queue
}

/// The kind of a result's error, to compare without its details.
fn kind<T>(result: Result<T, lockcore::Error>) -> Result<(), ErrorKind> {
    result.map(|_| ()).map_err(|e| e.kind())
}

/// An attempt that keeps no place (a try, a waiter in the turnstile) writes
/// its request only with its grant: the log of a busy lock does not grow
/// with the attempts of those who wait for it, and nobody shows in its
/// queue who does not wait in it.
#[test]
fn an_attempt_that_keeps_no_place_writes_nothing_until_it_is_granted() {
    let dir = TestDir::new("toplock-no-place");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=1h");
    holder.try_acquire().unwrap();
    let held = fs::read_to_string(&queue).unwrap();
    let mut other = open(&queue, "ttl=1h");
    match other.try_acquire() {
        Err(lockcore::Error::Busy(lockcore::Contention::Queued { ahead: 1, holder: Some(_) })) => {}
        answer => panic!("a try behind the holder answered {answer:?}"),
    }
    assert_eq!(kind(other.acquire(Some(Duration::from_millis(50)))), Err(ErrorKind::Timeout));
    assert_eq!(fs::read_to_string(&queue).unwrap(), held, "the log is as the holder left it");
    assert_eq!(other.inspect().unwrap().queue_length, Some(1), "the holder alone");
    holder.release(Duration::ZERO).unwrap();
    other.try_acquire().expect("the try after the release");
    assert_eq!(requests_in(&queue).len(), 2, "one request each, the second granted with it");
}

/// A request cut off inside its last number (by a writer that died or ran
/// out of space, or planted so by another user) is closed by the next
/// appender as no line at all, for every reader: it never stands before
/// the request that closed it, whether the lock was free or held past its
/// grant. Had it counted, it would have been passed over once its own
/// patience ran out, and a second try would have taken the lock.
#[test]
fn a_torn_request_closed_by_the_next_try_stands_before_nobody() {
    for overran in [false, true] {
        let dir = TestDir::new("toplock-torn-request");
        let queue = queue_in(&dir);
        let mut earlier = open(&queue, "ttl=200ms");
        earlier.try_acquire().unwrap();
        if overran {
            thread::sleep(Duration::from_millis(300));
        } else {
            earlier.release(Duration::ZERO).unwrap();
        }
        let request = foreign_request(&made_up_nonce(), 4242, Duration::from_millis(300));
        let torn = &request.as_bytes()[..request.len() - 4];
        append(&queue, torn);
        let mut first = open(&queue, "ttl=1h");
        first.try_acquire().unwrap_or_else(|e| panic!("overran {overran}: the try after a torn request: {e}"));
        assert!(fs::read_to_string(&queue).unwrap().contains(" ~\n"), "the torn line was closed as none");
        thread::sleep(Duration::from_millis(1000));
        let mut second = open(&queue, "ttl=1h");
        assert_eq!(kind(second.try_acquire()), Err(ErrorKind::Busy), "overran {overran}: a second try");
        assert_eq!(first.release(Duration::ZERO), Ok(ReleaseOutcome::Released), "overran {overran}");
    }
}

/// Another user of a shared queue appends, ignoring the file's lock, while
/// tries take the lock and let it go: bytes that land between a try's read
/// of the log and its write glue its request to a torn line, so that its
/// grant stands for nobody. A try told it holds the lock is the holder the
/// log names, every time.
#[test]
fn a_try_told_it_holds_the_lock_is_the_holder_whatever_lands_before_its_lines() {
    let dir = TestDir::new("toplock-glued");
    let queue = queue_in(&dir);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let plants = {
        let (queue, stop) = (queue.clone(), stop.clone());
        thread::spawn(move || {
            let mut file = OpenOptions::new().append(true).open(&queue).unwrap();
            let mut plants = 0u64;
            while !stop.load(Ordering::Relaxed) {
                file.write_all(b"x").unwrap();
                plants += 1;
                thread::sleep(Duration::from_micros(20));
            }
            plants
        })
    };
    // A release glued to a planted byte does not count either: the short
    // ttl lets the next try take over the lock it left held.
    let mut lock = open(&queue, "ttl=5ms");
    let (mut held, mut misled) = (0, Vec::new());
    for round in 0..3000 {
        if lock.try_acquire().is_err() {
            continue;
        }
        held += 1;
        let info = lock.inspect().unwrap();
        if !info.holder.is_some_and(|holder| holder.this_handle) {
            misled.push(round);
        }
        let _ = lock.release(Duration::ZERO);
    }
    stop.store(true, Ordering::Relaxed);
    let plants = plants.join().unwrap();
    assert!(held > 0 && plants > 0, "{held} acquisitions, {plants} bytes planted");
    assert!(misled.is_empty(), "told it held the lock the log gave nobody, in rounds {misled:?} of {held}");
}

/// A line stamped an hour ahead of the reader's clock holds the log's clock
/// there (the log's clock never runs back). A grant measured by the
/// reader's clock alone would look expired to everyone else at once; it
/// gets its whole TTL on the log's clock.
#[test]
fn a_line_from_the_future_does_not_let_a_second_holder_in() {
    let dir = TestDir::new("toplock-future");
    let queue = queue_in(&dir);
    append(&queue, format!("D {} {} 0\n", made_up_nonce(), now_ns() + HOUR_NS).as_bytes());
    let mut first = open(&queue, "ttl=30s");
    let mut second = open(&queue, "ttl=30s");
    let held = first.try_acquire().expect("the queue is free");
    assert!(
        held.expires.is_some_and(|at| at.unix_nanos() > wall_ns() + 20_000_000_000),
        "the grant is measured on the log's clock, not already run out: {held:?}"
    );
    assert_eq!(kind(second.try_acquire()), Err(ErrorKind::Busy));
    assert_eq!(first.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert!(second.try_acquire().is_ok(), "free again after the release");
}

/// More waiters than one replay tracks: the ones that do not fit are left
/// out (and queue again), and the holder can still release.
#[test]
fn more_waiters_than_the_table_holds_do_not_wedge_the_lock() {
    let dir = TestDir::new("toplock-burst");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=30s");
    holder.try_acquire().unwrap();
    let burst: String =
        (0..128).map(|pid| foreign_request(&made_up_nonce(), 1000 + pid, Duration::from_secs(30))).collect();
    append(&queue, burst.as_bytes());
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    let info = open(&queue, "ttl=30s").inspect().expect("inspect");
    assert!(info.queue_length.is_some_and(|n| n >= 100), "the burst still waits: {info:?}");
}

/// A compaction between an acquirer's grant and its read-back renumbers
/// the replay table; the fence must be the acquirer's own.
#[test]
fn fences_stay_distinct_when_a_compaction_comes_inside_an_acquire() {
    let dir = TestDir::new("toplock-compact-fence");
    let queue = queue_in(&dir);
    let mut first = open(&queue, "ttl=60s");
    let first_fence = first.acquire(None).unwrap().fence;
    let (fences, fence_seen) = mpsc::channel();
    let (go_release, release_now) = mpsc::channel::<()>();
    let spawn_waiter = |name: &'static str, hold_until: Option<mpsc::Receiver<()>>| {
        let queue = queue.clone();
        let fences = fences.clone();
        thread::spawn(move || {
            let mut lock = open(&queue, "ttl=60s&fair=0");
            let fence = lock.acquire(Some(Duration::from_secs(60))).unwrap().fence;
            fences.send((name, fence)).unwrap();
            if let Some(hold_until) = hold_until {
                hold_until.recv().unwrap();
            }
            lock.release(Duration::ZERO).unwrap();
        })
    };
    let second = spawn_waiter("second", Some(release_now));
    wait_for_requests(&queue, 2);
    let third = spawn_waiter("third", None);
    wait_for_requests(&queue, 3);
    // The release and the next grant take the log past the compaction
    // threshold, between the grant and its read-back.
    let release_line = format!("D {} {} 0\n", made_up_nonce(), now_ns()).len();
    pad_to(&queue, COMPACT_AT - release_line - 30);
    assert_eq!(first.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    let (who, fence) = fence_seen.recv().unwrap();
    go_release.send(()).unwrap();
    let (next_who, next_fence) = fence_seen.recv().unwrap();
    second.join().unwrap();
    third.join().unwrap();
    assert!(
        fence > first_fence && next_fence > fence,
        "fences must strictly increase: first {first_fence}, {who} {fence}, {next_who} {next_fence}"
    );
}

/// The same renumbering inside a prolong: the holder must not be told it
/// lost a lock the log still gives it.
#[test]
fn a_prolong_across_a_compaction_keeps_the_lock() {
    let dir = TestDir::new("toplock-compact-prolong");
    let queue = queue_in(&dir);
    let mut earlier = open(&queue, "ttl=60s");
    earlier.try_acquire().unwrap();
    earlier.release(Duration::ZERO).unwrap();
    let mut holder = open(&queue, "ttl=60s");
    holder.try_acquire().unwrap();
    let waiting_queue = queue.clone();
    let waiter = thread::spawn(move || open(&waiting_queue, "ttl=60s&fair=0").acquire(Some(Duration::from_secs(60))));
    wait_for_requests(&queue, 3);
    pad_to(&queue, COMPACT_AT - 40);
    assert_eq!(holder.prolong(None), Ok(ProlongOutcome::Prolonged));
    assert!(holder.held().is_some());
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert!(waiter.join().unwrap().is_ok(), "the waiter gets the lock after the release");
}

/// An operator breaks a waiter's request just as it becomes head and
/// appends its grant; a compaction then drops the broken request. The
/// waiter must not believe it holds the lock.
///
/// A shared lock on the queue file (an OFD read lock, held by the test, as
/// a reader's) lets the waiter read the log but holds back its grant's
/// append; whether the waiter reached that append before the break is up
/// to the scheduler, so the check is the one that must hold either way:
/// never two holders.
#[test]
fn a_waiter_broken_before_its_grant_does_not_hold() {
    let dir = TestDir::new("toplock-broken-waiter");
    let queue = queue_in(&dir);
    let mut first = open(&queue, "ttl=60s");
    first.try_acquire().unwrap();
    let first_nonce: String = first.held().unwrap().nonce.hex().iter().map(|&b| b as char).collect();
    let (result, result_seen) = mpsc::channel();
    let waiting_queue = queue.clone();
    let waiter = thread::spawn(move || {
        let mut lock = open(&waiting_queue, "ttl=60s&fair=0");
        result.send(lock.acquire(Some(Duration::from_secs(20)))).unwrap();
        lock
    });
    wait_for_requests(&queue, 2);
    let waiter_nonce = requests_in(&queue)[1].clone();
    let file = fs::File::open(&queue).unwrap();
    // A shared lock beside the readers'; the waiter holds the file
    // exclusively for a moment whenever it appends, so try until it lets go.
    let patience = Instant::now() + Duration::from_secs(10);
    while !ofd_lock(&file, false).unwrap() {
        assert!(Instant::now() < patience, "the queue file stayed locked for 10 s");
        thread::sleep(Duration::from_millis(1));
    }
    // The first holder's release, as its release writes it, then the break.
    append(&queue, format!("D {first_nonce} {} 0\n", now_ns()).as_bytes());
    first.forget();
    thread::sleep(Duration::from_millis(300));
    append(&queue, format!("B {waiter_nonce} {}\n", now_ns()).as_bytes());
    pad_to(&queue, len(&queue) + 4000);
    assert!(ofd_unlock(&file).unwrap());
    let waited = result_seen.recv().unwrap();
    let taken = open(&queue, "ttl=60s").try_acquire();
    let mut waiter = waiter.join().unwrap();
    assert!(waited.is_err() || taken.is_err(), "two holders: the broken waiter {waited:?}, the next {taken:?}");
    waiter.forget();
}

/// With `stale=none`, an ungranted head (a waiter that stopped polling) is
/// skipped its `ttl` after it became head, also while other traffic keeps
/// the log compacting more often than that.
#[test]
fn compaction_does_not_restart_a_stuck_heads_ttl() {
    let dir = TestDir::new("toplock-stuck-head");
    let queue = queue_in(&dir);
    append(&queue, foreign_request(&made_up_nonce(), 4242, Duration::from_secs(2)).as_bytes());
    let waiting_queue = queue.clone();
    // The traffic lasts longer than the waiter's patience, and compacts the
    // log every half second or so.
    let waiter = thread::spawn(move || open(&waiting_queue, "ttl=2s&stale=none").acquire(Some(Duration::from_secs(8))));
    let traffic_until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < traffic_until && !waiter.is_finished() {
        thread::sleep(Duration::from_millis(200));
        let churn: String = (0..12)
            .map(|_| {
                let nonce = made_up_nonce();
                format!("{}D {nonce} {} 0\n", foreign_request(&nonce, 4343, Duration::from_secs(2)), now_ns())
            })
            .collect();
        append(&queue, churn.as_bytes());
    }
    let waited = waiter.join().unwrap();
    assert!(waited.is_ok(), "the stuck head kept the lock past its ttl: {waited:?}");
}

/// A forged header with the largest fence: no fence is left to hand out,
/// so no grant is made (never a wrapped fence, or fences started again),
/// while the queue can still be read. A header of another format version
/// (or a second header) is refused as corrupt. Never a panic.
#[test]
fn a_header_with_the_largest_fence_or_another_version_is_corrupt() {
    let boot = lockcore::BootId::current().map_or("-".to_owned(), |id| format!("{id:?}"));
    let kernel = lockcore::BootId::kernel().map_or("-".to_owned(), |id| format!("{id:?}"));
    let dir = TestDir::new("toplock-forged-header-largest");
    let queue = dir.join("queue");
    write_private(&queue, format!("H 4 {kernel} {boot} 0 0 0 {} -\n", u64::MAX));
    let mut lock = open(&queue, "ttl=30s");
    assert_eq!(lock.inspect().map(|info| info.last_fence), Ok(u64::MAX));
    assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Corrupt(CorruptKind::Record)));

    for (label, header) in
        [("version", "H 2 7 0 0 0 7 -\n".to_owned()), ("second", format!("H 4 {kernel} {boot} 0 0 0 7 -\n"))]
    {
        let dir = TestDir::new(&format!("toplock-forged-header-{label}"));
        let queue = dir.join("queue");
        let first = if label == "second" { header.clone() } else { String::new() };
        write_private(&queue, format!("{first}{header}"));
        let mut lock = open(&queue, "ttl=30s");
        assert_eq!(kind(lock.inspect()), Err(ErrorKind::Corrupt(CorruptKind::Record)), "{label}");
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Corrupt(CorruptKind::Record)), "{label}");
    }
}

/// An ungranted head is skipped by its requester's own `ttl`, written in
/// its request, not by the reader's. A reader opened with a shorter `ttl`
/// skipping a head that the others (and the head itself) still count as
/// head would let two hold at once.
#[test]
fn an_ungranted_head_is_skipped_by_its_own_ttl_not_the_readers() {
    let dir = TestDir::new("toplock-own-ttl");
    let queue = queue_in(&dir);
    append(&queue, foreign_request(&made_up_nonce(), 4242, Duration::from_secs(3600)).as_bytes());
    let mut impatient = open(&queue, "ttl=300ms");
    assert_eq!(
        kind(impatient.acquire(Some(Duration::from_millis(1500)))),
        Err(ErrorKind::Timeout),
        "a head with an hour's patience is skipped by a reader's 300 ms"
    );

    let dir = TestDir::new("toplock-own-ttl-short");
    let queue = queue_in(&dir);
    append(&queue, foreign_request(&made_up_nonce(), 4242, Duration::from_millis(300)).as_bytes());
    let mut patient = open(&queue, "ttl=1h");
    assert!(
        patient.acquire(Some(Duration::from_secs(20))).is_ok(),
        "a head with 300 ms of patience is not skipped after it by a reader whose own ttl is an hour"
    );
}

/// A line stamped after every reader's clock (the end of time, say), which
/// no writer of this boot can have written, is not believed: counted, it
/// would hold the log's clock there, so that every grant ended the moment
/// it was made and every waiter could take the lock from its holder.
#[test]
fn a_line_stamped_at_the_end_of_time_does_not_end_every_grant() {
    let dir = TestDir::new("toplock-end-of-time");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=1h");
    holder.try_acquire().unwrap();
    append(&queue, format!("X {} {}\n", made_up_nonce(), i64::MAX).as_bytes());
    let mut waiter = open(&queue, "ttl=1h");
    assert_eq!(kind(waiter.try_acquire()), Err(ErrorKind::Busy), "the holder's grant ended at once");
    assert_eq!(holder.release(Duration::ZERO), Ok(lockcore::ReleaseOutcome::Released));
    assert!(waiter.acquire(Some(Duration::from_secs(20))).is_ok());
    let mut third = open(&queue, "ttl=1h");
    assert_eq!(kind(third.try_acquire()), Err(ErrorKind::Busy), "the next holder's grant too");
}

/// A request says how long its waiter will wait: the shorter of its `ttl`
/// and its wait budget. A waiter that gives up, and whose request stays in
/// the queue (its file held by others past the deadline, or the waiter
/// killed before it could take it out), holds the queue up no longer than
/// that once its request reaches the head.
#[test]
fn a_request_tells_how_long_its_waiter_waits() {
    let dir = TestDir::new("toplock-waits-for");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=1h");
    holder.try_acquire().unwrap();
    // `fair=0`: toplock's own queue keeps the waiter's request between its
    // attempts only outside the turnstile (in line, the turnstile is the
    // queue, and a failed attempt takes its request out again).
    let mut waiter = open(&queue, "ttl=1h&fair=0");
    assert_eq!(kind(waiter.acquire(Some(Duration::from_millis(300)))), Err(ErrorKind::Timeout));
    let text = fs::read_to_string(&queue).unwrap();
    let patience: Vec<i64> = text
        .lines()
        .filter(|l| l.starts_with("R "))
        .map(|l| l.split(' ').nth(7).expect("a request's patience").parse().expect("nanoseconds"))
        .collect();
    assert_eq!(patience.len(), 2, "the holder's request and the waiter's: {text}");
    assert_eq!(patience[0], 50_000_000, "a try waits 50 ms");
    assert!(
        patience[1] <= 300_000_000 && patience[1] >= 250_000_000,
        "a 300 ms acquire waits at most 300 ms, not its hour of ttl: {}",
        patience[1]
    );
    // The waiter's request is written back into the queue, as if it had
    // been killed before it could take it out: once at the head, it is
    // passed over after its 300 ms, not its ttl of an hour.
    let nonce = made_up_nonce();
    append(&queue, foreign_request(&nonce, std::process::id(), Duration::from_millis(300)).as_bytes());
    holder.release(Duration::ZERO).unwrap();
    let mut next = open(&queue, "ttl=1h");
    assert!(next.acquire(Some(Duration::from_secs(20))).is_ok(), "a request whose waiter gave up held the queue");
}

/// An `X` line (a waiter found the head's owner dead) counts for every
/// reader, also one that would not judge owners itself (`stale=none`):
/// otherwise the two would replay the log to different holders.
#[test]
fn a_skip_counts_for_every_reader() {
    let dir = TestDir::new("toplock-skip");
    let queue = queue_in(&dir);
    let nonce = made_up_nonce();
    append(&queue, foreign_request(&nonce, 4242, Duration::from_secs(3600)).as_bytes());
    append(&queue, format!("X {nonce} {}\n", now_ns()).as_bytes());
    let mut judges_nobody = open(&queue, "ttl=1h&stale=none");
    let info = judges_nobody.inspect().unwrap();
    assert_eq!(info.queue_length, Some(0), "the skipped head still counts: {info:?}");
    assert!(judges_nobody.try_acquire().is_ok(), "the skipped head still blocks a stale=none reader");
}

/// A line torn by a writer that died (or ran out of space) inside its
/// write has no newline; the next line appended must not be glued to it
/// and lost with it. Here that line is a release.
#[test]
fn a_torn_line_does_not_swallow_the_next_one() {
    let dir = TestDir::new("toplock-torn");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=1h");
    holder.try_acquire().unwrap();
    append(&queue, b"R 0123456789abcdef");
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    let mut next = open(&queue, "ttl=1h");
    assert!(next.acquire(Some(Duration::from_secs(10))).is_ok(), "the release after the torn line was lost");
    let text = fs::read_to_string(&queue).unwrap();
    assert!(text.contains("R 0123456789abcdef ~\nD "), "the torn line is closed before the release: {text:?}");
}

/// A holder that overran its grant, with a request queued behind it that
/// nobody polls for yet, releases with a cooldown: nobody took the lock
/// over, so the release answers `Expired` and the cooldown holds, as it
/// does for `lease`.
#[test]
fn a_release_after_an_overrun_keeps_its_cooldown() {
    let dir = TestDir::new("toplock-overrun-cooldown");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=300ms");
    holder.try_acquire().unwrap();
    append(&queue, foreign_request(&made_up_nonce(), 4242, Duration::from_secs(3600)).as_bytes());
    let expires = holder.held().unwrap().expires.unwrap();
    wait_until("the grant to run out", || expires.has_come(holder.now()));
    assert_eq!(holder.release(Duration::from_secs(60)), Ok(ReleaseOutcome::Expired));
    assert_cooling_down_for_30s_or_more(&queue);
}

/// Checks that the queue keeps a cooldown of at least 30 s more.
fn assert_cooling_down_for_30s_or_more(queue: &Path) {
    let info = open(queue, "ttl=1h").inspect().unwrap();
    assert!(
        info.cooldown_until.is_some_and(|until| until.unix_nanos() > wall_ns() + 30_000_000_000),
        "the cooldown was dropped: {info:?}"
    );
}

/// A holder of the queue whose 300 ms grant has run out, and its acquisition.
fn overrun_holder(queue: &Path) -> (Lock, lockcore::Acquired) {
    let mut holder = open(queue, "ttl=300ms");
    let acquired = holder.try_acquire().unwrap();
    let expires = holder.held().unwrap().expires.unwrap();
    wait_until("the grant to run out", || expires.has_come(holder.now()));
    (holder, acquired)
}

/// A waiter on another host that comes (after an overrun: the overrun
/// holder's turn ends then) and gives up.
fn a_waiter_comes_and_gives_up(queue: &Path) {
    let foreign = made_up_nonce();
    append(queue, foreign_request(&foreign, 4242, Duration::from_secs(3600)).as_bytes());
    append(queue, format!("D {foreign} {} 0\n", now_ns()).as_bytes());
}

/// A holder that overran its grant while someone waited, taken over by the
/// next in line whose grant's own line brings the log to compaction, between
/// the grant and its read-back: the new holder is still told whose lock it
/// took over, and that one is told it lost it.
#[test]
fn a_takeover_is_told_across_a_compaction() {
    let dir = TestDir::new("toplock-compact-takeover");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=300ms");
    let held = holder.try_acquire().unwrap();
    let waiting_queue = queue.clone();
    let waiter = thread::spawn(move || open(&waiting_queue, "ttl=60s&fair=0").acquire(Some(Duration::from_secs(60))));
    wait_for_requests(&queue, 2);
    pad_to(&queue, COMPACT_AT - 40);
    let acquired = waiter.join().unwrap().expect("the waiter takes the overrun lock");
    assert!(len(&queue) < COMPACT_AT, "the log was compacted: {} bytes", len(&queue));
    let gone = acquired.took_over_from.expect("the acquisition names the holder it took over from");
    assert_eq!((gone.pid, gone.record.map(|r| r.fence)), (std::process::id() as i32, Some(held.fence)));
    assert!(gone.stale && !acquired.previous_holder_died(), "overran, not dead: {gone:?}");
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
}

/// A holder that overran its grant while someone waited, who then gave up:
/// nobody took the lock. Writes of others that take the log past the
/// compaction threshold meanwhile must not turn the holder's late release
/// into `Lost`, nor drop its cooldown.
#[test]
fn an_overrun_nobody_took_is_still_told_expired_after_the_log_grew() {
    let dir = TestDir::new("toplock-compact-overrun");
    let queue = queue_in(&dir);
    let (mut holder, _) = overrun_holder(&queue);
    a_waiter_comes_and_gives_up(&queue);
    pad_to(&queue, COMPACT_AT + 100);
    // Reads and a write of this library: each would compact a log this long.
    let mut other = open(&queue, "ttl=60s&fair=0");
    other.inspect().unwrap();
    append(&queue, foreign_request(&made_up_nonce(), 4243, Duration::from_secs(3600)).as_bytes());
    assert_eq!(kind(other.try_acquire()), Err(ErrorKind::Busy));
    assert_eq!(holder.release(Duration::from_secs(60)), Ok(ReleaseOutcome::Expired), "nobody took it");
    assert_cooling_down_for_30s_or_more(&queue);
}

/// The same state (a holder that overran its grant, a waiter that came and
/// gave up), in a log the traffic of others has filled: the next acquirer
/// must still get the lock, the log compacted to make room, not be told the
/// queue is full for ever; and the compaction must not forget the holder it
/// takes the lock over from, nor tell that holder's late release anything
/// but that the lock was taken.
#[test]
fn a_full_log_is_compacted_while_an_overrun_waits_to_be_taken_over() {
    let dir = TestDir::new("toplock-full-overrun");
    let queue = queue_in(&dir);
    let (mut holder, overrun) = overrun_holder(&queue);
    a_waiter_comes_and_gives_up(&queue);
    pad_to(&queue, QUEUE_CAPACITY - 60);
    let mut next = open(&queue, "ttl=60s");
    let taken = next.try_acquire().expect("the next acquirer gets the lock");
    assert!(taken.fence > overrun.fence);
    assert!(len(&queue) < COMPACT_AT, "the log was compacted: {} bytes", len(&queue));
    let gone = taken.took_over_from.expect("the acquisition names the holder it took over from");
    assert_eq!((gone.pid, gone.record.map(|r| r.fence)), (std::process::id() as i32, Some(overrun.fence)));
    assert!(gone.stale && !taken.previous_holder_died(), "overran, not dead: {gone:?}");
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
}

/// A holder that overran its grant while another host's request waits
/// behind it, in a log the traffic of others has filled: a process that
/// queues makes room by compacting the log. Nobody has taken the lock, so
/// the holder's late release is still told its grant ran out, and its
/// cooldown holds, as in a log that never filled.
#[test]
fn an_overrun_nobody_took_is_told_expired_after_a_full_log_was_compacted() {
    let dir = TestDir::new("toplock-full-overrun-untaken");
    let queue = queue_in(&dir);
    let (mut holder, _) = overrun_holder(&queue);
    append(&queue, foreign_request(&made_up_nonce(), 4242, Duration::from_secs(3600)).as_bytes());
    pad_to(&queue, QUEUE_CAPACITY - 60);
    let mut other = open(&queue, "ttl=60s&fair=0");
    assert_eq!(kind(other.try_acquire()), Err(ErrorKind::Busy), "behind the other host's request");
    assert!(len(&queue) < COMPACT_AT, "the log was compacted: {} bytes", len(&queue));
    assert_eq!(holder.release(Duration::from_secs(60)), Ok(ReleaseOutcome::Expired), "nobody took it");
    assert_cooling_down_for_30s_or_more(&queue);
}

/// Writes a queue as private as the library makes one, so that it is judged
/// by its content and not refused as open to others.
fn write_private(path: &Path, content: String) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, content).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// A queue written on an earlier boot names only processes that are gone:
/// the first process of this boot starts it afresh, keeping its last
/// fence, whether it holds only its header or a holder and waiters of that
/// boot.
#[test]
fn a_queue_of_an_earlier_boot_is_started_afresh() {
    let other = "0123456789abcdef0123456789abcdef";
    let pending = format!(
        "R 0e577984e742ce320fd6a2ea0101d592 vm {other} 4026531836 18461 4318523 250000000 43185237783121\n\
         G 0e577984e742ce320fd6a2ea0101d592 never 43185237783121 41\n\
         R e973a5dad29c5b2f086ec4926788ef95 vm {other} 4026531836 18462 4318523 250000000 43185237815398\n"
    );
    for (label, content) in [
        ("header", format!("H 4 {other} {other} 0 0 0 41 -\n")),
        ("holder and waiter", format!("H 4 {other} {other} 0 0 0 40 -\n{pending}")),
    ] {
        let dir = TestDir::new("toplock-earlier-boot");
        let queue = dir.join("queue");
        write_private(&queue, content);
        let mut lock = open(&queue, "ttl=30s");
        let acquired = lock.try_acquire().unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(acquired.fence > 41, "{label}: fence {} after the earlier boot's 41", acquired.fence);
        lock.release(Duration::ZERO).unwrap();
        let again = lock.try_acquire().unwrap_or_else(|e| panic!("{label}, again: {e}"));
        assert!(again.fence > acquired.fence, "{label}");
        lock.release(Duration::ZERO).unwrap();
    }
}

/// A header that names no kernel boot does not prove the queue is of an
/// earlier boot: its holder may be alive on another clock of this boot (a
/// time namespace), or be a process that could not read the boot id. Such
/// a queue is refused as unsupported and left as it is, never started
/// afresh under its holder, unless its times are on this process's own
/// clock; then the next compaction names the kernel's boot.
#[test]
fn a_queue_whose_header_names_no_kernel_boot_is_not_started_afresh() {
    let (Some(kernel), Some(clock)) = (lockcore::BootId::kernel(), lockcore::BootId::current()) else {
        eprintln!("skipped: this process cannot read the boot id");
        return;
    };
    let other = "0123456789abcdef0123456789abcdef";
    let held = |boot: &str| {
        format!(
            "R 0e577984e742ce320fd6a2ea0101d592 vm {boot} 4026531836 18461 4318523 - 43185237783121\n\
             G 0e577984e742ce320fd6a2ea0101d592 never 43185237783121 41\n"
        )
    };
    for (label, content) in [
        ("no boot at all", format!("H 4 - - 0 0 0 40 -\n{}", held("-"))),
        ("another clock", format!("H 4 - {other} 0 0 0 40 -\n{}", held(other))),
    ] {
        let dir = TestDir::new("toplock-no-kernel-boot");
        let queue = dir.join("queue");
        write_private(&queue, content.clone());
        let mut lock = open(&queue, "ttl=30s");
        assert_eq!(kind(lock.try_acquire()), Err(ErrorKind::Unsupported), "{label}");
        assert_eq!(kind(lock.inspect()), Err(ErrorKind::Unsupported), "{label}");
        assert_eq!(fs::read_to_string(&queue).unwrap(), content, "{label}: the queue was written");
    }
    let dir = TestDir::new("toplock-no-kernel-boot-own-clock");
    let queue = dir.join("queue");
    write_private(&queue, format!("H 4 - {clock:?} 0 0 0 41 -\n"));
    let mut lock = open(&queue, "ttl=30s");
    let acquired = lock.try_acquire().expect("a queue on this process's clock");
    assert!(acquired.fence > 41, "fence {} after 41", acquired.fence);
    lock.release(Duration::ZERO).unwrap();
    pad_to(&queue, COMPACT_AT + 100);
    lock.inspect().unwrap();
    let header = fs::read_to_string(&queue).unwrap().lines().next().unwrap().to_owned();
    assert!(
        header.starts_with(&format!("H 4 {kernel:?} {clock:?} ")),
        "the compaction named the kernel's boot: {header}"
    );
}

/// A data file put at the queue's path while a waiter keeps its place in
/// the queue (an operator's `mv`), which merely starts as a queue does
/// (`H `): the waiter is told it is no lock, and its giving up, which
/// writes a line to the queue, writes nothing to the data file.
#[test]
fn a_waiter_giving_up_never_writes_a_data_file_put_at_the_queue_path() {
    let dir = TestDir::new("toplock-data-file");
    let queue = queue_in(&dir);
    let mut holder = open(&queue, "ttl=1h");
    holder.try_acquire().unwrap();
    let waiting_queue = queue.clone();
    let waiter = thread::spawn(move || {
        open(&waiting_queue, "ttl=60s&fair=0").acquire(Some(Duration::from_secs(10))).map(|_| ()).map_err(|e| e.kind())
    });
    wait_for_requests(&queue, 2);
    let data = "H is for hydrogen\nHe is for helium\n";
    let replacement = dir.join("data");
    write_private(&replacement, data.to_owned());
    fs::rename(&replacement, &queue).unwrap();
    assert_eq!(waiter.join().unwrap(), Err(ErrorKind::NotALock), "the waiter reads the data file as no lock");
    assert_eq!(fs::read_to_string(&queue).unwrap(), data, "the data file was written");
}

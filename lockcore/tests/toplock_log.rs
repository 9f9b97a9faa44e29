//! The toplock queue file under states a plain run rarely reaches: each test
//! writes the log into the state (as a process with a stepped-back clock, a
//! burst of waiters, an operator or a compaction would leave it) and checks
//! that the queue still admits one holder at a time, with strictly
//! increasing fences, and never wedges.
//!
//! Lines are appended here the way the library appends them: one `write` to
//! a file opened with `O_APPEND`. Nonces of requests that no process owns
//! are made up; their owners are on another host (`elsewhere`), so only
//! their TTL can end them.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use lockcore::{Error, Lock, ProlongOutcome, ReleaseOutcome};

const HOUR_NS: i64 = 3_600_000_000_000;

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn open(queue: &Path, query: &str) -> Lock {
    open_lock(&format!("toplock:{}?{query}", queue.display()))
}

fn append(queue: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).create(true).open(queue).unwrap();
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

/// A request by a process on another host.
fn foreign_request(nonce: &str, pid: u32) -> String {
    format!("R {nonce} elsewhere - {pid} 777 {}\n", now_ns())
}

/// Appends `D` lines for requests that were never made (no-ops in replay)
/// until the file is exactly `target` bytes: what the traffic of others
/// does to the log's length, without changing who holds or waits.
fn pad_to(queue: &Path, target: usize) {
    let mut remaining = target - len(queue);
    let mut lines = String::new();
    while remaining > 0 {
        // A no-op line is 56 bytes plus 1 to 20 digits of its last field.
        let mut line_len = remaining.min(76);
        if remaining - line_len > 0 && remaining - line_len < 57 {
            line_len = remaining - 57;
        }
        assert!((57..=76).contains(&line_len), "cannot pad {remaining} bytes");
        lines.push_str(&format!("D {} {} {}\n", made_up_nonce(), now_ns(), "0".repeat(line_len - 56)));
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

fn queue_in(dir: &TestDir) -> PathBuf {
    dir.join("queue")
}

/// A line stamped an hour ahead (written before the wall clock was stepped
/// back) holds the log's clock there. A grant measured by the wall clock
/// alone would look expired to everyone else at once.
#[test]
fn a_line_from_the_future_does_not_let_a_second_holder_in() {
    let dir = TestDir::new("toplock-future");
    let queue = queue_in(&dir);
    append(&queue, format!("D {} {} 0\n", made_up_nonce(), now_ns() + HOUR_NS).as_bytes());
    let mut first = open(&queue, "ttl=30s");
    let mut second = open(&queue, "ttl=30s");
    let held = first.try_acquire().expect("the queue is free");
    assert!(
        held.expires.is_some_and(|at| at.unix_nanos() > now_ns() + HOUR_NS),
        "the grant is measured on the log's clock: {held:?}"
    );
    assert_eq!(second.try_acquire(), Err(Error::Busy));
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
    let burst: String = (0..128).map(|pid| foreign_request(&made_up_nonce(), 1000 + pid)).collect();
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
    assert_eq!(first.acquire(None).unwrap().fence, 1);
    let (fences, fence_seen) = mpsc::channel();
    let (go_release, release_now) = mpsc::channel::<()>();
    let spawn_waiter = |name: &'static str, hold_until: Option<mpsc::Receiver<()>>| {
        let queue = queue.clone();
        let fences = fences.clone();
        thread::spawn(move || {
            let mut lock = open(&queue, "ttl=60s");
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
    // The release (a 57-byte line) and the next grant take the log past
    // the compaction threshold, between the grant and its read-back.
    pad_to(&queue, lockcore::strategy::toplock::COMPACT_AT - 57 - 30);
    assert_eq!(first.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    let (who, fence) = fence_seen.recv().unwrap();
    go_release.send(()).unwrap();
    let (next_who, next_fence) = fence_seen.recv().unwrap();
    second.join().unwrap();
    third.join().unwrap();
    assert!(fence > 1 && next_fence > fence, "fences must strictly increase: {who} {fence}, {next_who} {next_fence}");
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
    let waiter = thread::spawn(move || open(&waiting_queue, "ttl=60s").acquire(Some(Duration::from_secs(60))));
    wait_for_requests(&queue, 3);
    pad_to(&queue, lockcore::strategy::toplock::COMPACT_AT - 40);
    assert_eq!(holder.prolong(None), Ok(ProlongOutcome::Prolonged));
    assert!(holder.held().is_some());
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert!(waiter.join().unwrap().is_ok(), "the waiter gets the lock after the release");
}

/// An operator breaks a waiter's request just as it becomes head and
/// appends its grant; a compaction then drops the broken request. The
/// waiter must not believe it holds the lock.
///
/// A shared flock (held by the test) lets the waiter read the log but holds
/// back its grant's append; whether the waiter reached that append before
/// the break is up to the scheduler, so the check is the one that must hold
/// either way: never two holders.
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
        let mut lock = open(&waiting_queue, "ttl=60s");
        result.send(lock.acquire(Some(Duration::from_secs(20)))).unwrap();
        lock
    });
    wait_for_requests(&queue, 2);
    let waiter_nonce = requests_in(&queue)[1].clone();
    let file = fs::File::open(&queue).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) }, 0);
    // The first holder's release, as its release writes it, then the break.
    append(&queue, format!("D {first_nonce} {} 0\n", now_ns()).as_bytes());
    first.forget();
    thread::sleep(Duration::from_millis(300));
    append(&queue, format!("B {waiter_nonce} {}\n", now_ns()).as_bytes());
    pad_to(&queue, len(&queue) + 4000);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) }, 0);
    let waited = result_seen.recv().unwrap();
    let taken = open(&queue, "ttl=60s").try_acquire();
    let mut waiter = waiter.join().unwrap();
    assert!(waited.is_err() || taken.is_err(), "two holders: the broken waiter {waited:?}, the next {taken:?}");
    waiter.forget();
}

/// With `stale=none`, an ungranted head (a waiter that stopped polling) is
/// skipped `ttl` after it became head, also while other traffic keeps the
/// log compacting more often than `ttl`.
#[test]
fn compaction_does_not_restart_a_stuck_heads_ttl() {
    let dir = TestDir::new("toplock-stuck-head");
    let queue = queue_in(&dir);
    append(&queue, foreign_request(&made_up_nonce(), 4242).as_bytes());
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
                format!("{}D {nonce} {} 0\n", foreign_request(&nonce, 4343), now_ns())
            })
            .collect();
        append(&queue, churn.as_bytes());
    }
    let waited = waiter.join().unwrap();
    assert!(waited.is_ok(), "the stuck head kept the lock past its ttl: {waited:?}");
}

/// A forged header with the largest sequence number: refused as corrupt,
/// never a panic or a wrapped fence.
#[test]
fn a_header_with_the_largest_sequence_number_is_corrupt() {
    let dir = TestDir::new("toplock-forged-header");
    let queue = queue_in(&dir);
    append(&queue, format!("H 2 {} 0 0 0 0 -\n", u64::MAX).as_bytes());
    let mut lock = open(&queue, "ttl=30s");
    assert_eq!(lock.inspect().err(), Some(Error::Corrupt(lockcore::CorruptKind::Record)));
    assert_eq!(lock.try_acquire(), Err(Error::Corrupt(lockcore::CorruptKind::Record)));
}

//! Racing stale-breakers: a stale lock, 16 processes released at once by
//! one futex wake-up, each makes one `try_acquire`. Exactly one gets in, on
//! every scheme: `symlink` too, whose model (IPC::Lock::WithTTL) let two
//! breakers of one expired link both in.
//!
//! Three kinds of stale lock:
//! * the lock of a dead owner (a process that acquired and exited without
//!   releasing), with a TTL of an hour, so only dead-owner detection makes
//!   it stale;
//! * an expired lock whose owner cannot be judged (another host), left in
//!   the scheme's own format, so only its expiry makes it stale;
//! * the expired lock of a *live* holder (this test process).
//!
//! For `flock` there is nothing to break: the kernel released the dead
//! owner's lock and the record left beside it decides nothing, so exactly
//! one racer gets in as well; but a live holder past its TTL keeps the lock
//! (`flock`'s TTL is advisory), so there exactly *zero* racers get in, and
//! the holder's release answers `Expired`, not `Lost`.
//!
//! Where a peer breaks the same stale locks, it races too: a Perl
//! LockFile::Simple process (`-stale => 1`) beside the racers on a dead
//! owner's `lockfile` lock, and a shell script's `mkdir`/`rmdir` loop (stale
//! after 180 s, as the CGI scripts of old judged) beside them on a dead
//! script's empty `mkdir` lock directory. Exactly one of all of them gets
//! in, and a peer that got in finds its lock still in place when it leaves.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::users::{self, TestUser, TestUsers};
use common::*;
use lockcore::{Error, HostName, Liveness, ReleaseOutcome};

const RACERS: usize = 16;

// Shared-memory slots.
const GO: usize = 0;
const READY: usize = 1;
const INSIDE: usize = 2;
const MAX_INSIDE: usize = 3;
const WINNERS: usize = 4;
const BUSY: usize = 5;
const OTHER_ERRORS: usize = 6;
const TRIED: usize = 7;
const FINISH: usize = 8;
const WINNER_FENCE: usize = 9;
const WINNER_PID: usize = 10;
const VANISHED_FENCE: usize = 11;
const VANISHED_PID: usize = 12;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    if std::env::var("LOCKCORE_TEST_AS_UID").is_ok() {
        users::check_identity();
    }
    let shm = Shm::open(var("SHM").as_ref());
    let mut lock = open_lock(&var("SPEC"));
    match role {
        // Acquire and die holding the lock (exit skips every destructor).
        "vanish" => {
            let acquired = lock.try_acquire().expect("the vanishing owner acquires");
            shm.at(VANISHED_FENCE).store(acquired.fence, SeqCst);
            shm.at(VANISHED_PID).store(std::process::id().into(), SeqCst);
            die_holding();
        }
        "racer" => {
            shm.at(READY).fetch_add(1, SeqCst);
            shm.wait_gate(GO);
            match lock.try_acquire() {
                Ok(acquired) => {
                    // Never leaves: the winner holds until the parent has
                    // counted, so a second winner would be inside with it.
                    shm.enter(INSIDE, MAX_INSIDE);
                    shm.at(WINNERS).fetch_add(1, SeqCst);
                    shm.at(WINNER_FENCE).store(acquired.fence, SeqCst);
                    shm.at(WINNER_PID).store(std::process::id().into(), SeqCst);
                }
                Err(Error::Busy(_)) => {
                    shm.at(BUSY).fetch_add(1, SeqCst);
                }
                Err(e) => {
                    eprintln!("racer {}: unexpected {e:?}", std::process::id());
                    shm.at(OTHER_ERRORS).fetch_add(1, SeqCst);
                }
            }
            shm.at(TRIED).fetch_add(1, SeqCst);
            // The winner exits without releasing once the parent has counted.
            shm.wait_gate(FINISH);
            die_holding();
        }
        other => panic!("unknown role {other}"),
    }
}

/// The racers of one race, started and waiting at the gate.
struct Racers {
    children: Children,
    /// Racers that run as a test user, when the race needs one.
    as_user: Vec<users::UserChild>,
}

impl Racers {
    fn spawn(spec: &str, shm: &Shm, user: Option<&TestUsers>) -> Racers {
        let vars = [("SPEC", spec.to_owned()), ("SHM", shm.path().display().to_string())];
        let mut racers = Racers { children: Children::new(), as_user: Vec::new() };
        for _ in 0..RACERS {
            match user {
                Some(users) => racers.as_user.push(users.spawn_as(TestUser::Web, 0o022, "racer", &vars)),
                None => racers.children.push(spawn("racer", &vars)),
            }
        }
        wait_until("every racer at the gate", || shm.get(READY) == RACERS as u64 || racers.any_exited());
        assert_eq!(shm.get(READY), RACERS as u64, "a racer died before the start");
        racers
    }

    fn any_exited(&mut self) -> bool {
        self.children.any_exited() || self.as_user.iter_mut().any(|c| c.has_exited())
    }

    /// Opens the gate and waits until every racer has made its attempt.
    fn go(&mut self, shm: &Shm) {
        shm.open_gate(GO);
        wait_until("every racer to try once", || shm.get(TRIED) == RACERS as u64 || self.any_exited());
        assert_eq!(shm.get(TRIED), RACERS as u64, "a racer died in its attempt");
    }

    /// Lets the racers exit (the winner still holding) and checks they all did.
    fn finish(mut self, shm: &Shm) {
        shm.open_gate(FINISH);
        self.children.expect_success("racers");
        for mut child in self.as_user.drain(..) {
            if let Err(why) = child.finish() {
                panic!("racer: {why}");
            }
        }
    }
}

/// Checks what the racers reported: every racer got in or was told `Busy`,
/// `expect_winners` got in, never more than one at once.
fn check_counts(shm: &Shm, expect_winners: u64) {
    let winners = shm.get(WINNERS);
    assert_eq!(shm.get(OTHER_ERRORS), 0, "a racer got an error other than Busy");
    assert_eq!(winners, expect_winners, "winners");
    assert_eq!(shm.get(BUSY), RACERS as u64 - winners, "losers told Busy");
    assert!(shm.get(MAX_INSIDE) <= 1, "{} racers inside at once", shm.get(MAX_INSIDE));
}

/// Releases 16 racers on the lock and returns the fence of the winner.
/// Checks that every racer either got in or was told `Busy`, and that never
/// more than one was inside.
fn race(scheme: Scheme, dir: &TestDir, shm: &Shm, expect_winners: u64) -> Option<u64> {
    let spec = scheme.spec(dir.path(), "ttl=1h");
    let mut racers = Racers::spawn(&spec, shm, None);
    racers.go(shm);
    check_counts(shm, expect_winners);

    // While the winner still holds, an outsider sees it as the live holder.
    let mut observer = open_lock(&spec);
    let seen = observer.inspect().unwrap();
    let fence = if expect_winners == 1 {
        let holder = seen.holder.expect("the winner holds the lock");
        assert_eq!(holder.pid as u64, shm.get(WINNER_PID));
        assert_eq!(holder.liveness, Liveness::Alive);
        assert!(!holder.stale);
        assert_eq!(holder.record.unwrap().fence, shm.get(WINNER_FENCE));
        assert_eq!(seen.last_fence, shm.get(WINNER_FENCE));
        assert!(matches!(observer.try_acquire(), Err(Error::Busy(_))));
        Some(shm.get(WINNER_FENCE))
    } else {
        None
    };
    racers.finish(shm);
    fence
}

/// A process acquires the lock of `spec` and exits holding it. Returns its
/// fence.
fn leave_dead_owner(spec: &str, shm: &Shm, user: Option<&TestUsers>) -> u64 {
    let vars = [("SPEC", spec.to_owned()), ("SHM", shm.path().display().to_string())];
    match user {
        Some(users) => {
            if let Err(why) = users.spawn_as(TestUser::Web, 0o022, "vanish", &vars).finish() {
                panic!("vanishing owner: {why}");
            }
        }
        None => {
            let mut child = Children::new();
            child.push(spawn("vanish", &vars));
            child.expect_success("vanishing owner");
        }
    }
    shm.get(VANISHED_FENCE)
}

#[test]
fn dead_owner_lock_lets_exactly_one_of_16_in() {
    each_scheme("race-dead", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let dead_fence = leave_dead_owner(&scheme.spec(dir.path(), "ttl=1h"), &shm, None);

        let mut observer = open_lock(&scheme.spec(dir.path(), ""));
        let seen = observer.inspect().unwrap();
        if scheme.breaks_stale_locks() {
            let holder = seen.holder.expect("the dead owner's record is still there");
            assert_eq!(holder.liveness, Liveness::Dead);
            assert!(holder.stale, "a dead owner's lock is stale at once");
        } else {
            assert_eq!(seen.holder, None, "the kernel released the dead owner's flock");
        }
        drop(observer);

        let fence = race(scheme, dir, &shm, 1).unwrap();
        assert!(fence > dead_fence, "fence {fence} after the break, dead owner had {dead_fence}");
    });
}

#[test]
fn expired_lock_lets_exactly_one_of_16_in() {
    each_scheme("race-expired", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        // An owner on another host (never judged dead here) whose lease of
        // 50 ms ran out: stale by its expiry alone.
        let mut elsewhere = owner_as(4242, 1);
        elsewhere.host = HostName::from_bytes(b"elsewhere").unwrap();
        let left = leave_lock(&scheme.spec(dir.path(), "ttl=50ms"), elsewhere);

        let mut observer = open_lock(&scheme.spec(dir.path(), ""));
        if expires_on_server(scheme) {
            // Its server lets it go: free for all 16 at once.
            wait_for_server_expiry(scheme, &mut observer);
        } else if scheme.breaks_stale_locks() {
            wait_until("the left lock to expire", || observer.inspect().unwrap().holder.unwrap().stale);
            let holder = observer.inspect().unwrap().holder.expect("the expired lock is there");
            assert_eq!(holder.liveness, Liveness::Unknown);
            assert_eq!(holder.record.map(|r| r.nonce), Some(left.nonce));
        } else {
            assert_eq!(observer.inspect().unwrap().holder, None, "nobody holds the flock");
        }
        drop(observer);

        let fence = race(scheme, dir, &shm, 1).unwrap();
        assert!(fence > left.fence);
    });
}

#[test]
fn live_holder_past_its_ttl_is_broken_by_exactly_one_of_16() {
    each_scheme("race-overrun", |scheme, dir| {
        let shm = Shm::create(&dir.join("shm"));
        let mut holder = open_lock(&scheme.spec(dir.path(), "ttl=100ms"));
        let held = holder.try_acquire().unwrap();

        if scheme.breaks_stale_locks() {
            let mut observer = open_lock(&scheme.spec(dir.path(), ""));
            wait_until("the holder's TTL to pass", || {
                observer.inspect().unwrap().holder.map_or(true, |holder| holder.stale)
            });
            let fence = race(scheme, dir, &shm, 1).unwrap();
            assert!(fence > held.fence);
            // The racers' winner has exited holding its lock (a dead owner);
            // the overrunning holder must not remove that lock.
            assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
        } else {
            // flock: a live holder is never broken, whatever its TTL.
            let expires = held.expires.unwrap();
            wait_until("the holder's TTL to pass", || wall_now() > expires);
            assert_eq!(race(scheme, dir, &shm, 0), None);
            assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Expired));
        }
    });
}

// ---------------------------------------------------------------------------
// With a peer that breaks the same stale lock at the same moment
// ---------------------------------------------------------------------------

/// A peer process racing the 16: it says `ready`, waits for the `go` file,
/// tries until it gets in or the `done` file appears, and says `in` or
/// `out`; once in, it holds until `done` and then says whether its lock
/// was still in place (`intact`) or not (`LOST`).
struct Peer {
    child: std::process::Child,
    out: BufReader<ChildStdout>,
    lines: Vec<String>,
}

impl Peer {
    fn start(mut cmd: Command) -> Peer {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("start the peer");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "the peer did not start");
        Peer { child, out, lines: Vec::new() }
    }

    /// Reads what the peer says until it says `line` (kept with the rest).
    fn wait_for(&mut self, line: &str) {
        loop {
            let mut next = String::new();
            assert_ne!(self.out.read_line(&mut next).unwrap(), 0, "the peer ended without saying {line:?}");
            let next = next.trim_end().to_owned();
            self.lines.push(next.clone());
            if next == line {
                return;
            }
        }
    }

    /// Everything the peer says until it exits.
    fn finish(mut self) -> Vec<String> {
        for line in (&mut self.out).lines() {
            self.lines.push(line.unwrap());
        }
        let status = wait_patiently(&mut self.child);
        assert!(status.success(), "the peer failed: {status:?}, said {:?}", self.lines);
        self.lines
    }
}

/// Runs 16 racers on `spec` and `peer` at once, over a stale lock already
/// in place: the racers are let go when the peer is (the `go` file), or,
/// with `after`, once the peer has said that line. Returns how many racers got in, whether the peer did,
/// everything the peer said, and its pid.
fn race_with_peer(
    shm: &Shm,
    spec: &str,
    dir: &Path,
    user: Option<&TestUsers>,
    peer: Command,
    after: Option<&str>,
) -> (u64, bool, Vec<String>, u32) {
    let go = dir.join("go");
    let done = dir.join("done");
    let mut racers = Racers::spawn(spec, shm, user);
    let mut peer = Peer::start(peer);
    let peer_pid = peer.child.id();
    std::fs::write(&go, "").unwrap();
    if let Some(line) = after {
        peer.wait_for(line);
    }
    racers.go(shm);
    std::fs::write(&done, "").unwrap();
    let said = peer.finish();
    let winners = shm.get(WINNERS);
    racers.finish(shm);
    let peer_in = said.iter().any(|l| l == "in");
    if peer_in {
        assert!(said.iter().any(|l| l == "intact"), "the peer's lock was taken away while it held it: {said:?}");
    } else {
        assert!(said.iter().any(|l| l == "out"), "the peer said neither in nor out: {said:?}");
    }
    (winners, peer_in, said, peer_pid)
}

/// LockFile::Simple's `unlink`, which it calls to break a stale lock (and
/// to unlock), replaced by one that renames the file aside first and says
/// whose stamp it removed: so the test can tell when LockFile::Simple's own
/// race (its BUGS section: a lock made between its stale check and its
/// unlink is removed) struck, which no program sharing the lock can
/// prevent. Otherwise it behaves as `unlink`.
const PERL_PEER: &str = r#"
BEGIN {
    require Time::HiRes; no warnings;
    *CORE::GLOBAL::sleep = \&Time::HiRes::sleep;
    *CORE::GLOBAL::unlink = sub {
        my $n = 0;
        for my $f (@_) {
            my $aside = "$f.removed-by-perl.$$";
            next unless rename($f, $aside);
            open(my $h, '<', $aside); my $first = <$h>; close $h;
            $first = '' unless defined $first; chomp $first;
            print "removed $first\n";
            $n += CORE::unlink($aside);
        }
        $n;
    };
}
use strict; use warnings; use LockFile::Simple;
$| = 1;
my ($file, $go, $done) = @ARGV;
my $m = LockFile::Simple->make(-stale => 1, -hold => 0, -warn => 0, -wfunc => sub {}, -max => 1, -delay => 0.001);
print "ready\n";
Time::HiRes::sleep(0.0005) until -e $go;
my $in = 0;
until (-e $done) {
    if ($m->trylock($file)) { $in = 1; last }
    Time::HiRes::sleep(0.001);
}
if ($in) {
    my $ino = (stat("$file.lock"))[1];
    print "in\n";
    Time::HiRes::sleep(0.001) until -e $done;
    open(my $h, '<', "$file.lock"); my $stamp = $h ? <$h> : undef; close $h if $h;
    my $now = (stat("$file.lock"))[1];
    my $ok = defined $now && $now == $ino && defined $stamp && $stamp eq "$$\n";
    print $ok ? "intact\n" : "LOST\n";
    $m->unlock($file);
} else {
    print "out\n";
}
"#;

/// A dead owner's `lockfile` lock, broken at once by 16 racers and by a
/// LockFile::Simple process that judges the pid in its first line dead.
///
/// As root, every process runs as a test user: LockFile::Simple creates
/// its lock with `open(">")`, which only the permission check keeps from
/// truncating a read-only lock file made in between, and root passes it.
#[test]
fn dead_owner_lockfile_with_lockfile_simple_breaking_too() {
    if !perl_available() {
        return;
    }
    let users = TestUsers::get();
    const ROUNDS: usize = 3;
    let mut struck = 0;
    for round in 0..ROUNDS {
        let outer = users::SharedDir::like_tmp(&format!("race-perl-{round}"));
        let dir = outer.join("locks");
        std::fs::create_dir(&dir).unwrap();
        if let Some(users) = &users {
            let web = TestUser::Web;
            std::os::unix::fs::chown(&dir, Some(users.uid(web)), Some(users.gid(web))).unwrap();
        }
        let shm = users::shm_for_everyone(outer.path());
        let spec = Scheme::Lockfile.spec(&dir, "ttl=1h");
        let data = Scheme::Lockfile.target(&dir);
        leave_dead_owner(&spec, &shm, users.as_ref());
        let dead_pid = shm.get(VANISHED_PID);

        let mut perl = Command::new("perl");
        perl.args(["-e", PERL_PEER]).arg(&data).arg(dir.join("go")).arg(dir.join("done")).current_dir("/");
        if let Some(users) = &users {
            use std::os::unix::process::CommandExt;
            perl.uid(users.uid(TestUser::Web)).gid(users.gid(TestUser::Web));
        }
        let (winners, peer_in, said, peer_pid) = race_with_peer(&shm, &spec, &dir, users.as_ref(), perl, None);

        // What the peer removed besides the dead owner's lock and, on
        // unlock, its own.
        let foreign: Vec<&str> = said
            .iter()
            .filter_map(|l| l.strip_prefix("removed "))
            .filter(|&stamp| stamp != dead_pid.to_string() && stamp != peer_pid.to_string())
            .collect();
        if !foreign.is_empty() {
            // LockFile::Simple removed a racer's fresh lock after judging the
            // dead one: its own race, which nothing of ours can prevent.
            struck += 1;
            eprintln!("round {round}: LockFile::Simple's own stale-break race struck: {said:?}");
            continue;
        }
        assert_eq!(shm.get(OTHER_ERRORS), 0, "a racer got an error other than Busy");
        assert_eq!(winners + u64::from(peer_in), 1, "round {round}: racers in {winners}, perl in {peer_in}: {said:?}");
        assert!(shm.get(MAX_INSIDE) <= 1);
    }
    assert!(struck < ROUNDS, "LockFile::Simple's own race decided every round");
}

/// A seed-001 CGI script's lock directory, left behind two hours ago by a
/// script that died: an empty directory. Broken by 16 racers (`ttl=1h`)
/// and by the loop of a live script of the same kind, which removes a lock
/// directory older than 180 s with `rmdir` and takes the lock with `mkdir`.
#[test]
fn dead_script_mkdir_lock_with_a_shell_loop_breaking_too() {
    // The first judgement is made before the start, so that the script's
    // rmdir comes right after the racers are let go, as late as a slow
    // script's would: whatever is there by then is what it removes.
    const SCRIPT: &str = r#"
set -u
lock=$1 go=$2 done=$3
stale() { m=$(stat -c %Y "$lock" 2>/dev/null) && [ $(( $(date +%s) - m )) -gt 180 ]; }
stale && judged=1 || judged=0
echo ready
while [ ! -e "$go" ]; do :; done
while [ ! -e "$done" ]; do
    if [ "$judged" = 1 ]; then echo removing; rmdir "$lock" 2>/dev/null; fi
    if mkdir "$lock" 2>/dev/null; then
        ino=$(stat -c %i "$lock")
        echo in
        while [ ! -e "$done" ]; do sleep 0.001; done
        if [ "$(stat -c %i "$lock" 2>/dev/null)" = "$ino" ]; then echo intact; else echo LOST; fi
        rmdir "$lock"
        exit 0
    fi
    sleep 0.001
    stale && judged=1 || judged=0
done
echo out
"#;
    // Let go with the script, or once it is about to remove the directory
    // it judged stale: either way its rmdir meets whatever the racers left
    // there by then (a script is slow: every step is a new process), and
    // rmdir cannot remove a lock directory with our record in it.
    for (round, after) in [None, None, Some("removing"), Some("removing")].into_iter().enumerate() {
        let dir = TestDir::new(&format!("race-shell-{round}"));
        let shm = Shm::create(&dir.join("shm"));
        let lock = Scheme::Mkdir.lock_path(dir.path());
        std::fs::create_dir(&lock).unwrap();
        set_mtime(&lock, ago(Duration::from_secs(7200)));
        let spec = Scheme::Mkdir.spec(dir.path(), "ttl=1h");

        let mut shell = Command::new("sh");
        shell.args(["-c", SCRIPT, "sh"]).arg(&lock).arg(dir.join("go")).arg(dir.join("done"));
        let (winners, peer_in, said, _) = race_with_peer(&shm, &spec, dir.path(), None, shell, after);
        assert_eq!(shm.get(OTHER_ERRORS), 0, "a racer got an error other than Busy");
        assert_eq!(
            winners + u64::from(peer_in),
            1,
            "round {round}: racers in {winners}, script in {peer_in}: {said:?}"
        );
        assert!(shm.get(MAX_INSIDE) <= 1);
        // Whoever got in, the dead script's directory is gone and nothing
        // was left aside.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(
            left.iter().all(|name| !name.to_string_lossy().starts_with("lock.") || name == "lock.guard"),
            "round {round}: left beside the lock: {left:?}"
        );
    }
}

//! Corrupted and hostile lock files: each gets a distinct error or a correct
//! decision, never a panic, never a hang, never a write through a symlink.
//!
//! Every case plants something at one of the paths a strategy uses, in a
//! world-writable sticky directory (the setting of the attack), beside a
//! victim file (and, for `mkdir`, a victim directory holding a file named
//! `owner`), then runs `try_acquire` (and `release` if it succeeded),
//! `inspect` and sometimes `break_lock`, and checks:
//! * the outcome is the one in the table (written as `Ok` or the `Error`'s
//!   `Debug` text);
//! * the victims are byte for byte, inode and mtime the same, and a dangling
//!   symlink's target was never created.
//!
//! Cases with a FIFO run in a child process that the parent kills after a
//! minute: a reader that blocks on a planted FIFO fails the test instead of
//! hanging it.
//!
//! The decisions, and why:
//! * an empty record: a LockFile::Simple writer between its create and its
//!   write: `Busy` while younger than the TTL (see `torn_create.rs`);
//! * a record that does not parse (truncated, garbage): `Corrupt(Record)`
//!   while younger than the TTL (there is no owner to judge), broken by age;
//! * a record longer than any we write (1 MiB): `Corrupt(RecordTooLong)`,
//!   likewise broken by age;
//! * a guard (or flock state line) that does not parse:
//!   `Corrupt(GuardState)`, for every operation, never "repaired" (the last
//!   fence is in it);
//! * a directory where a file belongs, a file where the mkdir lock
//!   directory belongs, a FIFO anywhere: `NotALock`;
//! * a symlink at the lock path, the guard path, a mkdir lock's record or
//!   staging path: `Symlink` (never followed, never removed);
//! * a symlink or FIFO at the lockfile temp path, which only a crashed or
//!   hostile process can leave: removed (the name, not its target) and the
//!   lock taken: `Ok`; a directory there: `NotALock` (never removed);
//! * anything but a directory at the mkdir staging path: `Symlink` or
//!   `NotALock` until an operator removes it (a staging *directory* is a
//!   crashed creator's and is cleaned up, see `torn_create.rs`);
//! * a stale mkdir lock directory holding a file we did not put there: the
//!   lock is broken (renamed away in one step) and the file is kept in the
//!   retired directory; our own release afterwards still works;
//! * an operator's `break_lock` on a symlink at the lockfile path removes the
//!   link (`unlink(2)` never follows it), never its target.
//!
//! `flock` has no guard file and no temp path: its state line (last fence,
//! cooldown) is the first line of the flock'd file itself, so the cases are
//! the file's content and type. Its record decides nothing (the kernel
//! does), so garbage *after* a valid state line is simply overwritten.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use lockcore::Error;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "probe" => {
            let mut lock = open_lock(&var("SPEC"));
            let expected = Expected { acquire: leak(var("ACQUIRE")), inspect: leak(var("INSPECT")), break_lock: None };
            check(&mut lock, &expected, &var("CASE"));
        }
        other => panic!("unknown role {other}"),
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// `Ok` or the error's `Debug` text.
fn brief<T>(result: Result<T, Error>) -> String {
    match result {
        Ok(_) => "Ok".to_owned(),
        Err(e) => format!("{e:?}"),
    }
}

struct Expected {
    acquire: &'static str,
    inspect: &'static str,
    /// `Some("Ok(true)")` etc. when the case also checks `break_lock`.
    break_lock: Option<&'static str>,
}

fn check(lock: &mut lockcore::Lock, expected: &Expected, case: &str) {
    let got = brief(lock.try_acquire());
    assert_eq!(got, expected.acquire, "{case}: try_acquire");
    if got == "Ok" {
        let released = lock.release(Duration::ZERO);
        assert!(released.is_ok(), "{case}: release after acquiring: {released:?}");
    }
    assert_eq!(brief(lock.inspect()), expected.inspect, "{case}: inspect");
    if let Some(want) = expected.break_lock {
        assert_eq!(format!("{:?}", lock.break_lock()), want, "{case}: break_lock");
    }
}

struct Case {
    name: &'static str,
    /// Plants the hostile thing; gets the case directory.
    plant: fn(Scheme, &Path),
    /// Extra spec options (the default is `ttl=1h`).
    query: &'static str,
    expected: Expected,
    /// Runs in a child that is killed if it hangs.
    fifo: bool,
}

const fn case(name: &'static str, plant: fn(Scheme, &Path), acquire: &'static str, inspect: &'static str) -> Case {
    Case { name, plant, query: "ttl=1h", expected: Expected { acquire, inspect, break_lock: None }, fifo: false }
}

impl Case {
    const fn fifo(mut self) -> Case {
        self.fifo = true;
        self
    }

    const fn breaking(mut self, result: &'static str) -> Case {
        self.expected.break_lock = Some(result);
        self
    }
}

const VICTIM: &str = "victim.txt";
const VICTIM_DIR: &str = "victim-dir";
const NOWHERE: &str = "never-created";

fn lock_path(s: Scheme, d: &Path) -> std::path::PathBuf {
    s.lock_path(d)
}

fn guard_path(s: Scheme, d: &Path) -> std::path::PathBuf {
    s.guard_path(d).unwrap()
}

fn staging_path(s: Scheme, d: &Path) -> std::path::PathBuf {
    s.staging_path(d).unwrap()
}

/// Where the record is: the lock file, the flock'd file, or `owner` inside
/// the mkdir lock directory (which is created).
fn record_path(s: Scheme, d: &Path) -> std::path::PathBuf {
    match s {
        Scheme::Mkdir => {
            std::fs::create_dir(s.lock_path(d)).unwrap();
            s.lock_path(d).join("owner")
        }
        _ => s.lock_path(d),
    }
}

fn valid_record() -> Vec<u8> {
    forged_record(4242, 1, Some("elsewhere"), 9, Some(from_now(Duration::from_secs(3600))))
}

fn symlink(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

fn one_mib() -> Vec<u8> {
    (0..1 << 20).map(|i: u32| b"lockcore 1\nfence 7\n"[(i % 19) as usize]).collect()
}

const GARBAGE: &[u8] = b"\x00\xff\xfe garbage \x01\x02\n\x00\n\xc3\x28 more\n";

fn record_cases() -> Vec<Case> {
    vec![
        case("empty record", |s, d| std::fs::write(record_path(s, d), b"").unwrap(), "Busy", "Ok"),
        case(
            "truncated record",
            |s, d| std::fs::write(record_path(s, d), &valid_record()[..60]).unwrap(),
            "Corrupt(Record)",
            "Corrupt(Record)",
        ),
        case(
            "record without its last newline",
            |s, d| {
                let r = valid_record();
                std::fs::write(record_path(s, d), &r[..r.len() - 1]).unwrap()
            },
            "Corrupt(Record)",
            "Corrupt(Record)",
        ),
        case(
            "garbage record",
            |s, d| std::fs::write(record_path(s, d), GARBAGE).unwrap(),
            "Corrupt(Record)",
            "Corrupt(Record)",
        ),
        case(
            "1 MiB record",
            |s, d| std::fs::write(record_path(s, d), one_mib()).unwrap(),
            "Corrupt(RecordTooLong)",
            "Corrupt(RecordTooLong)",
        ),
        case(
            "1 MiB record older than the TTL",
            |s, d| {
                let p = record_path(s, d);
                std::fs::write(&p, one_mib()).unwrap();
                set_mtime(&p, ago(Duration::from_secs(7200)));
            },
            "Ok",
            "Ok",
        ),
        case(
            "garbage record older than the TTL",
            |s, d| {
                let p = record_path(s, d);
                std::fs::write(&p, GARBAGE).unwrap();
                set_mtime(&p, ago(Duration::from_secs(7200)));
            },
            "Ok",
            "Ok",
        ),
        case(
            "directory where the record belongs",
            |s, d| std::fs::create_dir(record_path(s, d)).unwrap(),
            "NotALock",
            "NotALock",
        ),
        case("FIFO where the record belongs", |s, d| mkfifo(&record_path(s, d)), "NotALock", "NotALock").fifo(),
        case(
            "symlink to a victim where the record belongs",
            |s, d| symlink(&d.join(VICTIM), &record_path(s, d)),
            "Symlink",
            "Symlink",
        ),
        case(
            "dangling symlink where the record belongs",
            |s, d| symlink(&d.join(NOWHERE), &record_path(s, d)),
            "Symlink",
            "Symlink",
        ),
        case(
            "symlink to a victim at the guard",
            |s, d| symlink(&d.join(VICTIM), &guard_path(s, d)),
            "Symlink",
            "Symlink",
        )
        .breaking("Err(Symlink)"),
        case(
            "dangling symlink at the guard",
            |s, d| symlink(&d.join(NOWHERE), &guard_path(s, d)),
            "Symlink",
            "Symlink",
        ),
        case(
            "garbage guard",
            |s, d| std::fs::write(guard_path(s, d), GARBAGE).unwrap(),
            "Corrupt(GuardState)",
            "Corrupt(GuardState)",
        )
        .breaking("Err(Corrupt(GuardState))"),
        case(
            "guard of the right length with a wrong word",
            |s, d| {
                let mut line = lockcore::guard::GuardState::default().encode().as_bytes().to_vec();
                line[0] = b'X';
                std::fs::write(guard_path(s, d), line).unwrap()
            },
            "Corrupt(GuardState)",
            "Corrupt(GuardState)",
        ),
        case("directory at the guard", |s, d| std::fs::create_dir(guard_path(s, d)).unwrap(), "NotALock", "NotALock"),
        case("FIFO at the guard", |s, d| mkfifo(&guard_path(s, d)), "NotALock", "NotALock").fifo(),
    ]
}

fn lockfile_cases() -> Vec<Case> {
    let mut cases = record_cases();
    cases.extend([
        case("symlink to a victim at the temp path", |s, d| symlink(&d.join(VICTIM), &staging_path(s, d)), "Ok", "Ok"),
        case("dangling symlink at the temp path", |s, d| symlink(&d.join(NOWHERE), &staging_path(s, d)), "Ok", "Ok"),
        case("FIFO at the temp path", |s, d| mkfifo(&staging_path(s, d)), "Ok", "Ok").fifo(),
        case("directory at the temp path", |s, d| std::fs::create_dir(staging_path(s, d)).unwrap(), "NotALock", "Ok"),
        case(
            "directory at the lock path, broken by an operator",
            |s, d| std::fs::create_dir(lock_path(s, d)).unwrap(),
            "NotALock",
            "NotALock",
        )
        .breaking("Err(NotALock)"),
        case(
            "symlink at the lock path, broken by an operator",
            |s, d| symlink(&d.join(VICTIM), &lock_path(s, d)),
            "Symlink",
            "Symlink",
        )
        // unlink(2) removes the link itself, never its target.
        .breaking("Ok(true)"),
    ]);
    cases
}

fn mkdir_cases() -> Vec<Case> {
    let mut cases = record_cases();
    cases.extend([
        case(
            "file where the lock directory belongs",
            |s, d| std::fs::write(lock_path(s, d), valid_record()).unwrap(),
            "NotALock",
            "NotALock",
        )
        .breaking("Err(NotALock)"),
        case("FIFO where the lock directory belongs", |s, d| mkfifo(&lock_path(s, d)), "NotALock", "NotALock").fifo(),
        case(
            "symlink to a victim directory at the lock path",
            |s, d| symlink(&d.join(VICTIM_DIR), &lock_path(s, d)),
            "Symlink",
            "Symlink",
        )
        .breaking("Err(Symlink)"),
        case(
            "symlink to a victim directory at the staging path",
            |s, d| symlink(&d.join(VICTIM_DIR), &staging_path(s, d)),
            "Symlink",
            "Ok",
        ),
        case("file at the staging path", |s, d| std::fs::write(staging_path(s, d), b"x").unwrap(), "NotALock", "Ok"),
        case(
            "foreign file beside a stale record",
            |s, d| {
                let p = record_path(s, d);
                std::fs::write(&p, forged_record(4242, 1, Some("elsewhere"), 9, Some(ago(Duration::from_secs(9)))))
                    .unwrap();
                std::fs::write(p.with_file_name("notes.txt"), b"keep me").unwrap();
            },
            // Broken: the directory is renamed away in one step and what we
            // did not put there is left in the retired directory.
            "Ok",
            "Ok",
        ),
    ]);
    cases
}

fn flock_cases() -> Vec<Case> {
    vec![
        case("empty file", |s, d| std::fs::write(lock_path(s, d), b"").unwrap(), "Ok", "Ok"),
        case(
            "garbage file",
            |s, d| std::fs::write(lock_path(s, d), GARBAGE).unwrap(),
            "Corrupt(GuardState)",
            "Corrupt(GuardState)",
        ),
        case(
            "truncated state line",
            |s, d| {
                let line = lockcore::guard::GuardState { fence: 5, cooldown_until: None }.encode();
                std::fs::write(lock_path(s, d), &line.as_bytes()[..50]).unwrap()
            },
            "Corrupt(GuardState)",
            "Corrupt(GuardState)",
        ),
        case(
            "1 MiB of garbage",
            |s, d| std::fs::write(lock_path(s, d), one_mib()).unwrap(),
            "Corrupt(GuardState)",
            "Corrupt(GuardState)",
        ),
        case(
            // The record decides nothing for flock: the kernel says it is
            // free, so it is taken and the file rewritten.
            "state line then 1 MiB of garbage",
            |s, d| {
                let mut bytes =
                    lockcore::guard::GuardState { fence: 5, cooldown_until: None }.encode().as_bytes().to_vec();
                bytes.extend(one_mib());
                std::fs::write(lock_path(s, d), bytes).unwrap()
            },
            "Ok",
            "Ok",
        ),
        case(
            "directory at the lock path",
            |s, d| std::fs::create_dir(lock_path(s, d)).unwrap(),
            "NotALock",
            "NotALock",
        ),
        case("FIFO at the lock path", |s, d| mkfifo(&lock_path(s, d)), "NotALock", "NotALock").fifo(),
        case(
            "symlink to a victim at the lock path",
            |s, d| symlink(&d.join(VICTIM), &lock_path(s, d)),
            "Symlink",
            "Symlink",
        ),
        case(
            "dangling symlink at the lock path",
            |s, d| symlink(&d.join(NOWHERE), &lock_path(s, d)),
            "Symlink",
            "Symlink",
        ),
    ]
}

fn run_cases(scheme: Scheme, dir: &TestDir, cases: Vec<Case>) {
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let d = dir.join(&format!("case{i}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join(VICTIM), b"precious data\n").unwrap();
        std::fs::create_dir(d.join(VICTIM_DIR)).unwrap();
        std::fs::write(d.join(VICTIM_DIR).join("owner"), b"precious record\n").unwrap();
        (case.plant)(scheme, &d);
        let victims =
            [snapshot(&d.join(VICTIM)), snapshot(&d.join(VICTIM_DIR)), snapshot(&d.join(VICTIM_DIR).join("owner"))];
        let spec = scheme.spec(&d, case.query);

        let outcome = std::panic::catch_unwind(|| {
            if case.fifo {
                let mut children = Children::new();
                children.push(spawn(
                    "probe",
                    &[
                        ("SPEC", spec.clone()),
                        ("CASE", case.name.to_owned()),
                        ("ACQUIRE", case.expected.acquire.to_owned()),
                        ("INSPECT", case.expected.inspect.to_owned()),
                    ],
                ));
                children.expect_success(case.name);
            } else {
                check(&mut open_lock(&spec), &case.expected, case.name);
            }
            let after =
                [snapshot(&d.join(VICTIM)), snapshot(&d.join(VICTIM_DIR)), snapshot(&d.join(VICTIM_DIR).join("owner"))];
            assert_eq!(after, victims, "{}: a victim was touched", case.name);
            assert!(!d.join(NOWHERE).exists(), "{}: a dangling symlink was followed", case.name);
        });
        if let Err(e) = outcome {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {text}", case.name));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn hostile_lockfile_paths() {
    each_of("hostile", &[Scheme::Lockfile], |scheme, dir| run_cases(scheme, dir, lockfile_cases()));
}

#[test]
fn hostile_mkdir_paths() {
    each_of("hostile", &[Scheme::Mkdir], |scheme, dir| run_cases(scheme, dir, mkdir_cases()));
}

#[test]
fn hostile_flock_paths() {
    each_of("hostile", &[Scheme::Flock], |scheme, dir| run_cases(scheme, dir, flock_cases()));
}

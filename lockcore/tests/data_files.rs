//! A lock pointed at a program's own data never touches it.
//!
//! The target of a spec is the lock's path, except for `lockfile`, whose
//! target is the file it protects (its lock is `<target>.lock`). Users point
//! specs at their data files and directories all the time: a `lockfile` at
//! the file it protects, a `flock` at the data file as `flock(1)` is used, and
//! by mistake a `mkdir`, `symlink`, `lease` or `toplock` at a file or a
//! directory that is theirs. The library finds there no format of its own and
//! no lock of a peer's, so:
//! * `lockfile` locks beside the target, `flock` locks the target itself
//!   (a file or a directory) and keeps its state beside it;
//! * the others answer `NotALock`, for every operation;
//! * whatever the options (a TTL far shorter than the data's age, a
//!   liveness check): the data file and the data directory are byte for
//!   byte, inode, mode and mtime the same afterwards, down to every file in
//!   the directory (one of them named `owner`, as `mkdir`'s record is).
//!
//! `flock` on a data file is what `flock(1)` users expect: while the
//! library holds it, `flock(1)` cannot take it, and the other way round;
//! data the holder appends under the lock is still there after the release.
//! A handle keeps no descriptor of a data file between acquisitions: its
//! writers replace it (written anew, renamed over), and a descriptor kept
//! on the old one would keep its blocks on the disk. It keeps one of an
//! empty lock file, which pins nothing.
//!
//! Specs that would make exclusion impossible are refused: a `lockfile`
//! whose lock file would be the protected file itself (`ext=` empty,
//! `format=%f`, `format=%D/%F`, or another spelling of the same path), a
//! format with `%p` (a lock file per process), and a `mode` with setuid,
//! setgid or sticky bits or without the owner's read and write.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::files::{tree, tree_changes};
use common::*;
use lockcore::{Error, ErrorKind, Lock, ReleaseOutcome, SpecErrorKind};

/// A counter file of a CGI: what a careless reader takes for a
/// LockFile::Simple stamp of pid 12345.
const DATA: &[u8] = b"12345\n";
/// Options the spec may carry: none, a TTL far shorter than the data's age,
/// without and with a liveness check, a liveness check alone, no TTL.
const QUERIES: &[&str] = &["", "ttl=1s", "ttl=1s&stale=none", "ttl=1s&stale=pid", "stale=pid", "hold=0"];
const SHORT: Duration = Duration::from_millis(100);

/// A data file and a data directory (holding `owner` and `notes.txt`), all
/// last written a day ago.
fn make_data(dir: &Path) {
    let file = dir.join("data.txt");
    fs::write(&file, DATA).unwrap();
    let data_dir = dir.join("datadir");
    fs::create_dir(&data_dir).unwrap();
    fs::write(data_dir.join("owner"), b"alice\n").unwrap();
    fs::write(data_dir.join("notes.txt"), b"the board's notes\n").unwrap();
    let day_ago = ago(Duration::from_secs(86_400));
    for path in [file, data_dir.join("owner"), data_dir.join("notes.txt"), data_dir] {
        set_mtime(&path, day_ago);
    }
}

fn spec_at(scheme: Scheme, target: &Path, query: &str) -> String {
    let target = target.to_str().unwrap();
    if query.is_empty() {
        format!("{}:{target}", scheme.name())
    } else {
        format!("{}:{target}?{query}", scheme.name())
    }
}

/// What each operation answers when `scheme` is pointed at a data file or
/// directory: `Ok` or an error's kind.
fn expected(scheme: Scheme) -> (&'static str, &'static str) {
    match scheme {
        // Locks beside it: `<target>.lock`.
        Scheme::Lockfile => ("Ok", "Ok(false)"),
        // Locks it, as flock(1); a flock lock is never broken.
        Scheme::Flock => ("Ok", "Unsupported"),
        _ => ("NotALock", "NotALock"),
    }
}

fn outcome<T>(result: Result<T, Error>) -> String {
    match result {
        Ok(_) => "Ok".to_owned(),
        Err(e) => format!("{:?}", e.kind()),
    }
}

/// Every operation, as `expected` says; `Err` lists what went otherwise.
fn exercise(scheme: Scheme, spec: &str) -> Result<(), String> {
    let (taken, broken) = expected(scheme);
    let mut lock = Lock::open(spec.as_bytes()).map_err(|e| format!("open {spec}: {e}"))?;
    let mut wrong = Vec::new();
    let mut check = |what: &str, got: String, want: &str| {
        if got != want {
            wrong.push(format!("{what}: {got}, expected {want}"));
        }
    };
    for what in ["try_acquire", "acquire(100ms)"] {
        let result = if what == "try_acquire" { lock.try_acquire() } else { lock.acquire(Some(SHORT)) };
        let got = outcome(result);
        if got == "Ok" {
            check("release", format!("{:?}", lock.release(Duration::ZERO)), "Ok(Released)");
        }
        check(what, got, taken);
    }
    check("inspect", outcome(lock.inspect()), taken);
    let got = match lock.break_lock() {
        Ok(was_held) => format!("Ok({was_held})"),
        Err(e) => format!("{:?}", e.kind()),
    };
    check("break_lock", got, broken);
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[test]
fn every_scheme_leaves_a_data_file_and_a_data_directory_alone() {
    each_file_scheme("data-files", |scheme, dir| {
        let mut failures = Vec::new();
        for (i, query) in QUERIES.iter().enumerate() {
            let d = dir.join(&format!("q{i}"));
            fs::create_dir(&d).unwrap();
            make_data(&d);
            for name in ["data.txt", "datadir"] {
                let data = d.join(name);
                let before = tree(&data);
                let spec = spec_at(scheme, &data, query);
                if let Err(why) = exercise(scheme, &spec) {
                    failures.push(format!("{spec}: {why}"));
                }
                if let Some(change) = tree_changes(&before, &tree(&data)) {
                    failures.push(format!("{spec}: the data was touched: {change}"));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

/// A holder that removes its own lock file before it releases (as scripts
/// that `flock` a file often do) is told it lost the lock, since a program
/// that writes no record may have locked a new file there; but the next
/// holder is not told it took the lock over from a holder that died.
#[test]
fn a_holder_that_removed_its_lock_file_leaves_no_dead_holder_behind() {
    let dir = TestDir::new("data-files-removed-by-holder");
    let lock_file = dir.join("job.lock");
    let spec = format!("flock:{}", lock_file.display());
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    fs::remove_file(&lock_file).unwrap();
    assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Lost));
    let next = open_lock(&spec).try_acquire().unwrap();
    assert_eq!(next.took_over_from, None, "told it took over from a holder that released");
}

/// `flock(1)` and the library exclude each other on a data file, and the
/// holder's writes to it stay.
#[test]
fn flock_on_a_data_file_is_what_flock_1_users_expect() {
    if Command::new("flock").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("skipped: flock(1) is not installed");
        return;
    }
    let dir = TestDir::new("data-files-flock1");
    let data = dir.join("counter");
    fs::write(&data, DATA).unwrap();
    let ino = fs::metadata(&data).unwrap().ino();
    let flock_1_gets_it = || {
        let status = Command::new("flock").args(["--nonblock", "--exclusive"]).arg(&data).arg("true").status().unwrap();
        match status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!("flock(1) failed: {status}"),
        }
    };

    let mut lock = open_lock(&spec_at(Scheme::Flock, &data, "ttl=1h"));
    lock.try_acquire().expect("a data file nobody locks");
    assert!(!flock_1_gets_it(), "flock(1) took the file while the library held it");
    // The holder's update, under the lock.
    fs::OpenOptions::new().append(true).open(&data).unwrap().write_all(b"12346\n").unwrap();
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert!(flock_1_gets_it(), "flock(1) cannot take the file after the release");
    assert_eq!(fs::read(&data).unwrap(), b"12345\n12346\n", "the holder's data is kept, nothing else written");
    assert_eq!(fs::metadata(&data).unwrap().ino(), ino, "the file is the same file");

    // flock(1) holds it, and says so on its stdout, until its stdin closes.
    let mut holder = Command::new("flock")
        .arg("--exclusive")
        .arg(&data)
        .args(["sh", "-c", "echo locked; read _; exit 0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "locked\n");
    let busy = lock.try_acquire().map(|_| ()).map_err(|e| e.kind());
    assert_eq!(busy, Err(ErrorKind::Busy), "the library took a file flock(1) holds");
    drop(holder.stdin.take());
    assert!(wait_patiently(&mut holder).success());
    lock.acquire(Some(Duration::from_secs(60))).expect("free once flock(1) let go");
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert_eq!(fs::read(&data).unwrap(), b"12345\n12346\n");
}

fn refusal(spec: &str) -> Option<(SpecErrorKind, String)> {
    match Lock::open(spec.as_bytes()) {
        Err(Error::Spec(e)) => Some((e.kind, String::from_utf8_lossy(e.key()).into_owned())),
        _ => None,
    }
}

#[test]
fn specs_that_would_make_exclusion_impossible_are_refused() {
    let dir = TestDir::new("data-files-refused");
    let data = dir.join("data.txt");
    let data_text = data.to_str().unwrap();
    let bad = |key: &str| Some((SpecErrorKind::BadValue, key.to_owned()));
    // The protected file as its own lock file, and a lock file per process.
    for query in ["ext=", "format=%25f", "format=%25D/%25F", "format=%25D/%25F.%25p", "format=/tmp/%25p.lock"] {
        let key = query.split('=').next().unwrap();
        assert_eq!(refusal(&format!("lockfile:{data_text}?{query}")), bad(key), "{query}");
    }
    // Permission bits only, and the owner must read and write.
    for scheme in &file_schemes() {
        for mode in ["4600", "2600", "1600", "6660", "7777", "0400", "0200", "0060", "0066", "0000"] {
            let spec = spec_at(*scheme, &data, &format!("mode={mode}"));
            assert_eq!(refusal(&spec), bad("mode"), "{spec}");
        }
    }
}

/// The protected file named as its own lock file by another spelling of
/// its path: refused, or at least never taken for a lock. The data file
/// holds what a LockFile::Simple stamp of a dead process looks like.
#[test]
fn a_format_that_names_the_protected_file_by_another_spelling_never_touches_it() {
    let dir = TestDir::new("data-files-spelling");
    let data = dir.join("data.txt");
    fs::write(&data, DATA).unwrap();
    set_mtime(&data, ago(Duration::from_secs(86_400)));
    let parent = dir.path().file_name().unwrap().to_str().unwrap();
    let formats = ["%25D/./%25F".to_owned(), "%25D//%25F".to_owned(), format!("%25D/../{parent}/%25F")];
    for format in &formats {
        let before = tree(&data);
        let spec = format!("lockfile:{}?format={format}&ttl=1s&stale=pid", data.display());
        let outcomes = match Lock::open(spec.as_bytes()) {
            Err(Error::Spec(_)) => Vec::new(),
            Err(e) => panic!("{spec}: {e:?}"),
            Ok(mut lock) => vec![
                ("try_acquire", lock.try_acquire().map(|_| ()).map_err(|e| e.kind())),
                ("inspect", lock.inspect().map(|_| ()).map_err(|e| e.kind())),
                ("break_lock", lock.break_lock().map(|_| ()).map_err(|e| e.kind())),
            ],
        };
        assert_eq!(tree_changes(&before, &tree(&data)), None, "{spec}: the protected file was touched ({outcomes:?})");
        for (what, result) in outcomes {
            assert_eq!(result, Err(ErrorKind::NotALock), "{spec}: {what}");
        }
    }
}

/// The files this process has open, as `/proc/self/fd` names them.
fn open_files() -> Vec<std::path::PathBuf> {
    fs::read_dir("/proc/self/fd").unwrap().filter_map(|fd| fs::read_link(fd.ok()?.path()).ok()).collect()
}

#[test]
fn flock_keeps_no_descriptor_of_a_data_file_between_acquisitions() {
    let dir = TestDir::new("flock-pins");
    let data = dir.join("data.db");
    let lock_file = dir.join("empty.lock");
    fs::write(&data, b"the data").unwrap();
    let mut on_data = open_lock(&format!("flock:{}", data.display()));
    let mut on_lock_file = open_lock(&format!("flock:{}", lock_file.display()));
    for lock in [&mut on_data, &mut on_lock_file] {
        lock.try_acquire().unwrap();
        lock.release(Duration::ZERO).unwrap();
    }
    let open = open_files();
    assert!(!open.contains(&data), "a descriptor of the data file kept: {open:?}");
    assert!(open.contains(&lock_file), "the empty lock file's descriptor is kept: {open:?}");

    // Its writers replace it: the old version's blocks are not pinned,
    // and the next acquisition locks the new file.
    let fresh = dir.join("data.db.new");
    fs::write(&fresh, b"the data, written anew").unwrap();
    fs::rename(&fresh, &data).unwrap();
    let open = open_files();
    let pinned =
        |path: &std::path::PathBuf| path.starts_with(dir.path()) && path.to_string_lossy().ends_with("(deleted)");
    assert!(!open.iter().any(pinned), "the old data pinned: {open:?}");
    on_data.try_acquire().unwrap();
    assert!(common::files::try_flock(&fs::File::open(&data).unwrap(), libc::LOCK_EX | libc::LOCK_NB)
        .is_ok_and(|took| !took));
    on_data.release(Duration::ZERO).unwrap();

    // A target the lock made, empty, and filled while held: a data file by
    // its release, whose descriptor goes with it.
    let filled = dir.join("filled.db");
    let mut on_filled = open_lock(&format!("flock:{}", filled.display()));
    on_filled.try_acquire().unwrap();
    fs::write(&filled, b"written while held").unwrap();
    on_filled.release(Duration::ZERO).unwrap();
    let replacement = dir.join("filled.db.new");
    fs::write(&replacement, b"written anew").unwrap();
    fs::rename(&replacement, &filled).unwrap();
    let open = open_files();
    assert!(!open.iter().any(pinned), "the version filled while held pinned: {open:?}");

    // The kept lock file removed after use, as `flock(1)` users do, and
    // made again and held by `flock(1)`: the kept descriptor's old file is
    // no lock any more, and a try is busy.
    fs::remove_file(&lock_file).unwrap();
    fs::write(&lock_file, b"").unwrap();
    let held_elsewhere = fs::File::open(&lock_file).unwrap();
    assert_eq!(common::files::try_flock(&held_elsewhere, libc::LOCK_EX | libc::LOCK_NB).ok(), Some(true));
    assert_eq!(on_lock_file.try_acquire().map_err(|e| e.kind()).err(), Some(ErrorKind::Busy));
    drop(held_elsewhere);
    // Removed again: the next try makes it anew and locks that one.
    fs::remove_file(&lock_file).unwrap();
    on_lock_file.try_acquire().unwrap();
    let probe = fs::File::open(&lock_file).unwrap();
    assert_eq!(common::files::try_flock(&probe, libc::LOCK_EX | libc::LOCK_NB).ok(), Some(false));
    on_lock_file.release(Duration::ZERO).unwrap();
}

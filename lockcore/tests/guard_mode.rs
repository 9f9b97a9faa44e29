//! Every file a lock creates gets exactly the spec's `mode`, whatever the
//! umask: `mode` says who may take the lock, and a umask must neither open
//! a private lock to others nor shut a shared one to its group.
//!
//! * The files every user of the lock reads and writes get `mode` itself:
//!   the guard (`<lock>.guard`; `flock`'s `<target>.guard`, where it keeps
//!   its state), the lease, the queue, and the file `flock` locks when the
//!   library creates it.
//! * Records nobody may rewrite in place get only its read bits: a
//!   `lockfile` lock file, and the `owner` record in a `mkdir` lock, are
//!   0400, 0440 or 0444 while held.
//! * A `mkdir` lock's directory gets a search bit with each read bit: 0700,
//!   0770 or 0777 while held.
//! * A `symlink` lock is a link, which has no permission bits of its own;
//!   its guard is checked as every other.
//!
//! Without `mode` the lock is private, 0600: the files are no longer 0666
//! less the umask, as they were before a lock said who may take it.
//!
//! A `shm` lock is its one file, which gets `mode` as the lease does; but
//! only 0600: its spec refuses 0660 and 0666 for their `mode`
//! (`common::private_only`), which is checked instead.
//!
//! Checked for 0600, 0660 and 0666 (and no `mode`) on every scheme, under a
//! restrictive umask (077, which would take every bit from group and
//! others) and a permissive one (000, which would leave a private lock's
//! files open to all). The umask belongs to the whole process, so each is
//! set in a child process of its own (this binary, re-executed), never in
//! the test binary whose other tests run in threads beside it.
//!
//! The same children run once more as an ordinary user (one of the test
//! users of `common::users`, made when the tests run as root; skipped
//! otherwise): permission bits bind such a user, as they do not bind root,
//! so the lock must also work with the bits it gave its own files (a
//! lock file it may only read, a directory it made before giving it any).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const UMASKS: [u32; 2] = [0o077, 0o000];

/// A spec's query, and the `mode` it means.
const MODES: [(&str, u32); 4] = [("mode=0600", 0o600), ("mode=0660", 0o660), ("mode=0666", 0o666), ("", 0o600)];

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "modes");
    let umask = u32::from_str_radix(&var("UMASK"), 8).unwrap();
    // `self`: the user the tests run as; otherwise a test user's name.
    let who = var("WHO");
    if who != "self" {
        // Made by `spawn_as`, which set the user and the umask.
        users::check_identity();
    }
    // SAFETY: sets this process's file creation mask; nothing else runs in
    // this child.
    unsafe { libc::umask(umask as libc::mode_t) };
    each_file_scheme(&format!("guard-mode-{who}-umask{umask:03o}"), |scheme, dir| {
        // The umask is in effect: a file made without the library's
        // `fchmod` gets 0666 less it.
        let plain = dir.join("plain");
        std::fs::File::create(&plain).unwrap();
        assert_eq!(mode_of(&plain), 0o666 & !umask, "the child's umask");
        for (i, (query, mode)) in MODES.into_iter().enumerate() {
            let case = dir.join(&format!("case{i}"));
            std::fs::create_dir(&case).unwrap();
            // A lock shared with a group lives in a directory only the
            // group may write (the library refuses one anyone may write:
            // anyone could plant its files first); the others in one like /tmp.
            let dir_mode = if mode == 0o660 { 0o770 } else { 0o1777 };
            std::fs::set_permissions(&case, std::fs::Permissions::from_mode(dir_mode)).unwrap();
            // A private-only scheme refuses the spec itself, which is checked.
            if mode & 0o066 != 0 && open_shared(scheme, &scheme.spec(&case, query)).is_none() {
                continue;
            }
            check_modes(scheme, &case, query, mode);
        }
    });
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

/// Takes the lock with `query` and checks the bits of every file it made:
/// while it is held, once more after a prolong (which rewrites a lock
/// file, a `mkdir` lock's record, a symlink), and after its release.
fn check_modes(scheme: Scheme, dir: &Path, query: &str, mode: u32) {
    let what = format!("{query:?}");
    let mut lock = open_lock(&scheme.spec(dir, query));
    lock.try_acquire().unwrap_or_else(|e| panic!("{what}: {e}"));
    check_held(scheme, dir, mode, &what);
    lock.prolong(None).unwrap_or_else(|e| panic!("{what}: prolong: {e}"));
    check_held(scheme, dir, mode, &format!("{what}, prolonged"));
    lock.release(Duration::ZERO).unwrap_or_else(|e| panic!("{what}: {e}"));
    for file in state_files(scheme, dir) {
        assert_eq!(mode_of(&file), mode, "{what}: {} after the release", file.display());
    }
}

/// The files every user of the lock reads and writes.
fn state_files(scheme: Scheme, dir: &Path) -> Vec<PathBuf> {
    scheme.guard_path(dir).into_iter().chain([scheme.state_path(dir)]).collect()
}

fn check_held(scheme: Scheme, dir: &Path, mode: u32, what: &str) {
    let state_files = state_files(scheme, dir);
    for file in &state_files {
        assert_eq!(mode_of(file), mode, "{what}: {} held", file.display());
    }
    let lock_path = scheme.lock_path(dir);
    let (read_bits, dir_bits) = (mode & 0o444, mode | (mode & 0o444) >> 2);
    match scheme {
        Scheme::Lockfile => assert_eq!(mode_of(&lock_path), read_bits, "{what}: the lock file"),
        Scheme::Mkdir => {
            assert_eq!(mode_of(&lock_path), dir_bits, "{what}: the lock directory");
            assert_eq!(mode_of(&lock_path.join("owner")), read_bits, "{what}: its record");
        }
        // The library made the file it locks: it was not there.
        Scheme::Flock => assert_eq!(mode_of(&lock_path), mode, "{what}: the flock'd file"),
        Scheme::Symlink => {
            assert!(std::fs::symlink_metadata(&lock_path).unwrap().file_type().is_symlink(), "{what}")
        }
        // The lock is the state file, checked above.
        Scheme::Lease | Scheme::Toplock | Scheme::Shm => assert!(state_files.contains(&lock_path), "{what}"),
        other => unknown_format(other),
    }
}

fn vars(umask: u32, who: &str) -> [(&'static str, String); 2] {
    [("UMASK", format!("{umask:o}")), ("WHO", who.to_owned())]
}

#[test]
fn every_file_of_a_lock_gets_exactly_its_mode_whatever_the_umask() {
    let mut children = Children::new();
    for umask in UMASKS {
        children.push(spawn("modes", &vars(umask, "self")));
    }
    children.expect_success("a lock under each umask");
}

#[test]
fn an_ordinary_user_gets_the_same_modes_and_can_use_its_lock() {
    let Some(users) = users::TestUsers::get() else { return };
    let user = users::TestUser::Web;
    let mut children: Vec<_> =
        UMASKS.into_iter().map(|umask| users.spawn_as(user, umask, "modes", &vars(umask, user.name()))).collect();
    let failed: Vec<String> = children.iter_mut().filter_map(|child| child.finish().err()).collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

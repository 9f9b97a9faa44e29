//! The directory that holds a lock must keep untrusted users from replacing
//! its files: whoever may rename a lock's file aside and put another in its
//! place can let two holders in. On every scheme:
//! * a private lock in a directory that belongs to another user is refused
//!   (its owner may rename anything in it): `Untrusted`, naming the
//!   directory, its owner and mode;
//! * a lock shared with a group is refused in a directory anyone may write
//!   (sticky or not: anyone may create its files there first) and in one a
//!   foreign group may write; and a file of it whose group is foreign. A
//!   `shm` lock cannot be shared at all (`common::private_only`): its spec
//!   with `mode=0660` is refused for its `mode`, and nothing is made;
//! * a file of a private lock that its owner made writable by others after
//!   a handle used it (a `chmod` by hand) is refused by that handle too, and
//!   not written; once private again it is taken: a handle that keeps the
//!   file open (or mapped, as `shm` does) judges it anew at every call;
//! * a directory reached through a symlink (`/var/lock` -> `/run/lock`) is
//!   judged as the directory it is, not as the link; but a link that someone
//!   outside the lock's users may point elsewhere (another user's, in a
//!   sticky directory such as `/tmp`) is refused, as is any name on the way
//!   that they may replace (a directory in one anyone may write, however
//!   it is reached): each later open would follow it to a directory of
//!   their choosing, and a second holder would take the lock there;
//! * a socket where a lock's file belongs is no lock (`NotALock`), not a
//!   system error.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use lockcore::{ErrorKind, FileRole};

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: Option<u32>, gid: Option<u32>) {
    std::os::unix::fs::chown(path, uid, gid).unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A group this process is not in.
fn foreign_group() -> u32 {
    let mut groups = [0 as libc::gid_t; 64];
    // SAFETY: `groups` has room for the 64 ids getgroups may write.
    let n = unsafe { libc::getgroups(64, groups.as_mut_ptr()) };
    // SAFETY: getegid cannot fail.
    let effective = unsafe { libc::getegid() };
    let mine: Vec<u32> = groups[..n.max(0) as usize].iter().copied().chain([effective]).collect();
    (60000..).find(|gid| !mine.contains(gid)).unwrap()
}

/// `try_acquire` of `spec` is refused as untrusted, about `file`.
fn refused(spec: &str, file: FileRole) {
    let mut lock = open_lock(spec);
    let err = lock.try_acquire().expect_err("a lock in a place others may change");
    assert_eq!((err.kind(), err.file()), (ErrorKind::Untrusted, Some(file)), "{spec}: {}", lock.describe(&err));
}

/// [`refused`] for `spec`, a lock of `scheme` shared with a group, in `dir`:
/// a scheme that is private only refuses the spec itself, before it
/// touches `dir`.
fn shared_refused(scheme: Scheme, dir: &Path, spec: &str, file: FileRole) {
    if open_shared(scheme, spec).is_some() {
        refused(spec, file);
    } else {
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "{spec}: refused, but made something in {dir:?}");
    }
}

#[test]
fn a_private_lock_in_another_users_directory_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a directory to another user");
        return;
    }
    each_file_scheme("dir-of-another", |scheme, dir| {
        let theirs = dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        set_mode(&theirs, 0o755);
        chown(&theirs, Some(65534), None);
        refused(&scheme.spec(&theirs, ""), FileRole::Directory);
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0, "nothing was made there");
    });
}

#[test]
fn a_lock_shared_with_a_group_is_refused_where_others_may_write() {
    each_file_scheme("dir-group", |scheme, dir| {
        // Anyone may write /tmp: anyone may make the lock's files there first.
        let like_tmp = dir.join("like-tmp");
        std::fs::create_dir(&like_tmp).unwrap();
        set_mode(&like_tmp, 0o1777);
        shared_refused(scheme, &like_tmp, &scheme.spec(&like_tmp, "mode=0660"), FileRole::Directory);
        if is_root() {
            // A group this process is not in may write it.
            let foreign = dir.join("foreign");
            std::fs::create_dir(&foreign).unwrap();
            chown(&foreign, None, Some(foreign_group()));
            set_mode(&foreign, 0o2770);
            shared_refused(scheme, &foreign, &scheme.spec(&foreign, "mode=0660"), FileRole::Directory);
        }
    });
}

#[test]
fn a_file_a_foreign_group_may_write_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a file to a foreign group");
        return;
    }
    each_file_scheme("file-group", |scheme, dir| {
        let shared = dir.join("shared");
        std::fs::create_dir(&shared).unwrap();
        set_mode(&shared, 0o770);
        let spec = scheme.spec(&shared, "mode=0660");
        // No file of a private-only scheme is ever shared with a group.
        let Some(mut lock) = open_shared(scheme, &spec) else { return };
        // The library makes the lock's files, then one of them changes group.
        lock.inspect().unwrap();
        let state = scheme.state_path(&shared);
        let before = std::fs::read(&state).unwrap();
        chown(&state, None, Some(foreign_group()));
        let role = if scheme.guard_path(&shared).is_some() { FileRole::Guard } else { FileRole::Lock };
        refused(&spec, role);
        assert_eq!(std::fs::read(&state).unwrap(), before, "nothing was written to it");
    });
}

#[test]
fn a_file_made_writable_by_others_is_refused_by_a_handle_that_used_it() {
    each_file_scheme("file-opened", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let mut lock = open_lock(&spec);
        lock.try_acquire().unwrap();
        lock.release(std::time::Duration::ZERO).unwrap();
        let state = scheme.state_path(dir.path());
        let before = std::fs::read(&state).unwrap();
        set_mode(&state, 0o666);
        // A handle that keeps its file mapped believes its last look at it
        // for this long.
        std::thread::sleep(lockcore::LOOK_BELIEVED_FOR);
        let role = if scheme.guard_path(dir.path()).is_some() { FileRole::Guard } else { FileRole::Lock };
        let kind_and_file = |result: Result<(), lockcore::Error>| result.map_err(|e| (e.kind(), e.file()));
        let refusal = Err((ErrorKind::Untrusted, Some(role)));
        assert_eq!(kind_and_file(lock.try_acquire().map(|_| ())), refusal, "{spec}: try_acquire");
        assert_eq!(kind_and_file(lock.inspect().map(|_| ())), refusal, "{spec}: inspect");
        assert_eq!(std::fs::read(&state).unwrap(), before, "{spec}: written while others may write it");
        set_mode(&state, 0o600);
        lock.try_acquire().unwrap_or_else(|e| panic!("{spec}: private again: {e}"));
        lock.release(std::time::Duration::ZERO).unwrap();
    });
}

#[test]
fn a_directory_reached_through_a_symlink_is_judged_as_itself() {
    each_file_scheme("dir-through-link", |scheme, dir| {
        let real = dir.join("real");
        std::fs::create_dir(&real).unwrap();
        set_mode(&real, 0o1777);
        let link = dir.join("var-lock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut lock = open_lock(&scheme.spec(&link, ""));
        let acquired = lock.try_acquire();
        assert!(acquired.is_ok(), "{:?}", acquired.map_err(|e| lock.describe(&e).to_string()));
        lock.release(std::time::Duration::ZERO).unwrap();
    });
}

#[test]
fn a_directory_inside_one_others_may_write_is_refused_however_it_is_reached() {
    each_file_scheme("dir-in-open-dir", |scheme, dir| {
        // Anyone may rename `inner` aside and put a directory of their own
        // (or a link to one) in its place: its own bits do not help.
        let open = dir.join("open");
        let inner = open.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        set_mode(&open, 0o777);
        set_mode(&inner, 0o700);
        refused(&scheme.spec(&inner, ""), FileRole::Way);
        // The message names the directory others may write, not the lock's.
        let mut lock = open_lock(&scheme.spec(&inner, ""));
        let err = lock.try_acquire().unwrap_err();
        let told = lock.describe(&err).to_string();
        assert!(told.contains("(by way of ") && told.contains("/open): "), "{told}");
        // Reached through links, one relative and one through `..`.
        let via = dir.join("via");
        std::os::unix::fs::symlink("open/inner", &via).unwrap();
        refused(&scheme.spec(&via, ""), FileRole::Way);
        let back = dir.join("back");
        std::fs::create_dir(&back).unwrap();
        std::os::unix::fs::symlink("../via", back.join("again")).unwrap();
        refused(&scheme.spec(&back.join("again"), ""), FileRole::Way);
        assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 0, "nothing was made there");
    });
}

/// A way whose links, followed, spell a path longer than PATH_MAX (the
/// kernel resolves it, one link at a time) cannot be judged to its end
/// here: refused, never taken as judged.
#[test]
fn a_way_too_long_to_judge_is_refused() {
    each_file_scheme("dir-way-too-long", |scheme, dir| {
        let real = dir.join("real");
        std::fs::create_dir(&real).unwrap();
        // Each link goes down and back up 350 times before the next: 2,800
        // bytes of way apiece, and 5,600 for the two.
        let detour = "real/../".repeat(350);
        std::os::unix::fs::symlink(format!("{detour}second"), dir.join("first")).unwrap();
        std::os::unix::fs::symlink(format!("{detour}real"), dir.join("second")).unwrap();
        let spec = scheme.spec(&dir.join("first"), "");
        assert!(std::fs::metadata(dir.join("first")).unwrap().is_dir(), "the kernel follows it");
        let mut lock = open_lock(&spec);
        let err = lock.try_acquire().expect_err("a way too long to judge");
        assert_eq!(err.kind(), ErrorKind::Spec(lockcore::SpecErrorKind::PathTooLong), "{}", lock.describe(&err));
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "nothing was made there");
    });
}

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        // Takes the lock SPEC, a path relative to CWD, and exits 0 if it got
        // it, 3 if it was refused as untrusted.
        "from-cwd" => {
            std::env::set_current_dir(var("CWD")).unwrap();
            let mut lock = open_lock(&var("SPEC"));
            match lock.try_acquire() {
                Ok(_) => std::process::exit(0),
                Err(e) if e.kind() == ErrorKind::Untrusted && e.file() == Some(FileRole::Way) => std::process::exit(3),
                Err(e) => panic!("{}", lock.describe(&e)),
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// A relative way that climbs out of the working directory with `..`: the
/// directory it leaves must stay put in the one it climbs to, since
/// whoever may move it there moves what `..` names (`../..` from a
/// working directory moved into another of theirs names the parent of
/// that one).
#[test]
fn a_climb_out_of_a_directory_others_may_move_is_refused() {
    each_file_scheme("dir-climb", |scheme, dir| {
        let open = dir.join("open");
        let inner = open.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        set_mode(&open, 0o777);
        set_mode(&inner, 0o700);
        let spec = scheme.spec(Path::new("../.."), "");
        let vars = [("CWD", inner.display().to_string()), ("SPEC", spec)];
        let status = spawn("from-cwd", &vars).wait().unwrap();
        assert_eq!(status.code(), Some(3), "{scheme:?}: taken by way of a directory others may move");
    });
}

#[test]
fn a_directory_reached_through_another_users_symlink_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a symlink to another user");
        return;
    }
    each_file_scheme("dir-through-their-link", |scheme, dir| {
        // Both trusted directories: root's, sticky, as /run/lock and /var/tmp are.
        let (first, second) = (dir.join("first"), dir.join("second"));
        for real in [&first, &second] {
            std::fs::create_dir(real).unwrap();
            set_mode(real, 0o1777);
        }
        let like_tmp = dir.join("like-tmp");
        std::fs::create_dir(&like_tmp).unwrap();
        set_mode(&like_tmp, 0o1777);
        // Another user's link in /tmp, which the lock's user took for a
        // directory of its own (`mkdir -p` succeeds on it).
        let link = like_tmp.join("job");
        std::os::unix::fs::symlink(&first, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        refused(&scheme.spec(&link, ""), FileRole::Way);
        // A way through a directory of theirs, too: they may rename its
        // entries.
        let theirs = like_tmp.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chown(&theirs, Some(65534), Some(65534));
        let inner = theirs.join("inner");
        std::os::unix::fs::symlink(&second, &inner).unwrap();
        refused(&scheme.spec(&inner, ""), FileRole::Way);
        for real in [&first, &second] {
            assert_eq!(std::fs::read_dir(real).unwrap().count(), 0, "nothing was made in {real:?}");
        }
    });
}

#[test]
fn a_socket_where_a_file_belongs_is_no_lock() {
    each_file_scheme("socket", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "");
        let lock_path = scheme.lock_path(dir.path());
        let _listener = std::os::unix::net::UnixListener::bind(&lock_path).unwrap();
        let mut lock = open_lock(&spec);
        let err = lock.try_acquire().expect_err("a socket is no lock");
        assert_eq!(err.kind(), ErrorKind::NotALock, "{spec}: {}", lock.describe(&err));
        assert!(std::fs::symlink_metadata(&lock_path).unwrap().file_type().is_socket_like(), "the socket stays");
    });
}

trait SocketLike {
    fn is_socket_like(&self) -> bool;
}

impl SocketLike for std::fs::FileType {
    fn is_socket_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_socket()
    }
}

//! What a `mkdir` lock's directory holds that the library did not put there.
//!
//! A lock shared with everyone (`mode=0666`) has a directory every user may
//! write (0777), so any user can put an entry in it, under any name, the
//! names of the library's own files included. The library removes only
//! what it made there:
//! * `another_users_entry_under_a_prolongs_name_is_never_removed`: as the
//!   lock is held by root, `lockcore-other` owns a file, then a directory,
//!   called like the new record of a prolong that died before its rename
//!   (`owner.<32 hex digits>`). The release answers `NotALock`, about the
//!   lock, as for any entry of another's, with a message that names the
//!   entry's path, and leaves everything as it was:
//!   the entry, its content, the lock directory at its path, nothing
//!   renamed aside. A leftover of that name that is a file of the lock
//!   directory's owner (`lockcore-web` here, who made the lock and whose
//!   prolong died) is the library's own, and goes with the lock when root
//!   releases it.
//! * `a_symlink_called_owner_makes_the_directory_no_lock`: a lock directory
//!   whose `owner` is a symlink (to a victim file) is `NotALock`
//!   for every operation, not `Symlink`: the lock path is a directory; the
//!   message names `owner`. The link and its target are left as they are,
//!   long past the TTL.
//! * `a_long_entry_name_is_cut_in_the_message`: an entry whose name is longer
//!   than an error keeps is named by its start and `...`.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::files::{helper_names, tree};
use common::users::{TestUser, TestUsers};
use common::*;
use lockcore::{ErrorKind, FileRole, ReleaseOutcome};

/// A name of the pattern of a prolong's new record.
const PROLONGS_NAME: &str = "owner.0123456789abcdef0123456789abcdef";

#[test]
fn child_entry() {
    child_main(|role| panic!("unknown role {role}"));
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

#[test]
fn another_users_entry_under_a_prolongs_name_is_never_removed() {
    let Some(users) = TestUsers::get() else { return };
    let other = (users.uid(TestUser::Other), users.gid(TestUser::Other));
    for as_directory in [false, true] {
        let dir = TestDir::new("mkdir-entries");
        let spec = format!("mkdir:{}/lk?mode=0666", dir.path().display());
        let lock_dir = dir.join("lk");
        let mut lock = open_lock(&spec);
        lock.try_acquire().unwrap();
        let planted = lock_dir.join(PROLONGS_NAME);
        if as_directory {
            fs::create_dir(&planted).unwrap();
        } else {
            fs::write(&planted, b"precious\n").unwrap();
        }
        chown(&planted, other.0, other.1);
        let before = tree(&lock_dir);

        let what = if as_directory { "a directory" } else { "a file" };
        let err = lock.release(Duration::ZERO).expect_err(what);
        assert_eq!((err.kind(), err.file()), (ErrorKind::NotALock, Some(FileRole::Lock)), "{what}: {err:?}");
        let message = lock.describe(&err).to_string();
        assert!(message.starts_with(&format!("{}: ", planted.display())), "{what}: {message}");
        assert_eq!(tree(&lock_dir), before, "{what}: the lock directory was changed");
        assert_eq!(helper_names(dir.path(), "lk"), Vec::<String>::new(), "{what}: renamed aside");
    }

    // The holder's own leftover: the lock is lockcore-web's, and so is the
    // file its prolong left; root, a user of the lock too, releases it.
    let web = (users.uid(TestUser::Web), users.gid(TestUser::Web));
    let dir = TestDir::new("mkdir-entries");
    let spec = format!("mkdir:{}/lk?mode=0666", dir.path().display());
    let lock_dir = dir.join("lk");
    let mut lock = open_lock(&spec);
    lock.try_acquire().unwrap();
    let leftover = lock_dir.join(PROLONGS_NAME);
    fs::write(&leftover, b"").unwrap();
    for path in [&lock_dir, &lock_dir.join("owner"), &leftover] {
        chown(path, web.0, web.1);
    }
    assert_eq!(fs::metadata(&lock_dir).unwrap().uid(), web.0);
    assert_eq!(lock.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    assert!(fs::symlink_metadata(&lock_dir).is_err(), "the lock directory is still there");
    assert_eq!(helper_names(dir.path(), "lk"), Vec::<String>::new(), "left aside");
}

/// A lock directory whose `owner` is a symlink holds no record of ours: it
/// is no lock, not a symlink at the lock's path, and its link is never
/// followed or removed, however old it is.
#[test]
fn a_symlink_called_owner_makes_the_directory_no_lock() {
    let dir = TestDir::new("mkdir-entries");
    let lock_dir = dir.join("lk");
    let victim = dir.join("victim");
    fs::write(&victim, b"precious\n").unwrap();
    fs::create_dir(&lock_dir).unwrap();
    std::os::unix::fs::symlink(&victim, lock_dir.join("owner")).unwrap();
    set_mtime(&lock_dir, ago(Duration::from_secs(7200)));
    let before = (tree(&lock_dir), tree(&victim));
    let mut lock = open_lock(&format!("mkdir:{}?ttl=1s", lock_dir.display()));
    let kinds = (
        lock.try_acquire().map(drop).map_err(|e| e.kind()),
        lock.inspect().map(drop).map_err(|e| e.kind()),
        lock.break_lock().map(drop).map_err(|e| e.kind()),
    );
    let refused = Err(ErrorKind::NotALock);
    assert_eq!(kinds, (refused, refused, refused));
    let err = lock.try_acquire().unwrap_err();
    let message = lock.describe(&err).to_string();
    assert!(message.starts_with(&format!("{}: ", lock_dir.join("owner").display())), "{message}");
    assert_eq!((tree(&lock_dir), tree(&victim)), before, "changed");
}

/// A name too long to keep whole in an error is cut in the message, and
/// says so.
#[test]
fn a_long_entry_name_is_cut_in_the_message() {
    let dir = TestDir::new("mkdir-entries");
    let spec = format!("mkdir:{}/lk?mode=0666", dir.path().display());
    let mut holder = open_lock(&spec);
    holder.try_acquire().unwrap();
    let name = "n".repeat(200);
    fs::write(dir.join("lk").join(&name), b"").unwrap();
    let mut other = open_lock(&spec);
    let err = other.try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotALock);
    let message = other.describe(&err).to_string();
    let named = format!("{}/{}...: ", dir.join("lk").display(), &name[..lockcore::ENTRY_NAME_CAPACITY]);
    assert!(message.starts_with(&named), "{message}");
}

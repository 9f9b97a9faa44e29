//! What the tests do to a lock's files from outside the library: take a
//! whole tree's picture to prove nothing in it changed, hold the kernel
//! locks another process would hold, recognise the library's helper names,
//! and wait for a child that may hang.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// One entry of a [`Tree`]: its kind, permission bits, owner, identity,
/// modification time, and content (a file's bytes, a symlink's target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: char,
    pub mode: u32,
    pub uid: u32,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub content: Vec<u8>,
}

/// Every entry at and below a path, by path relative to it (`""` for the
/// path itself), without following symlinks. Empty when nothing is there.
pub type Tree = BTreeMap<PathBuf, Entry>;

pub fn tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    add_to_tree(&mut out, root, Path::new(""));
    out
}

fn add_to_tree(out: &mut Tree, path: &Path, relative: &Path) {
    let Ok(meta) = fs::symlink_metadata(path) else { return };
    let kind = kind_of(&meta);
    let content = match kind {
        '-' => fs::read(path).unwrap_or_default(),
        'l' => fs::read_link(path).map(|t| t.into_os_string().into_encoded_bytes()).unwrap_or_default(),
        _ => Vec::new(),
    };
    let entry = Entry {
        kind,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        ino: meta.ino(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        content,
    };
    out.insert(relative.to_owned(), entry);
    if kind == 'd' {
        let mut names: Vec<_> =
            fs::read_dir(path).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
        names.sort();
        for name in names {
            add_to_tree(out, &path.join(&name), &relative.join(&name));
        }
    }
}

/// `ls -l`'s first letter (`p` for a fifo).
pub fn kind_of(meta: &fs::Metadata) -> char {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        'd'
    } else if t.is_symlink() {
        'l'
    } else if t.is_file() {
        '-'
    } else if t.is_fifo() {
        'p'
    } else {
        '?'
    }
}

/// A readable account of how two pictures of a tree differ, or `None`.
pub fn tree_changes(before: &Tree, after: &Tree) -> Option<String> {
    let mut changes = Vec::new();
    for (path, old) in before {
        match after.get(path) {
            None => changes.push(format!("{} was removed", path.display())),
            Some(new) if new != old => changes.push(format!("{} changed: {}", path.display(), entry_change(old, new))),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        changes.push(format!("{} appeared", path.display()));
    }
    (!changes.is_empty()).then(|| changes.join("; "))
}

fn entry_change(old: &Entry, new: &Entry) -> String {
    let mut what = Vec::new();
    if old.kind != new.kind {
        what.push(format!("kind {} -> {}", old.kind, new.kind));
    }
    if old.mode != new.mode {
        what.push(format!("mode {:o} -> {:o}", old.mode, new.mode));
    }
    if old.uid != new.uid {
        what.push(format!("owner {} -> {}", old.uid, new.uid));
    }
    if old.ino != new.ino {
        what.push("inode".to_owned());
    }
    if old.mtime != new.mtime {
        what.push("mtime".to_owned());
    }
    if old.content != new.content {
        what.push(format!("content ({} -> {} bytes)", old.content.len(), new.content.len()));
    }
    what.join(", ")
}

/// Whether `name` is `<base>.<32 hex digits>`: the pattern of the names the
/// library builds its files under before it links or renames them in.
pub fn is_helper_name(name: &str, base: &str) -> bool {
    name.strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The names in `dir` of the helper pattern of `base` (a file name in `dir`).
pub fn helper_names(dir: &Path, base: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| d.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.retain(|name| is_helper_name(name, base));
    names.sort();
    names
}

/// Tries an open-file-description lock (`fcntl(F_OFD_SETLK)`) on the whole
/// file, as the library takes its guards: exclusive (`F_WRLCK`) or shared
/// (`F_RDLCK`). `Ok(false)` when another description holds a conflicting
/// lock; the lock lasts until the file (every descriptor of its
/// description) is closed or [`ofd_unlock`].
pub fn ofd_lock(file: &File, exclusive: bool) -> std::io::Result<bool> {
    ofd_set(file, if exclusive { libc::F_WRLCK } else { libc::F_RDLCK })
}

pub fn ofd_unlock(file: &File) -> std::io::Result<bool> {
    ofd_set(file, libc::F_UNLCK)
}

fn ofd_set(file: &File, kind: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock is plain data; zeroed is a valid value (l_pid must be 0
    // for OFD locks, and a zero start and length mean the whole file).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a descriptor this process owns and a valid flock struct.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if r == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// `flock(2)` without blocking; `Ok(false)` when another holds it.
pub fn try_flock(file: &File, op: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: a descriptor this process owns.
    let r = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(err),
    }
}

/// Waits for `child` until `deadline` has passed; kills it then. `Err`
/// says the child hung: the caller turns that into a failure instead of a
/// test that never ends.
pub fn wait_or_kill(child: &mut Child, deadline: Duration) -> Result<ExitStatus, String> {
    let give_up = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Ok(status);
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("child {} still running after {deadline:?}: killed", child.id()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

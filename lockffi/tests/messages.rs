//! What `lock_last_error_message` tells someone who meets the library for
//! the first time: which call failed, on which file (its full path), why,
//! in the system's own words (the errno's text and number), and, where a
//! file was refused, whose it is and its mode. Called through the C ABI
//! itself, on every scheme of `lockcore::Scheme::ALL` whose locks are files
//! (the messages of a lock on a server are checked with its server's tests):
//! * a component of the lock's path that is a file: `LOCK_ERR_NOT_A_DIRECTORY`,
//!   and a message that does not say a directory is missing;
//! * a missing directory, a symlink where a file belongs;
//! * a file others may write, a file of another user (as root: the guard
//!   given to uid 65534), a directory the caller may not write (as uid
//!   65534, when root): the owner by name and uid, and the mode;
//! * a lock held elsewhere: who holds it (pid, host, since, expiry);
//! * `lock_path` with a buffer too small: the length it needs;
//! * `lock_close` whose release cannot get the guard (another process holds
//!   it; for `shm`, which has no guard file, the section word in its file that
//!   orders its changes): `LOCK_BUSY`, with a message, not silence.

use std::ffi::{c_char, CStr, CString};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use lockcore::Scheme;
use lockffi::{
    lock_acquire, lock_close, lock_handle, lock_last_error_message, lock_open, lock_path, lock_result, lock_set_cancel,
    lock_try_acquire,
};

/// Names the directory a re-executed child of this binary works in.
const CHILD_VAR: &str = "LOCKFFI_MESSAGES_CHILD_DIR";
/// The uid of `nobody`, for a file of another user and a caller without rights.
const NOBODY: u32 = 65534;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The schemes whose locks are files of this host.
fn file_schemes() -> Vec<Scheme> {
    Scheme::ALL.iter().copied().filter(|scheme| scheme.supports(lockcore::Ability::Files)).collect()
}

/// A fresh directory in /tmp (mode 0755), removed unless the test failed.
struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let path = PathBuf::from(format!(
            "/tmp/lockffi-messages-{label}-{}-{nanos}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping {}", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

fn spec(scheme: Scheme, dir: &Path, query: &str) -> String {
    let target = if scheme == Scheme::Lockfile { dir.join("data") } else { dir.join("lock") };
    match query {
        "" => format!("{}:{}", scheme.name(), target.display()),
        _ => format!("{}:{}?{query}", scheme.name(), target.display()),
    }
}

/// The lock's path and its guard's, as lockcore names them.
fn paths(spec: &str) -> (String, Option<String>) {
    let lock = lockcore::Lock::open(spec.as_bytes()).unwrap();
    let text = |p: &lockcore::CPath| String::from_utf8(p.as_bytes().to_vec()).unwrap();
    (text(lock.path().expect("a lock that keeps files")), lock.guard_path().map(text))
}

/// The file that orders the lock's changes: its guard, or the lock file.
fn state_path(spec: &str) -> String {
    let (lock, guard) = paths(spec);
    guard.unwrap_or(lock)
}

fn open(spec: &str) -> *mut lock_handle {
    let c = CString::new(spec).unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated spec and a valid out-pointer.
    let rc = unsafe { lock_open(c.as_ptr(), &mut handle) };
    assert_eq!(rc, lock_result::LOCK_OK, "lock_open {spec}: {}", message());
    handle
}

fn close(handle: *mut lock_handle) -> lock_result {
    // SAFETY: a handle from lock_open, closed once.
    unsafe { lock_close(handle) }
}

fn try_acquire(handle: *mut lock_handle) -> lock_result {
    // SAFETY: a live handle; the fence is not wanted.
    unsafe { lock_try_acquire(handle, std::ptr::null_mut()) }
}

/// This thread's last message.
fn message() -> String {
    // SAFETY: NULL asks for the length only.
    let len = unsafe { lock_last_error_message(std::ptr::null_mut(), 0) };
    let mut buf = vec![0 as c_char; len + 1];
    // SAFETY: a buffer of its length.
    let full = unsafe { lock_last_error_message(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(full, len);
    // SAFETY: NUL-terminated by lock_last_error_message.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_owned()
}

/// `(<strerror>, errno N)`, as the message gives an errno.
fn errno_text(errno: i32) -> String {
    // SAFETY: strerror returns a valid NUL-terminated string.
    let text = unsafe { CStr::from_ptr(libc::strerror(errno)) }.to_str().unwrap().to_owned();
    format!("({text}, errno {errno})")
}

fn user_name(uid: u32) -> Option<String> {
    // SAFETY: getpwuid returns NULL or a valid entry (tests call it from one thread at a time here).
    let entry = unsafe { libc::getpwuid(uid) };
    // SAFETY: a non-NULL entry has a NUL-terminated name.
    (!entry.is_null()).then(|| unsafe { CStr::from_ptr((*entry).pw_name) }.to_str().unwrap().to_owned())
}

/// `[owner <name> (uid N), mode 0NNN]`, or without a name if it has none.
fn owner_text(uid: u32, mode: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("[owner {name} (uid {uid}), mode {mode:04o}]"),
        None => format!("[owner uid {uid}, mode {mode:04o}]"),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `text` has `<word> YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn has_time_after(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let rest = &text.as_bytes()[at + word.len()..];
        let shape = b"dddd-dd-ddTdd:dd:dd.dddZ";
        rest.len() >= shape.len()
            && shape.iter().zip(rest).all(|(&s, &c)| if s == b'd' { c.is_ascii_digit() } else { s == c })
    })
}

/// Checks a message: `<call>: <path>: ...`, with each of `parts`.
fn check_message(failures: &mut Vec<String>, what: &str, call: &str, path: &str, parts: &[&str]) {
    let text = message();
    let start = format!("{call}: {path}: ");
    if !text.starts_with(&start) {
        failures.push(format!("{what}: the message does not start with {start:?}: {text:?}"));
    }
    for part in parts {
        if !text.contains(part) {
            failures.push(format!("{what}: the message lacks {part:?}: {text:?}"));
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn path_errors_name_the_call_the_full_path_and_the_errno() {
    let mut failures = Vec::new();
    for scheme in file_schemes() {
        let dir = Dir::new(&format!("paths-{}", scheme.name()));
        let name = scheme.name();

        // A component of the path is a file.
        let file = dir.0.join("a-file");
        fs::write(&file, b"data\n").unwrap();
        let s = spec(scheme, &file, "ttl=1h");
        let (lock, guard) = paths(&s);
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_NOT_A_DIRECTORY {
            failures.push(format!("{name}, a file on the path: {rc:?}"));
        }
        // The first file the call touches: the guard where there is one.
        let about = if scheme == Scheme::Flock { lock.clone() } else { guard.clone().unwrap_or(lock.clone()) };
        check_message(
            &mut failures,
            &format!("{name} ENOTDIR"),
            "lock_try_acquire",
            &about,
            &[&errno_text(libc::ENOTDIR)],
        );
        let text = message();
        if text.contains("does not exist") || text.contains("missing") {
            failures.push(format!("{name}: ENOTDIR said to be a missing directory: {text:?}"));
        }
        close(h);

        // A directory on the path does not exist: the message names it.
        let missing = dir.0.join("missing");
        let s = spec(scheme, &missing, "ttl=1h");
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_NOT_FOUND {
            failures.push(format!("{name}, a missing directory: {rc:?}"));
        }
        check_message(
            &mut failures,
            &format!("{name} ENOENT"),
            "lock_try_acquire",
            missing.to_str().unwrap(),
            &[&errno_text(libc::ENOENT)],
        );
        close(h);

        // A symlink where the file that orders the lock's changes belongs.
        let s = spec(scheme, &dir.0, "ttl=1h");
        let state = state_path(&s);
        std::os::unix::fs::symlink(dir.0.join("elsewhere"), &state).unwrap();
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_SYMLINK {
            failures.push(format!("{name}, a symlink at {state}: {rc:?}"));
        }
        check_message(&mut failures, &format!("{name} ELOOP"), "lock_try_acquire", &state, &[&errno_text(libc::ELOOP)]);
        close(h);
        fs::remove_file(&state).unwrap();

        // Others may write it, and the lock is private.
        let h = open(&s);
        assert_eq!(try_acquire(h), lock_result::LOCK_OK, "{name}: {}", message());
        assert_eq!(close(h), lock_result::LOCK_OK, "{name}: {}", message());
        fs::set_permissions(&state, fs::Permissions::from_mode(0o666)).unwrap();
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_UNTRUSTED {
            failures.push(format!("{name}, {state} mode 0666: {rc:?}"));
        }
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        check_message(
            &mut failures,
            &format!("{name} writable"),
            "lock_try_acquire",
            &state,
            &[&owner_text(me, 0o666)],
        );
        close(h);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_file_of_another_user_is_named_with_its_owner_and_mode() {
    if !is_root() {
        eprintln!("skipped: needs root to give a file to uid {NOBODY}");
        return;
    }
    let mut failures = Vec::new();
    for scheme in file_schemes() {
        let dir = Dir::new(&format!("untrusted-{}", scheme.name()));
        let s = spec(scheme, &dir.0, "ttl=1h");
        let state = state_path(&s);
        let h = open(&s);
        assert_eq!(try_acquire(h), lock_result::LOCK_OK, "{}", message());
        assert_eq!(close(h), lock_result::LOCK_OK, "{}", message());
        std::os::unix::fs::chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_UNTRUSTED {
            failures.push(format!("{}: {state} of uid {NOBODY}: {rc:?}", scheme.name()));
        }
        check_message(
            &mut failures,
            scheme.name(),
            "lock_try_acquire",
            &state,
            &["belongs to another user", &owner_text(NOBODY, 0o600)],
        );
        close(h);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// In a child of this binary (as uid 65534 when the test runs as root):
/// every scheme in a directory the caller may not write.
#[test]
fn permission_child() {
    let Ok(dir) = std::env::var(CHILD_VAR) else { return };
    let dir = PathBuf::from(dir);
    let meta = fs::metadata(&dir).unwrap();
    let (uid, mode) = (std::os::unix::fs::MetadataExt::uid(&meta), meta.permissions().mode() & 0o7777);
    let mut failures = Vec::new();
    for scheme in file_schemes() {
        let s = spec(scheme, &dir, "ttl=1h");
        let h = open(&s);
        let rc = try_acquire(h);
        if rc != lock_result::LOCK_ERR_PERMISSION {
            failures.push(format!("{}: {rc:?}: {}", scheme.name(), message()));
        }
        // The directory refused to let the file be made: it is named, with
        // its owner and mode.
        check_message(
            &mut failures,
            scheme.name(),
            "lock_try_acquire",
            dir.to_str().unwrap(),
            &[&errno_text(libc::EACCES), &owner_text(uid, mode)],
        );
        close(h);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_directory_the_caller_may_not_write_is_named_with_its_owner_and_mode() {
    use std::os::unix::process::CommandExt;
    let dir = Dir::new("permission");
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["permission_child", "--exact", "--nocapture", "--test-threads=1", "--quiet"])
        .env(CHILD_VAR, &dir.0)
        .current_dir("/");
    if is_root() {
        // Root may write anywhere: the child is nobody, and the directory
        // (root's, 0755) refuses it.
        // SAFETY: runs in the forked child before exec; only async-signal-safe calls.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    } else {
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o555)).unwrap();
    }
    let status = cmd.status().unwrap();
    if !is_root() {
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert!(status.success(), "the child that may not write the directory failed: {status}");
}

#[test]
fn a_timeout_and_a_busy_lock_name_the_holder() {
    let mut failures = Vec::new();
    let host = {
        let mut buf = [0u8; 256];
        // SAFETY: a buffer of its length.
        assert_eq!(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) }, 0);
        CStr::from_bytes_until_nul(&buf).unwrap().to_str().unwrap().to_owned()
    };
    let pid = std::process::id();
    for scheme in file_schemes() {
        let dir = Dir::new(&format!("holder-{}", scheme.name()));
        let s = spec(scheme, &dir.0, "ttl=1h");
        let (lock, _) = paths(&s);
        let holder = open(&s);
        assert_eq!(try_acquire(holder), lock_result::LOCK_OK, "{}", message());
        let waiter = open(&s);
        let holder_parts =
            [format!("held by pid {pid}"), format!("on {host:?}"), " since ".to_owned(), ", expiring ".to_owned()];
        let parts: Vec<&str> = holder_parts.iter().map(String::as_str).collect();
        // SAFETY: a live handle; the fence is not wanted.
        let rc = unsafe { lock_acquire(waiter, 100, std::ptr::null_mut()) };
        if rc != lock_result::LOCK_TIMEOUT {
            failures.push(format!("{}: lock_acquire: {rc:?}", scheme.name()));
        }
        check_message(&mut failures, &format!("{} timeout", scheme.name()), "lock_acquire", &lock, &parts);
        let text = message();
        if !has_time_after(&text, " since ") || !has_time_after(&text, ", expiring ") {
            failures.push(format!("{}: the holder's times are not RFC 3339: {text:?}", scheme.name()));
        }
        let rc = try_acquire(waiter);
        if rc != lock_result::LOCK_BUSY {
            failures.push(format!("{}: lock_try_acquire: {rc:?}", scheme.name()));
        }
        check_message(&mut failures, &format!("{} busy", scheme.name()), "lock_try_acquire", &lock, &parts);
        close(waiter);
        assert_eq!(close(holder), lock_result::LOCK_OK, "{}", message());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A message cut to fit a short buffer is cut where a character starts:
/// whatever the buffer's length, the copy is UTF-8 and begins the message.
#[test]
fn a_message_cut_to_fit_keeps_whole_characters() {
    let dir = Dir::new("cut-é");
    let missing = format!("{}/été/déjà/x", dir.0.display());
    let spec = std::ffi::CString::new(format!("mkdir:{missing}")).unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated spec and a valid out-pointer.
    assert_eq!(unsafe { lock_open(spec.as_ptr(), &mut handle) }, lock_result::LOCK_OK);
    assert_eq!(try_acquire(handle), lock_result::LOCK_ERR_NOT_FOUND);
    let full = message();
    assert!(full.contains("été/déjà"), "{full:?}");
    for len in 1..=full.len() + 1 {
        let mut buf = vec![0x55 as c_char; len];
        // SAFETY: a buffer of its length.
        let whole = unsafe { lock_last_error_message(buf.as_mut_ptr(), buf.len()) };
        assert_eq!(whole, full.len());
        // SAFETY: NUL-terminated within `len` bytes by lock_last_error_message.
        let copy = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes();
        let copy = std::str::from_utf8(copy).unwrap_or_else(|e| panic!("cut into {len} bytes: {e}: {copy:?}"));
        assert!(full.starts_with(copy) && copy.len() + 4 >= len.min(full.len() + 1), "cut into {len}: {copy:?}");
    }
    close(handle);
}

#[test]
fn lock_path_with_a_small_buffer_gives_the_length_it_needs() {
    for scheme in file_schemes() {
        let dir = Dir::new(&format!("path-{}", scheme.name()));
        let s = spec(scheme, &dir.0, "");
        let (lock, _) = paths(&s);
        let h = open(&s);
        let mut buf = [0x55 as c_char; 8];
        let mut len = 0usize;
        // SAFETY: a live handle, a buffer of its length, a valid out-pointer.
        let rc = unsafe { lock_path(h, buf.as_mut_ptr(), buf.len(), &mut len) };
        assert_eq!(rc, lock_result::LOCK_ERR_BUFFER_TOO_SMALL, "{}", scheme.name());
        assert_eq!(len, lock.len(), "{}: the length needed, without the terminator", scheme.name());
        assert!(buf.iter().all(|&b| b == 0x55), "{}: the buffer was written", scheme.name());
        let text = message();
        let needs = format!("need {} bytes, buf_len is 8", lock.len() + 1);
        assert!(
            text.starts_with(&format!("lock_path: {lock}: ")) && text.contains("too small") && text.contains(&needs),
            "{}: {text:?}",
            scheme.name()
        );
        let mut room = vec![0 as c_char; len + 1];
        // SAFETY: as above, with room for the path and its terminator.
        let rc = unsafe { lock_path(h, room.as_mut_ptr(), room.len(), &mut len) };
        assert_eq!(rc, lock_result::LOCK_OK);
        // SAFETY: NUL-terminated by lock_path.
        assert_eq!(unsafe { CStr::from_ptr(room.as_ptr()) }.to_str().unwrap(), lock);
        close(h);
    }
}

/// What orders a lock's changes, held as another process's change would
/// hold it until dropped: an exclusive OFD lock on its state file, or, for
/// `shm`, which takes no file lock, the section word in its file, taken in
/// this process's name as a change of another handle would take it.
enum Exclusion {
    /// Held for as long as the descriptor is open.
    OfdLock { _file: File },
    /// Held until dropped; the mapping of the file's first page, and the
    /// description that holds the byte of the holder's tag.
    SectionWord { page: *mut libc::c_void, _file: File },
}

/// A `shm` lock file's length, and the bit of its section word's low half
/// that says someone sleeps on it.
const SHM_FILE_LEN: usize = 4096;
const SHM_SLEEPING: u64 = 1 << 31;

impl Exclusion {
    fn section_word(page: *mut libc::c_void) -> &'static std::sync::atomic::AtomicU64 {
        // SAFETY: the word lies at this offset, 8-aligned, inside the page,
        // which stays mapped until the exclusion is dropped (and is used
        // only while it is).
        unsafe { &*page.cast::<u8>().add(lockcore::internals::SHM_SECTION_AT).cast() }
    }
}

impl Drop for Exclusion {
    fn drop(&mut self) {
        if let Exclusion::SectionWord { page, .. } = *self {
            let word = Exclusion::section_word(page);
            if word.swap(0, std::sync::atomic::Ordering::SeqCst) & SHM_SLEEPING != 0 {
                // SAFETY: FUTEX_WAKE on the word's low half (little-endian),
                // inside the live mapping.
                unsafe { libc::syscall(libc::SYS_futex, word.as_ptr().cast::<u32>(), libc::FUTEX_WAKE, i32::MAX) };
            }
            // SAFETY: the mapping made in `hold_shm_section`; nothing refers
            // into it any more.
            unsafe { libc::munmap(page, SHM_FILE_LEN) };
        }
    }
}

/// Holds what orders the changes of `scheme`'s lock, whose state file is
/// `path` (made by the library).
fn hold_guard(scheme: Scheme, path: &str) -> Exclusion {
    let file = OpenOptions::new().read(true).write(true).open(path).unwrap();
    if scheme == Scheme::Shm {
        return hold_shm_section(file);
    }
    // SAFETY: flock is plain data; zero start and length cover the whole file.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a descriptor we own and a valid flock struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    assert_eq!(rc, 0, "F_OFD_SETLK {path}: {}", std::io::Error::last_os_error());
    Exclusion::OfdLock { _file: file }
}

/// Takes the section word of the `shm` lock file `file` in this process's
/// name, under a tag whose byte `file` holds locked: the library waits for
/// such a live holder until its deadline.
fn hold_shm_section(file: File) -> Exclusion {
    // Every tag the library draws has its top bit set.
    let tag = u64::from(std::process::id() | 1 << 31);
    // SAFETY: flock is plain data; all-zero is valid (l_pid must be 0).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = (lockcore::internals::SHM_TAG_BYTES_AT + tag) as libc::off_t;
    lock.l_len = 1;
    // SAFETY: a descriptor we own and a valid flock struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    assert_eq!(rc, 0, "F_OFD_SETLK of the tag's byte: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh shared mapping of the lock's file, which the library
    // made SHM_FILE_LEN long; unmapped when the exclusion is dropped.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SHM_FILE_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    let mine = (tag << 32) | u64::from(std::process::id());
    let taken = Exclusion::section_word(page).compare_exchange(
        0,
        mine,
        std::sync::atomic::Ordering::SeqCst,
        std::sync::atomic::Ordering::SeqCst,
    );
    assert!(taken.is_ok(), "the section word is free between calls");
    Exclusion::SectionWord { page, _file: file }
}

#[test]
fn a_close_whose_release_cannot_get_the_guard_says_so() {
    // Each close waits the 2 s a release may wait: the schemes side by side.
    let failures: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = file_schemes()
            .iter()
            .map(|&scheme| {
                s.spawn(move || {
                    let dir = Dir::new(&format!("close-{}", scheme.name()));
                    let sp = spec(scheme, &dir.0, "ttl=1h");
                    let h = open(&sp);
                    assert_eq!(try_acquire(h), lock_result::LOCK_OK, "{}", message());
                    let state = state_path(&sp);
                    let flood = hold_guard(scheme, &state);
                    let rc = close(h);
                    let mut failures = Vec::new();
                    if rc != lock_result::LOCK_BUSY {
                        failures.push(format!("{}: lock_close answered {rc:?}", scheme.name()));
                    }
                    check_message(
                        &mut failures,
                        scheme.name(),
                        "lock_close",
                        &state,
                        &["the lock is busy: another process kept"],
                    );
                    drop(flood);
                    failures
                })
            })
            .collect();
        runs.into_iter().flat_map(|run| run.join().unwrap_or_else(|_| vec!["panicked".to_owned()])).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What a call made on a handle that is in another call (here, from the
/// cancel callback of its own wait) answered, and its message.
static IN_USE: std::sync::Mutex<Option<(lock_result, String)>> = std::sync::Mutex::new(None);

/// A cancel callback that calls `lock_path` on the handle waiting, notes
/// what it answered, and cancels the wait.
unsafe extern "C" fn path_of_the_waiting_handle(context: *mut std::ffi::c_void) -> bool {
    let mut buf = [0 as c_char; 512];
    // SAFETY: the handle the test gave as context, live while it waits; a
    // buffer of its length; the length is not wanted.
    let rc = unsafe { lock_path(context.cast(), buf.as_mut_ptr(), buf.len(), std::ptr::null_mut()) };
    *IN_USE.lock().unwrap() = Some((rc, message()));
    true
}

/// A call on a handle that another call is in answers
/// `LOCK_ERR_HANDLE_IN_USE` with a message that names the lock.
#[test]
fn a_handle_in_another_call_is_named() {
    let dir = Dir::new("in-use");
    let s = spec(Scheme::Lease, &dir.0, "");
    let (lock, _) = paths(&s);
    let (holder, waiter) = (open(&s), open(&s));
    assert_eq!(try_acquire(holder), lock_result::LOCK_OK);
    // SAFETY: a live handle, a callback of the right type, the handle itself
    // as its context (live until closed below).
    let set = unsafe { lock_set_cancel(waiter, Some(path_of_the_waiting_handle), waiter.cast()) };
    assert_eq!(set, lock_result::LOCK_OK);
    // SAFETY: a live handle; the fence is not wanted.
    assert_eq!(unsafe { lock_acquire(waiter, 5000, std::ptr::null_mut()) }, lock_result::LOCK_CANCELLED);
    let (rc, text) = IN_USE.lock().unwrap().take().expect("the callback ran");
    assert_eq!(rc, lock_result::LOCK_ERR_HANDLE_IN_USE);
    assert!(text.starts_with(&format!("lock_path: {lock}: ")), "{text:?}");
    assert_eq!(close(waiter), lock_result::LOCK_OK);
    assert_eq!(close(holder), lock_result::LOCK_OK);
}

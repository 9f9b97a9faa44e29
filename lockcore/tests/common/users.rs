//! Real Unix users, for locks that several accounts share.
//!
//! On a multi-user host one lock is taken by several accounts: a CGI as
//! `www-data`, a cron job as another user, root's scripts, all in a
//! directory the admin shares with a group. These tests run lock holders as
//! real users made for the purpose ([`TestUsers::get`], which needs root):
//!
//! * `lockcore-web` and `lockcore-cron`, both in the group `lockcore-share`,
//!   like a web server's user and a cron user allowed into a shared directory;
//! * `lockcore-other`, not in that group: a hostile local user.
//!
//! They are system users without a home, with `/usr/sbin/nologin` as shell:
//! nobody logs in as them. A test runs re-executed children of its binary
//! under their ids and with a umask of its choosing
//! ([`TestUsers::spawn_as`]), in directories set up as an admin would
//! ([`SharedDir`]). Without root, [`TestUsers::get`] says the test is skipped
//! and the test passes.

use std::cell::Cell;
use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::{var, Shm, PATIENCE};

/// The group an admin gives the users that share a lock directory.
pub const SHARE_GROUP: &str = "lockcore-share";

/// Held (flock) while this or any other test process creates or changes
/// the accounts: test binaries run in parallel, and two `useradd` at once
/// fail on `/etc/passwd`'s lock or race to the same name.
const ACCOUNTS_LOCK: &str = "/tmp/lockcore-test-users.lock";

/// One of the test users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestUser {
    /// In [`SHARE_GROUP`], like `www-data` running a CGI.
    Web,
    /// In [`SHARE_GROUP`], like the user of a cron job.
    Cron,
    /// Not in [`SHARE_GROUP`]: another local user, possibly hostile.
    Other,
}

impl TestUser {
    pub const ALL: [TestUser; 3] = [TestUser::Web, TestUser::Cron, TestUser::Other];

    pub fn name(self) -> &'static str {
        match self {
            TestUser::Web => "lockcore-web",
            TestUser::Cron => "lockcore-cron",
            TestUser::Other => "lockcore-other",
        }
    }

    /// Whether the admin put this user in [`SHARE_GROUP`].
    pub fn shares(self) -> bool {
        self != TestUser::Other
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A user's ids, as `login` would set them.
#[derive(Clone, Debug)]
struct Account {
    uid: libc::uid_t,
    /// The primary group (a group of the user's own name).
    gid: libc::gid_t,
    /// Every group the user is in, the primary one included: what
    /// `initgroups(3)` would hand to `setgroups(2)`.
    groups: Vec<libc::gid_t>,
}

/// The test users, made sure to exist.
#[derive(Clone, Debug)]
pub struct TestUsers {
    accounts: [Account; 3],
    share_gid: libc::gid_t,
}

impl TestUsers {
    /// The test users, created if missing. `None` (after saying so on
    /// stderr) when this process is not root: the calling test is skipped
    /// and passes. Panics, saying why, when root cannot make them or the
    /// test binary cannot be run by them.
    pub fn get() -> Option<TestUsers> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to create test users");
            return None;
        }
        // Once per process: the test threads of one binary share the result.
        static USERS: OnceLock<Result<TestUsers, String>> = OnceLock::new();
        match USERS.get_or_init(make_test_users) {
            Ok(users) => Some(users.clone()),
            Err(why) => panic!("test users: {why}"),
        }
    }

    pub fn uid(&self, user: TestUser) -> u32 {
        self.accounts[user.index()].uid
    }

    /// The user's primary group.
    pub fn gid(&self, user: TestUser) -> u32 {
        self.accounts[user.index()].gid
    }

    /// The gid of [`SHARE_GROUP`].
    pub fn share_gid(&self) -> u32 {
        self.share_gid
    }

    /// A user or group name for a listing: one of ours, root, or the number.
    fn uid_name(&self, uid: u32) -> String {
        match TestUser::ALL.into_iter().find(|&user| self.uid(user) == uid) {
            Some(user) => user.name().to_owned(),
            None if uid == 0 => "root".to_owned(),
            None => uid.to_string(),
        }
    }

    fn gid_name(&self, gid: u32) -> String {
        if gid == self.share_gid {
            return SHARE_GROUP.to_owned();
        }
        // Each user's primary group bears the user's name (useradd --user-group).
        match TestUser::ALL.into_iter().find(|&user| self.gid(user) == gid) {
            Some(user) => user.name().to_owned(),
            None if gid == 0 => "root".to_owned(),
            None => gid.to_string(),
        }
    }

    /// Re-executes this test binary as a child playing `role` with `vars`,
    /// as [`super::spawn`] does, but as `user` (its groups, then its gid,
    /// then its uid, set in that order in the child before `exec`) and with
    /// `umask`. The child's stderr is kept for [`UserChild::finish`] to
    /// quote. In the child, [`check_identity`] confirms the change.
    pub fn spawn_as(&self, user: TestUser, umask: u32, role: &str, vars: &[(&str, String)]) -> UserChild {
        let Account { uid, gid, groups } = self.accounts[user.index()].clone();
        let stderr = anonymous_file();
        let group_list: Vec<String> = groups.iter().map(|gid| gid.to_string()).collect();
        let identity = [
            ("AS_USER", user.name().to_owned()),
            ("AS_UID", uid.to_string()),
            ("AS_GID", gid.to_string()),
            ("AS_GROUPS", group_list.join(",")),
            ("AS_UMASK", umask.to_string()),
        ];
        let all_vars: Vec<(&str, String)> = vars.iter().chain(&identity).cloned().collect();
        let mut cmd = super::child_command(&[], role, &all_vars);
        cmd.stderr(stderr.try_clone().unwrap())
            // The parent's working directory may be closed to other users (a
            // home of root's is often 0700); the child needs none.
            .current_dir("/");
        let umask = umask as libc::mode_t;
        // SAFETY: the closure runs in the forked child before exec. It makes
        // only async-signal-safe system calls, on data made before the fork,
        // and allocates nothing (an io::Error from errno does not allocate).
        unsafe {
            cmd.pre_exec(move || {
                // This order: setgroups and setgid need root, which setuid
                // gives up; groups left over from root would let the child
                // into whatever root's groups may open.
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                libc::umask(umask);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {role} as {}: {e}", user.name()));
        UserChild { child, who: format!("{} (umask {umask:03o}, {role})", user.name()), stderr, finished: false }
    }
}

/// In a child made by [`TestUsers::spawn_as`]: panics unless the process
/// runs with the user's uid, gid and groups and the umask it was given, so
/// that a test can never pass with root's rights by mistake.
pub fn check_identity() {
    let uid: u32 = var("AS_UID").parse().unwrap();
    let gid: u32 = var("AS_GID").parse().unwrap();
    let umask: u32 = var("AS_UMASK").parse().unwrap();
    // SAFETY: these calls cannot fail; umask is read by setting it back.
    let (ruid, euid, rgid, egid, now_umask) = unsafe {
        let old = libc::umask(0);
        libc::umask(old);
        (libc::getuid(), libc::geteuid(), libc::getgid(), libc::getegid(), old as u32)
    };
    let who = child_user();
    assert_eq!((ruid, euid), (uid, uid), "{who}: uids");
    assert_eq!((rgid, egid), (gid, gid), "{who}: gids");
    assert_eq!(now_umask, umask, "{who}: umask");
    let mut expected: Vec<libc::gid_t> = var("AS_GROUPS").split(',').map(|gid| gid.parse().unwrap()).collect();
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: a buffer of gids, its length passed.
    let n = unsafe { libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr()) };
    assert!(n >= 0, "{who}: getgroups: {}", std::io::Error::last_os_error());
    groups.truncate(n as usize);
    groups.sort_unstable();
    expected.sort_unstable();
    assert_eq!(groups, expected, "{who}: supplementary groups");
}

/// In a child made by [`TestUsers::spawn_as`]: the user's name, for messages.
pub fn child_user() -> String {
    var("AS_USER")
}

/// A child running as a test user. Killed if the test ends before it was
/// waited for.
pub struct UserChild {
    child: Child,
    who: String,
    /// The child's stderr: an anonymous file, read once it has exited.
    stderr: File,
    finished: bool,
}

impl UserChild {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the child (killing it after [`PATIENCE`]: a hung child is a
    /// failure). `Ok` with what it wrote on stderr if it exited with status
    /// 0; otherwise `Err` naming the user, its umask and role, how it ended
    /// and what it wrote.
    pub fn finish(&mut self) -> Result<String, String> {
        let give_up = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > give_up {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        self.finished = true;
        let mut text = Vec::new();
        self.stderr.seek(SeekFrom::Start(0)).unwrap();
        self.stderr.read_to_end(&mut text).unwrap();
        let text = String::from_utf8_lossy(&text).trim().to_owned();
        match status {
            Some(status) if status.success() => Ok(text),
            Some(status) => Err(format!("{} pid {} failed ({status}):\n{text}", self.who, self.id())),
            None => Err(format!("{} pid {} hung and was killed:\n{text}", self.who, self.id())),
        }
    }
}

impl Drop for UserChild {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A file with no name, for a child's stderr: nothing to clean up, and
/// nothing any user could open by path.
fn anonymous_file() -> File {
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(c"lockcore-child-stderr".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

/// A [`Shm`] in `dir` that every test user can map. The file is root's and
/// mode 0666: it holds the tests' bookkeeping, nothing any user must not
/// touch, and it sits outside the directories whose files the tests judge.
pub fn shm_for_everyone(dir: &Path) -> Shm {
    let path = dir.join("shm");
    let shm = Shm::create(&path);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    shm
}

// ---------------------------------------------------------------------------
// Directories
// ---------------------------------------------------------------------------

/// A fresh directory in `/tmp`, set up for users to share, removed when the
/// test passes and kept (and named) when it fails, as [`super::TestDir`].
/// In `/tmp` itself, not `$TMPDIR`: a temporary directory of root's own may
/// be closed to the test users.
pub struct SharedDir {
    path: PathBuf,
    keep: Cell<bool>,
}

impl SharedDir {
    /// As an admin shares a lock directory with a group: owned by root,
    /// group [`SHARE_GROUP`], mode 2770. Its members may create and remove
    /// files in it (no sticky bit), whatever they create gets the group
    /// (setgid), and nobody else may enter.
    pub fn for_group(users: &TestUsers, label: &str) -> SharedDir {
        let dir = SharedDir::make(label);
        std::os::unix::fs::chown(&dir.path, Some(0), Some(users.share_gid())).unwrap();
        // After chown, which may clear the setgid bit.
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o2770)).unwrap();
        dir
    }

    /// [`for_group`](Self::for_group) as an admin who forgot the setgid
    /// bit makes it: mode 0770, so what a member creates gets the member's
    /// own group unless the library gives it the directory's.
    pub fn for_group_without_setgid(users: &TestUsers, label: &str) -> SharedDir {
        let dir = SharedDir::make(label);
        std::os::unix::fs::chown(&dir.path, Some(0), Some(users.share_gid())).unwrap();
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o770)).unwrap();
        dir
    }

    /// Like `/tmp`: owned by root, mode 1777. Anyone may create files in
    /// it, the hostile user too; only a file's owner may remove or rename it.
    pub fn like_tmp(label: &str) -> SharedDir {
        let dir = SharedDir::make(label);
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o1777)).unwrap();
        dir
    }

    /// Made 0700, so nobody gets in before its owner and mode are set.
    fn make(label: &str) -> SharedDir {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/tmp/lockcore-{label}-{}-{nanos}-{serial}", std::process::id()));
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        SharedDir { path, keep: Cell::new(false) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Keeps the directory after the test, for a post-mortem.
    pub fn keep(&self) {
        self.keep.set(true);
    }

    /// Everything in the directory, one line each (type and mode, owner and
    /// group by name, path, a symlink's target), for a failure message.
    pub fn listing(&self, users: &TestUsers) -> String {
        let mut out = format!("{}:\n", self.path.display());
        list_into(&mut out, &self.path, &self.path, users);
        out
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        if self.keep.get() || std::thread::panicking() {
            eprintln!("keeping {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn list_into(out: &mut String, root: &Path, dir: &Path, users: &TestUsers) {
    let mut entries: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(e) => {
            let _ = writeln!(out, "  (cannot read {}: {e})", dir.display());
            return;
        }
    };
    entries.sort();
    for path in entries {
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let kind = file_kind(&meta);
        let _ = write!(
            out,
            "  {kind} {:04o} {}:{} {}",
            meta.mode() & 0o7777,
            users.uid_name(meta.uid()),
            users.gid_name(meta.gid()),
            path.strip_prefix(root).unwrap().display()
        );
        if kind == 'l' {
            let target = fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
            let _ = write!(out, " -> {target}");
        }
        out.push('\n');
        if kind == 'd' {
            list_into(out, root, &path, users);
        }
    }
}

/// `ls -l`'s first letter.
pub fn file_kind(meta: &fs::Metadata) -> char {
    let kind = meta.file_type();
    if kind.is_dir() {
        'd'
    } else if kind.is_symlink() {
        'l'
    } else if kind.is_file() {
        '-'
    } else {
        '?'
    }
}

// ---------------------------------------------------------------------------
// Making the accounts
// ---------------------------------------------------------------------------

fn make_test_users() -> Result<TestUsers, String> {
    {
        let _serialised = lock_accounts()?;
        ensure_group(SHARE_GROUP)?;
        for user in TestUser::ALL {
            ensure_user(user)?;
        }
    }
    let share_gid = group_gid(SHARE_GROUP)?.ok_or(format!("group {SHARE_GROUP} vanished"))?;
    let mut accounts = Vec::new();
    for user in TestUser::ALL {
        let (uid, gid) = passwd_ids(user.name())?.ok_or(format!("user {} vanished", user.name()))?;
        let groups = group_list(user.name(), gid);
        if groups.contains(&share_gid) != user.shares() {
            return Err(format!("{} is in groups {groups:?}: membership of {SHARE_GROUP} is wrong", user.name()));
        }
        accounts.push(Account { uid, gid, groups });
    }
    check_runnable_by_others()?;
    let accounts: [Account; 3] = accounts.try_into().unwrap();
    Ok(TestUsers { accounts, share_gid })
}

/// Takes [`ACCOUNTS_LOCK`]; released when the file is dropped.
fn lock_accounts() -> Result<File, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(ACCOUNTS_LOCK)
        .map_err(|e| format!("open {ACCOUNTS_LOCK}: {e}"))?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("flock {ACCOUNTS_LOCK}: {err}"));
        }
    }
}

/// Creates the group unless it exists. A failure is tolerated when the
/// group exists afterwards: a process that does not take our lock (another
/// checkout's tests) may have made it meanwhile.
fn ensure_group(name: &str) -> Result<(), String> {
    if group_gid(name)?.is_some() {
        return Ok(());
    }
    match run_admin("groupadd", &["--system", name]) {
        Err(why) if group_gid(name)?.is_none() => Err(why),
        _ => Ok(()),
    }
}

/// Creates the user unless it exists (tolerating "already exists" as
/// [`ensure_group`] does), then makes its membership of [`SHARE_GROUP`]
/// what [`TestUser::shares`] says.
fn ensure_user(user: TestUser) -> Result<(), String> {
    let name = user.name();
    if passwd_ids(name)?.is_none() {
        let mut args = vec!["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"];
        args.extend(["--shell", "/usr/sbin/nologin"]);
        if user.shares() {
            args.extend(["--groups", SHARE_GROUP]);
        }
        args.push(name);
        if let Err(why) = run_admin("useradd", &args) {
            if passwd_ids(name)?.is_none() {
                return Err(why);
            }
        }
    }
    let (_, gid) = passwd_ids(name)?.ok_or(format!("user {name} vanished"))?;
    let share_gid = group_gid(SHARE_GROUP)?.ok_or(format!("group {SHARE_GROUP} vanished"))?;
    let member = group_list(name, gid).contains(&share_gid);
    match (user.shares(), member) {
        (true, false) => run_admin("usermod", &["--append", "--groups", SHARE_GROUP, name]),
        (false, true) => run_admin("gpasswd", &["--delete", name, SHARE_GROUP]),
        _ => Ok(()),
    }
}

fn run_admin(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}: {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// uid and primary gid of a user; `Ok(None)` if there is no such user.
fn passwd_ids(name: &str) -> Result<Option<(u32, u32)>, String> {
    let c_name = CString::new(name).unwrap();
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: passwd is plain data; zeroed is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name, a passwd to fill, a buffer with its
    // length, and an out-pointer; the reentrant call, as test threads run
    // in parallel.
    let r = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    match r {
        0 if found.is_null() => Ok(None),
        0 => Ok(Some((entry.pw_uid, entry.pw_gid))),
        errno => Err(format!("getpwnam_r {name}: {}", std::io::Error::from_raw_os_error(errno))),
    }
}

/// A group's gid; `Ok(None)` if there is no such group.
fn group_gid(name: &str) -> Result<Option<u32>, String> {
    let c_name = CString::new(name).unwrap();
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: group is plain data; zeroed is a valid value.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `passwd_ids`.
    let r = unsafe { libc::getgrnam_r(c_name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    match r {
        0 if found.is_null() => Ok(None),
        0 => Ok(Some(entry.gr_gid)),
        errno => Err(format!("getgrnam_r {name}: {}", std::io::Error::from_raw_os_error(errno))),
    }
}

/// Every group of a user, `primary` included, as `initgroups(3)` sets them.
fn group_list(name: &str, primary: u32) -> Vec<libc::gid_t> {
    let c_name = CString::new(name).unwrap();
    let mut room: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; room as usize];
        let mut n = room;
        // SAFETY: a NUL-terminated name, a buffer of `n` gids and `n`
        // itself, which the call sets to the number found (or needed).
        let r = unsafe { libc::getgrouplist(c_name.as_ptr(), primary, groups.as_mut_ptr(), &mut n) };
        if r >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        room = n.max(room * 2);
    }
}

/// The children run this binary as users that are neither its owner nor in
/// its group, so "other" must be allowed to execute it and to search every
/// directory above it.
fn check_runnable_by_others() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mode = |path: &Path| fs::metadata(path).map(|m| m.mode()).map_err(|e| format!("stat {}: {e}", path.display()));
    if mode(&exe)? & 0o001 == 0 {
        return Err(format!(
            "the test binary {} has mode {:o}: the test users cannot execute it",
            exe.display(),
            mode(&exe)? & 0o7777
        ));
    }
    for dir in exe.ancestors().skip(1).filter(|dir| !dir.as_os_str().is_empty()) {
        let bits = mode(dir)?;
        if bits & 0o001 == 0 {
            return Err(format!(
                "{} has mode {:o}: the test users cannot reach the test binary {} below it \
                 (give the directory o+x, or build elsewhere with CARGO_TARGET_DIR)",
                dir.display(),
                bits & 0o7777,
                exe.display()
            ));
        }
    }
    Ok(())
}

/// A test path as text for a spec; panics on what a spec would need
/// percent-encoded.
pub fn path_text(path: &Path) -> &str {
    let text = path.to_str().expect("test paths are UTF-8");
    assert!(!text.contains(['?', '%', '&']), "test path {text} would need percent-encoding");
    text
}

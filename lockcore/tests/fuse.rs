//! Locks on a file system served from user space: FUSE, here `bindfs` (a
//! FUSE file system that shows one directory at another path) over a
//! directory of the test's own.
//!
//! No futex word in a file of such a file system is known to reach every
//! process that uses the file, no inotify event is known to report another
//! client's change, and its server may not do what this host's kernel
//! would with a descriptor's flags. So:
//! * every file strategy that can work there keeps 8 processes x 40
//!   read-increment-write cycles of a counter exact, with nobody inside
//!   twice and fences that only grow, and its waiters poll: no turnstile
//!   is made beside the lock;
//! * `shm` (a mapping that each host would keep to itself) and `toplock`
//!   (whose rewrite in place turns `O_APPEND` off, which FUSE never passes
//!   on to its server, so the rewrite is appended and the cut that follows
//!   tears the queue) answer `Unsupported` at their first acquisition, and
//!   leave no file behind.
//!
//! Needs root, a kernel with FUSE (`/dev/fuse`) and `bindfs` (Debian package
//! `bindfs`); says it is skipped without them, except that under CI, which
//! installs it, a missing `bindfs` is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::counting::{count_as_child, count_in_processes, COUNTING_ROLE};
use common::*;
use lockcore::{ErrorKind, Scheme};

const PROCESSES: usize = 8;
const CYCLES: usize = 40;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, COUNTING_ROLE);
    count_as_child();
}

/// Whether `scheme` is documented to refuse a file system that is not of
/// one host (docs/SPECS.md, README "Which strategy").
fn needs_one_host(scheme: Scheme) -> bool {
    matches!(scheme.name(), "shm" | "toplock")
}

#[test]
fn every_file_strategy_works_or_is_refused_on_fuse() {
    if !fuse_available() {
        return;
    }
    each_file_scheme("fuse", |scheme, dir| {
        let mount = Mount::over(dir).unwrap_or_else(|why| panic!("bindfs: {why}"));
        let spec = scheme.spec(mount.path(), "");
        if needs_one_host(scheme) {
            let mut lock = open_lock(&spec);
            let refused = lock.try_acquire().expect_err("a lock that needs one host, taken on FUSE");
            assert_eq!(refused.kind(), ErrorKind::Unsupported, "{spec}: {refused}");
            let told = lock.describe(&refused).to_string();
            assert!(told.contains("served from user space"), "{spec}: the cause is not named: {told}");
            assert!(told.contains(mount.path().to_str().unwrap()), "{spec}: the path is not named: {told}");
            drop(lock);
            assert_eq!(entries(&mount.source), Vec::<String>::new(), "{spec}: files left behind");
            return;
        }
        count_in_processes(&spec, dir.path(), &mount.path().join("counter.txt"), PROCESSES, CYCLES);
        let lock_path = path_of(&open_lock(&spec));
        let turnstile = with_suffix(&lock_path, ".turnstile");
        assert!(!turnstile.exists(), "{spec}: a turnstile on FUSE, whose futex words reach nobody else");
    });
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Whether a FUSE file system can be mounted here; says why not.
fn fuse_available() -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to mount a FUSE file system");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: this kernel offers no FUSE (/dev/fuse)");
        return false;
    }
    let bindfs_installed = Command::new("bindfs").arg("--version").output().is_ok_and(|o| o.status.success());
    if !bindfs_installed {
        assert!(std::env::var_os("CI").is_none(), "CI must install bindfs");
        eprintln!("skipped: bindfs (package bindfs) is not installed");
        return false;
    }
    true
}

/// A `bindfs` mount of a directory `source` at `target`, both inside a
/// test's directory; unmounted on drop.
struct Mount {
    source: PathBuf,
    target: PathBuf,
}

impl Mount {
    /// Mounts `<dir>/source` at `<dir>/fuse`.
    fn over(dir: &TestDir) -> Result<Mount, String> {
        let source = dir.join("source");
        let target = dir.join("fuse");
        for d in [&source, &target] {
            std::fs::create_dir(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
        }
        let out = Command::new("bindfs").arg(&source).arg(&target).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let mount = Mount { source, target };
        let kind = statfs_type(&mount.target);
        assert_eq!(kind, FUSE_SUPER_MAGIC, "{} is not a FUSE mount", mount.target.display());
        Ok(mount)
    }

    fn path(&self) -> &Path {
        &self.target
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A process still inside it (a child that failed) keeps it busy:
        // detached then, gone once the last one leaves.
        let unmounted = Command::new("umount").arg(&self.target).status().is_ok_and(|s| s.success())
            || Command::new("umount").arg("-l").arg(&self.target).status().is_ok_and(|s| s.success());
        if !unmounted {
            eprintln!("could not unmount {}", self.target.display());
        }
    }
}

/// `statfs(2)`'s magic number for FUSE.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn statfs_type(path: &Path) -> i64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed statfs buffer for the call to fill.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the return value is checked.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut buf) }, 0, "statfs {}", path.display());
    buf.f_type as i64
}

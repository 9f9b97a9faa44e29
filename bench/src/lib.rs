//! Shared pieces of the benchmarks: where to put lock files, and the raw
//! system-call loops each strategy is measured against (its floor: the calls
//! the scheme cannot avoid).

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// A fresh directory for one benchmark run, removed on drop.
pub struct BenchDir(PathBuf);

impl BenchDir {
    pub fn new(parent: &Path, label: &str) -> BenchDir {
        let dir = parent.join(format!("lockbench-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create benchmark directory");
        BenchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn spec(&self, scheme: &str, name: &str) -> String {
        format!("{scheme}:{}/{name}", self.0.display())
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file systems to measure on: the default temp directory, and tmpfs
/// (/dev/shm) when the machine has it.
pub fn bench_roots() -> Vec<(&'static str, PathBuf)> {
    let mut roots = vec![("tmp", std::env::temp_dir())];
    if Path::new("/dev/shm").is_dir() {
        roots.push(("shm", PathBuf::from("/dev/shm")));
    }
    roots
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in bench paths")
}

/// Raw floors: exactly the system calls each scheme cannot avoid.
pub mod floor {
    use super::*;

    /// mkdir + rmdir.
    pub fn mkdir_rmdir(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        move || {
            // SAFETY: NUL-terminated path; return values checked.
            unsafe {
                assert_eq!(libc::mkdir(p.as_ptr(), 0o755), 0);
                assert_eq!(libc::rmdir(p.as_ptr()), 0);
            }
        }
    }

    /// open(O_CREAT|O_EXCL) + write(pid) + close + unlink.
    pub fn excl_create_write_unlink(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        let stamp = format!("{}\n", std::process::id());
        move || {
            // SAFETY: NUL-terminated path, valid buffer; return values checked.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o444);
                assert!(fd >= 0);
                assert_eq!(libc::write(fd, stamp.as_ptr().cast(), stamp.len()), stamp.len() as isize);
                libc::close(fd);
                assert_eq!(libc::unlink(p.as_ptr()), 0);
            }
        }
    }

    /// flock(LOCK_EX) + flock(LOCK_UN) on a descriptor kept open.
    pub fn flock_on_open_fd(path: &Path) -> impl FnMut() {
        let p = c_path(path);
        // SAFETY: NUL-terminated path; the descriptor is leaked for the
        // benchmark's lifetime on purpose (closed at process exit).
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o644) };
        assert!(fd >= 0);
        move || {
            // SAFETY: fd is open for the closure's lifetime.
            unsafe {
                assert_eq!(libc::flock(fd, libc::LOCK_EX), 0);
                assert_eq!(libc::flock(fd, libc::LOCK_UN), 0);
            }
        }
    }
}

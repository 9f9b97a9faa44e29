//! The peers a strategy is compared with: tools people already use.
//!
//! * liblockfile (`lockfile_create` / `lockfile_remove`, Debian's
//!   liblockfile-dev), through a C shim built by `build.rs` when the library
//!   is installed; [`LIBLOCKFILE`] says whether it was.
//! * A process-shared, robust pthread mutex in a shared mapping of a file in
//!   the bench directory: what a one-host lock costs without any file-system
//!   call per acquisition.
//! * `std::sync::Mutex`: the in-process floor.

use std::path::Path;

/// Whether this build has the liblockfile peer.
pub const LIBLOCKFILE: bool = cfg!(has_liblockfile);

/// Why the liblockfile peer is missing, for the bench's output.
pub const LIBLOCKFILE_MISSING: &str =
    "liblockfile not installed: peer skipped (Debian: apt-get install liblockfile-dev, then cargo clean -p bench)";

#[cfg(has_liblockfile)]
mod ffi {
    extern "C" {
        pub fn bench_liblockfile_create(path: *const libc::c_char) -> libc::c_int;
        pub fn bench_liblockfile_remove(path: *const libc::c_char) -> libc::c_int;
    }
}

/// One `lockfile_create(path, 0, L_PID)` (one attempt, no sleep) and one
/// `lockfile_remove(path)`, or `None` without liblockfile.
pub fn liblockfile_cycle(path: &Path) -> Option<Box<dyn FnMut()>> {
    #[cfg(has_liblockfile)]
    {
        let p = crate::c_path(path);
        Some(Box::new(move || {
            // SAFETY: NUL-terminated path; the shim only calls liblockfile.
            unsafe {
                let rc = ffi::bench_liblockfile_create(p.as_ptr());
                assert_eq!(rc, 0, "lockfile_create: L_* code {rc}");
                assert_eq!(ffi::bench_liblockfile_remove(p.as_ptr()), 0);
            }
        }))
    }
    #[cfg(not(has_liblockfile))]
    {
        let _ = path;
        None
    }
}

/// A `pthread_mutex_t` set `PTHREAD_PROCESS_SHARED` and
/// `PTHREAD_MUTEX_ROBUST`, in a `MAP_SHARED` mapping of a file: every thread
/// and every child forked after `new` sees the same mutex.
pub struct RobustMutex {
    mutex: *mut libc::pthread_mutex_t,
}

// SAFETY: a process-shared pthread mutex is made to be used from any thread.
unsafe impl Send for RobustMutex {}
// SAFETY: as above; every operation goes through pthread calls.
unsafe impl Sync for RobustMutex {}

impl RobustMutex {
    /// Maps `path` (created, sized to one mutex) and initialises the mutex in it.
    pub fn new(path: &Path) -> RobustMutex {
        let len = std::mem::size_of::<libc::pthread_mutex_t>();
        let p = crate::c_path(path);
        // SAFETY: plain calls with checked results; the mapping is never
        // unmapped (it lives until the process exits), so the pointer stays valid.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o600);
            assert!(fd >= 0, "open {}: {}", path.display(), std::io::Error::last_os_error());
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let map =
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            assert!(map != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
            libc::close(fd);
            let mutex: *mut libc::pthread_mutex_t = map.cast();
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_mutexattr_init(&mut attr), 0);
            assert_eq!(libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED), 0);
            assert_eq!(libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST), 0);
            assert_eq!(libc::pthread_mutex_init(mutex, &attr), 0);
            libc::pthread_mutexattr_destroy(&mut attr);
            RobustMutex { mutex }
        }
    }

    /// Locks; a holder that died is recovered (`EOWNERDEAD` →
    /// `pthread_mutex_consistent`), as a robust mutex's user must.
    pub fn lock(&self) {
        // SAFETY: the mutex was initialised in `new` and stays mapped.
        unsafe {
            match libc::pthread_mutex_lock(self.mutex) {
                0 => {}
                libc::EOWNERDEAD => assert_eq!(libc::pthread_mutex_consistent(self.mutex), 0),
                e => panic!("pthread_mutex_lock: {e}"),
            }
        }
    }

    pub fn unlock(&self) {
        // SAFETY: called by the thread that holds the mutex.
        unsafe { assert_eq!(libc::pthread_mutex_unlock(self.mutex), 0) };
    }
}

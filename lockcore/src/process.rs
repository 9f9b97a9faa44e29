//! What this process knows of itself that no child of `fork()` may inherit:
//! its pid, a number it drew to tell itself from its children, and random
//! bytes drawn from the kernel but not yet used.
//!
//! Both are asked for several times per acquisition (a handle checks that it
//! has not been forked before each call; every acquisition draws a nonce, and
//! the file strategies unguessable helper names), and each answer from the
//! kernel is a system call. So both are kept in one page of memory that the
//! kernel fills with zeros in the child of every fork (`MADV_WIPEONFORK`,
//! Linux 4.14): a child finds no pid and no random bytes there, and asks
//! the kernel again, whichever way it was forked (`fork(3)`, `clone(2)`
//! without `CLONE_VM`), with no `pthread_atfork` handler to be skipped. A
//! child that shares the parent's memory (`vfork`, `clone` with `CLONE_VM`)
//! shares the page too; such a child may only call `exec` or `_exit`, and
//! never reaches this library.
//!
//! Where the kernel cannot wipe the page (an older kernel, or no memory for
//! it), nothing is kept and every question goes to the kernel.

use core::ptr;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64};

use crate::sys::{self, SysResult};

/// How many random bytes one `getrandom(2)` puts by: 32 nonces' worth.
const POOL_LEN: usize = 512;

/// The page. Zero bytes are its empty state, which is what a child of
/// `fork()` finds: no pid known, the pool unlocked and empty.
#[repr(C, align(64))]
struct Page {
    /// This process's pid; 0 when not known.
    pid: AtomicI32,
    /// The number this process drew for itself; 0 when not drawn yet.
    incarnation: AtomicU64,
    /// Held by the thread that takes bytes from the pool.
    pool_taken: AtomicBool,
    /// How many bytes at the end of `pool` are still unused.
    pool_left: AtomicU32,
    pool: [u8; POOL_LEN],
}

const PAGE_LEN: usize = 4096;
const _: () = assert!(core::mem::size_of::<Page>() <= PAGE_LEN);

/// The page once made; [`NO_PAGE`] where none can be.
static PAGE: AtomicPtr<Page> = AtomicPtr::new(ptr::null_mut());

/// Marks the page as not to be had: never a mapping's address, which is
/// page-aligned.
const NO_PAGE: *mut Page = 1 as *mut Page;

/// The page, made at the first call; `None` where the kernel cannot wipe it.
fn page() -> Option<&'static Page> {
    let mut page = PAGE.load(Acquire);
    if page.is_null() {
        page = make_page();
    }
    if page == NO_PAGE {
        return None;
    }
    // SAFETY: a mapping made by `make_page`, never unmapped, whose fields
    // are reached only through atomics or under `pool_taken`.
    Some(unsafe { &*page })
}

/// Maps and marks a page, or records that none can be had. Two threads
/// that race here each map one; the loser unmaps its own.
#[cold]
fn make_page() -> *mut Page {
    let made = sys::wiped_on_fork_page(PAGE_LEN).map_or(NO_PAGE, |base| base.cast::<Page>());
    match PAGE.compare_exchange(ptr::null_mut(), made, Release, Acquire) {
        Ok(_) => made,
        Err(winner) => {
            if made != NO_PAGE {
                // SAFETY: our own mapping, which nobody else has seen.
                unsafe { sys::unmap_page(made.cast(), PAGE_LEN) };
            }
            winner
        }
    }
}

/// The calling process's pid: `getpid(2)` once per process (and once more
/// in each child of a fork).
pub fn pid() -> i32 {
    let Some(page) = page() else { return sys::getpid() };
    match page.pid.load(Relaxed) {
        0 => {
            let pid = sys::getpid();
            page.pid.store(pid, Relaxed);
            pid
        }
        pid => pid,
    }
}

/// A number this process drew for itself, which no child of `fork()` has
/// (each draws its own): what tells a child from its parent even where both
/// have one pid (pid 1 of a namespace, forking into a new one). Never 0.
/// Where no page can be kept, the pid and its namespace stand in, asked of
/// the kernel at each call: a parent and a child that share a pid are in
/// two namespaces. `None` where neither can be had (no page, no `/proc`).
pub fn incarnation() -> Option<u64> {
    let Some(page) = page() else {
        let namespace = crate::clock::namespace_inode(b"/proc/self/ns/pid")?;
        return Some(((namespace << 32) ^ u64::from(sys::getpid() as u32)) | 1);
    };
    match page.incarnation.load(Relaxed) {
        0 => {
            let mut bytes = [0u8; 8];
            let drawn = match random(&mut bytes) {
                Ok(()) => u64::from_ne_bytes(bytes),
                // Without random bytes, the pid and the time tell them
                // apart well enough.
                Err(_) => {
                    let since_boot = crate::clock::MonoTime::now().since(crate::clock::MonoTime::EPOCH);
                    (u64::from(pid() as u32) << 32) ^ since_boot.as_nanos() as u64
                }
            } | 1;
            match page.incarnation.compare_exchange(0, drawn, Relaxed, Relaxed) {
                Ok(_) => Some(drawn),
                Err(first) => Some(first),
            }
        }
        drawn => Some(drawn),
    }
}

/// Fills `out` (at most a pool's worth) with bytes from the kernel's random
/// source, one `getrandom(2)` for many calls. A thread that finds another
/// taking bytes from the pool asks the kernel itself rather than wait.
pub fn random(out: &mut [u8]) -> SysResult<()> {
    let Some(page) = page() else { return sys::getrandom(out) };
    if out.len() > POOL_LEN || page.pool_taken.swap(true, Acquire) {
        return sys::getrandom(out);
    }
    let pool = ptr::addr_of!(page.pool).cast::<u8>().cast_mut();
    let mut left = page.pool_left.load(Relaxed) as usize;
    if left < out.len() {
        // SAFETY: the pool is ours while `pool_taken` is held: no other
        // thread of this process reads or writes it, and no other process
        // maps the page.
        let fresh = unsafe { core::slice::from_raw_parts_mut(pool, POOL_LEN) };
        if let Err(e) = sys::getrandom(fresh) {
            page.pool_taken.store(false, Release);
            return Err(e);
        }
        left = POOL_LEN;
    }
    let at = POOL_LEN - left;
    // SAFETY: as above; `at + out.len() <= POOL_LEN` since `left >= out.len()`.
    // The bytes handed out are wiped from the pool: each is used once.
    unsafe {
        ptr::copy_nonoverlapping(pool.add(at), out.as_mut_ptr(), out.len());
        ptr::write_bytes(pool.add(at), 0, out.len());
    }
    page.pool_left.store((left - out.len()) as u32, Relaxed);
    page.pool_taken.store(false, Release);
    Ok(())
}

/// The pid of a child that has exited and been reaped: a pid no process
/// has, for tests of dead holders and waiters.
#[cfg(test)]
pub(crate) fn dead_pid() -> i32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    child.wait().unwrap();
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In the child of a fork the pid and the incarnation are the child's,
    /// and the pool holds none of the parent's bytes: two processes never
    /// draw the same nonce.
    #[test]
    fn a_child_of_fork_has_its_own_pid_incarnation_and_random_bytes() {
        let parent = pid();
        assert_eq!(parent, sys::getpid());
        let parents_incarnation = incarnation().unwrap();
        assert_eq!(incarnation(), Some(parents_incarnation), "drawn once");
        let mut warm = [0u8; 16];
        random(&mut warm).unwrap();
        let mut fds = [0; 2];
        // SAFETY: a pipe into a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only calls this module, writes to the pipe and
        // exits; it allocates nothing.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let mut report = [0u8; 28];
            report[..4].copy_from_slice(&pid().to_ne_bytes());
            report[4..12].copy_from_slice(&incarnation().unwrap_or(0).to_ne_bytes());
            let _ = random(&mut report[12..]);
            // SAFETY: a valid buffer into the pipe's write end.
            unsafe {
                libc::write(fds[1], report.as_ptr().cast(), report.len());
                libc::_exit(0);
            }
        }
        let mut report = [0u8; 28];
        // SAFETY: a valid buffer from the pipe's read end.
        let n = unsafe { libc::read(fds[0], report.as_mut_ptr().cast(), report.len()) };
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(n, 28);
        assert_eq!(i32::from_ne_bytes(report[..4].try_into().unwrap()), child, "the child's own pid");
        let childs_incarnation = u64::from_ne_bytes(report[4..12].try_into().unwrap());
        assert_ne!(childs_incarnation, parents_incarnation, "the child's own incarnation");
        assert_ne!(childs_incarnation, 0);
        let mut next = [0u8; 16];
        random(&mut next).unwrap();
        assert_ne!(&report[12..], &next[..], "the child drew bytes the parent draws next");
        assert_eq!((pid(), incarnation()), (parent, Some(parents_incarnation)));
        // SAFETY: our own descriptors.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn draws_never_repeat_across_refills() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 * POOL_LEN / 16 {
            let mut n = [0u8; 16];
            random(&mut n).unwrap();
            assert!(seen.insert(n), "a nonce drawn twice");
        }
    }
}

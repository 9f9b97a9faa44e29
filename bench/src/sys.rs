//! The few system facilities the harness needs beyond std: memory shared
//! with forked children, a futex to release workers together, clocks, fork.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Types that are valid when every byte is zero (atomics, integers, arrays
/// of them), so that they can live in a fresh anonymous mapping.
///
/// # Safety
/// The all-zero bit pattern must be a valid value of the type.
pub unsafe trait Zeroable: Sync {}

// SAFETY: zero is a valid atomic integer.
unsafe impl Zeroable for AtomicU32 {}
// SAFETY: zero is a valid atomic integer.
unsafe impl Zeroable for AtomicU64 {}
// SAFETY: an array of zero-valid elements is zero-valid.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}

/// A `T` in a `MAP_SHARED | MAP_ANONYMOUS` mapping: shared by the threads of
/// this process and by the children it forks afterwards.
pub struct SharedMap<T: Zeroable> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the mapping is only ever accessed through `&T`, and `T: Sync`.
unsafe impl<T: Zeroable> Send for SharedMap<T> {}
// SAFETY: as above.
unsafe impl<T: Zeroable> Sync for SharedMap<T> {}

impl<T: Zeroable> SharedMap<T> {
    pub fn new() -> SharedMap<T> {
        let len = std::mem::size_of::<T>().max(1);
        // SAFETY: an anonymous shared mapping with no address hint; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap of {len} shared bytes failed: {}", std::io::Error::last_os_error());
        assert_eq!(ptr as usize % std::mem::align_of::<T>(), 0, "mmap returns page-aligned memory");
        SharedMap { ptr: ptr.cast(), len }
    }
}

impl<T: Zeroable> Default for SharedMap<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Zeroable> std::ops::Deref for SharedMap<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mapping is live, aligned, large enough, and zero-filled
        // by the kernel, which `T: Zeroable` says is a valid `T`.
        unsafe { &*self.ptr }
    }
}

impl<T: Zeroable> Drop for SharedMap<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Blocks while `word` holds `expected`, at most `timeout` (spurious wake-ups
/// are possible: callers re-check). The futex is not private, so it works
/// across `fork()` on a shared mapping.
#[cfg(target_os = "linux")]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as _ });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32; the timespec (if any) outlives the call.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr, std::ptr::null::<u32>(), 0);
    }
}

/// Wakes every waiter blocked on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    futex_wake(word, i32::MAX);
}

/// Wakes at most `count` waiters blocked on `word`.
#[cfg(target_os = "linux")]
pub fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: `word` is a live, aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count, std::ptr::null::<u8>(), 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let limit = timeout.unwrap_or(Duration::MAX).min(Duration::from_micros(50));
    if word.load(Ordering::Acquire) == expected {
        std::thread::sleep(limit);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn futex_wake(_word: &AtomicU32, _count: i32) {}

/// Waits until `word` differs from `value` (no timeout).
pub fn wait_while_equal(word: &AtomicU32, value: u32) {
    while word.load(Ordering::Acquire) == value {
        futex_wait(word, value, None);
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes of one boot.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_COARSE in nanoseconds: the monotonic time of the last
/// tick.
pub fn coarse_mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// CPU time of the calling thread (user + system), in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The calling thread's time on a CPU as perf's `task-clock` counts it: a
/// software event of the kernel's perf subsystem, read from a descriptor of
/// its own. The scheduler's clock (`CLOCK_THREAD_CPUTIME_ID`, getrusage)
/// can charge a thread for time around its wake-ups that this one does not
/// (on some virtual machines, 15 µs for every short sleep), so the report
/// gives both.
#[cfg(target_os = "linux")]
pub struct TaskClock(std::os::fd::OwnedFd);

#[cfg(target_os = "linux")]
impl TaskClock {
    /// The task clock of the calling thread, from now; `None` where perf
    /// events are not allowed (a sandbox, `perf_event_paranoid` at 3) or
    /// not built into the kernel.
    pub fn of_this_thread() -> Option<TaskClock> {
        use std::os::fd::FromRawFd;
        // `struct perf_event_attr` as first published (PERF_ATTR_SIZE_VER0,
        // 64 bytes), which every kernel with perf events accepts.
        #[repr(C)]
        struct Attr {
            kind: u32,
            size: u32,
            config: u64,
            sample_period: u64,
            sample_type: u64,
            read_format: u64,
            flags: u64,
            wakeup_events: u32,
            bp_type: u32,
            bp_addr: u64,
        }
        const PERF_TYPE_SOFTWARE: u32 = 1;
        const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
        // exclude_kernel and exclude_hv: what an unprivileged user may ask
        // for at the default paranoia (2). They only filter samples; the
        // clock still counts the thread's time in the kernel.
        const EXCLUDE_KERNEL_AND_HV: u64 = (1 << 5) | (1 << 6);
        const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
        let attr = Attr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<Attr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: 0,
            sample_type: 0,
            read_format: 0,
            flags: EXCLUDE_KERNEL_AND_HV,
            wakeup_events: 0,
            bp_type: 0,
            bp_addr: 0,
        };
        const _: () = assert!(std::mem::size_of::<Attr>() == 64);
        // SAFETY: a valid attr that outlives the call; pid 0 and cpu -1 (this
        // thread, on any CPU), no group, closed on exec.
        let fd =
            unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const Attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) };
        // SAFETY: a descriptor the call just opened, owned by nobody else.
        (fd >= 0).then(|| TaskClock(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Nanoseconds counted since the clock was opened; `None` if it cannot
    /// be read.
    pub fn ns(&self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        let mut count = 0u64;
        // SAFETY: an open descriptor and an 8-byte buffer, the size of the
        // event's value with no read_format bits set.
        let read = unsafe { libc::read(self.0.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        (read == 8).then_some(count)
    }
}

/// Elsewhere there is no perf task clock: the report leaves its column
/// empty.
#[cfg(not(target_os = "linux"))]
pub struct TaskClock(());

#[cfg(not(target_os = "linux"))]
impl TaskClock {
    pub fn of_this_thread() -> Option<TaskClock> {
        None
    }

    pub fn ns(&self) -> Option<u64> {
        None
    }
}

/// User + system CPU of every waited-for child, in nanoseconds.
pub fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Forks a child that runs `child` and exits: with 0 if it returned, 101 if
/// it panicked. The child dies with its parent (Linux), never returns into
/// the caller's code, and runs no destructor or atexit handler of the parent.
pub fn fork_child(child: impl FnOnce()) -> libc::pid_t {
    // SAFETY: fork has no memory-safety preconditions; in the child only
    // `child` runs and the process ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        #[cfg(target_os = "linux")]
        // SAFETY: plain prctl with integer arguments.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)) {
            Ok(()) => 0,
            Err(_) => 101,
        };
        // SAFETY: ends the child at once, without running the parent's
        // destructors or atexit handlers on shared state.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// How a child ended: `Some(0)` for a clean exit, the exit code or 128 + the
/// signal otherwise; `None` if it is still running (with `block == false`).
pub fn reap(pid: libc::pid_t, block: bool) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: valid out pointer; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
        if r == 0 {
            return None;
        }
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Some(-1);
        }
        return Some(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) });
    }
}

/// Increments `word` and wakes its waiters (a counter someone waits on).
pub fn bump_and_wake(word: &AtomicU32) -> u32 {
    let n = word.fetch_add(1, Ordering::AcqRel) + 1;
    futex_wake_all(word);
    n
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The task clock counts the thread's own work and not its sleep. Where
    /// perf events are not allowed there is nothing to check.
    #[test]
    fn the_task_clock_counts_work_and_not_sleep() {
        let Some(clock) = TaskClock::of_this_thread() else {
            eprintln!("perf events are not allowed here: nothing to check");
            return;
        };
        let read = || clock.ns().expect("an open task clock reads");
        let start = read();
        let cpu_start = thread_cpu_ns();
        while thread_cpu_ns() - cpu_start < 20_000_000 {
            std::hint::spin_loop();
        }
        let worked = read() - start;
        assert!(worked >= 10_000_000, "20 ms of work counted as {worked} ns");

        let before_sleep = read();
        std::thread::sleep(Duration::from_millis(200));
        let slept = read() - before_sleep;
        assert!(slept < 100_000_000, "a 200 ms sleep counted as {slept} ns");
    }
}

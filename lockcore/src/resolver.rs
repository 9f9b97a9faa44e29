//! Host names looked up by a deadline.
//!
//! `getaddrinfo(3)` blocks for as long as the resolver takes: with a name
//! server that does not answer, `timeout` times `attempts` of resolv.conf
//! (10 s and more), past any deadline of the caller's. So the lookup runs
//! on a thread of its own, made for it and detached, and the caller waits
//! for its answer on a futex until the deadline. The thread writes the
//! answer whenever the lookup ends, also after the caller has given up,
//! so a lookup never lives on a caller's stack: it takes one of a few
//! slots here, which a lookup left running keeps until it ends.
//!
//! A child of `fork()` has none of its parent's threads: a slot its parent
//! held is the child's to take again (each slot names the process that
//! took it). glibc's own `getaddrinfo_a` keeps its requests and idle
//! threads across a fork and its lock with them, and a child forked while
//! another thread held that lock blocks for good: that is why it is not
//! used. A lookup that hangs in such a child (a lock of the C library's
//! held at the fork) hangs its own thread, never the caller.
//!
//! The C library allocates inside itself, as `getaddrinfo` and
//! `pthread_create` always have; nothing here does.

use core::cell::UnsafeCell;
use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use core::time::Duration;

use crate::clock::MonoTime;
use crate::sys::{self, SocketAddress};

/// Why a name gave no address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotResolved {
    /// The resolver answered that the name has no address (of a family
    /// this host can reach).
    NoSuchHost,
    /// It did not answer by the deadline, or answered that it cannot now,
    /// or no thread could be made for the lookup, or too many earlier
    /// lookups it has not answered are still out.
    NotNow,
}

/// Lookups that may be out at once, counting those their callers gave up
/// on while the resolver still works at them.
const SLOTS: usize = 8;

/// The longest name a slot keeps, with its NUL: a DNS name is at most 253
/// bytes.
const NAME_CAPACITY: usize = 256;

/// A slot's stage, in the low half of its claim (the high half is the mark
/// of the process that took it, [`process_mark`]; a claim of 0 is a free
/// slot).
const ASKED: u64 = 1;
const ANSWERED: u64 = 2;
/// Its caller gave up: the lookup's thread frees it when it ends.
const LEFT: u64 = 3;

struct Slot {
    /// Who holds the slot and at what stage, in one word, so that taking
    /// it names its holder at once.
    claim: AtomicU64,
    /// Moved on when the answer is in: the futex its caller sleeps on.
    answered: AtomicU32,
    /// Written by the slot's caller until the thread is made, then by the
    /// thread until the claim says ANSWERED, then read by the caller.
    lookup: UnsafeCell<Lookup>,
}

struct Lookup {
    name: [u8; NAME_CAPACITY],
    port: u16,
    answer: Result<SocketAddress, NotResolved>,
}

// SAFETY: a slot's lookup is reached only by whoever the claim says has
// it at that stage (see `Lookup`), one at a time.
unsafe impl Sync for Slot {}

#[allow(clippy::declare_interior_mutable_const)]
const UNUSED: Slot = Slot {
    claim: AtomicU64::new(0),
    answered: AtomicU32::new(0),
    lookup: UnsafeCell::new(Lookup { name: [0; NAME_CAPACITY], port: 0, answer: Err(NotResolved::NotNow) }),
};

static LOOKUPS: [Slot; SLOTS] = [UNUSED; SLOTS];

fn claim_of(mark: u32, stage: u64) -> u64 {
    (u64::from(mark) << 32) | stage
}

fn mark_of(claim: u64) -> u32 {
    (claim >> 32) as u32
}

/// What tells this process's claims from those its parent left in the
/// slots before `fork()`: its incarnation, folded (the pid alone is the
/// parent's too where pid 1 forks into a new pid namespace).
fn process_mark() -> u32 {
    match crate::process::incarnation() {
        Some(incarnation) => (incarnation ^ (incarnation >> 32)) as u32 | 1,
        None => crate::process::pid() as u32,
    }
}

fn stage_of(claim: u64) -> u64 {
    claim & 0xffff_ffff
}

/// The first address the resolver gives for the host `name` (a name or a
/// numeric address), with `port`, TCP, by `deadline`.
pub fn resolve(name: &CStr, port: u16, deadline: MonoTime) -> Result<SocketAddress, NotResolved> {
    let bytes = name.to_bytes_with_nul();
    if bytes.len() > NAME_CAPACITY {
        return Err(NotResolved::NoSuchHost);
    }
    let me = process_mark();
    let (slot, asked) = loop {
        if let Some(slot) = take_slot(me) {
            break (slot, claim_of(me, ASKED));
        }
        // Slots come free as the lookups in them end.
        let left = deadline.remaining_from(MonoTime::now());
        if left.is_zero() {
            return Err(NotResolved::NotNow);
        }
        sys::sleep(left.min(Duration::from_millis(1)));
    };
    // SAFETY: the claim just taken makes the lookup this caller's until
    // the thread is made.
    let lookup = unsafe { &mut *slot.lookup.get() };
    lookup.name[..bytes.len()].copy_from_slice(bytes);
    lookup.port = port;
    slot.answered.store(0, SeqCst);
    if !start_thread(slot) {
        // No thread to be had (a limit on threads, a sandbox): the lookup
        // is made here, and may take longer than the deadline.
        let answer = look_up_here(lookup);
        slot.claim.store(0, SeqCst);
        return answer;
    }
    loop {
        if slot.claim.load(SeqCst) == claim_of(me, ANSWERED) {
            // SAFETY: answered: the thread is done with the lookup.
            let answer = unsafe { (*slot.lookup.get()).answer };
            slot.claim.store(0, SeqCst);
            return answer;
        }
        let left = deadline.remaining_from(MonoTime::now());
        if left.is_zero() {
            if slot.claim.compare_exchange(asked, claim_of(me, LEFT), SeqCst, SeqCst).is_ok() {
                return Err(NotResolved::NotNow);
            }
            // Answered just now.
            continue;
        }
        // Woken, timed out or interrupted alike: the next round looks.
        let _ = sys::futex_wait(&slot.answered, 0, left);
    }
}

/// A free slot, taken by process `me`; a slot held by another process is
/// one this process inherited through `fork()`, whose caller and thread
/// are not here: it is free too.
fn take_slot(me: u32) -> Option<&'static Slot> {
    for slot in &LOOKUPS {
        let claim = slot.claim.load(SeqCst);
        if claim != 0 && mark_of(claim) != me {
            let _ = slot.claim.compare_exchange(claim, 0, SeqCst, SeqCst);
        }
        if slot.claim.compare_exchange(0, claim_of(me, ASKED), SeqCst, SeqCst).is_ok() {
            return Some(slot);
        }
    }
    None
}

/// Makes the detached thread that looks up `slot`'s name, with every
/// signal blocked (a signal for the process is not one for it); whether
/// it was made.
fn start_thread(slot: &'static Slot) -> bool {
    // SAFETY: out-values written by the calls; the attributes are
    // initialised before use and destroyed after; the thread gets a
    // pointer to a static slot, valid for as long as the process.
    unsafe {
        let mut attributes: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_attr_init(&mut attributes) != 0 {
            return false;
        }
        libc::pthread_attr_setdetachstate(&mut attributes, libc::PTHREAD_CREATE_DETACHED);
        let (mut all, mut before): (libc::sigset_t, libc::sigset_t) = (core::mem::zeroed(), core::mem::zeroed());
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let mut thread: libc::pthread_t = core::mem::zeroed();
        let argument = (slot as *const Slot).cast_mut().cast::<c_void>();
        let made = libc::pthread_create(&mut thread, &attributes, look_up, argument) == 0;
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attributes);
        made
    }
}

/// The lookup's thread: asks the resolver, writes the answer and wakes the
/// caller, or frees the slot if the caller has gone.
extern "C" fn look_up(argument: *mut c_void) -> *mut c_void {
    // SAFETY: `start_thread` passes a static slot.
    let slot = unsafe { &*argument.cast::<Slot>() };
    // SAFETY: the claim is ASKED: the lookup is this thread's until it
    // says ANSWERED (a caller that gives up only moves the claim to LEFT).
    let lookup = unsafe { &mut *slot.lookup.get() };
    lookup.answer = look_up_here(lookup);
    let asked = slot.claim.load(SeqCst);
    if stage_of(asked) == ASKED
        && slot.claim.compare_exchange(asked, claim_of(mark_of(asked), ANSWERED), SeqCst, SeqCst).is_ok()
    {
        slot.answered.store(1, SeqCst);
        sys::futex_wake(&slot.answered);
    } else {
        // Left: nobody waits for the answer.
        slot.claim.store(0, SeqCst);
    }
    core::ptr::null_mut()
}

/// Asks the resolver for `lookup`'s name, on the calling thread.
fn look_up_here(lookup: &Lookup) -> Result<SocketAddress, NotResolved> {
    let name = CStr::from_bytes_until_nul(&lookup.name).unwrap_or(c"");
    let hints = hints();
    let mut found: *mut libc::addrinfo = core::ptr::null_mut();
    // SAFETY: a NUL-terminated name, no service, valid hints and out-pointer.
    let code = unsafe { libc::getaddrinfo(name.as_ptr(), core::ptr::null(), &hints, &mut found) };
    answer(code, found, lookup.port)
}

/// What is asked for: TCP, either IP family, only those this host has an
/// address of.
fn hints() -> libc::addrinfo {
    // SAFETY: an all-zero addrinfo is a valid hints value (every field unset).
    let mut hints: libc::addrinfo = unsafe { core::mem::zeroed() };
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_flags = libc::AI_ADDRCONFIG;
    hints
}

/// What a lookup that ended with `code` and the list `found` gives; frees
/// the list.
fn answer(code: libc::c_int, found: *mut libc::addrinfo, port: u16) -> Result<SocketAddress, NotResolved> {
    let address = match found.is_null() {
        true => None,
        // SAFETY: a list getaddrinfo made, whose first entry is valid until
        // the list is freed, below.
        false => SocketAddress::from_addrinfo(unsafe { &*found }, port),
    };
    if !found.is_null() {
        // SAFETY: freed once, after the one address was copied out.
        unsafe { libc::freeaddrinfo(found) };
    }
    match (code, address) {
        (0, Some(address)) => Ok(address),
        (libc::EAI_AGAIN | libc::EAI_SYSTEM | libc::EAI_MEMORY, _) => Err(NotResolved::NotNow),
        _ => Err(NotResolved::NoSuchHost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn soon() -> MonoTime {
        MonoTime::now().saturating_add(Duration::from_secs(10))
    }

    #[test]
    fn a_numeric_address_and_localhost_resolve() {
        let _alone = alone();
        let address = resolve(c"127.0.0.1", 6379, soon()).expect("a numeric address needs no name server");
        assert!(address.same_as(&SocketAddress::ip(core::net::IpAddr::from([127, 0, 0, 1]), 6379)));
        assert!(resolve(c"localhost", 6379, soon()).is_ok(), "localhost is in /etc/hosts");
    }

    #[test]
    fn a_name_that_cannot_exist_does_not_resolve() {
        let _alone = alone();
        // `.invalid` is reserved (RFC 2606): no name server knows it. A
        // resolver that cannot be reached here answers that it cannot now.
        let found = resolve(c"no-such-host.invalid", 6379, soon());
        assert!(matches!(found, Err(NotResolved::NoSuchHost | NotResolved::NotNow)), "{found:?}");
    }

    /// One test at a time: a child forked while another test's lookup runs
    /// may inherit a lock of the C library's resolver held (see below).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn alone() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `child` in a child of `fork()` that must end within 10 s (a
    /// SIGALRM ends it otherwise); its wait status.
    fn in_a_child(child: impl FnOnce() -> bool) -> i32 {
        // SAFETY: the child only runs `child` and leaves by `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: SIGALRM, which ends the child, marks a hang.
            unsafe { libc::alarm(10) };
            let ok = child();
            // SAFETY: leaves the child without the harness's unwinding.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    /// A child of `fork()` has none of its parent's threads, and slots its
    /// parent held: it resolves all the same.
    #[test]
    fn a_child_of_fork_resolves_after_its_parent_did() {
        let _alone = alone();
        assert!(resolve(c"localhost", 1, soon()).is_ok());
        let status = in_a_child(|| {
            let twice = [Duration::ZERO, Duration::from_millis(1500)].map(|pause| {
                std::thread::sleep(pause);
                resolve(c"localhost", 1, MonoTime::now().saturating_add(Duration::from_secs(2))).is_ok()
            });
            twice == [true, true]
        });
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "wait status {status}");
    }

    /// A child forked while its parent's threads were looking names up may
    /// inherit a lock of the C library's resolver held by one of them, and
    /// then never resolve: its lookups still end by their deadline.
    #[test]
    fn a_child_forked_during_lookups_returns_by_its_deadline() {
        let _alone = alone();
        let stop = std::sync::Arc::new(core::sync::atomic::AtomicBool::new(false));
        let busy: std::vec::Vec<_> = (0..3)
            .map(|_| {
                let stop = std::sync::Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        let _ = resolve(c"localhost", 1, soon());
                    }
                })
            })
            .collect();
        let statuses: std::vec::Vec<i32> = (0..20)
            .map(|_| {
                in_a_child(|| {
                    resolve(c"localhost", 1, MonoTime::now().saturating_add(Duration::from_millis(200))).is_ok()
                })
            })
            .collect();
        stop.store(true, SeqCst);
        busy.into_iter().for_each(|thread| thread.join().unwrap());
        let hung = statuses.iter().filter(|&&status| libc::WIFSIGNALED(status)).count();
        assert_eq!(hung, 0, "children still in resolve 10 s on, deadline 200 ms: {statuses:?}");
    }

    #[test]
    fn lookups_at_once_beyond_the_slots_each_get_an_answer() {
        let _alone = alone();
        let threads: std::vec::Vec<_> =
            (0..32).map(|_| std::thread::spawn(|| resolve(c"localhost", 1, soon()).is_ok())).collect();
        let answers: std::vec::Vec<bool> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
        assert!(answers.iter().all(|&resolved| resolved), "{answers:?}");
    }
}

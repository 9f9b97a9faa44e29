//! Host names looked up by a deadline.
//!
//! `getaddrinfo(3)` blocks for as long as the resolver takes: with a name
//! server that does not answer, `timeout` times `attempts` of resolv.conf
//! (10 s and more), past any deadline of the caller's. With glibc the
//! lookup is asked for with `getaddrinfo_a(3)` instead, which runs it in
//! the C library's own thread, and waited for with `gai_suspend(3)` until
//! the deadline. glibc writes the answer into the request whenever the
//! lookup ends, also after its caller has given up, so a request never
//! lives on a caller's stack: it takes one of a few slots here, which a
//! lookup left running keeps until it ends. Elsewhere the lookup blocks.
//!
//! The C library allocates inside itself, as `getaddrinfo` always has;
//! nothing here does.

use core::ffi::CStr;

use crate::clock::MonoTime;
use crate::sys::SocketAddress;

/// Why a name gave no address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotResolved {
    /// The resolver answered that the name has no address (of a family
    /// this host can reach).
    NoSuchHost,
    /// It did not answer by the deadline, or answered that it cannot now,
    /// or too many earlier lookups it has not answered are still out.
    NotNow,
}

/// The first address the resolver gives for the host `name` (a name or a
/// numeric address), with `port`, TCP, by `deadline`.
pub fn resolve(name: &CStr, port: u16, deadline: MonoTime) -> Result<SocketAddress, NotResolved> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    return asynchronous::resolve(name, port, deadline);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = deadline;
        blocking(name, port)
    }
}

/// What both ways ask for: TCP, either IP family, only those this host has
/// an address of.
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

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn blocking(name: &CStr, port: u16) -> Result<SocketAddress, NotResolved> {
    let hints = hints();
    let mut found: *mut libc::addrinfo = core::ptr::null_mut();
    // SAFETY: a NUL-terminated name, no service, valid hints and out-pointer.
    let code = unsafe { libc::getaddrinfo(name.as_ptr(), core::ptr::null(), &hints, &mut found) };
    answer(code, found, port)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod asynchronous {
    use core::cell::UnsafeCell;
    use core::ffi::{c_char, c_int, CStr};
    use core::sync::atomic::{AtomicU8, Ordering::SeqCst};

    use super::{answer, hints, NotResolved};
    use crate::clock::MonoTime;
    use crate::sys::SocketAddress;

    /// glibc's `struct gaicb`.
    #[repr(C)]
    struct Request {
        name: *const c_char,
        service: *const c_char,
        hints: *const libc::addrinfo,
        result: *mut libc::addrinfo,
        private: [c_int; 6],
    }

    const GAI_NOWAIT: c_int = 1;
    const EAI_INPROGRESS: c_int = -100;
    const EAI_CANCELED: c_int = -101;
    const EAI_ALLDONE: c_int = -103;
    const EAI_INTR: c_int = -104;

    // In libc.so.6 since glibc 2.34, in libanl before; libanl remains, empty,
    // so that programs linked with it still load.
    #[link(name = "anl")]
    extern "C" {
        fn getaddrinfo_a(mode: c_int, list: *const *mut Request, items: c_int, event: *mut libc::sigevent) -> c_int;
        fn gai_suspend(list: *const *const Request, items: c_int, timeout: *const libc::timespec) -> c_int;
        fn gai_error(request: *mut Request) -> c_int;
        fn gai_cancel(request: *mut Request) -> c_int;
    }

    /// Lookups that may be out at once, counting those their callers gave
    /// up on while the resolver still works at them.
    const SLOTS: usize = 8;
    /// The longest name a slot keeps (with its NUL): a DNS name is at most
    /// 253 bytes.
    const NAME_CAPACITY: usize = 256;

    const FREE: u8 = 0;
    /// A caller's, until it returns.
    const ASKING: u8 = 1;
    /// Given up on by its caller; the resolver may still write into it.
    const LEFT: u8 = 2;

    struct Slot {
        state: AtomicU8,
        /// Written and read only by whoever moved `state` to ASKING, and by
        /// the C library while the lookup runs.
        lookup: UnsafeCell<Lookup>,
    }

    /// A request and everything it points at, which must outlive it.
    struct Lookup {
        name: [u8; NAME_CAPACITY],
        hints: libc::addrinfo,
        request: Request,
    }

    // SAFETY: a slot's lookup is reached only by the one caller that holds
    // it (its state ASKING, taken by a compare-and-swap) and by the C
    // library's thread for the request in it.
    unsafe impl Sync for Slot {}

    #[allow(clippy::declare_interior_mutable_const)]
    const UNUSED: Slot = Slot {
        state: AtomicU8::new(FREE),
        lookup: UnsafeCell::new(Lookup {
            name: [0; NAME_CAPACITY],
            // SAFETY: all zeros is a valid addrinfo (every field unset).
            hints: unsafe { core::mem::zeroed() },
            request: Request {
                name: core::ptr::null(),
                service: core::ptr::null(),
                hints: core::ptr::null(),
                result: core::ptr::null_mut(),
                private: [0; 6],
            },
        }),
    };

    static SLOTS_IN_USE: [Slot; SLOTS] = [UNUSED; SLOTS];

    /// A free slot, taken; one whose lookup was left running is taken back
    /// once that lookup has ended (its answer freed).
    fn take_slot() -> Option<&'static Slot> {
        for slot in &SLOTS_IN_USE {
            if slot.state.compare_exchange(FREE, ASKING, SeqCst, SeqCst).is_ok() {
                return Some(slot);
            }
            if slot.state.compare_exchange(LEFT, ASKING, SeqCst, SeqCst).is_ok() {
                // SAFETY: this caller holds the slot (ASKING); the request
                // was made from it and is asked about, not changed.
                let lookup = unsafe { &mut *slot.lookup.get() };
                // SAFETY: a request getaddrinfo_a was given.
                if unsafe { gai_error(&mut lookup.request) } == EAI_INPROGRESS {
                    slot.state.store(LEFT, SeqCst);
                    continue;
                }
                if !lookup.request.result.is_null() {
                    // SAFETY: the list the ended lookup made, freed once.
                    unsafe { libc::freeaddrinfo(lookup.request.result) };
                    lookup.request.result = core::ptr::null_mut();
                }
                return Some(slot);
            }
        }
        None
    }

    pub fn resolve(name: &CStr, port: u16, deadline: MonoTime) -> Result<SocketAddress, NotResolved> {
        let bytes = name.to_bytes_with_nul();
        if bytes.len() > NAME_CAPACITY {
            return Err(NotResolved::NoSuchHost);
        }
        // Slots come free as the lookups in them end: a moment, or the
        // resolver's timeout for those left running.
        let slot = loop {
            if let Some(slot) = take_slot() {
                break slot;
            }
            if MonoTime::now() >= deadline {
                return Err(NotResolved::NotNow);
            }
            crate::sys::sleep(core::time::Duration::from_millis(1));
        };
        // SAFETY: this caller holds the slot (ASKING), and no lookup runs in
        // it (a free slot, or one whose lookup ended).
        let lookup = unsafe { &mut *slot.lookup.get() };
        lookup.name[..bytes.len()].copy_from_slice(bytes);
        lookup.hints = hints();
        lookup.request = Request {
            name: lookup.name.as_ptr().cast(),
            service: core::ptr::null(),
            hints: &lookup.hints,
            result: core::ptr::null_mut(),
            private: [0; 6],
        };
        let request: *mut Request = &mut lookup.request;
        // SAFETY: a list of one request whose name and hints live in the
        // same static slot, as long as the lookup runs; no notification.
        if unsafe { getaddrinfo_a(GAI_NOWAIT, &request, 1, core::ptr::null_mut()) } != 0 {
            slot.state.store(FREE, SeqCst);
            return Err(NotResolved::NotNow);
        }
        loop {
            let left = deadline.remaining_from(MonoTime::now());
            let timeout = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as _ };
            let waiting: *const Request = request;
            // SAFETY: the request made above; a relative timeout.
            let suspended = unsafe { gai_suspend(&waiting, 1, &timeout) };
            // SAFETY: as above.
            let code = unsafe { gai_error(request) };
            if code != EAI_INPROGRESS {
                // SAFETY: the lookup has ended: its list is this caller's.
                let found = unsafe { (*request).result };
                lookup.request.result = core::ptr::null_mut();
                slot.state.store(FREE, SeqCst);
                return answer(code, found, port);
            }
            if suspended == EAI_INTR && !left.is_zero() {
                continue;
            }
            // Out of time. A lookup that cannot be cancelled (it is at work)
            // keeps the slot until it ends.
            // SAFETY: the request made above.
            let cancelled = unsafe { gai_cancel(request) };
            let state = match cancelled {
                EAI_CANCELED | EAI_ALLDONE => FREE,
                _ => LEFT,
            };
            if cancelled == EAI_ALLDONE {
                // Ended just now: its answer, if any, is freed before the
                // slot goes back.
                // SAFETY: the lookup has ended: its list is this caller's.
                let found = unsafe { (*request).result };
                if !found.is_null() {
                    // SAFETY: freed once.
                    unsafe { libc::freeaddrinfo(found) };
                }
                lookup.request.result = core::ptr::null_mut();
            }
            slot.state.store(state, SeqCst);
            return Err(NotResolved::NotNow);
        }
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
        let address = resolve(c"127.0.0.1", 6379, soon()).expect("a numeric address needs no name server");
        assert!(address.same_as(&SocketAddress::ip(core::net::IpAddr::from([127, 0, 0, 1]), 6379)));
        assert!(resolve(c"localhost", 6379, soon()).is_ok(), "localhost is in /etc/hosts");
    }

    #[test]
    fn a_name_that_cannot_exist_does_not_resolve() {
        // `.invalid` is reserved (RFC 2606): no name server knows it. A
        // resolver that cannot be reached here answers that it cannot now.
        let found = resolve(c"no-such-host.invalid", 6379, soon());
        assert!(matches!(found, Err(NotResolved::NoSuchHost | NotResolved::NotNow)), "{found:?}");
    }

    #[test]
    fn lookups_at_once_beyond_the_slots_each_get_an_answer() {
        let threads: std::vec::Vec<_> =
            (0..32).map(|_| std::thread::spawn(|| resolve(c"localhost", 1, soon()).is_ok())).collect();
        let answers: std::vec::Vec<bool> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
        assert!(answers.iter().all(|&resolved| resolved), "{answers:?}");
    }
}

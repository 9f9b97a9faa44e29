//! Descriptors a handle keeps open between its calls, which no child of
//! `fork()` may keep.
//!
//! A kernel lock taken through a descriptor (`flock(2)`, an
//! open-file-description lock) belongs to the open file description, and a
//! child of `fork()` gets a copy of every descriptor, sharing its
//! description. Were a parent to lock through such a description and die,
//! the child's copy would keep the lock held for as long as the child
//! lives: a holder that nobody can see, judge or break. A descriptor
//! opened for each acquisition and closed after it leaves that to a fork
//! made while the lock is held; one kept between acquisitions would leave
//! it to every fork.
//!
//! So every descriptor kept is listed here by its number, and a handler
//! that the C library runs in the child of every `fork(3)`, before the
//! child returns from it, closes them all: the child never holds a kept
//! description, whatever its parent locks later, or held at the fork.
//! A descriptor opened while another thread forks may reach the child
//! before it is listed. A count that is odd while a fork is under way,
//! read before the open and again once the descriptor is listed, tells:
//! that one is not kept, and serves only the call that opened it (or, for
//! a lock held, that acquisition): its holder opens another the next time,
//! as before. So is one that finds the list full ([`CAPACITY`] per
//! process), or the handlers not registered.
//!
//! The child's copy of the handle that kept a descriptor never closes that
//! number ([`KeptFd::is_inherited`]), listed or not: the child may have
//! closed it and opened a file of its own under it since (a daemon closes
//! every descriptor it did not open). So the descriptors a handle keeps but
//! never locks through (a socket, an inotify instance) are kept here too,
//! unlisted ([`KeptFd::unlisted`]).
//!
//! The handler runs when the child first runs: until then its copies share
//! the descriptions, and a lock its parent takes through one and dies
//! holding stays held until the child is scheduled (a time slice on a busy
//! machine; as long as the child is stopped, if it is stopped before it
//! ever runs).
//!
//! A program may close a number kept here (a double close, a loop that
//! closes every descriptor above 2) and open a file of its own under it.
//! Each use of a kept guard, lease or queue file, or of `flock`'s target,
//! first checks that the number still names the file it was opened on
//! ([`KeptFd::still_names`]); one that does not is given up, neither
//! closed nor locked through, and the file is opened anew. Not covered: the
//! same file opened again under the number (by the program, or by another
//! handle of this process), which the check takes for ours; the numbers
//! kept unlisted (a turnstile's naming file, an inotify instance, a redis
//! socket); and a child forked before the handle's next call, whose
//! handler still closes the listed number.
//!
//! Not covered: a child made by a raw `clone(2)` or `syscall(SYS_fork)`,
//! which runs no handler, keeps its copies as it keeps every descriptor
//! open at the time; so does any child of a fork made while a lock is held
//! through a descriptor that is not listed (the list full, or the fork
//! racing its open). A child that only calls `exec` (`posix_spawn`,
//! `vfork`, `system`) drops them all: every descriptor of ours is opened
//! `O_CLOEXEC`.

use core::sync::atomic::Ordering::SeqCst;
use core::sync::atomic::{AtomicI32, AtomicU64, AtomicU8};

use crate::sys::{self, Fd, FileStat};

/// How many descriptors one process keeps at most (a `flock` lock keeps
/// two: its target and its guard); past that, a handle opens its files for
/// each use, and a child forked while a lock is held through one keeps a
/// copy, as of any descriptor open at the fork.
pub const CAPACITY: usize = 1024;

/// The numbers of the descriptors kept, `-1` where none is listed.
static LISTED: [AtomicI32; CAPACITY] = [const { AtomicI32::new(-1) }; CAPACITY];

/// Moves on by one as a fork begins and by one as it ends, in the parent
/// and in the child alike: odd while a fork is under way, and changed by
/// every fork since it was last read.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Whether the handlers are registered: not yet, being registered,
/// registered, or refused by the C library.
static HANDLERS: AtomicU8 = AtomicU8::new(NOT_YET);
const NOT_YET: u8 = 0;
const REGISTERING: u8 = 1;
const REGISTERED: u8 = 2;
const REFUSED: u8 = 3;

/// Run by the C library in the parent, before every `fork(3)`.
extern "C" fn before_fork() {
    FORKS.fetch_add(1, SeqCst);
}

/// Run by the C library in the parent, after every `fork(3)`.
extern "C" fn after_fork_in_parent() {
    FORKS.fetch_add(1, SeqCst);
}

/// Run by the C library in the child of every `fork(3)`, before `fork`
/// returns there: only atomics and `close(2)`, which a child of a
/// threaded process may call.
extern "C" fn in_child() {
    for listed in &LISTED {
        let fd = listed.swap(-1, SeqCst);
        if fd >= 0 {
            sys::close_inherited(fd);
        }
    }
    // A fork made while its parent was registering the handlers: they
    // run here, so they are registered.
    HANDLERS.store(REGISTERED, SeqCst);
    FORKS.fetch_add(1, SeqCst);
}

/// Whether the handlers are registered, registering them at the first call.
fn handlers_registered() -> bool {
    match HANDLERS.compare_exchange(NOT_YET, REGISTERING, SeqCst, SeqCst) {
        Ok(_) => {
            let registered = sys::at_fork(before_fork, after_fork_in_parent, in_child).is_ok();
            HANDLERS.store(if registered { REGISTERED } else { REFUSED }, SeqCst);
            registered
        }
        // Another thread registering them: this descriptor is not kept.
        Err(state) => state == REGISTERED,
    }
}

/// A descriptor, listed for the children of `fork()` to close if it could
/// be ([`is_kept`](Self::is_kept)).
#[derive(Debug)]
pub struct KeptFd {
    fd: core::mem::ManuallyDrop<Fd>,
    /// Where it is listed; `None` if it is not.
    slot: Option<usize>,
    /// The process that opened it ([`crate::process::incarnation`]).
    opener: Option<u64>,
}

/// What [`KeptFd::keep`] needs to know from before the open: whether the
/// handlers run, and how many forks had begun.
#[derive(Clone, Copy, Debug)]
pub struct BeforeOpen {
    registered: bool,
    forks: u64,
}

/// To be called just before opening a descriptor to keep.
pub fn before_open() -> BeforeOpen {
    let registered = handlers_registered();
    BeforeOpen { registered, forks: FORKS.load(SeqCst) }
}

impl BeforeOpen {
    /// Whether a descriptor opened since may be listed: no fork was under
    /// way then, and none began since.
    fn no_fork_since(self) -> bool {
        self.registered && self.forks % 2 == 0 && FORKS.load(SeqCst) == self.forks
    }
}

impl KeptFd {
    /// Lists `fd`, opened since `before`, if it can be listed with no fork
    /// in between.
    pub fn keep(fd: Fd, before: BeforeOpen) -> KeptFd {
        let opener = crate::process::incarnation();
        let mut kept = KeptFd { fd: core::mem::ManuallyDrop::new(fd), slot: None, opener };
        if !before.no_fork_since() || opener.is_none() {
            return kept;
        }
        kept.slot = LISTED.iter().position(|listed| listed.compare_exchange(-1, kept.fd.raw(), SeqCst, SeqCst).is_ok());
        if kept.slot.is_some() && !before.no_fork_since() {
            // A child may hold a copy the handler never saw.
            kept.unlist();
        }
        kept
    }

    /// `fd`, kept by a handle that never locks through it (a socket, an
    /// inotify instance): never listed, but, like every descriptor here,
    /// never closed by a child's copy of the handle.
    pub fn unlisted(fd: Fd) -> KeptFd {
        KeptFd { fd: core::mem::ManuallyDrop::new(fd), slot: None, opener: crate::process::incarnation() }
    }

    /// Whether this is known to be a child of `fork()` holding a copy of
    /// the handle that opened it (where no child can be told from its
    /// parent, never).
    pub fn is_inherited(&self) -> bool {
        self.opener.is_some() && !self.is_here()
    }

    /// Whether it may stay open, and be locked through, from one call to
    /// the next: listed, so that no child of `fork()` keeps a copy. One
    /// that is not serves the call that opened it only.
    pub fn is_kept(&self) -> bool {
        self.slot.is_some()
    }

    /// Whether it may be used again by the process that opened it: kept,
    /// and this is that process.
    pub fn is_reusable(&self) -> bool {
        self.is_kept() && self.is_here()
    }

    /// Whether this is the process that opened it, not a child of `fork()`
    /// holding a copy of the handle: only there does its number name it.
    pub fn is_here(&self) -> bool {
        self.opener.is_some() && crate::process::incarnation() == self.opener
    }

    /// The descriptor.
    pub fn fd(&self) -> &Fd {
        &self.fd
    }

    /// Whether the number still names `file`, the file it was opened on.
    /// A program that closes descriptors it did not open (a double close, a
    /// loop that closes every descriptor above 2) frees the number, and its
    /// next open takes it: through it, a lock would be taken on, and a
    /// state written into, a file of the program's.
    pub fn still_names(&self, file: &FileStat) -> bool {
        sys::fstat(&self.fd).is_ok_and(|now| now.same_file(file))
    }

    /// Gives the number up without closing it: it names a file that is
    /// not ours ([`still_names`](Self::still_names)), or, in a child of
    /// `fork()`, its parent's. Unlisted, so that no child of a later fork
    /// closes it either; but not in a child, where the handler freed every
    /// slot at the fork and this one may list a number of the child's now.
    pub fn abandon(mut self) {
        if !self.is_inherited() {
            self.unlist();
        }
        // SAFETY: `fd` is taken once, here; `self` is forgotten right after,
        // so its drop does not take it again.
        let fd = unsafe { core::mem::ManuallyDrop::take(&mut self.fd) };
        core::mem::forget(self);
        fd.leak();
    }

    fn unlist(&mut self) {
        if let Some(slot) = self.slot.take() {
            // Before the close, and never while a lock is held through it
            // (its holders let go of their locks first): a fork in between
            // leaves the child a copy of a description that holds nothing
            // and that nobody locks through again.
            LISTED[slot].store(-1, SeqCst);
        }
    }
}

impl Drop for KeptFd {
    fn drop(&mut self) {
        // SAFETY: `fd` is taken once, here, at the end of `self`.
        let fd = unsafe { core::mem::ManuallyDrop::take(&mut self.fd) };
        if self.is_inherited() {
            // A child's copy of the handle: the number was its parent's. The
            // handler closed it if it was listed, and either way the child
            // may have closed it and opened another file under it since (a
            // daemon closes every descriptor it did not open itself).
            fd.leak();
            return;
        }
        self.unlist();
        drop(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::CPath;

    fn dev_null() -> Fd {
        sys::open(&CPath::from_parts(&[b"/dev/null"]).unwrap(), libc::O_RDONLY, 0).unwrap()
    }

    /// `/dev/null`, kept: tried again while other tests of this process
    /// fork (each fork under way leaves a descriptor opened then unkept).
    fn kept_dev_null() -> KeptFd {
        for _ in 0..1000 {
            let kept = KeptFd::keep(dev_null(), before_open());
            if kept.is_kept() {
                return kept;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("no descriptor kept in 1000 tries");
    }

    fn is_open(fd: libc::c_int) -> bool {
        // SAFETY: F_GETFD reads a descriptor's flags and changes nothing.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// One test, so that the forks these checks pretend to make do not
    /// unkeep the other's descriptors.
    #[test]
    fn kept_descriptors_are_closed_in_a_child_and_only_they() {
        a_child_of_fork_finds_kept_descriptors_closed();
        a_descriptor_opened_across_a_fork_is_not_kept();
        a_child_leaves_a_reused_number_alone();
    }

    /// A kept descriptor is open in the process that kept it and closed in
    /// its child of `fork()` before the child's first instruction after
    /// the fork; one not kept stays open in both.
    fn a_child_of_fork_finds_kept_descriptors_closed() {
        let kept = kept_dev_null();
        assert!(kept.is_here());
        let plain = dev_null();
        let (kept_fd, plain_fd) = (kept.fd().raw(), plain.raw());
        // SAFETY: the child only reads descriptor flags and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let code = if is_open(kept_fd) {
                1
            } else if !is_open(plain_fd) {
                2
            } else {
                0
            };
            // SAFETY: ends the child at once, without running the harness's
            // exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status), "the child exited");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "1: the kept descriptor was open in the child; 2: the plain one was not"
        );
        assert!(is_open(kept_fd), "still open in the parent");
        drop(kept);
        assert!(!is_open(kept_fd), "closed when dropped");
        assert!(LISTED.iter().all(|listed| listed.load(SeqCst) != kept_fd), "and no longer listed");
    }

    /// A child's copy of a handle never closes the number its parent
    /// opened, listed or not: the child may have closed it and opened a
    /// file of its own under it.
    fn a_child_leaves_a_reused_number_alone() {
        let raced = {
            let before = before_open();
            before_fork();
            let fd = dev_null();
            let kept = KeptFd::keep(fd, before);
            after_fork_in_parent();
            kept
        };
        assert!(!raced.is_kept());
        for unlisted in [raced, KeptFd::unlisted(dev_null())] {
            a_child_leaves_its_number_alone(unlisted);
        }
    }

    fn a_child_leaves_its_number_alone(unlisted: KeptFd) {
        let number = unlisted.fd().raw();
        // SAFETY: the child closes and reuses one number, drops its copy of
        // the descriptor and exits; nothing of the harness runs there.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let own = dev_null();
            // SAFETY: plain calls on descriptors of this child's.
            let reused = unsafe { libc::close(number) == 0 && libc::dup2(own.raw(), number) == number };
            drop(unlisted);
            let code = if !reused {
                1
            } else if !is_open(number) {
                2
            } else {
                0
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0, "2: the child's drop closed a number of the child's own");
        assert!(is_open(number), "the parent's is still open");
    }

    /// A fork between the open and the listing leaves a copy the handler
    /// never saw: that descriptor is not kept.
    fn a_descriptor_opened_across_a_fork_is_not_kept() {
        let before = before_open();
        let fd = dev_null();
        before_fork();
        after_fork_in_parent();
        let raced = KeptFd::keep(fd, before);
        assert!(!raced.is_kept());
        assert!(LISTED.iter().all(|listed| listed.load(SeqCst) != raced.fd().raw()));
        // One opened while a fork is under way: the child may get it first.
        before_fork();
        let during = KeptFd::keep(dev_null(), before_open());
        after_fork_in_parent();
        assert!(!during.is_kept());
        // And one opened after is kept again (once no real fork of another
        // test is under way): `kept_dev_null` fails the test otherwise.
        drop(kept_dev_null());
    }
}

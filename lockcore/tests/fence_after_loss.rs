//! A lock's state file (the file that keeps its last fence: the guard,
//! `flock`'s `<target>.guard`, the lease, the queue) lost while the lock is
//! free (a cleaner that removes idle files from /tmp or /run, an operator
//! tidying up) must not send fences back: the next acquisition's fence is
//! still greater than every earlier one, so a fencing store keeps accepting
//! the new holder.
//!
//! The same file found torn or overwritten (a disk error, a crash of a file
//! system that does not keep a write's data, a program writing where it
//! should not) must not either: it is refused, not taken for a new file
//! whose count starts again at 1. One that still starts with its format's
//! marker (`lockguard `, `lease `, a queue's header `H `) is
//! `Corrupt`; one that does not is no file of this library (`NotALock`);
//! either way it is left exactly as it was. For `toplock` this is the
//! queue's first line, its header: cut short, or cut short with the rest of
//! the log after it, or with another version, it is `Corrupt`; overwritten
//! with zeros or emptied, `NotALock`. For `shm` it is the header line of
//! its 4 KiB file (`shm 1 `): another version, or the file cut short
//! (which must not be mapped: a page past its end faults), is `Corrupt`;
//! zeros over its start, or emptied, `NotALock`. Each damage is refused by
//! a handle that had the file mapped before as by a new one; the damage is
//! made in place (the same inode), so the first must look again. Once an
//! operator removes the damaged file, the lock works again and its fences
//! go on growing.
//!
//! Each scheme's damages run in a child process of their own: a handle
//! that touched a mapping past the end of a file cut short under it would
//! die of `SIGBUS`, which is reported as such, not as the end of every
//! test in this binary.
//!
//! Every fence handed out here is strictly greater than every earlier one
//! and never below the wall clock in microseconds at the moment it was
//! handed out.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use lockcore::{CorruptKind, ErrorKind, Lock, WallTime};

/// The fences a test has seen handed out, in order.
#[derive(Default)]
struct Fences(Vec<u64>);

impl Fences {
    /// One acquisition and release, whose fence must be above every
    /// earlier one and not below the clock when it was asked for.
    fn take(&mut self, lock: &mut Lock, what: &str) {
        let floor = clock_floor();
        let fence = lock.try_acquire().unwrap_or_else(|e| panic!("{what}: {e}")).fence;
        assert!(fence >= floor, "{what}: fence {fence} below the clock's {floor} µs");
        if let Some(&last) = self.0.last() {
            assert!(fence > last, "{what}: fence {fence} after {:?}", self.0);
        }
        self.0.push(fence);
        lock.release(Duration::ZERO).unwrap_or_else(|e| panic!("{what}: release: {e}"));
    }
}

/// The wall clock in microseconds: no fence handed out from now on is below it.
fn clock_floor() -> u64 {
    (WallTime::now().unix_nanos() / 1_000) as u64
}

/// What a state file that still carries its format's marker but does not
/// parse is refused as: the guard's own kind where the scheme keeps one,
/// a damaged record for the lease and the queue, which are their own state.
fn corrupt_state(scheme: Scheme, dir: &Path) -> ErrorKind {
    if scheme.guard_path(dir).is_some() {
        ErrorKind::Corrupt(CorruptKind::GuardState)
    } else {
        ErrorKind::Corrupt(CorruptKind::Record)
    }
}

#[test]
fn fences_still_grow_after_the_state_file_is_lost() {
    each_file_scheme("fence-after-loss", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h");
        let state = scheme.state_path(dir.path());
        let mut fences = Fences::default();
        let mut lock = open_lock(&spec);
        for _ in 0..3 {
            fences.take(&mut lock, "before the loss");
        }
        std::fs::remove_file(&state).unwrap_or_else(|e| panic!("remove {}: {e}", state.display()));
        fences.take(&mut open_lock(&spec), "after the loss");
        fences.take(&mut lock, "after the loss, the first handle");
    });
}

/// One way a state file is found damaged: a name, the damaged bytes made
/// from the file's own, and whether its format's marker survives.
struct Damage {
    name: &'static str,
    make: fn(&[u8]) -> Vec<u8>,
    keeps_marker: bool,
}

fn first_line_len(bytes: &[u8]) -> usize {
    bytes.iter().position(|&b| b == b'\n').unwrap_or(bytes.len())
}

const DAMAGES: &[Damage] = &[
    Damage {
        // `lockguard 9`, `lease 9`, `H 9`: a version this library does not write.
        name: "another version in the first line",
        make: |bytes| {
            let mut out = bytes.to_vec();
            let digit = out.iter().position(u8::is_ascii_digit).expect("a version number");
            out[digit] = if out[digit] == b'9' { b'8' } else { b'9' };
            out
        },
        keeps_marker: true,
    },
    Damage {
        name: "the first line cut short, nothing after it",
        make: |bytes| bytes[..first_line_len(bytes) / 2].to_vec(),
        keeps_marker: true,
    },
    Damage {
        // For a queue, the header is torn and the log after it intact.
        name: "the first line cut short, the rest kept",
        make: |bytes| {
            let line = first_line_len(bytes);
            let mut out = bytes[..line / 2].to_vec();
            out.extend_from_slice(&bytes[line..]);
            out
        },
        keeps_marker: true,
    },
    Damage {
        name: "zeros over its start",
        make: |bytes| {
            let mut out = bytes.to_vec();
            out[..16].fill(0);
            out
        },
        keeps_marker: false,
    },
    Damage { name: "emptied", make: |_| Vec::new(), keeps_marker: false },
];

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    assert_eq!(role, "damages");
    let scheme = Scheme::from_name(var("SCHEME").as_bytes()).expect("a scheme of this build");
    damaged_state_files_are_refused(scheme, Path::new(&var("DIR")));
}

/// Every damage of [`DAMAGES`] in turn, on the state file of `scheme`'s
/// lock in `dir`, refused by a handle that used the file before and by a
/// new one; then the file is removed, and fences go on growing.
fn damaged_state_files_are_refused(scheme: Scheme, dir: &Path) {
    let spec = scheme.spec(dir, "ttl=1h");
    let state = scheme.state_path(dir);
    let mut fences = Fences::default();
    let mut lock = open_lock(&spec);
    for _ in 0..3 {
        fences.take(&mut lock, "before any damage");
    }
    for damage in DAMAGES {
        let what = damage.name;
        let damaged = (damage.make)(&std::fs::read(&state).unwrap());
        std::fs::write(&state, &damaged).unwrap();
        // A handle believes its last look at a file it keeps mapped for
        // this long, and touches the page without looking again: a file cut
        // short meanwhile by its owner would kill it with SIGBUS, as it
        // would a process with a mutex in a shared mapping of that file.
        std::thread::sleep(lockcore::LOOK_BELIEVED_FOR);
        let expected = if damage.keeps_marker { corrupt_state(scheme, dir) } else { ErrorKind::NotALock };
        let mut other = open_lock(&spec);
        assert_eq!(lock.try_acquire().map_err(|e| e.kind()), Err(expected), "{what}: try_acquire");
        assert_eq!(other.try_acquire().map_err(|e| e.kind()), Err(expected), "{what}: another handle");
        assert_eq!(other.inspect().map_err(|e| e.kind()), Err(expected), "{what}: inspect");
        assert_eq!(std::fs::read(&state).unwrap(), damaged, "{what}: the damaged file was written");
        assert_eq!(lock.held(), None, "{what}");
        // The operator removes it; the count goes on above every fence.
        std::fs::remove_file(&state).unwrap();
        fences.take(&mut other, what);
        fences.take(&mut lock, what);
    }
}

#[test]
fn a_torn_or_overwritten_state_file_is_refused_and_fences_never_restart_low() {
    each_file_scheme("fence-after-damage", |scheme, dir| {
        let vars = [("SCHEME", scheme.name().to_owned()), ("DIR", dir.path().display().to_string())];
        let status = wait_patiently(&mut spawn("damages", &vars));
        // The child's own failure, if any, is on stderr above.
        match status.signal() {
            Some(libc::SIGBUS) => panic!("killed by SIGBUS: a mapping was touched past the end of its file"),
            Some(signal) => panic!("killed by signal {signal}"),
            None => assert!(status.success(), "the damages failed: {status}"),
        }
    });
}

//! Hostile and damaged files at a lock's paths, on every scheme: each gets a
//! distinct error or a correct decision, never a panic, never a hang, never
//! a write through a symlink.
//!
//! The cases are made from each lock's own files, as lockcore names them
//! (`Lock::path`, `Lock::guard_path`, and the helper pattern
//! `<path>.<32 hex digits>`), not from a list per scheme:
//! * **planted**: garbage, a 1 MiB data file, a fifo, a symlink to a victim
//!   file, to a victim directory, to a missing target, and a directory
//!   (holding a stale record of ours and a file of its own) are put at the
//!   lock path, at the guard, and at a name of the helper pattern beside
//!   each; at the lock path also with an mtime two hours old (the TTL is an
//!   hour);
//! * **a file where a directory belongs**: the lock's directory is a file;
//! * **damaged records of ours**: the lock is left held (in the scheme's own
//!   format) by a process on another host, then every file of it that
//!   holds a record is cut to its first 20 bytes or loses its last byte, or
//!   gets 1 MiB appended (a symlink 4000 bytes); cut records also aged;
//! * **a damaged `shm` slot**: the lease line in the active slot of a `shm`
//!   lock's file overwritten with garbage, or torn after 20 bytes (the
//!   file whole and 4 KiB long, so it is mapped and its section word taken);
//! * **the largest fence**: the lock is left held by a dead process, and
//!   every fence in its files is made `u64::MAX`.
//!
//! Each case runs `try_acquire` (and `release` if it succeeded), `inspect`
//! and `break_lock`, and checks:
//! * the three outcomes are the ones [`decide`] gives (an `ErrorKind`, or
//!   `Ok`);
//! * the victims (a file, and a directory holding a file named `owner`) are
//!   byte for byte, inode and mtime the same, and a dangling symlink's
//!   target was never created;
//! * what was planted (or a damaged file the decision leaves alone) is the
//!   same, to the inode and mtime, down to every file in it;
//! * no helper file was left behind.
//!
//! Cases with a fifo run in a child process that is killed after
//! [`FIFO_DEADLINE`]: a reader that blocks on a planted fifo fails the test
//! instead of hanging it. A panic in the library fails the case.
//!
//! The decisions ([`decide`]), and why:
//! * something the scheme never makes, at the path where it keeps its lock
//!   or guard (a file without the scheme's format marker, a data file, a
//!   fifo, a directory where a file belongs, a file where a directory
//!   belongs, a directory with anything but our record in it):
//!   `NotALock`, for every operation, and it is never written, truncated,
//!   renamed or removed, even long past the TTL (its age says nothing: it
//!   is no lock);
//! * a symlink where a file or directory belongs: `Symlink`, never followed
//!   (nothing is created at a dangling target), never removed;
//! * except at a `symlink` lock, where the lock is a link: one without our
//!   record is a peer's lock only if its target is a bare name that names
//!   nothing (`symlink_peers.rs`); these point at paths, so they are
//!   `NotALock`, never followed, never removed;
//! * `flock` locks any file or directory, as `flock(1)`: a data file,
//!   garbage or a directory at its target is locked and never written; only
//!   a fifo (or a symlink) there is refused;
//! * a component of the lock's path that is a file: `NotADirectory`;
//! * anything at a name of the helper pattern: left alone, the lock works
//!   (helper names are drawn from 128 random bits);
//! * a damaged record of ours at the lock path (`lockfile`'s lock file,
//!   `mkdir`'s `owner`, a `symlink`'s target): `Corrupt(Record)`, or
//!   `Corrupt(RecordTooLong)` when longer than any we write (a link's
//!   target is read up to the longest record, so it is only `Record`);
//!   there is no owner to judge, so it is broken only by age (`ttl`), or
//!   by an operator's `break_lock`;
//! * a damaged guard, `lease`, `toplock` queue or `shm` file: `Corrupt`,
//!   for every operation, never "repaired" and never aged out: it keeps
//!   the last fence. A `shm` file cut short is refused before it is mapped
//!   (a page past its end would fault), and one whole but with garbage or
//!   a torn line in its active slot is refused by what it holds: both are
//!   `Corrupt(Record)`. Three exceptions follow from the formats: a guard
//!   is one fixed-size line read alone, so bytes after it are ignored (and
//!   a `flock` guard's record after its line decides nothing: the kernel
//!   does; it is rewritten by the next holder); a `shm` file is a fixed
//!   4 KiB mapped alone, so bytes after it are ignored too (the lock it
//!   holds is held); and a queue is a log whose torn last line is skipped:
//!   a grant cut off is no grant, so the request it was for waits at the
//!   head;
//! * the largest fence: no greater one is left, so nobody acquires
//!   (`Corrupt(GuardState)`, for a lease, queue or `shm` file
//!   `Corrupt(Record)`), and the stale lock is not broken for nothing;
//!   `inspect` shows the fence and an operator can still break the lock.
//!
//! `flock` cannot be broken (`Unsupported`): the kernel lock lasts exactly
//! as long as its holder's descriptor.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::files::{helper_names, tree, tree_changes, wait_or_kill, Tree};
use common::*;
use lockcore::internals::{parse_lock_file, GuardState, LeaseState, Line, LockFileContent, Stamp, GUARD_RECORD_LEN};
use lockcore::{Error, Lock, Record};

/// How long a fifo case may run before its child is killed as hung.
const FIFO_DEADLINE: Duration = Duration::from_secs(20);
const QUERY: &str = "ttl=1h";
/// Older than the TTL of [`QUERY`].
const LONG_AGO: Duration = Duration::from_secs(2 * 3600);

const VICTIM: &str = "victim.txt";
const VICTIM_DIR: &str = "victim-dir";
const NOWHERE: &str = "never-created";
/// A name of the helper pattern that the library draws with a chance of 2^-128.
const HELPER_SUFFIX: &str = ".0123456789abcdef0123456789abcdef";
const GARBAGE: &[u8] = b"\x00\xff\xfe garbage \x01\x02\n\x00\n\xc3\x28 more\n";
const MEBIBYTE: usize = 1 << 20;

#[test]
fn child_entry() {
    child_main(run_role);
}

fn run_role(role: &str) {
    match role {
        "probe" => {
            let expected = Expected {
                acquire: leak(var("ACQUIRE")),
                inspect: leak(var("INSPECT")),
                break_lock: leak(var("BREAK")),
                kept: false,
                largest_fence: var("LARGEST_FENCE") == "1",
            };
            if let Err(why) = probe(&var("SPEC"), &expected) {
                panic!("{}: {why}", var("CASE"));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Where something is planted: one of the lock's own paths, or a name of
/// the helper pattern beside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spot {
    Lock,
    Guard,
    LockHelper,
    GuardHelper,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thing {
    Garbage,
    Mebibyte,
    Fifo,
    LinkToVictim,
    LinkToVictimDir,
    DanglingLink,
    /// A directory holding a stale record of ours as `owner` and a file of
    /// its own.
    Directory,
}

const THINGS: [Thing; 7] = [
    Thing::Garbage,
    Thing::Mebibyte,
    Thing::Fifo,
    Thing::LinkToVictim,
    Thing::LinkToVictimDir,
    Thing::DanglingLink,
    Thing::Directory,
];

/// How a record of ours is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// Cut to its first 20 bytes: inside the first line of every format.
    Head,
    /// Without its last byte.
    Tail,
    /// 1 MiB of data appended (4000 bytes to a symlink's target).
    Padded,
}

/// How the active slot of a `shm` lock's file is damaged, the file
/// otherwise whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotDamage {
    /// [`GARBAGE`] over the start of its lease line.
    Garbage,
    /// Its lease line cut after 20 bytes, zeros after them, as a write
    /// that never finished would leave a slot it was the first to fill.
    Torn,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Planted {
        thing: Thing,
        spot: Spot,
        aged: bool,
    },
    ParentIsAFile,
    /// `file` is `Spot::Lock` (the record at the lock path) or `Spot::Guard`.
    Damaged {
        file: Spot,
        damage: Damage,
        aged: bool,
    },
    /// The active slot of a `shm` lock's file, held by a process
    /// elsewhere, damaged.
    ShmSlot(SlotDamage),
    LargestFence,
}

impl Case {
    fn name(&self) -> String {
        match self {
            Case::Planted { thing, spot, aged } => {
                format!("{thing:?} at {spot:?}{}", if *aged { ", older than the TTL" } else { "" })
            }
            Case::ParentIsAFile => "a file where the lock's directory belongs".to_owned(),
            Case::Damaged { file, damage, aged } => {
                format!("{file:?} record {damage:?}{}", if *aged { ", older than the TTL" } else { "" })
            }
            Case::ShmSlot(damage) => format!("shm active slot {damage:?}"),
            Case::LargestFence => "the largest fence".to_owned(),
        }
    }

    fn has_fifo(&self) -> bool {
        matches!(self, Case::Planted { thing: Thing::Fifo, .. })
    }
}

/// Every case for `scheme`, from the files its lock has.
fn cases(scheme: Scheme) -> Vec<Case> {
    let has_guard = scheme.guard_path(Path::new("/x")).is_some();
    let mut spots = vec![Spot::Lock, Spot::LockHelper];
    if has_guard {
        spots.extend([Spot::Guard, Spot::GuardHelper]);
    }
    let mut cases = Vec::new();
    for spot in spots {
        for thing in THINGS {
            cases.push(Case::Planted { thing, spot, aged: false });
            if spot == Spot::Lock {
                cases.push(Case::Planted { thing, spot, aged: true });
            }
        }
    }
    cases.push(Case::ParentIsAFile);
    for file in record_files(scheme) {
        for damage in [Damage::Head, Damage::Tail, Damage::Padded] {
            cases.push(Case::Damaged { file, damage, aged: false });
        }
        cases.push(Case::Damaged { file, damage: Damage::Head, aged: true });
    }
    if scheme == Scheme::Shm {
        cases.extend([Case::ShmSlot(SlotDamage::Garbage), Case::ShmSlot(SlotDamage::Torn)]);
    }
    cases.push(Case::LargestFence);
    cases
}

/// The spots whose files hold a record once the lock is held: found by
/// taking it in a scratch directory and looking (`flock`'s target, for
/// one, is the caller's file and holds none).
fn record_files(scheme: Scheme) -> Vec<Spot> {
    let scratch = TestDir::new(&format!("hostile-scratch-{}", scheme.name()));
    leave_lock(&scheme.spec(scratch.path(), ""), elsewhere());
    let mut spots = Vec::new();
    for (spot, path) in
        [(Spot::Lock, Some(scheme.lock_path(scratch.path()))), (Spot::Guard, scheme.guard_path(scratch.path()))]
    {
        let Some(path) = path else { continue };
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() || meta.is_symlink() || meta.len() > 0 {
            spots.push(spot);
        }
    }
    spots
}

// ---------------------------------------------------------------------------
// The decisions
// ---------------------------------------------------------------------------

/// What a case must come to.
#[derive(Clone, Copy, Debug)]
struct Expected {
    /// `try_acquire`: `Ok` or the error's kind.
    acquire: &'static str,
    /// `inspect` after it.
    inspect: &'static str,
    /// `break_lock` after that: `Ok(true)`, `Ok(false)` or the error's kind.
    break_lock: &'static str,
    /// Whether what was planted or damaged must be left exactly as it is.
    kept: bool,
    /// Whether `inspect` must show the largest fence.
    largest_fence: bool,
}

const fn refused(kind: &'static str) -> Expected {
    Expected { acquire: kind, inspect: kind, break_lock: kind, kept: true, largest_fence: false }
}

/// Refused until an operator breaks it (or it ages out).
const fn broken_only_by_hand(kind: &'static str) -> Expected {
    Expected { acquire: kind, inspect: kind, break_lock: "Ok(true)", kept: false, largest_fence: false }
}

/// Taken and released; nothing held afterwards, so a break finds nothing.
const TAKEN: Expected =
    Expected { acquire: "Ok", inspect: "Ok", break_lock: "Ok(false)", kept: true, largest_fence: false };

/// The decisions table (see the module's documentation for the reasons).
fn decide(scheme: Scheme, case: Case) -> Expected {
    use Scheme::*;
    let link_or = |thing: Thing, other: &'static str| match thing {
        Thing::LinkToVictim | Thing::LinkToVictimDir | Thing::DanglingLink => "Symlink",
        _ => other,
    };
    let decided = match case {
        Case::Planted { spot: Spot::LockHelper | Spot::GuardHelper, .. } => TAKEN,
        Case::Planted { thing, spot: Spot::Guard, .. } => refused(link_or(thing, "NotALock")),
        Case::Planted { thing, spot: Spot::Lock, .. } => match (scheme, thing) {
            // flock(1) locks whatever file or directory it is given.
            (Flock, Thing::Garbage | Thing::Mebibyte | Thing::Directory) => TAKEN,
            // A link to a path is no peer's lock.
            (Symlink, Thing::LinkToVictim | Thing::LinkToVictimDir | Thing::DanglingLink) => refused("NotALock"),
            _ => refused(link_or(thing, "NotALock")),
        },
        Case::ParentIsAFile => refused("NotADirectory"),
        Case::Damaged { file: Spot::Guard, damage, .. } => match (scheme, damage) {
            // Only the record after the guard line is hurt: it decides
            // nothing, and the next holder writes its own.
            (Flock, Damage::Tail | Damage::Padded) => Expected { kept: false, ..TAKEN },
            // A guard line followed by anything: the line is read alone.
            // The lock it guards is held (by a process elsewhere, no TTL).
            (_, Damage::Padded) => Expected { acquire: "Busy", break_lock: "Ok(true)", kept: false, ..TAKEN },
            _ => refused("Corrupt(GuardState)"),
        },
        Case::Damaged { damage, aged, .. } => match (scheme, damage) {
            // The 4 KiB the library maps are whole, and hold the lock of a
            // process elsewhere (no TTL); what follows them is never read.
            (Shm, Damage::Padded) => Expected { acquire: "Busy", break_lock: "Ok(true)", kept: false, ..TAKEN },
            // Cut short: refused before it is mapped, and left as it is.
            (Shm, Damage::Head | Damage::Tail) => refused("Corrupt(Record)"),
            (Lease | Toplock, Damage::Padded) => refused("Corrupt(RecordTooLong)"),
            (Lease, _) | (Toplock, Damage::Head) => refused("Corrupt(Record)"),
            // The torn grant is no grant: the request waits at the head,
            // where an operator can break it.
            (Toplock, Damage::Tail) => Expected { acquire: "Busy", break_lock: "Ok(true)", kept: false, ..TAKEN },
            _ if aged => Expected { kept: false, ..TAKEN },
            (Lockfile | Mkdir, Damage::Padded) => broken_only_by_hand("Corrupt(RecordTooLong)"),
            _ => broken_only_by_hand("Corrupt(Record)"),
        },
        // A file of its format, whose state does not parse.
        Case::ShmSlot(_) => refused("Corrupt(Record)"),
        Case::LargestFence => {
            let acquire =
                if matches!(scheme, Lease | Toplock | Shm) { "Corrupt(Record)" } else { "Corrupt(GuardState)" };
            Expected { acquire, inspect: "Ok", break_lock: "Ok(true)", kept: false, largest_fence: true }
        }
    };
    if scheme.breaks_stale_locks() {
        decided
    } else {
        Expected { break_lock: "Unsupported", ..decided }
    }
}

// ---------------------------------------------------------------------------
// Planting and damaging
// ---------------------------------------------------------------------------

fn spot_path(scheme: Scheme, d: &Path, spot: Spot) -> PathBuf {
    let guard = || scheme.guard_path(d).expect("a case at the guard of a scheme that keeps one");
    match spot {
        Spot::Lock => scheme.lock_path(d),
        Spot::Guard => guard(),
        Spot::LockHelper => with_suffix(&scheme.lock_path(d), HELPER_SUFFIX),
        Spot::GuardHelper => with_suffix(&guard(), HELPER_SUFFIX),
    }
}

/// A process on another host: alive as far as anyone here can tell.
fn elsewhere() -> lockcore::Owner {
    let mut owner = owner_as(4242, 1);
    owner.host = lockcore::HostName::from_bytes(b"elsewhere").unwrap();
    owner
}

/// A process of this host and boot that is provably gone: our pid with
/// another start time.
fn dead() -> lockcore::Owner {
    owner_as(std::process::id() as i32, 1)
}

fn mebibyte() -> Vec<u8> {
    let line = b"some data, as a program keeps it\n";
    line.iter().copied().cycle().take(MEBIBYTE).collect()
}

fn symlink(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

fn plant(thing: Thing, at: &Path, d: &Path) {
    match thing {
        Thing::Garbage => fs::write(at, GARBAGE).unwrap(),
        Thing::Mebibyte => fs::write(at, mebibyte()).unwrap(),
        Thing::Fifo => mkfifo(at),
        Thing::LinkToVictim => symlink(&d.join(VICTIM), at),
        Thing::LinkToVictimDir => symlink(&d.join(VICTIM_DIR), at),
        Thing::DanglingLink => symlink(&d.join(NOWHERE), at),
        Thing::Directory => {
            fs::create_dir(at).unwrap();
            let stale = forged_record(std::process::id() as i32, 1, None, 9, Some(ago(Duration::from_secs(3600))));
            fs::write(at.join("owner"), stale).unwrap();
            fs::write(at.join("notes.txt"), b"keep me\n").unwrap();
        }
    }
}

/// Rewrites a file in place (same inode), whatever its mode.
fn rewrite(path: &Path, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(path).unwrap().permissions();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, mode).unwrap();
}

/// Replaces a symlink's target, keeping its mtime (a `symlink` lock's expiry).
fn relink(path: &Path, target: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let mtime = fs::symlink_metadata(path).unwrap().modified().unwrap();
    fs::remove_file(path).unwrap();
    symlink(Path::new(std::ffi::OsStr::from_bytes(target)), path);
    set_mtime(path, mtime);
}

/// Changes the record at `path` (a file, a link, or the `owner` file of a
/// lock directory) with `change`; returns the path that was changed.
fn change_record(path: &Path, change: impl Fn(&[u8]) -> Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let meta = fs::symlink_metadata(path).unwrap();
    if meta.is_symlink() {
        let target = fs::read_link(path).unwrap();
        relink(path, &change(target.as_os_str().as_bytes()));
        path.to_owned()
    } else if meta.is_dir() {
        change_record(&path.join("owner"), change)
    } else {
        rewrite(path, &change(&fs::read(path).unwrap()));
        path.to_owned()
    }
}

fn damage(bytes: &[u8], how: Damage, link: bool) -> Vec<u8> {
    match how {
        Damage::Head => bytes[..20.min(bytes.len())].to_vec(),
        Damage::Tail => bytes[..bytes.len() - 1].to_vec(),
        Damage::Padded => {
            let mut out = bytes.to_vec();
            out.resize(if link { 4000 } else { MEBIBYTE }, b'x');
            out
        }
    }
}

/// Every fence in a lock's file made `u64::MAX`, by the library's own
/// parsers and encoders for whichever of its formats the bytes are in.
fn with_largest_fence(bytes: &[u8]) -> Vec<u8> {
    const MAX: u64 = u64::MAX;
    let max_record = |mut record: Record| {
        record.fence = MAX;
        record
    };
    if shm_lock::is_shm_file(bytes) {
        // The lease in its active slot.
        return match shm_lock::state(bytes) {
            LeaseState::Held(record) => shm_lock::with_state(bytes, &LeaseState::Held(max_record(record))),
            free => panic!("a shm lock left held is free: {free:?}"),
        };
    }
    if bytes.len() >= GUARD_RECORD_LEN {
        if let Ok(mut state) = GuardState::parse(&bytes[..GUARD_RECORD_LEN], lockcore::FileRole::Guard) {
            // A guard line, and for flock the holder's record after it.
            state.fence = MAX;
            let mut out = state.encode().as_bytes().to_vec();
            let rest = &bytes[GUARD_RECORD_LEN..];
            match rest.strip_suffix(b"\n").and_then(Record::parse_line) {
                Some(Ok(record)) => {
                    out.extend_from_slice(max_record(record).encode_line().as_bytes());
                    out.push(b'\n');
                }
                _ => out.extend_from_slice(rest),
            }
            return out;
        }
    }
    if let Ok(LockFileContent::Ours(record)) = parse_lock_file(bytes) {
        return max_record(record).encode_lock_file(Stamp::Pid).as_bytes().to_vec();
    }
    if let Some(Ok(record)) = Record::parse_line(bytes) {
        return max_record(record).encode_line().as_bytes().to_vec();
    }
    if let Ok(LeaseState::Held(record)) = LeaseState::parse(bytes) {
        return LeaseState::Held(max_record(record)).encode().as_bytes().to_vec();
    }
    if bytes.starts_with(b"H ") {
        // A queue: every grant's fence.
        let mut out = Vec::new();
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            match Line::parse(line.strip_suffix(b"\n").unwrap_or(line)) {
                Some(Line::Grant { nonce, until, t, .. }) => {
                    out.extend_from_slice(Line::Grant { nonce, until, t, fence: MAX }.encode().as_bytes())
                }
                _ => out.extend_from_slice(line),
            }
        }
        return out;
    }
    panic!("no format of the library's: {:?}", String::from_utf8_lossy(bytes));
}

/// Sets up `case` in `d`; returns the spec to probe and the path whose
/// content must be kept (what was planted or damaged).
fn set_up(scheme: Scheme, d: &Path, case: Case) -> (String, PathBuf) {
    match case {
        Case::Planted { thing, spot, aged } => {
            let at = spot_path(scheme, d, spot);
            plant(thing, &at, d);
            if aged {
                set_mtime(&at, ago(LONG_AGO));
            }
            (scheme.spec(d, QUERY), at)
        }
        Case::ParentIsAFile => {
            let file = d.join("not-a-directory");
            fs::write(&file, b"a file\n").unwrap();
            (scheme.spec(&file, QUERY), file)
        }
        Case::Damaged { file, damage: how, aged } => {
            leave_lock(&scheme.spec(d, ""), elsewhere());
            let at = spot_path(scheme, d, file);
            let link = fs::symlink_metadata(&at).unwrap().is_symlink();
            let changed = change_record(&at, |bytes| damage(bytes, how, link));
            if aged {
                set_mtime(&changed, ago(LONG_AGO));
                set_mtime(&at, ago(LONG_AGO));
            }
            (scheme.spec(d, QUERY), at)
        }
        Case::ShmSlot(how) => {
            leave_lock(&scheme.spec(d, ""), elsewhere());
            let at = scheme.lock_path(d);
            let mut bytes = fs::read(&at).unwrap();
            let slot = shm_lock::active_slot(&bytes);
            match how {
                SlotDamage::Garbage => bytes[slot.start..slot.start + GARBAGE.len()].copy_from_slice(GARBAGE),
                SlotDamage::Torn => bytes[slot.start + 20..slot.end].fill(0),
            }
            rewrite(&at, &bytes);
            (scheme.spec(d, QUERY), at)
        }
        Case::LargestFence => {
            leave_lock(&scheme.spec(d, ""), dead());
            for at in [Some(scheme.lock_path(d)), scheme.guard_path(d)].into_iter().flatten() {
                let meta = fs::symlink_metadata(&at).unwrap();
                if meta.is_dir() || meta.is_symlink() || meta.len() > 0 {
                    change_record(&at, with_largest_fence);
                }
            }
            (scheme.spec(d, QUERY), scheme.state_path(d))
        }
    }
}

// ---------------------------------------------------------------------------
// Probing
// ---------------------------------------------------------------------------

fn kind_text(error: &Error) -> String {
    format!("{:?}", error.kind())
}

/// Runs the operations and compares each outcome with `expected`.
fn probe(spec: &str, expected: &Expected) -> Result<(), String> {
    let mut lock = Lock::open(spec.as_bytes()).map_err(|e| format!("open {spec}: {e}"))?;
    let mut wrong = Vec::new();
    let acquired = match lock.try_acquire() {
        Ok(_) => {
            if let Err(e) = lock.release(Duration::ZERO) {
                wrong.push(format!("release after acquiring: {e:?}"));
            }
            "Ok".to_owned()
        }
        Err(e) => kind_text(&e),
    };
    if acquired != expected.acquire {
        wrong.push(format!("try_acquire: {acquired}, expected {}", expected.acquire));
    }
    let inspected = match lock.inspect() {
        Ok(info) => {
            if expected.largest_fence && info.last_fence != u64::MAX {
                wrong.push(format!("inspect shows fence {}, expected the largest", info.last_fence));
            }
            "Ok".to_owned()
        }
        Err(e) => kind_text(&e),
    };
    if inspected != expected.inspect {
        wrong.push(format!("inspect: {inspected}, expected {}", expected.inspect));
    }
    let broken = match lock.break_lock() {
        Ok(was_held) => format!("Ok({was_held})"),
        Err(e) => kind_text(&e),
    };
    if broken != expected.break_lock {
        wrong.push(format!("break_lock: {broken}, expected {}", expected.break_lock));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// Runs the probe in a child, killed if it hangs.
fn probe_in_child(spec: &str, expected: &Expected, case: &str) -> Result<(), String> {
    let mut child = spawn(
        "probe",
        &[
            ("SPEC", spec.to_owned()),
            ("CASE", case.to_owned()),
            ("ACQUIRE", expected.acquire.to_owned()),
            ("INSPECT", expected.inspect.to_owned()),
            ("BREAK", expected.break_lock.to_owned()),
            ("LARGEST_FENCE", if expected.largest_fence { "1" } else { "0" }.to_owned()),
        ],
    );
    let status = wait_or_kill(&mut child, FIFO_DEADLINE)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the probe failed ({status}); see its message above"))
    }
}

fn victims(d: &Path) -> [Tree; 2] {
    [tree(&d.join(VICTIM)), tree(&d.join(VICTIM_DIR))]
}

/// Runs one case in a fresh directory `d`.
fn run_case(scheme: Scheme, d: &Path, case: Case) -> Result<(), String> {
    fs::create_dir(d).unwrap();
    fs::write(d.join(VICTIM), b"precious data\n").unwrap();
    fs::create_dir(d.join(VICTIM_DIR)).unwrap();
    fs::write(d.join(VICTIM_DIR).join("owner"), b"precious record\n").unwrap();
    let (spec, kept_path) = set_up(scheme, d, case);
    let expected = decide(scheme, case);
    let victims_before = victims(d);
    // What the probe takes from a whole `shm` file it maps: its section word, and
    // with it the mtime. The rest of the file must be kept.
    let kept_tree = |path: &Path| match case {
        Case::ShmSlot(_) => shm_lock::lease_only(tree(path)),
        _ => tree(path),
    };
    let kept_before = kept_tree(&kept_path);
    let lock_name = scheme.lock_path(d).file_name().unwrap().to_str().unwrap().to_owned();
    let guard_name = scheme.guard_path(d).map(|g| g.file_name().unwrap().to_str().unwrap().to_owned());
    let helpers = |dir: &Path| {
        let mut names = helper_names(dir, &lock_name);
        if let Some(guard) = &guard_name {
            names.extend(helper_names(dir, guard));
        }
        names
    };
    let helpers_before = helpers(d);

    let outcome = if case.has_fifo() {
        probe_in_child(&spec, &expected, &case.name())
    } else {
        std::panic::catch_unwind(|| probe(&spec, &expected)).unwrap_or_else(|_| Err("panicked".to_owned()))
    };
    let mut wrong: Vec<String> = outcome.err().into_iter().collect();
    if let Some(change) = victims_before.iter().zip(victims(d)).find_map(|(before, after)| tree_changes(before, &after))
    {
        wrong.push(format!("a victim was touched: {change}"));
    }
    if d.join(NOWHERE).exists() {
        wrong.push("a dangling symlink was followed".to_owned());
    }
    if expected.kept {
        if let Some(change) = tree_changes(&kept_before, &kept_tree(&kept_path)) {
            wrong.push(format!("{} was not left alone: {change}", kept_path.display()));
        }
    }
    let leaked: Vec<String> = helpers(d).into_iter().filter(|n| !helpers_before.contains(n)).collect();
    if !leaked.is_empty() {
        wrong.push(format!("helper files left behind: {leaked:?}"));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[test]
fn hostile_and_damaged_files_on_every_scheme() {
    each_file_scheme("hostile", |scheme, dir| {
        let mut failures = Vec::new();
        for (i, case) in cases(scheme).into_iter().enumerate() {
            if let Err(why) = run_case(scheme, &dir.join(&format!("case{i}")), case) {
                failures.push(format!("case{i} {}: {why}", case.name()));
            }
        }
        assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
    });
}

/// A `flock` holder's own record, written after by another user of a shared
/// lock while it holds it: the kernel lock says who holds the lock, so
/// prolong, commit and release go on, by the expiry the holder knows, and
/// the holder's write puts the guard whole again for the next one.
#[test]
fn a_flock_holder_whose_record_is_scribbled_on_still_lets_go() {
    use lockcore::{CommitOutcome, ProlongOutcome, ReleaseOutcome};
    use std::io::Write;
    let dir = TestDir::new("flock-scribbled");
    let spec = Scheme::Flock.spec(dir.path(), QUERY);
    let guard = Scheme::Flock.guard_path(dir.path()).expect("flock keeps a guard");
    let mut lock = open_lock(&spec);
    lock.try_acquire().unwrap();
    let scribble = || fs::OpenOptions::new().append(true).open(&guard).unwrap().write_all(b"x").unwrap();
    scribble();
    assert!(matches!(open_lock(&spec).inspect(), Err(ref e) if kind_text(e).contains("Corrupt")));
    assert_eq!(lock.prolong(None).unwrap(), ProlongOutcome::Prolonged);
    scribble();
    assert_eq!(lock.run_while_held(&mut || Ok(())).unwrap(), CommitOutcome::Committed);
    scribble();
    assert_eq!(lock.release(Duration::ZERO).unwrap(), ReleaseOutcome::Released);
    let mut next = open_lock(&spec);
    next.try_acquire().unwrap();
    assert!(next.inspect().unwrap().holder.is_some_and(|holder| holder.this_handle), "the guard is whole again");
    assert_eq!(next.release(Duration::ZERO).unwrap(), ReleaseOutcome::Released);
}

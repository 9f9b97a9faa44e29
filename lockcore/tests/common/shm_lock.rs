//! A `shm` lock's file as the tests see it from outside the library: where
//! its state lies, how to read and forge that state with the library's own
//! lease encoder, what of the file changes whenever anyone merely takes its
//! section word, and how a test holds that word as another process's
//! change would.
//!
//! The file is 4 KiB, made complete by the library and changed in place
//! through a shared mapping:
//!
//! ```text
//! 0     shm 3 lockcore: ...\n   what the file is
//! 64    u64 section word         its holder's pid in the low half, its tag in
//!                                the high half: orders every change
//! 128   u32 active slot (0 or 1)
//! 256   slot 0, 640 slot 1       a lease line each, as `lease` writes it
//! ```
//!
//! A holder's tag is a byte past the file's end, from [`SHM_TAG_BYTES_AT`]
//! on, that it holds locked (an open-file-description lock) for as long as
//! it lives: the library takes the word only from a holder whose byte
//! nobody holds.
//!
//! The lock's state is the lease line in the active slot. Only the section
//! word's offset and the tags' place come from the library; the rest is this
//! layout, written down here so that the tests check the library against
//! it rather than against itself.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;

use lockcore::internals::{LeaseState, LEASE_RECORD_LEN, SHM_SECTION_AT, SHM_TAG_BYTES_AT};

use super::files::Tree;
use super::{open_lock, Scheme, SchemeFiles, TestDir};

/// Every `shm` lock file is exactly this long.
pub const FILE_LEN: usize = 4096;
/// How the file starts: its kind and version.
pub const MARKER: &[u8] = b"shm 3 ";
/// The bytes that change when anyone takes the section word: from its
/// offset to the active index.
const SECTION: std::ops::Range<usize> = SHM_SECTION_AT..ACTIVE_AT;
/// The index (0 or 1) of the slot that holds the state.
const ACTIVE_AT: usize = 128;
/// Where each slot's lease line starts.
const SLOTS_AT: [usize; 2] = [256, 640];

const _: () = assert!(
    SHM_SECTION_AT + 32 <= ACTIVE_AT
        && SLOTS_AT[0] + LEASE_RECORD_LEN <= SLOTS_AT[1]
        && SLOTS_AT[1] + LEASE_RECORD_LEN <= FILE_LEN
);

/// Whether `bytes` are a whole `shm` lock file, by its length and marker.
pub fn is_shm_file(bytes: &[u8]) -> bool {
    bytes.len() == FILE_LEN && bytes.starts_with(MARKER)
}

/// Where the lease line of the active slot lies in a file the library made.
pub fn active_slot(bytes: &[u8]) -> std::ops::Range<usize> {
    assert!(is_shm_file(bytes), "not a shm lock file: {} bytes", bytes.len());
    let index = u32::from_ne_bytes(bytes[ACTIVE_AT..ACTIVE_AT + 4].try_into().unwrap());
    assert!(index < 2, "active slot {index}: the library writes only 0 or 1");
    SLOTS_AT[index as usize]..SLOTS_AT[index as usize] + LEASE_RECORD_LEN
}

/// The lock's state: the lease in the active slot.
pub fn state(bytes: &[u8]) -> LeaseState {
    let line = &bytes[active_slot(bytes)];
    LeaseState::parse(line).unwrap_or_else(|e| panic!("the active slot {:?}: {e}", String::from_utf8_lossy(line)))
}

/// `bytes` with `state` written over the active slot, as a forger leaves
/// the file: whatever else it holds (the section word, the other slot) is kept.
pub fn with_state(bytes: &[u8], state: &LeaseState) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[active_slot(bytes)].copy_from_slice(state.encode().as_bytes());
    out
}

/// A new lock file as the library makes it (free, no fence handed out):
/// made by the library itself in a scratch directory, so that every byte
/// is the library's own.
pub fn new_file() -> Vec<u8> {
    let scratch = TestDir::new("shm-new-file");
    open_lock(&Scheme::Shm.spec(scratch.path(), "")).inspect().expect("a new shm lock");
    std::fs::read(Scheme::Shm.lock_path(scratch.path())).unwrap()
}

/// Writes a new lock file holding `state` at `path`, with the owner-only
/// bits the library gives it (a file others may write is refused before it
/// is read).
pub fn forge(path: &Path, state: &LeaseState) {
    std::fs::write(path, with_state(&new_file(), state)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `bytes`, and if they are a `shm` lock file, without its section word:
/// whoever takes the word writes it, and a waiter sets its sleeping bit,
/// whether or not the lock changes. Any other file's bytes are kept whole.
pub fn without_section(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if is_shm_file(bytes) {
        out[SECTION].fill(0);
    }
    out
}

/// A picture of files without what taking a `shm` lock's section word
/// changes in a file of that format: the word's bytes, and the mtime, which the
/// kernel moves on a write through a mapping as on any other. The lease,
/// the active index and the header are what must not change.
pub fn lease_only(mut files: Tree) -> Tree {
    for entry in files.values_mut().filter(|entry| is_shm_file(&entry.content)) {
        entry.content = without_section(&entry.content);
        entry.mtime = (0, 0);
    }
    files
}

/// The section word in a `shm` lock's file, mapped as the library maps it,
/// for a test that holds it the way another process's change does: taken
/// under a tag whose byte this process holds locked (the library then
/// waits for it, this process being alive, until its deadline), let go as
/// the library lets it go, waking the sleepers.
pub struct SectionWord {
    word: *const std::sync::atomic::AtomicU64,
    /// The description that holds the tag's byte while the word is held.
    file: std::fs::File,
}

/// The bit of the word's low half that says someone sleeps on it.
const SLEEPING: u64 = 1 << 31;

/// This process's tag: the top bit set, as in every tag the library draws.
fn own_tag() -> u64 {
    u64::from(std::process::id() | 1 << 31)
}

/// `F_OFD_SETLK` of the byte of this process's tag, `l_type` (F_WRLCK or
/// F_UNLCK).
fn set_tag_lock(file: &std::fs::File, l_type: i32) {
    // SAFETY: flock is plain data; all-zero is valid (l_pid must be 0).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = l_type as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = (SHM_TAG_BYTES_AT + own_tag()) as libc::off_t;
    lock.l_len = 1;
    // SAFETY: a descriptor we own and a valid flock struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    assert_eq!(rc, 0, "F_OFD_SETLK of the tag's byte: {}", std::io::Error::last_os_error());
}

impl SectionWord {
    /// Maps the file of the `shm` lock at `path`, which the library made.
    pub fn of(path: &Path) -> SectionWord {
        let file = OpenOptions::new().read(true).write(true).open(path).unwrap();
        // SAFETY: a fresh shared mapping at an address the kernel chooses,
        // of a file the library made FILE_LEN long; never unmapped (4 KiB
        // per use, for a test's life).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap {}: {}", path.display(), std::io::Error::last_os_error());
        // SAFETY: the word's offset lies inside the mapping, 8-aligned (the
        // library asserts both where it makes the file).
        SectionWord { word: unsafe { base.cast::<u8>().add(SHM_SECTION_AT) }.cast(), file }
    }

    fn word(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: inside the live mapping, reached only through atomics.
        unsafe { &*self.word }
    }

    /// Takes the word as this process, waiting as long as it takes.
    pub fn take(&self) {
        set_tag_lock(&self.file, libc::F_WRLCK);
        let mine = (own_tag() << 32) | u64::from(std::process::id());
        let give_up = std::time::Instant::now() + super::PATIENCE;
        while self.word().compare_exchange(0, mine, SeqCst, SeqCst).is_err() {
            assert!(std::time::Instant::now() < give_up, "the section word was never free");
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// Lets the word go, waking whoever sleeps on it.
    pub fn release(&self) {
        if self.word().swap(0, SeqCst) & SLEEPING != 0 {
            // SAFETY: FUTEX_WAKE on the word's low half (the pid and the
            // sleeping bit, little-endian), inside the live mapping.
            unsafe { libc::syscall(libc::SYS_futex, self.word.cast::<u32>(), libc::FUTEX_WAKE, i32::MAX) };
        }
        set_tag_lock(&self.file, libc::F_UNLCK);
    }
}

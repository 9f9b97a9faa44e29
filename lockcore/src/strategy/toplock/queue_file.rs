//! How a `toplock` queue file is read, appended to and compacted.
//!
//! Readers hold a shared lock on the file, appenders and the compactor an
//! exclusive one (open-file-description locks), every wait ending by the
//! caller's deadline, and all check that the path still names their file, so no
//! line goes to a file that is being replaced. Every line is appended in
//! one `write` to a file opened with `O_APPEND`. An append first checks,
//! under the exclusive lock, that it leaves the file within
//! [`QUEUE_CAPACITY`], compacting first if not; a new request is admitted
//! only while the queue, compacted, would leave [`RESERVE`] free, so that
//! those already queued can always write their grants, releases and
//! skips. When the file grows past [`COMPACT_AT`], whoever reads it next
//! rewrites it: the header carries the replay state, then each pending
//! request, so no waiter loses its place or its fence.
//!
//! A queue is made complete, header first, before it appears; a file at
//! the queue's path whose first line is no header is not a queue and is
//! never written. A queue written on another boot names only processes
//! that are gone, on a boot clock that has started again: the first
//! process of this boot to change it starts it afresh, keeping only its
//! last fence.

use crate::clock::{BootTime, WallTime};
use crate::error::{Contention, CorruptKind, Error, FileError, FileRole};
use crate::files;
use crate::guard::{GuardFile, LockedFile};
use crate::strategy::toplock::line::{Header, Line, LINE_CAPACITY};
use crate::strategy::toplock::replay::{Replay, Unreadable};
use crate::strategy::Context;
use crate::sys::{self, CPath, OfdLock};
use crate::text::FixedText;
use crate::trust::Sharing;

/// The largest queue file replayed.
pub const QUEUE_CAPACITY: usize = 16 * 1024;
/// Room kept free of requests: one grant that compaction will carry, one
/// line of any kind, and slack for the header's numbers to grow.
pub const RESERVE: usize = 4 * LINE_CAPACITY;
/// Whoever reads the file compacts it once it is this long (and compaction
/// would halve it).
pub const COMPACT_AT: usize = 2 * 1024;

/// A queue file and what was last read of it.
pub struct QueueFile {
    file: GuardFile,
    sharing: Sharing,
    /// The kernel's boot id, read once: what a new queue's header names.
    kernel_boot: Option<crate::clock::BootId>,
    /// What the last load, append of a request or exclusive section read.
    pub log: Log,
}

/// The bytes last read of a queue file, and their replay.
pub struct Log {
    bytes: [u8; QUEUE_CAPACITY],
    len: usize,
    /// Their replay, as of `now`.
    pub replay: Replay,
    /// The time of the last read, on the log's clock (boot-clock
    /// nanoseconds, never behind a time written in the log).
    pub now: i64,
    /// The wall clock read right beside `now`: what turns a time of the
    /// log into a wall time without counting the replay in between.
    pub wall: WallTime,
}

impl core::fmt::Debug for QueueFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueueFile").field("path", self.file.path()).field("log", &self.log).finish()
    }
}

impl core::fmt::Debug for Log {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Log").field("len", &self.len).field("pending", &self.replay.pending_count()).finish()
    }
}

impl Log {
    /// The bytes last read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Reads the whole file and replays it; `Ok(true)` when it was written
    /// on this boot.
    fn read(&mut self, file: &LockedFile<'_>, cx: &Context<'_>) -> Result<bool, Error> {
        let n = file.read(&mut self.bytes)?;
        if n == QUEUE_CAPACITY {
            // Compaction keeps the file far below this; only a hostile or
            // damaged file gets here. Without a header first it is no queue
            // at all (a data file), as the replay would say of a short one.
            return Err(if self.bytes.starts_with(b"H ") {
                Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong)
            } else {
                Error::not_a_lock(FileRole::Lock)
            });
        }
        self.len = n;
        let reader_now = BootTime::now().nanos();
        self.wall = WallTime::now();
        self.replay.run(&self.bytes[..n], reader_now).map_err(unreadable)?;
        self.now = self.replay.now(reader_now);
        let header = self.replay.header;
        if header.boot == cx.me.boot {
            return Ok(true);
        }
        // Another clock on this very boot: a process in another time
        // namespace wrote it. Its times cannot be read here, nor its
        // requests passed over as those of an earlier boot.
        if header.kernel_boot.is_some() && header.kernel_boot == crate::clock::BootId::kernel() {
            return Err(Error::Unsupported(crate::error::Unsupported::Here(
                "a toplock queue shared with processes of another time namespace",
            )));
        }
        Ok(false)
    }

    /// Whether a request line of `line_len` bytes may join the queue: the
    /// table has a slot for it, and the compacted queue with it still leaves
    /// [`RESERVE`] free.
    fn admits(&self, line_len: usize) -> bool {
        self.replay.pending_count() + 1 < super::replay::MAX_REQUESTS
            && self.replay.compacted_len(self.bytes()) + line_len + RESERVE <= QUEUE_CAPACITY
    }
}

impl QueueFile {
    /// The queue at `path`, opened on first use; nothing read yet.
    pub fn new(path: CPath, sharing: Sharing) -> QueueFile {
        QueueFile {
            file: GuardFile::new_append_only(path, FileRole::Lock, sharing),
            sharing,
            kernel_boot: crate::clock::BootId::kernel(),
            log: Log {
                bytes: [0; QUEUE_CAPACITY],
                len: 0,
                replay: Replay::new(),
                now: 0,
                wall: WallTime::from_unix_nanos(0),
            },
        }
    }

    /// The queue file's path.
    pub fn path(&self) -> &CPath {
        self.file.path()
    }

    /// Reads and replays the queue; compacts it first when it has grown
    /// past [`COMPACT_AT`] (failed attempts grow it too, not only releases)
    /// or was written on another boot.
    pub fn load(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        for _ in 0..2 {
            let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
            let file = self.file.lock_file(OfdLock::Shared, cx.deadline, header.as_bytes(), cx.me.boot)?;
            let this_boot = self.log.read(&file, cx)?;
            drop(file);
            if this_boot && self.log.len < COMPACT_AT {
                return Ok(());
            }
            self.compact(cx, !this_boot)?;
        }
        Ok(())
    }

    /// Appends the line `build` makes from the time read under the
    /// exclusive lock (boot-clock nanoseconds, never before the time of the
    /// log as last read), never past
    /// [`QUEUE_CAPACITY`]: a full log is compacted first (admission keeps
    /// room for this line after that).
    pub fn append(&mut self, cx: &Context<'_>, build: impl Fn(i64) -> Line) -> Result<(), Error> {
        for _ in 0..2 {
            let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
            let file = self.file.lock_file(OfdLock::Exclusive, cx.deadline, header.as_bytes(), cx.me.boot)?;
            // Only its length is needed: a grant, a release or a skip is
            // judged by the replays that read it, not by its writer.
            let size = usize::try_from(file.size()).unwrap_or(usize::MAX);
            let line = build(self.log.now.max(BootTime::now().nanos())).encode();
            if size.saturating_add(1 + line.as_bytes().len()) < QUEUE_CAPACITY {
                return append_line(&file, size, line.as_bytes());
            }
            drop(file);
            self.compact(cx, true)?;
        }
        Err(Error::Busy(Contention::QueueFull))
    }

    /// [`append`](Self::append) of a new request, if the queue admits it:
    /// decided on the log as it is under the exclusive lock, so that no
    /// other request slips in between. [`Contention::QueueFull`] when it
    /// does not: nobody's place is taken, and the caller asks again.
    pub fn append_request(&mut self, cx: &Context<'_>, build: impl Fn(i64) -> Line) -> Result<(), Error> {
        self.append_request_granting(cx, build, |_| None).map(|_| ())
    }

    /// [`append_request`](Self::append_request), and with it, in the same
    /// write, the line `grant` makes from the log as read under the same
    /// exclusive lock (`None`: no grant): a request that finds nobody queued
    /// is granted in one guard section, not three. The grant written, if
    /// any, is returned.
    pub fn append_request_granting(
        &mut self,
        cx: &Context<'_>,
        build: impl Fn(i64) -> Line,
        grant: impl Fn(&Log) -> Option<Line>,
    ) -> Result<Option<Line>, Error> {
        for _ in 0..2 {
            let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
            let file = self.file.lock_file(OfdLock::Exclusive, cx.deadline, header.as_bytes(), cx.me.boot)?;
            let this_boot = self.log.read(&file, cx)?;
            if this_boot {
                let line = build(self.log.now).encode();
                if !self.log.admits(line.as_bytes().len()) {
                    return Err(Error::Busy(Contention::QueueFull));
                }
                let granted = grant(&self.log);
                let granted_text = granted.map(|g| g.encode());
                let granted_bytes = granted_text.as_ref().map_or(&b""[..], |g| g.as_bytes());
                if self.log.len + 1 + line.as_bytes().len() + granted_bytes.len() < QUEUE_CAPACITY {
                    append_lines(&file, self.log.len, &[line.as_bytes(), granted_bytes])?;
                    if granted.is_some() {
                        // Not loaded again, as a request that waits is.
                        drop(file);
                        self.tidy(cx);
                    }
                    return Ok(granted);
                }
            }
            drop(file);
            self.compact(cx, !this_boot)?;
        }
        Err(Error::Busy(Contention::QueueFull))
    }

    /// Reads and replays the log under the exclusive lock and appends the
    /// line `decide` makes of it, if any, before letting go: a decision and
    /// the line that follows from it in one guard section, with nothing
    /// appended between them. A log due for compaction is compacted first.
    pub fn append_decided<T>(
        &mut self,
        cx: &Context<'_>,
        decide: impl Fn(&Log) -> Result<(T, Option<Line>), Error>,
    ) -> Result<T, Error> {
        for _ in 0..2 {
            let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
            let file = self.file.lock_file(OfdLock::Exclusive, cx.deadline, header.as_bytes(), cx.me.boot)?;
            let this_boot = self.log.read(&file, cx)?;
            if this_boot {
                let (answer, line) = decide(&self.log)?;
                let Some(line) = line else { return Ok(answer) };
                let line = line.encode();
                if self.log.len + 1 + line.as_bytes().len() < QUEUE_CAPACITY {
                    append_line(&file, self.log.len, line.as_bytes())?;
                    drop(file);
                    self.tidy(cx);
                    return Ok(answer);
                }
            }
            drop(file);
            self.compact(cx, true)?;
        }
        Err(Error::Busy(Contention::QueueFull))
    }

    /// After a write whose section read the log but did not load it again
    /// (which compacts a long log): compacts a log that had grown past
    /// [`COMPACT_AT`], if that would halve it. The write stands whatever
    /// this does; a compaction that cannot be made now is left to the next.
    fn tidy(&mut self, cx: &Context<'_>) {
        if self.log.len >= COMPACT_AT {
            let _ = self.compact(cx, false);
        }
    }

    /// Rewrites the log under an exclusive lock: the header with the replay
    /// state, then every pending request with its grant and fence. `force`:
    /// rewrite even a short log (an appender needs the room, or the log is
    /// of another boot, whose requests all name processes that are gone).
    fn compact(&mut self, cx: &Context<'_>, force: bool) -> Result<(), Error> {
        let path = self.file.path().clone();
        let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
        let file = self.file.lock_file(OfdLock::Exclusive, cx.deadline, header.as_bytes(), cx.me.boot)?;
        let this_boot = self.log.read(&file, cx)?;
        let bytes = self.log.bytes();
        if !force && this_boot && (bytes.len() < COMPACT_AT || 2 * self.log.replay.compacted_len(bytes) > bytes.len()) {
            return Ok(());
        }
        let mut out = Compacted { buf: [0; QUEUE_CAPACITY], len: 0 };
        if this_boot {
            self.log.replay.compacted(bytes, &mut |piece| out.push(piece))?;
        } else {
            out.push(
                Line::Header(fresh_header(cx, self.kernel_boot, self.log.replay.header.last_fence)).encode().as_bytes(),
            )?;
        }
        let helper = files::create_helper_file(&path, self.sharing.mode(), out.bytes())?;
        // Appenders wait on our exclusive lock, then see that the path names
        // a new file and append there.
        if let Err(e) = sys::rename(&helper, &path) {
            let _ = sys::unlink(&helper);
            return Err(FileError::from_errno(FileRole::Lock, &path, e));
        }
        drop(file);
        Ok(())
    }

    /// Runs `action` on the log read and replayed under the exclusive lock,
    /// which it holds throughout, so that nothing (a grant included) is
    /// appended meanwhile.
    pub fn while_exclusive<T>(
        &mut self,
        cx: &Context<'_>,
        action: impl FnOnce(&Log) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let header = Line::Header(fresh_header(cx, self.kernel_boot, 0)).encode();
        let file = self.file.lock_file(OfdLock::Exclusive, cx.deadline, header.as_bytes(), cx.me.boot)?;
        self.log.read(&file, cx)?;
        let result = action(&self.log);
        drop(file);
        result
    }
}

/// A new queue's header: on this boot, nothing pending, no cooldown, and
/// `last_fence` carried over (a queue started afresh after a reboot).
fn fresh_header(cx: &Context<'_>, kernel_boot: Option<crate::clock::BootId>, last_fence: u64) -> Header {
    Header { kernel_boot, boot: cx.me.boot, last_fence, ..Header::EMPTY }
}

fn unreadable(why: Unreadable) -> Error {
    match why {
        Unreadable::NotAQueue => Error::not_a_lock(FileRole::Lock),
        Unreadable::Corrupt => Error::corrupt(FileRole::Lock, CorruptKind::Record),
    }
}

/// The compacted log, built in memory before it is written whole.
struct Compacted {
    buf: [u8; QUEUE_CAPACITY],
    len: usize,
}

impl Compacted {
    fn push(&mut self, piece: &[u8]) -> Result<(), Error> {
        // Admission keeps the queue far smaller; only lines that did not come
        // through it (a hostile file) get here. Writing it would leave a
        // file no replay reads.
        let end = self.len + piece.len();
        if end >= QUEUE_CAPACITY {
            return Err(Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong));
        }
        self.buf[self.len..end].copy_from_slice(piece);
        self.len = end;
        Ok(())
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Appends one line in one write, to a log of `size` bytes read under the
/// same exclusive lock.
fn append_line(file: &LockedFile<'_>, size: usize, line: &[u8]) -> Result<(), Error> {
    append_lines(file, size, &[line])
}

/// Appends up to two lines in one write, to a log of `size` bytes read
/// under the same exclusive lock. A log that does not end with a newline
/// ends with a line torn by a writer that died or ran out of space inside
/// its write: the newline that closes it goes first, in the same write, so
/// that the torn line cannot swallow these.
fn append_lines(file: &LockedFile<'_>, size: usize, lines: &[&[u8]]) -> Result<(), Error> {
    let mut last = [b'\n'];
    if size > 0 {
        sys::pread_full(file.fd, &mut last, size as u64 - 1).map_err(|e| FileError::io(FileRole::Lock, e))?;
    }
    let mut out = FixedText::<{ 2 * LINE_CAPACITY + 1 }>::new();
    if last[0] != b'\n' {
        let _ = out.push_bytes(b"\n");
    }
    for line in lines {
        out.push_bytes(line).map_err(|_| Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong))?;
    }
    sys::write_all(file.fd, out.as_bytes()).map_err(|e| FileError::io(FileRole::Lock, e))
}

//! How a `toplock` queue file is read, appended to and compacted.
//!
//! Readers hold a shared lock on the file, appenders and the compactor an
//! exclusive one (open-file-description locks), every wait ending by the
//! caller's deadline, and all check that the path still names their file, so no
//! line goes to a file that is being replaced. Every line is appended in
//! one `write` to a file opened with `O_APPEND`. An append first reads and
//! replays the log under the exclusive lock, so that no line goes to a
//! file that is no queue of ours, and checks that it leaves the file within
//! [`QUEUE_CAPACITY`], compacting first if not; a new request is admitted
//! only while the queue, compacted, would leave [`RESERVE`] free, so that
//! those already queued can always write their grants, releases and
//! skips. When the file grows past [`COMPACT_AT`], whoever reads it next
//! rewrites it: the header carries the replay state, then the holder that
//! left without releasing until the lock is granted again, then each
//! pending request, so no waiter loses its place or its fence, and no
//! holder the next grant takes over from is forgotten.
//!
//! The rewrite is made in place, because any user of a shared lock must be
//! able to make it: in a sticky directory such as `/tmp` only a file's owner
//! may rename another file over it. Every step leaves a log that replays
//! to the same queue, whenever the compactor dies: the compacted queue is
//! first appended as a committed checkpoint (see [`line`]), which a replay
//! starts from; then written at the start of the file, over bytes that end
//! before the checkpoint; then the file is cut to it. A checkpoint left by
//! a compactor that died before the cut is what the next compaction starts
//! from, and needs no new one. A compacted queue longer than the log it
//! replaces (a queue of an earlier boot started afresh, whose new header
//! can be the longer) stays as that checkpoint until a later compaction.
//!
//! [`line`]: super::line
//!
//! A queue is made complete, header first, before it appears; a file at
//! the queue's path whose first line is no header is not a queue and is
//! never written. A queue written on another boot names only processes
//! that are gone, on a boot clock that has started again: the first
//! process of this boot to change it starts it afresh, keeping only its
//! last fence. Only a header that names another kernel boot id proves
//! that: one on another clock of this boot (a time namespace), or one that
//! names no kernel boot, may be in use, and is refused
//! ([`Unsupported`](crate::error::Unsupported)), never started afresh. A
//! process that cannot read the boot id itself (no `/proc`) can tell
//! neither, and is refused before it makes or reads a queue.

use crate::clock::{BootId, BootTime, WallTime};
use crate::error::{Contention, CorruptKind, Error, FileError, FileRole, Unsupported};
use crate::guard::{GuardFile, LockedFile};
use crate::strategy::toplock::line::{Header, Line, CHECKPOINT_MARK, LINE_CAPACITY, TORN_LINE_END};
use crate::strategy::toplock::replay::{Replay, Unreadable};
use crate::strategy::Context;
use crate::sys::{self, CPath, OfdLock};
use crate::text::FixedText;
use crate::trust::Sharing;

/// The longest a queue file grows by appends.
pub const QUEUE_CAPACITY: usize = 16 * 1024;
/// The largest queue file replayed: one that holds, besides a full log, the
/// checkpoint a compaction appended before it died.
const READ_CAPACITY: usize = 2 * QUEUE_CAPACITY;
/// Room kept free of requests: one grant, or one holder that left without
/// releasing, that compaction will carry, one line of any kind, and slack
/// for the header's numbers to grow.
pub const RESERVE: usize = 4 * LINE_CAPACITY;
/// Whoever reads the file compacts it once it is this long (and compaction
/// would halve it).
pub const COMPACT_AT: usize = 2 * 1024;
/// The longest log a read goes on replaying from where the last stopped
/// ([`Replay::run_after`]): one that is compacted as it should be. A longer
/// one (many waiting) is replayed whole, rather than every handle grow by a
/// copy as long as the longest log.
const RESUMABLE: usize = 2 * COMPACT_AT;

/// A queue file and what was last read of it.
pub struct QueueFile {
    file: GuardFile,
    /// The kernel's boot id, read once: what a new queue's header names.
    kernel_boot: Option<BootId>,
    /// What the last load, append of a request or exclusive section read.
    pub log: Log,
}

/// The bytes last read of a queue file, and their replay.
pub struct Log {
    bytes: [u8; READ_CAPACITY],
    len: usize,
    /// Their replay, as of `now`.
    pub replay: Replay,
    /// The time of the last read, on the log's clock (boot-clock
    /// nanoseconds, never behind a time written in the log).
    pub now: i64,
    /// The wall clock read right beside `now`: what turns a time of the
    /// log into a wall time without counting the replay in between.
    pub wall: WallTime,
    /// The first bytes the last replay read, as far as it can be taken up
    /// from: how the next read tells a log that has only grown since.
    replayed: [u8; RESUMABLE],
    replayed_len: usize,
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
    /// on this process's clock, `Ok(false)` when it is provably of an
    /// earlier boot (its header names another kernel boot id), and
    /// [`Error::Unsupported`] when it is neither: written on another clock
    /// of this boot, or with a header that names no kernel boot, which may
    /// be in use on another clock, its times unreadable here.
    fn read(&mut self, file: &LockedFile<'_>, own: OwnBoot) -> Result<bool, Error> {
        let n = file.read(&mut self.bytes)?;
        if n == READ_CAPACITY {
            // Compaction keeps the file far below this; only a hostile or
            // damaged file gets here. Without a header first it is no queue
            // at all (a data file), as the replay would say of a short one.
            let first_line = &self.bytes[..self.bytes.iter().position(|&b| b == b'\n').unwrap_or(n)];
            return Err(if super::line::is_header_of_some_version(first_line) {
                Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong)
            } else {
                Error::not_a_lock(FileRole::Lock)
            });
        }
        self.len = n;
        let reader_now = BootTime::now().nanos();
        self.wall = WallTime::now();
        self.replay.run_after(&self.bytes[..n], reader_now, &self.replayed[..self.replayed_len]).map_err(unreadable)?;
        let resumable = self.replay.resumable_len().filter(|&len| len <= self.replayed.len()).unwrap_or(0);
        self.replayed[..resumable].copy_from_slice(&self.bytes[..resumable]);
        self.replayed_len = resumable;
        self.now = self.replay.now(reader_now);
        let header = self.replay.header;
        if header.boot == Some(own.clock) {
            // On our clock, so of this kernel boot, whatever its header says
            // (an earlier version's compaction left the kernel's boot out):
            // the next compaction names it.
            self.replay.header.kernel_boot = Some(own.kernel);
            return Ok(true);
        }
        match header.kernel_boot {
            Some(kernel) if kernel != own.kernel => Ok(false),
            // Another clock on this very boot: a process in another time
            // namespace wrote it. Its times cannot be read here, nor its
            // requests passed over as those of an earlier boot.
            Some(_) => Err(Error::Unsupported(Unsupported::Here(
                "a toplock queue shared with processes of another time namespace",
            ))),
            // Nothing says which boot wrote it: its holder may be alive on
            // another clock of this one.
            None => Err(Error::Unsupported(Unsupported::Here(
                "a toplock queue whose header names no kernel boot id (written without /proc, or compacted by \
                 an older version) and whose clock is not this process's: remove it once no process uses it",
            ))),
        }
    }

    /// Whether `grant`, a grant line, is the holder's grant in this log: its
    /// request is the holder, with the fence and end the line names.
    fn bears_out(&self, grant: &Line) -> bool {
        let Line::Grant { nonce, until, fence, .. } = *grant else { return false };
        let me = self.replay.find(nonce);
        me.is_some_and(|me| {
            let request = self.replay.requests[me];
            self.replay.holder(self.now) == Some(me) && request.fence == fence && request.grant == until
        })
    }

    /// The replay of this log with `lines` appended as the next write would
    /// append them (after closing a torn last line, which then reads as no
    /// line, as it does now): what every reader will make of them, learnt
    /// before they are written.
    pub fn replayed_with(&self, lines: &[Line]) -> Result<Replay, Error> {
        let mut after = self.replay.clone();
        let mut offset = self.len + closing(self.bytes()).len();
        for line in lines {
            let text = line.encode();
            after.replay_appended(text.as_bytes(), offset, self.now).map_err(unreadable)?;
            offset += text.as_bytes().len();
        }
        Ok(after)
    }

    /// Whether the log is due for compaction: past [`COMPACT_AT`], and
    /// compacted to half its length or less.
    fn due_for_compaction(&self) -> bool {
        self.len >= COMPACT_AT && 2 * self.replay.compacted_len(self.bytes()) <= self.len
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
            kernel_boot: BootId::kernel(),
            log: Log {
                bytes: [0; READ_CAPACITY],
                len: 0,
                replay: Replay::new(),
                now: 0,
                wall: WallTime::from_unix_nanos(0),
                replayed: [0; RESUMABLE],
                replayed_len: 0,
            },
        }
    }

    /// The queue file's path.
    pub fn path(&self) -> &CPath {
        self.file.path()
    }

    /// This process's boot, without which it can neither tell a queue of
    /// an earlier boot from one in use on another clock, nor write a
    /// header that lets others tell: refused before any file is touched.
    fn own_boot(&mut self, cx: &Context<'_>) -> Result<OwnBoot, Error> {
        // Read again while unknown: one failed read (no descriptor free at
        // the time) must not refuse this handle for good.
        if self.kernel_boot.is_none() {
            self.kernel_boot = BootId::kernel();
        }
        match (self.kernel_boot, cx.me.boot) {
            (Some(kernel), Some(clock)) => Ok(OwnBoot { kernel, clock }),
            _ => Err(Error::Unsupported(Unsupported::Here(
                "a toplock queue where this process cannot read the boot id (no /proc)",
            ))),
        }
    }

    /// Reads and replays the queue; compacts it first when it has grown
    /// past [`COMPACT_AT`] (failed attempts grow it too, not only releases)
    /// or was written on another boot.
    pub fn load(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        for _ in 0..2 {
            let own = self.own_boot(cx)?;
            let file = lock_queue(&mut self.file, own, OfdLock::Shared, cx)?;
            let this_boot = self.log.read(&file, own)?;
            drop(file);
            if this_boot && !self.log.due_for_compaction() {
                return Ok(());
            }
            self.compact(cx, !this_boot)?;
        }
        Ok(())
    }

    /// Appends the line `build` makes from the log's time as read under
    /// the exclusive lock, never past [`QUEUE_CAPACITY`]: a full log is
    /// compacted first (admission keeps room for this line after that).
    /// The log is read and replayed first, though the line is judged by the
    /// replays that read it, not by its writer: a file put at the queue's
    /// path since the last read (a data file that merely starts with `H `)
    /// must prove itself a queue of ours before anything is written to it,
    /// and a line goes to no queue of an earlier boot before it is started
    /// afresh. Only a waiter giving up, a skip, a break and a prolong come
    /// here, none of them on the way of every acquisition.
    pub fn append(&mut self, cx: &Context<'_>, build: impl Fn(i64) -> Line) -> Result<(), Error> {
        self.append_decided(cx, |log| Ok(((), Some(build(log.now)))))
    }

    /// [`append`](Self::append) of a new request, if the queue admits it:
    /// decided on the log as it is under the exclusive lock, so that no
    /// other request slips in between ([`Contention::QueueFull`] when it
    /// does not: nobody's place is taken, and the caller asks again). With
    /// it, in the same write, goes the line `grant` makes of the log and
    /// the request (`None`: no grant), so that a request that would be the
    /// head at once is granted in one guard section, not three. Without a
    /// grant, the request is written only if `queue`. The log read stays in
    /// [`log`](Self::log), for the caller to tell why there was no grant.
    pub fn append_request_granting(
        &mut self,
        cx: &Context<'_>,
        build: impl Fn(i64) -> Line,
        grant: impl Fn(&Log, &Line) -> Option<Line>,
        queue: bool,
    ) -> Result<Appended, Error> {
        for _ in 0..2 {
            let own = self.own_boot(cx)?;
            let mut file = lock_queue(&mut self.file, own, OfdLock::Exclusive, cx)?;
            let this_boot = self.log.read(&file, own)?;
            if this_boot {
                let request = build(self.log.now);
                let line = request.encode();
                if !self.log.admits(line.as_bytes().len()) {
                    return Err(Error::Busy(Contention::QueueFull));
                }
                let granted = grant(&self.log, &request);
                if granted.is_none() && !queue {
                    drop(file);
                    self.tidy(cx);
                    return Ok(Appended::Nothing);
                }
                let granted_text = granted.map(|g| g.encode());
                let granted_bytes = granted_text.as_ref().map_or(&b""[..], |g| g.as_bytes());
                let close = closing(self.log.bytes()).len();
                if self.log.len + close + line.as_bytes().len() + granted_bytes.len() < QUEUE_CAPACITY {
                    let written = append_lines(&file, self.log.bytes(), &[line.as_bytes(), granted_bytes])?;
                    let Some(granted) = granted else { return Ok(Appended::Queued) };
                    // Not loaded again, as a request that waits is, unless
                    // someone who ignores the lock (a hand, or another user
                    // of a shared queue) wrote between the read and the
                    // write: the grant was judged on a log other than the
                    // one its lines landed in, and is judged again on that.
                    if !file.grew_only_by(written)? {
                        // A log now of another boot (a checkpoint that names
                        // one) is started afresh by its next reader.
                        if !self.log.read(&file, own)? || !self.log.bears_out(&granted) {
                            return Ok(Appended::Queued);
                        }
                    }
                    drop(file);
                    self.tidy(cx);
                    return Ok(Appended::Granted(granted));
                }
            }
            drop(file);
            // Full, or of another boot: compacted whatever its state.
            self.compact(cx, true)?;
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
            let own = self.own_boot(cx)?;
            let file = lock_queue(&mut self.file, own, OfdLock::Exclusive, cx)?;
            let this_boot = self.log.read(&file, own)?;
            if this_boot {
                let (answer, line) = decide(&self.log)?;
                let Some(line) = line else { return Ok(answer) };
                let line = line.encode();
                if self.log.len + closing(self.log.bytes()).len() + line.as_bytes().len() < QUEUE_CAPACITY {
                    append_line(&file, self.log.bytes(), line.as_bytes())?;
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
        if self.log.due_for_compaction() {
            let _ = self.compact(cx, false);
        }
    }

    /// Rewrites the log under an exclusive lock: the header with the replay
    /// state, then every pending request with its grant and fence. `force`:
    /// rewrite even a short log (an appender needs the room, or the log is
    /// of another boot, whose requests all name processes that are gone).
    fn compact(&mut self, cx: &Context<'_>, force: bool) -> Result<(), Error> {
        let path = self.file.path().clone();
        let own = self.own_boot(cx)?;
        let file = lock_queue(&mut self.file, own, OfdLock::Exclusive, cx)?;
        let this_boot = self.log.read(&file, own)?;
        let bytes = self.log.bytes();
        if !force && this_boot && !self.log.due_for_compaction() {
            return Ok(());
        }
        let mut out = Checkpoint { buf: [0; CHECKPOINT_CAPACITY], len: 0, plain_len: 0 };
        if this_boot {
            self.log.replay.compacted(bytes, &mut |piece| out.push(piece))?;
        } else {
            out.push(Line::Header(fresh_header(own, self.log.replay.header.last_fence)).encode().as_bytes())?;
        }
        rewrite_in_place(&file, &path, bytes, self.log.replay.origin, &mut out)?;
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
        let own = self.own_boot(cx)?;
        let file = lock_queue(&mut self.file, own, OfdLock::Exclusive, cx)?;
        self.log.read(&file, own)?;
        let result = action(&self.log);
        drop(file);
        result
    }
}

/// What [`QueueFile::append_request_granting`] wrote.
#[derive(Clone, Copy, Debug)]
pub enum Appended {
    /// The request and this grant of it, which the log bears out.
    Granted(Line),
    /// The request, and perhaps a grant the log as its lines landed in
    /// does not bear out: the request may wait in the queue.
    Queued,
    /// Nothing: no grant, for a caller that keeps no place.
    Nothing,
}

/// The boot this process runs on, as a queue's header names it.
#[derive(Clone, Copy, Debug)]
struct OwnBoot {
    /// The kernel's boot id, the same in every time namespace: what a
    /// reboot changes.
    kernel: BootId,
    /// The boot clock's ([`BootId::current`]), which differs between time
    /// namespaces: what the log's times count on.
    clock: BootId,
}

/// Takes the queue file's lock by the caller's deadline, first making the
/// queue, with a fresh header, if there is none.
fn lock_queue<'f>(
    file: &'f mut GuardFile,
    own: OwnBoot,
    kind: OfdLock,
    cx: &Context<'_>,
) -> Result<LockedFile<'f>, Error> {
    let header = Line::Header(fresh_header(own, 0)).encode();
    file.lock_file(kind, cx.deadline, header.as_bytes(), Some(own.clock))
}

/// A new queue's header: on this boot, nothing pending, no cooldown, and
/// `last_fence` carried over (a queue started afresh after a reboot).
fn fresh_header(own: OwnBoot, last_fence: u64) -> Header {
    Header { kernel_boot: Some(own.kernel), boot: Some(own.clock), last_fence, ..Header::EMPTY }
}

fn unreadable(why: Unreadable) -> Error {
    match why {
        Unreadable::NotAQueue => Error::not_a_lock(FileRole::Lock),
        Unreadable::Corrupt => Error::corrupt(FileRole::Lock, CorruptKind::Record),
    }
}

/// The most a checkpoint adds to the compacted log it carries: a mark on
/// each line (a header, a holder that left or the head's grant, and a
/// request for each pending request) and the commit.
const CHECKPOINT_OVERHEAD: usize = (1 + 2 * super::replay::MAX_REQUESTS) * CHECKPOINT_MARK.len() + LINE_CAPACITY;
const CHECKPOINT_CAPACITY: usize = QUEUE_CAPACITY + CHECKPOINT_OVERHEAD;
const _: () = assert!(CHECKPOINT_OVERHEAD <= RESERVE + LINE_CAPACITY);

/// The compacted log, built in memory as a checkpoint (each line marked)
/// before it is written.
struct Checkpoint {
    buf: [u8; CHECKPOINT_CAPACITY],
    len: usize,
    /// The length of the compacted log itself, without the marks.
    plain_len: usize,
}

impl Checkpoint {
    /// Adds one line of the compacted log.
    fn push(&mut self, line: &[u8]) -> Result<(), Error> {
        // Admission keeps the queue far smaller; only lines that did not come
        // through it (a hostile file) get here. Writing it would leave a
        // file no replay reads.
        let newline = usize::from(!line.ends_with(b"\n"));
        self.plain_len += line.len() + newline;
        // Room kept for the commit, whatever the lines.
        let marked_end = self.len + CHECKPOINT_MARK.len() + line.len() + newline;
        if self.plain_len >= QUEUE_CAPACITY || marked_end > CHECKPOINT_CAPACITY - LINE_CAPACITY {
            return Err(Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong));
        }
        for piece in [CHECKPOINT_MARK, line, &b"\n"[..newline]] {
            self.buf[self.len..self.len + piece.len()].copy_from_slice(piece);
            self.len += piece.len();
        }
        Ok(())
    }

    /// Ends the checkpoint with its commit, for a checkpoint that will start
    /// at byte `from` of the file.
    fn commit(&mut self, from: usize) {
        let commit = super::line::encode_commit(from, self.len);
        self.buf[self.len..self.len + commit.as_bytes().len()].copy_from_slice(commit.as_bytes());
        self.len += commit.as_bytes().len();
    }

    /// The compacted log itself: the marks and the commit taken out, in
    /// place.
    fn unmark(&mut self) -> &[u8] {
        let (mut read, mut write) = (0, 0);
        while read < self.len && write < self.plain_len {
            let line_len =
                self.buf[read..self.len].iter().position(|&b| b == b'\n').map_or(self.len - read, |nl| nl + 1);
            let text = read + CHECKPOINT_MARK.len()..read + line_len;
            self.buf.copy_within(text.clone(), write);
            write += text.len();
            read += line_len;
        }
        &self.buf[..self.plain_len]
    }
}

/// Replaces the log `old` (read under the exclusive lock `file` holds,
/// replayed from `origin`) with the compacted `checkpoint`, so that a
/// compactor that dies at any point leaves a log that replays to the same
/// queue.
fn rewrite_in_place(
    file: &LockedFile<'_>,
    path: &CPath,
    old: &[u8],
    mut origin: usize,
    checkpoint: &mut Checkpoint,
) -> Result<(), Error> {
    let failed = |e| FileError::from_errno(FileRole::Lock, path, e);
    if checkpoint.plain_len > origin {
        // The rewrite would reach into the checkpoint the log replays from
        // (or there is none): a new one first, after the last line, closing
        // a line torn at the end.
        let close = closing(old);
        let from = old.len() + close.len();
        checkpoint.commit(from);
        if from + checkpoint.len >= READ_CAPACITY {
            // Only a log that a compactor left long, then others filled.
            return Err(Error::Busy(Contention::QueueFull));
        }
        sys::write_all(file.fd, close).map_err(failed)?;
        sys::write_all(file.fd, &checkpoint.buf[..checkpoint.len]).map_err(failed)?;
        origin = from;
    }
    if checkpoint.plain_len > origin {
        // Longer than the log it replaces (a queue of an earlier boot,
        // started afresh with a longer header): the checkpoint is the log
        // now, and a later compaction will have the room to cut it.
        return Ok(());
    }
    // The descriptor appends wherever it writes: the start of the file is
    // reached with O_APPEND off, for as long as this exclusive section.
    sys::set_append(file.fd, false).map_err(failed)?;
    let written = sys::pwrite_all(file.fd, checkpoint.unmark(), 0)
        .and_then(|()| sys::ftruncate(file.fd, checkpoint.plain_len as u64));
    let restored = sys::set_append(file.fd, true);
    written.and(restored).map_err(failed)
}

/// Appends one line in one write, to the whole `log` read under the same
/// exclusive lock.
fn append_line(file: &LockedFile<'_>, log: &[u8], line: &[u8]) -> Result<(), Error> {
    append_lines(file, log, &[line]).map(|_| ())
}

/// What closes the last line of `log` before anything is appended: nothing
/// if it ends with a newline, [`TORN_LINE_END`] if it was torn by a writer
/// that died or ran out of space inside its write.
fn closing(log: &[u8]) -> &'static [u8] {
    if log.last().is_some_and(|&last| last != b'\n') {
        TORN_LINE_END
    } else {
        b""
    }
}

/// Appends up to two lines in one write, to the whole `log` read under the
/// same exclusive lock (so it is the file as it stands). A torn last line
/// is closed first, in the same write, so that it cannot swallow these.
fn append_lines(file: &LockedFile<'_>, log: &[u8], lines: &[&[u8]]) -> Result<usize, Error> {
    let mut out = FixedText::<{ 2 * LINE_CAPACITY + TORN_LINE_END.len() }>::new();
    let _ = out.push_bytes(closing(log));
    for line in lines {
        out.push_bytes(line).map_err(|_| Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong))?;
    }
    sys::write_all(file.fd, out.as_bytes()).map_err(|e| FileError::io(FileRole::Lock, e))?;
    Ok(out.as_bytes().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::BootId;
    use crate::owner::{Nonce, Owner};
    use crate::strategy::toplock::line::Grant;
    use std::string::{String, ToString};
    use std::vec::Vec;

    const SECOND: i64 = 1_000_000_000;
    const NOW: i64 = 1_000 * SECOND;

    fn request(n: u128, t: i64) -> Line {
        let mut owner = Owner::current().unwrap();
        owner.process.pid = n as i32 + 1;
        Line::Request { nonce: Nonce(n), owner, patience: None, t }
    }

    /// A log long enough to compact: forty turns taken and released, then
    /// three requests pending, the first of them granted.
    fn long_log() -> Vec<u8> {
        let header = Header { boot: Some(BootId([1; 16])), last_fence: 7, ..Header::EMPTY };
        let mut lines = std::vec![Line::Header(header)];
        for n in 1..=40 {
            let t = n as i64 * SECOND;
            lines.push(request(n, t));
            lines.push(Line::Grant { nonce: Nonce(n), until: Grant::Until(t + 100 * SECOND), t, fence: 0 });
            lines.push(Line::Done { nonce: Nonce(n), t: t + 1, not_before: 0 });
        }
        for n in 41..=43 {
            lines.push(request(n, 50 * SECOND));
        }
        lines.push(Line::Grant { nonce: Nonce(41), until: Grant::Until(NOW * 2), t: 51 * SECOND, fence: 0 });
        lines.iter().flat_map(|line| line.encode().as_bytes().to_vec()).collect()
    }

    /// What a compaction must keep: the requests pending, in order, with
    /// their grants and fences; the holder; the last fence.
    fn queue(bytes: &[u8]) -> (Vec<(u128, Grant, u64)>, Option<u128>, u64) {
        let mut replay = Replay::new();
        replay.run(bytes, NOW).unwrap_or_else(|e| panic!("{e:?} in {}", String::from_utf8_lossy(bytes)));
        let pending = replay.requests[..replay.count]
            .iter()
            .filter(|r| !r.done())
            .map(|r| (r.nonce.0, r.grant, r.fence))
            .collect();
        (pending, replay.holder(NOW).map(|i| replay.requests[i].nonce.0), replay.header.last_fence)
    }

    fn released(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.extend_from_slice(closing(&bytes));
        bytes.extend_from_slice(Line::Done { nonce: Nonce(41), t: 60 * SECOND, not_before: 0 }.encode().as_bytes());
        bytes
    }

    /// A compactor killed after any byte of any of its writes leaves a log
    /// that replays to the same queue, and to which the next appender's
    /// line counts as it would have.
    #[test]
    fn a_compaction_in_place_cut_short_anywhere_leaves_the_same_queue() {
        let old = long_log();
        let before = queue(&old);
        assert_eq!(before.0.len(), 3);
        let after_release = queue(&released(old.clone()));
        let mut replay = Replay::new();
        replay.run(&old, NOW).unwrap();
        let mut checkpoint = Checkpoint { buf: [0; CHECKPOINT_CAPACITY], len: 0, plain_len: 0 };
        replay.compacted(&old, &mut |line| checkpoint.push(line)).unwrap();
        assert!(2 * checkpoint.plain_len < old.len(), "compaction halves this log");
        checkpoint.commit(old.len());
        let marked = checkpoint.buf[..checkpoint.len].to_vec();
        // The checkpoint's append, cut short after any byte.
        for cut in 0..=marked.len() {
            let file = [&old[..], &marked[..cut]].concat();
            assert_eq!(queue(&file), before, "checkpoint cut after {cut} bytes");
            assert_eq!(queue(&released(file)), after_release, "checkpoint cut after {cut} bytes, then a release");
        }
        let committed = [&old[..], &marked[..]].concat();
        assert_eq!(last_checkpoint_from(&committed), Some(old.len()));
        // The compacted log written over the start, cut short after any byte.
        let plain = checkpoint.unmark().to_vec();
        assert_eq!(plain.len(), checkpoint.plain_len);
        for cut in 0..=plain.len() {
            let mut file = committed.clone();
            file[..cut].copy_from_slice(&plain[..cut]);
            assert_eq!(queue(&file), before, "rewrite cut after {cut} bytes");
            assert_eq!(queue(&released(file)), after_release, "rewrite cut after {cut} bytes, then a release");
        }
        // Cut to it: the compacted log alone, which starts at its header.
        assert!(plain.starts_with(b"H 4 ") && !plain.windows(2).any(|w| w == b"K " || w == b"E "));
        assert_eq!(queue(&plain), before);
        assert_eq!(queue(&released(plain)), after_release);
    }

    fn last_checkpoint_from(bytes: &[u8]) -> Option<usize> {
        super::super::replay::last_commit(bytes).map(|c| c.from)
    }

    /// Marked lines and commits that match nothing are torn lines, never a
    /// place to start from.
    #[test]
    fn a_commit_that_does_not_name_its_checkpoint_is_ignored() {
        let old = long_log();
        let before = queue(&old);
        let at = old.len();
        let wrong_length = [&b"K H 4 - - 0 0 0 99 -\nE "[..], at.to_string().as_bytes(), b" 2\n"].concat();
        let cases: [&[u8]; 4] =
            [b"K H 4 - - 0 0 0 99 -\nE 0 21\n", &wrong_length, b"E 5 5\n", b"K R 00000000000000000000000000000001\n"];
        for case in cases {
            let file = [&old[..], case].concat();
            assert_eq!(queue(&file), before, "{}", String::from_utf8_lossy(case));
        }
    }
}

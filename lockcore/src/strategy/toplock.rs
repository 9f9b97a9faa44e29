//! `toplock`: an append-only queue file; whoever's request is first among
//! the live ones holds the lock (seed 000, Sajiro's "TOP LOCK").
//!
//! Every request appends one line, in one `write` to a file opened with
//! `O_APPEND`, so arrivals are totally ordered and served first come, first
//! served. The file is a log; its meaning is the result of replaying it:
//!
//! ```text
//! H 3 <seq before> <not before> <last end> <time floor> <last fence> <head since|->   header, after a compaction
//! R <nonce> <host> <boot> <pid> <start> <ttl|-> <t>   request (its position gives its sequence number)
//! G <nonce> <expires|never> <t>                  grant or renewal, written by the requester
//! D <nonce> <t> <not before>                     done: released (with cooldown) or abandoned
//! X <nonce> <t>                                  skip: the requester was found dead
//! B <nonce> <t>                                  broken by an operator
//! K <n>                                          n sequence numbers skipped (after a compaction)
//! ```
//!
//! Times are Unix nanoseconds. Replay walks the lines in file order with a
//! clock that never runs backwards (each line's time, floored by the times
//! before it). The head is the first request not done; a `G` counts only if
//! its requester is the head at that point of the log and any cooldown has
//! passed. A granted head whose expiry passes is skipped once someone else
//! waits behind it; an ungranted head is skipped when its requester's own
//! `ttl` (written in its `R` line) has passed since it became head (its
//! requester stopped polling); a head whose owner is provably dead is
//! skipped by an `X` line that a waiter appends once it has judged that
//! owner dead. Skipping never removes a line, so nobody loses their place.
//!
//! Every decision is a function of the log alone, never of the reader:
//! not of its own `ttl` or `stale` options, not of how it judges a process
//! now. So every process that reads the log agrees on the holder, whatever
//! options it opened the lock with, and a holder learns it lost the lock by
//! reading the log, not by a race.
//!
//! The fencing token is the request's sequence number: requests are granted
//! in order, so grants see increasing numbers. When the file grows past
//! [`COMPACT_AT`], whoever reads it next rewrites it under an exclusive flock:
//! the header carries the replay state, then each pending request (its own
//! `R` line, a `K` line for the sequence numbers of finished requests before
//! it, and its grant), so no waiter loses its place or its number. Readers
//! hold a shared flock, appenders and the compactor an exclusive one (an
//! append first checks that it leaves the file within [`QUEUE_CAPACITY`],
//! compacting if not), and all check that the path still names their file,
//! so no line goes to a file that is being replaced.

use core::fmt::Write;
use core::time::Duration;

use crate::clock::WallTime;
use crate::error::{CorruptKind, Error};
use crate::guard::{GuardFile, LockedFile, Patience};
use crate::owner::{BootId, HostName, Liveness, Nonce, Owner, ProcessId};
use crate::record::Record;
use crate::spec::{Spec, StaleCheck};
use crate::strategy::{
    commit_if_current, ignore_missing, past_expiry, CommitOutcome, Context, Holder, Inspection, ProlongOutcome,
    ReleaseOutcome, Strategy, CREATE_NEW_FLAGS,
};
use crate::sys::{self, CPath, FlockOp};
use crate::text::{parse_i64, parse_u64, FixedText};

/// The largest queue file replayed. No append takes the file past it: an
/// appender that would compacts first. A new request is admitted only while
/// the queue, compacted, would leave [`RESERVE`] free, so that those already
/// queued can always write their grants, releases and skips; past that the
/// queue is full and a newcomer's attempt is busy.
pub const QUEUE_CAPACITY: usize = 16 * 1024;
/// Room kept free of requests: one grant that compaction will carry, one
/// line of any kind, and slack for the header's numbers to grow.
pub const RESERVE: usize = 4 * LINE_CAPACITY;
/// Whoever reads the file compacts it once it is this long (and compaction
/// would halve it).
pub const COMPACT_AT: usize = 4 * 1024;
/// Requests one replay tracks at once; finished ones are dropped from the
/// table as it fills, and a new request is admitted only while fewer than
/// this many are pending.
pub const MAX_REQUESTS: usize = 128;
const LINE_CAPACITY: usize = 200;

#[derive(Debug)]
pub struct Toplock {
    file: GuardFile,
    path: CPath,
    compact_temp: CPath,
    /// The queue file's permissions, also for the file that replaces it.
    mode: libc::mode_t,
    /// The request this handle has in the queue while it waits, so that
    /// repeated attempts keep its place.
    pending: Option<Nonce>,
    log: Log,
}

/// The queue file's bytes and the replay of them.
struct Log {
    bytes: [u8; QUEUE_CAPACITY],
    len: usize,
    requests: [Request; MAX_REQUESTS],
    count: usize,
    base_seq: u64,
    not_before: i64,
    last_end: i64,
    floor: i64,
    last_fence: u64,
    /// When the first request after a compacted header became head: its
    /// `R` line is replayed at the header's time, and without this every
    /// compaction would restart the `ttl` of a head that never polls again.
    head_since: Option<i64>,
    /// Lines skipped as torn in the last replay.
    torn_lines: u32,
    /// The sequence number the next request will get.
    next_seq: u64,
    /// A request whose ending the caller wants to know (its own), and how
    /// it ended, even after it was dropped from the table.
    watched: Option<Nonce>,
    watched_end: Ended,
}

impl core::fmt::Debug for Log {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Log").field("len", &self.len).field("requests", &self.count).finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    No,
    Until(i64),
    Forever,
}

#[derive(Clone, Copy, Debug)]
struct Request {
    nonce: Nonce,
    /// Offset of its `R` line in the log: where its owner is read from, and
    /// where compaction starts copying.
    offset: usize,
    seq: u64,
    since: i64,
    /// The requester's `ttl`: how long it may stay head without a grant
    /// (without polling) before the others skip it.
    patience: Option<i64>,
    grant: Grant,
    /// `Pending` while in the queue; otherwise why it left.
    ended: Ended,
}

impl Request {
    fn done(&self) -> bool {
        self.ended != Ended::Pending
    }
}

/// How a request left the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Pending,
    /// Its requester released it or gave up (`D`).
    Done,
    /// It ran past its grant (or, ungranted, past `ttl`) with others waiting.
    Expired,
    /// Its requester was found dead (`X`).
    Dead,
    /// An operator broke it (`B`).
    Broken,
}

const EMPTY_REQUEST: Request =
    Request { nonce: Nonce(0), offset: 0, seq: 0, since: 0, patience: None, grant: Grant::No, ended: Ended::Done };

/// One parsed line.
enum Line {
    /// A header of another format version: this log is not ours to replay.
    OtherVersion,
    Header {
        base_seq: u64,
        not_before: i64,
        last_end: i64,
        floor: i64,
        last_fence: u64,
        head_since: Option<i64>,
    },
    Request {
        nonce: Nonce,
        owner: Owner,
        patience: Option<i64>,
        t: i64,
    },
    Grant {
        nonce: Nonce,
        until: Grant,
        t: i64,
    },
    Done {
        nonce: Nonce,
        t: i64,
        not_before: i64,
    },
    Skip {
        nonce: Nonce,
        t: i64,
    },
    Broken {
        nonce: Nonce,
        t: i64,
    },
    Gap {
        count: u64,
    },
}

fn parse_line(line: &[u8]) -> Option<Line> {
    let mut words = line.split(|&b| b == b' ');
    let kind = words.next()?;
    let mut next = || words.next();
    let nonce = |w: Option<&[u8]>| w.and_then(Nonce::parse_hex);
    let int = |w: Option<&[u8]>| w.and_then(parse_i64);
    let parsed = match kind {
        b"H" => {
            if next()? != b"3" {
                return Some(Line::OtherVersion);
            }
            Line::Header {
                base_seq: parse_u64(next()?)?,
                not_before: int(next())?,
                last_end: int(next())?,
                floor: int(next())?,
                last_fence: parse_u64(next()?)?,
                head_since: match next()? {
                    b"-" => None,
                    ns => Some(parse_i64(ns)?),
                },
            }
        }
        b"R" => {
            let nonce = nonce(next())?;
            let host = HostName::from_bytes(next()?)?;
            let boot = match next()? {
                b"-" => None,
                hex => Some(BootId::parse_uuid(hex)?),
            };
            let pid = parse_u64(next()?).and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0)?;
            let start_ticks = parse_u64(next()?)?;
            let patience = match next()? {
                b"-" => None,
                ns => Some(parse_i64(ns).filter(|&ns| ns >= 0)?),
            };
            Line::Request {
                nonce,
                owner: Owner { host, boot, process: ProcessId { pid, start_ticks } },
                patience,
                t: int(next())?,
            }
        }
        b"G" => {
            let nonce = nonce(next())?;
            let until = match next()? {
                b"never" => Grant::Forever,
                ns => Grant::Until(parse_i64(ns)?),
            };
            Line::Grant { nonce, until, t: int(next())? }
        }
        b"D" => Line::Done { nonce: nonce(next())?, t: int(next())?, not_before: int(next())? },
        b"X" => Line::Skip { nonce: nonce(next())?, t: int(next())? },
        b"B" => Line::Broken { nonce: nonce(next())?, t: int(next())? },
        b"K" => Line::Gap { count: parse_u64(next()?)? },
        _ => return None,
    };
    words.next().is_none().then_some(parsed)
}

impl Log {
    const fn new() -> Log {
        Log {
            bytes: [0; QUEUE_CAPACITY],
            len: 0,
            requests: [EMPTY_REQUEST; MAX_REQUESTS],
            count: 0,
            base_seq: 0,
            not_before: 0,
            last_end: 0,
            floor: 0,
            last_fence: 0,
            head_since: None,
            torn_lines: 0,
            next_seq: 1,
            watched: None,
            watched_end: Ended::Pending,
        }
    }

    fn read(&mut self, file: &LockedFile<'_>) -> Result<(), Error> {
        let n = sys::pread_full(file.fd, &mut self.bytes, 0).map_err(Error::Os)?;
        if n == QUEUE_CAPACITY {
            // Compaction keeps the file far below this; only a hostile or
            // damaged file gets here.
            return Err(Error::Corrupt(CorruptKind::RecordTooLong));
        }
        self.len = n;
        Ok(())
    }

    /// The owner named by request `index`'s `R` line (parsed again rather
    /// than stored, to keep the replay table small).
    fn owner(&self, index: usize) -> Owner {
        let line = &self.bytes[self.requests[index].offset..self.len];
        let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
        match parse_line(line) {
            Some(Line::Request { owner, .. }) => owner,
            // Replay parsed this very line as a request before recording it.
            _ => Owner { host: HostName::UNKNOWN, boot: None, process: ProcessId { pid: 0, start_ticks: 0 } },
        }
    }

    fn find(&self, nonce: Nonce) -> Option<usize> {
        self.requests[..self.count].iter().position(|r| r.nonce == nonce)
    }

    fn head(&self) -> Option<usize> {
        self.requests[..self.count].iter().position(|r| !r.done())
    }

    fn waiting_behind(&self, head: usize) -> bool {
        self.requests[head + 1..self.count].iter().any(|r| !r.done())
    }

    /// Ends the head while it is over: expired with someone waiting, or
    /// ungranted for longer than its requester's `ttl`.
    fn advance(&mut self, t: i64) {
        while let Some(h) = self.head() {
            if !self.waiting_behind(h) {
                return;
            }
            let head = self.requests[h];
            let ended_at = match head.grant {
                Grant::Until(until) if until <= t => until,
                Grant::No => match head.patience {
                    Some(patience) if head.since.saturating_add(patience) <= t => head.since.saturating_add(patience),
                    _ => return,
                },
                _ => return,
            };
            self.finish(h, ended_at, Ended::Expired);
        }
    }

    fn finish(&mut self, index: usize, at: i64, why: Ended) {
        let was_head = self.head() == Some(index);
        self.requests[index].ended = why;
        if self.watched == Some(self.requests[index].nonce) {
            self.watched_end = why;
        }
        if was_head {
            self.last_end = self.last_end.max(at);
            if let Some(next) = self.head() {
                let r = &mut self.requests[next];
                r.since = r.since.max(self.last_end).max(self.not_before);
            }
        }
    }

    /// Replays the whole log as of `now`.
    fn replay(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        self.count = 0;
        self.base_seq = 0;
        self.not_before = 0;
        self.last_end = 0;
        self.floor = 0;
        self.last_fence = 0;
        self.head_since = None;
        self.torn_lines = 0;
        self.watched_end = Ended::Pending;
        self.next_seq = 1;
        let mut at = 0;
        while at < self.len {
            let rest = &self.bytes[at..self.len];
            // A last line without its newline was torn by a writer that died
            // or ran out of space inside its write (appends hold the flock
            // exclusively, so none is in flight while we read): it does not
            // count, and the next appender closes it before its own line.
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else { break };
            let offset = at;
            at += nl + 1;
            // A line that does not parse is such a torn line, closed. Its
            // writer learnt of the failure from its write, or died: a torn
            // request is made again, a torn grant is not confirmed, a torn
            // release or skip is retried or its owner found dead.
            let Some(line) = parse_line(&rest[..nl]) else {
                self.torn_lines += 1;
                continue;
            };
            let t = match line {
                // Replaying it by this format's rules could hand out a fence
                // that was handed out before.
                Line::OtherVersion => return Err(Error::Corrupt(CorruptKind::Record)),
                Line::Header { base_seq, not_before, last_end, floor, last_fence, head_since } => {
                    if offset != 0 {
                        return Err(Error::Corrupt(CorruptKind::Record));
                    }
                    (self.base_seq, self.not_before, self.last_end, self.floor, self.last_fence) =
                        (base_seq, not_before, last_end, floor, last_fence);
                    self.head_since = head_since;
                    self.next_seq = base_seq.checked_add(1).ok_or(Error::Corrupt(CorruptKind::Record))?;
                    continue;
                }
                Line::Gap { count } => {
                    self.next_seq = self.next_seq.checked_add(count).ok_or(Error::Corrupt(CorruptKind::Record))?;
                    continue;
                }
                Line::Request { t, .. }
                | Line::Grant { t, .. }
                | Line::Done { t, .. }
                | Line::Skip { t, .. }
                | Line::Broken { t, .. } => t,
            };
            self.floor = self.floor.max(t);
            let t = self.floor;
            self.advance(t);
            match line {
                Line::OtherVersion | Line::Header { .. } | Line::Gap { .. } => {}
                Line::Request { nonce, patience, .. } => {
                    if self.count == MAX_REQUESTS {
                        self.drop_finished();
                    }
                    if self.count == MAX_REQUESTS {
                        // Every reader drops the same overflowing requests,
                        // and takes no sequence number for them: their
                        // requesters find themselves gone and queue again.
                        continue;
                    }
                    // Sequence numbers start at 1, like every other strategy's fences.
                    let seq = self.next_seq;
                    self.next_seq = seq.checked_add(1).ok_or(Error::Corrupt(CorruptKind::Record))?;
                    let since = self.head_since.take().unwrap_or(t);
                    self.requests[self.count] =
                        Request { nonce, offset, seq, since, patience, grant: Grant::No, ended: Ended::Pending };
                    self.count += 1;
                    if self.head() == Some(self.count - 1) {
                        self.requests[self.count - 1].since = since.max(self.last_end).max(self.not_before);
                    }
                }
                Line::Grant { nonce, until, .. } => {
                    if let Some(i) = self.find(nonce).filter(|&i| self.head() == Some(i)) {
                        if t >= self.not_before {
                            self.requests[i].grant = until;
                            self.last_fence = self.last_fence.max(self.requests[i].seq);
                        }
                    }
                }
                Line::Done { nonce, not_before, .. } => {
                    let Some(i) = self.find(nonce) else { continue };
                    let request = self.requests[i];
                    if !request.done() {
                        if self.head() == Some(i) && request.grant != Grant::No {
                            self.not_before = self.not_before.max(not_before);
                        }
                        self.finish(i, t, Ended::Done);
                    } else if request.ended == Ended::Expired
                        && request.grant != Grant::No
                        && self.last_fence == request.seq
                    {
                        // A holder that overran its grant, releasing before
                        // anyone took the lock over: its cooldown holds, as
                        // it would have on time, and the next in line waits
                        // it out.
                        self.not_before = self.not_before.max(not_before);
                        if let Some(next) = self.head() {
                            let r = &mut self.requests[next];
                            r.since = r.since.max(self.not_before);
                        }
                    }
                }
                Line::Skip { nonce, .. } => {
                    // Judged by its writer, once: a dead owner stays dead,
                    // and a reader that judged again (by its own `stale`
                    // option, or with a /proc that answers differently)
                    // could replay the log to another holder.
                    if let Some(i) = self.find(nonce).filter(|&i| !self.requests[i].done()) {
                        self.finish(i, t, Ended::Dead);
                    }
                }
                Line::Broken { nonce, .. } => {
                    if let Some(i) = self.find(nonce).filter(|&i| !self.requests[i].done()) {
                        self.finish(i, t, Ended::Broken);
                    }
                }
            }
        }
        self.advance(self.now(cx).unix_nanos());
        Ok(())
    }

    /// The log's clock: never behind a time already written in it. After
    /// the wall clock steps back, a line stamped before the step holds it
    /// there, for every reader alike, until real time catches up; a holder
    /// that measured its grant by the wall clock alone would think it holds
    /// for longer than the others let it.
    fn now(&self, cx: &Context<'_>) -> WallTime {
        WallTime::from_unix_nanos(self.floor.max(cx.now.unix_nanos()))
    }

    /// `at`, computed from the wall clock, moved onto the log's clock.
    fn on_log_clock(&self, cx: &Context<'_>, at: Option<WallTime>) -> Option<WallTime> {
        at.map(|at| at.saturating_add(self.now(cx).since(cx.now)))
    }

    /// The head, if it holds a grant that is still valid now.
    fn holder(&self, now: i64) -> Option<usize> {
        let h = self.head()?;
        match self.requests[h].grant {
            Grant::Forever => Some(h),
            Grant::Until(until) if until > now => Some(h),
            Grant::Until(_) if !self.waiting_behind(h) => Some(h), // expired, but nobody took it
            _ => None,
        }
    }

    /// Forgets finished requests: lines that name them later are no-ops
    /// (a second `D`, a late `G`), so only the pending ones need a slot.
    fn drop_finished(&mut self) {
        let mut kept = 0;
        for i in 0..self.count {
            if !self.requests[i].done() {
                self.requests[kept] = self.requests[i];
                kept += 1;
            }
        }
        self.count = kept;
    }

    fn pending_count(&self) -> usize {
        self.requests[..self.count].iter().filter(|r| !r.done()).count()
    }

    /// Hands `emit` the compacted log, piece by piece: the header with the
    /// replay state, then each pending request's `K` line (the sequence
    /// numbers of finished requests before it), its own `R` line and its
    /// grant. One description serves both writing it and measuring it.
    fn compacted(&self, emit: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
        let pending = || self.requests[..self.count].iter().filter(|r| !r.done());
        let head = pending().next();
        let first_seq = head.map_or(self.next_seq, |r| r.seq);
        let mut header = FixedText::<LINE_CAPACITY>::new();
        let _ = write!(
            header,
            "H 3 {} {} {} {} {}",
            first_seq - 1,
            self.not_before,
            self.last_end,
            self.floor,
            self.last_fence
        );
        let _ = match head {
            Some(head) => writeln!(header, " {}", head.since),
            None => writeln!(header, " -"),
        };
        emit(header.as_bytes())?;
        let mut next_seq = first_seq;
        for request in pending() {
            if request.seq > next_seq {
                let mut gap = FixedText::<LINE_CAPACITY>::new();
                let _ = writeln!(gap, "K {}", request.seq - next_seq);
                emit(gap.as_bytes())?;
            }
            next_seq = request.seq + 1;
            let line = &self.bytes[request.offset..self.len];
            emit(&line[..line.iter().position(|&b| b == b'\n').map_or(line.len(), |nl| nl + 1)])?;
            // Only the head can hold a grant; written at the log's latest
            // time, when it was already valid.
            let expires = match request.grant {
                Grant::No => continue,
                Grant::Until(ns) => Some(WallTime::from_unix_nanos(ns)),
                Grant::Forever => None,
            };
            emit(grant_line(request.nonce, expires, WallTime::from_unix_nanos(self.floor)).as_bytes())?;
        }
        Ok(())
    }

    fn compacted_len(&self) -> usize {
        let mut len = 0;
        let _ = self.compacted(&mut |piece| {
            len += piece.len();
            Ok(())
        });
        len
    }

    /// Whether a request line of `line_len` bytes may join the queue: the
    /// table has a slot for it, and the compacted queue with it still leaves
    /// [`RESERVE`] free.
    fn admits(&self, line_len: usize) -> bool {
        let gap_line = 24; // "K <u64>\n"
        self.pending_count() + 1 < MAX_REQUESTS
            && self.compacted_len() + gap_line + line_len + RESERVE <= QUEUE_CAPACITY
    }
}

fn nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

fn grant_expiry(grant: Grant) -> Option<WallTime> {
    match grant {
        Grant::Until(ns) => Some(WallTime::from_unix_nanos(ns)),
        _ => None,
    }
}

/// Appends one line in one write, to a log of `size` bytes read under the
/// same exclusive flock. A log that does not end with a newline ends with a
/// line torn by a writer that died or ran out of space inside its write:
/// the newline that closes it goes first, in the same write, so that the
/// torn line cannot swallow this one.
fn append(file: &LockedFile<'_>, size: usize, lines: &[u8]) -> Result<(), Error> {
    let mut last = [b'\n'];
    if size > 0 {
        sys::pread_full(file.fd, &mut last, size as u64 - 1).map_err(Error::Os)?;
    }
    let mut out = FixedText::<{ 2 * LINE_CAPACITY + 1 }>::new();
    if last[0] != b'\n' {
        let _ = out.push_bytes(b"\n");
    }
    out.push_bytes(lines).map_err(|_| Error::Corrupt(CorruptKind::RecordTooLong))?;
    sys::write_all(file.fd, out.as_bytes()).map_err(Error::Os)
}

fn request_line(nonce: Nonce, owner: &Owner, patience: Option<Duration>, t: WallTime) -> FixedText<LINE_CAPACITY> {
    let mut out = FixedText::new();
    let _ = out.push_bytes(b"R ");
    let _ = out.push_bytes(&nonce.hex());
    let _ = out.push_bytes(b" ");
    let _ = out.push_bytes(owner.host.as_bytes());
    let _ = match owner.boot {
        Some(boot) => write!(out, " {boot:?}"),
        None => out.push_bytes(b" -"),
    };
    let _ = write!(out, " {} {}", owner.process.pid, owner.process.start_ticks);
    let _ = match patience {
        Some(ttl) => write!(out, " {}", nanos(ttl)),
        None => out.push_bytes(b" -"),
    };
    let _ = writeln!(out, " {}", t.unix_nanos());
    out
}

fn nonce_line(kind: &str, nonce: Nonce, tail: core::fmt::Arguments<'_>) -> FixedText<LINE_CAPACITY> {
    let mut out = FixedText::new();
    let _ = out.push_bytes(kind.as_bytes());
    let _ = out.push_bytes(b" ");
    let _ = out.push_bytes(&nonce.hex());
    let _ = out.write_fmt(tail);
    let _ = out.push_bytes(b"\n");
    out
}

fn grant_line(nonce: Nonce, expires: Option<WallTime>, t: WallTime) -> FixedText<LINE_CAPACITY> {
    match expires {
        Some(at) => nonce_line("G", nonce, format_args!(" {} {}", at.unix_nanos(), t.unix_nanos())),
        None => nonce_line("G", nonce, format_args!(" never {}", t.unix_nanos())),
    }
}

impl Toplock {
    pub fn new(spec: &Spec) -> Result<Toplock, Error> {
        let path = spec.target().clone();
        let mode = spec.options.mode.unwrap_or(0o666);
        Ok(Toplock {
            compact_temp: crate::strategy::with_suffix(&path, b".compact")?,
            file: GuardFile::new_append_only(path.clone(), mode),
            mode,
            path,
            pending: None,
            log: Log::new(),
        })
    }

    pub fn path(&self) -> &CPath {
        &self.path
    }

    /// Rewrites the log under an exclusive flock: the header with the replay
    /// state, then every pending request with its sequence number and grant.
    /// `force`: rewrite even a short log (an appender needs the room).
    fn compact(&mut self, cx: &Context<'_>, force: bool) -> Result<(), Error> {
        let file = self.file.lock_file_as(Patience::Change, FlockOp::Exclusive)?;
        let cx = &cx.renewed();
        self.log.read(&file)?;
        if !force && self.log.len < COMPACT_AT {
            return Ok(());
        }
        self.log.replay(cx)?;
        let compacted_len = self.log.compacted_len();
        if !force && 2 * compacted_len > self.log.len {
            return Ok(());
        }
        if compacted_len >= QUEUE_CAPACITY {
            // Admission keeps the queue far smaller; only lines that did not
            // come through it (a hostile file) get here. Writing it would
            // leave a file no replay reads.
            return Err(Error::Corrupt(CorruptKind::RecordTooLong));
        }
        ignore_missing(sys::unlink(&self.compact_temp))?;
        let temp = sys::open(&self.compact_temp, CREATE_NEW_FLAGS, self.mode).map_err(Error::from_path_errno)?;
        let written = self.log.compacted(&mut |piece| sys::write_all(&temp, piece).map_err(Error::Os));
        drop(temp);
        // Appenders wait on our exclusive flock, then see that the path names
        // a new file and append there.
        if let Err(e) = written.and_then(|()| sys::rename(&self.compact_temp, &self.path).map_err(Error::Os)) {
            let _ = sys::unlink(&self.compact_temp);
            return Err(e);
        }
        drop(file);
        Ok(())
    }

    /// Locks the log shared, reads and replays it; compacts it first when
    /// it has grown past [`COMPACT_AT`] (failed attempts grow it too, not
    /// only releases).
    fn replay(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        self.read_shared()?;
        if self.log.len >= COMPACT_AT {
            self.compact(cx, false)?;
            self.read_shared()?;
        }
        self.log.replay(&cx.renewed())
    }

    fn read_shared(&mut self) -> Result<(), Error> {
        let file = self.file.lock_file_as(Patience::Change, FlockOp::Shared)?;
        self.log.read(&file)
    }

    /// Appends one line, never past [`QUEUE_CAPACITY`]: the size check and
    /// the write happen under an exclusive flock, and a full log is
    /// compacted first (admission keeps room for this line after that).
    fn append_line(&mut self, cx: &Context<'_>, line: &FixedText<LINE_CAPACITY>) -> Result<(), Error> {
        for _ in 0..2 {
            let file = self.file.lock_file_as(Patience::Change, FlockOp::Exclusive)?;
            let size = sys::fstat(file.fd).map_err(Error::Os)?.size as usize;
            if size + 1 + line.as_bytes().len() < QUEUE_CAPACITY {
                return append(&file, size, line.as_bytes());
            }
            drop(file);
            self.compact(cx, true)?;
        }
        Err(Error::Busy)
    }

    /// Appends this handle's request, stamped now, if the queue admits it
    /// ([`Log::admits`]): decided on the log as it is under the exclusive
    /// flock, so that no other request slips in between. `Busy` when the
    /// queue is full: nobody's place is taken, and the caller asks again.
    fn append_request(&mut self, cx: &Context<'_>, nonce: Nonce) -> Result<(), Error> {
        for _ in 0..2 {
            let file = self.file.lock_file_as(Patience::Change, FlockOp::Exclusive)?;
            let cx = &cx.renewed();
            self.log.read(&file)?;
            self.log.replay(cx)?;
            let mut lines = FixedText::<{ 2 * LINE_CAPACITY }>::new();
            if self.log.len == 0 {
                // A new queue numbers its requests (its fences) from the
                // clock, as every fence is floored (crate::fence): a queue
                // file that was lost restarts above the numbers it gave.
                let before_first = crate::fence::next(0, cx.now).map_or(0, |first| first - 1);
                let _ = writeln!(lines, "H 3 {before_first} 0 0 0 0 -");
            }
            let _ = lines.push_bytes(request_line(nonce, cx.me, cx.options.ttl, cx.now).as_bytes());
            if !self.log.admits(lines.as_bytes().len()) {
                return Err(Error::Busy);
            }
            if self.log.len + 1 + lines.as_bytes().len() < QUEUE_CAPACITY {
                return append(&file, self.log.len, lines.as_bytes());
            }
            drop(file);
            self.compact(cx, true)?;
        }
        Err(Error::Busy)
    }
}

impl Strategy for Toplock {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error> {
        let mine = match self.pending {
            Some(pending) => pending,
            None => {
                self.append_request(cx, nonce)?;
                self.pending = Some(nonce);
                nonce
            }
        };
        // A few rounds: skipping a dead head or granting ourselves changes
        // the log, and each change is judged by reading it back.
        for _ in 0..4 {
            self.replay(cx)?;
            let (renewed, expires) = cx.renewed_with(expires);
            let cx = &renewed;
            let Some(me) = self.log.find(mine).filter(|&i| !self.log.requests[i].done()) else {
                // Our request is gone (an operator broke it): queue again.
                self.pending = None;
                return Err(Error::Busy);
            };
            let Some(head) = self.log.head() else { return Err(Error::Busy) };
            if head != me {
                let owner = self.log.owner(head);
                if cx.options.stale == StaleCheck::DeadOwner && cx.me.judge(&owner) == Liveness::Dead {
                    let skip = nonce_line("X", self.log.requests[head].nonce, format_args!(" {}", cx.now.unix_nanos()));
                    self.append_line(cx, &skip)?;
                    continue;
                }
                return Err(Error::Busy);
            }
            if self.log.now(cx).unix_nanos() < self.log.not_before {
                return Err(Error::Busy);
            }
            let expires = self.log.on_log_clock(cx, expires);
            self.append_line(cx, &grant_line(mine, expires, cx.now))?;
            self.replay(cx)?;
            let cx = &cx.renewed();
            // Looked up again: a compaction in between renumbers the table,
            // and our request may have ended (an operator's break) and gone.
            let me = self.log.find(mine);
            if me.is_none() || self.log.holder(self.log.now(cx).unix_nanos()) != me {
                return Err(Error::Busy);
            }
            self.pending = None;
            let fence = me.map_or(0, |i| self.log.requests[i].seq);
            return Ok(Record { owner: *cx.me, nonce: mine, fence, expires });
        }
        Err(Error::Busy)
    }

    fn abandon(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        if let Some(pending) = self.pending.take() {
            self.append_line(cx, &nonce_line("D", pending, format_args!(" {} 0", cx.now.unix_nanos())))?;
        }
        Ok(())
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        self.log.watched = Some(held.nonce);
        let replayed = self.replay(cx);
        self.log.watched = None;
        replayed?;
        let cx = &cx.renewed();
        let now = self.log.now(cx);
        let me = self.log.find(held.nonce);
        let holder = self.log.holder(now.unix_nanos());
        let outcome = match (me, holder) {
            (Some(i), Some(h)) if i == h => {
                if past_expiry(grant_expiry(self.log.requests[i].grant), now) {
                    ReleaseOutcome::Expired
                } else {
                    ReleaseOutcome::Released
                }
            }
            (_, Some(_)) => ReleaseOutcome::Lost,
            // Skipped after its expiry, and nobody was granted it since.
            (_, None) if self.log.watched_end == Ended::Expired && self.log.last_fence <= held.fence => {
                ReleaseOutcome::Expired
            }
            // Broken by an operator, taken (and perhaps released) by the
            // next in line, or no longer in the log at all.
            (_, None) => ReleaseOutcome::Lost,
        };
        // Written while the request is still queued, and also after an
        // overrun that nobody took over, so that its cooldown holds.
        let overran_untaken = outcome == ReleaseOutcome::Expired && !cooldown.is_zero();
        if me.is_some_and(|i| !self.log.requests[i].done()) || overran_untaken {
            let not_before = if cooldown.is_zero() { 0 } else { now.saturating_add(cooldown).unix_nanos() };
            self.append_line(cx, &nonce_line("D", held.nonce, format_args!(" {} {not_before}", cx.now.unix_nanos())))?;
        }
        Ok(outcome)
    }

    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error> {
        self.replay(cx)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let now = self.log.now(cx);
        let me = self.log.find(held.nonce);
        if me.is_none() || self.log.holder(now.unix_nanos()) != me {
            return Ok(ProlongOutcome::Lost);
        }
        let was_expired = me.is_some_and(|i| past_expiry(grant_expiry(self.log.requests[i].grant), now));
        let expires = self.log.on_log_clock(cx, expires);
        self.append_line(cx, &grant_line(held.nonce, expires, cx.now))?;
        self.replay(cx)?;
        // Looked up again: a compaction in between renumbers the table.
        let renewed = self.log.find(held.nonce).is_some_and(|i| {
            self.log.requests[i].grant == expires.map_or(Grant::Forever, |at| Grant::Until(at.unix_nanos()))
        });
        Ok(match (renewed, was_expired) {
            (false, _) => ProlongOutcome::Lost,
            (true, true) => ProlongOutcome::Expired,
            (true, false) => ProlongOutcome::Prolonged,
        })
    }

    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        // An exclusive flock keeps every other process from appending (a
        // grant included) while we check and act.
        let file = self.file.lock_file_as(Patience::Change, FlockOp::Exclusive)?;
        let cx = &cx.renewed();
        self.log.read(&file)?;
        self.log.replay(cx)?;
        let now = self.log.now(cx);
        let me = self.log.find(held.nonce);
        let on_disk = match me {
            Some(i) if self.log.holder(now.unix_nanos()) == Some(i) => {
                Some(Record { expires: grant_expiry(self.log.requests[i].grant), ..*held })
            }
            _ => None,
        };
        let outcome = commit_if_current(on_disk, now, action);
        drop(file);
        outcome
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        self.replay(cx)?;
        let cx = &cx.renewed();
        let now = self.log.now(cx);
        let holder = self.log.holder(now.unix_nanos()).map(|h| {
            let request = self.log.requests[h];
            let owner = self.log.owner(h);
            let record =
                Record { owner, nonce: request.nonce, fence: request.seq, expires: grant_expiry(request.grant) };
            let liveness = cx.me.judge(&owner);
            Holder {
                pid: owner.process.pid,
                host: Some(owner.host),
                record: Some(record),
                liveness,
                stale: past_expiry(record.expires, now)
                    || (cx.options.stale == StaleCheck::DeadOwner && liveness == Liveness::Dead),
                this_handle: false,
            }
        });
        Ok(Inspection {
            holder,
            last_fence: self.log.last_fence,
            cooldown_until: (self.log.not_before > now.unix_nanos())
                .then(|| WallTime::from_unix_nanos(self.log.not_before)),
            queue_length: Some(self.log.pending_count() as u32),
        })
    }

    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        self.replay(cx)?;
        let Some(head) = self.log.head() else { return Ok(false) };
        let nonce = self.log.requests[head].nonce;
        self.append_line(cx, &nonce_line("B", nonce, format_args!(" {}", cx.now.unix_nanos())))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file_len(path: &PathBuf) -> usize {
        std::fs::metadata(path).map_or(0, |m| m.len() as usize)
    }

    /// Admission keeps the promise the reserve makes: once the queue is full
    /// a newcomer is refused without writing anything, and every request
    /// already queued can still be granted, renewed and released, one after
    /// another, each line fitting. With a short host name the table's slots
    /// run out first; with the longest, the file's bytes do.
    #[test]
    fn a_full_queue_refuses_newcomers_and_keeps_room_for_those_queued() {
        let long_host = [b'h'; 64];
        for host in [&b"h"[..], &long_host[..]] {
            let dir = std::env::temp_dir().join(std::format!(
                "lockcore-toplock-full-{}-{}-{}",
                host.len(),
                std::process::id(),
                WallTime::now().unix_nanos()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("queue");
            let spec = Spec::parse(std::format!("toplock:{}?ttl=1h", path.display()).as_bytes()).unwrap();
            let mut me = Owner::current().unwrap();
            me.host = HostName::from_bytes(host).unwrap();
            let cx = Context { me: &me, options: &spec.options, now: WallTime::now() };
            // Boxed: the strategy keeps the log's bytes inline.
            let mut queue = std::boxed::Box::new(Toplock::new(&spec).unwrap());

            let mut admitted = std::vec::Vec::new();
            loop {
                let nonce = Nonce::random().unwrap();
                let before = file_len(&path);
                match queue.append_request(&cx, nonce) {
                    Ok(()) => admitted.push(nonce),
                    Err(Error::Busy) => {
                        assert_eq!(file_len(&path), before, "a refused request wrote to the queue");
                        break;
                    }
                    Err(e) => panic!("queueing request {}: {e:?}", admitted.len() + 1),
                }
                assert!(file_len(&path) < QUEUE_CAPACITY);
                assert!(admitted.len() < MAX_REQUESTS, "more requests pending than the table holds");
            }
            assert!(admitted.len() >= 60, "host of {} bytes: only {} requests admitted", host.len(), admitted.len());

            for (turn, &nonce) in admitted.iter().enumerate() {
                let now = WallTime::now();
                for _ in 0..3 {
                    let grant = grant_line(nonce, Some(now.saturating_add(Duration::from_secs(3600))), now);
                    queue.append_line(&cx, &grant).unwrap_or_else(|e| panic!("turn {turn}: grant: {e:?}"));
                }
                let done = nonce_line("D", nonce, format_args!(" {} 0", now.unix_nanos()));
                queue.append_line(&cx, &done).unwrap_or_else(|e| panic!("turn {turn}: release: {e:?}"));
                assert!(file_len(&path) < QUEUE_CAPACITY);
            }
            queue.replay(&cx).unwrap();
            assert_eq!(queue.log.pending_count(), 0, "every request was released");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

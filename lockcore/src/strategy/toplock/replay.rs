//! What a `toplock` queue means: the replay of its lines, a pure function
//! of the log's bytes and of the time it is read at, so that every process
//! that reads the same log agrees on the holder, whatever options it
//! opened the lock with and however it would judge a process now.
//!
//! Replay walks the lines in file order with a clock that never runs back
//! (each line's time, floored by the times before it). The head is the
//! first request not done. A grant (`G`) counts only if its requester is the
//! head at that point of the log and any cooldown has passed; its first
//! grant fixes the request's fence, never below the line's own (the
//! grantee's wall clock in microseconds) nor at or below the last fence. A
//! granted head whose expiry passes is passed over once someone waits
//! behind it; an ungranted head is passed over when its requester's
//! patience (in its `R` line) has passed since it became head (its requester
//! stopped asking); a head whose owner was found dead is passed over by the
//! `X` line of whoever found it so. Passing over never removes a line, so
//! nobody loses their place.
//!
//! A process that reads the log again after it has only grown by appends
//! goes on from where its last replay stopped ([`Replay::run_after`]) and
//! comes to the same state, so that each line is parsed once by each
//! reader, not at every read of a log that holds many.

use crate::owner::{HostName, Nonce, Owner, ProcessId};
use crate::strategy::toplock::line::{is_header_of_some_version, parse_commit, Grant, Header, Line, CHECKPOINT_MARK};

/// Requests one replay tracks at once; finished ones are dropped from the
/// table as it fills, and a new request is admitted only while fewer than
/// this many are pending.
pub const MAX_REQUESTS: usize = 128;

/// How a request left the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Still in the queue.
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

/// One request, as far as the replay has got.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// The nonce of its `R` line.
    pub nonce: Nonce,
    /// Offset of its `R` line in the log: where its owner is read from, and
    /// what compaction copies.
    offset: usize,
    /// When it became head (or was made, before that): for the holder,
    /// when its turn began.
    pub since: i64,
    /// The requester's patience: how long it may stay head without a grant
    /// (without asking again) before the others pass it over.
    patience: Option<i64>,
    /// Its latest valid grant; [`Grant::No`] before the first.
    pub grant: Grant,
    /// Its fencing token, from its first grant; 0 before that.
    pub fence: u64,
    /// `Pending` while in the queue; otherwise why it left.
    pub ended: Ended,
}

impl Request {
    /// Whether it has left the queue, however.
    pub fn done(&self) -> bool {
        self.ended != Ended::Pending
    }
}

const EMPTY_REQUEST: Request =
    Request { nonce: Nonce(0), offset: 0, since: 0, patience: None, grant: Grant::No, fence: 0, ended: Ended::Done };

/// Why a log cannot be replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Its first line is no header of any version: not a queue of this
    /// library.
    NotAQueue,
    /// A header of another version, a second header, or a fence past the
    /// largest: replaying it by these rules could hand out a fence twice.
    Corrupt,
}

/// The state of a queue after a replay.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The requests, in queue order; only the first `count` mean anything.
    /// Requests that finished may have been dropped to make room.
    pub requests: [Request; MAX_REQUESTS],
    /// How many of `requests` are in use.
    pub count: usize,
    /// The log's header, brought up to date by the lines after it: the
    /// clock's floor, the cooldown, the last end and the last fence.
    pub header: Header,
    /// Lines skipped as torn (a writer died or ran out of space inside its
    /// write; the next appender closes such a line).
    pub torn_lines: u32,
    /// Lines skipped because they are stamped after the reader's clock: a
    /// writer of this boot reads the boot clock before it appends, so no
    /// line of one is ever ahead of a later reader. Believed, one such line
    /// would hold the log's clock at its time, ending every grant at once.
    pub future_lines: u32,
    /// A request whose ending the caller wants to know (its own), and how
    /// it ended, even after it was dropped from the table: set by
    /// [`watch`](Self::watch) or [`watch_new`](Self::watch_new).
    watched: Option<Nonce>,
    /// How `watched` ended in the last [`run`](Self::run); `Pending` if it
    /// did not.
    pub watched_end: Ended,
    /// Where the last [`run`](Self::run) began: 0, or the committed
    /// checkpoint a compaction in place left ([`last_commit`]).
    pub origin: usize,
    /// Where the last run can be taken up by the next, if the log has only
    /// grown since ([`run_after`](Self::run_after)).
    resume: Option<Resume>,
    /// The last run skipped a line as from the future or put a header time
    /// back to its reader's clock: its result holds for that clock only,
    /// and a later reader replays the log anew.
    clock_bound: bool,
}

/// How far a replay got, for the next one to go on from there: going on
/// comes to what a replay of the whole log would, if the lines after `len`
/// were all written after it ran. A run's clock enters its result only
/// through the lines it skipped as from the future, the header times it
/// put back to it, and its last [`Replay::advance`]. A run that did either
/// of the first two (`clock_bound`) leaves no `Resume`; the last composes
/// with the advance of any line stamped at or after `now`, as every line
/// appended since is ([`Replay::run_after`]).
#[derive(Clone, Copy, Debug)]
struct Resume {
    /// The length of the log's whole lines it read: where the next line starts.
    len: usize,
    /// The log's clock it advanced to, last.
    now: i64,
    /// The request it watched: a run that watched another would have told
    /// a different ending.
    watched: Option<Nonce>,
}

/// The commit of a checkpoint a compaction appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Where its first line starts: where the replay begins.
    pub from: usize,
    /// Where its commit line starts.
    commit_at: usize,
    /// Where the line after its commit starts.
    after: usize,
}

/// The last committed checkpoint in `bytes`: the last whole `E` line whose
/// numbers name the `K` lines just before it, from a line's start. A commit
/// torn by a writer that died and closed by the next appender reads as no
/// commit ([`TORN_LINE_END`](super::line::TORN_LINE_END)).
pub fn last_commit(bytes: &[u8]) -> Option<Commit> {
    // The last line without its newline is torn: whole lines end before.
    let mut end = bytes.iter().rposition(|&b| b == b'\n')? + 1;
    while end > 0 {
        let newline = end - 1;
        let start = bytes[..newline].iter().rposition(|&b| b == b'\n').map_or(0, |nl| nl + 1);
        if let Some((from, len)) =
            bytes[start..].starts_with(b"E ").then(|| parse_commit(&bytes[start..newline])).flatten()
        {
            let at_line_start = from == 0 || bytes.get(from - 1) == Some(&b'\n');
            if from.checked_add(len) == Some(start) && at_line_start && bytes[from..start].starts_with(CHECKPOINT_MARK)
            {
                return Some(Commit { from, commit_at: start, after: end });
            }
        }
        end = start;
    }
    None
}

impl Default for Replay {
    fn default() -> Replay {
        Replay::new()
    }
}

impl Replay {
    /// An empty queue: no requests, [`Header::EMPTY`].
    pub const fn new() -> Replay {
        Replay {
            requests: [EMPTY_REQUEST; MAX_REQUESTS],
            count: 0,
            header: Header::EMPTY,
            torn_lines: 0,
            future_lines: 0,
            watched: None,
            watched_end: Ended::Pending,
            origin: 0,
            resume: None,
            clock_bound: false,
        }
    }

    /// Replays the whole log `bytes` as of `now` (boot-clock nanoseconds).
    pub fn run(&mut self, bytes: &[u8], now: i64) -> Result<(), Unreadable> {
        self.resume = None;
        self.clock_bound = false;
        self.count = 0;
        self.torn_lines = 0;
        self.future_lines = 0;
        self.watched_end = Ended::Pending;
        // Whatever a checkpoint later in the file says: a compaction writes
        // its header over the first one, so a queue always starts as one.
        let first_line = &bytes[..bytes.iter().position(|&b| b == b'\n').unwrap_or(bytes.len())];
        if !is_header_of_some_version(first_line) {
            return Err(Unreadable::NotAQueue);
        }
        // A committed checkpoint holds the whole queue as it was when it was
        // written: what came before it is history.
        let checkpoint = last_commit(bytes);
        self.origin = checkpoint.map_or(0, |c| c.from);
        let first = checkpoint.map_or(0, |c| c.from + CHECKPOINT_MARK.len());
        let mut at = self.origin;
        while at < bytes.len() {
            if let Some(c) = checkpoint.filter(|c| at == c.commit_at) {
                at = c.after;
                continue;
            }
            let rest = &bytes[at..];
            // A last line without its newline was torn by a writer that died
            // or ran out of space inside its write (appends hold the file
            // exclusively, so none is in flight while we read): it does not
            // count, and the next appender closes it before its own line
            // so that it never will (`TORN_LINE_END`).
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else { break };
            let (offset, text) = match checkpoint {
                // Inside the checkpoint, written whole in one write: every
                // line is marked, or the file was written by someone else.
                Some(c) if at < c.commit_at => match rest[..nl].strip_prefix(CHECKPOINT_MARK) {
                    Some(text) => (at + CHECKPOINT_MARK.len(), text),
                    None => return Err(Unreadable::Corrupt),
                },
                _ => (at, &rest[..nl]),
            };
            at += nl + 1;
            let line = Line::parse(text);
            if offset == first {
                match line {
                    Some(Line::Header(header)) => {
                        // Its times, likewise, are never ahead of the reader.
                        self.header = Header {
                            last_end: header.last_end.min(now),
                            floor: header.floor.min(now),
                            head_since: header.head_since.map(|t| t.min(now)),
                            ..header
                        };
                        self.clock_bound |= self.header != header;
                        continue;
                    }
                    _ if is_header_of_some_version(text) => return Err(Unreadable::Corrupt),
                    _ => return Err(Unreadable::NotAQueue),
                }
            }
            self.replay_line(line, offset, now)?;
        }
        if at == 0 {
            // A header, without its newline: never one a writer left whole.
            return Err(Unreadable::Corrupt);
        }
        self.finish_run(at, now);
        Ok(())
    }

    /// [`run`](Self::run), going on from where the last run stopped when
    /// `last_read` (the bytes that run read, as far as the caller kept them)
    /// is the start of `bytes`: the same log, grown by appends. It comes to
    /// exactly what a run over the whole log would, so that a process that
    /// reads a log after each change replays each line once, not the whole
    /// log each time. It starts over when the lines after are not plain
    /// appends: a commit (the log starts again at its checkpoint) or a line
    /// stamped before the last run's clock (every writer reads its clock
    /// under the exclusive lock, after any reader that held the file
    /// before it; only a hand that wrote the file otherwise stamps one so).
    /// `Ok(true)` when it went on from the last run.
    pub fn run_after(&mut self, bytes: &[u8], now: i64, last_read: &[u8]) -> Result<bool, Unreadable> {
        let resume = self.resume.take().filter(|resume| {
            resume.watched == self.watched
                // A clock that ran back (none does) would judge the lines
                // already read differently.
                && now >= resume.now
                && last_read.len() >= resume.len
                && bytes.get(..resume.len) == Some(&last_read[..resume.len])
        });
        let Some(resume) = resume else { return self.run(bytes, now).map(|()| false) };
        let mut at = resume.len;
        while let Some(nl) = bytes[at..].iter().position(|&b| b == b'\n') {
            let text = &bytes[at..at + nl];
            let line = Line::parse(text);
            if text.starts_with(b"E ") || line.and_then(|line| line.time()).is_some_and(|t| t < resume.now) {
                return self.run(bytes, now).map(|()| false);
            }
            self.replay_line(line, at, now)?;
            at += nl + 1;
        }
        self.finish_run(at, now);
        Ok(true)
    }

    /// The first bytes of the log that [`run_after`](Self::run_after) needs
    /// to see unchanged to go on from the last run, if it can.
    pub fn resumable_len(&self) -> Option<usize> {
        self.resume.map(|resume| resume.len)
    }

    /// Tells the next runs how request `nonce` ended, in
    /// [`watched_end`](Self::watched_end).
    pub fn watch(&mut self, nonce: Nonce) {
        self.watched = Some(nonce);
    }

    /// [`watch`](Self::watch) a request yet to be written, whose nonce is
    /// fresh: no line already read can name it short of guessing 128 random
    /// bits, so the last run's ending of it is `Pending`, and the next run
    /// may go on from it.
    pub fn watch_new(&mut self, nonce: Nonce) {
        self.watched = Some(nonce);
        self.watched_end = Ended::Pending;
        if let Some(resume) = &mut self.resume {
            resume.watched = self.watched;
        }
    }

    /// Replays `text`, one whole line (its newline optional) that a writer
    /// is about to append at `offset`, as every later run will replay it:
    /// how the writer learns what its line will do before it writes it.
    /// The result no longer describes the log as read, so nothing goes on
    /// from it.
    pub fn replay_appended(&mut self, text: &[u8], offset: usize, now: i64) -> Result<(), Unreadable> {
        self.resume = None;
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        self.replay_line(Line::parse(text), offset, now)
    }

    /// Replays one whole line after the header (`None`: it does not parse),
    /// which starts at `offset`, as of the reader's `now`.
    fn replay_line(&mut self, line: Option<Line>, offset: usize, now: i64) -> Result<(), Unreadable> {
        // A line that does not parse is such a torn line, closed (or one
        // another hand wrote). Its
        // writer learnt of the failure from its write, or died: a torn
        // request is made again, a torn grant is not confirmed, a torn
        // release or skip is retried or its owner found dead.
        let Some(line) = line else {
            self.torn_lines += 1;
            return Ok(());
        };
        let t = line.time().ok_or(Unreadable::Corrupt)?;
        if t > now {
            self.future_lines += 1;
            self.clock_bound = true;
            return Ok(());
        }
        self.header.floor = self.header.floor.max(t);
        let t = self.header.floor;
        self.advance(t);
        self.apply(line, offset, t)
    }

    /// Ends a run that read the log's whole lines up to `len`: the queue as
    /// of the reader's `now`, and where the next run may go on from.
    fn finish_run(&mut self, len: usize, now: i64) {
        let now = self.now(now);
        self.advance(now);
        if !self.clock_bound {
            self.resume = Some(Resume { len, now, watched: self.watched });
        }
    }

    fn apply(&mut self, line: Line, offset: usize, t: i64) -> Result<(), Unreadable> {
        match line {
            Line::Header(_) | Line::OtherVersion => {}
            Line::Request { nonce, patience, .. } => {
                if !self.make_room() {
                    // Every reader drops the same overflowing requests: their
                    // requesters find themselves gone and queue again.
                    return Ok(());
                }
                let since = self.header.head_since.take().unwrap_or(t);
                self.requests[self.count] =
                    Request { nonce, offset, since, patience, grant: Grant::No, fence: 0, ended: Ended::Pending };
                self.count += 1;
                if self.head() == Some(self.count - 1) {
                    let r = &mut self.requests[self.count - 1];
                    r.since = since.max(self.header.last_end).max(self.header.not_before);
                }
            }
            Line::Grant { nonce, until, fence, .. } => {
                if let Some(i) = self.find(nonce).filter(|&i| self.head() == Some(i)) {
                    if t >= self.header.not_before {
                        if self.requests[i].grant == Grant::No {
                            let floor = self.header.last_fence.checked_add(1).ok_or(Unreadable::Corrupt)?;
                            self.requests[i].fence = fence.max(floor);
                            self.header.last_fence = self.requests[i].fence;
                        }
                        self.requests[i].grant = until;
                    }
                }
            }
            Line::Done { nonce, not_before, .. } => {
                let Some(i) = self.find(nonce) else { return Ok(()) };
                let request = self.requests[i];
                if !request.done() {
                    if self.head() == Some(i) && request.grant != Grant::No {
                        self.header.not_before = self.header.not_before.max(not_before);
                    }
                    self.finish(i, t, Ended::Done);
                } else if request.ended == Ended::Expired
                    && request.grant != Grant::No
                    && self.header.last_fence == request.fence
                {
                    // A holder that overran its grant, releasing before
                    // anyone took the lock over: released after all, late.
                    // Its cooldown holds, as it would have on time, and the
                    // next in line waits it out.
                    self.requests[i].ended = Ended::Done;
                    self.header.not_before = self.header.not_before.max(not_before);
                    if let Some(next) = self.head() {
                        let r = &mut self.requests[next];
                        r.since = r.since.max(self.header.not_before);
                    }
                }
            }
            Line::Skip { nonce, .. } => {
                // Judged by its writer, once: a dead owner stays dead, and a
                // reader that judged again (by its own `stale` option, or
                // with a /proc that answers differently) could replay the
                // log to another holder.
                if let Some(i) = self.find(nonce).filter(|&i| !self.requests[i].done()) {
                    self.finish(i, t, Ended::Dead);
                }
            }
            Line::Broken { nonce, .. } => {
                if let Some(i) = self.find(nonce).filter(|&i| !self.requests[i].done()) {
                    self.finish(i, t, Ended::Broken);
                }
            }
            Line::Left { nonce, since, until, fence, dead, .. } => {
                // Only ever the last fence handed out, by the compaction that
                // wrote it: a holder with a later one is none of this queue's.
                if self.find(nonce).is_some() || fence > self.header.last_fence {
                    return Ok(());
                }
                if !self.make_room() {
                    return Ok(());
                }
                let ended = if dead { Ended::Dead } else { Ended::Expired };
                self.requests[self.count] =
                    Request { nonce, offset, since: since.min(t), patience: None, grant: until, fence, ended };
                self.count += 1;
                if self.watched == Some(nonce) {
                    self.watched_end = ended;
                }
            }
        }
        Ok(())
    }

    /// The log's clock at a reader's `now`: never behind a time already
    /// written in it.
    pub fn now(&self, now: i64) -> i64 {
        self.header.floor.max(now)
    }

    /// The index of the request `nonce` in `requests`, done or not, if the
    /// table still holds it.
    pub fn find(&self, nonce: Nonce) -> Option<usize> {
        self.requests[..self.count].iter().position(|r| r.nonce == nonce)
    }

    /// The index of the first request not done: the one whose turn it is.
    pub fn head(&self) -> Option<usize> {
        self.requests[..self.count].iter().position(|r| !r.done())
    }

    fn waiting_behind(&self, head: usize) -> bool {
        self.requests[head + 1..self.count].iter().any(|r| !r.done())
    }

    /// Requests still queued, the holder's included.
    pub fn pending_count(&self) -> usize {
        self.requests[..self.count].iter().filter(|r| !r.done()).count()
    }

    /// How many pending requests come before request `index`.
    pub fn ahead_of(&self, index: usize) -> usize {
        self.requests[..index].iter().filter(|r| !r.done()).count()
    }

    /// The holder before request `index`, if it left the queue without
    /// releasing (found dead, or past its grant with others waiting) and
    /// the table still holds it.
    pub fn taken_over_before(&self, index: usize) -> Option<usize> {
        let last = self.requests[..index].iter().rposition(|r| r.grant != Grant::No)?;
        matches!(self.requests[last].ended, Ended::Dead | Ended::Expired).then_some(last)
    }

    /// [`taken_over_before`](Self::taken_over_before) a request yet to be
    /// made.
    pub fn taken_over_last(&self) -> Option<usize> {
        self.taken_over_before(self.count)
    }

    /// The head, if it holds a grant that is still valid at `now`.
    pub fn holder(&self, now: i64) -> Option<usize> {
        let h = self.head()?;
        match self.requests[h].grant {
            Grant::Forever => Some(h),
            Grant::Until(until) if until > now => Some(h),
            Grant::Until(_) if !self.waiting_behind(h) => Some(h), // expired, but nobody took it
            _ => None,
        }
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
            self.header.last_end = self.header.last_end.max(at);
            if let Some(next) = self.head() {
                let r = &mut self.requests[next];
                r.since = r.since.max(self.header.last_end).max(self.header.not_before);
            }
        }
    }

    /// Whether the table has a slot for one more request, finished ones
    /// forgotten first if it is full.
    fn make_room(&mut self) -> bool {
        if self.count == MAX_REQUESTS {
            self.drop_finished();
        }
        self.count < MAX_REQUESTS
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

    /// The owner named by request `index`'s `R` line in `bytes` (parsed
    /// again rather than stored, to keep the table small).
    pub fn owner(&self, bytes: &[u8], index: usize) -> Owner {
        let line = &bytes[self.requests[index].offset.min(bytes.len())..];
        let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
        match Line::parse(line) {
            Some(Line::Request { owner, .. } | Line::Left { owner, .. }) => owner,
            // Replay parsed this very line as a request (or a holder that
            // left) before recording it.
            _ => Owner {
                host: HostName::UNKNOWN,
                boot: None,
                process: ProcessId { namespace: 0, pid: 0, start_ticks: 0 },
            },
        }
    }

    /// Hands `emit` the compacted log of `bytes`, piece by piece: the header
    /// with the replay state; the holder that left without releasing, if
    /// nobody has been granted the lock since (what the next grant names as
    /// taken over, and what tells that holder's late release it expired);
    /// then each pending request's own `R` line and, for the head, its grant
    /// with its fence. One description serves both writing it and
    /// measuring it. The header keeps both boots it names: the kernel's is
    /// what tells a process on another clock of this boot (another time
    /// namespace) from one of a later boot, which alone may start the queue
    /// afresh.
    pub fn compacted<E>(&self, bytes: &[u8], emit: &mut dyn FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let pending = || self.requests[..self.count].iter().filter(|r| !r.done());
        let head = pending().next();
        // The head's grant is replayed again: the header's last fence is set
        // just below the head's own, so that the grant gets that fence back.
        let granted_head = head.filter(|r| r.grant != Grant::No);
        let header = Header {
            last_fence: granted_head.map_or(self.header.last_fence, |r| r.fence.saturating_sub(1)),
            head_since: head.map(|r| r.since),
            ..self.header
        };
        emit(Line::Header(header).encode().as_bytes())?;
        if let Some(left) = self.taken_over_last() {
            // The last grant, so its fence is the header's last one.
            let request = self.requests[left];
            let line = Line::Left {
                nonce: request.nonce,
                owner: self.owner(bytes, left),
                since: request.since,
                until: request.grant,
                fence: request.fence,
                dead: request.ended == Ended::Dead,
                t: self.header.floor,
            };
            emit(line.encode().as_bytes())?;
        }
        for request in pending() {
            let line = &bytes[request.offset.min(bytes.len())..];
            emit(&line[..line.iter().position(|&b| b == b'\n').map_or(line.len(), |nl| nl + 1)])?;
            if request.grant != Grant::No {
                // Only the head can hold a grant; written at the log's
                // latest time, when it was already valid.
                let grant = Line::Grant {
                    nonce: request.nonce,
                    until: request.grant,
                    t: self.header.floor,
                    fence: request.fence,
                };
                emit(grant.encode().as_bytes())?;
            }
        }
        Ok(())
    }

    /// The length in bytes of the log [`compacted`](Self::compacted) would
    /// hand out.
    pub fn compacted_len(&self, bytes: &[u8]) -> usize {
        let mut len = 0;
        let _ = self.compacted::<()>(bytes, &mut |piece| {
            len += piece.len();
            Ok(())
        });
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::BootId;

    const SECOND: i64 = 1_000_000_000;

    /// A log in memory, written line by line as the strategy would.
    struct Log(std::vec::Vec<u8>);

    impl Log {
        fn new(last_fence: u64) -> Log {
            let header = Header { boot: Some(BootId([1; 16])), last_fence, ..Header::EMPTY };
            Log(Line::Header(header).encode().as_bytes().to_vec())
        }
        fn push(&mut self, line: Line) -> &mut Log {
            self.0.extend_from_slice(line.encode().as_bytes());
            self
        }
        fn request(&mut self, n: u128, patience: Option<i64>, t: i64) -> &mut Log {
            let mut owner = Owner::current().unwrap();
            owner.process.pid = n as i32 + 1;
            self.push(Line::Request { nonce: Nonce(n), owner, patience, t })
        }
        fn grant(&mut self, n: u128, until: i64, t: i64, fence: u64) -> &mut Log {
            self.push(Line::Grant { nonce: Nonce(n), until: Grant::Until(until), t, fence })
        }
        fn replay(&self, now: i64) -> Replay {
            let mut replay = Replay::new();
            replay.run(&self.0, now).unwrap();
            replay
        }
    }

    fn holder(log: &Log, now: i64) -> Option<u128> {
        let replay = log.replay(now);
        replay.holder(now).map(|i| replay.requests[i].nonce.0)
    }

    #[test]
    fn requests_are_served_in_order_and_only_the_head_is_granted() {
        let mut log = Log::new(0);
        log.request(1, None, 10).request(2, None, 11);
        log.grant(2, 100 * SECOND, 12, 50);
        assert_eq!(holder(&log, 13), None, "a grant to someone behind the head does not count");
        log.grant(1, 100 * SECOND, 14, 50);
        assert_eq!(holder(&log, 15), Some(1));
        log.push(Line::Done { nonce: Nonce(1), t: 16, not_before: 0 }).grant(2, 100 * SECOND, 17, 0);
        let replay = log.replay(18);
        assert_eq!(replay.holder(18).map(|i| replay.requests[i].nonce.0), Some(2));
        assert_eq!(
            replay.requests[replay.find(Nonce(2)).unwrap()].fence,
            51,
            "above the last fence, whatever the line says"
        );
    }

    #[test]
    fn a_first_grant_takes_the_floor_its_line_asks_for() {
        let mut log = Log::new(7);
        log.request(1, None, 1).grant(1, 100, 2, 1_700_000_000_000_000);
        let replay = log.replay(3);
        assert_eq!(replay.requests[0].fence, 1_700_000_000_000_000);
        assert_eq!(replay.header.last_fence, 1_700_000_000_000_000);
        // A renewal keeps the fence.
        log.grant(1, 200, 4, 1_800_000_000_000_000);
        assert_eq!(log.replay(5).requests[0].fence, 1_700_000_000_000_000);
    }

    #[test]
    fn a_fence_past_the_largest_is_refused() {
        let mut log = Log::new(u64::MAX);
        log.request(1, None, 1).grant(1, 100, 2, 5);
        assert_eq!(Replay::new().run(&log.0, 3), Err(Unreadable::Corrupt));
    }

    #[test]
    fn an_expired_grant_is_passed_over_only_when_someone_waits() {
        let mut log = Log::new(0);
        log.request(1, None, 0).grant(1, 5 * SECOND, 1, 1);
        assert_eq!(holder(&log, 9 * SECOND), Some(1), "expired, but nobody took it");
        log.request(2, None, 10 * SECOND).grant(2, 20 * SECOND, 10 * SECOND + 1, 0);
        let replay = log.replay(11 * SECOND);
        assert_eq!(replay.requests[0].ended, Ended::Expired);
        assert_eq!(replay.holder(11 * SECOND).map(|i| replay.requests[i].nonce.0), Some(2));
    }

    #[test]
    fn a_head_that_stopped_asking_is_passed_over_after_its_own_ttl() {
        let mut log = Log::new(0);
        log.request(1, Some(2 * SECOND), 0).request(2, None, 1);
        assert_eq!(log.replay(SECOND).head().map(|i| log.replay(SECOND).requests[i].nonce.0), Some(1));
        let replay = log.replay(3 * SECOND);
        assert_eq!(replay.requests[replay.head().unwrap()].nonce, Nonce(2));
    }

    #[test]
    fn a_dead_or_broken_head_is_passed_over_by_its_line() {
        let mut log = Log::new(0);
        log.request(1, None, 0).grant(1, i64::MAX, 1, 1).request(2, None, 2).request(3, None, 3);
        log.push(Line::Skip { nonce: Nonce(1), t: 4 });
        assert_eq!(log.replay(5).requests[0].ended, Ended::Dead);
        log.push(Line::Broken { nonce: Nonce(2), t: 6 });
        let replay = log.replay(7);
        assert_eq!(replay.requests[1].ended, Ended::Broken);
        assert_eq!(replay.head(), Some(2));
    }

    #[test]
    fn a_grant_names_the_holder_it_took_over_from_only_if_that_one_never_released() {
        let mut log = Log::new(0);
        // Released: nobody taken over.
        log.request(1, None, 0).grant(1, i64::MAX, 1, 1).push(Line::Done { nonce: Nonce(1), t: 2, not_before: 0 });
        log.request(2, None, 3).grant(2, 5 * SECOND, 4, 0);
        let replay = log.replay(5);
        assert_eq!(replay.taken_over_before(replay.find(Nonce(2)).unwrap()), None);
        // Past its grant with a waiter (3) who then gave up, an ungranted
        // request (4) skipped as dead: the last grant before 5 is 2's.
        log.request(3, None, 6 * SECOND).push(Line::Done { nonce: Nonce(3), t: 7 * SECOND, not_before: 0 });
        log.request(4, None, 8 * SECOND).push(Line::Skip { nonce: Nonce(4), t: 9 * SECOND });
        let replay = log.replay(10 * SECOND);
        assert_eq!(replay.head(), None, "the queue is empty");
        assert_eq!(replay.taken_over_last().map(|i| replay.requests[i].nonce), Some(Nonce(2)));
        assert_eq!(replay.requests[replay.taken_over_last().unwrap()].ended, Ended::Expired);
        // Its late release, before anyone took the lock: released after all.
        let mut late = Log(log.0.clone());
        late.push(Line::Done { nonce: Nonce(2), t: 9 * SECOND + 1, not_before: 0 });
        assert_eq!(late.replay(10 * SECOND).taken_over_last(), None, "a late release is a release");
        // A holder found dead, with the next request behind it.
        log.request(5, None, 11 * SECOND).grant(5, i64::MAX, 12 * SECOND, 0).request(6, None, 13 * SECOND);
        log.push(Line::Skip { nonce: Nonce(5), t: 14 * SECOND }).grant(6, i64::MAX, 15 * SECOND, 0);
        let replay = log.replay(16 * SECOND);
        let dead = replay.taken_over_before(replay.find(Nonce(6)).unwrap());
        assert_eq!(dead.map(|i| (replay.requests[i].nonce, replay.requests[i].ended)), Some((Nonce(5), Ended::Dead)));
    }

    #[test]
    fn a_cooldown_delays_the_next_grant() {
        let mut log = Log::new(0);
        log.request(1, None, 0).grant(1, i64::MAX, 1, 1).request(2, None, 2);
        log.push(Line::Done { nonce: Nonce(1), t: 3, not_before: 10 * SECOND });
        log.grant(2, i64::MAX, 5, 0);
        assert_eq!(holder(&log, 6), None, "a grant during the cooldown does not count");
        log.grant(2, i64::MAX, 10 * SECOND, 0);
        assert_eq!(holder(&log, 10 * SECOND + 1), Some(2));
    }

    #[test]
    fn the_log_clock_never_runs_back() {
        let mut log = Log::new(0);
        log.request(1, None, 100 * SECOND).grant(1, 101 * SECOND, 100 * SECOND, 1).request(2, None, 50);
        // The second request is stamped earlier, but the log's clock is at
        // 100 s; the grant ends by the log's clock, not the earlier stamp.
        let replay = log.replay(100 * SECOND + 5);
        assert_eq!(replay.now(60 * SECOND), 100 * SECOND);
        assert_eq!(replay.holder(replay.now(100 * SECOND + 5)), Some(0));
    }

    /// A line stamped after the reader's clock was written by no process of
    /// this boot: counted, it would hold the log's clock at its time (the
    /// end of time, say) and end every grant the moment it is made.
    #[test]
    fn a_line_from_the_future_is_not_believed() {
        let mut log = Log::new(0);
        log.request(1, None, 10).grant(1, 60 * SECOND, 11, 1).request(2, None, 12);
        log.push(Line::Skip { nonce: Nonce(99), t: i64::MAX });
        let replay = log.replay(SECOND);
        assert_eq!(replay.future_lines, 1);
        assert_eq!(replay.now(SECOND), SECOND, "the log's clock is the reader's");
        assert_eq!(replay.holder(SECOND).map(|i| replay.requests[i].nonce.0), Some(1), "the holder keeps its grant");
        let mut forged = Log(std::vec::Vec::new());
        let header = Header {
            kernel_boot: None,
            boot: None,
            not_before: 0,
            last_end: i64::MAX,
            floor: i64::MAX,
            last_fence: 0,
            head_since: Some(i64::MAX),
        };
        forged.push(Line::Header(header)).request(1, None, 10).grant(1, 60 * SECOND, 11, 1).request(2, None, 12);
        let replay = forged.replay(SECOND);
        assert_eq!(replay.holder(SECOND).map(|i| replay.requests[i].nonce.0), Some(1), "nor a header's");
    }

    #[test]
    fn a_torn_line_is_skipped_and_a_missing_header_is_refused() {
        let mut log = Log::new(0);
        log.request(1, None, 0);
        log.0.extend_from_slice(b"G 0000000000000000000000000000");
        log.0.push(b'\n');
        log.request(2, None, 1);
        let replay = log.replay(2);
        assert_eq!((replay.torn_lines, replay.pending_count()), (1, 2));
        assert_eq!(Replay::new().run(b"some data\n", 0), Err(Unreadable::NotAQueue));
        assert_eq!(Replay::new().run(b"", 0), Err(Unreadable::NotAQueue));
        assert_eq!(Replay::new().run(b"H 4 torn", 0), Err(Unreadable::Corrupt));
        assert_eq!(Replay::new().run(b"H 3 0 0 0 0 0 -\n", 0), Err(Unreadable::Corrupt));
        let mut twice = Log::new(0);
        twice.0.extend_from_slice(&Log::new(0).0);
        assert_eq!(Replay::new().run(&twice.0, 0), Err(Unreadable::Corrupt));
    }

    #[test]
    fn compaction_keeps_every_place_holder_and_fence() {
        let mut log = Log::new(0);
        log.request(1, None, 0).grant(1, 1000 * SECOND, 1, 500).push(Line::Done {
            nonce: Nonce(1),
            t: 2,
            not_before: 0,
        });
        log.request(2, None, 3).grant(2, 1000 * SECOND, 4, 0).request(3, Some(SECOND), 5).request(4, None, 6);
        log.push(Line::Done { nonce: Nonce(4), t: 7, not_before: 0 });
        let before = log.replay(8);
        let mut compacted = std::vec::Vec::new();
        before
            .compacted::<()>(&log.0, &mut |piece| {
                compacted.extend_from_slice(piece);
                Ok(())
            })
            .unwrap();
        assert_eq!(compacted.len(), before.compacted_len(&log.0));
        assert!(compacted.len() < log.0.len());
        let mut after = Replay::new();
        after.run(&compacted, 8).unwrap();
        let queue = |r: &Replay| {
            r.requests[..r.count]
                .iter()
                .filter(|q| !q.done())
                .map(|q| (q.nonce, q.grant, q.fence))
                .collect::<std::vec::Vec<_>>()
        };
        assert_eq!(queue(&after), queue(&before));
        assert_eq!(after.header.last_fence, before.header.last_fence);
        assert_eq!(after.holder(8).map(|i| after.requests[i].nonce), Some(Nonce(2)));
        // A head that was never granted keeps counting its ttl from when it
        // became head, not from the compaction.
        let mut slow = Log::new(0);
        slow.request(5, Some(10 * SECOND), 100).request(6, None, 200);
        let before = slow.replay(5 * SECOND);
        let mut compacted = std::vec::Vec::new();
        before
            .compacted::<()>(&slow.0, &mut |piece| {
                compacted.extend_from_slice(piece);
                Ok(())
            })
            .unwrap();
        let mut after = Replay::new();
        after.run(&compacted, 5 * SECOND).unwrap();
        assert_eq!(before.requests[before.head().unwrap()].nonce, Nonce(5));
        assert_eq!(after.requests[after.head().unwrap()].nonce, Nonce(5));
        assert_eq!(after.requests[after.head().unwrap()].since, before.requests[before.head().unwrap()].since);
        after.run(&compacted, 10 * SECOND + 100).unwrap();
        assert_eq!(after.requests[after.head().unwrap()].nonce, Nonce(6), "passed over on time");
    }

    /// The compacted form of `log` as replayed at `now`.
    fn compact(log: &[u8], now: i64) -> Log {
        let mut compacted = Log(std::vec::Vec::new());
        let before = {
            let mut replay = Replay::new();
            replay.run(log, now).unwrap();
            replay
        };
        before
            .compacted::<()>(log, &mut |piece| {
                compacted.0.extend_from_slice(piece);
                Ok(())
            })
            .unwrap();
        compacted
    }

    /// The holder a new grant would take over from, as the table has it.
    fn left(replay: &Replay, bytes: &[u8]) -> Option<(Nonce, i32, i64, Grant, u64, Ended)> {
        replay.taken_over_last().map(|i| {
            let r = replay.requests[i];
            (r.nonce, replay.owner(bytes, i).process.pid, r.since, r.grant, r.fence, r.ended)
        })
    }

    #[test]
    fn compaction_carries_the_holder_that_left_until_the_next_grant() {
        // 1 holds until 5 s; 2 waits behind it from 3 s, so at 5 s 1 is
        // passed over and 2 is head, without a grant yet.
        let mut log = Log::new(0);
        log.request(1, None, SECOND).grant(1, 5 * SECOND, 2 * SECOND, 7).request(2, Some(60 * SECOND), 3 * SECOND);
        log.request(3, None, 4 * SECOND);
        let now = 6 * SECOND;
        let before = log.replay(now);
        let expected = left(&before, &log.0);
        assert!(matches!(expected, Some((Nonce(1), _, _, _, _, Ended::Expired))), "{expected:?}");
        let once = compact(&log.0, now);
        let after = once.replay(now);
        assert_eq!(left(&after, &once.0), expected, "the same holder, owner, turn, grant and fence");
        assert_eq!(after.head(), before.head().map(|_| after.find(Nonce(2)).unwrap()));
        assert_eq!(after.requests[after.head().unwrap()].since, 5 * SECOND, "head since 1's grant ran out");
        assert_eq!(after.header.last_fence, before.header.last_fence);
        // Compacted again, it is still there.
        let twice = compact(&once.0, now);
        assert_eq!(left(&twice.replay(now), &twice.0), expected);
        // Its late release is told it expired, not lost, and its cooldown holds.
        let mut late = Log(twice.0.clone());
        late.push(Line::Done { nonce: Nonce(1), t: now, not_before: 30 * SECOND });
        let mut replay = Replay::new();
        replay.watch(Nonce(1));
        replay.run(&late.0, now).unwrap();
        assert_eq!(replay.watched_end, Ended::Expired);
        assert_eq!(replay.header.not_before, 30 * SECOND);
        // Once the next holder is granted, nobody is left to take over from.
        let mut granted = Log(twice.0.clone());
        granted.grant(2, 100 * SECOND, now, 0);
        let replay = granted.replay(now);
        assert_eq!(
            replay.taken_over_before(replay.find(Nonce(2)).unwrap()).map(|i| replay.requests[i].nonce),
            Some(Nonce(1))
        );
        let compacted = compact(&granted.0, now);
        assert_eq!(left(&compacted.replay(now), &compacted.0), None);
        // A holder found dead is carried as dead.
        let mut dead = Log::new(0);
        dead.request(4, None, SECOND).grant(4, i64::MAX, SECOND, 0).push(Line::Skip { nonce: Nonce(4), t: 2 * SECOND });
        let compacted = compact(&dead.0, now);
        assert!(matches!(
            left(&compacted.replay(now), &compacted.0),
            Some((Nonce(4), _, _, Grant::Until(_), _, Ended::Dead))
        ));
    }

    /// A holder that left is only ever the last fence handed out: a line that
    /// names another, or a request already in the table, is no such holder.
    #[test]
    fn a_holder_that_left_with_a_later_fence_is_not_believed() {
        let mut log = Log::new(9);
        let owner = Owner::current().unwrap();
        let left = |nonce, fence| Line::Left {
            nonce: Nonce(nonce),
            owner,
            since: 0,
            until: Grant::Forever,
            fence,
            dead: true,
            t: 1,
        };
        log.push(left(1, 10)).push(left(2, 9)).push(left(2, 9));
        let replay = log.replay(2);
        assert_eq!(replay.find(Nonce(1)), None, "fence 10 was never handed out");
        assert_eq!(replay.count, 1, "one holder 2");
        assert_eq!(replay.taken_over_last().map(|i| replay.requests[i].nonce), Some(Nonce(2)));
        assert_eq!(replay.head(), None, "a holder that left holds nothing");
    }

    /// A log with a committed checkpoint replays from it: what came before
    /// is history, the checkpoint's marked lines are the queue, and the
    /// lines after its commit follow.
    #[test]
    fn a_log_replays_from_its_last_commit() {
        let (one, two) = ("0".repeat(31) + "1", "0".repeat(31) + "2");
        let old = std::format!(
            "H 4 - - 0 0 0 5 -\nR {one} vm - 4026531836 100 5 - 10\nG {one} never 11 6\nD {one} 12 0\n\
             R {two} vm - 4026531836 101 5 - 13\n"
        );
        let marked = std::format!("K H 4 - - 0 12 13 6 13\nK R {two} vm - 4026531836 101 5 - 13\n");
        let log = std::format!("{old}{marked}E {} {}\nG {two} never 14 7\n", old.len(), marked.len());
        let mut replay = Replay::new();
        replay.run(log.as_bytes(), 100).unwrap();
        assert_eq!(replay.origin, old.len());
        assert_eq!(replay.count, 1, "request one is history");
        assert_eq!(replay.holder(100).map(|i| replay.requests[i].nonce), Some(Nonce(2)));
        assert_eq!(replay.requests[0].fence, 7);
        // The same checkpoint with a commit one digit short: torn, ignored.
        let torn = std::format!("{old}{marked}E {} {}\n", old.len(), marked.len() / 10);
        replay.run(torn.as_bytes(), 100).unwrap();
        assert_eq!((replay.origin, replay.count), (0, 2));
    }

    /// A script of lines, each stamped at or after the one before, that
    /// passes through every kind of line and state: expiry with someone
    /// waiting, a patience that runs out, a torn line closed, a cooldown, a
    /// skip, a late release.
    fn script() -> (std::vec::Vec<u8>, std::vec::Vec<(usize, i64)>) {
        let owner = Owner::current().unwrap();
        let request = |n: u128, patience: Option<i64>, t: i64| Line::Request { nonce: Nonce(n), owner, patience, t };
        let grant =
            |n: u128, until: i64, t: i64| Line::Grant { nonce: Nonce(n), until: Grant::Until(until), t, fence: 0 };
        let lines = [
            request(1, None, SECOND),
            grant(1, 5 * SECOND, SECOND),
            request(2, Some(60 * SECOND), 2 * SECOND),
            request(3, Some(SECOND), 3 * SECOND),
            grant(2, 100 * SECOND, 6 * SECOND),
            Line::Done { nonce: Nonce(2), t: 7 * SECOND, not_before: 9 * SECOND },
            request(4, None, 8 * SECOND),
            grant(4, 20 * SECOND, 10 * SECOND),
            Line::Skip { nonce: Nonce(3), t: 11 * SECOND },
            Line::Done { nonce: Nonce(1), t: 12 * SECOND, not_before: 0 },
            request(5, None, 12 * SECOND),
            Line::Done { nonce: Nonce(4), t: 13 * SECOND, not_before: 0 },
        ];
        let mut log = Log::new(0).0;
        let mut ends = std::vec![(log.len(), 0)];
        for (i, line) in lines.iter().enumerate() {
            if i == 6 {
                log.extend_from_slice(b"R 00 torn\n");
            }
            log.extend_from_slice(line.encode().as_bytes());
            ends.push((log.len(), line.time().unwrap()));
        }
        (log, ends)
    }

    fn state(replay: &Replay) -> std::string::String {
        std::format!(
            "{:?} {:?} torn {} future {} watched {:?} origin {}",
            &replay.requests[..replay.count],
            replay.header,
            replay.torn_lines,
            replay.future_lines,
            replay.watched_end,
            replay.origin
        )
    }

    /// Whatever byte the last read stopped at, and whichever request is
    /// watched, a replay that goes on from it comes to exactly the replay
    /// of the whole log, and does go on rather than start over.
    #[test]
    fn a_replay_taken_up_where_the_last_stopped_comes_to_the_whole_replay() {
        let (log, ends) = script();
        let now = 14 * SECOND;
        for watched in [1, 3, 4] {
            let mut whole = Replay::new();
            whole.watch(Nonce(watched));
            whole.run(&log, now).unwrap();
            for cut in ends[0].0..log.len() {
                // Read at the time of the last whole line it holds.
                let last_read = &log[..cut];
                let then = ends.iter().rev().find(|&&(end, _)| end <= cut).unwrap().1;
                let mut replay = Replay::new();
                replay.watch(Nonce(watched));
                replay.run(last_read, then).unwrap();
                assert!(replay.resumable_len().is_some_and(|len| len <= cut));
                assert_eq!(replay.run_after(&log, now, last_read), Ok(true), "cut at {cut}");
                assert_eq!(state(&replay), state(&whole), "cut at {cut}, watching {watched}");
            }
        }
    }

    /// What is no plain append is replayed from the start: a log rewritten
    /// under the last read, a line stamped before the last read's clock, a
    /// last read that skipped a line from the future, a clock behind the
    /// last read's, another request watched. A fresh request watched does
    /// not start it over.
    #[test]
    fn a_replay_starts_over_where_the_log_did_not_only_grow() {
        let (log, ends) = script();
        let (cut, then) = ends[5];
        let now = 14 * SECOND;
        let whole = |watched: u128| {
            let mut whole = Replay::new();
            whole.watch(Nonce(watched));
            whole.run(&log, now).unwrap();
            state(&whole)
        };
        let read_at = |then: i64, watched: u128| {
            let mut replay = Replay::new();
            replay.watch(Nonce(watched));
            replay.run(&log[..cut], then).unwrap();
            replay
        };
        // Rewritten: one byte of what was read differs.
        let mut rewritten = log[..cut].to_vec();
        rewritten[cut - 3] ^= 1;
        let mut replay = read_at(then, 1);
        assert_eq!(replay.run_after(&log, now, &rewritten), Ok(false));
        assert_eq!(state(&replay), whole(1));
        // Kept short: what was read is not all there to compare.
        let mut replay = read_at(then, 1);
        assert_eq!(replay.run_after(&log, now, &log[..cut - 1]), Ok(false));
        assert_eq!(state(&replay), whole(1));
        // Read after the next line's time: that line looks written before.
        let mut replay = read_at(ends[6].1 + 1, 1);
        assert_eq!(replay.run_after(&log, now, &log[..cut]), Ok(false));
        assert_eq!(state(&replay), whole(1));
        // Read before the last line's time: it was skipped as from the future.
        let mut replay = read_at(then - 1, 1);
        assert_eq!(replay.resumable_len(), None);
        assert_eq!(replay.run_after(&log, now, &log[..cut]), Ok(false));
        assert_eq!(state(&replay), whole(1));
        // Read again on a clock behind the last read's.
        let mut replay = read_at(then, 1);
        let mut earlier = Replay::new();
        earlier.watch(Nonce(1));
        earlier.run(&log, then - 1).unwrap();
        assert_eq!(replay.run_after(&log, then - 1, &log[..cut]), Ok(false));
        assert_eq!(state(&replay), state(&earlier));
        // Another request watched.
        let mut replay = read_at(then, 1);
        replay.watch(Nonce(3));
        assert_eq!(replay.run_after(&log, now, &log[..cut]), Ok(false));
        assert_eq!(state(&replay), whole(3));
        // A request yet to be written, watched: no line before names it.
        let mut replay = read_at(then, 1);
        replay.watch_new(Nonce(4));
        assert_eq!(replay.run_after(&log, now, &log[..cut]), Ok(true));
        assert_eq!(state(&replay), whole(4));
        // A commit after: the log starts again at its checkpoint.
        let mut committed = log[..cut].to_vec();
        let marked = std::format!("{}H 4 - - 0 0 {} 0 -\n", std::str::from_utf8(CHECKPOINT_MARK).unwrap(), then);
        committed.extend_from_slice(marked.as_bytes());
        committed.extend_from_slice(super::super::line::encode_commit(cut, marked.len()).as_bytes());
        let mut replay = read_at(then, 1);
        assert_eq!(replay.run_after(&committed, now, &log[..cut]), Ok(false));
        let mut from_checkpoint = Replay::new();
        from_checkpoint.watch(Nonce(1));
        from_checkpoint.run(&committed, now).unwrap();
        assert_eq!(from_checkpoint.origin, cut);
        assert_eq!(state(&replay), state(&from_checkpoint));
    }
}

//! `lease`: a lease file holding owner, expiry and fence, read and rewritten
//! only under a short lock of that file (the flock-guarded lease of
//! IPC::Lock::WithTTL's discussion).
//!
//! The file's lock is held for the check-and-write of one operation, never
//! for the critical section, so a holder that hangs keeps nobody out past
//! its lease. The file is one fixed-size line, made complete before it
//! appears and rewritten in place with one `pwrite`:
//!
//! ```text
//! lease 2 held <record line>                       (held: the owner record of crate::record)
//! lease 2 free <fence> <not before: - | moment>    (free; a cooldown keeps it closed until then)
//! ```
//!
//! padded with spaces. A file at the lease path that does not start with
//! `lease ` is not a lease and is never written. Take the lease when free
//! and past its "not before", or when expired, or when its same-host owner
//! is provably dead; renew it when it is ours; release it by writing "free,
//! not before now + cooldown", and only if it is still ours:
//! IPC::Lock::WithTTL forgets that check and can overwrite the lease of its
//! successor.
//!
//! With `signal=TERM` or `signal=KILL`, taking over an expired lease also
//! signals the old holder, but only if it is a live process on this host
//! with the recorded start time, never a process that merely reuses its
//! pid, and only on the word of a lease file nobody but this user could
//! have written: the spec refuses `signal` with a `mode` that shares the
//! lock, and a lease file of another user's, or one others may write, is
//! refused before it is read ([`Sharing`]).

use core::time::Duration;

use crate::clock::Moment;
use crate::error::{Contention, CorruptKind, Error, FileRole};
use crate::guard::{GuardFile, LockedFile};
use crate::owner::{Liveness, Nonce};
use crate::record::{parse_moment, write_moment, Record, RECORD_LINE_CAPACITY};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, judge_record, new_record, past_expiry, Break, Commit, CommitOutcome, Context, Cooldown, Files,
    Inspection, Prolong, ProlongOutcome, ReleaseOutcome, Strategy, Taken,
};
use crate::sys::{CPath, OfdLock};
use crate::text::{parse_u64, FixedText, Words};
use crate::trust::Sharing;

/// Every lease line is exactly this long, so a rewrite is one `pwrite`
/// over the whole of the old one.
pub const LEASE_RECORD_LEN: usize = 16 + RECORD_LINE_CAPACITY;

/// A `lease` lock: the lease file, and the signal for an expired holder.
#[derive(Debug)]
pub struct Lease {
    file: GuardFile,
    signal: Option<i32>,
}

/// The lease file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// `lease 2 held <record line>`: taken by the acquisition `Record` names.
    Held(Record),
    /// `lease 2 free <fence> <not before>`: nobody holds it.
    Free {
        /// A cooldown: nobody takes the lease before then; `None` for none.
        not_before: Option<Moment>,
        /// The last fencing token handed out; 0 before the first.
        fence: u64,
    },
}

impl LeaseState {
    fn fence(&self) -> u64 {
        match self {
            LeaseState::Held(record) => record.fence,
            LeaseState::Free { fence, .. } => *fence,
        }
    }

    /// The file's content: the line padded with spaces to exactly
    /// [`LEASE_RECORD_LEN`] bytes, newline included.
    pub fn encode(&self) -> FixedText<LEASE_RECORD_LEN> {
        let mut out = FixedText::new();
        // Bounded fields: the longest record line and numbers always fit.
        let _ = match self {
            LeaseState::Held(record) => out.push_bytes(b"lease 2 held ").and_then(|()| record.write_line(&mut out)),
            LeaseState::Free { not_before, fence } => out
                .push_bytes(b"lease 2 free ")
                .and_then(|()| out.push_u64(*fence))
                .and_then(|()| out.push_bytes(b" "))
                .and_then(|()| write_moment(&mut out, *not_before, b"-")),
        };
        let _ = out.pad_to(LEASE_RECORD_LEN - 1, b' ');
        let _ = out.push_bytes(b"\n");
        out
    }

    /// Parses a lease file's bytes (at most one more than a line). A file
    /// that does not start with `lease ` is [`Problem::NotALock`]; one that
    /// does but does not parse, [`CorruptKind::Record`] (or
    /// [`CorruptKind::RecordTooLong`]).
    ///
    /// [`Problem::NotALock`]: crate::error::Problem::NotALock
    pub fn parse(bytes: &[u8]) -> Result<LeaseState, Error> {
        if !bytes.starts_with(b"lease ") {
            return Err(Error::not_a_lock(FileRole::Lock));
        }
        let corrupt = Error::corrupt(FileRole::Lock, CorruptKind::Record);
        if bytes.len() > LEASE_RECORD_LEN {
            return Err(Error::corrupt(FileRole::Lock, CorruptKind::RecordTooLong));
        }
        if bytes.len() != LEASE_RECORD_LEN || bytes[LEASE_RECORD_LEN - 1] != b'\n' {
            return Err(corrupt);
        }
        let line = &bytes[..LEASE_RECORD_LEN - 1];
        let end = line.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let line = &line[..end];
        if let Some(record) = line.strip_prefix(b"lease 2 held ") {
            return match Record::parse_line(record) {
                Some(Ok(record)) => Ok(LeaseState::Held(record)),
                _ => Err(corrupt),
            };
        }
        let mut words = Words::new(line.strip_prefix(b"lease 2 free ").ok_or(corrupt)?);
        let fence = words.next().and_then(parse_u64).ok_or(corrupt)?;
        let not_before = parse_moment(&mut words, b"-").ok_or(corrupt)?;
        if !words.is_done() {
            return Err(corrupt);
        }
        Ok(LeaseState::Free { not_before, fence })
    }
}

/// A new lease file: free, with no fence handed out yet.
pub const NEW_LEASE: LeaseState = LeaseState::Free { not_before: None, fence: 0 };

/// The lease's rules, as changes of its state: the one place they live,
/// whatever keeps the state and excludes the others while it changes
/// (a file and its lock here, a shared mapping and a word of it in `shm`).
/// Each is called with the state read at `now` under that exclusion and
/// says what to write, if anything.
impl LeaseState {
    /// Takes the lease for `nonce`: the new holder's record (`Held` of it
    /// is to be written) and the stale holder it replaces, or why the lease
    /// is not to be had. With `signal`, an expired holder still running is
    /// signalled.
    pub(crate) fn take(
        &self,
        cx: &Context<'_>,
        nonce: Nonce,
        ttl: Option<Duration>,
        now: Moment,
        signal: Option<i32>,
    ) -> Result<Taken, Error> {
        let took_over_from = match *self {
            LeaseState::Free { not_before, .. } => {
                if let Some(until) = not_before.filter(|at| !at.has_come(now)) {
                    return Err(Error::Busy(Contention::CoolingDown { until: until.wall_as_seen(now) }));
                }
                None
            }
            LeaseState::Held(holder) => {
                let verdict = judge_record(cx, &holder, now);
                if !verdict.stale {
                    return Err(Error::Busy(Contention::Held(verdict.summary())));
                }
                Some(verdict)
            }
        };
        // A state forged with the largest fence leaves none to hand out.
        let fence =
            crate::fence::next(self.fence(), now.wall).ok_or(Error::corrupt(FileRole::Lock, CorruptKind::Record))?;
        // An expired holder that is still running must stop touching the
        // resource, once it is certain to be taken over (nothing above
        // refused): signal it only if it is provably that process, and
        // never our own (another handle of ours that ran over). Only on the
        // word of a private state: the spec refuses `signal` with a shared
        // mode, and its store refused a file others may write before it was
        // read.
        if let (LeaseState::Held(holder), Some(verdict), Some(signal)) =
            (self, &took_over_from, signal.filter(|_| cx.sharing.is_private()))
        {
            let other_process = holder.owner.process != cx.me.process;
            if verdict.liveness == Liveness::Alive && past_expiry(holder.expires, now) && other_process {
                cx.me.signal_if_alive(&holder.owner, signal);
            }
        }
        Ok(Taken { record: new_record(cx, nonce, fence, now, ttl), took_over_from })
    }

    /// The record, if it is `held`'s acquisition (with the expiry that
    /// counts: a watchdog or an operator may have moved it since).
    pub(crate) fn ours(&self, held: &Record) -> Option<Record> {
        match *self {
            LeaseState::Held(record) if record.nonce == held.nonce => Some(record),
            _ => None,
        }
    }

    /// Gives `held` back, closed for `cooldown`: the outcome, and the state
    /// to write (none when the lease is no longer `held`'s).
    pub(crate) fn give_back(
        &self,
        held: &Record,
        now: Moment,
        cooldown: Duration,
    ) -> (ReleaseOutcome, Option<LeaseState>) {
        match self.ours(held) {
            None => (ReleaseOutcome::Lost, None),
            Some(on_file) => {
                let not_before = (!cooldown.is_zero()).then(|| now.saturating_add(cooldown));
                let free = LeaseState::Free { not_before, fence: on_file.fence };
                (ReleaseOutcome::of_own(on_file.expires, now), Some(free))
            }
        }
    }

    /// Moves `held`'s expiry to `now` + `ttl`: the outcome, and the record
    /// to write (none when the lease is no longer `held`'s).
    pub(crate) fn renew(&self, held: &Record, now: Moment, ttl: Option<Duration>) -> (ProlongOutcome, Option<Record>) {
        match self.ours(held) {
            None => (ProlongOutcome::Lost, None),
            Some(on_file) => {
                let renewed = Record { expires: ttl.map(|ttl| now.saturating_add(ttl)), ..on_file };
                (ProlongOutcome::of_own(on_file.expires, now), Some(renewed))
            }
        }
    }

    /// The state after an operator broke the lease; `None` when it was free.
    pub(crate) fn broken(&self) -> Option<LeaseState> {
        match *self {
            LeaseState::Held(record) => Some(LeaseState::Free { not_before: None, fence: record.fence }),
            LeaseState::Free { .. } => None,
        }
    }

    /// What an inspection at `now` reports.
    pub(crate) fn inspection(&self, cx: &Context<'_>, now: Moment) -> Inspection {
        match *self {
            LeaseState::Held(record) => Inspection {
                holder: Some(judge_record(cx, &record, now)),
                last_fence: record.fence,
                cooldown_until: None,
                queue_length: None,
            },
            LeaseState::Free { not_before, fence } => Inspection {
                holder: None,
                last_fence: fence,
                cooldown_until: not_before.filter(|at| !at.has_come(now)).map(|at| at.wall_as_seen(now)),
                queue_length: None,
            },
        }
    }
}

impl Lease {
    fn lock(&mut self, cx: &Context<'_>) -> Result<LockedFile<'_>, Error> {
        self.file.lock_file(OfdLock::Exclusive, cx.deadline, NEW_LEASE.encode().as_bytes(), cx.me.boot)
    }
}

fn read(file: &LockedFile<'_>) -> Result<LeaseState, Error> {
    let mut bytes = [0u8; LEASE_RECORD_LEN + 1];
    let n = file.read(&mut bytes)?;
    LeaseState::parse(&bytes[..n])
}

fn write(file: &mut LockedFile<'_>, state: &LeaseState) -> Result<(), Error> {
    file.write(state.encode().as_bytes())
}

impl Strategy for Lease {
    fn open(spec: &Spec, sharing: Sharing) -> Result<Lease, Error> {
        let file = GuardFile::new(spec.file_target()?.clone(), FileRole::Lock, sharing);
        Ok(Lease { file, signal: spec.options.signal })
    }

    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, ttl: Option<Duration>) -> Result<Taken, Error> {
        let signal = self.signal;
        let mut file = self.lock(cx)?;
        let taken = read(&file)?.take(cx, nonce, ttl, file.now, signal)?;
        write(&mut file, &LeaseState::Held(taken.record))?;
        Ok(taken)
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record) -> Result<ReleaseOutcome, Error> {
        self.release_closed(cx, held, Duration::ZERO)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let file = self.lock(cx)?;
        Ok(read(&file)?.inspection(cx, file.now))
    }
}

impl Prolong for Lease {
    fn prolong(&mut self, cx: &Context<'_>, held: &mut Record, ttl: Option<Duration>) -> Result<ProlongOutcome, Error> {
        let mut file = self.lock(cx)?;
        let (outcome, renewed) = read(&file)?.renew(held, file.now, ttl);
        if let Some(renewed) = renewed {
            write(&mut file, &LeaseState::Held(renewed))?;
            held.expires = renewed.expires;
        }
        Ok(outcome)
    }
}

impl Cooldown for Lease {
    fn release_closed(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let mut file = self.lock(cx)?;
        let (outcome, free) = read(&file)?.give_back(held, file.now, cooldown);
        if let Some(free) = free {
            write(&mut file, &free)?;
        }
        Ok(outcome)
    }
}

impl Break for Lease {
    fn break_lock(&mut self, cx: &Context<'_>) -> Result<bool, Error> {
        let mut file = self.lock(cx)?;
        match read(&file)?.broken() {
            Some(free) => write(&mut file, &free).map(|()| true),
            None => Ok(false),
        }
    }
}

impl Commit for Lease {
    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        let file = self.lock(cx)?;
        commit_if_current(read(&file)?.ours(held), file.now, action)
    }
}

impl Files for Lease {
    fn path(&self) -> &CPath {
        self.file.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{BootId, BootTime, WallTime};
    use crate::error::ErrorKind;
    use crate::owner::{HostName, Owner};

    #[test]
    fn lease_records_round_trip_at_fixed_length() {
        let mut owner = Owner::current().unwrap();
        owner.host = HostName::from_bytes(&[b'h'; 64]).unwrap();
        owner.process.pid = i32::MAX;
        owner.process.start_ticks = u64::MAX;
        let widest = Moment {
            wall: WallTime::from_unix_nanos(i64::MIN),
            boot: Some((BootId([0xff; 16]), BootTime::from_nanos(i64::MIN))),
        };
        let held = LeaseState::Held(Record {
            owner,
            nonce: Nonce(u128::MAX),
            fence: u64::MAX,
            since: WallTime::from_unix_nanos(i64::MIN),
            expires: Some(widest),
        });
        for state in [held, NEW_LEASE, LeaseState::Free { not_before: Some(widest), fence: u64::MAX }] {
            let text = state.encode();
            assert_eq!(text.as_bytes().len(), LEASE_RECORD_LEN);
            assert_eq!(LeaseState::parse(text.as_bytes()), Ok(state));
        }
    }

    #[test]
    fn a_file_that_is_no_lease_is_refused_and_a_damaged_one_is_corrupt() {
        let kind = |bytes: &[u8]| LeaseState::parse(bytes).map_err(|e| e.kind());
        assert_eq!(kind(b""), Err(ErrorKind::NotALock), "a lease is never left empty");
        assert_eq!(kind(b"1234\t99\n"), Err(ErrorKind::NotALock));
        let text = NEW_LEASE.encode();
        assert_eq!(kind(&text.as_bytes()[..100]), Err(ErrorKind::Corrupt(CorruptKind::Record)));
        let mut bad = [b' '; LEASE_RECORD_LEN];
        bad[..11].copy_from_slice(b"lease 2 hel");
        bad[LEASE_RECORD_LEN - 1] = b'\n';
        assert_eq!(kind(&bad), Err(ErrorKind::Corrupt(CorruptKind::Record)));
        let mut long = [b' '; LEASE_RECORD_LEN + 1];
        long[..6].copy_from_slice(b"lease ");
        assert_eq!(kind(&long), Err(ErrorKind::Corrupt(CorruptKind::RecordTooLong)));
    }
}

//! `lease`: a lease file holding owner, expiry and fence, read and rewritten
//! only under a short `flock` of that file (seed 004, viver's comment).
//!
//! The flock is held for the check-and-write of one operation, never for
//! the critical section, so a holder that hangs keeps nobody out past its
//! lease. The file is one fixed-size line, rewritten in place with one
//! `pwrite`:
//!
//! ```text
//! <pid>\t<expires>\t<fence>\t<host>\t<boot>\t<start>\t<nonce>     (held)
//! 0\t<not before>\t<fence>\t-\t-\t0\t-                            (free)
//! ```
//!
//! with times in Unix nanoseconds (`never` for a lease without TTL). Take it
//! when free and past its "not before" (the cooldown), or when expired, or
//! when its same-host owner is provably dead; renew it when it is ours;
//! release it by writing "free, not before now + cooldown", and only if it is
//! still ours: IPC::Lock::WithTTL forgets that check and can overwrite the
//! lease of its successor.
//!
//! With `signal=TERM` or `signal=KILL`, taking over an expired lease also
//! signals the old holder, but only if it is a live process on this host
//! with the recorded start time, never a process that merely reuses its pid.

use core::fmt::Write;
use core::time::Duration;

use crate::clock::WallTime;
use crate::error::{CorruptKind, Error};
use crate::guard::{GuardFile, LockedFile, Patience};
use crate::owner::{BootId, HostName, Liveness, Nonce, Owner, ProcessId};
use crate::record::{Parsed, Record};
use crate::spec::Spec;
use crate::strategy::{
    commit_if_current, past_expiry, CommitOutcome, Context, Found, Inspection, ProlongOutcome, ReleaseOutcome, Strategy,
};
use crate::sys::{self, CPath};
use crate::text::{parse_i64, parse_u64, FixedText};

/// Every lease record is exactly this long, so a rewrite is one `pwrite`
/// over the whole of the old one.
pub const LEASE_RECORD_LEN: usize = 256;

#[derive(Debug)]
pub struct Lease {
    file: GuardFile,
    signal: Option<i32>,
}

/// The lease file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseState {
    Held(Record),
    Free { not_before: Option<WallTime>, fence: u64 },
}

impl LeaseState {
    fn fence(&self) -> u64 {
        match self {
            LeaseState::Held(record) => record.fence,
            LeaseState::Free { fence, .. } => *fence,
        }
    }

    fn encode(&self) -> FixedText<LEASE_RECORD_LEN> {
        let mut out = FixedText::new();
        // Bounded fields: a 64-byte host and fixed-width numbers always fit.
        let _ = match self {
            LeaseState::Held(r) => {
                let _ = write!(out, "{}\t", r.owner.process.pid);
                let _ = match r.expires {
                    Some(at) => write!(out, "{}", at.unix_nanos()),
                    None => out.push_bytes(b"never"),
                };
                let _ = write!(out, "\t{}\t", r.fence);
                let _ = out.push_bytes(r.owner.host.as_bytes());
                let _ = match r.owner.boot {
                    Some(boot) => write!(out, "\t{boot:?}"),
                    None => out.push_bytes(b"\t-"),
                };
                let _ = write!(out, "\t{}\t", r.owner.process.start_ticks);
                out.push_bytes(&r.nonce.hex())
            }
            LeaseState::Free { not_before, fence } => {
                write!(out, "0\t{}\t{fence}\t-\t-\t0\t-", not_before.map_or(0, WallTime::unix_nanos))
            }
        };
        let _ = out.pad_to(LEASE_RECORD_LEN - 1, b' ');
        let _ = out.push_bytes(b"\n");
        out
    }

    fn parse(bytes: &[u8]) -> Result<LeaseState, Error> {
        let corrupt = Error::Corrupt(CorruptKind::Record);
        if bytes.is_empty() {
            return Ok(LeaseState::Free { not_before: None, fence: 0 });
        }
        if bytes.len() != LEASE_RECORD_LEN || bytes[LEASE_RECORD_LEN - 1] != b'\n' {
            return Err(corrupt);
        }
        let line = &bytes[..LEASE_RECORD_LEN - 1];
        let end = line.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let mut fields = line[..end].split(|&b| b == b'\t');
        let mut next = || fields.next().ok_or(corrupt);
        let pid = parse_u64(next()?).and_then(|p| i32::try_from(p).ok()).ok_or(corrupt)?;
        let time = next()?;
        let fence = parse_u64(next()?).ok_or(corrupt)?;
        let (host, boot, start, nonce) = (next()?, next()?, next()?, next()?);
        if fields.next().is_some() {
            return Err(corrupt);
        }
        if pid == 0 {
            let not_before = parse_i64(time).ok_or(corrupt)?;
            if (host, boot, start, nonce) != (b"-".as_slice(), b"-".as_slice(), b"0".as_slice(), b"-".as_slice()) {
                return Err(corrupt);
            }
            return Ok(LeaseState::Free {
                not_before: (not_before != 0).then(|| WallTime::from_unix_nanos(not_before)),
                fence,
            });
        }
        let expires = match time {
            b"never" => None,
            ns => Some(WallTime::from_unix_nanos(parse_i64(ns).ok_or(corrupt)?)),
        };
        let owner = Owner {
            host: HostName::from_bytes(host).ok_or(corrupt)?,
            boot: match boot {
                b"-" => None,
                hex => Some(BootId::parse_uuid(hex).ok_or(corrupt)?),
            },
            process: ProcessId { pid, start_ticks: parse_u64(start).ok_or(corrupt)? },
        };
        Ok(LeaseState::Held(Record { owner, nonce: Nonce::parse_hex(nonce).ok_or(corrupt)?, fence, expires }))
    }
}

fn read(file: &LockedFile<'_>) -> Result<LeaseState, Error> {
    let mut bytes = [0u8; LEASE_RECORD_LEN + 1];
    let n = sys::pread_full(file.fd, &mut bytes, 0).map_err(Error::Os)?;
    if n > LEASE_RECORD_LEN {
        return Err(Error::Corrupt(CorruptKind::RecordTooLong));
    }
    LeaseState::parse(&bytes[..n])
}

fn write(file: &LockedFile<'_>, state: &LeaseState) -> Result<(), Error> {
    sys::pwrite_all(file.fd, state.encode().as_bytes(), 0).map_err(Error::Os)
}

fn judge(record: &Record, cx: &Context<'_>) -> Result<crate::strategy::Holder, Error> {
    Found { content: Ok(Parsed::Ours(*record)), written_at: cx.now }.judge(cx)
}

impl Lease {
    pub fn new(spec: &Spec) -> Lease {
        Lease {
            file: GuardFile::new(spec.target().clone(), spec.options.mode.unwrap_or(0o666)),
            signal: spec.options.signal,
        }
    }

    pub fn path(&self) -> &CPath {
        self.file.path()
    }
}

impl Strategy for Lease {
    fn try_acquire(&mut self, cx: &Context<'_>, nonce: Nonce, expires: Option<WallTime>) -> Result<Record, Error> {
        let file = self.file.lock_file(Patience::Attempt)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let state = read(&file)?;
        match state {
            LeaseState::Free { not_before, .. } => {
                if not_before.is_some_and(|at| cx.now < at) {
                    return Err(Error::Busy);
                }
            }
            LeaseState::Held(holder) => {
                let verdict = judge(&holder, cx)?;
                if !verdict.stale {
                    return Err(Error::Busy);
                }
                // An expired holder that is still running must stop touching
                // the resource; signal it only if it is provably that process,
                // and never our own (another handle of ours that ran over).
                if let Some(signal) = self.signal {
                    let other_process = holder.owner.process != cx.me.process;
                    if verdict.liveness == Liveness::Alive && past_expiry(holder.expires, cx.now) && other_process {
                        cx.me.signal_if_alive(&holder.owner, signal);
                    }
                }
            }
        }
        // A lease file forged with the largest fence leaves none to hand out.
        let fence = crate::fence::next(state.fence(), cx.now).ok_or(Error::Corrupt(CorruptKind::Record))?;
        let record = Record { owner: *cx.me, nonce, fence, expires };
        write(&file, &LeaseState::Held(record))?;
        Ok(record)
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let file = self.file.lock_file(Patience::Change)?;
        let cx = &cx.renewed();
        let on_disk = match read(&file)? {
            LeaseState::Held(record) if record.nonce == held.nonce => record,
            _ => return Ok(ReleaseOutcome::Lost),
        };
        let not_before = (!cooldown.is_zero()).then(|| cx.now.saturating_add(cooldown));
        write(&file, &LeaseState::Free { not_before, fence: on_disk.fence })?;
        Ok(ReleaseOutcome::of_own(on_disk.expires, cx.now))
    }

    fn prolong(&mut self, cx: &Context<'_>, held: &Record, expires: Option<WallTime>) -> Result<ProlongOutcome, Error> {
        let file = self.file.lock_file(Patience::Change)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let on_disk = match read(&file)? {
            LeaseState::Held(record) if record.nonce == held.nonce => record,
            _ => return Ok(ProlongOutcome::Lost),
        };
        write(&file, &LeaseState::Held(Record { expires, ..on_disk }))?;
        Ok(ProlongOutcome::of_own(on_disk.expires, cx.now))
    }

    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        let file = self.file.lock_file(Patience::Change)?;
        let cx = &cx.renewed();
        let on_disk = match read(&file)? {
            LeaseState::Held(record) if record.nonce == held.nonce => Some(record),
            _ => None,
        };
        commit_if_current(on_disk, cx.now, action)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let file = self.file.lock_file(Patience::Change)?;
        let cx = &cx.renewed();
        Ok(match read(&file)? {
            LeaseState::Held(record) => Inspection {
                holder: Some(judge(&record, cx)?),
                last_fence: record.fence,
                cooldown_until: None,
                queue_length: None,
            },
            LeaseState::Free { not_before, fence } => Inspection {
                holder: None,
                last_fence: fence,
                cooldown_until: not_before.filter(|&at| cx.now < at),
                queue_length: None,
            },
        })
    }

    fn break_lock(&mut self, _cx: &Context<'_>) -> Result<bool, Error> {
        let file = self.file.lock_file(Patience::Change)?;
        match read(&file)? {
            LeaseState::Held(record) => {
                write(&file, &LeaseState::Free { not_before: None, fence: record.fence })?;
                Ok(true)
            }
            LeaseState::Free { .. } => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_records_round_trip_at_fixed_length() {
        let held = LeaseState::Held(Record {
            owner: Owner::current().unwrap(),
            nonce: Nonce(u128::MAX),
            fence: u64::MAX,
            expires: Some(WallTime::from_unix_nanos(i64::MIN + 1)),
        });
        for state in [
            held,
            LeaseState::Free { not_before: None, fence: 3 },
            LeaseState::Free { not_before: Some(WallTime::from_unix_nanos(5)), fence: 0 },
        ] {
            let text = state.encode();
            assert_eq!(text.as_bytes().len(), LEASE_RECORD_LEN);
            assert_eq!(LeaseState::parse(text.as_bytes()), Ok(state));
        }
        assert_eq!(LeaseState::parse(b""), Ok(LeaseState::Free { not_before: None, fence: 0 }));
    }

    #[test]
    fn damaged_lease_records_are_corrupt() {
        let corrupt = Err(Error::Corrupt(CorruptKind::Record));
        assert_eq!(LeaseState::parse(b"1234\t99\n"), corrupt);
        let text = LeaseState::Free { not_before: None, fence: 3 }.encode();
        assert_eq!(LeaseState::parse(&text.as_bytes()[..100]), corrupt);
        let mut bad = [b' '; LEASE_RECORD_LEN];
        bad[LEASE_RECORD_LEN - 1] = b'\n';
        assert_eq!(LeaseState::parse(&bad), corrupt);
    }
}

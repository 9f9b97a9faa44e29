//! The owner record every file-system strategy writes, and its parser.
//!
//! ```text
//! 4242                      <- exactly what LockFile::Simple writes ("PID" or, nfs=1, "PID:HOST")
//! lockcore 1                <- format marker and version
//! host build-7
//! boot 0f8fd5a45b624a3a9d5b2a3c4e5f6a7b
//! pid 4242
//! start 918273
//! nonce 6c1f...32 hex digits
//! fence 17
//! expires 1795000000000000000   (Unix nanoseconds, or "never")
//! ```
//!
//! The first line lets a Perl CGI script using LockFile::Simple and a C
//! program using this library see each other's locks (Perl reads only that
//! line). A record is written whole, into a temporary file first, so a reader
//! sees all of it or none of it. Parsing is strict and bounded: anything this
//! library did not write is either a recognisable LockFile::Simple stamp or
//! [`CorruptKind::Record`].

use core::fmt::Write;

use crate::clock::WallTime;
use crate::error::CorruptKind;
use crate::owner::{BootId, HostName, Nonce, Owner, ProcessId};
use crate::text::{parse_i64, parse_u64, FixedText};

/// No record of ours is longer; a longer file is not ours.
pub const RECORD_CAPACITY: usize = 512;

/// One acquisition as written on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: Owner,
    pub nonce: Nonce,
    pub fence: u64,
    /// `None`: no TTL, the lock never expires by age.
    pub expires: Option<WallTime>,
}

/// How the first line names the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `PID`
    Pid,
    /// `PID:HOST`, LockFile::Simple's form for NFS.
    PidHost,
}

impl Record {
    pub fn encode(&self, stamp: Stamp) -> FixedText<RECORD_CAPACITY> {
        let mut out = FixedText::new();
        // Every field is bounded (64-byte host, fixed-width numbers), so the
        // record always fits; a failure here would be a bug caught by tests.
        let _ = self.write_to(&mut out, stamp);
        out
    }

    fn write_to(&self, out: &mut FixedText<RECORD_CAPACITY>, stamp: Stamp) -> core::fmt::Result {
        let pid = self.owner.process.pid;
        write!(out, "{pid}")?;
        if stamp == Stamp::PidHost {
            out.push_bytes(b":")?;
            out.push_bytes(self.owner.host.as_bytes())?;
        }
        out.push_bytes(b"\nlockcore 1\nhost ")?;
        out.push_bytes(self.owner.host.as_bytes())?;
        out.push_bytes(b"\nboot ")?;
        match self.owner.boot {
            Some(boot) => write!(out, "{boot:?}")?,
            None => out.push_bytes(b"-")?,
        }
        write!(out, "\npid {pid}\nstart {}\nnonce ", self.owner.process.start_ticks)?;
        out.push_bytes(&self.nonce.hex())?;
        write!(out, "\nfence {}\nexpires ", self.fence)?;
        match self.expires {
            Some(at) => writeln!(out, "{}", at.unix_nanos()),
            None => out.push_bytes(b"never\n"),
        }
    }
}

/// What a lock file turned out to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A record of this library.
    Ours(Record),
    /// A LockFile::Simple stamp: a pid and, with NFS, a host.
    Foreign { pid: i32, host: Option<HostName> },
    /// Nothing yet: a LockFile::Simple writer between its create and its write.
    Empty,
}

/// Parses the bytes of a lock file. `bytes` must be the whole file; callers
/// read at most `RECORD_CAPACITY + 1` bytes and report a longer file as
/// [`CorruptKind::RecordTooLong`] before calling this.
pub fn parse(bytes: &[u8]) -> Result<Parsed, CorruptKind> {
    if bytes.is_empty() {
        return Ok(Parsed::Empty);
    }
    let mut lines = Lines(bytes);
    let first = lines.next().ok_or(CorruptKind::Record)?;
    let (stamp_pid, stamp_host) = parse_stamp(first).ok_or(CorruptKind::Record)?;
    if lines.is_done() {
        return Ok(Parsed::Foreign { pid: stamp_pid, host: stamp_host });
    }
    let corrupt = CorruptKind::Record;
    if lines.next() != Some(b"lockcore 1") {
        return Err(corrupt);
    }
    let host = HostName::from_bytes(lines.field(b"host ")?).ok_or(corrupt)?;
    let boot = match lines.field(b"boot ")? {
        b"-" => None,
        hex => Some(BootId::parse_uuid(hex).ok_or(corrupt)?),
    };
    let pid = parse_pid(lines.field(b"pid ")?).ok_or(corrupt)?;
    let start_ticks = parse_u64(lines.field(b"start ")?).ok_or(corrupt)?;
    let nonce = Nonce::parse_hex(lines.field(b"nonce ")?).ok_or(corrupt)?;
    let fence = parse_u64(lines.field(b"fence ")?).ok_or(corrupt)?;
    let expires = match lines.field(b"expires ")? {
        b"never" => None,
        ns => Some(WallTime::from_unix_nanos(parse_i64(ns).ok_or(corrupt)?)),
    };
    // The Perl line and our fields must tell one story, and nothing may follow.
    if !lines.is_done() || pid != stamp_pid || stamp_host.is_some_and(|h| h != host) {
        return Err(corrupt);
    }
    Ok(Parsed::Ours(Record {
        owner: Owner { host, boot, process: ProcessId { pid, start_ticks } },
        nonce,
        fence,
        expires,
    }))
}

fn parse_stamp(line: &[u8]) -> Option<(i32, Option<HostName>)> {
    match line.iter().position(|&b| b == b':') {
        Some(colon) => Some((parse_pid(&line[..colon])?, Some(HostName::from_bytes(&line[colon + 1..])?))),
        None => Some((parse_pid(line)?, None)),
    }
}

fn parse_pid(text: &[u8]) -> Option<i32> {
    parse_u64(text).and_then(|v| i32::try_from(v).ok()).filter(|&pid| pid > 0)
}

/// Newline-terminated lines; a missing final newline is corruption.
struct Lines<'a>(&'a [u8]);

impl<'a> Lines<'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        let nl = self.0.iter().position(|&b| b == b'\n')?;
        let line = &self.0[..nl];
        self.0 = &self.0[nl + 1..];
        Some(line)
    }

    fn field(&mut self, name: &[u8]) -> Result<&'a [u8], CorruptKind> {
        self.next().and_then(|line| line.strip_prefix(name)).ok_or(CorruptKind::Record)
    }

    fn is_done(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            owner: Owner::current().unwrap(),
            nonce: Nonce(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            fence: 17,
            expires: Some(WallTime::from_unix_nanos(1_795_000_000_123_456_789)),
        }
    }

    #[test]
    fn records_round_trip_in_both_stamps() {
        for stamp in [Stamp::Pid, Stamp::PidHost] {
            let rec = sample();
            let text = rec.encode(stamp);
            assert_eq!(parse(text.as_bytes()), Ok(Parsed::Ours(rec)));
        }
        let never = Record { expires: None, ..sample() };
        assert_eq!(parse(never.encode(Stamp::Pid).as_bytes()), Ok(Parsed::Ours(never)));
    }

    #[test]
    fn first_line_is_what_lockfile_simple_writes() {
        let rec = sample();
        let pid = rec.owner.process.pid;
        let text = rec.encode(Stamp::Pid);
        let first = text.as_bytes().split(|&b| b == b'\n').next().unwrap();
        let mut expected = FixedText::<16>::new();
        write!(expected, "{pid}").unwrap();
        assert_eq!(first, expected.as_bytes());

        let text = rec.encode(Stamp::PidHost);
        let first = text.as_bytes().split(|&b| b == b'\n').next().unwrap();
        assert!(first.ends_with(rec.owner.host.as_bytes()));
        assert_eq!(first[expected.as_bytes().len()], b':');
    }

    #[test]
    fn lockfile_simple_stamps_are_foreign_records() {
        assert_eq!(parse(b"4242\n"), Ok(Parsed::Foreign { pid: 4242, host: None }));
        assert_eq!(parse(b"4242:web-1\n"), Ok(Parsed::Foreign { pid: 4242, host: HostName::from_bytes(b"web-1") }));
        assert_eq!(parse(b""), Ok(Parsed::Empty));
    }

    #[test]
    fn damaged_records_are_corrupt_never_misread() {
        let rec = sample();
        let text = rec.encode(Stamp::Pid);
        let bytes = text.as_bytes();
        // Every truncation of a valid record is refused, except the one that
        // leaves a complete LockFile::Simple stamp, which is a valid foreign record.
        for cut in 1..bytes.len() {
            let verdict = parse(&bytes[..cut]);
            let first_line_len = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
            if cut == first_line_len {
                assert!(matches!(verdict, Ok(Parsed::Foreign { .. })), "cut at {cut}");
            } else {
                assert_eq!(verdict, Err(CorruptKind::Record), "cut at {cut}");
            }
        }
        assert_eq!(parse(b"garbage\n"), Err(CorruptKind::Record));
        assert_eq!(parse(b"0\n"), Err(CorruptKind::Record));
        assert_eq!(parse(b"-5\n"), Err(CorruptKind::Record));
        assert_eq!(parse(b"99999999999\n"), Err(CorruptKind::Record));
        assert_eq!(parse(b"\xff\xfe\n"), Err(CorruptKind::Record));
        let mut extra = FixedText::<600>::new();
        extra.push_bytes(bytes).unwrap();
        extra.push_bytes(b"more\n").unwrap();
        assert_eq!(parse(extra.as_bytes()), Err(CorruptKind::Record));
    }

    #[test]
    fn pid_line_must_agree_with_the_record() {
        let rec = sample();
        let text = rec.encode(Stamp::Pid);
        let bytes = text.as_bytes();
        let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
        let mut forged = FixedText::<600>::new();
        forged.push_bytes(b"1\n").unwrap();
        forged.push_bytes(&bytes[nl + 1..]).unwrap();
        assert_eq!(parse(forged.as_bytes()), Err(CorruptKind::Record));
    }
}

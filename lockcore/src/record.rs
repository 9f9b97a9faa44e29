//! The owner record: one acquisition, in the one text form every strategy
//! stores it in, and what the lock files of peers (LockFile::Simple,
//! liblockfile, a shell script) say when this library reads them.
//!
//! A record is one line of words:
//!
//! ```text
//! lockcore 2 <host> <boot|-> <pid> <start> <nonce> <fence> <since> <expiry>
//! lockcore 2 build-7 0f8f...6a7b 4242 918273 6c1f...32 17 1795000000000000000 never
//! ```
//!
//! `lockcore 2` is the marker: a file or link without it is not ours and is
//! never rewritten or removed as if it were. The owner is the four words of
//! [`Owner::encode_into`]; `since` is when the lock was taken (Unix
//! nanoseconds); the expiry is `never` or a [`Moment`] in three words,
//! `<wall ns> <boot id|-> <boot ns|->`, judged by the boot clock on the boot
//! that wrote it ([`crate::clock`]).
//!
//! `lockfile` and `mkdir` store it as a *lock file*: a first line exactly
//! as LockFile::Simple writes it (`PID`, or `PID:HOST` for NFS), so that a
//! Perl CGI script sees our lock and its holder, then the record line.
//! `symlink` stores the line as the link's target, `lease` inside its lease
//! line. Parsing is strict and bounded, and a record that does not parse
//! but carries the marker is [`CorruptKind::Record`].

use core::fmt::Write;

use crate::clock::{BootId, BootTime, Moment, WallTime};
use crate::error::CorruptKind;
use crate::owner::{HostName, Nonce, Owner};
use crate::text::{parse_i64, parse_u64, FixedText, Words};

/// No lock file of ours is longer; a longer file is not a record of ours.
pub const RECORD_CAPACITY: usize = 512;

/// Longest record line (`lockcore 2 ...`): with a 64-byte host and every
/// number at its widest it is about 300 bytes.
pub const RECORD_LINE_CAPACITY: usize = 360;

/// The words every record line starts with.
pub const MARKER: &[u8] = b"lockcore 2 ";

/// One acquisition as written on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The process that took the lock.
    pub owner: Owner,
    /// Drawn for this acquisition: what tells it from every other one,
    /// of the same owner included.
    pub nonce: Nonce,
    /// This acquisition's fencing token.
    pub fence: u64,
    /// When the lock was taken.
    pub since: WallTime,
    /// `None`: no TTL, the lock never expires by age.
    pub expires: Option<Moment>,
}

/// How a lock file's first line names the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `PID`
    Pid,
    /// `PID:HOST`, LockFile::Simple's form for NFS.
    PidHost,
}

// The text forms are the library's own, hidden from the documentation like
// `crate::internals`, through which the workspace's tests and fuzz targets
// reach their arguments and results.
impl Record {
    /// The record line, without a newline.
    #[doc(hidden)]
    pub fn encode_line(&self) -> FixedText<RECORD_LINE_CAPACITY> {
        let mut out = FixedText::new();
        // Every field is bounded (64-byte host, fixed-width numbers), so the
        // line always fits; the tests check the longest one.
        let _ = self.write_line(&mut out);
        out
    }

    /// Appends the record line to `out`, without a newline: for a text that
    /// holds it among other words, written in place.
    pub(crate) fn write_line<const N: usize>(&self, out: &mut FixedText<N>) -> core::fmt::Result {
        self.write_before_fence(out)?;
        out.push_u64(self.fence)?;
        self.write_after_fence(out)
    }

    /// The record line cut around its fence, for a store that writes in
    /// the fence it hands out itself (a server's script): the line is the
    /// first part, the fence in decimal, and the second.
    #[doc(hidden)]
    pub fn encode_line_around_fence(&self) -> (FixedText<RECORD_LINE_CAPACITY>, FixedText<RECORD_LINE_CAPACITY>) {
        let (mut before, mut after) = (FixedText::new(), FixedText::new());
        // Bounded like the whole line: each part fits.
        let _ = self.write_before_fence(&mut before);
        let _ = self.write_after_fence(&mut after);
        (before, after)
    }

    fn write_before_fence<const N: usize>(&self, out: &mut FixedText<N>) -> core::fmt::Result {
        out.push_bytes(MARKER)?;
        self.owner.encode_into(out)?;
        out.push_bytes(b" ")?;
        out.push_bytes(&self.nonce.hex())?;
        out.push_bytes(b" ")
    }

    fn write_after_fence<const N: usize>(&self, out: &mut FixedText<N>) -> core::fmt::Result {
        out.push_bytes(b" ")?;
        out.push_i64(self.since.unix_nanos())?;
        out.push_bytes(b" ")?;
        write_moment(out, self.expires, b"never")
    }

    /// Parses a record line. `None` when it does not start with the marker
    /// (not ours); `Some(Err)` when it does but does not parse.
    #[doc(hidden)]
    pub fn parse_line(line: &[u8]) -> Option<Result<Record, CorruptKind>> {
        let rest = line.strip_prefix(MARKER)?;
        Some(parse_fields(&mut Words::new(rest)).ok_or(CorruptKind::Record))
    }

    /// The lock file of `lockfile` and `mkdir`: the peers' stamp line, then
    /// the record line.
    #[doc(hidden)]
    pub fn encode_lock_file(&self, stamp: Stamp) -> FixedText<RECORD_CAPACITY> {
        let mut out = FixedText::new();
        let _ = write!(out, "{}", self.owner.process.pid);
        if stamp == Stamp::PidHost {
            let _ = out.push_bytes(b":");
            let _ = out.push_bytes(self.owner.host.as_bytes());
        }
        let _ = out.push_bytes(b"\n");
        let _ = self.write_line(&mut out);
        let _ = out.push_bytes(b"\n");
        out
    }
}

fn parse_fields(words: &mut Words<'_>) -> Option<Record> {
    let owner = Owner::parse(words)?;
    let nonce = Nonce::parse_hex(words.next()?)?;
    let fence = parse_u64(words.next()?)?;
    let since = WallTime::from_unix_nanos(parse_i64(words.next()?)?);
    let expires = parse_moment(words, b"never")?;
    words.is_done().then_some(Record { owner, nonce, fence, since, expires })
}

/// Writes an optional [`Moment`] as `none` or `<wall ns> <boot id|-> <boot ns|->`.
pub fn write_moment<const N: usize>(out: &mut FixedText<N>, moment: Option<Moment>, none: &[u8]) -> core::fmt::Result {
    let Some(moment) = moment else { return out.push_bytes(none) };
    out.push_i64(moment.wall.unix_nanos())?;
    match moment.boot {
        Some((id, at)) => {
            out.push_bytes(b" ")?;
            out.push_hex(&id.0)?;
            out.push_bytes(b" ")?;
            out.push_i64(at.nanos())
        }
        None => out.push_bytes(b" - -"),
    }
}

/// Parses what [`write_moment`] writes. `Some(None)` for the `none` word.
pub fn parse_moment(words: &mut Words<'_>, none: &[u8]) -> Option<Option<Moment>> {
    let first = words.next()?;
    if first == none {
        return Some(None);
    }
    let wall = WallTime::from_unix_nanos(parse_i64(first)?);
    let boot = match (words.next()?, words.next()?) {
        (b"-", b"-") => None,
        (id, at) => Some((BootId::parse(id)?, BootTime::from_nanos(parse_i64(at)?))),
    };
    Some(Some(Moment { wall, boot }))
}

/// What a lock file (of `lockfile`, or the record inside a `mkdir` lock)
/// turned out to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockFileContent {
    /// A record of this library.
    Ours(Record),
    /// A LockFile::Simple stamp, or liblockfile's with a pid (`dotlockfile
    /// -p`).
    Stamp {
        /// The holder's pid; always positive.
        pid: i32,
        /// Its host, from an NFS stamp (`PID:HOST`); `None` means this one.
        host: Option<HostName>,
    },
    /// liblockfile's lock without a pid (`0`, from `dotlockfile` without
    /// `-p` and from `maillock`): valid, by liblockfile's rule, until five
    /// minutes after it was last touched.
    PidLess,
    /// Nothing yet: a LockFile::Simple writer between its create and its write.
    Empty,
}

/// Why a lock file's bytes are no lock this library understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrecognised {
    /// No format this library or a peer writes: a data file, say.
    NotALock,
    /// This library's marker, but damaged.
    Corrupt(CorruptKind),
}

/// Parses the bytes of a lock file. `bytes` is what was read of it, at
/// most `RECORD_CAPACITY + 1` bytes; a file that fills that is longer than
/// any of ours.
pub fn parse_lock_file(bytes: &[u8]) -> Result<LockFileContent, Unrecognised> {
    if bytes.is_empty() {
        return Ok(LockFileContent::Empty);
    }
    let first_nl = bytes.iter().position(|&b| b == b'\n').ok_or(Unrecognised::NotALock)?;
    let (stamp, rest) = (&bytes[..first_nl], &bytes[first_nl + 1..]);
    if rest.is_empty() {
        if bytes.len() > RECORD_CAPACITY {
            return Err(Unrecognised::NotALock);
        }
        return match stamp {
            b"0" => Ok(LockFileContent::PidLess),
            _ => {
                parse_stamp(stamp).map(|(pid, host)| LockFileContent::Stamp { pid, host }).ok_or(Unrecognised::NotALock)
            }
        };
    }
    if !rest.starts_with(MARKER) || parse_stamp(stamp).is_none() {
        return Err(Unrecognised::NotALock);
    }
    if bytes.len() > RECORD_CAPACITY {
        return Err(Unrecognised::Corrupt(CorruptKind::RecordTooLong));
    }
    let corrupt = Unrecognised::Corrupt(CorruptKind::Record);
    let line = rest.strip_suffix(b"\n").filter(|line| !line.contains(&b'\n')).ok_or(corrupt)?;
    let record = Record::parse_line(line).ok_or(corrupt)?.map_err(Unrecognised::Corrupt)?;
    // The peers' line and ours must tell one story.
    let (pid, host) = parse_stamp(stamp).ok_or(corrupt)?;
    if pid != record.owner.process.pid || host.is_some_and(|h| h != record.owner.host) {
        return Err(corrupt);
    }
    Ok(LockFileContent::Ours(record))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::BootTime;

    fn sample() -> Record {
        let owner = Owner::current().unwrap();
        Record {
            owner,
            nonce: Nonce(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            fence: 17,
            since: WallTime::from_unix_nanos(1_794_999_000_000_000_000),
            expires: Some(Moment {
                wall: WallTime::from_unix_nanos(1_795_000_000_123_456_789),
                boot: owner.boot.map(|id| (id, BootTime::from_nanos(123_456))),
            }),
        }
    }

    #[test]
    fn records_round_trip_in_both_stamps() {
        for stamp in [Stamp::Pid, Stamp::PidHost] {
            let rec = sample();
            assert_eq!(parse_lock_file(rec.encode_lock_file(stamp).as_bytes()), Ok(LockFileContent::Ours(rec)));
        }
        let never = Record { expires: None, ..sample() };
        assert_eq!(parse_lock_file(never.encode_lock_file(Stamp::Pid).as_bytes()), Ok(LockFileContent::Ours(never)));
        let line = never.encode_line();
        assert_eq!(Record::parse_line(line.as_bytes()), Some(Ok(never)));
    }

    #[test]
    fn the_widest_record_fits() {
        let mut rec = sample();
        rec.owner.host = HostName::from_bytes(&[b'h'; 64]).unwrap();
        rec.owner.process.pid = i32::MAX;
        rec.owner.process.start_ticks = u64::MAX;
        rec.owner.boot = Some(BootId([0xff; 16]));
        rec.fence = u64::MAX;
        rec.since = WallTime::from_unix_nanos(i64::MIN);
        rec.expires = Some(Moment {
            wall: WallTime::from_unix_nanos(i64::MIN),
            boot: Some((BootId([0xff; 16]), BootTime::from_nanos(i64::MIN))),
        });
        let text = rec.encode_lock_file(Stamp::PidHost);
        assert_eq!(parse_lock_file(text.as_bytes()), Ok(LockFileContent::Ours(rec)));
        assert!(text.as_bytes().len() < RECORD_CAPACITY);
    }

    #[test]
    fn first_line_is_what_lockfile_simple_writes() {
        let rec = sample();
        let pid = rec.owner.process.pid;
        let text = rec.encode_lock_file(Stamp::Pid);
        let first = text.as_bytes().split(|&b| b == b'\n').next().unwrap();
        assert_eq!(first, std::format!("{pid}").as_bytes());
        let text = rec.encode_lock_file(Stamp::PidHost);
        let first = text.as_bytes().split(|&b| b == b'\n').next().unwrap();
        assert_eq!(
            first,
            std::format!("{pid}:{}", core::str::from_utf8(rec.owner.host.as_bytes()).unwrap()).as_bytes()
        );
    }

    #[test]
    fn peers_stamps_are_foreign_locks() {
        assert_eq!(parse_lock_file(b"4242\n"), Ok(LockFileContent::Stamp { pid: 4242, host: None }));
        assert_eq!(
            parse_lock_file(b"4242:web-1\n"),
            Ok(LockFileContent::Stamp { pid: 4242, host: HostName::from_bytes(b"web-1") })
        );
        assert_eq!(parse_lock_file(b"0\n"), Ok(LockFileContent::PidLess), "dotlockfile without -p");
        assert_eq!(parse_lock_file(b""), Ok(LockFileContent::Empty));
    }

    #[test]
    fn files_without_our_marker_are_not_locks_and_damaged_ones_are_corrupt() {
        let rec = sample();
        let text = rec.encode_lock_file(Stamp::Pid);
        let bytes = text.as_bytes();
        let first_line_len = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
        // Every cut of a valid record is refused, except the one that leaves
        // a complete stamp, which is a valid foreign lock; and none of them
        // is mistaken for a data file once the marker is in.
        for cut in 1..bytes.len() {
            let verdict = parse_lock_file(&bytes[..cut]);
            if cut == first_line_len {
                assert!(matches!(verdict, Ok(LockFileContent::Stamp { .. })), "cut at {cut}");
            } else if cut >= first_line_len + MARKER.len() {
                assert_eq!(verdict, Err(Unrecognised::Corrupt(CorruptKind::Record)), "cut at {cut}");
            } else {
                assert_eq!(verdict, Err(Unrecognised::NotALock), "cut at {cut}");
            }
        }
        for data in [&b"garbage\n"[..], b"-5\n", b"99999999999\n", b"\xff\xfe\n", b"42", b"hello world\n4242\n"] {
            assert_eq!(parse_lock_file(data), Err(Unrecognised::NotALock), "{data:?}");
        }
        let mut extra = std::vec::Vec::from(bytes);
        extra.extend_from_slice(b"more\n");
        assert_eq!(parse_lock_file(&extra), Err(Unrecognised::Corrupt(CorruptKind::Record)));
        let mut long = std::vec::Vec::from(bytes);
        long.resize(RECORD_CAPACITY + 1, b'x');
        assert_eq!(parse_lock_file(&long), Err(Unrecognised::Corrupt(CorruptKind::RecordTooLong)));
        assert_eq!(parse_lock_file(&[b'7'; RECORD_CAPACITY + 1]), Err(Unrecognised::NotALock));
    }

    #[test]
    fn pid_line_must_agree_with_the_record() {
        let rec = sample();
        let line = rec.encode_line();
        let mut forged = std::vec::Vec::from(&b"1\n"[..]);
        forged.extend_from_slice(line.as_bytes());
        forged.push(b'\n');
        assert_eq!(parse_lock_file(&forged), Err(Unrecognised::Corrupt(CorruptKind::Record)));
    }
}

//! The lines of a `toplock` queue file, and their one text form.
//!
//! ```text
//! H 4 <kernel boot|-> <clock|-> <not before> <last end> <floor> <last fence> <head since|->   header: first, once
//! R <nonce> <host> <boot|-> <pid namespace> <pid> <start> <ttl|-> <t>   request (its place in the file is its place in the queue)
//! G <nonce> <expires|never> <t> <fence>                 grant or renewal, written by the requester
//! D <nonce> <t> <not before>                            done: released (with cooldown) or abandoned
//! X <nonce> <t>                                         skip: the requester was found dead
//! B <nonce> <t>                                         broken by an operator
//! L <nonce> <host> <boot|-> <pid namespace> <pid> <start> <since> <expires|never> <fence> dead|expired <t>
//!                                                       a holder that left without releasing, carried by a compaction
//! K <line>                                              a line of a checkpoint
//! E <from> <length>                                     commit: the checkpoint at <from> is whole
//! ```
//!
//! Every time is nanoseconds of the boot clock of the boot the header
//! names, which nobody can step ([`BootTime`](crate::BootTime)); `ttl` is
//! a duration in nanoseconds. The header is what makes a file a queue of this library:
//! a file whose first line is no header is never appended to. A first line
//! of `H` and a version number is a queue's, damaged or of another version;
//! one of `H` and anything else (`H is for hydrogen`) is a data file's.
//!
//! A checkpoint is a compacted queue (a header, the holder that left
//! without releasing if nobody has been granted the lock since, then the
//! pending requests with their grants) appended to the log in one write, each of its lines
//! marked `K`, and then committed by an `E` line naming where it starts
//! and how long it is. A replay that finds a commit begins at its
//! checkpoint and ignores everything before it; without one, `K` lines
//! and a commit that does not match (torn, then closed by the next
//! appender with [`TORN_LINE_END`]) are torn lines. That is what makes compaction in place safe:
//! see [`queue_file`](super::queue_file).

use core::time::Duration;

use crate::clock::BootId;
use crate::owner::{Nonce, Owner};
use crate::text::{parse_i64, parse_u64, FixedText, Words};

/// Room for the longest line: with a 64-byte host name and every number at
/// its widest, a holder that left (`L`) is 268 bytes, a request 217.
pub const LINE_CAPACITY: usize = 288;

/// The format version a header names; a queue of another version is never
/// replayed by this one's rules.
const VERSION: &[u8] = b"4";

/// What an appender writes before its own lines when the log's last line
/// has no newline (torn by a writer that died or ran out of space inside
/// its write): a word that ends no line, then the newline. Whatever was
/// cut off, the closed line then reads as no line at all, never as one
/// whose last number was cut short, and every reader agrees.
pub const TORN_LINE_END: &[u8] = b" ~\n";

/// A grant's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Not granted (yet): a request's state, never a line's (written, it
    /// would read back as `Forever`).
    No,
    /// Held until this boot-clock time.
    Until(i64),
    /// Held until released (`never`: no `ttl`).
    Forever,
}

/// The replay state a compaction carries in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The kernel's boot id when the queue was started, kept by every
    /// compaction: a queue that names another is of an earlier boot, whose
    /// requests all name processes that are gone. One that names none
    /// proves nothing (it may be in use on another clock of this boot), and
    /// is refused unless its clock is the reader's own.
    pub kernel_boot: Option<BootId>,
    /// The boot clock the times count on ([`BootId::current`]).
    pub boot: Option<BootId>,
    /// A cooldown: nobody is granted the lock before then.
    pub not_before: i64,
    /// When the last holder's turn ended.
    pub last_end: i64,
    /// The latest time written in the log: the log's clock never runs back.
    pub floor: i64,
    /// The last fencing token handed out.
    pub last_fence: u64,
    /// When the first request after the header became head (its own line
    /// is replayed at the header's time).
    pub head_since: Option<i64>,
}

impl Header {
    /// A queue with no history: no boot named, no cooldown, no fence yet.
    pub const EMPTY: Header =
        Header { kernel_boot: None, boot: None, not_before: 0, last_end: 0, floor: 0, last_fence: 0, head_since: None };
}

/// One parsed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// `H`: the first line, and only there.
    Header(Header),
    /// A header of another format version: this log is not ours to replay.
    OtherVersion,
    /// `R`: a request for the lock; its place in the file is its place in
    /// the queue.
    Request {
        /// The request's identity, and the nonce of the record it grants.
        nonce: Nonce,
        /// Who asks.
        owner: Owner,
        /// How long (nanoseconds) it may stand at the head without a grant
        /// before the others pass it over: the shorter of its `ttl` and
        /// its caller's wait; `None` for ever.
        patience: Option<i64>,
        /// When it was written (boot clock, nanoseconds).
        t: i64,
    },
    /// `G`: the head grants itself the lock, or renews its grant.
    Grant {
        /// The request granted.
        nonce: Nonce,
        /// When the grant ends.
        until: Grant,
        /// When it was written.
        t: i64,
        /// The fence the grantee drew; replay raises it above the last one
        /// handed out, and keeps a request's first fence on renewal.
        fence: u64,
    },
    /// `D`: the request is done: released, or given up.
    Done {
        /// The request.
        nonce: Nonce,
        /// When it was written.
        t: i64,
        /// The cooldown's end (boot clock); `0` for none.
        not_before: i64,
    },
    /// `X`: the request's owner was found dead, and the others pass it over.
    Skip {
        /// The request.
        nonce: Nonce,
        /// When it was written.
        t: i64,
    },
    /// `B`: an operator broke the request.
    Broken {
        /// The request.
        nonce: Nonce,
        /// When it was written.
        t: i64,
    },
    /// `L`: the last holder, which left the queue without releasing (found
    /// dead, or passed over once its grant ran out) and which nobody has
    /// been granted the lock after, as a compaction carries it: the next
    /// grant names it as the holder it took over from, and its own late
    /// release is told that its grant ran out, not that the lock was taken.
    Left {
        /// Its request's nonce.
        nonce: Nonce,
        /// Who held it.
        owner: Owner,
        /// When its turn began.
        since: i64,
        /// Its grant's end.
        until: Grant,
        /// Its fencing token.
        fence: u64,
        /// Found dead (`dead`), or passed over after its grant (`expired`).
        dead: bool,
        /// When it was written.
        t: i64,
    },
}

impl Line {
    /// When the line was written; `None` for a header, which has no time
    /// of its own.
    pub fn time(&self) -> Option<i64> {
        match *self {
            Line::Header(_) | Line::OtherVersion => None,
            Line::Request { t, .. }
            | Line::Grant { t, .. }
            | Line::Done { t, .. }
            | Line::Skip { t, .. }
            | Line::Broken { t, .. }
            | Line::Left { t, .. } => Some(t),
        }
    }

    /// Parses one line, without its newline. `None` for anything that is
    /// not exactly one of the forms above.
    pub fn parse(line: &[u8]) -> Option<Line> {
        let mut words = Words::new(line);
        let kind = words.next()?;
        let nonce = |words: &mut Words<'_>| words.next().and_then(Nonce::parse_hex);
        let int = |words: &mut Words<'_>| words.next().and_then(parse_i64);
        let until = |words: &mut Words<'_>| match words.next()? {
            b"never" => Some(Grant::Forever),
            ns => Some(Grant::Until(parse_i64(ns)?)),
        };
        let parsed = match kind {
            b"H" => {
                let version = words.next()?;
                if version != VERSION {
                    return is_number(version).then_some(Line::OtherVersion);
                }
                let mut boot = || match words.next()? {
                    b"-" => Some(None),
                    hex => Some(Some(BootId::parse(hex)?)),
                };
                let (kernel_boot, boot) = (boot()?, boot()?);
                Line::Header(Header {
                    kernel_boot,
                    boot,
                    not_before: int(&mut words)?,
                    last_end: int(&mut words)?,
                    floor: int(&mut words)?,
                    last_fence: parse_u64(words.next()?)?,
                    head_since: match words.next()? {
                        b"-" => None,
                        ns => Some(parse_i64(ns)?),
                    },
                })
            }
            b"R" => Line::Request {
                nonce: nonce(&mut words)?,
                owner: Owner::parse(&mut words)?,
                patience: match words.next()? {
                    b"-" => None,
                    ns => Some(parse_i64(ns).filter(|&ns| ns >= 0)?),
                },
                t: int(&mut words)?,
            },
            b"G" => Line::Grant {
                nonce: nonce(&mut words)?,
                until: until(&mut words)?,
                t: int(&mut words)?,
                fence: parse_u64(words.next()?)?,
            },
            b"D" => Line::Done { nonce: nonce(&mut words)?, t: int(&mut words)?, not_before: int(&mut words)? },
            b"X" => Line::Skip { nonce: nonce(&mut words)?, t: int(&mut words)? },
            b"B" => Line::Broken { nonce: nonce(&mut words)?, t: int(&mut words)? },
            b"L" => Line::Left {
                nonce: nonce(&mut words)?,
                owner: Owner::parse(&mut words)?,
                since: int(&mut words)?,
                until: until(&mut words)?,
                fence: parse_u64(words.next()?)?,
                dead: match words.next()? {
                    b"dead" => true,
                    b"expired" => false,
                    _ => return None,
                },
                t: int(&mut words)?,
            },
            _ => return None,
        };
        words.is_done().then_some(parsed)
    }

    /// The line, newline included.
    pub fn encode(&self) -> FixedText<LINE_CAPACITY> {
        let mut out = FixedText::new();
        // Bounded fields (a 64-byte host, fixed-width numbers): every line
        // fits; the tests check the longest of each kind.
        let _ = self.write_to(&mut out);
        out
    }

    /// Written with [`FixedText`]'s own number and hex writers, not
    /// `core::fmt`: every change of the queue encodes a line or more under
    /// its exclusive lock, and the formatter took most of that time.
    fn write_to(&self, out: &mut FixedText<LINE_CAPACITY>) -> core::fmt::Result {
        match *self {
            Line::Header(h) => {
                out.push_bytes(b"H 4")?;
                for boot in [h.kernel_boot, h.boot] {
                    match boot {
                        Some(boot) => {
                            out.push_bytes(b" ")?;
                            out.push_hex(&boot.0)?;
                        }
                        None => out.push_bytes(b" -")?,
                    }
                }
                for time in [h.not_before, h.last_end, h.floor] {
                    push_time(out, time)?;
                }
                out.push_bytes(b" ")?;
                out.push_u64(h.last_fence)?;
                match h.head_since {
                    Some(t) => push_time(out, t)?,
                    None => out.push_bytes(b" -")?,
                }
            }
            Line::OtherVersion => out.push_bytes(b"H 0")?,
            Line::Request { nonce, owner, patience, t } => {
                push_kind_and_nonce(out, b"R ", nonce)?;
                out.push_bytes(b" ")?;
                owner.encode_into(out)?;
                match patience {
                    Some(ns) => push_time(out, ns)?,
                    None => out.push_bytes(b" -")?,
                }
                push_time(out, t)?;
            }
            Line::Grant { nonce, until, t, fence } => {
                push_kind_and_nonce(out, b"G ", nonce)?;
                push_until(out, until)?;
                push_time(out, t)?;
                out.push_bytes(b" ")?;
                out.push_u64(fence)?;
            }
            Line::Left { nonce, owner, since, until, fence, dead, t } => {
                push_kind_and_nonce(out, b"L ", nonce)?;
                out.push_bytes(b" ")?;
                owner.encode_into(out)?;
                push_time(out, since)?;
                push_until(out, until)?;
                out.push_bytes(b" ")?;
                out.push_u64(fence)?;
                out.push_bytes(if dead { b" dead" } else { b" expired" })?;
                push_time(out, t)?;
            }
            Line::Done { nonce, t, not_before } => {
                push_kind_and_nonce(out, b"D ", nonce)?;
                push_time(out, t)?;
                push_time(out, not_before)?;
            }
            Line::Skip { nonce, t } | Line::Broken { nonce, t } => {
                let kind = if matches!(self, Line::Skip { .. }) { b"X " } else { b"B " };
                push_kind_and_nonce(out, kind, nonce)?;
                push_time(out, t)?;
            }
        }
        out.push_bytes(b"\n")
    }
}

fn push_kind_and_nonce(out: &mut FixedText<LINE_CAPACITY>, kind: &[u8], nonce: Nonce) -> core::fmt::Result {
    out.push_bytes(kind)?;
    out.push_bytes(&nonce.hex())
}

/// A time or a duration in nanoseconds, after a space.
fn push_time(out: &mut FixedText<LINE_CAPACITY>, ns: i64) -> core::fmt::Result {
    out.push_bytes(b" ")?;
    out.push_i64(ns)
}

/// A grant's end as its lines write it, after a space.
fn push_until(out: &mut FixedText<LINE_CAPACITY>, until: Grant) -> core::fmt::Result {
    match until {
        Grant::Until(ns) => push_time(out, ns),
        Grant::Forever | Grant::No => out.push_bytes(b" never"),
    }
}

/// Whether `line` (without its newline) starts as a header of every
/// version of this format starts, `H` and a version number, whatever
/// follows: the first line of a queue of this library, whole, damaged or
/// of another version, and not that of a data file that merely starts
/// with `H `.
pub fn is_header_of_some_version(line: &[u8]) -> bool {
    let mut words = Words::new(line);
    words.next() == Some(&b"H"[..]) && words.next().is_some_and(is_number)
}

fn is_number(word: &[u8]) -> bool {
    !word.is_empty() && word.iter().all(u8::is_ascii_digit)
}

/// A duration as the nanoseconds a line carries.
pub fn nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

/// What marks each line of a checkpoint.
pub const CHECKPOINT_MARK: &[u8] = b"K ";

/// The commit of a checkpoint of `len` bytes that starts at byte `from`.
pub fn encode_commit(from: usize, len: usize) -> FixedText<LINE_CAPACITY> {
    let mut out = FixedText::new();
    // 2 + 2 x 20 digits + 2: always fits.
    let _ = write_commit(&mut out, from, len);
    out
}

fn write_commit(out: &mut FixedText<LINE_CAPACITY>, from: usize, len: usize) -> core::fmt::Result {
    out.push_bytes(b"E ")?;
    out.push_u64(from as u64)?;
    out.push_bytes(b" ")?;
    out.push_u64(len as u64)?;
    out.push_bytes(b"\n")
}

/// A commit line's checkpoint: where it starts, and its length.
pub fn parse_commit(line: &[u8]) -> Option<(usize, usize)> {
    let mut words = Words::new(line);
    if words.next()? != b"E" {
        return None;
    }
    let mut number = || words.next().and_then(parse_u64).and_then(|n| usize::try_from(n).ok());
    let (from, len) = (number()?, number()?);
    words.next().is_none().then_some((from, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::HostName;

    fn widest_owner() -> Owner {
        let mut owner = Owner::current().unwrap();
        owner.host = HostName::from_bytes(&[b'h'; 64]).unwrap();
        owner.boot = Some(BootId([0xff; 16]));
        owner.process.pid = i32::MAX;
        owner.process.start_ticks = u64::MAX;
        owner
    }

    /// A line of each kind, at the widest, and a few narrow ones.
    fn lines() -> [Line; 11] {
        let nonce = Nonce(u128::MAX);
        [
            Line::Header(Header {
                kernel_boot: Some(BootId([0xcd; 16])),
                boot: Some(BootId([0xab; 16])),
                not_before: i64::MIN,
                last_end: i64::MIN,
                floor: i64::MIN,
                last_fence: u64::MAX,
                head_since: Some(i64::MIN),
            }),
            Line::Header(Header::EMPTY),
            Line::Request { nonce, owner: widest_owner(), patience: Some(i64::MAX), t: i64::MIN },
            Line::Request { nonce, owner: Owner { boot: None, ..widest_owner() }, patience: None, t: 0 },
            Line::Grant { nonce, until: Grant::Until(i64::MIN), t: i64::MIN, fence: u64::MAX },
            Line::Grant { nonce, until: Grant::Forever, t: 1, fence: 2 },
            Line::Done { nonce, t: i64::MIN, not_before: i64::MIN },
            Line::Skip { nonce, t: i64::MIN },
            Line::Broken { nonce, t: i64::MIN },
            Line::Left {
                nonce,
                owner: widest_owner(),
                since: i64::MIN,
                until: Grant::Until(i64::MIN),
                fence: u64::MAX,
                dead: false,
                t: i64::MIN,
            },
            Line::Left { nonce, owner: widest_owner(), since: 1, until: Grant::Forever, fence: 2, dead: true, t: 3 },
        ]
    }

    #[test]
    fn every_line_round_trips_and_fits() {
        for line in lines() {
            let text = line.encode();
            let bytes = text.as_bytes();
            assert!(bytes.len() < LINE_CAPACITY && bytes.ends_with(b"\n"), "{line:?}");
            assert_eq!(Line::parse(&bytes[..bytes.len() - 1]), Some(line));
        }
    }

    /// A line cut off after any byte, even its last, and closed as an
    /// appender closes it, reads as no line: not as one whose last number
    /// lost its last digits.
    #[test]
    fn a_torn_line_closed_reads_as_no_line() {
        let commit = encode_commit(1234, 56789);
        let texts = lines().map(|line| line.encode());
        for text in texts.iter().chain([&commit]) {
            let whole = &text.as_bytes()[..text.as_bytes().len() - 1];
            for cut in 0..=whole.len() {
                let closed = [&whole[..cut], TORN_LINE_END].concat();
                let closed = closed.strip_suffix(b"\n").unwrap();
                let shown = std::string::String::from_utf8_lossy(closed);
                assert_eq!(Line::parse(closed), None, "{shown}");
                assert_eq!(parse_commit(closed), None, "{shown}");
            }
        }
    }

    /// The text every version of this format reads and writes, to the byte.
    #[test]
    fn lines_are_written_in_the_documented_form() {
        let boot = BootId([0xab; 16]);
        let owner = Owner {
            host: HostName::from_bytes(b"vm").unwrap(),
            boot: Some(boot),
            process: crate::owner::ProcessId { namespace: 4026531836, pid: 100, start_ticks: 5 },
        };
        let (nonce, hex) = (Nonce(0x1f), std::format!("{}1f", "0".repeat(30)));
        let boot_hex = "ab".repeat(16);
        let header = Header {
            kernel_boot: Some(boot),
            boot: None,
            not_before: -1,
            last_end: 2,
            floor: 3,
            last_fence: u64::MAX,
            head_since: Some(i64::MIN),
        };
        let cases = [
            (Line::Header(header), std::format!("H 4 {boot_hex} - -1 2 3 18446744073709551615 -9223372036854775808")),
            (Line::Header(Header::EMPTY), "H 4 - - 0 0 0 0 -".into()),
            (
                Line::Request { nonce, owner, patience: Some(7), t: 8 },
                std::format!("R {hex} vm {boot_hex} 4026531836 100 5 7 8"),
            ),
            (
                Line::Request { nonce, owner: Owner { boot: None, ..owner }, patience: None, t: 8 },
                std::format!("R {hex} vm - 4026531836 100 5 - 8"),
            ),
            (Line::Grant { nonce, until: Grant::Until(9), t: 10, fence: 11 }, std::format!("G {hex} 9 10 11")),
            (Line::Grant { nonce, until: Grant::Forever, t: 10, fence: 11 }, std::format!("G {hex} never 10 11")),
            (Line::Done { nonce, t: 12, not_before: 0 }, std::format!("D {hex} 12 0")),
            (Line::Skip { nonce, t: 13 }, std::format!("X {hex} 13")),
            (Line::Broken { nonce, t: 14 }, std::format!("B {hex} 14")),
            (
                Line::Left { nonce, owner, since: 15, until: Grant::Forever, fence: 16, dead: true, t: 17 },
                std::format!("L {hex} vm {boot_hex} 4026531836 100 5 15 never 16 dead 17"),
            ),
            (
                Line::Left { nonce, owner, since: 15, until: Grant::Until(18), fence: 16, dead: false, t: 17 },
                std::format!("L {hex} vm {boot_hex} 4026531836 100 5 15 18 16 expired 17"),
            ),
        ];
        for (line, text) in cases {
            assert_eq!(line.encode().as_bytes(), std::format!("{text}\n").as_bytes(), "{line:?}");
        }
        assert_eq!(encode_commit(123, 45).as_bytes(), b"E 123 45\n");
    }

    #[test]
    fn anything_else_is_no_line() {
        let grant = Line::Grant { nonce: Nonce(7), until: Grant::Until(5), t: 6, fence: 8 }.encode();
        let bytes = &grant.as_bytes()[..grant.as_bytes().len() - 1];
        for cut in 0..bytes.len() {
            assert_eq!(Line::parse(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Line::parse(b"H 3 0 0 0 0 0 -"), Some(Line::OtherVersion));
        for junk in [&b""[..], b"Z 1", b"D 00000000000000000000000000000007 1 2 3", b"G x 1 2 3", b"H is for hydrogen"]
        {
            assert_eq!(Line::parse(junk), None, "{junk:?}");
        }
    }
}

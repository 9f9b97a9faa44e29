//! RESP2, the protocol Redis speaks, in fixed buffers.
//!
//! A command goes out as an array of bulk strings; a reply comes back as
//! one value: a status (`+OK`), an error (`-ERR ...`), an integer, a bulk
//! string or nil, or an array of values. Parsing works on the bytes
//! received so far and tells a reply that is not whole yet ([`Parsed::Partial`])
//! from one that can never be ([`Malformed`]); it never allocates, and an
//! array's items are read in place, on demand ([`Items`]).

use core::fmt::Write;

use crate::text::{parse_i64, FixedText};

/// Deepest nesting of arrays a reply may have; lock scripts return flat
/// ones, and a server never nests far.
const MAX_DEPTH: u32 = 8;

/// The longest reply this library reads: a record and a few numbers. A
/// bulk string or an array said to be longer is malformed at once, rather
/// than waited for until the deadline.
pub const LONGEST_REPLY: usize = 4 * 1024;

/// One reply, borrowed from the bytes it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+...`: a status line, such as `OK`.
    Status(&'a [u8]),
    /// `-...`: an error line, first word its kind (`NOSCRIPT`, `MOVED`, ...).
    Error(&'a [u8]),
    /// `:...`: an integer.
    Integer(i64),
    /// `$...`: a bulk string; `None` is nil (`$-1`).
    Bulk(Option<&'a [u8]>),
    /// `*...`: an array; `None` is a nil array (`*-1`, a blocking pop that timed out).
    Array(Option<Items<'a>>),
}

impl<'a> Reply<'a> {
    /// The bytes of a bulk string or a status; `None` for the others.
    pub fn text(&self) -> Option<&'a [u8]> {
        match *self {
            Reply::Bulk(Some(bytes)) | Reply::Status(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// An integer, or a bulk string or status of decimal digits (Lua
    /// numbers that scripts hand back as text to keep all 64 bits).
    pub fn integer(&self) -> Option<i64> {
        match *self {
            Reply::Integer(n) => Some(n),
            _ => self.text().and_then(parse_i64),
        }
    }
}

/// The items of an array reply, parsed as they are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Items<'a> {
    bytes: &'a [u8],
    left: usize,
}

impl<'a> Items<'a> {
    /// How many items are left.
    pub fn remaining(&self) -> usize {
        self.left
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = Reply<'a>;

    fn next(&mut self) -> Option<Reply<'a>> {
        if self.left == 0 {
            return None;
        }
        // The array was checked whole when it was parsed: each item parses.
        match parse_at(self.bytes, MAX_DEPTH) {
            Ok(Parsed::Whole(reply, used)) => {
                self.bytes = &self.bytes[used..];
                self.left -= 1;
                Some(reply)
            }
            _ => {
                self.left = 0;
                None
            }
        }
    }
}

/// Bytes that are no RESP2 reply, whatever follows them: the stream is out
/// of step and the connection must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// What the bytes received so far hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole reply, and how many bytes it took.
    Whole(Reply<'a>, usize),
    /// The start of a reply: read more.
    Partial,
}

/// Parses the reply at the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Parsed<'_>, Malformed> {
    parse_at(bytes, MAX_DEPTH)
}

fn parse_at(bytes: &[u8], depth: u32) -> Result<Parsed<'_>, Malformed> {
    let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") else {
        // A header line is short: a long one without its end is garbage.
        return if bytes.len() > 64 && !matches!(bytes.first(), Some(b'+' | b'-')) {
            Err(Malformed)
        } else {
            Ok(Parsed::Partial)
        };
    };
    // Every reply begins with its type byte.
    if end == 0 {
        return Err(Malformed);
    }
    let (kind, line, after) = (bytes[0], &bytes[1..end], end + 2);
    let whole = |reply, used| Ok(Parsed::Whole(reply, used));
    match kind {
        b'+' => whole(Reply::Status(line), after),
        b'-' => whole(Reply::Error(line), after),
        b':' => whole(Reply::Integer(parse_i64(line).ok_or(Malformed)?), after),
        b'$' => match length(line)? {
            None => whole(Reply::Bulk(None), after),
            Some(len) => {
                let stop = after.checked_add(len).and_then(|n| n.checked_add(2)).ok_or(Malformed)?;
                if bytes.len() < stop {
                    return Ok(Parsed::Partial);
                }
                if &bytes[stop - 2..stop] != b"\r\n" {
                    return Err(Malformed);
                }
                whole(Reply::Bulk(Some(&bytes[after..stop - 2])), stop)
            }
        },
        b'*' => match length(line)? {
            None => whole(Reply::Array(None), after),
            Some(count) => {
                if depth == 0 {
                    return Err(Malformed);
                }
                let mut used = after;
                for _ in 0..count {
                    match parse_at(&bytes[used..], depth - 1)? {
                        Parsed::Whole(_, n) => used += n,
                        Parsed::Partial => return Ok(Parsed::Partial),
                    }
                }
                whole(Reply::Array(Some(Items { bytes: &bytes[after..used], left: count })), used)
            }
        },
        _ => Err(Malformed),
    }
}

/// A bulk string's or an array's length; `None` for nil (`-1`).
fn length(line: &[u8]) -> Result<Option<usize>, Malformed> {
    match parse_i64(line) {
        Some(-1) => Ok(None),
        Some(n) if (0..=LONGEST_REPLY as i64).contains(&n) => Ok(Some(n as usize)),
        _ => Err(Malformed),
    }
}

/// Writes `args` as one command into `out`; `None` when it does not fit.
pub fn encode(out: &mut [u8], args: &[&[u8]]) -> Option<usize> {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        let stop = at + bytes.len();
        out.get_mut(at..stop)?.copy_from_slice(bytes);
        at = stop;
        Some(())
    };
    encode_in_pieces(args, |piece| put(piece).ok_or(())).ok().map(|()| at)
}

/// Hands the pieces of the command `args` to `put` in order (headers, each
/// argument where it lies, line ends), for a command too long to copy into
/// a buffer first; stops at `put`'s first error.
pub fn encode_in_pieces<E>(args: &[&[u8]], mut put: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
    put(header(b'*', args.len()).as_bytes())?;
    for arg in args {
        put(header(b'$', arg.len()).as_bytes())?;
        put(arg)?;
        put(b"\r\n")?;
    }
    Ok(())
}

/// `*<count>\r\n` or `$<length>\r\n`.
fn header(kind: u8, n: usize) -> FixedText<24> {
    let mut header = FixedText::<24>::new();
    // 1 + 20 digits + 2 always fit in 24 bytes.
    let _ = write!(header, "{}{n}\r\n", kind as char);
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> (Reply<'_>, usize) {
        match parse(bytes) {
            Ok(Parsed::Whole(reply, used)) => (reply, used),
            other => panic!("{:?}: {other:?}", core::str::from_utf8(bytes)),
        }
    }

    #[test]
    fn every_kind_of_reply_parses_and_says_how_long_it_was() {
        assert_eq!(whole(b"+OK\r\nrest"), (Reply::Status(b"OK"), 5));
        assert_eq!(whole(b"-NOSCRIPT No matching script\r\n").0, Reply::Error(b"NOSCRIPT No matching script"));
        assert_eq!(whole(b":-42\r\n").0, Reply::Integer(-42));
        assert_eq!(whole(b"$5\r\nhe\r\no\r\n").0, Reply::Bulk(Some(b"he\r\no")), "a bulk string is binary-safe");
        assert_eq!(whole(b"$-1\r\n").0, Reply::Bulk(None));
        assert_eq!(whole(b"*-1\r\n").0, Reply::Array(None));
        let (reply, used) = whole(b"*3\r\n:1\r\n$3\r\nabc\r\n*1\r\n$-1\r\n+next\r\n");
        assert_eq!(used, 26);
        let Reply::Array(Some(items)) = reply else { panic!("{reply:?}") };
        let items: std::vec::Vec<_> = items.collect();
        assert_eq!(items[..2], [Reply::Integer(1), Reply::Bulk(Some(b"abc"))]);
        let Reply::Array(Some(mut inner)) = items[2] else { panic!("{:?}", items[2]) };
        assert_eq!((inner.next(), inner.next()), (Some(Reply::Bulk(None)), None));
    }

    #[test]
    fn a_reply_cut_anywhere_is_partial_and_garbage_is_malformed() {
        let full = b"*2\r\n$3\r\nabc\r\n:7\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(Parsed::Partial), "cut at {cut}");
        }
        for garbage in [&b"?x\r\n"[..], b"\r\n", b"*1\r\n\r\n", b":12a\r\n", b"$-2\r\n", b"$3\r\nabcd\r\n", b"*-5\r\n"]
        {
            assert_eq!(parse(garbage), Err(Malformed), "{:?}", core::str::from_utf8(garbage));
        }
        assert_eq!(parse(&[b'$'; 100]), Err(Malformed), "a header line without its end");
        let deep = b"*1\r\n".repeat(MAX_DEPTH as usize + 1);
        assert_eq!(parse(&deep), Err(Malformed), "nesting past the limit");
        // Longer than any reply this library reads: not waited for.
        for too_long in [&b"$4097\r\n"[..], b"*4097\r\n", b"$999999999999999999\r\n"] {
            assert_eq!(parse(too_long), Err(Malformed), "{:?}", core::str::from_utf8(too_long));
        }
        assert_eq!(parse(b"$4096\r\n"), Ok(Parsed::Partial), "the longest there is room for");
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings_or_nothing_when_it_does_not_fit() {
        let mut out = [0u8; 64];
        let n = encode(&mut out, &[b"GET", b"k\r\n"]).unwrap();
        assert_eq!(&out[..n], b"*2\r\n$3\r\nGET\r\n$3\r\nk\r\n\r\n");
        assert_eq!(encode(&mut out[..10], &[b"GET", b"key"]), None);
    }

    #[test]
    fn a_command_too_long_for_the_buffer_goes_in_pieces_that_make_the_same_bytes() {
        let script = [b'x'; 300];
        let args: [&[u8]; 3] = [b"EVAL", &script, b"0"];
        let mut whole = [0u8; 400];
        let n = encode(&mut whole, &args).unwrap();
        assert_eq!(encode(&mut whole[..200], &args), None);
        let mut joined = std::vec::Vec::new();
        let mut pieces = 0;
        encode_in_pieces(&args, |piece| {
            joined.extend_from_slice(piece);
            pieces += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(joined, &whole[..n]);
        assert_eq!(pieces, 1 + 3 * 3, "a header, then a header, the bytes and a line end per argument");
        let mut calls = 0;
        let stopped = encode_in_pieces(&args, |_| {
            calls += 1;
            if calls == 2 {
                Err("stop")
            } else {
                Ok(())
            }
        });
        assert_eq!((stopped, calls), (Err("stop"), 2), "the first error ends it");
    }
}

//! A byte buffer of fixed capacity that `write!` can fill: how records are
//! formatted without allocation.

use core::fmt;

/// Up to `N` bytes of formatted text. A write that does not fit fails whole
/// with [`fmt::Error`] rather than leaving a cut record behind.
#[derive(Clone)]
pub struct FixedText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FixedText<N> {
    /// No text yet.
    pub const fn new() -> Self {
        FixedText { buf: [0; N], len: 0 }
    }

    /// The text written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Appends `bytes` whole, or, if they do not fit, nothing and
    /// [`fmt::Error`].
    pub fn push_bytes(&mut self, bytes: &[u8]) -> fmt::Result {
        let end = self.len.checked_add(bytes.len()).filter(|&end| end <= N).ok_or(fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Appends `value` in decimal, as `{}` writes it, without the
    /// formatting machinery: records are written at every change of a lock.
    /// The digits go straight into their place, last first (a copy of a few
    /// bytes of unknown length is a call to `memcpy`, and a record has a
    /// dozen numbers).
    pub fn push_u64(&mut self, value: u64) -> fmt::Result {
        let digits = value.checked_ilog10().map_or(1, |log| log as usize + 1);
        let end = self.len.checked_add(digits).filter(|&end| end <= N).ok_or(fmt::Error)?;
        let mut rest = value;
        for digit in self.buf[self.len..end].iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        self.len = end;
        Ok(())
    }

    /// Appends `value` in decimal, as `{}` writes it.
    pub fn push_i64(&mut self, value: i64) -> fmt::Result {
        if value < 0 {
            // The sign only with the digits: a number that does not fit
            // leaves nothing behind.
            let digits = value.unsigned_abs().checked_ilog10().map_or(1, |log| log as usize + 1);
            if self.len.checked_add(1 + digits).filter(|&end| end <= N).is_none() {
                return Err(fmt::Error);
            }
            self.push_bytes(b"-")?;
            return self.push_u64(value.unsigned_abs());
        }
        self.push_u64(value as u64)
    }

    /// Appends `bytes` as lowercase hex, two digits each, as `{:02x}` of
    /// each byte writes them.
    pub fn push_hex(&mut self, bytes: &[u8]) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let end = self.len.checked_add(bytes.len() * 2).filter(|&end| end <= N).ok_or(fmt::Error)?;
        for (pair, byte) in self.buf[self.len..end].chunks_exact_mut(2).zip(bytes) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        self.len = end;
        Ok(())
    }

    /// Pads with `byte` up to exactly `len` bytes.
    pub fn pad_to(&mut self, len: usize, byte: u8) -> fmt::Result {
        if len > N || len < self.len {
            return Err(fmt::Error);
        }
        self.buf[self.len..len].fill(byte);
        self.len = len;
        Ok(())
    }
}

impl<const N: usize> fmt::Debug for FixedText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", core::str::from_utf8(self.as_bytes()).unwrap_or("<bytes>"))
    }
}

impl<const N: usize> Default for FixedText<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FixedText<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_bytes(s.as_bytes())
    }
}

/// The words of a record line, split at single spaces. Strict: an empty
/// word (two spaces in a row, a leading or trailing space) is a word like
/// any other, and fails whichever parse it reaches.
#[derive(Clone, Debug)]
pub struct Words<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Words<'a> {
    /// The words of `line`, which holds no newline. An empty line is one
    /// empty word.
    pub fn new(line: &'a [u8]) -> Words<'a> {
        Words { rest: Some(line) }
    }

    /// Whether every word has been taken.
    pub fn is_done(&self) -> bool {
        self.rest.is_none()
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match rest.iter().position(|&b| b == b' ') {
            Some(space) => {
                self.rest = Some(&rest[space + 1..]);
                Some(&rest[..space])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// The value of one hex digit, either case.
pub fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parses an unsigned decimal with no sign, no spaces and no leading `+`.
pub fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in text {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// Parses a signed decimal (`-` allowed).
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    match text.strip_prefix(b"-") {
        // Through i128, so that the most negative value parses too.
        Some(digits) => parse_u64(digits).and_then(|v| i64::try_from(-i128::from(v)).ok()),
        None => parse_u64(text).and_then(|v| i64::try_from(v).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn overflowing_write_fails_instead_of_truncating_silently() {
        let mut t = FixedText::<4>::new();
        assert!(write!(t, "abcde").is_err());
        assert!(write!(t, "ab").is_ok());
        assert_eq!(t.as_bytes(), b"ab");
        assert!(t.pad_to(4, b' ').is_ok());
        assert_eq!(t.as_bytes(), b"ab  ");
    }

    #[test]
    fn numbers_and_hex_are_written_as_the_formatter_writes_them() {
        let unsigned = [0, 1, 9, 10, 99, 100, 12_345, u64::from(u32::MAX), i64::MAX as u64, u64::MAX - 1, u64::MAX];
        for value in unsigned {
            let mut t = FixedText::<32>::new();
            t.push_u64(value).unwrap();
            assert_eq!(t.as_bytes(), std::format!("{value}").as_bytes());
        }
        // Every change in the count of digits.
        for power in (0..20).map(|exp| 10u64.pow(exp)) {
            for value in [power - 1, power, power + 1] {
                let mut t = FixedText::<20>::new();
                t.push_u64(value).unwrap();
                assert_eq!(t.as_bytes(), std::format!("{value}").as_bytes());
            }
        }
        for value in [0, 1, -1, 9, -10, 1_795_842_484_764_194_711, i64::MAX, i64::MIN, i64::MIN + 1] {
            let mut t = FixedText::<32>::new();
            t.push_i64(value).unwrap();
            assert_eq!(t.as_bytes(), std::format!("{value}").as_bytes());
        }
        let bytes = [0x00, 0x0f, 0xa0, 0xff, 0x5c];
        let mut t = FixedText::<32>::new();
        t.push_hex(&bytes).unwrap();
        let expected: std::string::String = bytes.iter().map(|b| std::format!("{b:02x}")).collect();
        assert_eq!(t.as_bytes(), expected.as_bytes());
        // Whole or not at all, as every write.
        let mut short = FixedText::<4>::new();
        short.push_bytes(b"ab").unwrap();
        assert!(short.push_i64(-123).is_err() && short.push_u64(123).is_err() && short.push_hex(&[1, 2]).is_err());
        assert!(short.push_i64(-12).is_err(), "the sign would fit, the digits not");
        assert_eq!(short.as_bytes(), b"ab");
        let mut exact = FixedText::<4>::new();
        exact.push_i64(-123).unwrap();
        assert_eq!(exact.as_bytes(), b"-123");
    }

    #[test]
    fn words_split_at_single_spaces() {
        let mut words = Words::new(b"a bc  d");
        assert_eq!(words.next(), Some(&b"a"[..]));
        assert_eq!(words.next(), Some(&b"bc"[..]));
        assert_eq!(words.next(), Some(&b""[..]));
        assert!(!words.is_done());
        assert_eq!(words.next(), Some(&b"d"[..]));
        assert!(words.is_done());
        assert_eq!(words.next(), None);
    }

    #[test]
    fn numbers_parse_strictly() {
        assert_eq!(parse_u64(b"42"), Some(42));
        assert_eq!(parse_u64(b"+42"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"-"), None);
    }
}

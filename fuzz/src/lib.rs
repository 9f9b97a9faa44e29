//! What the fuzz targets in `fuzz_targets/` share. Each target is one
//! parser of untrusted input and checks a property of what it parses, not
//! only that parsing does not crash.

/// Appends `bytes` to `out` percent-encoded, as a spec's target or value is
/// written: every byte but ASCII letters, digits and `/._-` becomes `%XX`.
pub fn percent_encode(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"/._-".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Whether `word` is a decimal number written the way the encoders write
/// one: digits with no leading zero, `-` before a negative one, `0` alone.
/// The parsers also accept `007` and `-0`, which encode differently.
pub fn is_canonical_decimal(word: &[u8]) -> bool {
    let digits = word.strip_prefix(b"-").unwrap_or(word);
    let well_formed = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    well_formed && (digits == b"0" || digits[0] != b'0') && word != b"-0"
}

/// The bytes of `text` as a readable string, for assertion messages.
pub fn shown(text: &[u8]) -> String {
    text.escape_ascii().to_string()
}

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use lockcore::{BootId, BootTime, HostName, Moment, Owner, ProcessId, WallTime, HOST_CAPACITY};

/// An owner such as this library writes: a host name of 1 to 64 printable
/// bytes other than `:`, a boot id or none, a positive pid, any start time.
pub fn arbitrary_owner(u: &mut Unstructured) -> Result<Owner> {
    let mut host = [0u8; HOST_CAPACITY];
    let host_len = u.int_in_range(1..=HOST_CAPACITY)?;
    for byte in &mut host[..host_len] {
        *byte = match u.int_in_range(b'!'..=b'~')? {
            b':' => b'_',
            other => other,
        };
    }
    let host = HostName::from_bytes(&host[..host_len]).expect("printable bytes other than ':' are a host name");
    let boot = if u.arbitrary()? { Some(BootId(u.arbitrary()?)) } else { None };
    let process =
        ProcessId { namespace: u.arbitrary()?, pid: u.int_in_range(1..=i32::MAX)?, start_ticks: u.arbitrary()? };
    Ok(Owner { host, boot, process })
}

/// Any moment: any wall-clock time, with or without a boot-clock reading.
pub fn arbitrary_moment(u: &mut Unstructured) -> Result<Moment> {
    let wall = WallTime::from_unix_nanos(u.arbitrary()?);
    let boot = if u.arbitrary()? { Some((BootId(u.arbitrary()?), BootTime::from_nanos(u.arbitrary()?))) } else { None };
    Ok(Moment { wall, boot })
}

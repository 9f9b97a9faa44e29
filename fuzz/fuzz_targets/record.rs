//! `lockcore::record::parse` on any bytes. A record of ours re-encodes, in
//! either first-line stamp, to bytes that parse to the same record; a
//! LockFile::Simple stamp, written again, parses to the same stamp; only
//! the empty file is `Empty`. And any record built from the input bytes
//! encodes to bytes that parse back to it: `encode` never truncates.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockcore::owner::{BootId, HostName, ProcessId, HOST_CAPACITY};
use lockcore::record::{self, Parsed, Record, Stamp};
use lockcore::{Nonce, Owner, WallTime};
use lockcore_fuzz::shown;

fuzz_target!(|data: &[u8]| {
    match record::parse(data) {
        Ok(Parsed::Ours(record)) => check_encodes(&record),
        Ok(Parsed::Foreign { pid, host }) => {
            let mut stamp = pid.to_string().into_bytes();
            if let Some(host) = &host {
                stamp.push(b':');
                stamp.extend_from_slice(host.as_bytes());
            }
            stamp.push(b'\n');
            let again = record::parse(&stamp);
            assert_eq!(again, Ok(Parsed::Foreign { pid, host }), "the stamp written again: {}", shown(&stamp));
        }
        Ok(Parsed::Empty) => assert!(data.is_empty(), "{} bytes parsed as an empty file", data.len()),
        Err(_) => {}
    }
    if let Ok(record) = arbitrary_record(&mut Unstructured::new(data)) {
        check_encodes(&record);
    }
});

/// `record` encoded with either stamp parses back to itself.
fn check_encodes(record: &Record) {
    for stamp in [Stamp::Pid, Stamp::PidHost] {
        let text = record.encode(stamp);
        let again = record::parse(text.as_bytes());
        assert_eq!(again, Ok(Parsed::Ours(*record)), "encoded with {stamp:?} as {}", shown(text.as_bytes()));
    }
}

/// A record such as this library writes: a host name of 1 to 64 printable
/// bytes other than `:`, a positive pid, any other field but an expiry at
/// i64::MIN nanoseconds, which `encode` writes but `parse` refuses
/// (`text::parse_i64` reads the digits as a positive i64 before negating
/// them), made i64::MIN + 1 here; no clock reading plus a TTL comes near it.
fn arbitrary_record(u: &mut Unstructured) -> Result<Record> {
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
    let process = ProcessId { pid: u.int_in_range(1..=i32::MAX)?, start_ticks: u.arbitrary()? };
    let nonce = Nonce(u.arbitrary()?);
    let fence = u.arbitrary()?;
    let expires =
        if u.arbitrary()? { Some(WallTime::from_unix_nanos(u.arbitrary::<i64>()?.max(i64::MIN + 1))) } else { None };
    Ok(Record { owner: Owner { host, boot, process }, nonce, fence, expires })
}

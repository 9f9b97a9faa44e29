//! `lockcore::internals::parse_lock_file` on any bytes. A record of ours
//! re-encodes, in either first-line stamp, to bytes that parse to the same
//! record; a peer's stamp, written again, parses to the same stamp; only
//! the empty file is `Empty`; a file refused as no lock never starts with a
//! stamp followed by the record marker. And any record built from the input
//! bytes encodes to a lock file and a line that parse back to it: `encode`
//! never truncates.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockcore::internals::{parse_lock_file, LockFileContent, Stamp, Unrecognised, RECORD_CAPACITY, RECORD_MARKER};
use lockcore::{Nonce, Record, WallTime};
use lockcore_fuzz::{arbitrary_moment, arbitrary_owner, shown};

fuzz_target!(|data: &[u8]| {
    match parse_lock_file(data) {
        Ok(LockFileContent::Ours(record)) => check_encodes(&record),
        Ok(LockFileContent::Stamp { pid, host }) => {
            let mut stamp = pid.to_string().into_bytes();
            if let Some(host) = &host {
                stamp.push(b':');
                stamp.extend_from_slice(host.as_bytes());
            }
            stamp.push(b'\n');
            let again = parse_lock_file(&stamp);
            assert_eq!(again, Ok(LockFileContent::Stamp { pid, host }), "the stamp written again: {}", shown(&stamp));
        }
        Ok(LockFileContent::PidLess) => assert_eq!(data, b"0\n"),
        Ok(LockFileContent::Empty) => assert!(data.is_empty(), "{} bytes parsed as an empty file", data.len()),
        Err(Unrecognised::NotALock) => {
            // Something with our marker after a stamp line is ours, damaged.
            if let Some(nl) = data.iter().position(|&b| b == b'\n') {
                let ours = data[nl + 1..].starts_with(RECORD_MARKER) && data.len() <= RECORD_CAPACITY;
                let pid = std::str::from_utf8(&data[..nl]).ok().and_then(|text| text.parse::<i32>().ok());
                let stamp_like = data[0] != b'+' && data[0] != b'0' && pid.is_some_and(|pid| pid > 0);
                assert!(!(ours && stamp_like), "{} is ours, damaged, not a stranger's file", shown(data));
            }
        }
        Err(Unrecognised::Corrupt(_)) => {}
    }
    if let Ok(record) = arbitrary_record(&mut Unstructured::new(data)) {
        check_encodes(&record);
    }
});

/// `record` as a lock file with either stamp, and as a line, parses back to itself.
fn check_encodes(record: &Record) {
    for stamp in [Stamp::Pid, Stamp::PidHost] {
        let text = record.encode_lock_file(stamp);
        let again = parse_lock_file(text.as_bytes());
        assert_eq!(again, Ok(LockFileContent::Ours(*record)), "encoded with {stamp:?} as {}", shown(text.as_bytes()));
    }
    let line = record.encode_line();
    assert_eq!(Record::parse_line(line.as_bytes()), Some(Ok(*record)), "the line {}", shown(line.as_bytes()));
}

fn arbitrary_record(u: &mut Unstructured) -> Result<Record> {
    let owner = arbitrary_owner(u)?;
    let nonce = Nonce(u.arbitrary()?);
    let fence = u.arbitrary()?;
    let since = WallTime::from_unix_nanos(u.arbitrary()?);
    let expires = if u.arbitrary()? { Some(arbitrary_moment(u)?) } else { None };
    Ok(Record { owner, nonce, fence, since, expires })
}

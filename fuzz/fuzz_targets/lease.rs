//! `lockcore::internals::LeaseState::parse` on any bytes: never a
//! panic; a state that parses encodes to exactly `LEASE_RECORD_LEN` bytes
//! that parse back to it; bytes without the `lease ` marker are no lease
//! (never Corrupt, so never a file of ours); any state built from the input
//! encodes and parses back to itself.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockcore::internals::{LeaseState, LEASE_RECORD_LEN};
use lockcore::{ErrorKind, Nonce, Record, WallTime};
use lockcore_fuzz::{arbitrary_moment, arbitrary_owner, shown};

fuzz_target!(|data: &[u8]| {
    match LeaseState::parse(data) {
        Ok(state) => check_encodes(&state),
        Err(e) if !data.starts_with(b"lease ") => {
            assert_eq!(e.kind(), ErrorKind::NotALock, "{} without the marker", shown(data))
        }
        Err(_) => {}
    }
    if let Ok(state) = arbitrary_state(&mut Unstructured::new(data)) {
        check_encodes(&state);
    }
});

fn check_encodes(state: &LeaseState) {
    let text = state.encode();
    let bytes = text.as_bytes();
    assert_eq!(bytes.len(), LEASE_RECORD_LEN, "{state:?} encoded as {}", shown(bytes));
    assert_eq!(LeaseState::parse(bytes), Ok(*state), "{state:?} encoded as {}", shown(bytes));
}

fn arbitrary_state(u: &mut Unstructured) -> Result<LeaseState> {
    if u.arbitrary()? {
        let expires = if u.arbitrary()? { Some(arbitrary_moment(u)?) } else { None };
        let record = Record {
            owner: arbitrary_owner(u)?,
            nonce: Nonce(u.arbitrary()?),
            fence: u.arbitrary()?,
            since: WallTime::from_unix_nanos(u.arbitrary()?),
            expires,
        };
        Ok(LeaseState::Held(record))
    } else {
        let not_before = if u.arbitrary()? { Some(arbitrary_moment(u)?) } else { None };
        Ok(LeaseState::Free { not_before, fence: u.arbitrary()? })
    }
}

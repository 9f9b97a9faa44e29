//! `lockcore::internals::GuardState::parse` on any bytes. A state that parses
//! encodes to exactly `GUARD_RECORD_LEN` bytes that parse to the same
//! state, and to the input itself when the input wrote its numbers as
//! `encode` does. And any state built from the input bytes encodes to
//! `GUARD_RECORD_LEN` bytes that parse back to it.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockcore::internals::{GuardState, GUARD_RECORD_LEN};
use lockcore::FileRole;
use lockcore_fuzz::{arbitrary_moment, is_canonical_decimal, shown};

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = GuardState::parse(data, FileRole::Guard) {
        let text = check_encodes(&state);
        // "lockguard 2 N" then "-" or "W B T": canonical when every number is.
        let words: Vec<&[u8]> = data.split(|&b| b == b' ' || b == b'\n').filter(|w| !w.is_empty()).collect();
        let numbers_canonical = match words.len() {
            4 => is_canonical_decimal(words[2]),
            6 => is_canonical_decimal(words[2]) && is_canonical_decimal(words[3]) && is_canonical_decimal(words[5]),
            _ => false,
        };
        let boot_canonical =
            words.get(4).map_or(true, |id| *id == b"-" || id.iter().all(|b| b"0123456789abcdef".contains(b)));
        if numbers_canonical && boot_canonical {
            assert_eq!(text, data, "canonical input {} encoded as {}", shown(data), shown(&text));
        }
    }
    if let Ok(state) = arbitrary_state(&mut Unstructured::new(data)) {
        check_encodes(&state);
    }
});

/// `state` encodes to GUARD_RECORD_LEN bytes that parse back to it; the bytes.
fn check_encodes(state: &GuardState) -> Vec<u8> {
    let text = state.encode();
    let bytes = text.as_bytes();
    assert_eq!(bytes.len(), GUARD_RECORD_LEN, "{state:?} encoded as {}", shown(bytes));
    assert_eq!(GuardState::parse(bytes, FileRole::Guard).ok(), Some(*state), "{state:?} encoded as {}", shown(bytes));
    bytes.to_vec()
}

fn arbitrary_state(u: &mut Unstructured) -> Result<GuardState> {
    let fence = u.arbitrary()?;
    let cooldown_until = if u.arbitrary()? { Some(arbitrary_moment(u)?) } else { None };
    Ok(GuardState { fence, cooldown_until })
}

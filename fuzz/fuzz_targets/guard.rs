//! `lockcore::guard::GuardState::parse` on any bytes. A state that parses
//! encodes to exactly `GUARD_RECORD_LEN` bytes that parse to the same
//! state, and to the input itself when the input wrote its numbers as
//! `encode` does. And any state built from the input bytes encodes to
//! `GUARD_RECORD_LEN` bytes that parse back to it.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockcore::guard::{GuardState, GUARD_RECORD_LEN};
use lockcore::WallTime;
use lockcore_fuzz::{is_canonical_decimal, shown};

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = GuardState::parse(data) {
        let text = check_encodes(&state);
        // The words are "lockguard 1 fence N cooldown M": canonical if N and M are.
        let words: Vec<&[u8]> = data.split(|&b| b == b' ' || b == b'\n').filter(|w| !w.is_empty()).collect();
        let canonical = words.len() == 6 && is_canonical_decimal(words[3]) && is_canonical_decimal(words[5]);
        if canonical {
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
    assert_eq!(GuardState::parse(bytes).ok(), Some(*state), "{state:?} encoded as {}", shown(bytes));
    bytes.to_vec()
}

/// Any state but two that no clock reading plus a cooldown comes near: a
/// cooldown at the epoch itself, which the file writes as 0, its word for
/// no cooldown; and one at i64::MIN nanoseconds, which `encode` writes but
/// `parse` refuses (`text::parse_i64` reads the digits as a positive i64
/// before negating them), made i64::MIN + 1 here.
fn arbitrary_state(u: &mut Unstructured) -> Result<GuardState> {
    let fence = u.arbitrary()?;
    let cooldown = u.arbitrary::<i64>()?.max(i64::MIN + 1);
    Ok(GuardState { fence, cooldown_until: (cooldown != 0).then(|| WallTime::from_unix_nanos(cooldown)) })
}

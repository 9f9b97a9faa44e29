//! `lockcore::internals::Line::parse` on any bytes: never a
//! panic; a line that parses encodes to a line that parses back to it and
//! fits `LINE_CAPACITY`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcore::internals::{Line, LINE_CAPACITY};
use lockcore_fuzz::shown;

fuzz_target!(|data: &[u8]| {
    if let Some(line) = Line::parse(data) {
        if line == Line::OtherVersion {
            return;
        }
        let text = line.encode();
        let bytes = text.as_bytes();
        assert!(bytes.len() < LINE_CAPACITY && bytes.ends_with(b"\n"), "{line:?} encoded as {}", shown(bytes));
        assert_eq!(Line::parse(&bytes[..bytes.len() - 1]), Some(line), "{line:?} encoded as {}", shown(bytes));
    }
});

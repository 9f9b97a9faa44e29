//! `lockcore`'s RESP2 reader on any bytes never panics, and what it says
//! holds: a whole reply takes no more bytes than there are, reads the same
//! from exactly those bytes, and every shorter prefix of them is partial
//! (read more), never malformed or whole; its items, however nested, can all
//! be walked. And a command written with the encoder reads back as the
//! array of bulk strings it was made of, if it is no longer than the
//! longest reply the reader takes (longer is malformed, not waited for).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcore::internals::{encode_resp, parse_resp, RespParsed, RespReply, RESP_LONGEST_REPLY};
use lockcore_fuzz::shown;

fuzz_target!(|data: &[u8]| {
    if let Ok(RespParsed::Whole(reply, used)) = parse_resp(data) {
        assert!(used <= data.len(), "took {used} of {} bytes: {}", data.len(), shown(data));
        assert_eq!(parse_resp(&data[..used]), Ok(RespParsed::Whole(reply, used)), "{}", shown(data));
        for cut in 0..used {
            assert_eq!(parse_resp(&data[..cut]), Ok(RespParsed::Partial), "cut at {cut}: {}", shown(data));
        }
        walk(reply, 0);
    }

    // The input as the arguments of a command, split at each zero byte.
    let args: Vec<&[u8]> = data.split(|&b| b == 0).collect();
    let mut out = vec![0u8; data.len() * 2 + 64 * args.len() + 64];
    let len = encode_resp(&mut out, &args).expect("room for every argument and its header");
    if len > RESP_LONGEST_REPLY {
        // Longer than any reply the reader takes: a length in it may be
        // refused as malformed.
        return;
    }
    let Ok(RespParsed::Whole(RespReply::Array(Some(items)), used)) = parse_resp(&out[..len]) else {
        panic!("a command does not read back as an array: {}", shown(&out[..len]))
    };
    assert_eq!(used, len);
    let read: Vec<Option<&[u8]>> = items
        .map(|item| match item {
            RespReply::Bulk(bytes) => bytes,
            other => panic!("an argument read back as {other:?}"),
        })
        .collect();
    let written: Vec<Option<&[u8]>> = args.iter().map(|&arg| Some(arg)).collect();
    assert_eq!(read, written);
});

fn walk(reply: RespReply<'_>, depth: u32) {
    assert!(depth <= 8, "nested deeper than the reader allows");
    if let RespReply::Array(Some(items)) = reply {
        for item in items {
            walk(item, depth + 1);
        }
    }
}

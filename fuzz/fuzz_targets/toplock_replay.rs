//! `lockcore::internals::Replay::run` on any log: never a
//! panic; a log that replays keeps at most one holder, the head; the
//! holder's fence is the last one handed out; and the log compacted from it
//! replays to the same queue (requests, grants and fences, in order) and
//! the same last fence.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcore::internals::{Grant, Replay};
use lockcore_fuzz::shown;

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes are the reader's clock; the rest is the log.
    if data.len() < 8 {
        return;
    }
    let now = i64::from_le_bytes(data[..8].try_into().unwrap());
    let log = &data[8..];
    let mut replay = Box::new(Replay::new());
    if replay.run(log, now).is_err() {
        return;
    }
    let log_now = replay.now(now);
    if let Some(holder) = replay.holder(log_now) {
        assert_eq!(Some(holder), replay.head(), "the holder is the head");
        let request = replay.requests[holder];
        assert_ne!(request.grant, Grant::No, "a holder was granted");
        assert!(request.fence <= replay.header.last_fence, "a fence beyond the last handed out");
    }
    let mut compacted = Vec::new();
    replay
        .compacted::<()>(log, &mut |piece| {
            compacted.extend_from_slice(piece);
            Ok(())
        })
        .unwrap();
    assert_eq!(compacted.len(), replay.compacted_len(log));
    let mut again = Box::new(Replay::new());
    again.run(&compacted, now).unwrap_or_else(|e| panic!("{e:?}: compacted {} from {}", shown(&compacted), shown(log)));
    let queue = |r: &Replay| -> Vec<_> {
        r.requests[..r.count].iter().filter(|q| !q.done()).map(|q| (q.nonce, q.grant, q.fence)).collect()
    };
    assert_eq!(queue(&again), queue(&replay), "compacted {} from {}", shown(&compacted), shown(log));
    assert_eq!(again.header.last_fence, replay.header.last_fence);
});

//! Fencing tokens: every acquisition of a lock gets a number strictly
//! greater than every earlier acquisition's, which a storage layer can
//! compare to refuse a holder whose lock ran out.
//!
//! Each strategy keeps the last token in a file (the guard, the lease, the
//! queue). A file can be lost, typically to a cleaner that removes idle files
//! from `/tmp` or `/run`, and a count that restarted at 1 would then be
//! refused by every store that saw the old numbers. So a token is also
//! never below the wall-clock time, in microseconds, at which it is handed
//! out: after a lost file the count restarts above every earlier token, as
//! long as the clock has not been stepped back past them meanwhile and
//! fewer than a million tokens a second were handed out (an acquisition
//! takes tens of microseconds at the least).

use crate::clock::WallTime;

/// The token after `last`, handed out at `now`; `None` when `last` is the
/// largest there is (only a forged file holds it).
pub fn next(last: u64, now: WallTime) -> Option<u64> {
    let floor = u64::try_from(now.unix_nanos() / 1_000).unwrap_or(0);
    last.checked_add(1).map(|next| next.max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_follows_the_last_and_never_falls_below_the_clock() {
        let now = WallTime::from_unix_nanos(1_700_000_000_123_456_789);
        let floor = 1_700_000_000_123_456;
        assert_eq!(next(0, now), Some(floor), "a lost file restarts above every earlier token");
        assert_eq!(next(floor + 41, now), Some(floor + 42), "ahead of the clock, one more than the last");
        assert_eq!(next(7, WallTime::from_unix_nanos(-5)), Some(8), "a clock before 1970 is no floor");
        assert_eq!(next(u64::MAX, now), None);
    }
}

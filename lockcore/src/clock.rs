//! The two clocks a lock needs, kept apart by type.
//!
//! Expiry and cooldown are shared with other processes and hosts, so they are
//! stored as wall-clock time ([`WallTime`], `CLOCK_REALTIME`). Waiting and
//! backoff are local and must not stretch or shrink when an operator or NTP
//! steps the clock, so they use [`MonoTime`] (`CLOCK_MONOTONIC`). A wall-clock
//! jump can only make a lease look expired early or late; it never changes how
//! long a caller waits.

use core::time::Duration;

use crate::sys;

/// A point in wall-clock time, nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallTime(i64);

impl WallTime {
    pub const EPOCH: WallTime = WallTime(0);

    pub fn now() -> WallTime {
        WallTime(sys::clock_ns(libc::CLOCK_REALTIME))
    }

    pub const fn from_unix_nanos(nanos: i64) -> WallTime {
        WallTime(nanos)
    }

    pub const fn unix_nanos(self) -> i64 {
        self.0
    }

    pub const fn unix_millis(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    pub fn saturating_add(self, d: Duration) -> WallTime {
        WallTime(self.0.saturating_add(duration_nanos(d)))
    }

    /// How long after `earlier` this is; zero if it is not later.
    pub fn since(self, earlier: WallTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

/// A point on the monotonic clock, for deadlines and backoff only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MonoTime(i64);

impl MonoTime {
    /// The clock's zero (boot, on Linux); only differences mean anything.
    pub const EPOCH: MonoTime = MonoTime(0);

    pub fn now() -> MonoTime {
        MonoTime(sys::clock_ns(libc::CLOCK_MONOTONIC))
    }

    pub fn saturating_add(self, d: Duration) -> MonoTime {
        MonoTime(self.0.saturating_add(duration_nanos(d)))
    }

    /// Time left until `self` as seen at `now`; zero once it has passed.
    pub fn remaining_from(self, now: MonoTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(now.0).max(0) as u64)
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: MonoTime) -> Duration {
        self.remaining_from(earlier)
    }
}

fn duration_nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_time_arithmetic_saturates_instead_of_wrapping() {
        let late = WallTime::from_unix_nanos(i64::MAX - 5);
        assert_eq!(late.saturating_add(Duration::from_secs(1)).unix_nanos(), i64::MAX);
        assert_eq!(WallTime::EPOCH.since(late), Duration::ZERO);
        assert_eq!(WallTime::from_unix_nanos(-1_500_000).unix_millis(), -2);
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let a = MonoTime::now();
        let b = MonoTime::now();
        assert!(b >= a);
        assert_eq!(a.remaining_from(b), Duration::ZERO);
        let later = a.saturating_add(Duration::from_millis(5));
        assert_eq!(later.since(a), Duration::from_millis(5));
        assert_eq!(a.since(later), Duration::ZERO);
    }
}

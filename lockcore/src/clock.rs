//! The clocks a lock needs, kept apart by type.
//!
//! * [`WallTime`] (`CLOCK_REALTIME`) is shared with other hosts and boots,
//!   and is what people read; but anyone with the right to can step it, and
//!   two hosts' wall clocks disagree.
//! * [`BootTime`] (`CLOCK_BOOTTIME`) counts from this boot and is never
//!   stepped, but means nothing on another host or after a reboot, so it is
//!   only ever compared with a reading of the same [`BootId`].
//! * [`MonoTime`] (`CLOCK_MONOTONIC`) is for this process's own waiting and
//!   backoff.
//!
//! An expiry or a cooldown that other processes judge is a [`Moment`], read
//! from both shared clocks at once. A process on the boot that wrote it
//! judges it by the boot clock alone, so a wall clock stepped or skewed
//! (by an operator, by NTP, by a test's libfaketime) can neither expire a
//! live holder early nor keep a dead one late. Anyone else (another host
//! sharing an NFS directory, the same host after a reboot) has only the
//! wall clock to go by.

use core::fmt;
use core::time::Duration;

use crate::sys;

/// A point in wall-clock time, nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallTime(i64);

impl WallTime {
    /// 1970-01-01T00:00:00Z.
    pub const EPOCH: WallTime = WallTime(0);

    /// The wall clock now (`CLOCK_REALTIME`).
    pub fn now() -> WallTime {
        WallTime(sys::clock_ns(libc::CLOCK_REALTIME))
    }

    /// The time `nanos` nanoseconds after (negative: before) the epoch.
    pub const fn from_unix_nanos(nanos: i64) -> WallTime {
        WallTime(nanos)
    }

    /// Nanoseconds since the epoch; negative before it.
    pub const fn unix_nanos(self) -> i64 {
        self.0
    }

    /// Whole milliseconds since the epoch, rounded down (towards the past,
    /// also before 1970).
    pub const fn unix_millis(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    /// `d` later; the latest representable time (about the year 2262) if
    /// that is past it.
    pub fn saturating_add(self, d: Duration) -> WallTime {
        WallTime(self.0.saturating_add(duration_nanos(d)))
    }

    /// How long after `earlier` this is; zero if it is not later.
    pub fn since(self, earlier: WallTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

/// The inode number a namespace link (`/proc/self/ns/pid`, which reads
/// `pid:[4026531836]`) names.
pub fn namespace_inode(link: &[u8]) -> Option<u64> {
    let path = sys::CPath::from_parts(&[link]).ok()?;
    let mut target = [0u8; 64];
    let n = sys::readlink(&path, &mut target).ok()?;
    let text = &target[..n];
    let open = text.iter().position(|&b| b == b'[')?;
    crate::text::parse_u64(text[open + 1..].strip_suffix(b"]")?)
}

/// RFC 3339 in UTC to the millisecond (`2026-11-23T12:00:00.250Z`), for
/// messages that name when a lock was taken or expires.
impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.unix_millis();
        let (days, ms_of_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
        let (year, month, day) = civil_from_days(days);
        let secs = ms_of_day / 1000;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            ms_of_day % 1000
        )
    }
}

/// Year, month and day of the proleptic Gregorian calendar for a count of
/// days since 1970-01-01 (the algorithm of Howard Hinnant's `date` library).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A boot clock: the kernel's boot id (`/proc/sys/kernel/random/boot_id`)
/// and, for a process in a time namespace of its own (a container, a
/// restored checkpoint), that namespace folded in, since its boot clock is
/// offset. A reading of the boot clock, and a process start time, mean
/// something only with the same id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootId(pub [u8; 16]);

/// The inode number of the initial time namespace, which the kernel fixes
/// (`PROC_TIME_INIT_INO`).
const INITIAL_TIME_NAMESPACE: u64 = 0xEFFF_FFFA;

impl BootId {
    /// The boot clock this process reads; `None` where the kernel does not
    /// tell its boot id.
    pub fn current() -> Option<BootId> {
        let mut id = BootId::kernel()?;
        // A kernel without time namespaces has no such link: the initial one.
        let namespace = namespace_inode(b"/proc/self/ns/time").unwrap_or(INITIAL_TIME_NAMESPACE);
        if namespace != INITIAL_TIME_NAMESPACE {
            id.fold_in(namespace);
        }
        Some(id)
    }

    /// The kernel's boot id itself, whatever namespace reads it: what a
    /// reboot changes.
    pub fn kernel() -> Option<BootId> {
        let path = sys::CPath::from_parts(&[b"/proc/sys/kernel/random/boot_id"]).ok()?;
        let fd = sys::open(&path, libc::O_RDONLY, 0).ok()?;
        let mut text = [0u8; 37];
        let n = sys::read_full(&fd, &mut text).ok()?;
        BootId::parse(&text[..n])
    }

    /// Mixes the time namespace `inode` into the id, so that it differs
    /// from the id of every other namespace's view of this boot.
    fn fold_in(&mut self, inode: u64) {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in inode.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let (low, high) = self.0.split_at_mut(8);
        for (byte, mix) in low.iter_mut().zip(h.to_le_bytes()) {
            *byte ^= mix;
        }
        for (byte, mix) in high.iter_mut().zip(h.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()) {
            *byte ^= mix;
        }
    }

    /// Parses 32 hex digits, with or without the dashes of the kernel's
    /// `8-4-4-4-12` form and a final newline.
    pub fn parse(text: &[u8]) -> Option<BootId> {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let mut out = [0u8; 16];
        let mut nibbles = 0;
        for &b in text {
            if b == b'-' {
                continue;
            }
            let v = crate::text::hex_value(b)?;
            if nibbles == 32 {
                return None;
            }
            out[nibbles / 2] |= v << if nibbles % 2 == 0 { 4 } else { 0 };
            nibbles += 1;
        }
        (nibbles == 32).then_some(BootId(out))
    }
}

/// The 32 lowercase hex digits written in records.
impl fmt::Debug for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A reading of `CLOCK_BOOTTIME`: nanoseconds since this boot began,
/// suspend included. Never stepped; meaningful only with its [`BootId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootTime(i64);

impl BootTime {
    /// The boot clock now.
    pub fn now() -> BootTime {
        BootTime(sys::clock_ns(libc::CLOCK_BOOTTIME))
    }

    /// The reading `nanos` nanoseconds after the boot began.
    pub const fn from_nanos(nanos: i64) -> BootTime {
        BootTime(nanos)
    }

    /// Nanoseconds since the boot began.
    pub const fn nanos(self) -> i64 {
        self.0
    }

    /// `d` later, saturating at the largest reading.
    pub fn saturating_add(self, d: Duration) -> BootTime {
        BootTime(self.0.saturating_add(duration_nanos(d)))
    }
}

/// A moment that other processes judge (an expiry, the end of a cooldown),
/// as both shared clocks tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moment {
    /// The wall clock's reading: what another host, or this one after a
    /// reboot, judges the moment by, and what a person is shown.
    pub wall: WallTime,
    /// The boot clock's reading and its boot; `None` where the kernel has
    /// no boot id, and such a moment is judged by the wall clock alone.
    pub boot: Option<(BootId, BootTime)>,
}

impl Moment {
    /// Now, by both clocks; `boot` is this boot's id (the caller's
    /// [`Owner`](crate::Owner) keeps it, so that it is read once).
    pub fn now(boot: Option<BootId>) -> Moment {
        Moment { wall: WallTime::now(), boot: boot.map(|id| (id, BootTime::now())) }
    }

    /// `d` later on both clocks, each saturating at its largest reading.
    pub fn saturating_add(self, d: Duration) -> Moment {
        Moment { wall: self.wall.saturating_add(d), boot: self.boot.map(|(id, t)| (id, t.saturating_add(d))) }
    }

    /// Whether this moment has come at `now`. On the boot that wrote it
    /// the boot clock alone decides; elsewhere the wall clock.
    pub fn has_come(self, now: Moment) -> bool {
        match (self.boot, now.boot) {
            (Some((written, at)), Some((current, t))) if written == current => at <= t,
            _ => self.wall <= now.wall,
        }
    }

    /// This moment on the wall clock, as seen at `now`: for a moment of
    /// this boot, how far ahead of `now` the boot clock puts it, added to
    /// the wall clock's `now`. What a person is shown.
    pub fn wall_as_seen(self, now: Moment) -> WallTime {
        match (self.boot, now.boot) {
            (Some((written, at)), Some((current, t))) if written == current => {
                WallTime(now.wall.0.saturating_add(at.0.saturating_sub(t.0)))
            }
            _ => self.wall,
        }
    }
}

/// A point on the monotonic clock, for deadlines and backoff only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MonoTime(i64);

impl MonoTime {
    /// The clock's zero (boot, on Linux); only differences mean anything.
    pub const EPOCH: MonoTime = MonoTime(0);

    /// The monotonic clock now.
    pub fn now() -> MonoTime {
        MonoTime(sys::clock_ns(libc::CLOCK_MONOTONIC))
    }

    /// `d` later, saturating at the largest reading: a deadline that far
    /// off is as good as none.
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

    #[test]
    fn wall_times_print_as_utc_dates() {
        let show = |nanos: i64| std::format!("{}", WallTime::from_unix_nanos(nanos));
        assert_eq!(show(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(show(1_795_437_368_250_000_000), "2026-11-23T12:36:08.250Z");
        assert_eq!(show(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(show(-1_000_000), "1969-12-31T23:59:59.999Z");
    }

    /// The boot clock decides on its own boot, whatever the wall clock
    /// says: a contender whose wall clock runs an hour ahead (or behind)
    /// does not see a moment of this boot come early (or late).
    #[test]
    fn a_moment_of_this_boot_is_judged_by_the_boot_clock() {
        let boot = BootId([3; 16]);
        let expiry = Moment { wall: WallTime(1_000), boot: Some((boot, BootTime(500))) };
        let skewed_ahead = Moment { wall: WallTime(1_000 + 3_600_000_000_000), boot: Some((boot, BootTime(400))) };
        assert!(!expiry.has_come(skewed_ahead));
        let skewed_behind = Moment { wall: WallTime(1_000 - 3_600_000_000_000), boot: Some((boot, BootTime(500))) };
        assert!(expiry.has_come(skewed_behind));
        assert_eq!(expiry.wall_as_seen(skewed_behind), WallTime(1_000 - 3_600_000_000_000));
    }

    #[test]
    fn a_moment_of_another_boot_or_host_is_judged_by_the_wall_clock() {
        let expiry = Moment { wall: WallTime(1_000), boot: Some((BootId([3; 16]), BootTime(500))) };
        let other_boot = Moment { wall: WallTime(999), boot: Some((BootId([4; 16]), BootTime(9_999))) };
        assert!(!expiry.has_come(other_boot));
        assert!(expiry.has_come(Moment { wall: WallTime(1_000), boot: None }));
        assert_eq!(expiry.wall_as_seen(other_boot), WallTime(1_000));
    }

    #[test]
    fn boot_ids_parse_the_kernel_form_and_ours() {
        let id = BootId::parse(b"0f8fd5a4-5b62-4a3a-9d5b-2a3c4e5f6a7b\n").unwrap();
        assert_eq!(id.0[0], 0x0f);
        assert_eq!(id.0[15], 0x7b);
        assert_eq!(BootId::parse(std::format!("{id:?}").as_bytes()), Some(id));
        assert!(BootId::parse(b"0f8fd5a4").is_none());
        assert!(BootId::current().is_some(), "Linux tells its boot id");
    }

    #[test]
    fn a_time_namespace_of_its_own_makes_another_boot_clock() {
        let kernel = BootId([7; 16]);
        let (mut one, mut other) = (kernel, kernel);
        one.fold_in(4_026_532_000);
        other.fold_in(4_026_532_001);
        assert!(one != kernel && one != other);
        assert_eq!(namespace_inode(b"/proc/self/ns/pid").map(|ino| ino > 0), Some(true));
    }
}

//! Who holds a lock, and whether that holder still exists.
//!
//! An owner is named by host name, boot id, pid and process start time; each
//! acquisition adds a 128-bit random [`Nonce`]. Together they are unique across
//! hosts, reboots and PID reuse. Liveness is judged only where it can be
//! proven: on the same host *and* the same boot, by pid *and* start time
//! (a pid alone is reused; a pid on another host means nothing here). A zombie
//! counts as dead: it can no longer touch the resource.

use core::fmt;
use core::time::Duration;

pub use crate::clock::BootId;
use crate::clock::{Moment, WallTime};
use crate::error::Error;
use crate::sys::{self, CPath, Errno};
use crate::text::{hex_value, parse_u64, FixedText, Words};

/// Longest host name kept (Linux `HOST_NAME_MAX`).
pub const HOST_CAPACITY: usize = 64;

/// A host name as `gethostname(2)` reports it, restricted to printable
/// characters other than `:` and whitespace so that it fits in a record line.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostName {
    buf: [u8; HOST_CAPACITY],
    len: u8,
}

impl HostName {
    /// A placeholder for slots that name no host yet.
    pub const UNKNOWN: HostName = HostName { buf: [0; HOST_CAPACITY], len: 0 };

    /// A host name from record bytes; `None` if empty, too long, or holding
    /// bytes that no host name of ours contains.
    pub fn from_bytes(bytes: &[u8]) -> Option<HostName> {
        if bytes.is_empty() || bytes.len() > HOST_CAPACITY || !bytes.iter().all(|&b| is_host_byte(b)) {
            return None;
        }
        let mut buf = [0; HOST_CAPACITY];
        buf[..bytes.len()].copy_from_slice(bytes);
        Some(HostName { buf, len: bytes.len() as u8 })
    }

    /// The name: 1 to [`HOST_CAPACITY`] printable ASCII bytes other than
    /// `:` (empty only for [`HostName::UNKNOWN`]).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    fn current() -> HostName {
        let mut raw = [0u8; HOST_CAPACITY + 1];
        let len = sys::gethostname(&mut raw).unwrap_or(0).min(HOST_CAPACITY);
        let mut buf = [0u8; HOST_CAPACITY];
        for (dst, &src) in buf.iter_mut().zip(&raw[..len]) {
            *dst = if is_host_byte(src) { src } else { b'_' };
        }
        if len == 0 {
            buf[..9].copy_from_slice(b"localhost");
            return HostName { buf, len: 9 };
        }
        HostName { buf, len: len as u8 }
    }
}

fn is_host_byte(b: u8) -> bool {
    b.is_ascii_graphic() && b != b':'
}

impl fmt::Debug for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", core::str::from_utf8(self.as_bytes()).unwrap_or("?"))
    }
}

/// A process on this host: the pid namespace its pid means something in,
/// its pid, and its start time in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), which a reused pid does not share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    /// The inode number of its pid namespace (`/proc/self/ns/pid`); 0 where
    /// it is not known, and then its liveness is never judged. A container
    /// with a pid namespace of its own sees other pids: a holder there is
    /// neither found nor missed by a look at this namespace's `/proc`.
    pub namespace: u64,
    /// Its pid in that namespace; positive in every record that parses.
    pub pid: i32,
    /// When it started, in clock ticks (`sysconf(_SC_CLK_TCK)`, usually
    /// 100 a second) since its boot; 0 where `/proc` could not tell, and
    /// then its liveness is never judged.
    pub start_ticks: u64,
}

/// The identity of a lock holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The host it runs on.
    pub host: HostName,
    /// `None` where the kernel does not expose a boot id; such an owner's
    /// liveness is never judged.
    pub boot: Option<BootId>,
    /// The process on that host and boot.
    pub process: ProcessId,
}

impl Owner {
    /// Now, by both clocks of this owner's boot ([`Moment`]).
    pub fn now(&self) -> Moment {
        Moment::now(self.boot)
    }

    /// Writes the owner as five words, `<host> <boot|-> <pid namespace>
    /// <pid> <start>`: the one form every record of this library names its
    /// owner in.
    pub(crate) fn encode_into<const N: usize>(&self, out: &mut FixedText<N>) -> fmt::Result {
        out.push_bytes(self.host.as_bytes())?;
        match self.boot {
            Some(boot) => {
                out.push_bytes(b" ")?;
                out.push_hex(&boot.0)?;
            }
            None => out.push_bytes(b" -")?,
        }
        out.push_bytes(b" ")?;
        out.push_u64(self.process.namespace)?;
        out.push_bytes(b" ")?;
        out.push_i64(i64::from(self.process.pid))?;
        out.push_bytes(b" ")?;
        out.push_u64(self.process.start_ticks)
    }

    /// Parses the five words [`encode_into`](Self::encode_into) writes.
    pub(crate) fn parse(words: &mut Words<'_>) -> Option<Owner> {
        let host = HostName::from_bytes(words.next()?)?;
        let boot = match words.next()? {
            b"-" => None,
            hex => Some(BootId::parse(hex)?),
        };
        let namespace = parse_u64(words.next()?)?;
        let pid = parse_pid(words.next()?)?;
        let start_ticks = parse_u64(words.next()?)?;
        Some(Owner { host, boot, process: ProcessId { namespace, pid, start_ticks } })
    }

    /// The calling process.
    pub fn current() -> Result<Owner, Error> {
        let pid = crate::process::pid();
        let start_ticks = match read_process_stat(pid) {
            Ok(stat) => stat.start_ticks,
            // Without /proc no owner can be judged by start time; record 0
            // and let `judge` answer Unknown rather than guess by pid.
            Err(_) => 0,
        };
        let namespace = crate::clock::namespace_inode(b"/proc/self/ns/pid").unwrap_or(0);
        let process = ProcessId { namespace, pid, start_ticks };
        Ok(Owner { host: HostName::current(), boot: BootId::current(), process })
    }

    /// Whether `other` is provably alive, provably dead, or out of our sight.
    pub fn judge(&self, other: &Owner) -> Liveness {
        if other.host != self.host || other.boot.is_none() || other.boot != self.boot {
            return Liveness::Unknown;
        }
        if self.process.start_ticks == 0 || other.process.start_ticks == 0 {
            return Liveness::Unknown;
        }
        // Its pid means something only in its own pid namespace.
        if other.process.namespace == 0 || other.process.namespace != self.process.namespace {
            return Liveness::Unknown;
        }
        match observe_process(other.process.pid) {
            Observed::Gone => Liveness::Dead,
            Observed::Running { start_ticks } if start_ticks != other.process.start_ticks => Liveness::Dead,
            Observed::Running { .. } => Liveness::Alive,
            Observed::Hidden => Liveness::Unknown,
        }
    }

    /// Sends `signal` to `other` only if it is provably that very process:
    /// alive on this host and boot, with the recorded start time. `true`
    /// when it was sent.
    ///
    /// The check and the signal cannot be split by a pid reuse: the pidfd
    /// is opened first and pins whichever process has the pid then, and the
    /// start time read afterwards must be `other`'s, so the process the check
    /// approved is the one the signal reaches. On kernels without pidfds
    /// (before 5.3) it falls back to `kill(2)` right after the same check,
    /// where a reuse would have to cycle through the whole pid space within
    /// those microseconds.
    pub fn signal_if_alive(&self, other: &Owner, signal: i32) -> bool {
        let pidfd = match sys::pidfd_open(other.process.pid) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw() == libc::ENOSYS => None,
            Err(_) => return false, // ESRCH: gone already
        };
        if self.judge(other) != Liveness::Alive {
            return false;
        }
        match pidfd {
            Some(pidfd) => sys::pidfd_send_signal(&pidfd, signal).is_ok(),
            None => sys::kill(other.process.pid, signal).is_ok(),
        }
    }

    /// Liveness of a holder known only by pid (a LockFile::Simple or
    /// liblockfile stamp), whose file was last written at `written_at`. The
    /// pid is alive if a process has it, unless that process provably
    /// started after the file was written: then it is a reuse of the pid.
    ///
    /// "Provably" is where the clocks come in. The file's time is wall-clock
    /// time, stamped by whichever clock wrote it; the process's start is
    /// known on the boot clock and turned into wall-clock time with *our*
    /// wall clock. A wall clock stepped since the write, or one that differs
    /// from the writer's, moves the two apart by the step or the skew, so a
    /// start counts as later only when it is later by more than
    /// [`FOREIGN_CLOCK_TOLERANCE`]: a live holder is never taken for a reuse
    /// by a skew or step smaller than that. The price is that a pid reused
    /// within that time after a foreign holder died keeps its lock until
    /// the TTL.
    pub fn judge_foreign(&self, pid: i32, host: Option<&HostName>, written_at: WallTime) -> Liveness {
        if host.is_some_and(|h| *h != self.host) || pid <= 0 || self.process.start_ticks == 0 {
            return Liveness::Unknown;
        }
        let start_ticks = match observe_process(pid) {
            Observed::Running { start_ticks } => start_ticks,
            Observed::Gone => return Liveness::Dead,
            Observed::Hidden => return Liveness::Unknown,
        };
        let started_at = process_start_wall_time(start_ticks);
        if started_at > written_at.saturating_add(FOREIGN_CLOCK_TOLERANCE) {
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }
}

/// How far a foreign stamp's file time and a process's start time may be
/// apart, by clock steps and skew, before the process is judged to have
/// started after the stamp was written ([`Owner::judge_foreign`]).
pub const FOREIGN_CLOCK_TOLERANCE: Duration = Duration::from_secs(2 * 3600);

fn parse_pid(text: &[u8]) -> Option<i32> {
    parse_u64(text).and_then(|v| i32::try_from(v).ok()).filter(|&pid| pid > 0)
}

/// The verdict on a lock holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs: on this host (and boot), a process has its pid and, for a
    /// record of this library, its start time.
    Alive,
    /// Provably gone: no process has its pid, the one that has it started
    /// later (a reuse of the pid), or it is a zombie with no thread left.
    Dead,
    /// On another host or boot, or not decidable here: never treated as dead.
    Unknown,
}

/// A random number drawn for every acquisition: the identity of one record.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce(pub u128);

impl Nonce {
    /// 128 bits from the kernel's random source (`getrandom(2)`, drawn
    /// ahead for many nonces and never passed on to a child of `fork()`);
    /// [`Error::Os`] if it fails.
    pub fn random() -> Result<Nonce, Error> {
        let mut bytes = [0u8; 16];
        crate::process::random(&mut bytes).map_err(Error::Os)?;
        Ok(Nonce(u128::from_le_bytes(bytes)))
    }

    /// The 32 lowercase hex digits used in records and file names.
    pub fn hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        let bytes = self.0.to_be_bytes();
        for (i, b) in bytes.iter().enumerate() {
            out[2 * i] = HEX[(b >> 4) as usize];
            out[2 * i + 1] = HEX[(b & 15) as usize];
        }
        out
    }

    /// Parses what [`hex`](Self::hex) writes: exactly 32 hex digits, either
    /// case; `None` for anything else.
    pub fn parse_hex(text: &[u8]) -> Option<Nonce> {
        if text.len() != 32 {
            return None;
        }
        let mut v: u128 = 0;
        for &b in text {
            v = v << 4 | u128::from(hex_value(b)?);
        }
        Some(Nonce(v))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        write!(f, "Nonce({})", core::str::from_utf8(&hex).unwrap_or("?"))
    }
}

struct ProcessStat {
    state: u8,
    start_ticks: u64,
}

impl ProcessStat {
    fn is_zombie(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// What this host says of a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Observed {
    /// No process has the pid, or only an exited one waiting to be reaped.
    Gone,
    /// A process with this start time has the pid.
    Running { start_ticks: u64 },
    /// Not decidable from here: /proc hides the pid (`hidepid`), or could
    /// not be read. Never taken for gone.
    Hidden,
}

/// Looks `pid` up in `/proc`, and proves a claim of "gone" twice over: a
/// missing `/proc` entry only counts once `kill(pid, 0)` says `ESRCH` too
/// (under `hidepid` the entry of another user's live process is missing),
/// and a zombie only counts once it has no thread left (a process whose
/// main thread called `pthread_exit` shows as a zombie while its other
/// threads run).
fn observe_process(pid: i32) -> Observed {
    if pid <= 0 {
        return Observed::Gone;
    }
    match read_process_stat(pid) {
        Ok(stat) if stat.is_zombie() => match read_thread_count(pid) {
            Some(threads) if threads > 1 => Observed::Running { start_ticks: stat.start_ticks },
            Some(_) | None => Observed::Gone,
        },
        Ok(stat) => Observed::Running { start_ticks: stat.start_ticks },
        Err(Errno::ENOENT) | Err(Errno::ESRCH) => match sys::kill(pid, 0) {
            Err(Errno::ESRCH) => Observed::Gone,
            _ => Observed::Hidden,
        },
        Err(_) => Observed::Hidden,
    }
}

/// Reads state and start time from `/proc/PID/stat`.
fn read_process_stat(pid: i32) -> Result<ProcessStat, Errno> {
    if pid <= 0 {
        return Err(Errno::ESRCH);
    }
    let mut path_buf = [0u8; 32];
    let path = fmt_proc_path(&mut path_buf, pid, b"/stat");
    let mut text = [0u8; 1024];
    let n = read_proc_file(path, &mut text)?;
    parse_process_stat(&text[..n]).ok_or(Errno(libc::EIO))
}

/// The `Threads:` line of `/proc/PID/status`; `None` if the process is gone
/// or the line is missing.
fn read_thread_count(pid: i32) -> Option<u64> {
    let mut path_buf = [0u8; 32];
    let path = fmt_proc_path(&mut path_buf, pid, b"/status");
    let mut text = [0u8; 4096];
    let n = read_proc_file(path, &mut text).ok()?;
    parse_thread_count(&text[..n])
}

fn parse_thread_count(status: &[u8]) -> Option<u64> {
    let line = status.split(|&b| b == b'\n').find_map(|line| line.strip_prefix(b"Threads:"))?;
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    let end = line.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
    crate::text::parse_u64(&line[start..end])
}

fn fmt_proc_path<'a>(buf: &'a mut [u8; 32], pid: i32, leaf: &[u8]) -> &'a [u8] {
    let prefix = b"/proc/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut len = prefix.len();
    let mut digits = [0u8; 10];
    let mut n = pid as u32;
    let mut d = 0;
    loop {
        digits[d] = b'0' + (n % 10) as u8;
        d += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in (0..d).rev() {
        buf[len] = digits[i];
        len += 1;
    }
    buf[len..len + leaf.len()].copy_from_slice(leaf);
    &buf[..len + leaf.len()]
}

/// Field 3 (state) and field 22 (starttime) of a stat line. The command name
/// in field 2 may hold spaces and parentheses, so fields are counted from the
/// *last* `)`.
fn parse_process_stat(text: &[u8]) -> Option<ProcessStat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let mut fields = text[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    // Fields 4..=21 come between state and starttime.
    let start = fields.nth(18)?;
    let mut ticks: u64 = 0;
    for &b in start {
        if !b.is_ascii_digit() {
            return None;
        }
        ticks = ticks.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(ProcessStat { state, start_ticks: ticks })
}

fn read_proc_file(path: &[u8], buf: &mut [u8]) -> Result<usize, Errno> {
    let path = CPath::from_parts(&[path]).map_err(|_| Errno(libc::EINVAL))?;
    let fd = sys::open(&path, libc::O_RDONLY, 0)?;
    sys::read_full(&fd, buf)
}

/// Wall-clock time at which a process that started `start_ticks` after boot
/// began: now, less the time since boot, plus the ticks.
fn process_start_wall_time(start_ticks: u64) -> WallTime {
    let since_boot_ns = sys::clock_ns(libc::CLOCK_BOOTTIME);
    let now = WallTime::now();
    let ticks_per_second = sys::clock_ticks_per_second();
    let start_ns =
        (u128::from(start_ticks) * 1_000_000_000 / u128::from(ticks_per_second)).min(i64::MAX as u128) as i64;
    WallTime::from_unix_nanos(now.unix_nanos().saturating_sub(since_boot_ns).saturating_add(start_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_counts_fields_from_the_last_parenthesis() {
        let line = b"1234 (evil) name) S 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 987654 rest";
        let stat = parse_process_stat(line).unwrap();
        assert_eq!(stat.state, b'S');
        assert_eq!(stat.start_ticks, 987654);
        assert!(parse_process_stat(b"garbage").is_none());
        assert!(parse_process_stat(b"1 (x) S 1 2").is_none());
    }

    #[test]
    fn thread_count_is_read_from_the_status_text() {
        assert_eq!(parse_thread_count(b"Name:\tx\nState:\tZ (zombie)\nThreads:\t2\nSigQ:\t0/1\n"), Some(2));
        assert_eq!(parse_thread_count(b"Threads:  17 \n"), Some(17));
        assert_eq!(parse_thread_count(b"Name:\tThreads: 5\n"), None);
        assert_eq!(parse_thread_count(b"Threads:\tmany\n"), None);
    }

    #[test]
    fn a_pid_nobody_has_is_gone() {
        // pid_max is at most 2^22 on Linux: this one is never in use.
        assert_eq!(observe_process(i32::MAX), Observed::Gone);
    }

    #[test]
    fn start_time_is_field_22_of_the_real_stat_file() {
        // Field 22 of a process that is running now lies between boot and
        // the present on the boot clock; its neighbours (itrealvalue, always
        // 0, and vsize, in bytes) do not. The bound is an hour wide: it
        // checks which field is read, not how fast anything runs.
        let me = read_process_stat(sys::getpid()).unwrap();
        let init = read_process_stat(1).unwrap();
        assert!(init.start_ticks <= me.start_ticks);
        let now_ticks = sys::clock_ns(libc::CLOCK_BOOTTIME) as u64 / 1_000_000_000 * sys::clock_ticks_per_second();
        assert!(me.start_ticks <= now_ticks + sys::clock_ticks_per_second());
        assert!(
            me.start_ticks + 3600 * sys::clock_ticks_per_second() >= now_ticks,
            "{} vs {now_ticks}",
            me.start_ticks
        );
    }

    #[test]
    fn current_owner_is_alive_to_itself() {
        let me = Owner::current().unwrap();
        assert_eq!(me.process.pid, sys::getpid());
        assert_ne!(me.process.start_ticks, 0);
        assert_eq!(me.judge(&me), Liveness::Alive);
    }

    #[test]
    fn a_reused_pid_is_dead_and_another_host_is_unknown() {
        let me = Owner::current().unwrap();
        let mut reused = me;
        reused.process.start_ticks += 1;
        assert_eq!(me.judge(&reused), Liveness::Dead);

        let mut elsewhere = me;
        elsewhere.host = HostName::from_bytes(b"other-host").unwrap();
        elsewhere.process.start_ticks += 1;
        assert_eq!(me.judge(&elsewhere), Liveness::Unknown);

        let mut other_boot = me;
        other_boot.boot = Some(BootId([7; 16]));
        assert_eq!(me.judge(&other_boot), Liveness::Unknown);
    }

    #[test]
    fn foreign_pid_started_after_the_record_is_a_reuse() {
        let me = Owner::current().unwrap();
        let long_ago = WallTime::from_unix_nanos(1_000_000_000);
        assert_eq!(me.judge_foreign(me.process.pid, None, long_ago), Liveness::Dead);
        assert_eq!(me.judge_foreign(me.process.pid, None, WallTime::now()), Liveness::Alive);
        let other = HostName::from_bytes(b"elsewhere").unwrap();
        assert_eq!(me.judge_foreign(me.process.pid, Some(&other), long_ago), Liveness::Unknown);
    }

    #[test]
    fn owners_round_trip_as_four_words() {
        let me = Owner::current().unwrap();
        let mut text = FixedText::<200>::new();
        me.encode_into(&mut text).unwrap();
        let mut words = Words::new(text.as_bytes());
        assert_eq!(Owner::parse(&mut words), Some(me));
        assert!(words.is_done());
        let no_boot = Owner { boot: None, ..me };
        let mut text = FixedText::<200>::new();
        no_boot.encode_into(&mut text).unwrap();
        assert_eq!(Owner::parse(&mut Words::new(text.as_bytes())), Some(no_boot));
        for bad in [&b"h - 0 1"[..], b"h - -5 1", b"h xyz 5 1", b"h - 5", b"a:b - 5 1", b" - 5 1"] {
            assert_eq!(Owner::parse(&mut Words::new(bad)), None, "{:?}", core::str::from_utf8(bad));
        }
    }

    /// A live holder whose stamp is an hour older than its start looks
    /// (through a wall clock an hour ahead, or a file stamped by a clock an
    /// hour behind) is still alive.
    #[test]
    fn an_hour_of_skew_does_not_make_a_live_foreign_holder_a_reuse() {
        let me = Owner::current().unwrap();
        let hour = Duration::from_secs(3600);
        let stamped_an_hour_early = WallTime::from_unix_nanos(WallTime::now().unix_nanos() - 3600 * 1_000_000_000);
        assert_eq!(me.judge_foreign(me.process.pid, None, stamped_an_hour_early), Liveness::Alive);
        let long_before_it_started = WallTime::from_unix_nanos(1_000_000_000);
        assert_eq!(me.judge_foreign(me.process.pid, None, long_before_it_started), Liveness::Dead);
        assert!(FOREIGN_CLOCK_TOLERANCE > hour);
    }

    #[test]
    fn nonce_hex_round_trips() {
        let n = Nonce::random().unwrap();
        assert_eq!(Nonce::parse_hex(&n.hex()), Some(n));
        assert_eq!(Nonce::parse_hex(b"xyz"), None);
    }
}

//! The lock spec: one string that names a lock and its options.
//!
//! ```text
//! scheme:target?key=value&key=value
//! lockfile:/srv/board/data.txt?format=%25f.lck&nfs=1&ttl=10m
//! mkdir:/var/lock/report?ttl=1h&stale=pid
//! flock:/run/lock/backup
//! ```
//!
//! The target and every value are percent-decoded (`%25` is `%`, `%3F` is
//! `?`). Parsing never allocates: the target lands in a [`CPath`], short
//! values in fixed buffers. Every refusal is a [`SpecError`] that names the
//! key and the reason.

use core::time::Duration;

use crate::endpoint::Endpoint;
use crate::error::{Error, SpecError, SpecErrorKind, Unsupported};
pub use crate::registry::{Ability, Scheme, TargetKind};
use crate::sys::{CPath, PathError};

/// The most replicas `replicas` may ask for.
const MOST_REPLICAS: u8 = 32;

/// Capacity of a decoded option value (`format`, `ext`).
pub const VALUE_CAPACITY: usize = 256;

/// A short decoded value in a fixed buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShortText {
    buf: [u8; VALUE_CAPACITY],
    len: usize,
}

impl ShortText {
    /// The decoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Percent-decodes `raw`; `Err` if it has a bad escape or decodes to
    /// more than [`VALUE_CAPACITY`] bytes.
    pub(crate) fn decode(raw: &[u8]) -> Result<ShortText, ()> {
        let mut value = ShortText { buf: [0; VALUE_CAPACITY], len: 0 };
        decode_into(raw, |chunk| {
            if value.len + chunk.len() > VALUE_CAPACITY {
                return Err(());
            }
            value.buf[value.len..value.len + chunk.len()].copy_from_slice(chunk);
            value.len += chunk.len();
            Ok(())
        })
        .map_err(|_| ())?;
        Ok(value)
    }
}

impl core::fmt::Debug for ShortText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", core::str::from_utf8(self.as_bytes()).unwrap_or("<bytes>"))
    }
}

/// How a lock held by a dead process is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleCheck {
    /// Only by age (`ttl`); a dead owner's lock waits for its TTL.
    AgeOnly,
    /// Also by owner: a same-host owner whose process (pid *and* start time)
    /// is gone makes the lock stale at once.
    DeadOwner,
}

/// The options of a lock, after parsing and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// How long an acquisition lasts before others may break it (`ttl`,
    /// alias `hold`); `None` means it never expires by age.
    pub ttl: Option<Duration>,
    /// `stale=pid` (the default) or `stale=none`.
    pub stale: StaleCheck,
    /// `nfs=1`: write `PID:HOST` as LockFile::Simple does for NFS.
    pub nfs: bool,
    /// Who may take the lock, as permission bits: `0600` (the default) its
    /// owner, `0660` the owner's group, `0666` everyone. The files the lock
    /// creates get exactly these bits, and the files it finds are trusted
    /// only if nobody else could have written them ([`Sharing`](crate::Sharing)).
    pub mode: u32,
    /// `format`: LockFile::Simple's lock path template (`%f %D %F %%`).
    pub format: Option<ShortText>,
    /// `ext`: suffix added to the target to name the lock file (default `.lock`).
    pub ext: Option<ShortText>,
    /// `fair=1` (the default): this library's waiters take turns, first
    /// come, first served, each woken when its turn comes; `fair=0` lets
    /// every waiter try whenever it wakes, and a releaser that asks again
    /// at once usually wins (more acquisitions per second, no fairness).
    pub fair: bool,
    /// `window`: with `fair=1`, how long after each turn in line the next
    /// waiter leaves the lock to tools that do not wait in line (a Perl
    /// LockFile::Simple or a `dotlockfile` that polls), which otherwise
    /// find it free only in the microseconds of a hand-off. Default 0.
    pub window: Duration,
    /// `warn=0` silences the waiting warnings.
    pub warn: bool,
    /// First warning after waiting this long (`wmin`, default 15 s).
    pub wmin: Duration,
    /// Then a warning every `wafter` (default 20 s).
    pub wafter: Duration,
    /// `signal=TERM|KILL` (lease): sent to a live same-host holder whose
    /// lease expired, when its lease is taken over.
    pub signal: Option<i32>,
    /// `replicas=N` (redis): an acquisition counts only once N replicas of
    /// the server have it (`WAIT`); default 0.
    pub replicas: u8,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            ttl: None,
            stale: StaleCheck::DeadOwner,
            nfs: false,
            mode: crate::trust::DEFAULT_MODE,
            format: None,
            ext: None,
            fair: true,
            window: Duration::ZERO,
            warn: true,
            wmin: Duration::from_secs(15),
            wafter: Duration::from_secs(20),
            signal: None,
            replicas: 0,
        }
    }
}

/// A parsed lock spec.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The strategy it names.
    pub scheme: Scheme,
    target: Target,
    /// Its options, defaults filled in.
    pub options: Options,
}

/// What a spec names, as its scheme's [`TargetKind`] says.
// Inline, like every path here: nothing is allocated.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A file system path: the file a `lockfile` protects, the directory of
    /// a `mkdir` lock, the file a `flock` lock opens, the lease or queue file.
    Path(CPath),
    /// A key on a server.
    Url(Endpoint),
}

impl Spec {
    /// The decoded target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The target of a scheme whose target is a path; for any other an
    /// [`Error::Unsupported`] that says the lock keeps no file.
    pub fn file_target(&self) -> Result<&CPath, Error> {
        match &self.target {
            Target::Path(path) => Ok(path),
            Target::Url(_) => {
                Err(Error::Unsupported(Unsupported::Ability { scheme: self.scheme, ability: Ability::Files }))
            }
        }
    }

    /// Parses `scheme:target?key=value&...`.
    pub fn parse(spec: &[u8]) -> Result<Spec, SpecError> {
        let colon =
            spec.iter().position(|&b| b == b':').ok_or_else(|| syntax("expected 'scheme:target', found no ':'"))?;
        let scheme_name = &spec[..colon];
        if scheme_name.is_empty() {
            return Err(syntax("the scheme before ':' is empty"));
        }
        let scheme = Scheme::from_name(scheme_name).ok_or_else(|| {
            SpecError::new(SpecErrorKind::UnknownScheme, scheme_name, "unknown scheme; this build has")
        })?;
        let rest = &spec[colon + 1..];
        let (raw_target, query) = match rest.iter().position(|&b| b == b'?') {
            Some(q) => (&rest[..q], Some(&rest[q + 1..])),
            None => (rest, None),
        };
        if raw_target.is_empty() {
            return Err(syntax("the target after ':' is empty"));
        }
        let target = match scheme.target_kind() {
            TargetKind::Path => Target::Path(parse_path(raw_target)?),
            TargetKind::Url => Target::Url(Endpoint::parse(raw_target)?),
        };
        let mut options = Options::default();
        if let Some(query) = query {
            parse_query(scheme, query, &mut options)?;
        }
        Ok(Spec { scheme, target, options })
    }
}

/// A path target, percent-decoded, that names a file.
fn parse_path(raw: &[u8]) -> Result<CPath, SpecError> {
    let mut target = CPath::empty();
    decode_into(raw, |chunk| target.push(chunk)).map_err(|e| match e {
        DecodeError::BadEscape => syntax("the target has a '%' not followed by two hex digits"),
        DecodeError::Sink(PathError::InteriorNul) => syntax("the target contains a NUL byte"),
        DecodeError::Sink(_) => SpecError::new(SpecErrorKind::PathTooLong, b"", "the target is too long"),
    })?;
    // A path names the lock and the files beside it: `d/` or `d/.` would
    // put them inside the lock (`d/.guard`), where only a holder's own
    // files may be.
    let name = target.file_name();
    if name.is_empty() || name == b"." || name == b".." {
        return Err(syntax("the target must name a file: no '/', '.' or '..' at its end"));
    }
    Ok(target)
}

fn syntax(reason: &'static str) -> SpecError {
    SpecError::new(SpecErrorKind::Syntax, b"", reason)
}

/// An option a spec may give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Ttl,
    Stale,
    Nfs,
    Mode,
    Format,
    Ext,
    Warn,
    Wmin,
    Wafter,
    Signal,
    Fair,
    Window,
    Replicas,
}

impl Key {
    fn from_name(name: &[u8]) -> Option<Key> {
        Some(match name {
            // `hold` is LockFile::Simple's name for the same limit.
            b"ttl" | b"hold" => Key::Ttl,
            b"stale" => Key::Stale,
            b"nfs" => Key::Nfs,
            b"mode" => Key::Mode,
            b"format" => Key::Format,
            b"ext" => Key::Ext,
            b"warn" => Key::Warn,
            b"wmin" => Key::Wmin,
            b"wafter" => Key::Wafter,
            b"signal" => Key::Signal,
            b"fair" => Key::Fair,
            b"window" => Key::Window,
            b"replicas" => Key::Replicas,
            _ => return None,
        })
    }

    /// Whether every scheme takes it (the registry lists the others).
    pub(crate) fn is_common(self) -> bool {
        matches!(
            self,
            Key::Ttl | Key::Stale | Key::Mode | Key::Fair | Key::Window | Key::Warn | Key::Wmin | Key::Wafter
        )
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

fn parse_query(scheme: Scheme, query: &[u8], options: &mut Options) -> Result<(), SpecError> {
    let mut seen = 0u16;
    for pair in query.split(|&b| b == b'&') {
        if pair.is_empty() {
            return Err(syntax("empty option between '&' separators"));
        }
        let eq = pair
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| SpecError::new(SpecErrorKind::Syntax, pair, "expected key=value"))?;
        let (name, raw_value) = (&pair[..eq], &pair[eq + 1..]);
        let key = Key::from_name(name)
            .filter(|&k| scheme.accepts(k))
            .ok_or_else(|| SpecError::new(SpecErrorKind::UnknownKey, name, scheme.unknown_key_reason()))?;
        if seen & key.bit() != 0 {
            return Err(SpecError::new(
                SpecErrorKind::DuplicateKey,
                name,
                "given more than once (ttl and hold are one option)",
            ));
        }
        seen |= key.bit();

        let mut value = ShortText { buf: [0; VALUE_CAPACITY], len: 0 };
        decode_into(raw_value, |chunk| {
            if value.len + chunk.len() > VALUE_CAPACITY {
                return Err(());
            }
            value.buf[value.len..value.len + chunk.len()].copy_from_slice(chunk);
            value.len += chunk.len();
            Ok(())
        })
        .map_err(|e| match e {
            DecodeError::BadEscape => bad_value(name, "has a '%' not followed by two hex digits"),
            DecodeError::Sink(()) => bad_value(name, "is longer than 256 bytes"),
        })?;
        let v = value.as_bytes();

        match key {
            Key::Ttl => {
                let ttl = parse_duration(v).map_err(|reason| bad_value(name, reason))?;
                // LockFile::Simple: "hold 0 prevents any forced unlocking".
                options.ttl = if ttl.is_zero() { None } else { Some(ttl) };
            }
            Key::Stale => {
                options.stale = match v {
                    b"pid" => StaleCheck::DeadOwner,
                    b"none" => StaleCheck::AgeOnly,
                    _ => match parse_bool(v) {
                        Some(true) => StaleCheck::DeadOwner,
                        Some(false) => StaleCheck::AgeOnly,
                        None => return Err(bad_value(name, "expected pid or none")),
                    },
                }
            }
            Key::Nfs => options.nfs = parse_bool(v).ok_or_else(|| bad_value(name, BOOL_REASON))?,
            Key::Warn => options.warn = parse_bool(v).ok_or_else(|| bad_value(name, BOOL_REASON))?,
            Key::Fair => options.fair = parse_bool(v).ok_or_else(|| bad_value(name, BOOL_REASON))?,
            Key::Window => options.window = parse_duration(v).map_err(|reason| bad_value(name, reason))?,
            Key::Mode => options.mode = parse_mode(v).map_err(|reason| bad_value(name, reason))?,
            Key::Wmin => options.wmin = parse_duration(v).map_err(|reason| bad_value(name, reason))?,
            Key::Wafter => {
                let every = parse_duration(v).map_err(|reason| bad_value(name, reason))?;
                if every.is_zero() {
                    return Err(bad_value(name, "must be longer than zero"));
                }
                options.wafter = every;
            }
            Key::Format => {
                validate_format(v).map_err(|reason| bad_value(name, reason))?;
                options.format = Some(value);
            }
            Key::Signal => {
                options.signal = Some(match v {
                    b"TERM" | b"SIGTERM" => libc::SIGTERM,
                    b"KILL" | b"SIGKILL" => libc::SIGKILL,
                    _ => return Err(bad_value(name, "expected TERM or KILL")),
                })
            }
            Key::Replicas => {
                options.replicas = crate::text::parse_u64(v)
                    .and_then(|n| u8::try_from(n).ok())
                    .filter(|&n| n <= MOST_REPLICAS)
                    .ok_or_else(|| bad_value(name, "expected a number of replicas from 0 to 32"))?;
            }
            Key::Ext => {
                if v.contains(&b'/') {
                    return Err(bad_value(name, "must not contain '/'"));
                }
                if v.is_empty() {
                    return Err(bad_value(name, "must not be empty: the protected file would be its own lock file"));
                }
                options.ext = Some(value);
            }
        }
    }
    if options.format.is_some() && options.ext.is_some() {
        return Err(bad_value(b"ext", "cannot be combined with format; format names the whole path"));
    }
    if scheme == Scheme::Shm && crate::trust::Sharing::new(options.mode).writable_by_others() {
        return Err(bad_value(
            b"mode",
            "must be 0600 for a shm lock: other users who may write its file could shorten it under the \
             mapping of every process that uses it",
        ));
    }
    if options.signal.is_some() && options.mode & 0o077 != 0 {
        return Err(bad_value(
            b"signal",
            "needs a private lock (mode=0600): a lease file others may write could name any process to be signalled",
        ));
    }
    Ok(())
}

fn bad_value(key: &[u8], reason: &'static str) -> SpecError {
    SpecError::new(SpecErrorKind::BadValue, key, reason)
}

const BOOL_REASON: &str = "expected 1, 0, true, false, yes, no, on or off";
const DURATION_REASON: &str = "expected a duration like 250ms, 30s, 10m or 1h";

pub(crate) enum DecodeError<E> {
    BadEscape,
    Sink(E),
}

/// Percent-decodes `raw`, handing runs of bytes to `sink`.
pub(crate) fn decode_into<E>(raw: &[u8], mut sink: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), DecodeError<E>> {
    let mut i = 0;
    let mut run_start = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            sink(&raw[run_start..i]).map_err(DecodeError::Sink)?;
            let hi = raw.get(i + 1).and_then(|&b| hex_digit(b));
            let lo = raw.get(i + 2).and_then(|&b| hex_digit(b));
            match (hi, lo) {
                (Some(hi), Some(lo)) => sink(&[hi << 4 | lo]).map_err(DecodeError::Sink)?,
                _ => return Err(DecodeError::BadEscape),
            }
            i += 3;
            run_start = i;
        } else {
            i += 1;
        }
    }
    sink(&raw[run_start..]).map_err(DecodeError::Sink)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `250ms`, `30s`, `10m`, `1h`, `2d`; a bare `0` is zero.
pub fn parse_duration(v: &[u8]) -> Result<Duration, &'static str> {
    if v == b"0" {
        return Ok(Duration::ZERO);
    }
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Err(DURATION_REASON);
    }
    let mut amount: u64 = 0;
    for &d in &v[..digits] {
        amount = amount.checked_mul(10).and_then(|a| a.checked_add(u64::from(d - b'0'))).ok_or("is too large")?;
    }
    let millis_per_unit: u64 = match &v[digits..] {
        b"ms" => 1,
        b"s" => 1_000,
        b"m" => 60_000,
        b"h" => 3_600_000,
        b"d" => 86_400_000,
        _ => return Err(DURATION_REASON),
    };
    let millis = amount.checked_mul(millis_per_unit).ok_or("is too large")?;
    // A lease beyond a century is a mistake, and keeps wall-clock sums far
    // from overflow.
    if millis > 100 * 365 * 86_400_000 {
        return Err("is longer than 100 years");
    }
    Ok(Duration::from_millis(millis))
}

fn parse_bool(v: &[u8]) -> Option<bool> {
    match v {
        b"1" | b"true" | b"yes" | b"on" => Some(true),
        b"0" | b"false" | b"no" | b"off" => Some(false),
        _ => None,
    }
}

/// Who may take the lock, as permission bits in octal (`0660`, `660`):
/// the owner reads and writes, and each other class reads and writes too,
/// or neither. No setuid, setgid or sticky bit.
fn parse_mode(v: &[u8]) -> Result<u32, &'static str> {
    if v.is_empty() || v.len() > 4 || !v.iter().all(|b| (b'0'..=b'7').contains(b)) {
        return Err("expected octal permission bits: 0600, 0660 or 0666");
    }
    let mode = v.iter().fold(0u32, |mode, &b| mode * 8 + u32::from(b - b'0'));
    if mode > 0o777 {
        return Err("takes permission bits only: no setuid, setgid or sticky bit");
    }
    let classes = [mode >> 6, (mode >> 3) & 7, mode & 7];
    if classes[0] != 6 || classes[1..].iter().any(|&bits| bits != 0 && bits != 6) {
        return Err("expected 0600 (the owner), 0660 (and its group) or 0666 (everyone): each class reads and writes \
             the lock's files, or neither (a reader could hold them locked)");
    }
    Ok(mode)
}

/// LockFile::Simple's macros: `%f` path, `%D` directory, `%F` base name,
/// `%%` a percent sign. Its `%p` (the pid) is refused: it gives every
/// process a lock file of its own, so nobody excludes anybody.
fn validate_format(v: &[u8]) -> Result<(), &'static str> {
    if v.is_empty() {
        return Err("must not be empty");
    }
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            match v.get(i + 1) {
                Some(b'f' | b'D' | b'F' | b'%') => i += 2,
                Some(b'p') => return Err("must not use %p: every process would get a lock file of its own"),
                _ => return Err("knows only the macros %f, %D, %F and %%"),
            }
        } else {
            i += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> SpecError {
        Spec::parse(spec.as_bytes()).unwrap_err()
    }

    #[test]
    fn parses_scheme_target_and_options() {
        let spec = Spec::parse(b"lockfile:/srv/board/data.txt?format=%25f.lck&nfs=1&ttl=10m").unwrap();
        assert_eq!(spec.scheme, Scheme::Lockfile);
        assert_eq!(spec.file_target().unwrap().as_bytes(), b"/srv/board/data.txt");
        assert_eq!(spec.options.format.unwrap().as_bytes(), b"%f.lck");
        assert!(spec.options.nfs);
        assert_eq!(spec.options.ttl, Some(Duration::from_secs(600)));
        assert_eq!(spec.options.stale, StaleCheck::DeadOwner);
        assert_eq!(spec.options.mode, 0o600, "private unless the spec shares it");
        assert_eq!(Spec::parse(b"mkdir:/x?mode=0660").unwrap().options.mode, 0o660);
        assert_eq!(Spec::parse(b"symlink:/x?mode=666").unwrap().options.mode, 0o666);
    }

    #[test]
    fn percent_decodes_the_target() {
        let spec = Spec::parse(b"mkdir:/tmp/a%20b%3Fc").unwrap();
        assert_eq!(spec.file_target().unwrap().as_bytes(), b"/tmp/a b?c");
    }

    #[test]
    fn durations_take_the_documented_units() {
        assert_eq!(parse_duration(b"250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(b"30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration(b"10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration(b"1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(b"0"), Ok(Duration::ZERO));
        assert!(parse_duration(b"30").is_err());
        assert!(parse_duration(b"s").is_err());
        assert!(parse_duration(b"1.5s").is_err());
        assert!(parse_duration(b"99999999999999999999s").is_err());
        assert!(parse_duration(b"200y").is_err());
    }

    #[test]
    fn hold_zero_means_never_expires() {
        let spec = Spec::parse(b"lockfile:/x?hold=0").unwrap();
        assert_eq!(spec.options.ttl, None);
    }

    #[test]
    fn every_refusal_names_its_key_and_kind() {
        let e = err("lockfile:/x?ttl=soon");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"ttl"[..]));
        let e = err("mkdir:/x?format=%25f");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::UnknownKey, &b"format"[..]));
        let e = err("lockfile:/x?colour=red");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::UnknownKey, &b"colour"[..]));
        let e = err("lockfile:/x?ttl=1s&hold=2s");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::DuplicateKey, &b"hold"[..]));
        let e = err("lockfile:/x?nfs");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::Syntax, &b"nfs"[..]));
        let e = err("lockfile:/x?format=%25q");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"format"[..]));
        let e = err("lockfile:/x?format=%25f&ext=.l");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"ext"[..]));
        for mode in ["999", "4600", "1777", "0400", "0200", "07", "x", "0644", "0640", "0700", "0620"] {
            let e = err(&std::format!("lockfile:/x?mode={mode}"));
            assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"mode"[..]), "mode={mode}");
        }
        let e = err("lockfile:/x?ext=");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"ext"[..]));
        let e = err("lockfile:/x?format=/var/run/%25F.%25p");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"format"[..]));
        for mode in ["0660", "0666"] {
            let e = err(&std::format!("shm:/x?mode={mode}"));
            assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"mode"[..]), "shm mode={mode}");
        }
        let e = err("lease:/x?signal=KILL&mode=0660");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"signal"[..]));
        let e = err("lockfile:/x?stale=maybe");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"stale"[..]));
        let e = err("lockfile:/x?wafter=0");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::BadValue, &b"wafter"[..]));
        let e = err("lockfile:/x?ttl=1s&&nfs=1");
        assert_eq!(e.kind, SpecErrorKind::Syntax);
    }

    #[test]
    fn malformed_specs_are_refused() {
        assert_eq!(err("/tmp/x").kind, SpecErrorKind::Syntax);
        assert_eq!(err(":/tmp/x").kind, SpecErrorKind::Syntax);
        assert_eq!(err("lockfile:").kind, SpecErrorKind::Syntax);
        assert_eq!(err("lockfile:?ttl=1s").kind, SpecErrorKind::Syntax);
        assert_eq!(err("lockfile:/a%zz").kind, SpecErrorKind::Syntax);
        assert_eq!(err("lockfile:/a%00b").kind, SpecErrorKind::Syntax);
        for target in ["/tmp/d/", "/tmp/d/.", "/tmp/d/..", "/", "d/"] {
            assert_eq!(err(&std::format!("mkdir:{target}")).kind, SpecErrorKind::Syntax, "{target}");
        }
        let e = err("redis2:/x");
        assert_eq!((e.kind, e.key()), (SpecErrorKind::UnknownScheme, &b"redis2"[..]));
    }

    #[test]
    fn overlong_targets_are_refused_without_overflow() {
        let mut long = [b'a'; 5000];
        long[..9].copy_from_slice(b"lockfile:");
        assert_eq!(Spec::parse(&long).unwrap_err().kind, SpecErrorKind::PathTooLong);
    }

    #[test]
    fn error_text_names_key_and_reason() {
        use core::fmt::Write;
        struct Buf([u8; 200], usize);
        impl Write for Buf {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                self.0[self.1..self.1 + s.len()].copy_from_slice(s.as_bytes());
                self.1 += s.len();
                Ok(())
            }
        }
        let mut buf = Buf([0; 200], 0);
        write!(buf, "{}", err("flock:/x?ttl=forever")).unwrap();
        assert_eq!(
            core::str::from_utf8(&buf.0[..buf.1]).unwrap(),
            "lock spec key 'ttl': expected a duration like 250ms, 30s, 10m or 1h"
        );
    }
}

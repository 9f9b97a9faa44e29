//! The target of a network lock: where its server is, who to log in as,
//! and the key that names the lock there.
//!
//! ```text
//! //[user[:password]@]host[:port][/db]/key
//! //cron:s3cret@cache.internal:6379/2/nightly-report
//! //[::1]/nightly-report
//! //%2Frun%2Fredis%2Fredis.sock/0/nightly-report     (a unix socket)
//! ```
//!
//! This is what follows `scheme:` in a spec whose scheme's target is a
//! URL. Every part but the database is percent-decoded; a host that
//! decodes to an absolute path is a unix socket, as in libpq's URLs. The
//! database is a number in plain digits and may be left out (so a key that
//! begins with digits and a `/` is written with its first digit encoded);
//! the key is everything after it, and may hold `/`. An empty password
//! (`user:@host`) is kept as empty, for a server to be told.
//! Parsing never allocates, and the password never appears in `Debug`.

use core::fmt;

use crate::error::{SpecError, SpecErrorKind};
use crate::spec::ShortText;
use crate::sys::CPath;

/// Where a network lock's server listens.
// Inline, like every path here: nothing is allocated.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, Eq)]
pub enum Host {
    /// A host name or an IP address (an IPv6 address without its brackets),
    /// with the port when the target gives one.
    Net {
        /// The name or address.
        name: ShortText,
        /// `None`: the scheme's default port.
        port: Option<u16>,
    },
    /// A unix socket's path.
    Socket(CPath),
}

/// A parsed network target.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Where the server listens.
    pub host: Host,
    /// The user to log in as; `None`: the server's default user.
    pub user: Option<ShortText>,
    password: Option<ShortText>,
    /// The database number; `None`: the server's default.
    pub db: Option<u32>,
    /// The name of the lock on the server.
    pub key: ShortText,
}

impl Endpoint {
    /// The password to log in with, if the target gives one. Kept out of
    /// `Debug` and every message.
    pub fn password(&self) -> Option<&ShortText> {
        self.password.as_ref()
    }

    /// Parses `//[user[:password]@]host[:port][/db]/key`.
    pub fn parse(raw: &[u8]) -> Result<Endpoint, SpecError> {
        let rest = raw.strip_prefix(b"//").ok_or(bad("expected //[user[:password]@]host[:port][/db]/key"))?;
        let slash = rest.iter().position(|&b| b == b'/').ok_or(bad("names no key after the host: expected /key"))?;
        let (authority, path) = (&rest[..slash], &rest[slash + 1..]);
        let (user, password, host) = match authority.iter().rposition(|&b| b == b'@') {
            Some(at) => {
                let info = &authority[..at];
                let (user, password) = match info.iter().position(|&b| b == b':') {
                    Some(colon) => (&info[..colon], Some(&info[colon + 1..])),
                    None => (info, None),
                };
                let user = (!user.is_empty()).then(|| decode(user, "user")).transpose()?;
                let password = password.map(|p| decode(p, "password")).transpose()?;
                (user, password, &authority[at + 1..])
            }
            None => (None, None, authority),
        };
        let host = parse_host(host)?;
        if path.first() == Some(&b'/') {
            return Err(bad("has an empty part after the host: expected [/db]/key"));
        }
        let (db, key) = match path.iter().position(|&b| b == b'/') {
            Some(cut) if !path[..cut].is_empty() && path[..cut].iter().all(u8::is_ascii_digit) => {
                let db = parse_number(&path[..cut]).ok_or(bad("has a database number out of range"))?;
                (Some(db), &path[cut + 1..])
            }
            _ => (None, path),
        };
        if key.is_empty() {
            return Err(bad("names no key after the host: expected /key"));
        }
        let key = decode(key, "key")?;
        Ok(Endpoint { host, user, password, db, key })
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("host", &self.host)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("db", &self.db)
            .field("key", &self.key)
            .finish()
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Net { name, port } => f.debug_struct("Net").field("name", name).field("port", port).finish(),
            Host::Socket(path) => f.debug_tuple("Socket").field(path).finish(),
        }
    }
}

/// The longest unix socket path a `sockaddr_un` holds, without its NUL.
const SOCKET_PATH_CAPACITY: usize = 107;

/// `name`, `name:port`, `[v6]`, `[v6]:port`, or a percent-encoded socket path.
fn parse_host(raw: &[u8]) -> Result<Host, SpecError> {
    if raw.is_empty() {
        return Err(bad("has no host"));
    }
    if raw.starts_with(b"%2F") || raw.starts_with(b"%2f") {
        let mut path = CPath::empty();
        crate::spec::decode_into(raw, |chunk| path.push(chunk))
            .map_err(|_| bad("has a socket path that is malformed or too long"))?;
        // `sun_path` holds 108 bytes with its NUL: a longer path could
        // never be connected to.
        if path.as_bytes().len() > SOCKET_PATH_CAPACITY {
            return Err(bad("has a socket path longer than the 107 bytes a unix socket address holds"));
        }
        if path.as_bytes().iter().any(u8::is_ascii_control) {
            return Err(bad("has a control character in its socket path"));
        }
        return Ok(Host::Socket(path));
    }
    let (name, port) = if let Some(v6) = raw.strip_prefix(b"[") {
        let close = v6.iter().position(|&b| b == b']').ok_or(bad("has a '[' with no ']' around its IPv6 address"))?;
        let after = &v6[close + 1..];
        let port = match after {
            [] => None,
            [b':', digits @ ..] => Some(digits),
            _ => return Err(bad("has something other than :port after its IPv6 address")),
        };
        (&v6[..close], port)
    } else {
        match raw.iter().position(|&b| b == b':') {
            Some(colon) => (&raw[..colon], Some(&raw[colon + 1..])),
            None => (raw, None),
        }
    };
    // Decoded like every other part; a ':' only inside brackets.
    let bracketed = raw.starts_with(b"[");
    let name = ShortText::decode(name).map_err(|_| bad("has a host that is malformed or longer than 256 bytes"))?;
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') || (bracketed && *b == b':');
    if name.as_bytes().is_empty() || !name.as_bytes().iter().all(allowed) {
        return Err(bad("has a host that is no name or address"));
    }
    let port = match port {
        None => None,
        Some(digits) => Some(
            parse_number(digits)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|&p| p != 0)
                .ok_or(bad("has a port that is not a number from 1 to 65535"))?,
        ),
    };
    Ok(Host::Net { name, port })
}

fn parse_number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &d| n.checked_mul(10)?.checked_add(u32::from(d - b'0')))
}

fn decode(raw: &[u8], what: &'static str) -> Result<ShortText, SpecError> {
    let text = ShortText::decode(raw).map_err(|_| match what {
        "user" => bad("has a user name that is malformed or longer than 256 bytes"),
        "password" => bad("has a password that is malformed or longer than 256 bytes"),
        _ => bad("has a key that is malformed or longer than 256 bytes"),
    })?;
    // The parts reach a server's protocol and log lines: no control bytes.
    if text.as_bytes().iter().any(|b| b.is_ascii_control()) {
        return Err(match what {
            "user" => bad("has a control character in its user name"),
            "password" => bad("has a control character in its password"),
            _ => bad("has a control character in its key"),
        });
    }
    Ok(text)
}

fn bad(reason: &'static str) -> SpecError {
    SpecError::new(SpecErrorKind::BadUrl, b"", reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Endpoint {
        Endpoint::parse(raw.as_bytes()).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    fn net(endpoint: &Endpoint) -> (&[u8], Option<u16>) {
        match &endpoint.host {
            Host::Net { name, port } => (name.as_bytes(), *port),
            Host::Socket(path) => panic!("a socket: {path:?}"),
        }
    }

    #[test]
    fn every_part_is_read() {
        let e = parse("//cron:s3cr%40t@cache.internal:6379/2/nightly/report");
        assert_eq!(net(&e), (&b"cache.internal"[..], Some(6379)));
        assert_eq!(e.user.unwrap().as_bytes(), b"cron");
        assert_eq!(e.password().unwrap().as_bytes(), b"s3cr@t");
        assert_eq!(e.db, Some(2));
        assert_eq!(e.key.as_bytes(), b"nightly/report", "the key may hold '/'");
    }

    #[test]
    fn optional_parts_may_be_left_out() {
        let e = parse("//localhost/job");
        assert_eq!(net(&e), (&b"localhost"[..], None));
        assert_eq!((e.user, e.password, e.db), (None, None, None));
        assert_eq!(e.key.as_bytes(), b"job");
        let e = parse("//:only-a-password@h/7");
        assert_eq!((e.user, e.password().map(|p| p.as_bytes())), (None, Some(&b"only-a-password"[..])));
        assert_eq!((e.db, e.key.as_bytes()), (None, &b"7"[..]), "a lone number is the key, not a database");
        assert_eq!(net(&parse("//[::1]:6380/k")), (&b"::1"[..], Some(6380)));
        assert_eq!(net(&parse("//[fe80::1]/k")), (&b"fe80::1"[..], None));
    }

    #[test]
    fn every_database_number_of_32_bits_is_read() {
        assert_eq!(parse("//h/4294967295/k").db, Some(u32::MAX));
        assert_eq!(parse("//h/0000000001/k").db, Some(1));
        let e = parse("//h/%32/k");
        assert_eq!((e.db, e.key.as_bytes()), (None, &b"2/k"[..]), "an encoded digit is part of the key");
    }

    #[test]
    fn a_socket_path_must_fit_a_socket_address() {
        let fits = std::format!("//%2F{}/k", "s".repeat(106));
        assert!(matches!(parse(&fits).host, Host::Socket(_)));
        let too_long = std::format!("//%2F{}/k", "s".repeat(107));
        assert_eq!(Endpoint::parse(too_long.as_bytes()).unwrap_err().kind, SpecErrorKind::BadUrl);
    }

    #[test]
    fn a_host_that_decodes_to_a_path_is_a_unix_socket() {
        let e = parse("//%2Frun%2Fredis%2Fredis.sock/0/k");
        assert_eq!(e.host, Host::Socket(CPath::from_parts(&[b"/run/redis/redis.sock"]).unwrap()));
        assert_eq!((e.db, e.key.as_bytes()), (Some(0), &b"k"[..]));
    }

    #[test]
    fn a_host_name_is_percent_decoded_like_every_other_part() {
        assert_eq!(net(&parse("//%6Cocal%2Dhost:1/k")), (&b"local-host"[..], Some(1)));
        assert_eq!(net(&parse("//[%3A%3A1]/k")), (&b"::1"[..], None));
        // Decoded, a ':' outside brackets would be a port in the name.
        for raw in ["//h%3A1/k", "//h%20x/k", "//h%zz/k", "//%5B%3A%3A1%5D/k"] {
            let e = Endpoint::parse(raw.as_bytes()).expect_err(raw);
            assert_eq!(e.kind, SpecErrorKind::BadUrl, "{raw}: {e}");
        }
    }

    #[test]
    fn the_password_stays_out_of_debug() {
        let e = parse("//u:hunter2@h/k");
        let mut w = crate::text::FixedText::<512>::default();
        core::fmt::write(&mut w, format_args!("{e:?}")).unwrap();
        let shown = w.as_bytes();
        assert!(!shown.windows(7).any(|w| w == b"hunter2"), "{:?}", core::str::from_utf8(shown));
        assert!(shown.windows(8).any(|w| w == b"<hidden>"));
    }

    #[test]
    fn malformed_targets_are_refused_as_bad_urls() {
        for raw in [
            "/h/k",
            "//h",
            "//h/",
            "//h/3/",
            "//:6379/k",
            "//h:0/k",
            "//h:65536/k",
            "//h:x/k",
            "//[::1/k",
            "//[::1]x/k",
            "//h%20x/k",
            "//h/k%0a",
            "//u%0a@h/k",
            "//h/%zz",
            "//h/99999999999/k",
            "//h/4294967296/k",
            "//h//k",
            "//%2Frun%2Fa%0Ab.sock/k",
        ] {
            let e = Endpoint::parse(raw.as_bytes()).expect_err(raw);
            assert_eq!(e.kind, SpecErrorKind::BadUrl, "{raw}: {e}");
        }
    }
}

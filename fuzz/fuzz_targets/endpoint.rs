//! `lockcore::endpoint::Endpoint::parse` on any bytes never panics, and an
//! endpoint it accepts is consistent: the input begins with `//`; the key is
//! not empty; user, password and key hold no control byte; a port is from 1
//! to 65535; a host name is not empty and holds only the bytes of a name or
//! an address; a socket is an absolute path without NUL. Its parts, each
//! percent-encoded whole, parse back to the same endpoint. And `Debug` never
//! shows the password: it is the same whatever the password is, and holds
//! no password of 4 bytes or more that is not already in its other parts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcore::endpoint::{Endpoint, Host};
use lockcore_fuzz::shown;

fuzz_target!(|data: &[u8]| {
    let Ok(endpoint) = Endpoint::parse(data) else { return };
    let why = || format!("{endpoint:?} from {}", shown(data));
    assert!(data.starts_with(b"//"), "{}", why());

    let key = endpoint.key.as_bytes();
    assert!(!key.is_empty(), "an empty key: {}", why());
    assert!(!key.iter().any(u8::is_ascii_control), "a control byte in the key: {}", why());
    let user = endpoint.user.as_ref().map(|user| user.as_bytes());
    assert!(user.is_none_or(|user| !user.is_empty()), "an empty user rather than none: {}", why());
    assert!(user.is_none_or(|user| !user.iter().any(u8::is_ascii_control)), "a control byte in the user: {}", why());
    let password = endpoint.password().map(|password| password.as_bytes());
    let has_control = password.is_some_and(|password| password.iter().any(u8::is_ascii_control));
    assert!(!has_control, "a control byte in the password from {}", shown(data));
    match &endpoint.host {
        Host::Net { name, port } => {
            let name = name.as_bytes();
            let allowed = |b: &u8| b.is_ascii_alphanumeric() || b"._-:".contains(b);
            assert!(!name.is_empty() && name.iter().all(allowed), "a host name of other bytes: {}", why());
            assert!(port.is_none_or(|port| port != 0), "port 0: {}", why());
        }
        Host::Socket(path) => {
            let path = path.as_bytes();
            assert!(path.starts_with(b"/") && !path.contains(&0), "a socket path that is no path: {}", why());
        }
    }

    let encoded = encode(&endpoint, password);
    let again = Endpoint::parse(&encoded).unwrap_or_else(|e| panic!("{} refused: {e}; {}", shown(&encoded), why()));
    assert!(again == endpoint, "{} parsed to {again:?}; {}", shown(&encoded), why());

    let Some(password) = password else { return };
    // The same endpoint with another password shows the same.
    let shown_with = format!("{endpoint:?}");
    let other = if password == b"x" { &b"y"[..] } else { &b"x"[..] };
    let with_other = encode(&endpoint, Some(other));
    let with_other = Endpoint::parse(&with_other).unwrap_or_else(|e| panic!("{} refused: {e}", shown(&with_other)));
    let shown_other = format!("{with_other:?}");
    assert_eq!(shown_with, shown_other, "Debug depends on the password, from {}", shown(data));
    // A password of 4 bytes or more that the other parts do not already
    // show never appears.
    if password.len() >= 4 && !contains(shown_other.as_bytes(), password) {
        assert!(!contains(shown_with.as_bytes(), password), "Debug shows the password, from {}", shown(data));
    }
});

/// `endpoint` written as a target, every part percent-encoded whole (a `/`
/// in the key too, so that no key is read as a database), with `password`.
fn encode(endpoint: &Endpoint, password: Option<&[u8]>) -> Vec<u8> {
    let mut out = b"//".to_vec();
    if endpoint.user.is_some() || password.is_some() {
        if let Some(user) = &endpoint.user {
            encode_all(user.as_bytes(), &mut out);
        }
        if let Some(password) = password {
            out.push(b':');
            encode_all(password, &mut out);
        }
        out.push(b'@');
    }
    match &endpoint.host {
        Host::Net { name, port } => {
            let name = name.as_bytes();
            if name.contains(&b':') {
                out.push(b'[');
                out.extend_from_slice(name);
                out.push(b']');
            } else {
                out.extend_from_slice(name);
            }
            if let Some(port) = port {
                out.extend_from_slice(format!(":{port}").as_bytes());
            }
        }
        Host::Socket(path) => encode_all(path.as_bytes(), &mut out),
    }
    if let Some(db) = endpoint.db {
        out.extend_from_slice(format!("/{db}").as_bytes());
    }
    out.push(b'/');
    encode_all(endpoint.key.as_bytes(), &mut out);
    out
}

/// Every byte but ASCII letters and digits as `%XX`.
fn encode_all(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

//! `lockcore::Spec::parse` on any bytes never panics, and a spec it accepts
//! is consistent: it begins with its scheme's name and a `:`; its target is
//! not empty, holds no NUL and fits a path; its options are ones its scheme
//! takes, within their bounds; and its target, percent-encoded whole after
//! the scheme, parses back to the same target with default options.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcore::spec::{Options, Scheme};
use lockcore::{Spec, Target, PATH_CAPACITY};
use lockcore_fuzz::{percent_encode, shown};

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = Spec::parse(data) else { return };
    let name = spec.scheme.name().as_bytes();
    assert!(data.starts_with(name) && data.get(name.len()) == Some(&b':'), "{:?} from {}", spec.scheme, shown(data));

    // A URL target is the endpoint target's to check; a path is checked here.
    let Target::Path(path) = spec.target() else { return };
    let target = path.as_bytes();
    assert!(!target.is_empty(), "empty target from {}", shown(data));
    assert!(!target.contains(&0), "a NUL in the target from {}", shown(data));
    assert!(target.len() < PATH_CAPACITY, "a target of {} bytes", target.len());

    let options = &spec.options;
    let why = || format!("{options:?} for {:?} from {}", spec.scheme, shown(data));
    assert!(options.ttl.is_none_or(|ttl| !ttl.is_zero()), "{}", why());
    assert!(!options.wafter.is_zero(), "{}", why());
    // Who may take the lock: the owner, its group, everyone; each class
    // reads and writes, or neither.
    assert!([0o600, 0o606, 0o660, 0o666].contains(&options.mode), "{}", why());
    assert!(options.signal.is_none() || options.mode == 0o600, "{}", why());
    assert!(options.ext.is_none_or(|ext| !ext.as_bytes().is_empty()), "{}", why());
    assert!(options.format.is_none() || options.ext.is_none(), "{}", why());
    assert!(options.ext.is_none_or(|ext| !ext.as_bytes().contains(&b'/')), "{}", why());
    if spec.scheme != Scheme::Lockfile {
        assert!(options.format.is_none() && options.ext.is_none() && !options.nfs, "{}", why());
    }
    if !matches!(spec.scheme, Scheme::Lease | Scheme::Shm) {
        assert!(options.signal.is_none(), "{}", why());
    }
    // A mapped file only its owner may write: nobody else can shorten it.
    if spec.scheme == Scheme::Shm {
        assert_eq!(options.mode, 0o600, "{}", why());
    }

    let mut again = name.to_vec();
    again.push(b':');
    percent_encode(target, &mut again);
    let reparsed = Spec::parse(&again).unwrap_or_else(|e| panic!("{} refused: {e:?}", shown(&again)));
    assert_eq!(reparsed.scheme, spec.scheme);
    assert_eq!(reparsed.target(), spec.target(), "{} parsed to another target", shown(&again));
    assert_eq!(reparsed.options, Options::default(), "{} has options", shown(&again));
});

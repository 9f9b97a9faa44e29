//! The checked-in header must be exactly what cbindgen generates from this
//! crate now. Regenerate it with:
//!
//!     LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header

use std::path::Path;

#[test]
fn checked_in_header_matches_a_fresh_generation() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);

    let header = crate_dir.join("../include/lockffi.h");
    if std::env::var_os("LOCKFFI_BLESS_HEADER").is_some() {
        std::fs::write(&header, &generated).expect("write include/lockffi.h");
        return;
    }
    let checked_in = std::fs::read(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/lockffi.h differs from what cbindgen generates now; \
         regenerate it with: LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header"
    );
}

#[test]
fn header_version_macros_match_cargo() {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h"))
        .expect("read include/lockffi.h");
    for (name, value) in [
        ("LOCKFFI_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("LOCKFFI_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("LOCKFFI_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let line = format!("#define {name} {value}");
        assert!(header.lines().any(|l| l.trim() == line), "header lacks `{line}`");
    }
}

/// `lock_result::ALL`, which `lock_strerror` and the tests walk, is made
/// from the table in `src/result.rs`; the header's enum from the enum
/// itself. They must be the same codes, in the same order, with the same
/// numbers.
#[test]
fn every_result_code_of_the_header_is_in_all() {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h"))
        .expect("read include/lockffi.h");
    let body = header
        .split("typedef enum {")
        .find_map(|rest| rest.split_once("} lock_result;").map(|(body, _)| body))
        .expect("the header has a typedef enum lock_result");
    let in_header: Vec<(String, i32)> = body
        .lines()
        .filter_map(|line| line.trim().strip_suffix(','))
        .filter_map(|entry| entry.split_once(" = "))
        .map(|(name, number)| (name.to_string(), number.parse().expect("a number")))
        .collect();
    let in_all: Vec<(String, i32)> =
        lockffi::lock_result::ALL.iter().map(|&code| (format!("{code:?}"), code as i32)).collect();
    assert!(in_header.len() > 20, "read only {in_header:?} from the header");
    assert_eq!(in_all, in_header, "lock_result::ALL and the header's enum differ");
}

//! The checked-in header must be exactly what cbindgen generates from this
//! crate now. Regenerate it with:
//!
//!     LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header

use std::path::Path;

/// What cbindgen generates from this crate with `cbindgen.toml`, changed by
/// `adjust`.
fn generate(adjust: impl FnOnce(&mut cbindgen::Config)) -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    adjust(&mut config);
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    String::from_utf8(generated).expect("cbindgen writes UTF-8")
}

/// Compares `generated` with the checked-in `include/<name>`, or writes it
/// there when `LOCKFFI_BLESS_HEADER` is set.
fn check_in(name: &str, generated: &str) {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include").join(name);
    if std::env::var_os("LOCKFFI_BLESS_HEADER").is_some() {
        std::fs::write(&header, generated).unwrap_or_else(|e| panic!("write include/{name}: {e}"));
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/{name} differs from what cbindgen generates now; \
         regenerate it with: LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header"
    );
}

#[test]
fn checked_in_header_matches_a_fresh_generation() {
    check_in("lockffi.h", &generate(|_| {}));
}

/// `include/lockffi_plain.h` declares the same interface with no
/// preprocessor line at all, for the FFI tools that read C declarations but
/// run no preprocessor (Python's `cffi.FFI.cdef`, PHP's `FFI::cdef`): no
/// include guard, no includes (those tools know `bool`, `size_t` and the
/// `<stdint.h>` types), no `extern "C"`, no comment but its banner, and the one constant an
/// array size uses written as its number. The other constants are macros in
/// `lockffi.h` only; a binding defines the ones it needs
/// (`LOCK_WAIT_FOREVER` is `UINT64_MAX`).
#[test]
fn checked_in_plain_header_matches_a_fresh_generation() {
    let generated = generate(|config| {
        config.header = Some(
            "/* lockffi_plain.h: the declarations of lockffi.h without preprocessor lines, for FFI tools.\n \
             * Generated from lockffi/src; do not edit. Documentation: lockffi.h. */"
                .to_string(),
        );
        config.include_guard = None;
        config.cpp_compat = false;
        config.documentation = false;
        config.sys_includes = Vec::new();
        config.no_includes = true;
    });
    check_in("lockffi_plain.h", &without_preprocessor(&generated));
}

/// `header` with its `#define` constants substituted where they are used and
/// every preprocessor line removed, along with the blank lines that leaves.
fn without_preprocessor(header: &str) -> String {
    let constants: Vec<(&str, &str)> = header
        .lines()
        .filter_map(|line| line.strip_prefix("#define "))
        .filter_map(|definition| definition.split_once(' '))
        .collect();
    let mut plain = String::new();
    for line in header.lines().filter(|line| !line.starts_with('#')) {
        if line.is_empty() && (plain.is_empty() || plain.ends_with("\n\n")) {
            continue;
        }
        let mut line = line.to_string();
        for (name, value) in &constants {
            line = line.replace(&format!("[{name}]"), &format!("[{value}]"));
        }
        plain.push_str(&line);
        plain.push('\n');
    }
    plain
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

//! The PHP binding (`bindings/php`): its header for `FFI::load` and
//! `ffi.preload` must declare exactly `include/lockffi_plain.h`, and its own
//! tests (`bindings/php/tests/run.php`, plain php-cli) must pass against the
//! library built for this run. Regenerate the header, after the C interface
//! changed and `include/lockffi_plain.h` with it, with:
//!
//!     LOCKFFI_BLESS_HEADER=1 cargo test -p bindings --test php

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `FFI::load` reads before the declarations: the scope and the
/// library, which it understands only as the first lines of the file.
const PRELUDE: &str = "#define FFI_SCOPE \"lockffi\"
#define FFI_LIB \"liblockffi.so.0\"
/* The declarations of include/lockffi_plain.h for PHP's FFI::load and ffi.preload, under the
 * scope \"lockffi\". FFI::load reads the two lines above only as the first lines of the file.
 * Regenerate: LOCKFFI_BLESS_HEADER=1 cargo test -p bindings --test php */

";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn preload_header_declares_what_lockffi_plain_h_declares() {
    let plain_path = repository().join("include/lockffi_plain.h");
    let plain = std::fs::read_to_string(&plain_path).unwrap_or_else(|e| panic!("read {}: {e}", plain_path.display()));
    let expected = format!("{PRELUDE}{plain}");
    let header = repository().join("bindings/php/lockffi.h");
    if std::env::var_os("LOCKFFI_BLESS_HEADER").is_some() {
        std::fs::write(&header, &expected).unwrap_or_else(|e| panic!("write {}: {e}", header.display()));
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        checked_in == expected,
        "bindings/php/lockffi.h does not declare what include/lockffi_plain.h declares; \
         regenerate it with: LOCKFFI_BLESS_HEADER=1 cargo test -p bindings --test php"
    );
}

#[test]
fn php_suite_passes() {
    // php-cli allows FFI by default (ffi.enable=preload lets the CLI use it);
    // this also finds a php without the extension, or with FFI disabled.
    if !bindings::runtime_present(
        "php",
        &["-r", "FFI::cdef('int abs(int);');"],
        "the PHP binding needs php-cli with FFI",
    ) {
        return;
    }
    let suite = repository().join("bindings/php/tests/run.php");
    let output = Command::new("php")
        .arg(&suite)
        .env(bindings::LIBRARY_VARIABLE, bindings::shared_library())
        .output()
        .unwrap_or_else(|e| panic!("cannot run php {}: {e}", suite.display()));
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the PHP binding's tests failed ({}):\n{report}", output.status);
    println!("{report}");

    // The README's example, run from the top of the repository as it says.
    let example = bindings::example_in("bindings/php/README.md", "## Try it", "php");
    let output = Command::new("php")
        .args(["-r", example.trim_start().strip_prefix("<?php").expect("the example starts with <?php")])
        .current_dir(repository())
        .env(bindings::LIBRARY_VARIABLE, bindings::shared_library())
        .output()
        .expect("cannot run php");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.starts_with("holding the lock, fence "),
        "bindings/php/README.md's example ({}): {said}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

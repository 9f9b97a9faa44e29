//! What the bindings' test runners share: the freshly built C library, and
//! the rule for skipping a language whose runtime is missing.
//!
//! Every binding loads the library named by the environment variable
//! `LOCKFFI_LIBRARY` when it is set, and otherwise `liblockffi.so.0`, the
//! SONAME `make install` puts on the loader's path. The tests set
//! `LOCKFFI_LIBRARY` to the library of this test run.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../c-tests/tests/library/mod.rs"]
mod library;
#[path = "../../c-tests/tests/readme/mod.rs"]
mod readme;

/// The environment variable every binding reads the library's path from.
pub const LIBRARY_VARIABLE: &str = "LOCKFFI_LIBRARY";

/// `liblockffi.so`, built for this test run's profile.
pub fn shared_library() -> PathBuf {
    library::directory().join("liblockffi.so")
}

/// Whether `program` runs with `args` and exits 0; when it does not, prints
/// why the caller's test is skipped, naming `what` the runtime is for.
/// Under CI (the variable `CI` set, as `.ci/run` does), which installs every
/// runtime, a missing one fails the test instead.
pub fn runtime_present(program: &str, args: &[&str], what: &str) -> bool {
    let why = match Command::new(program).args(args).output() {
        Ok(output) if output.status.success() => return true,
        Ok(output) => {
            format!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim())
        }
        Err(error) => format!("cannot run {program}: {error}"),
    };
    assert!(std::env::var_os("CI").is_none(), "CI must install what {what} needs: {why}");
    println!("skipped: {what}: {why}");
    false
}

/// The first ```` ```language ```` block after the line `heading` in the
/// repository's README.md: an example the README promises runs as written.
pub fn readme_example(heading: &str, language: &str) -> String {
    readme::block_after(&readme::text(), heading, language).to_string()
}

/// The first ```language block after the line `heading` of the README at
/// `path`, relative to the top of the repository.
pub fn example_in(path: &str, heading: &str, language: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    readme::block_after(&text, heading, language).to_string()
}

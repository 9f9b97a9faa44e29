//! The C library itself, `liblockffi.so` and `liblockffi.a`, for the tests
//! that link C programs with it outside cargo (AddressSanitizer builds, the
//! README's example).
//!
//! They are built here, with cargo, for the profile of this test run: the
//! copies cargo leaves in `deps/` while building the tests are not always
//! the current ones (a library that is only a dependency is built as an
//! rlib alone), and a test must never run against a stale library.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding freshly built `liblockffi.so` and `liblockffi.a`.
pub fn directory() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let this = std::env::current_exe().expect("the test binary's path");
        // <target>/<profile>/deps/<test binary>
        let profile_dir =
            this.parent().and_then(|deps| deps.parent()).expect("a test binary in <target>/<profile>/deps");
        let profile = profile_dir.file_name().and_then(|name| name.to_str()).expect("a profile directory");
        let target = profile_dir.parent().expect("the target directory");
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "-q", "-p", "lockffi", "--lib", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target);
        if profile == "release" {
            build.arg("--release");
        }
        let output = build.output().unwrap_or_else(|e| panic!("cannot run {build:?}: {e}"));
        assert!(output.status.success(), "{build:?} failed:\n{}", String::from_utf8_lossy(&output.stderr));
        for library in ["liblockffi.so", "liblockffi.a"] {
            assert!(profile_dir.join(library).is_file(), "{build:?} left no {library} in {}", profile_dir.display());
        }
        profile_dir.to_path_buf()
    })
}

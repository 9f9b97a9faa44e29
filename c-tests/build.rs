//! Compiles the C programs in `c/` against `include/lockffi.h`, with every
//! warning an error, and checks that the header alone compiles as C99 and as
//! C++. Each program's `main` is renamed so that one Rust binary per program
//! can call it with the library linked in (see `src/bin/`).

use std::path::Path;

/// The C programs, by file stem; `main` becomes `<stem>_main`.
const PROGRAMS: &[&str] = &["api", "errors", "counter", "strategies", "demo"];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = root.join("../include");
    println!("cargo:rerun-if-changed={}", include.join("lockffi.h").display());
    println!("cargo:rerun-if-changed=c");

    for program in PROGRAMS {
        let source = root.join("c").join(format!("{program}.c"));
        strict_c(&include)
            .file(&source)
            .define("main", Some(format!("{program}_main").as_str()))
            .compile(&format!("lockffi_c_{program}"));
    }

    // The header on its own, as a C99 and as a C++ translation unit. These
    // objects are not linked; compiling them is the check.
    strict_c(&include).file(root.join("c/header_c99.c")).cargo_metadata(false).compile("lockffi_header_c99");
    cc::Build::new()
        .cpp(true)
        .include(&include)
        .file(root.join("c/header_cxx.cpp"))
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Wpedantic")
        .warnings_into_errors(true)
        .cpp_link_stdlib(None)
        .cargo_metadata(false)
        .compile("lockffi_header_cxx");
}

fn strict_c(include: &Path) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .include(include)
        .include(Path::new(env!("CARGO_MANIFEST_DIR")).join("c"))
        .flag("-std=c99")
        .define("_POSIX_C_SOURCE", "200809L")
        // MAP_ANONYMOUS, for shared-memory overlap counters, is not in POSIX 2008.
        .define("_DEFAULT_SOURCE", None)
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Wpedantic")
        .warnings_into_errors(true);
    build
}

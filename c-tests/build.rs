//! Compiles the C programs in `c/` against `include/lockffi.h`, with every
//! warning an error, and checks that the header alone compiles as C99 and as
//! C++. Each program's `main` is renamed so that one Rust binary per program
//! can call it with the library linked in (see `src/bin/`).
//!
//! The test programs are compiled once more with AddressSanitizer, each with
//! its own `main` and with `asan/lsan_fork.c`, into objects that
//! `tests/c_programs.rs` links with `liblockffi.so` (the library is not built
//! yet while this script runs). If the compiler cannot build a program with
//! `-fsanitize=address`, the tests are told why and say they skipped it.

use std::fs;
use std::path::{Path, PathBuf};

/// The C programs, by file stem; `main` becomes `<stem>_main`.
const PROGRAMS: &[&str] = &["api", "errors", "counter", "strategies", "demo"];

/// The programs that also run under AddressSanitizer.
const ASAN_PROGRAMS: &[&str] = &["api", "errors", "counter", "strategies"];

/// The compiler flags of the AddressSanitizer build, compiling and linking.
const ASAN_FLAGS: &[&str] = &["-fsanitize=address", "-fno-omit-frame-pointer"];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = root.join("../include");
    println!("cargo:rerun-if-changed={}", include.join("lockffi.h").display());
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=asan");

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

    asan_objects(root, &include);
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

/// Compiles `<program>.o` for each of ASAN_PROGRAMS, and `lsan_fork.o`, into
/// `$OUT_DIR/asan/`, and tells the tests where (`C_TESTS_ASAN_DIR`) and with
/// which compiler to link them (`C_TESTS_ASAN_CC`); or, if this compiler
/// cannot build with AddressSanitizer at all, why not (`C_TESTS_ASAN_SKIP`).
/// A program that does not compile under these flags fails the build, as
/// the others do.
fn asan_objects(root: &Path, include: &Path) {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("asan");
    fs::create_dir_all(&out).expect("cannot make $OUT_DIR/asan");
    let mut build = strict_c(include);
    build.out_dir(&out).cargo_metadata(false);
    for flag in ASAN_FLAGS {
        build.flag(flag);
    }
    let compiler = build.get_compiler();
    if let Err(why) = links_with_asan(&compiler, &out) {
        println!("cargo:rustc-env=C_TESTS_ASAN_SKIP={why}");
        return;
    }
    let sources: Vec<(&str, PathBuf)> = ASAN_PROGRAMS
        .iter()
        .map(|&program| (program, root.join("c").join(format!("{program}.c"))))
        .chain([("lsan_fork", root.join("asan/lsan_fork.c"))])
        .collect();
    for (_, source) in &sources {
        build.file(source);
    }
    // Objects come back in the order of the files; stable names for the tests.
    for (object, (stem, _)) in build.compile_intermediates().iter().zip(&sources) {
        fs::rename(object, out.join(format!("{stem}.o"))).expect("cannot rename an object in $OUT_DIR/asan");
    }
    println!("cargo:rustc-env=C_TESTS_ASAN_DIR={}", out.display());
    println!("cargo:rustc-env=C_TESTS_ASAN_CC={}", compiler.path().display());
}

/// Whether `compiler` can compile and link an empty program with
/// ASAN_FLAGS: it fails when the compiler does not know the flag, or when
/// the runtime (gcc's libasan: on Debian 12 libasan8, which gcc depends on)
/// is not installed. The reason is the compiler's first line.
fn links_with_asan(compiler: &cc::Tool, out: &Path) -> Result<(), String> {
    let source = out.join("probe.c");
    fs::write(&source, "int main(void) { return 0; }\n").expect("cannot write $OUT_DIR/asan/probe.c");
    let mut command = compiler.to_command();
    command.args(ASAN_FLAGS).arg(&source).arg("-o").arg(out.join("probe"));
    let shown = format!("{command:?}");
    match command.output() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("(no message)");
            Err(format!("{} cannot link a program with {}: {first}", compiler.path().display(), ASAN_FLAGS.join(" ")))
        }
        Err(e) => Err(format!("cannot run {shown}: {e}")),
    }
}

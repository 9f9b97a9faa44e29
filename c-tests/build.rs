//! Compiles the C programs in `c/` against `include/lockffi.h`, with every
//! warning an error, and checks that the header alone compiles as C99, as
//! C89 (`-std=c89 -pedantic`) and as C++. Each program's `main` is renamed
//! so that one Rust binary per program can call it with the library linked
//! in (see `src/bin/`).
//!
//! The programs' table of schemes is not kept by hand: this script writes
//! `lockcore_schemes.h` into `OUT_DIR` from the schemes of
//! `lockcore::Scheme::ALL` whose locks are files, with
//! the files each scheme keeps as lockcore itself names them (`Lock::path`,
//! `Lock::guard_path`), so that a scheme added to lockcore is run by every
//! per-scheme case and by `lockdemo` with no change to the C sources. It
//! also gives the offset of the section word in a `shm` lock's file, which
//! the cases that hold that word from outside need, as lockcore states it.
//!
//! The test programs are compiled once more with AddressSanitizer, each with
//! its own `main` and with `asan/lsan_fork.c`, into objects that
//! `tests/c_programs.rs` links with `liblockffi.so` (the library is not built
//! yet while this script runs). If the compiler cannot build a program with
//! `-fsanitize=address`, the tests are told why and say they skipped it.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use lockcore::{Ability, Lock, Scheme};

/// The C programs, by file stem; `main` becomes `<stem>_main`.
const PROGRAMS: &[&str] = &["api", "errors", "counter", "strategies", "server", "demo"];

/// The target every C case names, in its own fresh directory.
const TARGET: &str = "data";
/// The programs that also run under AddressSanitizer.
const ASAN_PROGRAMS: &[&str] = &["api", "errors", "counter", "strategies", "server"];

/// The stack, in KiB, of the thread that makes every kind of call in
/// api.c's `test_calls_fit_a_small_thread_stack`, by how the library and
/// the program are built.
const RELEASE_STACK_KIB: &str = "160";
const DEBUG_STACK_KIB: &str = "1024";
const ASAN_STACK_KIB: &str = "4096";

/// The compiler flags of the AddressSanitizer build, compiling and linking.
const ASAN_FLAGS: &[&str] = &["-fsanitize=address", "-fno-omit-frame-pointer"];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = root.join("../include");
    let generated = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", include.join("lockffi.h").display());
    println!("cargo:rerun-if-changed=c");
    std::fs::write(generated.join("lockcore_schemes.h"), schemes_header()).expect("write lockcore_schemes.h");
    println!("cargo:rerun-if-changed=asan");

    // The stack a thread that calls the library is held to (api.c): what
    // the README promises of a release build; a debug build's frames are
    // several times larger, AddressSanitizer's larger still.
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let stack_kib = if release { RELEASE_STACK_KIB } else { DEBUG_STACK_KIB };
    for program in PROGRAMS {
        let source = root.join("c").join(format!("{program}.c"));
        strict_c(&include, &generated)
            .file(&source)
            .define("main", Some(format!("{program}_main").as_str()))
            .define("LOCKFFI_TEST_STACK_KIB", Some(stack_kib))
            .compile(&format!("lockffi_c_{program}"));
    }

    // The header on its own, as a C99, a C89 and a C++ translation unit.
    // These objects are not linked; compiling them is the check.
    strict_c(&include, &generated)
        .file(root.join("c/header_c99.c"))
        .cargo_metadata(false)
        .compile("lockffi_header_c99");
    cc::Build::new()
        .include(&include)
        .file(root.join("c/header_c89.c"))
        .flag("-std=c89")
        .flag("-pedantic")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .cargo_metadata(false)
        .compile("lockffi_header_c89");
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

    asan_objects(root, &include, &generated);
}

/// `lockcore_schemes.h`: one `LOCKCORE_SCHEME(name, target, lock, guard,
/// breaks_stale_locks, keeps_a_queue)` line per scheme of `Scheme::ALL`
/// whose locks are files (the others have their own program, `server.c`), in
/// its order, the two flags its registry abilities (break, queue). The
/// paths are relative to the directory of the target; `guard` is `NULL` for
/// a scheme that keeps its state in the lock file itself. Then
/// `LOCKCORE_SHM_SECTION_AT`, where the section word of a `shm` lock's file
/// lies, `LOCKCORE_SHM_TAG_BYTES_AT`, where the bytes of its holders'
/// tags start, and `LOCKCORE_LOOK_BELIEVED_US`, how long a handle believes
/// its last look at a file it keeps mapped.
fn schemes_header() -> String {
    let mut out = String::from(
        "/* Generated by c-tests/build.rs from lockcore::Scheme::ALL; do not edit. */\n\
         #ifndef LOCKCORE_SCHEMES_H\n#define LOCKCORE_SCHEMES_H\n\n\
         /* LOCKCORE_SCHEME(name, target, lock, guard, breaks_stale_locks, keeps_a_queue) */\n\
         #define LOCKCORE_SCHEMES(LOCKCORE_SCHEME) \\\n",
    );
    const DIR: &str = "/lockcore-schemes";
    let relative = |path: &[u8]| -> String {
        let path = std::str::from_utf8(path).expect("paths of an ASCII target are ASCII");
        let name = path.strip_prefix(DIR).and_then(|p| p.strip_prefix('/')).expect("beside the target");
        format!("\"{name}\"")
    };
    let file_schemes: Vec<Scheme> = Scheme::ALL.iter().copied().filter(|s| s.supports(Ability::Files)).collect();
    for &scheme in &file_schemes {
        let spec = format!("{}:{DIR}/{TARGET}", scheme.name());
        let lock = Lock::open(spec.as_bytes()).unwrap_or_else(|e| panic!("lockcore refuses {spec}: {e}"));
        let guard = lock.guard_path().map_or_else(|| "NULL".to_string(), |p| relative(p.as_bytes()));
        writeln!(
            out,
            "    LOCKCORE_SCHEME(\"{}\", \"{TARGET}\", {}, {guard}, {}, {}) \\",
            scheme.name(),
            relative(lock.path().expect("a lock that keeps files").as_bytes()),
            scheme.breaks_stale_locks(),
            scheme.supports(Ability::Queue)
        )
        .expect("writing to a String");
    }
    out.push_str("    /* end of LOCKCORE_SCHEMES */\n\n");
    writeln!(out, "#define LOCKCORE_SCHEME_COUNT {}\n", file_schemes.len()).expect("writing to a String");
    writeln!(
        out,
        "/* The byte of a shm lock's file where its section word lies: a 64-bit word, its holder's pid in\n   \
         the low half, its tag in the high half. */\n\
         #define LOCKCORE_SHM_SECTION_AT {}\n\n\
         /* Where the bytes of the holders' tags start, past the file's end: a live holder keeps the byte\n   \
         LOCKCORE_SHM_TAG_BYTES_AT + tag locked (F_OFD_SETLK); every tag has its top bit set. */\n\
         #define LOCKCORE_SHM_TAG_BYTES_AT {}ULL\n\n\
         /* How long, in microseconds, a handle believes its last look at a file it keeps mapped: a change\n   \
         to that file is seen by its first call after this long. */\n\
         #define LOCKCORE_LOOK_BELIEVED_US {}\n\n#endif",
        lockcore::internals::SHM_SECTION_AT,
        lockcore::internals::SHM_TAG_BYTES_AT,
        lockcore::LOOK_BELIEVED_FOR.as_micros()
    )
    .expect("writing to a String");
    out
}

fn strict_c(include: &Path, generated: &Path) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .include(include)
        .include(Path::new(env!("CARGO_MANIFEST_DIR")).join("c"))
        .include(generated)
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
fn asan_objects(root: &Path, include: &Path, generated: &Path) {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("asan");
    fs::create_dir_all(&out).expect("cannot make $OUT_DIR/asan");
    let mut build = strict_c(include, generated);
    build.out_dir(&out).cargo_metadata(false).define("LOCKFFI_TEST_STACK_KIB", Some(ASAN_STACK_KIB));
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

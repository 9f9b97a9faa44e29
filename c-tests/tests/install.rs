//! `make install` installs what C programs and their build tools expect:
//! the shared library under its full version with its SONAME and the two
//! links, the static library, every header, `lockffi.pc`, the man pages and
//! `lockctl`; nothing else. The README's C example
//! then builds against the installed prefix with nothing but pkg-config's
//! flags, once shared and once static, and runs. `make install` honours
//! DESTDIR, installs what `make` built where cargo cannot run (`sudo make
//! install` as a root without a Rust toolchain), and `make uninstall` takes
//! away exactly what install put there.
//!
//! One test, so that the release build `make` does happens once, in this
//! run's target directory (where a release build from cargo lands too).

mod readme;

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What the example prints once it holds the lock.
const HOLDING: &str = "holding the lock, fence ";

/// The cargo running this test, for make.
const CARGO: &str = concat!("CARGO=", env!("CARGO"));

#[test]
fn make_install_gives_c_programs_a_library_that_pkg_config_finds() {
    for (tool, package) in
        [("make", "make"), ("pkg-config", "pkg-config"), ("readelf", "binutils"), ("strip", "binutils"), ("cc", "gcc")]
    {
        if find_on_path(tool).is_none() {
            assert!(std::env::var_os("CI").is_none(), "CI must install {package}");
            eprintln!("skipped: {tool} not installed (Debian package {package}); make install was not tested");
            return;
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository's top");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let prefix = scratch.join("prefix");
    // Not installed by make: uninstall must leave it.
    let foreign = prefix.join("lib/libother.so.1");
    std::fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    std::fs::write(&foreign, "another library").unwrap();

    let prefix_variable = format!("PREFIX={}", prefix.display());
    make(&root, &["install", &prefix_variable, CARGO]);
    let version = library_version();
    let major = version.split('.').next().expect("a version");
    assert_eq!(
        files_under(&prefix),
        expected_files(&root, &version).into_iter().chain(["lib/libother.so.1".to_owned()]).collect(),
        "what make install installed into {}",
        prefix.display()
    );
    check_libraries(&prefix.join("lib"), &version, major);
    for (source, installed) in sources_and_copies(&root) {
        let copy = prefix.join(&installed);
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(root.join(&source)).unwrap(),
            "{} is {source}",
            copy.display()
        );
    }
    assert!(is_executable(&prefix.join("bin/lockctl")), "bin/lockctl is executable");
    check_pkg_config(&prefix);
    build_and_run_the_readme_example(&prefix, &scratch.join("build"), major);

    // A staged install: the files under DESTDIR, the paths inside them
    // without it. With no cargo to run, as under `sudo make install` when
    // root has no Rust toolchain, it installs what the make above built.
    let no_cargo = "CARGO=/nonexistent/cargo";
    let stage = scratch.join("stage");
    let staged_prefix = "/opt/lockffi-staged";
    let destdir_variable = format!("DESTDIR={}", stage.display());
    let staged_prefix_variable = format!("PREFIX={staged_prefix}");
    let staged = make(&root, &["install", &destdir_variable, &staged_prefix_variable, no_cargo]);
    assert!(staged.contains("cargo cannot run here: installing what make built"), "{staged}");
    assert_eq!(
        files_under(&stage),
        expected_files(&root, &version).iter().map(|file| format!("{}/{file}", &staged_prefix[1..])).collect(),
        "what make install DESTDIR=... installed"
    );
    let staged_pc = std::fs::read_to_string(stage.join(&staged_prefix[1..]).join("lib/pkgconfig/lockffi.pc")).unwrap();
    assert!(staged_pc.lines().any(|line| line == format!("prefix={staged_prefix}")), "{staged_pc}");
    assert!(!staged_pc.contains(&stage.display().to_string()), "DESTDIR is not in lockffi.pc:\n{staged_pc}");
    make(&root, &["uninstall", &destdir_variable, &staged_prefix_variable, no_cargo]);
    assert_eq!(files_under(&stage), BTreeSet::new(), "make uninstall DESTDIR=... left files");

    make(&root, &["uninstall", &prefix_variable, CARGO]);
    assert_eq!(files_under(&prefix), ["lib/libother.so.1".to_owned()].into(), "make uninstall took exactly its own");
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// Runs `make <arguments>` at the top of the repository with this run's
/// target directory, and without touching the loader's cache; returns what
/// it said.
fn make(root: &Path, arguments: &[&str]) -> String {
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(root)
        .args(arguments)
        .arg(format!("CARGO_TARGET_DIR={}", target_directory().display()))
        .arg("LDCONFIG=");
    let output = make.output().unwrap_or_else(|e| panic!("cannot run {make:?}: {e}"));
    assert!(output.status.success(), "{make:?} failed:\n{}", both(&output));
    both(&output)
}

/// `<target>` of this test binary, `<target>/<profile>/deps/install-<hash>`.
fn target_directory() -> PathBuf {
    let this = std::env::current_exe().expect("the test binary's path");
    this.ancestors().nth(3).expect("a test binary in <target>/<profile>/deps").to_path_buf()
}

/// The version the library reports (its crate's version).
fn library_version() -> String {
    // SAFETY: lock_version returns a pointer to a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(lockffi::lock_version()) };
    version.to_str().expect("an ASCII version").to_owned()
}

/// Each header and man page in the source tree, beside where it is installed.
fn sources_and_copies(root: &Path) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for header in names_in(&root.join("include")).into_iter().filter(|name| name.ends_with(".h")) {
        pairs.push((format!("include/{header}"), format!("include/{header}")));
    }
    for page in names_in(&root.join("man")) {
        if let Some((_, section)) = page.rsplit_once('.').filter(|(_, s)| matches!(s.as_bytes(), [b'1'..=b'9'])) {
            pairs.push((format!("man/{page}"), format!("share/man/man{section}/{page}")));
        }
    }
    pairs
}

/// Every file and link `make install` puts under its prefix, relative to it.
fn expected_files(root: &Path, version: &str) -> BTreeSet<String> {
    let major = version.split('.').next().expect("a version");
    let mut files: BTreeSet<String> = [
        format!("lib/liblockffi.so.{version}"),
        format!("lib/liblockffi.so.{major}"),
        "lib/liblockffi.so".to_owned(),
        "lib/liblockffi.a".to_owned(),
        "lib/pkgconfig/lockffi.pc".to_owned(),
    ]
    .into();
    files.extend(sources_and_copies(root).into_iter().map(|(_, installed)| installed));
    files.insert("bin/lockctl".to_owned());
    files
}

/// The versioned shared library with its SONAME, the links to it, and both
/// libraries without debug info.
fn check_libraries(lib: &Path, version: &str, major: &str) {
    let library = lib.join(format!("liblockffi.so.{version}"));
    assert!(library.symlink_metadata().unwrap().is_file(), "{} is a file", library.display());
    let dynamic = readelf(&["-d"], &library);
    let soname = dynamic
        .lines()
        .find(|line| line.contains("(SONAME)"))
        .and_then(|line| line.split_once("Library soname: [")?.1.split_once(']'))
        .map(|(soname, _)| soname.to_owned());
    assert_eq!(soname, Some(format!("liblockffi.so.{major}")), "the SONAME of {}:\n{dynamic}", library.display());
    for link in [format!("liblockffi.so.{major}"), "liblockffi.so".to_owned()] {
        let target = std::fs::read_link(lib.join(&link)).unwrap_or_else(|e| panic!("{link} is not a link: {e}"));
        assert_eq!(target, Path::new(&format!("liblockffi.so.{version}")), "{link} names the library beside it");
    }
    for stripped in [&library, &lib.join("liblockffi.a")] {
        let sections = readelf(&["-S", "-W"], stripped);
        let debug: Vec<&str> = sections.split_whitespace().filter(|word| word.contains(".debug")).collect();
        assert!(debug.is_empty(), "{} has debug info: {debug:?}", stripped.display());
    }
    // The symbol table too is gone from the shared library; what programs
    // link against is its dynamic symbol table.
    let sections = readelf(&["-S", "-W"], &library);
    assert!(!sections.contains(" .symtab "), "{} has a symbol table:\n{sections}", library.display());
}

/// pkg-config finds the installed library and says how to link it, shared
/// and static (with the system libraries rustc lists for the static one).
fn check_pkg_config(prefix: &Path) {
    let version = pkg_config(prefix, &["--modversion"]);
    assert_eq!(version.trim(), library_version(), "pkg-config --modversion lockffi");
    let libdir = pkg_config(prefix, &["--variable=libdir"]);
    assert_eq!(Path::new(libdir.trim()), prefix.join("lib"), "pkg-config --variable=libdir lockffi");
    let cflags = pkg_config(prefix, &["--cflags"]);
    assert_eq!(cflags.trim(), format!("-I{}", prefix.join("include").display()), "pkg-config --cflags lockffi");
    let shared = pkg_config(prefix, &["--libs"]);
    let shared: Vec<&str> = shared.split_whitespace().collect();
    assert!(shared.contains(&"-llockffi"), "pkg-config --libs lockffi: {shared:?}");
    let static_ = pkg_config(prefix, &["--static", "--libs"]);
    let system: Vec<&str> = static_.split_whitespace().filter(|flag| !shared.contains(flag)).collect();
    assert!(
        !system.is_empty() && system.iter().all(|flag| flag.starts_with("-l")),
        "pkg-config --static --libs lockffi adds the system libraries of liblockffi.a: {static_}"
    );
}

/// Builds the README's example with pkg-config's flags, against the shared
/// library and then the static one, and runs both.
fn build_and_run_the_readme_example(prefix: &Path, build: &Path, major: &str) {
    let text = readme::text();
    std::fs::create_dir_all(build).unwrap();
    let source = build.join("example.c");
    std::fs::write(&source, readme::block_after(&text, "## A C example", "c")).unwrap();
    // The example's lock lives there, as the README's commands make it.
    std::fs::create_dir_all("/tmp/lock-example").unwrap();

    let shared = build.join("example-shared");
    let flags = pkg_config(prefix, &["--cflags", "--libs"]);
    compile(&source, &shared, flags.split_whitespace());
    let needed = needed_libraries(&shared);
    assert!(needed.contains(&format!("liblockffi.so.{major}")), "{} loads the SONAME: {needed:?}", shared.display());
    let mut run = Command::new(&shared);
    run.env("LD_LIBRARY_PATH", prefix.join("lib"));
    check_example(run);

    // Both libraries are in one directory, where -llockffi means the shared
    // one; -l:liblockffi.a names the archive.
    let linked_statically = build.join("example-static");
    let flags = pkg_config(prefix, &["--static", "--cflags", "--libs"]);
    assert_eq!(flags.split_whitespace().filter(|flag| *flag == "-llockffi").count(), 1, "{flags}");
    compile(
        &source,
        &linked_statically,
        flags.split_whitespace().map(|flag| if flag == "-llockffi" { "-l:liblockffi.a" } else { flag }),
    );
    let needed = needed_libraries(&linked_statically);
    assert!(
        !needed.iter().any(|library| library.starts_with("liblockffi")),
        "{} needs no liblockffi: {needed:?}",
        linked_statically.display()
    );
    let mut run = Command::new(&linked_statically);
    run.env_remove("LD_LIBRARY_PATH");
    check_example(run);
}

fn compile<'a>(source: &Path, output: &Path, flags: impl Iterator<Item = &'a str>) {
    let mut cc = Command::new("cc");
    cc.arg("-std=c99").arg(source).args(flags).arg("-o").arg(output);
    let result = cc.output().unwrap_or_else(|e| panic!("cannot run {cc:?}: {e}"));
    assert!(result.status.success(), "{cc:?} failed:\n{}", both(&result));
}

fn check_example(mut run: Command) {
    let output = run.output().unwrap_or_else(|e| panic!("cannot run {run:?}: {e}"));
    assert!(output.status.success(), "{run:?} failed:\n{}", both(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains(HOLDING), "{run:?} took the lock:\n{}", both(&output));
}

/// The DT_NEEDED entries of an executable.
fn needed_libraries(executable: &Path) -> Vec<String> {
    readelf(&["-d"], executable)
        .lines()
        .filter(|line| line.contains("(NEEDED)"))
        .filter_map(|line| Some(line.split_once('[')?.1.split_once(']')?.0.to_owned()))
        .collect()
}

fn readelf(options: &[&str], file: &Path) -> String {
    let mut readelf = Command::new("readelf");
    readelf.args(options).arg(file);
    let output = readelf.output().unwrap_or_else(|e| panic!("cannot run {readelf:?}: {e}"));
    assert!(output.status.success(), "{readelf:?} failed:\n{}", both(&output));
    String::from_utf8(output.stdout).expect("readelf's output")
}

/// `pkg-config <options> lockffi`, seeing only the `.pc` files of `prefix`.
fn pkg_config(prefix: &Path, options: &[&str]) -> String {
    let mut pkg_config = Command::new("pkg-config");
    pkg_config
        .args(options)
        .arg("lockffi")
        .env("PKG_CONFIG_LIBDIR", prefix.join("lib/pkgconfig"))
        .env_remove("PKG_CONFIG_PATH")
        .env_remove("PKG_CONFIG_SYSROOT_DIR");
    let output = pkg_config.output().unwrap_or_else(|e| panic!("cannot run {pkg_config:?}: {e}"));
    assert!(output.status.success(), "{pkg_config:?} failed:\n{}", both(&output));
    String::from_utf8(output.stdout).expect("pkg-config's output")
}

/// The files and links (not directories) under `top`, relative to it.
fn files_under(top: &Path) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    let mut directories = vec![top.to_path_buf()];
    while let Some(directory) = directories.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.symlink_metadata().unwrap().is_dir() {
                directories.push(path);
            } else {
                files.insert(path.strip_prefix(top).unwrap().to_str().expect("a UTF-8 path").to_owned());
            }
        }
    }
    files
}

fn names_in(directory: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(directory) else { return Vec::new() };
    entries.map(|entry| entry.unwrap().file_name().into_string().expect("a UTF-8 name")).collect()
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn both(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stderr), String::from_utf8_lossy(&output.stdout))
}

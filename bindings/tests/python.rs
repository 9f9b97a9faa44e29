//! The Python binding (`bindings/python`): pip installs it from this
//! repository into a fresh virtual environment, and its own pytest suite
//! and its README's example run there against the library of this test run.
//!
//! The environment sees the interpreter's own packages
//! (`--system-site-packages`), and pip is told to use no index and no build
//! isolation, so that cffi, pytest and the build backend flit_core come from
//! the interpreter and nothing is fetched from the network.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bindings::{runtime_present, shared_library, LIBRARY_VARIABLE};

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Runs `command`, panicking with its output unless it exits 0.
fn run(command: &mut Command, what: &str) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The first ```python block of the package's README.
fn readme_example() -> String {
    let readme = String::from_utf8(read(&package().join("README.md"))).expect("README.md is UTF-8");
    let start = readme.find("```python\n").expect("bindings/python/README.md has a ```python block") + 10;
    let length = readme[start..].find("```").expect("an unclosed block");
    readme[start..start + length].to_string()
}

#[test]
fn the_package_carries_the_plain_header_unchanged() {
    // A wheel cannot read the repository, so the package carries its own
    // copy of the declarations it hands to cffi.
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi_plain.h");
    let copy = package().join("src/lockffi/lockffi_plain.h");
    assert!(
        read(&header) == read(&copy),
        "{} differs from {}; copy it over: cp include/lockffi_plain.h bindings/python/src/lockffi/",
        copy.display(),
        header.display()
    );
}

#[test]
fn the_python_binding_installs_and_passes_its_tests() {
    let needs = "import venv, ensurepip, cffi, pytest, flit_core.buildapi";
    if !runtime_present("python3", &["-c", needs], "the Python binding needs python3 with cffi, pytest and flit_core") {
        return;
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("python-{}", std::process::id()));
    let _ = fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv", "--system-site-packages"]).arg(&venv), "making a venv");
    let python = venv.join("bin/python");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(["--no-index", "--no-build-isolation"])
            .arg(package()),
        "pip install bindings/python",
    );

    // Every Python run below: this run's library, and no bytecode written
    // into the repository.
    let python_command = || {
        let mut command = Command::new(&python);
        command.env(LIBRARY_VARIABLE, shared_library()).env("PYTHONDONTWRITEBYTECODE", "1");
        command
    };
    let imported = run(python_command().args(["-c", "import lockffi; print(lockffi.__file__)"]), "import lockffi");
    let location = String::from_utf8_lossy(&imported.stdout).trim().to_string();
    assert!(Path::new(&location).starts_with(&venv), "lockffi was imported from {location}, not from the venv");

    // --tb=native: pytest's own traceback layout parses source with ast,
    // which some CPython releases get wrong while another thread runs Python.
    let suite = python_command()
        .args(["-m", "pytest", "-p", "no:cacheprovider", "--tb=native", "-q"])
        .current_dir(package())
        .output()
        .expect("cannot run pytest");
    let stdout = String::from_utf8_lossy(&suite.stdout);
    assert!(
        suite.status.success(),
        "the Python binding's tests failed ({}):\n{stdout}\n{}",
        suite.status,
        String::from_utf8_lossy(&suite.stderr)
    );
    println!("{}", stdout.lines().last().unwrap_or_default());

    for (which, example) in
        [("the package README's", readme_example()), ("README.md's", bindings::readme_example("#### Python", "python"))]
    {
        let ran = run(python_command().args(["-c", &example]), &format!("{which} example"));
        let said = String::from_utf8_lossy(&ran.stdout);
        assert!(said.starts_with("holding the lock, fence "), "{which} example printed: {said}");
    }

    fs::remove_dir_all(&venv).unwrap();
}

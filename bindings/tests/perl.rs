//! The Perl binding's own suite (`prove -l t/` in `bindings/perl`), run
//! against the library built for this test run. Skipped, saying why, when
//! perl, prove or FFI::Platypus (Debian: libffi-platypus-perl) is missing;
//! the suite's LockFile::Simple test skips itself without that module.

use std::path::Path;
use std::process::Command;

#[test]
fn perl_binding_suite_passes() {
    let what = "the Perl binding's tests";
    if !bindings::runtime_present("perl", &["-MFFI::Platypus", "-e1"], what)
        || !bindings::runtime_present("prove", &["--version"], what)
    {
        return;
    }
    let library = bindings::shared_library();
    let distribution = Path::new(env!("CARGO_MANIFEST_DIR")).join("perl");
    let mut prove = Command::new("prove");
    prove.args(["-l", "t/"]).current_dir(&distribution).env(bindings::LIBRARY_VARIABLE, &library);
    let output = prove.output().unwrap_or_else(|e| panic!("cannot run {prove:?}: {e}"));
    assert!(
        output.status.success(),
        "{prove:?} in {} with {}={} failed ({}):\n{}\n{}",
        distribution.display(),
        bindings::LIBRARY_VARIABLE,
        library.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );

    // The README's example, run from the top of the repository as it says.
    let example = bindings::example_in("bindings/perl/README", "Try it", "perl");
    let output = Command::new("perl")
        .args(["-Ibindings/perl/lib", "-e", &example])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env(bindings::LIBRARY_VARIABLE, &library)
        .output()
        .expect("cannot run perl");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.starts_with("holding the lock, fence "),
        "bindings/perl/README's example ({}): {said}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

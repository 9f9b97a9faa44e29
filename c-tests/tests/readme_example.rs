//! The README's C example runs as written: its C text, built and run by its
//! own shell commands, against the shared and the static library.
//!
//! The commands are run word for word in a scratch directory that looks
//! like the top of the repository to them: `example.c` is the README's text,
//! `include` is the repository's, and `target/release` holds the libraries
//! built for this test run's profile (the same code as a release build).

mod library;
mod readme;

use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_c_example_builds_and_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = readme::text();
    let program = readme::block_after(&text, "## A C example", "c");
    let commands = readme::block_after(&text, "## A C example", "sh");
    assert!(commands.contains("liblockffi.a") && commands.contains("-llockffi"), "both libraries:\n{commands}");

    let built = library::directory();
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-example-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(scratch.join("target")).unwrap();
    std::fs::write(scratch.join("example.c"), program).unwrap();
    std::os::unix::fs::symlink(root.join("include").canonicalize().unwrap(), scratch.join("include")).unwrap();
    std::os::unix::fs::symlink(built, scratch.join("target/release")).unwrap();

    let output =
        Command::new("sh").args(["-e", "-x", "-c", commands]).current_dir(&scratch).output().expect("cannot run sh");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the README's commands failed:\n{stderr}\n{stdout}");
    assert_eq!(
        stdout.matches("holding the lock, fence ").count(),
        2,
        "each build took the lock and said so:\n{stdout}\n{stderr}"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}

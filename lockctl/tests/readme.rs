//! The README's "From the shell" commands run as written, with the
//! `lockctl` of this test run where they name `target/release/lockctl`.

use std::path::Path;
use std::process::Command;

#[path = "../../c-tests/tests/readme/mod.rs"]
mod readme;

#[test]
fn the_readme_shell_example_runs_as_written() {
    let text = readme::text();
    let commands = readme::block_after(&text, "### From the shell", "sh");
    assert!(commands.contains("./target/release/lockctl run"), "the example runs a command:\n{commands}");

    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-shell-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(scratch.join("target")).unwrap();
    let built = Path::new(env!("CARGO_BIN_EXE_lockctl")).parent().unwrap();
    std::os::unix::fs::symlink(built, scratch.join("target/release")).unwrap();

    let output = Command::new("sh").args(["-e", "-x", "-c", commands]).current_dir(&scratch).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the README's shell commands failed:\n{stderr}\n{stdout}");
    assert_eq!(stdout.matches("holding the lock, fence ").count(), 1, "the command ran under the lock:\n{stdout}");
    std::fs::remove_dir_all(&scratch).unwrap();
}

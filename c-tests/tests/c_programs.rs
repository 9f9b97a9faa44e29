//! Runs the C test programs (c/api.c, c/errors.c, c/strategies.c,
//! c/counter.c, each linked with the library as a `c_<stem>` binary) and
//! checks what they report: exit status 0, at least one `PASSED` line and no
//! `FAILED` line. On failure the program's whole output is shown. The
//! counter and the demo (c/demo.c, `lockdemo`) must have run every scheme of
//! lockcore's own list, `Scheme::ALL`, which their table is generated from.
//!
//! If `valgrind` is on PATH, c_api, c_errors and c_strategies run once more
//! under memcheck (`--error-exitcode=99 --leak-check=full
//! --errors-for-leak-kinds=definite`, with `LOCKFFI_UNDER_MEMCHECK=1` for the
//! few cases that cannot run there); otherwise that test says it was
//! skipped. CI installs valgrind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `command`, and panics with its full output unless it exited 0, said
/// PASSED at least once and FAILED never.
fn check(name: &str, mut command: Command) -> String {
    let output: Output = command.output().unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let shown = format!("--- {name} stdout ---\n{stdout}--- {name} stderr ---\n{stderr}--- end of {name} ---");
    assert!(output.status.success(), "{name} failed with {}\n{shown}", output.status);
    let passed = stdout.lines().filter(|l| l.starts_with("PASSED ")).count();
    let failed: Vec<&str> = stdout.lines().filter(|l| l.contains("FAILED")).collect();
    assert!(passed > 0, "{name} reported no PASSED line\n{shown}");
    assert!(failed.is_empty(), "{name} reported failures: {failed:?}\n{shown}");
    // Visible with `cargo test -- --nocapture`.
    println!("{shown}");
    stdout.into_owned()
}

#[test]
fn c_api() {
    check("c_api", Command::new(env!("CARGO_BIN_EXE_c_api")));
}

#[test]
fn c_errors() {
    check("c_errors", Command::new(env!("CARGO_BIN_EXE_c_errors")));
}

#[test]
fn c_strategies() {
    let stdout = check("c_strategies", Command::new(env!("CARGO_BIN_EXE_c_strategies")));
    // The strategy-specific cases must have run, not been skipped.
    for case in ["test_symlink_touch_extends", "test_lease_signal_option", "test_toplock_fifo"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("PASSED {case} "))),
            "c_strategies did not pass {case}:\n{stdout}"
        );
    }
}

use lockcore::Scheme;

#[test]
fn c_counter() {
    // The full run: every strategy, 16 processes x 200 cycles.
    let mut command = Command::new(env!("CARGO_BIN_EXE_c_counter"));
    command.env_remove("LOCKFFI_COUNTER_PROCESSES").env_remove("LOCKFFI_COUNTER_CYCLES");
    let stdout = check("c_counter", command);
    for strategy in Scheme::ALL.iter().map(|s| s.name()) {
        assert!(
            stdout.lines().any(|l| l == format!("PASSED test_counter_{strategy}")),
            "c_counter did not pass {strategy}:\n{stdout}"
        );
        assert!(
            stdout.lines().any(|l| l.starts_with(strategy) && l.contains("16 processes x 200 cycles")),
            "c_counter did not run {strategy} with 16 x 200:\n{stdout}"
        );
    }
}

#[test]
fn lockdemo_runs_every_scheme() {
    let dir = std::env::temp_dir().join(format!("lockdemo-test-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_lockdemo")).args(["2", "5"]).arg(&dir).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "lockdemo failed with {}:\n{stdout}{stderr}", output.status);
    for scheme in Scheme::ALL {
        let row = format!("| {:<8} |       10 |       10 |        0 |", scheme.name());
        assert!(
            stdout.lines().any(|l| l.starts_with(&row)),
            "lockdemo has no exact row for {}:\n{stdout}",
            scheme.name()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[test]
fn c_api_c_errors_and_c_strategies_under_valgrind() {
    let Some(valgrind) = find_on_path("valgrind") else {
        println!(
            "skipped: valgrind not installed (CI installs it); c_api, c_errors and c_strategies were not run under \
             memcheck"
        );
        eprintln!("skipped: valgrind not installed");
        return;
    };
    for (name, program) in [
        ("c_api", env!("CARGO_BIN_EXE_c_api")),
        ("c_errors", env!("CARGO_BIN_EXE_c_errors")),
        ("c_strategies", env!("CARGO_BIN_EXE_c_strategies")),
    ] {
        let mut command = Command::new(&valgrind);
        command.env("LOCKFFI_UNDER_MEMCHECK", "1").args([
            "--quiet",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            program,
        ]);
        check(&format!("valgrind {name}"), command);
    }
}

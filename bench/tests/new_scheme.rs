//! A strategy declared only in lockcore's registry is run by the test
//! suites, the C programs and the contention report with no other change.
//!
//! The `example-scheme` feature of lockcore registers `example` (one file,
//! `lockcore/src/strategy/example.rs`, and one registry entry) and changes
//! nothing else. This test builds the workspace's tools with it, in a target
//! directory of their own, and checks that each one ran `example` and found
//! nothing wrong: a Rust multi-process suite, the handle's use of an
//! ability only `example` has (a wake source of its own), `lockdemo` (C,
//! through the header and the library), and the contention report with its
//! overlap oracle.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FEATURE: &str = "lockcore/example-scheme";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// `cargo <args>` in the workspace, built apart from the main target
/// directory so that the feature never leaks into the usual builds.
fn cargo(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let target = workspace().join("target").join("example-scheme");
    let mut command = Command::new(env!("CARGO"));
    command.current_dir(workspace()).args(args).env("CARGO_TARGET_DIR", &target);
    for (name, value) in envs {
        command.env(name, value);
    }
    let output = command.output().expect("run cargo");
    assert!(
        output.status.success(),
        "cargo {}: {}\n{}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

#[test]
fn a_scheme_registered_only_in_the_registry_runs_everywhere() {
    let dir = scratch("new-scheme");

    // The Rust suites iterate over Scheme::ALL through `each_scheme`,
    // which logs each scheme it runs when asked to.
    let log = dir.join("schemes-run");
    cargo(
        &["test", "-q", "-p", "lockcore", "--features", "example-scheme", "--test", "outcomes"],
        &[("LOCKCORE_TEST_SCHEME_LOG", &log)],
    );
    let ran = std::fs::read_to_string(&log).expect("the suite logged the schemes it ran");
    assert!(ran.lines().any(|line| line.ends_with(" example")), "the suite never ran example:\n{ran}");
    assert!(ran.lines().any(|line| line.ends_with(" lockfile")), "the log misses the built-in schemes:\n{ran}");

    // Its own abilities are the handle's to use: `example` wakes its own
    // waiters, and `acquire` waits on that source.
    cargo(&["test", "-q", "-p", "lockcore", "--features", "example-scheme", "--lib", "strategy::example"], &[]);

    // lockdemo is C: its table comes from the header c-tests' build script
    // writes from Scheme::ALL. It exits non-zero on a wrong count or an overlap.
    let demo = cargo(&["run", "-q", "-p", "c-tests", "--features", FEATURE, "--bin", "lockdemo", "--", "3", "20"], &[]);
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(text.lines().any(|line| line.starts_with("| example ")), "lockdemo did not run example:\n{text}");

    // The contention report, every strategy, one short cell per mode.
    let out = dir.join("report");
    let out_arg = out.to_str().expect("a UTF-8 temp path");
    cargo(
        &[
            "run",
            "-q",
            "-p",
            "bench",
            "--bin",
            "contention",
            "--features",
            FEATURE,
            "--",
            "--quick",
            "--contenders",
            "2",
            "--duration",
            "100ms",
            "--out",
            out_arg,
        ],
        &[],
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("the report wrote results.csv");
    let rows: Vec<&str> = csv.lines().filter(|line| line.starts_with("example,")).collect();
    assert_eq!(rows.len(), 2, "one example cell per mode:\n{csv}");

    let _ = std::fs::remove_dir_all(&dir);
}

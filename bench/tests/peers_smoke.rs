//! The peers report, short: library and Perl LockFile::Simple processes on
//! one `lockfile:` lock never overlap, the shared counter is exact, and with
//! a window Perl gets turns. Needs perl with LockFile::Simple (Debian's
//! liblockfile-simple-perl); without it the test says it was skipped, except
//! under CI, where that is a failure. No figure of time is judged.

use std::process::{Command, Stdio};

fn perl_available() -> bool {
    let ok = Command::new("perl")
        .args(["-MLockFile::Simple", "-e1"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must install liblockfile-simple-perl");
        eprintln!("skipped: perl with LockFile::Simple is not installed");
    }
    ok
}

#[test]
fn library_and_perl_processes_share_a_counter_exactly_and_a_window_gives_perl_turns() {
    if !perl_available() {
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_peers"))
        .args(["--duration", "1s", "--windows", "0,5ms", "--dir"])
        .arg(std::env::temp_dir())
        .output()
        .expect("the peers report runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "peers failed ({}):\n{stdout}\n{stderr}", output.status);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| window"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 2, "one row per window:\n{stdout}");
    for row in &rows {
        // window, library acq/s, per library process, Perl acq/s, per Perl
        // process, Perl share, overlaps, counter
        assert_eq!(row.len(), 8, "{row:?}");
        assert_eq!(row[6], "0", "two inside at once: {row:?}");
        assert!(row[7].ends_with("(exact)"), "the counter lost updates: {row:?}");
    }
    let windowed = &rows[1];
    assert_eq!(windowed[0], "5ms");
    let perl: u64 = windowed[4].split(" / ").map(|n| n.parse::<u64>().expect("a count")).sum();
    assert!(perl > 0, "with a 5 ms window Perl never got the lock: {windowed:?}");
}

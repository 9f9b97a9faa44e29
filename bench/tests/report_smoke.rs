//! The contention report in quick mode, for one strategy and the floor with
//! two contenders per mode: the oracle must stay at zero and the CSV must
//! carry the expected columns. Behaviour only: no figure of time is judged.

use std::path::PathBuf;
use std::process::Command;

use bench::pool::Mode;
use bench::report::{self, output::CSV_COLUMNS, Config, Contestant};
use lockcore::Scheme;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn quick_report_keeps_the_oracle_at_zero_and_writes_its_csv() {
    let out = scratch("report-smoke");
    let config = Config {
        strategies: vec![Contestant::Lock(Scheme::Flock), Contestant::Floor],
        contenders: vec![2],
        out: out.clone(),
        ..Config::parse_args(["--quick".to_string()]).expect("--quick parses")
    };
    assert!(config.quick && config.rounds == 1);
    let report = report::run(&config, &mut |_| {});

    let expected: Vec<(&str, Mode)> =
        ["flock", "floor"].into_iter().flat_map(|name| Mode::ALL.map(|mode| (name, mode))).collect();
    assert_eq!(report.cells.len(), expected.len(), "one cell per contestant and mode");
    for (cell, &(name, mode)) in report.cells.iter().zip(&expected) {
        assert_eq!((cell.strategy, cell.mode, cell.contenders), (name, mode, 2));
        assert_eq!(cell.overlaps, 0, "two holders at once in {mode:?}");
        assert_eq!(cell.fence_regressions, 0, "a fence went back in {mode:?}");
        assert_eq!(cell.lost, 0, "a release found its lock taken in {mode:?}");
        assert_eq!(cell.errors, 0, "lock errors in {mode:?}");
        // Every worker takes the lock at least once, so the oracle was exercised.
        assert!(cell.acquisitions >= 2, "{mode:?}: {} acquisitions", cell.acquisitions);
    }
    assert_eq!(report.violations(), 0);

    let written = report.write().expect("write outputs");
    for name in ["results.csv", "results.md", "throughput.svg", "fairness.svg", "cpu.svg", "handoff_cdf.svg"] {
        assert!(written.contains(&out.join(name)), "{name} not written");
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("read csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(header, CSV_COLUMNS);
    for column in [
        "strategy",
        "mode",
        "contenders",
        "acq_per_s",
        "jain",
        "worker_min",
        "worker_max",
        "wait_p50_us",
        "wait_p99_us",
        "wait_max_us",
        "handoff_p50_us",
        "handoff_p99_us",
        "cpu_us_per_acq",
        "overlaps",
    ] {
        assert!(header.contains(&column), "CSV lacks {column}");
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), expected.len());
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for (row, &(name, mode)) in rows.iter().zip(&expected) {
        assert_eq!(row.len(), header.len());
        assert_eq!((row[col("strategy")], row[col("mode")], row[col("contenders")]), (name, mode.name(), "2"));
        assert_eq!(row[col("overlaps")], "0");
    }
    assert_eq!(rows[2][col("fs")], "memory", "the floor keeps no file");
    for name in ["throughput.svg", "fairness.svg", "cpu.svg", "handoff_cdf.svg"] {
        let svg = std::fs::read_to_string(out.join(name)).expect("read svg");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{name} is not an SVG");
        for (contestant, mode) in &expected {
            assert!(svg.contains(&format!("{contestant} · {}", mode.name())), "{name} lacks its legend");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_command_prints_its_table_and_exits_zero() {
    let out = scratch("report-cli");
    let run = Command::new(env!("CARGO_BIN_EXE_contention"))
        .args(["--quick", "--strategies", "flock", "--contenders", "2", "--modes", "threads", "--out"])
        .arg(&out)
        .output()
        .expect("run contention");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "exit {:?}\n{stdout}\n{}", run.status, String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("| strategy | mode | n | acq/s |"), "{stdout}");
    assert!(stdout.contains("| `flock` | threads | 2 |"), "{stdout}");
    assert!(out.join("results.csv").is_file());

    let bad = Command::new(env!("CARGO_BIN_EXE_contention")).args(["--strategies", "nosuch"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&out);
}

//! The contention report: one command, a markdown table on stdout, a CSV and
//! SVG plots in `--out`. See `bench::report` for what is measured and how.
//!
//! cargo run --release -p bench --bin contention -- [--quick] [--help]

use std::process::ExitCode;

use bench::report::{self, ArgError, Config};

fn main() -> ExitCode {
    let config = match Config::parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(ArgError::Help) => {
            println!("{}", Config::usage());
            return ExitCode::SUCCESS;
        }
        Err(ArgError::Bad(why)) => {
            eprintln!("contention: {why}\n\n{}", Config::usage());
            return ExitCode::from(2);
        }
    };
    let (cells, duration) = (config.cells(), config.cell_duration());
    eprintln!(
        "contention: {cells} cells x {} round(s) x {}: about {:.0} s",
        config.rounds,
        report::output::human_duration(duration),
        cells as f64 * config.rounds as f64 * (duration.as_secs_f64() + 0.05)
    );
    let report = report::run(&config, &mut |line| eprintln!("{line}"));
    println!("{}", report.markdown());
    match report.write() {
        Ok(paths) => {
            for path in paths {
                eprintln!("wrote {}", path.display());
            }
        }
        Err(e) => {
            eprintln!("contention: writing {}: {e}", config.out.display());
            return ExitCode::from(3);
        }
    }
    let violations = report.violations();
    if violations > 0 {
        eprintln!("contention: OVERLAP ORACLE FAILED: {violations} violation(s); see the oracle column");
        return ExitCode::FAILURE;
    }
    eprintln!("contention: oracle ok: never two holders at once, fences always grew");
    ExitCode::SUCCESS
}

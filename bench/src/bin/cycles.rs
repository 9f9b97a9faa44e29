//! cycles: one process takes and gives back one lock, again and again,
//! with nothing else in the loop: what `bench/syscalls` runs under
//! `strace -c` to count the system calls of one acquire and release.
//!
//! ```text
//! cycles --list                 the schemes of this build, one per line, each
//!                               with what its target is: `path` (a file the
//!                               caller names) or `url` (a server to start first)
//! cycles SPEC COUNT             COUNT uncontended acquire + release cycles
//! ```
//!
//! The lock is opened (and its files made by one first cycle) before the
//! counted cycles, so that a run of 0 cycles costs what a run of N costs
//! but the cycles themselves: the difference, divided by N, is one cycle.

use std::process::ExitCode;
use std::time::Duration;

use lockcore::{Lock, Scheme, TargetKind};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--list" => {
            for scheme in Scheme::ALL {
                let target = match scheme.target_kind() {
                    TargetKind::Path => "path",
                    TargetKind::Url => "url",
                };
                println!("{} {target}", scheme.name());
            }
            ExitCode::SUCCESS
        }
        [spec, count] => match (Lock::open(spec), count.parse::<u64>()) {
            (Ok(mut lock), Ok(count)) => match run(&mut lock, count) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cycles: {}", lock.describe(&e));
                    ExitCode::FAILURE
                }
            },
            (Err(e), _) => {
                eprintln!("cycles: {spec}: {e}");
                ExitCode::FAILURE
            }
            (_, Err(_)) => {
                eprintln!("cycles: COUNT must be a whole number, not {count:?}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("usage: cycles --list | cycles SPEC COUNT");
            ExitCode::from(2)
        }
    }
}

/// One cycle to make the lock's files, then `count` cycles to be counted.
fn run(lock: &mut Lock, count: u64) -> Result<(), lockcore::Error> {
    for _ in 0..=count {
        lock.acquire(Some(Duration::from_secs(10)))?;
        lock.release(Duration::ZERO)?;
    }
    Ok(())
}

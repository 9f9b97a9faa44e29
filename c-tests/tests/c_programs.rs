//! Runs the C test programs (c/api.c, c/errors.c, c/strategies.c,
//! c/counter.c, c/server.c, each linked with the library as a `c_<stem>`
//! binary) and checks what they report: exit status 0, at least one
//! `PASSED` line and no `FAILED` line. On failure the program's whole output
//! is shown. The counter and the demo (c/demo.c, `lockdemo`) must have run
//! every scheme of lockcore's own list, `Scheme::ALL`, whose locks are
//! files, which their table is generated from.
//!
//! c_server runs on a lock kept by a server: each of its runs gets a
//! redis-server of its own and one that wants a password, started here
//! ([`testkit`]), and every case must have run, none skipped. Where no
//! `redis-server` can run those tests say they were skipped (under `CI`
//! they fail: CI installs it).
//!
//! If `valgrind` is on PATH, c_api, c_errors, c_strategies and c_server run
//! once more under memcheck (`--error-exitcode=99 --leak-check=full
//! --errors-for-leak-kinds=definite`, with `LOCKFFI_UNDER_MEMCHECK=1` for the
//! few cases that cannot run there); otherwise that test says it was
//! skipped. CI installs valgrind.
//!
//! And c_api, c_errors, c_strategies, c_server and a short c_counter run
//! once more as C programs of their own, compiled with `-fsanitize=address
//! -fno-omit-frame-pointer` and linked with `liblockffi.so` (the cdylib,
//! which no other C test runs; the Rust side is not instrumented, but
//! AddressSanitizer sees every malloc and free, and LeakSanitizer checks each
//! process at exit). Any sanitizer report, from the program or from a child
//! it forked, fails the test. If the compiler cannot build with
//! AddressSanitizer, those tests say they were skipped, and why. Set
//! `ASAN_OPTIONS` to add options, e.g. `fast_unwind_on_malloc=0` for whole
//! stacks through the library.

mod library;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `command`, and panics with its full output unless it exited 0, said
/// PASSED at least once and FAILED never.
fn check(name: &str, command: Command) -> String {
    check_output(name, command).0
}

/// As `check`, and returns stderr too.
fn check_output(name: &str, mut command: Command) -> (String, String) {
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
    (stdout.into_owned(), stderr.into_owned())
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

use lockcore::{Ability, Scheme};

/// The schemes of the C programs' table (build.rs): those whose locks are
/// files. A lock on a server has a program of its own, c_server.
fn file_schemes() -> impl Iterator<Item = Scheme> {
    Scheme::ALL.iter().copied().filter(|scheme| scheme.supports(Ability::Files))
}

#[test]
fn c_counter() {
    // The full run: every strategy, 16 processes x 200 cycles.
    let mut command = Command::new(env!("CARGO_BIN_EXE_c_counter"));
    command.env_remove("LOCKFFI_COUNTER_PROCESSES").env_remove("LOCKFFI_COUNTER_CYCLES");
    let stdout = check("c_counter", command);
    for strategy in file_schemes().map(|s| s.name()) {
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
    for scheme in file_schemes() {
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
        check(&format!("valgrind {name}"), under_memcheck(&valgrind, program));
    }
}

/// `program` run by `valgrind`'s memcheck, failing on any error or definite leak.
fn under_memcheck(valgrind: &Path, program: &str) -> Command {
    let mut command = Command::new(valgrind);
    command.env("LOCKFFI_UNDER_MEMCHECK", "1").args([
        "--quiet",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        program,
    ]);
    command
}

/// What every AddressSanitizer run is given, before the caller's own
/// `ASAN_OPTIONS`. `detect_stack_use_after_return` stays off: its fake
/// stacks (11 MiB a thread) do not fit under the address-space limit of
/// test_autorenew_without_threads.
const ASAN_OPTIONS: &str = "detect_leaks=1:strict_string_checks=1";

/// The C program `program` (c/<program>.c) built with AddressSanitizer:
/// links the objects build.rs compiled with `liblockffi.so`, the cdylib,
/// built for this test run ([`library::directory`]). None if the compiler
/// cannot do it (the reason is printed).
fn asan_program(program: &str) -> Option<PathBuf> {
    let (Some(objects), Some(cc)) = (option_env!("C_TESTS_ASAN_DIR"), option_env!("C_TESTS_ASAN_CC")) else {
        let why = option_env!("C_TESTS_ASAN_SKIP").unwrap_or("build.rs gave no reason");
        println!("skipped: c_{program} was not run under AddressSanitizer: {why}");
        eprintln!("skipped: c_{program} not run under AddressSanitizer");
        return None;
    };
    let deps = library::directory();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("asan");
    std::fs::create_dir_all(&out).expect("cannot make the AddressSanitizer build directory");
    let executable = out.join(format!("c_{program}"));
    // Linked to a name of its own, then renamed: another test run may be
    // running the last one.
    let linking = out.join(format!("c_{program}.{}", std::process::id()));
    let objects = Path::new(objects);
    let mut link = Command::new(cc);
    link.args(["-fsanitize=address", "-fno-omit-frame-pointer", "-pthread"])
        .arg(objects.join(format!("{program}.o")))
        .arg(objects.join("lsan_fork.o"))
        .arg("-L")
        .arg(deps)
        .arg("-llockffi")
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .arg("-o")
        .arg(&linking);
    let output = link.output().unwrap_or_else(|e| panic!("cannot run {link:?}: {e}"));
    assert!(
        output.status.success(),
        "linking c_{program} with AddressSanitizer failed: {link:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&linking, &executable).expect("cannot rename the linked program");
    Some(executable)
}

/// Runs c_<program>, built with AddressSanitizer, with `env` added: `check`'s
/// judgement, and no sanitizer report on stderr, from the program or any
/// child it forked (a child's report need not change its exit status).
/// None if it was skipped.
fn check_under_asan(program: &str, env: &[(&str, &str)]) -> Option<String> {
    let executable = asan_program(program)?;
    let mut command = Command::new(&executable);
    let options = match std::env::var("ASAN_OPTIONS") {
        Ok(own) if !own.is_empty() => format!("{ASAN_OPTIONS}:{own}"),
        _ => ASAN_OPTIONS.to_owned(),
    };
    command.envs(env.iter().copied()).env("ASAN_OPTIONS", options);
    let name = format!("c_{program} under AddressSanitizer");
    let (stdout, stderr) = check_output(&name, command);
    let reports: Vec<&str> = stderr.lines().filter(|l| l.contains("Sanitizer")).collect();
    assert!(reports.is_empty(), "{name}: sanitizer reports {reports:?}\n--- stderr ---\n{stderr}--- end ---");
    Some(stdout)
}

#[test]
fn c_api_under_asan() {
    check_under_asan("api", &[]);
}

#[test]
fn c_errors_under_asan() {
    check_under_asan("errors", &[]);
}

#[test]
fn c_strategies_under_asan() {
    check_under_asan("strategies", &[]);
}

#[test]
fn c_counter_under_asan() {
    // Every strategy, but short: the full run is c_counter's.
    let env = [("LOCKFFI_COUNTER_PROCESSES", "4"), ("LOCKFFI_COUNTER_CYCLES", "50")];
    let Some(stdout) = check_under_asan("counter", &env) else { return };
    for strategy in file_schemes().map(|s| s.name()) {
        assert!(
            stdout.lines().any(|l| l == format!("PASSED test_counter_{strategy}")),
            "c_counter under AddressSanitizer did not pass {strategy}:\n{stdout}"
        );
    }
}

/// The password of the server that wants one.
const PASSWORD: &str = "c-server-s3cret";

/// The servers c_server runs against, for one run: one to lock on, by its
/// unix socket and its TCP port, and one that wants [`PASSWORD`]. They are
/// killed when this is dropped, at the end of the test that started them.
struct Servers {
    main: testkit::Redis,
    auth: testkit::Redis,
}

impl Servers {
    /// Started, or `None` (the test says it is skipped) where no
    /// redis-server can run; under `CI` that fails instead.
    fn start(name: &str) -> Option<Servers> {
        if !testkit::redis_available() {
            println!("skipped: redis-server is not installed (CI installs it); {name} was not run");
            eprintln!("skipped: {name}: redis-server not installed");
            return None;
        }
        Some(Servers { main: testkit::Redis::start(&[]), auth: testkit::Redis::start(&["--requirepass", PASSWORD]) })
    }

    /// What c/server.c reads: each server as a spec without its lock's
    /// name, which every case gives its own.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LOCKFFI_TEST_REDIS_SPEC_BASE", self.main.spec("", "")),
            ("LOCKFFI_TEST_REDIS_TCP_SPEC_BASE", self.main.tcp_spec("", "")),
            ("LOCKFFI_TEST_REDIS_AUTH_SPEC_BASE", self.auth.spec("", "")),
            ("LOCKFFI_TEST_REDIS_PASSWORD", PASSWORD.to_string()),
        ]
    }
}

/// With its servers given, no case of c_server has a reason to skip.
fn every_server_case_ran(name: &str, stdout: &str) {
    let skipped: Vec<&str> = stdout.lines().filter(|l| l.starts_with("SKIPPED ")).collect();
    assert!(skipped.is_empty(), "{name} skipped cases it had servers for: {skipped:?}\n{stdout}");
}

#[test]
fn c_server() {
    let Some(servers) = Servers::start("c_server") else { return };
    let mut command = Command::new(env!("CARGO_BIN_EXE_c_server"));
    command.envs(servers.env());
    let stdout = check("c_server", command);
    every_server_case_ran("c_server", &stdout);
}

#[test]
fn c_server_under_valgrind() {
    let Some(valgrind) = find_on_path("valgrind") else {
        println!("skipped: valgrind not installed (CI installs it); c_server was not run under memcheck");
        eprintln!("skipped: valgrind not installed");
        return;
    };
    let Some(servers) = Servers::start("c_server under valgrind") else { return };
    let mut command = under_memcheck(&valgrind, env!("CARGO_BIN_EXE_c_server"));
    command.envs(servers.env());
    let stdout = check("valgrind c_server", command);
    every_server_case_ran("valgrind c_server", &stdout);
}

#[test]
fn c_server_under_asan() {
    let Some(servers) = Servers::start("c_server under AddressSanitizer") else { return };
    let env = servers.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let Some(stdout) = check_under_asan("server", &env) else { return };
    every_server_case_ran("c_server under AddressSanitizer", &stdout);
}

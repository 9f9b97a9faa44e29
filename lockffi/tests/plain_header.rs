//! `include/lockffi_plain.h` is what the FFI tools that run no preprocessor
//! read: Python's `cffi.FFI().cdef` and PHP's `FFI::cdef` must accept it
//! whole, and, with it, call into this run's `liblockffi.so`. Each tool
//! that is missing is skipped with a message.

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../c-tests/tests/library/mod.rs"]
mod library;

fn plain_header() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi_plain.h")
}

/// What a tool's script must print: `lock_version()` and
/// `lock_strerror(0)`, a line each, as the library gives them.
fn expected_output() -> String {
    // SAFETY: both return static NUL-terminated strings.
    let (version, ok) = unsafe { (CStr::from_ptr(lockffi::lock_version()), CStr::from_ptr(lockffi::lock_strerror(0))) };
    format!("{}\n{}\n", version.to_str().expect("ASCII"), ok.to_str().expect("ASCII"))
}

/// Runs `command`, or says why it could not start.
fn output_of(mut command: Command) -> Result<std::process::Output, String> {
    command.output().map_err(|e| format!("cannot run {command:?}: {e}"))
}

/// Whether `program` runs `args` successfully: the probe for a tool.
fn tool_works(program: &str, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new(program);
    command.args(args);
    let output = output_of(command)?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim())),
    }
}

fn assert_prints_version_and_ok(tool: &str, output: std::process::Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{tool} failed on include/lockffi_plain.h ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, expected_output(), "{tool} read other strings through the plain header");
}

const PYTHON: &str = r#"
import sys, cffi
ffi = cffi.FFI()
with open(sys.argv[1]) as header:
    ffi.cdef(header.read())
lib = ffi.dlopen(sys.argv[2])
print(ffi.string(lib.lock_version()).decode())
print(ffi.string(lib.lock_strerror(0)).decode())
"#;

#[test]
fn cffi_accepts_the_plain_header_and_calls_the_library() {
    if let Err(why) = tool_works("python3", &["-c", "import cffi"]) {
        assert!(std::env::var_os("CI").is_none(), "CI must install cffi: {why}");
        println!("skipped: Python's cffi is not available ({why}); Debian: apt-get install python3-cffi");
        return;
    }
    let mut python = Command::new("python3");
    python.args(["-c", PYTHON]).arg(plain_header()).arg(library::directory().join("liblockffi.so"));
    assert_prints_version_and_ok("python3 with cffi", output_of(python).unwrap_or_else(|e| panic!("{e}")));
}

// PHP's FFI turns a returned `const char *` into a PHP string itself.
const PHP: &str = r#"
$ffi = FFI::cdef(file_get_contents($argv[1]), $argv[2]);
echo $ffi->lock_version(), "\n";
echo $ffi->lock_strerror(0), "\n";
"#;

#[test]
fn php_ffi_accepts_the_plain_header_and_calls_the_library() {
    if let Err(why) = tool_works("php", &["-r", "exit(class_exists('FFI') ? 0 : 1);"]) {
        assert!(std::env::var_os("CI").is_none(), "CI must install php-cli: {why}");
        println!("skipped: PHP with its FFI extension is not available ({why}); Debian: apt-get install php-cli");
        return;
    }
    let mut php = Command::new("php");
    php.args(["-d", "ffi.enable=1", "-r", PHP, "--"])
        .arg(plain_header())
        .arg(library::directory().join("liblockffi.so"));
    assert_prints_version_and_ok("php with FFI", output_of(php).unwrap_or_else(|e| panic!("{e}")));
}

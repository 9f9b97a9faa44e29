//! A program that loads the library, takes a lock and lets the library go
//! (`dlclose`) forks as before. The library registers handlers that the C
//! library runs around `fork(3)`; the C library forgets them when it
//! unloads the library (and keeps a library mapped once it registered
//! thread-local destructors), so none is called where no code is. Driven
//! from Python's cffi, as a program that loads the library at run time
//! would; skipped with a message where cffi is missing.

use std::path::Path;
use std::process::Command;

#[path = "../../c-tests/tests/library/mod.rs"]
mod library;

const PYTHON: &str = r#"
import os, sys, cffi
ffi = cffi.FFI()
with open(sys.argv[1]) as header:
    ffi.cdef(header.read())
lib = ffi.dlopen(sys.argv[2])
handle = ffi.new("lock_handle **")

def check(what, result):
    if result != 0:
        sys.exit("%s: %s" % (what, ffi.string(lib.lock_strerror(result)).decode()))

def forks():
    child = os.fork()
    if child == 0:
        os._exit(0)
    _, status = os.waitpid(child, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

check("lock_open", lib.lock_open(("flock:" + sys.argv[3]).encode(), handle))
check("lock_acquire", lib.lock_acquire(handle[0], 1000, ffi.NULL))
check("lock_release", lib.lock_release(handle[0], 0))
if not forks():
    sys.exit("a fork while the library was loaded failed")
check("lock_close", lib.lock_close(handle[0]))
ffi.dlclose(lib)
if not forks():
    sys.exit("a fork after the library was unloaded failed")
print("forked")
"#;

#[test]
fn a_program_forks_after_unloading_the_library() {
    let probe = Command::new("python3").args(["-c", "import cffi"]).output();
    if !probe.as_ref().is_ok_and(|out| out.status.success()) {
        assert!(std::env::var_os("CI").is_none(), "CI must install cffi");
        println!("skipped: Python's cffi is not available; Debian: apt-get install python3-cffi");
        return;
    }
    let dir = std::env::temp_dir().join(format!("lockffi-unloaded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi_plain.h");
    let output = Command::new("python3")
        .args(["-c", PYTHON])
        .arg(header)
        .arg(library::directory().join("liblockffi.so"))
        .arg(dir.join("lock"))
        .output()
        .expect("python3 runs");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        output.status.success() && output.stdout == b"forked\n",
        "{}:\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

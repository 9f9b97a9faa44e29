//! Runs a C program's renamed `main` with this process's arguments.

use std::ffi::{c_char, c_int, CString};

pub fn run(c_main: unsafe extern "C" fn(c_int, *const *const c_char) -> c_int) -> ! {
    let args: Vec<CString> =
        std::env::args_os().map(|a| CString::new(a.into_encoded_bytes()).expect("arguments contain no NUL")).collect();
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let argc = c_int::try_from(args.len()).expect("argument count fits in an int");
    // SAFETY: argv is a NULL-terminated array of NUL-terminated strings that
    // outlive the call, as C's main expects.
    let code = unsafe { c_main(argc, argv.as_ptr()) };
    std::process::exit(code)
}

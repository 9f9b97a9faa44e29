//! The C program c/server.c, linked with the lock library.

use lockffi as _;

#[path = "../c_main.rs"]
mod c_main;

extern "C" {
    fn server_main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int;
}

fn main() {
    c_main::run(server_main)
}

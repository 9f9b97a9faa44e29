//! Names the shared library `liblockffi.so.<major>` in its ELF SONAME when
//! `LOCKFFI_SONAME` is set, as `make` sets it for the library it installs.
//!
//! Only then: a program linked against a library that has a SONAME asks the
//! loader for that name, and cargo leaves nothing but `liblockffi.so` in
//! `target/<profile>`, so the programs linked and run straight from the
//! build directory (the README's example, the C tests) would find nothing to
//! load. `make install` puts the `liblockffi.so.<major>` link beside the
//! library it installs.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LOCKFFI_SONAME");
    if std::env::var_os("LOCKFFI_SONAME").is_some_and(|value| !value.is_empty()) {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblockffi.so.{major}");
    }
}

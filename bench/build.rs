//! Builds the liblockfile peer when Debian's liblockfile-dev (or an
//! equivalent) is installed: a tiny C shim over `lockfile_create` /
//! `lockfile_remove`, linked with `-llockfile`, and the cfg `has_liblockfile`.
//! Without the header or the library the peer is skipped, and says so.

use std::path::{Path, PathBuf};

const INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];
const LIB_DIRS: &[&str] = &["/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_liblockfile)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=csrc/liblockfile_shim.c");
    println!("cargo::rerun-if-env-changed=BENCH_NO_LIBLOCKFILE");

    if std::env::var_os("BENCH_NO_LIBLOCKFILE").is_some() {
        println!("cargo::warning=BENCH_NO_LIBLOCKFILE is set: liblockfile peer skipped");
        return;
    }
    let Some(header) = INCLUDE_DIRS.iter().map(|d| Path::new(d).join("lockfile.h")).find(|p| p.is_file()) else {
        println!(
            "cargo::warning=liblockfile not installed: peer skipped (no lockfile.h; Debian: apt-get install liblockfile-dev, then cargo clean -p bench: this script does not notice a later install)"
        );
        return;
    };
    println!("cargo::rerun-if-changed={}", header.display());
    let Some(lib_dir) = find_library() else {
        println!("cargo::warning=liblockfile not installed: peer skipped (lockfile.h found, but no liblockfile.so/.a)");
        return;
    };
    let built = cc::Build::new()
        .file("csrc/liblockfile_shim.c")
        .warnings(true)
        .flag_if_supported("-Wextra")
        .try_compile("bench_liblockfile_shim");
    if let Err(e) = built {
        println!("cargo::warning=liblockfile peer skipped: the shim did not compile: {e}");
        return;
    }
    println!("cargo::rustc-link-search=native={}", lib_dir.display());
    println!("cargo::rustc-link-lib=lockfile");
    println!("cargo::rustc-cfg=has_liblockfile");
}

/// The directory holding liblockfile.so or liblockfile.a, multiarch included.
fn find_library() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = LIB_DIRS.iter().map(PathBuf::from).collect();
    for base in ["/usr/lib", "/lib"] {
        if let Ok(entries) = std::fs::read_dir(base) {
            dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| {
                p.is_dir() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-linux-gnu"))
            }));
        }
    }
    dirs.into_iter().find(|d| d.join("liblockfile.so").exists() || d.join("liblockfile.a").exists())
}

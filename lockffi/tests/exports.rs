//! Every export goes through the one pattern of `src/boundary.rs`, and the
//! header declares every export: read from the source itself, so that a
//! function added without the pattern, or hidden from cbindgen, fails here.
//!
//! An export is an `extern "C" fn` in `src/`. Each must be `pub`, carry
//! `#[no_mangle]` and a doc comment, and have for its whole body one
//! `ffi_export!(<its own name>, ...)` call: the macro gives it the panic
//! boundary, the NULL checks and the claim of its handle. (cbindgen does not
//! expand macros, so the function itself stays written out; see
//! `src/boundary.rs`.) Nothing else in `src/` may be `#[no_mangle]`.
//!
//! A private `extern "C" fn` without `#[no_mangle]` is no export but a
//! callback handed to the C library (`atexit`, `pthread_atfork`): it must
//! not unwind either, so its body must be one `let _ = catch_unwind(...)`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proc_macro2::TokenTree;
use syn::{Attribute, Item, ItemFn, Stmt};

/// One `extern "C" fn` found in the source, and what is wrong with it.
struct Export {
    name: String,
    file: PathBuf,
    problems: Vec<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn has_attr(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident(name)
            // `#[unsafe(no_mangle)]`, the spelling of edition 2024.
            || (a.path().is_ident("unsafe") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == name))
    })
}

fn is_test_module(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
}

/// What is wrong with the body of `function`: anything but one
/// `ffi_export!(<name>, ...)`.
fn body_problems(function: &ItemFn) -> Vec<String> {
    let name = function.sig.ident.to_string();
    let stmts = &function.block.stmts;
    let [Stmt::Macro(call)] = stmts.as_slice() else {
        // A trailing macro call without `;` parses as an expression.
        let [Stmt::Expr(syn::Expr::Macro(call), None)] = stmts.as_slice() else {
            return vec![format!("the body is not one ffi_export!(...) call ({} statements)", stmts.len())];
        };
        return macro_problems(&name, &call.mac);
    };
    macro_problems(&name, &call.mac)
}

fn macro_problems(name: &str, mac: &syn::Macro) -> Vec<String> {
    let mut problems = Vec::new();
    if !mac.path.is_ident("ffi_export") {
        problems.push(format!("the body calls {}!, not ffi_export!", quote_path(&mac.path)));
    }
    match mac.tokens.clone().into_iter().next() {
        Some(TokenTree::Ident(first)) if first == name => {}
        other => problems.push(format!(
            "ffi_export! names {}, not the function itself",
            other.map_or("nothing".to_string(), |t| t.to_string())
        )),
    }
    problems
}

fn quote_path(path: &syn::Path) -> String {
    path.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>().join("::")
}

/// Whether `function` is one `let _ = ...catch_unwind(...);`.
fn catches_every_panic(function: &ItemFn) -> bool {
    let [Stmt::Local(local)] = function.block.stmts.as_slice() else { return false };
    let Some(init) = &local.init else { return false };
    let syn::Expr::Call(call) = init.expr.as_ref() else { return false };
    let syn::Expr::Path(callee) = call.func.as_ref() else { return false };
    callee.path.segments.last().is_some_and(|s| s.ident == "catch_unwind")
}

fn scan(items: &[Item], file: &Path, exports: &mut Vec<Export>, callbacks: &mut Vec<Export>) {
    for item in items {
        match item {
            Item::Fn(function)
                if function.sig.abi.is_some()
                    && !matches!(function.vis, syn::Visibility::Public(_))
                    && !has_attr(&function.attrs, "no_mangle") =>
            {
                let problems = match catches_every_panic(function) {
                    true => Vec::new(),
                    false => vec!["a callback for C whose body is not one `let _ = catch_unwind(...)`".to_string()],
                };
                callbacks.push(Export { name: function.sig.ident.to_string(), file: file.to_path_buf(), problems });
            }
            Item::Fn(function) if function.sig.abi.is_some() => {
                let mut problems = Vec::new();
                if !matches!(function.vis, syn::Visibility::Public(_)) {
                    problems.push("not pub".to_string());
                }
                if !has_attr(&function.attrs, "no_mangle") {
                    problems.push("no #[no_mangle]".to_string());
                }
                if !has_attr(&function.attrs, "doc") {
                    problems.push("no doc comment (the header would have none)".to_string());
                }
                problems.extend(body_problems(function));
                exports.push(Export { name: function.sig.ident.to_string(), file: file.to_path_buf(), problems });
            }
            Item::Fn(function) if has_attr(&function.attrs, "no_mangle") => exports.push(Export {
                name: function.sig.ident.to_string(),
                file: file.to_path_buf(),
                problems: vec!["#[no_mangle] on a function that is not extern \"C\"".to_string()],
            }),
            Item::Static(item) if has_attr(&item.attrs, "no_mangle") => exports.push(Export {
                name: item.ident.to_string(),
                file: file.to_path_buf(),
                problems: vec!["a #[no_mangle] static: the C interface is functions only".to_string()],
            }),
            Item::Mod(module) if !is_test_module(&module.attrs) => {
                if let Some((_, items)) = &module.content {
                    scan(items, file, exports, callbacks);
                }
            }
            _ => {}
        }
    }
}

/// The exports, and the callbacks for C.
fn extern_functions() -> (Vec<Export>, Vec<Export>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let (mut exports, mut callbacks) = (Vec::new(), Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        scan(&parsed.items, file, &mut exports, &mut callbacks);
    }
    (exports, callbacks)
}

/// The functions the header declares, by name.
fn header_functions() -> BTreeSet<String> {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h")).unwrap();
    header
        .lines()
        .filter(|l| !l.starts_with([' ', '*', '/', '#', 't', '}']) && l.ends_with(");"))
        .map(|l| {
            let before = &l[..l.find('(').unwrap()];
            before.rsplit([' ', '*']).next().unwrap().to_string()
        })
        .collect()
}

#[test]
fn every_export_goes_through_ffi_export() {
    let (exports, callbacks) = extern_functions();
    assert!(exports.len() >= 16, "found only {} exports: is the scan still reading src/?", exports.len());
    let bad: Vec<String> = exports
        .iter()
        .chain(&callbacks)
        .filter(|e| !e.problems.is_empty())
        .map(|e| format!("{} ({}): {}", e.name, e.file.display(), e.problems.join("; ")))
        .collect();
    assert!(bad.is_empty(), "exports outside the one pattern of src/boundary.rs:\n{}", bad.join("\n"));
}

#[test]
fn the_header_declares_every_export_and_nothing_else() {
    let exports: BTreeSet<String> = extern_functions().0.into_iter().map(|e| e.name).collect();
    let header = header_functions();
    assert!(header.contains("lock_open") && header.contains("lock_path"), "header functions: {header:?}");
    let missing: Vec<_> = exports.difference(&header).collect();
    let extra: Vec<_> = header.difference(&exports).collect();
    assert!(missing.is_empty(), "exports the header lacks (hidden from cbindgen?): {missing:?}");
    assert!(extra.is_empty(), "functions in the header that no export defines: {extra:?}");
}

//! The checked-in header must be exactly what cbindgen generates from this
//! crate now. Regenerate it with:
//!
//!     LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header

mod returns;

use std::path::Path;

use returns::{code_by_name, codes_named, declared_functions, returns_lists, returns_paragraph};

/// What cbindgen generates from this crate with `cbindgen.toml`, changed by
/// `adjust`.
fn generate(adjust: impl FnOnce(&mut cbindgen::Config)) -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    adjust(&mut config);
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    for_c89(&String::from_utf8(generated).expect("cbindgen writes UTF-8"))
}

/// `header` as C89 accepts it, with two changes to what cbindgen writes:
/// its `// __cplusplus` and `// extern "C"` comments on the lines of the
/// `extern "C"` block become `/* */` comments (gcc -std=c89 rejects the
/// first as extra tokens after `#endif`), and the comma after each enum's
/// last enumerator goes (-pedantic: "comma at end of enumerator list").
/// cbindgen has no setting for either. Any other `//` outside a comment
/// fails here, so that a new cbindgen cannot slip one in.
fn for_c89(header: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut in_comment = false;
    let mut in_enum = false;
    for line in header.lines() {
        let code = !in_comment && !line.trim_start().starts_with("/*");
        if line.contains("/*") && !line.contains("*/") {
            in_comment = true;
        } else if in_comment && line.contains("*/") {
            in_comment = false;
        }
        let mut line = line.to_string();
        if code {
            if let Some((before, comment)) = line.split_once("//") {
                assert!(
                    before.starts_with('#') || before.trim_start().starts_with('}'),
                    "cbindgen wrote a // comment that C89 does not accept: {line}"
                );
                line = format!("{before}/* {} */", comment.trim());
            }
            if line.starts_with("typedef enum") || line.starts_with("enum ") {
                in_enum = line.ends_with('{');
            } else if in_enum && line.starts_with('}') {
                in_enum = false;
                let last = lines.iter_mut().rev().find(|l| !l.trim().is_empty()).expect("an enumerator");
                if let Some(enumerator) = last.strip_suffix(',') {
                    *last = enumerator.to_string();
                }
            }
        }
        lines.push(line);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// Compares `generated` with the checked-in `include/<name>`, or writes it
/// there when `LOCKFFI_BLESS_HEADER` is set.
fn check_in(name: &str, generated: &str) {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include").join(name);
    if std::env::var_os("LOCKFFI_BLESS_HEADER").is_some() {
        std::fs::write(&header, generated).unwrap_or_else(|e| panic!("write include/{name}: {e}"));
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/{name} differs from what cbindgen generates now; \
         regenerate it with: LOCKFFI_BLESS_HEADER=1 cargo test -p lockffi --test header"
    );
}

#[test]
fn checked_in_header_matches_a_fresh_generation() {
    check_in("lockffi.h", &generate(|_| {}));
}

/// `include/lockffi_plain.h` declares the same interface with no
/// preprocessor line at all, for the FFI tools that read C declarations but
/// run no preprocessor (Python's `cffi.FFI.cdef`, PHP's `FFI::cdef`): no
/// include guard, no includes (those tools know `bool`, `size_t` and the
/// `<stdint.h>` types), no `extern "C"`, no comment but its banner, and the one constant an
/// array size uses written as its number. The other constants are macros in
/// `lockffi.h` only; a binding defines the ones it needs
/// (`LOCK_WAIT_FOREVER` is `UINT64_MAX`).
#[test]
fn checked_in_plain_header_matches_a_fresh_generation() {
    let generated = generate(|config| {
        config.header = Some(
            "/* lockffi_plain.h: the declarations of lockffi.h without preprocessor lines, for FFI tools.\n \
             * Generated from lockffi/src; do not edit. Documentation: lockffi.h. */"
                .to_string(),
        );
        config.include_guard = None;
        config.cpp_compat = false;
        config.documentation = false;
        config.sys_includes = Vec::new();
        config.no_includes = true;
    });
    check_in("lockffi_plain.h", &without_preprocessor(&generated));
}

/// `header` with its `#define` constants substituted where they are used and
/// every preprocessor line removed, along with the blank lines that leaves.
fn without_preprocessor(header: &str) -> String {
    let constants: Vec<(&str, &str)> = header
        .lines()
        .filter_map(|line| line.strip_prefix("#define "))
        .filter_map(|definition| definition.split_once(' '))
        .collect();
    let mut plain = String::new();
    for line in header.lines().filter(|line| !line.starts_with('#')) {
        if line.is_empty() && (plain.is_empty() || plain.ends_with("\n\n")) {
            continue;
        }
        let mut line = line.to_string();
        for (name, value) in &constants {
            line = line.replace(&format!("[{name}]"), &format!("[{value}]"));
        }
        plain.push_str(&line);
        plain.push('\n');
    }
    plain
}

#[test]
fn header_version_macros_match_cargo() {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h"))
        .expect("read include/lockffi.h");
    for (name, value) in [
        ("LOCKFFI_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("LOCKFFI_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("LOCKFFI_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let line = format!("#define {name} {value}");
        assert!(header.lines().any(|l| l.trim() == line), "header lacks `{line}`");
    }
}

/// `lock_result::ALL`, which `lock_strerror` and the tests walk, is made
/// from the table in `src/result.rs`; the header's enum from the enum
/// itself. They must be the same codes, in the same order, with the same
/// numbers.
#[test]
fn every_result_code_of_the_header_is_in_all() {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h"))
        .expect("read include/lockffi.h");
    let body = header
        .split("typedef enum {")
        .find_map(|rest| rest.split_once("} lock_result;").map(|(body, _)| body))
        .expect("the header has a typedef enum lock_result");
    let in_header: Vec<(String, i32)> = body
        .lines()
        .map(|line| line.trim())
        .filter(|line| !line.starts_with('*') && !line.starts_with("/*"))
        .filter_map(|entry| entry.trim_end_matches(',').split_once(" = "))
        .map(|(name, number)| (name.to_string(), number.parse().expect("a number")))
        .collect();
    let in_all: Vec<(String, i32)> =
        lockffi::lock_result::ALL.iter().map(|&code| (format!("{code:?}"), code as i32)).collect();
    assert!(in_header.len() > 20, "read only {in_header:?} from the header");
    assert_eq!(in_all, in_header, "lock_result::ALL and the header's enum differ");
}

/// Every function's doc has a "Returns:" paragraph; for one that returns a
/// `lock_result` it lists the codes it can answer, from `LOCK_OK` up in the
/// order of their numbers, each a code of `lock_result::ALL`, once.
#[test]
fn every_function_lists_the_codes_it_returns() {
    let functions = declared_functions();
    assert!(functions.len() >= 15, "read only {} functions from the header", functions.len());
    let mut problems = Vec::new();
    for function in &functions {
        let Some(paragraph) = returns_paragraph(&function.doc) else {
            problems.push(format!("{}: no \"Returns:\" paragraph", function.name));
            continue;
        };
        let named = codes_named(&paragraph);
        for unknown in named.iter().filter(|name| code_by_name(name).is_none()) {
            problems.push(format!("{}: lists {unknown}, which is no lock_result", function.name));
        }
        if !function.returns_code {
            continue;
        }
        let numbers: Vec<i32> = named.iter().filter_map(|name| code_by_name(name)).map(|code| code as i32).collect();
        if numbers.first() != Some(&0) {
            problems.push(format!("{}: its list does not begin with LOCK_OK: {paragraph}", function.name));
        }
        if !numbers.windows(2).all(|pair| pair[0] < pair[1]) {
            problems.push(format!("{}: its list is not in the order of the numbers, once each", function.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The words of a token stream, groups flattened.
fn words(tokens: proc_macro2::TokenStream, out: &mut Vec<String>) {
    for token in tokens {
        match token {
            proc_macro2::TokenTree::Group(group) => words(group.stream(), out),
            proc_macro2::TokenTree::Ident(ident) => out.push(ident.to_string()),
            _ => {}
        }
    }
}

/// Each export of `src/`, by name, with the words of its one
/// `ffi_export!` call (`tests/exports.rs` checks that it has no other body).
fn export_bodies() -> Vec<(String, Vec<String>)> {
    let mut bodies = Vec::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for item in file.items {
            let syn::Item::Fn(function) = item else { continue };
            let call = match function.block.stmts.as_slice() {
                [syn::Stmt::Macro(call)] => &call.mac,
                [syn::Stmt::Expr(syn::Expr::Macro(call), None)] => &call.mac,
                _ => continue,
            };
            if function.sig.abi.is_some() && call.path.is_ident("ffi_export") {
                let mut found = Vec::new();
                words(call.tokens.clone(), &mut found);
                bodies.push((function.sig.ident.to_string(), found));
            }
        }
    }
    bodies
}

/// What the source of each export shows it can answer, whatever its lock
/// does, is in its list: every call on a handle can meet a NULL handle,
/// another thread's call and a parent's lock; a pointer the call requires
/// can be NULL; a duration argument can be out of range; every code the
/// body names itself; and every call that returns a code can catch a
/// panic. `lock_close` answers `LOCK_OK` for NULL and claims nothing.
#[test]
fn the_lists_hold_what_the_source_of_each_export_answers() {
    use lockffi::lock_result::*;
    let lists = returns_lists();
    let bodies = export_bodies();
    assert_eq!(bodies.len(), declared_functions().len(), "read {} exports from src/", bodies.len());
    let mut problems = Vec::new();
    for (name, words) in &bodies {
        let has = |word: &str| words.iter().any(|w| w == word);
        // `ffi_export!(name, claim(handle), ...)`, `take(handle)`, `required(...)` or `fallback(...)`.
        let form = words.get(1).map(String::as_str);
        let Some(listed) = lists.get(name) else {
            assert_eq!(form, Some("fallback"), "{name} returns no lock_result but is no fallback form of ffi_export!");
            continue;
        };
        let mut expected = vec![LOCK_OK, LOCK_ERR_PANIC];
        if form == Some("claim") {
            expected.extend([LOCK_ERR_NULL_ARGUMENT, LOCK_ERR_FORKED, LOCK_ERR_HANDLE_IN_USE]);
        }
        if form == Some("take") {
            // Made from a callback of a call on the same handle.
            expected.push(LOCK_ERR_HANDLE_IN_USE);
        }
        if has("required") {
            expected.push(LOCK_ERR_NULL_ARGUMENT);
        }
        if has("duration_arg") {
            expected.push(LOCK_ERR_INVALID_ARGUMENT);
        }
        expected.extend(words.iter().filter_map(|word| code_by_name(word)));
        for code in expected {
            if !listed.contains(&code) {
                problems.push(format!("{name}: its source can answer {code:?}, which its Returns: list lacks"));
            }
        }
        if form == Some("take") {
            for code in [LOCK_ERR_NULL_ARGUMENT, LOCK_ERR_FORKED] {
                if listed.contains(&code) {
                    problems.push(format!("{name}: lists {code:?}, which a call that takes its handle never answers"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The codes the calls answer when driven through their usual outcomes and
/// misuses, on every scheme, are in their lists.
#[test]
fn the_codes_the_calls_answer_are_in_their_lists() {
    use lockffi::lock_result::*;
    use lockffi::*;
    use std::ffi::{c_char, CString};
    use std::ptr::{null, null_mut};

    let lists = returns_lists();
    let mut problems = Vec::new();
    let mut check = |function: &str, answered: lock_result, expected: &[lock_result]| {
        if !lists[function].contains(&answered) {
            problems.push(format!("{function} answered {answered:?}, which its Returns: list lacks"));
        }
        if !expected.contains(&answered) {
            problems.push(format!("{function} answered {answered:?}, not one of {expected:?}"));
        }
    };
    let open = |spec: &str, handle: &mut *mut lock_handle| {
        let spec = CString::new(spec).expect("no NUL in a spec");
        // SAFETY: a NUL-terminated spec and a valid output.
        unsafe { lock_open(spec.as_ptr(), handle) }
    };
    let dir = std::env::temp_dir().join(format!("lockffi-returns-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("make a fresh directory");
    let too_long = 101 * 365 * 86_400_000;
    let mut spare: *mut lock_handle = null_mut();
    for (spec, code) in [
        ("nosuchscheme:/x", LOCK_ERR_SPEC_UNKNOWN_SCHEME),
        ("lockfile", LOCK_ERR_SPEC_SYNTAX),
        ("mkdir:/x?ttl=soon", LOCK_ERR_SPEC_BAD_VALUE),
        ("mkdir:/x?nosuchkey=1", LOCK_ERR_SPEC_UNKNOWN_KEY),
        ("mkdir:/x?ttl=1s&hold=1s", LOCK_ERR_SPEC_DUPLICATE_KEY),
    ] {
        check("lock_open", open(spec, &mut spare), &[code]);
    }
    // SAFETY: NULL where the calls need a pointer, which they refuse.
    unsafe {
        check("lock_open", lock_open(null(), &mut spare), &[LOCK_ERR_NULL_ARGUMENT]);
        check("lock_set_warning", lock_set_warning(null_mut(), None, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
        check("lock_close", lock_close(null_mut()), &[LOCK_OK]);
    }
    // The locks that are files; a lock on a server is driven the same way
    // by `server_codes.rs`, against a server it starts.
    for scheme in lockcore::Scheme::ALL.iter().filter(|scheme| scheme.supports(lockcore::Ability::Files)) {
        let base = format!("{}:{}/{}", scheme.name(), dir.display(), scheme.name());
        let (mut holder, mut other, mut forever) = (null_mut(), null_mut(), null_mut());
        check("lock_open", open(&format!("{base}?ttl=30s"), &mut holder), &[LOCK_OK]);
        check("lock_open", open(&format!("{base}?ttl=30s"), &mut other), &[LOCK_OK]);
        check("lock_open", open(&base, &mut forever), &[LOCK_OK]);
        let temp = CString::new(format!("{}/{}.new", dir.display(), scheme.name())).expect("no NUL");
        let target = CString::new(format!("{}/{}.data", dir.display(), scheme.name())).expect("no NUL");
        let mut path = [0 as c_char; 4096];
        let mut path_len = 0usize;
        let mut info = std::mem::MaybeUninit::<lock_info>::uninit();
        // SAFETY: live handles from lock_open, valid buffers and outputs.
        unsafe {
            check("lock_release", lock_release(holder, 0), &[LOCK_ERR_NOT_HELD]);
            check("lock_prolong", lock_prolong(holder, 0), &[LOCK_ERR_NOT_HELD]);
            check("lock_autorenew", lock_autorenew(holder, None, null_mut()), &[LOCK_ERR_NOT_HELD]);
            check("lock_commit", lock_commit(holder, temp.as_ptr(), target.as_ptr()), &[LOCK_ERR_NOT_HELD]);
            check("lock_try_acquire", lock_try_acquire(holder, null_mut()), &[LOCK_OK]);
            check("lock_try_acquire", lock_try_acquire(other, null_mut()), &[LOCK_BUSY]);
            check("lock_acquire", lock_acquire(other, 0, null_mut()), &[LOCK_TIMEOUT]);
            check("lock_acquire", lock_acquire(holder, 0, null_mut()), &[LOCK_ERR_ALREADY_HELD]);
            check("lock_path", lock_path(holder, path.as_mut_ptr(), 1, &mut path_len), &[LOCK_ERR_BUFFER_TOO_SMALL]);
            check("lock_path", lock_path(holder, null_mut(), 0, null_mut()), &[LOCK_ERR_BUFFER_TOO_SMALL]);
            check("lock_path", lock_path(holder, null_mut(), 1, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
            check("lock_path", lock_path(holder, path.as_mut_ptr(), path.len(), null_mut()), &[LOCK_OK]);
            check("lock_inspect", lock_inspect(holder, null_mut()), &[LOCK_ERR_NULL_ARGUMENT]);
            check("lock_inspect", lock_inspect(other, info.as_mut_ptr()), &[LOCK_OK]);
            check("lock_release", lock_release(holder, too_long), &[LOCK_ERR_INVALID_ARGUMENT]);
            check("lock_prolong", lock_prolong(holder, too_long), &[LOCK_ERR_INVALID_ARGUMENT]);
            check("lock_prolong", lock_prolong(holder, 0), &[LOCK_OK]);
            check("lock_commit", lock_commit(holder, path.as_ptr(), target.as_ptr()), &[LOCK_ERR_INVALID_ARGUMENT]);
            check("lock_commit", lock_commit(holder, temp.as_ptr(), target.as_ptr()), &[LOCK_ERR_COMMIT]);
            check("lock_commit", lock_commit(holder, null(), target.as_ptr()), &[LOCK_ERR_NULL_ARGUMENT]);
            let renewable = if scheme.breaks_stale_locks() { LOCK_OK } else { LOCK_ERR_UNSUPPORTED };
            check("lock_autorenew", lock_autorenew(holder, None, null_mut()), &[renewable]);
            check("lock_autorenew_stop", lock_autorenew_stop(holder), &[LOCK_OK]);
            let breakable = if scheme.breaks_stale_locks() { LOCK_OK } else { LOCK_ERR_UNSUPPORTED };
            check("lock_break", lock_break(other, null_mut()), &[breakable]);
            let released = if scheme.breaks_stale_locks() { LOCK_LOST } else { LOCK_OK };
            check("lock_release", lock_release(holder, 0), &[released, LOCK_OK]);
            check("lock_acquire", lock_acquire(forever, 1000, null_mut()), &[LOCK_OK]);
            check("lock_autorenew", lock_autorenew(forever, None, null_mut()), &[LOCK_ERR_UNSUPPORTED]);
            check("lock_set_warning", lock_set_warning(forever, None, null_mut()), &[LOCK_OK]);
            check("lock_close", lock_close(forever), &[LOCK_OK]);
            check("lock_close", lock_close(other), &[LOCK_OK]);
            check("lock_close", lock_close(holder), &[LOCK_OK]);
        }
    }
    std::fs::remove_dir_all(&dir).expect("remove the test's directory");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

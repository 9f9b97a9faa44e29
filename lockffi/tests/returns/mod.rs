//! The functions `include/lockffi.h` declares and the codes each one's doc
//! lists after "Returns:", read from the header's text: what
//! `tests/header.rs` checks against the source and against what the calls
//! answer on the file schemes, and `tests/server_codes.rs` against what they
//! answer on a lock kept by a server.

// Each test file uses the part it needs.
#![allow(dead_code)]

use std::path::Path;

/// A function the header declares: its name, the type it returns, and its
/// doc comment as text.
pub struct Declared {
    pub name: String,
    pub returns_code: bool,
    pub doc: String,
}

/// The functions of `include/lockffi.h`, each with the doc comment just
/// above its declaration.
pub fn declared_functions() -> Vec<Declared> {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/lockffi.h"))
        .expect("read include/lockffi.h");
    let mut functions = Vec::new();
    let mut doc = String::new();
    let mut in_doc = false;
    for line in header.lines() {
        let trimmed = line.trim();
        if trimmed == "/**" {
            in_doc = true;
            doc.clear();
        } else if in_doc && trimmed == "*/" {
            in_doc = false;
        } else if in_doc {
            doc.push_str(trimmed.strip_prefix('*').unwrap_or(trimmed).trim());
            doc.push('\n');
        } else if let Some((before, _)) = line.split_once("(").filter(|_| line.ends_with(");")) {
            if !line.starts_with(' ') && !line.starts_with("typedef") {
                let name = before.rsplit([' ', '*']).next().expect("a name before '('").to_string();
                functions.push(Declared { name, returns_code: before.starts_with("lock_result "), doc: doc.clone() });
            }
        } else if !trimmed.is_empty() {
            doc.clear();
        }
    }
    functions
}

/// The paragraph of `doc` that begins with "Returns:", if any.
pub fn returns_paragraph(doc: &str) -> Option<String> {
    let start = doc.find("Returns:")?;
    let paragraph = doc[start..].split("\n\n").next().unwrap_or_default();
    Some(paragraph.replace('\n', " "))
}

/// The result codes a text names (`LOCK_` words, not the other constants
/// and the liveness values).
pub fn codes_named(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("LOCK_") && word != &"LOCK_WAIT_FOREVER" && !word.starts_with("LOCK_OWNER_"))
        .map(str::to_string)
        .collect()
}

/// The code the header calls `name`.
pub fn code_by_name(name: &str) -> Option<lockffi::lock_result> {
    lockffi::lock_result::ALL.iter().copied().find(|code| format!("{code:?}") == name)
}

/// The codes each function's doc lists after "Returns:", by function.
pub fn returns_lists() -> std::collections::BTreeMap<String, Vec<lockffi::lock_result>> {
    declared_functions()
        .into_iter()
        .filter(|function| function.returns_code)
        .map(|function| {
            let paragraph = returns_paragraph(&function.doc).unwrap_or_default();
            let codes = codes_named(&paragraph).iter().filter_map(|name| code_by_name(name)).collect();
            (function.name, codes)
        })
        .collect()
}

//! The manual pages in `man/` against the code: `lockffi.3` shows every
//! function of the header in its synopsis, lists the codes each returns as
//! the header does, and describes every result code with its number;
//! `lockffi-spec.7` describes every scheme of `lockcore::Scheme::ALL` and
//! every key the parser accepts, naming the schemes of each key that not
//! all take. And `groff` renders both without a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use lockcore::{Error, Lock, Scheme};

fn repository_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repository_file(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The `LOCK_` codes a text names, in order.
fn codes_named(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| {
            word.starts_with("LOCK_ERR_") || lockffi::lock_result::ALL.iter().any(|c| &format!("{c:?}") == word)
        })
        .map(str::to_string)
        .collect()
}

/// Each function of `include/lockffi.h`, with the codes its doc lists
/// after "Returns:" (none for the three that return no code).
fn header_functions() -> BTreeMap<String, Vec<String>> {
    let header = read("include/lockffi.h");
    let mut functions = BTreeMap::new();
    let mut doc = String::new();
    for line in header.lines() {
        let trimmed = line.trim();
        if trimmed == "/**" {
            doc.clear();
        } else if let Some(text) = trimmed.strip_prefix("* ") {
            doc.push_str(text);
            doc.push('\n');
        } else if trimmed == "*" {
            doc.push('\n');
        } else if !line.starts_with([' ', '/', '#', '}']) && !line.starts_with("typedef") && line.ends_with(");") {
            let before = &line[..line.find('(').expect("a declaration")];
            let name = before.rsplit([' ', '*']).next().expect("a name").to_string();
            let returns = doc.find("Returns:").map(|at| &doc[at..]).unwrap_or_default();
            functions.insert(name, codes_named(returns.split("\n\n").next().unwrap_or_default()));
        }
    }
    functions
}

/// The codes `lockffi.3` lists after `.I Returns:` in the section of each
/// function (`.SS name()`), up to the next request.
fn manual_returns(page: &str) -> BTreeMap<String, Vec<String>> {
    let mut lists = BTreeMap::new();
    let mut function = None;
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(name) = line.strip_prefix(".SS ").and_then(|title| title.strip_suffix("()")) {
            function = Some(name.to_string());
        } else if line.starts_with(".SH") {
            function = None;
        } else if line == ".I Returns:" {
            let name = function.clone().unwrap_or_else(|| panic!("a Returns: outside a function's section"));
            let mut text = String::new();
            while let Some(next) = lines.next_if(|l| !l.starts_with('.')) {
                text.push_str(next);
                text.push(' ');
            }
            lists.insert(name, codes_named(&text));
        }
    }
    lists
}

#[test]
fn lockffi_3_has_every_function_in_its_synopsis_with_the_codes_of_the_header() {
    let page = read("man/lockffi.3");
    let functions = header_functions();
    assert!(functions.len() >= 15, "read only {functions:?} from the header");
    let returns = manual_returns(&page);
    let mut problems = Vec::new();
    for (name, header_codes) in &functions {
        let call = format!("{name}(");
        if !page.lines().any(|l| (l.starts_with(".BI ") || l.starts_with(".B ")) && l.contains(&call)) {
            problems.push(format!("{name}: no .B or .BI synopsis line"));
        }
        match returns.get(name) {
            None => problems.push(format!("{name}: no section with \".I Returns:\"")),
            Some(listed) if listed != header_codes => {
                problems.push(format!("{name}: lists {listed:?}, the header {header_codes:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "man/lockffi.3 and include/lockffi.h differ:\n{}", problems.join("\n"));
}

#[test]
fn lockffi_3_describes_every_result_code_with_its_number() {
    let page = read("man/lockffi.3");
    let missing: Vec<String> = lockffi::lock_result::ALL
        .iter()
        .map(|&code| format!(".BR {code:?} \" ({})\"", code as i32))
        .filter(|entry| !page.lines().any(|line| line == entry))
        .collect();
    assert!(missing.is_empty(), "man/lockffi.3 lacks the entries {missing:?}");
}

/// The keys `scheme` takes, as the parser lists them when it refuses one
/// it does not take: the registry's list, the one public way to read it.
fn keys_of(scheme: Scheme) -> Vec<String> {
    let target = match scheme.target_kind() {
        lockcore::TargetKind::Url => "//lockffi-manual/target",
        _ => "/lockffi-manual/target",
    };
    let spec = format!("{}:{target}?lockffi-manual-no-such-key=1", scheme.name());
    let Err(Error::Spec(refused)) = Lock::open(spec.as_bytes()) else {
        panic!("{spec} was not refused as a spec");
    };
    let (_, keys) = refused.reason.split_once(" takes ").unwrap_or_else(|| panic!("no list in {:?}", refused.reason));
    keys.split(", ").map(str::to_string).collect()
}

/// The entries of a `.TP` list: the tag line and the text up to the next
/// entry or section.
fn tagged_entries(page: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        if line != ".TP" {
            continue;
        }
        let tag = lines.next().unwrap_or_default().to_string();
        let mut body = String::new();
        while let Some(next) = lines.peek().filter(|l| *l != &".TP" && !l.starts_with(".SH")) {
            body.push_str(next);
            body.push('\n');
            lines.next();
        }
        entries.push((tag, body));
    }
    entries
}

#[test]
fn lockffi_spec_7_describes_every_scheme_and_every_key() {
    let page = read("man/lockffi-spec.7");
    let entries = tagged_entries(&page);
    let mut problems = Vec::new();
    let mut schemes_of_key: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for &scheme in Scheme::ALL {
        if !entries.iter().any(|(tag, _)| tag == &format!(".BI {}: T", scheme.name())) {
            problems.push(format!("scheme {}: no \".BI {}: T\" entry", scheme.name(), scheme.name()));
        }
        for key in keys_of(scheme) {
            schemes_of_key.entry(key).or_default().push(scheme.name());
        }
    }
    assert!(schemes_of_key.len() >= 10, "read only the keys {schemes_of_key:?}");
    for (key, schemes) in &schemes_of_key {
        // `.BI ttl= duration`, `.BR stale=pid | none`, `... hold= duration`.
        let names_key = |tag: &str| tag.split([' ', '"']).any(|word| word.starts_with(&format!("{key}=")));
        let Some((_, body)) = entries.iter().find(|(tag, _)| names_key(tag)) else {
            problems.push(format!("key {key}: no entry"));
            continue;
        };
        if schemes.len() < Scheme::ALL.len() {
            for scheme in schemes.iter().filter(|scheme| !body.contains(&format!(".BR {scheme} :"))) {
                problems.push(format!("key {key}: its entry does not begin with the scheme {scheme} that takes it"));
            }
        }
    }
    assert!(problems.is_empty(), "man/lockffi-spec.7:\n{}", problems.join("\n"));
}

#[test]
fn groff_renders_the_pages_without_a_warning() {
    for page in ["man/lockffi.3", "man/lockffi-spec.7", "man/lockctl.1"] {
        let mut groff = Command::new("groff");
        groff.args(["-man", "-Tutf8", "-ww", "-z"]).arg(repository_file(page));
        let output = match groff.output() {
            Ok(output) => output,
            Err(e) => {
                assert!(std::env::var_os("CI").is_none(), "CI must install groff-base: {e}");
                println!("skipped: cannot run groff ({e}); Debian: apt-get install groff-base");
                return;
            }
        };
        let warnings = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && warnings.is_empty(), "{groff:?} ({}):\n{warnings}", output.status);
    }
}

//! The examples README.md promises run as written: the tests that run them
//! read them from here, so that the README's text is what runs.

use std::path::Path;

/// The repository's README.md.
pub fn text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The first fenced block of `language` after the line `heading` (a
/// heading of the README, whole, such as "## A C example").
pub fn block_after<'a>(readme: &'a str, heading: &str, language: &str) -> &'a str {
    let section =
        readme.split_once(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("README.md has no '{heading}'")).1;
    let fence = format!("```{language}\n");
    let start =
        section.find(&fence).unwrap_or_else(|| panic!("no ```{language} block after '{heading}'")) + fence.len();
    let length = section[start..].find("```").expect("an unclosed block");
    &section[start..start + length]
}

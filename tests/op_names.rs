//! No op kind is named outside its row in the op tables, its kernels and
//! its C wrapper. The rules both interpreters follow (what backward reads,
//! whether a newborn gradient is assigned, whether a map splits into
//! tasks, what the replay program runs, what capture must check) are
//! columns of the tables in `src/ops/`, so the rest of the library (the
//! backward walk, the replay program, capture, recompute) asks an op's
//! record and never matches on which op it is.
//!
//! Checked: every variant of `Op`, `UnaryFn` (the rows of `unary_fns`) and
//! `BinaryFn` (`src/ops/mod.rs`, `src/ops/functions.rs`), written as `Op::Variant`, `UnaryFn::Variant` or
//! `BinaryFn::Variant`, appears only under `src/ops/` and `src/ffi/ops/`
//! (unit-test modules aside).

use std::collections::BTreeSet;
use std::path::Path;

#[path = "common/src_tree.rs"]
mod src_tree;
use src_tree::rust_files;

/// The variants of `enum <name>` in `text` (a variant line starts with
/// four spaces and a capital letter).
fn enum_variants(text: &str, name: &str) -> BTreeSet<String> {
    let start = text
        .find(&format!("enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name} in src/ops"));
    let body = &text[start..];
    let end = body.find("\n}").expect("the enum ends");
    body[..end]
        .lines()
        .skip(1)
        .filter_map(|l| {
            let rest = l.strip_prefix("    ")?;
            let first = rest.chars().next()?;
            first.is_ascii_uppercase().then(|| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect()
            })
        })
        .collect()
}

/// The variants of the `unary_fns` rows: `Variant, name, reads, ...;`.
fn unary_rows(text: &str) -> BTreeSet<String> {
    let start = text.find("macro_rules! unary_fns").expect("unary_fns");
    let end = start + text[start..].find("pub(crate) use unary_fns;").unwrap();
    text[start..end]
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let (v, rest) = t.split_once(", ")?;
            let ok = v.chars().next()?.is_ascii_uppercase()
                && v.chars().all(|c| c.is_ascii_alphanumeric())
                && (rest.contains(", x, ") || rest.contains(", y, "));
            ok.then(|| v.to_string())
        })
        .collect()
}

/// Every `<kind>::<Variant>` in `code` with Variant among `variants`.
fn named_ops(code: &str, kind: &str, variants: &BTreeSet<String>) -> Vec<String> {
    let pattern = format!("{kind}::");
    let mut found = Vec::new();
    for (at, _) in code.match_indices(&pattern) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // e.g. `OneOp::`
        }
        let name: String = code[at + pattern.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if variants.contains(&name) {
            found.push(format!("{kind}::{name}"));
        }
    }
    found
}

/// `text` without its unit-test module (from `#[cfg(test)]` before a
/// `mod`, to the end of the file, where such modules sit here).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    }
}

#[test]
fn no_op_kind_is_named_outside_the_op_tables() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ops = std::fs::read_to_string(root.join("src/ops/mod.rs")).unwrap();
    let functions = std::fs::read_to_string(root.join("src/ops/functions.rs")).unwrap();
    let kinds = [
        ("Op", enum_variants(&ops, "Op")),
        ("BinaryFn", enum_variants(&functions, "BinaryFn")),
        ("UnaryFn", unary_rows(&functions)),
    ];
    // The parsers found the tables (a renamed table must not pass empty).
    for (kind, variants) in &kinds {
        assert!(variants.len() >= 8, "{kind}: only {variants:?} found");
    }
    assert!(kinds[0].1.contains("Embedding") && kinds[2].1.contains("Gelu"));

    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut offenders = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.starts_with("src/ops/") || rel.starts_with("src/ffi/ops/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (kind, variants) in &kinds {
            for name in named_ops(without_tests(&text), kind, variants) {
                offenders.push(format!("{rel}: {name}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "op kinds named outside src/ops and src/ffi/ops (make the rule a column of the op \
         tables instead): {offenders:?}"
    );
}

#[test]
fn the_scan_finds_a_named_op() {
    let gelu: BTreeSet<String> = ["Gelu".to_string()].into();
    let code = "let assign = fresh && f == UnaryFn::Gelu;\nlet k = OneOp::Gelu;";
    assert_eq!(named_ops(code, "UnaryFn", &gelu), ["UnaryFn::Gelu"]);
    let tail = "fn a() {}\n#[cfg(test)]\nmod tests { UnaryFn::Gelu }";
    assert!(named_ops(without_tests(tail), "UnaryFn", &gelu).is_empty());
}

//! Only `src/context/mod.rs` and `src/context/access.rs` touch the fields
//! of `Context`. Every other file, the context's own rooms (capture,
//! replay programs, the table, handles, statistics) included, goes through
//! the methods of `access.rs`, named for what the caller means, so what
//! the rest of the crate may do to the context's state is listed in one
//! place.
//!
//! The scan: the field names come from `struct Context { .. }` in
//! `src/context/mod.rs`. In every other `.rs` file under `src/`, a use is
//! `self.<field>` inside an `impl Context` block (one a macro writes
//! included), or `<name>.<field>`
//! where the file binds `<name>` to a Context (`name: &Context`,
//! `name: &mut Context`, `name = Context::new()`). A method call
//! (`self.<field>(..)`) is not a field use.

use std::path::{Path, PathBuf};

#[path = "common/src_tree.rs"]
mod src_tree;
use src_tree::rust_files;

/// The field names of `struct Context { .. }` in `text`.
fn context_fields(text: &str) -> Vec<String> {
    let mut lines = text.lines();
    let found = lines.by_ref().any(|l| {
        let t = l.trim_start();
        t.starts_with("pub struct Context {") || t.starts_with("struct Context {")
    });
    assert!(found, "no `struct Context {{` in src/context/mod.rs");
    let mut fields = Vec::new();
    for line in lines {
        let t = line.trim_start();
        if t.starts_with('}') {
            break;
        }
        if t.starts_with("//") || t.starts_with('#') {
            continue;
        }
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = match t.strip_prefix("pub(") {
            Some(rest) => rest.split_once(')').map_or(t, |(_, r)| r.trim_start()),
            None => t,
        };
        if let Some((name, _)) = t.split_once(':') {
            let name = name.trim();
            if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                fields.push(name.to_string());
            }
        }
    }
    fields
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The names `text` binds to a Context: parameters typed `&Context` or
/// `&mut Context`, and variables made by `Context::new()`.
fn context_bindings(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for pat in [": &Context", ": &mut Context"] {
        for (at, _) in text.match_indices(pat) {
            let rest = &text[at + pat.len()..];
            if rest.starts_with(is_ident) {
                continue;
            }
            let before: String = text[..at]
                .chars()
                .rev()
                .take_while(|&c| is_ident(c))
                .collect();
            names.push(before.chars().rev().collect());
        }
    }
    for (at, _) in text.match_indices("= Context::new()") {
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let lhs = text[line_start..at].trim();
        let lhs = lhs.strip_prefix("let ").unwrap_or(lhs);
        let lhs = lhs.strip_prefix("mut ").unwrap_or(lhs);
        if lhs.chars().all(is_ident) && !lhs.is_empty() {
            names.push(lhs.to_string());
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names.sort();
    names.dedup();
    names
}

/// Whether `code` holds `<receiver>.<field>` as a field use (not a
/// method call, not part of a longer name).
fn uses_field(code: &str, receiver: &str, field: &str) -> bool {
    let needle = format!("{receiver}.{field}");
    code.match_indices(&needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + needle.len()..].chars().next();
        !before.is_some_and(|c| is_ident(c) || c == '.')
            && !after.is_some_and(|c| is_ident(c) || c == '(')
    })
}

/// `label:line: code` for every use of a Context field in `text`.
fn field_uses(label: &str, text: &str, fields: &[String]) -> Vec<String> {
    let bindings = context_bindings(text);
    let mut found = Vec::new();
    // The indentation of the open `impl Context {` (one inside a macro is
    // indented): the block ends at the `}` with the same indentation.
    let mut open_impl: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if t.starts_with("impl Context {") {
            open_impl = Some(indent);
        } else if t.starts_with('}') && open_impl == Some(indent) {
            open_impl = None;
        }
        let in_context_impl = open_impl.is_some();
        let code = line.split("//").next().unwrap_or("");
        let mut receivers: Vec<&str> = bindings.iter().map(String::as_str).collect();
        if in_context_impl {
            receivers.push("self");
        }
        let hit = receivers
            .iter()
            .any(|r| fields.iter().any(|f| uses_field(code, r, f)));
        if hit {
            found.push(format!("{label}:{}: {}", n + 1, line.trim()));
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn only_context_mod_and_access_touch_context_fields() {
    let root = src();
    let mod_rs = root.join("context/mod.rs");
    let fields = context_fields(&std::fs::read_to_string(&mod_rs).unwrap());
    for known in ["store", "table", "tape", "capture", "recompute"] {
        assert!(
            fields.iter().any(|f| f == known),
            "the field parser no longer finds `{known}` in {fields:?}"
        );
    }
    let allowed = [mod_rs, root.join("context/access.rs")];
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    assert!(
        paths.len() > 50,
        "the scan found only {} files",
        paths.len()
    );
    let mut offenders = Vec::new();
    for path in paths.iter().filter(|p| !allowed.contains(p)) {
        let text = std::fs::read_to_string(path).unwrap();
        let label = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        offenders.extend(field_uses(&format!("src/{label}"), &text, &fields));
    }
    assert!(
        offenders.is_empty(),
        "Context's fields used outside src/context/mod.rs and src/context/access.rs \
         (add a method to access.rs named for what the caller means, and call it):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_scan_catches_a_planted_field_use() {
    let fields = context_fields(
        "/// Doc.\npub struct Context {\n    id: u32,\n    /// Rows.\n    table: Vec<Row>,\n    \
         pub(crate) store: Storage,\n}\n",
    );
    assert_eq!(fields, ["id", "table", "store"]);
    let planted = "impl Other {\n    fn f(&self) -> usize { self.table.len() }\n}\n\
                   impl Context {\n    fn g(&self) -> usize {\n        // self.table is fine here\n        \
                   self.table()\n    }\n    fn h(&self) -> usize {\n        self.table.len()\n    }\n}\n\
                   fn k(ctx: &mut Context, other: &Other) -> u32 {\n    other.id + ctx.id\n}\n\
                   fn m() {\n    let mut c = Context::new();\n    c.store.reset();\n    c.id();\n}\n\
                   macro_rules! m {\n    () => {\n        impl Context {\n            \
                   fn n(&self) -> u32 {\n                self.id\n            }\n        }\n    };\n}\n";
    assert_eq!(
        field_uses("planted.rs", planted, &fields),
        [
            "planted.rs:10: self.table.len()",
            "planted.rs:14: other.id + ctx.id",
            "planted.rs:18: c.store.reset();",
            "planted.rs:25: self.id",
        ]
    );
}

//! Context hands out no other module's internals whole: no method of
//! `impl Context` returns a `&mut` to a struct, defined outside
//! `src/context/`, that has public fields. Such a struct is driven through
//! its own methods instead (the optimizer, recompute, the gradient plan,
//! grad-ready and the parameter registry), so what a caller may do to it
//! is named where the struct is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "common/src_tree.rs"]
mod src_tree;
use src_tree::rust_files;

/// Structs with at least one `pub` field (any visibility of `pub`), by
/// name, with the file that defines them.
fn structs_with_public_fields(files: &[(PathBuf, String)]) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    for (path, text) in files {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let t = line.trim_start();
            let Some(rest) = t
                .strip_prefix("pub(crate) struct ")
                .or_else(|| t.strip_prefix("pub struct "))
                .or_else(|| t.strip_prefix("struct "))
            else {
                continue;
            };
            if !rest.trim_end().ends_with('{') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            for field in lines.by_ref() {
                let f = field.trim_start();
                if f.starts_with('}') {
                    break;
                }
                if f.starts_with("pub ") || f.starts_with("pub(") {
                    found.insert(name.clone(), path.clone());
                }
            }
        }
    }
    found
}

#[test]
fn no_context_method_hands_out_another_modules_public_fields() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    let open = structs_with_public_fields(&files);
    assert!(
        open.contains_key("TensorEntry"),
        "the scan no longer finds structs with public fields"
    );
    let context_dir = root.join("context");
    let mut offenders = Vec::new();
    for (path, text) in &files {
        let mut in_context_impl = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("impl Context {") {
                in_context_impl = true;
            } else if line.starts_with('}') {
                in_context_impl = false;
            }
            let t = line.trim_start();
            if !in_context_impl || !(t.starts_with("pub") || t.starts_with("fn ")) {
                continue;
            }
            let Some((_, ret)) = t.split_once("-> ") else {
                continue;
            };
            for (name, home) in &open {
                let outside = !home.starts_with(&context_dir);
                if outside && ret.contains(&format!("&mut {name}")) {
                    offenders.push(format!("{}:{}: {}", path.display(), n + 1, t));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "Context methods return a &mut to another module's struct with public fields \
         (give that struct methods named for what the caller does):\n{}",
        offenders.join("\n")
    );
}

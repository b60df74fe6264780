//! The README's user guide stays true to the code: its example is
//! c_examples/guide.c verbatim (the file CI compiles and runs), and its
//! table of ops names every op of tests/c/ops.def (which a test holds to
//! the header).

use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced block that follows the line containing `marker`.
fn block_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("README.md has no line with {marker:?}"));
    let rest = &text[at..];
    let open = rest
        .find("\n```c\n")
        .expect("a ```c block after the marker")
        + 6;
    let close = rest[open..]
        .find("\n```\n")
        .expect("the block's closing fence");
    &rest[open..open + close + 1]
}

#[test]
fn readme_example_is_guide_c_verbatim() {
    let readme = read("README.md");
    let file = read("c_examples/guide.c");
    let block = block_after(&readme, "<!-- c_examples/guide.c, verbatim");
    if block != file {
        let line = block
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(block.lines().count().min(file.lines().count()));
        panic!(
            "README.md's example differs from c_examples/guide.c at line {}: copy the file into the README",
            line + 1
        );
    }
}

#[test]
fn readme_lists_every_op() {
    let readme = read("README.md");
    let table = &readme[readme
        .find("\n## Ops\n")
        .expect("README.md has a section ## Ops")..];
    let table = &table[..table[1..].find("\n## ").map_or(table.len(), |e| e + 1)];
    let ops = read("tests/c/ops.def");
    let mut missing = Vec::new();
    let mut n = 0;
    for line in ops.lines() {
        let Some(rest) = line.trim_start().strip_prefix("AG_OP(") else {
            continue;
        };
        let name = rest.split([',', ' ']).next().unwrap_or("");
        if name == "name" {
            continue; // the format line of the file's comment
        }
        n += 1;
        if !table.contains(&format!("`ag_{name}`")) {
            missing.push(format!("ag_{name}"));
        }
    }
    assert!(n > 30, "found only {n} AG_OP rows in tests/c/ops.def");
    assert!(
        missing.is_empty(),
        "README.md's ## Ops section does not list {missing:?}"
    );
}

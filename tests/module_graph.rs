//! src/'s import graph stays untangled: `scripts/module_graph.py` prints the
//! cycle groups of src/; none may contain an `ffi` module, and the largest
//! may hold at most [`MAX_CYCLE_LINES`] lines, so a change cannot grow a
//! knot unseen.
//!
//! The C boundary: no cycle group may contain an `ffi` module. The foundation
//! of src/ffi (guard, handle, pointers, registry, version) must never import
//! an entry-point file, and entry-point files never import each other, so a
//! new C function cannot tie the boundary back into one knot.

use std::path::Path;
use std::process::Command;

/// The script's output: (cycle group header, its member lines) per group.
fn cycle_groups(output: &str) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for line in output.lines() {
        if line.starts_with("cycle group") {
            groups.push((line.to_string(), Vec::new()));
        } else if let (Some(g), Some(member)) = (groups.last_mut(), line.strip_prefix("  ")) {
            g.1.push(member.to_string());
        }
    }
    groups
}

fn module_graph() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("scripts/module_graph.py"))
        .arg(root.join("src"))
        .output()
        .expect("python3 runs scripts/module_graph.py");
    assert!(
        out.status.success(),
        "scripts/module_graph.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The most lines the largest cycle group of src/ may hold. The groups
/// that remain are natural: blas, its split products, the pool and the
/// profiler share the product path; error and shape describe each other.
/// Context imports its rooms' plain records (capture state, table rows,
/// memory figures) and no room is imported back; recompute, the
/// optimizer, the gradient plan, grad-ready and the parameter registry
/// take what they need as arguments and import no Context.
const MAX_CYCLE_LINES: usize = 1250;

#[test]
fn the_largest_cycle_group_stays_small() {
    let output = module_graph();
    let lines: usize = output
        .lines()
        .find_map(|l| l.strip_prefix("largest_scc_lines="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no largest_scc_lines in:\n{output}"));
    assert!(
        lines <= MAX_CYCLE_LINES,
        "src/'s largest import cycle holds {lines} lines, more than {MAX_CYCLE_LINES}: \
         let the new code take what it needs as arguments instead of importing \
         its caller back (python3 scripts/module_graph.py shows the groups):\n{output}"
    );
}

#[test]
fn no_cycle_group_contains_an_ffi_module() {
    let output = module_graph();
    // The script really ran over src/ (so an empty output cannot pass).
    assert!(
        output.contains("largest_scc_lines="),
        "unexpected output:\n{output}"
    );
    let bad: Vec<String> = cycle_groups(&output)
        .into_iter()
        .filter(|(_, members)| {
            members
                .iter()
                .any(|m| m == "ffi" || m.starts_with("ffi ") || m.starts_with("ffi::"))
        })
        .map(|(head, members)| format!("{head}\n  {}", members.join("\n  ")))
        .collect();
    assert!(
        bad.is_empty(),
        "src/ffi has an import cycle (move what both sides need into a foundation \
         module such as ffi/pointers.rs, and import it through ffi/prelude.rs):\n{}",
        bad.join("\n")
    );
}

/// The parser above recognises a cycle group when there is one (the rest of
/// src/ has some), so the test cannot pass by parsing nothing.
#[test]
fn the_cycle_group_parser_sees_groups() {
    let sample = "src/: 2 files, 10 lines\ncycle group of 2 files, 10 lines:\n  \
                  ffi (5) -> ffi::ops\n  ffi::ops (5) -> ffi\nlargest_scc_lines=10\n";
    let groups = cycle_groups(sample);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].1, ["ffi (5) -> ffi::ops", "ffi::ops (5) -> ffi"]);
}

//! Keeps every file under src/ at most 600 lines (test files 700): a file that grows past it
//! holds more than one idea and should be split into a folder of rooms
//! (see src/arena/ or src/context/). `scripts/module_graph.py` prints the
//! import graph those rooms form.

use std::path::Path;

#[path = "common/src_tree.rs"]
mod src_tree;
use src_tree::rust_files;

/// The most lines of a file under src/ that is not a test file.
const MAX_LINES: usize = 600;
/// The most lines of a test file (`tests.rs`, or a file under a `tests/`
/// folder): tests of one idea may run longer than its code.
const MAX_TEST_LINES: usize = 700;

fn is_test_file(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == "tests.rs")
        || p.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn no_file_under_src_exceeds_its_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 10,
        "found only {} files under src/",
        files.len()
    );
    let mut over: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).expect("read").lines().count();
            let limit = if is_test_file(p) {
                MAX_TEST_LINES
            } else {
                MAX_LINES
            };
            (n > limit).then(|| format!("{} ({n} lines, limit {limit})", p.display()))
        })
        .collect();
    over.sort();
    assert!(
        over.is_empty(),
        "files over their limit ({MAX_LINES} lines, {MAX_TEST_LINES} for test files; split them by idea): {over:?}"
    );
}

//! Keeps every file under src/ at most 700 lines: a file that grows past it
//! holds more than one idea and should be split into a folder of rooms
//! (see src/arena/ or src/context/). `scripts/module_graph.py` prints the
//! import graph those rooms form.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_under_src_exceeds_700_lines() {
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
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    over.sort();
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines (split them by idea): {over:?}"
    );
}

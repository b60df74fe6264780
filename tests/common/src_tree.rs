//! The library's source files, for the tests that read the code itself.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively, in directory order.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

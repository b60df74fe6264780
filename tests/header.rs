//! The committed C header must equal what cbindgen generates from the
//! source. `AG_WRITE_HEADER=1 cargo test --test header` (or `make header`)
//! rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let path = root.join("include/arenagrad.h");
    if std::env::var_os("AG_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write header");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/arenagrad.h is stale: run `make header` and commit the result"
    );
}

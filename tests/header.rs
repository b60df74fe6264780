//! The committed C headers must equal what cbindgen generates from the
//! source. `AG_WRITE_HEADER=1 cargo test --test header` (or `make header`)
//! rewrites them:
//! * include/arenagrad.h, the public header (installed by `make install`);
//! * tests/c/ag_test_hooks.h, the declarations of the test-only entry
//!   points (`ag_test_*`), which cbindgen.toml keeps out of the public
//!   header. They are cut from a second cbindgen run that includes them.

use std::path::Path;

const HOOKS: &[&str] = &["ag_test_panic", "ag_test_fail_allocation"];

fn generate(config: cbindgen::Config) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut out);
    String::from_utf8(out).expect("cbindgen wrote UTF-8")
}

fn config() -> cbindgen::Config {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml")
}

/// The declaration of each test hook with the comment lines above it, from
/// a header generated with the hooks included.
fn hooks_header() -> String {
    let mut cfg = config();
    cfg.export.exclude.retain(|n| !HOOKS.contains(&n.as_str()));
    let full = generate(cfg);
    let lines: Vec<&str> = full.lines().collect();
    let mut body = String::new();
    for hook in HOOKS {
        let at = lines
            .iter()
            .position(|l| l.contains(&format!(" {hook}(")))
            .unwrap_or_else(|| panic!("{hook} is not in cbindgen's output"));
        let mut first = at;
        while first > 0 && lines[first - 1].starts_with("//") {
            first -= 1;
        }
        for l in &lines[first..=at] {
            body.push_str(l);
            body.push('\n');
        }
        body.push('\n');
    }
    format!(
        "/*\n * Test-only entry points of libarenagrad (panic and allocation-failure\n \
         * injection) for the C tests. Not part of the public API and not\n \
         * installed. Generated from src/ffi by tests/header.rs; do not edit by\n \
         * hand (run `make header`).\n */\n\n\
         #ifndef AG_TEST_HOOKS_H\n#define AG_TEST_HOOKS_H\n\n\
         #include \"arenagrad.h\"\n\n\
         #ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n\
         {body}\
         #ifdef __cplusplus\n}}  // extern \"C\"\n#endif\n\n\
         #endif /* AG_TEST_HOOKS_H */\n"
    )
}

fn check_or_write(rel: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if std::env::var_os("AG_WRITE_HEADER").is_some() {
        std::fs::write(&path, generated).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{rel} is stale: run `make header` and commit the result"
    );
}

#[test]
fn committed_header_is_fresh() {
    let public = generate(config());
    for hook in HOOKS {
        assert!(!public.contains(hook), "{hook} leaked into arenagrad.h");
    }
    check_or_write("include/arenagrad.h", &public);
}

#[test]
fn committed_test_hooks_header_is_fresh() {
    check_or_write("tests/c/ag_test_hooks.h", &hooks_header());
}

/// Every macro and type the public header defines carries the library's
/// prefix, and no comment carries Rust doc-link syntax.
#[test]
fn public_header_names_are_prefixed() {
    let h = generate(config());
    for line in h.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            assert!(
                name.starts_with("AG_") || name == "ARENAGRAD_H",
                "unprefixed macro: {line}"
            );
        }
        // `typedef struct ag_x {`, `typedef int32_t ag_status;`, `} ag_x;`
        let type_name = if let Some(rest) = t.strip_prefix("typedef ") {
            let words: Vec<&str> = rest.trim_end_matches(';').split_whitespace().collect();
            match words.as_slice() {
                [.., name, "{"] => Some(*name),
                [.., name] => Some(*name),
                [] => None,
            }
        } else {
            t.strip_prefix("} ")
                .filter(|r| r.ends_with(';'))
                .map(|r| r.trim_end_matches(';'))
        };
        if let Some(name) = type_name {
            assert!(name.starts_with("ag_"), "unprefixed type: {line}");
        }
        assert!(
            !line.contains("[`") && !line.contains("`]"),
            "Rust doc-link syntax in the header: {line}"
        );
    }
}

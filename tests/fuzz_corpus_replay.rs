//! Replays the committed fuzz corpora (`fuzz/corpus/ffi_ops`,
//! `fuzz/corpus/checkpoint_load`, `fuzz/corpus/safetensors_load`) through the same decoding and checking
//! logic as the cargo-fuzz targets, without libFuzzer, on the stable
//! toolchain (SQLite's fuzzcheck idea): every input that once found a bug,
//! or reached new code, keeps being run by `cargo test`.
//!
//! The `train_full_args` corpus is not replayed here: its target calls C
//! code (c_examples/train_full/args.c) that only the fuzz crate's build script
//! compiles. `scripts/fuzz.sh replay` runs it through the fuzz binary
//! instead (`-runs=0` over the corpus).
//!
//! `AG_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_corpus_replay` rewrites the
//! checkpoint and safetensors seed files (after a format change).

#[path = "../fuzz/src/lib.rs"]
mod fuzz_logic;

use arenagrad::ffi::*;
use fuzz_logic::ffi_ops::ids;
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The committed seed `name` of `target`'s corpus holds `bytes` (or, with
/// AG_WRITE_FUZZ_SEEDS set, is rewritten to hold them).
fn seed_is_fresh(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let path = dir.join(name);
    if std::env::var_os("AG_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, bytes).unwrap();
    } else {
        let old = std::fs::read(&path).unwrap_or_default();
        assert!(
            old == bytes,
            "{} is stale: run AG_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_corpus_replay",
            path.display()
        );
    }
}

#[test]
fn ffi_ops_corpus_replays() {
    let files = corpus("ffi_ops");
    assert!(!files.is_empty(), "empty ffi_ops corpus");
    let (mut calls, mut ok) = (0, 0);
    let mut by_id = vec![(0u64, 0u64); 256];
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let Ok(r) = std::panic::catch_unwind(|| fuzz_logic::run_ffi_ops(&data)) else {
            panic!("ffi_ops input {} fails", f.display());
        };
        calls += r.calls;
        ok += r.ok;
        for (total, (n, n_ok)) in by_id.iter_mut().zip(r.by_id) {
            total.0 += n;
            total.1 += n_ok;
        }
    }
    println!(
        "ffi_ops: {} inputs, {calls} C API calls ({ok} returned OK)",
        files.len()
    );
    // The corpus keeps meaning something: every id of the alphabet is in
    // it, and (for the ids that make a C call with a status) reaches a
    // successful call, except loading checkpoint bytes, which the
    // checkpoint_load target covers with valid checkpoints.
    let mut missing = Vec::new();
    for &(id, name) in ids::ALL {
        let (n, n_ok) = by_id[id as usize];
        println!("  {name:<26} {n:>5} calls, {n_ok:>5} OK");
        let status_free = (ids::CONTEXT_FREE..=ids::FORGED_CONTEXT).contains(&id);
        if n == 0 || (n_ok == 0 && !status_free && id != ids::CHECKPOINT_LOAD_BYTES) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "fuzz/corpus/ffi_ops never reaches (a successful call of) {missing:?}: \
         add an input, e.g. by fuzzing (scripts/fuzz.sh keeps inputs with new coverage)"
    );
    let mut seen = std::collections::BTreeSet::new();
    for &(id, name) in ids::ALL {
        assert!(seen.insert(id), "{name}: id {id:#04x} given twice");
    }
}

/// The functions of the header the table gives no fuzz id: deprecated
/// aliases of renamed functions, which forward to the new name whose id
/// covers them (kept until 0.2). Asserts that the header declares each one
/// deprecated, so `none` cannot excuse a function that needs an id.
fn deprecated_aliases() -> Vec<&'static str> {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/arenagrad.h"))
            .unwrap();
    let aliases: Vec<&str> = ids::FUNCTIONS
        .iter()
        .filter(|f| f.id.is_none() && !f.name.starts_with("ag_test_"))
        .map(|f| f.name)
        .collect();
    for a in &aliases {
        let deprecated = header
            .lines()
            .any(|l| l.starts_with("AG_DEPRECATED(") && l.contains(&format!(" {a}(")));
        assert!(
            deprecated,
            "{a}: tests/common/c_functions.rs gives it no fuzz id, which only a \
             deprecated alias may lack: give it an id in fuzz/src/ffi_ops/ids.rs"
        );
    }
    aliases
}

/// The C functions the public header declares.
fn header_functions() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/arenagrad.h");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut names = Vec::new();
    for line in text.lines() {
        // A declaration starts at column 0 with its return type.
        // A deprecated alias's declaration starts with AG_DEPRECATED("...").
        let line = match line.strip_prefix("AG_DEPRECATED(") {
            Some(r) => r.split_once(") ").map_or("", |(_, decl)| decl),
            None => line,
        };
        if line.starts_with([' ', '/', '#', '*', '}', '{']) || !line.contains('(') {
            continue;
        }
        let head = &line[..line.find('(').unwrap()];
        let name = head.rsplit([' ', '*']).next().unwrap_or("");
        if name.starts_with("ag_") {
            names.push(name.to_string());
        }
    }
    names
}

/// Every exported function has an id in the fuzz alphabet (its `fuzz:`
/// cell in tests/common/c_functions.rs, from which ids::FUNCTIONS is
/// generated), and the harness really calls it: the table generates its
/// arm (`fuzz: ID => method`), or its name appears in fuzz/src/ffi_ops
/// outside a string.
#[test]
fn every_header_function_has_a_fuzz_id() {
    let fns = header_functions();
    assert!(fns.len() > 60, "parsed only {} functions", fns.len());
    assert!(
        ids::FUNCTIONS.len() >= 100
            && ids::FUNCTIONS.iter().filter(|f| f.arm.is_some()).count() >= 20,
        "ids::FUNCTIONS has too few rows, or too few generated arms"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/src/ffi_ops");
    // The shared helpers (status names, last errors) count as calls too.
    let mut code = std::fs::read_to_string(dir.join("../lib.rs")).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "ids.rs" {
            code += &std::fs::read_to_string(&p).unwrap();
        }
    }
    let called = |name: &str| {
        code.match_indices(name).any(|(at, _)| {
            let before = code[..at].chars().last().unwrap_or(' ');
            let after = code[at + name.len()..].chars().next().unwrap_or(' ');
            before != '"'
                && !before.is_alphanumeric()
                && before != '_'
                && !after.is_alphanumeric()
                && after != '_'
        })
    };
    let aliases = deprecated_aliases();
    let mut missing = Vec::new();
    for f in &fns {
        if aliases.contains(&f.as_str()) {
            continue;
        }
        let rows: Vec<&ids::Function> = ids::FUNCTIONS.iter().filter(|r| r.name == f).collect();
        match rows.as_slice() {
            [] => missing.push(format!("{f}: no row in tests/common/c_functions.rs")),
            [r] if r.arm.is_none() && !called(f) => missing.push(format!(
                "{f}: fuzz/src/ffi_ops never calls it (write the call in the arm of \
                 its id, or give its fuzz: cell `=> method` when a standard one fits)"
            )),
            [_] => {}
            _ => missing.push(format!(
                "{f}: {} rows in tests/common/c_functions.rs",
                rows.len()
            )),
        }
    }
    for r in ids::FUNCTIONS {
        if !r.name.starts_with("ag_test_") && !fns.iter().any(|f| f == r.name) {
            missing.push(format!(
                "{}: a row of tests/common/c_functions.rs but not in the header",
                r.name
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "the ffi_ops fuzz alphabet does not cover the header: {missing:#?}\n\
         give each new function a fuzz: cell naming an id of fuzz/src/ffi_ops/ids.rs \
         (a new one in your range) and an arm in FfiOps::call (generated by `=> method`)"
    );
}

/// Every id of the alphabet has an arm in `FfiOps::call` (one generated
/// from the table, or one written there): a call of an id without one
/// panics, naming it.
#[test]
fn every_id_has_an_arm() {
    let mut missing = Vec::new();
    for &(id, name) in ids::ALL {
        if std::panic::catch_unwind(|| fuzz_logic::run_ffi_ops(&[id])).is_err() {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "one call of each of these ids (and no argument bytes) fails: {missing:?}"
    );
}

/// Every byte decodes to an id of the alphabet, and an id to itself (so
/// the committed corpus keeps the meaning of its id bytes).
#[test]
fn every_byte_is_a_call() {
    for b in 0..=255u8 {
        let id = ids::decode(b);
        assert!(
            ids::ALL.iter().any(|&(i, _)| i == id),
            "byte {b:#04x} -> {id:#04x}"
        );
        if ids::ALL.iter().any(|&(i, _)| i == b) {
            assert_eq!(id, b, "an id byte changed meaning");
        }
    }
}

#[test]
fn checkpoint_load_corpus_replays() {
    let files = corpus("checkpoint_load");
    assert!(!files.is_empty(), "empty checkpoint_load corpus");
    let mut by_status = std::collections::BTreeMap::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let st = std::panic::catch_unwind(|| fuzz_logic::run_checkpoint_load(&data))
            .unwrap_or_else(|_| panic!("checkpoint_load input {} fails", f.display()));
        *by_status.entry(fuzz_logic::status_name(st)).or_insert(0) += 1;
    }
    println!(
        "checkpoint_load: {} inputs, statuses {by_status:?}",
        files.len()
    );
}

/// The seed checkpoints in the corpus are what the library writes today,
/// and each one gets the status it was made for.
#[test]
fn checkpoint_seeds_are_fresh() {
    for (name, bytes) in fuzz_logic::checkpoint_seeds() {
        seed_is_fresh("checkpoint_load", name, &bytes);
        let want = match name {
            "seed_adamw_user" | "seed_adamw" => AG_STATUS_OK,
            "seed_adamw_big_user" => AG_STATUS_INVALID_ARGUMENT,
            _ => AG_STATUS_CHECKPOINT_MISMATCH,
        };
        assert_eq!(fuzz_logic::run_checkpoint_load(&bytes), want, "{name}");
    }
}

/// The harness's CRC is the format's: fixing the CRC of an intact
/// checkpoint changes nothing.
#[test]
fn harness_crc_matches_the_format() {
    for (name, bytes) in fuzz_logic::checkpoint_seeds() {
        let body = bytes.len() - 4;
        assert_eq!(
            fuzz_logic::crc32(&bytes[..body]).to_le_bytes(),
            bytes[body..],
            "{name}"
        );
    }
}

#[test]
fn safetensors_load_corpus_replays() {
    let files = corpus("safetensors_load");
    assert!(!files.is_empty(), "empty safetensors_load corpus");
    let mut by_status = std::collections::BTreeMap::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let st = std::panic::catch_unwind(|| fuzz_logic::run_safetensors_load(&data))
            .unwrap_or_else(|_| panic!("safetensors_load input {} fails", f.display()));
        *by_status.entry(st).or_insert(0) += 1;
    }
    println!(
        "safetensors_load: {} inputs, statuses {by_status:?}",
        files.len()
    );
    for st in [
        AG_STATUS_OK,
        AG_STATUS_CHECKPOINT_CORRUPT,
        AG_STATUS_CHECKPOINT_MISMATCH,
    ] {
        assert!(
            by_status.contains_key(&st),
            "fuzz/corpus/safetensors_load has no input that gets status {st}"
        );
    }
}

/// The seed files in the corpus are what the library writes today (or the
/// hand-made files), and each one gets the status it was made for.
#[test]
fn safetensors_seeds_are_fresh() {
    for (name, bytes) in fuzz_logic::safetensors_seeds() {
        seed_is_fresh("safetensors_load", name, &bytes);
        let want = match name {
            "seed_saved" | "seed_metadata_unsorted" | "seed_f16" => AG_STATUS_OK,
            "seed_i16" => AG_STATUS_CHECKPOINT_CORRUPT,
            _ => AG_STATUS_CHECKPOINT_MISMATCH,
        };
        assert_eq!(fuzz_logic::run_safetensors_load(&bytes), want, "{name}");
    }
}

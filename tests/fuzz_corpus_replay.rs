//! Replays the committed fuzz corpora (`fuzz/corpus/ffi_ops`,
//! `fuzz/corpus/checkpoint_load`) through the same decoding and checking
//! logic as the cargo-fuzz targets, without libFuzzer, on the stable
//! toolchain (SQLite's fuzzcheck idea): every input that once found a bug,
//! or reached new code, keeps being run by `cargo test`.
//!
//! The `train_full_args` corpus is not replayed here: its target calls C
//! code (c_examples/train_full.c) that only the fuzz crate's build script
//! compiles. `scripts/fuzz.sh replay` runs it through the fuzz binary
//! instead (`-runs=0` over the corpus).
//!
//! `AG_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_corpus_replay` rewrites the
//! checkpoint seed files (after a checkpoint format change).

#[path = "../fuzz/src/lib.rs"]
mod fuzz_logic;

use arenagrad::ffi::*;
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

#[test]
fn ffi_ops_corpus_replays() {
    let files = corpus("ffi_ops");
    assert!(!files.is_empty(), "empty ffi_ops corpus");
    let (mut calls, mut ok) = (0, 0);
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| fuzz_logic::run_ffi_ops(&data));
        match r {
            Ok((c, k)) => {
                calls += c;
                ok += k;
            }
            Err(_) => panic!("ffi_ops input {} fails", f.display()),
        }
    }
    println!(
        "ffi_ops: {} inputs, {calls} C API calls ({ok} returned OK)",
        files.len()
    );
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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/checkpoint_load");
    let write = std::env::var_os("AG_WRITE_FUZZ_SEEDS").is_some();
    for (name, bytes) in fuzz_logic::checkpoint_seeds() {
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let old = std::fs::read(&path).unwrap_or_default();
            assert!(
                old == bytes,
                "{} is stale: run AG_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_corpus_replay",
                path.display()
            );
        }
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

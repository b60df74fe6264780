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

/// The `fuzz:` column of the one table of C functions
/// (tests/common/c_functions.rs): each function's id, or why it has none.
/// An id the alphabet does not define does not compile.
#[allow(clippy::vec_init_then_push)] // see the comment in the macro
fn table_fuzz_ids() -> Vec<(&'static str, Result<u8, &'static str>)> {
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($fuzz_why:literal))?,
            null: $null:ident($($null_cell:tt)*),
            contract: $contract:ident($($contract_cell:tt)*) $(, $($more_cells:tt)*)?
        })*) => {{
            // Pushed one by one: a row may carry #[cfg], which vec![] cannot.
            let mut rows = Vec::new();
            $( $(#[$attr])* rows.push((stringify!($name), fuzz_id!($fuzz $(($fuzz_why))?))); )*
            rows
        }};
    }
    macro_rules! fuzz_id {
        (none($why:literal)) => {
            Err($why)
        };
        ($id:ident) => {
            Ok(ids::$id)
        };
    }
    include!("common/c_functions.rs")
}

/// The functions of the header the table gives no fuzz id: deprecated
/// aliases of renamed functions, which forward to the new name whose id
/// covers them (kept until 0.2). Asserts that the header declares each one
/// deprecated, so `none` cannot excuse a function that needs an id.
fn deprecated_aliases() -> Vec<&'static str> {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/arenagrad.h"))
            .unwrap();
    let aliases: Vec<&str> = table_fuzz_ids()
        .into_iter()
        .filter(|(name, id)| id.is_err() && !name.starts_with("ag_test_"))
        .map(|(name, _)| name)
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

/// ids::FUNCTIONS (which the fuzz crate keeps, since it builds on its own)
/// says what the table's `fuzz:` column says, row for row.
#[test]
fn the_fuzz_alphabet_matches_the_c_function_table() {
    let table = table_fuzz_ids();
    assert!(table.len() >= 100, "only {} rows", table.len());
    let name_of = |id: u8| {
        ids::ALL
            .iter()
            .find(|&&(i, _)| i == id)
            .map_or("an unknown id", |&(_, n)| n)
    };
    let mut problems = Vec::new();
    for &(name, cell) in &table {
        let listed: Vec<u8> = ids::FUNCTIONS
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|&(_, id)| id)
            .collect();
        match (cell, listed.as_slice()) {
            (Ok(id), [got]) if *got == id => {}
            (Ok(id), []) => problems.push(format!(
                "{name}: the table gives it {}, ids::FUNCTIONS has no row for it",
                name_of(id)
            )),
            (Ok(id), got) => problems.push(format!(
                "{name}: the table gives it {}, ids::FUNCTIONS gives {:?}",
                name_of(id),
                got.iter().map(|&g| name_of(g)).collect::<Vec<_>>()
            )),
            (Err(_), []) => {}
            (Err(why), _) => problems.push(format!(
                "{name}: the table says it has no fuzz id ({why}), but ids::FUNCTIONS \
                 lists it"
            )),
        }
    }
    for (n, _) in ids::FUNCTIONS {
        if !table.iter().any(|(name, _)| name == n) {
            problems.push(format!(
                "{n}: in ids::FUNCTIONS but not in tests/common/c_functions.rs"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "fuzz/src/ffi_ops/ids.rs and tests/common/c_functions.rs disagree:\n{}",
        problems.join("\n")
    );
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

/// Every exported function has an id in the fuzz alphabet, and the harness
/// really calls it (its name appears in fuzz/src/ffi_ops outside a string).
#[test]
fn every_header_function_has_a_fuzz_id() {
    let fns = header_functions();
    assert!(fns.len() > 60, "parsed only {} functions", fns.len());
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
        match ids::FUNCTIONS.iter().find(|(n, _)| n == f) {
            None => missing.push(format!("{f}: no row in ids::FUNCTIONS")),
            Some(&(_, id)) if !ids::ALL.iter().any(|&(i, _)| i == id) => {
                missing.push(format!("{f}: id {id:#04x} is not in ids::ALL"))
            }
            Some(_) if !called(f) => missing.push(format!("{f}: fuzz/src/ffi_ops never calls it")),
            Some(_) => {}
        }
    }
    for a in &aliases {
        if !fns.iter().any(|f| f == a) || ids::FUNCTIONS.iter().any(|(n, _)| n == a) {
            missing.push(format!(
                "{a}: an alias must be in the header, not in ids::FUNCTIONS"
            ));
        }
    }
    for (n, _) in ids::FUNCTIONS {
        if !fns.iter().any(|f| f == n) {
            missing.push(format!("{n}: in ids::FUNCTIONS but not in the header"));
        }
    }
    assert!(
        missing.is_empty(),
        "the ffi_ops fuzz alphabet does not cover the header: {missing:#?}\n\
         give each new function an id in fuzz/src/ffi_ops/ids.rs (in your range), \
         an arm in FfiOps::call and a row in ids::FUNCTIONS"
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
            "seed_saved" | "seed_metadata_unsorted" => AG_STATUS_OK,
            "seed_f16" => AG_STATUS_CHECKPOINT_CORRUPT,
            _ => AG_STATUS_CHECKPOINT_MISMATCH,
        };
        assert_eq!(fuzz_logic::run_safetensors_load(&bytes), want, "{name}");
    }
}

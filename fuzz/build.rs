//! Compiles ../c_examples/train_full/args.c, the unit of train_full that
//! holds parse_args (fuzzed by the train_full_args target). It does no I/O
//! and references nothing else of the program, so it links on its own.
//!
//! Under cargo fuzz the C code is instrumented by gcc for libFuzzer:
//! `-fsanitize-coverage=trace-pc` (block coverage; the callback is renamed
//! to ag_cov_trace_pc with objcopy and feeds 8-bit counters, see
//! src/sancov_stubs.c), `trace-cmp` (comparison operands, so libFuzzer learns
//! option names and numbers) and, with ASan, `-fsanitize=address`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let src = Path::new("../c_examples/train_full/args.c");
    println!("cargo::rerun-if-changed=../c_examples/train_full/args.c");
    println!("cargo::rerun-if-changed=../c_examples/train_full/train_full.h");
    println!("cargo::rerun-if-changed=../include/arenagrad.h");
    println!("cargo::rerun-if-changed=src/sancov_stubs.c");
    println!("cargo::rustc-check-cfg=cfg(no_train_full)");
    if !src.exists() {
        println!(
            "cargo::warning=c_examples/train_full/args.c not found: train_full_args is a no-op"
        );
        println!("cargo::rustc-cfg=no_train_full");
        return;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let fuzzing = flags.contains("sanitizer-coverage");
    let asan = std::env::var("CARGO_CFG_SANITIZE").is_ok_and(|s| s.contains("address"));
    let mut b = cc::Build::new();
    b.compiler("gcc")
        .file(src)
        .include("../include")
        .flag("-std=c11")
        .warnings(false)
        .opt_level(1)
        .debug(true);
    if asan {
        b.flag("-fsanitize=address").flag("-fno-omit-frame-pointer");
    }
    if !fuzzing {
        b.compile("train_full");
        return;
    }
    b.flag("-fsanitize-coverage=trace-pc,trace-cmp");
    let mut objects: Vec<PathBuf> = b.compile_intermediates();
    for o in &objects {
        let st = Command::new("objcopy")
            .arg("--redefine-sym")
            .arg("__sanitizer_cov_trace_pc=ag_cov_trace_pc")
            .arg(o)
            .status()
            .expect("objcopy (binutils) is needed to build the fuzz targets");
        assert!(st.success(), "objcopy failed on {}", o.display());
    }
    let stubs = cc::Build::new()
        .compiler("gcc")
        .file("src/sancov_stubs.c")
        .opt_level(2)
        .warnings(false)
        .compile_intermediates();
    objects.extend(stubs);
    cc::Build::new()
        .compiler("gcc")
        .objects(&objects)
        .compile("train_full");
}

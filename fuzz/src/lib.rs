//! Decoding and checking logic of the arenagrad fuzz targets `ffi_ops`,
//! `checkpoint_load` and `safetensors_load`, shared by the cargo-fuzz
//! targets (`fuzz/fuzz_targets`) and by the corpus replay test (`tests/fuzz_corpus_replay.rs`, which
//! includes this file with `#[path]`). It needs nothing but `arenagrad` and
//! `std`, and fails by panicking (a crash for libFuzzer, a failed test for
//! `cargo test`).
//!
//! Every C entry point is called through `arenagrad::ffi::ag_*` exactly as a
//! C caller would: raw pointers, NULLs, handles by value.
//!
//! * `bytes.rs`: reading an input as a stream of decisions;
//! * `ffi_ops/`: the `ffi_ops` target, a program of C API calls, each named
//!   by a fixed id (`ffi_ops/ids.rs`);
//! * `checkpoint_load.rs`: the `checkpoint_load` target and its seeds;
//! * `safetensors_load.rs`: the `safetensors_load` target and its seeds.
#![allow(dead_code)]

pub mod bytes;
pub mod checkpoint_load;
pub mod ffi_ops;
pub mod safetensors_load;

pub use checkpoint_load::{checkpoint_seeds, crc32, run_checkpoint_load};
pub use ffi_ops::run_ffi_ops;
pub use safetensors_load::{run_safetensors_load, safetensors_seeds};

use arenagrad::ffi::*;
use std::ffi::CStr;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

/// Statuses the library documents (AG_STATUS_OK down to AG_STATUS_POISONED).
pub fn documented(st: ag_status) -> bool {
    (AG_STATUS_BUFFER_TOO_SMALL..=AG_STATUS_OK).contains(&st)
}

pub fn status_name(st: ag_status) -> String {
    let p = ag_status_str(st);
    assert!(!p.is_null(), "ag_status_str({st}) returned NULL");
    // SAFETY: ag_status_str returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn last_error(ctx: *const ag_context) -> String {
    let p = ag_context_last_error(ctx);
    assert!(!p.is_null(), "ag_context_last_error returned NULL");
    // SAFETY: documented as a NUL-terminated string valid until the next call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("last error is not UTF-8")
        .to_owned()
}

/// What an out-parameter holds before a call that must not write it.
const SENTINEL: ag_tensor = ag_tensor {
    index: 0xA5A5_A5A5,
    context: 0x5A5A_5A5A,
    generation: 0xDEAD_BEEF_DEAD_BEEF,
};

/// Numbers the runs of this process (unique temporary names).
static RUN: AtomicU64 = AtomicU64::new(0);

/// AG_FUZZ_TRACE=1 prints every call and its status (to see what an input
/// does).
fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("AG_FUZZ_TRACE").is_some())
}

//! Stateful sequences of C API calls decoded from the input; see
//! `arenagrad_fuzz::FfiOps` (fuzz/src/lib.rs) for the alphabet and checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    arenagrad_fuzz::run_ffi_ops(data);
});

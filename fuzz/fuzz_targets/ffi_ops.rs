//! Stateful sequences of C API calls decoded from the input; see
//! fuzz/src/ffi_ops/ (ids.rs for the alphabet) for the calls and checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    arenagrad_fuzz::run_ffi_ops(data);
});

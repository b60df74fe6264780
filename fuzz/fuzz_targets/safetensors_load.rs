//! The input is a safetensors file, loaded with ag_safetensors_load into a
//! fixed small model with AdamW; see `arenagrad_fuzz::run_safetensors_load`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    arenagrad_fuzz::run_safetensors_load(data);
});

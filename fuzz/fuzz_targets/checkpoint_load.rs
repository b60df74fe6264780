//! The input is a checkpoint file, loaded with ag_checkpoint_load_bytes into
//! a fixed small model with AdamW; see `arenagrad_fuzz::run_checkpoint_load`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    arenagrad_fuzz::run_checkpoint_load(data);
});

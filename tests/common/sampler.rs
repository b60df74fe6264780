//! Builders shared by the sampler tests (tests/sampler.rs, tests/advi.rs):
//! a model spec, the default configs with the fields every test sets, the
//! last error message, and `try_ag!` for densities written against the C
//! API. Included with `#[macro_use] #[path = "common/sampler.rs"] mod`.
#![allow(dead_code)]

use arenagrad::ffi::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

/// Runs `$e` (an ag call returning a status) and returns its status from
/// the density on failure.
macro_rules! try_ag {
    ($e:expr) => {{
        let st = $e;
        if st != AG_STATUS_OK {
            return st;
        }
    }};
}

/// A tensor handle to overwrite: the density's outputs start as this.
pub const NO_TENSOR: ag_tensor = ag_tensor {
    index: 0,
    context: 0,
    generation: 0,
};

/// A model of `dim` coordinates with log density `f`, no names and nothing
/// reported.
pub fn spec(dim: usize, f: ag_log_density_fn, fixed_graph: bool) -> ag_model_spec {
    ag_model_spec {
        struct_size: size_of::<ag_model_spec>(),
        dim,
        log_density: f,
        user: null_mut(),
        fixed_graph,
        names: null(),
        n_reported: 0,
        report: None,
        reported_names: null(),
    }
}

/// ag_nuts_config_default's config with these chains, iterations and seed.
pub fn nuts_config(chains: u32, warmup: u32, draws: u32, seed: u64) -> ag_nuts_config {
    let mut c = std::mem::MaybeUninit::<ag_nuts_config>::uninit();
    assert_eq!(ag_nuts_config_default(c.as_mut_ptr()), AG_STATUS_OK);
    // SAFETY: written by ag_nuts_config_default.
    let mut c = unsafe { c.assume_init() };
    (c.chains, c.warmup, c.draws, c.seed) = (chains, warmup, draws, seed);
    c
}

/// ag_advi_config_default's config with this family and seed.
pub fn advi_config(algorithm: u32, seed: u64) -> ag_advi_config {
    let mut c = std::mem::MaybeUninit::<ag_advi_config>::uninit();
    assert_eq!(ag_advi_config_default(c.as_mut_ptr()), AG_STATUS_OK);
    // SAFETY: written by ag_advi_config_default.
    let mut c = unsafe { c.assume_init() };
    (c.algorithm, c.seed) = (algorithm, seed);
    c
}

/// The sampler API's last error message on this thread.
pub fn last_error() -> String {
    // SAFETY: never NULL, valid until the next sampler call on this thread.
    unsafe { CStr::from_ptr(ag_sampler_last_error()) }
        .to_string_lossy()
        .into_owned()
}

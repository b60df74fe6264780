//! Builders shared by the sampler tests (tests/sampler.rs, tests/advi.rs):
//! a model spec, the default configs with the fields every test sets, the
//! last error message, `try_ag!` for densities written against the C API,
//! and the densities both use. Included with `#[macro_use] #[path = "common/sampler.rs"] mod`.
#![allow(dead_code)]

use arenagrad::ffi::*;
use std::ffi::{CStr, c_void};
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

/// A sampler for `model` on which `run` (ag_nuts_run or ag_advi_run with
/// its config, given the sampler and the output) fails with `want` and
/// hands back no draws; returns the message.
pub fn failed_run(
    model: &ag_model_spec,
    want: ag_status,
    run: impl FnOnce(*mut ag_sampler, *mut *mut ag_draws) -> ag_status,
) -> String {
    let mut s = null_mut();
    assert_eq!(ag_sampler_new(model, &mut s), AG_STATUS_OK);
    let mut d = null_mut();
    assert_eq!(run(s, &mut d), want);
    let e = last_error();
    assert!(d.is_null(), "draws on failure: {e}");
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
    e
}

/// The sampler API's last error message on this thread.
pub fn last_error() -> String {
    // SAFETY: never NULL, valid until the next sampler call on this thread.
    unsafe { CStr::from_ptr(ag_sampler_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A 2-D normal with unit variances and correlation RHO_PERCENT / 100,
/// centred at 0 (the tests differ in rho, which a density cannot take).
pub unsafe extern "C" fn corr_normal<const RHO_PERCENT: u32>(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let rho = RHO_PERCENT as f32 / 100.0;
    let (mut a, mut b, mut aa, mut bb, mut ab, mut t, mut u) = [NO_TENSOR; 7].into();
    try_ag!(ag_slice(ctx, q, 0, 0, 1, &mut a));
    try_ag!(ag_slice(ctx, q, 0, 1, 1, &mut b));
    try_ag!(ag_mul(ctx, a, a, &mut aa));
    try_ag!(ag_mul(ctx, b, b, &mut bb));
    try_ag!(ag_mul(ctx, a, b, &mut ab));
    try_ag!(ag_add(ctx, aa, bb, &mut t));
    try_ag!(ag_scale(ctx, ab, -2.0 * rho, &mut u));
    try_ag!(ag_add(ctx, t, u, &mut a));
    ag_scale(ctx, a, -0.5 / (1.0 - rho * rho), out)
}

/// Returns q scaled, as many elements as q: not a scalar log density.
pub unsafe extern "C" fn not_scalar(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    ag_scale(ctx, q, -0.5, out)
}

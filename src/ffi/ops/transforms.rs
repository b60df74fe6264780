//! Constraining transforms: an unconstrained x onto a bounded y, with the
//! log-Jacobian a density on y needs when it is sampled in x.

use crate::ffi::prelude::*;

/// Runs a transform, checking both out-pointers before it and writing
/// both handles only on success.
fn transform(
    func: &'static str,
    ctx: *mut ag_context,
    out: *mut ag_tensor,
    log_jacobian: *mut ag_tensor,
    f: impl FnOnce(&mut Context) -> Result<(Tensor, Tensor)>,
) -> ag_status {
    guard(func, ctx, |c| {
        need(func, "out", out)?;
        need(func, "log_jacobian", log_jacobian)?;
        let (y, j) = f(c)?;
        write_out(func, "out", out, y.into())?;
        write_out(func, "log_jacobian", log_jacobian, j.into())
    })
}

/// out = lb + e^x (every element above lb); log_jacobian = sum(x), the
/// scalar ln |d out / dx| summed, to add to a density on out sampled in x.
/// Errors: NULL_ARGUMENT (out, log_jacobian), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (lb not finite), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_constrain_lower(
    ctx: *mut ag_context,
    x: ag_tensor,
    lb: f32,
    out: *mut ag_tensor,
    log_jacobian: *mut ag_tensor,
) -> ag_status {
    transform("ag_constrain_lower", ctx, out, log_jacobian, |c| {
        c.constrain_lower(x.into(), lb)
    })
}

/// out = ub - e^x (every element below ub); log_jacobian = sum(x).
/// Errors: NULL_ARGUMENT (out, log_jacobian), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (ub not finite), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_constrain_upper(
    ctx: *mut ag_context,
    x: ag_tensor,
    ub: f32,
    out: *mut ag_tensor,
    log_jacobian: *mut ag_tensor,
) -> ag_status {
    transform("ag_constrain_upper", ctx, out, log_jacobian, |c| {
        c.constrain_upper(x.into(), ub)
    })
}

/// out = lb + (ub - lb) sigmoid(x) (every element in (lb, ub));
/// log_jacobian = n ln(ub - lb) + sum(ln sigmoid(x) + ln sigmoid(-x)),
/// finite however large |x| is.
/// Errors: NULL_ARGUMENT (out, log_jacobian), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (a bound not finite, lb >= ub, or ub - lb past f32), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_constrain_interval(
    ctx: *mut ag_context,
    x: ag_tensor,
    lb: f32,
    ub: f32,
    out: *mut ag_tensor,
    log_jacobian: *mut ag_tensor,
) -> ag_status {
    transform("ag_constrain_interval", ctx, out, log_jacobian, |c| {
        c.constrain_interval(x.into(), lb, ub)
    })
}

/// out = the Cholesky factor L [K, K] of a K x K correlation matrix from
/// x, a vector of K (K - 1) / 2 unconstrained coordinates (K >= 2): Stan's
/// cholesky_corr_constrain (z = tanh(x) row by row below the diagonal,
/// each row of L scaled to unit norm; its diagonal positive, its upper
/// triangle 0). log_jacobian = ln |dL/dx|, a scalar, finite for every
/// finite x. An LKJ(eta) prior on L adds sum_i (K - i - 1 + 2 eta - 2)
/// ln L_ii (rows from 0).
/// Errors: NULL_ARGUMENT (out, log_jacobian), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (x not a vector of K (K - 1) / 2 elements, K >= 2), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_constrain_cholesky_corr(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
    log_jacobian: *mut ag_tensor,
) -> ag_status {
    transform("ag_constrain_cholesky_corr", ctx, out, log_jacobian, |c| {
        c.constrain_cholesky_corr(x.into())
    })
}

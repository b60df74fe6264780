//! Element-wise special functions: log1p, expm1, lgamma, digamma,
//! trigamma, log1m_exp, lbeta, log_diff_exp, the regularised incomplete
//! gamma functions, the regularised incomplete beta function,
//! softplus, log-sigmoid, erf, the normal CDF and its log, and the normal
//! quantile.

use crate::ffi::prelude::*;

/// out = ln(1 + x), accurate for small x (NaN below -1, -inf at -1).
/// Gradient 1 / (1 + x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log1p(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_log1p", ctx, out, |c| c.log1p(x.into()))
}

/// out = ln Gamma(x) for x > 0, accurate to a few ulps (float64 inside).
/// NaN for x < 0 (the sign of Gamma is not kept, so the negative axis is not
/// defined here), +inf at 0 and for very large x. Gradient digamma(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_lgamma(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_lgamma", ctx, out, |c| c.lgamma(x.into()))
}

/// out = digamma(x) = d/dx ln Gamma(x) for x > 0 (NaN for x < 0, -inf at
/// 0). Gradient trigamma(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_digamma(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_digamma", ctx, out, |c| c.digamma(x.into()))
}

/// out = e^x - 1, accurate for small x. Gradient e^x.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_expm1(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_expm1", ctx, out, |c| c.expm1(x.into()))
}

/// out = ln(1 + e^x) without overflow (Stan's log1p_exp). Gradient
/// sigmoid(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_softplus(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_softplus", ctx, out, |c| c.softplus(x.into()))
}

/// out = ln sigmoid(x) = -softplus(-x), without overflow. Gradient
/// sigmoid(-x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_sigmoid(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_sigmoid", ctx, out, |c| c.log_sigmoid(x.into()))
}

/// out = erf(x), the error function. Gradient 2/sqrt(pi) e^(-x^2).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_erf(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_erf", ctx, out, |c| c.erf(x.into()))
}

/// out = Phi(x), the standard normal CDF. Gradient the standard normal
/// density phi(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_cdf(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_cdf", ctx, out, |c| c.normal_cdf(x.into()))
}

/// out = ln Phi(x), the log of the standard normal CDF, finite far into
/// the lower tail (about -x^2/2 there). Gradient phi(x) / Phi(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_lcdf(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_lcdf", ctx, out, |c| c.normal_lcdf(x.into()))
}

/// out = trigamma(x) = d/dx digamma(x) for x > 0 (NaN for x < 0, +inf at
/// 0). Gradient tetragamma(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_trigamma(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_trigamma", ctx, out, |c| c.trigamma(x.into()))
}

/// out = ln(1 - e^x) for x <= 0, accurate near 0 and far below (Stan's
/// log1m_exp): -inf at 0, NaN above 0. Gradient -1 / (e^-x - 1).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log1m_exp(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log1m_exp", ctx, out, |c| c.log1m_exp(x.into()))
}

/// out = ln Beta(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b) element-wise
/// with broadcasting, accurate for large arguments: +inf where either is
/// 0, -inf where either is +inf, NaN below 0. Gradients digamma(a) -
/// digamma(a + b) and digamma(b) - digamma(a + b).
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_lbeta(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_lbeta", ctx, out, |c| c.lbeta(a.into(), b.into()))
}

/// out = ln(e^a - e^b) element-wise with broadcasting, for a >= b (Stan's
/// log_diff_exp): -inf where a == b, NaN where a < b. Gradients
/// 1 / (1 - e^(b - a)) in a and -1 / (e^(a - b) - 1) in b; where a == b
/// they are +inf and -inf, the limits from a > b.
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_diff_exp(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_diff_exp", ctx, out, |c| {
        c.log_diff_exp(a.into(), b.into())
    })
}

/// out = P(a, x) = gamma(a, x) / Gamma(a), the regularised lower
/// incomplete gamma function, element-wise with broadcasting (Stan's
/// gamma_p), for a > 0, x >= 0: 0 at x = 0, 1 at x = +inf, NaN for a <= 0
/// or x < 0. Gradients: in a no closed form (a float64 central
/// difference, accurate far beyond float32); in x x^(a - 1) e^-x /
/// Gamma(a).
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_gamma_p(
    ctx: *mut ag_context,
    a: ag_tensor,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_gamma_p", ctx, out, |c| c.gamma_p(a.into(), x.into()))
}

/// out = Q(a, x) = 1 - P(a, x), the regularised upper incomplete gamma
/// function, element-wise with broadcasting (Stan's gamma_q): 1 at x = 0,
/// 0 at x = +inf, NaN where ag_gamma_p is. Gradients the negated ones of
/// ag_gamma_p; small values of Q keep their relative accuracy.
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_gamma_q(
    ctx: *mut ag_context,
    a: ag_tensor,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_gamma_q", ctx, out, |c| c.gamma_q(a.into(), x.into()))
}

/// out = I_x(a, b) = B(x; a, b) / B(a, b), the regularised incomplete
/// beta function (the CDF of Beta(a, b) at x), element-wise with the three
/// shapes broadcast together (Stan's inc_beta), for a > 0, b > 0, 0 <= x
/// <= 1: 0 at x = 0, 1 at x = 1, NaN for a <= 0, b <= 0, x outside [0, 1]
/// or a = b = +inf. Small values of I and of 1 - I keep their relative
/// accuracy. Gradients: in x x^(a - 1) (1 - x)^(b - 1) / B(a, b); in a
/// and b no closed form (float64 central differences, accurate far beyond
/// float32).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (the three shapes do not broadcast), TOO_LARGE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_beta_inc(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_beta_inc", ctx, out, |c| {
        c.beta_inc(a.into(), b.into(), x.into())
    })
}

/// out = inv_Phi(x), the standard normal quantile (Stan's inv_Phi): the y
/// with Phi(y) = x; NaN outside [0, 1], -inf at 0, +inf at 1. Gradient
/// 1 / phi(y) (infinite at 0 and 1).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_inv_phi(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_inv_phi", ctx, out, |c| c.inv_phi(x.into()))
}

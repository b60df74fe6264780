//! Fused likelihoods: Stan's normal_lpdf, normal_id_glm_lpdf and
//! bernoulli_logit_glm_lpmf, and the LKJ prior on a correlation factor,
//! lkj_corr_cholesky_lpdf.

use crate::ffi::prelude::*;

/// out = sum over the n rows of ln N(y_i | alpha_i + X_i beta, sigma_i), the
/// normalising constant included, a scalar (Stan's normal_id_glm_lpdf): a
/// linear regression's likelihood as one op where a product, a loss and
/// scalar ops took several. y is [n]; X is x [n, d], or x [d, n] read as
/// its transpose when transpose_x (the faster layout: X's columns
/// contiguous); beta is [d]; alpha and sigma are one element or [n]. Every
/// operand gets a gradient; a sigma that is not positive gives NaN.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (y not a vector, x not [n, d] ([d, n] when transpose_x),
/// beta not [d], alpha or sigma neither one element nor [n]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_id_glm_lpdf(
    ctx: *mut ag_context,
    y: ag_tensor,
    x: ag_tensor,
    transpose_x: bool,
    alpha: ag_tensor,
    beta: ag_tensor,
    sigma: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_id_glm_lpdf", ctx, out, |c| {
        c.normal_id_glm_lpdf(
            y.into(),
            x.into(),
            transpose_x,
            alpha.into(),
            beta.into(),
            sigma.into(),
        )
    })
}

/// out = sum over the n rows of y_i ln sigmoid(eta_i) + (1 - y_i)
/// ln sigmoid(-eta_i), eta = alpha + X beta, a scalar (Stan's
/// bernoulli_logit_glm_lpmf: a logistic regression's log likelihood for y
/// in {0, 1}, the cross-entropy for y in between) as one op, its log
/// sigmoid and its gradient from one exponential per row. Shapes as
/// ag_normal_id_glm_lpdf's, without sigma. Every operand gets a gradient
/// (y's is eta).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (y not a vector, x not [n, d] ([d, n] when transpose_x),
/// beta not [d], alpha neither one element nor [n]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_bernoulli_logit_glm_lpmf(
    ctx: *mut ag_context,
    y: ag_tensor,
    x: ag_tensor,
    transpose_x: bool,
    alpha: ag_tensor,
    beta: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_bernoulli_logit_glm_lpmf", ctx, out, |c| {
        c.bernoulli_logit_glm_lpmf(y.into(), x.into(), transpose_x, alpha.into(), beta.into())
    })
}

/// out = the LKJ(eta) log density of L [K, K], the Cholesky factor of a
/// correlation matrix (as ag_constrain_cholesky_corr makes it), its
/// normalising constant included, a scalar (Stan's
/// lkj_corr_cholesky_lpdf): sum_i (K - i - 1 + 2 eta - 2) ln L_ii (rows
/// from 0) - ln c_K(eta). With ag_constrain_cholesky_corr's log-Jacobian it
/// makes L L^T ~ LKJ(eta) (eta = 1: uniform over correlation matrices).
/// Only L's diagonal is read, and gets a gradient; a diagonal entry <= 0
/// gives NaN or -inf.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (L not [K, K]), INVALID_ARGUMENT (eta not positive and
/// finite), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_lkj_corr_cholesky_lpdf(
    ctx: *mut ag_context,
    l: ag_tensor,
    eta: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_lkj_corr_cholesky_lpdf", ctx, out, |c| {
        c.lkj_corr_cholesky_lpdf(l.into(), eta)
    })
}

/// out = sum_i ln N(y_i | mu_i, sigma_i), the normalising constant
/// included, a scalar (Stan's normal_lpdf, `y ~ normal(mu, sigma)`) as one
/// op where a subtraction, a division, a square, a log and a sum took
/// five. y has any shape; mu and sigma are one element (shared) or y's
/// shape. Every operand gets a gradient; a sigma that is not positive
/// gives NaN or inf.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (mu or sigma neither one element nor y's shape),
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_lpdf(
    ctx: *mut ag_context,
    y: ag_tensor,
    mu: ag_tensor,
    sigma: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_lpdf", ctx, out, |c| {
        c.normal_lpdf(y.into(), mu.into(), sigma.into())
    })
}

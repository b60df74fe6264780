//! Kernels of the special-function rows of the unary table (log1p,
//! lgamma, digamma, trigamma, log1m_exp, expm1, softplus, log_sigmoid, erf, normal CDF and its
//! log): each element through `crate::special`, which computes in f64 and
//! rounds once (softplus and log_sigmoid in f32, vectorised), so these
//! agree with a float64 reference to a few ulps.

use crate::special;

/// y = ln(1 + x), without the rounding of 1 + x for small x.
pub(super) fn log1p_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::log1p(x));
}

/// dx += dout / (1 + x).
pub(super) fn log1p_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::log1p_grad(x);
    }
}

/// y = ln Gamma(x) (NaN for x < 0, +inf at 0).
pub(super) fn lgamma_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::lgamma(x));
}

/// dx += dout * digamma(x).
pub(super) fn lgamma_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::lgamma_grad(x);
    }
}

/// y = digamma(x) (NaN for x < 0, -inf at 0).
pub(super) fn digamma_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::digamma(x));
}

/// dx += dout * trigamma(x).
pub(super) fn digamma_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::digamma_grad(x);
    }
}

/// y = trigamma(x) (NaN for x < 0, +inf at 0).
pub(super) fn trigamma_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::trigamma(x));
}

/// dx += dout * tetragamma(x).
pub(super) fn trigamma_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::trigamma_grad(x);
    }
}

/// y = ln(1 - e^x) (NaN above 0, -inf at 0).
pub(super) fn log1m_exp_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::log1m_exp(x));
}

/// dx += dout * -1 / (e^-x - 1).
pub(super) fn log1m_exp_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::log1m_exp_grad(x);
    }
}

/// y = e^x - 1, accurate for small x.
pub(super) fn expm1_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::expm1(x));
}

/// dx += dout * e^x.
pub(super) fn expm1_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::expm1_grad(x);
    }
}

/// y = ln(1 + e^x), without overflow.
#[inline(always)] // branch-free: vectorised in each SIMD copy
pub(super) fn softplus_forward(y: &mut [f32], x: &[f32]) {
    let x = &x[..y.len()];
    for i in 0..y.len() {
        y[i] = special::softplus(x[i]);
    }
}

/// dx += dout * sigmoid(x).
#[inline(always)] // branch-free: vectorised in each SIMD copy
pub(super) fn softplus_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    let (dout, x) = (&dout[..dx.len()], &x[..dx.len()]);
    for i in 0..dx.len() {
        dx[i] += dout[i] * special::softplus_grad(x[i]);
    }
}

/// y = ln sigmoid(x) = -softplus(-x).
#[inline(always)] // branch-free: vectorised in each SIMD copy
pub(super) fn log_sigmoid_forward(y: &mut [f32], x: &[f32]) {
    let x = &x[..y.len()];
    for i in 0..y.len() {
        y[i] = special::log_sigmoid(x[i]);
    }
}

/// dx += dout * sigmoid(-x).
#[inline(always)] // branch-free: vectorised in each SIMD copy
pub(super) fn log_sigmoid_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    let (dout, x) = (&dout[..dx.len()], &x[..dx.len()]);
    for i in 0..dx.len() {
        dx[i] += dout[i] * special::log_sigmoid_grad(x[i]);
    }
}

/// y = erf(x).
pub(super) fn erf_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = special::erf(x));
}

/// dx += dout * 2/sqrt(pi) e^(-x^2).
pub(super) fn erf_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::erf_grad(x);
    }
}

/// y = Phi(x), the standard normal CDF.
pub(super) fn normal_cdf_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::normal_cdf(x));
}

/// dx += dout * the standard normal density.
pub(super) fn normal_cdf_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::normal_cdf_grad(x);
    }
}

/// y = ln Phi(x), finite far into the lower tail.
pub(super) fn normal_lcdf_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::normal_lcdf(x));
}

/// dx += dout * phi(x) / Phi(x).
pub(super) fn normal_lcdf_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::normal_lcdf_grad(x);
    }
}

/// y = inv_Phi(x), the standard normal quantile.
pub(super) fn inv_phi_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = special::inv_phi(x));
}

/// dx += dout / phi(inv_Phi(x)), the quantile recomputed in f64 from x
/// (reading the f32 output would cost digits in the tails).
pub(super) fn inv_phi_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * special::inv_phi_grad(x);
    }
}

//! Logs and exponentials near their cancellations: log1p, expm1, tanh,
//! softplus and log-sigmoid. Its own room: the f64 log1p here is also the
//! building block of the normal family's log CDF.

use crate::kernels::fastmath;

/// log(1 + z) in f64 for any z >= -1: u = 1 + z rounds, and the factor
/// z / (u - 1) cancels that rounding to first order (Goldberg's method).
pub(super) fn log1p_f64(z: f64) -> f64 {
    let u = 1.0 + z;
    if u == 1.0 {
        z
    } else if u.is_infinite() {
        u
    } else {
        u.ln() * (z / (u - 1.0))
    }
}

/// ln(1 + x), accurate for small |x|; NaN below -1, -inf at -1.
pub fn log1p(x: f32) -> f32 {
    if x.is_nan() || x < -1.0 {
        return f32::NAN;
    }
    log1p_f64(x as f64) as f32
}

/// d/dx log1p = 1 / (1 + x) (1 + x is exact in f64 for |x| >= 2^-29).
pub fn log1p_grad(x: f32) -> f32 {
    (1.0 / (1.0 + x as f64)) as f32
}

/// e^x - 1, accurate for small |x|.
pub fn expm1(x: f32) -> f32 {
    expm1_f64(x as f64) as f32
}

/// e^x - 1 in f64, accurate for small |x| (past |x| = 0.5 the subtraction
/// loses at most a bit).
pub(super) fn expm1_f64(x: f64) -> f64 {
    if x.abs() < 0.5 {
        expm1_small(x)
    } else {
        x.exp() - 1.0
    }
}

/// e^x - 1 = x (1 + x/2 (1 + x/3 (1 + ... (1 + x/17)))) for |x| < 0.5: the
/// first omitted term is below 3e-20 of the result.
fn expm1_small(x: f64) -> f64 {
    let mut s = 1.0;
    let mut k = 17.0;
    while k >= 2.0 {
        s = 1.0 + x / k * s;
        k -= 1.0;
    }
    x * s
}

/// d/dx expm1 = e^x.
pub fn expm1_grad(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// tanh(x), within half an f32 ulp of the exact value plus about 1e-12
/// relative (libm's tanhf is within 2.2 ulps and, through its expm1f, takes
/// twice as long on a scalar model's dependency chain). (e^{2|x|} - 1) /
/// (e^{2|x|} + 1) in f64: for |x| >= 2^-12 the subtraction keeps a relative
/// error below 5e-13; below that, tanh(x) = x (1 - x^2/3 + ...) rounds to
/// x, and above 16 to +-1. NaN propagates; the sign is x's (so -0 stays -0).
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a < TANH_TINY {
        return x;
    }
    if a > 16.0 {
        return 1.0f32.copysign(x);
    }
    let e = (2.0 * a as f64).exp();
    (((e - 1.0) / (e + 1.0)) as f32).copysign(x)
}

/// Below this |x|, tanh(x) rounds to x in f32: x^2 / 3 < 2^-25.
const TANH_TINY: f32 = 1.0 / 4096.0;

/// softplus(x) = ln(1 + e^x) (Stan's log1p_exp), without overflow:
/// max(x, 0) + ln(1 + e^-|x|), in f64 with branch-free pieces, so a loop
/// over a vector of them vectorises (libm's exp and log1p are calls).
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    let x = x as f64;
    let y = x.max(0.0) + ln_1p_unit(exp_nonpositive(-x.abs()));
    // NaN in, NaN out (max and abs above would drop it).
    if x.is_nan() { x as f32 } else { y as f32 }
}

/// d/dx softplus = sigmoid(x).
#[inline(always)]
pub fn softplus_grad(x: f32) -> f32 {
    sigmoid_branch_free(x as f64) as f32
}

/// ln sigmoid(x) = -softplus(-x).
#[inline(always)]
pub fn log_sigmoid(x: f32) -> f32 {
    -softplus(-x)
}

/// d/dx log_sigmoid = sigmoid(-x).
#[inline(always)]
pub fn log_sigmoid_grad(x: f32) -> f32 {
    sigmoid_branch_free(-(x as f64)) as f32
}

/// 1 / (1 + e^-x) from e = e^-|x| <= 1: 1 / (1 + e) or e / (1 + e).
#[inline(always)]
fn sigmoid_branch_free(x: f64) -> f64 {
    let e = exp_nonpositive(-x.abs());
    let y = if x >= 0.0 { 1.0 } else { e } / (1.0 + e);
    if x.is_nan() { x } else { y }
}

/// e^x for x <= 0 in f64, branch-free (fastmath's f64 exponential with
/// its series to r^11: truncation below 7e-15 relative). Below -708 it
/// returns e^-708 (about 3e-308, still normal), which rounds to 0 in f32
/// like the exact value. NaN gives a number: the callers check for NaN.
#[inline(always)]
fn exp_nonpositive(x: f64) -> f64 {
    fastmath::exp_f64_series::<11>(x.max(-708.0))
}

/// ln(1 + u) for u in [0, 1], branch-free: 2 atanh(s) with s = u / (2 + u)
/// in [0, 1/3], by its series to s^29 (truncation below 2e-15 relative).
#[inline(always)]
fn ln_1p_unit(u: f64) -> f64 {
    let s = u / (2.0 + u);
    let s2 = s * s;
    const INV_ODD: [f64; 15] = [
        1.0,
        1.0 / 3.0,
        1.0 / 5.0,
        1.0 / 7.0,
        1.0 / 9.0,
        1.0 / 11.0,
        1.0 / 13.0,
        1.0 / 15.0,
        1.0 / 17.0,
        1.0 / 19.0,
        1.0 / 21.0,
        1.0 / 23.0,
        1.0 / 25.0,
        1.0 / 27.0,
        1.0 / 29.0,
    ];
    let mut p = INV_ODD[14];
    for &c in INV_ODD[..14].iter().rev() {
        p = p * s2 + c;
    }
    2.0 * s * p
}

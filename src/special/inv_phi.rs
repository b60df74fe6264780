//! inv_Phi, the standard normal quantile (Stan's `inv_Phi`). Its own room:
//! a rational first guess, then Newton steps on ln Phi, which stays
//! accurate in relative terms deep into the lower tail, where Phi itself
//! is far below f32's range of differences.

use super::normal::{log_phi_f64, phi_ratio_f64};

/// Acklam's rational approximation of the quantile: relative error below
/// 1.2e-9 on (0, 1), a start from which two Newton steps reach f64's
/// precision.
fn first_guess(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let poly = |c: &[f64], x: f64| c.iter().fold(0.0, |acc, &k| acc * x + k);
    if p < 0.02425 {
        let q = (-2.0 * p.ln()).sqrt();
        poly(&C, q) / (poly(&D, q) * q + 1.0)
    } else {
        // Only p <= 1/2 comes here (see `lower_quantile`).
        let q = p - 0.5;
        let r = q * q;
        poly(&A, r) * q / (poly(&B, r) * r + 1.0)
    }
}

/// The quantile of 0 < p <= 1/2 in f64: Newton on ln Phi(x) = ln p, whose
/// derivative is phi(x) / Phi(x).
fn lower_quantile(p: f64) -> f64 {
    let target = p.ln();
    let mut x = first_guess(p);
    for _ in 0..3 {
        let step = (log_phi_f64(x) - target) / phi_ratio_f64(x);
        x -= step;
        if step.abs() <= x.abs() * 1e-17 {
            break;
        }
    }
    x
}

/// The quantile in f64 of a probability given as an f32 (so that 1 - p is
/// exact): NaN outside [0, 1], -inf at 0, +inf at 1.
fn quantile_f64(p: f32) -> f64 {
    if !(0.0..=1.0).contains(&p) {
        return f64::NAN; // NaN too
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if p == 0.5 {
        return 0.0; // exactly (Newton would leave a residue near 1e-17)
    }
    let p = p as f64;
    if p <= 0.5 {
        lower_quantile(p)
    } else {
        // 1 - p is exact for an f32 p in (1/2, 1).
        -lower_quantile(1.0 - p)
    }
}

/// inv_Phi(p), the x with Phi(x) = p: NaN outside [0, 1], -inf at 0, +inf
/// at 1 (from -14.1 at the smallest subnormal to 5.4 just below 1).
pub fn inv_phi(p: f32) -> f32 {
    quantile_f64(p) as f32
}

/// d/dp inv_Phi = 1 / phi(inv_Phi(p)) = sqrt(2 pi) e^{x^2 / 2}: +inf where
/// it leaves f32 (p within about 1e-38 of 0 or 1, and at both ends).
pub fn inv_phi_grad(p: f32) -> f32 {
    let x = quantile_f64(p);
    if x.is_nan() {
        return f32::NAN;
    }
    ((2.0 * std::f64::consts::PI).sqrt() * (0.5 * x * x).exp()) as f32
}

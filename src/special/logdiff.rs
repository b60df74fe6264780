//! Logs of differences of exponentials: log1m_exp(x) = ln(1 - e^x) and
//! log_diff_exp(a, b) = ln(e^a - e^b), Stan's names and domains.

use super::logexp::{expm1_f64, log1p_f64};

/// ln(1 - e^x) in f64 for x <= 0. Above -ln 2, 1 - e^x is a cancellation
/// that expm1 computes exactly enough; below, e^x <= 1/2 and log1p of it
/// loses nothing (Maechler's switch).
fn log1m_exp_f64(x: f64) -> f64 {
    if x > -std::f64::consts::LN_2 {
        (-expm1_f64(x)).ln()
    } else {
        log1p_f64(-x.exp())
    }
}

/// ln(1 - e^x) for x <= 0: -inf at 0, -0 at -inf, NaN above 0 (as Stan).
pub fn log1m_exp(x: f32) -> f32 {
    if x.is_nan() || x > 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    log1m_exp_f64(x as f64) as f32
}

/// d/dx log1m_exp = -e^x / (1 - e^x) = -1 / (e^-x - 1): -inf at 0, NaN
/// above 0.
pub fn log1m_exp_grad(x: f32) -> f32 {
    if x.is_nan() || x > 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY; // also at +0, where -x is -0
    }
    (-1.0 / expm1_f64(-(x as f64))) as f32
}

/// ln(e^a - e^b) for a >= b: a + log1m_exp(b - a), with b - a carried to
/// twice f64's precision.
/// a == b gives -inf (also at -inf), b = -inf gives a, a < b NaN; +inf
/// against +inf is NaN (as Stan).
pub fn log_diff_exp(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() || a < b || (a == b && a == f32::INFINITY) {
        return f32::NAN;
    }
    if a == b {
        return f32::NEG_INFINITY;
    }
    if b == f32::NEG_INFINITY || a == f32::INFINITY {
        return a;
    }
    // b - a = d + e exactly (Knuth's two-sum): where the result is near 0
    // (e^a - e^b ~ 1) the rounding of d alone would dominate its error.
    let (a, b) = (a as f64, b as f64);
    let d = b - a;
    let bv = d - b;
    let e = (b - (d - bv)) + (-a - bv);
    let l = if d > -std::f64::consts::LN_2 {
        (-(expm1_f64(d) + e * d.exp())).ln()
    } else {
        let ed = d.exp();
        log1p_f64(-(ed + ed * e))
    };
    (a + l) as f32
}

/// d/da log_diff_exp = e^a / (e^a - e^b) = -1 / expm1(b - a). At a == b
/// (where the value is -inf) it is +inf, the limit from a > b; NaN where
/// the value is.
pub fn log_diff_exp_grad_a(a: f32, b: f32) -> f32 {
    if log_diff_exp(a, b).is_nan() {
        return f32::NAN;
    }
    if a == b {
        return f32::INFINITY;
    }
    (-1.0 / expm1_f64(b as f64 - a as f64)) as f32
}

/// d/db log_diff_exp = -e^b / (e^a - e^b) = -1 / expm1(a - b). At a == b
/// it is -inf, the limit from a > b; NaN where the value is.
pub fn log_diff_exp_grad_b(a: f32, b: f32) -> f32 {
    if log_diff_exp(a, b).is_nan() {
        return f32::NAN;
    }
    if a == b {
        return f32::NEG_INFINITY;
    }
    (-1.0 / expm1_f64(a as f64 - b as f64)) as f32
}

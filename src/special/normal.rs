//! The error function and the standard normal: erf, the normal CDF and
//! its log. Its own room: one erfc (a positive series, then a continued
//! fraction) serves every function here, down to the far lower tail.

use super::logexp::log1p_f64;

const HALF_LN_PI: f64 = 0.5723649429247001;
pub(super) const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
const FRAC_1_SQRT_2PI: f64 = 0.3989422804014327;
const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// erf(x) for |x| < 3 from the series with positive terms
/// erf(x) = 2/sqrt(pi) e^{-x^2} sum_n 2^n x^{2n+1} / (1 3 5 ... (2n+1)),
/// which has no cancellation (the alternating Taylor series loses digits).
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while term.abs() > sum.abs() * 1e-17 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
    }
    FRAC_2_SQRT_PI * (-x2).exp() * sum
}

/// The continued fraction f(z) = z + (1/2)/(z + 1/(z + (3/2)/(z + ...))) with
/// erfc(z) = e^{-z^2} / (sqrt(pi) f(z)), for z >= 2, by the modified Lentz
/// method (it converges in under 100 steps at z = 2, in a few for large z).
fn erfc_cf(z: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut f = z;
    let mut c = z;
    let mut d = 0.0;
    for j in 1..500 {
        let a = j as f64 * 0.5;
        d = z + a * d;
        if d == 0.0 {
            d = TINY;
        }
        d = 1.0 / d;
        c = z + a / c;
        if c == 0.0 {
            c = TINY;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    f
}

/// erfc(z) in f64 for finite z.
fn erfc_f64(z: f64) -> f64 {
    if z < 0.0 {
        2.0 - erfc_f64(-z)
    } else if z < 2.0 {
        1.0 - erf_series(z)
    } else {
        // e^{-z^2} underflows to 0 past z = 27, as erfc does.
        (-(z * z)).exp() / (std::f64::consts::PI.sqrt() * erfc_cf(z))
    }
}

/// The standard normal CDF in f64.
fn phi_cdf_f64(x: f64) -> f64 {
    0.5 * erfc_f64(-x / SQRT_2)
}

/// The standard normal density in f64.
fn phi_pdf_f64(x: f64) -> f64 {
    FRAC_1_SQRT_2PI * (-0.5 * x * x).exp()
}

/// The error function.
pub fn erf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x as f64;
    let a = x.abs();
    let y = if a < 3.0 {
        erf_series(a)
    } else if a < 6.0 {
        1.0 - erfc_f64(a)
    } else {
        1.0 // erfc(6) = 2e-17: erf rounds to 1 in f32 from 3.9 on.
    };
    (y.copysign(x)) as f32
}

/// d/dx erf = 2/sqrt(pi) e^{-x^2}.
pub fn erf_grad(x: f32) -> f32 {
    let x = x as f64;
    (FRAC_2_SQRT_PI * (-(x * x)).exp()) as f32
}

/// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2.
pub fn normal_cdf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    phi_cdf_f64(x as f64) as f32
}

/// d/dx Phi = the standard normal density.
pub fn normal_cdf_grad(x: f32) -> f32 {
    phi_pdf_f64(x as f64) as f32
}

/// ln Phi(x) in f64 for finite x, with no underflow however far the tail.
pub(super) fn log_phi_f64(x: f64) -> f64 {
    let z = -x / SQRT_2;
    if x >= 0.0 {
        log1p_f64(-phi_cdf_f64(-x))
    } else if z < 2.0 {
        phi_cdf_f64(x).ln()
    } else {
        // ln(erfc(z) / 2) = -z^2 - ln sqrt(pi) - ln f(z) - ln 2, with
        // z^2 = x^2 / 2 exact: no underflow however far the tail.
        -0.5 * x * x - HALF_LN_PI - erfc_cf(z).ln() - std::f64::consts::LN_2
    }
}

/// phi(x) / Phi(x) in f64 (the inverse Mills ratio at -x).
pub(super) fn phi_ratio_f64(x: f64) -> f64 {
    let z = -x / SQRT_2;
    if z < 2.0 {
        phi_pdf_f64(x) / phi_cdf_f64(x)
    } else {
        // phi / Phi = sqrt(2) f(z) with f the continued fraction of erfc.
        SQRT_2 * erfc_cf(z)
    }
}

/// ln Phi(x), finite down to x = -2.6e19 (where -x^2/2 leaves f32).
pub fn normal_lcdf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    log_phi_f64(x as f64) as f32
}

/// d/dx ln Phi = phi(x) / Phi(x) (the inverse Mills ratio at -x).
pub fn normal_lcdf_grad(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    phi_ratio_f64(x as f64) as f32
}

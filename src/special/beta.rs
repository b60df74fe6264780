//! The log of the Beta function, lbeta(a, b) = lgamma(a) + lgamma(b) -
//! lgamma(a + b), and its partial derivatives digamma(a) - digamma(a + b).
//!
//! Summing three lgamma values loses the result to cancellation once an
//! argument is large (lbeta(1, 1e7) is -16 from terms near 1.5e8), so past
//! 10 the Stirling parts that cancel are subtracted by hand: with
//! S(z) = (z - 1/2) ln z - z + ln(2 pi)/2 and lgamma = S + t (t the
//! series tail),
//!
//! * x < 10 <= y: lgamma(y) - lgamma(x + y) = x - x ln(x + y)
//!   - (y - 1/2) log1p(x / y) + t(y) - t(x + y);
//! * 10 <= x <= y: lbeta = ln(2 pi)/2 - ln(y)/2 + (x - 1/2) ln(x / (x + y))
//!   - y log1p(x / y) + t(x) + t(y) - t(x + y).

use super::gamma::{HALF_LN_2PI, digamma_tail, lgamma_f64, stirling_tail, trigamma_f64};
use super::logexp::log1p_f64;

/// Where the Stirling forms take over from lgamma sums.
const LARGE: f64 = 10.0;

/// lbeta(x, y) in f64 for 0 < x <= y, both finite.
pub(super) fn lbeta_f64(x: f64, y: f64) -> f64 {
    let s = x + y;
    if y < LARGE {
        lgamma_f64(x) + lgamma_f64(y) - lgamma_f64(s)
    } else if x < LARGE {
        let diff = x - x * s.ln() - (y - 0.5) * log1p_f64(x / y);
        lgamma_f64(x) + diff + (stirling_tail(y) - stirling_tail(s))
    } else {
        let tails = stirling_tail(x) + stirling_tail(y) - stirling_tail(s);
        HALF_LN_2PI - 0.5 * y.ln() + (x - 0.5) * (x / s).ln() - y * log1p_f64(x / y) + tails
    }
}

/// ln B(a, b) = ln(Gamma(a) Gamma(b) / Gamma(a + b)) for a, b >= 0: +inf
/// when either is 0, -inf when either is +inf (and the other is not 0),
/// NaN below 0 (as Stan).
pub fn lbeta(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() || a < 0.0 || b < 0.0 {
        return f32::NAN;
    }
    let (x, y) = (a.min(b) as f64, a.max(b) as f64);
    if x == 0.0 {
        return f32::INFINITY;
    }
    if y.is_infinite() {
        return f32::NEG_INFINITY;
    }
    lbeta_f64(x, y) as f32
}

/// digamma(u) - digamma(u + s) in f64 for u, s > 0 finite, keeping its
/// relative accuracy when s << u (a difference of two digammas would not):
/// below s = 1e-9 u the first Taylor term -s trigamma(u) (the next is
/// 1e-9 of it); otherwise both are shifted up to v >= 10 together, each
/// step adding -s / (v (v + s)) (one sign: no cancellation), and the
/// asymptotic series' ln terms are subtracted as -log1p(s / v).
fn digamma_diff_f64(u: f64, s: f64) -> f64 {
    if s <= 1e-9 * u {
        return -s * trigamma_f64(u);
    }
    let (mut acc, mut v) = (0.0, u);
    while v < LARGE {
        acc -= s / (v * (v + s));
        v += 1.0;
    }
    let w = v + s;
    acc - log1p_f64(s / v) - 0.5 * s / (v * w) - (digamma_tail(v) - digamma_tail(w))
}

/// d/du lbeta(u, s) = digamma(u) - digamma(u + s) for u, s >= 0: -inf at
/// u = 0 or s = +inf, 0 at s = 0 or u = +inf (the limits), NaN where
/// lbeta is NaN and at u = s = +inf.
fn lbeta_grad_first(u: f32, s: f32) -> f32 {
    if u.is_nan() || s.is_nan() || u < 0.0 || s < 0.0 || (u.is_infinite() && s.is_infinite()) {
        return f32::NAN;
    }
    if u == 0.0 || s.is_infinite() {
        return f32::NEG_INFINITY;
    }
    if s == 0.0 || u.is_infinite() {
        return 0.0;
    }
    digamma_diff_f64(u as f64, s as f64) as f32
}

/// d/da lbeta(a, b) = digamma(a) - digamma(a + b).
pub fn lbeta_grad_a(a: f32, b: f32) -> f32 {
    lbeta_grad_first(a, b)
}

/// d/db lbeta(a, b) = digamma(b) - digamma(a + b).
pub fn lbeta_grad_b(a: f32, b: f32) -> f32 {
    lbeta_grad_first(b, a)
}

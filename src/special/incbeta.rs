//! The regularised incomplete beta function I_x(a, b) = B(x; a, b) /
//! B(a, b) for a > 0, b > 0, 0 <= x <= 1 (Stan's inc_beta), the CDF of
//! Beta(a, b) at x, with its partial derivatives in a, b and x.
//!
//! Computed in f64 as logs, ln I and ln(1 - I) together, so the smaller
//! tail keeps its relative accuracy and the larger is 1 minus it. Each
//! tail is x^a (1 - x)^b / (a B(a, b)) times the continued fraction of
//! I_x(a, b) (evaluated by the modified Lentz method), which converges
//! quickly for x < (a + 1) / (a + b + 2); past that point the same
//! fraction is used for the other tail through the symmetry I_x(a, b) =
//! 1 - I_{1-x}(b, a). When the tail on the fast side is so near 1 that
//! the other one is below 1e-6 (small a or b), the fraction of the other
//! tail is tried too, so a small I or 1 - I is not formed as 1 minus a
//! number near 1.
//!
//! The prefactor x^a (1 - x)^b / B(a, b) is a log. For a, b >= 10 it is
//! a ln(x / m) + b ln((1 - x) / (1 - m)) + ln(a b / (a + b)) / 2 - ln(2
//! pi) / 2 - (Stirling's tails), m = a / (a + b) the mean, with both logs
//! as log1p of (x - m) over m and 1 - m: the terms of size a ln a cancel
//! on paper, and an error in m cancels between the two to first order.
//!
//! The fraction needs about sqrt(a + b) steps near the mean for large a
//! and b; it stops at `MAX_STEPS` and gives NaN (not a wrong number)
//! where it has not converged, far beyond the tested a, b <= 1e5.

use super::beta::lbeta_f64;
use super::gamma::{HALF_LN_2PI, stirling_tail};
use super::logexp::{expm1_f64, log1p_f64};

/// The most steps of the continued fraction on the side that converges.
const MAX_STEPS: usize = 100_000;

/// The most steps tried on the other side (only for a larger tail's
/// complement; if it does not converge, 1 minus the larger tail is used).
const OTHER_SIDE_STEPS: usize = 5_000;

/// ln(1e-6): a complement below it is worth the other side's fraction
/// (1 - I there has lost six of its digits to the subtraction).
const LN_TINY_COMPLEMENT: f64 = -13.815510557964274;

/// f64's unit roundoff: the fraction stops when a step changes it by less.
const EPS: f64 = f64::EPSILON / 2.0;

/// Where the Stirling form of the prefactor takes over.
const LARGE: f64 = 10.0;

/// ln(x^a (1 - x)^b / B(a, b)) for a, b > 0 finite, 0 < x < 1.
fn log_prefactor(a: f64, b: f64, x: f64) -> f64 {
    if a < LARGE || b < LARGE {
        return a * x.ln() + b * log1p_f64(-x) - lbeta_f64(a.min(b), a.max(b));
    }
    let s = a + b;
    let (m, mc) = (a / s, b / s);
    let d = x - m;
    let ln_x_m = if d.abs() < 0.5 * m {
        log1p_f64(d / m)
    } else {
        (x / m).ln()
    };
    let ln_1mx_mc = if d.abs() < 0.5 * mc {
        log1p_f64(-d / mc)
    } else {
        log1p_f64(-x) - mc.ln()
    };
    let tails = stirling_tail(a) + stirling_tail(b) - stirling_tail(s);
    a * ln_x_m + b * ln_1mx_mc + 0.5 * (a * mc).ln() - HALF_LN_2PI - tails
}

/// ln I_x(a, b) for a, b > 0 finite, 0 < x < 1 by the continued fraction,
/// or None if it has not converged within `steps`.
fn log_lower_cf(a: f64, b: f64, x: f64, steps: usize) -> Option<f64> {
    // I = pre / a * 1 / (1 + d1 / (1 + d2 / (1 + ...))), with
    // d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)) and
    // d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1));
    // Lentz's c and d kept away from 0.
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for i in 1..steps {
        let m = i as f64;
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() <= EPS {
            return Some(log_prefactor(a, b, x) - a.ln() + h.ln());
        }
    }
    None
}

/// ln(1 - e^l) for l <= 0: the log of the other tail.
fn log_complement(l: f64) -> f64 {
    if l > -std::f64::consts::LN_2 {
        (-expm1_f64(l)).ln()
    } else {
        log1p_f64(-l.exp())
    }
}

/// (ln I_x(a, b), ln(1 - I_x(a, b))) for a, b > 0 finite, 0 < x < 1; NaN
/// where the fraction has not converged.
fn log_tails(a: f64, b: f64, x: f64) -> (f64, f64) {
    // 1 - x is exact: x came from an f32.
    let y = 1.0 - x;
    let lower_first = x < (a + 1.0) / (a + b + 2.0);
    let first = if lower_first {
        log_lower_cf(a, b, x, MAX_STEPS)
    } else {
        log_lower_cf(b, a, y, MAX_STEPS)
    };
    let Some(first) = first else {
        return (f64::NAN, f64::NAN);
    };
    // A tail within rounding of 1 may come out a hair above it.
    let first = first.min(0.0);
    let mut other = log_complement(first);
    if other < LN_TINY_COMPLEMENT {
        // 1 minus a number this near 1 has lost digits; the other side's
        // fraction, where it converges, has not (its rounding, summed over
        // its slow steps, stays near 1e-10).
        let direct = if lower_first {
            log_lower_cf(b, a, y, OTHER_SIDE_STEPS)
        } else {
            log_lower_cf(a, b, x, OTHER_SIDE_STEPS)
        };
        if let Some(direct) = direct {
            other = direct;
        }
    }
    if lower_first {
        (first, other)
    } else {
        (other, first)
    }
}

/// The value at the domain's edges, or None inside it (a, b > 0 finite,
/// 0 < x < 1). NaN for a NaN, a <= 0, b <= 0, x outside [0, 1], or a = b
/// = +inf; 0 at x = 0 and 1 at x = 1; a = +inf puts all mass at 1 (I =
/// 0), b = +inf all at 0 (I = 1).
fn edge_value(a: f32, b: f32, x: f32) -> Option<f32> {
    if a.is_nan() || b.is_nan() || x.is_nan() || a <= 0.0 || b <= 0.0 {
        return Some(f32::NAN);
    }
    if !(0.0..=1.0).contains(&x) || (a.is_infinite() && b.is_infinite()) {
        return Some(f32::NAN);
    }
    if x == 0.0 || a.is_infinite() {
        return Some(0.0);
    }
    if x == 1.0 || b.is_infinite() {
        return Some(1.0);
    }
    None
}

/// I_x(a, b), the regularised incomplete beta function (the CDF of
/// Beta(a, b) at x), for a > 0, b > 0, 0 <= x <= 1: 0 at x = 0, 1 at x =
/// 1; NaN for a <= 0, b <= 0, x outside [0, 1], NaN, or a = b = +inf.
pub fn beta_inc(a: f32, b: f32, x: f32) -> f32 {
    if let Some(v) = edge_value(a, b, x) {
        return v;
    }
    log_tails(a as f64, b as f64, x as f64).0.exp() as f32
}

/// d/dx I_x(a, b) = x^(a - 1) (1 - x)^(b - 1) / B(a, b), the Beta(a, b)
/// density. At x = 0 its limit (+inf for a < 1, b for a = 1, 0 for a >
/// 1), at x = 1 likewise in b; 0 for an infinite a or b; NaN as
/// `beta_inc`'s.
pub fn beta_inc_grad_x(a: f32, b: f32, x: f32) -> f32 {
    if let Some(v) = edge_value(a, b, x) {
        if v.is_nan() {
            return f32::NAN;
        }
        if a.is_infinite() || b.is_infinite() {
            return 0.0;
        }
        // The end's exponent and the density's value there when it is 1.
        let (e, at_one) = if x == 0.0 { (a, b) } else { (b, a) };
        return match e.partial_cmp(&1.0) {
            Some(std::cmp::Ordering::Less) => f32::INFINITY,
            Some(std::cmp::Ordering::Equal) => at_one,
            _ => 0.0,
        };
    }
    let (a, b, x) = (a as f64, b as f64, x as f64);
    (log_prefactor(a, b, x) - x.ln() - log1p_f64(-x)).exp() as f32
}

/// d/da I_x(a, b) (`wrt_a`) or d/db, in f64; 0 at the edges, where I is
/// constant in both; NaN as `beta_inc`'s.
///
/// No closed form: a five-point central difference of ln F, F the smaller
/// of I and 1 - I, in the one parameter p, then dF/dp = F d(ln F)/dp. ln F
/// is used because its higher derivatives stay of the size of its first
/// where F's grow with its steepness in the tails. The step is 1e-2 of the
/// scale s over which F changes with p: the smaller of p itself and the
/// change of p that moves the mean m = a / (a + b) by one standard
/// deviation (near the mean for large a and b, about sqrt(a + b)). The
/// truncation error, (h / s)^4 / 30 relative, is near 3e-10; the rounding
/// error, ln F's (1e-10 relative at worst, where the other side's fraction
/// gave it) over about 12 h / s, near 1e-8. The mpmath fixtures' worst is
/// printed by the tests.
fn grad_param_f64(a: f32, b: f32, x: f32, wrt_a: bool) -> f64 {
    if let Some(v) = edge_value(a, b, x) {
        return if v.is_nan() { f64::NAN } else { 0.0 };
    }
    let (a, b, x) = (a as f64, b as f64, x as f64);
    let (li, lc) = log_tails(a, b, x);
    if li.is_nan() || lc.is_nan() {
        return f64::NAN;
    }
    let lower = li <= lc;
    let ln_smaller = |p: f64| {
        let (i, c) = if wrt_a {
            log_tails(p, b, x)
        } else {
            log_tails(a, p, x)
        };
        if lower { i } else { c }
    };
    let (p, other) = if wrt_a { (a, b) } else { (b, a) };
    let s = a + b;
    let sd = (a * b / (s + 1.0)).sqrt() / s;
    // |dm/dp|: b / s^2 for p = a, a / s^2 for p = b.
    let mean_rate = other / (s * s);
    let h = 1e-2 * p.min(sd / mean_rate);
    let slope = (8.0 * (ln_smaller(p + h) - ln_smaller(p - h))
        - (ln_smaller(p + 2.0 * h) - ln_smaller(p - 2.0 * h)))
        / (12.0 * h);
    if slope.is_nan() {
        return f64::NAN;
    }
    if lower {
        li.exp() * slope
    } else {
        -(lc.exp() * slope)
    }
}

/// d/da I_x(a, b) (see `grad_param_f64`).
pub fn beta_inc_grad_a(a: f32, b: f32, x: f32) -> f32 {
    grad_param_f64(a, b, x, true) as f32
}

/// d/db I_x(a, b) (see `grad_param_f64`).
pub fn beta_inc_grad_b(a: f32, b: f32, x: f32) -> f32 {
    grad_param_f64(a, b, x, false) as f32
}

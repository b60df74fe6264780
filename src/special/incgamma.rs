//! The regularised incomplete gamma functions P(a, x) = gamma(a, x) /
//! Gamma(a) (lower) and Q(a, x) = 1 - P(a, x) (upper), for a > 0, x >= 0,
//! with their partial derivatives.
//!
//! Both are computed in f64 as logs, ln P and ln Q together, so the
//! smaller tail keeps its relative accuracy and the larger is 1 minus it:
//!
//! * a < 1 and x < 2: P = u (1 + a T), Q = (1 - u) - u a T, with u =
//!   x^a / Gamma(1 + a) and T = sum_{n>=1} (-x)^n / (n! (a + n)), the
//!   power series of gamma(a, x) with its first term taken out, so Q keeps
//!   its digits as a -> 0 (where P -> 1).
//! * otherwise, x < a + 1: the series P = e^-x x^a / Gamma(a + 1) sum_n
//!   x^n / ((a + 1) ... (a + n)), every term positive.
//! * otherwise: Legendre's continued fraction for Q, evaluated by the
//!   modified Lentz method.
//!
//! The prefactor x^a e^-x / Gamma(a) is formed as a log; for a >= 10 as
//! a ln(x / a) + (a - x) + ln(a) / 2 - ln(2 pi) / 2 - (Stirling's tail),
//! with ln(x / a) as log1p((x - a) / a) near x = a, so the terms of size a
//! ln a cancel exactly on paper, not in rounding.
//!
//! Both the series and the fraction need about min(9 sqrt(a), 37 /
//! |ln(x / a)|) steps: many only near x = a for large a. They stop at
//! `MAX_STEPS`, so a > 3e7 with |x / a - 1| below about 1e-3 gives NaN
//! (a sum that has not converged) rather than a wrong number. The
//! mpmath fixtures verify a <= 1e6, x <= 1e8.

use super::gamma::{HALF_LN_2PI, lgamma_f64, lgamma1p_f64, stirling_tail};
use super::logexp::{expm1_f64, log1p_f64};

/// The most terms of the series or the continued fraction.
const MAX_STEPS: usize = 50_000;

/// f64's unit roundoff: a sum stops when its next term is below it.
const EPS: f64 = f64::EPSILON / 2.0;

/// ln(x^a e^-x / Gamma(a)) for a > 0, x > 0, both finite.
fn log_prefactor(a: f64, x: f64) -> f64 {
    if a < 10.0 {
        return a * x.ln() - x - lgamma_f64(a);
    }
    let d = x - a;
    let ln_ratio = if d.abs() < 0.5 * a {
        log1p_f64(d / a)
    } else {
        (x / a).ln()
    };
    a * ln_ratio - d + 0.5 * a.ln() - HALF_LN_2PI - stirling_tail(a)
}

/// ln(1 - e^l) for l <= 0: the log of the other tail.
fn log_complement(l: f64) -> f64 {
    if l > -std::f64::consts::LN_2 {
        (-expm1_f64(l)).ln()
    } else {
        log1p_f64(-l.exp())
    }
}

/// (ln P(a, x), ln Q(a, x)) for a > 0, x > 0, both finite; NaN where a
/// sum has not converged within `MAX_STEPS`.
fn log_tails(a: f64, x: f64) -> (f64, f64) {
    if a < 1.0 && x < 2.0 {
        // ln u = a ln x - lgamma(1 + a) (the series at 1 below a = 1/2,
        // where 1 + a would round a away); T alternates, its terms shrink
        // from the first on (x < 2), at most 2 in size.
        let lgamma_1p = if a < 0.5 {
            lgamma1p_f64(a)
        } else {
            lgamma_f64(1.0 + a)
        };
        let ln_u = a * x.ln() - lgamma_1p;
        let (mut term, mut t) = (1.0, 0.0);
        for n in 1..MAX_STEPS {
            let nf = n as f64;
            term *= -x / nf;
            let next = term / (a + nf);
            t += next;
            if next.abs() <= EPS * t.abs() {
                break;
            }
        }
        let u = ln_u.exp();
        let p = u * (1.0 + a * t);
        let q = -expm1_f64(ln_u) - u * a * t;
        return (p.ln(), q.ln());
    }
    let pre = log_prefactor(a, x);
    if x < a + 1.0 {
        let (mut term, mut sum, mut ap) = (1.0, 1.0, a);
        let mut converged = false;
        for _ in 0..MAX_STEPS {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term <= EPS * sum {
                converged = true;
                break;
            }
        }
        if !converged {
            return (f64::NAN, f64::NAN);
        }
        let lp = pre + (sum / a).ln();
        (lp, log_complement(lp))
    } else {
        // Q = pre / (b0 - 1 (1 - a) / (b1 - 2 (2 - a) / (b2 - ...))), with
        // b_n = x + 2n + 1 - a; Lentz's c and d kept away from 0.
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        let mut converged = false;
        for i in 1..MAX_STEPS {
            let fi = i as f64;
            let an = -fi * (fi - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let step = d * c;
            h *= step;
            if (step - 1.0).abs() <= EPS {
                converged = true;
                break;
            }
        }
        if !converged {
            return (f64::NAN, f64::NAN);
        }
        let lq = pre + h.ln();
        (log_complement(lq), lq)
    }
}

/// The tails at the domain's edges, or None inside it (a > 0 finite,
/// 0 < x < inf): (P, Q) as f32.
fn edge_values(a: f32, x: f32) -> Option<(f32, f32)> {
    if a.is_nan() || x.is_nan() || a <= 0.0 || x < 0.0 || (a.is_infinite() && x.is_infinite()) {
        return Some((f32::NAN, f32::NAN));
    }
    if x == 0.0 || a.is_infinite() {
        return Some((0.0, 1.0));
    }
    if x.is_infinite() {
        return Some((1.0, 0.0));
    }
    None
}

/// P(a, x), the regularised lower incomplete gamma function, for a > 0,
/// x >= 0: 0 at x = 0 (and for a = +inf), 1 at x = +inf; NaN for a <= 0,
/// x < 0, NaN, or a = x = +inf (as Stan's gamma_p).
pub fn gamma_p(a: f32, x: f32) -> f32 {
    if let Some((p, _)) = edge_values(a, x) {
        return p;
    }
    log_tails(a as f64, x as f64).0.exp() as f32
}

/// Q(a, x) = 1 - P(a, x), the regularised upper incomplete gamma
/// function: 1 at x = 0, 0 at x = +inf, NaN where P is.
pub fn gamma_q(a: f32, x: f32) -> f32 {
    if let Some((_, q)) = edge_values(a, x) {
        return q;
    }
    log_tails(a as f64, x as f64).1.exp() as f32
}

/// sign times d/dx P(a, x) = x^(a - 1) e^-x / Gamma(a) (sign -1 for Q):
/// at x = 0 the limit (+inf for a < 1, 1 for a = 1, 0 for a > 1), 0 at
/// x = +inf and for a = +inf. The sign is applied to numbers only: every
/// NaN is the constant one (a negated NaN's sign bit would reach the
/// gradient, differently on different kernel paths).
fn density(a: f32, x: f32, sign: f64) -> f64 {
    if let Some((p, _)) = edge_values(a, x) {
        if p.is_nan() {
            return f64::NAN;
        }
        if x == 0.0 && a.is_finite() {
            return match a.partial_cmp(&1.0) {
                Some(std::cmp::Ordering::Less) => sign * f64::INFINITY,
                Some(std::cmp::Ordering::Equal) => sign,
                _ => 0.0,
            };
        }
        return 0.0;
    }
    let (a, x) = (a as f64, x as f64);
    sign * (log_prefactor(a, x) - x.ln()).exp()
}

/// sign times d/da P(a, x) in f64 (sign -1 for Q: dQ/da = -dP/da), 0 at
/// the edges where P is constant in a; NaN as `density`'s.
///
/// No closed form: a central difference in a of ln F, F the smaller of P
/// and Q, then dF/da = F d(ln F)/da. ln F is used because its higher
/// derivatives in a stay of the size of ln(x / a) and its powers, where
/// F's own grow with F's steepness in the tails. The step h is 1e-5 a
/// below a = 1 and 1e-5 sqrt(a) above (near x = a, F changes over a width
/// of sqrt(a)). The error is that of ln F in f64 (a few 1e-16 times |ln F|
/// and the prefactor's terms) over 2h, plus the truncation h^2 (ln F)''' /
/// 6: both about 1e-10 relative, far below f32's 6e-8.
fn grad_a_f64(a: f32, x: f32, sign: f64) -> f64 {
    if let Some((p, _)) = edge_values(a, x) {
        return if p.is_nan() { f64::NAN } else { 0.0 };
    }
    let (a, x) = (a as f64, x as f64);
    let (lp, lq) = log_tails(a, x);
    if lp.is_nan() || lq.is_nan() {
        return f64::NAN;
    }
    let lower = lp <= lq;
    let ln_smaller = |s: f64| {
        let (p, q) = log_tails(s, x);
        if lower { p } else { q }
    };
    let h = 1e-5 * if a < 1.0 { a } else { a.sqrt() };
    let slope = (ln_smaller(a + h) - ln_smaller(a - h)) / (2.0 * h);
    if slope.is_nan() {
        return f64::NAN;
    }
    if lower {
        sign * (lp.exp() * slope)
    } else {
        -sign * (lq.exp() * slope)
    }
}

/// d/da P(a, x) (see `grad_a_f64`).
pub fn gamma_p_grad_a(a: f32, x: f32) -> f32 {
    grad_a_f64(a, x, 1.0) as f32
}

/// d/dx P(a, x) = x^(a - 1) e^-x / Gamma(a).
pub fn gamma_p_grad_b(a: f32, x: f32) -> f32 {
    density(a, x, 1.0) as f32
}

/// d/da Q(a, x) = -d/da P(a, x).
pub fn gamma_q_grad_a(a: f32, x: f32) -> f32 {
    grad_a_f64(a, x, -1.0) as f32
}

/// d/dx Q(a, x) = -x^(a - 1) e^-x / Gamma(a).
pub fn gamma_q_grad_b(a: f32, x: f32) -> f32 {
    density(a, x, -1.0) as f32
}

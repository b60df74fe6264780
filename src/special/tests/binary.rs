//! lbeta and log_diff_exp, values and both partial derivatives, against the
//! mpmath values committed in tests/data/special (written by
//! scripts/special_reference.py: 120 digits, rounded to float64), on its
//! grid of tails, near-zero results, a >> b and a ~ b. Each kernel's
//! worst error in float32 ulps is printed (`--nocapture`) and bounded.
use super::ulps;
use crate::special::*;

const LBETA: &str = include_str!("../../../tests/data/special/lbeta.csv");
const LOG_DIFF_EXP: &str = include_str!("../../../tests/data/special/log_diff_exp.csv");

/// (a, b, [value, d/da, d/db]) per line; `#` lines are comments.
fn rows(text: &str) -> Vec<(f32, f32, [f64; 3])> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|c| c.parse().unwrap()).collect();
            assert_eq!(v.len(), 5, "{l}");
            let (a, b) = (v[0] as f32, v[1] as f32);
            assert!(a as f64 == v[0] && b as f64 == v[1], "not float32: {l}");
            (a, b, [v[2], v[3], v[4]])
        })
        .collect()
}

type Binary = fn(f32, f32) -> f32;

/// Worst ulps of each of `fs` over `rows`, where, and whether all are
/// within `bound`.
fn check(name: &str, text: &str, fs: [(&str, Binary); 3], bound: u64) -> bool {
    let rows = rows(text);
    let mut ok = true;
    for (k, (label, f)) in fs.iter().enumerate() {
        let (mut worst, mut at) = (0, (f32::NAN, f32::NAN));
        for &(a, b, want) in &rows {
            let e = ulps(f(a, b), want[k] as f32);
            if e > worst || at.0.is_nan() {
                (worst, at) = (e, (a, b));
            }
        }
        println!(
            "{name:<12} {label:<5} {:>5} points: worst {worst} ulps at ({:e}, {:e})",
            rows.len(),
            at.0,
            at.1
        );
        ok &= worst <= bound;
    }
    ok
}

/// Every value and partial derivative within 4 ulps of the float64
/// reference rounded to float32: the kernels compute in f64 with forms
/// free of cancellation (see `beta.rs`, `logdiff.rs`) and round once.
#[test]
fn lbeta_and_log_diff_exp_match_mpmath() {
    let lbeta_ok = check(
        "lbeta",
        LBETA,
        [
            ("value", lbeta),
            ("d/da", lbeta_grad_a),
            ("d/db", lbeta_grad_b),
        ],
        4,
    );
    let lde_ok = check(
        "log_diff_exp",
        LOG_DIFF_EXP,
        [
            ("value", log_diff_exp),
            ("d/da", log_diff_exp_grad_a),
            ("d/db", log_diff_exp_grad_b),
        ],
        4,
    );
    assert!(lbeta_ok && lde_ok, "over 4 ulps (see the lines above)");
}

/// The edges each kernel states, and symmetry.
#[test]
fn lbeta_and_log_diff_exp_edges() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    assert_eq!(lbeta(1.0, 1.0), 0.0);
    assert_eq!(lbeta(0.0, 2.0), inf);
    assert_eq!(lbeta(2.0, inf), -inf);
    assert!(lbeta(-1.0, 2.0).is_nan() && lbeta(nan, 1.0).is_nan());
    assert_eq!(lbeta(3.5, 1e6), lbeta(1e6, 3.5));
    assert_eq!(lbeta_grad_a(3.5, 1e6), lbeta_grad_b(1e6, 3.5));
    assert_eq!(lbeta_grad_a(0.0, 2.0), -inf);
    assert_eq!(lbeta_grad_b(0.0, 2.0), 0.0);
    assert!(lbeta_grad_a(-1.0, 2.0).is_nan());

    assert_eq!(log_diff_exp(1.0, 1.0), -inf);
    assert_eq!(log_diff_exp(-inf, -inf), -inf);
    assert_eq!(log_diff_exp(2.5, -inf), 2.5);
    assert_eq!(log_diff_exp(inf, 3.0), inf);
    assert!(log_diff_exp(inf, inf).is_nan() && log_diff_exp(1.0, 2.0).is_nan());
    assert_eq!(
        (log_diff_exp_grad_a(1.0, 1.0), log_diff_exp_grad_b(1.0, 1.0)),
        (inf, -inf)
    );
    assert_eq!(
        (
            log_diff_exp_grad_a(2.5, -inf),
            log_diff_exp_grad_b(2.5, -inf)
        ),
        (1.0, 0.0)
    );
    assert!(log_diff_exp_grad_a(1.0, 2.0).is_nan() && log_diff_exp_grad_b(nan, 0.0).is_nan());
}

const GAMMA_P: &str = include_str!("../../../tests/data/special/gamma_p.csv");
const GAMMA_Q: &str = include_str!("../../../tests/data/special/gamma_q.csv");

/// Worst relative error of `f` over `rows` against column `k`, counting a
/// reference below f32's smallest normal by its ulps instead (there the
/// relative error of an f32 is not small); where it is, printed.
fn worst_relative(name: &str, rows: &[(f32, f32, [f64; 3])], k: usize, f: Binary) -> f64 {
    let (mut worst, mut at) = (0.0f64, (f32::NAN, f32::NAN));
    for &(a, b, want) in rows {
        let (got, w) = (f(a, b) as f64, want[k]);
        let e = if w == 0.0 || !w.is_finite() || w.abs() < f32::MIN_POSITIVE as f64 {
            if ulps(got as f32, w as f32) <= 4 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            ((got - w) / w).abs()
        };
        if e > worst || at.0.is_nan() {
            (worst, at) = (e, (a, b));
        }
    }
    println!(
        "{name:<12} d/da  {:>5} points: worst relative {worst:.2e} at ({:e}, {:e})",
        rows.len(),
        at.0,
        at.1
    );
    worst
}

/// P and Q and their x-partials within 4 ulps of the float64 reference
/// rounded to float32, on a grid of a from 1e-30 to 1e6 and x from 0 to
/// 1e8 (tails both ways, the median, the switches between the series and
/// the continued fraction); the a-partials, a float64 central difference,
/// within a relative 1e-6 (see `incgamma.rs` for its error bound).
#[test]
fn gamma_p_and_gamma_q_match_mpmath() {
    let p_ok = check(
        "gamma_p",
        GAMMA_P,
        [
            ("value", gamma_p),
            ("d/da", gamma_p_grad_a),
            ("d/dx", gamma_p_grad_b),
        ],
        4,
    );
    let q_ok = check(
        "gamma_q",
        GAMMA_Q,
        [
            ("value", gamma_q),
            ("d/da", gamma_q_grad_a),
            ("d/dx", gamma_q_grad_b),
        ],
        4,
    );
    let rel_p = worst_relative("gamma_p", &rows(GAMMA_P), 1, gamma_p_grad_a);
    let rel_q = worst_relative("gamma_q", &rows(GAMMA_Q), 1, gamma_q_grad_a);
    assert!(p_ok && q_ok, "over 4 ulps (see the lines above)");
    assert!(rel_p <= 1e-6 && rel_q <= 1e-6, "d/da over 1e-6 relative");
}

/// The edges P and Q state, and their partials there.
#[test]
fn gamma_p_and_gamma_q_edges() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    for (a, x) in [
        (0.0, 1.0),
        (-1.0, 1.0),
        (1.0, -1.0),
        (nan, 1.0),
        (1.0, nan),
        (inf, inf),
    ] {
        assert!(
            gamma_p(a, x).is_nan() && gamma_q(a, x).is_nan(),
            "({a}, {x})"
        );
        assert!(gamma_p_grad_a(a, x).is_nan() && gamma_q_grad_b(a, x).is_nan());
    }
    assert_eq!((gamma_p(2.5, 0.0), gamma_q(2.5, 0.0)), (0.0, 1.0));
    assert_eq!((gamma_p(2.5, inf), gamma_q(2.5, inf)), (1.0, 0.0));
    assert_eq!((gamma_p(inf, 3.0), gamma_q(inf, 3.0)), (0.0, 1.0));
    // d/dx P at x = 0: x^(a - 1) / Gamma(a)'s limit.
    assert_eq!(gamma_p_grad_b(0.5, 0.0), inf);
    assert_eq!(gamma_p_grad_b(1.0, 0.0), 1.0);
    assert_eq!(gamma_p_grad_b(2.0, 0.0), 0.0);
    assert_eq!(gamma_q_grad_b(0.5, 0.0), -inf);
    assert_eq!(
        (gamma_p_grad_a(2.0, 0.0), gamma_p_grad_a(2.0, inf)),
        (0.0, 0.0)
    );
    // a = 1: P = 1 - e^-x, d/dx = e^-x.
    assert_eq!(gamma_q(1.0, 3.0), (-3.0f64).exp() as f32);
    assert_eq!(gamma_p_grad_b(1.0, 3.0), (-3.0f64).exp() as f32);
    // Q's far tail keeps its relative accuracy where 1 - P would be 0.
    assert!(gamma_q(1.0, 80.0) > 0.0 && gamma_p(1.0, 80.0) == 1.0);
    assert!(gamma_q(1e-30, 0.5) > 0.0 && gamma_p(1e-30, 0.5) == 1.0);
    // At x = a = 1e7, within the step cap: P(a, a) = 1/2 + 1 / (3 sqrt(2
    // pi a)) + O(a^-3/2) = 0.50004205. Past the cap the sums have not
    // converged: NaN.
    assert!((gamma_p(1e7, 1e7) as f64 - 0.50004205).abs() < 2e-7);
    assert!(gamma_p(1e12, 1e12).is_nan());
}

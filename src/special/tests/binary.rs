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

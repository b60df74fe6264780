//! beta_inc, its value and its three partial derivatives, against the
//! mpmath values committed in tests/data/special/beta_inc.csv (written by
//! scripts/special_reference.py: 120 digits, rounded to float64) on its
//! grid of a, b from 1e-3 to 1e5 and x at 0, 1, near both, across (0, 1)
//! and around the mean. The worst error of each is printed
//! (`--nocapture`) and bounded.
use super::ulps;
use crate::special::*;

const BETA_INC: &str = include_str!("../../../tests/data/special/beta_inc.csv");

type Ternary = fn(f32, f32, f32) -> f32;

/// (a, b, x, [value, d/da, d/db, d/dx]) per line; `#` lines are comments.
fn rows() -> Vec<([f32; 3], [f64; 4])> {
    BETA_INC
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|c| c.parse().unwrap()).collect();
            assert_eq!(v.len(), 7, "{l}");
            let args = [v[0] as f32, v[1] as f32, v[2] as f32];
            assert!((0..3).all(|k| args[k] as f64 == v[k]), "not float32: {l}");
            (args, [v[3], v[4], v[5], v[6]])
        })
        .collect()
}

/// The worst ulps of `f` against column `k` of the rows, and the worst
/// relative error (a reference below f32's smallest normal counted by its
/// ulps instead: 0 within 4 ulps, else infinite), both printed with where.
fn worst(label: &str, rows: &[([f32; 3], [f64; 4])], k: usize, f: Ternary) -> (u64, f64) {
    let (mut worst_ulps, mut at_ulps) = (0, [f32::NAN; 3]);
    let (mut worst_rel, mut at_rel) = (0.0f64, [f32::NAN; 3]);
    for &([a, b, x], want) in rows {
        let got = f(a, b, x);
        let w = want[k];
        let e = ulps(got, w as f32);
        if e > worst_ulps || at_ulps[0].is_nan() {
            (worst_ulps, at_ulps) = (e, [a, b, x]);
        }
        let rel = if w == 0.0 || !w.is_finite() || w.abs() < f32::MIN_POSITIVE as f64 {
            if e <= 4 { 0.0 } else { f64::INFINITY }
        } else {
            ((got as f64 - w) / w).abs()
        };
        if rel > worst_rel || at_rel[0].is_nan() {
            (worst_rel, at_rel) = (rel, [a, b, x]);
        }
    }
    println!(
        "beta_inc {label:<5} {:>5} points: worst {worst_ulps} ulps at {at_ulps:?}, \
         worst relative {worst_rel:.2e} at {at_rel:?}",
        rows.len()
    );
    (worst_ulps, worst_rel)
}

/// The value and all three partials within 4 ulps of the float64
/// reference rounded to float32 (d/da and d/db are float64 central
/// differences of the smaller tail's log, see `incbeta.rs`: their error
/// is far below an f32 ulp, so they are held to the same bound).
#[test]
fn beta_inc_matches_mpmath() {
    let rows = rows();
    let all = [
        worst("value", &rows, 0, beta_inc),
        worst("d/da", &rows, 1, beta_inc_grad_a),
        worst("d/db", &rows, 2, beta_inc_grad_b),
        worst("d/dx", &rows, 3, beta_inc_grad_x),
    ];
    assert!(
        all.iter().all(|&(u, _)| u <= 4),
        "over 4 ulps (see the lines above)"
    );
}

/// The edges beta_inc states, and its partials there.
#[test]
fn beta_inc_edges() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    for (a, b, x) in [
        (0.0, 1.0, 0.5),
        (-1.0, 1.0, 0.5),
        (1.0, 0.0, 0.5),
        (1.0, 1.0, -0.25),
        (1.0, 1.0, 1.5),
        (nan, 1.0, 0.5),
        (1.0, nan, 0.5),
        (1.0, 1.0, nan),
        (inf, inf, 0.5),
    ] {
        assert!(beta_inc(a, b, x).is_nan(), "({a}, {b}, {x})");
        let grads = [
            beta_inc_grad_a(a, b, x),
            beta_inc_grad_b(a, b, x),
            beta_inc_grad_x(a, b, x),
        ];
        assert!(grads.iter().all(|g| g.is_nan()), "({a}, {b}, {x})");
    }
    assert_eq!(
        (beta_inc(2.5, 0.5, 0.0), beta_inc(2.5, 0.5, 1.0)),
        (0.0, 1.0)
    );
    // An infinite a puts all the mass at 1, an infinite b at 0.
    assert_eq!(
        (beta_inc(inf, 2.0, 0.9), beta_inc(2.0, inf, 1e-6)),
        (0.0, 1.0)
    );
    assert_eq!(
        (
            beta_inc_grad_a(2.0, 3.0, 0.0),
            beta_inc_grad_b(2.0, 3.0, 1.0)
        ),
        (0.0, 0.0)
    );
    // The density at the ends: x^(a - 1) near 0, (1 - x)^(b - 1) near 1.
    assert_eq!(beta_inc_grad_x(0.5, 3.0, 0.0), inf);
    assert_eq!(beta_inc_grad_x(1.0, 3.0, 0.0), 3.0);
    assert_eq!(beta_inc_grad_x(2.0, 3.0, 0.0), 0.0);
    assert_eq!(beta_inc_grad_x(2.0, 0.5, 1.0), inf);
    assert_eq!(beta_inc_grad_x(2.0, 1.0, 1.0), 2.0);
    assert_eq!(beta_inc_grad_x(inf, 1.0, 0.5), 0.0);
    // Symmetry: I_x(a, b) = 1 - I_{1-x}(b, a), each tail keeping its
    // relative accuracy where 1 minus the other would round to 0.
    let small = beta_inc(3.0, 4.0, 1e-3);
    assert!(small > 0.0 && small < 1e-7);
    assert_eq!(beta_inc(4.0, 3.0, 1.0 - 1e-3), 1.0);
    assert!((beta_inc(2.0, 5.0, 0.25) + beta_inc(5.0, 2.0, 0.75) - 1.0).abs() <= 1e-7);
    // A b so small that the fast side's tail rounds to 1 (its log to a
    // hair above 0): the other side's fraction gives I ~ 5.9 b.
    let tiny_b = beta_inc(2.0, 1e-20, 0.999);
    assert!((tiny_b / 5.9088e-20 - 1.0).abs() < 1e-4, "{tiny_b}");
    assert!(beta_inc_grad_b(2.0, 1e-20, 0.999).is_finite());
}

use super::LN_SQRT_2PI;
use crate::Context;
use crate::error::Error;
use crate::ops::gradcheck::{Check, gradcheck, read, read_grad};

const EPS: f64 = f32::EPSILON as f64;

/// Deterministic values in [lo, lo + width).
fn values(n: usize, seed: f32, lo: f32, width: f32) -> Vec<f32> {
    (0..n)
        .map(|i| lo + width * (0.5 + 0.5 * ((i as f32 + seed) * 0.731).sin()))
        .collect()
}

/// The op's value and its three gradients (y, mu, sigma as parameters).
fn ours(shape: &[usize], y: &[f32], mu: &[f32], sigma: &[f32]) -> (f32, [Vec<f32>; 3]) {
    let mut c = Context::new();
    let dims = |v: &[f32]| {
        if v.len() == 1 {
            vec![1]
        } else {
            shape.to_vec()
        }
    };
    let yt = c.param(shape, Some(y)).unwrap();
    let mt = c.param(&dims(mu), Some(mu)).unwrap();
    let st = c.param(&dims(sigma), Some(sigma)).unwrap();
    let lp = c.normal_lpdf(yt, mt, st).unwrap();
    c.backward(lp).unwrap();
    let lp = read(&c, lp)[0];
    (lp, [yt, mt, st].map(|t| read_grad(&c, t)))
}

/// A value in f64 and the bound on ours' distance from it.
type Bounded = (f64, f64);

/// The f64 value, its error bound, and each gradient's f64 value with its
/// bound.
fn reference(y: &[f32], mu: &[f32], sigma: &[f32]) -> (Bounded, [Vec<Bounded>; 3]) {
    let n = y.len();
    let at = |v: &[f32], i: usize| (if v.len() == 1 { v[0] } else { v[i] }) as f64;
    let z = |i: usize| (y[i] as f64 - at(mu, i)) / at(sigma, i);
    let lp: f64 = (0..n)
        .map(|i| -0.5 * z(i) * z(i) - at(sigma, i).ln() - LN_SQRT_2PI)
        .sum();
    // Per-element sigma: each ln sigma_i is f32's (within 2 ulp of its
    // magnitude, the element-wise ops' bound); the rest is f64 (its
    // error some 1e-15 of the terms' magnitudes).
    let magnitude: f64 = (0..n)
        .map(|i| 0.5 * z(i) * z(i) + at(sigma, i).ln().abs() + LN_SQRT_2PI)
        .sum();
    let ln_err: f64 = if sigma.len() == 1 {
        0.0
    } else {
        sigma
            .iter()
            .map(|&s| 2.0 * EPS * (s as f64).ln().abs())
            .sum()
    };
    let lp_err = 0.6 * EPS * lp.abs() + ln_err + 1e-13 * magnitude;
    let slope = |k: usize, i: usize| {
        let s = at(sigma, i);
        match k {
            0 => -z(i) / s,
            1 => z(i) / s,
            _ => (z(i) * z(i) - 1.0) / s,
        }
    };
    let grads = [0usize, 1, 2].map(|k| {
        let len = [y.len(), mu.len(), sigma.len()][k];
        if len == 1 && n > 1 {
            let want: f64 = (0..n).map(|i| slope(k, i)).sum();
            let mag: f64 = (0..n).map(|i| slope(k, i).abs()).sum();
            vec![(want, 0.6 * EPS * want.abs() + 1e-13 * mag)]
        } else {
            (0..n)
                .map(|i| (slope(k, i), 0.6 * EPS * slope(k, i).abs()))
                .collect()
        }
    });
    ((lp, lp_err), grads)
}

#[test]
fn matches_f64() {
    for shape in [&[1][..], &[7], &[3, 5], &[437]] {
        let n: usize = shape.iter().product();
        for (shared_mu, shared_sigma) in
            [(true, true), (false, true), (true, false), (false, false)]
        {
            let y = values(n, 0.3, -3.0, 6.0);
            let mu = values(if shared_mu { 1 } else { n }, 1.7, -1.0, 2.0);
            let sigma = values(if shared_sigma { 1 } else { n }, 2.9, 0.2, 3.0);
            let (lp, grads) = ours(shape, &y, &mu, &sigma);
            let ((want, err), want_grads) = reference(&y, &mu, &sigma);
            let case = format!("{shape:?}, mu shared {shared_mu}, sigma shared {shared_sigma}");
            assert!(
                (lp as f64 - want).abs() <= err,
                "{case}: lp {lp} vs {want} (bound {err})"
            );
            for (k, (got, want)) in grads.iter().zip(&want_grads).enumerate() {
                for (i, (&g, &(w, e))) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= e + 1e-30,
                        "{case}: operand {k}, element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn one_tensor_as_two_operands_adds_both_gradients() {
    // mu and sigma one shared scalar: d/ds = sum(z / s) + sum((z^2 - 1) / s).
    let y = values(9, 0.1, -2.0, 4.0);
    let mut c = Context::new();
    let s = c.param(&[1], Some(&[1.3])).unwrap();
    let yt = c.tensor(&[9], &y).unwrap();
    let lp = c.normal_lpdf(yt, s, s).unwrap();
    c.backward(lp).unwrap();
    let got = read_grad(&c, s)[0] as f64;
    let ((_, _), g) = reference(&y, &[1.3], &[1.3]);
    let want = g[1][0].0 + g[2][0].0;
    assert!(
        (got - want).abs() <= 4.0 * EPS * want.abs().max(1.0),
        "{got} vs {want}"
    );
}

#[test]
fn each_gradient_same_bits_whichever_others_are_wanted() {
    // The backward takes every wanted gradient from one pass (or, where
    // two operands are one tensor, one pass each): an operand's bits must
    // not depend on which others want theirs. Shared and per-element mu
    // and sigma, over several blocks.
    let n = 150;
    let y = values(n, 0.3, -3.0, 6.0);
    for (mu, sigma) in [
        (values(n, 1.7, -1.0, 2.0), values(n, 2.9, 0.2, 3.0)),
        (vec![0.4], values(n, 2.9, 0.2, 3.0)),
        (values(n, 1.7, -1.0, 2.0), vec![1.3]),
    ] {
        let operands = [&y[..], &mu[..], &sigma[..]];
        let grads = |want: [bool; 3]| {
            let mut c = Context::new();
            let mut t = [None; 3];
            // Parameters before any activation.
            for param in [true, false] {
                for k in (0..3).filter(|&k| want[k] == param) {
                    let (v, shape) = (operands[k], [operands[k].len()]);
                    t[k] = Some(if param {
                        c.param(&shape, Some(v)).unwrap()
                    } else {
                        c.tensor(&shape, v).unwrap()
                    });
                }
            }
            let t = t.map(Option::unwrap);
            let lp = c.normal_lpdf(t[0], t[1], t[2]).unwrap();
            c.backward(lp).unwrap();
            let bits = |t| {
                read_grad(&c, t)
                    .iter()
                    .map(|g| g.to_bits())
                    .collect::<Vec<_>>()
            };
            [0, 1, 2].map(|k| want[k].then(|| bits(t[k])))
        };
        let all = grads([true; 3]);
        for want in [
            [true, false, false],
            [false, true, true],
            [true, false, true],
            [true, true, false],
        ] {
            for (k, got) in grads(want).into_iter().enumerate() {
                if let Some(got) = got {
                    assert_eq!(Some(got), all[k], "operand {k}, wanted {want:?}");
                }
            }
        }
    }
}

#[test]
fn gradients_check() {
    for shapes in [
        [&[6][..], &[6][..], &[6][..]],
        [&[2, 3], &[1], &[1]],
        [&[5], &[1], &[5]],
    ] {
        gradcheck(
            Check::new("normal_lpdf", &shapes).range(0.4, 1.6),
            |c, x| c.normal_lpdf(x[0], x[1], x[2]),
        );
    }
}

#[test]
fn same_bits_on_every_level() {
    use crate::simd::{self, Level};
    let y = values(437, 0.3, -3.0, 6.0);
    let (mu, sigma) = (values(437, 1.7, -1.0, 2.0), values(437, 2.9, 0.2, 3.0));
    let run = || ours(&[437], &y, &mu, &sigma);
    let base = simd::with_level(Level::Baseline, run);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for level in [Level::Avx2Fma, Level::Avx512] {
        if level > simd::detected() {
            continue;
        }
        let got = simd::with_level(level, run);
        assert_eq!(got.0.to_bits(), base.0.to_bits(), "{level:?}");
        for (g, b) in got.1.iter().zip(&base.1) {
            assert_eq!(bits(g), bits(b), "{level:?}");
        }
    }
}

#[test]
fn bad_sigma_is_not_finite_and_shapes_are_errors() {
    let mut c = Context::new();
    let y = c.tensor(&[3], &[0.5, 1.0, 2.0]).unwrap();
    let mu = c.tensor(&[1], &[0.0]).unwrap();
    for s in [0.0f32, -1.0] {
        let sigma = c.tensor(&[1], &[s]).unwrap();
        let lp = c.normal_lpdf(y, mu, sigma).unwrap();
        assert!(!read(&c, lp)[0].is_finite(), "sigma {s}");
    }
    let ok = c.tensor(&[1], &[1.0]).unwrap();
    for shape in [&[2][..], &[3, 1], &[1, 3]] {
        let n: usize = shape.iter().product();
        let bad = c.tensor(shape, &vec![1.0; n]).unwrap();
        for (m, s) in [(bad, ok), (ok, bad)] {
            let e = c.normal_lpdf(y, m, s).unwrap_err();
            assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.contains("normal_lpdf"), "{msg}");
            assert!(msg.contains(&format!("{}", c.shape(bad).unwrap())), "{msg}");
        }
    }
}

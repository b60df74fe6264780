use super::{log_normaliser, weight};
use crate::Context;
use crate::error::Error;
use crate::ops::gradcheck::{Check, gradcheck};

/// A correlation factor from `constrain_cholesky_corr` on spread-out
/// coordinates, read back.
fn factor(c: &mut Context, k: usize) -> (crate::Tensor, Vec<f32>) {
    let n = k * (k - 1) / 2;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 1.31).sin() * 2.2).collect();
    let l = if n == 0 {
        c.param(&[1, 1], Some(&[1.0])).unwrap()
    } else {
        let x = c.param(&[n], Some(&xs)).unwrap();
        c.constrain_cholesky_corr(x).unwrap().0
    };
    let mut v = vec![0.0; k * k];
    c.read(l, &mut v).unwrap();
    (l, v)
}

#[test]
fn value_and_gradient_match_f64() {
    for k in 1..=6 {
        for eta in [0.5f32, 1.0, 1.7, 4.0, 250.0] {
            let mut c = Context::new();
            let (l, lv) = factor(&mut c, k);
            let lp = c.lkj_corr_cholesky_lpdf(l, eta).unwrap();
            let got = c.item(lp).unwrap() as f64;
            let terms: Vec<f64> = (1..k)
                .map(|i| weight(k, i, eta) * (lv[i * k + i] as f64).ln())
                .collect();
            let constant = log_normaliser(k, eta as f64);
            let want = terms.iter().sum::<f64>() - constant;
            // Summed in f64 and rounded once: half an f32 ulp of the
            // result, bounded by the terms' magnitudes (the f64 sum's and
            // lgamma's own errors are some 1e-15 of them).
            let scale = constant.abs() + terms.iter().map(|t| t.abs()).sum::<f64>();
            assert!(
                (got - want).abs() <= 0.6 * f32::EPSILON as f64 * scale.max(want.abs()) + 1e-30,
                "K {k}, eta {eta}: {got} vs {want}"
            );
            if k == 1 {
                assert_eq!(got, 0.0, "K 1 is the point mass at 1");
            }
            // d/dL_ii = weight / L_ii, once rounded; 0 off the diagonal.
            let mut c = Context::new();
            let l = c.param(&[k, k], Some(&lv)).unwrap();
            let lp = c.lkj_corr_cholesky_lpdf(l, eta).unwrap();
            c.backward(lp).unwrap();
            let mut dl = vec![0.0f32; k * k];
            c.read_grad(l, &mut dl).unwrap();
            for (idx, &d) in dl.iter().enumerate() {
                let (i, j) = (idx / k, idx % k);
                let want = if i == j && i >= 1 {
                    weight(k, i, eta) / lv[idx] as f64
                } else {
                    0.0
                };
                assert!(
                    (d as f64 - want).abs() <= 0.6 * f32::EPSILON as f64 * want.abs(),
                    "K {k}, eta {eta}, dL[{i}, {j}] = {d} vs {want}"
                );
            }
        }
    }
}

/// Trapezoid sum of f over the grid [-r, r]^dims with step h (f analytic
/// and decaying exponentially: the error is far below the tolerances).
fn trapezoid(dims: usize, r: f64, h: f64, f: impl Fn(&[f64]) -> f64) -> f64 {
    let m = (2.0 * r / h).round() as usize + 1;
    let mut at = vec![0usize; dims];
    let mut x = vec![0.0; dims];
    let mut total = 0.0;
    loop {
        let mut w = 1.0;
        for d in 0..dims {
            x[d] = -r + at[d] as f64 * h;
            if at[d] == 0 || at[d] == m - 1 {
                w *= 0.5;
            }
        }
        total += w * f(&x);
        let mut d = 0;
        while d < dims {
            at[d] += 1;
            if at[d] < m {
                break;
            }
            at[d] = 0;
            d += 1;
        }
        if d == dims {
            return total * h.powi(dims as i32);
        }
    }
}

#[test]
fn density_integrates_to_one() {
    // With Stan's log-Jacobian of x -> L (cholesky_corr_constrain: ln(1 -
    // z^2) per coordinate plus half the ln of each later entry's remaining
    // row norm), exp(lpdf(L(x)) + ln |J|) over x-space is a probability
    // density: this checks the constant and the diagonal's powers together.
    for eta in [0.5f32, 1.0, 2.5] {
        // K = 2: x -> z = tanh(x), L_11 = sqrt(1 - z^2).
        let one = trapezoid(1, 40.0, 0.01, |x| {
            // 1 - z^2 as sech^2: never rounded to 0 in the tails.
            let q = x[0].cosh().powi(-2);
            let ljac = q.ln();
            let lp = weight(2, 1, eta) * q.sqrt().ln() - log_normaliser(2, eta as f64);
            (lp + ljac).exp()
        });
        assert!((one - 1.0).abs() < 1e-9, "K 2, eta {eta}: {one}");
        // K = 3: rows (z1, sqrt(1 - z1^2)) and (z2, z3 sqrt(1 - z2^2),
        // sqrt((1 - z2^2)(1 - z3^2))).
        let three = trapezoid(3, 10.0 / eta as f64, 0.25, |x| {
            let q: Vec<f64> = x.iter().map(|x| x.cosh().powi(-2)).collect();
            let ljac = q[0].ln() + q[1].ln() + q[2].ln() + 0.5 * q[1].ln();
            let (l11, l22) = (q[0].sqrt(), (q[1] * q[2]).sqrt());
            let lp = weight(3, 1, eta) * l11.ln() + weight(3, 2, eta) * l22.ln()
                - log_normaliser(3, eta as f64);
            (lp + ljac).exp()
        });
        // The grid's tails ([-10 / eta, 10 / eta]^3) leave out some 1e-8.
        assert!((three - 1.0).abs() < 1e-6, "K 3, eta {eta}: {three}");
    }
}

#[test]
fn gradients_check() {
    for k in [2, 3, 4] {
        let n = k * (k - 1) / 2;
        // Through the factor (the way models use it) ...
        gradcheck(
            Check::new("lkj_corr_cholesky_lpdf", &[&[n]]).range(-1.5, 1.5),
            move |c, x| {
                let (l, _) = c.constrain_cholesky_corr(x[0])?;
                c.lkj_corr_cholesky_lpdf(l, 1.7)
            },
        );
        // ... and on any matrix with a positive diagonal.
        gradcheck(
            Check::new("lkj_corr_cholesky_lpdf", &[&[k, k]]).range(0.5, 1.5),
            |c, x| c.lkj_corr_cholesky_lpdf(x[0], 0.6),
        );
    }
}

#[test]
fn bad_shapes_and_eta_name_the_op() {
    let mut c = Context::new();
    for shape in [&[2][..], &[2, 3], &[3, 2], &[2, 2, 2]] {
        let n: usize = shape.iter().product();
        let l = c.tensor(shape, &vec![1.0; n]).unwrap();
        let e = c.lkj_corr_cholesky_lpdf(l, 1.0).unwrap_err();
        assert!(matches!(e, Error::BadShape { .. }), "{e}");
        let m = e.to_string();
        assert!(m.contains("lkj_corr_cholesky_lpdf"), "{m}");
        assert!(m.contains(&format!("{}", c.shape(l).unwrap())), "{m}");
    }
    let l = c.tensor(&[2, 2], &[1.0, 0.0, 0.0, 1.0]).unwrap();
    for eta in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        let e = c.lkj_corr_cholesky_lpdf(l, eta).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("lkj_corr_cholesky_lpdf"), "{e}");
    }
}

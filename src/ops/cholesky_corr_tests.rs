use crate::Context;
use crate::ops::gradcheck::{Check, gradcheck, read};

/// Stan's loop in f64 (sum_sqs and sqrt(1 - sum_sqs), 1 - z^2 from tanh),
/// the log-Jacobian as Stan accumulates it.
fn reference(x: &[f64], k: usize) -> (Vec<f64>, f64) {
    let mut l = vec![0.0; k * k];
    l[0] = 1.0;
    let (mut lp, mut at) = (0.0f64, 0);
    for i in 1..k {
        let mut sum_sqs = 0.0f64;
        for j in 0..i {
            let z = x[at].tanh();
            at += 1;
            lp += (1.0 - z * z).ln();
            if j > 0 {
                lp += 0.5 * (1.0 - sum_sqs).ln();
            }
            l[i * k + j] = z * (1.0 - sum_sqs).sqrt();
            sum_sqs += l[i * k + j] * l[i * k + j];
        }
        l[i * k + i] = (1.0 - sum_sqs).sqrt();
    }
    (l, lp)
}

#[test]
fn factor_and_log_jacobian_match_f64() {
    for k in [2, 3, 4, 6] {
        let n = k * (k - 1) / 2;
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.83).sin() * 1.7).collect();
        let x64: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let (want_l, want_j) = reference(&x64, k);
        let mut c = Context::new();
        let x = c.tensor(&[n], &xs).unwrap();
        let (l, j) = c.constrain_cholesky_corr(x).unwrap();
        assert_eq!(c.shape(l).unwrap().dims(), &[k, k]);
        // Each entry is computed in f64 and rounded once: half an f32 ulp
        // of |L_ij| <= 1, and the reference's own f64 error is far below.
        for (idx, (&g, &w)) in read(&c, l).iter().zip(&want_l).enumerate() {
            assert!(
                (g as f64 - w).abs() <= 0.6 * f32::EPSILON as f64 * w.abs().max(1e-30),
                "K {k}, L[{}, {}]: {g} vs {w}",
                idx / k,
                idx % k
            );
        }
        let got_j = read(&c, j)[0] as f64;
        assert!(
            (got_j - want_j).abs() <= 0.6 * f32::EPSILON as f64 * want_j.abs() + 1e-12,
            "K {k}: log-Jacobian {got_j} vs {want_j}"
        );
        // Rows of unit norm: L L^T has a unit diagonal.
        let lv = read(&c, l);
        for i in 0..k {
            let norm: f64 = (0..k).map(|m| (lv[i * k + m] as f64).powi(2)).sum();
            assert!(
                (norm - 1.0).abs() < 4.0 * k as f64 * f32::EPSILON as f64,
                "row {i}: {norm}"
            );
        }
    }
}

#[test]
fn far_tails_stay_finite() {
    // tanh saturates: z = +-1 and the rest of the row 0, ln(1 - z^2) from
    // |x| alone (about -2|x|), never ln 0.
    let xs = [40.0f32, -60.0, 0.5];
    let mut c = Context::new();
    let x = c.param(&[3], Some(&xs)).unwrap();
    let (l, j) = c.constrain_cholesky_corr(x).unwrap();
    let lv = read(&c, l);
    assert_eq!(lv[3], 1.0);
    assert_eq!(lv[6], -1.0);
    assert!(lv.iter().all(|v| v.is_finite()));
    let jv = read(&c, j)[0] as f64;
    let x64: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    let weights = [1.0, 1.5, 1.0]; // (row 1, j 0), (row 2, j 0), (row 2, j 1)
    let want: f64 = x64
        .iter()
        .zip(weights)
        .map(|(&x, w)| {
            w * (2.0 * std::f64::consts::LN_2
                - 2.0 * x.abs()
                - 2.0 * (-2.0 * x.abs()).exp().ln_1p())
        })
        .sum();
    assert!((jv - want).abs() <= 1e-6 * want.abs(), "{jv} vs {want}");
    let s = c.sum(l).unwrap();
    let t = c.add(s, j).unwrap();
    c.backward(t).unwrap();
    let mut g = [0.0f32; 3];
    c.read_grad(x, &mut g).unwrap();
    assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
}

#[test]
fn gradients_check() {
    for k in [2, 3, 4] {
        let n = k * (k - 1) / 2;
        // Both outputs, each entry of L weighted differently.
        gradcheck(
            Check::new("constrain_cholesky_corr", &[&[n]]).range(-1.5, 1.5),
            move |c, x| {
                let (l, j) = c.constrain_cholesky_corr(x[0])?;
                let w: Vec<f32> = (0..k * k).map(|i| 0.3 + 0.17 * i as f32).collect();
                let wt = c.tensor(&[k, k], &w)?;
                let lw = c.mul(l, wt)?;
                let s = c.sum(lw)?;
                let j2 = c.scale(j, 0.7)?;
                c.add(s, j2)
            },
        );
    }
}

/// d/dx of reference(x) weighted (sum w_ij L_ij + wj ln |J|), by central
/// differences in f64 (h = 1e-5: truncation near 1e-11, rounding near
/// 1e-11, both far below an f32 ulp of the gradients here).
fn reference_gradient(x: &[f64], k: usize, w: &[f64], wj: f64) -> Vec<f64> {
    let f = |x: &[f64]| {
        let (l, j) = reference(x, k);
        l.iter().zip(w).map(|(l, w)| l * w).sum::<f64>() + wj * j
    };
    let h = 1e-5;
    (0..x.len())
        .map(|i| {
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[i] += h;
            down[i] -= h;
            (f(&up) - f(&down)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn gradients_match_f64() {
    // Both branches of the coordinate kernel (|x| below and above 0.35),
    // an exact 0 and a far coordinate; L's gradient and the
    // log-Jacobian's apart, each rounded to f32 once from f64. K = 35's
    // longest rows are past what the backward keeps between its passes
    // (its coordinates a fifth as large, or the reference's 1 - sum of
    // squares rounds below 0 along a row of 34).
    let pool = [0.0f32, 1e-3, -0.2, 0.34, 0.36, -0.9, 2.5, -3.0, 6.0, 0.05];
    for k in [2, 3, 4, 5, 35] {
        let n = k * (k - 1) / 2;
        let scale = if k > 5 { 0.2 } else { 1.0 };
        let xs: Vec<f32> = (0..n)
            .map(|i| scale * pool[(i * 3 + k) % pool.len()])
            .collect();
        let x64: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let w: Vec<f32> = (0..k * k).map(|i| 0.3 + 0.17 * i as f32).collect();
        let w64: Vec<f64> = w.iter().map(|&w| w as f64).collect();
        for (wl, wj) in [(1.0f32, 0.0f32), (0.0, 0.7)] {
            let mut c = Context::new();
            let x = c.param(&[n], Some(&xs)).unwrap();
            let (l, j) = c.constrain_cholesky_corr(x).unwrap();
            let scaled: Vec<f32> = w.iter().map(|w| w * wl).collect();
            let wt = c.tensor(&[k, k], &scaled).unwrap();
            let lw = c.mul(l, wt).unwrap();
            let s = c.sum(lw).unwrap();
            let j2 = c.scale(j, wj).unwrap();
            let loss = c.add(s, j2).unwrap();
            c.backward(loss).unwrap();
            let mut got = vec![0.0f32; n];
            c.read_grad(x, &mut got).unwrap();
            let wl64: Vec<f64> = w64.iter().map(|w| w * wl as f64).collect();
            let want = reference_gradient(&x64, k, &wl64, wj as f64);
            let slack = 1e-8 * w64.iter().sum::<f64>();
            for (i, (&g, &want)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - want).abs() <= 0.6 * f32::EPSILON as f64 * want.abs() + slack,
                    "K {k}, weights ({wl}, {wj}), dx[{i}] = {g} vs {want}"
                );
            }
        }
    }
}

#[test]
fn bad_shapes_name_the_op_and_the_shape() {
    let mut c = Context::new();
    for shape in [&[2][..], &[4], &[3, 1], &[1, 1]] {
        let n: usize = shape.iter().product();
        let x = c.tensor(shape, &vec![0.0; n]).unwrap();
        let m = c.constrain_cholesky_corr(x).unwrap_err().to_string();
        assert!(m.contains("constrain_cholesky_corr"), "{m}");
        assert!(m.contains(&format!("{}", c.shape(x).unwrap())), "{m}");
    }
}

#[test]
fn order_of_inverts_the_pair_count() {
    assert_eq!(super::order_of(0), None);
    for k in 2..3000usize {
        let n = k * (k - 1) / 2;
        assert_eq!(super::order_of(n), Some(k), "n {n}");
        assert_eq!(super::order_of(n + 1), None, "n {}", n + 1);
    }
}

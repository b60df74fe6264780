use crate::Context;
use crate::ops::gradcheck::{Check, gradcheck, read};

/// A fixed symmetric positive-definite matrix `[n, n]` in f64: B B^T + n I
/// with B from a small generator.
fn spd(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f64 / (1u64 << 31) as f64) - 0.5
    };
    let b: Vec<f64> = (0..n * n).map(|_| next()).collect();
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = (0..n).map(|k| b[i * n + k] * b[j * n + k]).sum::<f64>();
        }
        a[i * n + i] += n as f64 * 0.25;
    }
    a
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// Cholesky in f64, for the references.
fn cholesky_f64(a: &[f64], n: usize) -> Vec<f64> {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| l[j * n + k] * l[j * n + k]).sum::<f64>();
        l[j * n + j] = d.sqrt();
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = s / l[j * n + j];
        }
    }
    l
}

/// The backward error of the f32 factor: max |L L^T - A| over max |A|,
/// in units of f32 epsilon times n, stays under c = 2. Each entry of L L^T
/// is a sum of at most n products of entries whose rounding is half an
/// ulp each, the sums themselves taken in f64: the classic bound is
/// (n + 1) eps ||A||, and the f64 sums leave about half of it.
#[test]
fn cholesky_backward_error_within_2_n_eps_and_matches_f64() {
    for n in [1, 2, 5, 16, 40] {
        let a = spd(n, n as u64);
        let mut c = Context::new();
        let t = c.tensor(&[n, n], &f32s(&a)).unwrap();
        let l = c.cholesky(t).unwrap();
        let lv = read(&c, l);
        let a32: Vec<f64> = f32s(&a).iter().map(|&x| x as f64).collect();
        let norm = a32.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
        let mut worst = 0.0f64;
        for i in 0..n {
            for j in 0..n {
                let llt: f64 = (0..n)
                    .map(|k| lv[i * n + k] as f64 * lv[j * n + k] as f64)
                    .sum();
                worst = worst.max((llt - a32[i * n + j]).abs());
            }
            for j in i + 1..n {
                assert_eq!(lv[i * n + j], 0.0, "upper triangle of L");
            }
        }
        let units = worst / (norm * f32::EPSILON as f64 * n as f64);
        assert!(units <= 2.0, "n = {n}: backward error {units} n eps ||A||");
        // Forward against the f64 factor of the same (f32) input: the
        // factor's own condition sets the bound, small for these A.
        let reference = cholesky_f64(&a32, n);
        for (k, (&got, &want)) in lv.iter().zip(&reference).enumerate() {
            assert!(
                (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "n = {n}, entry {k}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn not_positive_definite_gives_nan_not_an_error() {
    let mut c = Context::new();
    let a = c.tensor(&[2, 2], &[1.0, 0.0, 2.0, 1.0]).unwrap(); // pivot 1 - 4 < 0
    let l = c.cholesky(a).unwrap();
    assert!(read(&c, l).iter().all(|v| v.is_nan()));
    let d = c.log_det_spd(a).unwrap();
    assert!(read(&c, d)[0].is_nan());
}

#[test]
fn log_det_spd_and_solve_lower_match_f64() {
    for n in [1, 3, 12] {
        let a = spd(n, 7 + n as u64);
        let a32: Vec<f64> = f32s(&a).iter().map(|&x| x as f64).collect();
        let l64 = cholesky_f64(&a32, n);
        let want: f64 = 2.0 * (0..n).map(|i| l64[i * n + i].ln()).sum::<f64>();
        let mut c = Context::new();
        let t = c.tensor(&[n, n], &f32s(&a)).unwrap();
        let d = c.log_det_spd(t).unwrap();
        let got = read(&c, d)[0] as f64;
        // Sum of n logs of pivots each within a few f32 ulps.
        assert!((got - want).abs() <= 4.0 * n as f64 * f32::EPSILON as f64 * (1.0 + want.abs()));
        // Solve with the f32 factor against f64 substitution on it; 150
        // columns span the kernels' column blocks (64) and a partial one.
        let l = c.cholesky(t).unwrap();
        let lv = read(&c, l);
        for k in [2, 150] {
            solve_lower_matches_f64(&lv, n, k);
        }
    }
}

/// X = L^{-1} B, dB = L^{-T} R and dL = -tril(dB X^T) for the loss
/// sum(X * R), against the same substitutions in f64 on the same f32 L.
fn solve_lower_matches_f64(lv: &[f32], n: usize, k: usize) {
    let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let r: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.53).cos()).collect();
    let l64 = |i: usize, j: usize| lv[i * n + j] as f64;
    let mut x64 = vec![0.0f64; n * k];
    let mut db64 = vec![0.0f64; n * k];
    for col in 0..k {
        for i in 0..n {
            let s: f64 = (0..i).map(|j| l64(i, j) * x64[j * k + col]).sum();
            x64[i * k + col] = (b[i * k + col] as f64 - s) / l64(i, i);
        }
        for i in (0..n).rev() {
            let s: f64 = (i + 1..n).map(|j| l64(j, i) * db64[j * k + col]).sum();
            db64[i * k + col] = (r[i * k + col] as f64 - s) / l64(i, i);
        }
    }
    let mut c = Context::new();
    let lt = c.param(&[n, n], Some(lv)).unwrap();
    let bt = c.param(&[n, k], Some(&b)).unwrap();
    let x = c.solve_lower(lt, bt).unwrap();
    let rt = c.tensor(&[n, k], &r).unwrap();
    let w = c.mul(x, rt).unwrap();
    let loss = c.sum(w).unwrap();
    c.backward(loss).unwrap();
    let (mut db, mut dl) = (vec![0.0f32; n * k], vec![0.0f32; n * n]);
    c.read_grad(bt, &mut db).unwrap();
    c.read_grad(lt, &mut dl).unwrap();
    // Sums in f64 rounded once to f32: a few f32 ulps of the entry's scale
    // (L is well conditioned: spd() has a heavy diagonal).
    let close = |g: f32, w: f64, scale: f64| (g as f64 - w).abs() <= 1e-5 * (scale + w.abs());
    for (&g, &w) in read(&c, x).iter().zip(&x64) {
        assert!(close(g, w, 1.0), "x: {g} vs {w} (n {n}, k {k})");
    }
    for (&g, &w) in db.iter().zip(&db64) {
        assert!(close(g, w, 1.0), "dB: {g} vs {w} (n {n}, k {k})");
    }
    for i in 0..n {
        for j in 0..n {
            let want = if j > i {
                0.0
            } else {
                -(0..k)
                    .map(|col| db64[i * k + col] * x64[j * k + col])
                    .sum::<f64>()
            };
            let g = dl[i * n + j];
            assert!(
                close(g, want, k as f64),
                "dL[{i},{j}]: {g} vs {want} (n {n}, k {k})"
            );
        }
    }
}

#[test]
fn cholesky_gradient_checks() {
    // A = x + 3 I: x's lower triangle with a heavy diagonal is positive
    // definite; the upper triangle is not read, so its gradient is 0.
    for n in [1, 3, 4] {
        gradcheck(
            Check::new("cholesky", &[&[n, n]]).range(-0.5, 0.5),
            move |c, x| {
                let eye: Vec<f32> = (0..n * n)
                    .map(|k| if k % (n + 1) == 0 { 3.0 } else { 0.0 })
                    .collect();
                let e = c.tensor(&[n, n], &eye)?;
                let a = c.add(x[0], e)?;
                c.cholesky(a)
            },
        );
    }
    // Through a symmetric A = B B^T + I, as a model builds it.
    gradcheck(Check::new("cholesky_sym", &[&[3, 3]]), |c, x| {
        let eye = c.tensor(&[3, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])?;
        let bbt = c.matmul(x[0], x[0], false, true)?;
        let a = c.add(bbt, eye)?;
        c.cholesky(a)
    });
}

#[test]
fn log_det_spd_gradient_checks() {
    for n in [1, 2, 4] {
        gradcheck(
            Check::new("log_det_spd", &[&[n, n]]).range(-0.5, 0.5),
            move |c, x| {
                let eye: Vec<f32> = (0..n * n)
                    .map(|k| if k % (n + 1) == 0 { 3.0 } else { 0.0 })
                    .collect();
                let e = c.tensor(&[n, n], &eye)?;
                let a = c.add(x[0], e)?;
                c.log_det_spd(a)
            },
        );
    }
}

#[test]
fn solve_lower_and_diagonal_gradient_checks() {
    gradcheck(
        Check::new("solve_lower", &[&[3, 3], &[3, 2]]).range(-0.5, 0.5),
        |c, x| {
            let e = c.tensor(&[3, 3], &[2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0])?;
            let l = c.add(x[0], e)?;
            c.solve_lower(l, x[1])
        },
    );
    gradcheck(
        Check::new("solve_lower_vec", &[&[2, 2], &[2]]).range(-0.5, 0.5),
        |c, x| {
            let e = c.tensor(&[2, 2], &[2.0, 0.0, 0.0, 2.0])?;
            let l = c.add(x[0], e)?;
            c.solve_lower(l, x[1])
        },
    );
    gradcheck(Check::new("diagonal", &[&[3, 4]]), |c, x| c.diagonal(x[0]));
}

/// A multivariate normal's log density two ways agree: from the
/// covariance (ln det, a solve with its factor) and from the factor
/// (the diagonal's logs).
#[test]
fn mvn_log_density_two_ways() {
    let n = 4;
    let a = spd(n, 3);
    let mut c = Context::new();
    let sigma = c.tensor(&[n, n], &f32s(&a)).unwrap();
    let y = c.tensor(&[n], &[0.3, -1.0, 0.5, 2.0]).unwrap();
    let l = c.cholesky(sigma).unwrap();
    let z = c.solve_lower(l, y).unwrap();
    let zz = c.mul(z, z).unwrap();
    let quad = c.sum(zz).unwrap();
    let ld1 = c.log_det_spd(sigma).unwrap();
    let dg = c.diagonal(l).unwrap();
    let lg = c.log(dg).unwrap();
    let s = c.sum(lg).unwrap();
    let ld2 = c.scale(s, 2.0).unwrap();
    let (q, d1, d2) = (read(&c, quad)[0], read(&c, ld1)[0], read(&c, ld2)[0]);
    assert!((d1 - d2).abs() <= 1e-5 * (1.0 + d1.abs()), "{d1} vs {d2}");
    assert!(q.is_finite() && q > 0.0);
}

#[test]
fn errors_name_the_op_and_shapes() {
    let mut c = Context::new();
    let r = c.tensor(&[2, 3], &[0.0; 6]).unwrap();
    let v = c.tensor(&[3], &[0.0; 3]).unwrap();
    for (e, op) in [
        (c.cholesky(r).unwrap_err(), "cholesky"),
        (c.log_det_spd(v).unwrap_err(), "log_det_spd"),
        (c.diagonal(v).unwrap_err(), "diagonal"),
    ] {
        let m = e.to_string();
        assert!(
            m.contains(op) && (m.contains("[2,3]") || m.contains("[3]")),
            "{m}"
        );
    }
    let sq = c.tensor(&[2, 2], &[1.0, 0.0, 0.0, 1.0]).unwrap();
    let m = c.solve_lower(sq, v).unwrap_err().to_string();
    assert!(
        m.contains("solve_lower") && m.contains("[2,2]") && m.contains("[3]"),
        "{m}"
    );
}

#[test]
fn linear_recurrence_gradient_checks() {
    gradcheck(
        Check::new("linear_recurrence_one_a", &[&[1], &[16]]).range(-0.9, 0.9),
        |c, x| c.linear_recurrence(x[0], x[1]),
    );
    gradcheck(
        Check::new("linear_recurrence_full_a", &[&[5, 2], &[5, 2]]).range(-0.9, 0.9),
        |c, x| c.linear_recurrence(x[0], x[1]),
    );
    gradcheck(
        Check::new("linear_recurrence_one_series", &[&[7], &[7]]).range(-0.9, 0.9),
        |c, x| c.linear_recurrence(x[0], x[1]),
    );
    gradcheck(
        Check::new("linear_recurrence_length_one", &[&[1], &[1, 3]]),
        |c, x| c.linear_recurrence(x[0], x[1]),
    );
}

/// Forward and both gradients against the recurrence in f64 on the same
/// f32 inputs, within the bound of its roundings: each step of x rounds a
/// product and a sum (u = eps / 2 each), so after t steps x is within
/// 2 t u of the same recurrence on magnitudes, |a| |x| + |c|; g likewise
/// from the end, and da's products and its f64 sum add a few ulps more.
#[test]
fn linear_recurrence_matches_f64() {
    let eps = f32::EPSILON as f64;
    for (steps, width, one_a) in [
        (200, 1, true),
        (50, 1, false),
        (64, 3, false),
        (1, 4, true),
        (33, 2, true),
    ] {
        let n = steps * width;
        let cv: Vec<f32> = (0..n).map(|i| (i as f32 * 0.71).sin() * 2.0).collect();
        let av: Vec<f32> = if one_a {
            vec![0.93]
        } else {
            (0..n).map(|i| (i as f32 * 0.37).cos() * 0.99).collect()
        };
        let r: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).cos()).collect();
        let at = |t: usize, j: usize| av[if one_a { 0 } else { t * width + j }] as f64;
        // f64 recurrence and its magnitude twin, forward then backward.
        let (mut x, mut xm) = (vec![0.0f64; n], vec![0.0f64; n]);
        let (mut g, mut gm) = (vec![0.0f64; n], vec![0.0f64; n]);
        for t in 0..steps {
            for j in 0..width {
                let k = t * width + j;
                let (p, pm) = if t == 0 {
                    (0.0, 0.0)
                } else {
                    (x[k - width], xm[k - width])
                };
                x[k] = at(t, j) * p + cv[k] as f64;
                xm[k] = at(t, j).abs() * pm + (cv[k] as f64).abs();
            }
        }
        for t in (0..steps).rev() {
            for j in 0..width {
                let k = t * width + j;
                let (nx, nm) = if t + 1 == steps {
                    (0.0, 0.0)
                } else {
                    (
                        at(t + 1, j) * g[k + width],
                        at(t + 1, j).abs() * gm[k + width],
                    )
                };
                g[k] = nx + r[k] as f64;
                gm[k] = nm + (r[k] as f64).abs();
            }
        }
        let mut c = Context::new();
        let shape = [steps, width];
        let ta = c
            .param(if one_a { &[1] } else { &shape }, Some(&av))
            .unwrap();
        let tc = c.param(&shape, Some(&cv)).unwrap();
        let out = c.linear_recurrence(ta, tc).unwrap();
        let rt = c.tensor(&shape, &r).unwrap();
        let w = c.mul(out, rt).unwrap();
        let loss = c.sum(w).unwrap();
        c.backward(loss).unwrap();
        let got = read(&c, out);
        let (mut dc, mut da) = (vec![0.0f32; n], vec![0.0f32; av.len()]);
        c.read_grad(tc, &mut dc).unwrap();
        c.read_grad(ta, &mut da).unwrap();
        for k in 0..n {
            let t = k / width;
            let bound = (2 * t + 1) as f64 * eps * xm[k];
            assert!(
                (got[k] as f64 - x[k]).abs() <= bound,
                "x[{k}]: {} vs {}",
                got[k],
                x[k]
            );
            let bound = (2 * (steps - t) + 1) as f64 * eps * gm[k];
            assert!(
                (dc[k] as f64 - g[k]).abs() <= bound,
                "dc[{k}]: {} vs {}",
                dc[k],
                g[k]
            );
        }
        // da_t = g_t x_{t-1}: each factor within its bound above, and the
        // product (or f64 sum, rounded once) within one more ulp.
        let term = |k: usize| {
            let t = k / width;
            let want = g[k] * x[k - width];
            let slack = (2 * (steps - t) + 2 * t + 2) as f64 * eps * gm[k] * xm[k - width];
            (want, slack)
        };
        // da from our own g (= dc) and x, in f64: only the products'
        // and the sum's roundings differ, so within an ulp or two; a
        // dropped or misaligned term fails it.
        let own: Vec<f64> = (width..n)
            .map(|k| dc[k] as f64 * got[k - width] as f64)
            .collect();
        if one_a {
            let want: f64 = own.iter().sum();
            let size: f64 = own.iter().map(|v| v.abs()).sum();
            assert!(
                (da[0] as f64 - want).abs() <= 2.0 * eps * want.abs() + 1e-12 * size,
                "da from our g and x: {} vs {want}",
                da[0]
            );
        } else {
            for (k, &want) in (width..n).zip(&own) {
                assert_eq!(da[k], want as f32, "da[{k}] is g_t x_(t-1) rounded once");
            }
        }
        if one_a {
            let (want, slack) = (width..n)
                .map(term)
                .fold((0.0, 0.0), |s, v| (s.0 + v.0, s.1 + v.1));
            let bound = slack + eps * want.abs();
            assert!(
                (da[0] as f64 - want).abs() <= bound,
                "da: {} vs {want}",
                da[0]
            );
        } else {
            assert_eq!(&da[..width], &vec![0.0; width][..], "a_0 is not read");
            for (k, &d) in da.iter().enumerate().skip(width) {
                let (want, slack) = term(k);
                assert!(
                    (d as f64 - want).abs() <= slack + eps * want.abs(),
                    "da[{k}]"
                );
            }
        }
    }
}

#[test]
fn linear_recurrence_shape_errors_name_both() {
    let mut c = Context::new();
    let a = c.tensor(&[2], &[0.5, 0.5]).unwrap();
    let x = c.tensor(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let m = c.linear_recurrence(a, x).unwrap_err().to_string();
    assert!(
        m.contains("linear_recurrence") && m.contains("[2]") && m.contains("[3]"),
        "{m}"
    );
}

//! Products: forward values and errors, gradient checks, and the
//! two-thread backward paths against one thread.

use crate::ops::gradcheck::{Check, gradcheck};

#[test]
fn matmul_forward_and_errors() {
    let mut c = crate::Context::new();
    let a = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let b = c.tensor(&[3, 2], &[7., 8., 9., 10., 11., 12.]).unwrap();
    let mut v = [0.0; 4];
    let p = c.matmul(a, b, false, false).unwrap();
    c.read(p, &mut v).unwrap();
    assert_eq!(v, [58., 64., 139., 154.]);
    let pt = c.matmul(a, a, false, true).unwrap();
    c.read(pt, &mut v).unwrap();
    assert_eq!(v, [14., 32., 32., 77.]);
    let x = c.tensor(&[8, 32], &[0.0; 256]).unwrap();
    let y = c.tensor(&[16, 4], &[0.0; 64]).unwrap();
    let e = c.matmul(x, y, false, false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "matmul: inner dimensions differ: [8,32] x [16,4]"
    );
    // With a transpose, the message shows the shapes multiplied.
    let w = c.tensor(&[32, 4], &[0.0; 128]).unwrap();
    let e = c.matmul(x, w, false, true).unwrap_err();
    assert!(matches!(e, crate::Error::BadShape { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "matmul: inner dimensions differ: [8,32] x [32,4]^T = [8,32] x [4,32]"
    );
    let used = c.memory_stats().arena_used_bytes;
    assert!(c.bmm(x, y, false, false).is_err());
    assert!(c.linear(x, y, None).is_err());
    assert_eq!(
        c.memory_stats().arena_used_bytes,
        used,
        "a refused op allocates nothing"
    );
}

#[test]
fn gradcheck_matmul_all_transposes() {
    for ta in [false, true] {
        for tb in [false, true] {
            let sa: &[usize] = if ta { &[4, 3] } else { &[3, 4] };
            let sb: &[usize] = if tb { &[5, 4] } else { &[4, 5] };
            gradcheck(Check::new("matmul", &[sa, sb]), |c, x| {
                c.matmul(x[0], x[1], ta, tb)
            });
            let ba: &[usize] = if ta { &[2, 4, 3] } else { &[2, 3, 4] };
            let bb: &[usize] = if tb { &[2, 5, 4] } else { &[2, 4, 5] };
            gradcheck(Check::new("bmm", &[ba, bb]), |c, x| {
                c.bmm(x[0], x[1], ta, tb)
            });
        }
    }
    gradcheck(Check::new("matmul 1x1", &[&[1, 1], &[1, 1]]), |c, x| {
        c.matmul(x[0], x[1], false, false)
    });
    gradcheck(Check::new("x @ x^T", &[&[3, 4]]), |c, x| {
        c.matmul(x[0], x[0], false, true)
    });
    // Products with a one-column result run as sgemv, forward and in
    // the backward's X^T dC.
    for ta in [false, true] {
        for tb in [false, true] {
            let sa: &[usize] = if ta { &[4, 7] } else { &[7, 4] };
            let sb: &[usize] = if tb { &[1, 4] } else { &[4, 1] };
            gradcheck(Check::new("matrix @ vector", &[sa, sb]), |c, x| {
                c.matmul(x[0], x[1], ta, tb)
            });
        }
    }
    gradcheck(
        Check::new("bmm of vectors", &[&[2, 5, 3], &[2, 3, 1]]),
        |c, x| c.bmm(x[0], x[1], false, false),
    );
}

#[test]
fn gradcheck_linear() {
    gradcheck(
        Check::new("linear+bias", &[&[2, 3, 4], &[4, 5], &[5]]),
        |c, x| c.linear(x[0], x[1], Some(x[2])),
    );
    gradcheck(Check::new("linear", &[&[3, 4], &[4, 2]]), |c, x| {
        c.linear(x[0], x[1], None)
    });
    gradcheck(
        Check::new("linear to one output", &[&[6, 4], &[4, 1], &[1]]),
        |c, x| c.linear(x[0], x[1], Some(x[2])),
    );
}

/// The bias gradient of a linear layer over 2,048 rows is a column sum;
/// it must be within 2x of the same sum accumulated in f64 and rounded
/// once to f32 (which is within half an ulp of exact, the best an f32
/// result can be; 2x leaves room for a last rounding of the += into the
/// gradient). Adding the rows one by one in f32 was 26x worse here.
#[test]
fn linear_bias_gradient_is_accurately_summed() {
    let (rows, k, n) = (2048, 4, 256);
    let mut rng = crate::ops::gradcheck::Lcg(11);
    let (r, exact) = crate::ops::gradcheck::column_data(&mut rng, rows, n);
    let mut c = crate::Context::new();
    let x: Vec<f32> = (0..rows * k).map(|_| rng.range(-1.0, 1.0)).collect();
    let px = c.param(&[rows, k], Some(&x)).unwrap();
    let w = c.param(&[k, n], None).unwrap();
    let b = c.param(&[n], None).unwrap();
    let y = c.linear(px, w, Some(b)).unwrap();
    let rt = c.tensor(&[rows, n], &r).unwrap();
    let yr = c.mul(y, rt).unwrap();
    let l = c.sum(yr).unwrap();
    c.backward(l).unwrap();
    let mut db = vec![0.0f32; n];
    c.read_grad(b, &mut db).unwrap();
    let rounded: Vec<f32> = exact.iter().map(|&s| s as f32).collect();
    let mut naive = vec![0.0f32; n];
    for row in r.chunks_exact(n) {
        naive.iter_mut().zip(row).for_each(|(d, &v)| *d += v);
    }
    let (got_rms, got_max) = crate::ops::gradcheck::abs_errors(&db, &exact);
    let (ref_rms, ref_max) = crate::ops::gradcheck::abs_errors(&rounded, &exact);
    let (naive_rms, naive_max) = crate::ops::gradcheck::abs_errors(&naive, &exact);
    eprintln!(
        "[linear db, {rows} rows] abs error rms/max: got {got_rms:.3e}/{got_max:.3e}, f64-accumulated {ref_rms:.3e}/{ref_max:.3e}, f32 row by row {naive_rms:.3e}/{naive_max:.3e}"
    );
    assert!(got_rms <= 2.0 * ref_rms && got_max <= 2.0 * ref_max);
}

/// A linear layer large enough for the worker: dX on one thread and
/// dW with the bias sums on the other give the bits of the same whole
/// products run in turn on one thread, and dW is near a float64 X^T dY
/// (see the bound below).
#[test]
#[cfg_attr(miri, ignore)] // no worker under Miri, and slow there
fn linear_gradients_side_by_side_match_one_thread() {
    use crate::blas::{Gemm, sgemm};
    let (rows, k, n) = (256, 64, 128);
    let mut rng = crate::ops::gradcheck::Lcg(5);
    let mut data = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.range(-1.0, 1.0)).collect() };
    let (x, w, r) = (data(rows * k), data(k * n), data(rows * n));
    let mut c = crate::Context::new();
    let px = c.param(&[rows, k], Some(&x)).unwrap();
    let pw = c.param(&[k, n], Some(&w)).unwrap();
    let pb = c.param(&[n], None).unwrap();
    // An activation input, so dX is a planned activation gradient.
    let xa = c.scale(px, 1.0).unwrap();
    let y = c.linear(xa, pw, Some(pb)).unwrap();
    assert!(c.pool_started());
    let rt = c.tensor(&[rows, n], &r).unwrap();
    let l = c.mul(y, rt).unwrap();
    let l = c.sum(l).unwrap();
    c.backward(l).unwrap();
    let (mut dx, mut dw, mut db) = (vec![0.0; rows * k], vec![0.0; k * n], vec![0.0; n]);
    c.read_grad(px, &mut dx).unwrap();
    c.read_grad(pw, &mut dw).unwrap();
    c.read_grad(pb, &mut db).unwrap();
    let (mut want_x, mut want_w, mut want_b) =
        (vec![0.0; rows * k], vec![0.0; k * n], vec![0.0; n]);
    sgemm(
        Gemm::dense(false, true, rows, k, n),
        1.0,
        &r,
        &w,
        1.0,
        &mut want_x,
    );
    sgemm(
        Gemm::dense(true, false, k, n, rows),
        1.0,
        &x,
        &r,
        1.0,
        &mut want_w,
    );
    crate::kernels::fastmath::sum_rows_into_on(None, &mut want_b, &r);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&dx), bits(&want_x));
    assert_eq!(bits(&dw), bits(&want_w));
    assert_eq!(bits(&db), bits(&want_b));
    // Each element against its float64 value, relative to the sum of
    // the magnitudes of its 256 terms (the scale of an f32 dot
    // product's rounding error): a blocked f32 sum stays within a few
    // 2^-24 of it.
    let mut worst = 0.0f64;
    for i in 0..k {
        for j in 0..n {
            let terms = (0..rows).map(|t| x[t * k + i] as f64 * r[t * n + j] as f64);
            let (exact, scale) = terms.fold((0.0, 0.0), |(s, a), v| (s + v, a + v.abs()));
            worst = worst.max((dw[i * n + j] as f64 - exact).abs() / scale);
        }
    }
    eprintln!("[linear dW side by side] worst error / sum|terms| = {worst:.2e}");
    assert!(worst <= 16.0 * f32::EPSILON as f64 / 2.0, "{worst:e}");
}

/// A product with both gradients and the worker (an LM head tied to
/// its embedding: x @ W^T): dA and dB side by side give the bits of
/// the same whole products run in turn on one thread.
#[test]
#[cfg_attr(miri, ignore)] // no worker under Miri, and slow there
fn product_gradients_side_by_side_match_one_thread() {
    use crate::blas::{Gemm, sgemm};
    let (m, k, n) = (256, 64, 128);
    let mut rng = crate::ops::gradcheck::Lcg(9);
    let mut data = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.range(-1.0, 1.0)).collect() };
    let (x, w, r) = (data(m * k), data(n * k), data(m * n));
    let mut c = crate::Context::new();
    let px = c.param(&[m, k], Some(&x)).unwrap();
    let pw = c.param(&[n, k], Some(&w)).unwrap();
    let xa = c.scale(px, 1.0).unwrap();
    let y = c.matmul(xa, pw, false, true).unwrap();
    assert!(c.pool_started());
    let rt = c.tensor(&[m, n], &r).unwrap();
    let l = c.mul(y, rt).unwrap();
    let l = c.sum(l).unwrap();
    c.backward(l).unwrap();
    let (mut da, mut db) = (vec![0.0; m * k], vec![0.0; n * k]);
    c.read_grad(px, &mut da).unwrap();
    c.read_grad(pw, &mut db).unwrap();
    let (mut want_a, mut want_b) = (vec![0.0; m * k], vec![0.0; n * k]);
    sgemm(
        Gemm::dense(false, false, m, k, n),
        1.0,
        &r,
        &w,
        1.0,
        &mut want_a,
    );
    sgemm(
        Gemm::dense(true, false, n, k, m),
        1.0,
        &r,
        &x,
        1.0,
        &mut want_b,
    );
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&da), bits(&want_a));
    assert_eq!(bits(&db), bits(&want_b));
}

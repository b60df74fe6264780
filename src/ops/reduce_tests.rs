//! Tests of the reductions: values, infinities, the logsumexp kernels
//! against the line functions and a float64 reference, gradient checks.

use crate::ops::gradcheck::{Check, gradcheck};
use crate::simd;

#[test]
fn forward_values() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let mut v2 = [0.0; 2];
    let mut v3 = [0.0; 3];
    let (s, m) = (c.sum(x).unwrap(), c.mean(x).unwrap());
    assert_eq!(c.item(s).unwrap(), 21.0);
    assert_eq!(c.item(m).unwrap(), 3.5);
    let s1 = c.sum_axis(x, 1, false).unwrap();
    c.read(s1, &mut v2).unwrap();
    assert_eq!(v2, [6., 15.]);
    let m0 = c.mean_axis(x, 0, true).unwrap();
    assert_eq!(c.shape(m0).unwrap().dims(), &[1, 3]);
    c.read(m0, &mut v3).unwrap();
    assert_eq!(v3, [2.5, 3.5, 4.5]);
    assert!(
        c.sum_axis(x, 2, false)
            .unwrap_err()
            .to_string()
            .contains("axis 2 is out of range for shape [2,3]")
    );
}

/// Against a float64 reference (within 4 ulps, the kernel's promise),
/// with -inf entries, a column of all -inf and a +inf entry.
#[test]
fn logsumexp_axis_values_and_infinities() {
    let ninf = f32::NEG_INFINITY;
    // [2, 2, 3]: reduce the middle axis; columns (o, i) pair x[o, 0, i]
    // with x[o, 1, i].
    let xs = [
        0.5,
        -2.0,
        30.0,
        ninf,
        1.0,
        ninf, // o = 0
        -80.0,
        ninf,
        3.0,
        ninf,
        ninf,
        f32::INFINITY, // o = 1
    ];
    let mut c = crate::Context::new();
    let x = c.param(&[2, 2, 3], Some(&xs)).unwrap();
    let y = c.logsumexp_axis(x, 1, true).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[2, 1, 3]);
    let mut v = [0.0; 6];
    c.read(y, &mut v).unwrap();
    let lse = |a: f32, b: f32| {
        let m = (a as f64).max(b as f64);
        (m + ((a as f64 - m).exp() + (b as f64 - m).exp()).ln()) as f32
    };
    let near = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 4;
    assert!(near(v[1], lse(-2.0, 1.0)), "{} vs {}", v[1], lse(-2.0, 1.0));
    assert_eq!([v[0], v[2], v[3]], [0.5, 30.0, -80.0]);
    assert_eq!((v[4], v[5]), (ninf, f32::INFINITY));
    // Gradient: the softmax weights along the axis; an all -inf column
    // shares its weight equally, a +inf entry takes it all.
    let l = c.sum(y).unwrap();
    c.backward(l).unwrap();
    let mut g = [0.0; 12];
    c.read_grad(x, &mut g).unwrap();
    let w = (1.0f64 / (1.0 + 3.0f64.exp())) as f32;
    assert!((g[1] - w).abs() < 1e-7 && (g[4] - (1.0 - w)).abs() < 1e-7);
    assert_eq!(
        [g[0], g[3], g[2], g[5], g[6], g[9]],
        [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    );
    assert_eq!([g[7], g[10], g[8], g[11]], [0.5, 0.5, 0.0, 1.0]);
}

/// A value's bits, every NaN as one: IEEE leaves a new NaN's sign and
/// payload open, and Miri picks them at random.
fn same_bits(v: f32) -> u32 {
    if v.is_nan() {
        f32::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

/// How many f32 steps apart `a` and `b` are (NaNs as one value).
fn ulps(a: f32, b: f32) -> u32 {
    let key = |v: f32| {
        let b = same_bits(v) as i32;
        if b < 0 { i32::MIN - b } else { b }
    };
    key(a).abs_diff(key(b))
}

/// The axis loops give the bits of the line functions in `special`
/// (forward and backward), on short and long lines, ties of the
/// maximum, strided lines, and lines with infinities or NaN; along an
/// axis of two (the vectorised exp and ln) within one ulp of them,
/// infinities and NaN exactly.

#[test]
fn logsumexp_axis_matches_the_line_functions_bit_for_bit() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
    };
    for (outer, n, inner) in [
        (7, 2, 1),
        (3, 2, 5),
        (4, 2, 3),
        (4, 3, 2),
        (2, 64, 1),
        (2, 65, 3),
        (1, 1, 4),
    ] {
        let len = outer * n * inner;
        let mut x: Vec<f32> = (0..len).map(|_| next()).collect();
        // A tie of the maximum, and lines with -inf, +inf and NaN.
        x[0] = 25.0;
        if n > 1 {
            x[inner] = 25.0;
        }
        if inner > 1 {
            x[1] = f32::NEG_INFINITY;
        }
        if inner > 2 {
            x[2] = f32::INFINITY;
        }
        if outer > 2 {
            x[2 * n * inner] = f32::NAN;
        }
        let dout: Vec<f32> = (0..outer * inner).map(|_| next()).collect();
        let mut y = vec![0.0; outer * inner];
        super::logsumexp_axis_forward(&mut y, &x, outer, n, inner);
        let mut dx: Vec<f32> = (0..len).map(|_| next()).collect();
        let mut want_dx = dx.clone();
        super::logsumexp_axis_backward(&mut dx, &dout, &x, outer, n, inner);
        for o in 0..outer {
            for i in 0..inner {
                let start = o * n * inner + i;
                let want = crate::special::logsumexp_strided(&x, start, n, inner);
                let got = y[o * inner + i];
                let slack = if n == 2 && want.is_finite() { 1 } else { 0 };
                assert!(
                    ulps(got, want) <= slack,
                    "{outer} {n} {inner}: {got} {want}"
                );
                let g = dout[o * inner + i];
                crate::special::logsumexp_grad_add_strided(&mut want_dx, &x, start, n, inner, g);
            }
        }
        let slack = if n == 2 { 1 } else { 0 };
        for (&g, &w) in dx.iter().zip(&want_dx) {
            assert!(ulps(g, w) <= slack, "{outer} {n} {inner}: {g} {w}");
        }
    }
}

/// Along an axis of two, against the float64 reference (libm's exp and
/// ln, rounded once): random pairs over wide and narrow spreads, the
/// value within one ulp, each weight within one ulp, on every
/// instruction set the same bits.
#[test]
fn logsumexp_pairs_within_one_ulp_of_f64() {
    let mut rng = crate::ops::gradcheck::Lcg(3);
    let n = if cfg!(miri) { 64 } else { 200_000 };
    let mut x = vec![0.0f32; 2 * n];
    for (k, v) in x.iter_mut().enumerate() {
        let scale = [1e-3, 1.0, 30.0, 300.0, 3e30][k % 5];
        *v = (rng.uniform() * 2.0 - 1.0) * scale;
    }
    let (xa, xb) = x.split_at(n);
    let dout = vec![1.0f32; n];
    let run = || {
        let mut y = vec![0.0f32; n];
        let mut dx = vec![0.0f32; 2 * n];
        super::logsumexp_pairs_forward(&mut y, &x, 1, n);
        super::logsumexp_pairs_backward(&mut dx, &dout, &x, 1, n);
        (y, dx)
    };
    let (y, dx) = run();
    let (mut worst, mut worst_g) = (0, 0);
    for i in 0..n {
        let (a, b) = (xa[i] as f64, xb[i] as f64);
        let m = a.max(b);
        let s = (a - m).exp() + (b - m).exp();
        worst = worst.max(ulps(y[i], (m + s.ln()) as f32));
        worst_g = worst_g.max(ulps(dx[i], ((a - m).exp() / s) as f32));
        worst_g = worst_g.max(ulps(dx[n + i], ((b - m).exp() / s) as f32));
    }
    assert!(worst <= 1 && worst_g <= 1, "{worst} {worst_g}");
    for level in [simd::Level::Baseline, simd::Level::Avx2Fma] {
        let (yl, dxl) = simd::with_level(level, run);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&yl), bits(&y), "{level:?}");
        assert_eq!(bits(&dxl), bits(&dx), "{level:?}");
    }
}

#[test]
fn gradcheck_reductions() {
    let s = &[&[2, 3, 4][..]];
    gradcheck(Check::new("sum", s), |c, x| c.sum(x[0]));
    gradcheck(Check::new("mean", s), |c, x| c.mean(x[0]));
    for axis in [0, 1, -1] {
        gradcheck(Check::new("sum_axis", s), |c, x| {
            c.sum_axis(x[0], axis, false)
        });
        gradcheck(Check::new("mean_axis", s), |c, x| {
            c.mean_axis(x[0], axis, true)
        });
    }
    for axis in [0, 1, -1] {
        gradcheck(Check::new("logsumexp_axis", s), |c, x| {
            c.logsumexp_axis(x[0], axis, axis == 1)
        });
    }
    // Softmax-like composition: x - mean(x, -1, keepdim) broadcasts back.
    gradcheck(Check::new("center", &[&[3, 4]]), |c, x| {
        let m = c.mean_axis(x[0], -1, true)?;
        c.sub(x[0], m)
    });
}

/// The sum of all elements: in order below 32 elements; from 32 on, 16
/// f64 running sums (element i into sum i % 16 over whole groups of 16),
/// combined pairwise, then the rest in order. Against that order written
/// out, a float64 reference (within one ulp: both round an f64 sum once)
/// and every instruction set (the same bits).
#[test]
fn sum_lanes_fixed_order_within_one_ulp_of_f64() {
    let mut rng = crate::ops::gradcheck::Lcg(11);
    for n in [1, 5, 31, 32, 33, 47, 64, 1000, 1003] {
        let x: Vec<f32> = (0..n)
            .map(|k| (rng.uniform() * 2.0 - 1.0) * [1e-3, 1.0, 1e4][k % 3])
            .collect();
        let in_order = x.iter().fold(-0.0f64, |s, &v| s + v as f64);
        let want = if n < 32 {
            in_order
        } else {
            let whole = n / 16 * 16;
            let mut lanes = [-0.0f64; 16];
            for (i, &v) in x[..whole].iter().enumerate() {
                lanes[i % 16] += v as f64;
            }
            for width in [8, 4, 2, 1] {
                for l in 0..width {
                    lanes[l] += lanes[l + width];
                }
            }
            lanes[0] + x[whole..].iter().fold(-0.0f64, |s, &v| s + v as f64)
        };
        let got = super::reduce_forward(&x, false);
        assert_eq!(got.to_bits(), (want as f32).to_bits(), "n {n}");
        assert!(ulps(got, in_order as f32) <= 1, "n {n}");
        let mean = super::reduce_forward(&x, true);
        assert_eq!(mean.to_bits(), ((want / n as f64) as f32).to_bits());
        for level in [simd::Level::Baseline, simd::Level::Avx2Fma] {
            let s = simd::with_level(level, || super::reduce_forward(&x, false));
            assert_eq!(s.to_bits(), got.to_bits(), "n {n} {level:?}");
        }
    }
}

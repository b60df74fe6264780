use crate::ops::gradcheck::{Check, gradcheck};

#[test]
fn forward_values_with_broadcast() {
    let mut c = crate::Context::new();
    let a = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let b = c.tensor(&[3], &[10., 20., 30.]).unwrap();
    let col = c.tensor(&[2, 1], &[100., 200.]).unwrap();
    let mut out = [0.0; 6];
    let s = c.add(a, b).unwrap();
    c.read(s, &mut out).unwrap();
    assert_eq!(out, [11., 22., 33., 14., 25., 36.]);
    let m = c.mul(a, col).unwrap();
    c.read(m, &mut out).unwrap();
    assert_eq!(out, [100., 200., 300., 800., 1000., 1200.]);
    let d = c.div(col, a).unwrap();
    c.read(d, &mut out).unwrap();
    assert_eq!(out[3], 50.0);
    let g = c.gelu(a).unwrap();
    c.read(g, &mut out).unwrap();
    assert!((out[0] - 0.841192).abs() < 1e-5);
}

#[test]
fn sqrt_values_and_ieee_edges() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[5], &[4.0, 0.25, 2.0, 0.0, -1.0]).unwrap();
    let y = c.sqrt(x).unwrap();
    let mut v = [0.0; 5];
    c.read(y, &mut v).unwrap();
    assert_eq!(&v[..4], &[2.0, 0.5, std::f32::consts::SQRT_2, 0.0]);
    assert!(v[4].is_nan());
}

#[test]
fn maximum_minimum_values_ties_and_nan() {
    let mut c = crate::Context::new();
    let a = c.param(&[2, 3], Some(&[1., 5., 2., -1., 0., 7.])).unwrap();
    let b = c.param(&[3], Some(&[2., 5., f32::NAN])).unwrap();
    let mx = c.maximum(a, b).unwrap();
    let mn = c.minimum(a, b).unwrap();
    let (mut v, mut w) = ([0.0; 6], [0.0; 6]);
    c.read(mx, &mut v).unwrap();
    c.read(mn, &mut w).unwrap();
    assert_eq!(&v[..2], &[2., 5.]);
    assert_eq!(&v[3..5], &[2., 5.]);
    assert_eq!(&w[..2], &[1., 5.]);
    assert_eq!(&w[3..5], &[-1., 0.]);
    assert!(v[2].is_nan() && v[5].is_nan() && w[2].is_nan() && w[5].is_nan());
    // d/d(a, b) of sum(maximum) + 10 sum(minimum): each element's
    // gradient goes to the operand it came from; ties (5 == 5) to a.
    let s = c.scale(mn, 10.0).unwrap();
    let t = c.add(mx, s).unwrap();
    let l = c.sum(t).unwrap();
    c.backward(l).unwrap();
    let mut ga = [0.0; 6];
    let mut gb = [0.0; 3];
    c.read_grad(a, &mut ga).unwrap();
    c.read_grad(b, &mut gb).unwrap();
    assert_eq!(ga, [10., 11., 0., 10., 10., 0.]);
    assert_eq!(gb[..2], [2., 1.]);
    assert_eq!(gb[2], 22.0); // NaN in b: max and min both took b
}

#[test]
fn clamp_values_gradient_and_bad_bounds() {
    let mut c = crate::Context::new();
    let xs = [-3.0, -1.0, 0.5, 2.0, 4.0, f32::NAN];
    let x = c.param(&[6], Some(&xs)).unwrap();
    let y = c.clamp(x, -1.0, 2.0).unwrap();
    let mut v = [0.0; 6];
    c.read(y, &mut v).unwrap();
    assert_eq!(&v[..5], &[-1.0, -1.0, 0.5, 2.0, 2.0]);
    assert!(v[5].is_nan());
    let l = c.sum(y).unwrap();
    c.backward(l).unwrap();
    c.read_grad(x, &mut v).unwrap();
    // 1 strictly inside only: the bounds themselves (-1, 2) get 0.
    assert_eq!(v, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    c.reset();
    let open = c.clamp(x, f32::NEG_INFINITY, 0.0).unwrap();
    c.read(open, &mut v).unwrap();
    assert_eq!(&v[..5], &[-3.0, -1.0, 0.0, 0.0, 0.0]);
    let point = c.clamp(x, 1.0, 1.0).unwrap();
    c.read(point, &mut v).unwrap();
    assert_eq!(&v[..5], &[1.0; 5]);
    let used = c.memory_stats().arena_used_bytes;
    for (lo, hi, what) in [
        (2.0, 1.0, "clamp: bounds [2, 1]"),
        (f32::NAN, 1.0, "clamp: bounds [NaN, 1]"),
        (0.0, f32::NAN, "clamp: bounds [0, NaN]"),
    ] {
        let e = c.clamp(x, lo, hi).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().starts_with(what), "{e}");
    }
    assert_eq!(c.memory_stats().arena_used_bytes, used);
}

#[test]
fn abs_values_and_subgradient_at_zero() {
    let mut c = crate::Context::new();
    let x = c
        .param(&[5], Some(&[-2.5, 0.0, 3.0, -0.0, -1e-30]))
        .unwrap();
    let y = c.abs(x).unwrap();
    let mut v = [0.0; 5];
    c.read(y, &mut v).unwrap();
    assert_eq!(v, [2.5, 0.0, 3.0, 0.0, 1e-30]);
    assert!(v[3].is_sign_positive());
    let l = c.sum(y).unwrap();
    c.backward(l).unwrap();
    c.read_grad(x, &mut v).unwrap();
    assert_eq!(v, [-1.0, 0.0, 1.0, 0.0, -1.0]);
}

#[test]
fn pow_values_and_ieee_edges() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[6], &[2.0, 9.0, 0.0, -2.0, -2.0, 0.0]).unwrap();
    let mut v = [0.0; 6];
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs();
    let y = c.pow(x, 0.5).unwrap();
    c.read(y, &mut v).unwrap();
    assert!(
        close(v[0], std::f32::consts::SQRT_2) && close(v[1], 3.0),
        "{v:?}"
    );
    assert_eq!(v[2], 0.0);
    assert!(v[3].is_nan() && v[4].is_nan(), "{v:?}"); // (-2)^0.5
    let y = c.pow(x, 3.0).unwrap();
    c.read(y, &mut v).unwrap();
    assert_eq!(v, [8.0, 729.0, 0.0, -8.0, -8.0, 0.0]);
    let y = c.pow(x, -1.0).unwrap();
    c.read(y, &mut v).unwrap();
    assert!(close(v[1], 1.0 / 9.0), "{v:?}");
    assert_eq!([v[0], v[2], v[3]], [0.5, f32::INFINITY, -0.5]);
    let y = c.pow(x, 0.0).unwrap();
    c.read(y, &mut v).unwrap();
    assert_eq!(v, [1.0; 6]);
    // Gradients: p x^(p-1), and 0 everywhere for p = 0.
    let mut g = [0.0; 4];
    for (p, want) in [
        (2.0, [4.0, -4.0, 0.0, 1.0]),
        (0.0, [0.0; 4]),
        (1.0, [1.0; 4]),
    ] {
        let mut c = crate::Context::new();
        let x = c.param(&[4], Some(&[2.0, -2.0, 0.0, 0.5])).unwrap();
        let y = c.pow(x, p).unwrap();
        let l = c.sum(y).unwrap();
        c.backward(l).unwrap();
        c.read_grad(x, &mut g).unwrap();
        assert_eq!(g, want, "p = {p}");
    }
    // A non-finite exponent is refused before anything is allocated.
    let used = c.memory_stats().arena_used_bytes;
    for p in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let e = c.pow(x, p).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().starts_with("pow: exponent"), "{e}");
    }
    assert_eq!(c.memory_stats().arena_used_bytes, used);
}

#[test]
fn shape_mismatch_names_op_and_shapes() {
    let mut c = crate::Context::new();
    let a = c.tensor(&[3, 4], &[0.0; 12]).unwrap();
    let b = c.tensor(&[4, 3], &[0.0; 12]).unwrap();
    for (name, e) in [
        ("add", c.add(a, b)),
        ("sub", c.sub(a, b)),
        ("mul", c.mul(a, b)),
        ("div", c.div(a, b)),
        ("maximum", c.maximum(a, b)),
        ("minimum", c.minimum(a, b)),
    ] {
        let msg = e.unwrap_err().to_string();
        assert_eq!(
            msg,
            format!("{name}: shapes cannot be broadcast together: [3,4] x [4,3]")
        );
    }
}

#[test]
fn gradcheck_binary_broadcast_both_directions() {
    for (sa, sb) in [
        (&[3, 4][..], &[3, 4][..]),
        (&[2, 3, 4], &[4]),
        (&[3, 1], &[1, 4]),
        (&[2, 1, 4], &[2, 3, 1]),
        (&[1], &[3, 2]),
    ] {
        gradcheck(Check::new("add", &[sa, sb]), |c, x| c.add(x[0], x[1]));
        gradcheck(Check::new("sub", &[sa, sb]), |c, x| c.sub(x[0], x[1]));
        gradcheck(Check::new("mul", &[sa, sb]), |c, x| c.mul(x[0], x[1]));
        gradcheck(Check::new("div", &[sa, sb]).range(0.5, 2.0), |c, x| {
            c.div(x[0], x[1])
        });
        // Kept away from ties: |a| >= 0.2 while |0.1 b| <= 0.1, so no
        // step of the check moves an element across a == 0.1 b.
        for (name, min) in [("maximum", false), ("minimum", true)] {
            let chk = Check::new(name, &[sa, sb]).away_from_zero();
            gradcheck(chk, move |c, x| {
                let b = c.scale(x[1], 0.1)?;
                if min {
                    c.minimum(x[0], b)
                } else {
                    c.maximum(x[0], b)
                }
            });
        }
    }
}

/// lbeta, log_diff_exp, gamma_p and gamma_q in both arguments,
/// broadcasting both ways.
#[test]
fn gradcheck_special_binary_ops() {
    for (sa, sb) in [
        (&[3, 4][..], &[3, 4][..]),
        (&[2, 3, 4], &[4]),
        (&[3, 1], &[1, 4]),
        (&[1], &[3, 2]),
    ] {
        gradcheck(Check::new("lbeta", &[sa, sb]).range(0.5, 4.0), |c, x| {
            c.lbeta(x[0], x[1])
        });
        // b scaled to at most 0.4 against a >= 0.6: every step of the
        // check keeps a > b, where log_diff_exp is smooth.
        let chk = Check::new("log_diff_exp", &[sa, sb]).range(0.6, 2.0);
        gradcheck(chk, |c, x| {
            let b = c.scale(x[1], 0.2)?;
            c.log_diff_exp(x[0], b)
        });
        // a and x over [0.5, 4]: both sides of x = a + 1, where P and Q
        // switch between the series and the continued fraction.
        gradcheck(Check::new("gamma_p", &[sa, sb]).range(0.5, 4.0), |c, x| {
            c.gamma_p(x[0], x[1])
        });
        gradcheck(Check::new("gamma_q", &[sa, sb]).range(0.5, 4.0), |c, x| {
            c.gamma_q(x[0], x[1])
        });
    }
    gradcheck(Check::new("lbeta(x,x)", &[&[5]]).range(0.5, 4.0), |c, x| {
        c.lbeta(x[0], x[0])
    });
}

/// The binary special ops through the general (broadcast) and the
/// one-element paths give the kernels' values, and log_diff_exp's stated
/// edges: -inf at a == b with gradients +inf and -inf, NaN for a < b.
#[test]
fn special_binary_ops_values_and_edges() {
    use crate::special;
    let mut c = crate::Context::new();
    // Parameters come before any activation of the iteration.
    let (pa, pb) = (
        c.param(&[3], Some(&[1.0, 2.0, 0.0])).unwrap(),
        c.param(&[3], Some(&[1.0, 0.0, 1.0])).unwrap(),
    );
    let a = c
        .param(&[2, 3], Some(&[0.5, 1.0, 3.0, 30.0, 1e6, 2.0]))
        .unwrap();
    let b = c.tensor(&[3], &[1.0, 0.25, 7.5]).unwrap();
    let y = c.lbeta(a, b).unwrap();
    let mut v = [0.0; 6];
    c.read(y, &mut v).unwrap();
    let av = [0.5, 1.0, 3.0, 30.0, 1e6, 2.0];
    let bv = [1.0, 0.25, 7.5];
    for i in 0..6 {
        assert_eq!(v[i], special::lbeta(av[i], bv[i % 3]), "lbeta at {i}");
    }
    // lbeta(1, b) = -ln b, exactly in float64.
    assert_eq!(v[1], -(0.25f64.ln()) as f32);

    let d = c.log_diff_exp(pa, pb).unwrap();
    c.read(d, &mut v[..3]).unwrap();
    assert_eq!(v[0], f32::NEG_INFINITY);
    assert_eq!(v[1], (2.0 + (-(-2.0f64).exp_m1()).ln()) as f32);
    assert!(v[2].is_nan());
    let ones = c.tensor(&[3], &[1.0; 3]).unwrap();
    let s = c.mul(d, ones).unwrap();
    let s = c.sum(s).unwrap();
    c.backward(s).unwrap();
    let (mut ga, mut gb) = ([0.0; 3], [0.0; 3]);
    c.read_grad(pa, &mut ga).unwrap();
    c.read_grad(pb, &mut gb).unwrap();
    assert_eq!((ga[0], gb[0]), (f32::INFINITY, f32::NEG_INFINITY));
    assert_eq!(ga[1], (1.0 / (1.0 - (-2.0f64).exp())) as f32);
    assert_eq!(gb[1], (-1.0 / 2.0f64.exp_m1()) as f32);
    assert!(ga[2].is_nan() && gb[2].is_nan());
}

#[test]
fn gradcheck_same_tensor_twice() {
    gradcheck(Check::new("mul(x,x)", &[&[3, 5]]), |c, x| c.mul(x[0], x[0]));
    gradcheck(Check::new("add(x,x)", &[&[7]]), |c, x| c.add(x[0], x[0]));
    gradcheck(Check::new("div(x,x)", &[&[4]]).range(0.5, 2.0), |c, x| {
        c.div(x[0], x[0])
    });
}

#[test]
fn gradcheck_unary() {
    let s = &[&[4, 5][..]];
    gradcheck(Check::new("scale", s), |c, x| c.scale(x[0], -1.7));
    gradcheck(Check::new("neg", s), |c, x| c.neg(x[0]));
    // Every row of the unary table, through its generated method's path.
    for &f in crate::ops::UnaryFn::ALL {
        let (lo, hi, away) = f.check_domain();
        let mut chk = Check::new(f.name(), s).range(lo, hi);
        if away {
            chk = chk.away_from_zero();
        }
        gradcheck(chk, move |c, x| c.unary(f, x[0]));
    }
    // One bound at +-0.1, in the gap |x| >= 0.2 leaves (no step of the
    // check crosses it), the other past the range: about half of the
    // elements inside, half outside, for each bound.
    gradcheck(Check::new("clamp lo", s).away_from_zero(), |c, x| {
        c.clamp(x[0], -0.1, 2.0)
    });
    gradcheck(Check::new("clamp hi", s).away_from_zero(), |c, x| {
        c.clamp(x[0], -2.0, 0.1)
    });
    for p in [2.0, 3.0, 0.5, -1.5, 2.7] {
        gradcheck(Check::new("pow", s).range(0.5, 2.0), move |c, x| {
            c.pow(x[0], p)
        });
    }
    // Integer exponents are defined for negative x too.
    gradcheck(Check::new("pow -x", s).range(-2.0, -0.5), |c, x| {
        c.pow(x[0], 3.0)
    });
}

/// GELU cut into several element tasks (an odd length: the last task is
/// short) equals the single-threaded kernels.
#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn gelu_parallel_path_matches_kernels() {
    let n = (1 << 19) + 5;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 8.0).collect();
    let mut c = crate::Context::new();
    let p = c.param(&[n], Some(&x)).unwrap();
    let y = c.gelu(p).unwrap();
    assert!(c.pool_started());
    let l = c.sum(y).unwrap();
    c.backward(l).unwrap();
    let (mut got, mut gotg) = (vec![0.0; n], vec![0.0; n]);
    c.read(y, &mut got).unwrap();
    c.read_grad(p, &mut gotg).unwrap();
    let (mut want, mut wantg) = (vec![0.0; n], vec![0.0; n]);
    super::gelu_forward(&mut want, &x);
    super::gelu_backward::<false>(&mut wantg, &vec![1.0; n], &x);
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    assert!(
        gotg.iter()
            .zip(&wantg)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
}

/// Equal-shape add and sub cut into several element tasks (forward, and
/// both gradients side by side) equal plain loops.
#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn residual_add_and_sub_in_tasks_match_plain_loops() {
    let n = (1 << 19) + 3;
    let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
    let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.003).cos()).collect();
    let r: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
    for sub in [false, true] {
        let mut c = crate::Context::new();
        let (pa, pb) = (
            c.param(&[n], Some(&a)).unwrap(),
            c.param(&[n], Some(&b)).unwrap(),
        );
        let y = if sub { c.sub(pa, pb) } else { c.add(pa, pb) }.unwrap();
        assert!(c.pool_started());
        // A weight per element, so each gradient element is distinct.
        let rt = c.tensor(&[n], &r).unwrap();
        let l = c.mul(y, rt).unwrap();
        let l = c.sum(l).unwrap();
        c.backward(l).unwrap();
        let (mut got, mut ga, mut gb) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        c.read(y, &mut got).unwrap();
        c.read_grad(pa, &mut ga).unwrap();
        c.read_grad(pb, &mut gb).unwrap();
        for i in 0..n {
            let want = if sub { a[i] - b[i] } else { a[i] + b[i] };
            assert_eq!(got[i].to_bits(), want.to_bits(), "{i}");
            assert_eq!(ga[i].to_bits(), r[i].to_bits(), "{i}");
            let wb = if sub { -r[i] } else { r[i] };
            assert_eq!(gb[i].to_bits(), wb.to_bits(), "{i}");
        }
    }
}

/// GELU and equal-shape add/sub write a newborn activation gradient
/// with `=` (no zero fill): inputs that are activations take that path,
/// also when the two operands share one gradient (a view of the other),
/// and when a later consumer adds onto what the first one wrote.
#[test]
fn gradcheck_first_writes_into_newborn_gradients() {
    gradcheck(Check::new("gelu(1.5x)", &[&[4, 5]]), |c, x| {
        let h = c.scale(x[0], 1.5)?;
        c.gelu(h)
    });
    gradcheck(Check::new("(2a-b)*(2a+b)", &[&[3, 4], &[3, 4]]), |c, x| {
        let a = c.scale(x[0], 2.0)?;
        let b = c.scale(x[1], -1.0)?;
        let s = c.add(a, b)?;
        let d = c.sub(a, b)?;
        c.mul(s, d)
    });
    gradcheck(Check::new("h - reshape(h), h = 3x", &[&[2, 6]]), |c, x| {
        let h = c.scale(x[0], 3.0)?;
        let v = c.reshape(h, &[2, 6])?;
        let d = c.sub(h, v)?;
        let e = c.add(v, v)?;
        let g = c.gelu(e)?;
        c.mul(d, g)
    });
}

#[test]
fn gradcheck_composition_reuses_intermediate() {
    // y = tanh(x) used by two consumers: grads from both must add up.
    gradcheck(Check::new("tanh reused", &[&[6]]), |c, x| {
        let t = c.tanh(x[0])?;
        let e = c.exp(t)?;
        c.mul(t, e)
    });
}

/// Distance in float32 steps between two finite floats of the same sign.
fn ulps(a: f32, b: f32) -> u32 {
    if a == b {
        return 0;
    }
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

/// The special-function ops against a float64 reference rounded to float32
/// (libm's f64 functions, or closed forms), through the generated methods.
/// Tolerance 4 ulps: the kernels promise that over their whole domain.
#[test]
fn special_ops_forward_match_f64() {
    use crate::ops::UnaryFn as F;
    let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    // digamma from its recurrence down to the classic value at 1.
    let digamma = |n: u32| -0.5772156649015329 + (1..n).map(|k| 1.0 / k as f64).sum::<f64>();
    // (op, points, the float64 reference)
    type Case<'a> = (F, &'a [f32], &'a dyn Fn(f64) -> f64);
    let cases: [Case; 8] = [
        (
            F::Lgamma,
            &[0.1, 0.5, 1.0, 1.5, 2.0, 3.3, 10.0, 1e5],
            &libm::lgamma,
        ),
        (
            F::Expm1,
            &[-20.0, -1.0, -1e-3, 1e-7, 0.3, 1.0, 30.0],
            &libm::expm1,
        ),
        (F::Softplus, &[-30.0, -2.0, 0.0, 1e-4, 2.0, 30.0], &|x| {
            x.max(0.0) + libm::log1p(libm::exp(-x.abs()))
        }),
        (F::LogSigmoid, &[-30.0, -2.0, 0.0, 1e-4, 2.0, 30.0], &|x| {
            x.min(0.0) - libm::log1p(libm::exp(-x.abs()))
        }),
        (F::Erf, &[-3.0, -0.5, 1e-5, 0.25, 1.0, 2.5], &libm::erf),
        (F::NormalCdf, &[-8.0, -2.0, -0.1, 0.0, 0.7, 3.0], &phi),
        (F::NormalLcdf, &[-5.0, -2.0, -0.1, 0.0, 0.7, 3.0], &|x| {
            phi(x).ln()
        }),
        (F::Digamma, &[1.0, 2.0, 5.0], &|x| digamma(x as u32)),
    ];
    let mut c = crate::Context::new();
    for (f, xs, reference) in cases {
        let x = c.tensor(&[xs.len()], xs).unwrap();
        let y = c.unary(f, x).unwrap();
        let mut v = vec![0.0; xs.len()];
        c.read(y, &mut v).unwrap();
        for (&x, &got) in xs.iter().zip(&v) {
            let want = reference(x as f64) as f32;
            assert!(
                ulps(got, want) <= 4,
                "{}({x}) = {got}, float64 says {want}",
                f.name()
            );
        }
    }
    // Off the domain: NaN below 0 for the gamma functions, the pole's limit
    // at 0; the far lower tail of ln Phi stays finite (about -x^2/2).
    let x = c.tensor(&[3], &[-1.5, 0.0, -100.0]).unwrap();
    let (g, d, l) = (
        c.lgamma(x).unwrap(),
        c.digamma(x).unwrap(),
        c.normal_lcdf(x).unwrap(),
    );
    let mut v = [0.0; 3];
    c.read(g, &mut v).unwrap();
    assert!(v[0].is_nan() && v[1] == f32::INFINITY);
    c.read(d, &mut v).unwrap();
    assert!(v[0].is_nan() && v[1] == f32::NEG_INFINITY);
    c.read(l, &mut v).unwrap();
    assert!((v[2] - -5005.524).abs() < 0.01, "ln Phi(-100) = {}", v[2]);
}

/// inv_Phi through the op: known quantiles (to 2 ulps: the table's values
/// are the f64 quantiles rounded once), Phi(inv_Phi(p)) = p within f32's
/// resolution of p, and the ends of its domain.
#[test]
fn inv_phi_op_known_quantiles_round_trip_and_ends() {
    let mut c = crate::Context::new();
    let known: [(f32, f64); 4] = [
        (0.975, 1.959963984540054),
        (0.025, -1.959963984540054),
        (0.5, 0.0),
        (1e-10, -6.361340902404056),
    ];
    let ps: Vec<f32> = known.iter().map(|k| k.0).collect();
    let x = c.tensor(&[ps.len()], &ps).unwrap();
    let y = c.inv_phi(x).unwrap();
    let mut v = vec![0.0; ps.len()];
    c.read(y, &mut v).unwrap();
    for (&(p, want), &got) in known.iter().zip(&v) {
        // 0.975 and 0.025 are not exact in f32: move the reference by the
        // quantile's slope times the rounding of p.
        let slope = (2.0 * std::f64::consts::PI).sqrt() * (0.5 * want * want).exp();
        let want = want + slope * (p as f64 - format!("{p}").parse::<f64>().unwrap());
        assert!(
            ulps(got, want as f32) <= 2,
            "inv_Phi({p}) = {got}, want {want}"
        );
    }
    let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    let mut p = 1e-30f32;
    while p < 1.0 {
        let q = c.tensor(&[1], &[p]).unwrap();
        let y = c.inv_phi(q).unwrap();
        let mut got = [0.0];
        c.read(y, &mut got).unwrap();
        let back = phi(got[0] as f64);
        // y is within half an ulp of the true quantile: Phi moves by at most
        // phi(y) * ulp(y) / 2 from p.
        let pdf = (-0.5 * (got[0] as f64).powi(2)).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let tol = pdf * (got[0].abs().max(1e-30) as f64) * f32::EPSILON as f64 + 1e-300;
        assert!((back - p as f64).abs() <= tol, "Phi(inv_Phi({p})) = {back}");
        p = if p < 0.01 { p * 7.3 } else { p + 0.0371 };
        c.reset();
    }
    let x = c.tensor(&[4], &[0.0, 1.0, 1.5, -0.1]).unwrap();
    let y = c.inv_phi(x).unwrap();
    let mut v = [0.0; 4];
    c.read(y, &mut v).unwrap();
    assert_eq!(v[0], f32::NEG_INFINITY);
    assert_eq!(v[1], f32::INFINITY);
    assert!(v[2].is_nan() && v[3].is_nan());
}

/// The gradient of a column broadcast along rows (`[R, 1]` against
/// `[R, L]`): rows of 32 or more sum their terms in 16 running sums (term
/// j into sum j % 16 over whole groups of 16), combined pairwise, then
/// the rest in order; shorter rows in order. Against that order written
/// out, a float64 reference (the lanes' f32 error is at most about
/// (L / 16 + 4) f32 ulps of the sum of |terms|; checked at 2e-6 of it)
/// and every instruction set (the same bits).
#[test]
fn broadcast_column_gradient_lanes() {
    let mut rng = crate::ops::gradcheck::Lcg(5);
    for len in [7, 31, 32, 45, 1000] {
        let rows = 3;
        let xv: Vec<f32> = (0..rows * len).map(|_| rng.uniform() * 4.0 - 2.0).collect();
        let rv: Vec<f32> = (0..rows * len).map(|_| rng.uniform() * 2.0 - 1.0).collect();
        let cv = [0.5f32, -1.25, 3.0];
        let run = || {
            let mut c = crate::Context::new();
            let col = c.param(&[rows, 1], Some(&cv)).unwrap();
            let x = c.tensor(&[rows, len], &xv).unwrap();
            let r = c.tensor(&[rows, len], &rv).unwrap();
            let y = c.mul(x, col).unwrap();
            let w = c.mul(y, r).unwrap();
            let loss = c.sum(w).unwrap();
            c.backward(loss).unwrap();
            let mut g = [0.0f32; 3];
            c.read_grad(col, &mut g).unwrap();
            g
        };
        let got = run();
        for i in 0..rows {
            // Each term is r * x: the sum's gradient is 1, times r exactly.
            let terms: Vec<f32> = (0..len)
                .map(|j| rv[i * len + j] * xv[i * len + j])
                .collect();
            let want = if len < 32 {
                terms.iter().fold(0.0f32, |s, &t| s + t)
            } else {
                let whole = len / 16 * 16;
                let mut lanes = [-0.0f32; 16];
                for (j, &t) in terms[..whole].iter().enumerate() {
                    lanes[j % 16] += t;
                }
                for width in [8, 4, 2, 1] {
                    for l in 0..width {
                        lanes[l] += lanes[l + width];
                    }
                }
                0.0 + (lanes[0] + terms[whole..].iter().fold(-0.0f32, |s, &t| s + t))
            };
            assert_eq!(got[i].to_bits(), want.to_bits(), "len {len} row {i}");
            let exact: f64 = terms.iter().map(|&t| t as f64).sum();
            let scale: f64 = terms.iter().map(|&t| (t as f64).abs()).sum();
            assert!(
                (got[i] as f64 - exact).abs() <= 2e-6 * scale,
                "len {len} row {i}"
            );
        }
        for level in [crate::simd::Level::Baseline, crate::simd::Level::Avx2Fma] {
            let g = crate::simd::with_level(level, run);
            assert_eq!(
                g.map(f32::to_bits),
                got.map(f32::to_bits),
                "len {len} {level:?}"
            );
        }
    }
}

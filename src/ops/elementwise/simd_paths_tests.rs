//! The element-wise kernels: the same bits on every instruction set path
//! and one element at a time (their accuracy is `special`'s tests' and
//! the ops' own).

/// Random values over every range the kernels branch on, and each
/// special value at 17 consecutive positions: every lane of a 16-wide
/// vector and the tail.
fn inputs() -> Vec<f32> {
    let mut rng = crate::ops::gradcheck::Lcg(21);
    let specials = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0xffc0_0077),
        0.0,
        -0.0,
        f32::from_bits(3),
        f32::MIN_POSITIVE,
        -1.0,
        88.722_83,
        88.722_84,
        -103.9,
        -110.0,
        1.0,
        f32::MAX,
    ];
    let mut x: Vec<f32> = (0..1000)
        .map(|i| match i % 3 {
            0 => rng.range(-110.0, 90.0),
            1 => rng.range(-3.0, 3.0),
            _ => f32::from_bits((rng.uniform() * 2.14e9) as u32),
        })
        .collect();
    for &s in &specials {
        x.extend(std::iter::repeat_n(s, 17));
    }
    x.extend([0.5, 2.0, 3.0]);
    x
}

/// The instruction set paths this CPU has.
fn levels() -> Vec<crate::simd::Level> {
    use crate::simd::{self, Level};
    [Level::Baseline, Level::Avx2Fma, Level::Avx512]
        .into_iter()
        .filter(|&l| l <= simd::detected())
        .collect()
}

/// The exp and log kernels on every instruction set path this CPU has
/// (baseline, AVX2 + FMA, AVX-512), over a slice whose length leaves
/// vector tails and with the special values at every lane position, give
/// the bits of the same kernel on one element at a time (a scalar model's
/// path, and the replay program's): no lane width, fused multiply-add or
/// select changes a result, NaN payloads included.
#[test]
fn exp_and_log_same_bits_on_every_path_and_one_element_at_a_time() {
    use super::kernels::unary_forward;
    use crate::ops::UnaryFn;
    use crate::simd;
    let (x, ran) = (inputs(), levels());
    for f in [UnaryFn::Exp, UnaryFn::Log] {
        let one: Vec<u32> = x
            .iter()
            .map(|&v| {
                let mut y = [0.0];
                unary_forward(f, &mut y, &[v]);
                y[0].to_bits()
            })
            .collect();
        for &level in &ran {
            let mut y = vec![0.0f32; x.len()];
            simd::with_level(level, || simd::dispatch!(unary_forward(f, &mut y, &x)));
            for (i, (&got, &want)) in y.iter().zip(&one).enumerate() {
                assert_eq!(got.to_bits(), want, "{f:?} {level:?} at x = {:e}", x[i]);
            }
        }
        // And the values are the special module's, which its tests bound.
        let special: fn(f32) -> f32 = match f {
            UnaryFn::Exp => crate::special::exp,
            _ => crate::special::log,
        };
        for (&v, &got) in x.iter().zip(&one) {
            assert_eq!(got, special(v).to_bits());
        }
    }
}

/// Every unary map's forward and backward (both ways of writing a newborn
/// gradient where the row has two), scale and clamp likewise: each
/// instruction set path gives the bits of one element at a time (NaN as
/// NaN), so the kernels may be compiled into every SIMD copy of the
/// dispatch.
#[test]
fn every_map_same_bits_on_every_path_and_one_element_at_a_time() {
    use super::kernels::{
        clamp_backward, clamp_forward, scale_backward, scale_forward, unary_backward, unary_forward,
    };
    use crate::ops::UnaryFn;
    use crate::simd;
    let (x, ran) = (inputs(), levels());
    let g: Vec<f32> = x.iter().rev().map(|v| v.sin()).collect();
    let prior: Vec<f32> = x.iter().map(|v| v.cos()).collect();
    // A kernel on (dx or y, x, dout, y): run whole on a path, or per element.
    type Kernel<'a> = Box<dyn Fn(&mut [f32], &[f32], &[f32], &[f32]) + 'a>;
    let mut kernels: Vec<(String, Kernel)> = Vec::new();
    for &f in UnaryFn::ALL {
        kernels.push((
            format!("{f:?} forward"),
            Box::new(move |y, x, _, _| unary_forward(f, y, x)),
        ));
        for assign in [false, true] {
            if assign && !f.assigns_fresh_grad() {
                continue;
            }
            kernels.push((
                format!("{f:?} backward assign {assign}"),
                Box::new(move |d, x, g, y| unary_backward(f, assign, d, g, x, y)),
            ));
        }
    }
    kernels.push((
        "scale forward".into(),
        Box::new(|y, x, _, _| scale_forward(y, x, -1.7)),
    ));
    kernels.push((
        "scale backward".into(),
        Box::new(|d, _, g, _| scale_backward(d, g, 0.3)),
    ));
    kernels.push((
        "clamp forward".into(),
        Box::new(|y, x, _, _| clamp_forward(y, x, -2.0, 5.0)),
    ));
    kernels.push((
        "clamp backward".into(),
        Box::new(|d, x, g, _| clamp_backward(d, g, x, -2.0, 5.0)),
    ));
    for (name, kernel) in &kernels {
        // y: the forward's own output where a backward reads it.
        let y: Vec<f32> = x.iter().map(|v| v.tanh()).collect();
        let one: Vec<u32> = (0..x.len())
            .map(|i| {
                let mut d = [prior[i]];
                kernel(&mut d, &x[i..=i], &g[i..=i], &y[i..=i]);
                d[0].to_bits()
            })
            .collect();
        for &level in &ran {
            let mut d = prior.clone();
            simd::with_level(level, || simd::dispatch!(kernel(&mut d, &x, &g, &y)));
            for (i, (&got, &want)) in d.iter().zip(&one).enumerate() {
                // Arithmetic fixes no NaN's sign or payload (Rust's float
                // semantics): a NaN matches a NaN.
                let same = got.to_bits() == want || got.is_nan() && f32::from_bits(want).is_nan();
                assert!(
                    same,
                    "{name} {level:?} at x = {:e}: {got} vs {}",
                    x[i],
                    f32::from_bits(want)
                );
            }
        }
    }
}

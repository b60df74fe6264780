//! The exp and log kernels: the same bits on every instruction set path
//! and one element at a time (their accuracy is `special`'s tests').

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
    use crate::simd::{self, Level};
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
    // Each special value at 17 consecutive positions: every lane of a
    // 16-wide vector and the tail.
    for &s in &specials {
        x.extend(std::iter::repeat_n(s, 17));
    }
    x.extend([0.5, 2.0, 3.0]);
    let ran: Vec<Level> = [Level::Baseline, Level::Avx2Fma, Level::Avx512]
        .into_iter()
        .filter(|&l| l <= simd::detected())
        .collect();
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

//! The ops of the Llama family of models beyond those GPT-2 shares:
//! RMSNorm (`rmsnorm.rs`), rotary position embeddings (`rope.rs`) and
//! SwiGLU, their MLP's gate (`swiglu.rs`). SiLU, its activation, is also a
//! unary function row ([`unary_fns`](crate::ops::unary_fns)); its tests
//! live here.

pub(crate) mod rmsnorm;
pub(crate) mod rope;
pub(crate) mod swiglu;

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    /// x sigmoid(x) in f64.
    fn silu_f64(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    /// d/dx x sigmoid(x) in f64.
    fn silu_grad_f64(x: f64) -> f64 {
        let s = 1.0 / (1.0 + (-x).exp());
        s * (1.0 + x * (1.0 - s))
    }

    /// Forward and gradient against f64 over [-20, 20], within 4 f32 ulp
    /// of the size of the terms summed (plus 1e-30 absolute where a value
    /// underflows): one libm exp (within 1 ulp) and a few roundings. The
    /// gradient s + x s (1 - s) cancels near its zero at x = -1.28, so its
    /// bound scales with s (1 + |x| (1 - s)), not with the result.
    #[test]
    fn silu_matches_f64_reference() {
        let xs: Vec<f32> = (0..4001).map(|i| -20.0 + i as f32 * 0.01).collect();
        let n = xs.len();
        let mut c = crate::Context::new();
        let x = c.param(&[n], Some(&xs)).unwrap();
        let y = c.silu(x).unwrap();
        let l = c.sum(y).unwrap();
        c.backward(l).unwrap();
        let (mut got, mut grad) = (vec![0.0; n], vec![0.0; n]);
        c.read(y, &mut got).unwrap();
        c.read_grad(x, &mut grad).unwrap();
        for ((&xv, &g), &d) in xs.iter().zip(&got).zip(&grad) {
            let x64 = xv as f64;
            let s = 1.0 / (1.0 + (-x64).exp());
            for (what, v, want, size) in [
                ("silu", g, silu_f64(x64), silu_f64(x64).abs()),
                (
                    "silu'",
                    d,
                    silu_grad_f64(x64),
                    s * (1.0 + x64.abs() * (1.0 - s)),
                ),
            ] {
                let err = (v as f64 - want).abs();
                assert!(
                    err <= 4.0 * size * f32::EPSILON as f64 + 1e-30,
                    "{what}({xv}) = {v}, f64 says {want}"
                );
            }
        }
    }

    /// No overflow to inf or NaN: the limits at +-inf and far out.
    #[test]
    fn silu_is_finite_for_large_inputs() {
        let xs = [
            f32::NEG_INFINITY,
            -1e38,
            -200.0,
            -90.0,
            90.0,
            1e38,
            f32::INFINITY,
        ];
        let mut c = crate::Context::new();
        let x = c.param(&[xs.len()], Some(&xs)).unwrap();
        let y = c.silu(x).unwrap();
        let l = c.sum(y).unwrap();
        c.backward(l).unwrap();
        let (mut v, mut d) = ([0.0; 7], [0.0; 7]);
        c.read(y, &mut v).unwrap();
        c.read_grad(x, &mut d).unwrap();
        assert_eq!(&v[..3], &[0.0; 3]);
        // silu(-90) = -7.4e-38: -0 or a value that small, never positive.
        assert!(v[3].is_sign_negative() && v[3] > -1e-36, "{}", v[3]);
        assert_eq!(&v[4..], &[90.0, 1e38, f32::INFINITY]);
        assert_eq!(&d[..3], &[0.0; 3]);
        assert_eq!(&d[4..], &[1.0; 3]);
        assert!(d.iter().all(|g| g.is_finite()));
    }

    #[test]
    fn gradcheck_silu() {
        gradcheck(Check::new("silu", &[&[3, 7]]).range(-6.0, 6.0), |c, x| {
            c.silu(x[0])
        });
    }
}

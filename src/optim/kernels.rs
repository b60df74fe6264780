//! The update kernels: one parameter's floats (or a slice of them) at a time.

/// v = mu v + (g + wd p); p -= lr v. All [N].
pub(crate) fn sgd_momentum_update(
    p: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    lr: f32,
    mu: f32,
    wd: f32,
) {
    for ((p, v), &g) in p.iter_mut().zip(v.iter_mut()).zip(g) {
        *v = mu * *v + g + wd * *p;
        *p -= lr * *v;
    }
}

/// The constants of one AdamW step. The bias corrections 1 - beta^t are
/// computed in f64: in f32, `1 - beta2^t` for beta2 = 0.999 and small t
/// subtracts two numbers within 1e-3 of each other, so the rounding error of
/// beta2^t (6e-8) becomes a relative error of up to 1.5e-5 in the
/// correction, which made every early update systematically too small.
/// Rounded once to f32 afterwards, each constant is off by at most half an
/// ulp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamWStep {
    lr: f32,
    b1: f32,
    b2: f32,
    /// 1 - b1 and 1 - b2.
    one_minus_b1: f32,
    one_minus_b2: f32,
    eps: f32,
    wd: f32,
    /// 1 / (1 - b1^t) and 1 / sqrt(1 - b2^t).
    inv_c1: f32,
    inv_sqrt_c2: f32,
}

impl AdamWStep {
    /// Constants for step `t` (1-based).
    pub(crate) fn new(lr: f32, b1: f32, b2: f32, eps: f32, wd: f32, t: u64) -> AdamWStep {
        let t = t.clamp(1, i32::MAX as u64) as i32;
        let (b1d, b2d) = (b1 as f64, b2 as f64);
        let c1 = 1.0 - b1d.powi(t);
        let c2 = 1.0 - b2d.powi(t);
        AdamWStep {
            lr,
            b1,
            b2,
            one_minus_b1: (1.0 - b1d) as f32,
            one_minus_b2: (1.0 - b2d) as f32,
            eps,
            wd,
            inv_c1: (1.0 / c1) as f32,
            inv_sqrt_c2: (1.0 / c2.sqrt()) as f32,
        }
    }
}

/// AdamW update of one parameter. p, m, v, g: [N].
/// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr (m / c1 / (sqrt(v / c2) + eps) + wd p), with c = 1 - b^t.
/// Each element is independent: splitting the slices changes no bit.
#[inline(always)]
pub(crate) fn adamw_update(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], k: AdamWStep) {
    for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
        *m = k.b1 * *m + k.one_minus_b1 * g;
        *v = k.b2 * *v + k.one_minus_b2 * g * g;
        let mh = *m * k.inv_c1;
        let vh_sqrt = v.sqrt() * k.inv_sqrt_c2;
        *p -= k.lr * (mh / (vh_sqrt + k.eps) + k.wd * *p);
    }
}

//! Central finite-difference gradient check shared by every op's tests.
//!
//! The scalar checked is L = sum(f(x) * r) for a fixed random r (so every
//! output element matters with its own weight). Numerical derivatives use the
//! 4-point stencil (f(x-2h) - 8f(x-h) + 8f(x+h) - f(x+2h)) / 12h evaluated in
//! f64 on the host; analytical ones come from `backward`. Pass when
//! |analytic - numeric| <= atol + rtol * |numeric| for every coordinate
//! (defaults atol 1e-3, rtol 1e-2, h 1e-2: f32 forward passes, as in ggml).

use crate::context::{Context, Tensor};
use crate::error::Result;

/// A tensor's values, read whole (the ops' tests).
pub(crate) fn read(c: &Context, t: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.shape(t).unwrap().numel()];
    c.read(t, &mut v).unwrap();
    v
}

/// A tensor's gradient, read whole (the ops' tests).
pub(crate) fn read_grad(c: &Context, t: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.shape(t).unwrap().numel()];
    c.read_grad(t, &mut v).unwrap();
    v
}

pub(crate) struct Check {
    pub name: String,
    pub shapes: Vec<Vec<usize>>,
    pub lo: f32,
    pub hi: f32,
    pub away_from_zero: bool,
    pub h: f32,
    pub atol: f64,
    pub rtol: f64,
    pub seed: u64,
}

/// The knobs an op's check sets today; an op that needs another (a step
/// size, a tolerance) adds its builder here with its first use.
impl Check {
    pub fn new(name: &str, shapes: &[&[usize]]) -> Check {
        Check {
            name: name.to_string(),
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            lo: -1.0,
            hi: 1.0,
            away_from_zero: false,
            h: 1e-2,
            atol: 1e-3,
            rtol: 1e-2,
            seed: 0x5eed,
        }
    }
    pub fn range(mut self, lo: f32, hi: f32) -> Check {
        self.lo = lo;
        self.hi = hi;
        self
    }
    /// Keep |x| >= 0.2 so kinks at zero (relu) are not straddled by h.
    pub fn away_from_zero(mut self) -> Check {
        self.away_from_zero = true;
        self
    }
}

/// Small deterministic generator for test data.
pub(crate) struct Lcg(pub u64);
impl Lcg {
    pub fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32) / (1u64 << 24) as f32
    }
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.uniform()
    }
}

/// Root-mean-square and largest absolute difference between `got` and an
/// exact reference (f64 sums of f32 terms: their own error, about 1e-16
/// relative, is nothing next to one f32 ulp).
pub(crate) fn abs_errors(got: &[f32], exact: &[f64]) -> (f64, f64) {
    assert_eq!(got.len(), exact.len());
    let (sq, max) = got
        .iter()
        .zip(exact)
        .map(|(&g, &e)| (g as f64 - e).abs())
        .fold((0.0, 0.0f64), |(s, m), d| (s + d * d, m.max(d)));
    ((sq / got.len() as f64).sqrt(), max)
}

/// (r, column sums in f64) for an [rows, n] array of values U(-1, 1) plus a
/// per-column offset in U(-0.5, 0.5): the sums grow with the row count and
/// partly cancel, as bias gradients do.
pub(crate) fn column_data(rng: &mut Lcg, rows: usize, n: usize) -> (Vec<f32>, Vec<f64>) {
    let off: Vec<f32> = (0..n).map(|_| rng.range(-0.5, 0.5)).collect();
    let r: Vec<f32> = (0..rows * n)
        .map(|i| rng.range(-1.0, 1.0) + off[i % n])
        .collect();
    let mut sums = vec![0.0f64; n];
    for row in r.chunks_exact(n) {
        sums.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
    }
    (r, sums)
}

fn loss_of(
    ctx: &mut Context,
    f: &impl Fn(&mut Context, &[Tensor]) -> Result<Tensor>,
    xs: &[Tensor],
    r: &[f32],
) -> f64 {
    ctx.reset();
    let out = f(ctx, xs).expect("forward failed in gradcheck");
    let mut v = vec![0.0f32; r.len()];
    ctx.read(out, &mut v).expect("read");
    v.iter().zip(r).map(|(&a, &b)| a as f64 * b as f64).sum()
}

/// Checks `f`'s gradients with respect to every input.
pub(crate) fn gradcheck(check: Check, f: impl Fn(&mut Context, &[Tensor]) -> Result<Tensor>) {
    let mut rng = Lcg(check.seed);
    let mut ctx = Context::new();
    let mut xs = Vec::new();
    let mut values = Vec::new();
    for s in &check.shapes {
        let n: usize = s.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                if check.away_from_zero {
                    let m = rng.range(0.2, 1.0);
                    if rng.uniform() < 0.5 { -m } else { m }
                } else {
                    rng.range(check.lo, check.hi)
                }
            })
            .collect();
        xs.push(ctx.param(s, Some(&v)).unwrap());
        values.push(v);
    }
    // Analytical gradients through sum(out * r).
    let out = f(&mut ctx, &xs).unwrap_or_else(|e| panic!("{}: forward failed: {e}", check.name));
    let oshape = ctx.shape(out).unwrap();
    let r: Vec<f32> = (0..oshape.numel()).map(|_| rng.range(-1.0, 1.0)).collect();
    let rt = ctx.tensor(oshape.dims(), &r).unwrap();
    let weighted = ctx.mul(out, rt).unwrap();
    let loss = ctx.sum(weighted).unwrap();
    ctx.backward(loss).unwrap();
    let mut worst = 0.0f64;
    for (i, x) in xs.iter().enumerate() {
        let n = values[i].len();
        let mut analytic = vec![0.0f32; n];
        ctx.read_grad(*x, &mut analytic).unwrap();
        let mut v = values[i].clone();
        let h = check.h;
        for j in 0..n {
            let x0 = v[j];
            let at = |dx: f32, v: &mut Vec<f32>, ctx: &mut Context| {
                v[j] = x0 + dx;
                ctx.param_write(*x, v).unwrap();
                loss_of(ctx, &f, &xs, &r)
            };
            let (p1, m1, p2, m2) = (
                at(h, &mut v, &mut ctx),
                at(-h, &mut v, &mut ctx),
                at(2.0 * h, &mut v, &mut ctx),
                at(-2.0 * h, &mut v, &mut ctx),
            );
            v[j] = x0;
            ctx.param_write(*x, &v).unwrap();
            let numeric = (m2 - 8.0 * m1 + 8.0 * p1 - p2) / (12.0 * h as f64);
            let a = analytic[j] as f64;
            let err = (a - numeric).abs();
            worst = worst.max(err / (check.atol + check.rtol * numeric.abs()));
            assert!(
                err <= check.atol + check.rtol * numeric.abs(),
                "{}: input {i} element {j}: analytic {a} vs numeric {numeric}",
                check.name
            );
        }
    }
    assert!(worst.is_finite());
}

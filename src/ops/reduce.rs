//! Reductions: sum and mean over all elements or along one axis, and
//! log-sum-exp along one axis.

use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::shape::{MAX_DIMS, Shape};
use crate::simd;
use crate::special;

/// (outer, n, inner) view of `shape` around `axis`.
pub(crate) fn split(shape: Shape, axis: usize) -> (usize, usize, usize) {
    let d = shape.dims();
    (
        d[..axis].iter().product(),
        d[axis],
        d[axis + 1..].iter().product(),
    )
}

/// out[o, i] = s * sum_j x[o, j, i]. x: `[outer, n, inner]`, out: `[outer, inner]`.
#[inline(always)]
fn sum_axis_forward(out: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize, s: f32) {
    for o in 0..outer {
        let acc = &mut out[o * inner..(o + 1) * inner];
        acc.fill(0.0);
        for j in 0..n {
            let row = &x[(o * n + j) * inner..(o * n + j + 1) * inner];
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
        }
        acc.iter_mut().for_each(|a| *a *= s);
    }
}

/// dx[o, j, i] += s * dout[o, i].
#[inline(always)]
fn sum_axis_backward(dx: &mut [f32], dout: &[f32], outer: usize, n: usize, inner: usize, s: f32) {
    for o in 0..outer {
        let g = &dout[o * inner..(o + 1) * inner];
        for j in 0..n {
            let row = &mut dx[(o * n + j) * inner..(o * n + j + 1) * inner];
            row.iter_mut().zip(g).for_each(|(d, &g)| *d += s * g);
        }
    }
}

impl Context {
    fn reduce_all(&mut self, mean: bool, op: &'static str, x: Tensor) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, Shape::scalar(), tracks)?;
        Ok(self.run(Op::Reduce { x: ix, mean }, out))
    }

    /// Sum of all elements, shape `[1]`.
    pub fn sum(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce_all(false, "sum", x)
    }

    /// Mean of all elements, shape `[1]`.
    pub fn mean(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce_all(true, "mean", x)
    }

    fn reduce_axis(
        &mut self,
        mean: bool,
        op: &'static str,
        x: Tensor,
        axis: i32,
        keepdim: bool,
    ) -> Result<Tensor> {
        let (ix, axis, out) = self.axis_output(op, x, axis, keepdim)?;
        Ok(self.run(Op::ReduceAxis { x: ix, axis, mean }, out))
    }

    /// Validates a reduction of `x` along `axis` and pushes its output:
    /// (input id, axis, output id).
    fn axis_output(
        &mut self,
        op: &'static str,
        x: Tensor,
        axis: i32,
        keepdim: bool,
    ) -> Result<(u32, u8, u32)> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let ax = ex.shape.axis(op, axis)?;
        let mut dims = [0usize; MAX_DIMS];
        let mut nd = 0;
        for (i, &d) in ex.shape.dims().iter().enumerate() {
            if i != ax {
                dims[nd] = d;
                nd += 1;
            } else if keepdim {
                dims[nd] = 1;
                nd += 1;
            }
        }
        if nd == 0 {
            dims[0] = 1;
            nd = 1;
        }
        let oshape = Shape::from_valid(&dims[..nd]);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, oshape, tracks)?;
        Ok((ix, ax as u8, out))
    }

    /// Sum along `axis` (negative counts from the end); `keepdim` keeps it as size 1.
    pub fn sum_axis(&mut self, x: Tensor, axis: i32, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(false, "sum_axis", x, axis, keepdim)
    }

    /// Mean along `axis`.
    pub fn mean_axis(&mut self, x: Tensor, axis: i32, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(true, "mean_axis", x, axis, keepdim)
    }

    /// ln sum e^x along `axis`, accumulated in f64 after subtracting the
    /// maximum: -inf entries add nothing (all -inf gives -inf), a +inf entry
    /// gives +inf, NaN propagates. The gradient is the softmax of x along
    /// the axis.
    pub fn logsumexp_axis(&mut self, x: Tensor, axis: i32, keepdim: bool) -> Result<Tensor> {
        let (ix, axis, out) = self.axis_output("logsumexp_axis", x, axis, keepdim)?;
        Ok(self.run(Op::LogSumExpAxis { x: ix, axis }, out))
    }
}

pub(crate) fn forward_reduce(ctx: &mut Context, out: u32, x: u32, mean: bool) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    y[0] = reduce_forward(x, mean);
}

pub(crate) fn forward_reduce_axis(ctx: &mut Context, out: u32, x: u32, axis: usize, mean: bool) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let (outer, n, inner) = split(ex.shape, axis);
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    reduce_axis_forward(y, x, outer, n, inner, mean);
}

/// The sum (or mean) along the middle axis of x: `[outer, n, inner]`;
/// y: `[outer, inner]`.
#[inline]
pub(crate) fn reduce_axis_forward(
    y: &mut [f32],
    x: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
    mean: bool,
) {
    simd::dispatch!(sum_axis_forward(y, x, outer, n, inner, axis_scale(mean, n)));
}

/// The backward of [`reduce_axis_forward`]: dx `[outer, n, inner]` +=
/// dout `[outer, inner]` (divided by n for a mean).
#[inline]
pub(crate) fn reduce_axis_backward(
    dx: &mut [f32],
    dout: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
    mean: bool,
) {
    simd::dispatch!(sum_axis_backward(
        dx,
        dout,
        outer,
        n,
        inner,
        axis_scale(mean, n)
    ));
}

pub(crate) fn forward_logsumexp_axis(ctx: &mut Context, out: u32, x: u32, axis: usize) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let (outer, n, inner) = split(ex.shape, axis);
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    logsumexp_axis_forward(y, x, outer, n, inner);
}

/// Lines this long or shorter keep their terms on the stack between the
/// sum and the weights of the backward (longer ones compute them twice).
const LSE_LINE: usize = 64;

/// The maximum of the finite line `x[start + j * stride]` (j < n) as f64,
/// or None if an entry is NaN or infinite (those lines take the general
/// `special` functions and their rules).
#[inline(always)]
fn finite_max(x: &[f32], start: usize, n: usize, stride: usize) -> Option<f64> {
    let mut m = f32::NEG_INFINITY;
    let mut finite = true;
    for j in 0..n {
        let v = x[start + j * stride];
        finite &= v.is_finite();
        m = if v > m { v } else { m };
    }
    (finite && n > 0).then_some(m as f64)
}

/// e^(v - m) in f64, as `special::logsumexp_strided` computes each term:
/// the maximum's own term is e^0 = 1 exactly, so it skips the libm call.
#[inline(always)]
fn lse_term(v: f32, m: f64) -> f64 {
    let d = v as f64 - m;
    if d == 0.0 { 1.0 } else { d.exp() }
}

/// out[o, i] = ln sum_j e^x[o, j, i]. x: `[outer, n, inner]`, out: `[outer, inner]`.
/// The same bits as `special::logsumexp_strided` on every line (the same
/// f64 terms summed in the same order), one libm exp fewer per line.
pub(crate) fn logsumexp_axis_forward(
    out: &mut [f32],
    x: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
) {
    if n == 2 {
        return logsumexp_pairs_forward(out, x, outer, inner);
    }
    for o in 0..outer {
        for i in 0..inner {
            let start = o * n * inner + i;
            out[o * inner + i] = match finite_max(x, start, n, inner) {
                Some(m) => {
                    let s: f64 = (0..n).map(|j| lse_term(x[start + j * inner], m)).sum();
                    (m + s.ln()) as f32
                }
                None => special::logsumexp_strided(x, start, n, inner),
            };
        }
    }
}

/// dx[o, j, i] += dout[o, i] * softmax_j(x[o, :, i]).
/// The same bits as `special::logsumexp_grad_add_strided` on every line;
/// a short line's terms are computed once, not twice.
pub(crate) fn logsumexp_axis_backward(
    dx: &mut [f32],
    dout: &[f32],
    x: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
) {
    if n == 2 {
        return logsumexp_pairs_backward(dx, dout, x, outer, inner);
    }
    let mut terms = [0.0f64; LSE_LINE];
    for o in 0..outer {
        for i in 0..inner {
            let g = dout[o * inner + i];
            let start = o * n * inner + i;
            let Some(m) = finite_max(x, start, n, inner) else {
                special::logsumexp_grad_add_strided(dx, x, start, n, inner, g);
                continue;
            };
            let g = g as f64;
            if n <= LSE_LINE {
                for (j, t) in terms[..n].iter_mut().enumerate() {
                    *t = lse_term(x[start + j * inner], m);
                }
                let s: f64 = terms[..n].iter().sum();
                for (j, &t) in terms[..n].iter().enumerate() {
                    dx[start + j * inner] += (g * (t / s)) as f32;
                }
            } else {
                let s: f64 = (0..n).map(|j| lse_term(x[start + j * inner], m)).sum();
                for j in 0..n {
                    let p = start + j * inner;
                    dx[p] += (g * (lse_term(x[p], m) / s)) as f32;
                }
            }
        }
    }
}

/// A finite pair's maximum and the other entry's term e^(lo - m) (the
/// maximum's own term is 1): the f64 terms of the general line, with the
/// vectorised [`fastmath::exp_f64`] in place of libm's exp. Any lane value
/// for a pair with an infinite or NaN entry; the caller redoes those.
#[inline(always)]
fn pair_terms(a: f32, b: f32) -> (f64, f64) {
    let (hi, lo) = if b > a { (b, a) } else { (a, b) };
    let m = hi as f64;
    (m, fastmath::exp_f64(lo as f64 - m))
}

/// [`logsumexp_axis_forward`] along an axis of two (a two-component
/// mixture's table): for finite pairs m + ln(1 + e^(lo - m)) in f64 by the
/// vectorised exp and ln of `fastmath` (their f32 results are the general
/// line's but for a one-ulp difference where the f64 value sits within
/// about 1e-15 of a rounding boundary); pairs with an infinite or NaN
/// entry take the general rules.
fn logsumexp_pairs_forward(out: &mut [f32], x: &[f32], outer: usize, inner: usize) {
    for o in 0..outer {
        let (xa, xb) = x[o * 2 * inner..][..2 * inner].split_at(inner);
        let out = &mut out[o * inner..][..inner];
        if !simd::dispatch!(pairs_forward_lanes(out, xa, xb)) {
            for ((y, &a), &b) in out.iter_mut().zip(xa).zip(xb) {
                if !(a.is_finite() && b.is_finite()) {
                    *y = special::logsumexp_strided(&[a, b], 0, 2, 1);
                }
            }
        }
    }
}

/// The finite pairs' lanes of [`logsumexp_pairs_forward`], branch-free so
/// the loop vectorises; whether every pair was finite.
#[inline(always)]
fn pairs_forward_lanes(out: &mut [f32], xa: &[f32], xb: &[f32]) -> bool {
    let mut finite = true;
    for ((y, &a), &b) in out.iter_mut().zip(xa).zip(xb) {
        finite &= a.is_finite() & b.is_finite();
        let (m, t) = pair_terms(a, b);
        *y = (m + fastmath::ln_f64(1.0 + t)) as f32;
    }
    finite
}

/// [`logsumexp_axis_backward`] along an axis of two: the weights 1/s and
/// t/s of the general line (s = 1 + t) from the terms of
/// [`logsumexp_pairs_forward`].
fn logsumexp_pairs_backward(dx: &mut [f32], dout: &[f32], x: &[f32], outer: usize, inner: usize) {
    for o in 0..outer {
        let (xa, xb) = x[o * 2 * inner..][..2 * inner].split_at(inner);
        let (da, db) = dx[o * 2 * inner..][..2 * inner].split_at_mut(inner);
        let dout = &dout[o * inner..][..inner];
        if simd::dispatch!(pairs_backward_lanes(da, db, dout, xa, xb)) {
            continue;
        }
        for i in 0..inner {
            let (a, b) = (xa[i], xb[i]);
            if !(a.is_finite() && b.is_finite()) {
                let mut d = [da[i], db[i]];
                special::logsumexp_grad_add_strided(&mut d, &[a, b], 0, 2, 1, dout[i]);
                (da[i], db[i]) = (d[0], d[1]);
            }
        }
    }
}

/// The finite pairs' lanes of [`logsumexp_pairs_backward`], branch-free
/// (a pair with an infinite or NaN entry keeps its gradients as they
/// were); whether every pair was finite.
#[inline(always)]
fn pairs_backward_lanes(
    da: &mut [f32],
    db: &mut [f32],
    dout: &[f32],
    xa: &[f32],
    xb: &[f32],
) -> bool {
    let mut all = true;
    let lanes = da.iter_mut().zip(db.iter_mut()).zip(dout).zip(xa).zip(xb);
    for ((((da, db), &g), &a), &b) in lanes {
        let finite = a.is_finite() & b.is_finite();
        all &= finite;
        let (_, t) = pair_terms(a, b);
        let (ta, tb) = if b > a { (t, 1.0) } else { (1.0, t) };
        let (s, g) = (1.0 + t, g as f64);
        let (na, nb) = (*da + (g * (ta / s)) as f32, *db + (g * (tb / s)) as f32);
        *da = if finite { na } else { *da };
        *db = if finite { nb } else { *db };
    }
    all
}

pub(crate) fn backward_logsumexp_axis(ctx: &mut Context, out: u32, x: u32, axis: usize) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ex = ctx.entry(x);
    let (outer, n, inner) = split(ex.shape, axis);
    let ([dx], [dout, x]) = ctx.access([dx], [dout, ex.data]);
    logsumexp_axis_backward(dx, dout, x, outer, n, inner);
}

/// The factor applied to an axis sum of `n` elements: 1/n for a mean.
fn axis_scale(mean: bool, n: usize) -> f32 {
    if mean { 1.0 / n as f32 } else { 1.0 }
}

/// sum(x) (or its mean), accumulated in f64. x: `[N]`.
pub(crate) fn reduce_forward(x: &[f32], mean: bool) -> f32 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    if mean {
        (s / x.len() as f64) as f32
    } else {
        s as f32
    }
}

/// dx += dout (or dout / N for a mean). dx: `[N]`, dout: `[1]`.
pub(crate) fn reduce_backward(dx: &mut [f32], dout: f32, mean: bool) {
    let s = if mean { 1.0 / dx.len() as f32 } else { 1.0 };
    let g = s * dout;
    dx.iter_mut().for_each(|d| *d += g);
}

pub(crate) fn backward_reduce(ctx: &mut Context, out: u32, x: u32, mean: bool) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ([dx], [dout]) = ctx.access([dx], [dout]);
    reduce_backward(dx, dout[0], mean);
}

pub(crate) fn backward_reduce_axis(ctx: &mut Context, out: u32, x: u32, axis: usize, mean: bool) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (outer, n, inner) = split(ctx.entry(x).shape, axis);
    let ([dx], [dout]) = ctx.access([dx], [dout]);
    reduce_axis_backward(dx, dout, outer, n, inner, mean);
}

#[cfg(test)]
mod tests {
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
                    crate::special::logsumexp_grad_add_strided(
                        &mut want_dx,
                        &x,
                        start,
                        n,
                        inner,
                        g,
                    );
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
}

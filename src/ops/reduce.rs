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

/// Sums of at least this many elements run in [`SUM_LANES`] running sums
/// ([`lane_sum_f64`]); shorter ones add in order.
const LANE_SUM_MIN: usize = 32;

/// Independent running sums of [`lane_sum_f64`]: two AVX-512 registers of
/// f64, four AVX2 ones, eight SSE2 ones.
const SUM_LANES: usize = 16;

/// The sum of x in f64, in a fixed order that does not depend on the
/// instruction set: element i goes to running sum i % 16 while whole
/// groups of 16 last, the sums are combined pairwise (lane l with l + 8,
/// then l + 4, l + 2, l + 1), and the elements after the last whole group,
/// summed in order, are added last. One running sum waits on each add's
/// latency (a thousand-term log density's final sum was a chain of 1,000
/// dependent adds).
#[inline(always)]
fn lane_sum_f64(x: &[f32]) -> f64 {
    let chunks = x.chunks_exact(SUM_LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(-0.0f64, |s, &v| s + v as f64);
    let mut acc = [-0.0f64; SUM_LANES];
    for c in chunks {
        for l in 0..SUM_LANES {
            acc[l] += c[l] as f64;
        }
    }
    combine_lanes_f64(acc) + tail
}

/// The pairwise combine of [`lane_sum_f64`]'s running sums, out of line
/// (inlined, the vectoriser paired the running sums to match it and the
/// loop ran on narrow registers).
#[inline(never)]
fn combine_lanes_f64(mut acc: [f64; SUM_LANES]) -> f64 {
    let mut width = SUM_LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0]
}

/// sum(x) (or its mean), accumulated in f64: in order below
/// [`LANE_SUM_MIN`] elements, else in [`lane_sum_f64`]'s order. x: `[N]`.
pub(crate) fn reduce_forward(x: &[f32], mean: bool) -> f32 {
    let s: f64 = if x.len() < LANE_SUM_MIN {
        x.iter().map(|&v| v as f64).sum()
    } else {
        simd::dispatch!(lane_sum_f64(x))
    };
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
    if dx.len() < LANE_SUM_MIN {
        dx.iter_mut().for_each(|d| *d += g);
    } else {
        simd::dispatch!(dx.iter_mut().for_each(|d| *d += g));
    }
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
#[path = "reduce_tests.rs"]
mod tests;

//! Reshape (a free view: same memory, same gradient buffer), permute
//! (a copy into the new axis order; backward copies back), concat (inputs
//! side by side along one axis; backward splits the gradient back) and
//! slice (a copy of a range along one axis; backward scatters into it).

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::{MAX_CONCAT, Op};
use crate::shape::{MAX_DIMS, Shape};
use std::ops::Range;

/// (outer, inner): the products of the dimensions before and after `axis`.
pub(crate) fn outer_inner(s: Shape, axis: usize) -> (usize, usize) {
    let d = s.dims();
    (d[..axis].iter().product(), d[axis + 1..].iter().product())
}

/// Row-major strides of `s`.
fn strides(s: Shape) -> [usize; MAX_DIMS] {
    let mut st = [0usize; MAX_DIMS];
    let mut acc = 1;
    for i in (0..s.ndim()).rev() {
        st[i] = acc;
        acc *= s.dims()[i];
    }
    st
}

/// Visits the elements `outs` of `out` (shape `oshape`) with the offset
/// of the input element each comes from: out axis i is input axis perm[i].
fn permute_walk(
    xshape: Shape,
    oshape: Shape,
    perm: &[u8],
    outs: Range<usize>,
    f: impl FnMut(usize, usize),
) {
    walk_leading_axes(xshape, oshape, perm, oshape.ndim(), 1, outs, f);
}

/// As [`permute_walk`] when the last axis stays last (`perm` ends with
/// ndim - 1): visits each output row of `oshape.last()` elements with the
/// offset of its input row, so a head split or merge moves whole rows.
fn permute_walk_rows(
    xshape: Shape,
    oshape: Shape,
    perm: &[u8],
    outs: Range<usize>,
    f: impl FnMut(usize, usize),
) {
    let (nd, run) = (oshape.ndim(), oshape.last());
    walk_leading_axes(xshape, oshape, perm, nd - 1, run, outs, f);
}

/// Walks the first `axes` output axes in row-major order, `step` output
/// elements apart (the product of the axes after them), over the output
/// elements `outs` (whose start is a multiple of `step`), with the input
/// offset each position comes from.
fn walk_leading_axes(
    xshape: Shape,
    oshape: Shape,
    perm: &[u8],
    axes: usize,
    step: usize,
    outs: Range<usize>,
    mut f: impl FnMut(usize, usize),
) {
    if step == 0 {
        return;
    }
    let xs = strides(xshape);
    let mut src_stride = [0usize; MAX_DIMS];
    for i in 0..axes {
        src_stride[i] = xs[perm[i] as usize];
    }
    // The index and input offset of the first position.
    let mut idx = [0usize; MAX_DIMS];
    let mut src = 0usize;
    let mut at = outs.start / step;
    for d in (0..axes).rev() {
        idx[d] = at % oshape.dims()[d];
        at /= oshape.dims()[d];
        src += idx[d] * src_stride[d];
    }
    for o in outs.step_by(step) {
        f(o, src);
        for d in (0..axes).rev() {
            idx[d] += 1;
            src += src_stride[d];
            if idx[d] < oshape.dims()[d] {
                break;
            }
            src -= src_stride[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/// Whether `perm` keeps the last axis last (rows move whole).
fn keeps_last_axis(perm: &[u8]) -> bool {
    perm.last().is_some_and(|&a| a as usize + 1 == perm.len())
}

impl Context {
    /// Same data, new shape with the same element count. Free: no copy,
    /// and the result shares its gradient with `x`.
    pub fn reshape(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor> {
        const OP: &str = "reshape";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let s = Shape::new(OP, shape)?;
        if s.numel() != ex.shape.numel() {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "element counts differ",
                a: ex.shape,
                b: s,
            });
        }
        let out = self.push_view(OP, ix, s)?;
        Ok(self.handle(out))
    }

    /// Reorders axes: output axis i is input axis `perm[i]` (a copy).
    pub fn permute(&mut self, x: Tensor, perm: &[usize]) -> Result<Tensor> {
        const OP: &str = "permute";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let nd = ex.shape.ndim();
        let mut seen = [false; MAX_DIMS];
        if perm.len() != nd
            || perm
                .iter()
                .any(|&p| p >= nd || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{perm:?} is not a permutation of the {nd} axes of {}",
                    ex.shape
                ),
            });
        }
        let mut p8 = [0u8; MAX_DIMS];
        let mut dims = [0usize; MAX_DIMS];
        for i in 0..nd {
            p8[i] = perm[i] as u8;
            dims[i] = ex.shape.dims()[perm[i]];
        }
        let oshape = Shape::from_valid(&dims[..nd]);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, oshape, tracks)?;
        Ok(self.run(Op::Permute { x: ix, perm: p8 }, out))
    }

    /// Joins `xs` (1 to 8, `MAX_CONCAT`, tensors of equal rank whose shapes
    /// agree except along `axis`; negative counts from the end) along
    /// `axis`, in order (a copy).
    pub fn concat(&mut self, xs: &[Tensor], axis: i32) -> Result<Tensor> {
        const OP: &str = "concat";
        if xs.is_empty() || xs.len() > MAX_CONCAT {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} inputs; concat joins 1 to {MAX_CONCAT} tensors",
                    xs.len()
                ),
            });
        }
        let mut ids = [u32::MAX; MAX_CONCAT];
        for (id, &t) in ids.iter_mut().zip(xs) {
            *id = self.resolve(OP, t)?;
        }
        let ids_n = &ids[..xs.len()];
        let first = self.entry(ids[0]).shape;
        let ax = first.axis(OP, axis)?;
        let nd = first.ndim();
        let mut total = 0usize;
        for &i in ids_n {
            let s = self.entry(i).shape;
            let agree =
                s.ndim() == nd && (0..nd).all(|d| d == ax || s.dims()[d] == first.dims()[d]);
            if !agree {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    what: "shapes differ outside the concat axis",
                    a: first,
                    b: s,
                });
            }
            total = total
                .checked_add(s.dims()[ax])
                .ok_or_else(|| Error::TooLarge {
                    op: OP,
                    what: "the joined axis overflows".into(),
                })?;
        }
        let mut dims = [0usize; MAX_DIMS];
        dims[..nd].copy_from_slice(first.dims());
        dims[ax] = total;
        let oshape = Shape::new(OP, &dims[..nd])?;
        let tracks = self.tracks(ids_n);
        let out = self.push_output(OP, oshape, tracks)?;
        let (n, axis) = (xs.len() as u8, ax as u8);
        Ok(self.run(Op::Concat { xs: ids, n, axis }, out))
    }

    /// Elements `start..start + length` of `x` along `axis` (negative counts
    /// from the end), a copy; the range must be non-empty and inside the axis.
    pub fn slice(&mut self, x: Tensor, axis: i32, start: usize, length: usize) -> Result<Tensor> {
        const OP: &str = "slice";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let ax = ex.shape.axis(OP, axis)?;
        let size = ex.shape.dims()[ax];
        if length == 0 || start.checked_add(length).is_none_or(|end| end > size) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "start {start}, length {length} is not a non-empty range inside axis {ax} (size {size}) of {}",
                    ex.shape
                ),
            });
        }
        let mut dims = [0usize; MAX_DIMS];
        dims[..ex.shape.ndim()].copy_from_slice(ex.shape.dims());
        dims[ax] = length;
        let oshape = Shape::from_valid(&dims[..ex.shape.ndim()]);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, oshape, tracks)?;
        // start < size <= MAX_ELEMENTS < 2^31: fits.
        let op = Op::Slice {
            x: ix,
            axis: ax as u8,
            start: start as u32,
        };
        Ok(self.run(op, out))
    }

    /// Swaps two axes (a permute).
    pub fn transpose(&mut self, x: Tensor, a: usize, b: usize) -> Result<Tensor> {
        let nd = self.shape_for("transpose", x)?.ndim();
        if a >= nd || b >= nd {
            return Err(Error::InvalidArgument {
                op: "transpose",
                what: format!("axes {a},{b} out of range for rank {nd}"),
            });
        }
        let mut perm = [0usize; MAX_DIMS];
        for (i, p) in perm.iter_mut().enumerate().take(nd) {
            *p = i;
        }
        perm.swap(a, b);
        self.permute(x, &perm[..nd])
    }
}

pub(crate) fn forward_permute(ctx: &mut Context, out: u32, x: u32, perm: [u8; MAX_DIMS]) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let perm = &perm[..ex.shape.ndim()];
    let n = permute_tasks(eo.shape, perm);
    let par = n > 1 && ctx.want_pool(eo.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y], [x]) = ctx.access_on(par, [eo.data], [ex.data]);
    if !par {
        return permute_forward(y, x, ex.shape, eo.shape, perm);
    }
    permute_on(pool, y, x, ex.shape, eo.shape, perm, n);
}

/// How many tasks a permute into `oshape` is cut into: by the shape alone,
/// as the elementwise kernels cut theirs (a copy moves every element once,
/// so any cut gives the same bits). Tasks hold whole moved rows.
fn permute_tasks(oshape: Shape, perm: &[u8]) -> usize {
    let numel = oshape.numel();
    let worth = Context::worth_two_threads(numel * fastmath::ELEMENT_COST);
    let n = fastmath::task_split(worth, numel, fastmath::ELEMENT_COST);
    n.min(numel / permute_step(oshape, perm).max(1)).max(1)
}

/// Output elements each visit of the walk moves: a whole row when the last
/// axis stays last, else one.
fn permute_step(oshape: Shape, perm: &[u8]) -> usize {
    if keeps_last_axis(perm) {
        oshape.last()
    } else {
        1
    }
}

/// y (`yshape`) = x (`xshape`) permuted, in `n` tasks of contiguous output
/// rows across the pool: y[o] = x[src(o)], each task walking from its
/// first row.
fn permute_on(
    pool: Option<&crate::pool::Pool>,
    y: &mut [f32],
    x: &[f32],
    xshape: Shape,
    yshape: Shape,
    perm: &[u8],
    n: usize,
) {
    let step = permute_step(yshape, perm);
    let rows = yshape.numel() / step.max(1);
    let parts = fastmath::row_parts(y, step, n);
    fastmath::run_parts(pool, parts, &|i, y| {
        let start = crate::pool::task_range(rows, n, i).start * step;
        let outs = start..start + y.len();
        if keeps_last_axis(perm) {
            return permute_walk_rows(xshape, yshape, perm, outs, |o, s| {
                y[o - start..][..step].copy_from_slice(&x[s..s + step])
            });
        }
        permute_walk(xshape, yshape, perm, outs, |o, s| y[o - start] = x[s]);
    });
}

pub(crate) fn forward_concat(ctx: &mut Context, out: u32, xs: &[u32], axis: usize) {
    let eo = ctx.entry(out);
    let (_, inner) = outer_inner(eo.shape, axis);
    let row = eo.shape.dims()[axis] * inner;
    let mut off = 0;
    for &i in xs {
        let e = ctx.entry(i);
        let len = e.shape.dims()[axis] * inner;
        let ([y], [x]) = ctx.access([eo.data], [e.data]);
        concat_forward(y, x, row, off, len);
        off += len;
    }
}

pub(crate) fn forward_slice(ctx: &mut Context, out: u32, x: u32, axis: usize, start: usize) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let (_, inner) = outer_inner(ex.shape, axis);
    let (size, length) = (ex.shape.dims()[axis], eo.shape.dims()[axis]);
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    slice_forward(y, x, size * inner, start * inner, length * inner);
}

/// y[o] = x[src(o)]: output axis i is input axis perm[i].
#[inline]
pub(crate) fn permute_forward(y: &mut [f32], x: &[f32], xshape: Shape, yshape: Shape, perm: &[u8]) {
    if keeps_last_axis(perm) {
        let run = yshape.last();
        return permute_walk_rows(xshape, yshape, perm, 0..yshape.numel(), |o, s| {
            y[o..o + run].copy_from_slice(&x[s..s + run])
        });
    }
    permute_walk(xshape, yshape, perm, 0..yshape.numel(), |o, s| y[o] = x[s]);
}

/// dx[src(o)] += dout[o].
#[inline]
pub(crate) fn permute_backward(
    dx: &mut [f32],
    dout: &[f32],
    xshape: Shape,
    yshape: Shape,
    perm: &[u8],
) {
    if keeps_last_axis(perm) {
        let run = yshape.last();
        return permute_walk_rows(xshape, yshape, perm, 0..yshape.numel(), |o, s| {
            let (d, g) = (&mut dx[s..s + run], &dout[o..o + run]);
            d.iter_mut().zip(g).for_each(|(d, &g)| *d += g)
        });
    }
    permute_walk(xshape, yshape, perm, 0..yshape.numel(), |o, s| {
        dx[s] += dout[o]
    });
}

/// y[o, off..off + len] = x[o, ..]: one input's band of every output row.
/// y: `[outer, row]`, x: `[outer, len]`.
#[inline]
pub(crate) fn concat_forward(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize) {
    for (yr, xr) in y.chunks_exact_mut(row).zip(x.chunks_exact(len)) {
        yr[off..off + len].copy_from_slice(xr);
    }
}

/// dx[o, ..] += dout[o, off..off + len]. dx: `[outer, len]`, dout: `[outer, row]`.
#[inline]
pub(crate) fn concat_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize) {
    for (d, g) in dx.chunks_exact_mut(len).zip(dout.chunks_exact(row)) {
        d.iter_mut()
            .zip(&g[off..off + len])
            .for_each(|(d, &g)| *d += g);
    }
}

/// y[o, ..] = x[o, off..off + len]. y: `[outer, len]`, x: `[outer, row]`.
#[inline]
pub(crate) fn slice_forward(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize) {
    for (yr, xr) in y.chunks_exact_mut(len).zip(x.chunks_exact(row)) {
        yr.copy_from_slice(&xr[off..off + len]);
    }
}

/// dx[o, off..off + len] += dout[o, ..]. dx: `[outer, row]`, dout: `[outer, len]`.
#[inline]
pub(crate) fn slice_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize) {
    for (d, g) in dx.chunks_exact_mut(row).zip(dout.chunks_exact(len)) {
        d[off..off + len]
            .iter_mut()
            .zip(g)
            .for_each(|(d, &g)| *d += g);
    }
}

pub(crate) fn backward_concat(ctx: &mut Context, out: u32, xs: &[u32], axis: usize) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let oshape = ctx.entry(out).shape;
    let (_, inner) = outer_inner(oshape, axis);
    let row = oshape.dims()[axis] * inner;
    let mut off = 0;
    for &x in xs {
        let len = ctx.entry(x).shape.dims()[axis] * inner;
        if let Some(dx) = ctx.grad_of(x) {
            let ([dx], [dout]) = ctx.access([dx], [dout]);
            concat_backward(dx, dout, row, off, len);
        }
        off += len;
    }
}

pub(crate) fn backward_slice(ctx: &mut Context, out: u32, x: u32, axis: usize, start: usize) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let xshape = ctx.entry(x).shape;
    let (_, inner) = outer_inner(xshape, axis);
    let len = ctx.entry(out).shape.dims()[axis] * inner;
    let ([dx], [dout]) = ctx.access([dx], [dout]);
    slice_backward(dx, dout, xshape.dims()[axis] * inner, start * inner, len);
}

pub(crate) fn backward_permute(ctx: &mut Context, out: u32, x: u32, perm: [u8; MAX_DIMS]) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (xs, ys) = (ctx.entry(x).shape, ctx.entry(out).shape);
    let perm = &perm[..xs.ndim()];
    // dx is dout permuted back: the inverse permutation, cut by dx's rows.
    let mut inverse = [0u8; MAX_DIMS];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as u8;
    }
    let inverse = &inverse[..xs.ndim()];
    let n = permute_tasks(xs, inverse);
    let par = n > 1 && ctx.want_pool(xs.numel() * fastmath::ELEMENT_COST);
    let (pool, [dx], [dout]) = ctx.access_on(par, [dx], [dout]);
    if !par {
        return permute_backward(dx, dout, xs, ys, perm);
    }
    // Each element of dx takes one term: adding it in any order gives
    // the same bits as the one-thread walk.
    let step = permute_step(xs, inverse);
    let rows = xs.numel() / step.max(1);
    let parts = fastmath::row_parts(dx, step, n);
    fastmath::run_parts(pool, parts, &|i, dx| {
        let start = crate::pool::task_range(rows, n, i).start * step;
        let outs = start..start + dx.len();
        let add = |d: &mut [f32], g: &[f32]| d.iter_mut().zip(g).for_each(|(d, &g)| *d += g);
        if keeps_last_axis(inverse) {
            return permute_walk_rows(ys, xs, inverse, outs, |o, s| {
                add(&mut dx[o - start..][..step], &dout[s..s + step])
            });
        }
        permute_walk(ys, xs, inverse, outs, |o, s| dx[o - start] += dout[s]);
    });
}

#[cfg(test)]
#[path = "shape_ops_tests.rs"]
mod tests;

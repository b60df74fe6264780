//! Convolution through the GEMM: im2col, the products, col2im.
//!
//! The images of a batch are cut into a fixed number of tasks, decided by
//! the shape alone (see [`image_tasks`]); each task unfolds its images into
//! its own part of the column buffer. Every image's values come from the
//! same kernel calls whichever thread runs them, and the weight and bias
//! gradients add images in order on one thread, so the bits do not depend
//! on the thread count.

use super::geometry::{Taps, nchw};
use crate::arena::Buf;
use crate::blas::{Gemm, sgemm_on};
use crate::context::Context;
use crate::kernels::fastmath;
use crate::ops::ConvGeom;
use crate::pool::{self, Pool};

/// Most image tasks a convolution is cut into: each holds its own columns.
const MAX_IMAGE_TASKS: usize = 8;

/// Everything the kernels need about one convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub kh: usize,
    pub kw: usize,
    pub ho: usize,
    pub wo: usize,
    pub groups: usize,
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dilation: [usize; 2],
}

impl Dims {
    fn new(ctx: &Context, x: u32, w: u32, out: u32, g: ConvGeom) -> Dims {
        let [n, c, h, wd] = nchw(ctx.entry(x).shape);
        let [c_out, _, kh, kw] = nchw(ctx.entry(w).shape);
        let [_, _, ho, wo] = nchw(ctx.entry(out).shape);
        let u = |v: [u16; 2]| [v[0] as usize, v[1] as usize];
        Dims {
            n,
            c,
            h,
            w: wd,
            c_out,
            kh,
            kw,
            ho,
            wo,
            groups: g.groups as usize,
            stride: u(g.stride),
            pad: u(g.pad),
            dilation: u(g.dilation),
        }
    }
    /// Rows of one image's columns (all groups).
    fn k_all(&self) -> usize {
        self.c * self.kh * self.kw
    }
    /// Rows of one group's columns: the GEMM's inner dimension.
    fn k_group(&self) -> usize {
        self.k_all() / self.groups
    }
    /// Stride 1 and an output as wide as the input: then output pixel p
    /// of a column row reads input pixel p plus a constant.
    fn shifts_planes(&self) -> bool {
        self.stride == [1, 1] && self.wo == self.w
    }
    /// The output columns whose tap at column offset `dj` lands inside
    /// the input.
    fn col_taps(&self, dj: usize) -> Taps {
        Taps::along(self.w, self.wo, self.stride[1], self.pad[1], dj)
    }
    /// Output pixels per image.
    fn l(&self) -> usize {
        self.ho * self.wo
    }
    fn cout_group(&self) -> usize {
        self.c_out / self.groups
    }
    fn image_in(&self) -> usize {
        self.c * self.h * self.w
    }
    fn image_out(&self) -> usize {
        self.c_out * self.l()
    }
    /// Multiply-adds of one image's forward products.
    fn macs_per_image(&self) -> usize {
        self.c_out * self.l() * self.k_group()
    }
    /// The product of group `g` of one image: W_g [C_out/G, K] @ col_g [K, L].
    fn forward_gemm(&self) -> Gemm {
        Gemm::dense(false, false, self.cout_group(), self.l(), self.k_group())
    }
}

/// How many image tasks a convolution of `n` images, each `macs` multiply-
/// adds, is cut into: a shape-only rule (see the module comment).
pub(crate) fn image_tasks(n: usize, macs: usize) -> usize {
    if Context::worth_two_threads(n.saturating_mul(macs)) {
        n.min(MAX_IMAGE_TASKS)
    } else {
        1
    }
}

/// The column buffer's length: one image's columns per task, then, when
/// there are several tasks, one weight gradient per task (each task's
/// images add into their own, and the parts are summed in task order).
pub(crate) fn col_len(
    n: usize,
    k_all: usize,
    l: usize,
    w_len: usize,
    macs: usize,
) -> Option<usize> {
    let tasks = image_tasks(n, macs);
    let partials = if tasks > 1 { w_len } else { 0 };
    k_all
        .checked_mul(l)?
        .checked_add(partials)?
        .checked_mul(tasks)
}

/// Unfolds one image `x` (`[C, H, W]`) into `col` (`[C kH kW, H_out W_out]`):
/// row (c, i, j) holds the input pixel under kernel tap (i, j) of channel c
/// for each output pixel, 0 where the tap falls in the padding.
fn im2col(d: &Dims, x: &[f32], col: &mut [f32]) {
    let l = d.l();
    let mut rows = col.chunks_exact_mut(l);
    let shifted = d.shifts_planes();
    for plane in x.chunks_exact(d.h * d.w) {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let row = rows.next().expect("col holds C kH kW rows");
                let (di, dj) = (i * d.dilation[0], j * d.dilation[1]);
                if shifted {
                    shifted_row(d, plane, row, di, dj);
                    continue;
                }
                let cols = d.col_taps(dj);
                for (oh, out) in row.chunks_exact_mut(d.wo).enumerate() {
                    let ih = (oh * d.stride[0] + di).wrapping_sub(d.pad[0]);
                    if ih >= d.h {
                        out.fill(0.0);
                        continue;
                    }
                    let src = &plane[ih * d.w..][..d.w];
                    out[..cols.lo].fill(0.0);
                    out[cols.hi..].fill(0.0);
                    let inside = &mut out[cols.lo..cols.hi];
                    if d.stride[1] == 1 {
                        inside.copy_from_slice(&src[cols.first..][..inside.len()]);
                    } else {
                        let taken = src[cols.first..].iter().step_by(d.stride[1]);
                        for (o, &v) in inside.iter_mut().zip(taken) {
                            *o = v;
                        }
                    }
                }
            }
        }
    }
}

/// One row of [`im2col`] when [`Dims::shifts_planes`]: output pixel p
/// reads input pixel p + shift wherever its tap (offset `di`, `dj`) lands
/// inside the input, so the row is one long copy of the plane, then zeros
/// in the output rows and columns whose tap lands in the padding.
fn shifted_row(d: &Dims, plane: &[f32], row: &mut [f32], di: usize, dj: usize) {
    let w = d.w;
    let rows = Taps::along(d.h, d.ho, 1, d.pad[0], di);
    let cols = d.col_taps(dj);
    let shift = (di as isize - d.pad[0] as isize) * w as isize + dj as isize - d.pad[1] as isize;
    // Output positions of the valid rows whose source is inside the plane
    // (the first and last may read across a row edge: zeroed below).
    let start = ((rows.lo * w) as isize).max(-shift);
    let end = ((rows.hi * w) as isize).min((d.h * w) as isize - shift);
    if start >= end {
        row.fill(0.0);
        return;
    }
    let (start, end) = (start as usize, end as usize);
    let from = start.wrapping_add_signed(shift);
    row[..start].fill(0.0);
    row[start..end].copy_from_slice(&plane[from..][..end - start]);
    row[end..].fill(0.0);
    zero_edge_columns(&mut row[rows.lo * w..rows.hi * w], w, &cols, 0.0);
}

/// Sets the entries of the output columns outside `cols.lo..cols.hi` of
/// `rows` (whole output rows `w` wide) to `zero`. Column by column, as
/// strided stores: a padding of 1 leaves one entry a row, too short for
/// a fill call each.
#[inline(always)]
fn zero_edge_columns(rows: &mut [f32], w: usize, cols: &Taps, zero: f32) {
    for j in (0..cols.lo).chain(cols.hi..w) {
        for v in rows.iter_mut().skip(j).step_by(w) {
            *v = zero;
        }
    }
}

/// The adjoint of [`im2col`]: adds each column entry into the input pixel
/// it was read from (`dx`: `[C, H, W]`), in a fixed order. With `fresh`,
/// `dx` holds stale values and is written as if zeroed first. Entries of
/// `col` whose tap falls in the padding may be overwritten. Inlined into
/// [`dispatch`](crate::simd::dispatch)ed callers: its rows are short.
#[inline(always)]
fn col2im(d: &Dims, col: &mut [f32], dx: &mut [f32], fresh: bool) {
    let l = d.l();
    let mut rows = col.chunks_exact_mut(l);
    let shifted = d.shifts_planes();
    for plane in dx.chunks_exact_mut(d.h * d.w) {
        let mut stale = fresh;
        for i in 0..d.kh {
            for j in 0..d.kw {
                let row = rows.next().expect("col holds C kH kW rows");
                let (di, dj) = (i * d.dilation[0], j * d.dilation[1]);
                if shifted {
                    shifted_row_add(d, row, plane, di, dj, stale);
                    stale = false;
                    continue;
                }
                if stale {
                    plane.fill(0.0);
                    stale = false;
                }
                let cols = d.col_taps(dj);
                for (oh, src) in row.chunks_exact(d.wo).enumerate() {
                    let ih = (oh * d.stride[0] + di).wrapping_sub(d.pad[0]);
                    if ih >= d.h {
                        continue;
                    }
                    let dst = &mut plane[ih * d.w..][..d.w];
                    let inside = &src[cols.lo..cols.hi];
                    if d.stride[1] == 1 {
                        let put = &mut dst[cols.first..][..inside.len()];
                        for (o, &g) in put.iter_mut().zip(inside) {
                            *o += g;
                        }
                    } else {
                        let put = dst[cols.first..].iter_mut().step_by(d.stride[1]);
                        for (o, &g) in put.zip(inside) {
                            *o += g;
                        }
                    }
                }
            }
        }
    }
}

/// One row of [`col2im`] when [`Dims::shifts_planes`], the adjoint of
/// [`shifted_row`]: the row adds into the plane as one long shifted run.
/// Its entries whose tap lands in the column padding would land on a
/// neighbouring row's pixel instead: they are set to -0.0 first, which
/// adds as nothing (x + -0.0 is x for every x, -0.0 included), so each
/// pixel takes the same adds in the same order as row by row. With
/// `stale`, the plane's old values are not read: it becomes `0.0 + row`
/// on the run and 0.0 elsewhere, what zeroing it first and adding gives.
#[inline(always)]
fn shifted_row_add(
    d: &Dims,
    row: &mut [f32],
    plane: &mut [f32],
    di: usize,
    dj: usize,
    stale: bool,
) {
    let w = d.w;
    let rows = Taps::along(d.h, d.ho, 1, d.pad[0], di);
    let cols = d.col_taps(dj);
    let shift = (di as isize - d.pad[0] as isize) * w as isize + dj as isize - d.pad[1] as isize;
    let start = ((rows.lo * w) as isize).max(-shift);
    let end = ((rows.hi * w) as isize).min((d.h * w) as isize - shift);
    if start >= end {
        if stale {
            plane.fill(0.0);
        }
        return;
    }
    let (start, end) = (start as usize, end as usize);
    zero_edge_columns(&mut row[rows.lo * w..rows.hi * w], w, &cols, -0.0);
    let from = start.wrapping_add_signed(shift);
    let (before, rest) = plane.split_at_mut(from);
    let (run, after) = rest.split_at_mut(end - start);
    let src = &row[start..end];
    if stale {
        before.fill(0.0);
        after.fill(0.0);
        for (o, &g) in run.iter_mut().zip(src) {
            *o = 0.0 + g;
        }
    } else {
        for (o, &g) in run.iter_mut().zip(src) {
            *o += g;
        }
    }
}

/// Forward of the images of one task: `x` and `y` hold those images.
fn forward_images(
    d: &Dims,
    pool: Option<&Pool>,
    y: &mut [f32],
    col: &mut [f32],
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
) {
    let (kg, l, cog) = (d.k_group(), d.l(), d.cout_group());
    let g = d.forward_gemm();
    for (yi, xi) in y
        .chunks_exact_mut(d.image_out())
        .zip(x.chunks_exact(d.image_in()))
    {
        im2col(d, xi, col);
        if let Some(b) = bias {
            for (row, &bv) in yi.chunks_exact_mut(l).zip(b) {
                row.fill(bv);
            }
        }
        let beta = if bias.is_some() { 1.0 } else { 0.0 };
        for grp in 0..d.groups {
            let wg = &w[grp * cog * kg..][..cog * kg];
            let cg = &col[grp * kg * l..][..kg * l];
            let yg = &mut yi[grp * cog * l..][..cog * l];
            sgemm_on(pool, g, 1.0, wg, cg, beta, yg);
        }
    }
}

/// y = conv(x, w) + bias. x: `[N, C, H, W]` (or `[N, C, L]`), w:
/// `[C_out, C/G, kH, kW]`, y: `[N, C_out, H_out, W_out]`; `col` holds one
/// image's columns per task.
pub(crate) fn forward_conv2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    iw: u32,
    bias: Option<u32>,
    geom: ConvGeom,
    col: Buf,
) {
    let d = Dims::new(ctx, ix, iw, out, geom);
    let tasks = image_tasks(d.n, d.macs_per_image());
    let par = ctx.want_pool(d.n * d.macs_per_image());
    let (ex, ew, eo) = (ctx.entry(ix), ctx.entry(iw), ctx.entry(out));
    let eb = bias.map(|b| ctx.entry(b).data);
    let run = |pool: Option<&Pool>, y: &mut [f32], col: &mut [f32], x: &[f32], w: &[f32], b| {
        if tasks == 1 {
            return forward_images(&d, pool, y, col, x, w, b);
        }
        let parts = fastmath::row_parts(y, d.image_out(), tasks)
            .zip(col.chunks_exact_mut(d.k_all() * d.l()));
        fastmath::run_parts(pool, parts, &|i, (y, col)| {
            let x = &x[pool::task_range(d.n, tasks, i).start * d.image_in()..];
            forward_images(&d, None, y, col, x, w, b)
        });
    };
    match eb {
        Some(b) => {
            let (pool, [y, col], [x, w, b]) =
                ctx.access_on(par, [eo.data, col], [ex.data, ew.data, b]);
            run(pool, y, col, x, w, Some(b));
        }
        None => {
            let (pool, [y, col], [x, w]) = ctx.access_on(par, [eo.data, col], [ex.data, ew.data]);
            run(pool, y, col, x, w, None);
        }
    }
}

/// The weight and input gradients of the images of one task (`dy`, and
/// `x` and `dx` when wanted, hold those images), image by image, so each
/// image's dY is still in cache for its second product:
/// dW_g [C_out/G, K] += dY_g [C_out/G, L] @ col_g^T over the image's
/// columns, then col_g [K, L] = W_g^T [K, C_out/G] @ dY_g folded into dx.
/// With `fresh`, `dx` holds stale values: each image's first columns are
/// written rather than added (see [`col2im`]).
#[allow(clippy::too_many_arguments)]
fn grad_images(
    d: &Dims,
    pool: Option<&Pool>,
    mut dw: Option<&mut [f32]>,
    mut dx: Option<&mut [f32]>,
    fresh: bool,
    col: &mut [f32],
    dy: &[f32],
    x: &[f32],
    w: &[f32],
) {
    let (kg, l, cog) = (d.k_group(), d.l(), d.cout_group());
    let weight_gemm = Gemm::dense(false, true, cog, kg, l);
    let col_gemm = Gemm::dense(true, false, kg, l, cog);
    for (i, dyi) in dy.chunks_exact(d.image_out()).enumerate() {
        if let Some(dw) = dw.as_deref_mut() {
            im2col(d, &x[i * d.image_in()..][..d.image_in()], col);
            for grp in 0..d.groups {
                let dyg = &dyi[grp * cog * l..][..cog * l];
                let cg = &col[grp * kg * l..][..kg * l];
                let dwg = &mut dw[grp * cog * kg..][..cog * kg];
                sgemm_on(pool, weight_gemm, 1.0, dyg, cg, 1.0, dwg);
            }
        }
        if let Some(dx) = dx.as_deref_mut() {
            for grp in 0..d.groups {
                let wg = &w[grp * cog * kg..][..cog * kg];
                let dyg = &dyi[grp * cog * l..][..cog * l];
                let cg = &mut col[grp * kg * l..][..kg * l];
                sgemm_on(pool, col_gemm, 1.0, wg, dyg, 0.0, cg);
            }
            let dxi = &mut dx[i * d.image_in()..][..d.image_in()];
            crate::simd::dispatch!(col2im(d, &mut col[..d.k_all() * l], dxi, fresh));
        }
    }
}

/// [`grad_images`] over the whole batch, cut into the image tasks of
/// [`image_tasks`]. With several tasks, each adds its images' weight
/// gradient into its own part after the columns, and the parts are added
/// into `dw` in task order.
#[allow(clippy::too_many_arguments)]
fn grad_tasks(
    d: &Dims,
    pool: Option<&Pool>,
    dw: Option<&mut [f32]>,
    dx: Option<&mut [f32]>,
    fresh: bool,
    col: &mut [f32],
    dy: &[f32],
    x: &[f32],
    w: &[f32],
) {
    let tasks = image_tasks(d.n, d.macs_per_image());
    if tasks == 1 {
        return grad_images(d, pool, dw, dx, fresh, col, dy, x, w);
    }
    let (cols_len, w_len) = (d.k_all() * d.l(), d.c_out * d.k_group());
    let (cols, partials) = col.split_at_mut(tasks * cols_len);
    let want_dw = dw.is_some();
    let mut dx_parts = dx.map(|dx| fastmath::row_parts(dx, d.image_in(), tasks));
    let parts = cols
        .chunks_exact_mut(cols_len)
        .zip(partials.chunks_exact_mut(w_len))
        .map(|part| (part, dx_parts.as_mut().and_then(Iterator::next)));
    fastmath::run_parts(pool, parts, &|i, ((col, partial), dx)| {
        let images = pool::task_range(d.n, tasks, i);
        let dy = &dy[images.start * d.image_out()..][..images.len() * d.image_out()];
        let (x, partial) = if want_dw {
            partial.fill(0.0);
            let x = &x[images.start * d.image_in()..][..images.len() * d.image_in()];
            (x, Some(partial))
        } else {
            (x, None)
        };
        grad_images(d, None, partial, dx, fresh, col, dy, x, w)
    });
    if let Some(dw) = dw {
        for partial in partials.chunks_exact(w_len) {
            for (g, &p) in dw.iter_mut().zip(partial) {
                *g += p;
            }
        }
    }
}

/// Lanes of [`channel_sum`]'s accumulators: two AVX-512 vectors of f64,
/// so the adds of one lane do not wait on each other.
const SUM_LANES: usize = 16;

/// The sum of `rows` in f64: element k of a row adds into lane
/// k % [`SUM_LANES`] (rows one after another, each from its lane 0), and
/// the lanes are added pairwise at the end. A fixed order, set by the
/// shape alone, whatever the vector width.
#[inline(always)]
fn channel_sum<'a>(rows: impl Iterator<Item = &'a [f32]>) -> f64 {
    let mut acc = [0.0f64; SUM_LANES];
    for row in rows {
        let mut chunks = row.chunks_exact(SUM_LANES);
        for chunk in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(chunk) {
                *a += v as f64;
            }
        }
        for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
            *a += v as f64;
        }
    }
    let mut width = SUM_LANES;
    while width > 1 {
        width /= 2;
        for k in 0..width {
            acc[k] += acc[k + width];
        }
    }
    acc[0]
}

/// Adds the gradients of x, w and the bias. The column buffer is rewritten:
/// first each image's columns again (for dW), then the columns' gradient.
pub(crate) fn backward_conv2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    iw: u32,
    bias: Option<u32>,
    geom: ConvGeom,
    col: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let d = Dims::new(ctx, ix, iw, out, geom);
    let l = d.l();
    let par = ctx.want_pool(d.n * d.macs_per_image());
    let (ex, ew) = (ctx.entry(ix), ctx.entry(iw));
    if let Some(db) = bias.and_then(|b| ctx.grad_of(b)) {
        // Each channel's sum is its own: splitting the channels across
        // threads leaves the bits as they are.
        let par = d.c_out > 1 && ctx.want_pool(d.n * d.image_out() * fastmath::ELEMENT_COST);
        let (pool, [db], [dy]) = ctx.access_on(par, [db], [dout]);
        let tasks = if par { d.c_out.min(pool::MAX_TASKS) } else { 1 };
        fastmath::run_parts(pool, fastmath::row_parts(db, 1, tasks), &|i, db| {
            let channels = pool::task_range(d.c_out, tasks, i);
            for (co, dbv) in channels.zip(db.iter_mut()) {
                let rows = dy
                    .chunks_exact(d.image_out())
                    .map(|img| &img[co * l..][..l]);
                *dbv = (*dbv as f64 + crate::simd::dispatch!(channel_sum(rows))) as f32;
            }
        });
    }
    let dw = ctx.grad_of(iw);
    let dx = ctx.grad_to_overwrite(ix);
    match (dw, dx) {
        (Some(dw), Some((dx, fresh))) if !dw.overlaps(&dx) => {
            let (pool, [dw, col, dx], [dy, x, w]) =
                ctx.access_on(par, [dw, col, dx], [dout, ex.data, ew.data]);
            grad_tasks(&d, pool, Some(dw), Some(dx), fresh, col, dy, x, w);
        }
        (dw, dx) => {
            // One gradient, or x and the weight are one tensor: the
            // weight gradient whole first, then the input's.
            if let Some(dw) = dw {
                let (pool, [dw, col], [dy, x]) = ctx.access_on(par, [dw, col], [dout, ex.data]);
                grad_tasks(&d, pool, Some(dw), None, false, col, dy, x, &[]);
            }
            if let Some((dx, fresh)) = dx {
                let (pool, [dx, col], [dy, w]) = ctx.access_on(par, [dx, col], [dout, ew.data]);
                grad_tasks(&d, pool, None, Some(dx), fresh, col, dy, &[], w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Dims, col2im, im2col};

    /// Every geometry of small sides, kernels, strides, paddings and
    /// dilations whose output is not empty.
    fn geometries() -> impl Iterator<Item = Dims> {
        let mut all = Vec::new();
        for (h, w) in [(1, 1), (3, 5), (6, 4), (7, 7)] {
            for (kh, kw) in [(1, 1), (2, 3), (3, 3)] {
                for stride in [[1, 1], [2, 1], [1, 3], [2, 2]] {
                    for pad in [[0, 0], [1, 1], [1, 2], [2, 1]] {
                        for dilation in [[1, 1], [2, 2], [1, 3]] {
                            let out = |side: usize, k: usize, a: usize| {
                                let span = dilation[a] * (k - 1) + 1;
                                (side + 2 * pad[a])
                                    .checked_sub(span)
                                    .map(|v| v / stride[a] + 1)
                            };
                            let (Some(ho), Some(wo)) = (out(h, kh, 0), out(w, kw, 1)) else {
                                continue;
                            };
                            all.push(Dims {
                                n: 1,
                                c: 2,
                                h,
                                w,
                                c_out: 1,
                                kh,
                                kw,
                                ho,
                                wo,
                                groups: 1,
                                stride,
                                pad,
                                dilation,
                            });
                        }
                    }
                }
            }
        }
        all.into_iter()
    }

    /// The input index under tap (i, j) at output (oh, ow), if not padding.
    fn source(d: &Dims, i: usize, j: usize, oh: usize, ow: usize) -> Option<(usize, usize)> {
        let ih = (oh * d.stride[0] + i * d.dilation[0]).checked_sub(d.pad[0])?;
        let iw = (ow * d.stride[1] + j * d.dilation[1]).checked_sub(d.pad[1])?;
        (ih < d.h && iw < d.w).then_some((ih, iw))
    }

    #[test]
    fn columns_and_their_adjoint_match_the_definition() {
        let (mut checked, mut shifted) = (0, 0);
        for d in geometries() {
            shifted += d.shifts_planes() as usize;
            let x: Vec<f32> = (0..d.c * d.h * d.w).map(|v| v as f32 + 1.0).collect();
            let mut col = vec![f32::NAN; d.k_all() * d.l()];
            im2col(&d, &x, &mut col);
            // Gradients with -0.0 among them, NaN where a tap is padding
            // (set below: col2im must skip them), into a gradient that
            // already holds values, -0.0 among them.
            let mut g: Vec<f32> = (0..col.len())
                .map(|v| match v % 7 {
                    3 => -0.0,
                    r => r as f32 - 3.0,
                })
                .collect();
            let old_dx = (0..x.len()).map(|v| match v % 3 {
                0 => -0.0,
                r => (v * r) as f32 * 0.25,
            });
            let mut dx: Vec<f32> = old_dx.clone().collect();
            let mut want_dx: Vec<f32> = old_dx.collect();
            let mut want_fresh = vec![0.0f32; x.len()];
            for c in 0..d.c {
                for i in 0..d.kh {
                    for j in 0..d.kw {
                        let row = (c * d.kh + i) * d.kw + j;
                        for oh in 0..d.ho {
                            for ow in 0..d.wo {
                                let at = row * d.l() + oh * d.wo + ow;
                                let want = match source(&d, i, j, oh, ow) {
                                    Some((ih, iw)) => {
                                        want_dx[(c * d.h + ih) * d.w + iw] += g[at];
                                        want_fresh[(c * d.h + ih) * d.w + iw] += g[at];
                                        x[(c * d.h + ih) * d.w + iw]
                                    }
                                    None => {
                                        g[at] = f32::NAN;
                                        0.0
                                    }
                                };
                                assert_eq!(col[at], want, "{d:?} row {row} at ({oh}, {ow})");
                            }
                        }
                    }
                }
            }
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            // A fresh gradient's stale values are never read.
            let mut fresh = vec![f32::NAN; x.len()];
            col2im(&d, &mut g.clone(), &mut fresh, true);
            assert_eq!(bits(&fresh), bits(&want_fresh), "{d:?} fresh");
            col2im(&d, &mut g, &mut dx, false);
            assert_eq!(bits(&dx), bits(&want_dx), "{d:?}");
            checked += 1;
        }
        assert!(checked > 200, "only {checked} geometries");
        assert!(
            shifted > 20,
            "only {shifted} geometries copy shifted planes"
        );
    }
}

//! Convolution through the GEMM: the products over the columns that the
//! `columns` module unfolds and folds back.
//!
//! The images of a batch are cut into a fixed number of tasks, decided by
//! the shape alone (see [`image_tasks`]); each task unfolds its images into
//! its own part of the column buffer. Every image's values come from the
//! same kernel calls whichever thread runs them, the weight gradient adds
//! the tasks' parts in order on one thread, and the bias gradient adds
//! each image's channel sums (taken while the image's output gradient is
//! in cache) in image order on one thread, so the bits do not depend on
//! the thread count.

use super::columns::{col2im, im2col};
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
    /// ReLU follows: forward clamps each image's output, backward masks
    /// its gradient by that output.
    pub relu: bool,
}

impl Dims {
    fn new(ctx: &Context, x: u32, w: u32, out: u32, g: ConvGeom, relu: bool) -> Dims {
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
            relu,
        }
    }
    /// One task's part of the column buffer: its columns, then with ReLU
    /// room for one image's masked output gradient.
    fn task_len(&self) -> usize {
        self.k_all() * self.l() + if self.relu { self.image_out() } else { 0 }
    }
    /// Rows of one image's columns (all groups).
    pub(super) fn k_all(&self) -> usize {
        self.c * self.kh * self.kw
    }
    /// Rows of one group's columns: the GEMM's inner dimension.
    fn k_group(&self) -> usize {
        self.k_all() / self.groups
    }
    /// Stride 1 and an output as wide as the input: then output pixel p
    /// of a column row reads input pixel p plus a constant.
    pub(super) fn shifts_planes(&self) -> bool {
        self.stride == [1, 1] && self.wo == self.w
    }
    /// The output columns whose tap at column offset `dj` lands inside
    /// the input.
    pub(super) fn col_taps(&self, dj: usize) -> Taps {
        Taps::along(self.w, self.wo, self.stride[1], self.pad[1], dj)
    }
    /// Output pixels per image.
    pub(super) fn l(&self) -> usize {
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

/// The column buffer's length: one image's columns and `masked` more per
/// task, then, when there are several tasks, one weight gradient per task
/// (each task's images add into their own, and the parts are summed in
/// task order).
pub(crate) fn col_len(
    n: usize,
    k_all: usize,
    l: usize,
    masked: usize,
    w_len: usize,
    macs: usize,
) -> Option<usize> {
    let tasks = image_tasks(n, macs);
    let partials = if tasks > 1 { w_len } else { 0 };
    k_all
        .checked_mul(l)?
        .checked_add(masked)?
        .checked_add(partials)?
        .checked_mul(tasks)
}

/// Room after the columns for the bias gradient's per-image channel sums
/// (see [`image_channel_sums`]), when there is a bias.
pub(crate) fn bias_sums_len(n: usize, c_out: usize, bias: bool) -> Option<usize> {
    if bias {
        n.checked_mul(c_out)?.checked_mul(2)
    } else {
        Some(0)
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
        if d.relu {
            crate::simd::dispatch!(relu_in_place(yi));
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
    forward(
        ctx,
        out,
        ix,
        iw,
        bias,
        Dims::new(ctx, ix, iw, out, geom, false),
        col,
    );
}

/// y = relu(conv(x, w) + bias), as [`forward_conv2d`].
pub(crate) fn forward_conv2d_relu(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    iw: u32,
    bias: Option<u32>,
    geom: ConvGeom,
    col: Buf,
) {
    forward(
        ctx,
        out,
        ix,
        iw,
        bias,
        Dims::new(ctx, ix, iw, out, geom, true),
        col,
    );
}

fn forward(ctx: &mut Context, out: u32, ix: u32, iw: u32, bias: Option<u32>, d: Dims, col: Buf) {
    let tasks = image_tasks(d.n, d.macs_per_image());
    let par = ctx.want_pool(d.n * d.macs_per_image());
    let (ex, ew, eo) = (ctx.entry(ix), ctx.entry(iw), ctx.entry(out));
    let eb = bias.map(|b| ctx.entry(b).data);
    let run = |pool: Option<&Pool>, y: &mut [f32], col: &mut [f32], x: &[f32], w: &[f32], b| {
        if tasks == 1 {
            return forward_images(&d, pool, y, col, x, w, b);
        }
        let parts =
            fastmath::row_parts(y, d.image_out(), tasks).zip(col.chunks_exact_mut(d.task_len()));
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
/// written rather than added (see [`col2im`]). With ReLU, each image's dY
/// is first masked by its output (`y`) into the room after the columns.
#[allow(clippy::too_many_arguments)]
fn grad_images(
    d: &Dims,
    pool: Option<&Pool>,
    mut dw: Option<&mut [f32]>,
    mut dx: Option<&mut [f32]>,
    fresh: bool,
    col: &mut [f32],
    mut sums: Option<&mut [f32]>,
    dy: &[f32],
    y: &[f32],
    x: &[f32],
    w: &[f32],
) {
    let (kg, l, cog) = (d.k_group(), d.l(), d.cout_group());
    let weight_gemm = Gemm::dense(false, true, cog, kg, l);
    let col_gemm = Gemm::dense(true, false, kg, l, cog);
    let (col, masked) = col.split_at_mut(d.k_all() * l);
    for (i, dyi) in dy.chunks_exact(d.image_out()).enumerate() {
        let dyi = if d.relu {
            let masked = &mut masked[..d.image_out()];
            let yi = &y[i * d.image_out()..][..d.image_out()];
            crate::simd::dispatch!(relu_mask(masked, dyi, yi));
            &*masked
        } else {
            dyi
        };
        if let Some(sums) = sums.as_deref_mut() {
            let pairs = &mut sums[i * 2 * d.c_out..][..2 * d.c_out];
            crate::simd::dispatch!(image_channel_sums(dyi, l, pairs));
        }
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
            crate::simd::dispatch!(col2im(d, col, dxi, fresh));
        }
    }
}

/// y = max(y, 0), as the ReLU op: NaN becomes 0.
#[inline(always)]
fn relu_in_place(y: &mut [f32]) {
    y.iter_mut().for_each(|v| *v = v.max(0.0));
}

/// `masked` = dy where the ReLU's output `y` is positive, else 0: the
/// values ReLU's own backward passes on.
#[inline(always)]
fn relu_mask(masked: &mut [f32], dy: &[f32], y: &[f32]) {
    for ((m, &g), &v) in masked.iter_mut().zip(dy).zip(y) {
        *m = if v > 0.0 { g } else { 0.0 };
    }
}

/// Each channel's sum of one image's output gradient `dy` (rows of `l`)
/// in f64, as [`channel_sum`] takes it, kept as two f32s: `pairs[2c]` the
/// sum rounded and `pairs[2c + 1]` what the rounding left, 48 bits in all,
/// which add back exactly in f64.
#[inline(always)]
pub(super) fn image_channel_sums(dy: &[f32], l: usize, pairs: &mut [f32]) {
    if l == 0 {
        return pairs.fill(0.0);
    }
    for (row, pair) in dy.chunks_exact(l).zip(pairs.chunks_exact_mut(2)) {
        let s = channel_sum(std::iter::once((row, None)));
        let rounded = s as f32;
        // An overflowing sum keeps its infinity rather than inf - inf.
        let rest = if rounded.is_finite() {
            (s - rounded as f64) as f32
        } else {
            0.0
        };
        (pair[0], pair[1]) = (rounded, rest);
    }
}

/// Adds to `db` each channel's sum over the images of
/// [`image_channel_sums`]' pairs, in image order, in f64.
fn add_bias_sums(db: &mut [f32], sums: &[f32]) {
    let c_out = db.len();
    for (c, g) in db.iter_mut().enumerate() {
        let total = sums.chunks_exact(2 * c_out).fold(0.0f64, |acc, image| {
            acc + (image[2 * c] as f64 + image[2 * c + 1] as f64)
        });
        *g = (*g as f64 + total) as f32;
    }
}

/// The column buffer less its last `sums_len` elements, and those as the
/// bias sums' room if `want` (then cleared: one pass takes them).
fn split_sums<'a>(
    col: &'a mut [f32],
    sums_len: usize,
    want: &mut bool,
) -> (&'a mut [f32], Option<&'a mut [f32]>) {
    let (col, sums) = col.split_at_mut(col.len() - sums_len);
    (col, std::mem::take(want).then_some(sums))
}

/// [`grad_images`] over the whole batch, cut into the image tasks of
/// [`image_tasks`]. With several tasks, each adds its images' weight
/// gradient into its own part after the columns, and the parts are added
/// into `dw` in task order. `sums`, when given, takes each image's
/// channel sums of its (masked) output gradient.
#[allow(clippy::too_many_arguments)]
fn grad_tasks(
    d: &Dims,
    pool: Option<&Pool>,
    dw: Option<&mut [f32]>,
    dx: Option<&mut [f32]>,
    fresh: bool,
    col: &mut [f32],
    sums: Option<&mut [f32]>,
    dy: &[f32],
    y: &[f32],
    x: &[f32],
    w: &[f32],
) {
    let tasks = image_tasks(d.n, d.macs_per_image());
    if tasks == 1 {
        return grad_images(d, pool, dw, dx, fresh, col, sums, dy, y, x, w);
    }
    let (cols_len, w_len) = (d.task_len(), d.c_out * d.k_group());
    let (cols, partials) = col.split_at_mut(tasks * cols_len);
    let want_dw = dw.is_some();
    let mut dx_parts = dx.map(|dx| fastmath::row_parts(dx, d.image_in(), tasks));
    let mut sum_parts = sums.map(|s| fastmath::row_parts(s, 2 * d.c_out, tasks));
    let parts = cols
        .chunks_exact_mut(cols_len)
        .zip(partials.chunks_exact_mut(w_len))
        .map(|part| {
            let dx = dx_parts.as_mut().and_then(Iterator::next);
            (part, dx, sum_parts.as_mut().and_then(Iterator::next))
        });
    fastmath::run_parts(pool, parts, &|i, ((col, partial), dx, sums)| {
        let images = pool::task_range(d.n, tasks, i);
        let outs = images.start * d.image_out()..images.end * d.image_out();
        let dy = &dy[outs.clone()];
        let y = if d.relu { &y[outs] } else { y };
        let (x, partial) = if want_dw {
            partial.fill(0.0);
            let x = &x[images.start * d.image_in()..][..images.len() * d.image_in()];
            (x, Some(partial))
        } else {
            (x, None)
        };
        grad_images(d, None, partial, dx, fresh, col, sums, dy, y, x, w)
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
/// shape alone, whatever the vector width. A row paired with a ReLU's
/// output adds only where that output is positive.
#[inline(always)]
fn channel_sum<'a>(rows: impl Iterator<Item = (&'a [f32], Option<&'a [f32]>)>) -> f64 {
    let mut acc = [0.0f64; SUM_LANES];
    for (row, relu_out) in rows {
        match relu_out {
            None => add_lanes(&mut acc, row, |v, _| v, row),
            Some(y) => add_lanes(&mut acc, row, |v, y| if y > 0.0 { v } else { 0.0 }, y),
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

/// Adds `row`'s entries, each through `pick` with its entry of `other`,
/// into the lanes of [`channel_sum`].
#[inline(always)]
fn add_lanes(
    acc: &mut [f64; SUM_LANES],
    row: &[f32],
    pick: impl Fn(f32, f32) -> f32,
    other: &[f32],
) {
    let mut chunks = row
        .chunks_exact(SUM_LANES)
        .zip(other.chunks_exact(SUM_LANES));
    for (chunk, others) in &mut chunks {
        for ((a, &v), &o) in acc.iter_mut().zip(chunk).zip(others) {
            *a += pick(v, o) as f64;
        }
    }
    let tail = row.len() - row.len() % SUM_LANES;
    for ((a, &v), &o) in acc.iter_mut().zip(&row[tail..]).zip(&other[tail..]) {
        *a += pick(v, o) as f64;
    }
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
    backward(ctx, out, ix, iw, bias, geom, col, false);
}

/// The gradients of [`forward_conv2d_relu`]: those of
/// [`backward_conv2d`] for the output gradient masked by the output.
pub(crate) fn backward_conv2d_relu(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    iw: u32,
    bias: Option<u32>,
    geom: ConvGeom,
    col: Buf,
) {
    backward(ctx, out, ix, iw, bias, geom, col, true);
}

#[allow(clippy::too_many_arguments)]
fn backward(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    iw: u32,
    bias: Option<u32>,
    geom: ConvGeom,
    col: Buf,
    relu: bool,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let d = Dims::new(ctx, ix, iw, out, geom, relu);
    let par = ctx.want_pool(d.n * d.macs_per_image());
    let (ex, ew, eo) = (ctx.entry(ix), ctx.entry(iw), ctx.entry(out));
    // The bias gradient's per-image sums go in the column buffer's tail;
    // the first product pass below takes them.
    let db = bias.and_then(|b| ctx.grad_of(b));
    // Recording checked this length (it sized the column buffer).
    let sums_len = bias_sums_len(d.n, d.c_out, db.is_some()).unwrap_or(0);
    let mut want_sums = db.is_some();
    let dw = ctx.grad_of(iw);
    let dx = ctx.grad_to_overwrite(ix);
    match (dw, dx) {
        (Some(dw), Some((dx, fresh))) if !dw.overlaps(&dx) => {
            let (pool, [dw, col, dx], [dy, y, x, w]) =
                ctx.access_on(par, [dw, col, dx], [dout, eo.data, ex.data, ew.data]);
            let (col, sums) = split_sums(col, sums_len, &mut want_sums);
            grad_tasks(&d, pool, Some(dw), Some(dx), fresh, col, sums, dy, y, x, w);
        }
        (dw, dx) => {
            // One gradient, or x and the weight are one tensor: the
            // weight gradient whole first, then the input's.
            if let Some(dw) = dw {
                let (pool, [dw, col], [dy, y, x]) =
                    ctx.access_on(par, [dw, col], [dout, eo.data, ex.data]);
                let (col, sums) = split_sums(col, sums_len, &mut want_sums);
                grad_tasks(&d, pool, Some(dw), None, false, col, sums, dy, y, x, &[]);
            }
            if let Some((dx, fresh)) = dx {
                let (pool, [dx, col], [dy, y, w]) =
                    ctx.access_on(par, [dx, col], [dout, eo.data, ew.data]);
                let (col, sums) = split_sums(col, sums_len, &mut want_sums);
                grad_tasks(&d, pool, None, Some(dx), fresh, col, sums, dy, y, &[], w);
            }
            if want_sums {
                // Only the bias wants a gradient.
                let (pool, [col], [dy, y]) = ctx.access_on(par, [col], [dout, eo.data]);
                let (col, sums) = split_sums(col, sums_len, &mut want_sums);
                grad_tasks(&d, pool, None, None, false, col, sums, dy, y, &[], &[]);
            }
        }
    }
    if let Some(db) = db {
        let [db, col] = ctx.access_on(false, [db, col], []).1;
        add_bias_sums(db, &col[col.len() - sums_len..]);
    }
}

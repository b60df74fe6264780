//! Batch normalisation over `[N, C, *]`: per channel, over the batch and
//! every position. In training mode it normalises with the batch's mean and
//! biased variance and updates the running statistics (PyTorch's rule:
//! new = (1 - momentum) old + momentum batch, with the unbiased variance);
//! in evaluation mode it normalises with the running statistics. The
//! weight and bias are each optional (PyTorch's `affine=False` has
//! neither): a missing weight scales by 1, a missing bias shifts by 0.
//!
//! The running statistics are updated by the forward op function, so that
//! a captured step's replay updates them as its eager step did; a
//! recomputed segment's replay (the context says when) leaves them alone.
//!
//! Two kinds of task, both cut by shape alone so the bits do not depend on
//! the thread count: channel tasks (each channel's sums, in f64, in one
//! fixed order) and plane tasks (element-wise over runs of `[*]` planes).

use crate::arena::{Buf, Storage};
use crate::context::{BatchNormStats, Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::ops::norm::row_tasks;
use crate::pool;

/// PyTorch's defaults.
pub const BATCH_NORM_EPS: f32 = 1e-5;
pub const BATCH_NORM_MOMENTUM: f32 = 0.1;

/// The sizes of `[N, C, *]`: images n, channels c, positions s per plane.
#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    c: usize,
    s: usize,
}

impl Dims {
    fn of(shape: crate::shape::Shape) -> Dims {
        let d = shape.dims();
        Dims {
            n: d[0],
            c: d[1],
            s: d[2..].iter().product(),
        }
    }

    /// Values per channel.
    fn per_channel(self) -> usize {
        self.n * self.s
    }

    /// The planes (one image's one channel) of channel `ch`.
    fn planes(self, ch: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
        (0..self.n).map(move |i| {
            let start = (i * self.c + ch) * self.s;
            start..start + self.s
        })
    }
}

/// Per channel: the batch mean, 1/sqrt(biased variance + eps) and the
/// unbiased variance, sums in f64 (two passes, so no cancellation).
fn channel_stats(
    mean: &mut [f32],
    rstd: &mut [f32],
    var: &mut [f32],
    x: &[f32],
    d: Dims,
    channels: std::ops::Range<usize>,
    eps: f32,
) {
    let m = d.per_channel() as f64;
    for (k, ch) in channels.enumerate() {
        let sum: f64 = d.planes(ch).flat_map(|p| &x[p]).map(|&v| v as f64).sum();
        let mu = sum / m;
        let sq: f64 = d
            .planes(ch)
            .flat_map(|p| &x[p])
            .map(|&v| (v as f64 - mu) * (v as f64 - mu))
            .sum();
        mean[k] = mu as f32;
        rstd[k] = (1.0 / (sq / m + eps as f64).sqrt()) as f32;
        var[k] = (sq / (m - 1.0)) as f32;
    }
}

/// y = (x - mean) * rstd * w + b over the planes `rows` (of `[N * C]`);
/// w is 1 and b 0 where absent.
#[allow(clippy::too_many_arguments)]
fn normalise_planes(
    y: &mut [f32],
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    d: Dims,
    rows: std::ops::Range<usize>,
) {
    let planes = y
        .chunks_exact_mut(d.s)
        .zip(x[rows.start * d.s..].chunks_exact(d.s));
    for (r, (yp, xp)) in rows.zip(planes) {
        let ch = r % d.c;
        let (mu, rs) = (mean[ch], rstd[ch]);
        let (wv, bv) = (scale_at(w, ch), shift_at(b, ch));
        for (yv, &xv) in yp.iter_mut().zip(xp) {
            *yv = (xv - mu) * rs * wv + bv;
        }
    }
}

/// Per channel: sum(dout) and sum(dout * xhat), in f64.
#[allow(clippy::too_many_arguments)]
fn channel_grad_sums(
    sg: &mut [f32],
    sgx: &mut [f32],
    g: &[f32],
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    d: Dims,
    channels: std::ops::Range<usize>,
) {
    for (k, ch) in channels.enumerate() {
        let (mu, rs) = (mean[ch] as f64, rstd[ch] as f64);
        let (mut a, mut bsum) = (0.0f64, 0.0f64);
        for p in d.planes(ch) {
            for (&gv, &xv) in g[p.clone()].iter().zip(&x[p]) {
                a += gv as f64;
                bsum += gv as f64 * ((xv as f64 - mu) * rs);
            }
        }
        sg[k] = a as f32;
        sgx[k] = bsum as f32;
    }
}

/// dx += w rstd (dout - sum(dout) / M - xhat sum(dout xhat) / M) in
/// training; dx += w rstd dout in evaluation (the statistics are
/// constants); w is 1 where absent.
#[allow(clippy::too_many_arguments)]
fn dx_planes(
    dx: &mut [f32],
    g: &[f32],
    x: &[f32],
    saved: [&[f32]; 4],
    w: Option<&[f32]>,
    d: Dims,
    rows: std::ops::Range<usize>,
    training: bool,
) {
    let [mean, rstd, sg, sgx] = saved;
    let inv_m = 1.0 / d.per_channel() as f32;
    let at = rows.start * d.s;
    let planes = dx
        .chunks_exact_mut(d.s)
        .zip(g[at..].chunks_exact(d.s))
        .zip(x[at..].chunks_exact(d.s));
    for (r, ((dp, gp), xp)) in rows.zip(planes) {
        let ch = r % d.c;
        let (mu, rs, k) = (mean[ch], rstd[ch], scale_at(w, ch) * rstd[ch]);
        if !training {
            dp.iter_mut().zip(gp).for_each(|(o, &gv)| *o += k * gv);
            continue;
        }
        let (m1, m2) = (sg[ch] * inv_m, sgx[ch] * inv_m);
        for ((o, &gv), &xv) in dp.iter_mut().zip(gp).zip(xp) {
            let xhat = (xv - mu) * rs;
            *o += k * (gv - m1 - xhat * m2);
        }
    }
}

/// The weight at channel `ch`: 1 without a weight.
pub(super) fn scale_at(w: Option<&[f32]>, ch: usize) -> f32 {
    w.map_or(1.0, |w| w[ch])
}

/// The bias at channel `ch`: 0 without a bias.
pub(super) fn shift_at(b: Option<&[f32]>, ch: usize) -> f32 {
    b.map_or(0.0, |b| b[ch])
}

/// The buffer of an optional `[C]` parameter, or where there is none an
/// empty view of `x` (never written by these ops), so that one access
/// call reads either; [`present`] turns the slice back into an option.
pub(super) fn optional_data(ctx: &Context, id: Option<u32>, x: Buf) -> Buf {
    id.map_or(Storage::sub(x, 0, 0), |i| ctx.entry(i).data)
}

/// A slice read through [`optional_data`]: None for the empty view (a
/// present parameter has C >= 1 values: shapes have no zero dimension).
pub(super) fn present(s: &[f32]) -> Option<&[f32]> {
    (!s.is_empty()).then_some(s)
}

/// Checks that the weight and bias present (ids, in that order) are `[C]`
/// for x of shape `x`.
pub(super) fn check_affine(
    ctx: &Context,
    op: &'static str,
    ids: [Option<u32>; 2],
    x: crate::shape::Shape,
    c: usize,
) -> Result<()> {
    let whats = [
        "weight must be [C] for x [N, C, *]",
        "bias must be [C] for x [N, C, *]",
    ];
    for (id, what) in ids.into_iter().zip(whats) {
        let Some(s) = id.map(|i| ctx.entry(i).shape) else {
            continue;
        };
        if s.ndim() != 1 || s.numel() != c {
            return Err(Error::ShapeMismatch {
                op,
                what,
                a: x,
                b: s,
            });
        }
    }
    Ok(())
}

impl Context {
    /// Batch normalisation of x `[N, C, *]` (rank 2 or more) with weight
    /// and bias `[C]`, each optional (None: scale 1, shift 0; neither is
    /// PyTorch's `affine=False`), and the running statistics `stats` (of
    /// C channels).
    /// Training mode ([`Context::set_training`]): normalises with the
    /// batch's statistics, then updates the running ones with `momentum`
    /// (PyTorch's 0.1 is [`BATCH_NORM_MOMENTUM`]) and counts the batch;
    /// InvalidArgument when a channel has one value (N * positions = 1).
    /// Evaluation mode: normalises with the running statistics. `eps`
    /// (PyTorch's 1e-5 is [`BATCH_NORM_EPS`]) is added to the variance.
    /// Without statistics (PyTorch's `track_running_stats=False`) it
    /// normalises with the batch's statistics in both modes.
    pub fn batch_norm(
        &mut self,
        x: Tensor,
        w: Option<Tensor>,
        b: Option<Tensor>,
        stats: Option<BatchNormStats>,
        momentum: f32,
        eps: f32,
    ) -> Result<Tensor> {
        self.batch_norm_named("batch_norm", x, [w, b], stats, momentum, eps)
    }

    /// [`batch_norm`](Self::batch_norm) whose errors name `op`: the C
    /// function called (`ag_batch_norm_opt`'s are `batch_norm_opt`).
    pub(crate) fn batch_norm_named(
        &mut self,
        op: &'static str,
        x: Tensor,
        [w, b]: [Option<Tensor>; 2],
        stats: Option<BatchNormStats>,
        momentum: f32,
        eps: f32,
    ) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let (iw, ib) = (
            w.map(|t| self.resolve(op, t)).transpose()?,
            b.map(|t| self.resolve(op, t)).transpose()?,
        );
        let si = match stats {
            Some(s) => Some(self.stats_index(op, s)?),
            None => None,
        };
        let ex = self.entry(ix);
        if ex.shape.ndim() < 2 {
            return Err(Error::InvalidArgument {
                op,
                what: format!("x {} must be [N, C, *] (rank 2 or more)", ex.shape),
            });
        }
        let d = Dims::of(ex.shape);
        check_affine(self, op, [iw, ib], ex.shape, d.c)?;
        if let Some(si) = si
            && self.stats_bufs(si).0 != d.c
        {
            let sc = self.stats_bufs(si).0;
            return Err(Error::InvalidArgument {
                op,
                what: format!("statistics of {sc} channels for x {} of {}", ex.shape, d.c),
            });
        }
        let valid = (0.0..=1.0).contains(&momentum) && eps > 0.0 && eps.is_finite();
        if !valid {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "momentum {momentum} must be in [0, 1] and eps {eps} finite and above 0"
                ),
            });
        }
        // Batch statistics: training mode, or no running statistics.
        let training = self.training() || si.is_none();
        if training && d.per_channel() <= 1 {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "with batch statistics each channel needs more than one value, but x {} has {} per channel",
                    ex.shape,
                    d.per_channel()
                ),
            });
        }
        // An absent parameter stands in as x (a repeat changes nothing).
        let tracks = self.tracks(&[ix, iw.unwrap_or(ix), ib.unwrap_or(ix)]);
        let saved = self.alloc_scratchable::<f32>(op, 4 * d.c)?;
        let out = self.push_output(op, ex.shape, tracks)?;
        let record = Op::BatchNorm {
            x: ix,
            w: iw,
            b: ib,
            stats: si.map_or(NO_STATS, |i| i as u32),
            training,
            momentum,
            eps,
            saved,
        };
        Ok(self.run(record, out))
    }
}

/// The record's `stats` without running statistics.
const NO_STATS: u32 = u32::MAX;

/// The four `[C]` parts of the saved buffer: mean, 1/std, then two
/// scratch rows (the batch's unbiased variance in forward, the gradient
/// sums in backward).
fn parts(saved: Buf, c: usize) -> [Buf; 4] {
    std::array::from_fn(|k| Storage::sub(saved, k * c, c))
}

/// Channel and plane task counts of `d`.
fn tasks(d: Dims) -> (usize, usize) {
    (row_tasks(d.c, d.per_channel()), row_tasks(d.n * d.c, d.s))
}

/// The inputs are x, and w and b where present; `stats` the registry
/// index of the running statistics, or [`NO_STATS`]; `training`: batch
/// statistics.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_batch_norm(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    [iw, ib]: [Option<u32>; 2],
    stats: u32,
    training: bool,
    momentum: f32,
    eps: f32,
    saved: Buf,
) {
    let ex = ctx.entry(ix);
    let (wd, bd) = (
        optional_data(ctx, iw, ex.data),
        optional_data(ctx, ib, ex.data),
    );
    let d = Dims::of(ex.shape);
    let c = d.c;
    let [mean, rstd, var, _] = parts(saved, c);
    let (n_ch, n_planes) = tasks(d);
    let work = ex.shape.numel() * fastmath::ELEMENT_COST;
    if training {
        let par = n_ch > 1 && ctx.want_pool(work);
        let (pool, [m, r, v], [x]) = ctx.access_on(par, [mean, rstd, var], [ex.data]);
        let parts = fastmath::row_parts(m, 1, n_ch)
            .zip(fastmath::row_parts(r, 1, n_ch))
            .zip(fastmath::row_parts(v, 1, n_ch));
        fastmath::run_parts(pool, parts, &|i, ((m, r), v)| {
            channel_stats(m, r, v, x, d, pool::task_range(c, n_ch, i), eps)
        });
    } else {
        let (_, run_mean, run_var) = ctx.stats_bufs(stats as usize);
        let ([m, r], [rm, rv]) = ctx.access([mean, rstd], [run_mean, run_var]);
        m.copy_from_slice(rm);
        for (o, &v) in r.iter_mut().zip(rv) {
            *o = 1.0 / (v + eps).sqrt();
        }
    }
    let par = n_planes > 1 && ctx.want_pool(work);
    let (pool, [y], [x, m, r, w, b]) =
        ctx.access_on(par, [ctx.entry(out).data], [ex.data, mean, rstd, wd, bd]);
    let (w, b) = (present(w), present(b));
    let rows = d.n * d.c;
    fastmath::run_parts(pool, fastmath::row_parts(y, d.s, n_planes), &|i, y| {
        normalise_planes(y, x, m, r, w, b, d, pool::task_range(rows, n_planes, i))
    });
    if training && stats != NO_STATS && !ctx.recomputing() {
        let (_, run_mean, run_var) = ctx.stats_bufs(stats as usize);
        let ([rm, rv], [m, v]) = ctx.access([run_mean, run_var], [mean, var]);
        for (o, &bm) in rm.iter_mut().zip(m) {
            *o = (1.0 - momentum) * *o + momentum * bm;
        }
        for (o, &bv) in rv.iter_mut().zip(v) {
            *o = (1.0 - momentum) * *o + momentum * bv;
        }
        ctx.count_batch(stats as usize);
    }
}

/// The inputs are x, and w and b where present.
pub(crate) fn backward_batch_norm(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    [iw, ib]: [Option<u32>; 2],
    training: bool,
    saved: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let ex = ctx.entry(ix);
    let wd = optional_data(ctx, iw, ex.data);
    let d = Dims::of(ex.shape);
    let [mean, rstd, sg, sgx] = parts(saved, d.c);
    let (n_ch, n_planes) = tasks(d);
    let work = ex.shape.numel() * fastmath::ELEMENT_COST;
    let par = n_ch > 1 && ctx.want_pool(work);
    let (pool, [s1, s2], [g, x, m, r]) = ctx.access_on(par, [sg, sgx], [dout, ex.data, mean, rstd]);
    let parts = fastmath::row_parts(s1, 1, n_ch).zip(fastmath::row_parts(s2, 1, n_ch));
    fastmath::run_parts(pool, parts, &|i, (s1, s2)| {
        channel_grad_sums(s1, s2, g, x, m, r, d, pool::task_range(d.c, n_ch, i))
    });
    if let Some(dw) = iw.and_then(|i| ctx.grad_of(i)) {
        let ([dw], [s2]) = ctx.access([dw], [sgx]);
        dw.iter_mut().zip(s2).for_each(|(o, &v)| *o += v);
    }
    if let Some(db) = ib.and_then(|i| ctx.grad_of(i)) {
        let ([db], [s1]) = ctx.access([db], [sg]);
        db.iter_mut().zip(s1).for_each(|(o, &v)| *o += v);
    }
    if let Some(dx) = ctx.grad_of(ix) {
        let par = n_planes > 1 && ctx.want_pool(work);
        let (pool, [dx], [g, x, m, r, s1, s2, w]) =
            ctx.access_on(par, [dx], [dout, ex.data, mean, rstd, sg, sgx, wd]);
        let w = present(w);
        let rows = d.n * d.c;
        fastmath::run_parts(pool, fastmath::row_parts(dx, d.s, n_planes), &|i, dx| {
            let rows = pool::task_range(rows, n_planes, i);
            dx_planes(dx, g, x, [m, r, s1, s2], w, d, rows, training)
        });
    }
}

#[cfg(test)]
#[path = "batch_norm_tests.rs"]
mod tests;

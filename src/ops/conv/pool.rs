//! Max, average and global average pooling over the planes of NCHW images.
//! Windows follow PyTorch: a window starts at `o * stride - pad`, is
//! clipped to the input, and (ceil mode) may run past the padding.

use super::geometry::{Taps, nchw};
use crate::arena::Buf;
use crate::context::Context;
use crate::kernels::fastmath;
use crate::ops::PoolGeom;
use crate::pool::{self, Pool};

/// A pooling task: (first plane, planes, its parts of the written buffers).
type PlaneTask<'a, const W: usize> = dyn Fn(usize, usize, [&mut [f32]; W]) + Sync + 'a;

/// Most tasks a pooling's planes are cut into.
const MAX_PLANE_TASKS: usize = 8;

/// One pooling's sizes.
#[derive(Clone, Copy)]
struct Windows {
    planes: usize,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
}

/// A window along one axis: its unclipped start, and the input range it
/// covers.
#[derive(Clone, Copy)]
struct Span {
    start: i64,
    lo: usize,
    hi: usize,
}

impl Windows {
    fn new(ctx: &Context, x: u32, out: u32, g: PoolGeom) -> Windows {
        let [n, c, h, w] = nchw(ctx.entry(x).shape);
        let [_, _, ho, wo] = nchw(ctx.entry(out).shape);
        let u = |v: [u16; 2]| [v[0] as usize, v[1] as usize];
        Windows {
            planes: n * c,
            h,
            w,
            ho,
            wo,
            kernel: u(g.kernel),
            stride: u(g.stride),
            pad: u(g.pad),
        }
    }

    /// The window of output index `o` along `axis` (0: rows, 1: columns).
    fn span(&self, axis: usize, o: usize) -> Span {
        let len = [self.h, self.w][axis] as i64;
        let start = (o * self.stride[axis]) as i64 - self.pad[axis] as i64;
        let end = (start + self.kernel[axis] as i64).min(len);
        Span {
            start,
            lo: start.max(0) as usize,
            hi: end.max(0) as usize,
        }
    }

    /// Calls `f(plane, output index, row span, column span)` for every
    /// output element of `planes` planes, in order; both indices count
    /// from the first of them.
    fn each(&self, planes: usize, mut f: impl FnMut(usize, usize, Span, Span)) {
        let mut o = 0;
        for p in 0..planes {
            for oh in 0..self.ho {
                let rs = self.span(0, oh);
                for ow in 0..self.wo {
                    f(p, o, rs, self.span(1, ow));
                    o += 1;
                }
            }
        }
    }

    /// How many tasks the planes are cut into. Each output element depends
    /// on its own window alone, so the cut changes no bits; only whether
    /// it pays: a window's element costs about as much as a few flops.
    fn plane_tasks(&self) -> usize {
        let work = self.planes * self.ho * self.wo * self.kernel[0] * self.kernel[1] * 4;
        if Context::worth_two_threads(work) {
            self.planes.min(MAX_PLANE_TASKS)
        } else {
            1
        }
    }

    fn out_plane(&self) -> usize {
        self.ho * self.wo
    }

    /// Runs `task(first plane, planes, parts)` on each task's planes: the
    /// `W` written buffers are cut at plane boundaries (`widths[k]`
    /// elements a plane).
    fn run<const W: usize>(
        &self,
        pool: Option<&Pool>,
        bufs: [&mut [f32]; W],
        widths: [usize; W],
        task: &PlaneTask<'_, W>,
    ) {
        let tasks = self.plane_tasks();
        let mut cut = bufs.map(Some);
        let parts = (0..tasks).map(|i| {
            let range = pool::task_range(self.planes, tasks, i);
            let mut k = 0;
            let part = cut.each_mut().map(|b| {
                let whole = b.take().expect("each buffer is cut once a task");
                let (head, rest) = whole.split_at_mut(range.len() * widths[k]);
                *b = Some(rest);
                k += 1;
                head
            });
            (range, part)
        });
        fastmath::run_parts(pool, parts, &|_, (range, part)| {
            task(range.start, range.len(), part)
        });
    }

    fn plane(&self) -> usize {
        self.h * self.w
    }

    /// 2x2 windows at stride 2, no padding, each inside the input (the
    /// common pooling, which has its own kernels).
    fn is_inner_2x2(&self) -> bool {
        self.kernel == [2, 2]
            && self.stride == [2, 2]
            && self.pad == [0, 0]
            && 2 * self.ho <= self.h
            && 2 * self.wo <= self.w
    }
}

/// y = the largest element of each window (NaN wins, as in PyTorch);
/// `argmax` records the first one, as its row-major offset in the window
/// (an f32 holds it exactly: the recording function keeps kH kW <= 2^24).
pub(crate) fn forward_max_pool2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    geom: PoolGeom,
    argmax: Buf,
) {
    let win = Windows::new(ctx, ix, out, geom);
    let (ex, eo) = (ctx.entry(ix), ctx.entry(out));
    let par = ctx.want_pool(win.planes * win.plane());
    let (pool, [y, arg], [x]) = ctx.access_on(par, [eo.data, argmax], [ex.data]);
    let op = win.out_plane();
    let pairs = win.is_inner_2x2();
    win.run(pool, [y, arg], [op, op], &|first, planes, [y, arg]| {
        let x = &x[first * win.plane()..][..planes * win.plane()];
        if pairs {
            return crate::simd::dispatch!(max_planes_2x2(&win, x, y, arg));
        }
        let rows = y.chunks_exact_mut(win.wo).zip(arg.chunks_exact_mut(win.wo));
        for (r, (y, arg)) in rows.enumerate() {
            let (plane, oh) = (r / win.ho, r % win.ho);
            max_row(&win, &x[plane * win.plane()..][..win.plane()], oh, y, arg);
        }
    });
}

/// [`max_row`] over whole planes for [`Windows::is_inner_2x2`] windows:
/// the same taps in the same order, read as pairs, with selects the
/// vector units run on a whole row at once.
#[inline(always)]
fn max_planes_2x2(win: &Windows, x: &[f32], y: &mut [f32], arg: &mut [f32]) {
    let rows = y.chunks_exact_mut(win.wo).zip(arg.chunks_exact_mut(win.wo));
    for (r, (y, arg)) in rows.enumerate() {
        let (plane, oh) = (r / win.ho, r % win.ho);
        let plane = &x[plane * win.plane()..][..win.plane()];
        let top = &plane[2 * oh * win.w..][..2 * win.wo];
        let bottom = &plane[(2 * oh + 1) * win.w..][..2 * win.wo];
        for ow in 0..win.wo {
            let (mut m, mut a) = (f32::NEG_INFINITY, 0.0);
            keep_max(&mut m, &mut a, top[2 * ow], 0.0);
            keep_max(&mut m, &mut a, top[2 * ow + 1], 1.0);
            keep_max(&mut m, &mut a, bottom[2 * ow], 2.0);
            keep_max(&mut m, &mut a, bottom[2 * ow + 1], 3.0);
            (y[ow], arg[ow]) = (m, a);
        }
    }
}

/// Keeps `v` (window offset `code`) when it beats the running maximum or
/// is NaN, without a branch: random data would mispredict half of them.
#[inline(always)]
fn keep_max(y: &mut f32, arg: &mut f32, v: f32, code: f32) {
    let take = v > *y || v.is_nan();
    *y = if take { v } else { *y };
    *arg = if take { code } else { *arg };
}

/// One output row of a max pooling: the windows are visited tap by tap,
/// each tap across the whole row, so no output waits on another's
/// comparisons. For each window the taps come in row-major order, as a
/// window-by-window walk would take them, so the first maximum is kept.
fn max_row(win: &Windows, plane: &[f32], oh: usize, y: &mut [f32], arg: &mut [f32]) {
    let (kw, sw, pw) = (win.kernel[1], win.stride[1], win.pad[1]);
    let rs = win.span(0, oh);
    let first_row = (rs.lo as i64 - rs.start) as usize;
    for (ow, (yv, av)) in y.iter_mut().zip(arg.iter_mut()).enumerate() {
        let cs = win.span(1, ow);
        *yv = f32::NEG_INFINITY;
        *av = (first_row * kw + (cs.lo as i64 - cs.start) as usize) as f32;
    }
    for ih in rs.lo..rs.hi {
        let src = &plane[ih * win.w..][..win.w];
        let i = (ih as i64 - rs.start) as usize;
        for j in 0..kw {
            let taps = Taps::along(win.w, win.wo, sw, pw, j);
            let code = (i * kw + j) as f32;
            let taken = src[taps.first..].iter().step_by(sw);
            let outs = y[taps.lo..taps.hi]
                .iter_mut()
                .zip(&mut arg[taps.lo..taps.hi]);
            for ((yv, av), &v) in outs.zip(taken) {
                keep_max(yv, av, v, code);
            }
        }
    }
}

/// dx += dy at each window's recorded maximum.
pub(crate) fn backward_max_pool2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    geom: PoolGeom,
    argmax: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some((dx, fresh)) = ctx.grad_to_overwrite(ix) else {
        return;
    };
    let win = Windows::new(ctx, ix, out, geom);
    let par = ctx.want_pool(win.planes * win.plane());
    let (pool, [dx], [dy, arg]) = ctx.access_on(par, [dx], [dout, argmax]);
    let kw = win.kernel[1] as i64;
    let op = win.out_plane();
    let pairs = win.is_inner_2x2();
    win.run(pool, [dx], [win.plane()], &|first, planes, [dx]| {
        let (dy, arg) = (&dy[first * op..], &arg[first * op..]);
        if pairs {
            let planes = dx.chunks_exact_mut(win.plane());
            let outs = dy.chunks_exact(op).zip(arg.chunks_exact(op));
            return crate::simd::dispatch!(for (dx, (dy, arg)) in planes.zip(outs) {
                scatter_2x2(&win, dx, dy, arg, fresh);
            });
        }
        if fresh {
            dx.fill(0.0);
        }
        win.each(planes, |p, o, rs, cs| {
            let off = arg[o] as i64;
            let (ih, iw) = (rs.start + off / kw, cs.start + off % kw);
            dx[p * win.plane() + ih as usize * win.w + iw as usize] += dy[o];
        });
    });
}

/// One plane of [`backward_max_pool2d`] for [`Windows::is_inner_2x2`]
/// windows: they do not overlap, so each input element takes its window's
/// gradient or nothing. With `fresh`, `dx` holds stale values and is
/// written whole with `=`, as zeroing it and adding would leave it.
#[inline(always)]
fn scatter_2x2(win: &Windows, dx: &mut [f32], dy: &[f32], arg: &[f32], fresh: bool) {
    if fresh && (2 * win.ho != win.h || 2 * win.wo != win.w) {
        // A last row or column no window covers.
        dx.fill(0.0);
    }
    let rows = dy.chunks_exact(win.wo).zip(arg.chunks_exact(win.wo));
    for (oh, (dy, arg)) in rows.enumerate() {
        let (top, bottom) = dx[2 * oh * win.w..][..2 * win.w].split_at_mut(win.w);
        let pairs = top.chunks_exact_mut(2).zip(bottom.chunks_exact_mut(2));
        for ((t, b), (&g, &a)) in pairs.zip(dy.iter().zip(arg)) {
            let (t0, t1) = t.split_at_mut(1);
            let (b0, b1) = b.split_at_mut(1);
            let taps = [&mut t0[0], &mut t1[0], &mut b0[0], &mut b1[0]];
            for (code, d) in taps.into_iter().enumerate() {
                // Selects, not branches: which tap won is data.
                let hit = a == code as f32;
                *d = match (fresh, hit) {
                    (true, true) => 0.0 + g,
                    (true, false) => 0.0,
                    (false, true) => *d + g,
                    (false, false) => *d,
                };
            }
        }
    }
}

/// What a window's sum is divided by: its size up to the padding's edge
/// with `count_include_pad`, else the input elements it covers.
fn divisor(win: &Windows, rs: Span, cs: Span, count_include_pad: bool) -> f32 {
    if count_include_pad {
        let end = |s: Span, axis: usize| {
            let padded = ([win.h, win.w][axis] + win.pad[axis]) as i64;
            (s.start + win.kernel[axis] as i64).min(padded) - s.start
        };
        (end(rs, 0) * end(cs, 1)) as f32
    } else {
        ((rs.hi - rs.lo) * (cs.hi - cs.lo)) as f32
    }
}

/// y = each window's sum over its divisor (see [`divisor`]).
pub(crate) fn forward_avg_pool2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    geom: PoolGeom,
    count_include_pad: bool,
) {
    let win = Windows::new(ctx, ix, out, geom);
    let (ex, eo) = (ctx.entry(ix), ctx.entry(out));
    let par = ctx.want_pool(win.planes * win.plane());
    let (pool, [y], [x]) = ctx.access_on(par, [eo.data], [ex.data]);
    win.run(pool, [y], [win.out_plane()], &|first, planes, [y]| {
        let x = &x[first * win.plane()..][..planes * win.plane()];
        win.each(planes, |p, o, rs, cs| {
            let plane = &x[p * win.plane()..][..win.plane()];
            let mut sum = 0.0f32;
            for ih in rs.lo..rs.hi {
                sum += plane[ih * win.w..][cs.lo..cs.hi].iter().sum::<f32>();
            }
            y[o] = sum / divisor(&win, rs, cs, count_include_pad);
        });
    });
}

/// dx += dy / divisor over each window's input elements.
pub(crate) fn backward_avg_pool2d(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    geom: PoolGeom,
    count_include_pad: bool,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some(dx) = ctx.grad_of(ix) else {
        return;
    };
    let win = Windows::new(ctx, ix, out, geom);
    let par = ctx.want_pool(win.planes * win.plane());
    let (pool, [dx], [dy]) = ctx.access_on(par, [dx], [dout]);
    win.run(pool, [dx], [win.plane()], &|first, planes, [dx]| {
        let dy = &dy[first * win.out_plane()..];
        win.each(planes, |p, o, rs, cs| {
            let g = dy[o] / divisor(&win, rs, cs, count_include_pad);
            let plane = &mut dx[p * win.plane()..][..win.plane()];
            for ih in rs.lo..rs.hi {
                plane[ih * win.w..][cs.lo..cs.hi]
                    .iter_mut()
                    .for_each(|d| *d += g);
            }
        });
    });
}

/// y[n, c] = mean of plane (n, c), summed in f64.
pub(crate) fn forward_global_avg_pool2d(ctx: &mut Context, out: u32, ix: u32) {
    let (ex, eo) = (ctx.entry(ix), ctx.entry(out));
    let [_, _, h, w] = nchw(ex.shape);
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    for (yv, plane) in y.iter_mut().zip(x.chunks_exact(h * w)) {
        let sum: f64 = plane.iter().map(|&v| v as f64).sum();
        *yv = (sum / (h * w) as f64) as f32;
    }
}

/// dx[n, c, :, :] += dy[n, c] / (H W).
pub(crate) fn backward_global_avg_pool2d(ctx: &mut Context, out: u32, ix: u32) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some(dx) = ctx.grad_of(ix) else {
        return;
    };
    let [_, _, h, w] = nchw(ctx.entry(ix).shape);
    let ([dx], [dy]) = ctx.access([dx], [dout]);
    let scale = 1.0 / (h * w) as f32;
    for (plane, &g) in dx.chunks_exact_mut(h * w).zip(dy) {
        let g = g * scale;
        plane.iter_mut().for_each(|d| *d += g);
    }
}

#[cfg(test)]
mod tests {
    use super::{Windows, max_planes_2x2, max_row};

    #[test]
    fn the_2x2_kernel_keeps_the_general_rows_choices_with_nan_and_ties() {
        let win = Windows {
            planes: 1,
            h: 4,
            w: 10,
            ho: 2,
            wo: 5,
            kernel: [2, 2],
            stride: [2, 2],
            pad: [0, 0],
        };
        assert!(win.is_inner_2x2());
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        #[rustfmt::skip]
        let x = [
            nan, 1.0, -inf, -inf, 2.0, 2.0, 0.0, nan, -1.0, 3.0,
            2.0, nan, -inf, -inf, 2.0, 5.0, -0.0, 1.0, 3.0, -2.0,
            inf, inf, 1.0, 1.0, nan, nan, -inf, 0.0, 4.0, 4.0,
            1.0, 2.0, 1.0, 1.0, 0.0, inf, -inf, -inf, 4.0, 4.0,
        ];
        let (mut y, mut arg) = (vec![0.0; 10], vec![0.0; 10]);
        max_planes_2x2(&win, &x, &mut y, &mut arg);
        let (mut want_y, mut want_arg) = (vec![0.0f32; 10], vec![0.0f32; 10]);
        for oh in 0..2 {
            let r = oh * 5..oh * 5 + 5;
            max_row(&win, &x, oh, &mut want_y[r.clone()], &mut want_arg[r]);
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(&want_y));
        assert_eq!(arg, want_arg);
        // A window of -inf only points at its first tap.
        assert_eq!((y[1], arg[1]), (-inf, 0.0));
    }
}

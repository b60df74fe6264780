//! Max, average and global average pooling over the planes of NCHW images.
//! Windows follow PyTorch: a window starts at `o * stride - pad`, is
//! clipped to the input, and (ceil mode) may run past the padding.

use super::{PoolGeom, nchw};
use crate::arena::Buf;
use crate::context::Context;

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
    /// output element, in order.
    fn each(&self, mut f: impl FnMut(usize, usize, Span, Span)) {
        let mut o = 0;
        for p in 0..self.planes {
            for oh in 0..self.ho {
                let rs = self.span(0, oh);
                for ow in 0..self.wo {
                    f(p, o, rs, self.span(1, ow));
                    o += 1;
                }
            }
        }
    }

    fn plane(&self) -> usize {
        self.h * self.w
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
    let ([y, arg], [x]) = ctx.access([eo.data, argmax], [ex.data]);
    let kw = win.kernel[1] as i64;
    win.each(|p, o, rs, cs| {
        let plane = &x[p * win.plane()..][..win.plane()];
        let (mut best, mut at) = (f32::NEG_INFINITY, (rs.lo, cs.lo));
        for ih in rs.lo..rs.hi {
            for iw in cs.lo..cs.hi {
                let v = plane[ih * win.w + iw];
                if v > best || v.is_nan() {
                    (best, at) = (v, (ih, iw));
                }
            }
        }
        y[o] = best;
        arg[o] = ((at.0 as i64 - rs.start) * kw + (at.1 as i64 - cs.start)) as f32;
    });
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
    let Some(dx) = ctx.grad_of(ix) else {
        return;
    };
    let win = Windows::new(ctx, ix, out, geom);
    let ([dx], [dy, arg]) = ctx.access([dx], [dout, argmax]);
    let kw = win.kernel[1] as i64;
    win.each(|p, o, rs, cs| {
        let off = arg[o] as i64;
        let (ih, iw) = (rs.start + off / kw, cs.start + off % kw);
        dx[p * win.plane() + ih as usize * win.w + iw as usize] += dy[o];
    });
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
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    win.each(|p, o, rs, cs| {
        let plane = &x[p * win.plane()..][..win.plane()];
        let mut sum = 0.0f32;
        for ih in rs.lo..rs.hi {
            sum += plane[ih * win.w..][cs.lo..cs.hi].iter().sum::<f32>();
        }
        y[o] = sum / divisor(&win, rs, cs, count_include_pad);
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
    let ([dx], [dy]) = ctx.access([dx], [dout]);
    win.each(|p, o, rs, cs| {
        let g = dy[o] / divisor(&win, rs, cs, count_include_pad);
        let plane = &mut dx[p * win.plane()..][..win.plane()];
        for ih in rs.lo..rs.hi {
            plane[ih * win.w..][cs.lo..cs.hi]
                .iter_mut()
                .for_each(|d| *d += g);
        }
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

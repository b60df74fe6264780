//! Softmax over the last axis (optionally scaled and causally masked, fused)
//! and fused causal multi-head self-attention over a packed qkv tensor.
//!
//! The fused attention reads the heads of q, k and v straight out of the
//! `[B, T, 3C]` qkv buffer with strided GEMMs (leading dimension 3C) and writes
//! each head's output into its column block of `[B, T, C]`: no split, permute
//! or merge copies. It saves only the probabilities `[B, NH, T, T]`.
//!
//! This file holds the recording functions and the op functions; the row
//! kernels are in `softmax.rs`, the fused attention's in `fused.rs`.

mod fused;
mod softmax;
#[cfg(test)]
mod tests;

use crate::arena::{Buf, Storage};
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::Shape;
use crate::simd;
use fused::{attention_backward, attention_forward};
use softmax::{softmax_backward, softmax_row_from, valid_cols};

impl Context {
    /// softmax(scale * x) over the last axis. With `causal`, x's last two
    /// axes are `[Tq, Tk]` (Tq <= Tk) and row i sees only columns
    /// 0..=i + Tk - Tq; masked outputs are exactly 0.
    pub fn softmax(&mut self, x: Tensor, causal: bool, scale: f32) -> Result<Tensor> {
        const OP: &str = "softmax";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let nd = ex.shape.ndim();
        let tk = ex.shape.last();
        let tq = if nd >= 2 { ex.shape.dims()[nd - 2] } else { 1 };
        if causal && (nd < 2 || tq > tk) {
            return Err(Error::BadShape {
                op: OP,
                what: format!(
                    "causal softmax needs [..., Tq, Tk] with Tq <= Tk, got {}",
                    ex.shape
                ),
            });
        }
        if !scale.is_finite() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("scale {scale} is not finite"),
            });
        }
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, ex.shape, tracks)?;
        Ok(self.run(
            Op::Softmax {
                x: ix,
                scale,
                causal,
            },
            out,
        ))
    }

    /// Causal multi-head self-attention, fused. qkv: `[B, T, 3C]` holding q, k
    /// and v side by side, each split into `n_head` heads of C / n_head
    /// channels -> `[B, T, C]`; scores are scaled by 1/sqrt(C / n_head).
    pub fn attention(&mut self, qkv: Tensor, n_head: usize) -> Result<Tensor> {
        const OP: &str = "attention";
        let iq = self.resolve(OP, qkv)?;
        let eq = self.entry(iq);
        if eq.shape.ndim() != 3 || !eq.shape.last().is_multiple_of(3) {
            return Err(Error::BadShape {
                op: OP,
                what: format!("qkv must be [B,T,3C], got {}", eq.shape),
            });
        }
        let (b, t, c) = (eq.shape.dims()[0], eq.shape.dims()[1], eq.shape.last() / 3);
        if n_head == 0 || c % n_head != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("{n_head} heads do not divide C = {c} (qkv {})", eq.shape),
            });
        }
        let tracks = self.tracks(&[iq]);
        let probs_shape = Shape::new(OP, &[b, n_head, t, t])?;
        // When recording, T*T more floats at the end serve as the backward
        // pass's dP scratch, so backward never allocates.
        // Two scratches: one per thread when the batch is split.
        let extra = if tracks { 2 * t * t } else { 0 };
        // Written before read: the probabilities completely by the forward
        // pass, the scratch's live entries by backward's first products
        // (beta = 0; `causal_blocks` leaves the rest unread).
        let probs = self.alloc_scratchable::<f32>(OP, probs_shape.numel() + extra)?;
        let out = self.push_output(OP, Shape::from_valid(&[b, t, c]), tracks)?;
        let op = Op::Attention {
            qkv: iq,
            n_head: n_head as u32,
            probs,
        };
        Ok(self.run(op, out))
    }
}

pub(crate) fn forward_softmax(ctx: &mut Context, out: u32, x: u32, scale: f32, causal: bool) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let nd = ex.shape.ndim();
    let tk = ex.shape.last();
    let tq = if nd >= 2 { ex.shape.dims()[nd - 2] } else { 1 };
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    simd::dispatch!({
        for (r, (yr, xr)) in y.chunks_exact_mut(tk).zip(x.chunks_exact(tk)).enumerate() {
            softmax_row_from(yr, xr, valid_cols(causal, r % tq, tq, tk), scale);
        }
    });
}

/// qkv: `[B, T, 3C]` -> out: `[B, T, C]`; the probabilities go to the front
/// of `probs` (`[B, NH, T, T]`), whose tail is backward's scratch.
pub(crate) fn forward_attention(ctx: &mut Context, out: u32, qkv: u32, n_head: usize, probs: Buf) {
    let (eq, eo) = (ctx.entry(qkv), ctx.entry(out));
    let (b, t, c) = (eq.shape.dims()[0], eq.shape.dims()[1], eq.shape.last() / 3);
    let probs_only = Storage::sub(probs, 0, b * n_head * t * t);
    let par = b >= 2 && ctx.want_pool(4 * b * n_head * t * t * (c / n_head));
    let (pool, [y, p], [q]) = ctx.access_on(par, [eo.data, probs_only], [eq.data]);
    match pool {
        Some(pool) => {
            // Split the batch: each half owns disjoint rows of every buffer.
            let h = b / 2;
            let (y0, y1) = y.split_at_mut(h * t * c);
            let (p0, p1) = p.split_at_mut(h * n_head * t * t);
            let (q0, q1) = q.split_at(h * t * 3 * c);
            pool.join(
                || attention_forward(y1, p1, q1, b - h, t, c, n_head),
                || attention_forward(y0, p0, q0, h, t, c, n_head),
            );
        }
        None => attention_forward(y, p, q, b, t, c, n_head),
    }
}

/// Masked outputs are exactly 0, so the causal mask needs no extra work:
/// their gradient terms vanish in `softmax_backward`.
pub(crate) fn backward_softmax(ctx: &mut Context, out: u32, x: u32, scale: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let eo = ctx.entry(out);
    let ([dx], [g, y]) = ctx.access([dx], [dout, eo.data]);
    simd::dispatch!(softmax_backward(dx, g, y, eo.shape.last(), scale));
}

pub(crate) fn backward_attention(ctx: &mut Context, out: u32, qkv: u32, nh: usize, probs: Buf) {
    let (Some(dq), Some(dout)) = (ctx.grad_of(qkv), ctx.grad_out(out)) else {
        return;
    };
    let eq = ctx.entry(qkv);
    let (b, t, c) = (eq.shape.dims()[0], eq.shape.dims()[1], eq.shape.last() / 3);
    let n = probs.len() - 2 * t * t;
    let (p_only, scratch) = (Storage::sub(probs, 0, n), Storage::sub(probs, n, 2 * t * t));
    let par = b >= 2 && ctx.want_pool(4 * b * nh * t * t * (c / nh));
    let (pool, [dq, dp], [g, p, q]) = ctx.access_on(par, [dq, scratch], [dout, p_only, eq.data]);
    match pool {
        Some(pool) => {
            let h = b / 2;
            let (dq0, dq1) = dq.split_at_mut(h * t * 3 * c);
            let (dp0, dp1) = dp.split_at_mut(t * t);
            let (g0, g1) = g.split_at(h * t * c);
            let (p0, p1) = p.split_at(h * nh * t * t);
            let (q0, q1) = q.split_at(h * t * 3 * c);
            pool.join(
                || attention_backward(dq1, dp1, g1, p1, q1, b - h, t, c, nh),
                || attention_backward(dq0, dp0, g0, p0, q0, h, t, c, nh),
            );
        }
        None => attention_backward(dq, &mut dp[..t * t], g, p, q, b, t, c, nh),
    }
}

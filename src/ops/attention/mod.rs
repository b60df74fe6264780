//! Softmax over the last axis (optionally scaled and causally masked, fused)
//! and fused causal multi-head self-attention over a packed qkv tensor.
//!
//! The fused attention reads the heads of q, k and v straight out of the
//! `[B, T, 3C]` qkv buffer with strided GEMMs (leading dimension 3C) and writes
//! each head's output into its column block of `[B, T, C]`: no split, permute
//! or merge copies. It saves only the probabilities `[B, NH, T, T]`. Its
//! tasks are runs of (batch item, head) units, so one batch item's heads
//! spread over the threads too.
//!
//! This file holds the recording functions and the op functions; the row
//! kernels are in `softmax.rs`, the fused attention's in `fused.rs`. The
//! grouped-query attention over head-major q, k and v is in `gqa.rs`.

mod fused;
pub(crate) mod gqa;
#[cfg(test)]
mod gqa_tests;
mod softmax;
#[cfg(test)]
mod tests;

use crate::arena::{Buf, Storage};
use crate::blas::blocks::{UnitsOut, split_units};
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::pool::{self, Pool};
use crate::shape::Shape;
use crate::simd;
use fused::{attention_backward, attention_forward, unit_layout};
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
        // When recording, T*T more floats per backward task at the end
        // serve as its dP scratch, so backward never allocates.
        let extra = if tracks {
            unit_tasks(b, t, c, n_head) * t * t
        } else {
            0
        };
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

/// Floats of a softmax per task, at least (and only softmaxes worth a
/// second thread are cut: the threshold the elementwise kernels use).
const SOFTMAX_TASK_FLOATS: usize = 1 << 14;

/// Rows per task of a softmax over `rows` rows of `tk`: by the shape
/// alone. Rows are independent, so the cut changes no bit.
fn softmax_rows_per_task(rows: usize, tk: usize) -> usize {
    if !Context::worth_two_threads(rows * tk * 16) {
        return rows.max(1);
    }
    let n = pool::task_count(rows, SOFTMAX_TASK_FLOATS.div_ceil(tk.max(1)));
    rows.div_ceil(n).max(1)
}

/// Runs `task(i, chunk)` on each chunk of `chunk_len` floats of `data`:
/// across the pool when given, else in order on this thread.
fn run_chunks(
    pool: Option<&Pool>,
    data: &mut [f32],
    chunk_len: usize,
    task: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    match pool {
        Some(pool) => pool.run_chunks(data, chunk_len, task),
        None => data
            .chunks_mut(chunk_len.max(1))
            .enumerate()
            .for_each(|(i, c)| task(i, c)),
    }
}

pub(crate) fn forward_softmax(ctx: &mut Context, out: u32, x: u32, scale: f32, causal: bool) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let nd = ex.shape.ndim();
    let tk = ex.shape.last();
    let tq = if nd >= 2 { ex.shape.dims()[nd - 2] } else { 1 };
    let rows = ex.shape.numel() / tk.max(1);
    let per_task = softmax_rows_per_task(rows, tk);
    let par = per_task < rows && ctx.want_pool(ex.shape.numel() * 16);
    let (pool, [y], [x]) = ctx.access_on(par, [eo.data], [ex.data]);
    run_chunks(pool, y, per_task * tk, &|i, y| {
        let r0 = i * per_task;
        let x = &x[r0 * tk..];
        simd::dispatch!({
            for (r, (yr, xr)) in y.chunks_exact_mut(tk).zip(x.chunks_exact(tk)).enumerate() {
                softmax_row_from(yr, xr, valid_cols(causal, (r0 + r) % tq, tq, tk), scale);
            }
        })
    });
}

/// Multiply-adds of a whole attention, forward or backward (the causal
/// blocks skip about half of them; the four products count as one).
fn attention_work(b: usize, t: usize, c: usize, nh: usize) -> usize {
    4 * b * nh * t * t * (c / nh)
}

/// The fewest multiply-adds worth a task of their own: about 0.1 ms of
/// products, so a claim and a hand-off cost nothing next to them.
const MIN_TASK_WORK: usize = 1 << 20;

/// Most tasks an attention is cut into. Each backward task holds a T*T
/// scratch, saved with the probabilities: this bounds that memory to
/// 16 T*T floats whatever the batch.
const MAX_ATTENTION_TASKS: usize = 16;

/// How many tasks a packed attention is cut into (contiguous runs of its
/// B * NH (batch item, head) units, [`pool::task_range`]): by the shape
/// alone, so the same at any thread count. Each head is computed by the
/// same calls whichever task runs it, so the cut changes no bit; it sets
/// only the balance and the scratch.
fn unit_tasks(b: usize, t: usize, c: usize, nh: usize) -> usize {
    let (work, units) = (attention_work(b, t, c, nh), b * nh);
    if units < 2 || !Context::worth_two_threads(work) {
        return 1;
    }
    let per_unit = (work / units).max(1);
    pool::task_count(units, MIN_TASK_WORK.div_ceil(per_unit)).min(MAX_ATTENTION_TASKS)
}

/// Cuts `buf` into the pieces of `n` tasks over `b` units (batch items,
/// heads or groups), each `per_item` floats; unused slots stay empty.
fn pieces(
    buf: &mut [f32],
    b: usize,
    n: usize,
    per_item: usize,
) -> [&mut [f32]; MAX_ATTENTION_TASKS] {
    let mut rest = buf;
    std::array::from_fn(|i| {
        let items = if i < n {
            pool::task_range(b, n, i).len()
        } else {
            0
        };
        let (piece, tail) = std::mem::take(&mut rest).split_at_mut(items * per_item);
        rest = tail;
        piece
    })
}

/// qkv: `[B, T, 3C]` -> out: `[B, T, C]`; the probabilities go to the front
/// of `probs` (`[B, NH, T, T]`), whose tail is backward's scratch.
pub(crate) fn forward_attention(ctx: &mut Context, out: u32, qkv: u32, n_head: usize, probs: Buf) {
    let (eq, eo) = (ctx.entry(qkv), ctx.entry(out));
    let (b, t, c) = (eq.shape.dims()[0], eq.shape.dims()[1], eq.shape.last() / 3);
    let units = b * n_head;
    let probs_only = Storage::sub(probs, 0, units * t * t);
    let n = unit_tasks(b, t, c, n_head);
    let par = n > 1 && ctx.want_pool(attention_work(b, t, c, n_head));
    let (pool, [y, p], [q]) = ctx.access_on(par, [eo.data, probs_only], [eq.data]);
    // Each task owns its units' probabilities and, through its handle,
    // their columns of the output.
    let mut slots = {
        let mut y = split_units(y, unit_layout(b, t, c, n_head, 1), n);
        let mut p = pieces(p, units, n, t * t);
        std::array::from_fn::<_, MAX_ATTENTION_TASKS, _>(|i| (y.next(), std::mem::take(&mut p[i])))
    };
    let task = |_: usize, (y, p): &mut (Option<UnitsOut>, &mut [f32])| {
        let y = y.as_mut().expect("every task has its units");
        attention_forward(y, p, q, t, c, n_head);
    };
    run_tasks(pool, &mut slots[..n], &task);
}

/// Runs `task` on every slot: across the pool when given, else in order
/// on this thread (the same tasks, so the same bits).
fn run_tasks<T: Send>(pool: Option<&Pool>, slots: &mut [T], task: &(dyn Fn(usize, &mut T) + Sync)) {
    match pool {
        Some(pool) => pool.run_slots(slots, task),
        None => slots.iter_mut().enumerate().for_each(|(i, s)| task(i, s)),
    }
}

/// Masked outputs are exactly 0, so the causal mask needs no extra work:
/// their gradient terms vanish in `softmax_backward`.
pub(crate) fn backward_softmax(ctx: &mut Context, out: u32, x: u32, scale: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let eo = ctx.entry(out);
    let tk = eo.shape.last();
    let rows = eo.shape.numel() / tk.max(1);
    let per_task = softmax_rows_per_task(rows, tk);
    let par = per_task < rows && ctx.want_pool(eo.shape.numel() * 16);
    let (pool, [dx], [g, y]) = ctx.access_on(par, [dx], [dout, eo.data]);
    run_chunks(pool, dx, per_task * tk, &|i, dx| {
        let at = i * per_task * tk..i * per_task * tk + dx.len();
        simd::dispatch!(softmax_backward(dx, &g[at.clone()], &y[at], tk, scale))
    });
}

pub(crate) fn backward_attention(ctx: &mut Context, out: u32, qkv: u32, nh: usize, probs: Buf) {
    let (Some(dq), Some(dout)) = (ctx.grad_of(qkv), ctx.grad_out(out)) else {
        return;
    };
    let eq = ctx.entry(qkv);
    let (b, t, c) = (eq.shape.dims()[0], eq.shape.dims()[1], eq.shape.last() / 3);
    let n = unit_tasks(b, t, c, nh);
    let len = b * nh * t * t;
    let (p_only, scratch) = (
        Storage::sub(probs, 0, len),
        Storage::sub(probs, len, n * t * t),
    );
    let par = n > 1 && ctx.want_pool(attention_work(b, t, c, nh));
    let (pool, [dq, dp], [g, p, q]) = ctx.access_on(par, [dq, scratch], [dout, p_only, eq.data]);
    // Each task owns one T*T scratch and, through its handle, its units'
    // columns of dqkv.
    let mut slots = {
        let mut dq = split_units(dq, unit_layout(b, t, c, nh, 3), n);
        let mut dp = dp.chunks_exact_mut(t * t);
        std::array::from_fn::<_, MAX_ATTENTION_TASKS, _>(|_| {
            (dq.next(), dp.next().unwrap_or_default())
        })
    };
    let task = |_: usize, (dq, dp): &mut (Option<UnitsOut>, &mut [f32])| {
        let dq = dq.as_mut().expect("every task has its units");
        attention_backward(dq, dp, g, p, q, t, c, nh);
    };
    run_tasks(pool, &mut slots[..n], &task);
}

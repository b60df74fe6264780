//! Grouped-query causal attention over head-major tensors: q `[B, H, T, D]`,
//! k and v `[B, KV, T, D]` (the layout `rope` takes and returns), KV
//! dividing H. Query head h reads kv head h / (H / KV), as Hugging Face's
//! `repeat_kv` arranges it, without the repeated copies: KV == H is
//! multi-head attention, KV == 1 multi-query.
//!
//! The work is cut into (batch item, kv head) groups: a group's query heads
//! are consecutive, so its rows of q, out, the probabilities and dq are one
//! contiguous run, and dk and dv of its kv head are its own. A group's
//! query heads run in order on one thread, so dk and dv accumulate in the
//! same order whatever the cut and the thread count.
//!
//! The forward saves the probabilities `[B, H, T, T]`, as the packed
//! attention does: backward then needs no second QK^T product and no exp,
//! and the probabilities are also the forward's own work space, so keeping
//! them costs no memory beyond what the forward pass already allocated.

use super::fused::{Grad, HeadGrads, HeadLayout, Rows, head_backward, head_forward};
use super::{MAX_ATTENTION_TASKS, MIN_TASK_WORK, pieces, run_tasks};
use crate::arena::{Buf, Storage};
use crate::blas::{Gemm, sgemm};
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::pool;
use crate::simd;

/// The sizes of one grouped-query attention.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    kv: usize,
    t: usize,
    d: usize,
}

impl Dims {
    /// Read from the recorded q and k (validated when recorded).
    fn of(ctx: &Context, q: u32, k: u32) -> Dims {
        let (qd, kd) = (ctx.entry(q).shape, ctx.entry(k).shape);
        let (qd, kd) = (qd.dims(), kd.dims());
        Dims {
            b: qd[0],
            h: qd[1],
            kv: kd[1],
            t: qd[2],
            d: qd[3],
        }
    }

    /// Query heads per kv head.
    fn group(self) -> usize {
        self.h / self.kv
    }

    /// (batch item, kv head) pairs.
    fn groups(self) -> usize {
        self.b * self.kv
    }

    /// Multiply-adds of the forward or the backward (the four products
    /// counted as one, as the packed attention counts them).
    fn work(self) -> usize {
        4 * self.b * self.h * self.t * self.t * self.d
    }

    /// How many tasks the groups are cut into: by the shape alone. Each
    /// group is computed as on one thread, so the cut changes no bit.
    fn tasks(self) -> usize {
        let work = self.work();
        if self.groups() < 2 || !Context::worth_two_threads(work) {
            return 1;
        }
        let per_group = (work / self.groups()).max(1);
        pool::task_count(self.groups(), MIN_TASK_WORK.div_ceil(per_group)).min(MAX_ATTENTION_TASKS)
    }

    fn probs_len(self) -> usize {
        self.b * self.h * self.t * self.t
    }

    fn q_len(self) -> usize {
        self.b * self.h * self.t * self.d
    }

    fn kv_len(self) -> usize {
        self.b * self.kv * self.t * self.d
    }

    /// Backward's scratch after the probabilities: one T*T dP per task,
    /// then dq, dk and dv.
    fn scratch_len(self) -> usize {
        self.tasks() * self.t * self.t + self.q_len() + 2 * self.kv_len()
    }
}

impl Context {
    /// Causal grouped-query attention: q `[B, H, T, D]`, k and v
    /// `[B, KV, T, D]` with KV dividing H -> `[B, H, T, D]`. Query head h
    /// attends with kv head h / (H / KV); query t sees keys 0..=t; scores
    /// are scaled by 1/sqrt(D).
    pub fn attention_gqa(&mut self, q: Tensor, k: Tensor, v: Tensor) -> Result<Tensor> {
        const OP: &str = "attention_gqa";
        let (iq, ik, iv) = (
            self.resolve(OP, q)?,
            self.resolve(OP, k)?,
            self.resolve(OP, v)?,
        );
        let (sq, sk, sv) = (
            self.entry(iq).shape,
            self.entry(ik).shape,
            self.entry(iv).shape,
        );
        let fits = |q: &[usize], k: &[usize]| {
            q.len() == 4
                && k.len() == 4
                && q[0] == k[0]
                && q[2] == k[2]
                && q[3] == k[3]
                && q[3] > 0
                && k[1] > 0
                && q[1].is_multiple_of(k[1])
        };
        if sk != sv || !fits(sq.dims(), sk.dims()) {
            return Err(Error::BadShape {
                op: OP,
                what: format!(
                    "q {sq}, k {sk}, v {sv} must be [B, H, T, D], [B, KV, T, D] and \
                     [B, KV, T, D] with KV dividing H and D > 0"
                ),
            });
        }
        let dims = Dims::of(self, iq, ik);
        let tracks = self.tracks(&[iq, ik, iv]);
        // Written before read: the probabilities completely by the forward
        // pass, the scratch by backward (dP's live entries and dq by
        // products with beta = 0, dk and dv zeroed first).
        let extra = if tracks { dims.scratch_len() } else { 0 };
        let probs = self.alloc_scratchable::<f32>(OP, dims.probs_len() + extra)?;
        let out = self.push_output(OP, sq, tracks)?;
        let op = Op::AttentionGqa {
            q: iq,
            k: ik,
            v: iv,
            probs,
        };
        Ok(self.run(op, out))
    }
}

/// q, k, v -> out; the probabilities go to the front of `probs`.
pub(crate) fn forward_attention_gqa(ctx: &mut Context, out: u32, [q, k, v]: [u32; 3], probs: Buf) {
    let dims = Dims::of(ctx, q, k);
    let (t, d, g) = (dims.t, dims.d, dims.group());
    let n = dims.tasks();
    let par = n > 1 && ctx.want_pool(dims.work());
    let probs_only = Storage::sub(probs, 0, dims.probs_len());
    let [eq, ek, ev, eo] = [q, k, v, out].map(|i| ctx.entry(i));
    let (pool, [y, p], [q, k, v]) =
        ctx.access_on(par, [eo.data, probs_only], [eq.data, ek.data, ev.data]);
    // Each task owns its groups' rows of the output and the probabilities.
    let mut slots = {
        let groups = dims.groups();
        let (mut y, mut p) = (
            pieces(y, groups, n, g * t * d),
            pieces(p, groups, n, g * t * t),
        );
        std::array::from_fn::<_, MAX_ATTENTION_TASKS, _>(|i| {
            (std::mem::take(&mut y[i]), std::mem::take(&mut p[i]))
        })
    };
    let task = |i: usize, (y, p): &mut (&mut [f32], &mut [f32])| {
        let range = pool::task_range(dims.groups(), n, i);
        for (j, grp) in range.enumerate() {
            let q = &q[grp * g * t * d..][..g * t * d];
            let (k, v) = (&k[grp * t * d..][..t * d], &v[grp * t * d..][..t * d]);
            let y = &mut y[j * g * t * d..][..g * t * d];
            let p = &mut p[j * g * t * t..][..g * t * t];
            group_forward(y, p, q, k, v, t, d);
        }
    };
    run_tasks(pool, &mut slots[..n], &task);
}

/// One group: `y`, `q` and `p` hold its query heads (`[G, T, D]` and
/// `[G, T, T]`), `k` and `v` its kv head (`[T, D]`).
pub(super) fn group_forward(
    y: &mut [f32],
    p: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    d: usize,
) {
    let heads = y
        .chunks_exact_mut(t * d)
        .zip(p.chunks_exact_mut(t * t))
        .zip(q.chunks_exact(t * d));
    for ((y, p), q) in heads {
        head_forward(&mut Rows { out: y, ld: d }, p, q, k, v, t, d, dense(d));
    }
}

/// The layout of head-major `[T, D]` operands.
fn dense(d: usize) -> HeadLayout {
    HeadLayout {
        q: d,
        k: d,
        v: d,
        y: d,
    }
}

/// Computes dq, dk and dv, then adds each into its input's gradient: q, k
/// and v may be one tensor, and any of them may need none. A gradient not
/// yet written, of an input passed once, is computed in place (the kernels
/// write all of it); the rest go through the scratch after the
/// probabilities and are copied or added after.
pub(crate) fn backward_attention_gqa(ctx: &mut Context, out: u32, [q, k, v]: [u32; 3], probs: Buf) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let dims = Dims::of(ctx, q, k);
    let (t, d, g) = (dims.t, dims.d, dims.group());
    let n = dims.tasks();
    let par = n > 1 && ctx.want_pool(dims.work());
    let mut at = 0;
    let mut next = |len: usize| {
        let b = Storage::sub(probs, at, len);
        at += len;
        b
    };
    let (p_only, dp, scratch) = (
        next(dims.probs_len()),
        next(n * t * t),
        [next(dims.q_len()), next(dims.kv_len()), next(dims.kv_len())],
    );
    // Where each gradient is computed: in place (a fresh gradient of an
    // input passed once), else in its scratch, then copied or added by
    // `pending` (its gradient, taken here when the input is passed once).
    let ids = [q, k, v];
    let once = |i: usize| (0..3).all(|j| j == i || ids[j] != ids[i]);
    let (mut target, mut in_place) = (scratch, [false; 3]);
    let mut pending: [Option<Option<(Buf, bool)>>; 3] = [None; 3];
    for i in 0..3 {
        if !once(i) {
            continue;
        }
        match ctx.grad_to_overwrite(ids[i]) {
            Some((grad, true)) => (target[i], in_place[i]) = (grad, true),
            taken => pending[i] = Some(taken),
        }
    }
    let [eq, ek, ev] = [q, k, v].map(|i| ctx.entry(i));
    {
        let [dq, dk, dv] = target;
        let (pool, [dp, dqs, dks, dvs], [gy, p, qv, kv, vv]) = ctx.access_on(
            par,
            [dp, dq, dk, dv],
            [dout, p_only, eq.data, ek.data, ev.data],
        );
        let groups = dims.groups();
        let mut slots = {
            let mut dq = pieces(dqs, groups, n, g * t * d);
            let mut dk = pieces(dks, groups, n, t * d);
            let mut dv = pieces(dvs, groups, n, t * d);
            let mut dp = dp.chunks_exact_mut(t * t);
            std::array::from_fn::<_, MAX_ATTENTION_TASKS, _>(|i| GroupGrads {
                dq: std::mem::take(&mut dq[i]),
                dk: std::mem::take(&mut dk[i]),
                dv: std::mem::take(&mut dv[i]),
                dp: dp.next().unwrap_or_default(),
            })
        };
        let task = |i: usize, s: &mut GroupGrads| {
            let range = pool::task_range(groups, n, i);
            s.dk.fill(0.0);
            s.dv.fill(0.0);
            for (j, grp) in range.enumerate() {
                let heads = grp * g * t * d..(grp + 1) * g * t * d;
                let one = grp * t * d..(grp + 1) * t * d;
                let grads = GroupGrads {
                    dq: &mut s.dq[j * g * t * d..][..g * t * d],
                    dk: &mut s.dk[j * t * d..][..t * d],
                    dv: &mut s.dv[j * t * d..][..t * d],
                    dp: &mut *s.dp,
                };
                let saved = GroupSaved {
                    dy: &gy[heads.clone()],
                    p: &p[grp * g * t * t..][..g * t * t],
                    q: &qv[heads],
                    k: &kv[one.clone()],
                    v: &vv[one],
                };
                group_backward(grads, saved, t, d);
            }
        };
        run_tasks(pool, &mut slots[..n], &task);
    }
    for i in 0..3 {
        if in_place[i] {
            continue;
        }
        // One input at a time: a tensor passed twice takes both parts.
        let grad = match pending[i] {
            Some(taken) => taken,
            None => ctx.grad_to_overwrite(ids[i]),
        };
        if let Some((grad, fresh)) = grad {
            let ([grad], [s]) = ctx.access([grad], [scratch[i]]);
            if fresh {
                grad.copy_from_slice(s);
            } else {
                simd::dispatch!(grad.iter_mut().zip(s).for_each(|(g, &s)| *g += s));
            }
        }
    }
}

/// What one task writes: its groups' dq, dk and dv, and its dP scratch.
pub(super) struct GroupGrads<'a> {
    pub dq: &'a mut [f32],
    pub dk: &'a mut [f32],
    pub dv: &'a mut [f32],
    pub dp: &'a mut [f32],
}

/// What one group's backward reads: dout, the probabilities and q of its
/// query heads, its k and v.
pub(super) struct GroupSaved<'a> {
    pub dy: &'a [f32],
    pub p: &'a [f32],
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// One head's dq and its kv head's dk and dv, each `[T, D]`.
struct HeadMajor<'a> {
    dq: &'a mut [f32],
    dk: &'a mut [f32],
    dv: &'a mut [f32],
    d: usize,
}

impl HeadGrads for HeadMajor<'_> {
    fn gemm(&mut self, grad: Grad, row: usize, g: Gemm, a: &[f32], b: &[f32], beta: f32) {
        let out = match grad {
            Grad::Q => &mut *self.dq,
            Grad::K => &mut *self.dk,
            Grad::V => &mut *self.dv,
        };
        sgemm(g, 1.0, a, b, beta, &mut out[row * self.d..]);
    }
}

/// One group: dq of each query head (written), dk and dv of the kv head
/// (accumulated over the query heads in order).
pub(super) fn group_backward(s: GroupGrads, x: GroupSaved, t: usize, d: usize) {
    let GroupGrads { dq, dk, dv, dp } = s;
    let heads = dq
        .chunks_exact_mut(t * d)
        .zip(x.dy.chunks_exact(t * d))
        .zip(x.p.chunks_exact(t * t))
        .zip(x.q.chunks_exact(t * d));
    for (((dq, dy), p), q) in heads {
        let mut grads = HeadMajor {
            dq,
            dk: &mut *dk,
            dv: &mut *dv,
            d,
        };
        head_backward(&mut grads, dp, dy, p, [q, x.k, x.v], t, d, dense(d), 0.0);
    }
}

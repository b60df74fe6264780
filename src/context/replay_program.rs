//! A captured step's replay program: the fast path of [`Context::replay`]
//! for a step made of one-element ops (a scalar model: every op a binary,
//! unary, scale, pow or clamp op on one-element tensors).
//!
//! At capture end such a step's forward log and tape are resolved once
//! into flat lists of (op, operand rows), and its backward walk into what
//! the walk does that does not depend on values: which ops the loss's
//! gradient reaches, where each planned gradient is born, every gradient
//! slot's buffer and which rows need a gradient. A replay then runs the
//! same kernels (the one-element kernels of `ops::elementwise::scalar`,
//! which the eager paths also run) in the same order on the same buffers,
//! and keeps the walk's only value-independent state that changes, the
//! "born but not written" mark of each gradient slot, in its own list,
//! updated exactly as `backward` updates the table's: so the values are
//! the eager path's, bit for bit. What it skips is what capture already
//! settled: op dispatch, shape compares, the overlap checks of a kernel's
//! buffers (capture ran them on the same buffers) and the walk's flow and
//! table bookkeeping.
//!
//! Anything else takes the ordinary path: a step with another op, a view,
//! a retained activation gradient or a recomputed segment, a loss that
//! needs no gradient; and any replay while a gradient-ready callback is
//! set (the ordinary walk fires it) or a recompute segment is open, and
//! every replay in a build with op timing (feature `trace`).
//!
//! Buffers are reached through [`Storage`]'s checked accessors (live epoch
//! per access), so no unsafe code is needed. Parameter buffers are read
//! from the table at each replay, never cached: they move when the
//! gradient block is reallocated.

use super::Context;
use crate::arena::{Buf, Storage};
use crate::ops::{BinaryFn, OneOp, Op, UnaryFn};

/// The one-element kernels a program runs, given by the caller
/// (`ops::elementwise::scalar::ScalarKernels`, the ones the eager paths
/// run): the context's modules do not import the ops, which import them.
pub(crate) trait OneKernels {
    /// The output of `op` on one element (`y` read by binary ops only).
    fn forward(op: OneOp, x: f32, y: f32) -> f32;
    /// `dx` after the backward kernel of a unary, scale, pow or clamp op.
    fn backward(op: OneOp, assign: bool, dx: f32, g: f32, x: f32, y: f32) -> f32;
    /// `d` after `add_scaled_into` on one element.
    fn add_scaled(d: f32, g: f32, s: f32, assign: bool) -> f32;
    /// What a binary op adds to its first operand's gradient.
    fn grad_a(f: BinaryFn, g: f32, a: f32, b: f32) -> f32;
    /// What a binary op adds to its second operand's gradient.
    fn grad_b(f: BinaryFn, g: f32, a: f32, b: f32) -> f32;
}
use crate::tape::Node;

/// One recorded op: its kind and table rows (`b` is `a` for one-input ops).
#[derive(Clone, Copy)]
struct Step1 {
    op: OneOp,
    out: u32,
    a: u32,
    b: u32,
    /// Backward: a and b have the output's shape (the binary add/sub path).
    same: bool,
    /// Backward: the loss's gradient reaches this op's output.
    runs: bool,
}

/// A step's program (see the module docs).
pub(super) struct Program {
    fwd: Vec<Step1>,
    /// The tape, in tape order (walked in reverse).
    bwd: Vec<Step1>,
    /// The plan's births in walk order: (position, row).
    births: Vec<(u32, u32)>,
    /// Gradient slot of every row (activations from the plan's region;
    /// parameters refreshed from the table at each replay).
    grads: Vec<Option<Buf>>,
    /// Whether each row needs a gradient.
    needs: Vec<bool>,
    /// The walk's "born, not written yet" marks, by row.
    unzeroed: Vec<bool>,
    loss: u32,
    n_params: usize,
}

/// The kind and operand rows of an op the program covers.
fn one_op(op: Op) -> Option<(OneOp, u32, u32)> {
    match op {
        Op::Binary { a, b, f } => Some((OneOp::Binary(f), a, b)),
        Op::Unary { x, f } => Some((OneOp::Unary(f), x, x)),
        Op::Scale { x, s } => Some((OneOp::Scale(s), x, x)),
        Op::Pow { x, p } => Some((OneOp::Pow(p), x, x)),
        Op::Clamp { x, lo, hi } => Some((OneOp::Clamp(lo, hi), x, x)),
        _ => None,
    }
}

/// A vector of `n` copies of `v`, or None if it cannot be allocated.
fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

impl Program {
    /// The program of the step `ctx` just captured (its table, tape and
    /// plan are current), or None if the step needs the ordinary path or
    /// its program cannot be allocated (replay is then the ordinary one).
    pub(super) fn build(
        ctx: &Context,
        log: &[Node],
        region: Option<Buf>,
        loss: u32,
    ) -> Option<Box<Program>> {
        // Op timing (feature `trace`) lives in the dispatch: keep it whole.
        if cfg!(feature = "trace") {
            return None;
        }
        let region = region?;
        let rows = &ctx.table;
        let n_params = ctx.n_params;
        if !rows[loss as usize].requires_grad
            || !ctx.recompute.segments_snapshot().is_empty()
            || rows
                .iter()
                .enumerate()
                .any(|(i, e)| e.view_of.is_some() || (i >= n_params && e.retain))
        {
            return None;
        }
        let numel = |id: u32| rows[id as usize].shape.numel();
        let resolve = |n: &Node| {
            let (op, a, b) = one_op(n.op)?;
            if numel(n.out) != 1 || numel(a) != 1 || numel(b) != 1 {
                return None;
            }
            let so = rows[n.out as usize].shape;
            let same = rows[a as usize].shape == so && rows[b as usize].shape == so;
            Some(Step1 {
                op,
                out: n.out,
                a,
                b,
                same,
                runs: false,
            })
        };
        let list = |nodes: &[Node]| -> Option<Vec<Step1>> {
            let mut v = Vec::new();
            v.try_reserve_exact(nodes.len()).ok()?;
            for n in nodes {
                v.push(resolve(n)?);
            }
            Some(v)
        };
        let fwd = list(log)?;
        let mut bwd = list(&ctx.tape)?;
        // The flow of the loss's gradient depends on the graph only.
        let mut flow = filled(rows.len(), false)?;
        flow[loss as usize] = true;
        for s in bwd.iter_mut().rev() {
            if flow[s.out as usize] {
                s.runs = true;
                flow[s.a as usize] = true;
                flow[s.b as usize] = true;
            }
        }
        let mut births = Vec::new();
        births.try_reserve_exact(ctx.plan.births_len()).ok()?;
        births.extend((0..ctx.plan.births_len()).map(|k| ctx.plan.birth(k)));
        let mut grads = filled(rows.len(), None)?;
        for (t, offset, len) in ctx.plan.slots() {
            grads[t as usize] = Some(Storage::sub(region, offset, len));
        }
        let mut needs = filled(rows.len(), false)?;
        for (n, e) in needs.iter_mut().zip(rows) {
            *n = e.requires_grad;
        }
        Some(Box::new(Program {
            fwd,
            bwd,
            births,
            grads,
            needs,
            unzeroed: filled(rows.len(), false)?,
            loss,
            n_params,
        }))
    }

    // The walk's gradient accessors, as `Context::grad_out`, `grad_of` and
    // `grad_to_overwrite` (no views: a row is its own root).

    fn settle(&mut self, ctx: &mut Context, id: u32) {
        if std::mem::take(&mut self.unzeroed[id as usize])
            && let Some(g) = self.grads[id as usize]
        {
            ctx.store.access_one(g).fill(0.0);
        }
    }

    fn grad_out(&mut self, ctx: &mut Context, id: u32) -> Option<Buf> {
        self.settle(ctx, id);
        self.grads[id as usize]
    }

    fn grad_of(&mut self, ctx: &mut Context, id: u32) -> Option<Buf> {
        if !self.needs[id as usize] {
            return None;
        }
        self.grad_out(ctx, id)
    }

    fn grad_to_overwrite(&mut self, id: u32) -> Option<(Buf, bool)> {
        if !self.needs[id as usize] {
            return None;
        }
        let fresh = std::mem::take(&mut self.unzeroed[id as usize]);
        self.grads[id as usize].map(|g| (g, fresh))
    }

    /// As `Context::mark_births`.
    fn mark_births(&mut self, next: &mut usize, at: u32) {
        while let Some(&(pos, t)) = self.births.get(*next) {
            if pos < at {
                break;
            }
            if self.grads[t as usize].is_some() {
                self.unzeroed[t as usize] = true;
            }
            *next += 1;
        }
    }

    /// One op's backward, as its eager one-element path.
    fn backward<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1) {
        let data = |ctx: &Context, id: u32| ctx.store.read(ctx.table[id as usize].data)[0];
        match s.op {
            OneOp::Binary(f) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                if matches!(f, BinaryFn::Add | BinaryFn::Sub) && s.same {
                    let sign = if f == BinaryFn::Sub { -1.0 } else { 1.0 };
                    let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
                    for (grad, k) in [(ga, 1.0), (gb, sign)] {
                        if let Some((d, fresh)) = grad {
                            let g = ctx.store.read(dout)[0];
                            let d = &mut ctx.store.access_one(d)[0];
                            *d = K::add_scaled(*d, g, k, fresh);
                        }
                    }
                    return;
                }
                if let Some(da) = self.grad_of(ctx, s.a) {
                    let (g, a, b) = (ctx.store.read(dout)[0], data(ctx, s.a), data(ctx, s.b));
                    ctx.store.access_one(da)[0] += K::grad_a(f, g, a, b);
                }
                if let Some(db) = self.grad_of(ctx, s.b) {
                    let (g, a, b) = (ctx.store.read(dout)[0], data(ctx, s.a), data(ctx, s.b));
                    ctx.store.access_one(db)[0] += K::grad_b(f, g, a, b);
                }
            }
            OneOp::Unary(f) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some((dx, fresh)) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                let assign = fresh && f == UnaryFn::Gelu;
                let (g, x, y) = (ctx.store.read(dout)[0], data(ctx, s.a), data(ctx, s.out));
                let d = &mut ctx.store.access_one(dx)[0];
                if fresh && !assign {
                    *d = 0.0;
                }
                *d = K::backward(s.op, assign, *d, g, x, y);
            }
            OneOp::Scale(_) | OneOp::Pow(_) | OneOp::Clamp(..) => {
                // Both looked up, in this order, as the eager path does.
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let (g, x) = (ctx.store.read(dout)[0], data(ctx, s.a));
                let d = &mut ctx.store.access_one(dx)[0];
                *d = K::backward(s.op, false, *d, g, x, x);
            }
        }
    }

    /// The step's forward and its backward from the loss.
    fn run<K: OneKernels>(&mut self, ctx: &mut Context) {
        for s in &self.fwd {
            let x = ctx.store.read(ctx.table[s.a as usize].data)[0];
            let y = ctx.store.read(ctx.table[s.b as usize].data)[0];
            let v = K::forward(s.op, x, y);
            ctx.store.access_one(ctx.table[s.out as usize].data)[0] = v;
        }
        let n_params = self.n_params;
        for i in 0..n_params {
            self.grads[i] = ctx.table[i].grad;
            self.needs[i] = ctx.table[i].requires_grad;
            self.unzeroed[i] = ctx.table[i].unzeroed;
        }
        // The previous walk left every activation's mark clear.
        self.unzeroed[n_params..].fill(false);
        let n = self.bwd.len() as u32;
        let mut born = 0;
        self.mark_births(&mut born, n);
        if let Some(g) = self.grad_out(ctx, self.loss) {
            ctx.store.access_one(g)[0] += 1.0;
        }
        for i in (0..n).rev() {
            self.mark_births(&mut born, i);
            let s = self.bwd[i as usize];
            if s.runs {
                self.backward::<K>(ctx, s);
            }
        }
        // As the walk's end: parameters' slots settled, marks cleared.
        for i in 0..n_params {
            self.settle(ctx, i as u32);
            ctx.table[i].unzeroed = false;
        }
        ctx.backward_done = true;
        ctx.set_grads_pending(true);
    }
}

impl Context {
    /// Replays resident step `k` through its program, if it has one and no
    /// gradient-ready callback or open recompute segment asks for the
    /// ordinary path; false (nothing done) otherwise.
    pub(crate) fn replay_program<K: OneKernels>(&mut self, k: usize) -> bool {
        if !self.grad_ready().idle() || self.check_no_open_segment("replay").is_err() {
            return false;
        }
        let Some(mut program) = self.capture.program(k).and_then(Option::take) else {
            return false;
        };
        program.run::<K>(self);
        if let Some(slot) = self.capture.program(k) {
            *slot = Some(program);
        }
        true
    }

    /// Whether captured step `s` has a replay program (tests of the fast
    /// path).
    #[cfg(test)]
    pub(crate) fn step_has_program(&mut self, s: super::Step) -> bool {
        self.capture
            .program(s.index as usize)
            .is_some_and(|p| p.is_some())
    }
}

#[cfg(test)]
mod tests {
    use crate::context::{Context, Tensor};

    /// A scalar model with every op the program covers, shared operands
    /// (a * a, a parameter read by many ops), broadcast one-element shapes
    /// ([1] with [1, 1]) and an input slot `x`.
    fn model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
        let (a, b, w) = (p[0], p[1], p[2]);
        let mut h = c.mul(a, x).unwrap();
        for k in 0..4 {
            let sq = c.mul(a, a).unwrap();
            let z = c.add(h, sq).unwrap();
            let z = c.sub(z, b).unwrap();
            let t = c.tanh(z).unwrap();
            let e = c.exp(t).unwrap();
            let d = c.div(e, w).unwrap(); // [1, 1] from [1] and [1, 1]
            let m = c.maximum(d, x).unwrap();
            let n = c.minimum(m, b).unwrap();
            let s = c.scale(n, 0.5 + k as f32).unwrap();
            let q = c.pow(s, 2.0).unwrap();
            let l = c.clamp(q, -3.0, 3.0).unwrap();
            let g = c.neg(l).unwrap();
            h = c.add(g, h).unwrap();
        }
        let y = c.sub(h, x).unwrap();
        c.mul(y, y).unwrap()
    }

    fn bits(c: &Context, p: &[Tensor], loss: Tensor) -> Vec<u32> {
        let mut out = vec![c.item(loss).unwrap().to_bits()];
        for &t in p {
            let mut g = vec![0.0; 1];
            c.read_grad(t, &mut g).unwrap();
            out.push(g[0].to_bits());
        }
        out
    }

    fn params(c: &mut Context, single_thread: bool) -> Vec<Tensor> {
        // Kept on this thread, or free to use the worker (one-element
        // kernels never do, but the walk must not depend on it either).
        c.pool_failed = single_thread;
        vec![
            c.param(&[1], Some(&[0.7])).unwrap(),
            c.param(&[1], Some(&[-0.2])).unwrap(),
            c.param(&[1, 1], Some(&[1.3])).unwrap(),
        ]
    }

    /// The program runs (the step has one) and gives the eager path's
    /// bits over replays with new inputs, with and without zero_grad in
    /// between (gradients accumulate across replays as across eager
    /// iterations), on 1 and 2 threads.
    #[test]
    fn program_replay_matches_eager_bit_for_bit() {
        for single_thread in [true, false] {
            let (mut eager, mut rep) = (Context::new(), Context::new());
            let (pe, pr) = (
                params(&mut eager, single_thread),
                params(&mut rep, single_thread),
            );
            rep.capture_begin().unwrap();
            let xi = rep.input_new(&[1]).unwrap();
            rep.input_write(xi, &[0.25]).unwrap();
            let loss_r = model(&mut rep, &pr, xi);
            rep.backward(loss_r).unwrap();
            let step = rep.capture_end(loss_r).unwrap();
            assert!(rep.step_has_program(step));
            eager.zero_grad();
            rep.zero_grad();
            for i in 0..12u32 {
                let xv = [0.25 + 0.37 * i as f32 - 0.05 * (i * i) as f32];
                if i % 3 != 2 {
                    eager.zero_grad();
                    rep.zero_grad();
                }
                eager.reset();
                let xe = eager.tensor(&[1], &xv).unwrap();
                let loss_e = model(&mut eager, &pe, xe);
                eager.backward(loss_e).unwrap();
                rep.input_write(xi, &xv).unwrap();
                rep.replay(step).unwrap();
                let (be, br) = (bits(&eager, &pe, loss_e), bits(&rep, &pr, loss_r));
                assert_eq!(be, br, "replay {i} x {xv:?} single {single_thread}");
            }
            // A replay that kept the old input would differ: the check bites.
            rep.zero_grad();
            rep.replay(step).unwrap();
            let stale = bits(&rep, &pr, loss_r);
            rep.zero_grad();
            rep.input_write(xi, &[1.5]).unwrap();
            rep.replay(step).unwrap();
            assert_ne!(stale, bits(&rep, &pr, loss_r));
        }
    }

    /// Events a gradient-ready callback saw: (first float, gradient bits)
    /// per ready bucket, `usize::MAX` per tick.
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(usize, Vec<u32>)>>>;

    fn watch(c: &mut Context) -> Seen {
        use crate::grad_ready::GradEvent;
        let seen = Seen::default();
        let log = seen.clone();
        let cb = move |e: GradEvent<'_>| {
            let ev = match e {
                GradEvent::Ready { first, grads } => {
                    (first, grads.iter().map(|g| g.to_bits()).collect())
                }
                GradEvent::Tick => (usize::MAX, Vec::new()),
            };
            log.lock().unwrap().push(ev);
        };
        c.set_grad_ready(0, Some(Box::new(cb))).unwrap();
        seen
    }

    /// With a gradient-ready callback set, a replay takes the ordinary
    /// walk: the callback sees what it sees in the eager backward.
    #[test]
    fn grad_ready_callback_fires_as_eager() {
        let (mut eager, mut rep) = (Context::new(), Context::new());
        let (pe, pr) = (params(&mut eager, true), params(&mut rep, true));
        rep.capture_begin().unwrap();
        let xi = rep.input_new(&[1]).unwrap();
        let loss_r = model(&mut rep, &pr, xi);
        rep.backward(loss_r).unwrap();
        let step = rep.capture_end(loss_r).unwrap();
        let (se, sr) = (watch(&mut eager), watch(&mut rep));
        for i in 0..3 {
            let xv = [0.4 - 0.3 * i as f32];
            eager.reset();
            eager.zero_grad();
            let xe = eager.tensor(&[1], &xv).unwrap();
            let loss_e = model(&mut eager, &pe, xe);
            eager.backward(loss_e).unwrap();
            rep.input_write(xi, &xv).unwrap();
            rep.zero_grad();
            rep.replay(step).unwrap();
            assert_eq!(bits(&eager, &pe, loss_e), bits(&rep, &pr, loss_r));
        }
        let (se, sr) = (se.lock().unwrap().clone(), sr.lock().unwrap().clone());
        assert!(se.iter().filter(|e| e.0 != usize::MAX).count() >= 3 * pe.len());
        assert_eq!(se, sr);
    }

    /// A step with an op on more than one element has no program (its
    /// replay is the ordinary one).
    #[test]
    fn other_steps_have_no_program() {
        let mut c = Context::new();
        let w = c.param(&[3], Some(&[1.0, 2.0, 3.0])).unwrap();
        c.capture_begin().unwrap();
        let t = c.tanh(w).unwrap();
        let loss = c.sum(t).unwrap();
        c.backward(loss).unwrap();
        let step = c.capture_end(loss).unwrap();
        assert!(!c.step_has_program(step));
        c.replay(step).unwrap();
    }
}

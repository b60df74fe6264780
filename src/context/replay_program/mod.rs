//! A captured step's replay program: the fast path of [`Context::replay`]
//! for a step made of small ops: one-element ops (a scalar model: binary,
//! unary, scale, pow or clamp ops on one-element tensors), the same
//! element-wise ops on a few elements (at most [`MAXN`], broadcasting
//! included), sums and means over all elements, and slices.
//!
//! At capture end such a step's forward log and tape are resolved once
//! into flat lists of (op, operand rows), and its backward walk into what
//! the walk does that does not depend on values: which ops the loss's
//! gradient reaches, where each planned gradient is born, every gradient
//! slot's buffer and which rows need a gradient. A binary op on several
//! elements keeps, per output element, the element of each operand it
//! reads (its broadcast, resolved once). A replay then runs the same
//! kernels (the element kernels of `ops::elementwise::scalar`, the sum and
//! slice kernels, which the eager paths also run) in the same order on the
//! same buffers, element by element in the eager loops' order (so a
//! broadcast operand's gradient sums in the same order), and keeps the
//! walk's only value-independent state that changes, the "born but not
//! written" mark of each gradient slot, in its own list, updated exactly
//! as `backward` updates the table's: so the values are the eager path's,
//! bit for bit. What it skips is what capture already settled: op
//! dispatch, shape compares and broadcast strides, the overlap checks of a
//! kernel's buffers (capture ran them on the same buffers) and the walk's
//! flow and table bookkeeping.
//!
//! Anything else takes the ordinary path: a step with another op or a
//! larger element-wise op, a view, a retained activation gradient or a
//! recomputed segment, a loss that needs no gradient; and any replay while
//! a gradient-ready callback is set (the ordinary walk fires it) or a
//! recompute segment is open, and every replay in a build with op timing
//! (feature `trace`).
//!
//! Buffers are reached through [`Storage`]'s checked accessors (live epoch
//! per access), so no unsafe code is needed. Parameter buffers are read
//! from the table at each replay, never cached: they move when the
//! gradient block is reallocated.

use super::Context;
use crate::arena::{Buf, Storage};
use crate::ops::{BinaryFn, OneOp, Op, UnaryFn};
use crate::shape::Shape;

/// The element kernels a program runs, given by the caller
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
    /// The sum (or mean) of `x`, as the eager reduce.
    fn sum(x: &[f32], mean: bool) -> f32;
    /// The eager reduce's backward: `dx += g` (or `g / N`).
    fn sum_backward(dx: &mut [f32], g: f32, mean: bool);
    /// The eager slice's forward: `y[o, ..] = x[o, off..off + len]`.
    fn slice(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize);
    /// The eager slice's backward: `dx[o, off..off + len] += dout[o, ..]`.
    fn slice_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize);
}
use crate::tape::Node;

/// The most elements of an element-wise op a program runs (its
/// broadcast indices are bytes); larger ones take the ordinary path.
pub(crate) const MAXN: usize = 16;

/// What a recorded op does, resolved at capture.
#[derive(Clone, Copy)]
enum Kind {
    /// Every operand one element.
    One(OneOp),
    /// A unary, scale, pow or clamp op on up to [`MAXN`] elements.
    Map(OneOp),
    /// A binary op on up to [`MAXN`] output elements; its operands'
    /// element indices are `Program::bcast[.2]`.
    Bin(BinaryFn, u32),
    /// Sum (false) or mean (true) of all elements.
    Sum(bool),
    /// A slice: rows of `row` input elements, `len` taken from `off`.
    Slice { row: u32, off: u32, len: u32 },
}

/// One recorded op: its kind and table rows (`b` is `a` for one-input ops).
#[derive(Clone, Copy)]
struct Step1 {
    op: Kind,
    out: u32,
    a: u32,
    b: u32,
    /// Backward: a and b have the output's shape (the binary add/sub path).
    same: bool,
    /// Backward: the loss's gradient reaches this op's output.
    runs: bool,
}

/// A binary op's broadcast: per output element, the element of `a` and
/// of `b` it reads, in output order.
#[derive(Clone, Copy)]
struct Bcast {
    n: u8,
    ia: [u8; MAXN],
    ib: [u8; MAXN],
}

/// A table row as the program reads it: the row's buffer and gradient
/// slot (activations' from the plan's region), whether it needs a
/// gradient, and the walk's "born, not written yet" mark. A quarter of
/// the table's row, so a walk touches fewer cache lines.
#[derive(Clone, Copy)]
struct Row {
    data: Buf,
    grad: Option<Buf>,
    needs: bool,
    unzeroed: bool,
}

/// A step's program (see the module docs).
pub(super) struct Program {
    fwd: Vec<Step1>,
    /// The tape, in tape order (walked in reverse).
    bwd: Vec<Step1>,
    /// The broadcasts of the binary ops on several elements.
    bcast: Vec<Bcast>,
    /// The plan's births in walk order: (position, row).
    births: Vec<(u32, u32)>,
    /// What the walk reads of every table row, dense (parameters'
    /// refreshed from the table at each replay).
    rows: Vec<Row>,
    loss: u32,
    n_params: usize,
}

/// The kind and operand rows of an element-wise op the program covers.
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

/// Per element of `so`, the element of `sa` and of `sb` it reads (the
/// strides of the eager broadcast loops); `so` has at most [`MAXN`].
fn broadcast(so: Shape, sa: Shape, sb: Shape) -> Bcast {
    let (ta, tb) = (sa.broadcast_strides(&so), sb.broadcast_strides(&so));
    let dims = so.dims();
    let mut out = Bcast {
        n: so.numel() as u8,
        ia: [0; MAXN],
        ib: [0; MAXN],
    };
    for o in 0..so.numel() {
        let (mut rest, mut ia, mut ib) = (o, 0, 0);
        for d in (0..dims.len()).rev() {
            let i = rest % dims[d];
            rest /= dims[d];
            ia += i * ta[d];
            ib += i * tb[d];
        }
        // Both below MAXN (each operand has at most the output's elements).
        out.ia[o] = ia as u8;
        out.ib[o] = ib as u8;
    }
    out
}

/// `body(f)` with `f` a constant in each arm: the element kernels' match
/// on it then folds away inside the loops.
#[inline(always)]
fn with_fn(f: BinaryFn, mut body: impl FnMut(BinaryFn)) {
    match f {
        BinaryFn::Add => body(BinaryFn::Add),
        BinaryFn::Sub => body(BinaryFn::Sub),
        BinaryFn::Mul => body(BinaryFn::Mul),
        BinaryFn::Div => body(BinaryFn::Div),
        BinaryFn::Max => body(BinaryFn::Max),
        BinaryFn::Min => body(BinaryFn::Min),
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
        let shape = |id: u32| rows[id as usize].shape;
        let mut bcast = Vec::new();
        let mut resolve = |n: &Node| {
            let so = shape(n.out);
            let (op, a, b) = match n.op {
                Op::Reduce { x, mean } => (Kind::Sum(mean), x, x),
                Op::Slice { x, axis, start } => {
                    let sx = shape(x);
                    let dims = sx.dims();
                    let axis = axis as usize;
                    let inner: usize = dims[axis + 1..].iter().product();
                    let len = so.dims()[axis] * inner;
                    // Within MAX_ELEMENTS < 2^31: fits.
                    let op = Kind::Slice {
                        row: (dims[axis] * inner) as u32,
                        off: (start as usize * inner) as u32,
                        len: len as u32,
                    };
                    (op, x, x)
                }
                op => {
                    let (op, a, b) = one_op(op)?;
                    let n_out = so.numel();
                    let kind = if n_out == 1 && shape(a).numel() == 1 && shape(b).numel() == 1 {
                        Kind::One(op)
                    } else if n_out > MAXN {
                        return None;
                    } else if let OneOp::Binary(f) = op {
                        if bcast.try_reserve(1).is_err() {
                            return None;
                        }
                        bcast.push(broadcast(so, shape(a), shape(b)));
                        Kind::Bin(f, bcast.len() as u32 - 1)
                    } else {
                        Kind::Map(op)
                    };
                    (kind, a, b)
                }
            };
            let same = shape(a) == so && shape(b) == so;
            Some(Step1 {
                op,
                out: n.out,
                a,
                b,
                same,
                runs: false,
            })
        };
        let mut list = |nodes: &[Node]| -> Option<Vec<Step1>> {
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
        let mut dense = Vec::new();
        dense.try_reserve_exact(rows.len()).ok()?;
        dense.extend(rows.iter().map(|e| Row {
            data: e.data,
            grad: None,
            needs: e.requires_grad,
            unzeroed: false,
        }));
        for (t, offset, len) in ctx.plan.slots() {
            dense[t as usize].grad = Some(Storage::sub(region, offset, len));
        }
        Some(Box::new(Program {
            fwd,
            bwd,
            bcast,
            births,
            rows: dense,
            loss,
            n_params,
        }))
    }

    // The walk's gradient accessors, as `Context::grad_out`, `grad_of` and
    // `grad_to_overwrite` (no views: a row is its own root).

    #[inline(always)]
    fn settle(&mut self, ctx: &mut Context, id: u32) {
        let row = &mut self.rows[id as usize];
        if std::mem::take(&mut row.unzeroed)
            && let Some(g) = row.grad
        {
            ctx.store.access_one(g).fill(0.0);
        }
    }

    #[inline(always)]
    fn grad_out(&mut self, ctx: &mut Context, id: u32) -> Option<Buf> {
        self.settle(ctx, id);
        self.rows[id as usize].grad
    }

    #[inline(always)]
    fn grad_of(&mut self, ctx: &mut Context, id: u32) -> Option<Buf> {
        if !self.rows[id as usize].needs {
            return None;
        }
        self.grad_out(ctx, id)
    }

    #[inline(always)]
    fn grad_to_overwrite(&mut self, id: u32) -> Option<(Buf, bool)> {
        let row = &mut self.rows[id as usize];
        if !row.needs {
            return None;
        }
        let fresh = std::mem::take(&mut row.unzeroed);
        row.grad.map(|g| (g, fresh))
    }

    /// As `Context::mark_births`.
    fn mark_births(&mut self, next: &mut usize, at: u32) {
        while let Some(&(pos, t)) = self.births.get(*next) {
            if pos < at {
                break;
            }
            let row = &mut self.rows[t as usize];
            if row.grad.is_some() {
                row.unzeroed = true;
            }
            *next += 1;
        }
    }

    /// One op's forward, as its eager path.
    #[inline(always)]
    fn forward<K: OneKernels>(ctx: &mut Context, rows: &[Row], bcast: &[Bcast], s: Step1) {
        let data = |id: u32| rows[id as usize].data;
        match s.op {
            Kind::One(op) => {
                let x = ctx.store.read(data(s.a))[0];
                let y = ctx.store.read(data(s.b))[0];
                let v = K::forward(op, x, y);
                ctx.store.access_one(data(s.out))[0] = v;
            }
            Kind::Map(op) => {
                let ([y], [x]) = ctx.store.access([data(s.out)], [data(s.a)]);
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = K::forward(op, x, x);
                }
            }
            Kind::Bin(f, k) => {
                let m = &bcast[k as usize];
                let (o, a, b) = (data(s.out), data(s.a), data(s.b));
                let ([o], [a, b]) = ctx.store.access([o], [a, b]);
                with_fn(f, |f| {
                    for i in 0..m.n as usize {
                        let (x, y) = (a[m.ia[i] as usize], b[m.ib[i] as usize]);
                        o[i] = K::forward(OneOp::Binary(f), x, y);
                    }
                });
            }
            Kind::Sum(mean) => {
                let v = K::sum(ctx.store.read(data(s.a)), mean);
                ctx.store.access_one(data(s.out))[0] = v;
            }
            Kind::Slice { row, off, len } => {
                let (y, x) = (data(s.out), data(s.a));
                let ([y], [x]) = ctx.store.access([y], [x]);
                K::slice(y, x, row as usize, off as usize, len as usize);
            }
        }
    }

    /// The backward of a binary op on several elements, as the eager
    /// broadcast loops: one operand at a time, in output order.
    fn backward_bin<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1, f: BinaryFn, k: u32) {
        let m = self.bcast[k as usize];
        let Some(dout) = self.grad_out(ctx, s.out) else {
            return;
        };
        if matches!(f, BinaryFn::Add | BinaryFn::Sub) && s.same {
            let sign = if f == BinaryFn::Sub { -1.0 } else { 1.0 };
            let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
            for (grad, k) in [(ga, 1.0), (gb, sign)] {
                if let Some((d, fresh)) = grad {
                    let ([d], [g]) = ctx.store.access([d], [dout]);
                    for (d, &g) in d.iter_mut().zip(g) {
                        *d = K::add_scaled(*d, g, k, fresh);
                    }
                }
            }
            return;
        }
        let (va, vb) = (self.rows[s.a as usize].data, self.rows[s.b as usize].data);
        if let Some(da) = self.grad_of(ctx, s.a) {
            let ([d], [g, a, b]) = ctx.store.access([da], [dout, va, vb]);
            with_fn(f, |f| {
                // dout has the output's m.n elements.
                for (o, &g) in g.iter().enumerate() {
                    let (i, j) = (m.ia[o] as usize, m.ib[o] as usize);
                    d[i] += K::grad_a(f, g, a[i], b[j]);
                }
            });
        }
        if let Some(db) = self.grad_of(ctx, s.b) {
            let ([d], [g, a, b]) = ctx.store.access([db], [dout, va, vb]);
            with_fn(f, |f| {
                // dout has the output's m.n elements.
                for (o, &g) in g.iter().enumerate() {
                    let (i, j) = (m.ia[o] as usize, m.ib[o] as usize);
                    d[j] += K::grad_b(f, g, a[i], b[j]);
                }
            });
        }
    }

    /// One op's backward, as its eager path.
    #[inline(always)]
    fn backward<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1) {
        let buf = |p: &Self, id: u32| p.rows[id as usize].data;
        let data = |p: &Self, ctx: &Context, id: u32| ctx.store.read(buf(p, id))[0];
        match s.op {
            Kind::One(OneOp::Binary(f)) => {
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
                    let (g, a, b) = (
                        ctx.store.read(dout)[0],
                        data(self, ctx, s.a),
                        data(self, ctx, s.b),
                    );
                    ctx.store.access_one(da)[0] += K::grad_a(f, g, a, b);
                }
                if let Some(db) = self.grad_of(ctx, s.b) {
                    let (g, a, b) = (
                        ctx.store.read(dout)[0],
                        data(self, ctx, s.a),
                        data(self, ctx, s.b),
                    );
                    ctx.store.access_one(db)[0] += K::grad_b(f, g, a, b);
                }
            }
            Kind::One(op @ OneOp::Unary(f)) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some((dx, fresh)) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                let assign = fresh && f == UnaryFn::Gelu;
                let (g, x, y) = (
                    ctx.store.read(dout)[0],
                    data(self, ctx, s.a),
                    data(self, ctx, s.out),
                );
                let d = &mut ctx.store.access_one(dx)[0];
                if fresh && !assign {
                    *d = 0.0;
                }
                *d = K::backward(op, assign, *d, g, x, y);
            }
            Kind::One(op) => {
                // Scale, pow, clamp. Both looked up, in this order, as the
                // eager path does.
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let (g, x) = (ctx.store.read(dout)[0], data(self, ctx, s.a));
                let d = &mut ctx.store.access_one(dx)[0];
                *d = K::backward(op, false, *d, g, x, x);
            }
            Kind::Map(op @ OneOp::Unary(f)) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some((dx, fresh)) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                let assign = fresh && f == UnaryFn::Gelu;
                let (x, y) = (buf(self, s.a), buf(self, s.out));
                let ([d], [g, x, y]) = ctx.store.access([dx], [dout, x, y]);
                if fresh && !assign {
                    d.fill(0.0);
                }
                for (i, d) in d.iter_mut().enumerate() {
                    *d = K::backward(op, assign, *d, g[i], x[i], y[i]);
                }
            }
            Kind::Map(op) => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let x = buf(self, s.a);
                let ([d], [g, x]) = ctx.store.access([dx], [dout, x]);
                for (i, d) in d.iter_mut().enumerate() {
                    *d = K::backward(op, false, *d, g[i], x[i], x[i]);
                }
            }
            Kind::Bin(f, k) => self.backward_bin::<K>(ctx, s, f, k),
            Kind::Sum(mean) => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let g = ctx.store.read(dout)[0];
                K::sum_backward(ctx.store.access_one(dx), g, mean);
            }
            Kind::Slice { row, off, len } => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let ([dx], [g]) = ctx.store.access([dx], [dout]);
                K::slice_backward(dx, g, row as usize, off as usize, len as usize);
            }
        }
    }

    /// The step's forward and its backward from the loss.
    fn run<K: OneKernels>(&mut self, ctx: &mut Context) {
        for &s in &self.fwd {
            Self::forward::<K>(ctx, &self.rows, &self.bcast, s);
        }
        let n_params = self.n_params;
        for (row, e) in self.rows.iter_mut().zip(&ctx.table[..n_params]) {
            *row = Row {
                data: e.data,
                grad: e.grad,
                needs: e.requires_grad,
                unzeroed: e.unzeroed,
            };
        }
        // The previous walk left every activation's mark clear.
        for row in &mut self.rows[n_params..] {
            row.unzeroed = false;
        }
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
mod tests;

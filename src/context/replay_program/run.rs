//! Running a step's program: the same kernels as the eager paths, in the
//! same order on the same buffers, without the dispatch or the walk's
//! bookkeeping. Its own room: the per-replay hot path, kept apart from
//! what capture settles once.

use super::{Kind, OneKernels, Program, Row, Side, Step1};
use crate::arena::Buf;
use crate::context::Context;
use crate::ops::{BinaryFn, OneOp};

impl Program {
    // The walk's gradient accessors, as `Context::grad_out`, `grad_of` and
    // `grad_to_overwrite` (no views: a row is its own root).

    #[inline(always)]
    fn settle(&mut self, ctx: &mut Context, id: u32) {
        let row = &mut self.rows[id as usize];
        if std::mem::take(&mut row.unzeroed)
            && let Some(g) = row.grad
        {
            crate::kernels::zero(ctx.access_one(g));
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
    pub(super) fn forward<K: OneKernels>(ctx: &mut Context, rows: &[Row], side: &Side, s: Step1) {
        let data = |id: u32| rows[id as usize].data;
        match s.op {
            Kind::One(op) => {
                let x = ctx.read_only(data(s.a))[0];
                let y = ctx.read_only(data(s.b))[0];
                let v = K::forward(op, x, y);
                ctx.access_one(data(s.out))[0] = v;
            }
            Kind::Map(op) => {
                let ([y], [x]) = ctx.access([data(s.out)], [data(s.a)]);
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = K::forward(op, x, x);
                }
            }
            Kind::Bin(f, k) => {
                let m = &side.bcast[k as usize];
                let (o, a, b) = (data(s.out), data(s.a), data(s.b));
                let ([o], [a, b]) = ctx.access([o], [a, b]);
                f.with_const(|f| {
                    for i in 0..m.n as usize {
                        let (x, y) = (a[m.ia[i] as usize], b[m.ib[i] as usize]);
                        o[i] = K::forward(OneOp::Binary(f), x, y);
                    }
                });
            }
            Kind::Wide(k) => Self::forward_wide::<K>(ctx, side, s, k),
            Kind::Sum(mean) => {
                let v = K::sum(ctx.read_only(data(s.a)), mean);
                ctx.access_one(data(s.out))[0] = v;
            }
            Kind::Slice { row, off, len } => {
                let (y, x) = (data(s.out), data(s.a));
                let ([y], [x]) = ctx.access([y], [x]);
                K::slice(y, x, row as usize, off as usize, len as usize);
            }
            Kind::Pick(at) => {
                let v = ctx.read_only(data(s.a))[at as usize];
                ctx.access_one(data(s.out))[0] = v;
            }
            Kind::SumAxis {
                outer,
                n,
                inner,
                mean,
            } => {
                let (y, x) = (data(s.out), data(s.a));
                let ([y], [x]) = ctx.access([y], [x]);
                K::sum_axis(y, x, outer as usize, n as usize, inner as usize, mean);
            }
            Kind::LogSumExpAxis { outer, n, inner } => {
                let (y, x) = (data(s.out), data(s.a));
                let ([y], [x]) = ctx.access([y], [x]);
                K::logsumexp_axis(y, x, outer as usize, n as usize, inner as usize);
            }
            Kind::Select(k) => {
                let m = &side.selects[k as usize];
                let (o, c, a, b) = (data(s.out), data(m.cond), data(s.a), data(s.b));
                let ([o], [c, a, b]) = ctx.access([o], [c, a, b]);
                K::select(o, c, a, b, &m.shapes);
            }
            Kind::Join(k) => {
                let m = &side.joins[k as usize];
                let mut off = 0;
                for (&x, &len) in m.xs.iter().zip(&m.lens).take(m.n as usize) {
                    let ([y], [x]) = ctx.access([data(s.out)], [data(x)]);
                    K::concat(y, x, m.row as usize, off, len as usize);
                    off += len as usize;
                }
            }
            Kind::Permute(k) => {
                let m = &side.permutes[k as usize];
                let ([y], [x]) = ctx.access([data(s.out)], [data(s.a)]);
                K::permute(y, x, &m.shapes, &m.perm[..m.shapes[0].ndim()]);
            }
            Kind::Eager(k) => Self::forward_eager::<K>(ctx, side, s, k),
        }
    }

    /// The backward of an add or sub whose operands have the output's
    /// shape: `kernel(d, dout, k, fresh)` writes (newborn) or adds k * dout
    /// into a's gradient (k = 1), then b's (k = `sign`): a's first, so if
    /// a and b share a gradient, a's is the newborn one, as on the eager
    /// path.
    // Out of line: inlined, it grew the walk's hot code (garch11's
    // gradient measured about 7% slower).
    #[inline(never)]
    fn add_sub_backward(
        &mut self,
        ctx: &mut Context,
        s: Step1,
        dout: Buf,
        sign: f32,
        kernel: impl Fn(&mut [f32], &[f32], f32, bool),
    ) {
        let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
        for (grad, k) in [(ga, 1.0), (gb, sign)] {
            if let Some((d, fresh)) = grad {
                let ([d], [g]) = ctx.access([d], [dout]);
                kernel(d, g, k, fresh);
            }
        }
    }

    /// The backward of a binary op on several elements, as the eager
    /// broadcast loops: one operand at a time, in output order.
    fn backward_bin<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1, f: BinaryFn, k: u32) {
        let m = self.side.bcast[k as usize];
        let Some(dout) = self.grad_out(ctx, s.out) else {
            return;
        };
        if let Some(sign) = f.sum_sign()
            && s.same
        {
            return self.add_sub_backward(ctx, s, dout, sign, |d, g, k, fresh| {
                for (d, &g) in d.iter_mut().zip(g) {
                    *d = K::add_scaled(*d, g, k, fresh);
                }
            });
        }
        let (va, vb) = (self.rows[s.a as usize].data, self.rows[s.b as usize].data);
        if let Some(da) = self.grad_of(ctx, s.a) {
            let ([d], [g, a, b]) = ctx.access([da], [dout, va, vb]);
            f.with_const(|f| {
                // dout has the output's m.n elements.
                for (o, &g) in g.iter().enumerate() {
                    let (i, j) = (m.ia[o] as usize, m.ib[o] as usize);
                    d[i] += K::grad_a(f, g, a[i], b[j]);
                }
            });
        }
        if let Some(db) = self.grad_of(ctx, s.b) {
            let ([d], [g, a, b]) = ctx.access([db], [dout, va, vb]);
            f.with_const(|f| {
                // dout has the output's m.n elements.
                for (o, &g) in g.iter().enumerate() {
                    let (i, j) = (m.ia[o] as usize, m.ib[o] as usize);
                    d[j] += K::grad_b(f, g, a[i], b[j]);
                }
            });
        }
    }

    /// The forward of an element-wise op on more than `MAXN` elements: its
    /// eager entry point on its own rows.
    // Cold and out of line: a scalar model's op loop keeps its small match.
    #[cold]
    #[inline(never)]
    fn forward_wide<K: OneKernels>(ctx: &mut Context, side: &Side, s: Step1, k: u32) {
        let w = &side.wide[k as usize];
        K::forward_rows(ctx, w.op, s.out, w.a, w.b);
    }

    /// The backward of an element-wise op on more than `MAXN` elements:
    /// the gradients looked up in the eager path's order (so the "born"
    /// marks change as there), then its kernels on the whole buffers.
    // Cold and out of line: a scalar model's walk keeps its small match.
    #[cold]
    #[inline(never)]
    fn backward_wide<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1, k: u32) {
        let w = self.side.wide[k as usize];
        let (va, vb) = (self.rows[s.a as usize].data, self.rows[s.b as usize].data);
        match w.op {
            OneOp::Binary(f) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                if let Some(sign) = f.sum_sign()
                    && s.same
                {
                    return self.add_sub_backward(ctx, s, dout, sign, K::add_scaled_into);
                }
                // One operand at a time (a and b may share a gradient).
                for (x, into_a) in [(s.a, true), (s.b, false)] {
                    if let Some(d) = self.grad_of(ctx, x) {
                        let ([d], [g, a, b]) = ctx.access([d], [dout, va, vb]);
                        K::binary_backward(f, into_a, d, g, a, b, &w.shapes);
                    }
                }
            }
            OneOp::Unary(f) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some(dx) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                K::unary_backward_rows(ctx, dout, dx, s.out, w.a, f);
            }
            op => {
                // Scale, pow, clamp: both looked up, in this order, as the
                // eager path does.
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let ([d], [g, x]) = ctx.access([dx], [dout, va]);
                K::map_backward(op, d, g, x);
            }
        }
    }

    /// One op's backward, as its eager path.
    #[inline(always)]
    pub(super) fn backward<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1) {
        let buf = |p: &Self, id: u32| p.rows[id as usize].data;
        let data = |p: &Self, ctx: &Context, id: u32| ctx.read_only(buf(p, id))[0];
        match s.op {
            Kind::One(OneOp::Binary(f)) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                if let Some(sign) = f.sum_sign()
                    && s.same
                {
                    let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
                    for (grad, k) in [(ga, 1.0), (gb, sign)] {
                        if let Some((d, fresh)) = grad {
                            let g = ctx.read_only(dout)[0];
                            let d = &mut ctx.access_one(d)[0];
                            *d = K::add_scaled(*d, g, k, fresh);
                        }
                    }
                    return;
                }
                if let Some(da) = self.grad_of(ctx, s.a) {
                    let (g, a, b) = (
                        ctx.read_only(dout)[0],
                        data(self, ctx, s.a),
                        data(self, ctx, s.b),
                    );
                    ctx.access_one(da)[0] += K::grad_a(f, g, a, b);
                }
                if let Some(db) = self.grad_of(ctx, s.b) {
                    let (g, a, b) = (
                        ctx.read_only(dout)[0],
                        data(self, ctx, s.a),
                        data(self, ctx, s.b),
                    );
                    ctx.access_one(db)[0] += K::grad_b(f, g, a, b);
                }
            }
            Kind::One(op @ OneOp::Unary(f)) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some((dx, fresh)) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                let assign = fresh && f.assigns_fresh_grad();
                let (g, x, y) = (
                    ctx.read_only(dout)[0],
                    data(self, ctx, s.a),
                    data(self, ctx, s.out),
                );
                let d = &mut ctx.access_one(dx)[0];
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
                let (g, x) = (ctx.read_only(dout)[0], data(self, ctx, s.a));
                let d = &mut ctx.access_one(dx)[0];
                *d = K::backward(op, false, *d, g, x, x);
            }
            Kind::Map(op @ OneOp::Unary(f)) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let Some((dx, fresh)) = self.grad_to_overwrite(s.a) else {
                    return;
                };
                let assign = fresh && f.assigns_fresh_grad();
                let (x, y) = (buf(self, s.a), buf(self, s.out));
                let ([d], [g, x, y]) = ctx.access([dx], [dout, x, y]);
                if fresh && !assign {
                    crate::kernels::zero(d);
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
                let ([d], [g, x]) = ctx.access([dx], [dout, x]);
                for (i, d) in d.iter_mut().enumerate() {
                    *d = K::backward(op, false, *d, g[i], x[i], x[i]);
                }
            }
            Kind::Bin(f, k) => self.backward_bin::<K>(ctx, s, f, k),
            Kind::Wide(k) => self.backward_wide::<K>(ctx, s, k),
            Kind::Sum(mean) => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let g = ctx.read_only(dout)[0];
                K::sum_backward(ctx.access_one(dx), g, mean);
            }
            Kind::Slice { row, off, len } => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let ([dx], [g]) = ctx.access([dx], [dout]);
                K::slice_backward(dx, g, row as usize, off as usize, len as usize);
            }
            Kind::Pick(at) => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let g = ctx.read_only(dout)[0];
                ctx.access_one(dx)[at as usize] += g;
            }
            Kind::SumAxis {
                outer,
                n,
                inner,
                mean,
            } => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let ([dx], [g]) = ctx.access([dx], [dout]);
                let (outer, n, inner) = (outer as usize, n as usize, inner as usize);
                K::sum_axis_backward(dx, g, outer, n, inner, mean);
            }
            Kind::LogSumExpAxis { outer, n, inner } => {
                // Both looked up, in this order, as the eager path does.
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let x = buf(self, s.a);
                let ([dx], [g, x]) = ctx.access([dx], [dout, x]);
                let (outer, n, inner) = (outer as usize, n as usize, inner as usize);
                K::logsumexp_axis_backward(dx, g, x, outer, n, inner);
            }
            Kind::Select(k) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                // One operand at a time, as the eager path (a and b may
                // share a gradient slot).
                for (x, take) in [(s.a, true), (s.b, false)] {
                    if let Some(dx) = self.grad_of(ctx, x) {
                        let m = &self.side.selects[k as usize];
                        let c = self.rows[m.cond as usize].data;
                        let ([dx], [g, c]) = ctx.access([dx], [dout, c]);
                        K::select_backward(dx, g, c, take, &m.shapes);
                    }
                }
            }
            Kind::Join(k) => {
                let Some(dout) = self.grad_out(ctx, s.out) else {
                    return;
                };
                let m = self.side.joins[k as usize];
                let mut off = 0;
                for (&x, &len) in m.xs.iter().zip(&m.lens).take(m.n as usize) {
                    if let Some(dx) = self.grad_of(ctx, x) {
                        let ([dx], [g]) = ctx.access([dx], [dout]);
                        K::concat_backward(dx, g, m.row as usize, off, len as usize);
                    }
                    off += len as usize;
                }
            }
            Kind::Permute(k) => {
                let (Some(dx), Some(dout)) = (self.grad_of(ctx, s.a), self.grad_out(ctx, s.out))
                else {
                    return;
                };
                let m = &self.side.permutes[k as usize];
                let ([dx], [g]) = ctx.access([dx], [dout]);
                K::permute_backward(dx, g, &m.shapes, &m.perm[..m.shapes[0].ndim()]);
            }
            Kind::Eager(k) => self.backward_eager::<K>(ctx, s, k),
        }
    }

    /// The rows' state at a walk's start: the parameters' from the table,
    /// every activation's mark clear (as the previous walk left it).
    pub(super) fn walk_start(&mut self, ctx: &Context) {
        let n_params = self.n_params;
        for (row, e) in self.rows.iter_mut().zip(&ctx.table_rows()[..n_params]) {
            *row = Row {
                data: e.data,
                grad: e.grad,
                needs: e.requires_grad,
                unzeroed: e.unzeroed,
            };
        }
        for row in &mut self.rows[n_params..] {
            row.unzeroed = false;
        }
    }

    /// The step's forward and its backward from the loss.
    fn run<K: OneKernels>(&mut self, ctx: &mut Context) {
        if let Some(mut dense) = self.dense.take() {
            let done = dense.run::<K>(ctx, self);
            self.dense = Some(dense);
            if done {
                return;
            }
        }
        for &s in &self.fwd {
            Self::forward::<K>(ctx, &self.rows, &self.side, s);
        }
        self.walk_start(ctx);
        let n_params = self.n_params;
        let n = self.bwd.len() as u32;
        let mut born = 0;
        self.mark_births(&mut born, n);
        if let Some(g) = self.grad_out(ctx, self.loss) {
            ctx.access_one(g)[0] += 1.0;
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
            ctx.entry_mut(i as u32).unzeroed = false;
        }
        ctx.set_backward_done();
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
        let Some(mut program) = self.captures_mut().program(k).and_then(Option::take) else {
            return false;
        };
        program.run::<K>(self);
        if let Some(slot) = self.captures_mut().program(k) {
            *slot = Some(program);
        }
        true
    }

    /// Test hook (`test-hooks` feature): whether captured step `s` replays
    /// through a program (tests of the fast path's coverage).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn step_has_program(&mut self, s: crate::context::Step) -> bool {
        self.captures_mut()
            .program(s.index as usize)
            .is_some_and(|p| p.is_some())
    }

    /// Whether captured step `s`'s program has its dense form (tests).
    #[cfg(test)]
    pub(crate) fn step_has_dense_program(&mut self, s: crate::context::Step) -> bool {
        self.captures_mut()
            .program(s.index as usize)
            .is_some_and(|p| p.as_ref().is_some_and(|p| p.dense.is_some()))
    }
}

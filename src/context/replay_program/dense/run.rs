//! Replaying a small step's dense form: the per-replay hot path.

use super::wide::{WideB, WideF, WideGrad};
use super::{BwdN, Code, Dense, EscapeB, FwdN, Grad};
use crate::context::Context;
use crate::context::replay_program::{OneKernels, Program, Side};
use crate::ops::OneOp;

/// `x[out..out + n]` to write and the rest of `x` to read around it, as
/// (below, the range, above): the ranges of different tensors never
/// overlap, and an overlap would panic here (a slice out of range).
fn around(x: &mut [f32], out: usize, n: usize) -> (&[f32], &mut [f32], &[f32]) {
    let (lo, rest) = x.split_at_mut(out);
    let (mid, hi) = rest.split_at_mut(n);
    (lo, mid, hi)
}

/// The `n` elements from `at` of the array [`around`] split at `out`
/// (`out_n` elements there).
fn part<'a>(
    (lo, hi): (&'a [f32], &'a [f32]),
    (out, out_n): (usize, usize),
    at: usize,
    n: usize,
) -> &'a [f32] {
    if at < out {
        &lo[at..at + n]
    } else {
        &hi[at - out - out_n..][..n]
    }
}

impl Dense {
    /// The step's forward and backward, as `Program::run`; false (nothing
    /// done) if a parameter's gradient state is not the one the walk was
    /// resolved for.
    pub(in crate::context::replay_program) fn run<K: OneKernels>(
        &mut self,
        ctx: &mut Context,
        prog: &mut Program,
    ) -> bool {
        let table = ctx.table_rows();
        if table.len() < self.param_state.len()
            || table
                .iter()
                .zip(&self.param_state)
                .any(|(e, &(needs, len))| {
                    e.requires_grad != needs || e.unzeroed || e.grad.map(|g| g.len()) != len
                })
        {
            return false;
        }
        let n_params = self.param_state.len();
        if !self.escapes_b.is_empty() {
            // The escapes' backward reads the program's rows.
            prog.walk_start(ctx);
        }
        let vals = &mut self.vals;
        for &(row, at, slot, n) in &self.loads {
            let row = row as usize;
            let data = if row < n_params {
                ctx.table_rows()[row].data
            } else {
                prog.rows[row].data
            };
            let (at, slot, n) = (at as usize, slot as usize, n as usize);
            vals[slot..slot + n].copy_from_slice(&ctx.read_only(data)[at..at + n]);
        }
        for (s, &data) in self.fwd.iter().zip(&self.stores) {
            let (x, y) = (vals[s.a as usize], vals[s.b as usize]);
            let v = match s.code {
                Code::Op(op) => K::forward(op, x, y),
                Code::Copy => x,
                Code::Sum { n, mean } => K::sum(&vals[s.a as usize..][..n as usize], mean),
                Code::Escape(k) => {
                    let e = &self.escapes_f[k as usize];
                    Program::forward::<K>(ctx, &prog.rows, &prog.side, e.step);
                    if let Some((slot, n)) = e.load {
                        let (slot, n) = (slot as usize, n as usize);
                        vals[slot..slot + n].copy_from_slice(ctx.read_only(data));
                    }
                    continue;
                }
                Code::Vector(k) => {
                    let s = &self.fwd_n[k as usize];
                    Self::forward_n::<K>(vals, s);
                    let out = &vals[s.out as usize..][..s.n as usize];
                    ctx.access_one(data).copy_from_slice(out);
                    continue;
                }
                Code::Wide(k) => {
                    let out = Self::forward_wide::<K>(vals, &self.wide_f[k as usize], &prog.side);
                    ctx.access_one(data).copy_from_slice(out);
                    continue;
                }
            };
            vals[s.out as usize] = v;
            ctx.access_one(data)[0] = v;
        }
        let grads = &mut self.grads;
        for &(row, start, len) in &self.param_grads {
            if let Some(g) = ctx.table_rows()[row as usize].grad {
                let start = start as usize;
                grads[start..start + len as usize].copy_from_slice(ctx.read_only(g));
            }
        }
        for s in &self.bwd {
            let (d, g) = (s.d as usize, s.g as usize);
            let base = |zero: bool, d: f32| if zero { 0.0 } else { d };
            match s.op {
                Grad::Fill(len) => crate::kernels::zero(&mut grads[d..d + len as usize]),
                Grad::Seed => grads[d] += 1.0,
                Grad::AddScaled { k, assign } => {
                    grads[d] = K::add_scaled(grads[d], grads[g], k, assign);
                }
                Grad::GradA { f, zero } => {
                    let v = K::grad_a(f, grads[g], vals[s.a as usize], vals[s.b as usize]);
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::GradB { f, zero } => {
                    let v = K::grad_b(f, grads[g], vals[s.a as usize], vals[s.b as usize]);
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::Unary { f, assign, zero } => {
                    let (x, y) = (vals[s.a as usize], vals[s.b as usize]);
                    let op = OneOp::Unary(f);
                    grads[d] = K::backward(op, assign, base(zero, grads[d]), grads[g], x, y);
                }
                Grad::Map { op, zero } => {
                    let x = vals[s.a as usize];
                    grads[d] = K::backward(op, false, base(zero, grads[d]), grads[g], x, x);
                }
                Grad::Pick { zero } => grads[d] = base(zero, grads[d]) + grads[g],
                Grad::SumBack { n, mean } => {
                    let g = grads[g];
                    K::sum_backward(&mut grads[d..d + n as usize], g, mean);
                }
                Grad::Vector(k) => Self::backward_n::<K>(grads, vals, &self.bwd_n[k as usize]),
                Grad::Wide(k) => {
                    Self::backward_wide::<K>(grads, vals, &self.wide_b[k as usize], &prog.side);
                }
                Grad::Escape(k) => Self::escape::<K>(ctx, prog, grads, &self.escapes_b[k as usize]),
                Grad::Birth => {
                    let row = &mut prog.rows[d];
                    if row.grad.is_some() {
                        row.unzeroed = true;
                    }
                }
                // Only in `bwd_n`.
                _ => {}
            }
        }
        for &(row, start, len) in &self.param_grads {
            if let Some(g) = ctx.table_rows()[row as usize].grad {
                let start = start as usize;
                ctx.access_one(g)
                    .copy_from_slice(&grads[start..start + len as usize]);
            }
        }
        ctx.set_backward_done();
        ctx.set_grads_pending(true);
        true
    }

    /// An escape's backward (see `EscapeB`).
    #[cold]
    #[inline(never)]
    fn escape<K: OneKernels>(
        ctx: &mut Context,
        prog: &mut Program,
        grads: &mut [f32],
        e: &EscapeB,
    ) {
        for &(r, mark, sync) in &e.before {
            let row = &mut prog.rows[r as usize];
            row.unzeroed = mark;
            if let (Some((slot, len)), Some(buf)) = (sync, row.grad) {
                let (slot, len) = (slot as usize, len as usize);
                ctx.access_one(buf)
                    .copy_from_slice(&grads[slot..slot + len]);
            }
        }
        prog.backward::<K>(ctx, e.step);
        for &(r, slot, len) in &e.after {
            let row = &mut prog.rows[r as usize];
            let g = &mut grads[slot as usize..][..len as usize];
            // Born and not written: its zeros (the walk counts it written).
            if std::mem::take(&mut row.unzeroed) {
                crate::kernels::zero(g);
            } else if let Some(buf) = row.grad {
                g.copy_from_slice(ctx.read_only(buf));
            }
        }
    }

    /// A wide op's forward: the eager kernel on its ranges; its output.
    #[inline(never)]
    fn forward_wide<'a, K: OneKernels>(vals: &'a mut [f32], s: &WideF, side: &Side) -> &'a [f32] {
        let w = &side.wide[s.wide as usize];
        let [so, sa, sb] = w.shapes;
        let (out, n) = (s.out as usize, so.numel());
        let (lo, y, hi) = around(vals, out, n);
        let a = part((lo, hi), (out, n), s.a as usize, sa.numel());
        let b = part((lo, hi), (out, n), s.b as usize, sb.numel());
        K::forward_slices(w.op, y, a, b, &w.shapes);
        y
    }

    /// A wide op's backward kernel on its ranges (see `WideGrad`).
    #[inline(never)]
    fn backward_wide<K: OneKernels>(grads: &mut [f32], vals: &[f32], s: &WideB, side: &Side) {
        let (d, g, n) = (s.d as usize, s.g as usize, s.n as usize);
        let (a, b) = (s.a as usize, s.b as usize);
        let n_d = match s.op {
            WideGrad::Binary(k, into_a) => {
                side.wide[k as usize].shapes[if into_a { 1 } else { 2 }].numel()
            }
            _ => n,
        };
        let (lo, dx, hi) = around(grads, d, n_d);
        let dout = part((lo, hi), (d, n_d), g, n);
        match s.op {
            WideGrad::Binary(k, into_a) => {
                let w = &side.wide[k as usize];
                let [_, sa, sb] = w.shapes;
                let (x, y) = (&vals[a..a + sa.numel()], &vals[b..b + sb.numel()]);
                if let OneOp::Binary(f) = w.op {
                    K::binary_backward(f, into_a, dx, dout, x, y, &w.shapes);
                }
            }
            WideGrad::AddScaled { k, assign } => K::add_scaled_into(dx, dout, k, assign),
            WideGrad::Unary { f, assign, zero } => {
                if zero {
                    crate::kernels::zero(dx);
                }
                K::unary_backward(f, assign, dx, dout, &vals[a..a + n], &vals[b..b + n]);
            }
            WideGrad::Map(op) => K::map_backward(op, dx, dout, &vals[a..a + n]),
        }
    }

    /// A vector form's forward: `n` elements, strided operands.
    #[inline(never)]
    fn forward_n<K: OneKernels>(vals: &mut [f32], s: &FwdN) {
        let (sa, sb) = (s.sa as usize, s.sb as usize);
        let (out, a, b) = (s.out as usize, s.a as usize, s.b as usize);
        let n = s.n as usize;
        match s.op {
            Some(OneOp::Binary(f)) => f.with_const(|f| {
                for i in 0..n {
                    let (x, y) = (vals[a + i * sa], vals[b + i * sb]);
                    vals[out + i] = K::forward(OneOp::Binary(f), x, y);
                }
            }),
            Some(op) => {
                for i in 0..n {
                    vals[out + i] = K::forward(op, vals[a + i], vals[a + i]);
                }
            }
            None => vals.copy_within(a..a + n, out),
        }
    }

    /// A vector form's backward (see `Grad`).
    #[inline(never)]
    fn backward_n<K: OneKernels>(grads: &mut [f32], vals: &[f32], s: &BwdN) {
        let (n, sd, sa, sb) = (s.n as usize, s.sd as usize, s.sa as usize, s.sb as usize);
        let (d, g, a, b) = (s.d as usize, s.g as usize, s.a as usize, s.b as usize);
        match s.op {
            Grad::AddScaledN { k, assign } => {
                for i in 0..n {
                    grads[d + i] = K::add_scaled(grads[d + i], grads[g + i], k, assign);
                }
            }
            Grad::BinaryAN { f, zero } | Grad::BinaryBN { f, zero } => {
                let into_a = matches!(s.op, Grad::BinaryAN { .. });
                if zero {
                    grads[d] = 0.0;
                }
                f.with_const(|f| {
                    for i in 0..n {
                        let (x, y, gi) = (vals[a + i * sa], vals[b + i * sb], grads[g + i]);
                        let v = if into_a {
                            K::grad_a(f, gi, x, y)
                        } else {
                            K::grad_b(f, gi, x, y)
                        };
                        grads[d + i * sd] += v;
                    }
                });
            }
            Grad::UnaryN { f, assign, zero } => {
                if zero {
                    crate::kernels::zero(&mut grads[d..d + n]);
                }
                let op = OneOp::Unary(f);
                for i in 0..n {
                    let (x, y) = (vals[a + i], vals[b + i]);
                    grads[d + i] = K::backward(op, assign, grads[d + i], grads[g + i], x, y);
                }
            }
            Grad::MapN { op } => {
                for i in 0..n {
                    let x = vals[a + i];
                    grads[d + i] = K::backward(op, false, grads[d + i], grads[g + i], x, x);
                }
            }
            Grad::PickN => {
                for i in 0..n {
                    grads[d + i] += grads[g + i];
                }
            }
            // The one-element forms are `bwd`'s.
            _ => {}
        }
    }
}

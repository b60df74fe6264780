//! Replaying a scalar step's dense form: the per-replay hot path.

use super::{Code, Dense, Grad};
use crate::context::Context;
use crate::context::replay_program::{OneKernels, Row};
use crate::ops::OneOp;

impl Dense {
    /// The step's forward and backward, as `Program::run`; false (nothing
    /// done) if a parameter's gradient state is not the one the walk was
    /// resolved for.
    pub(in crate::context::replay_program) fn run<K: OneKernels>(
        &mut self,
        ctx: &mut Context,
        rows: &[Row],
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
        let vals = &mut self.vals;
        for &(row, at, slot) in &self.loads {
            let row = row as usize;
            let data = if row < n_params {
                ctx.table_rows()[row].data
            } else {
                rows[row].data
            };
            vals[slot as usize] = ctx.read_only(data)[at as usize];
        }
        for (s, &data) in self.fwd.iter().zip(&self.stores) {
            let (x, y) = (vals[s.a as usize], vals[s.b as usize]);
            let v = match s.code {
                Code::Op(op) => K::forward(op, x, y),
                Code::Copy => x,
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
}

//! The backward walk: from a scalar loss, in reverse tape order, each op's
//! backward adds into its inputs' gradient slots (planned by
//! [`GradPlan`](crate::plan::GradPlan)); a recomputed segment's ops are
//! replayed through the forward dispatch just before its first backward op.

use crate::arena::Storage;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::plan::GradPlan;

impl Context {
    // ---- backward ---------------------------------------------------------

    /// Reverse pass from a one-element `loss`: parameter gradients
    /// accumulate (+=). Runs at most once per iteration. A loss that depends
    /// on no parameter is fine: nothing accumulates.
    pub fn backward(&mut self, loss: Tensor) -> Result<()> {
        const OP: &str = "backward";
        let id = self.resolve(OP, loss)?;
        let e = self.entry(id);
        if e.shape.numel() != 1 {
            return Err(Error::NotScalar {
                op: OP,
                shape: e.shape,
            });
        }
        if self.backward_done() {
            return Err(Error::Sequence {
                op: OP,
                what: "backward already ran this iteration (the graph is consumed; call ag_reset and rebuild it)".into(),
            });
        }
        self.check_no_open_segment(OP)?;
        if !e.requires_grad {
            self.set_backward_done();
            self.grad_ready_all();
            return Ok(());
        }
        // Activation gradients get slots of one planned region, allocated
        // before anything is written (an arena cap fails here, cleanly).
        let mut plan = self.take_plan();
        let region = match self.grad_region(OP, &mut plan, id) {
            Ok(r) => r,
            Err(err) => {
                self.put_plan(plan);
                return Err(err);
            }
        };
        if let Some(region) = region {
            for (t, offset, len) in plan.slots() {
                self.entry_mut(t).grad = Some(Storage::sub(region, offset, len));
            }
        }
        let n_params = self.param_count() as u32;
        for i in n_params..self.live_tensors() as u32 {
            if let Some(root) = self.entry_ref(i).view_of
                && root >= n_params
            {
                self.entry_mut(i).grad = self.entry_ref(root).grad;
            }
        }
        // A slot holds an earlier gradient's values until its gradient is
        // born: mark it just before its first write (or the walk's start),
        // and that write zeroes or overwrites it.
        let n = self.tape_len() as u32;
        let mut born = 0;
        self.mark_births(&plan, &mut born, n);
        if let Some(g) = self.grad_out(id) {
            self.access_one(g)[0] += 1.0;
        }
        self.mark_flow(id);
        self.grad_ready_start(n);
        let mut segments = self.rc().segments_len();
        // The callback cannot reach the context, so this holds for the walk.
        let notify = !self.grad_ready().idle();
        for i in (0..n).rev() {
            if born < plan.births_len() {
                self.mark_births(&plan, &mut born, i);
            }
            if segments > 0 {
                self.replay_before(&mut segments, i);
            }
            // The op is copied only when it runs (most do, but the copy
            // is 72 bytes).
            if self.entry_ref(self.node_out(i)).flow {
                let node = self.node(i);
                crate::ops::dispatch::backward(self, &node.op, node.out);
                node.op.for_each_input(|input| self.mark_flow(input));
            }
            if notify {
                self.grad_ready_passed(i);
            }
        }
        self.put_plan(plan);
        // The region's slots are reused: only retained gradients stay, and
        // one that nothing wrote is zero, not stale.
        for i in 0..n_params {
            self.settle_grad(i);
            self.entry_mut(i).flow = false;
        }
        for i in n_params..self.live_tensors() as u32 {
            let row = self.entry_ref(i);
            let dropped = match row.view_of {
                None => !row.retain,
                Some(root) => root >= n_params && !self.entry_ref(root).retain,
            };
            if dropped {
                let row = self.entry_mut(i);
                row.grad = None;
                row.unzeroed = false;
                row.flow = false;
            } else {
                self.settle_grad(i);
                self.entry_mut(i).flow = false;
            }
        }
        self.set_backward_done();
        self.set_grads_pending(true);
        Ok(())
    }

    /// Marks the planned gradients born at tape position `at` (the ones
    /// whose first write comes from that op's backward) as unzeroed,
    /// advancing `next` through the plan's births. Their slots still hold
    /// an earlier gradient's values: the first access zeroes them, or
    /// overwrites them whole.
    fn mark_births(&mut self, plan: &GradPlan, next: &mut usize, at: u32) {
        while *next < plan.births_len() {
            let (pos, t) = plan.birth(*next);
            if pos < at {
                break;
            }
            if self.entry(t).grad.is_some() {
                self.entry_mut(t).unzeroed = true;
            }
            *next += 1;
        }
    }
    /// Marks a tensor (and, for a view, the tensor it views) as reached by
    /// the loss's gradient.
    fn mark_flow(&mut self, id: u32) {
        self.entry_mut(id).flow = true;
        if let Some(root) = self.entry(id).view_of {
            self.entry_mut(root).flow = true;
        }
    }

    /// During backward's reverse walk, before tape position `at`: if `at`
    /// is the last op of a recomputed segment whose outputs received a
    /// gradient, runs the segment's ops again into its buffers. `next`
    /// counts the segments not passed yet (start at their number).
    pub(crate) fn replay_before(&mut self, next: &mut usize, at: u32) {
        while *next > 0 {
            let (first_op, end_op, recompute) = self.rc().span(*next - 1);
            if first_op > at || first_op == end_op {
                // Wholly after `at` (already replayed or not recomputed),
                // or empty.
                *next -= 1;
                continue;
            }
            if end_op != at + 1 {
                return;
            }
            *next -= 1;
            if !recompute {
                return;
            }
            let reached = (first_op..end_op).any(|j| self.entry(self.node(j).out).flow);
            if reached {
                let needed = self.mark_needed(first_op, end_op);
                // A replay recomputes values: running statistics were
                // updated by the first run.
                self.set_recomputing(true);
                for j in first_op..end_op {
                    if needed[(j - first_op) as usize] {
                        let node = self.node(j);
                        crate::ops::dispatch::forward(self, &node.op, node.out);
                    }
                }
                self.set_recomputing(false);
                self.rc_mut().put_needed(needed);
            }
            return;
        }
    }

    /// Which ops of segment `s` a replay must run: those whose backward
    /// reads their own output or saved buffers, and the producers (inside
    /// the scratch region) of every input that a backward reads or that a
    /// replayed op computes from; found in one reverse pass, since an op's
    /// consumers come after it. Outputs already in the arena (the segment's
    /// declared outputs) are never recomputed for their value.
    fn mark_needed(&mut self, first_op: u32, end_op: u32) -> Vec<bool> {
        let n = (end_op - first_op) as usize;
        let mut needed = self.rc_mut().take_needed();
        needed.clear();
        // Capacity grows in the first replay only.
        needed.resize(n, false);
        for k in (0..n).rev() {
            let op = self.node(first_op + k as u32).op;
            let reads = op.backward_reads();
            needed[k] |= reads.own;
            if !(needed[k] || reads.inputs) {
                continue;
            }
            for &input in op.inputs().as_slice() {
                let root = self.entry(input).view_of.unwrap_or(input);
                if !self.in_scratch(self.entry(root).data) {
                    continue;
                }
                if let Some(j) = (0..k)
                    .rev()
                    .find(|&j| self.node(first_op + j as u32).out == root)
                {
                    needed[j] = true;
                }
            }
        }
        needed
    }
}

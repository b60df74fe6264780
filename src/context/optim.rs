//! Creating the optimizer and taking its step: the context's side of
//! `crate::optim`, which holds the optimizer's state, kinds and kernels.

use super::Context;
use crate::arena::Storage;
use crate::error::{Error, Result};
use crate::optim::{
    AdamWStep, MAX_MOMENTS, Optimizer, OptimizerKind, SPLIT_MIN_FLOATS, Sharding,
    UPDATE_TASK_FLOATS, adamw_update, check, in_runs, overlap, sgd_momentum_update,
};
use crate::pool::task_count;
use crate::simd;

impl Context {
    /// Creates the optimizer for all parameters created so far, allocating
    /// its state now. One optimizer per context. Its weight decay applies
    /// to the parameters whose flag is on (see
    /// [`Context::set_weight_decay`]).
    pub fn optimizer(&mut self, kind: OptimizerKind) -> Result<()> {
        const OP: &str = "optimizer_new";
        kind.validate()?;
        if self.has_optimizer() {
            return Err(Error::Sequence {
                op: OP,
                what: "this context already has an optimizer".into(),
            });
        }
        if self.param_count() == 0 {
            return Err(Error::Sequence {
                op: OP,
                what: "create the parameters before the optimizer".into(),
            });
        }
        let row = kind.row();
        // A kind missing from `EACH` would write checkpoints its own loader
        // refuses as corrupt.
        debug_assert!(
            OptimizerKind::tag_fits(row.tag, row.moments),
            "{kind:?} not in EACH"
        );
        let mut state = Vec::new();
        state
            .try_reserve_exact(self.param_count())
            .map_err(|_| Error::AllocationFailed {
                op: OP,
                bytes: self.param_count() * 48,
            })?;
        let total = self.grads_len();
        // Every kind so far updates each float on its own, so any range
        // of floats can be its shard.
        let shard = match row.sharding {
            Sharding::PerFloat => self.pending_shard().unwrap_or((0, total)),
        };
        let keep = self.persistent_blocks();
        let before = self.persistent_bytes();
        let mut offset = 0;
        for i in 0..self.param_count() {
            let n = self.entry(i as u32).shape.numel();
            let (lo, hi) = overlap(shard, offset, n);
            offset += n;
            let mut s = [None; MAX_MOMENTS];
            if hi == lo {
                state.push(s);
                continue;
            }
            for slot in s.iter_mut().take(row.moments) {
                match self.alloc_persistent(OP, hi - lo) {
                    Ok(b) => *slot = Some(b),
                    Err(e) => {
                        self.truncate_persistent(keep);
                        return Err(e);
                    }
                }
            }
            state.push(s);
        }
        let bytes = self.persistent_bytes() - before;
        // The model is complete (no parameter can follow the optimizer):
        // give back what the gradient block's geometric growth reserved.
        self.trim_grads();
        self.set_optimizer_state(Some(Optimizer::new(kind, state, shard, bytes)));
        Ok(())
    }

    /// Changes the learning rate (for schedules).
    pub fn optimizer_set_lr(&mut self, lr: f32) -> Result<()> {
        const OP: &str = "optimizer_set_lr";
        check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
        let opt = self.optimizer_state_mut().ok_or_else(|| Error::Sequence {
            op: OP,
            what: "no optimizer".into(),
        })?;
        opt.set_lr(lr);
        Ok(())
    }

    /// How many updates the optimizer has made (each successful
    /// [`optimizer_step`](Self::optimizer_step) adds one).
    pub fn optimizer_step_count(&self) -> u64 {
        self.optimizer_state().map_or(0, Optimizer::steps)
    }

    /// Deprecated: use [`optimizer_step_count`](Self::optimizer_step_count)
    /// (one letter away from `optimizer_step`, which takes a step).
    #[deprecated(note = "use optimizer_step_count")]
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer_step_count()
    }

    /// One update of every parameter from its accumulated gradient. Refused
    /// with NonFinite (parameters untouched) if any gradient is NaN or
    /// infinite, and with Sequence if no backward ran since the last step.
    pub fn optimizer_step(&mut self) -> Result<()> {
        const OP: &str = "optimizer_step";
        if !self.has_optimizer() {
            return Err(Error::Sequence {
                op: OP,
                what: "no optimizer (create one first)".into(),
            });
        }
        if !self.grads_pending() {
            return Err(Error::Sequence {
                op: OP,
                what: "no gradients since the last step (call ag_backward first)".into(),
            });
        }
        // One pass over all gradients, unless clipping already made it (it
        // refuses non-finite gradients, and scaling by at most 1 keeps them finite).
        let norm = if self.grads_checked_finite() {
            0.0
        } else {
            self.grad_norm_sq()
        };
        if !norm.is_finite() {
            return Err(Error::NonFinite {
                op: OP,
                what: "a parameter gradient is NaN or infinite; the step was skipped".into(),
            });
        }
        let total: usize = (0..self.param_count())
            .map(|i| self.entry(i as u32).shape.numel())
            .sum();
        // Large parameters are cut into runs of floats by their length
        // alone; each float's update reads only that float, so no cut
        // changes a bit.
        let split = Context::worth_two_threads(total * 8);
        let par = self.want_pool(total * 8);
        let Some(opt) = self.optimizer_state_mut() else {
            return Ok(());
        };
        let t = opt.count_step();
        let (kind, shard) = (opt.kind(), opt.shard());
        let mut offset = 0;
        for i in 0..self.param_count() {
            let (Some(g), p) = (self.entry(i as u32).grad, self.entry(i as u32).data) else {
                continue;
            };
            // This shard's part of the parameter (all of it, unsharded).
            let (lo, hi) = overlap(shard, offset, p.len());
            offset += p.len();
            if hi == lo {
                continue;
            }
            let (p, g) = (Storage::sub(p, lo, hi - lo), Storage::sub(g, lo, hi - lo));
            let n = if split && p.len() >= SPLIT_MIN_FLOATS {
                task_count(p.len(), UPDATE_TASK_FLOATS)
            } else {
                1
            };
            let par = par && n > 1;
            let [m, v] = self
                .optimizer_state()
                .map_or([None, None], |o| o.moments(i));
            let decay = self.registry().decay(i);
            match kind {
                OptimizerKind::Sgd {
                    lr,
                    momentum,
                    weight_decay,
                } => {
                    let weight_decay = if decay { weight_decay } else { 0.0 };
                    match m {
                        Some(m) => {
                            let (pool, [p, m], [g]) = self.access_on(par, [p, m], [g]);
                            in_runs(pool, n, [p, m], &|r, [p, m]| {
                                sgd_momentum_update(p, m, &g[r], lr, momentum, weight_decay)
                            });
                        }
                        None => {
                            let (pool, [p], [g]) = self.access_on(par, [p], [g]);
                            in_runs(pool, n, [p], &|r, [p]| {
                                for (p, &g) in p.iter_mut().zip(&g[r]) {
                                    *p -= lr * (g + weight_decay * *p);
                                }
                            });
                        }
                    }
                }
                OptimizerKind::AdamW {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                } => {
                    let (Some(m), Some(v)) = (m, v) else { continue };
                    let weight_decay = if decay { weight_decay } else { 0.0 };
                    let (pool, [p, m, v], [g]) = self.access_on(par, [p, m, v], [g]);
                    let k = AdamWStep::new(lr, beta1, beta2, eps, weight_decay, t);
                    in_runs(pool, n, [p, m, v], &|r, [p, m, v]| {
                        simd::dispatch!(adamw_update(p, m, v, &g[r], k))
                    });
                }
            }
        }
        self.set_grads_pending(false);
        Ok(())
    }
}

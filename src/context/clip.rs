//! Global-norm gradient clipping, and the norm pass the step's
//! non-finite check shares.

use super::Context;
use crate::error::{Error, Result};
use crate::kernels::fastmath::sum_squares_f64;
use crate::optim::{check, in_runs};
use crate::pool::{MAX_TASKS, task_count, task_range};
use crate::simd;

/// Gradient floats per partial sum of squares, at least: the cut of the
/// gradient block into partials depends on its length alone, so the norm
/// is the same bits at any thread count.
const NORM_TASK_FLOATS: usize = 1 << 16;

/// Weight of one gradient float in the norm's and the scaling's work (the
/// unit [`Context::want_pool`] compares), as the optimizer's update weighs
/// its floats by their operations.
const WORK_PER_FLOAT: usize = 4;

impl Context {
    /// Global L2 norm of all parameter gradients, squared, in f64: one
    /// partial per run of the gradient block, added in run order.
    pub(super) fn grad_norm_sq(&mut self) -> f64 {
        let Some(block) = self.grads_block() else {
            return 0.0;
        };
        let len = block.len();
        let n = task_count(len, NORM_TASK_FLOATS);
        let par = n > 1 && self.want_pool(len * WORK_PER_FLOAT);
        let (pool, [], [g]) = self.access_on(par, [], [block]);
        let mut partials = [0.0f64; MAX_TASKS];
        let task = |i: usize, partial: &mut f64| {
            *partial = simd::dispatch!(sum_squares_f64(&g[task_range(len, n, i)]));
        };
        match pool {
            Some(pool) => pool.run_slots(&mut partials[..n], &task),
            None => partials[..n]
                .iter_mut()
                .enumerate()
                .for_each(|(i, s)| task(i, s)),
        }
        partials[..n].iter().sum()
    }

    /// Scales all parameter gradients so their global L2 norm is at most
    /// `max_norm`; returns the norm before clipping. A non-finite norm is
    /// refused (NonFinite) and nothing is scaled.
    pub fn clip_grad_norm(&mut self, max_norm: f32) -> Result<f32> {
        const OP: &str = "clip_grad_norm";
        check(OP, "max_norm", max_norm, max_norm > 0.0, "finite and > 0")?;
        let norm = self.grad_norm_sq().sqrt();
        if !norm.is_finite() {
            return Err(Error::NonFinite {
                op: OP,
                what: format!("gradient norm is {norm}"),
            });
        }
        if norm > max_norm as f64
            && let Some(block) = self.grads_block()
        {
            let s = (max_norm as f64 / (norm + 1e-6)) as f32;
            let len = block.len();
            let n = task_count(len, NORM_TASK_FLOATS);
            let par = n > 1 && self.want_pool(len * WORK_PER_FLOAT);
            let (pool, [g], []) = self.access_on(par, [block], []);
            in_runs(pool, n, [g], &|_, [g]| g.iter_mut().for_each(|v| *v *= s));
        }
        self.set_grads_checked_finite();
        Ok(norm as f32)
    }
}

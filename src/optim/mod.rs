//! Optimizers over the context's parameters: SGD with momentum and AdamW.
//! The context drives them (`context/optim.rs`, and global-norm gradient
//! clipping in `context/clip.rs`). State is allocated once,
//! when the optimizer is created; a step allocates nothing.
//!
//! # Adding an optimizer
//!
//! 1. A variant of [`OptimizerKind`] and its row in `kinds.rs`: the arm of
//!    `OptimizerKind::row` (name, checkpoint tag, moment counts,
//!    hyper-parameter floats, sharding), its instance in `EACH`, and the arms
//!    of `validate` and `lr_mut`. The compiler refuses a missing arm; the
//!    `slot` match of the test `each_holds_every_kind_once` names its place
//!    in `EACH`, and a kind left out of `EACH` trips a debug assertion when
//!    it is created (its checkpoints would not load).
//! 2. Its update: the arm in `Context::optimizer_step` (`context/optim.rs`) and its
//!    kernel in `kernels.rs`. The compiler refuses a missing arm.
//! 3. Its C constructor in `ffi/training.rs`, with `make header`.
//!
//! State allocation, checkpoints (`checkpoint.rs`) and sharding
//! (`shard.rs`) read the row and need no change.

mod kernels;
mod kinds;
#[cfg(test)]
mod tests;

use crate::arena::Buf;
use crate::pool::{MAX_TASKS, Pool, task_range};
pub(crate) use kernels::sgd_momentum_update;
pub(crate) use kernels::{AdamWStep, adamw_update};
pub use kinds::OptimizerKind;
pub(crate) use kinds::check;
pub(crate) use kinds::{MAX_MOMENTS, Sharding};

/// The optimizer's state: what it is, its moments per parameter, the
/// part of the parameters it updates and how many steps it took.
pub(crate) struct Optimizer {
    kind: OptimizerKind,
    /// Per parameter: [first moment, second moment] (SGD uses only the first),
    /// each covering the parameter's floats inside `shard` (None outside).
    state: Vec<[Option<Buf>; MAX_MOMENTS]>,
    /// The floats `first..end` of the flat parameter layout this optimizer
    /// updates and keeps state for: all of them unless
    /// [`Context::optimizer_shard`](crate::Context::optimizer_shard) said
    /// otherwise.
    shard: (usize, usize),
    step: u64,
    bytes: usize,
}

impl Optimizer {
    /// A new optimizer that has taken no step, its moments in `state`
    /// (`bytes` of persistent memory).
    pub(crate) fn new(
        kind: OptimizerKind,
        state: Vec<[Option<Buf>; MAX_MOMENTS]>,
        shard: (usize, usize),
        bytes: usize,
    ) -> Optimizer {
        Optimizer {
            kind,
            state,
            shard,
            step: 0,
            bytes,
        }
    }

    pub(crate) fn kind(&self) -> OptimizerKind {
        self.kind
    }

    /// The moment buffers of parameter `i` (None where it has none).
    pub(crate) fn moments(&self, i: usize) -> [Option<Buf>; MAX_MOMENTS] {
        self.state[i]
    }

    /// The floats of the flat parameter layout it updates.
    pub(crate) fn shard(&self) -> (usize, usize) {
        self.shard
    }

    /// Steps taken.
    pub(crate) fn steps(&self) -> u64 {
        self.step
    }

    pub(crate) fn set_lr(&mut self, lr: f32) {
        *self.kind.lr_mut() = lr;
    }

    /// Counts one more step; its number (from 1, AdamW's bias correction).
    pub(crate) fn count_step(&mut self) -> u64 {
        self.step += 1;
        self.step
    }

    /// The step count a checkpoint restores.
    pub(crate) fn restore_steps(&mut self, steps: u64) {
        self.step = steps;
    }

    pub fn state_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the state covers only part of the parameters.
    pub fn sharded(&self, total: usize) -> bool {
        self.shard != (0, total)
    }
}

/// A parameter with fewer floats than this updates in one task: smaller
/// updates gain nothing from a second thread.
pub(crate) const SPLIT_MIN_FLOATS: usize = 1 << 16;

/// Floats per update task, at least (an AdamW update of 32K floats takes
/// tens of microseconds, well above a hand-off).
pub(crate) const UPDATE_TASK_FLOATS: usize = 1 << 15;

/// A task of [`in_runs`]: the range of floats it owns, and its run of
/// each buffer.
type RunTask<'t, const W: usize> = dyn Fn(std::ops::Range<usize>, [&mut [f32]; W]) + Sync + 't;

/// Cuts the `W` buffers in `w` alike into `n` contiguous runs of their
/// floats ([`task_range`]) and calls `task(i, runs)` once per run: across
/// the pool when given, else in order on this thread. The runs depend on
/// `n` and the length alone, never on the thread count.
pub(crate) fn in_runs<const W: usize>(
    pool: Option<&Pool>,
    n: usize,
    w: [&mut [f32]; W],
    task: &RunTask<'_, W>,
) {
    let len = w.first().map_or(0, |b| b.len());
    debug_assert!(w.iter().all(|b| b.len() == len) && (1..=MAX_TASKS).contains(&n));
    let mut rest = w;
    let mut runs: [[&mut [f32]; W]; MAX_TASKS] = std::array::from_fn(|i| {
        let k = if i < n {
            task_range(len, n, i).len()
        } else {
            0
        };
        rest.each_mut().map(|r| {
            let (run, tail) = std::mem::take(r).split_at_mut(k);
            *r = tail;
            run
        })
    });
    let one = |i: usize, run: &mut [&mut [f32]; W]| {
        task(task_range(len, n, i), run.each_mut().map(|b| &mut **b))
    };
    match pool {
        Some(pool) => pool.run_slots(&mut runs[..n], &one),
        None => runs[..n]
            .iter_mut()
            .enumerate()
            .for_each(|(i, r)| one(i, r)),
    }
}

/// The part `lo..hi` of a parameter at `offset` with `n` floats inside
/// `shard` (lo == hi when they do not meet).
pub(crate) fn overlap(shard: (usize, usize), offset: usize, n: usize) -> (usize, usize) {
    let lo = shard.0.clamp(offset, offset + n) - offset;
    let hi = shard.1.clamp(offset, offset + n) - offset;
    (lo, hi.max(lo))
}

//! Opening a captured step for replay: the checks a replay (or a write of
//! a step's inputs) passes before anything changes, and the swaps that
//! make a step the current iteration and park it again. Its own room:
//! this is what a replay drives; recording a step is the parent's.

use super::Step;
use crate::context::Context;
use crate::error::{Error, Result, StepProblem};
use crate::tape::Node;

impl Context {
    /// Checks a step handle and returns its slot.
    pub(super) fn resolve_step(&self, op: &'static str, s: Step) -> Result<usize> {
        let bad = |why| Error::BadStep {
            op,
            index: s.index,
            why,
        };
        if s.context == 0 {
            return Err(bad(StepProblem::Invalid));
        }
        if s.context != self.id() {
            return Err(bad(StepProblem::WrongContext {
                handle_context: s.context,
                context: self.id(),
            }));
        }
        match self.captures().step(s.index as usize) {
            Some(r) if r.epoch == s.generation => Ok(s.index as usize),
            _ if s.generation == 0 || s.generation > self.top_generation() => {
                Err(bad(StepProblem::Invalid))
            }
            _ => Err(bad(StepProblem::Freed)),
        }
    }

    /// Opens a replay of step `s` (or a write of its inputs): the checks,
    /// then the step becomes the resident iteration. Its index.
    pub(crate) fn replay_open(&mut self, op: &'static str, s: Step) -> Result<usize> {
        let k = self.resolve_step(op, s)?;
        self.check_replayable(op, k)?;
        self.make_resident(k);
        Ok(k)
    }

    /// The length of resident step `k`'s forward log.
    pub(crate) fn replay_log_len(&self, k: usize) -> usize {
        self.captures().step(k).map_or(0, |step| step.log.len())
    }

    /// Entry `i` of step `k`'s forward log (read by index: no borrow
    /// across the kernels).
    pub(crate) fn replay_log_node(&self, k: usize, i: usize) -> Option<Node> {
        self.captures().step(k).map(|step| step.log[i])
    }

    /// The ordinary backward of resident step `k`, into its planned region
    /// (the forward log has run).
    pub(crate) fn replay_backward(&mut self, k: usize) -> Result<()> {
        let Some(step) = self.captures().step(k) else {
            return Ok(());
        };
        let (region, loss) = (step.region, step.loss);
        self.clear_backward_done();
        self.captures_mut().set_replaying(Some(region));
        let handle = self.handle(loss);
        let result = self.backward(handle);
        self.captures_mut().set_replaying(None);
        result
    }

    /// The checks of a replay (and of writing a step's input): nothing
    /// has changed yet when one fails.
    pub(super) fn check_replayable(&self, op: &'static str, k: usize) -> Result<()> {
        if self.captures().recording().is_some() {
            return Err(Error::Sequence {
                op,
                what: "a capture is open (call ag_capture_end first)".into(),
            });
        }
        let Some(step) = self.captures().step(k) else {
            return Err(Error::BadStep {
                op,
                index: k as u32,
                why: StepProblem::Invalid,
            });
        };
        if step.n_params != self.param_count() {
            return Err(Error::Sequence {
                op,
                what: format!(
                    "the step was captured with {} parameters and the context has {} now: capture it again",
                    step.n_params,
                    self.param_count()
                ),
            });
        }
        let limit = self.arena_stats().limit;
        if limit != 0 && step.need > limit {
            return Err(Error::OutOfMemory {
                op,
                needed: step.need,
                used: 0,
                limit,
            });
        }
        Ok(())
    }

    /// Makes step `k` the current iteration (nothing to do if it is).
    pub(super) fn make_resident(&mut self, k: usize) {
        if self.captures().resident() == Some(k) {
            return;
        }
        self.reset();
        let Some(mut step) = self.captures_mut().take_step(k) else {
            return;
        };
        let epoch = step.epoch;
        self.swap_iteration_memory(&mut step.act, &mut step.plan, epoch);
        // Capacity grows the first time only (the table and tape keep it).
        self.load_activation_rows(&step.rows, &step.tape);
        self.rc_mut().set_segments(&step.segments);
        self.captures_mut().set_inputs(&step.inputs);
        self.captures_mut().put_step(k, step);
        self.set_backward_done();
        self.captures_mut().set_resident(k);
        // Views of parameters share their (possibly moved) gradients.
        self.bind_param_grads();
    }

    /// Parks the resident step again (called by reset): the eager memory
    /// comes back under an epoch never issued before.
    pub(crate) fn park_resident(&mut self) -> bool {
        let Some(k) = self.captures_mut().take_resident() else {
            return false;
        };
        if let Some(mut step) = self.captures_mut().take_step(k) {
            let epoch = step.epoch;
            self.swap_iteration_memory(&mut step.act, &mut step.plan, epoch);
            self.captures_mut().put_step(k, step);
        }
        self.fresh_generation();
        self.rc_mut().set_segments(&[]);
        self.captures_mut().clear_inputs();
        self.clear_activation_rows();
        self.clear_backward_done();
        true
    }
}

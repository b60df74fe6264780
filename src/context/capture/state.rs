//! A context's captured steps and capture state, as plain records: the
//! capture rooms read and swap them, the context only holds them.

use crate::arena::{Activations, Buf};
use crate::context::entry::TensorEntry;
use crate::context::replay_program::Program;
use crate::ops::Op;
use crate::plan::GradPlan;
use crate::recompute::Segment;
use crate::tape::Node;

/// One recorded step (see the module docs).
pub(super) struct Recorded {
    pub(super) epoch: u64,
    /// Not resident: the step's memory. Resident: the parked eager memory.
    pub(super) act: Activations,
    /// Likewise: the step's gradient plan, or the parked eager one.
    pub(super) plan: GradPlan,
    pub(super) rows: Vec<TensorEntry>,
    pub(super) tape: Vec<Node>,
    pub(super) log: Vec<Node>,
    pub(super) segments: Vec<Segment>,
    pub(super) inputs: Vec<u32>,
    pub(super) region: Option<Buf>,
    pub(super) loss: u32,
    pub(super) n_params: usize,
    pub(super) need: usize,
    /// The fast path of a replay, when the step has one.
    pub(super) program: Option<Box<Program>>,
}

/// A capture in progress: the parked eager memory and plan, and the log.
pub(super) struct Recording {
    pub(super) act: Activations,
    pub(super) plan: GradPlan,
    pub(super) log: Vec<Node>,
    /// The log could not grow: capture_end reports it.
    pub(super) log_failed: bool,
    pub(super) region: Option<Buf>,
    pub(super) loss: Option<u32>,
}

/// A context's captured steps and capture state.
#[derive(Default)]
pub(crate) struct Captures {
    pub(super) steps: Vec<Option<Box<Recorded>>>,
    pub(super) resident: Option<usize>,
    pub(super) recording: Option<Box<Recording>>,
    /// During a replay's backward: use the step's region, plan nothing.
    pub(super) replaying: Option<Option<Buf>>,
    /// Data tensors (input slots, constants) of the current iteration.
    pub(super) inputs: Vec<u32>,
}

impl Captures {
    /// Step `k`'s replay program slot (see `replay_program`).
    pub(crate) fn program(&mut self, k: usize) -> Option<&mut Option<Box<Program>>> {
        self.steps.get_mut(k)?.as_mut().map(|s| &mut s.program)
    }

    /// The captured step that is the current iteration, if any.
    pub(crate) fn resident(&self) -> Option<usize> {
        self.resident
    }

    pub(crate) fn clear_inputs(&mut self) {
        self.inputs.clear();
    }

    /// Appends an op to the capture's log (no-op outside a capture); inline.
    #[inline(always)]
    pub(crate) fn log(&mut self, op: Op, out: u32) {
        if let Some(r) = self.recording.as_mut() {
            if r.log.try_reserve(1).is_err() {
                r.log_failed = true;
                return;
            }
            r.log.push(Node { op, out });
        }
    }
}

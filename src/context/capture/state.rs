//! A context's captured steps and capture state, as plain records: the
//! capture rooms read and swap them, the context only holds them.

use crate::arena::{Activations, Buf};
use crate::context::entry::TensorEntry;
use crate::context::replay_program::Program;
use crate::error::{Error, Result};
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

/// A context's captured steps and capture state, driven through the
/// methods below (what a capture room means to do to it).
#[derive(Default)]
pub(crate) struct Captures {
    steps: Vec<Option<Box<Recorded>>>,
    resident: Option<usize>,
    recording: Option<Box<Recording>>,
    /// During a replay's backward: use the step's region, plan nothing.
    replaying: Option<Option<Buf>>,
    /// Data tensors (input slots, constants) of the current iteration.
    inputs: Vec<u32>,
}

impl Captures {
    /// Step `k`'s replay program slot (see `replay_program`).
    pub(crate) fn program(&mut self, k: usize) -> Option<&mut Option<Box<Program>>> {
        self.steps.get_mut(k)?.as_mut().map(|s| &mut s.program)
    }

    /// The captured step that is the current iteration, if any.
    #[inline(always)]
    pub(crate) fn resident(&self) -> Option<usize> {
        self.resident
    }

    /// Makes step `k` the resident one.
    pub(super) fn set_resident(&mut self, k: usize) {
        self.resident = Some(k);
    }

    /// No step is resident any more; the one that was, if any.
    pub(super) fn take_resident(&mut self) -> Option<usize> {
        self.resident.take()
    }

    /// Captured step `k`, if it lives.
    pub(super) fn step(&self, k: usize) -> Option<&Recorded> {
        self.steps.get(k)?.as_deref()
    }

    /// The live step captured under `epoch`, if any.
    pub(super) fn step_of_epoch(&self, epoch: u64) -> Option<usize> {
        self.steps
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.epoch == epoch))
    }

    /// Number of live captured steps.
    pub(super) fn live_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.is_some()).count()
    }

    /// Takes step `k` out for a swap of its memory (put it back after).
    pub(super) fn take_step(&mut self, k: usize) -> Option<Box<Recorded>> {
        self.steps.get_mut(k)?.take()
    }

    pub(super) fn put_step(&mut self, k: usize, step: Box<Recorded>) {
        self.steps[k] = Some(step);
    }

    /// A free slot for a new step (growing the list if none is free).
    pub(super) fn free_slot(&mut self, op: &'static str) -> Result<usize> {
        if let Some(k) = self.steps.iter().position(|s| s.is_none()) {
            return Ok(k);
        }
        self.steps
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: size_of::<usize>(),
            })?;
        self.steps.push(None);
        Ok(self.steps.len() - 1)
    }

    /// Frees step `k`.
    pub(super) fn free_step(&mut self, k: usize) {
        self.steps[k] = None;
    }

    /// The capture in progress, if any.
    pub(super) fn recording(&self) -> Option<&Recording> {
        self.recording.as_deref()
    }

    pub(super) fn start_recording(&mut self, rec: Box<Recording>) {
        self.recording = Some(rec);
    }

    /// Ends the capture in progress; its records, if one was open.
    pub(super) fn take_recording(&mut self) -> Option<Box<Recording>> {
        self.recording.take()
    }

    /// Notes the gradient region and loss of the capture in progress.
    pub(super) fn note_backward(&mut self, region: Option<Buf>, loss: u32) {
        if let Some(rec) = self.recording.as_mut() {
            rec.region = region;
            rec.loss = Some(loss);
        }
    }

    /// During a replay's backward, the step's gradient region.
    pub(super) fn replaying(&self) -> Option<Option<Buf>> {
        self.replaying
    }

    pub(super) fn set_replaying(&mut self, region: Option<Option<Buf>>) {
        self.replaying = region;
    }

    /// The data tensors (input slots, constants) of the current iteration.
    pub(super) fn inputs(&self) -> &[u32] {
        &self.inputs
    }

    /// Room to note one more data tensor.
    pub(super) fn reserve_input(&mut self, op: &'static str) -> Result<()> {
        self.inputs
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: size_of::<u32>(),
            })
    }

    pub(super) fn push_input(&mut self, id: u32) {
        self.inputs.push(id);
    }

    /// Makes `inputs` the current iteration's data tensors.
    pub(super) fn set_inputs(&mut self, inputs: &[u32]) {
        self.inputs.clear();
        self.inputs.extend_from_slice(inputs);
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

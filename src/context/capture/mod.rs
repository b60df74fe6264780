//! Capture a step once, replay it many times.
//!
//! A loop that builds the same graph every iteration pays, per op, for the
//! C boundary, handle checks, shape construction and the gradient plan's
//! cache check before the kernel runs. [`Context::capture_begin`] and
//! [`Context::capture_end`] record one ordinary iteration (an eager forward
//! and `backward(loss)`); [`Context::replay`] then runs only its kernels
//! again, on the current parameters and input slots.
//!
//! # What a recorded step stores
//! * Its own activation memory ([`Activations`]: the bump arena and the
//!   recompute scratch region the capture allocated from), and the epoch
//!   (generation) the capture ran under. The step owns that memory until it
//!   is freed, so every buffer of the captured iteration (outputs, values
//!   saved for backward, copies of caller data, input slots, the planned
//!   gradient region) stays where it was: a replay writes the same bytes at
//!   the same addresses and allocates nothing.
//! * The forward log: every op run in the iteration, in order, as its `Copy`
//!   tape record, including ops on constants that the tape leaves out
//!   because they need no gradient (an op on an input slot must run again).
//! * The table rows and the tape as they stood after the capture's
//!   backward, its recomputation segments, the gradient plan it solved, the
//!   gradient region and the loss row.
//! * The parameter count and the arena bytes the step uses.
//!
//! # Residency
//! A step is *resident* when its memory, rows and epoch are the context's
//! current iteration: right after `capture_end`, and after each replay. Its
//! handles (loss, logits, input slots) carry its epoch, so they read the
//! values of the last replay exactly as the eager handles of an iteration
//! do. The eager memory is parked in the step meanwhile. `reset` (or any
//! call that starts another iteration) parks the step again and moves to an
//! epoch never issued before; epochs only grow, so a step's handles are
//! refused (STALE_HANDLE) whenever it is not resident, and for ever once it
//! is freed. While a step is resident no op can be added to its graph
//! (SEQUENCE: call reset first), so the recorded step never changes.
//!
//! # What replay checks, and why that is enough
//! Replay runs kernels without validating their operands: the ops were
//! validated when captured, their operands are rows of the step's own table
//! and buffers of its own memory, and none of those can change after
//! capture. What can change is outside the step, and is checked:
//! * the step handle (context, slot, epoch): freed or foreign steps are
//!   refused (STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE);
//! * the parameters: a parameter added since capture moves the parameter
//!   gradients and shifts table rows (SEQUENCE); parameter values and
//!   gradients themselves live in persistent buffers the rows name by id;
//! * the arena cap: lowered below the step's bytes, OUT_OF_MEMORY (the step
//!   holds that memory anyway, but the cap is the caller's promise);
//! * the sequence: not while a capture is open.
//!
//! All checks come before anything changes, so a refused replay leaves the
//! context as it was.
//! A step of small element-wise ops, slices, axis sums, `where`, concat,
//! permutes and views replays through a program resolved at capture end
//! (see `replay_program`): the same kernels, without the walk.
//!
//! Input slots ([`Context::input_new`]) and constants made by
//! [`Context::tensor`] are data no op computes: the caller rewrites them
//! ([`Context::input_write`]) between replays, at their captured shape.
//! The integer data an op copies when it is recorded (embedding ids,
//! cross-entropy targets) sits in the step's id buffers, numbered in
//! recording order; [`Context::input_write_ids`] rewrites one, checked as
//! the op checks its ids.
//!
//! # Costs
//! A step holds its activation memory for as long as it lives, beside the
//! eager arena (which evaluation or sampling between replays keep using):
//! memory is the step's high-water plus the eager one's. Switching between
//! the step and an eager iteration copies the step's table rows and tape
//! back (no allocation once both have run).
//!
//! # Not supported yet
//! * `dropout` (seed by value): its mask is drawn when recorded, so a replay
//!   would reuse it; `capture_end` refuses it (INVALID_ARGUMENT). Use
//!   `dropout_seeded`, whose seed is data (`seed_write`) like a batch.
//! * Ops after a replay on the replayed graph (refused, see residency), and
//!   grad mode changes between capture and replay (a replay always runs the
//!   captured forward and backward).
//! * Shapes that change (another batch size, a shorter sequence): capture
//!   another step for each shape.
//!
//! # Rooms
//! This file records a step; `resident` checks a step and makes it the
//! current iteration (what a replay drives); `inputs` holds the input
//! slots and the caller's writes into a step's data.

mod inputs;
mod resident;
pub(super) mod state;

use state::{Recorded, Recording};

use super::replay_program::Program;
use super::{Context, Step, Tensor, TensorEntry};
use crate::arena::{Buf, Storage};
use crate::error::{Error, Result};
use crate::ops::CaptureRule;
use crate::plan::GradPlan;
use crate::tape::Node;

impl Context {
    /// Starts capturing: ends the current iteration (as [`reset`] does)
    /// and records the next one (ops and one backward) into a step's own
    /// memory until [`capture_end`]. SEQUENCE if a capture is open.
    ///
    /// [`reset`]: Self::reset
    /// [`capture_end`]: Self::capture_end
    pub fn capture_begin(&mut self) -> Result<()> {
        const OP: &str = "capture_begin";
        if self.captures().recording().is_some() {
            return Err(Error::Sequence {
                op: OP,
                what: "a capture is already open (call ag_capture_end first)".into(),
            });
        }
        let rec = Box::new(Recording {
            act: Storage::empty_activations(),
            plan: GradPlan::default(),
            log: Vec::new(),
            log_failed: false,
            region: None,
            loss: None,
        });
        self.reset();
        let mut rec = rec;
        let epoch = self.generation();
        self.swap_iteration_memory(&mut rec.act, &mut rec.plan, epoch);
        self.captures_mut().start_recording(rec);
        Ok(())
    }

    /// Ends the capture opened by [`capture_begin`]: `loss` must be the
    /// tensor `backward` ran from in this iteration. The step becomes
    /// resident (its handles stay valid) and is returned. SEQUENCE without
    /// an open capture or a backward from `loss`; INVALID_ARGUMENT for a
    /// graph replay cannot reproduce (`dropout`, not `dropout_seeded`);
    /// ALLOCATION_FAILED if the step's records cannot be stored. On error
    /// the capture stays open (reset abandons it).
    ///
    /// [`capture_begin`]: Self::capture_begin
    pub fn capture_end(&mut self, loss: Tensor) -> Result<Step> {
        const OP: &str = "capture_end";
        let id = self.resolve(OP, loss)?;
        let Some(rec) = self.captures().recording() else {
            return Err(Error::Sequence {
                op: OP,
                what: "no capture is open (call ag_capture_begin first)".into(),
            });
        };
        // A loss that needs no gradient has no planned backward: its
        // backward only marks the iteration done.
        let no_grad = rec.loss.is_none() && !self.entry_ref(id).requires_grad;
        let ran_backward = self.backward_done() && (rec.loss == Some(id) || no_grad);
        if !ran_backward {
            return Err(Error::Sequence {
                op: OP,
                what: "ag_backward has not run from this loss since ag_capture_begin (a step is a forward and its backward)".into(),
            });
        }
        if rec.log_failed {
            return Err(Error::AllocationFailed {
                op: OP,
                bytes: size_of::<Node>() * (rec.log.len() + 1),
            });
        }
        if rec
            .log
            .iter()
            .any(|n| matches!(n.op.capture_rule(), CaptureRule::FixedSeed))
        {
            return Err(Error::InvalidArgument {
                op: OP,
                what: "the graph has an ag_dropout op: its mask is drawn from a seed passed by value, so a replay would reuse it (use ag_dropout_seeded, whose seed is an input slot written before each replay)".into(),
            });
        }
        let slot = self.captures_mut().free_slot(OP)?;
        if slot > u32::MAX as usize {
            return Err(Error::TooLarge {
                op: OP,
                what: "too many captured steps".into(),
            });
        }
        let n_params = self.param_count();
        // The step's copies of the rows and the tape (the forward log and
        // the memory move into it as they are).
        let n_rows = self.live_tensors() - n_params;
        let bytes = size_of::<TensorEntry>() * n_rows + size_of::<Node>() * self.tape_len();
        self.fault_point(OP, bytes)?;
        let failed = |_| Error::AllocationFailed { op: OP, bytes };
        let mut rows = Vec::new();
        rows.try_reserve_exact(n_rows).map_err(failed)?;
        rows.extend_from_slice(&self.table_rows()[n_params..]);
        let mut tape = Vec::new();
        tape.try_reserve_exact(self.tape_len()).map_err(failed)?;
        tape.extend_from_slice(self.tape_nodes());
        let Some(rec) = self.captures_mut().take_recording() else {
            return Err(Error::Sequence {
                op: OP,
                what: "no capture is open".into(),
            });
        };
        let rec = *rec;
        let program = Program::build(self, &rec.log, rec.region, id);
        let step = Recorded {
            epoch: self.generation(),
            // Resident from the start: the parked eager memory and plan.
            act: rec.act,
            plan: rec.plan,
            rows,
            tape,
            log: rec.log,
            segments: self.rc().segments_snapshot().to_vec(),
            inputs: self.captures().inputs().to_vec(),
            region: rec.region,
            loss: id,
            n_params,
            need: self.arena_stats().used,
            program,
        };
        let handle = Step {
            index: slot as u32,
            context: self.id(),
            generation: step.epoch,
        };
        self.captures_mut().put_step(slot, Box::new(step));
        self.captures_mut().set_resident(slot);
        Ok(handle)
    }

    /// Abandons an open capture (called by reset): the eager memory and
    /// plan come back, the capture's memory is freed.
    pub(crate) fn abandon_capture(&mut self) {
        if let Some(mut rec) = self.captures_mut().take_recording() {
            let epoch = self.generation();
            self.swap_iteration_memory(&mut rec.act, &mut rec.plan, epoch);
            // Nothing of the abandoned iteration is measured.
            self.rc_mut().set_segments(&[]);
            self.clear_backward_done();
        }
    }

    /// Frees captured step `s`; its handles are refused from now on. Ends
    /// the current iteration if it is this step's. INVALID_HANDLE,
    /// WRONG_CONTEXT, STALE_HANDLE (already freed).
    pub fn step_free(&mut self, s: Step) -> Result<()> {
        const OP: &str = "step_free";
        let k = self.resolve_step(OP, s)?;
        if self.captures().resident() == Some(k) {
            self.reset();
        }
        self.captures_mut().free_step(k);
        Ok(())
    }

    /// Number of live captured steps.
    pub fn step_count(&self) -> usize {
        self.captures().live_steps()
    }

    /// The region backward's activation gradients use: planned and
    /// allocated (the eager path; a capture keeps it), or during a replay
    /// the step's, with its plan already in place.
    pub(crate) fn grad_region(
        &mut self,
        op: &'static str,
        plan: &mut GradPlan,
        loss: u32,
    ) -> Result<Option<Buf>> {
        if let Some(region) = self.captures().replaying() {
            return Ok(region);
        }
        self.plan_backward(plan, loss);
        let region = match plan.total() {
            0 => None,
            n => Some(self.alloc_scratchable::<f32>(op, n)?),
        };
        self.captures_mut().note_backward(region, loss);
        Ok(region)
    }
}

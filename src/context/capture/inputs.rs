//! Input slots and the data a step reads: tensors no op computes (input
//! slots, constants), rewritten between replays, and a captured step's id
//! buffers (embedding ids, cross-entropy targets). Its own room: these are
//! the caller's writes into a step, checked as the ops check their data.

use super::Step;
use crate::context::{Context, Tensor, TensorEntry};
use crate::error::{Error, Result, StepProblem};
use crate::ops::{CaptureRule, IdAxis};

impl Context {
    /// An input slot of `shape`: a constant of this iteration, zero-filled,
    /// whose values the caller sets with [`input_write`] (before each
    /// replay, when made in a capture).
    ///
    /// [`input_write`]: Self::input_write
    pub fn input_new(&mut self, shape: &[usize]) -> Result<Tensor> {
        const OP: &str = "input_new";
        let shape = crate::shape::Shape::new(OP, shape)?;
        self.reserve_input(OP)?;
        // Kept out of any recomputed segment's scratch: it is not computed.
        self.reserve_slot(OP)?;
        let data = self.alloc_main::<f32>(OP, shape.numel())?;
        self.access_one(data).fill(0.0);
        let id = self.push_row(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad: false,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        });
        self.note_input(id);
        Ok(self.handle(id))
    }

    /// Room to note one more data tensor of this iteration.
    pub(crate) fn reserve_input(&mut self, op: &'static str) -> Result<()> {
        self.captures_mut().reserve_input(op)
    }

    /// Notes table row `id` as a data tensor ([`tensor`](Self::tensor) or
    /// an input slot): [`input_write`](Self::input_write) may rewrite it.
    pub(crate) fn note_input(&mut self, id: u32) {
        self.captures_mut().push_input(id);
    }

    /// Writes `data` (numel values) into input slot `t` (or a constant made
    /// by [`tensor`](Self::tensor): both are data no op computes). A slot of a
    /// captured step that is not the current iteration makes it current
    /// first (ending the current iteration, as reset does), so the next
    /// replay reads the new values.
    pub fn input_write(&mut self, t: Tensor, data: &[f32]) -> Result<()> {
        self.write_data("input_write", t, data)
    }

    /// [`input_write`](Self::input_write) for `op` (named in errors).
    pub(crate) fn write_data(&mut self, op: &'static str, t: Tensor, data: &[f32]) -> Result<()> {
        if t.context == self.id()
            && t.generation != self.generation()
            && let Some(k) = self.captures().step_of_epoch(t.generation)
        {
            self.check_replayable(op, k)?;
            let Some(step) = self.captures().step(k) else {
                return Err(Error::InvalidHandle { op, index: t.index });
            };
            let row = (t.index as usize)
                .checked_sub(self.param_count())
                .and_then(|i| step.rows.get(i));
            self.check_input(op, &step.inputs, row, t, data)?;
            self.make_resident(k);
        }
        let id = self.resolve(op, t)?;
        let e = self.entry(id);
        self.check_input(op, self.captures().inputs(), Some(&e), t, data)?;
        self.access_one(e.data).copy_from_slice(data);
        Ok(())
    }

    /// Row `id` is data (input slot, constant): nothing recomputes it.
    pub(crate) fn is_data(&self, id: u32) -> bool {
        self.captures().inputs().contains(&id)
    }

    /// Rewrites the `k`-th id buffer of captured step `s` (its embedding
    /// ids and cross-entropy targets, numbered from 0 in the order the ops
    /// were recorded) with `ids`, checked as the op checks them. Makes the
    /// step the current iteration, as [`input_write`](Self::input_write)
    /// does. INVALID_ARGUMENT (no such buffer, or a length other than
    /// its), INDEX_OUT_OF_RANGE, and the refusals of a replay.
    pub fn input_write_ids(&mut self, s: Step, k: usize, ids: &[i32]) -> Result<()> {
        const OP: &str = "input_write_ids";
        let idx = self.resolve_step(OP, s)?;
        self.check_replayable(OP, idx)?;
        let Some(step) = self.captures().step(idx) else {
            return Err(Error::BadStep {
                op: OP,
                index: s.index,
                why: StepProblem::Invalid,
            });
        };
        let n_params = self.param_count();
        let shape = |id: u32| match (id as usize).checked_sub(n_params) {
            None => self.entry_ref(id).shape,
            Some(i) => step.rows[i].shape,
        };
        // (buffer, bound, op name) of every id buffer, in log order.
        let buffers = step.log.iter().filter_map(|n| {
            let CaptureRule::Ids(b) = n.op.capture_rule() else {
                return None;
            };
            let dims = shape(b.bounded_by);
            let bound = match b.axis {
                IdAxis::First => dims.dims()[0],
                IdAxis::Last => dims.dims()[dims.ndim() - 1],
            };
            Some((b.ids, bound, b.op))
        });
        let count = buffers.clone().count();
        let Some((buf, bound, name)) = buffers.clone().nth(k) else {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "the step has {count} id buffers (embedding ids, cross-entropy targets); there is no buffer {k}"
                ),
            });
        };
        if ids.len() != buf.len() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} ids given; id buffer {k} ({name}) holds {}",
                    ids.len(),
                    buf.len()
                ),
            });
        }
        crate::ops::check_ids(OP, ids, bound)?;
        self.make_resident(idx);
        for (d, &v) in self.access_one(buf).iter_mut().zip(ids) {
            *d = v as u32;
        }
        Ok(())
    }

    fn check_input(
        &self,
        op: &'static str,
        inputs: &[u32],
        row: Option<&TensorEntry>,
        t: Tensor,
        data: &[f32],
    ) -> Result<()> {
        let Some(e) = row.filter(|_| inputs.contains(&t.index)) else {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "tensor {} is not an input slot (make one with ag_input_new, or ag_tensor_new)",
                    t.index
                ),
            });
        };
        if data.len() != e.shape.numel() {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "data has {} values but input slot shape {} needs {}",
                    data.len(),
                    e.shape,
                    e.shape.numel()
                ),
            });
        }
        Ok(())
    }
}

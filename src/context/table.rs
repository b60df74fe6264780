//! The tensor table: appending rows (parameters, constants, op outputs,
//! views) and recording the op that made one. Its own room: every op
//! passes through here once per output, so its checks stay few and inline.

use super::{Context, Tensor, TensorEntry};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::Shape;
use crate::tape::Node;

impl Context {
    /// Appends a parameter row of `shape` (values from `init`, else zeros)
    /// with its persistent gradient; all or nothing. The caller checked
    /// the shape and the sequence and names the parameter.
    pub(crate) fn push_param_row(
        &mut self,
        op: &'static str,
        shape: Shape,
        init: Option<&[f32]>,
    ) -> Result<u32> {
        self.reserve_param_row(op)?;
        let keep = self.persistent_blocks();
        let data = self.alloc_persistent(op, shape.numel())?;
        // The gradient goes at the end of the one gradient block (which may
        // move: every parameter's gradient is rebound below).
        if let Err(e) = self.grow_grads(op, shape.numel()) {
            self.truncate_persistent(keep);
            return Err(e);
        }
        if let Some(v) = init {
            self.access_one(data).copy_from_slice(v);
        }
        Ok(self.push_param_entry(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad: true,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        }))
    }

    /// A constant (non-trainable) activation holding a copy of `data`.
    pub fn tensor(&mut self, shape: &[usize], data: &[f32]) -> Result<Tensor> {
        const OP: &str = "tensor_new";
        let shape = Shape::new(OP, shape)?;
        if data.len() != shape.numel() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "data has {} values but shape {shape} needs {}",
                    data.len(),
                    shape.numel()
                ),
            });
        }
        self.reserve_input(OP)?;
        let id = self.push_output(OP, shape, false)?;
        let buf = self.entry(id).data;
        self.access_one(buf).copy_from_slice(data);
        self.note_input(id);
        Ok(self.handle(id))
    }

    #[inline]
    pub(crate) fn entry(&self, id: u32) -> TensorEntry {
        *self.entry_ref(id)
    }

    /// Whether an op over `inputs` is recorded (and its output needs a grad).
    pub(crate) fn tracks(&self, inputs: &[u32]) -> bool {
        self.grad_enabled() && inputs.iter().any(|&i| self.entry_ref(i).requires_grad)
    }

    /// Appends a fresh output of `shape` to the table. Its contents are
    /// unspecified (NaN with `debug-arena`): the op writes every element.
    #[inline(always)]
    pub(crate) fn push_output(
        &mut self,
        op: &'static str,
        shape: Shape,
        requires_grad: bool,
    ) -> Result<u32> {
        self.reserve_slot(op)?;
        // An output that needs no gradient is not recorded, so it could not
        // be replayed: it never goes to a recomputed segment's scratch,
        // unless grad mode is off (then nothing is replayed at all, and a
        // segment's internal tensors die with it).
        let data = if requires_grad || !self.grad_enabled() {
            self.alloc_scratchable::<f32>(op, shape.numel())?
        } else {
            self.alloc_main::<f32>(op, shape.numel())?
        };
        Ok(self.push_row(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        }))
    }

    /// Appends a view sharing `base`'s memory with a new shape.
    pub(crate) fn push_view(&mut self, op: &'static str, base: u32, shape: Shape) -> Result<u32> {
        self.reserve_slot(op)?;
        let b = self.entry(base);
        let requires_grad = self.grad_enabled() && b.requires_grad;
        let root = b.view_of.unwrap_or(base);
        let grad = if (root as usize) < self.param_count() {
            b.grad
        } else {
            None
        };
        Ok(self.push_row(TensorEntry {
            shape,
            data: b.data,
            grad,
            requires_grad,
            retain: false,
            view_of: Some(root),
            flow: false,
            unzeroed: false,
        }))
    }

    /// SEQUENCE while a captured step is the current iteration: its graph
    /// cannot grow.
    #[inline(always)]
    pub(crate) fn check_not_resident(&self, op: &'static str) -> Result<()> {
        match self.captures().resident() {
            Some(k) => Err(Error::Sequence {
                op,
                what: format!(
                    "the current iteration is captured step {k} (replayed or just captured); its graph cannot grow: call ag_reset first"
                ),
            }),
            None => Ok(()),
        }
    }

    #[inline(always)]
    pub(super) fn reserve_slot(&mut self, op: &'static str) -> Result<()> {
        self.check_not_resident(op)?;
        self.reserve_row(op)
    }

    /// Records `op` as the producer of `out` when `out` needs a gradient
    /// (capacity was reserved by push_output, so this never allocates).
    #[inline(always)]
    pub(crate) fn record(&mut self, op: Op, out: u32) {
        self.log_capture(op, out);
        if !self.entry_ref(out).requires_grad {
            return;
        }
        self.push_node(Node { op, out });
    }
}

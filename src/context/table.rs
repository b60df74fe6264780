//! The tensor table: appending rows (parameters, constants, op outputs,
//! views) and recording the op that made one. Its own room: every op
//! passes through here once per output, so its checks stay few and inline.

use super::{Context, Tensor, TensorEntry};
use crate::arena::Storage;
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
        self.table
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: size_of::<TensorEntry>(),
            })?;
        self.grad_ready.reserve(op, self.n_params + 1)?;
        let keep = self.store.persistent_blocks();
        let data = self.store.alloc_persistent(op, shape.numel())?;
        // The gradient goes at the end of the one gradient block (which may
        // move: every parameter's gradient is rebound below).
        if let Err(e) = self.store.grads_grow(op, shape.numel()) {
            self.store.truncate_persistent(keep);
            return Err(e);
        }
        if let Some(v) = init {
            self.store.access_one(data).copy_from_slice(v);
        }
        self.table.push(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad: true,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        });
        self.n_params += 1;
        self.bind_param_grads();
        Ok(self.n_params as u32 - 1)
    }

    pub(crate) fn bind_param_grads(&mut self) {
        let Some(block) = self.store.grads() else {
            return;
        };
        let mut offset = 0;
        for e in &mut self.table[..self.n_params] {
            let n = e.shape.numel();
            e.grad = Some(Storage::sub(block, offset, n));
            offset += n;
        }
        debug_assert_eq!(offset, block.len());
        for i in self.n_params..self.table.len() {
            if let Some(root) = self.table[i].view_of
                && (root as usize) < self.n_params
            {
                self.table[i].grad = self.table[root as usize].grad;
            }
        }
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
        let buf = self.table[id as usize].data;
        self.store.access_one(buf).copy_from_slice(data);
        self.note_input(id);
        Ok(self.handle(id))
    }

    pub(crate) fn entry(&self, id: u32) -> TensorEntry {
        self.table[id as usize]
    }

    /// Whether an op over `inputs` is recorded (and its output needs a grad).
    pub(crate) fn tracks(&self, inputs: &[u32]) -> bool {
        self.grad_enabled && inputs.iter().any(|&i| self.table[i as usize].requires_grad)
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
        let data = if requires_grad || !self.grad_enabled {
            self.store.alloc_scratchable::<f32>(op, shape.numel())?
        } else {
            self.store.alloc_main::<f32>(op, shape.numel())?
        };
        self.table.push(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        });
        Ok(self.table.len() as u32 - 1)
    }

    /// Appends a view sharing `base`'s memory with a new shape.
    pub(crate) fn push_view(&mut self, op: &'static str, base: u32, shape: Shape) -> Result<u32> {
        self.reserve_slot(op)?;
        let b = self.table[base as usize];
        let requires_grad = self.grad_enabled && b.requires_grad;
        let root = b.view_of.unwrap_or(base);
        let grad = if (root as usize) < self.n_params {
            b.grad
        } else {
            None
        };
        self.table.push(TensorEntry {
            shape,
            data: b.data,
            grad,
            requires_grad,
            retain: false,
            view_of: Some(root),
            flow: false,
            unzeroed: false,
        });
        Ok(self.table.len() as u32 - 1)
    }

    /// SEQUENCE while a captured step is the current iteration: its graph
    /// cannot grow.
    #[inline(always)]
    pub(crate) fn check_not_resident(&self, op: &'static str) -> Result<()> {
        match self.capture.resident() {
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
        if self.table.len() >= (u32::MAX - 1) as usize {
            return Err(Error::TooLarge {
                op,
                what: "too many tensors in one iteration".into(),
            });
        }
        // Past warm-up both have room: two compares, no call.
        if self.table.len() == self.table.capacity() {
            self.table
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed {
                    op,
                    bytes: size_of::<TensorEntry>(),
                })?;
        }
        if self.tape.len() == self.tape.capacity() {
            self.tape
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed {
                    op,
                    bytes: size_of::<Node>(),
                })?;
        }
        Ok(())
    }

    /// Records `op` as the producer of `out` when `out` needs a gradient
    /// (capacity was reserved by push_output, so this never allocates).
    #[inline(always)]
    pub(crate) fn record(&mut self, op: Op, out: u32) {
        self.capture.log(op, out);
        if !self.table[out as usize].requires_grad {
            return;
        }
        self.tape.push(Node { op, out });
    }
}

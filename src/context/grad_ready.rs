//! The context's side of gradient-ready notifications (`crate::grad_ready`):
//! setting the callback, and backward's hooks, which hand the bookkeeping
//! the parameters' sizes, the tape's reads and the gradient block.

use super::Context;
use crate::error::Result;
use crate::grad_ready::GradReadyFn;

impl Context {
    /// Calls `callback` during every later [`backward`](Self::backward)
    /// whenever a bucket of the gradient block is final (see
    /// [`GradEvent`](crate::GradEvent) and the `grad_ready` module docs),
    /// buckets being runs of whole parameters of at least `bucket_bytes`
    /// bytes (0: one parameter per bucket); `None` removes the callback.
    /// The callback cannot call into the context (it is borrowed by
    /// backward).
    pub fn set_grad_ready(
        &mut self,
        bucket_bytes: usize,
        callback: Option<GradReadyFn>,
    ) -> Result<()> {
        const OP: &str = "set_grad_ready_callback";
        let n = self.param_count();
        self.fault_point(OP, n.saturating_mul(24))?;
        let mut ready = self.take_grad_ready();
        let reserved = ready.reserve(OP, n);
        if reserved.is_ok() {
            ready.set(bucket_bytes, callback);
        }
        self.put_grad_ready(ready);
        reserved
    }

    /// Backward's hook before its walk over `tape_len` ops, once the loss's
    /// gradient is seeded: reports the buckets nothing on the tape reads.
    pub(crate) fn grad_ready_start(&mut self, tape_len: u32) {
        let mut ready = self.take_grad_ready();
        let sizes = |p: u32| self.entry(p).shape.numel();
        let reads = |i: u32, f: &mut dyn FnMut(u32)| {
            for &input in self.node(i).op.inputs().as_slice() {
                f(self.entry(input).view_of.unwrap_or(input));
            }
        };
        if ready.start(self.param_count(), &sizes, tape_len, &reads) {
            ready.passed(self.grads_slice(), None);
        }
        self.put_grad_ready(ready);
    }

    /// Backward's hook after tape position `at` (its op differentiated or
    /// skipped).
    pub(crate) fn grad_ready_passed(&mut self, at: u32) {
        if self.grad_ready().idle() {
            return;
        }
        let mut ready = self.take_grad_ready();
        ready.passed(self.grads_slice(), Some(at));
        self.put_grad_ready(ready);
    }

    /// For a backward that walks nothing (the loss needs no gradient):
    /// every bucket is final as it is.
    pub(crate) fn grad_ready_all(&mut self) {
        self.grad_ready_start(0);
    }

    /// The gradient block's floats, if the block exists.
    fn grads_slice(&mut self) -> Option<&mut [f32]> {
        let block = self.grads_block()?;
        Some(self.access_one(block))
    }
}

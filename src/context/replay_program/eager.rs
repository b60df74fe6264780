//! The replay program's generic step ([`Kind::Eager`](super::Kind)): an op
//! with no kernel of the program's own (the incomplete beta function, the
//! matrix ops) runs through the very entry points the eager dispatch
//! calls for it. Its forward needs nothing more: it reads and writes the
//! table's values. Its backward reads the walk's gradient state from the
//! table (each row's gradient slot, its root's "born but not written"
//! mark), which the program keeps in its own rows instead: before the
//! call, the op's output and input rows get the program's state; after
//! it, the marks come back to the program (the kernel may have cleared
//! them) and the table's rows are put back as they were. So the values
//! and the marks change exactly as in the ordinary walk.

use super::{OneKernels, Program, Side, Step1};
use crate::context::Context;
use crate::ops::{MAX_INPUTS, Op};

/// An op's eager forward and backward entry points, given by the caller
/// (the ops' dispatch): the context's modules do not import the ops.
pub(crate) trait EagerOps {
    /// Computes `op` into `out` (and the buffers it saves), as the eager
    /// forward dispatch.
    fn eager_forward(ctx: &mut Context, op: &Op, out: u32);
    /// Sends `out`'s gradient to `op`'s inputs, as the eager backward
    /// dispatch (the walk's gradient state in the table).
    fn eager_backward(ctx: &mut Context, op: &Op, out: u32);
}

impl Program {
    /// The forward of an op with no kernel of the program's own: its
    /// eager entry point on its own rows.
    // Cold and out of line: a scalar model's op loop keeps its small match.
    #[cold]
    #[inline(never)]
    pub(super) fn forward_eager<K: OneKernels>(ctx: &mut Context, side: &Side, s: Step1, k: u32) {
        K::eager_forward(ctx, &side.eager[k as usize].op, s.out);
    }

    /// The backward of such an op: its eager entry point, with the
    /// program's gradient state lent to the table rows it reads (listed at
    /// capture).
    #[cold]
    #[inline(never)]
    pub(super) fn backward_eager<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1, k: u32) {
        let e = &self.side.eager[k as usize];
        let lend = &e.lend[..e.n as usize];
        // What the table held (the row's gradient buffer, its root's buffer
        // and mark), put back after.
        let mut held = [(None, None, false); MAX_INPUTS + 1];
        for (h, &(id, root)) in held.iter_mut().zip(lend) {
            let state = self.rows[root as usize];
            let r = ctx.entry_ref(root);
            *h = (ctx.entry_ref(id).grad, r.grad, r.unzeroed);
            let r = ctx.entry_mut(root);
            r.grad = state.grad;
            r.unzeroed = state.unzeroed;
            ctx.entry_mut(id).grad = state.grad;
        }
        K::eager_backward(ctx, &e.op, s.out);
        for &(_, root) in lend {
            self.rows[root as usize].unzeroed = ctx.entry_ref(root).unzeroed;
        }
        // In reverse: a row lent twice ends as it was before the first.
        for (&(id, root), &(grad, root_grad, root_mark)) in
            lend.iter().zip(&held[..lend.len()]).rev()
        {
            let r = ctx.entry_mut(root);
            r.grad = root_grad;
            r.unzeroed = root_mark;
            ctx.entry_mut(id).grad = grad;
        }
    }
}

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
use crate::arena::Buf;
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

/// A table row lent the program's gradient state during an eager
/// backward: what the table held before (the row's gradient buffer, its
/// root's buffer and mark), put back after.
#[derive(Clone, Copy)]
struct Lent {
    id: u32,
    grad: Option<Buf>,
    root: u32,
    root_grad: Option<Buf>,
    root_mark: bool,
}

impl Program {
    /// The forward of an op with no kernel of the program's own: its
    /// eager entry point on its own rows.
    // Cold and out of line: a scalar model's op loop keeps its small match.
    #[cold]
    #[inline(never)]
    pub(super) fn forward_eager<K: OneKernels>(ctx: &mut Context, side: &Side, s: Step1, k: u32) {
        K::eager_forward(ctx, &side.eager[k as usize], s.out);
    }

    /// The backward of such an op: its eager entry point, with the
    /// program's gradient state lent to the table rows it reads.
    #[cold]
    #[inline(never)]
    pub(super) fn backward_eager<K: OneKernels>(&mut self, ctx: &mut Context, s: Step1, k: u32) {
        let op = self.side.eager[k as usize];
        let none = Lent {
            id: 0,
            grad: None,
            root: 0,
            root_grad: None,
            root_mark: false,
        };
        // The output and each input (an input named twice is lent twice).
        let mut lent = [none; MAX_INPUTS + 1];
        let mut n = 0;
        let rows = &self.rows;
        let mut lend = |id: u32| {
            // A view reads its root's slot and mark (the program's rows
            // hold them under the root).
            let root = ctx.entry_ref(id).view_of.unwrap_or(id);
            let state = rows[root as usize];
            let (grad, r) = (ctx.entry_ref(id).grad, *ctx.entry_ref(root));
            lent[n] = Lent {
                id,
                grad,
                root,
                root_grad: r.grad,
                root_mark: r.unzeroed,
            };
            n += 1;
            let r = ctx.entry_mut(root);
            r.grad = state.grad;
            r.unzeroed = state.unzeroed;
            ctx.entry_mut(id).grad = state.grad;
        };
        lend(s.out);
        op.for_each_input(&mut lend);
        K::eager_backward(ctx, &op, s.out);
        for l in &lent[..n] {
            self.rows[l.root as usize].unzeroed = ctx.entry_ref(l.root).unzeroed;
        }
        // In reverse: a row lent twice ends as it was before the first.
        for l in lent[..n].iter().rev() {
            let r = ctx.entry_mut(l.root);
            r.grad = l.root_grad;
            r.unzeroed = l.root_mark;
            ctx.entry_mut(l.id).grad = l.grad;
        }
    }
}

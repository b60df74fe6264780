//! A captured step's replay program: the fast path of
//! [`Context::replay`](crate::Context::replay) for a step made of small
//! ops: one-element ops (a scalar model: binary,
//! unary, scale, pow or clamp ops on one-element tensors), the same
//! element-wise ops on a few elements (at most [`MAXN`]) or on more (any
//! broadcast included), sums and means over all elements or along one axis,
//! logsumexp along one axis, `where`, slices, concats and permutes, on
//! tensors or on reshape views of them; and any other op whose forward and
//! backward touch only its own table rows and saved buffers (the op
//! table's `ReplayForm::Eager`: the incomplete beta function, the matrix
//! functions, matmuls, norms, losses, attention, convolutions and pools),
//! run through its own eager entry points with the program's gradient
//! state lent to its rows (`eager`).
//!
//! At capture end such a step's forward log and tape are resolved once
//! into flat lists of (op, operand rows), and its backward walk into what
//! the walk does that does not depend on values: which ops the loss's
//! gradient reaches, where each planned gradient is born, every gradient
//! slot's buffer and which rows need a gradient. A binary op on a few
//! elements keeps, per output element, the element of each operand it
//! reads (its broadcast, resolved once); an element-wise op on more keeps
//! its operands' rows and shapes, and runs as its eager path does: the
//! eager forward entry point on those rows (threads and SIMD as it
//! decides), the eager backward kernels on the whole buffers once the
//! program has looked the gradients up in the eager order. A view (a reshape: same buffer,
//! same gradient slot, same "born" mark as the tensor it views) is
//! resolved to that tensor once its shape has shaped the op reading it.
//! A replay then runs the same
//! kernels (the element kernels of `ops::elementwise::scalar`, the sum,
//! logsumexp, select, slice, concat and permute kernels, which the eager paths also run) in
//! the same order on the
//! same buffers, element by element in the eager loops' order (so a
//! broadcast operand's gradient sums in the same order), and keeps the
//! walk's only value-independent state that changes, the "born but not
//! written" mark of each gradient slot, in its own list, updated exactly
//! as `backward` updates the table's: so the values are the eager path's,
//! bit for bit. What it skips is what capture already settled: op
//! dispatch, shape compares and broadcast strides, the overlap checks of a
//! kernel's buffers (capture ran them on the same buffers) and the walk's
//! flow and table bookkeeping.
//!
//! A step made of small ops (element-wise ops, sums of all elements,
//! slices and concats, on tensors of up to a few thousand elements, most
//! of them on at most [`MAXN`]) also gets a dense form (`dense`): the
//! same kernels as instructions over dense value and gradient arrays,
//! the marks' effects resolved at capture; its other ops run as here.
//!
//! Anything else takes the ordinary path: a step with an op with no replay
//! form (dropout, batch norm), a retained activation gradient or a
//! recomputed segment, a loss that needs no gradient, a view made with
//! gradients off of a tensor that needs one; and any replay while
//! a gradient-ready callback is set (the ordinary walk fires it) or a
//! recompute segment is open, and every replay in a build with op timing
//! (feature `trace`).
//!
//! Buffers are reached through [`Storage`](crate::arena::Storage)'s checked accessors (live epoch
//! per access), so no unsafe code is needed. Parameter buffers are read
//! from the table at each replay, never cached: they move when the
//! gradient block is reallocated.
//!
//! `build` makes a step's program at capture end; `run` replays it.

use crate::arena::Buf;
use crate::context::Context;
use crate::ops::{BinaryFn, MAX_CONCAT, MAX_INPUTS, OneOp, Op, UnaryFn};
use crate::shape::{MAX_DIMS, Shape};

mod build;
mod dense;
mod eager;
mod run;

pub(crate) use eager::EagerOps;

/// The element kernels a program runs, given by the caller
/// (`ops::elementwise::scalar::ScalarKernels`, the ones the eager paths
/// run): the context's modules do not import the ops, which import them.
/// With them, each op's eager entry points ([`EagerOps`]).
pub(crate) trait OneKernels: EagerOps {
    /// The output of `op` on one element (`y` read by binary ops only).
    fn forward(op: OneOp, x: f32, y: f32) -> f32;
    /// `dx` after the backward kernel of a unary, scale, pow or clamp op.
    fn backward(op: OneOp, assign: bool, dx: f32, g: f32, x: f32, y: f32) -> f32;
    /// `d` after `add_scaled_into` on one element.
    fn add_scaled(d: f32, g: f32, s: f32, assign: bool) -> f32;
    /// What a binary op adds to its first operand's gradient.
    fn grad_a(f: BinaryFn, g: f32, a: f32, b: f32) -> f32;
    /// What a binary op adds to its second operand's gradient.
    fn grad_b(f: BinaryFn, g: f32, a: f32, b: f32) -> f32;
    /// The sum (or mean) of `x`, as the eager reduce.
    fn sum(x: &[f32], mean: bool) -> f32;
    /// The eager reduce's backward: `dx += g` (or `g / N`).
    fn sum_backward(dx: &mut [f32], g: f32, mean: bool);
    /// The eager slice's forward: `y[o, ..] = x[o, off..off + len]`.
    fn slice(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize);
    /// The eager slice's backward: `dx[o, off..off + len] += dout[o, ..]`.
    fn slice_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize);
    /// The eager axis reduce: x `[outer, n, inner]` summed (or averaged)
    /// along n into y `[outer, inner]`.
    fn sum_axis(y: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize, mean: bool);
    /// Its backward: `dx[o, j, i] += dout[o, i]` (over n for a mean).
    fn sum_axis_backward(
        dx: &mut [f32],
        dout: &[f32],
        outer: usize,
        n: usize,
        inner: usize,
        mean: bool,
    );
    /// The eager logsumexp along an axis: x `[outer, n, inner]` into y
    /// `[outer, inner]`.
    fn logsumexp_axis(y: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize);
    /// Its backward: `dx[o, j, i] += dout[o, i] * softmax_j(x[o, :, i])`.
    fn logsumexp_axis_backward(
        dx: &mut [f32],
        dout: &[f32],
        x: &[f32],
        outer: usize,
        n: usize,
        inner: usize,
    );
    /// The eager `where`: `out = cond != 0 ? a : b`, shapes (out, cond,
    /// a, b) as `shapes`.
    fn select(out: &mut [f32], cond: &[f32], a: &[f32], b: &[f32], shapes: &[Shape; 4]);
    /// Its backward into the operand `take` names (a if true, else b).
    fn select_backward(dx: &mut [f32], dout: &[f32], cond: &[f32], take: bool, shapes: &[Shape; 4]);
    /// One input's band of the eager concat: `y[o, off..off + len] = x[o, ..]`.
    fn concat(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize);
    /// Its backward: `dx[o, ..] += dout[o, off..off + len]`.
    fn concat_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize);
    /// The eager permute: `y[o] = x[src(o)]`, shapes (x, y), output axis
    /// i is input axis `perm[i]`.
    fn permute(y: &mut [f32], x: &[f32], shapes: &[Shape; 2], perm: &[u8]);
    /// Its backward: `dx[src(o)] += dout[o]`.
    fn permute_backward(dx: &mut [f32], dout: &[f32], shapes: &[Shape; 2], perm: &[u8]);
    /// The eager forward of an element-wise op (binary, unary, scale, pow
    /// or clamp) on table rows `out`, `a` and `b` (`b` read by binary ops
    /// only): its very entry point, threads and SIMD as it decides.
    fn forward_rows(ctx: &mut Context, op: OneOp, out: u32, a: u32, b: u32);
    /// The eager backward kernel of unary op `f` on more than one element
    /// (table rows `out` and `x`), into `dx` (newborn if `fresh`), once the
    /// walk has looked up the gradients as `backward_unary` does.
    fn unary_backward_rows(
        ctx: &mut Context,
        dout: Buf,
        dx: (Buf, bool),
        out: u32,
        x: u32,
        f: UnaryFn,
    );
    /// The eager forward kernel of an element-wise op over slices: `y`
    /// from `a` (and `b`, for a binary op), shapes (out, a, b).
    fn forward_slices(op: OneOp, y: &mut [f32], a: &[f32], b: &[f32], shapes: &[Shape; 3]);
    /// The eager backward kernel of unary op `f` over slices (`x` its
    /// input, `y` its output), `assign` as the eager path decides.
    fn unary_backward(f: UnaryFn, assign: bool, dx: &mut [f32], dout: &[f32], x: &[f32], y: &[f32]);
    /// The eager backward kernel of a scale, pow or clamp op over slices.
    fn map_backward(op: OneOp, dx: &mut [f32], dout: &[f32], x: &[f32]);
    /// The eager `add_scaled_into` over slices (the equal-shape add and
    /// sub's backward).
    fn add_scaled_into(d: &mut [f32], g: &[f32], s: f32, assign: bool);
    /// The eager broadcasting backward of binary op `f` into its first
    /// operand's gradient (`into_a`) or its second's; shapes (out, a, b).
    #[allow(clippy::too_many_arguments)]
    fn binary_backward(
        f: BinaryFn,
        into_a: bool,
        d: &mut [f32],
        dout: &[f32],
        a: &[f32],
        b: &[f32],
        shapes: &[Shape; 3],
    );
}

/// The most elements of an element-wise op a program runs element by
/// element (its broadcast indices are bytes); larger ones run the eager
/// kernels on whole buffers ([`Kind::Wide`]).
pub(crate) const MAXN: usize = 16;

/// What a recorded op does, resolved at capture.
#[derive(Clone, Copy)]
enum Kind {
    /// Every operand one element.
    One(OneOp),
    /// A unary, scale, pow or clamp op on up to [`MAXN`] elements.
    Map(OneOp),
    /// A binary op on up to [`MAXN`] output elements; its operands'
    /// element indices are `Program::bcast[.2]`.
    Bin(BinaryFn, u32),
    /// An element-wise op (binary, unary, scale, pow or clamp) on more
    /// than [`MAXN`] elements, run by the eager kernels on whole buffers;
    /// the op, its operands as the op named them and its shapes are
    /// `Program::wide[.0]` (kept there: a step stays small).
    Wide(u32),
    /// Sum (false) or mean (true) of all elements.
    Sum(bool),
    /// A slice: rows of `row` input elements, `len` taken from `off`.
    Slice { row: u32, off: u32, len: u32 },
    /// A slice of one element, the input's element `.0` (the slice
    /// kernels' one copy and one `+=`, without their row loops).
    Pick(u32),
    /// Sum (false) or mean (true) along the middle axis of the input
    /// seen as `[outer, n, inner]`.
    SumAxis {
        outer: u32,
        n: u32,
        inner: u32,
        mean: bool,
    },
    /// logsumexp along the middle axis of the input seen as
    /// `[outer, n, inner]`.
    LogSumExpAxis { outer: u32, n: u32, inner: u32 },
    /// `where`: a and b are the step's operands, the condition and the
    /// shapes are `Program::selects[.0]`.
    Select(u32),
    /// A concat: its inputs and bands are `Program::joins[.0]` (`a` is
    /// its first input).
    Join(u32),
    /// A permute: its shapes and axis order are `Program::permutes[.0]`.
    Permute(u32),
    /// Any other op with a replay form, run by its own eager entry points
    /// (see `eager`): its record is `Program::eager[.0]`.
    Eager(u32),
}

/// A permute's input and output shapes and its axis order (the first
/// rank entries used).
#[derive(Clone, Copy)]
struct Permute {
    shapes: [Shape; 2],
    perm: [u8; MAX_DIMS],
}

/// A wide element-wise op: the op, its operand rows as the op named them (views
/// unresolved, for the eager forward, which reads their shapes) and its
/// shapes: (out, a, b).
#[derive(Clone, Copy)]
struct Wide {
    op: OneOp,
    a: u32,
    b: u32,
    shapes: [Shape; 3],
}

/// A `where`'s condition row and its shapes: (out, cond, a, b).
#[derive(Clone, Copy)]
struct Select {
    cond: u32,
    shapes: [Shape; 4],
}

/// A concat's inputs, in order, with each one's band of an output row of
/// `row` elements.
#[derive(Clone, Copy)]
struct Join {
    xs: [u32; MAX_CONCAT],
    lens: [u32; MAX_CONCAT],
    n: u8,
    row: u32,
}

/// One recorded op: its kind and table rows (`b` is `a` for one-input ops).
#[derive(Clone, Copy)]
struct Step1 {
    op: Kind,
    out: u32,
    a: u32,
    b: u32,
    /// Backward: a and b have the output's shape (the binary add/sub path).
    same: bool,
    /// Backward: the loss's gradient reaches this op's output.
    runs: bool,
}

/// A binary op's broadcast: per output element, the element of `a` and
/// of `b` it reads, in output order.
#[derive(Clone, Copy)]
struct Bcast {
    n: u8,
    ia: [u8; MAXN],
    ib: [u8; MAXN],
}

impl Bcast {
    /// The operands' strides when each reads its elements in order or
    /// one element throughout (1 or 0), else None.
    fn strides(&self) -> Option<(u8, u8)> {
        let n = self.n as usize;
        let stride = |ix: &[u8; MAXN]| {
            let ix = &ix[..n];
            if ix.iter().all(|&i| i == 0) {
                Some(0)
            } else if ix.iter().enumerate().all(|(o, &i)| i as usize == o) {
                Some(1)
            } else {
                None
            }
        };
        Some((stride(&self.ia)?, stride(&self.ib)?))
    }
}

/// A table row as the program reads it: the row's buffer and gradient
/// slot (activations' from the plan's region), whether it needs a
/// gradient, and the walk's "born, not written yet" mark. A quarter of
/// the table's row, so a walk touches fewer cache lines.
#[derive(Clone, Copy)]
struct Row {
    data: Buf,
    grad: Option<Buf>,
    needs: bool,
    unzeroed: bool,
}

/// An op run by its own eager entry points, with the table rows its
/// backward reads the walk's state from, resolved at capture: its output,
/// then each input as the op names them (one named twice, twice), each
/// with its root (a view's tensor, whose slot and mark the view reads).
#[derive(Clone, Copy)]
struct EagerStep {
    op: Op,
    lend: [(u32, u32); MAX_INPUTS + 1],
    n: u8,
}

/// What some ops keep beside their step (too large for it).
#[derive(Default)]
struct Side {
    bcast: Vec<Bcast>,
    wide: Vec<Wide>,
    selects: Vec<Select>,
    joins: Vec<Join>,
    permutes: Vec<Permute>,
    eager: Vec<EagerStep>,
}

/// A step's program (see the module docs).
pub(crate) struct Program {
    fwd: Vec<Step1>,
    /// The tape, in tape order (walked in reverse).
    bwd: Vec<Step1>,
    /// The broadcasts of the binary ops on several elements, the
    /// `where`s and the concats.
    side: Side,
    /// The plan's births in walk order: (position, row).
    births: Vec<(u32, u32)>,
    /// What the walk reads of every table row, dense (parameters'
    /// refreshed from the table at each replay).
    rows: Vec<Row>,
    loss: u32,
    n_params: usize,
    /// The same step as one-element instructions over dense arrays, for
    /// a step of one-element ops and slices only (see `dense`).
    dense: Option<Box<dense::Dense>>,
}

#[cfg(test)]
mod tests;

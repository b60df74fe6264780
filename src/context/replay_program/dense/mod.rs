//! The program of a step of small ops only (a scalar model, or one over
//! short vectors: element-wise ops on at most `MAXN` elements, sums of
//! all elements, slices and concats), in a compact form: each element of
//! each op an instruction over one dense value array and one dense
//! gradient array (a sum one instruction over a range), the walk's
//! "born, not written yet" marks resolved at capture. Element-wise ops
//! on more elements (at most `WIDE_MAX`: a data series' residuals) are
//! one instruction each, the eager kernels on the ranges, their shapes
//! and broadcasts the eager path's, so the same loops and bits.
//!
//! The general program reads and writes each scalar through its arena
//! buffer (a live-epoch check per access) and keeps the marks in its rows,
//! testing them at each gradient access; on a scalar recursion that
//! bookkeeping, not the arithmetic, was the cost of an op. Here capture
//! walks the backward once without values, doing what `run` does to the
//! marks, and writes down what each access did: a slot's first write
//! starts from 0.0 (the walk's zero fill, then `+=`) or overwrites it
//! whole, exactly where the walk would. The kernels are the same
//! (`OneKernels`), called on the same values in the same order, so the
//! bits are the general program's.
//!
//! Each tensor has a range of slots in each array, its elements in
//! order. Values from outside the ops (parameters, inputs, constants, of
//! at most `OUTSIDE_MAX` elements) are read into the value array before
//! the forward, the elements the ops read only (runs of consecutive
//! elements one copy each); every element an op
//! computes is written back to its buffer after it (a caller may read
//! any activation);
//! parameters' gradients are read in before the walk and written back
//! after it. Activations' gradients never leave the array: they are not
//! kept past the walk (a retained one takes the ordinary path).
//!
//! The marks are known at capture for activations only: a parameter's
//! is the table's at replay time, clear after a finished walk or
//! `zero_grad`. The walk assumes it clear and each parameter's gradient
//! state as at capture; a replay that finds otherwise runs the general
//! program.

// The build (`build`, its backward half `walk`) and the replay (`run`)
// live in child modules: this file, which the program names, imports
// neither the context nor the program (no import cycle through it).

use crate::arena::Buf;
use crate::ops::{BinaryFn, OneOp, UnaryFn};

mod build;
mod run;
#[cfg(test)]
mod tests;
mod walk;
mod wide;

use wide::{WideB, WideF};

/// A forward instruction's op on one element, a copy (an element of a
/// slice or concat), the sum (mean) of `n` values from `a` on, or a
/// vector form (`Dense::fwd_n[.0]`).
#[derive(Clone, Copy)]
enum Code {
    Op(OneOp),
    Copy,
    Sum {
        n: u32,
        mean: bool,
    },
    Vector(u32),
    /// An element-wise op on more than `MAXN` elements, `Dense::wide_f[.0]`.
    Wide(u32),
    /// An op the dense form does not run, `Dense::escapes_f[.0]`.
    Escape(u32),
}

/// `vals[out] = code(vals[a], vals[b])` (`b` read by binary ops only);
/// its output is written back to `Dense::stores` at the same index.
#[derive(Clone, Copy)]
struct Fwd {
    code: Code,
    out: u32,
    a: u32,
    b: u32,
}

/// A vector form: `op` (a copy if None) on `n` elements, element i
/// reading `a + i * sa` and `b + i * sb` (a stride 0 is a broadcast
/// operand); its `n` outputs are written back to `Dense::stores` at the
/// instruction's index (a buffer of `n`). Kept apart so that the
/// one-element instructions, a scalar model's, stay small.
#[derive(Clone, Copy)]
struct FwdN {
    op: Option<OneOp>,
    out: u32,
    a: u32,
    b: u32,
    n: u32,
    sa: u8,
    sb: u8,
}

/// What a backward instruction does to `grads[d]` (`g` the output's
/// gradient slot, `a` and `b` value slots). `zero`: the slot was born and
/// this is its first write, which starts from 0.0 as the walk's zero
/// fill then `+=` does.
#[derive(Clone, Copy)]
enum Grad {
    /// `grads[d..d + len] = 0` (a zero fill not folded into a write).
    Fill(u32),
    /// The loss's seed: `grads[d] += 1`.
    Seed,
    /// `add_scaled` (the equal-shape add and sub): `assign` overwrites.
    AddScaled {
        k: f32,
        assign: bool,
    },
    /// `grads[d] += grad_a(f, grads[g], vals[a], vals[b])`.
    GradA {
        f: BinaryFn,
        zero: bool,
    },
    /// `grads[d] += grad_b(f, grads[g], vals[a], vals[b])`.
    GradB {
        f: BinaryFn,
        zero: bool,
    },
    /// A unary op's backward: input `vals[a]`, output `vals[b]`.
    Unary {
        f: UnaryFn,
        assign: bool,
        zero: bool,
    },
    /// A scale, pow or clamp op's backward: input `vals[a]`.
    Map {
        op: OneOp,
        zero: bool,
    },
    /// An element of a slice's or concat's backward: `grads[d] +=
    /// grads[g]`.
    Pick {
        zero: bool,
    },
    /// A sum's (mean's) backward into `grads[d..d + n]`, from `grads[g]`.
    SumBack {
        n: u32,
        mean: bool,
    },
    /// A vector form, `Dense::bwd_n[.0]`.
    Vector(u32),
    /// A wide op's kernel, `Dense::wide_b[.0]`.
    Wide(u32),
    /// An op the dense form does not run, `Dense::escapes_b[.0]`.
    Escape(u32),
    /// A gradient born at this point of the walk whose tensor the dense
    /// form does not hold (`d`, a table row): its mark in the program's
    /// rows, as `Program::mark_births`.
    Birth,
    /// The vector forms' ops: each of [`Grad::AddScaled`], `GradA` (`BinaryAN`),
    /// `GradB` (`BinaryBN`), `Unary`, `Map` and `Pick` on `BwdN::n` elements. A
    /// `zero` is a one-element slot's (written at stride 0), except
    /// `UnaryN`'s: each element's.
    AddScaledN {
        k: f32,
        assign: bool,
    },
    BinaryAN {
        f: BinaryFn,
        zero: bool,
    },
    BinaryBN {
        f: BinaryFn,
        zero: bool,
    },
    UnaryN {
        f: UnaryFn,
        assign: bool,
        zero: bool,
    },
    MapN {
        op: OneOp,
    },
    PickN,
}

#[derive(Clone, Copy)]
struct Bwd {
    op: Grad,
    d: u32,
    g: u32,
    a: u32,
    b: u32,
}

/// A vector form of a backward instruction: element i writes `d + i *
/// sd` from `g + i`, `a + i * sa` and `b + i * sb`.
#[derive(Clone, Copy)]
struct BwdN {
    op: Grad,
    d: u32,
    g: u32,
    a: u32,
    b: u32,
    n: u32,
    sd: u8,
    sa: u8,
    sb: u8,
}

/// An op the dense form does not run (a matrix op, an element-wise op
/// on more than `MAXN` elements, ...), an escape: the general program's
/// forward for it, then its output's values read into `vals[load.0..]`
/// (`load.1` of them) if a dense instruction reads them.
#[derive(Clone, Copy)]
struct EscapeF {
    step: crate::context::replay_program::Step1,
    load: Option<(u32, u32)>,
}

/// An escape's backward: the general program's, on the program's rows.
/// Before it, each of the op's rows in `before` gets the mark the walk
/// has for it at that point, and its gradient, if the dense array holds a
/// value of it, written to its buffer (`sync`: its slot and length);
/// after it, each input in `after` (row, slot, length) comes back to the
/// dense array: its buffer if the op wrote it, zeros if it only stayed
/// born. (In that last case the general walk would let the next writer
/// assign where this one adds to zeros: the same value, but for a -0.0,
/// which would read +0.0: it takes an op that never looks up a wanted
/// input's gradient, since a lookup settles the mark.)
struct EscapeB {
    step: crate::context::replay_program::Step1,
    before: Vec<Lent>,
    after: Vec<(u32, u32, u32)>,
}

/// A row an escape's backward reads: (row, its mark, `sync`).
type Lent = (u32, bool, Option<(u32, u32)>);

/// A small step's compact program (see the module docs).
pub(super) struct Dense {
    fwd: Vec<Fwd>,
    bwd: Vec<Bwd>,
    fwd_n: Vec<FwdN>,
    bwd_n: Vec<BwdN>,
    wide_f: Vec<WideF>,
    wide_b: Vec<WideB>,
    escapes_f: Vec<EscapeF>,
    escapes_b: Vec<EscapeB>,
    /// Values from outside the ops, read before the forward: (row,
    /// first element, first value slot, elements).
    loads: Vec<(u32, u32, u32, u32)>,
    /// Each forward instruction's output (the elements it computes of its
    /// buffer), written as it is computed (the stores overlap the op
    /// chain's latency).
    stores: Vec<Buf>,
    /// The parameters' gradients the walk reads or writes: (row, first
    /// gradient slot, elements).
    param_grads: Vec<(u32, u32, u32)>,
    /// Per parameter, the state the walk was resolved for: whether it
    /// needs a gradient and its gradient buffer's length, if any.
    param_state: Vec<(bool, Option<usize>)>,
    vals: Vec<f32>,
    grads: Vec<f32>,
}

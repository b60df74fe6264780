//! The program of a step whose every op is a one-element op or a
//! one-element slice (a scalar model), in a compact form: each op an
//! instruction over one dense value array and one dense gradient array,
//! the walk's "born, not written yet" marks resolved at capture.
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
//! Values from outside the ops (parameters, inputs, constants) are read
//! into the value array before the forward, every op's output is written
//! back to its buffer after it (a caller may read any activation);
//! parameters' gradients are read in before the walk and written back
//! after it. Activations' gradients never leave the array: they are not
//! kept past the walk (a retained one takes the ordinary path).
//!
//! The marks are known at capture for activations only: a parameter's
//! is the table's at replay time, clear after a finished walk or
//! `zero_grad`. The walk assumes it clear and each parameter's gradient
//! state as at capture; a replay that finds otherwise runs the general
//! program.

// The walk (`build`) and the replay (`run`) live in child modules: this
// file, which the program names, imports neither the context nor the
// program (no import cycle through it).

use crate::arena::Buf;
use crate::ops::{BinaryFn, OneOp, UnaryFn};

mod build;
mod run;
#[cfg(test)]
mod tests;

/// A forward instruction's op, or a copy (a one-element slice).
#[derive(Clone, Copy)]
enum Code {
    Op(OneOp),
    Copy,
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
    AddScaled { k: f32, assign: bool },
    /// `grads[d] += grad_a(f, grads[g], vals[a], vals[b])`.
    GradA { f: BinaryFn, zero: bool },
    /// `grads[d] += grad_b(f, grads[g], vals[a], vals[b])`.
    GradB { f: BinaryFn, zero: bool },
    /// A unary op's backward: input `vals[a]`, output `vals[b]`.
    Unary {
        f: UnaryFn,
        assign: bool,
        zero: bool,
    },
    /// A scale, pow or clamp op's backward: input `vals[a]`.
    Map { op: OneOp, zero: bool },
    /// A one-element slice's backward: `grads[d] += grads[g]`.
    Pick { zero: bool },
}

#[derive(Clone, Copy)]
struct Bwd {
    op: Grad,
    d: u32,
    g: u32,
    a: u32,
    b: u32,
}
/// A scalar step's compact program (see the module docs).
pub(super) struct Dense {
    fwd: Vec<Fwd>,
    bwd: Vec<Bwd>,
    /// Values from outside the ops, read before the forward: (row,
    /// element, value slot).
    loads: Vec<(u32, u32, u32)>,
    /// Each forward instruction's output buffer, written as it is
    /// computed (the stores overlap the op chain's latency).
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

//! The dense form's instructions for element-wise ops on more than
//! `MAXN` elements: the eager kernels on the dense ranges. Apart from
//! `dense`'s own records so that they import nothing of the program.

use crate::ops::{OneOp, UnaryFn};

/// An element-wise op on more than `MAXN` elements (the program's
/// `Kind::Wide`, its op and shapes `Program::side.wide[.wide]`): the
/// eager kernels on the value ranges from `a`, `b` (its operands, as the
/// shapes say) into the one from `out`, so the eager path's loops and
/// bits (any broadcast).
#[derive(Clone, Copy)]
pub(super) struct WideF {
    pub(super) wide: u32,
    pub(super) out: u32,
    pub(super) a: u32,
    pub(super) b: u32,
}

/// The backward kernels of a [`WideF`] op, on gradient ranges: each as
/// the general program's `backward_wide` runs it.
#[derive(Clone, Copy)]
pub(super) enum WideGrad {
    /// The broadcasting backward of binary op `Program::side.wide[.0]`
    /// into its first operand's gradient (true) or its second's; `d`
    /// has the operand's elements.
    Binary(u32, bool),
    /// `add_scaled_into` (the equal-shape add and sub): `assign`
    /// overwrites.
    AddScaled { k: f32, assign: bool },
    /// A unary op's backward kernel (input `a`, output `b`): `assign`
    /// as the eager path decides; `zero`: a zero fill first.
    Unary {
        f: UnaryFn,
        assign: bool,
        zero: bool,
    },
    /// A scale, pow or clamp op's backward kernel (input `a`).
    Map(OneOp),
}

/// A [`WideGrad`] kernel writing `grads[d..]` from `grads[g..]` (the
/// output's `n` gradients) and values from `a` and `b`.
#[derive(Clone, Copy)]
pub(super) struct WideB {
    pub(super) op: WideGrad,
    pub(super) d: u32,
    pub(super) g: u32,
    pub(super) a: u32,
    pub(super) b: u32,
    pub(super) n: u32,
}

//! What the two interpreters and capture ask of an op, as the op table's
//! columns state it: [`ReplayForm`] (the replay program's view of an op,
//! with [`OneOp`] for its element-wise kinds) and [`CaptureRule`] (ids a
//! caller rewrites before each replay, or a seed recorded by value).

use super::functions::{BinaryFn, UnaryFn};
use crate::arena::Buf;
use crate::shape::MAX_DIMS;

/// Most tensors one concat joins: their ids are held inline in the tape
/// record, so a concat never allocates for its inputs.
pub const MAX_CONCAT: usize = 8;

/// The integer ids an op reads from a buffer it owns (embedding ids,
/// cross-entropy targets), which a captured step lets the caller rewrite
/// before each replay: the buffer, the input whose shape bounds the ids and
/// which of its axes does, and the op's name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdBuffer {
    pub ids: Buf<u32>,
    pub bounded_by: u32,
    pub axis: IdAxis,
    pub op: &'static str,
}

/// The axis of [`IdBuffer::bounded_by`] whose length bounds the ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdAxis {
    First,
    Last,
}

/// What capture must know of an op (the op table's `capture` column).
#[derive(Clone, Copy, Debug)]
pub(crate) enum CaptureRule {
    /// Nothing: a replay runs its record as it stands.
    Plain,
    /// Ids the caller may rewrite before each replay.
    Ids(IdBuffer),
    /// Randomness drawn from a seed recorded by value: a replay would draw
    /// the same numbers again, so the step cannot be captured.
    FixedSeed,
}

/// What an op is to the replay program's interpreter (the op table's
/// `replay` column): the work in terms it runs without the tape, with the
/// input ids and attributes it needs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReplayForm {
    /// An element-wise op on inputs a and b (a unary one repeats x).
    Map(OneOp, u32, u32),
    /// The sum (or mean) of every element.
    Sum { x: u32, mean: bool },
    /// The sum (or mean) over one axis.
    SumAxis { x: u32, axis: u8, mean: bool },
    /// ln sum e^x over one axis.
    LogSumExpAxis { x: u32, axis: u8 },
    /// A range of one axis, from `start`.
    Slice { x: u32, axis: u8, start: u32 },
    /// Element-wise choice by `cond`.
    Where { cond: u32, a: u32, b: u32 },
    /// The first `n` of `xs` joined along `axis`.
    Concat {
        xs: [u32; MAX_CONCAT],
        n: u8,
        axis: u8,
    },
    /// Axes reordered.
    Permute { x: u32, perm: [u8; MAX_DIMS] },
    /// Any other op, run through its own eager forward and backward entry
    /// points: for an op whose forward and backward touch only its own
    /// table rows (values, shapes, the gradient slots of its output and
    /// inputs) and the buffers its record saved.
    Eager,
}

/// A one-element op of a replay program (`context::replay_program`), with
/// its constants.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OneOp {
    Binary(BinaryFn),
    Unary(UnaryFn),
    Scale(f32),
    Pow(f32),
    Clamp(f32, f32),
}

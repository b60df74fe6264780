//! The crate's one error type and its single mapping onto C status codes.

use crate::shape::Shape;
use crate::status::*;
use std::fmt;

/// Every failure the library can report. Each variant carries what a user
/// needs to find the bad call: the op (or function) and the shapes or values.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A required pointer argument was NULL (FFI only).
    NullArgument {
        func: &'static str,
        arg: &'static str,
    },
    /// The context pointer is not a live context (freed, or never created).
    InvalidContext { func: &'static str },
    /// An activation handle from an earlier iteration.
    StaleHandle {
        op: &'static str,
        generation: u64,
        current: u64,
    },
    /// A handle minted by a different context.
    WrongContext {
        op: &'static str,
        handle_context: u32,
        context: u32,
    },
    /// A handle whose index is out of range or otherwise malformed.
    InvalidHandle { op: &'static str, index: u32 },
    /// A captured step's handle (ag_step) that cannot be used: its own
    /// variant so the message talks about steps, not tensors.
    BadStep {
        op: &'static str,
        index: u32,
        why: StepProblem,
    },
    /// A handle to a tensor made inside a segment that has ended and did not
    /// list it as an output: its memory may hold another segment's values.
    SegmentInternal {
        op: &'static str,
        index: u32,
        segment: usize,
    },
    /// Operand shapes are incompatible.
    ShapeMismatch {
        op: &'static str,
        what: &'static str,
        a: Shape,
        b: Shape,
    },
    /// A single-shape problem (wrong rank, zero dimension, bad axis, ...).
    BadShape { op: &'static str, what: String },
    /// An argument value is invalid (hyper-parameter, flag, length).
    InvalidArgument { op: &'static str, what: String },
    /// A shape whose element count overflows or exceeds the per-tensor cap.
    TooLarge { op: &'static str, what: String },
    /// The arena cannot hold this op's result: it would pass the cap, or
    /// (no cap: `limit == usize::MAX`) the system refused the arena a chunk.
    OutOfMemory {
        op: &'static str,
        needed: usize,
        used: usize,
        limit: usize,
    },
    /// The system refused memory outside the arena (parameters, optimizer
    /// state, gradients, buffers, table or tape growth).
    AllocationFailed { op: &'static str, bytes: usize },
    /// A token id or target outside `[0, n)`.
    IndexOutOfRange {
        op: &'static str,
        position: usize,
        value: i64,
        bound: usize,
    },
    /// `backward` on a tensor with more than one element.
    NotScalar { op: &'static str, shape: Shape },
    /// A call made in the wrong order (e.g. backward twice in one iteration).
    Sequence { op: &'static str, what: String },
    /// A loss or gradient is NaN or infinite; the update was skipped.
    NonFinite { op: &'static str, what: String },
    /// A file operation failed.
    Io { op: &'static str, what: String },
    /// A checkpoint failed validation (truncated, corrupted, unknown version).
    CheckpointCorrupt { what: String },
    /// A valid checkpoint for a different model.
    CheckpointMismatch { what: String },
    /// A valid file of named tensors that does not hold the model's
    /// parameters (a name missing or extra, a shape that differs).
    Mismatch { op: &'static str, what: String },
    /// A file that is not valid in its format (truncated, damaged), or
    /// holds what the library cannot use (a dtype other than F32).
    BadFile { op: &'static str, what: String },
    /// The context is in use by another thread.
    Busy { func: &'static str },
    /// A panic was caught; the context is now poisoned.
    Panic { func: &'static str, what: String },
    /// An earlier panic poisoned this context.
    Poisoned { func: &'static str },
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match self {
            NullArgument { func, arg } => write!(f, "{func}: argument `{arg}` is NULL"),
            InvalidContext { func } => {
                write!(f, "{func}: context is not live (freed, or never created)")
            }
            StaleHandle {
                op,
                generation,
                current,
            } => write!(
                f,
                "{op}: stale tensor handle from iteration generation {generation} (current {current}); activations die at ag_reset"
            ),
            WrongContext {
                op,
                handle_context,
                context,
            } => write!(
                f,
                "{op}: tensor handle belongs to context {handle_context}, not to context {context}"
            ),
            InvalidHandle { op, index } => write!(f, "{op}: invalid tensor handle (index {index})"),
            BadStep { op, index, why } => match why {
                StepProblem::Freed => write!(
                    f,
                    "{op}: step {index} was freed (ag_step_free); capture it again"
                ),
                StepProblem::WrongContext {
                    handle_context,
                    context,
                } => write!(
                    f,
                    "{op}: step handle belongs to context {handle_context}, not to context {context}"
                ),
                StepProblem::Invalid => write!(
                    f,
                    "{op}: invalid step handle (index {index}); steps come from ag_capture_end"
                ),
            },
            SegmentInternal { op, index, segment } => write!(
                f,
                "{op}: tensor {index} is internal to segment {segment}, which has ended: its memory is reused by recomputation (list it among the outputs of ag_segment_end to keep it)"
            ),
            ShapeMismatch { op, what, a, b } => write!(f, "{op}: {what}: {a} x {b}"),
            BadShape { op, what } => write!(f, "{op}: {what}"),
            InvalidArgument { op, what } => write!(f, "{op}: {what}"),
            TooLarge { op, what } => write!(f, "{op}: too large: {what}"),
            OutOfMemory {
                op,
                needed,
                used,
                limit,
            } if *limit == usize::MAX => write!(
                f,
                "{op}: arena allocation of {needed} bytes failed: the system is out of memory ({used} bytes in use, no cap set)"
            ),
            OutOfMemory {
                op,
                needed,
                used,
                limit,
            } => write!(
                f,
                "{op}: arena limit exceeded: needs {needed} more bytes ({} in all), {used} used of a {limit}-byte cap",
                used + needed
            ),
            AllocationFailed { op, bytes } => {
                write!(f, "{op}: persistent allocation of {bytes} bytes failed")
            }
            IndexOutOfRange {
                op,
                position,
                value,
                bound,
            } => write!(
                f,
                "{op}: index {value} at position {position} is out of range [0, {bound})"
            ),
            NotScalar { op, shape } => write!(
                f,
                "{op}: backward needs a scalar (one-element) loss, got shape {shape}"
            ),
            Sequence { op, what } => write!(f, "{op}: out of sequence: {what}"),
            NonFinite { op, what } => write!(f, "{op}: non-finite value: {what}"),
            Io { op, what } => write!(f, "{op}: I/O error: {what}"),
            CheckpointCorrupt { what } => write!(f, "checkpoint_load: checkpoint corrupt: {what}"),
            CheckpointMismatch { what } => {
                write!(
                    f,
                    "checkpoint_load: checkpoint does not match the model: {what}"
                )
            }
            Mismatch { op, what } => write!(f, "{op}: file does not match the model: {what}"),
            BadFile { op, what } => write!(f, "{op}: invalid file: {what}"),
            Busy { func } => write!(f, "{func}: context is in use by another thread"),
            Panic { func, what } => write!(
                f,
                "{func}: internal panic caught ({what}); the context is poisoned"
            ),
            Poisoned { func } => write!(
                f,
                "{func}: context was poisoned by an earlier panic; only ag_context_free is allowed"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Why a step handle was refused (see [`Error::BadStep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepProblem {
    /// ag_step_free released it (or it never existed in this slot).
    Freed,
    /// Minted by another context.
    WrongContext { handle_context: u32, context: u32 },
    /// Zeroed, or an index or generation no step ever had.
    Invalid,
}

impl Error {
    /// The single Error -> C status mapping (codes are defined in `status`).
    pub fn status(&self) -> ag_status {
        use Error::*;
        match self {
            NullArgument { .. } => AG_STATUS_NULL_ARGUMENT,
            InvalidContext { .. } => AG_STATUS_INVALID_CONTEXT,
            StaleHandle { .. } | SegmentInternal { .. } => AG_STATUS_STALE_HANDLE,
            WrongContext { .. } => AG_STATUS_WRONG_CONTEXT,
            InvalidHandle { .. } => AG_STATUS_INVALID_HANDLE,
            BadStep { why, .. } => match why {
                StepProblem::Freed => AG_STATUS_STALE_HANDLE,
                StepProblem::WrongContext { .. } => AG_STATUS_WRONG_CONTEXT,
                StepProblem::Invalid => AG_STATUS_INVALID_HANDLE,
            },
            ShapeMismatch { .. } | BadShape { .. } => AG_STATUS_SHAPE_MISMATCH,
            InvalidArgument { .. } => AG_STATUS_INVALID_ARGUMENT,
            TooLarge { .. } => AG_STATUS_TOO_LARGE,
            OutOfMemory { .. } => AG_STATUS_OUT_OF_MEMORY,
            AllocationFailed { .. } => AG_STATUS_ALLOCATION_FAILED,
            IndexOutOfRange { .. } => AG_STATUS_INDEX_OUT_OF_RANGE,
            NotScalar { .. } => AG_STATUS_NOT_SCALAR,
            Sequence { .. } => AG_STATUS_SEQUENCE,
            NonFinite { .. } => AG_STATUS_NON_FINITE,
            Io { .. } => AG_STATUS_IO,
            CheckpointCorrupt { .. } => AG_STATUS_CHECKPOINT_CORRUPT,
            CheckpointMismatch { .. } => AG_STATUS_CHECKPOINT_MISMATCH,
            Mismatch { .. } => AG_STATUS_CHECKPOINT_MISMATCH,
            BadFile { .. } => AG_STATUS_CHECKPOINT_CORRUPT,
            Busy { .. } => AG_STATUS_BUSY,
            Panic { .. } => AG_STATUS_PANIC,
            Poisoned { .. } => AG_STATUS_POISONED,
        }
    }
}

//! The crate's one error type and its single mapping onto C status codes.

use crate::shape::Shape;
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
    /// The arena cap would be exceeded by this op.
    OutOfMemory {
        op: &'static str,
        needed: usize,
        used: usize,
        limit: usize,
    },
    /// A persistent (parameter, optimizer, checkpoint) allocation failed.
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
            ShapeMismatch { op, what, a, b } => write!(f, "{op}: {what}: {a} x {b}"),
            BadShape { op, what } => write!(f, "{op}: {what}"),
            InvalidArgument { op, what } => write!(f, "{op}: {what}"),
            TooLarge { op, what } => write!(f, "{op}: too large: {what}"),
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
            CheckpointCorrupt { what } => write!(f, "checkpoint corrupt: {what}"),
            CheckpointMismatch { what } => write!(f, "checkpoint does not match the model: {what}"),
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

/// C status codes. Append-only: never renumber or reuse a value.
pub mod status {
    pub const OK: i32 = 0;
    pub const NULL_ARGUMENT: i32 = -1;
    pub const INVALID_CONTEXT: i32 = -2;
    pub const STALE_HANDLE: i32 = -3;
    pub const WRONG_CONTEXT: i32 = -4;
    pub const INVALID_HANDLE: i32 = -5;
    pub const SHAPE_MISMATCH: i32 = -6;
    pub const INVALID_ARGUMENT: i32 = -7;
    pub const TOO_LARGE: i32 = -8;
    pub const OUT_OF_MEMORY: i32 = -9;
    pub const ALLOCATION_FAILED: i32 = -10;
    pub const INDEX_OUT_OF_RANGE: i32 = -11;
    pub const NOT_SCALAR: i32 = -12;
    pub const SEQUENCE: i32 = -13;
    pub const NON_FINITE: i32 = -14;
    pub const IO: i32 = -15;
    pub const CHECKPOINT_CORRUPT: i32 = -16;
    pub const CHECKPOINT_MISMATCH: i32 = -17;
    pub const BUSY: i32 = -18;
    pub const PANIC: i32 = -19;
    pub const POISONED: i32 = -20;
}

impl Error {
    /// The single Error -> status mapping.
    pub fn status(&self) -> i32 {
        use Error::*;
        match self {
            NullArgument { .. } => status::NULL_ARGUMENT,
            InvalidContext { .. } => status::INVALID_CONTEXT,
            StaleHandle { .. } => status::STALE_HANDLE,
            WrongContext { .. } => status::WRONG_CONTEXT,
            InvalidHandle { .. } => status::INVALID_HANDLE,
            ShapeMismatch { .. } | BadShape { .. } => status::SHAPE_MISMATCH,
            InvalidArgument { .. } => status::INVALID_ARGUMENT,
            TooLarge { .. } => status::TOO_LARGE,
            OutOfMemory { .. } => status::OUT_OF_MEMORY,
            AllocationFailed { .. } => status::ALLOCATION_FAILED,
            IndexOutOfRange { .. } => status::INDEX_OUT_OF_RANGE,
            NotScalar { .. } => status::NOT_SCALAR,
            Sequence { .. } => status::SEQUENCE,
            NonFinite { .. } => status::NON_FINITE,
            Io { .. } => status::IO,
            CheckpointCorrupt { .. } => status::CHECKPOINT_CORRUPT,
            CheckpointMismatch { .. } => status::CHECKPOINT_MISMATCH,
            Busy { .. } => status::BUSY,
            Panic { .. } => status::PANIC,
            Poisoned { .. } => status::POISONED,
        }
    }
}

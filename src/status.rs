//! The C status codes. A leaf module: it imports nothing of the crate, so
//! the core (errors, ops) can name statuses without depending on the C
//! boundary. Codes are append-only: never renumbered, never reused.
#![allow(non_camel_case_types)]

/// Status code returned by every fallible function: `AG_STATUS_OK` (0) or
/// one of the negative `AG_STATUS_*` codes.
pub type ag_status = i32;

/// Success.
pub const AG_STATUS_OK: ag_status = 0;
/// A required pointer argument was NULL.
pub const AG_STATUS_NULL_ARGUMENT: ag_status = -1;
/// The context pointer is not a live context (already freed, or never made).
pub const AG_STATUS_INVALID_CONTEXT: ag_status = -2;
/// An activation handle from an earlier iteration (before the last ag_reset).
pub const AG_STATUS_STALE_HANDLE: ag_status = -3;
/// A handle made by a different context.
pub const AG_STATUS_WRONG_CONTEXT: ag_status = -4;
/// A malformed handle (index out of range, forged generation), or an
/// ag_tokenizer * that is not a live tokenizer (closed, or never opened).
pub const AG_STATUS_INVALID_HANDLE: ag_status = -5;
/// Incompatible or invalid shapes (rank, zero dimension, axis, broadcast).
pub const AG_STATUS_SHAPE_MISMATCH: ag_status = -6;
/// An invalid argument value (hyper-parameter, length, permutation, path).
pub const AG_STATUS_INVALID_ARGUMENT: ag_status = -7;
/// A shape whose element count overflows or exceeds 2^31 elements.
pub const AG_STATUS_TOO_LARGE: ag_status = -8;
/// The arena (this iteration's activations) is full: the op would pass the
/// cap set by ag_set_arena_limit, or, with no cap, the system refused the
/// arena more memory (the message says which). Nothing else returns it; the
/// context stays usable after ag_reset. Compare ALLOCATION_FAILED.
pub const AG_STATUS_OUT_OF_MEMORY: ag_status = -9;
/// The system ran out of memory outside the arena: a parameter, optimizer
/// state, the gradient block, a checkpoint or file buffer, or the growth of
/// the tensor table or tape. The arena cap plays no part (that is
/// OUT_OF_MEMORY).
pub const AG_STATUS_ALLOCATION_FAILED: ag_status = -10;
/// A token id or target outside [0, n).
pub const AG_STATUS_INDEX_OUT_OF_RANGE: ag_status = -11;
/// ag_backward on a tensor with more than one element.
pub const AG_STATUS_NOT_SCALAR: ag_status = -12;
/// A call out of order (backward twice, step without backward, parameter after activations).
pub const AG_STATUS_SEQUENCE: ag_status = -13;
/// A NaN or infinite gradient: the optimizer step was skipped.
pub const AG_STATUS_NON_FINITE: ag_status = -14;
/// A file could not be read or written.
pub const AG_STATUS_IO: ag_status = -15;
/// A checkpoint or safetensors file is truncated, damaged or of an unknown
/// version (or a safetensors tensor is not F32); also a malformed tokenizer
/// vocabulary file.
pub const AG_STATUS_CHECKPOINT_CORRUPT: ag_status = -16;
/// A valid checkpoint or safetensors file of a different model (names,
/// shapes or optimizer differ).
pub const AG_STATUS_CHECKPOINT_MISMATCH: ag_status = -17;
/// Another thread is inside a call on this context.
pub const AG_STATUS_BUSY: ag_status = -18;
/// An internal panic was caught; the context is now poisoned.
pub const AG_STATUS_PANIC: ag_status = -19;
/// The context was poisoned by an earlier panic; only ag_context_free works.
pub const AG_STATUS_POISONED: ag_status = -20;
/// The caller's output buffer is too small: nothing was written, and the
/// function's `needed` out-parameter holds the length that fits.
pub const AG_STATUS_BUFFER_TOO_SMALL: ag_status = -21;

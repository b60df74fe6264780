//! The two handle types of the C API: `ag_tensor`, a value that converts
//! to and from the Rust [`Tensor`], and `ag_context`, what a context token
//! stands for.

use crate::context::{Context, Tensor};
use std::ffi::CString;

/// A tensor handle, passed by value. Activation handles die at the next
/// ag_reset; parameter handles (generation 0) live as long as the context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ag_tensor {
    /// Slot in the context's tensor table.
    pub index: u32,
    /// Id of the context that made the handle.
    pub context: u32,
    /// Iteration generation, 0 for parameters.
    pub generation: u64,
}

impl From<Tensor> for ag_tensor {
    fn from(t: Tensor) -> Self {
        ag_tensor {
            index: t.index,
            context: t.context,
            generation: t.generation,
        }
    }
}

impl From<ag_tensor> for Tensor {
    fn from(t: ag_tensor) -> Self {
        Tensor {
            index: t.index,
            context: t.context,
            generation: t.generation,
        }
    }
}

/// An arenagrad context (opaque): parameters, optimizer, arena and tape.
/// Made by ag_context_new, freed by ag_context_free; use it from one thread
/// at a time (a concurrent call gets AG_STATUS_BUSY). An `ag_context *` is
/// a token, not an address: never dereference it. Tokens are never reused,
/// so any call with a freed context is detected (INVALID_CONTEXT).
pub struct ag_context {
    pub(super) inner: Context,
    pub(super) poisoned: bool,
    pub(super) last_error: CString,
}

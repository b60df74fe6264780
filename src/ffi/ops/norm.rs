//! Normalisation: LayerNorm.

use crate::ffi::prelude::*;

/// LayerNorm over the last axis (eps 1e-5): x [..., C], w [C], b [C].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (w or b is not [C]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_layernorm(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_layernorm", ctx, out, |c| {
        c.layernorm(x.into(), w.into(), b.into())
    })
}

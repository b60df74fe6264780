//! Dropout.

use crate::ffi::prelude::*;

/// Inverted dropout: each element of `x` is zeroed with probability `p`
/// (0 <= p < 1) and the others are scaled by 1 / (1 - p). The mask is a
/// function of `seed` and the element index only (same seed, same mask, on
/// any number of threads). With grad mode off (ag_set_grad_enabled) it is
/// the identity: `out` is a view of x, no copy and no arena memory.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (p is NaN or outside [0, 1)), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_dropout(
    ctx: *mut ag_context,
    x: ag_tensor,
    p: f32,
    seed: u64,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_dropout", ctx, out, |c| c.dropout(x.into(), p, seed))
}

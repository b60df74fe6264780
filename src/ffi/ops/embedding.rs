//! Embedding lookup.

use crate::ffi::prelude::*;

/// Rows of `weight` [V, C] picked by `ids[0..n]` -> [n, C]. Every id is
/// checked first: INDEX_OUT_OF_RANGE names the position and the value.
/// Errors: NULL_ARGUMENT (out, or ids when n > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH (weight is not 2-D),
/// INVALID_ARGUMENT (n is 0, or larger than any buffer), INDEX_OUT_OF_RANGE,
/// TOO_LARGE (the output has more than 2^31 - 1 elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_embedding(
    ctx: *mut ag_context,
    weight: ag_tensor,
    ids: *const i32,
    n: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_embedding";
    op(F, ctx, out, |c| {
        let ids = slice_in(F, "ids", ids, n)?;
        c.embedding(weight.into(), ids)
    })
}

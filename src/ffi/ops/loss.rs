//! Losses: cross-entropy, log-softmax, mean squared error.

use crate::ffi::prelude::*;

/// Mean cross-entropy of `logits` [..., V] against `targets[0..n]` (one per
/// row, each in [0, V)) -> [1]. Softmax, log and mean are fused.
/// Errors: NULL_ARGUMENT (out, or targets when n > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT (n differs from the
/// number of rows), INDEX_OUT_OF_RANGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_cross_entropy(
    ctx: *mut ag_context,
    logits: ag_tensor,
    targets: *const i32,
    n: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_cross_entropy";
    op(F, ctx, out, |c| {
        let t = slice_in(F, "targets", targets, n)?;
        c.cross_entropy(logits.into(), t)
    })
}

/// log(softmax(x)) over the last axis, fused and stable (the row maximum
/// is subtracted first): x [..., V] -> the same shape.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_softmax(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_softmax", ctx, out, |c| c.log_softmax(x.into()))
}

/// Mean squared error: mean of (pred - target)^2 over all elements -> [1].
/// The shapes must be equal (no broadcasting); both get a gradient.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (the shapes differ), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mse_loss(
    ctx: *mut ag_context,
    pred: ag_tensor,
    target: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_mse_loss", ctx, out, |c| {
        c.mse_loss(pred.into(), target.into())
    })
}

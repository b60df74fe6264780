//! Reductions: over all elements, and along one axis.

use crate::ffi::prelude::*;

/// Sum of all elements -> [1].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sum(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_sum", ctx, out, |c| c.sum(x.into()))
}

/// Mean of all elements -> [1].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mean(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_mean", ctx, out, |c| c.mean(x.into()))
}

/// Sum along `axis` (negative counts from the end); `keepdim` keeps the
/// axis with size 1. Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sum_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_sum_axis", ctx, out, |c| {
        c.sum_axis(x.into(), axis, keepdim)
    })
}

/// Mean along `axis`, as ag_sum_axis. Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mean_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_mean_axis", ctx, out, |c| {
        c.mean_axis(x.into(), axis, keepdim)
    })
}

/// ln sum e^x along `axis` (negative counts from the end), accumulated in
/// float64 after subtracting the maximum; `keepdim` keeps the axis with
/// size 1. Entries of -inf add nothing (all -inf gives -inf), a +inf entry
/// gives +inf, NaN propagates. Gradient: the softmax of x along the axis.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_logsumexp_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_logsumexp_axis", ctx, out, |c| {
        c.logsumexp_axis(x.into(), axis, keepdim)
    })
}

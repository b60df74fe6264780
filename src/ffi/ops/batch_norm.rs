//! Normalisation over channels: batch norm and group norm, each with a
//! weight and bias, or with either or both absent (the `_opt` forms:
//! pointers, NULL for none, as ag_conv2d's bias).

use crate::ffi::prelude::*;

/// NULL means none; otherwise the handle it points to.
fn optional(t: *const ag_tensor) -> Option<Tensor> {
    if t.is_null() {
        None
    } else {
        // SAFETY: not NULL, so the caller passes a valid pointer to a handle.
        Some(unsafe { t.read() }.into())
    }
}

/// The `stats` argument of ag_batch_norm for no running statistics.
pub const AG_NO_STATS: u32 = u32::MAX;

/// Batch normalisation of x [N, C, *] (rank 2 or more), per channel, with
/// weight w [C], bias b [C] and the running statistics `stats` (an index
/// from ag_batch_norm_stats_new, of C channels, or AG_NO_STATS for none,
/// PyTorch's track_running_stats=False: then the batch's statistics
/// normalise in both modes). In training mode
/// (ag_set_training) it normalises with the batch's mean and biased
/// variance, then updates the running statistics as PyTorch does:
/// new = (1 - momentum) old + momentum batch, with the unbiased variance,
/// and counts the batch; once per forward (a recomputed segment's replay
/// does not update them again; a captured step's replay does, as its eager
/// step). In evaluation mode it normalises with the running statistics.
/// PyTorch's defaults: momentum 0.1, eps 1e-5. Without a weight or bias
/// (PyTorch's affine=False): ag_batch_norm_opt.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE, SHAPE_MISMATCH (w or b is not [C]), INVALID_ARGUMENT
/// (x of rank below 2, no statistics of that index, or of another channel
/// count, momentum outside [0, 1], eps not
/// above 0, or one value per channel with batch statistics), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_batch_norm(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    b: ag_tensor,
    stats: u32,
    momentum: f32,
    eps: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_batch_norm", ctx, out, |c| {
        let stats = (stats != AG_NO_STATS).then(|| crate::BatchNormStats {
            index: stats,
            context: c.id(),
        });
        let (w, b) = (Some(w.into()), Some(b.into()));
        c.batch_norm(x.into(), w, b, stats, momentum, eps)
    })
}

/// ag_batch_norm with the weight and bias each optional: `w` and `b` point
/// to handles of shape [C], or are NULL for none. A missing weight scales
/// by 1 and a missing bias shifts by 0, so with both NULL (PyTorch's
/// affine=False) y = (x - mean) / sqrt(var + eps) and only x gets a
/// gradient; with one NULL the other still scales or shifts and gets its
/// gradient. Everything else is as ag_batch_norm.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE (any of x, *w, *b), SHAPE_MISMATCH (*w or *b is not
/// [C]), INVALID_ARGUMENT (x of rank below 2, no statistics of that index,
/// or of another channel count, momentum outside [0, 1], eps not above 0,
/// or one value per channel with batch statistics), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_batch_norm_opt(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: *const ag_tensor,
    b: *const ag_tensor,
    stats: u32,
    momentum: f32,
    eps: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_batch_norm_opt", ctx, out, |c| {
        let stats = (stats != AG_NO_STATS).then(|| crate::BatchNormStats {
            index: stats,
            context: c.id(),
        });
        let (x, wb) = (x.into(), [optional(w), optional(b)]);
        c.batch_norm_named("batch_norm_opt", x, wb, stats, momentum, eps)
    })
}

/// Group normalisation of x [N, C, *] (rank 2 or more): the channels split
/// into `groups` groups, each image's group normalised with its own mean
/// and biased variance (plus eps; PyTorch's default 1e-5), then scaled by
/// w [C] and shifted by b [C]. The same in training and evaluation mode.
/// Without a weight or bias (PyTorch's affine=False): ag_group_norm_opt.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE, SHAPE_MISMATCH (w or b is not [C]), INVALID_ARGUMENT
/// (x of rank below 2, groups 0 or not dividing C, eps not above 0),
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_group_norm(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    b: ag_tensor,
    groups: usize,
    eps: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_group_norm", ctx, out, |c| {
        c.group_norm(x.into(), Some(w.into()), Some(b.into()), groups, eps)
    })
}

/// ag_group_norm with the weight and bias each optional: `w` and `b` point
/// to handles of shape [C], or are NULL for none. A missing weight scales
/// by 1 and a missing bias shifts by 0, so with both NULL (PyTorch's
/// affine=False) each group is only normalised and only x gets a
/// gradient; with one NULL the other still scales or shifts and gets its
/// gradient. Everything else is as ag_group_norm.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE (any of x, *w, *b), SHAPE_MISMATCH (*w or *b is not
/// [C]), INVALID_ARGUMENT (x of rank below 2, groups 0 or not dividing C,
/// eps not above 0), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_group_norm_opt(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: *const ag_tensor,
    b: *const ag_tensor,
    groups: usize,
    eps: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_group_norm_opt", ctx, out, |c| {
        let (x, wb) = (x.into(), [optional(w), optional(b)]);
        c.group_norm_named("group_norm_opt", x, wb, groups, eps)
    })
}

//! Training mode and batch normalisation's running statistics (buffers:
//! persistent values that are not parameters).

use super::prelude::*;
use crate::BatchNormStats;
use std::ffi::CStr;

/// Most bytes in a statistics prefix, without the terminating NUL: the
/// longest buffer name, `<prefix>.num_batches_tracked`, still fits in
/// AG_MAX_PARAM_NAME.
pub const AG_MAX_STATS_PREFIX: usize = 200;
const _: () = assert!(AG_MAX_STATS_PREFIX == crate::MAX_STATS_PREFIX_BYTES);

/// Training mode (the default) or evaluation mode, apart from grad mode
/// (ag_set_grad_enabled). It changes ag_batch_norm only: in training it
/// normalises with the batch's statistics and updates the running
/// statistics; in evaluation it normalises with the running statistics and
/// leaves them as they are. A captured step keeps the mode it was captured
/// in.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_training(ctx: *mut ag_context, training: bool) -> ag_status {
    guard("ag_set_training", ctx, |c| {
        c.set_training(training);
        Ok(())
    })
}

/// Writes whether the context is in training mode to `*out`.
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_is_training(ctx: *mut ag_context, out: *mut bool) -> ag_status {
    const F: &str = "ag_is_training";
    guard(F, ctx, |c| write_out(F, "out", out, c.training()))
}

/// Makes the running statistics of a batch norm over `channels` channels
/// and writes their index (0, 1, ... in creation order) to `*out`:
/// `<prefix>.running_mean` (zeros), `<prefix>.running_var` (ones) and
/// `<prefix>.num_batches_tracked` (0), PyTorch's names, under which
/// checkpoints and safetensors files store them. They are buffers, not
/// parameters: not in ag_param_count, no gradient, no optimizer state, not
/// sharded; they live as long as the context. Made, like parameters,
/// before the iteration's first activation.
/// Errors: NULL_ARGUMENT (prefix or out), INVALID_ARGUMENT (prefix empty,
/// longer than AG_MAX_STATS_PREFIX bytes, not UTF-8 or already used;
/// channels 0 or above 2^32 - 1), SEQUENCE (activations were made this
/// iteration), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_batch_norm_stats_new(
    ctx: *mut ag_context,
    prefix: *const c_char,
    channels: usize,
    out: *mut u32,
) -> ag_status {
    const F: &str = "ag_batch_norm_stats_new";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        need(F, "prefix", prefix)?;
        // SAFETY: non-NULL, and the caller passes a NUL-terminated string
        // valid for the call.
        let prefix =
            unsafe { CStr::from_ptr(prefix) }
                .to_str()
                .map_err(|_| Error::InvalidArgument {
                    op: F,
                    what: "prefix is not valid UTF-8".into(),
                })?;
        let s = c.batch_norm_stats(prefix, channels)?;
        write_out(F, "out", out, s.index)
    })
}

fn stats(c: &Context, index: u32) -> BatchNormStats {
    BatchNormStats {
        index,
        context: c.id(),
    }
}

/// Copies the running mean and variance of statistics `stats_index` into `mean`
/// and `var` (`channels` floats each, the statistics' channel count) and
/// writes num_batches_tracked to `*num_batches_tracked`.
/// Errors: NULL_ARGUMENT (mean, var or num_batches_tracked),
/// INVALID_ARGUMENT (no statistics of that index, or channels is not their
/// channel count).
#[unsafe(no_mangle)]
pub extern "C" fn ag_batch_norm_stats_read(
    ctx: *mut ag_context,
    stats_index: u32,
    mean: *mut f32,
    var: *mut f32,
    channels: usize,
    num_batches_tracked: *mut i64,
) -> ag_status {
    const F: &str = "ag_batch_norm_stats_read";
    guard(F, ctx, |c| {
        need(F, "mean", mean)?;
        need(F, "var", var)?;
        need(F, "num_batches_tracked", num_batches_tracked)?;
        let (mean, var) = (
            slice_out(F, "mean", mean, channels)?,
            slice_out(F, "var", var, channels)?,
        );
        let n = c.batch_norm_stats_read(stats(c, stats_index), mean, var)?;
        write_out(F, "num_batches_tracked", num_batches_tracked, n as i64)
    })
}

/// Overwrites the running mean and variance of statistics `stats_index` from
/// `mean` and `var` (`channels` floats each) and sets num_batches_tracked
/// (e.g. weights trained elsewhere).
/// Errors: NULL_ARGUMENT (mean or var), INVALID_ARGUMENT (no statistics
/// of that index, channels is not their channel count, or
/// num_batches_tracked below 0).
#[unsafe(no_mangle)]
pub extern "C" fn ag_batch_norm_stats_write(
    ctx: *mut ag_context,
    stats_index: u32,
    mean: *const f32,
    var: *const f32,
    channels: usize,
    num_batches_tracked: i64,
) -> ag_status {
    const F: &str = "ag_batch_norm_stats_write";
    guard(F, ctx, |c| {
        need(F, "mean", mean)?;
        need(F, "var", var)?;
        let (mean, var) = (
            slice_in(F, "mean", mean, channels)?,
            slice_in(F, "var", var, channels)?,
        );
        let n = u64::try_from(num_batches_tracked).map_err(|_| Error::InvalidArgument {
            op: F,
            what: format!("num_batches_tracked {num_batches_tracked} is below 0"),
        })?;
        c.batch_norm_stats_write(stats(c, stats_index), mean, var, n)
    })
}

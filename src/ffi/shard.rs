//! Sharded optimizer state (ZeRO stage 1): the optimizer's range, and
//! float ranges of the parameters in and out, for data-parallel callers.
#![allow(unsafe_code)]

use super::*;

/// Makes the optimizer created next (ag_optimizer_adamw or
/// ag_optimizer_sgd) keep state for, and update, only floats `first ..
/// first + count` of the flat parameter layout: the gradient block's
/// (ag_grads_buffer), parameter after parameter in creation order; the
/// range may cut through a parameter. Each float's update depends only on
/// that float, so a process that steps its shard and then receives the
/// other shards (ag_params_copy_in) holds the unsharded optimizer's bits,
/// with the state (ag_memory_stats' optimizer_bytes) of its shard only.
/// Call it after the last parameter is made; a later call replaces the
/// range. ag_checkpoint_save refuses a sharded optimizer (SEQUENCE), and
/// loading a checkpoint into one is refused (CHECKPOINT_MISMATCH).
/// Errors: INVALID_ARGUMENT (the range passes the parameters' float
/// count), SEQUENCE (the optimizer exists).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_shard(
    ctx: *mut ag_context,
    first: usize,
    count: usize,
) -> ag_status {
    guard("ag_optimizer_shard", ctx, |c| {
        c.optimizer_shard(first, count)
    })
}

/// Copies floats `first .. first + count` of the flat parameter layout
/// (see ag_optimizer_shard) to `dst[0..count]` (`dst` may be NULL when
/// `count` is 0).
/// Errors: NULL_ARGUMENT (dst when count > 0), INVALID_ARGUMENT (the range
/// passes the parameters' float count; nothing is written).
#[unsafe(no_mangle)]
pub extern "C" fn ag_params_copy_out(
    ctx: *mut ag_context,
    first: usize,
    dst: *mut f32,
    count: usize,
) -> ag_status {
    const F: &str = "ag_params_copy_out";
    guard(F, ctx, |c| {
        // The range first: a wrong one is refused before the pointer is used.
        c.check_params_range(F, first, count)?;
        c.params_copy_out(first, slice_out(F, "dst", dst, count)?)
    })
}

/// Overwrites floats `first .. first + count` of the flat parameter layout
/// (see ag_optimizer_shard) with `src[0..count]` (`src` may be NULL when
/// `count` is 0), e.g. the shards other processes updated.
/// Errors: NULL_ARGUMENT (src when count > 0), INVALID_ARGUMENT (the range
/// passes the parameters' float count; nothing changes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_params_copy_in(
    ctx: *mut ag_context,
    first: usize,
    src: *const f32,
    count: usize,
) -> ag_status {
    const F: &str = "ag_params_copy_in";
    guard(F, ctx, |c| {
        c.check_params_range(F, first, count)?;
        c.params_copy_in(first, slice_in(F, "src", src, count)?)
    })
}

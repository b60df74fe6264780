//! Sharded optimizer state (ZeRO stage 1): the optimizer's range, and
//! float ranges of the parameters in and out, for data-parallel callers.

use super::prelude::*;

/// Makes the optimizer created next (ag_optimizer_adamw or
/// ag_optimizer_sgd) keep state for, and update, only floats `first ..
/// first + count` of the flat parameter layout: the gradient block's
/// (ag_grads_buffer), parameter after parameter in creation order; the
/// range may cut through a parameter. Each float's update depends only on
/// that float, so a process that steps its shard and then receives the
/// other shards (ag_params_copy_in) holds the unsharded optimizer's bits,
/// with the state (ag_memory_stats' optimizer_bytes) of its shard only.
/// Call it after the last parameter is made; a later call replaces the
/// range. ag_checkpoint_save refuses a sharded optimizer (SEQUENCE): gather
/// the moments (ag_optimizer_state_copy_out) and write the unsharded file
/// with ag_checkpoint_save_gathered. Loading a checkpoint into a sharded
/// optimizer keeps the moments of its shard.
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

/// Copies moment `which` (0: first moment, 1: second; SGD with momentum
/// keeps only 0) of floats `first .. first + count` of the flat parameter
/// layout (see ag_optimizer_shard) to `dst[0..count]` (`dst` may be NULL
/// when `count` is 0). The range must lie inside the optimizer's shard (any
/// range of an unsharded one): the processes of a sharded run gather their
/// slices this way for ag_checkpoint_save_gathered.
/// Errors: NULL_ARGUMENT (dst when count > 0), INVALID_ARGUMENT (which is
/// not a moment the optimizer keeps, or the range passes its shard; nothing
/// is written), SEQUENCE (the context has no optimizer).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_state_copy_out(
    ctx: *mut ag_context,
    which: u32,
    first: usize,
    dst: *mut f32,
    count: usize,
) -> ag_status {
    const F: &str = "ag_optimizer_state_copy_out";
    guard(F, ctx, |c| {
        // The range first: a wrong one is refused before the pointer is used.
        c.check_state_range(F, which as usize, first, count)?;
        c.optimizer_state_copy_out(which as usize, first, slice_out(F, "dst", dst, count)?)
    })
}

/// Overwrites moment `which` (as in ag_optimizer_state_copy_out) of floats
/// `first .. first + count` with `src[0..count]` (`src` may be NULL when
/// `count` is 0). The range must lie inside the optimizer's shard.
/// Errors: NULL_ARGUMENT (src when count > 0), INVALID_ARGUMENT (which is
/// not a moment the optimizer keeps, or the range passes its shard; nothing
/// changes), SEQUENCE (the context has no optimizer).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_state_copy_in(
    ctx: *mut ag_context,
    which: u32,
    first: usize,
    src: *const f32,
    count: usize,
) -> ag_status {
    const F: &str = "ag_optimizer_state_copy_in";
    guard(F, ctx, |c| {
        c.check_state_range(F, which as usize, first, count)?;
        c.optimizer_state_copy_in(which as usize, first, slice_in(F, "src", src, count)?)
    })
}

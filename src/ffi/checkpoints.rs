//! Checkpoints: save, load and peek, from a path or from bytes.

use super::prelude::*;

/// Saves parameters, optimizer state and `user[0..user_len]` (opaque bytes,
/// e.g. RNG state, at most AG_MAX_USER_BYTES; NULL allowed when user_len is
/// 0) to `path` atomically (temporary file in the same folder, fsync,
/// rename, fsync of the folder): a crash, or an error before the rename,
/// leaves any earlier file at `path` intact and no temporary file behind.
/// If only the final folder sync fails, IO is returned and the message says
/// the new file is in place. When `path` is a symbolic link, the file it
/// points to is replaced (the temporary file is made next to that file) and
/// the link is kept. Errors: NULL_ARGUMENT (path, or user when user_len >
/// 0), INVALID_ARGUMENT (path empty or not UTF-8, user_len above
/// AG_MAX_USER_BYTES), ALLOCATION_FAILED (the file's buffer), IO,
/// SEQUENCE (the optimizer is sharded, see ag_optimizer_shard: save with
/// ag_checkpoint_save_gathered).
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_save(
    ctx: *mut ag_context,
    path: *const c_char,
    user: *const u8,
    user_len: usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_save";
    guard(F, ctx, |c| {
        let p = path_arg(F, path)?;
        let u = slice_in(F, "user", user, user_len)?;
        c.checkpoint_save(&p, u)
    })
}

/// Like ag_checkpoint_save, with the optimizer moments taken from
/// `moments[0..moments_len]` instead of the context: every float's first
/// moment in the flat parameter layout (see ag_optimizer_shard), then every
/// float's second, as many moments as the optimizer keeps (AdamW 2, SGD
/// with momentum 1, else 0), so moments_len is that times ag_grads_len.
/// The processes of a sharded run gather their slices
/// (ag_optimizer_state_copy_out) to one of them, which writes the same
/// file the unsharded run writes; it loads into any sharding.
/// Errors: NULL_ARGUMENT (path, user when user_len > 0, moments when
/// moments_len > 0), INVALID_ARGUMENT (path empty or not UTF-8, user_len
/// above AG_MAX_USER_BYTES, moments_len not the optimizer's moment floats),
/// ALLOCATION_FAILED (the file's buffer), IO.
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_save_gathered(
    ctx: *mut ag_context,
    path: *const c_char,
    user: *const u8,
    user_len: usize,
    moments: *const f32,
    moments_len: usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_save_gathered";
    guard(F, ctx, |c| {
        let p = path_arg(F, path)?;
        let u = slice_in(F, "user", user, user_len)?;
        let m = slice_in(F, "moments", moments, moments_len)?;
        c.checkpoint_save_gathered(&p, u, m)
    })
}

/// Validates the checkpoint against the model and checks that its user
/// bytes fit in `cap`: what loading and peeking both do first.
fn validate_fitting(
    func: &'static str,
    c: &Context,
    bytes: &[u8],
    cap: usize,
) -> Result<crate::checkpoint::Staged> {
    let staged = c.checkpoint_validate(bytes)?;
    if staged.user_len > cap {
        return Err(Error::InvalidArgument {
            op: func,
            what: format!(
                "user buffer holds {cap} bytes, the checkpoint carries {}",
                staged.user_len
            ),
        });
    }
    Ok(staged)
}

/// Validates, checks the user bytes fit, then commits: all or nothing.
fn load_staged(
    func: &'static str,
    c: &mut Context,
    bytes: &[u8],
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> Result<()> {
    let staged = validate_fitting(func, c, bytes, cap)?;
    let dst = slice_out(func, "user_out", user_out, staged.user_len)?;
    let u = c.checkpoint_commit(bytes, staged);
    dst.copy_from_slice(u);
    write_out(func, "user_len", user_len, u.len())
}

/// Loads a checkpoint saved by ag_checkpoint_save into this context's
/// parameters and optimizer (same shapes, same optimizer kind). Parameter
/// values, optimizer moments and the optimizer's step count are restored;
/// hyper-parameters (learning rate, betas, ...) stay the context's own, so
/// a resumed run may change them. The optimizer kinds must match, "none"
/// included: to start an optimizer from saved weights, load a checkpoint
/// saved without one before creating it. The file is validated completely
/// first: on any error nothing changes. Its user bytes go to
/// `user_out[0..cap]`, their count to `*user_len`. A sharded optimizer (see
/// ag_optimizer_shard) keeps the moments of its shard.
/// Errors: NULL_ARGUMENT (path, user_len, or user_out when the checkpoint
/// carries user bytes), INVALID_ARGUMENT (path empty or not UTF-8, user
/// bytes do not fit in cap), IO, CHECKPOINT_CORRUPT, CHECKPOINT_MISMATCH
/// (other shapes or another optimizer kind).
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_load(
    ctx: *mut ag_context,
    path: *const c_char,
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_load";
    guard(F, ctx, |c| {
        need(F, "user_len", user_len)?;
        let p = path_arg(F, path)?;
        let bytes = c.checkpoint_read(F, &p)?;
        load_staged(F, c, &bytes, user_out, cap, user_len)
    })
}

/// Like ag_checkpoint_load, from `data[0..len]` in memory.
/// Errors: NULL_ARGUMENT (data when len > 0, user_len, or user_out when the
/// checkpoint carries user bytes), INVALID_ARGUMENT (user bytes do not fit
/// in cap, len larger than any buffer), CHECKPOINT_CORRUPT,
/// CHECKPOINT_MISMATCH.
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_load_bytes(
    ctx: *mut ag_context,
    data: *const u8,
    len: usize,
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_load_bytes";
    guard(F, ctx, |c| {
        need(F, "user_len", user_len)?;
        let bytes = slice_in(F, "data", data, len)?;
        load_staged(F, c, bytes, user_out, cap, user_len)
    })
}

/// Validates the checkpoint at `path` against this context's model exactly
/// as ag_checkpoint_load does, but changes nothing: only its user bytes are
/// copied to `user_out[0..cap]` (count in `*user_len`), so a caller can check
/// its own data (e.g. a vocabulary) before committing with ag_checkpoint_load.
/// Errors: NULL_ARGUMENT (path, user_len, or user_out when the checkpoint
/// carries user bytes), INVALID_ARGUMENT (path empty or not UTF-8, user
/// bytes do not fit in cap), IO, CHECKPOINT_CORRUPT, CHECKPOINT_MISMATCH.
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_peek(
    ctx: *mut ag_context,
    path: *const c_char,
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_peek";
    guard(F, ctx, |c| {
        need(F, "user_len", user_len)?;
        let p = path_arg(F, path)?;
        let bytes = c.checkpoint_read(F, &p)?;
        peek_staged(F, c, &bytes, user_out, cap, user_len)
    })
}

/// Like ag_checkpoint_peek, from `data[0..len]` in memory: validates the
/// checkpoint against this context's model exactly as
/// ag_checkpoint_load_bytes does, changes nothing, and copies only its user
/// bytes to `user_out[0..cap]` (count in `*user_len`). With
/// ag_checkpoint_load_bytes it lets a program that received a checkpoint's
/// bytes (e.g. broadcast by another process) check its own data before
/// committing. Errors: NULL_ARGUMENT (data when len > 0, user_len, or
/// user_out when the checkpoint carries user bytes), INVALID_ARGUMENT (user
/// bytes do not fit in cap, len larger than any buffer), CHECKPOINT_CORRUPT,
/// CHECKPOINT_MISMATCH.
#[unsafe(no_mangle)]
pub extern "C" fn ag_checkpoint_peek_bytes(
    ctx: *mut ag_context,
    data: *const u8,
    len: usize,
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> ag_status {
    const F: &str = "ag_checkpoint_peek_bytes";
    guard(F, ctx, |c| {
        need(F, "user_len", user_len)?;
        let bytes = slice_in(F, "data", data, len)?;
        peek_staged(F, c, bytes, user_out, cap, user_len)
    })
}

/// Validates, checks the user bytes fit, copies them out; changes nothing.
fn peek_staged(
    func: &'static str,
    c: &Context,
    bytes: &[u8],
    user_out: *mut u8,
    cap: usize,
    user_len: *mut usize,
) -> Result<()> {
    let staged = validate_fitting(func, c, bytes, cap)?;
    let u = &bytes[staged.user_start..staged.user_start + staged.user_len];
    slice_out(func, "user_out", user_out, u.len())?.copy_from_slice(u);
    write_out(func, "user_len", user_len, u.len())
}

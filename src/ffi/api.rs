//! Context, tensor, training and checkpoint entry points.
#![allow(unsafe_code)]

use super::*;
use crate::context::MemoryStats;
use crate::optim::OptimizerKind;
use std::ffi::CStr;
use std::path::PathBuf;

/// A static, NUL-terminated name for a status code ("unknown status" for
/// values the library never returns). Never NULL; never free it.
#[unsafe(no_mangle)]
pub extern "C" fn ag_status_str(status: ag_status) -> *const c_char {
    let s: &'static [u8] = match status {
        AG_STATUS_OK => b"ok\0",
        AG_STATUS_NULL_ARGUMENT => b"NULL argument\0",
        AG_STATUS_INVALID_CONTEXT => b"invalid context\0",
        AG_STATUS_STALE_HANDLE => b"stale tensor handle\0",
        AG_STATUS_WRONG_CONTEXT => b"handle from another context\0",
        AG_STATUS_INVALID_HANDLE => b"invalid tensor handle\0",
        AG_STATUS_SHAPE_MISMATCH => b"shape mismatch\0",
        AG_STATUS_INVALID_ARGUMENT => b"invalid argument\0",
        AG_STATUS_TOO_LARGE => b"tensor too large\0",
        AG_STATUS_OUT_OF_MEMORY => b"arena limit exceeded\0",
        AG_STATUS_ALLOCATION_FAILED => b"allocation failed\0",
        AG_STATUS_INDEX_OUT_OF_RANGE => b"index out of range\0",
        AG_STATUS_NOT_SCALAR => b"backward needs a scalar\0",
        AG_STATUS_SEQUENCE => b"call out of sequence\0",
        AG_STATUS_NON_FINITE => b"non-finite value\0",
        AG_STATUS_IO => b"I/O error\0",
        AG_STATUS_CHECKPOINT_CORRUPT => b"corrupt checkpoint\0",
        AG_STATUS_CHECKPOINT_MISMATCH => b"checkpoint does not match the model\0",
        AG_STATUS_BUSY => b"context busy\0",
        AG_STATUS_PANIC => b"internal panic\0",
        AG_STATUS_POISONED => b"context poisoned\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast()
}

/// The library's version as a static string, "MAJOR.MINOR.PATCH" (e.g.
/// "0.1.0"); never free it. A program can compare it with the
/// AG_VERSION_* macros of the header it was compiled with.
#[unsafe(no_mangle)]
pub extern "C" fn ag_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as MAJOR * 10000 + MINOR * 100 + PATCH (e.g. 100
/// for 0.1.0), equal to AG_VERSION_NUMBER of the header it was built with.
#[unsafe(no_mangle)]
pub extern "C" fn ag_version_number() -> u32 {
    AG_VERSION_NUMBER
}

/// Creates a context and writes it to `*out`. Free it with ag_context_free.
/// Errors: NULL_ARGUMENT (out is NULL).
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_new(out: *mut *mut ag_context) -> ag_status {
    if out.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    match catch_unwind(context_new) {
        Ok(p) => {
            // SAFETY: non-NULL out-pointer supplied by the caller.
            unsafe { out.write(p) };
            AG_STATUS_OK
        }
        Err(_) => AG_STATUS_PANIC,
    }
}

/// Frees the context `*ctx` and sets `*ctx` to NULL. `ctx == NULL` or
/// `*ctx == NULL` does nothing and returns OK. A context already freed
/// (through another copy of the pointer) is detected: INVALID_CONTEXT, and
/// nothing is freed twice. Works on poisoned contexts.
/// Errors (only these): INVALID_CONTEXT, BUSY (another thread is inside a
/// call on it).
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_free(ctx: *mut *mut ag_context) -> ag_status {
    if ctx.is_null() {
        return AG_STATUS_OK;
    }
    // SAFETY: non-NULL pointer to the caller's variable.
    let p = unsafe { ctx.read() };
    if p.is_null() {
        return AG_STATUS_OK;
    }
    let st = catch_unwind(AssertUnwindSafe(|| context_free(p))).unwrap_or(AG_STATUS_PANIC);
    if st == AG_STATUS_OK {
        // SAFETY: as above.
        unsafe { ctx.write(std::ptr::null_mut()) };
    }
    st
}

/// The message of the last failed call on `ctx`, naming the function or op,
/// the argument and the shapes. Empty if no call failed yet. Valid until
/// the next call on this context; never free it. Never NULL: for a NULL,
/// freed or busy context a static explanation is returned.
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_last_error(ctx: *const ag_context) -> *const c_char {
    catch_unwind(AssertUnwindSafe(|| last_error(ctx)))
        .unwrap_or(c"ag_context_last_error: panic".as_ptr())
}

/// Ends the iteration: all activation handles become stale (using them gives
/// STALE_HANDLE), the arena and tape are recycled without freeing memory.
/// Parameters, their gradients and the optimizer are kept.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_reset(ctx: *mut ag_context) -> ag_status {
    guard("ag_reset", ctx, |c| {
        c.reset();
        Ok(())
    })
}

/// Turns gradient recording on (default) or off (inference, sampling).
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_grad_enabled(ctx: *mut ag_context, enabled: bool) -> ag_status {
    guard("ag_set_grad_enabled", ctx, |c| {
        c.set_grad_enabled(enabled);
        Ok(())
    })
}

/// Caps the arena at `bytes` (0 removes the cap). An op that would pass it
/// fails with OUT_OF_MEMORY and leaves the context usable after ag_reset.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_arena_limit(ctx: *mut ag_context, bytes: usize) -> ag_status {
    guard("ag_set_arena_limit", ctx, |c| {
        c.set_arena_limit(if bytes == 0 { None } else { Some(bytes) });
        Ok(())
    })
}

/// Writes the context's memory figures (ag_memory_figures) to `*out`.
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_memory_stats(ctx: *mut ag_context, out: *mut MemoryStats) -> ag_status {
    guard("ag_memory_stats", ctx, |c| {
        write_out("ag_memory_stats", "out", out, c.memory_stats())
    })
}

pub(super) fn shape_arg<'a>(
    func: &'static str,
    shape: *const usize,
    ndim: usize,
) -> Result<&'a [usize]> {
    if ndim == 0 || ndim > AG_MAX_DIMS {
        return Err(Error::BadShape {
            op: func,
            what: format!("ndim {ndim} is outside 1..={AG_MAX_DIMS}"),
        });
    }
    slice_in(func, "shape", shape, ndim)
}

/// Creates a trainable parameter of shape `shape[0..ndim]`, initialised from
/// `init` (numel floats, copied) or zeros when `init` is NULL. Parameters
/// must be created before the optimizer and before any activation of the
/// iteration. The parameter is named "param.N", N being its index in
/// creation order (see ag_param_new_named, ag_param_name).
/// Errors: NULL_ARGUMENT (out or shape), INVALID_ARGUMENT (a parameter made
/// by ag_param_new_named already has the name "param.N"), SHAPE_MISMATCH
/// (ndim outside 1..AG_MAX_DIMS, a zero dimension), TOO_LARGE (more than
/// 2^31 - 1 elements), SEQUENCE (an optimizer exists, or activations were
/// made this iteration), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_new(
    ctx: *mut ag_context,
    shape: *const usize,
    ndim: usize,
    init: *const f32,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_param_new";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let dims = shape_arg(F, shape, ndim)?;
        let n = crate::Shape::new(F, dims)?.numel();
        let init = if init.is_null() {
            None
        } else {
            Some(slice_in(F, "init", init, n)?)
        };
        let t = c.param(dims, init)?;
        write_out(F, "out", out, t.into())
    })
}

/// Overwrites parameter `p` with `len` floats from `data` (len must equal
/// its element count). Errors: NULL_ARGUMENT (data, when len > 0),
/// STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT (p is not a parameter, or
/// len differs from its element count).
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_write(
    ctx: *mut ag_context,
    p: ag_tensor,
    data: *const f32,
    len: usize,
) -> ag_status {
    const F: &str = "ag_param_write";
    guard(F, ctx, |c| {
        let d = slice_in(F, "data", data, len)?;
        c.param_write(p.into(), d)
    })
}

/// Creates a constant activation (no gradient) holding a copy of
/// `data[0..numel]`. Valid until the next ag_reset.
/// Errors: NULL_ARGUMENT (out, shape or data), SHAPE_MISMATCH (ndim
/// outside 1..AG_MAX_DIMS, a zero dimension), TOO_LARGE (more than
/// 2^31 - 1 elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_new(
    ctx: *mut ag_context,
    shape: *const usize,
    ndim: usize,
    data: *const f32,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_tensor_new";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let dims = shape_arg(F, shape, ndim)?;
        let n = crate::Shape::new(F, dims)?.numel();
        let d = slice_in(F, "data", data, n)?;
        if d.is_empty() {
            return Err(Error::NullArgument {
                func: F,
                arg: "data",
            });
        }
        let t = c.tensor(dims, d)?;
        write_out(F, "out", out, t.into())
    })
}

/// Writes the rank of `t` to `*ndim` and its dimensions to
/// `shape[0..rank]` (`shape` must hold AG_MAX_DIMS entries).
/// Errors: NULL_ARGUMENT (shape or ndim), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_shape(
    ctx: *mut ag_context,
    t: ag_tensor,
    shape: *mut usize,
    ndim: *mut usize,
) -> ag_status {
    const F: &str = "ag_tensor_shape";
    guard(F, ctx, |c| {
        need(F, "shape", shape)?;
        need(F, "ndim", ndim)?;
        let s = c.shape(t.into())?;
        slice_out(F, "shape", shape, s.ndim())?.copy_from_slice(s.dims());
        write_out(F, "ndim", ndim, s.ndim())
    })
}

/// Writes the element count of `t` to `*out`.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_numel(
    ctx: *mut ag_context,
    t: ag_tensor,
    out: *mut usize,
) -> ag_status {
    const F: &str = "ag_tensor_numel";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let n = c.numel(t.into())?;
        write_out(F, "out", out, n)
    })
}

/// Copies the values of `t` into `dst[0..len]`; `len` must equal its
/// element count. Errors: NULL_ARGUMENT (dst), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (len differs from the element count).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_read(
    ctx: *mut ag_context,
    t: ag_tensor,
    dst: *mut f32,
    len: usize,
) -> ag_status {
    const F: &str = "ag_tensor_read";
    guard(F, ctx, |c| {
        need(F, "dst", dst)?;
        c.read(t.into(), slice_out(F, "dst", dst, len)?)
    })
}

/// Copies the gradient of `t` into `dst[0..len]` (len = its element count).
/// Parameters always have one (zeros until a backward reaches them). An
/// activation has one after ag_backward only if ag_tensor_retain_grad was
/// called on it before ag_backward: the memory of other activation
/// gradients is reused during the backward pass.
/// Errors: NULL_ARGUMENT (dst), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT
/// (len differs from the element count), SEQUENCE (t has no gradient: a
/// constant, an activation made with grad mode off, an activation not
/// retained with ag_tensor_retain_grad, or any activation before
/// ag_backward; the message says which).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_read_grad(
    ctx: *mut ag_context,
    t: ag_tensor,
    dst: *mut f32,
    len: usize,
) -> ag_status {
    const F: &str = "ag_tensor_read_grad";
    guard(F, ctx, |c| {
        need(F, "dst", dst)?;
        c.read_grad(t.into(), slice_out(F, "dst", dst, len)?)
    })
}

/// Asks to keep the gradient of activation `t` readable with
/// ag_tensor_read_grad after the next ag_backward (PyTorch's retain_grad).
/// Without it an activation's gradient exists only during ag_backward, in
/// memory shared with other gradients. Call it after making `t` and before
/// ag_backward; the request ends at ag_reset with the handle. A reshape
/// shares its base's gradient, so retaining either keeps both. Parameters
/// always keep their gradients (OK, nothing to do).
/// Errors: STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT
/// (`t` needs no gradient: a constant, or made with grad mode off),
/// SEQUENCE (ag_backward already ran this iteration).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_retain_grad(ctx: *mut ag_context, t: ag_tensor) -> ag_status {
    const F: &str = "ag_tensor_retain_grad";
    guard(F, ctx, |c| c.retain_grad(t.into()))
}

/// Reads a one-element tensor (e.g. a loss) into `*out`.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT
/// (t has more than one element).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tensor_item(ctx: *mut ag_context, t: ag_tensor, out: *mut f32) -> ag_status {
    const F: &str = "ag_tensor_item";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let v = c.item(t.into())?;
        write_out(F, "out", out, v)
    })
}

/// Reverse pass from the one-element `loss`: parameter gradients
/// accumulate (+=); only ops the loss depends on are differentiated. Once
/// per iteration (SEQUENCE on a second call). If nothing the loss depends
/// on needs a gradient (constants only, or grad mode was off when it was
/// built) it returns OK and changes nothing.
/// Errors: STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, NOT_SCALAR, SEQUENCE (backward already ran
/// this iteration), OUT_OF_MEMORY (activation gradients past the arena
/// cap).
#[unsafe(no_mangle)]
pub extern "C" fn ag_backward(ctx: *mut ag_context, loss: ag_tensor) -> ag_status {
    guard("ag_backward", ctx, |c| c.backward(loss.into()))
}

/// Sets every parameter gradient to zero.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_zero_grad(ctx: *mut ag_context) -> ag_status {
    guard("ag_zero_grad", ctx, |c| {
        c.zero_grad();
        Ok(())
    })
}

/// Creates the context's optimizer: SGD with momentum (0 for plain SGD) and
/// L2 weight decay, over all parameters made so far; state is allocated
/// now. The decay applies to parameters whose flag is on (all, unless
/// ag_param_set_weight_decay turned some off). Errors: INVALID_ARGUMENT (lr <= 0, momentum outside [0,1), a
/// negative weight decay, NaN or infinity), SEQUENCE (no parameters, or an
/// optimizer exists), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_sgd(
    ctx: *mut ag_context,
    lr: f32,
    momentum: f32,
    weight_decay: f32,
) -> ag_status {
    guard("ag_optimizer_sgd", ctx, |c| {
        c.optimizer(OptimizerKind::Sgd {
            lr,
            momentum,
            weight_decay,
        })
    })
}

/// Creates the context's optimizer: AdamW with bias correction and
/// decoupled weight decay (for parameters whose flag is on: see
/// ag_param_set_weight_decay). Errors: INVALID_ARGUMENT (lr <= 0, betas
/// outside [0,1), eps <= 0, a negative weight decay, NaN or infinity),
/// SEQUENCE (no parameters, or an optimizer exists), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_adamw(
    ctx: *mut ag_context,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
) -> ag_status {
    guard("ag_optimizer_adamw", ctx, |c| {
        c.optimizer(OptimizerKind::AdamW {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
        })
    })
}

/// Changes the optimizer's learning rate. Errors: INVALID_ARGUMENT (lr <= 0,
/// NaN or infinity), SEQUENCE (no optimizer).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_set_lr(ctx: *mut ag_context, lr: f32) -> ag_status {
    guard("ag_optimizer_set_lr", ctx, |c| c.optimizer_set_lr(lr))
}

/// Updates every parameter from its gradient.
/// Errors: NON_FINITE (a gradient is NaN or infinite; parameters are left
/// bit-identical), SEQUENCE (no optimizer, or no ag_backward since the last
/// step).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_step(ctx: *mut ag_context) -> ag_status {
    guard("ag_optimizer_step", ctx, |c| c.optimizer_step())
}

/// Scales all parameter gradients so their global L2 norm is at most
/// `max_norm`; writes the norm before clipping to `*norm_out` (may be NULL).
/// Errors: INVALID_ARGUMENT (max_norm <= 0, NaN or infinity), NON_FINITE
/// (the norm is NaN or infinite; nothing is scaled).
#[unsafe(no_mangle)]
pub extern "C" fn ag_clip_grad_norm(
    ctx: *mut ag_context,
    max_norm: f32,
    norm_out: *mut f32,
) -> ag_status {
    const F: &str = "ag_clip_grad_norm";
    guard(F, ctx, |c| {
        let n = c.clip_grad_norm(max_norm)?;
        if !norm_out.is_null() {
            write_out(F, "norm_out", norm_out, n)?;
        }
        Ok(())
    })
}

pub(super) fn path_arg(func: &'static str, path: *const c_char) -> Result<PathBuf> {
    if path.is_null() {
        return Err(Error::NullArgument { func, arg: "path" });
    }
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) };
    let s = s.to_str().map_err(|_| Error::InvalidArgument {
        op: func,
        what: "path is not valid UTF-8".into(),
    })?;
    if s.is_empty() {
        return Err(Error::InvalidArgument {
            op: func,
            what: "path is empty".into(),
        });
    }
    Ok(PathBuf::from(s))
}

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
/// AG_MAX_USER_BYTES), ALLOCATION_FAILED (the file's buffer), IO.
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
/// `user_out[0..cap]`, their count to `*user_len`.
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

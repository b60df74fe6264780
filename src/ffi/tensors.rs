//! Parameters and tensors: make, write, read, shape, gradients to keep.

use super::prelude::*;

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

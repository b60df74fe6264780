//! Convolution and pooling over NCHW images, PyTorch's conventions. The
//! configuration is passed as plain int32 scalars, height first; a
//! negative value is INVALID_ARGUMENT, as are a zero stride, dilation,
//! group count or kernel side and any value above 65535.

use crate::ffi::prelude::*;
use crate::{Conv2dOptions, Pool2dOptions};

/// Each value as a usize; a negative one is an invalid argument of `op`.
fn sizes<const N: usize>(op: &'static str, names: [&str; N], v: [i32; N]) -> Result<[usize; N]> {
    let mut out = [0; N];
    for i in 0..N {
        out[i] = usize::try_from(v[i]).map_err(|_| Error::InvalidArgument {
            op,
            what: format!("{} is {}; it must not be negative", names[i], v[i]),
        })?;
    }
    Ok(out)
}

/// NULL means none; otherwise the handle it points to.
fn optional(bias: *const ag_tensor) -> Option<Tensor> {
    if bias.is_null() {
        None
    } else {
        // SAFETY: not NULL, so the caller passes a valid pointer to a handle.
        Some(unsafe { bias.read() }.into())
    }
}

/// The 2-D convolution options from the C scalars: stride, padding and
/// dilation (height, width), then groups.
fn conv2d_options(op: &'static str, v: [i32; 7]) -> Result<Conv2dOptions> {
    let names = [
        "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups",
    ];
    let [sh, sw, ph, pw, dh, dw, g] = sizes(op, names, v)?;
    Ok(Conv2dOptions {
        stride: [sh, sw],
        padding: [ph, pw],
        dilation: [dh, dw],
        groups: g,
    })
}

/// 2-D convolution (cross-correlation, as PyTorch's conv2d): x [N, C_in,
/// H, W], w [C_out, C_in / groups, kH, kW], bias [C_out] (NULL for none) ->
/// [N, C_out, H_out, W_out], H_out = (H + 2 pad_h - dil_h (kH - 1) - 1) /
/// stride_h + 1. Padding is symmetric (zeros).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE (any of
/// x, w, *bias), SHAPE_MISMATCH (x or w not 4-D, channels not divisible by
/// groups, w's dim 1 not C_in / groups, bias not [C_out], dilated kernel
/// larger than the padded input), INVALID_ARGUMENT (a negative value, a
/// zero stride, dilation or groups, a value above 65535), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_conv2d(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    bias: *const ag_tensor,
    stride_h: i32,
    stride_w: i32,
    pad_h: i32,
    pad_w: i32,
    dil_h: i32,
    dil_w: i32,
    groups: i32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_conv2d", ctx, out, |c| {
        let opts = conv2d_options(
            "conv2d",
            [stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups],
        )?;
        c.conv2d(x.into(), w.into(), optional(bias), opts)
    })
}

/// ag_conv2d followed by ReLU, as one op: relu(conv2d(x, w, bias)) with
/// the same arguments, bit for bit the values and gradients of ag_conv2d
/// then ag_relu, faster (each image is clamped and its gradient masked
/// while in cache, and no gradient is kept for the pre-ReLU output).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE (any of
/// x, w, *bias), SHAPE_MISMATCH (x or w not 4-D, channels not divisible by
/// groups, w's dim 1 not C_in / groups, bias not [C_out], dilated kernel
/// larger than the padded input), INVALID_ARGUMENT (a negative value, a
/// zero stride, dilation or groups, a value above 65535), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_conv2d_relu(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    bias: *const ag_tensor,
    stride_h: i32,
    stride_w: i32,
    pad_h: i32,
    pad_w: i32,
    dil_h: i32,
    dil_w: i32,
    groups: i32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_conv2d_relu", ctx, out, |c| {
        let opts = conv2d_options(
            "conv2d_relu",
            [stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups],
        )?;
        c.conv2d_relu(x.into(), w.into(), optional(bias), opts)
    })
}

/// 1-D convolution (PyTorch's conv1d): x [N, C_in, L], w [C_out, C_in /
/// groups, k], bias [C_out] (NULL for none) -> [N, C_out, L_out].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE (any of
/// x, w, *bias), SHAPE_MISMATCH (x or w not 3-D, channels not divisible by
/// groups, w's dim 1 not C_in / groups, bias not [C_out], dilated kernel
/// longer than the padded input), INVALID_ARGUMENT (a negative value, a
/// zero stride, dilation or groups, a value above 65535), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_conv1d(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    bias: *const ag_tensor,
    stride: i32,
    pad: i32,
    dil: i32,
    groups: i32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_conv1d", ctx, out, |c| {
        let [s, p, d, g] = sizes(
            "conv1d",
            ["stride", "pad", "dil", "groups"],
            [stride, pad, dil, groups],
        )?;
        c.conv1d(x.into(), w.into(), optional(bias), s, p, d, g)
    })
}

/// The pooling options from the C scalars.
fn pool_options(op: &'static str, v: [i32; 6], ceil_mode: bool) -> Result<Pool2dOptions> {
    let names = [
        "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w",
    ];
    let [kh, kw, sh, sw, ph, pw] = sizes(op, names, v)?;
    Ok(Pool2dOptions {
        kernel: [kh, kw],
        stride: [sh, sw],
        padding: [ph, pw],
        ceil_mode,
    })
}

/// 2-D max pooling (PyTorch's max_pool2d, dilation 1): x [N, C, H, W] ->
/// [N, C, H_out, W_out]; padding counts as -inf; with `ceil_mode` the
/// output size rounds up, but a last window starting past the left
/// padding plus the input is dropped. A window's gradient goes to its
/// first maximum in row-major order.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (x not 4-D, kernel larger than the padded input),
/// INVALID_ARGUMENT (a negative value, a zero kernel side or stride,
/// padding above half the kernel, a value above 65535), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_max_pool2d(
    ctx: *mut ag_context,
    x: ag_tensor,
    kernel_h: i32,
    kernel_w: i32,
    stride_h: i32,
    stride_w: i32,
    pad_h: i32,
    pad_w: i32,
    ceil_mode: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_max_pool2d", ctx, out, |c| {
        let v = [kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w];
        let opts = pool_options("max_pool2d", v, ceil_mode)?;
        c.max_pool2d(x.into(), opts)
    })
}

/// 2-D average pooling (PyTorch's avg_pool2d): as ag_max_pool2d's windows;
/// each is divided by its size up to the padding's edge with
/// `count_include_pad`, else by the input elements it covers.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (x not 4-D, kernel larger than the padded input),
/// INVALID_ARGUMENT (a negative value, a zero kernel side or stride,
/// padding above half the kernel, a value above 65535), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ag_avg_pool2d(
    ctx: *mut ag_context,
    x: ag_tensor,
    kernel_h: i32,
    kernel_w: i32,
    stride_h: i32,
    stride_w: i32,
    pad_h: i32,
    pad_w: i32,
    ceil_mode: bool,
    count_include_pad: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_avg_pool2d", ctx, out, |c| {
        let v = [kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w];
        let opts = pool_options("avg_pool2d", v, ceil_mode)?;
        c.avg_pool2d(x.into(), opts, count_include_pad)
    })
}

/// Mean over each image plane: x [N, C, H, W] -> [N, C].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (x not 4-D), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_global_avg_pool2d(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_global_avg_pool2d", ctx, out, |c| {
        c.global_avg_pool2d(x.into())
    })
}

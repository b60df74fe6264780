//! Matrix products: 2-D, batched, and the fully connected layer.

use crate::ffi::prelude::*;

/// 2-D product op(a) @ op(b) through BLAS; op transposes when asked.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (not 2-D, or the inner dimensions differ: the message names both
/// shapes), TOO_LARGE (the product has more than 2^31 - 1 elements),
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_matmul(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    trans_a: bool,
    trans_b: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_matmul", ctx, out, |c| {
        c.matmul(a.into(), b.into(), trans_a, trans_b)
    })
}

/// Batched product over equal leading dimensions:
/// [..., M, K] @ [..., K, N] -> [..., M, N], with optional transposes.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (ranks, leading or inner dimensions differ), TOO_LARGE (the product has
/// more than 2^31 - 1 elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_bmm(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    trans_a: bool,
    trans_b: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_bmm", ctx, out, |c| {
        c.bmm(a.into(), b.into(), trans_a, trans_b)
    })
}

/// Fully connected layer x @ w + bias: x [..., K], w [K, N], bias [N]
/// (pass NULL for none) -> [..., N]. The bias add is fused into the GEMM.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE (any of
/// x, w, *bias), SHAPE_MISMATCH, TOO_LARGE (the output has more than
/// 2^31 - 1 elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_linear(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    bias: *const ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_linear", ctx, out, |c| {
        // SAFETY: NULL means no bias; otherwise the caller passes a valid pointer.
        let b = if bias.is_null() {
            None
        } else {
            Some(unsafe { bias.read() }.into())
        };
        c.linear(x.into(), w.into(), b)
    })
}

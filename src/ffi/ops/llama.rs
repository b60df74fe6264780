//! The Llama family's ops: SiLU, SwiGLU, RMSNorm, rotary position embeddings.

use crate::ffi::prelude::*;

/// out = x sigmoid(x) (SiLU, swish): -0 where sigmoid(x) underflows, x at
/// +inf, no overflow for any input.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_silu(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_silu", ctx, out, |c| c.silu(x.into()))
}

/// out = silu(gate) * up element-wise (Llama's MLP gate, SwiGLU), gate and
/// up of one shape: the values of ag_silu then ag_mul, in one pass each way
/// and without the intermediate tensor.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (gate and up differ in shape), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_swiglu(
    ctx: *mut ag_context,
    gate: ag_tensor,
    up: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_swiglu", ctx, out, |c| c.swiglu(gate.into(), up.into()))
}

/// RMSNorm over the last axis: out = x / sqrt(mean(x^2) + eps) * w, with x
/// [..., C] and w [C] (Llama's: no mean subtraction, no bias).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (w is not [C]), INVALID_ARGUMENT (eps NaN, infinite or negative), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_rmsnorm(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    eps: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_rmsnorm", ctx, out, |c| {
        c.rmsnorm(x.into(), w.into(), eps)
    })
}

/// Rotary position embeddings (Hugging Face's Llama pairing, element i with
/// i + D/2) of x [B, H, T, D]: the pair at time t turns by
/// (offset + t) * theta^(-2i/D), i < D/2, angles computed in double.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (x is not 4-D, or D is odd), INVALID_ARGUMENT (theta not finite and > 0, or offset + T
/// past 2^32), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_rope(
    ctx: *mut ag_context,
    x: ag_tensor,
    theta: f32,
    offset: usize,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_rope", ctx, out, |c| c.rope(x.into(), theta, offset))
}

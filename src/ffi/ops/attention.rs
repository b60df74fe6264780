//! Softmax, fused causal self-attention and grouped-query attention.

use crate::ffi::prelude::*;

/// softmax(scale * x) over the last axis; with `causal`, the last two axes
/// are [Tq, Tk] and row i only sees columns up to i + Tk - Tq.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (causal with fewer than 2 axes, or Tq > Tk), INVALID_ARGUMENT (scale is
/// NaN or infinite), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_softmax(
    ctx: *mut ag_context,
    x: ag_tensor,
    causal: bool,
    scale: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_softmax", ctx, out, |c| {
        c.softmax(x.into(), causal, scale)
    })
}

/// Fused causal multi-head self-attention: qkv [B, T, 3C] (q, k, v side by
/// side) with `n_head` heads -> [B, T, C]. Heads are read in place (no
/// split/merge copies); scores are scaled by 1/sqrt(C / n_head).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (qkv is not [B, T, 3C]), INVALID_ARGUMENT (n_head is 0 or does not
/// divide C), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_attention(
    ctx: *mut ag_context,
    qkv: ag_tensor,
    n_head: usize,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_attention", ctx, out, |c| {
        c.attention(qkv.into(), n_head)
    })
}

/// Causal grouped-query attention: q [B, H, T, D], k and v [B, KV, T, D]
/// (head-major, as ag_rope takes and returns) with KV dividing H ->
/// [B, H, T, D]. Query head h attends with kv head h / (H / KV); query t
/// sees keys 0..=t; scores are scaled by 1/sqrt(D). KV == H is multi-head
/// attention, KV == 1 multi-query.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (a rank other than 4, k and v of different shapes, B, T or D differing
/// between q and k, KV not dividing H), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_attention_gqa(
    ctx: *mut ag_context,
    q: ag_tensor,
    k: ag_tensor,
    v: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_attention_gqa", ctx, out, |c| {
        c.attention_gqa(q.into(), k.into(), v.into())
    })
}

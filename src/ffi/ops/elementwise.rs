//! Element-wise ops: the broadcasting binary ops, ag_where, and the unary
//! and scalar ops (activations, clamp, pow, scale).

use crate::ffi::prelude::*;

/// out = a + b with numpy broadcasting (no tiled copy is made).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH (the shapes do
/// not broadcast), TOO_LARGE (the broadcast shape has more than 2^31 - 1
/// elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_add(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_add", ctx, out, |c| c.add(a.into(), b.into()))
}

/// out = a - b with broadcasting. Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sub(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_sub", ctx, out, |c| c.sub(a.into(), b.into()))
}

/// out = a * b element-wise with broadcasting. Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mul(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_mul", ctx, out, |c| c.mul(a.into(), b.into()))
}

/// out = a / b element-wise with broadcasting. Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_div(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_div", ctx, out, |c| c.div(a.into(), b.into()))
}

/// out = max(a, b) element-wise with broadcasting. NaN propagates; the
/// gradient goes to the operand the output was taken from, to a on ties.
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_maximum(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_maximum", ctx, out, |c| c.maximum(a.into(), b.into()))
}

/// out = min(a, b) element-wise with broadcasting. NaN propagates; the
/// gradient goes to the operand the output was taken from, to a on ties.
/// Errors as for ag_add:
/// NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH,
/// TOO_LARGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_minimum(
    ctx: *mut ag_context,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_minimum", ctx, out, |c| c.minimum(a.into(), b.into()))
}

/// out = a where cond is not zero, else b, element-wise; cond, a and b
/// broadcast together as the operands of ag_add do (cond is usually a 0/1
/// mask; NaN counts as true, -0.0 as false). The gradient goes to a where
/// cond is true and to b where it is false; cond gets none.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (the three shapes do not broadcast), TOO_LARGE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_where(
    ctx: *mut ag_context,
    cond: ag_tensor,
    a: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_where", ctx, out, |c| {
        c.select(cond.into(), a.into(), b.into())
    })
}

/// out = -x.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_neg(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_neg", ctx, out, |c| c.neg(x.into()))
}

/// out = e^x, within 1 ulp of the exact value (every float checked);
/// overflows to inf above 88.72283, as C's expf.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_exp(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_exp", ctx, out, |c| c.exp(x.into()))
}

/// out = ln(x) (NaN below 0, as IEEE), within 1 ulp of the exact value
/// (every float checked).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_log", ctx, out, |c| c.log(x.into()))
}

/// out = tanh(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tanh(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_tanh", ctx, out, |c| c.tanh(x.into()))
}

/// out = max(x, 0).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_relu(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_relu", ctx, out, |c| c.relu(x.into()))
}

/// out = 1 / (1 + e^-x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sigmoid(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_sigmoid", ctx, out, |c| c.sigmoid(x.into()))
}

/// out = sqrt(x) (NaN below 0, as IEEE).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sqrt(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_sqrt", ctx, out, |c| c.sqrt(x.into()))
}

/// out = |x|. Gradient sign(x), with the subgradient 0 at x = 0.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_abs(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_abs", ctx, out, |c| c.abs(x.into()))
}

/// out = x limited to [lo, hi] element-wise (NaN stays NaN; an infinite
/// bound leaves that side open). Gradient 1 strictly inside (lo < x < hi),
/// 0 outside and at the bounds.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (lo > hi, or a bound is NaN), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_clamp(
    ctx: *mut ag_context,
    x: ag_tensor,
    lo: f32,
    hi: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_clamp", ctx, out, |c| c.clamp(x.into(), lo, hi))
}

/// out = x^p element-wise for a finite scalar exponent p. As IEEE pow: a
/// negative x with a non-integer p gives NaN, 0^p is +inf for p < 0, and
/// x^0 is 1. Gradient p x^(p-1) (0 everywhere when p = 0).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (p is NaN or infinite), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_pow(
    ctx: *mut ag_context,
    x: ag_tensor,
    p: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_pow", ctx, out, |c| c.pow(x.into(), p))
}

/// GELU, tanh approximation (GPT-2).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_gelu(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_gelu", ctx, out, |c| c.gelu(x.into()))
}

/// out = s * x.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_scale(
    ctx: *mut ag_context,
    x: ag_tensor,
    s: f32,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_scale", ctx, out, |c| c.scale(x.into(), s))
}

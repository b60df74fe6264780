//! Op entry points. Each checks its out-pointer first, runs the op through
//! the safe API and writes the result handle only on success. Each doc
//! comment ends with the op's complete list of statuses ("Errors:"), beside
//! the ones every function with a context may return (see the header's
//! conventions); a test provokes each and checks nothing else comes back.

use super::*;

/// Runs an op producing one tensor and delivers its handle to `out`.
fn op(
    func: &'static str,
    ctx: *mut ag_context,
    out: *mut ag_tensor,
    f: impl FnOnce(&mut Context) -> Result<Tensor>,
) -> ag_status {
    guard(func, ctx, |c| {
        need(func, "out", out)?;
        let t = f(c)?;
        write_out(func, "out", out, t.into())
    })
}

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
/// out = e^x.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_exp(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_exp", ctx, out, |c| c.exp(x.into()))
}
/// out = ln(x) (NaN below 0, as IEEE).
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
/// out = ln(1 + x), accurate for small x (NaN below -1, -inf at -1).
/// Gradient 1 / (1 + x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log1p(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_log1p", ctx, out, |c| c.log1p(x.into()))
}
/// out = ln Gamma(x) for x > 0, accurate to a few ulps (float64 inside).
/// NaN for x < 0 (the sign of Gamma is not kept, so the negative axis is not
/// defined here), +inf at 0 and for very large x. Gradient digamma(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_lgamma(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_lgamma", ctx, out, |c| c.lgamma(x.into()))
}
/// out = digamma(x) = d/dx ln Gamma(x) for x > 0 (NaN for x < 0, -inf at
/// 0). Gradient trigamma(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_digamma(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_digamma", ctx, out, |c| c.digamma(x.into()))
}
/// out = e^x - 1, accurate for small x. Gradient e^x.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_expm1(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_expm1", ctx, out, |c| c.expm1(x.into()))
}
/// out = ln(1 + e^x) without overflow (Stan's log1p_exp). Gradient
/// sigmoid(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_softplus(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_softplus", ctx, out, |c| c.softplus(x.into()))
}
/// out = ln sigmoid(x) = -softplus(-x), without overflow. Gradient
/// sigmoid(-x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_sigmoid(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_sigmoid", ctx, out, |c| c.log_sigmoid(x.into()))
}
/// out = erf(x), the error function. Gradient 2/sqrt(pi) e^(-x^2).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_erf(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_erf", ctx, out, |c| c.erf(x.into()))
}
/// out = Phi(x), the standard normal CDF. Gradient the standard normal
/// density phi(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_cdf(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_cdf", ctx, out, |c| c.normal_cdf(x.into()))
}
/// out = ln Phi(x), the log of the standard normal CDF, finite far into
/// the lower tail (about -x^2/2 there). Gradient phi(x) / Phi(x).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_normal_lcdf(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_normal_lcdf", ctx, out, |c| c.normal_lcdf(x.into()))
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
/// Sum of all elements -> [1].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sum(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_sum", ctx, out, |c| c.sum(x.into()))
}
/// Mean of all elements -> [1].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mean(ctx: *mut ag_context, x: ag_tensor, out: *mut ag_tensor) -> ag_status {
    op("ag_mean", ctx, out, |c| c.mean(x.into()))
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

/// Sum along `axis` (negative counts from the end); `keepdim` keeps the
/// axis with size 1. Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sum_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_sum_axis", ctx, out, |c| {
        c.sum_axis(x.into(), axis, keepdim)
    })
}

/// Mean along `axis`, as ag_sum_axis. Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mean_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_mean_axis", ctx, out, |c| {
        c.mean_axis(x.into(), axis, keepdim)
    })
}

/// ln sum e^x along `axis` (negative counts from the end), accumulated in
/// float64 after subtracting the maximum; `keepdim` keeps the axis with
/// size 1. Entries of -inf add nothing (all -inf gives -inf), a +inf entry
/// gives +inf, NaN propagates. Gradient: the softmax of x along the axis.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_logsumexp_axis(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    keepdim: bool,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_logsumexp_axis", ctx, out, |c| {
        c.logsumexp_axis(x.into(), axis, keepdim)
    })
}

/// A view of `x` with shape `shape[0..ndim]` (same element count; no copy,
/// shares the gradient; no arena memory is used).
/// Errors: NULL_ARGUMENT (out, or shape when ndim > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH (ndim outside
/// 1..AG_MAX_DIMS, a zero dimension, element counts differ), TOO_LARGE (the
/// new shape has more than 2^31 - 1 elements).
#[unsafe(no_mangle)]
pub extern "C" fn ag_reshape(
    ctx: *mut ag_context,
    x: ag_tensor,
    shape: *const usize,
    ndim: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_reshape";
    op(F, ctx, out, |c| {
        if ndim == 0 || ndim > AG_MAX_DIMS {
            return Err(Error::BadShape {
                op: F,
                what: format!("ndim {ndim} is outside 1..={AG_MAX_DIMS}"),
            });
        }
        let s = slice_in(F, "shape", shape, ndim)?;
        c.reshape(x.into(), s)
    })
}

/// Reorders axes (a copy): output axis i is input axis perm[i];
/// `perm[0..ndim]` must be a permutation of x's axes.
/// Errors: NULL_ARGUMENT (out, or perm when ndim > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT (not a permutation of
/// x's axes), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_permute(
    ctx: *mut ag_context,
    x: ag_tensor,
    perm: *const usize,
    ndim: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_permute";
    op(F, ctx, out, |c| {
        if ndim > AG_MAX_DIMS {
            return Err(Error::InvalidArgument {
                op: F,
                what: format!("ndim {ndim} > {AG_MAX_DIMS}"),
            });
        }
        let p = slice_in(F, "perm", perm, ndim)?;
        c.permute(x.into(), p)
    })
}

/// Joins `xs[0..n]` along `axis` (negative counts from the end), in order,
/// into a new tensor (a copy): 1 to AG_MAX_CONCAT tensors of equal rank
/// whose shapes agree except along `axis`. The gradient is split back.
/// Errors: NULL_ARGUMENT (out, or xs when n > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE (any of xs[0..n]), SHAPE_MISMATCH (axis
/// out of range, ranks differ, or a dimension other than `axis` differs: the
/// message names both shapes), INVALID_ARGUMENT (n is 0 or above
/// AG_MAX_CONCAT), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_concat(
    ctx: *mut ag_context,
    xs: *const ag_tensor,
    n: usize,
    axis: i32,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_concat";
    op(F, ctx, out, |c| {
        if n > AG_MAX_CONCAT {
            return Err(Error::InvalidArgument {
                op: F,
                what: format!("n {n} is above AG_MAX_CONCAT ({AG_MAX_CONCAT})"),
            });
        }
        let xs = slice_in(F, "xs", xs, n)?;
        let mut ts = [Tensor {
            index: 0,
            context: 0,
            generation: 0,
        }; AG_MAX_CONCAT];
        for (t, &x) in ts.iter_mut().zip(xs) {
            *t = x.into();
        }
        c.concat(&ts[..n], axis)
    })
}

/// Elements `start..start + length` of `x` along `axis` (negative counts
/// from the end), a copy with `length` in place of that dimension; the
/// gradient is added back into the range.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (axis out of range), INVALID_ARGUMENT (length is 0, or the
/// range passes the end of the axis), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_slice(
    ctx: *mut ag_context,
    x: ag_tensor,
    axis: i32,
    start: usize,
    length: usize,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_slice", ctx, out, |c| {
        c.slice(x.into(), axis, start, length)
    })
}

/// Swaps axes `a` and `b` (a copy). Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (an axis out of range), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_transpose(
    ctx: *mut ag_context,
    x: ag_tensor,
    a: usize,
    b: usize,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_transpose", ctx, out, |c| c.transpose(x.into(), a, b))
}

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

/// Inverted dropout: each element of `x` is zeroed with probability `p`
/// (0 <= p < 1) and the others are scaled by 1 / (1 - p). The mask is a
/// function of `seed` and the element index only (same seed, same mask, on
/// any number of threads). With grad mode off (ag_set_grad_enabled) it is
/// the identity: `out` is a view of x, no copy and no arena memory.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// INVALID_ARGUMENT (p is NaN or outside [0, 1)), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_dropout(
    ctx: *mut ag_context,
    x: ag_tensor,
    p: f32,
    seed: u64,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_dropout", ctx, out, |c| c.dropout(x.into(), p, seed))
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

/// Rows of `weight` [V, C] picked by `ids[0..n]` -> [n, C]. Every id is
/// checked first: INDEX_OUT_OF_RANGE names the position and the value.
/// Errors: NULL_ARGUMENT (out, or ids when n > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH (weight is not 2-D),
/// INVALID_ARGUMENT (n is 0, or larger than any buffer), INDEX_OUT_OF_RANGE,
/// TOO_LARGE (the output has more than 2^31 - 1 elements), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_embedding(
    ctx: *mut ag_context,
    weight: ag_tensor,
    ids: *const i32,
    n: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_embedding";
    op(F, ctx, out, |c| {
        let ids = slice_in(F, "ids", ids, n)?;
        c.embedding(weight.into(), ids)
    })
}

/// Mean cross-entropy of `logits` [..., V] against `targets[0..n]` (one per
/// row, each in [0, V)) -> [1]. Softmax, log and mean are fused.
/// Errors: NULL_ARGUMENT (out, or targets when n > 0), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT (n differs from the
/// number of rows), INDEX_OUT_OF_RANGE, OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_cross_entropy(
    ctx: *mut ag_context,
    logits: ag_tensor,
    targets: *const i32,
    n: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_cross_entropy";
    op(F, ctx, out, |c| {
        let t = slice_in(F, "targets", targets, n)?;
        c.cross_entropy(logits.into(), t)
    })
}

/// log(softmax(x)) over the last axis, fused and stable (the row maximum
/// is subtracted first): x [..., V] -> the same shape.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_softmax(
    ctx: *mut ag_context,
    x: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_softmax", ctx, out, |c| c.log_softmax(x.into()))
}

/// Mean squared error: mean of (pred - target)^2 over all elements -> [1].
/// The shapes must be equal (no broadcasting); both get a gradient.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE,
/// SHAPE_MISMATCH (the shapes differ), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_mse_loss(
    ctx: *mut ag_context,
    pred: ag_tensor,
    target: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_mse_loss", ctx, out, |c| {
        c.mse_loss(pred.into(), target.into())
    })
}

/// LayerNorm over the last axis (eps 1e-5): x [..., C], w [C], b [C].
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (w or b is not [C]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_layernorm(
    ctx: *mut ag_context,
    x: ag_tensor,
    w: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_layernorm", ctx, out, |c| {
        c.layernorm(x.into(), w.into(), b.into())
    })
}

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

//! Shape ops: reshape (a view), permute, transpose, concat and slice.

use crate::ffi::prelude::*;

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

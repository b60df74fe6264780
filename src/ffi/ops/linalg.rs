//! Linear algebra for statistical models: the Cholesky factor, a solve
//! with a lower-triangular matrix, ln det of a symmetric positive-definite
//! matrix, a matrix's diagonal, the first-order linear recurrence.

use crate::ffi::prelude::*;

/// out = L, the Cholesky factor of a symmetric positive-definite a
/// [n, n] (a = L L^T, L lower triangular, zeros above). Only a's lower
/// triangle is read, and its gradient lands there (an entry below the
/// diagonal stands for the pair). NaN-filled when a is not positive
/// definite (no error: a sampler rejects such a point).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (a is not square [n, n]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_cholesky(
    ctx: *mut ag_context,
    a: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_cholesky", ctx, out, |c| c.cholesky(a.into()))
}

/// out = L^{-1} b (Stan's mdivide_left_tri_low): l [n, n] lower
/// triangular (its upper triangle is not read), b [n] or [n, k]; out has
/// b's shape.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (l is not square, or b is not [n] or [n, k]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_solve_lower(
    ctx: *mut ag_context,
    l: ag_tensor,
    b: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_solve_lower", ctx, out, |c| {
        c.solve_lower(l.into(), b.into())
    })
}

/// out = ln det a, a scalar, for a symmetric positive-definite a [n, n]
/// (Stan's log_determinant_spd), through its Cholesky factor. Only a's
/// lower triangle is read. NaN when a is not positive definite.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (a is not square [n, n]), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_log_det_spd(
    ctx: *mut ag_context,
    a: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_log_det_spd", ctx, out, |c| c.log_det_spd(a.into()))
}

/// out = the first-order linear recurrence along axis 0: out[0] = c[0]
/// and out[t] = a[t] out[t-1] + c[t], each column of c [T, ...] a sequence
/// of its own (AR and GARCH filters, exponential moving averages). a has
/// c's shape (a[0] is not read: its gradient is 0) or one element (the
/// same coefficient throughout). One op for the whole recursion: a
/// density's T-step loop becomes one pass forward and one back.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (a is neither one element nor c's shape), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_linear_recurrence(
    ctx: *mut ag_context,
    a: ag_tensor,
    c: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_linear_recurrence", ctx, out, |cx| {
        cx.linear_recurrence(a.into(), c.into())
    })
}

/// out = the diagonal of a matrix a [r, c]: [min(r, c)]. With ag_log and
/// ag_sum, ln det of a Cholesky factor is 2 sum(ln diagonal(L)).
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, SHAPE_MISMATCH
/// (a is not a matrix), OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_diagonal(
    ctx: *mut ag_context,
    a: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    op("ag_diagonal", ctx, out, |c| c.diagonal(a.into()))
}

//! Products whose C is one column (a matrix times a vector) through
//! BLAS's `sgemv`, for the matrix products of `ops::matmul`: OpenBLAS runs
//! them as sgemm in its small-matrix kernels at several times the cost.
//! Its own room: nothing in `blas` imports it back.
#![allow(unsafe_code)]

#[cfg(all(target_os = "linux", not(miri)))]
use super::MKL_SGEMM;
use super::split::split_rows_of_c;
use super::{Gemm, check, gemm_info, sgemm_tile};
#[cfg(feature = "trace")]
use crate::trace;

/// [`super::sgemm_on`] for the matrix products of `ops::matmul`: tiles
/// whose C is one column run as sgemv (see [`product_tile`]). The tiles
/// are the same, fixed by the shape, so the bits do not depend on the
/// threads.
pub(crate) fn product_on(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    split_rows_of_c(pool, g, a, b, c, |g, a, b, c, _| {
        // SAFETY: `c` is this tile of C, which only this call writes.
        unsafe { product_tile(g, alpha, a, b, beta, c) }
    });
}

/// As [`sgemm_tile`], except that a product whose C is one column (n = 1:
/// op(A) times a vector) runs as BLAS's matrix-vector product, `sgemv`,
/// and one whose C is two columns over a small A as two
/// ([`TWO_COLUMN_A_MAX`]).
/// OpenBLAS sends such a product through its small-matrix sgemm kernels
/// at several times the cost (measured on one core, [3020, 3] x [3]:
/// 1.9 us as sgemv against 8-11 us as sgemm; A^T times a vector 4-6 us
/// against 8). sgemv sums in another order than sgemm, so only the
/// products of `ops::matmul` come here; the bits stay those of the shape
/// (a row tile of the product is itself a one-column product). Under MKL
/// (whose sgemv is not loaded) and Miri the product stays `sgemm`.
///
/// # Safety
/// As [`sgemm_tile`]'s.
pub(crate) unsafe fn product_tile(
    g: Gemm,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: *mut f32,
) {
    let by_columns = g.n == 2 && g.m * g.k <= TWO_COLUMN_A_MAX;
    if !(g.n == 1 || by_columns) || !sgemv_available() {
        // SAFETY: the caller's contract.
        return unsafe { sgemm_tile(g, alpha, a, b, beta, c) };
    }
    check(g, a, b);
    #[cfg(feature = "trace")]
    let t0 = std::time::Instant::now();
    for j in 0..g.n {
        // Column j of op(B): element j of each stored row, or stored row j.
        let b = &b[if g.trans_b { j * g.ldb } else { j }..];
        let col = Gemm { n: 1, ..g };
        // SAFETY: the caller's contract, and the checks above on A and B
        // (column j of C is within the tile, and of op(B) within B).
        unsafe { sgemv_impl(col, alpha, a, b, beta, c.add(j)) };
    }
    #[cfg(feature = "trace")]
    trace::record(g, t0.elapsed());
}

/// The most elements of A a two-column product runs as two sgemv calls
/// over (256 KB: A stays in cache for the second column's pass). OpenBLAS
/// runs a small sgemm at several times a small sgemv's fixed cost
/// (measured on the 2-core EPYC, 2 BLAS threads: [12, 2] x [2, 2] 62 ns
/// as sgemm against 30 ns as two sgemv, [2, 12] x [12, 2] 71 against 43,
/// [1000, 2] x [2, 2] 1,232 against 884; at four columns sgemm wins).
const TWO_COLUMN_A_MAX: usize = 1 << 16;

/// Whether [`product_tile`] may call `cblas_sgemv`: not when MKL runs the
/// products (only its sgemm is loaded), nor under Miri (no BLAS).
fn sgemv_available() -> bool {
    if cfg!(miri) {
        return false;
    }
    gemm_info();
    #[cfg(all(target_os = "linux", not(miri)))]
    if MKL_SGEMM.get().is_some() {
        return false;
    }
    true
}

/// C (one column, stride ldc) = alpha op(A) b + beta C through
/// `cblas_sgemv`, b being op(B)'s one column.
///
/// # Safety
/// As [`sgemm_tile`]'s, with A and B checked and `g.n == 1`.
#[cfg(not(miri))]
unsafe fn sgemv_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: *mut f32) {
    debug_assert_eq!(g.n, 1);
    // BLAS scales C by beta before adding: start from zeros, so that a NaN
    // left in C by earlier use cannot survive 0 * NaN, and add onto them
    // (beta 1, which OpenBLAS does not scale by: the same bits, one pass
    // over C fewer).
    let beta = if beta == 0.0 {
        for i in 0..g.m {
            // SAFETY: element i of the tile, which the caller gives to
            // this call alone.
            unsafe { *c.add(i * g.ldc) = 0.0 };
        }
        1.0
    } else {
        beta
    };
    // op(B) is k x 1: the column of a stored [k, ldb] matrix (stride ldb),
    // or the first row of a stored [1, ldb] one (stride 1).
    let inc_b = if g.trans_b { 1 } else { g.ldb };
    // The stored A is [m, lda] (no transpose) or [k, lda] (transposed).
    let (trans, rows, cols) = if g.trans_a {
        (cblas_sys::CblasTrans, g.k, g.m)
    } else {
        (cblas_sys::CblasNoTrans, g.m, g.k)
    };
    // SAFETY: `check` showed A covers `rows` rows of `cols` at stride lda
    // and B covers k elements at stride `inc_b`; C covers m elements at
    // stride ldc by the caller's contract and overlaps neither. Every
    // dimension and stride fits in i32 (checked).
    unsafe {
        cblas_sys::cblas_sgemv(
            cblas_sys::CblasRowMajor,
            trans,
            rows as i32,
            cols as i32,
            alpha,
            a.as_ptr(),
            g.lda as i32,
            b.as_ptr(),
            inc_b as i32,
            beta,
            c,
            g.ldc as i32,
        )
    }
}

/// Never called: [`sgemv_available`] is false under Miri.
///
/// # Safety
/// As [`sgemm_tile`]'s.
#[cfg(miri)]
unsafe fn sgemv_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: *mut f32) {
    // SAFETY: the caller's contract.
    unsafe { sgemm_tile(g, alpha, a, b, beta, c) }
}

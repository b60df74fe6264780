//! The only caller of BLAS. A safe row-major `sgemm` that checks every
//! length before calling `cblas_sgemm`; under Miri a naive loop stands in.
//! Which library and kernels run is settled in `runtime` (with `choice`,
//! `openblas` and `mkl`); `split` runs large products on two threads.
#![allow(unsafe_code)]

#[cfg(target_os = "macos")]
extern crate accelerate_src as _;
#[cfg(target_os = "linux")]
extern crate openblas_src as _;

pub(crate) mod blocks;
mod choice;
pub(crate) mod gemv;
#[cfg(all(target_os = "linux", not(miri)))]
mod mkl;
#[cfg(all(target_os = "linux", not(miri)))]
mod openblas;
mod runtime;
mod split;
mod tiling;

#[cfg(all(target_os = "linux", not(miri)))]
use runtime::MKL_SGEMM;
pub use runtime::{GemmInfo, gemm_info, set_blas_threads};
#[cfg(feature = "trace")]
pub use split::SplitProducts;
pub(crate) use split::{sgemm_bias_on, sgemm_on, sgemm_pair_on};

/// One row-major matrix operand: `rows x cols` after the optional transpose,
/// stored with leading dimension `ld` (the stored row length).
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    /// C is m x n, op(A) is m x k, op(B) is k x n.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

impl Gemm {
    /// Dense operands: leading dimensions follow from the shapes.
    pub fn dense(trans_a: bool, trans_b: bool, m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            trans_a,
            trans_b,
            m,
            n,
            k,
            lda: if trans_a { m } else { k },
            ldb: if trans_b { k } else { n },
            ldc: n,
        }
    }

    fn needed(rows: usize, cols: usize, ld: usize) -> usize {
        (rows - 1) * ld + cols
    }
}

/// C = alpha * op(A) @ op(B) + beta * C, all row-major.
/// Panics (a bug, caught by the FFI guard) if a slice is too short or a
/// dimension does not fit in i32; callers validate shapes first.
pub fn sgemm(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    check(g, a, b);
    assert!(
        c.len() >= Gemm::needed(g.m, g.n, g.ldc),
        "sgemm: C too short"
    );
    // SAFETY: C was checked to cover the tile, and `c` is borrowed
    // mutably for the call, so nothing else touches it.
    unsafe { sgemm_tile(g, alpha, a, b, beta, c.as_mut_ptr()) }
}

/// The checks of [`sgemm`] on everything but C.
fn check(g: Gemm, a: &[f32], b: &[f32]) {
    let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
    let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
    assert!(g.m > 0 && g.n > 0 && g.k > 0, "sgemm: zero dimension");
    assert!(
        g.lda >= ac && g.ldb >= bc && g.ldc >= g.n,
        "sgemm: leading dimension too small"
    );
    assert!(a.len() >= Gemm::needed(ar, ac, g.lda), "sgemm: A too short");
    assert!(b.len() >= Gemm::needed(br, bc, g.ldb), "sgemm: B too short");
    let fits = |x: usize| i32::try_from(x).is_ok();
    assert!(
        [g.m, g.n, g.k, g.lda, g.ldb, g.ldc].into_iter().all(fits),
        "sgemm: dimension exceeds i32"
    );
}

/// `sgemm` into the m x n tile of C that starts at `c` (row stride ldc),
/// for products cut into tiles that share rows of one C: each task writes
/// its own columns of those rows, so no task may hold the rows as a slice.
///
/// # Safety
/// `c` is valid for reads and writes of `Gemm::needed(g.m, g.n, g.ldc)`
/// floats, and during the call no other thread touches the tile's
/// elements (row i, columns 0..n, at `c + i * ldc`); the elements between
/// the tile's rows are not touched by this call. A and B must not overlap
/// the tile.
pub(crate) unsafe fn sgemm_tile(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: *mut f32) {
    check(g, a, b);
    #[cfg(feature = "trace")]
    let t0 = std::time::Instant::now();
    // SAFETY: the caller's contract, and the checks above on A and B.
    unsafe { sgemm_impl(g, alpha, a, b, beta, c) };
    #[cfg(feature = "trace")]
    trace::record(g, t0.elapsed());
}

#[cfg(feature = "trace")]
pub use crate::trace;

/// # Safety
/// As [`sgemm_tile`]'s, with A and B checked.
#[cfg(not(miri))]
unsafe fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: *mut f32) {
    // The kernels are settled before the first product (one atomic load
    // after that).
    gemm_info();
    #[cfg(target_os = "linux")]
    if let Some(&f) = MKL_SGEMM.get() {
        let t = |x: bool| if x { 112 } else { 111 };
        // SAFETY: as below (the same checked lengths and dimensions);
        // 101 = row-major, 111/112 = no transpose/transpose in the CBLAS
        // enums MKL shares.
        unsafe {
            f(
                101,
                t(g.trans_a),
                t(g.trans_b),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                alpha,
                a.as_ptr(),
                g.lda as i32,
                b.as_ptr(),
                g.ldb as i32,
                beta,
                c,
                g.ldc as i32,
            )
        }
        return;
    }
    let t = |x: bool| {
        if x {
            cblas_sys::CblasTrans
        } else {
            cblas_sys::CblasNoTrans
        }
    };
    // SAFETY: A and B were checked to cover the region BLAS reads for these
    // dimensions and leading dimensions, all of which fit in i32; C covers
    // the tile by the caller's contract and overlaps neither A nor B.
    unsafe {
        cblas_sys::cblas_sgemm(
            cblas_sys::CblasRowMajor,
            t(g.trans_a),
            t(g.trans_b),
            g.m as i32,
            g.n as i32,
            g.k as i32,
            alpha,
            a.as_ptr(),
            g.lda as i32,
            b.as_ptr(),
            g.ldb as i32,
            beta,
            c,
            g.ldc as i32,
        )
    }
}

/// # Safety
/// As [`sgemm_tile`]'s.
#[cfg(miri)]
unsafe fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: *mut f32) {
    for i in 0..g.m {
        // SAFETY: row i of the tile lies within the caller's region and no
        // other thread touches it during the call.
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * g.ldc), g.n) };
        let one_row = Gemm { m: 1, ..g };
        let a_row = if g.trans_a { &a[i..] } else { &a[i * g.lda..] };
        naive_sgemm(one_row, alpha, a_row, b, beta, row);
    }
}

/// Reference triple loop, for tests and Miri.
pub fn naive_sgemm(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    for i in 0..g.m {
        for j in 0..g.n {
            let mut acc = 0.0f64;
            for p in 0..g.k {
                let av = if g.trans_a {
                    a[p * g.lda + i]
                } else {
                    a[i * g.lda + p]
                };
                let bv = if g.trans_b {
                    b[j * g.ldb + p]
                } else {
                    b[p * g.ldb + j]
                };
                acc += av as f64 * bv as f64;
            }
            let cv = &mut c[i * g.ldc + j];
            *cv = alpha * acc as f32 + if beta == 0.0 { 0.0 } else { beta * *cv };
        }
    }
}

#[cfg(test)]
mod tests;

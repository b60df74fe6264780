//! The only caller of BLAS. A safe row-major `sgemm` that checks every
//! length before calling `cblas_sgemm`; under Miri a naive loop stands in.
//! Which library and kernels run is settled in `runtime` (with `choice`,
//! `openblas` and `mkl`); `split` runs large products on two threads.
#![allow(unsafe_code)]

#[cfg(target_os = "macos")]
extern crate accelerate_src as _;
#[cfg(target_os = "linux")]
extern crate openblas_src as _;

mod choice;
#[cfg(all(target_os = "linux", not(miri)))]
mod mkl;
#[cfg(all(target_os = "linux", not(miri)))]
mod openblas;
mod runtime;
mod split;

#[cfg(all(target_os = "linux", not(miri)))]
use runtime::MKL_SGEMM;
pub use runtime::{GemmInfo, gemm_info, set_blas_threads};
#[cfg(feature = "trace")]
pub use split::SplitProducts;
pub(crate) use split::{sgemm_bias_on, sgemm_on};

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
    let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
    let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
    assert!(g.m > 0 && g.n > 0 && g.k > 0, "sgemm: zero dimension");
    assert!(
        g.lda >= ac && g.ldb >= bc && g.ldc >= g.n,
        "sgemm: leading dimension too small"
    );
    assert!(a.len() >= Gemm::needed(ar, ac, g.lda), "sgemm: A too short");
    assert!(b.len() >= Gemm::needed(br, bc, g.ldb), "sgemm: B too short");
    assert!(
        c.len() >= Gemm::needed(g.m, g.n, g.ldc),
        "sgemm: C too short"
    );
    let fits = |x: usize| i32::try_from(x).is_ok();
    assert!(
        [g.m, g.n, g.k, g.lda, g.ldb, g.ldc].into_iter().all(fits),
        "sgemm: dimension exceeds i32"
    );
    #[cfg(feature = "trace")]
    let t0 = std::time::Instant::now();
    sgemm_impl(g, alpha, a, b, beta, c);
    #[cfg(feature = "trace")]
    trace::record(g, t0.elapsed());
}

/// The profiler lives in `crate::trace`; ops still reach it as `blas::trace`.
#[cfg(feature = "trace")]
pub use crate::trace;

#[cfg(not(miri))]
fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    use cblas::{Layout, Transpose};
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
                c.as_mut_ptr(),
                g.ldc as i32,
            )
        }
        return;
    }
    let t = |x: bool| {
        if x {
            Transpose::Ordinary
        } else {
            Transpose::None
        }
    };
    // SAFETY: every slice was checked above to cover the region BLAS reads or
    // writes for these dimensions and leading dimensions, all of which fit in
    // i32; C does not alias A or B (a &mut and & cannot overlap).
    unsafe {
        cblas::sgemm(
            Layout::RowMajor,
            t(g.trans_a),
            t(g.trans_b),
            g.m as i32,
            g.n as i32,
            g.k as i32,
            alpha,
            a,
            g.lda as i32,
            b,
            g.ldb as i32,
            beta,
            c,
            g.ldc as i32,
        )
    }
}

#[cfg(miri)]
fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    naive_sgemm(g, alpha, a, b, beta, c)
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

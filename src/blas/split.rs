//! Large products split in two by rows of C, the halves on two threads
//! when the pool is given. Its own room: the only part of BLAS use that
//! knows about the pool, and the reason one thread gives the bits of two.

use super::{Gemm, sgemm};
#[cfg(feature = "trace")]
use crate::trace;

/// Products with at least this many multiply-adds are split in two halves
/// (by rows or columns of C) across the pool; smaller ones gain nothing
/// from a second thread (measured: the tiny preset's 5-23 us calls).
pub(crate) const SPLIT_MIN_MACS: usize = 1 << 22;

/// `sgemm`, split in two when the product is large (see
/// [`split_rows_of_c`]), the halves on two threads when `pool` is given.
pub(crate) fn sgemm_on(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    split_rows_of_c(pool, g, a, c, |g, a, c| sgemm(g, alpha, a, b, beta, c));
}

/// For benchmarks (feature `trace`): products run as the ops run them on
/// two threads, split by rows across a worker when large ([`sgemm_on`]),
/// so a bench can time a step's products as the step runs them.
#[cfg(feature = "trace")]
pub struct SplitProducts(crate::pool::Pool);

#[cfg(feature = "trace")]
impl SplitProducts {
    /// None if the worker thread cannot be started.
    pub fn new() -> Option<SplitProducts> {
        crate::pool::Pool::new().map(SplitProducts)
    }

    /// `sgemm`, split as [`sgemm_on`] splits it.
    pub fn sgemm(&self, g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
        sgemm_on(Some(&self.0), g, alpha, a, b, beta, c)
    }
}

/// C = A @ B + bias (bias broadcast over the rows of C, which it first
/// fills), split like [`sgemm_on`]: each thread fills the rows it then
/// multiplies into, while they are still in its cache.
pub(crate) fn sgemm_bias_on(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    a: &[f32],
    b: &[f32],
    bias: &[f32],
    c: &mut [f32],
) {
    split_rows_of_c(pool, g, a, c, |g, a, c| {
        for row in c.chunks_mut(g.ldc).take(g.m) {
            row[..g.n].copy_from_slice(&bias[..g.n]);
        }
        sgemm(g, 1.0, a, b, 1.0, c)
    });
}

/// Runs `product` on the whole of C, or, when the product is large, on its
/// two row halves (with the rows of op(A) they need): across the pool when
/// one is given, else one after the other. OpenBLAS's sums for a row of C
/// depend on how many rows the call has (measured: a 1024-row product and
/// its two 512-row halves differ in about 1% of the elements), so the
/// split depends on the shape alone and one thread gives the same bits as
/// two.
fn split_rows_of_c(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    a: &[f32],
    c: &mut [f32],
    product: impl Fn(Gemm, &[f32], &mut [f32]) + Sync,
) {
    if g.m * g.n * g.k < SPLIT_MIN_MACS || g.m < 64 {
        return product(g, a, c);
    }
    #[cfg(feature = "trace")]
    let _logical = trace::Logical::new(g);
    // Split the rows of C (and of op(A)): two disjoint row blocks. Column
    // splits would interleave in memory, so even wide, short products split
    // by rows (32+ rows per half stay efficient GEMMs).
    let h = g.m / 2;
    let a_off = if g.trans_a { h } else { h * g.lda };
    let (c0, c1) = c.split_at_mut(h * g.ldc);
    let (g0, g1) = (Gemm { m: h, ..g }, Gemm { m: g.m - h, ..g });
    let product = &product;
    match pool {
        Some(pool) => pool.join(|| product(g1, &a[a_off..], c1), || product(g0, a, c0)),
        None => {
            product(g0, a, c0);
            product(g1, &a[a_off..], c1);
        }
    }
}

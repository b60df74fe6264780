//! Large products cut into tiles of C fixed by the shape, run as tasks of
//! the pool when it is given. Its own room: the only part of BLAS use that
//! knows about the pool, and the reason every thread count gives the same
//! bits.
//!
//! Unsafe code: tiles of one C share its rows, so each task reaches its
//! tile through C's base pointer; the invariant is that the tiles of a
//! product are disjoint (each element of C belongs to one task) and C stays
//! mutably borrowed until every task has finished (`Pool::run` returns
//! only then).

use super::tiling::tiles;
use super::{Gemm, sgemm_tile};
#[cfg(feature = "trace")]
use crate::trace;

/// `sgemm`, cut into tiles when the product is large (see [`tiles`]),
/// the tiles across the pool when `pool` is given.
pub(crate) fn sgemm_on(
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
        unsafe { sgemm_tile(g, alpha, a, b, beta, c) }
    });
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

/// A tile's product, `sgemm_tile` or one with its contract.
pub(crate) type TileProduct = unsafe fn(Gemm, f32, &[f32], &[f32], f32, *mut f32);

/// C = A @ B + bias (bias broadcast over the rows of C, which it first
/// fills), split like [`sgemm_on`], each tile by `tile`: each thread fills
/// the rows it then multiplies into, while they are still in its cache.
pub(crate) fn sgemm_bias_on(
    pool: Option<&crate::pool::Pool>,
    tile: TileProduct,
    g: Gemm,
    a: &[f32],
    b: &[f32],
    bias: &[f32],
    c: &mut [f32],
) {
    assert!(bias.len() >= g.n, "sgemm: bias too short");
    split_rows_of_c(pool, g, a, b, c, |g, a, b, c, col| {
        for i in 0..g.m {
            // SAFETY: row i of this tile, which only this call writes.
            let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * g.ldc), g.n) };
            row.copy_from_slice(&bias[col..col + g.n]);
        }
        // SAFETY: as above.
        unsafe { tile(g, 1.0, a, b, 1.0, c) }
    });
}

/// Runs `product` on each tile of C (see [`tiles`]), with the rows of
/// op(A) and the columns of op(B) the tile needs and the tile's first
/// column, across the pool when one is given, else one after the other.
/// OpenBLAS's sums for an element of C depend on the shape of the call
/// that computes it (measured: a 1024-row product and its two 512-row
/// halves differ in about 1% of the elements), so the tiles depend on the
/// shape alone and every thread count gives the same bits.
pub(super) fn split_rows_of_c(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    product: impl Fn(Gemm, &[f32], &[f32], *mut f32, usize) + Sync,
) {
    let t = Tiled::new(g, a, b, c);
    if t.count == 1 {
        return product(g, a, b, t.c.at(0), 0);
    }
    #[cfg(feature = "trace")]
    let _logical = trace::Logical::new(g);
    let task = |i: usize| t.run(i, &product);
    match pool {
        Some(pool) => pool.run(t.count, &task),
        None => (0..t.count).for_each(task),
    }
}

/// One product C += op(A) op(B) cut into its tiles.
struct Tiled<'a> {
    g: Gemm,
    a: &'a [f32],
    b: &'a [f32],
    c: TileBase,
    rows: usize,
    cols: usize,
    count: usize,
}

impl<'a> Tiled<'a> {
    /// The tiles of `g` over `c`, which stays borrowed (through the
    /// returned value's lifetime) until its tiles have run.
    fn new(g: Gemm, a: &'a [f32], b: &'a [f32], c: &'a mut [f32]) -> Tiled<'a> {
        assert!(c.len() >= (g.m - 1) * g.ldc + g.n, "sgemm: C too short");
        let (rows, cols) = tiles(g.m, g.n, g.k);
        Tiled {
            g,
            a,
            b,
            c: TileBase(c.as_mut_ptr()),
            rows,
            cols,
            count: rows * cols,
        }
    }

    /// Runs tile `i` through `product(tile, A rows, B columns, C tile,
    /// first column)`.
    fn run(&self, i: usize, product: &(impl Fn(Gemm, &[f32], &[f32], *mut f32, usize) + Sync)) {
        let g = self.g;
        let r = crate::pool::task_range(g.m, self.rows, i / self.cols);
        let q = crate::pool::task_range(g.n, self.cols, i % self.cols);
        let a_off = if g.trans_a { r.start } else { r.start * g.lda };
        let b_off = if g.trans_b { q.start * g.ldb } else { q.start };
        let tile = Gemm {
            m: r.len(),
            n: q.len(),
            ..g
        };
        let c_tile = self.c.at(r.start * g.ldc + q.start);
        product(tile, &self.a[a_off..], &self.b[b_off..], c_tile, q.start)
    }
}

/// Two accumulating products (a layer's dX and dW, each tile by `tile`)
/// and, optionally, one more task (the bias sums) in ONE task list, so every thread works on
/// whichever is left: `first.c += op(first.a) op(first.b)`, likewise
/// `second`. Each product is cut into its own tiles (see [`tiles`]), so
/// the bits are those of running them one after another at any thread
/// count.
pub(crate) fn sgemm_pair_on(
    pool: Option<&crate::pool::Pool>,
    tile: TileProduct,
    first: (Gemm, &[f32], &[f32], &mut [f32]),
    second: (Gemm, &[f32], &[f32], &mut [f32]),
    extra: Option<&(dyn Fn() + Sync)>,
) {
    let t0 = Tiled::new(first.0, first.1, first.2, first.3);
    let t1 = Tiled::new(second.0, second.1, second.2, second.3);
    let n_extra = usize::from(extra.is_some());
    // SAFETY: `c` is a tile of a C that only this task writes.
    let accumulate = |g, a: &[f32], b: &[f32], c, _| unsafe { tile(g, 1.0, a, b, 1.0, c) };
    let task = |i: usize| {
        if i < n_extra {
            if let Some(f) = extra {
                f()
            }
        } else if i - n_extra < t0.count {
            t0.run(i - n_extra, &accumulate)
        } else {
            t1.run(i - n_extra - t0.count, &accumulate)
        }
    };
    let n = n_extra + t0.count + t1.count;
    match pool {
        Some(pool) => pool.run(n, &task),
        None => (0..n).for_each(task),
    }
}

/// C's first element, shared by the tile tasks: each writes only its own
/// tile (rows and columns of no other task), so no two tasks touch one
/// element while `c` is borrowed mutably by [`split_rows_of_c`].
#[derive(Clone, Copy)]
struct TileBase(*mut f32);
// SAFETY: see the type's comment; the pointee is plain f32.
unsafe impl Sync for TileBase {}
unsafe impl Send for TileBase {}

impl TileBase {
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

//! One row-major output lent to several tasks at once, each owning blocks
//! whose rows interleave with other tasks' blocks: attention heads write
//! their own columns of rows that every head shares.
//!
//! Unsafe code: no task may hold those rows as a slice (two `&mut` to one
//! row are undefined behaviour even when the writes are disjoint), so each
//! task reaches its blocks through the output's base pointer. The
//! invariant: the blocks of two units never share an element, each unit
//! belongs to one task's handle, and every handle holds the output's
//! `&mut` borrow, so nothing else reads or writes it while a handle lives.

use super::{Gemm, sgemm_tile};
use std::marker::PhantomData;
use std::ops::Range;

/// How an output `[row_blocks * rows, parts * per_row * width]` is cut
/// into units. Unit u = r * per_row + j owns, in each of the `rows` rows
/// of row block r, the columns `s * per_row * width + j * width` onward,
/// `width` of them, for each part s. So a `[B, T, C]` output of NH heads
/// of D channels is (B, T, NH, 1, D) and a `[B, T, 3C]` one is
/// (B, T, NH, 3, D): unit b * NH + h is head h of batch item b.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnitLayout {
    pub row_blocks: usize,
    pub rows: usize,
    pub per_row: usize,
    pub parts: usize,
    pub width: usize,
}

impl UnitLayout {
    /// Floats in a row of the output.
    pub(crate) fn ld(self) -> usize {
        self.parts * self.per_row * self.width
    }

    /// How many units the output holds.
    pub(crate) fn units(self) -> usize {
        self.row_blocks * self.per_row
    }

    /// Floats in the whole output.
    fn len(self) -> usize {
        self.row_blocks * self.rows * self.ld()
    }
}

/// The units of one task: a contiguous run, of which it may write only
/// the blocks (see [`UnitLayout`]), by [`UnitsOut::sgemm`].
pub(crate) struct UnitsOut<'a> {
    base: *mut f32,
    layout: UnitLayout,
    units: Range<usize>,
    /// The borrow of the whole output, shared by every task's handle.
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: a handle writes only its own units' blocks, which no other
// handle reaches (see the module's comment); f32 is plain data.
unsafe impl Send for UnitsOut<'_> {}

/// Cuts `out` into the units of `tasks` tasks, contiguous runs in task
/// order ([`crate::pool::task_range`]): the i-th handle has the i-th run.
/// Panics if `out` is not exactly the layout's size, or `tasks` is 0.
pub(crate) fn split_units(
    out: &mut [f32],
    layout: UnitLayout,
    tasks: usize,
) -> impl Iterator<Item = UnitsOut<'_>> {
    assert_eq!(out.len(), layout.len(), "split_units: output size");
    assert!(tasks > 0, "split_units: no tasks");
    let base = out.as_mut_ptr();
    let units = layout.units();
    // Each run starts where the one before ended, so no two overlap.
    let mut next = 0;
    (0..tasks).map(move |i| {
        let len = crate::pool::task_range(units, tasks, i).len();
        let run = next..next + len;
        next = run.end;
        UnitsOut {
            base,
            layout,
            units: run,
            _out: PhantomData,
        }
    })
}

impl UnitsOut<'_> {
    /// The units this handle owns.
    pub(crate) fn units(&self) -> Range<usize> {
        self.units.clone()
    }

    /// `sgemm` into part `part` of unit `unit`'s block, from its row `row`
    /// on: C is the block's columns 0..n of rows row..row + m (row stride
    /// `g.ldc`, which must be the output's row length). Panics, as `sgemm`
    /// does on a short slice, if the unit is not this handle's or the tile
    /// leaves the block.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sgemm(
        &mut self,
        unit: usize,
        part: usize,
        row: usize,
        g: Gemm,
        alpha: f32,
        a: &[f32],
        b: &[f32],
        beta: f32,
    ) {
        let l = self.layout;
        assert!(self.units.contains(&unit), "sgemm: unit not owned");
        assert!(part < l.parts, "sgemm: no such part");
        assert!(
            g.m > 0 && row + g.m <= l.rows,
            "sgemm: rows leave the block"
        );
        assert!(g.n <= l.width, "sgemm: columns leave the block");
        assert_eq!(g.ldc, l.ld(), "sgemm: C's row stride");
        let (r, j) = (unit / l.per_row, unit % l.per_row);
        let offset = (r * l.rows + row) * l.ld() + (part * l.per_row + j) * l.width;
        // Within the output, as `sgemm` asserts for a slice (the checks
        // above already imply it).
        assert!(offset + (g.m - 1) * g.ldc + g.n <= l.len());
        // SAFETY: the tile is rows row..row + m, columns 0..n of this
        // unit's part, inside the output (checked above), which stays
        // mutably borrowed while this handle lives; no other handle owns
        // this unit, so no other thread touches the tile. A and B are
        // shared borrows, so they cannot overlap the mutably borrowed
        // output.
        unsafe { sgemm_tile(g, alpha, a, b, beta, self.base.add(offset)) }
    }
}

//! The column transforms of a convolution: im2col unfolds an image into
//! the GEMM's columns, col2im folds the columns' gradient back, with
//! whole-plane shifted copies and adds for stride-1 same-width geometries.

use super::geometry::Taps;
use super::im2col::Dims;

/// Unfolds one image `x` (`[C, H, W]`) into `col` (`[C kH kW, H_out W_out]`):
/// row (c, i, j) holds the input pixel under kernel tap (i, j) of channel c
/// for each output pixel, 0 where the tap falls in the padding.
pub(super) fn im2col(d: &Dims, x: &[f32], col: &mut [f32]) {
    let l = d.l();
    let mut rows = col.chunks_exact_mut(l);
    let shifted = d.shifts_planes();
    for plane in x.chunks_exact(d.h * d.w) {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let row = rows.next().expect("col holds C kH kW rows");
                let (di, dj) = (i * d.dilation[0], j * d.dilation[1]);
                if shifted {
                    shifted_row(d, plane, row, di, dj);
                    continue;
                }
                let cols = d.col_taps(dj);
                for (oh, out) in row.chunks_exact_mut(d.wo).enumerate() {
                    let ih = (oh * d.stride[0] + di).wrapping_sub(d.pad[0]);
                    if ih >= d.h {
                        out.fill(0.0);
                        continue;
                    }
                    let src = &plane[ih * d.w..][..d.w];
                    out[..cols.lo].fill(0.0);
                    out[cols.hi..].fill(0.0);
                    let inside = &mut out[cols.lo..cols.hi];
                    if d.stride[1] == 1 {
                        inside.copy_from_slice(&src[cols.first..][..inside.len()]);
                    } else {
                        let taken = src[cols.first..].iter().step_by(d.stride[1]);
                        for (o, &v) in inside.iter_mut().zip(taken) {
                            *o = v;
                        }
                    }
                }
            }
        }
    }
}

/// One row of [`im2col`] when [`Dims::shifts_planes`]: output pixel p
/// reads input pixel p + shift wherever its tap (offset `di`, `dj`) lands
/// inside the input, so the row is one long copy of the plane, then zeros
/// in the output rows and columns whose tap lands in the padding.
fn shifted_row(d: &Dims, plane: &[f32], row: &mut [f32], di: usize, dj: usize) {
    let w = d.w;
    let rows = Taps::along(d.h, d.ho, 1, d.pad[0], di);
    let cols = d.col_taps(dj);
    let shift = (di as isize - d.pad[0] as isize) * w as isize + dj as isize - d.pad[1] as isize;
    // Output positions of the valid rows whose source is inside the plane
    // (the first and last may read across a row edge: zeroed below).
    let start = ((rows.lo * w) as isize).max(-shift);
    let end = ((rows.hi * w) as isize).min((d.h * w) as isize - shift);
    if start >= end {
        row.fill(0.0);
        return;
    }
    let (start, end) = (start as usize, end as usize);
    let from = start.wrapping_add_signed(shift);
    row[..start].fill(0.0);
    row[start..end].copy_from_slice(&plane[from..][..end - start]);
    row[end..].fill(0.0);
    zero_edge_columns(&mut row[rows.lo * w..rows.hi * w], w, &cols, 0.0);
}

/// Sets the entries of the output columns outside `cols.lo..cols.hi` of
/// `rows` (whole output rows `w` wide) to `zero`. Column by column, as
/// strided stores: a padding of 1 leaves one entry a row, too short for
/// a fill call each.
#[inline(always)]
fn zero_edge_columns(rows: &mut [f32], w: usize, cols: &Taps, zero: f32) {
    for j in (0..cols.lo).chain(cols.hi..w) {
        for v in rows.iter_mut().skip(j).step_by(w) {
            *v = zero;
        }
    }
}

/// The adjoint of [`im2col`]: adds each column entry into the input pixel
/// it was read from (`dx`: `[C, H, W]`), in a fixed order. With `fresh`,
/// `dx` holds stale values and is written as if zeroed first. Entries of
/// `col` whose tap falls in the padding may be overwritten. Inlined into
/// [`dispatch`](crate::simd::dispatch)ed callers: its rows are short.
#[inline(always)]
pub(super) fn col2im(d: &Dims, col: &mut [f32], dx: &mut [f32], fresh: bool) {
    let l = d.l();
    let mut rows = col.chunks_exact_mut(l);
    let shifted = d.shifts_planes();
    for plane in dx.chunks_exact_mut(d.h * d.w) {
        let mut stale = fresh;
        for i in 0..d.kh {
            for j in 0..d.kw {
                let row = rows.next().expect("col holds C kH kW rows");
                let (di, dj) = (i * d.dilation[0], j * d.dilation[1]);
                if shifted {
                    shifted_row_add(d, row, plane, di, dj, stale);
                    stale = false;
                    continue;
                }
                if stale {
                    plane.fill(0.0);
                    stale = false;
                }
                let cols = d.col_taps(dj);
                for (oh, src) in row.chunks_exact(d.wo).enumerate() {
                    let ih = (oh * d.stride[0] + di).wrapping_sub(d.pad[0]);
                    if ih >= d.h {
                        continue;
                    }
                    let dst = &mut plane[ih * d.w..][..d.w];
                    let inside = &src[cols.lo..cols.hi];
                    if d.stride[1] == 1 {
                        let put = &mut dst[cols.first..][..inside.len()];
                        for (o, &g) in put.iter_mut().zip(inside) {
                            *o += g;
                        }
                    } else {
                        let put = dst[cols.first..].iter_mut().step_by(d.stride[1]);
                        for (o, &g) in put.zip(inside) {
                            *o += g;
                        }
                    }
                }
            }
        }
    }
}

/// One row of [`col2im`] when [`Dims::shifts_planes`], the adjoint of
/// [`shifted_row`]: the row adds into the plane as one long shifted run.
/// Its entries whose tap lands in the column padding would land on a
/// neighbouring row's pixel instead: they are set to -0.0 first, which
/// adds as nothing (x + -0.0 is x for every x, -0.0 included), so each
/// pixel takes the same adds in the same order as row by row. With
/// `stale`, the plane's old values are not read: it becomes `0.0 + row`
/// on the run and 0.0 elsewhere, what zeroing it first and adding gives.
#[inline(always)]
fn shifted_row_add(
    d: &Dims,
    row: &mut [f32],
    plane: &mut [f32],
    di: usize,
    dj: usize,
    stale: bool,
) {
    let w = d.w;
    let rows = Taps::along(d.h, d.ho, 1, d.pad[0], di);
    let cols = d.col_taps(dj);
    let shift = (di as isize - d.pad[0] as isize) * w as isize + dj as isize - d.pad[1] as isize;
    let start = ((rows.lo * w) as isize).max(-shift);
    let end = ((rows.hi * w) as isize).min((d.h * w) as isize - shift);
    if start >= end {
        if stale {
            plane.fill(0.0);
        }
        return;
    }
    let (start, end) = (start as usize, end as usize);
    zero_edge_columns(&mut row[rows.lo * w..rows.hi * w], w, &cols, -0.0);
    let from = start.wrapping_add_signed(shift);
    let (before, rest) = plane.split_at_mut(from);
    let (run, after) = rest.split_at_mut(end - start);
    let src = &row[start..end];
    if stale {
        before.fill(0.0);
        after.fill(0.0);
        for (o, &g) in run.iter_mut().zip(src) {
            *o = 0.0 + g;
        }
    } else {
        for (o, &g) in run.iter_mut().zip(src) {
            *o += g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::im2col::Dims;
    use super::{col2im, im2col};

    /// Every geometry of small sides, kernels, strides, paddings and
    /// dilations whose output is not empty.
    fn geometries() -> impl Iterator<Item = Dims> {
        let mut all = Vec::new();
        for (h, w) in [(1, 1), (3, 5), (6, 4), (7, 7)] {
            for (kh, kw) in [(1, 1), (2, 3), (3, 3)] {
                for stride in [[1, 1], [2, 1], [1, 3], [2, 2]] {
                    for pad in [[0, 0], [1, 1], [1, 2], [2, 1]] {
                        for dilation in [[1, 1], [2, 2], [1, 3]] {
                            let out = |side: usize, k: usize, a: usize| {
                                let span = dilation[a] * (k - 1) + 1;
                                (side + 2 * pad[a])
                                    .checked_sub(span)
                                    .map(|v| v / stride[a] + 1)
                            };
                            let (Some(ho), Some(wo)) = (out(h, kh, 0), out(w, kw, 1)) else {
                                continue;
                            };
                            all.push(Dims {
                                n: 1,
                                c: 2,
                                h,
                                w,
                                c_out: 1,
                                kh,
                                kw,
                                ho,
                                wo,
                                groups: 1,
                                stride,
                                pad,
                                dilation,
                                relu: false,
                            });
                        }
                    }
                }
            }
        }
        all.into_iter()
    }

    /// The input index under tap (i, j) at output (oh, ow), if not padding.
    fn source(d: &Dims, i: usize, j: usize, oh: usize, ow: usize) -> Option<(usize, usize)> {
        let ih = (oh * d.stride[0] + i * d.dilation[0]).checked_sub(d.pad[0])?;
        let iw = (ow * d.stride[1] + j * d.dilation[1]).checked_sub(d.pad[1])?;
        (ih < d.h && iw < d.w).then_some((ih, iw))
    }

    #[test]
    fn columns_and_their_adjoint_match_the_definition() {
        let (mut checked, mut shifted) = (0, 0);
        for d in geometries() {
            shifted += d.shifts_planes() as usize;
            let x: Vec<f32> = (0..d.c * d.h * d.w).map(|v| v as f32 + 1.0).collect();
            let mut col = vec![f32::NAN; d.k_all() * d.l()];
            im2col(&d, &x, &mut col);
            // Gradients with -0.0 among them, NaN where a tap is padding
            // (set below: col2im must skip them), into a gradient that
            // already holds values, -0.0 among them.
            let mut g: Vec<f32> = (0..col.len())
                .map(|v| match v % 7 {
                    3 => -0.0,
                    r => r as f32 - 3.0,
                })
                .collect();
            let old_dx = (0..x.len()).map(|v| match v % 3 {
                0 => -0.0,
                r => (v * r) as f32 * 0.25,
            });
            let mut dx: Vec<f32> = old_dx.clone().collect();
            let mut want_dx: Vec<f32> = old_dx.collect();
            let mut want_fresh = vec![0.0f32; x.len()];
            for c in 0..d.c {
                for i in 0..d.kh {
                    for j in 0..d.kw {
                        let row = (c * d.kh + i) * d.kw + j;
                        for oh in 0..d.ho {
                            for ow in 0..d.wo {
                                let at = row * d.l() + oh * d.wo + ow;
                                let want = match source(&d, i, j, oh, ow) {
                                    Some((ih, iw)) => {
                                        want_dx[(c * d.h + ih) * d.w + iw] += g[at];
                                        want_fresh[(c * d.h + ih) * d.w + iw] += g[at];
                                        x[(c * d.h + ih) * d.w + iw]
                                    }
                                    None => {
                                        g[at] = f32::NAN;
                                        0.0
                                    }
                                };
                                assert_eq!(col[at], want, "{d:?} row {row} at ({oh}, {ow})");
                            }
                        }
                    }
                }
            }
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            // A fresh gradient's stale values are never read.
            let mut fresh = vec![f32::NAN; x.len()];
            col2im(&d, &mut g.clone(), &mut fresh, true);
            assert_eq!(bits(&fresh), bits(&want_fresh), "{d:?} fresh");
            col2im(&d, &mut g, &mut dx, false);
            assert_eq!(bits(&dx), bits(&want_dx), "{d:?}");
            checked += 1;
        }
        assert!(checked > 200, "only {checked} geometries");
        assert!(
            shifted > 20,
            "only {shifted} geometries copy shifted planes"
        );
    }
}

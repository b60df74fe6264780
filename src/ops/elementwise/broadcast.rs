//! The broadcasting loops of the binary ops: the smaller operand is read
//! with stride 0 along the axes it is stretched over, never tiled.

use crate::shape::{MAX_DIMS, Shape};

/// Calls `row(o, a, sa, b, sb, len)` for every innermost row of `out`: the
/// row starts at `o` in the output and at `a`/`b` in the operands, which
/// advance by `sa`/`sb` (0 or 1) per element.
#[inline(always)]
fn for_each_row(
    out: Shape,
    a: Shape,
    b: Shape,
    mut row: impl FnMut(usize, usize, usize, usize, usize, usize),
) {
    let nd = out.ndim();
    let (sa, sb) = (a.broadcast_strides(&out), b.broadcast_strides(&out));
    let len = out.last();
    let rows = out.rows();
    let mut idx = [0usize; MAX_DIMS];
    let (mut ao, mut bo) = (0usize, 0usize);
    for r in 0..rows {
        row(r * len, ao, sa[nd - 1], bo, sb[nd - 1], len);
        // Odometer over the outer dimensions.
        for d in (0..nd.saturating_sub(1)).rev() {
            idx[d] += 1;
            ao += sa[d];
            bo += sb[d];
            if idx[d] < out.dims()[d] {
                break;
            }
            ao -= sa[d] * idx[d];
            bo -= sb[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/// out = f(a, b) elementwise with broadcasting. a, b, out: broadcast shapes.
#[inline(always)]
pub(super) fn binary_forward(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    so: Shape,
    sa: Shape,
    sb: Shape,
    f: impl Fn(f32, f32) -> f32,
) {
    if sa == sb {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
        return;
    }
    // Inlined, as in `binary_backward_into`.
    for_each_row(
        so,
        sa,
        sb,
        #[inline(always)]
        |o, ao, sta, bo, stb, len| {
            let out = &mut out[o..o + len];
            // The innermost stride of each operand is 1 (it varies) or 0 (it
            // is broadcast along the row).
            match (sta == 1, stb == 1) {
                (true, true) => out
                    .iter_mut()
                    .zip(&a[ao..ao + len])
                    .zip(&b[bo..bo + len])
                    .for_each(|((o, &x), &y)| *o = f(x, y)),
                (true, false) => out
                    .iter_mut()
                    .zip(&a[ao..ao + len])
                    .for_each(|(o, &x)| *o = f(x, b[bo])),
                (false, true) => out
                    .iter_mut()
                    .zip(&b[bo..bo + len])
                    .for_each(|(o, &y)| *o = f(a[ao], y)),
                (false, false) => out.iter_mut().for_each(|o| *o = f(a[ao], b[bo])),
            }
        },
    );
}

/// Rows at least this long that sum into one broadcast element do so in
/// [`LANES`] running sums ([`lane_sum`]); shorter ones add their terms in
/// order. Above the replay program's element-by-element size (16 outputs),
/// whose order is the in-order one.
pub(super) const LANE_ROW_MIN: usize = 32;

/// Independent running sums of [`lane_sum`]: one AVX-512 register, two
/// AVX2 ones, four SSE2 ones.
const LANES: usize = 16;

/// The sum of `term(a[i], b[i])` over a row (`a` and `b` of equal length),
/// in a fixed order that does not depend on the instruction set: term i
/// goes to running sum i % 16 while whole groups of 16 last, the 16 sums
/// are then combined pairwise (lane l with lane l + 8, then l + 4, l + 2,
/// l + 1), and the terms after the last whole group, summed in order,
/// are added last (every sum starts at -0, the identity of IEEE
/// addition). One running sum would wait on each add's latency (the
/// gradient of a [2, 1] column broadcast over a [2, 1000] table was a
/// chain of 1,000 dependent adds per row); sixteen fill a vector.
#[inline(always)]
pub(super) fn lane_sum(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f32) -> f32 {
    let (ca, cb) = (a.chunks_exact(LANES), b[..a.len()].chunks_exact(LANES));
    let tail = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(-0.0f32, |s, (&p, &q)| s + term(p, q));
    let mut acc = [-0.0f32; LANES];
    for (p, q) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += term(p[l], q[l]);
        }
    }
    combine_lanes(acc) + tail
}

/// The pairwise combine of [`lane_sum`]'s running sums. Out of line: when
/// inlined, the vectoriser paired the running sums two by two to match
/// it, and the row loop ran on 2-float registers.
#[inline(never)]
fn combine_lanes(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0]
}

/// dx += g(dout, x, y) reduced onto x's (possibly broadcast) shape, where x is
/// the operand being differentiated and y the other one. Where x is
/// broadcast along the innermost axis, each row's terms sum as
/// [`lane_sum`] does (rows of [`LANE_ROW_MIN`] or more).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn binary_backward_into(
    dx: &mut [f32],
    dout: &[f32],
    x: &[f32],
    y: &[f32],
    so: Shape,
    sx: Shape,
    sy: Shape,
    g: impl Fn(f32, f32, f32) -> f32,
) {
    if sx == so && sy == so {
        for (((d, &go), &xv), &yv) in dx.iter_mut().zip(dout).zip(x).zip(y) {
            *d += g(go, xv, yv);
        }
        return;
    }
    // Inlined, so that the row loops are compiled with the caller's
    // instruction set (a closure called out of line is baseline code).
    for_each_row(
        so,
        sx,
        sy,
        #[inline(always)]
        |o, xo, stx, yo, sty, len| {
            let dout = &dout[o..o + len];
            if stx == 0 {
                // x is broadcast along the row: the row's terms sum into its one
                // element.
                let xv = x[xo];
                if len < LANE_ROW_MIN {
                    // In order, in a register (as `+=` on dx[xo] one by one).
                    let mut acc = dx[xo];
                    if sty == 0 {
                        let yv = y[yo];
                        dout.iter().for_each(|&go| acc += g(go, xv, yv));
                    } else {
                        let y = &y[yo..yo + len];
                        dout.iter()
                            .zip(y)
                            .for_each(|(&go, &yv)| acc += g(go, xv, yv));
                    }
                    dx[xo] = acc;
                } else if sty == 0 {
                    let yv = y[yo];
                    dx[xo] += lane_sum(dout, dout, |go, _| g(go, xv, yv));
                } else {
                    let y = &y[yo..yo + len];
                    dx[xo] += lane_sum(dout, y, |go, yv| g(go, xv, yv));
                }
            } else {
                let (dx, x) = (&mut dx[xo..xo + len], &x[xo..xo + len]);
                if sty == 0 {
                    let yv = y[yo];
                    for ((d, &go), &xv) in dx.iter_mut().zip(dout).zip(x) {
                        *d += g(go, xv, yv);
                    }
                } else {
                    let y = &y[yo..yo + len];
                    for (((d, &go), &xv), &yv) in dx.iter_mut().zip(dout).zip(x).zip(y) {
                        *d += g(go, xv, yv);
                    }
                }
            }
        },
    );
}

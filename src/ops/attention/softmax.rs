//! The softmax row kernels: forward (scaled, causally masked rows) and
//! backward, shared by the softmax op and the fused attention.

use crate::kernels::fastmath;

/// In place: row <- softmax(scale * row) over its first `valid` entries; the
/// rest (masked future positions) become 0.
#[inline(always)]
pub(super) fn softmax_row(row: &mut [f32], valid: usize, scale: f32) {
    let (live, masked) = row.split_at_mut(valid);
    let pivot = softmax_pivot(live, scale);
    for v in live.iter_mut() {
        *v = fastmath::exp((*v - pivot) * scale);
    }
    let inv = 1.0 / fastmath::sum(live);
    live.iter_mut().for_each(|v| *v *= inv);
    masked.fill(0.0);
}

/// The value subtracted before exp so that every exponent is <= 0: the
/// row's maximum for a positive scale, its minimum for a negative one.
#[inline(always)]
pub(super) fn softmax_pivot(live: &[f32], scale: f32) -> f32 {
    if scale >= 0.0 {
        fastmath::max(live)
    } else {
        -fastmath::max_neg(live)
    }
}

/// y = softmax(scale * x) for one row, reading x and writing y in the same
/// pass (no copy first): x, y `[tk]`, the first `valid` entries live.
#[inline(always)]
pub(super) fn softmax_row_from(y: &mut [f32], x: &[f32], valid: usize, scale: f32) {
    let (live, masked) = y.split_at_mut(valid);
    let pivot = softmax_pivot(&x[..valid], scale);
    live.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = fastmath::exp((x - pivot) * scale));
    let inv = 1.0 / fastmath::sum(live);
    live.iter_mut().for_each(|v| *v *= inv);
    masked.fill(0.0);
}

/// Number of unmasked columns in row `i` of a `[tq, tk]` block.
pub(super) fn valid_cols(causal: bool, i: usize, tq: usize, tk: usize) -> usize {
    if causal { i + 1 + (tk - tq) } else { tk }
}

/// dx += scale * y * (dy - sum(dy * y)) per row. All `[rows, tk]`.
#[inline(always)]
pub(super) fn softmax_backward(dx: &mut [f32], dy: &[f32], y: &[f32], tk: usize, scale: f32) {
    for ((d, g), p) in dx
        .chunks_exact_mut(tk)
        .zip(dy.chunks_exact(tk))
        .zip(y.chunks_exact(tk))
    {
        let dot = fastmath::dot(g, p);
        for ((d, &g), &p) in d.iter_mut().zip(g).zip(p) {
            *d += scale * p * (g - dot);
        }
    }
}

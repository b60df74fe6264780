//! Stan's normal_lpdf as one op: sum_i ln N(y_i | mu_i, sigma_i), its
//! normalising constant included, mu and sigma shared or one per element
//! (`y ~ normal(mu, sigma)`, which took a subtraction, a division, a
//! square, a log and a sum). z = (y - mu) / sigma (as (y - mu) times
//! 1 / sigma) and every sum are in f64, in blocks on the stack so that the
//! loops vectorise; ln sigma_i is the f32 `ln` of the element-wise ops
//! (a scalar f64 ln per element cost more than the rest of the op), ln of
//! a shared sigma is taken once in f64.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::lanes;
use crate::shape::Shape;
use crate::simd;
use crate::special;

use super::Op;

/// ln sqrt(2 pi).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Elements per block: the kernels keep a block's z, mu and sigma in f64
/// on the stack, so that their loops are plain array loops (vectorised).
const BLOCK: usize = 64;

/// One block's 1 / sigma and z = (y - mu) / sigma (as (y - mu) times
/// 1 / sigma) in f64, from y's elements start..start + len (mu and sigma
/// one element or one per element of y).
struct Block {
    inv: [f64; BLOCK],
    z: [f64; BLOCK],
}

impl Block {
    #[inline(always)]
    fn new() -> Block {
        Block {
            inv: [0.0; BLOCK],
            z: [0.0; BLOCK],
        }
    }

    #[inline(always)]
    fn fill(&mut self, y: &[f32], mu: &[f32], sigma: &[f32], start: usize) {
        let len = y.len();
        let (inv, z) = (&mut self.inv[..len], &mut self.z[..len]);
        if let &[s] = sigma {
            inv.fill(1.0 / s as f64);
        } else {
            for (inv, &s) in inv.iter_mut().zip(&sigma[start..start + len]) {
                *inv = 1.0 / s as f64;
            }
        }
        if let &[m] = mu {
            for ((z, &y), &inv) in z.iter_mut().zip(y).zip(&*inv) {
                *z = (y as f64 - m as f64) * inv;
            }
        } else {
            let mu = &mu[start..start + len];
            for (((z, &y), &m), &inv) in z.iter_mut().zip(y).zip(mu).zip(&*inv) {
                *z = (y as f64 - m as f64) * inv;
            }
        }
    }
}

/// The log density of y given mu and sigma (each one element or y's).
#[inline(always)]
fn log_density(y: &[f32], mu: &[f32], sigma: &[f32]) -> f64 {
    let n = y.len();
    let mut b = Block::new();
    let mut ln_sigma = [0.0f32; BLOCK];
    let mut total = 0.0f64;
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        b.fill(&y[start..start + len], mu, sigma, start);
        let z = &b.z;
        total += -0.5 * lanes::sum_indexed_f64(len, |i| z[i] * z[i]);
        if sigma.len() > 1 {
            let ls = &mut ln_sigma[..len];
            for (l, &s) in ls.iter_mut().zip(&sigma[start..start + len]) {
                *l = special::log(s);
            }
            total -= lanes::sum_indexed_f64(len, |i| ls[i] as f64);
        }
    }
    let shared = match sigma {
        &[s] => (s as f64).ln(),
        _ => 0.0,
    };
    total - n as f64 * (shared + LN_SQRT_2PI)
}

/// d/d(y_i, mu_i, sigma_i) of the log density at element i of a block,
/// times g: (-z / sigma, z / sigma, (z^2 - 1) / sigma).
#[inline(always)]
fn slope<const K: usize>(g: f64, b: &Block, i: usize) -> f64 {
    let (z, inv) = (b.z[i], b.inv[i]);
    g * inv
        * match K {
            0 => -z,
            1 => z,
            _ => z * z - 1.0,
        }
}

/// Adds operand `ks[j]`'s gradient (0 y, 1 mu, 2 sigma) into `dvs[j]`,
/// for each j, from one pass over the blocks (each block's z and 1 / sigma
/// taken once for all of them): per element, or summed in f64 (lanes
/// within a block, blocks in order) for an operand of one element. Each
/// operand's arithmetic and order are the same whichever others come
/// along, so are its bits.
#[inline(always)]
fn add_gradients<const N: usize>(
    g: f64,
    ks: [usize; N],
    mut dvs: [&mut [f32]; N],
    y: &[f32],
    mu: &[f32],
    sigma: &[f32],
) {
    let n = y.len();
    let mut b = Block::new();
    let mut totals = [0.0f64; N];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        b.fill(&y[start..start + len], mu, sigma, start);
        for ((&k, dv), total) in ks.iter().zip(&mut dvs).zip(&mut totals) {
            match k {
                0 => add_block::<0>(g, &b, start, len, dv, total),
                1 => add_block::<1>(g, &b, start, len, dv, total),
                _ => add_block::<2>(g, &b, start, len, dv, total),
            }
        }
    }
    for (dv, total) in dvs.iter_mut().zip(totals) {
        if let [d] = dv {
            *d += total as f32;
        }
    }
}

/// One block's share of operand K's gradient (see [`add_gradients`]).
#[inline(always)]
fn add_block<const K: usize>(
    g: f64,
    b: &Block,
    start: usize,
    len: usize,
    dv: &mut [f32],
    total: &mut f64,
) {
    if dv.len() == 1 {
        *total += lanes::sum_indexed_f64(len, |i| slope::<K>(g, b, i));
    } else {
        for (i, d) in dv[start..start + len].iter_mut().enumerate() {
            *d += slope::<K>(g, b, i) as f32;
        }
    }
}

impl Context {
    /// sum_i ln N(y_i | mu_i, sigma_i), a scalar, the normalising constant
    /// included: Stan's normal_lpdf (`y ~ normal(mu, sigma)`) as one op. y
    /// has any shape; mu and sigma one element (shared) or y's shape. A
    /// gradient in each operand (two may be one tensor: their gradients
    /// are added in turn); a sigma that is not positive gives NaN or inf.
    pub fn normal_lpdf(&mut self, y: Tensor, mu: Tensor, sigma: Tensor) -> Result<Tensor> {
        const OP: &str = "normal_lpdf";
        let iy = self.resolve(OP, y)?;
        let im = self.resolve(OP, mu)?;
        let is = self.resolve(OP, sigma)?;
        let sy = self.entry(iy).shape;
        for (what, i) in [
            ("mu must be one element or y's shape", im),
            ("sigma must be one element or y's shape", is),
        ] {
            let s = self.entry(i).shape;
            if s.numel() != 1 && s != sy {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    what,
                    a: sy,
                    b: s,
                });
            }
        }
        let tracks = self.tracks(&[iy, im, is]);
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        Ok(self.run(
            Op::NormalLpdf {
                y: iy,
                mu: im,
                sigma: is,
            },
            out,
        ))
    }
}

/// The operands' buffers, in input order.
fn buffers(ctx: &Context, ids: [u32; 3]) -> [Buf; 3] {
    ids.map(|i| ctx.entry(i).data)
}

pub(crate) fn forward_normal_lpdf(ctx: &mut Context, out: u32, ids: [u32; 3]) {
    let [y, mu, sigma] = buffers(ctx, ids);
    let eo = ctx.entry(out);
    let ([o], [y, mu, sigma]) = ctx.access([eo.data], [y, mu, sigma]);
    o[0] = simd::dispatch!(log_density(y, mu, sigma)) as f32;
}

/// Every wanted gradient from one pass where their buffers are apart;
/// one operand at a time, in input order, where two share one (two
/// operands may be one tensor).
pub(crate) fn backward_normal_lpdf(ctx: &mut Context, out: u32, ids: [u32; 3]) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let bufs = buffers(ctx, ids);
    let g = ctx.read_only(dout)[0] as f64;
    // Looked up in input order: a slot two operands share is settled once,
    // by the first, as one at a time would.
    let wanted = ids.map(|id| ctx.grad_of(id));
    let apart = |a: Option<Buf>, b: Option<Buf>| match (a, b) {
        (Some(a), Some(b)) => !a.overlaps(&b),
        _ => true,
    };
    let [wy, wm, ws] = wanted;
    if apart(wy, wm) && apart(wy, ws) && apart(wm, ws) {
        return match wanted {
            [Some(a), Some(b), Some(c)] => {
                let ([a, b, c], [y, mu, sigma]) = ctx.access([a, b, c], bufs);
                simd::dispatch!(add_gradients(g, [0, 1, 2], [a, b, c], y, mu, sigma))
            }
            [Some(a), Some(b), None] => both(ctx, g, [0, 1], [a, b], bufs),
            [Some(a), None, Some(c)] => both(ctx, g, [0, 2], [a, c], bufs),
            [None, Some(b), Some(c)] => both(ctx, g, [1, 2], [b, c], bufs),
            _ => one_at_a_time(ctx, g, wanted, bufs),
        };
    }
    one_at_a_time(ctx, g, wanted, bufs);
}

/// Two operands' gradients from one pass (buffers apart).
fn both(ctx: &mut Context, g: f64, ks: [usize; 2], [a, b]: [Buf; 2], bufs: [Buf; 3]) {
    let ([a, b], [y, mu, sigma]) = ctx.access([a, b], bufs);
    simd::dispatch!(add_gradients(g, ks, [a, b], y, mu, sigma))
}

/// Each wanted operand's gradient from a pass of its own, in input order.
fn one_at_a_time(ctx: &mut Context, g: f64, wanted: [Option<Buf>; 3], bufs: [Buf; 3]) {
    for (k, dv) in wanted.into_iter().enumerate() {
        let Some(dv) = dv else {
            continue;
        };
        let ([dv], [y, mu, sigma]) = ctx.access([dv], bufs);
        match k {
            0 => simd::dispatch!(add_gradients(g, [0], [dv], y, mu, sigma)),
            1 => simd::dispatch!(add_gradients(g, [1], [dv], y, mu, sigma)),
            _ => simd::dispatch!(add_gradients(g, [2], [dv], y, mu, sigma)),
        }
    }
}

#[cfg(test)]
#[path = "lpdf_tests.rs"]
mod tests;

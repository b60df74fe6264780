//! Generalised linear models' likelihoods as one op each, with a gradient
//! in every argument: Stan's normal_id_glm_lpdf
//! (y ~ normal(alpha + X beta, sigma), `normal`) and
//! bernoulli_logit_glm_lpmf (y ~ bernoulli_logit(alpha + X beta),
//! `logistic`). Written with the general ops, a regression's
//! likelihood is a product, a loss and a handful of scalar ops, each paying
//! the replay's per-op cost and the product BLAS's per-call cost; here it
//! is one pass over X forward (what the backward needs saved) and one back.
//!
//! X is x [n, d] or, transposed, x [d, n] (as `matmul`'s flags): the second
//! keeps each column of X contiguous, so both passes run along the rows in
//! vector registers. X beta is taken in f32, as a product would be (f64
//! there halves the vector width and adds conversions: it ran slower than
//! the unfused ops); the sums over the rows are taken in f64, but for X^T r
//! on the transposed layout with one sigma (f32, in 64 lanes).

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::shape::Shape;

use super::Op;

mod logistic;
mod normal;

pub(crate) use logistic::{backward_bernoulli_logit_glm, forward_bernoulli_logit_glm};
pub(crate) use normal::{backward_normal_id_glm, forward_normal_id_glm};

/// ln sqrt(2 pi).
pub(super) const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Rows per block of the forward pass (held in registers: four AVX-512
/// vectors).
pub(super) const BLOCK: usize = 64;

/// The operands' values as the kernels read them. `alpha` and `sigma` are
/// one element (the same for every row) or n.
pub(super) struct Glm<'a> {
    pub(super) y: &'a [f32],
    pub(super) x: &'a [f32],
    pub(super) alpha: &'a [f32],
    pub(super) beta: &'a [f32],
    pub(super) sigma: &'a [f32],
    pub(super) n: usize,
    pub(super) d: usize,
    pub(super) transposed: bool,
}

/// v's element for row i: v[0] when v has one element.
#[inline(always)]
pub(super) fn per_row(v: &[f32], i: usize) -> f64 {
    v[if v.len() == 1 { 0 } else { i }] as f64
}

impl Glm<'_> {
    /// X_ij.
    #[inline(always)]
    pub(super) fn x_at(&self, i: usize, j: usize) -> f32 {
        if self.transposed {
            self.x[j * self.n + i]
        } else {
            self.x[i * self.d + j]
        }
    }

    /// t -= X beta (t += X beta when ADD) for the rows of block `start`,
    /// in f32, the columns in order. X transposed: a full block is held in
    /// registers through every column (a pass per column loaded and
    /// stored it d times).
    #[inline(always)]
    pub(super) fn columns<const ADD: bool>(&self, t: &mut [f32], start: usize) {
        if !self.transposed {
            for (j, &b) in self.beta.iter().enumerate() {
                for (k, t) in t.iter_mut().enumerate() {
                    let p = self.x[(start + k) * self.d + j] * b;
                    *t = if ADD { *t + p } else { *t - p };
                }
            }
            return;
        }
        let n = self.n;
        if let Ok(t) = <&mut [f32; BLOCK]>::try_from(&mut *t) {
            // Four 16-lane locals (one 64-lane array stayed in memory).
            let lanes = |q: usize| -> [f32; 16] { t[16 * q..16 * q + 16].try_into().unwrap() };
            let (mut a0, mut a1, mut a2, mut a3) = (lanes(0), lanes(1), lanes(2), lanes(3));
            for (j, &b) in self.beta.iter().enumerate() {
                let col: &[f32; BLOCK] = self.x[j * n + start..][..BLOCK].try_into().unwrap();
                for k in 0..16 {
                    let p = [col[k], col[16 + k], col[32 + k], col[48 + k]].map(|x| x * b);
                    if ADD {
                        (a0[k], a1[k], a2[k], a3[k]) =
                            (a0[k] + p[0], a1[k] + p[1], a2[k] + p[2], a3[k] + p[3]);
                    } else {
                        (a0[k], a1[k], a2[k], a3[k]) =
                            (a0[k] - p[0], a1[k] - p[1], a2[k] - p[2], a3[k] - p[3]);
                    }
                }
            }
            for (q, acc) in [a0, a1, a2, a3].iter().enumerate() {
                t[16 * q..16 * q + 16].copy_from_slice(acc);
            }
            return;
        }
        for (j, &b) in self.beta.iter().enumerate() {
            let col = &self.x[j * n + start..][..t.len()];
            for (t, &x) in t.iter_mut().zip(col) {
                *t = if ADD { *t + x * b } else { *t - x * b };
            }
        }
    }
}

impl Context {
    /// Stan's normal_id_glm_lpdf: sum over the n rows of
    /// ln N(y_i | alpha_i + X_i beta, sigma_i), the normalising constant
    /// included, as a scalar. y is `[n]`; X is x `[n, d]`, or x `[d, n]` read as its transpose
    /// when `transpose_x` (the faster layout); beta is `[d]`; alpha and sigma
    /// are one element or n. Every operand gets a gradient. A sigma that is
    /// not positive gives NaN.
    pub fn normal_id_glm_lpdf(
        &mut self,
        y: Tensor,
        x: Tensor,
        transpose_x: bool,
        alpha: Tensor,
        beta: Tensor,
        sigma: Tensor,
    ) -> Result<Tensor> {
        const OP: &str = "normal_id_glm_lpdf";
        let (iy, ix) = (self.resolve(OP, y)?, self.resolve(OP, x)?);
        let (ia, ib, is) = (
            self.resolve(OP, alpha)?,
            self.resolve(OP, beta)?,
            self.resolve(OP, sigma)?,
        );
        let n = self.glm_rows(OP, [iy, ix, ia, ib], transpose_x, Some(is))?;
        let tracks = self.tracks(&[iy, ix, ia, ib, is]);
        let resid = self.alloc_scratchable::<f32>(OP, n)?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let op = Op::NormalIdGlm {
            y: iy,
            x: ix,
            alpha: ia,
            beta: ib,
            sigma: is,
            transposed: transpose_x,
            resid,
        };
        Ok(self.run(op, out))
    }

    /// n, once the operands' shapes are checked: y `[n]`; x `[n, d]` (`[d, n]`
    /// when transposed); beta `[d]`; alpha and sigma one element or `[n]`.
    fn glm_rows(
        &self,
        op: &'static str,
        [iy, ix, ia, ib]: [u32; 4],
        transpose_x: bool,
        sigma: Option<u32>,
    ) -> Result<usize> {
        let [sy, sx, sa, sb] = [iy, ix, ia, ib].map(|i| self.entry(i).shape);
        let &[n] = sy.dims() else {
            return Err(Error::BadShape {
                op,
                what: format!("y must be a vector [n], not {sy}"),
            });
        };
        let (rows, d) = match (sx.dims(), transpose_x) {
            (&[r, d], false) => (r, d),
            (&[d, r], true) => (r, d),
            _ => (0, 0),
        };
        let mismatch = |what, b| Error::ShapeMismatch { op, what, a: sy, b };
        if rows != n {
            return Err(mismatch(
                if transpose_x {
                    "x must be [d, n] (transposed) for y [n]"
                } else {
                    "x must be [n, d] for y [n]"
                },
                sx,
            ));
        }
        if sb.dims() != [d] {
            return Err(Error::ShapeMismatch {
                op,
                what: "beta must be [d] for x's d columns",
                a: sx,
                b: sb,
            });
        }
        let per_row = [
            Some(("alpha must be one element or [n] for y [n]", sa)),
            sigma.map(|i| {
                (
                    "sigma must be one element or [n] for y [n]",
                    self.entry(i).shape,
                )
            }),
        ];
        for (what, s) in per_row.into_iter().flatten() {
            if s.numel() != 1 && s.dims() != [n] {
                return Err(mismatch(what, s));
            }
        }
        Ok(n)
    }

    /// Stan's bernoulli_logit_glm_lpmf: sum over the n rows of
    /// y_i ln sigmoid(eta_i) + (1 - y_i) ln sigmoid(-eta_i), eta = alpha +
    /// X beta, as a scalar: the Bernoulli log mass for y in {0, 1} (and
    /// the cross-entropy for y in between). Shapes as
    /// [`normal_id_glm_lpdf`](Self::normal_id_glm_lpdf) without sigma.
    /// Every operand gets a gradient (y's is eta).
    pub fn bernoulli_logit_glm_lpmf(
        &mut self,
        y: Tensor,
        x: Tensor,
        transpose_x: bool,
        alpha: Tensor,
        beta: Tensor,
    ) -> Result<Tensor> {
        const OP: &str = "bernoulli_logit_glm_lpmf";
        let (iy, ix) = (self.resolve(OP, y)?, self.resolve(OP, x)?);
        let (ia, ib) = (self.resolve(OP, alpha)?, self.resolve(OP, beta)?);
        let n = self.glm_rows(OP, [iy, ix, ia, ib], transpose_x, None)?;
        let tracks = self.tracks(&[iy, ix, ia, ib]);
        // y - sigmoid(eta), then eta.
        let saved = self.alloc_scratchable::<f32>(OP, 2 * n)?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let op = Op::BernoulliLogitGlm {
            y: iy,
            x: ix,
            alpha: ia,
            beta: ib,
            transposed: transpose_x,
            saved,
        };
        Ok(self.run(op, out))
    }
}

/// The operands' buffers as five (y, x, alpha, beta, sigma; sigma y's
/// again, and read as empty, where the family has none), n and d.
fn operands<const N: usize>(ctx: &Context, ids: [u32; N]) -> ([Buf; 5], usize, usize) {
    let n = ctx.entry(ids[0]).shape.numel();
    let d = ctx.entry(ids[3]).shape.numel();
    let buf = |k: usize| ctx.entry(ids[if k < N { k } else { 0 }]).data;
    (std::array::from_fn(buf), n, d)
}

/// The kernels' view of the operands' slices.
fn view<'a, const N: usize>(v: [&'a [f32]; 5], n: usize, d: usize, transposed: bool) -> Glm<'a> {
    let [y, x, alpha, beta, sigma] = v;
    Glm {
        y,
        x,
        alpha,
        beta,
        sigma: if N == 5 { sigma } else { &[] },
        n,
        d,
        transposed,
    }
}

/// An op's forward: `kernel` writes what the backward needs into `saved`
/// and returns the log density.
pub(super) fn run_forward<const N: usize>(
    ctx: &mut Context,
    out: u32,
    ids: [u32; N],
    transposed: bool,
    saved: Buf,
    kernel: impl FnOnce(&Glm, &mut [f32]) -> f64,
) {
    let (bufs, n, d) = operands(ctx, ids);
    let lp = ctx.entry(out).data;
    let ([lp, saved], v) = ctx.access([lp, saved], bufs);
    lp[0] = kernel(&view::<N>(v, n, d, transposed), saved) as f32;
}

/// An op's backward: `kernel(m, k, dv, saved, g)` adds g times the
/// gradient in operand k into dv, one operand at a time in input order
/// (two operands may be one tensor, e.g. a shared scalar alpha and sigma:
/// their gradients are then added in turn).
pub(super) fn run_backward<const N: usize>(
    ctx: &mut Context,
    out: u32,
    ids: [u32; N],
    transposed: bool,
    saved: Buf,
    kernel: impl Fn(&Glm, usize, &mut [f32], &[f32], f64),
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (bufs, n, d) = operands(ctx, ids);
    let g = ctx.read_only(dout)[0] as f64;
    for (k, &id) in ids.iter().enumerate() {
        let Some(dv) = ctx.grad_of(id) else {
            continue;
        };
        let [y, x, alpha, beta, sigma] = bufs;
        let ([dv], [saved, y, x, alpha, beta, sigma]) =
            ctx.access([dv], [saved, y, x, alpha, beta, sigma]);
        let m = view::<N>([y, x, alpha, beta, sigma], n, d, transposed);
        kernel(&m, k, dv, saved, g);
    }
}

#[cfg(test)]
mod tests;

//! Stan's lkj_corr_cholesky_lpdf: the LKJ(eta) log density of a correlation
//! matrix's Cholesky factor L, as one op. With the factor built by
//! `constrain_cholesky_corr` (whose log-Jacobian is that of L's entries
//! below the diagonal), it makes L L^T ~ LKJ(eta): the density of the
//! correlation matrix, det^(eta - 1) over its normalising constant, times
//! the Jacobian from L to L L^T, prod_i L_ii^(K - i - 1) (rows from 0).
//! Only L's diagonal is read: ln p = sum_{i>=1} (K - i - 1 + 2 eta - 2)
//! ln L_ii - ln c_K(eta), where (Lewandowski, Kurowicka and Joe, 2009)
//! c_K(eta) = prod_{k=1}^{K-1} [2^(2 eta - 2 + K - k) B(b_k, b_k)]^(K - k)
//! with b_k = eta + (K - k - 1) / 2: for K = 2, the integral of
//! (1 - r^2)^(eta - 1) over (-1, 1). A factor with L_ii <= 0 is not
//! checked: ln of a non-positive diagonal entry gives NaN or -inf.

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::special;

use super::Op;

/// ln c_K(eta) in f64 (see the module docs).
fn log_normaliser(k: usize, eta: f64) -> f64 {
    (1..k)
        .map(|j| {
            let (m, b) = ((k - j) as f64, eta + 0.5 * (k - j - 1) as f64);
            let lbeta = 2.0 * special::lgamma_f64(b) - special::lgamma_f64(2.0 * b);
            m * ((2.0 * eta - 2.0 + m) * std::f64::consts::LN_2 + lbeta)
        })
        .sum()
}

/// Row i's weight: the power of L_ii in the density.
fn weight(k: usize, i: usize, eta: f32) -> f64 {
    (k - i - 1) as f64 + 2.0 * eta as f64 - 2.0
}

impl Context {
    /// The LKJ(eta) log density of L `[K, K]`, a correlation matrix's
    /// Cholesky factor (from
    /// [`constrain_cholesky_corr`](Self::constrain_cholesky_corr)), its
    /// normalising constant included, a scalar: Stan's
    /// lkj_corr_cholesky_lpdf. Reads L's diagonal only; L gets a gradient
    /// there, eta (a constant, > 0) none. eta = 1 is uniform over
    /// correlation matrices; larger eta favours the identity.
    pub fn lkj_corr_cholesky_lpdf(&mut self, l: Tensor, eta: f32) -> Result<Tensor> {
        const OP: &str = "lkj_corr_cholesky_lpdf";
        let il = self.resolve(OP, l)?;
        let sl = self.entry(il).shape;
        let k = match sl.dims() {
            &[a, b] if a == b && a >= 1 => a,
            _ => {
                return Err(Error::BadShape {
                    op: OP,
                    what: format!("L must be a square matrix [K, K] (K >= 1), not {sl}"),
                });
            }
        };
        if !(eta > 0.0 && eta.is_finite()) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("eta must be positive and finite, not {eta}"),
            });
        }
        let constant = log_normaliser(k, eta as f64);
        let tracks = self.tracks(&[il]);
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        Ok(self.run(
            Op::LkjCorrCholesky {
                l: il,
                eta,
                constant,
            },
            out,
        ))
    }
}

/// K of L `[K, K]` (checked when the op was recorded).
fn order(ctx: &Context, l: u32) -> usize {
    ctx.entry(l).shape.dims()[0]
}

pub(crate) fn forward_lkj_corr_cholesky(
    ctx: &mut Context,
    out: u32,
    l: u32,
    eta: f32,
    constant: f64,
) {
    let (k, eo, el) = (order(ctx, l), ctx.entry(out), ctx.entry(l));
    let ([y], [l]) = ctx.access([eo.data], [el.data]);
    let s: f64 = (1..k)
        .map(|i| weight(k, i, eta) * (l[i * k + i] as f64).ln())
        .sum();
    y[0] = (s - constant) as f32;
}

pub(crate) fn backward_lkj_corr_cholesky(ctx: &mut Context, out: u32, l: u32, eta: f32) {
    let (Some(dl), Some(g)) = (ctx.grad_of(l), ctx.grad_out(out)) else {
        return;
    };
    let (k, el) = (order(ctx, l), ctx.entry(l));
    let ([dl], [g, l]) = ctx.access([dl], [g, el.data]);
    for i in 1..k {
        let d = i * k + i;
        dl[d] += (g[0] as f64 * weight(k, i, eta) / l[d] as f64) as f32;
    }
}

#[cfg(test)]
#[path = "lkj_tests.rs"]
mod tests;

//! The normal family: Stan's normal_id_glm_lpdf.

use super::{BLOCK, Glm, LN_SQRT_2PI, per_row, run_backward, run_forward};
use crate::arena::Buf;
use crate::context::Context;
use crate::kernels::lanes;
use crate::simd;

impl Glm<'_> {
    /// 1 / sigma_i^2 for row i.
    #[inline(always)]
    fn inv_var(&self, i: usize) -> f64 {
        let s = per_row(self.sigma, i);
        1.0 / (s * s)
    }

    /// Writes r = y - alpha - X beta in f32 (as a product and a
    /// subtraction would: each product and difference rounded, in the
    /// order y, alpha, then X's columns) and returns the log density, its
    /// sums in f64. Both layouts take the same steps, so give the same
    /// bits.
    #[inline(always)]
    fn forward_normal(&self, r: &mut [f32]) -> f64 {
        let n = self.n;
        for start in (0..n).step_by(BLOCK) {
            let len = BLOCK.min(n - start);
            let (t, y) = (&mut r[start..start + len], &self.y[start..start + len]);
            if let &[a] = self.alpha {
                for (t, &y) in t.iter_mut().zip(y) {
                    *t = y - a;
                }
            } else {
                let a = &self.alpha[start..start + len];
                for ((t, &y), &a) in t.iter_mut().zip(y).zip(a) {
                    *t = y - a;
                }
            }
            self.columns::<false>(t, start);
        }
        if let &[s] = self.sigma {
            let s = s as f64;
            let sq = lanes::sum_squares_f64(r);
            -0.5 * sq / (s * s) - n as f64 * (s.ln() + LN_SQRT_2PI)
        } else {
            let sq = lanes::sum_indexed_f64(n, |i| {
                let (r, s) = (r[i] as f64, self.sigma[i] as f64);
                r * r / (s * s)
            });
            let log_sigma = lanes::sum_indexed_f64(n, |i| (self.sigma[i] as f64).ln());
            -0.5 * sq - log_sigma - n as f64 * LN_SQRT_2PI
        }
    }

    /// r_i / sigma_i^2, the log density's derivative in row i's mean.
    #[inline(always)]
    fn slope(&self, r: &[f32], i: usize) -> f64 {
        r[i] as f64 * self.inv_var(i)
    }

    /// Adds g times the gradient in operand `k` (y, x, alpha, beta, sigma)
    /// into `dv`, from the saved residuals r.
    #[inline(always)]
    fn backward_normal(&self, k: usize, dv: &mut [f32], r: &[f32], g: f64) {
        let (n, d) = (self.n, self.d);
        let one_sigma = self.sigma.len() == 1;
        match k {
            0 => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv -= (g * self.slope(r, i)) as f32;
                }
            }
            // dX_ij = r_i beta_j / sigma_i^2, along x's rows in memory.
            1 if self.transposed => {
                for (j, &b) in self.beta.iter().enumerate() {
                    let row = &mut dv[j * n..][..n];
                    for (i, dv) in row.iter_mut().enumerate() {
                        *dv += (g * self.slope(r, i) * b as f64) as f32;
                    }
                }
            }
            1 => {
                for (i, row) in dv.chunks_exact_mut(d).enumerate() {
                    let w = g * self.slope(r, i);
                    for (dv, &b) in row.iter_mut().zip(self.beta) {
                        *dv += (w * b as f64) as f32;
                    }
                }
            }
            2 if dv.len() == 1 => {
                let s = if one_sigma {
                    lanes::sum_indexed_f64(n, |i| r[i] as f64) * self.inv_var(0)
                } else {
                    lanes::sum_indexed_f64(n, |i| self.slope(r, i))
                };
                dv[0] += (g * s) as f32;
            }
            2 => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv += (g * self.slope(r, i)) as f32;
                }
            }
            3 => {
                for (j, dv) in dv.iter_mut().enumerate() {
                    let s = match (self.transposed, one_sigma) {
                        // A contiguous column of X and one sigma.
                        (true, true) => {
                            lanes::dot_wide(&self.x[j * n..][..n], r) as f64 * self.inv_var(0)
                        }
                        (true, false) => lanes::sum_indexed_f64(n, |i| {
                            self.x[j * n + i] as f64 * self.slope(r, i)
                        }),
                        _ => {
                            lanes::sum_indexed_f64(n, |i| self.x_at(i, j) as f64 * self.slope(r, i))
                        }
                    };
                    *dv += (g * s) as f32;
                }
            }
            _ if one_sigma => {
                // d/dsigma of -n ln sigma - sum r^2 / (2 sigma^2).
                let s = self.sigma[0] as f64;
                let sq = lanes::sum_squares_f64(r);
                dv[0] += (g * (sq / (s * s * s) - n as f64 / s)) as f32;
            }
            _ => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    let (s, r) = (self.sigma[i] as f64, r[i] as f64);
                    *dv += (g * (r * r / (s * s * s) - 1.0 / s)) as f32;
                }
            }
        }
    }
}

pub(crate) fn forward_normal_id_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 5],
    transposed: bool,
    resid: Buf,
) {
    run_forward(ctx, out, ids, transposed, resid, |m, r| {
        simd::dispatch!(m.forward_normal(r))
    });
}

pub(crate) fn backward_normal_id_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 5],
    transposed: bool,
    resid: Buf,
) {
    run_backward(ctx, out, ids, transposed, resid, |m, k, dv, r, g| {
        simd::dispatch!(m.backward_normal(k, dv, r, g))
    });
}

//! The Bernoulli family with the logit link: Stan's
//! bernoulli_logit_glm_lpmf. Per row, with eta = alpha + X beta,
//! y ln sigmoid(eta) + (1 - y) ln sigmoid(-eta) = y eta - softplus(eta),
//! whose derivative in eta is y - sigmoid(eta): both from one e^-|eta|
//! (the unfused log_sigmoid took one forward and another back). A row's
//! mass is taken in f32 (its sum over the rows in f64).

use super::{BLOCK, Glm, run_backward, run_forward};
use crate::arena::Buf;
use crate::context::Context;
use crate::kernels::lanes;
use crate::simd;
use crate::special;

impl Glm<'_> {
    /// Writes eta = alpha + X beta (f32: alpha, then X's columns in order)
    /// and y - sigmoid(eta) into `saved` ([res | eta]) and returns the log
    /// mass, summed in f64 (element i in lane i mod 8).
    #[inline(always)]
    fn forward_logistic(&self, saved: &mut [f32]) -> f64 {
        let n = self.n;
        let (res, eta) = saved.split_at_mut(n);
        let mut acc = [0.0f64; 8];
        let mut terms = [0.0f32; BLOCK];
        for start in (0..n).step_by(BLOCK) {
            let len = BLOCK.min(n - start);
            let t = &mut eta[start..start + len];
            if let &[a] = self.alpha {
                t.fill(a);
            } else {
                t.copy_from_slice(&self.alpha[start..start + len]);
            }
            self.columns::<true>(t, start);
            let (y, res) = (&self.y[start..start + len], &mut res[start..start + len]);
            for k in 0..len {
                let (tail, sigmoid) = special::softplus_tail_and_sigmoid(t[k]);
                res[k] = y[k] - sigmoid;
                // y eta - softplus(eta), as -((max(eta, 0) - y eta) + tail):
                // for y in {0, 1} the bracket is exact (0, -eta or eta), so
                // a row's mass keeps its relative accuracy however small.
                terms[k] = -((t[k].max(0.0) - y[k] * t[k]) + tail);
            }
            let chunks = terms[..len].chunks_exact(8);
            let rest = chunks.remainder();
            for c in chunks {
                let c: &[f32; 8] = c.try_into().unwrap();
                for k in 0..8 {
                    acc[k] += c[k] as f64;
                }
            }
            for (acc, &v) in acc.iter_mut().zip(rest) {
                *acc += v as f64;
            }
        }
        acc.iter().sum()
    }

    /// Adds g times the gradient in operand `k` (y, x, alpha, beta) into
    /// `dv`, from the saved [res | eta].
    #[inline(always)]
    fn backward_logistic(&self, k: usize, dv: &mut [f32], saved: &[f32], g: f64) {
        let (n, d) = (self.n, self.d);
        let (res, eta) = saved.split_at(n);
        match k {
            0 => {
                for (dv, &e) in dv.iter_mut().zip(eta) {
                    *dv += (g * e as f64) as f32;
                }
            }
            // dX_ij = res_i beta_j, along x's rows in memory.
            1 if self.transposed => {
                for (j, &b) in self.beta.iter().enumerate() {
                    for (dv, &r) in dv[j * n..][..n].iter_mut().zip(res) {
                        *dv += (g * r as f64 * b as f64) as f32;
                    }
                }
            }
            1 => {
                for (row, &r) in dv.chunks_exact_mut(d).zip(res) {
                    for (dv, &b) in row.iter_mut().zip(self.beta) {
                        *dv += (g * r as f64 * b as f64) as f32;
                    }
                }
            }
            2 if dv.len() == 1 => {
                dv[0] += (g * lanes::sum_indexed_f64(n, |i| res[i] as f64)) as f32;
            }
            2 => {
                for (dv, &r) in dv.iter_mut().zip(res) {
                    *dv += (g * r as f64) as f32;
                }
            }
            _ => {
                for (j, dv) in dv.iter_mut().enumerate() {
                    let s = if self.transposed {
                        lanes::dot_wide(&self.x[j * n..][..n], res) as f64
                    } else {
                        lanes::sum_indexed_f64(n, |i| self.x[i * d + j] as f64 * res[i] as f64)
                    };
                    *dv += (g * s) as f32;
                }
            }
        }
    }
}

pub(crate) fn forward_bernoulli_logit_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 4],
    transposed: bool,
    saved: Buf,
) {
    run_forward(ctx, out, ids, transposed, saved, |m, saved| {
        simd::dispatch!(m.forward_logistic(saved))
    });
}

pub(crate) fn backward_bernoulli_logit_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 4],
    transposed: bool,
    saved: Buf,
) {
    run_backward(ctx, out, ids, transposed, saved, |m, k, dv, saved, g| {
        simd::dispatch!(m.backward_logistic(k, dv, saved, g))
    });
}

#[cfg(test)]
#[path = "logistic_tests.rs"]
mod tests;

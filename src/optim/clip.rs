//! Global-norm gradient clipping, and the norm pass the step's
//! non-finite check shares.

use super::kinds::check;
use crate::context::Context;
use crate::error::{Error, Result};

impl Context {
    /// Global L2 norm of all parameter gradients, in f64.
    pub(super) fn grad_norm_sq(&mut self) -> f64 {
        let mut total = 0.0f64;
        for i in 0..self.param_count() {
            if let Some(g) = self.entry(i as u32).grad {
                let g = self.read_only(g);
                total += crate::simd::dispatch!(crate::kernels::fastmath::sum_squares_f64(g));
            }
        }
        total
    }

    /// Scales all parameter gradients so their global L2 norm is at most
    /// `max_norm`; returns the norm before clipping. A non-finite norm is
    /// refused (NonFinite) and nothing is scaled.
    pub fn clip_grad_norm(&mut self, max_norm: f32) -> Result<f32> {
        const OP: &str = "clip_grad_norm";
        check(OP, "max_norm", max_norm, max_norm > 0.0, "finite and > 0")?;
        let norm = self.grad_norm_sq().sqrt();
        if !norm.is_finite() {
            return Err(Error::NonFinite {
                op: OP,
                what: format!("gradient norm is {norm}"),
            });
        }
        if norm > max_norm as f64 {
            let s = (max_norm as f64 / (norm + 1e-6)) as f32;
            for i in 0..self.param_count() {
                if let Some(g) = self.entry(i as u32).grad {
                    self.access_one(g).iter_mut().for_each(|v| *v *= s);
                }
            }
        }
        self.set_grads_checked_finite();
        Ok(norm as f32)
    }
}

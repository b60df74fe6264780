//! Special functions for log densities: float32 in, float32 out.
//!
//! Each kernel widens its argument to f64, evaluates an f64 algorithm whose
//! relative error is a few f64 ulps (about 1e-15), and rounds once to f32,
//! so the result is within one f32 ulp of the float64 value rounded to
//! float32 (the tests measure and assert at most 4). The algorithms are
//! series, asymptotic expansions, recurrences and a continued fraction;
//! their constants were derived with 50-digit arithmetic (zeta values, the
//! Taylor coefficients of digamma at its positive zero). Only `f64::ln` and
//! `f64::exp` are used as primitives. The exceptions are exp and log
//! themselves, and softplus, log-sigmoid and their derivative the sigmoid
//! (the maps of a logistic regression's every data row): they run in f32,
//! branch-free (one exp, a ln(1 + u) series), so a loop of them vectorises
//! 16 lanes wide; exp and log within 1 ulp, the others within 3 (see
//! `logexp`).
//!
//! Domains: `lgamma`, `digamma`, `trigamma` on x > 0 (NaN for x < 0, the
//! pole's limit at 0); `log1m_exp` on x <= 0, `lbeta` on a, b >= 0,
//! `log_diff_exp` on a >= b, `gamma_p` and `gamma_q` on a > 0, x >= 0,
//! `beta_inc` on a, b > 0, 0 <= x <= 1 (NaN outside, as Stan); the others on every
//! float (NaN propagates). Each function `f` has its derivative beside it
//! as `f_grad` (the derivative of `digamma` is `trigamma`, of `lgamma` is
//! `digamma`, of `trigamma` is tetragamma), a two-argument one its
//! partials as `f_grad_a` and `f_grad_b`.
//!
//! This module is a leaf: it imports nothing of the crate, so ops can call
//! it from any kernel.
//!
//! One file per family: `gamma` (lgamma, digamma, trigamma), `beta`
//! (lbeta), `incgamma` (gamma_p, gamma_q), `incbeta` (beta_inc, whose
//! partials are `beta_inc_grad_a`, `_b` and `_x`), `logexp` (exp, log, log1p, expm1, tanh, softplus, log-sigmoid),
//! `logdiff` (log1m_exp, log_diff_exp), `normal` (erf and the standard
//! normal) and `logsumexp`.

mod beta;
mod gamma;
mod incbeta;
mod incgamma;
mod inv_phi;
mod logdiff;
mod logexp;
mod logsumexp;
mod normal;

pub use beta::{lbeta, lbeta_grad_a, lbeta_grad_b};
pub(crate) use gamma::lgamma_f64;
pub use gamma::{digamma, digamma_grad, lgamma, lgamma_grad, trigamma, trigamma_grad};
pub use incbeta::{beta_inc, beta_inc_grad_a, beta_inc_grad_b, beta_inc_grad_x};
pub use incgamma::{
    gamma_p, gamma_p_grad_a, gamma_p_grad_b, gamma_q, gamma_q_grad_a, gamma_q_grad_b,
};
pub use inv_phi::{inv_phi, inv_phi_grad};
pub use logdiff::{
    log_diff_exp, log_diff_exp_grad_a, log_diff_exp_grad_b, log1m_exp, log1m_exp_grad,
};
pub use logexp::{
    exp, expm1, expm1_grad, log, log_sigmoid, log_sigmoid_grad, log1p, log1p_grad, softplus,
    softplus_grad, softplus_tail_and_sigmoid, tanh,
};
#[cfg(test)]
pub use logsumexp::{logsumexp, logsumexp_grad};
pub use logsumexp::{logsumexp_grad_add_strided, logsumexp_strided};
pub use normal::{erf, erf_grad, normal_cdf, normal_cdf_grad, normal_lcdf, normal_lcdf_grad};

#[cfg(test)]
mod tests;

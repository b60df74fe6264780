//! The per-coordinate summary of a run's draws: moments, quantiles, MCSE
//! of the mean, bulk and tail ESS and R-hat.

use super::diagnostics::{ess_bulk, ess_mean, ess_tail, quantile, rhat};
use super::nuts::ChainDraws;

/// One coordinate's summary over all chains.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SummaryRow {
    pub mean: f64,
    pub sd: f64,
    /// Monte Carlo standard error of the mean: sd / sqrt(ESS of the mean).
    pub mcse_mean: f64,
    pub q5: f64,
    pub q50: f64,
    pub q95: f64,
    pub ess_bulk: f64,
    pub ess_tail: f64,
    pub rhat: f64,
}

/// Coordinate `j` of the first `n` draws of every chain, chain after chain.
pub fn coordinate(chains: &[ChainDraws], j: usize, n: usize) -> Vec<f64> {
    chains
        .iter()
        .flat_map(|c| c.positions.chunks_exact(c.dim).take(n).map(move |q| q[j]))
        .collect()
}

/// The summary of coordinate `j` over the first `n` draws of each chain
/// (the fewest any chain completed, for a cancelled run).
pub fn summarise(chains: &[ChainDraws], j: usize, n: usize) -> SummaryRow {
    let x = coordinate(chains, j, n);
    let m = chains.len();
    let s = x.len() as f64;
    let mean = x.iter().sum::<f64>() / s;
    let sd = (x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (s - 1.0)).sqrt();
    SummaryRow {
        mean,
        sd,
        mcse_mean: sd / ess_mean(&x, m, n).sqrt(),
        q5: quantile(&x, 0.05),
        q50: quantile(&x, 0.5),
        q95: quantile(&x, 0.95),
        ess_bulk: ess_bulk(&x, m, n),
        ess_tail: ess_tail(&x, m, n),
        rhat: rhat(&x, m, n),
    }
}

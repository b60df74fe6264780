//! The NUTS sampler's own cost per leapfrog step: four chains of 1,000
//! warm-up and 1,000 draws, one after another, on a standard normal in d
//! dimensions (a density of a few nanoseconds), the time over the density's
//! calls; the median of five runs (seeds 1 to 5). `make bench` prints it
//! beside the posteriors' gradients, of which it is the sampler's share.
//!
//! Usage: bench_nuts_sampler [D ...]   (default: 6 27)

use arenagrad::infer::nuts::{Settings, run_chain};
use std::time::Instant;

/// (nanoseconds per density call, calls) of one run.
fn run(dim: usize, seed: u64) -> (f64, u64) {
    let settings = Settings::default();
    let mut calls = 0u64;
    let t0 = Instant::now();
    for chain in 0..4 {
        let density = |q: &[f64], g: &mut [f64]| -> Result<f64, ()> {
            calls += 1;
            let mut lp = 0.0;
            for (g, &q) in g.iter_mut().zip(q) {
                lp -= 0.5 * q * q;
                *g = -q;
            }
            Ok(lp)
        };
        let (draws, error) = run_chain(dim, &settings, seed, chain, density, |_| true);
        assert!(error.is_none(), "chain {chain} failed");
        std::hint::black_box(draws);
    }
    (t0.elapsed().as_secs_f64() * 1e9 / calls as f64, calls)
}

fn main() {
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("dimensions are positive integers"))
        .collect();
    let dims = if dims.is_empty() { vec![6, 27] } else { dims };
    for dim in dims {
        let mut runs: Vec<(f64, u64)> = (1..=5).map(|seed| run(dim, seed)).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ns, calls) = runs[2];
        println!(
            "nuts_sampler_ns_per_leapfrog dim {dim} {ns:.1} \
             (4 chains x (1000 + 1000), standard normal, median of 5; {calls} density calls)"
        );
    }
}

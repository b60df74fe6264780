//! Convergence diagnostics over `m` chains of `n` draws of one quantity,
//! x[chain * n + i] (Vehtari, Gelman, Simpson, Carpenter, Buerkner 2021,
//! "Rank-normalization, folding, and localization: an improved R-hat"):
//! rank-normalised split R-hat, bulk and tail ESS, and the ESS of the mean.
//!
//! Each chain is split in halves (an odd middle draw dropped); ranks are
//! pooled over all halves and mapped to normal scores
//! z = Phi^-1((r - 3/8) / (S + 1/4)), ties given their average rank.
//! Autocorrelations are summed with Geyer's initial monotone sequence.

/// The split chains: 2m halves of n/2 draws, and n/2.
fn split(x: &[f64], m: usize, n: usize) -> (Vec<f64>, usize) {
    let h = n / 2;
    let mut out = Vec::with_capacity(2 * m * h);
    for c in x.chunks_exact(n).take(m) {
        out.extend_from_slice(&c[..h]);
        out.extend_from_slice(&c[n - h..]);
    }
    (out, h)
}

/// Phi^-1(p) for p in (0, 1): Acklam's rational approximation (relative
/// error below 1.2e-9), ample for normal scores of ranks.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Normal scores of the pooled ranks of x.
fn rank_normalise(x: &[f64]) -> Vec<f64> {
    let s = x.len();
    let mut idx: Vec<usize> = (0..s).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut z = vec![0.0; s];
    let mut i = 0;
    while i < s {
        let mut j = i;
        while j + 1 < s && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let r = 0.5 * (i + j) as f64 + 1.0;
        let v = normal_quantile((r - 0.375) / (s as f64 + 0.25));
        for &k in &idx[i..=j] {
            z[k] = v;
        }
        i = j + 1;
    }
    z
}

fn chain_means(x: &[f64], n: usize) -> Vec<f64> {
    x.chunks_exact(n)
        .map(|c| c.iter().sum::<f64>() / n as f64)
        .collect()
}

/// The classic R-hat of `x.len() / n` chains of n draws.
fn rhat_basic(x: &[f64], n: usize) -> f64 {
    let means = chain_means(x, n);
    let m = means.len() as f64;
    let grand = means.iter().sum::<f64>() / m;
    let w = x
        .chunks_exact(n)
        .zip(&means)
        .map(|(c, mu)| c.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / (n as f64 - 1.0))
        .sum::<f64>()
        / m;
    let b = means
        .iter()
        .map(|mu| (mu - grand) * (mu - grand))
        .sum::<f64>()
        / (m - 1.0);
    let var_plus = (n as f64 - 1.0) / n as f64 * w + b;
    (var_plus / w).sqrt()
}

/// The ESS of `x.len() / n` chains of n draws (Geyer's initial monotone
/// sequence over the chain-averaged autocorrelations); NaN for constant draws.
fn ess_basic(x: &[f64], n: usize) -> f64 {
    let means = chain_means(x, n);
    let m = means.len();
    let acov = |t: usize| {
        x.chunks_exact(n)
            .zip(&means)
            .map(|(c, mu)| {
                (0..n - t)
                    .map(|i| (c[i] - mu) * (c[i + t] - mu))
                    .sum::<f64>()
                    / n as f64
            })
            .sum::<f64>()
            / m as f64
    };
    let grand = means.iter().sum::<f64>() / m as f64;
    let mean_var = acov(0) * n as f64 / (n as f64 - 1.0);
    let b = means
        .iter()
        .map(|mu| (mu - grand) * (mu - grand))
        .sum::<f64>()
        / (m as f64 - 1.0); // m >= 2: the callers pass split chains
    let var_plus = mean_var * (n as f64 - 1.0) / n as f64 + b;
    if var_plus.is_nan() || var_plus <= 0.0 {
        return f64::NAN;
    }
    let rho_at = |t: usize| 1.0 - (mean_var - acov(t)) / var_plus;
    let mut rho = vec![1.0, rho_at(1)];
    let mut t = 0;
    let (mut even, mut odd) = (rho[0], rho[1]);
    while t + 5 < n && even + odd > 0.0 {
        t += 2;
        even = rho_at(t);
        odd = rho_at(t + 1);
        if even + odd >= 0.0 {
            rho.push(even);
            rho.push(odd);
        }
    }
    let len = rho.len();
    let mut k = 2;
    while k + 1 < len {
        if rho[k] + rho[k + 1] > rho[k - 2] + rho[k - 1] {
            let avg = 0.5 * (rho[k - 2] + rho[k - 1]);
            rho[k] = avg;
            rho[k + 1] = avg;
        }
        k += 2;
    }
    let s = (m * n) as f64;
    let tau = (-1.0 + 2.0 * rho.iter().sum::<f64>()).max(1.0 / s.log10());
    s / tau
}

/// Rank-normalised split R-hat: the larger of the bulk and folded R-hats.
/// Needs m * n >= 4 with n >= 4 (NaN otherwise).
pub fn rhat(x: &[f64], m: usize, n: usize) -> f64 {
    if n < 4 || m == 0 {
        return f64::NAN;
    }
    let (sp, h) = split(x, m, n);
    let bulk = rhat_basic(&rank_normalise(&sp), h);
    let med = quantile(&sp, 0.5);
    let folded: Vec<f64> = sp.iter().map(|v| (v - med).abs()).collect();
    let tail = rhat_basic(&rank_normalise(&folded), h);
    bulk.max(tail)
}

/// Bulk ESS: the ESS of the rank-normalised split chains.
pub fn ess_bulk(x: &[f64], m: usize, n: usize) -> f64 {
    if n < 4 || m == 0 {
        return f64::NAN;
    }
    let (sp, h) = split(x, m, n);
    ess_basic(&rank_normalise(&sp), h)
}

/// Tail ESS: the smaller ESS of the indicators of the 5% and 95% quantiles.
pub fn ess_tail(x: &[f64], m: usize, n: usize) -> f64 {
    if n < 4 || m == 0 {
        return f64::NAN;
    }
    let (sp, h) = split(x, m, n);
    let ess_below = |p: f64| {
        let q = quantile(&sp, p);
        let ind: Vec<f64> = sp.iter().map(|&v| f64::from(u8::from(v <= q))).collect();
        ess_basic(&ind, h)
    };
    ess_below(0.05).min(ess_below(0.95))
}

/// ESS of the mean: the ESS of the split chains as they are.
pub fn ess_mean(x: &[f64], m: usize, n: usize) -> f64 {
    if n < 4 || m == 0 {
        return f64::NAN;
    }
    let (sp, h) = split(x, m, n);
    ess_basic(&sp, h)
}

/// The p-quantile of x, interpolating between order statistics (R's type 7).
pub fn quantile(x: &[f64], p: f64) -> f64 {
    let mut s = x.to_vec();
    s.sort_by(f64::total_cmp);
    let h = (s.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(s.len() - 1);
    s[lo] + (h - lo as f64) * (s[hi] - s[lo])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::rng::ChainRng;

    #[test]
    fn normal_quantile_inverts_known_points() {
        assert!(normal_quantile(0.5).abs() < 1e-9);
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-8);
        assert!((normal_quantile(0.001) + 3.090_232_306_167_813).abs() < 1e-8);
    }

    #[test]
    fn iid_draws_have_rhat_near_one_and_full_ess() {
        let (m, n) = (4, 1000);
        let mut r = ChainRng::for_chain(3, 0);
        let x: Vec<f64> = (0..m * n).map(|_| r.normal()).collect();
        let rh = rhat(&x, m, n);
        assert!((rh - 1.0).abs() < 0.01, "rhat {rh}");
        let e = ess_bulk(&x, m, n);
        assert!(e > 3000.0 && e < 5000.0, "bulk ess {e}");
        let t = ess_tail(&x, m, n);
        assert!(t > 2500.0 && t < 5500.0, "tail ess {t}");
    }

    #[test]
    fn stuck_chains_have_a_large_rhat_and_autocorrelation_cuts_ess() {
        let (m, n) = (4, 400);
        let mut r = ChainRng::for_chain(4, 0);
        // chain c sits around c: R-hat far above 1
        let x: Vec<f64> = (0..m * n)
            .map(|i| (i / n) as f64 + 0.1 * r.normal())
            .collect();
        assert!(rhat(&x, m, n) > 2.0);
        // an AR(1) with phi = 0.9: ESS about S (1 - phi) / (1 + phi)
        let mut y = Vec::with_capacity(m * n);
        for _ in 0..m {
            let mut v = 0.0;
            for _ in 0..n {
                v = 0.9 * v + r.normal();
                y.push(v);
            }
        }
        let e = ess_mean(&y, m, n);
        assert!(e > 40.0 && e < 200.0, "AR(1) ess {e}");
    }
}

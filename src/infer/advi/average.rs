//! Polyak-Ruppert averaging of ADVI's iterates over the last steps of a
//! run whose end is not known in advance.

use super::{Family, Params};

/// The running means of the iterates over the ascent's last steps (see
/// src/infer/advi.rs's notes): `sum` over the `n` steps reported, `next` over the
/// `next_n` most recent, which take its place once they cover `fraction`
/// of the steps.
pub(super) struct TailAverage {
    fraction: f64,
    sum: Vec<f64>,
    pub(super) n: u32,
    next: Vec<f64>,
    next_n: u32,
}

impl TailAverage {
    pub(super) fn new(fraction: f64, len: usize) -> Self {
        TailAverage {
            fraction,
            sum: vec![0.0; len],
            n: 0,
            next: vec![0.0; len],
            next_n: 0,
        }
    }

    /// Adds the iterate of ascent step `k` (from 1).
    pub(super) fn add(&mut self, p: &Params, k: u32) {
        let d = p.dim;
        let (mu, s) = p.theta.split_at(d);
        let (sum_mu, sum_s) = self.sum.split_at_mut(d);
        let (next_mu, next_s) = self.next.split_at_mut(d);
        for ((a, b), &m) in sum_mu.iter_mut().zip(next_mu).zip(mu) {
            *a += m;
            *b += m;
        }
        match p.family {
            Family::MeanField => {
                for ((a, b), &w) in sum_s.iter_mut().zip(next_s.iter_mut()).zip(s) {
                    *a += w;
                    *b += w;
                }
            }
            Family::FullRank => {
                // column j negated when L_jj < 0: the same covariance
                for i in 0..d {
                    for j in 0..=i {
                        let v = if s[j * d + j] < 0.0 {
                            -s[i * d + j]
                        } else {
                            s[i * d + j]
                        };
                        sum_s[i * d + j] += v;
                        next_s[i * d + j] += v;
                    }
                }
            }
        }
        self.n += 1;
        self.next_n += 1;
        if f64::from(self.next_n) >= self.fraction * f64::from(k) {
            std::mem::swap(&mut self.sum, &mut self.next);
            self.n = self.next_n;
            self.next.fill(0.0);
            self.next_n = 0;
        }
    }

    /// The mean of the iterates reported into `theta` (at least one step
    /// was added).
    pub(super) fn write_mean(&self, theta: &mut [f64]) {
        let n = f64::from(self.n);
        for (t, &a) in theta.iter_mut().zip(&self.sum) {
            *t = a / n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Iterate k is k everywhere, so the mean of the last n iterates at
    /// step k is k - (n - 1) / 2, which gives back the steps averaged.
    #[test]
    fn tail_average_covers_between_f_and_f_times_2_minus_f_of_the_steps() {
        for f in [0.1, 0.25, 0.5, 1.0] {
            let mut p = Params::initial(Family::MeanField, &[0.0]);
            let mut avg = TailAverage::new(f, p.theta.len());
            for k in 1..=5000u32 {
                p.theta.fill(f64::from(k));
                avg.add(&p, k);
                let mut mean = [0.0; 2];
                avg.write_mean(&mut mean);
                let (k, n) = (f64::from(k), 2.0 * (f64::from(k) - mean[0]) + 1.0);
                assert_eq!(mean[0], mean[1]);
                assert!((n - f64::from(avg.n)).abs() < 1e-6, "f {f} step {k}: {n}");
                assert!(
                    n >= f * k && n <= f * (2.0 - f) * k + 1.0,
                    "f {f} step {k}: {n}"
                );
            }
        }
    }

    /// L and L with a column negated are the same covariance: the mean is
    /// taken with every diagonal entry positive.
    #[test]
    fn tail_average_signs_the_columns_of_l() {
        let mut p = Params::initial(Family::FullRank, &[0.0, 0.0]);
        let mut avg = TailAverage::new(1.0, p.theta.len());
        // L = [[1, 0], [0.5, 2]] with its columns negated in turn
        for (k, [c0, c1]) in [[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]]
            .into_iter()
            .enumerate()
        {
            p.theta[2..].copy_from_slice(&[c0, 0.0, 0.5 * c0, 2.0 * c1]);
            avg.add(&p, k as u32 + 1);
        }
        let mut mean = vec![0.0; p.theta.len()];
        avg.write_mean(&mut mean);
        assert_eq!(mean[2..], [1.0, 0.0, 0.5, 2.0]);
    }
}

//! xoshiro256** (Blackman and Vigna) seeded through SplitMix64: one stream
//! per chain, so a (seed, chain) pair gives the same draws on every machine
//! and whatever else runs beside the chain.

use crate::rng::{GAMMA, mix};

/// A chain's random stream.
#[derive(Clone, Debug)]
pub struct ChainRng {
    s: [u64; 4],
    /// The second normal of the last pair [`normal`](Self::normal) made.
    spare: Option<f64>,
}

impl ChainRng {
    /// The stream of chain `chain` of a run seeded with `seed`.
    pub fn for_chain(seed: u64, chain: u32) -> Self {
        let mut x = seed.wrapping_mul(1_000_003).wrapping_add(u64::from(chain));
        let mut s = [0; 4];
        for v in &mut s {
            x = x.wrapping_add(GAMMA);
            *v = mix(x);
        }
        ChainRng { s, spare: None }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal draw: Marsaglia's polar method, a pair from a
    /// point drawn uniformly in the unit disc (one logarithm and one square
    /// root per pair, no cosine), the second kept for the next call. A
    /// transition draws a momentum of dim normals: Box-Muller's logarithm,
    /// square root and cosine for each took half the sampler's own time per
    /// leapfrog step at dim 27.
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        loop {
            let u = 2.0 * self.uniform() - 1.0;
            let v = 2.0 * self.uniform() - 1.0;
            let s = u * u + v * v;
            // s = 0 would make 0/0; s >= 1 is outside the disc.
            if s > 0.0 && s < 1.0 {
                let f = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * f);
                return u * f;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_get_distinct_streams_and_a_seed_repeats() {
        let a: Vec<u64> = (0..4)
            .map(|_| ChainRng::for_chain(7, 0).next_u64())
            .collect();
        assert!(a.iter().all(|&v| v == a[0]));
        assert_ne!(
            ChainRng::for_chain(7, 0).next_u64(),
            ChainRng::for_chain(7, 1).next_u64()
        );
        let mut r = ChainRng::for_chain(1, 0);
        let n = 20_000;
        let (mut s1, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let z = r.normal();
            s1 += z;
            s2 += z * z;
        }
        let mean = s1 / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((s2 / n as f64 - 1.0).abs() < 0.05);
    }

    /// The normals' distribution (the fraction below each of seven
    /// quantiles of the standard normal, against its probability: the
    /// bound is five binomial sds at 200,000 draws) and each pair's two
    /// draws uncorrelated (the product of consecutive draws averages 0).
    #[test]
    fn normals_follow_the_standard_normal() {
        let mut r = ChainRng::for_chain(3, 2);
        let n = 200_000;
        let z: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        // (quantile, Phi(quantile))
        let points = [
            (-2.5, 0.006_209_665),
            (-1.5, 0.066_807_201),
            (-0.5, 0.308_537_539),
            (0.0, 0.5),
            (0.5, 0.691_462_461),
            (1.5, 0.933_192_799),
            (2.5, 0.993_790_335),
        ];
        for (x, p) in points {
            let below = z.iter().filter(|&&v| v < x).count() as f64 / n as f64;
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (below - p).abs() < 5.0 * sd,
                "P(z < {x}) = {below}, not {p}"
            );
        }
        let lag: f64 = z.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / (n - 1) as f64;
        assert!(
            lag.abs() < 5.0 / (n as f64).sqrt(),
            "lag-1 product mean {lag}"
        );
    }
}

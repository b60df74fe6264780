//! xoshiro256** (Blackman and Vigna) seeded through SplitMix64: one stream
//! per chain, so a (seed, chain) pair gives the same draws on every machine
//! and whatever else runs beside the chain.

use crate::rng::{GAMMA, mix};

/// A chain's random stream.
#[derive(Clone, Debug)]
pub struct ChainRng {
    s: [u64; 4],
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
        ChainRng { s }
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

    /// A standard normal draw (Box-Muller; u1 in (0, 1] keeps the log finite).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
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
}

//! SplitMix64's constants and mixer: the counter-based random streams of
//! parameter initialisation and dropout masks (random access by position,
//! so a seed gives the same values on every run and thread count).

/// SplitMix64's increment (2^64 / golden ratio, odd).
pub(crate) const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijection of u64 with good avalanche.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

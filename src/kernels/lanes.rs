//! Reductions in eight independent accumulators ("lanes"): one running sum
//! waits on each add's latency and stays scalar, eight side by side fill a
//! vector register. The lane order is fixed (element i goes to lane i mod
//! 8 of its chunk, the tail after), so a result is the same on every
//! instruction set and at any thread count.

/// Sum with 8 independent accumulators: the compiler keeps them in one
/// vector register (a plain fold must stay sequential and scalar).
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Dot product, vectorised like [`sum`].
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Lanes of [`dot_wide`]: four AVX-512 registers' worth, so four
/// independent chains of adds however wide the instruction set (a long
/// dot product's add latency hidden, where [`dot`]'s 8 lanes are one).
const WIDE: usize = 64;

/// sum_i a_i b_i in f32, element i in lane i mod 64 of its chunk (the tail
/// after), the lanes then added in a fixed order: the same bits on every
/// instruction set. Its error is at most about (n / 64 + 7) eps of the
/// terms' magnitudes.
#[inline(always)]
pub(crate) fn dot_wide(a: &[f32], b: &[f32]) -> f32 {
    // Lanes 0..16, 16..32, 32..48, 48..64 as four locals: one 64-lane
    // array stayed in memory, each add waiting on the last one's store.
    let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; 16], [0.0f32; 16], [0.0f32; 16], [0.0f32; 16]);
    let (ca, cb) = (a.chunks_exact(WIDE), b.chunks_exact(WIDE));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        let (x, y): (&[f32; WIDE], &[f32; WIDE]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for k in 0..16 {
            a0[k] += x[k] * y[k];
            a1[k] += x[16 + k] * y[16 + k];
            a2[k] += x[32 + k] * y[32 + k];
            a3[k] += x[48 + k] * y[48 + k];
        }
    }
    // The rest in eighths of a chunk (lanes 0..8), then one by one.
    let (ea, eb) = (ra.chunks_exact(8), rb.chunks_exact(8));
    let tail: f32 = (ea.remainder().iter().zip(eb.remainder()))
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ea.zip(eb) {
        let (x, y): (&[f32; 8], &[f32; 8]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for k in 0..8 {
            a0[k] += x[k] * y[k];
        }
    }
    // Fold halves: 64 -> 32 -> .. -> 1, a fixed tree.
    for k in 0..16 {
        a0[k] += a2[k];
        a1[k] += a3[k];
    }
    for k in 0..16 {
        a0[k] += a1[k];
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for k in 0..width {
            a0[k] += a0[k + width];
        }
    }
    a0[0] + tail
}

/// sum_i term(a_i, b_i) in f64, in 8 lanes side by side rather than one
/// chain of dependent adds (the tail after the lanes).
#[inline(always)]
fn sum_pairs_f64(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = (ca.remainder().iter().zip(cb.remainder()))
        .map(|(&x, &y)| term(x, y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += term(x[i], y[i]);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// sum_i term(i) for i in 0..n in f64, in lanes (element i in lane i
/// mod 8 of its chunk, the tail after), for sums whose terms are no
/// simple pair of slices.
#[inline(always)]
pub(crate) fn sum_indexed_f64(n: usize, term: impl Fn(usize) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let body = n - n % 8;
    for base in (0..body).step_by(8) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc += term(base + k);
        }
    }
    let tail: f64 = (body..n).map(term).sum();
    acc.iter().sum::<f64>() + tail
}

/// Dot product summed in f64 (each f32 product exact), in lanes.
#[inline(always)]
pub(crate) fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    sum_pairs_f64(a, b, |x, y| x as f64 * y as f64)
}

/// Sum of (a - b)^2 in f64 (each difference rounded to f32 first, its
/// square exact in f64), in lanes.
#[inline(always)]
pub(crate) fn sum_sq_diff_f64(a: &[f32], b: &[f32]) -> f64 {
    sum_pairs_f64(a, b, |x, y| {
        let d = (x - y) as f64;
        d * d
    })
}

/// Sum of squared deviations from `mu` (two-pass variance, vectorised).
#[inline(always)]
pub(crate) fn sum_sq_dev(xs: &[f32], mu: f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&x| (x - mu) * (x - mu))
        .sum();
    for c in chunks {
        for i in 0..8 {
            acc[i] += (c[i] - mu) * (c[i] - mu);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// (sum a*b, sum a*b*c), vectorised like [`sum`].
#[inline(always)]
pub(crate) fn dot2(a: &[f32], b: &[f32], c: &[f32]) -> (f32, f32) {
    let (mut s1, mut s2) = ([0.0f32; 8], [0.0f32; 8]);
    let (ca, cb, cc) = (a.chunks_exact(8), b.chunks_exact(8), c.chunks_exact(8));
    let (mut t1, mut t2) = (0.0f32, 0.0f32);
    for ((x, y), z) in ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .zip(cc.remainder())
    {
        t1 += x * y;
        t2 += x * y * z;
    }
    for ((x, y), z) in ca.zip(cb).zip(cc) {
        for i in 0..8 {
            let p = x[i] * y[i];
            s1[i] += p;
            s2[i] += p * z[i];
        }
    }
    (s1.iter().sum::<f32>() + t1, s2.iter().sum::<f32>() + t2)
}

/// Maximum (NaN-ignoring like f32::max), vectorised like [`sum`].
#[inline(always)]
pub(crate) fn max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for c in chunks {
        for i in 0..8 {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// Maximum of -x (i.e. minus the minimum of x), vectorised like [`max`].
#[inline(always)]
pub(crate) fn max_neg(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(-x));
    for c in chunks {
        for i in 0..8 {
            acc[i] = if -c[i] > acc[i] { -c[i] } else { acc[i] };
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// Sum of x^2 in f64. Eight independent accumulators: one running sum
/// would wait on each add's latency (about 1 ms for the small preset's
/// 0.8M gradients); the fixed lane order keeps the result the same on
/// every instruction set.
#[inline(always)]
pub(crate) fn sum_squares_f64(xs: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| v as f64 * v as f64)
        .sum();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i] as f64 * c[i] as f64;
        }
    }
    acc.iter().sum::<f64>() + tail
}

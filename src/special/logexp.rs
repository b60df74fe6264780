//! Logs and exponentials: the vectorisable f32 exp and log of the `exp`
//! and `log` ops, and near their cancellations log1p, expm1, tanh,
//! softplus and log-sigmoid. Its own room: the f64 log1p here is also the
//! building block of the normal family's log CDF.

/// log(1 + z) in f64 for any z >= -1: u = 1 + z rounds, and the factor
/// z / (u - 1) cancels that rounding to first order (Goldberg's method).
pub(super) fn log1p_f64(z: f64) -> f64 {
    let u = 1.0 + z;
    if u == 1.0 {
        z
    } else if u.is_infinite() {
        u
    } else {
        u.ln() * (z / (u - 1.0))
    }
}

/// ln(1 + x), accurate for small |x|; NaN below -1, -inf at -1.
pub fn log1p(x: f32) -> f32 {
    if x.is_nan() || x < -1.0 {
        return f32::NAN;
    }
    log1p_f64(x as f64) as f32
}

/// d/dx log1p = 1 / (1 + x) (1 + x is exact in f64 for |x| >= 2^-29).
pub fn log1p_grad(x: f32) -> f32 {
    (1.0 / (1.0 + x as f64)) as f32
}

/// e^x - 1, accurate for small |x|.
pub fn expm1(x: f32) -> f32 {
    expm1_f64(x as f64) as f32
}

/// e^x - 1 in f64, accurate for small |x| (past |x| = 0.5 the subtraction
/// loses at most a bit).
pub(super) fn expm1_f64(x: f64) -> f64 {
    if x.abs() < 0.5 {
        expm1_small(x)
    } else {
        x.exp() - 1.0
    }
}

/// e^x - 1 = x (1 + x/2 (1 + x/3 (1 + ... (1 + x/17)))) for |x| < 0.5: the
/// first omitted term is below 3e-20 of the result.
fn expm1_small(x: f64) -> f64 {
    let mut s = 1.0;
    let mut k = 17.0;
    while k >= 2.0 {
        s = 1.0 + x / k * s;
        k -= 1.0;
    }
    x * s
}

/// d/dx expm1 = e^x.
pub fn expm1_grad(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// tanh(x), within half an f32 ulp of the exact value plus about 1e-12
/// relative (libm's tanhf is within 2.2 ulps and, through its expm1f, takes
/// twice as long on a scalar model's dependency chain). (e^{2|x|} - 1) /
/// (e^{2|x|} + 1) in f64: for |x| >= 2^-12 the subtraction keeps a relative
/// error below 5e-13; below that, tanh(x) = x (1 - x^2/3 + ...) rounds to
/// x, and above 16 to +-1. NaN propagates; the sign is x's (so -0 stays -0).
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a < TANH_TINY {
        return x;
    }
    if a > 16.0 {
        return 1.0f32.copysign(x);
    }
    let e = (2.0 * a as f64).exp();
    (((e - 1.0) / (e + 1.0)) as f32).copysign(x)
}

/// Below this |x|, tanh(x) rounds to x in f32: x^2 / 3 < 2^-25.
const TANH_TINY: f32 = 1.0 / 4096.0;

/// softplus(x) = ln(1 + e^x) (Stan's log1p_exp), without overflow:
/// max(x, 0) + ln(1 + e^-|x|), in f32 with branch-free pieces, so a loop
/// over a vector of them vectorises 16 lanes wide on AVX-512 (libm's exp
/// and log1p are calls; the same pieces in f64 ran at half the lanes
/// and with longer series, 7 ns an element). Error within 3 ulps of the
/// exact value: e^-|x| within 1 ulp, ln(1 + e) adds at most 1.5
/// (see [`ln_1p_unit`]), and the sum with max(x, 0) only shrinks that
/// relative to the result.
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    let y = x.max(0.0) + ln_1p_unit(exp(-x.abs()));
    // NaN in, NaN out (max and abs above would drop it).
    if x.is_nan() { x } else { y }
}

/// (ln(1 + e^-|x|), sigmoid(x)) from one e^-|x|: softplus(x) is
/// max(x, 0) plus the first (the bits of [`softplus`] once added), the
/// second has the bits of [`softplus_grad`]; one exponential where the two
/// took two. NaN gives NaN in both.
#[inline(always)]
pub fn softplus_tail_and_sigmoid(x: f32) -> (f32, f32) {
    let e = exp(-x.abs());
    let tail = ln_1p_unit(e);
    let s = if x >= 0.0 { 1.0 } else { e } / (1.0 + e);
    if x.is_nan() { (x, x) } else { (tail, s) }
}

/// d/dx softplus = sigmoid(x).
#[inline(always)]
pub fn softplus_grad(x: f32) -> f32 {
    sigmoid_branch_free(x)
}

/// ln sigmoid(x) = -softplus(-x).
#[inline(always)]
pub fn log_sigmoid(x: f32) -> f32 {
    -softplus(-x)
}

/// d/dx log_sigmoid = sigmoid(-x).
#[inline(always)]
pub fn log_sigmoid_grad(x: f32) -> f32 {
    sigmoid_branch_free(-x)
}

/// 1 / (1 + e^-x) from e = e^-|x| <= 1: 1 / (1 + e) or e / (1 + e), in
/// f32: e's ulp, 1 + e's half ulp and the division's half ulp, about 2
/// ulps in all.
#[inline(always)]
fn sigmoid_branch_free(x: f32) -> f32 {
    let e = exp(-x.abs());
    let y = if x >= 0.0 { 1.0 } else { e } / (1.0 + e);
    if x.is_nan() { x } else { y }
}

/// ln 2 in two parts: n * LN2_HI is exact for |n| < 512 (LN2_HI's last 9
/// mantissa bits are zero), LN2_LO the rest ([`exp`] and [`log`]).
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 * 2^23: adding and subtracting it rounds to the nearest integer.
const ROUND: f32 = 12_582_912.0;
/// 1/k! for k <= 7, e^r's Taylor coefficients.
const EXP_TAYLOR: [f32; 8] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// e^x in f32, branch-free (a loop of it vectorises 16 lanes wide on
/// AVX-512), within 1 ulp of the exact value on every float (the tests
/// measure it against f64). x = n ln2 + r with |r| <= ln2/2 (r exact to
/// far below an ulp: n ln2 in two parts), e^r by its Taylor series to r^7
/// (truncation below 5e-9 relative, a tenth of an ulp), then 2^n applied
/// as two normal powers of two, 2^(n - n/2) and 2^(n/2), so that only the
/// last product rounds: a subnormal result is rounded once, and a result
/// past f32::MAX overflows to inf there, at libm's threshold (e^x is
/// finite up to 88.72283, inf from the next float up). Inputs are clamped
/// to [-104, 89]: below -104 e^x is under half the smallest subnormal and
/// rounds to 0 (e^-inf = 0), above 89 it overflows (e^inf = inf). NaN in,
/// the same NaN out. The softplus and sigmoid kernels below use it on
/// x <= 0.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let c = x.clamp(-104.0, 89.0);
    let t = c * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = c - n * LN2_HI - n * LN2_LO;
    // e^r = 1 + r q, q = 1 + r/2! + ... + r^6/7! in Estrin's form (pairs,
    // then pairs of pairs): a scalar model's chain of ops waits on four
    // dependent steps for q instead of Horner's six; the one rounding of
    // the last step, 1 + r q, is what the result mostly carries.
    let (r2, c) = (r * r, &EXP_TAYLOR);
    let r4 = r2 * r2;
    let q = (c[1] + r * c[2] + r2 * (c[3] + r * c[4])) + r4 * (c[5] + r * c[6] + r2 * c[7]);
    let p = c[0] + r * q;
    // n (in [-150, 128]) sits in t's low mantissa bits: an integer
    // subtraction vectorises, unlike `n as i32`.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let half = ni >> 1;
    let y = p * pow2(ni - half) * pow2(half);
    if x.is_nan() { x } else { y }
}

/// 2^k for k in [-126, 127], built in the exponent bits.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// The bits of sqrt(1/2) in f32: [`log`] splits its argument's mantissa here.
const SQRT_HALF_BITS: i32 = 0x3f35_04f3;
/// 2^25: scales a subnormal into the normal range, exactly.
const TWO_POW_25: f32 = 33_554_432.0;

/// ln x in f32, branch-free (a loop of it vectorises 16 lanes wide on
/// AVX-512), within 1 ulp of the exact value on every float (the tests
/// measure it against f64). x = 2^k (1 + f) with 1 + f in [sqrt(1/2),
/// sqrt(2)) (a subnormal x is first scaled by 2^25, exactly), and with
/// s = f / (2 + f), ln(1 + f) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + R),
/// R = 2 s^2/3 + 2 s^4/5 + ... + 2 s^10/11 (|s| <= 0.172: truncation
/// below 3e-10 relative). f is exact, so the division's rounding reaches
/// only the correction, under a quarter of the result. k ln2 is added in
/// two parts, the high one exact. ln 0 = -inf, ln of a negative = NaN,
/// ln inf = inf; NaN in, the same NaN out.
#[inline(always)]
pub fn log(x: f32) -> f32 {
    let tiny = x < f32::MIN_POSITIVE;
    let scaled = if tiny { x * TWO_POW_25 } else { x };
    let bits = scaled.to_bits() as i32;
    let k = bits.wrapping_sub(SQRT_HALF_BITS) >> 23;
    let m = f32::from_bits(bits.wrapping_sub(k << 23) as u32);
    let k = (k - if tiny { 25 } else { 0 }) as f32;
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let s2 = s * s;
    // R / s^2 in Estrin's form, as exp's series: fewer dependent steps.
    let c = [2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0, 2.0 / 9.0, 2.0 / 11.0f32];
    let s4 = s2 * s2;
    let r = s2 * ((c[0] + s2 * c[1]) + s4 * ((c[2] + s2 * c[3]) + s4 * c[4]));
    let hfsq = 0.5 * (f * f);
    let lo = s * (hfsq + r) + k * LN2_LO;
    let y = k * LN2_HI + (f - (hfsq - lo));
    let y = if x == f32::INFINITY { x } else { y };
    let y = if x == 0.0 { f32::NEG_INFINITY } else { y };
    let y = if x < 0.0 { f32::NAN } else { y };
    if x.is_nan() { x } else { y }
}

/// Below this e, ln(1 + e) rounds to e in f32 (e^2/2 < 2^-25 e), and
/// e / (2 + e) could lose bits as a subnormal.
const LN_1P_TINY: f32 = 1.0 / 16_777_216.0;
/// 2^-30: [`ln_1p_unit`]'s floor on s^2 for its series.
const Q_FLOOR: f32 = 1.0 / 1_073_741_824.0;

/// ln(1 + u) for u in [0, 1], branch-free: 2 atanh(s) with s = u / (2 +
/// u) in [0, 1/3], as 2s + 2s s^2 q(s^2), the series to s^17
/// (truncation below 2e-10 relative). 2s carries u's error plus 2 + u's and
/// the division's half ulps; the correction is below 4% of the result,
/// so its own rounding is small, and the last addition adds half an ulp:
/// 1.5 ulps beyond u's own.
#[inline(always)]
fn ln_1p_unit(u: f32) -> f32 {
    // The series runs on u no smaller than LN_1P_TINY (below it the
    // result is u itself), and q on s^2 no smaller than 2^-30, so that no
    // step makes a subnormal: each is a microcode assist on x86 cores, and
    // a mixture's rows far out in a tail (|x| > 10 puts s^8 under 2^-126)
    // made its gradient at the posterior 1.6x slower. Below 2^-30 every
    // term of q past the first is under a sixteenth of its half ulp: q is
    // 1/3 either way, the same bits.
    let v = u.max(LN_1P_TINY);
    let s = v / (2.0 + v);
    let s2 = s * s;
    const INV_ODD: [f32; 8] = [
        1.0 / 3.0,
        1.0 / 5.0,
        1.0 / 7.0,
        1.0 / 9.0,
        1.0 / 11.0,
        1.0 / 13.0,
        1.0 / 15.0,
        1.0 / 17.0,
    ];
    // q in Estrin's form (pairs, then pairs of pairs), as exp's series:
    // four dependent steps after s^2 where Horner's took fourteen, and
    // the GLM and softplus loops wait on this chain.
    let c = &INV_ODD;
    let t = s2.max(Q_FLOOR);
    let t4 = t * t;
    let t8 = t4 * t4;
    let low = (c[0] + t * c[1]) + t4 * (c[2] + t * c[3]);
    let high = (c[4] + t * c[5]) + t4 * (c[6] + t * c[7]);
    let q = low + t8 * high;
    let two_s = 2.0 * s;
    let y = two_s + two_s * (s2 * q);
    if u < LN_1P_TINY { u } else { y }
}

#[cfg(test)]
mod tests {
    use super::{LN_1P_TINY, ln_1p_unit};

    /// ln_1p_unit as it was before its floors: the series on u and s^2
    /// themselves (subnormal steps and all).
    fn unfloored(u: f32) -> f32 {
        let s = u / (2.0 + u);
        let s2 = s * s;
        let c = [
            1.0 / 3.0,
            0.2,
            1.0 / 7.0,
            1.0 / 9.0,
            1.0 / 11.0,
            1.0 / 13.0,
            1.0 / 15.0,
            1.0 / 17.0f32,
        ];
        let s4 = s2 * s2;
        let s8 = s4 * s4;
        let low = (c[0] + s2 * c[1]) + s4 * (c[2] + s2 * c[3]);
        let high = (c[4] + s2 * c[5]) + s4 * (c[6] + s2 * c[7]);
        let q = low + s8 * high;
        let two_s = 2.0 * s;
        let y = two_s + two_s * (s2 * q);
        if u < LN_1P_TINY { u } else { y }
    }

    #[test]
    fn ln_1p_unit_floors_change_no_bit() {
        // The floors act below u = 2^-14 (s^2 < 2^-30); above it they are
        // the identity. Every 61st float from the smallest subnormal to
        // 2^-12, and every 4099th on to 1.
        let (lo, mid) = (f32::from_bits(1), 2f32.powi(-12));
        let small = (lo.to_bits()..mid.to_bits()).step_by(61);
        let large = (mid.to_bits()..=1f32.to_bits()).step_by(4099);
        let mut n = 0;
        for bits in small.chain(large).chain([0, LN_1P_TINY.to_bits() - 1]) {
            let u = f32::from_bits(bits);
            let (a, b) = (ln_1p_unit(u), unfloored(u));
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "ln_1p_unit({u:e}) = {a:e}, unfloored {b:e}"
            );
            n += 1;
        }
        assert!(n > 1_000_000, "{n} points");
    }
}

//! Logs and exponentials near their cancellations: log1p, expm1, tanh,
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
    let y = x.max(0.0) + ln_1p_unit(exp_nonpositive(-x.abs()));
    // NaN in, NaN out (max and abs above would drop it).
    if x.is_nan() { x } else { y }
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
    let e = exp_nonpositive(-x.abs());
    let y = if x >= 0.0 { 1.0 } else { e } / (1.0 + e);
    if x.is_nan() { x } else { y }
}

/// ln 2 in two parts: n * LN2_HI is exact for |n| < 512 (LN2_HI's last 9
/// mantissa bits are zero), LN2_LO the rest.
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

/// e^x for x <= 0 in f32, branch-free, within about 1 ulp, subnormal
/// results included (rounded once). x = n ln2 + r with |r| <= ln2/2 (r
/// exact to far below an ulp: n ln2 in two parts), e^r by its Taylor
/// series to r^7 (truncation below 5e-9 relative, a tenth of an ulp), then
/// 2^n applied as two normal powers of two, 2^(n - n/2) and 2^(n/2), so
/// that only the last product rounds when the result is subnormal. Below
/// -104 (where e^x is under half the smallest subnormal) it gives 0's
/// neighbourhood: e^-104 rounds to 0. NaN gives a number: the callers
/// check for NaN.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(-104.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = EXP_TAYLOR[7];
    for &c in EXP_TAYLOR[..7].iter().rev() {
        p = p * r + c;
    }
    // n (in [-150, 0]) sits in t's low mantissa bits: an integer
    // subtraction vectorises, unlike `n as i32`.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let half = ni >> 1;
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    p * pow2(ni - half) * pow2(half)
}

/// Below this e, ln(1 + e) rounds to e in f32 (e^2/2 < 2^-25 e), and
/// e / (2 + e) could lose bits as a subnormal.
const LN_1P_TINY: f32 = 1.0 / 16_777_216.0;

/// ln(1 + u) for u in [0, 1], branch-free: 2 atanh(s) with s = u / (2 +
/// u) in [0, 1/3], as 2s + 2s s^2 q(s^2), the series to s^17
/// (truncation below 2e-10 relative). 2s carries u's error plus 2 + u's and
/// the division's half ulps; the correction is below 4% of the result,
/// so its own rounding is small, and the last addition adds half an ulp:
/// 1.5 ulps beyond u's own.
#[inline(always)]
fn ln_1p_unit(u: f32) -> f32 {
    let s = u / (2.0 + u);
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
    let mut q = INV_ODD[7];
    for &c in INV_ODD[..7].iter().rev() {
        q = q * s2 + c;
    }
    let two_s = 2.0 * s;
    let y = two_s + two_s * (s2 * q);
    if u < LN_1P_TINY { u } else { y }
}

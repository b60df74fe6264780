//! Special functions for log densities: float32 in, float32 out.
//!
//! Each kernel widens its argument to f64, evaluates an f64 algorithm whose
//! relative error is a few f64 ulps (about 1e-15), and rounds once to f32,
//! so the result is within one f32 ulp of the float64 value rounded to
//! float32 (the tests measure and assert at most 4). The algorithms are
//! series, asymptotic expansions, recurrences and a continued fraction;
//! their constants were derived with 50-digit arithmetic (zeta values, the
//! Taylor coefficients of digamma at its positive zero). Only `f64::ln` and
//! `f64::exp` are used as primitives.
//!
//! Domains: `lgamma`, `digamma`, `trigamma` on x > 0 (NaN for x < 0, the
//! pole's limit at 0); the others on every float (NaN propagates).
//! Each function `f` has its derivative beside it as `f_grad` (the
//! derivative of `digamma` is `trigamma`, of `lgamma` is `digamma`).
//!
//! This module is a leaf: it imports nothing of the crate, so ops can call
//! it from any kernel.

const EULER: f64 = 0.5772156649015329;
const HALF_LN_2PI: f64 = 0.9189385332046728;
const HALF_LN_PI: f64 = 0.5723649429247001;
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
const FRAC_1_SQRT_2PI: f64 = 0.3989422804014327;
const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// The positive zero of digamma, x0 = X0_HI + X0_LO.
const X0_HI: f64 = 1.4616321449683622;
const X0_LO: f64 = 9.549995429965697e-17;

/// zeta(k) / k for k = 2..=61: lgamma(1 + t) = -gamma t + sum (-t)^k zeta(k) / k.
const Z1: [f64; 60] = [
    0.8224670334241132,
    0.40068563438653143,
    0.27058080842778454,
    0.20738555102867398,
    0.1695571769974082,
    0.1440498967688461,
    0.12550966952474304,
    0.11133426586956469,
    0.1000994575127818,
    0.09095401714582904,
    0.083353840546109,
    0.0769325164113522,
    0.07143294629536133,
    0.06666870588242046,
    0.06250095514121304,
    0.058823978658684585,
    0.055555767627403614,
    0.05263167937961666,
    0.05000004769810169,
    0.047619070330142226,
    0.04545455629320467,
    0.04347826605304026,
    0.04166666915034121,
    0.04000000119214014,
    0.03846153903467518,
    0.037037037312989324,
    0.035714285847333355,
    0.034482758684919304,
    0.03333333336437758,
    0.03225806453115042,
    0.03125000000727597,
    0.030303030306558044,
    0.029411764707594344,
    0.02857142857226011,
    0.027777777778181998,
    0.027027027027223673,
    0.02631578947377995,
    0.025641025641072283,
    0.025000000000022737,
    0.024390243902450117,
    0.023809523809529224,
    0.023255813953491015,
    0.02272727272727402,
    0.022222222222222855,
    0.021739130434782917,
    0.021276595744681003,
    0.02083333333333341,
    0.02040816326530616,
    0.020000000000000018,
    0.019607843137254912,
    0.019230769230769235,
    0.01886792452830189,
    0.01851851851851852,
    0.01818181818181818,
    0.017857142857142856,
    0.017543859649122806,
    0.017241379310344827,
    0.01694915254237288,
    0.016666666666666666,
    0.01639344262295082,
];
/// (zeta(k) - 1) / k for k = 2..=41: lgamma(2 + t) = (1 - gamma) t + sum (-t)^k (zeta(k) - 1) / k.
const Z2: [f64; 40] = [
    0.3224670334241132,
    0.0673523010531981,
    0.020580808427784546,
    0.007385551028673986,
    0.0028905103307415234,
    0.001192753911703261,
    0.0005096695247430425,
    0.00022315475845357939,
    9.945751278180853e-05,
    4.492623673813314e-05,
    2.050721277567069e-05,
    9.439488275268397e-06,
    4.374866789907488e-06,
    2.039215753801366e-06,
    9.55141213040742e-07,
    4.492469198764566e-07,
    2.1207184805554665e-07,
    1.0043224823968099e-07,
    4.7698101693639804e-08,
    2.2711094608943164e-08,
    1.0838659214896955e-08,
    5.183475041970047e-09,
    2.4836745438024785e-09,
    1.1921401405860912e-09,
    5.731367241678862e-10,
    2.7595228851242334e-10,
    1.330476437424449e-10,
    6.4229645638381e-11,
    3.1044247747322276e-11,
    1.5021384080754142e-11,
    7.275974480239079e-12,
    3.527742476575915e-12,
    1.711991790559618e-12,
    8.315385841420285e-13,
    4.04220052528944e-13,
    1.9664756310966165e-13,
    9.573630387838556e-14,
    4.6640760264283744e-14,
    2.2737369600659724e-14,
    1.1091399470834522e-14,
];
/// psi^(n)(x0) / n! for n = 1..=30, x0 the positive zero of digamma.
const PSI_X0: [f64; 30] = [
    0.9676722454476212,
    -0.4427631689835921,
    0.258499760955651,
    -0.16394270544240652,
    0.10782405069126237,
    -0.07219956125645471,
    0.04880428816414311,
    -0.03316112647484736,
    0.022597648232218104,
    -0.01542476590494896,
    0.010538791616612175,
    -0.007204534386356869,
    0.004926781395729853,
    -0.003369801655439328,
    0.002305126326734928,
    -0.0015769367714301972,
    0.0010788252019162967,
    -0.0007380709389960052,
    0.000504953265834602,
    -0.0003454680251063077,
    0.00023635601564027053,
    -0.00016170622091974803,
    0.0001106337276874741,
    -7.569179582195066e-05,
    5.178575795222081e-05,
    -3.5430070947659604e-05,
    2.424006611860132e-05,
    -1.6584242271854135e-05,
    1.134638458466385e-05,
    -7.762817668462094e-06,
];

// ---- f64 building blocks ---------------------------------------------------

/// log(1 + z) in f64 for any z >= -1: u = 1 + z rounds, and the factor
/// z / (u - 1) cancels that rounding to first order (Goldberg's method).
fn log1p_f64(z: f64) -> f64 {
    let u = 1.0 + z;
    if u == 1.0 {
        z
    } else if u.is_infinite() {
        u
    } else {
        u.ln() * (z / (u - 1.0))
    }
}

/// The logistic function 1 / (1 + e^-x) in f64 without overflow.
fn sigmoid_f64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Horner sum c[0] t + c[1] t^2 + ... (every coefficient times a power of t).
fn power_series(c: &[f64], t: f64) -> f64 {
    let mut s = 0.0;
    for &ck in c.iter().rev() {
        s = s * t + ck;
    }
    s * t
}

/// erf(x) for |x| < 3 from the series with positive terms
/// erf(x) = 2/sqrt(pi) e^{-x^2} sum_n 2^n x^{2n+1} / (1 3 5 ... (2n+1)),
/// which has no cancellation (the alternating Taylor series loses digits).
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while term.abs() > sum.abs() * 1e-17 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
    }
    FRAC_2_SQRT_PI * (-x2).exp() * sum
}

/// The continued fraction f(z) = z + (1/2)/(z + 1/(z + (3/2)/(z + ...))) with
/// erfc(z) = e^{-z^2} / (sqrt(pi) f(z)), for z >= 2, by the modified Lentz
/// method (it converges in under 100 steps at z = 2, in a few for large z).
fn erfc_cf(z: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut f = z;
    let mut c = z;
    let mut d = 0.0;
    for j in 1..500 {
        let a = j as f64 * 0.5;
        d = z + a * d;
        if d == 0.0 {
            d = TINY;
        }
        d = 1.0 / d;
        c = z + a / c;
        if c == 0.0 {
            c = TINY;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    f
}

/// erfc(z) in f64 for finite z.
fn erfc_f64(z: f64) -> f64 {
    if z < 0.0 {
        2.0 - erfc_f64(-z)
    } else if z < 2.0 {
        1.0 - erf_series(z)
    } else {
        // e^{-z^2} underflows to 0 past z = 27, as erfc does.
        (-(z * z)).exp() / (std::f64::consts::PI.sqrt() * erfc_cf(z))
    }
}

/// The standard normal CDF in f64.
fn phi_cdf_f64(x: f64) -> f64 {
    0.5 * erfc_f64(-x / SQRT_2)
}

/// The standard normal density in f64.
fn phi_pdf_f64(x: f64) -> f64 {
    FRAC_1_SQRT_2PI * (-0.5 * x * x).exp()
}

/// lgamma(x) in f64 for x > 0.
fn lgamma_f64(x: f64) -> f64 {
    if x < 0.5 {
        // lgamma(x) = lgamma(1 + x) - ln x, the series at 1 with t = x.
        -EULER * x + power_series(&Z1, -x) * -x - x.ln()
    } else if x < 1.5 {
        // Around the zero at 1: t = x - 1 is exact for an f32 x.
        let t = x - 1.0;
        -EULER * t + power_series(&Z1, -t) * -t
    } else if x < 2.5 {
        // Around the zero at 2.
        let t = x - 2.0;
        (1.0 - EULER) * t + power_series(&Z2, -t) * -t
    } else if x < 10.0 {
        // Down to [1.5, 2.5) by lgamma(y + 1) = lgamma(y) + ln y: the
        // product of positive terms adds no cancellation.
        let mut y = x;
        let mut prod = 1.0;
        while y >= 2.5 {
            y -= 1.0;
            prod *= y;
        }
        lgamma_f64(y) + prod.ln()
    } else {
        // Stirling's series; its eighth term is below 1e-17 at x = 10.
        let r = 1.0 / x;
        let r2 = r * r;
        let tail = r
            * (1.0 / 12.0
                + r2 * (-1.0 / 360.0
                    + r2 * (1.0 / 1260.0
                        + r2 * (-1.0 / 1680.0
                            + r2 * (1.0 / 1188.0
                                + r2 * (-691.0 / 360360.0
                                    + r2 * (1.0 / 156.0 + r2 * (-3617.0 / 122400.0))))))));
        (x - 0.5) * x.ln() - x + HALF_LN_2PI + tail
    }
}

/// digamma(x) in f64 for x > 0.
fn digamma_f64(x: f64) -> f64 {
    let d = (x - X0_HI) - X0_LO;
    if d.abs() < 0.25 {
        // Taylor series at the zero x0: the relative error stays small as
        // psi(x) -> 0, which the recurrence below cannot give.
        return power_series(&PSI_X0, d);
    }
    let mut acc = 0.0;
    let mut y = x;
    while y < 10.0 {
        acc -= 1.0 / y;
        y += 1.0;
    }
    let r2 = 1.0 / (y * y);
    let tail = r2
        * (1.0 / 12.0
            + r2 * (-1.0 / 120.0
                + r2 * (1.0 / 252.0
                    + r2 * (-1.0 / 240.0
                        + r2 * (1.0 / 132.0 + r2 * (-691.0 / 32760.0 + r2 * (1.0 / 12.0)))))));
    acc + y.ln() - 0.5 / y - tail
}

/// trigamma(x) in f64 for x > 0 (every term positive: no cancellation).
fn trigamma_f64(x: f64) -> f64 {
    let mut acc = 0.0;
    let mut y = x;
    while y < 10.0 {
        acc += 1.0 / (y * y);
        y += 1.0;
    }
    let r = 1.0 / y;
    let r2 = r * r;
    let tail = r2
        * r
        * (1.0 / 6.0
            + r2 * (-1.0 / 30.0
                + r2 * (1.0 / 42.0
                    + r2 * (-1.0 / 30.0
                        + r2 * (5.0 / 66.0 + r2 * (-691.0 / 2730.0 + r2 * (7.0 / 6.0)))))));
    acc + r + 0.5 * r2 + tail
}

// ---- float32 kernels and their derivatives --------------------------------

/// ln Gamma(x) for x > 0; +inf at 0 and past x = 4e36, NaN below 0.
pub fn lgamma(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 || x.is_infinite() {
        return f32::INFINITY;
    }
    lgamma_f64(x as f64) as f32
}

/// d/dx lgamma = digamma.
pub fn lgamma_grad(x: f32) -> f32 {
    digamma(x)
}

/// digamma(x) = d/dx ln Gamma(x) for x > 0; -inf at 0, NaN below 0.
pub fn digamma(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    digamma_f64(x as f64) as f32
}

/// d/dx digamma = trigamma.
pub fn digamma_grad(x: f32) -> f32 {
    trigamma(x)
}

/// trigamma(x) for x > 0; +inf at 0, NaN below 0.
pub fn trigamma(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::INFINITY;
    }
    if x.is_infinite() {
        return 0.0;
    }
    trigamma_f64(x as f64) as f32
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
    let x = x as f64;
    if x.abs() < 0.5 {
        expm1_small(x) as f32
    } else {
        (x.exp() - 1.0) as f32
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

/// softplus(x) = ln(1 + e^x) (Stan's log1p_exp), without overflow.
pub fn softplus(x: f32) -> f32 {
    let x = x as f64;
    let y = if x > 0.0 {
        x + log1p_f64((-x).exp())
    } else {
        log1p_f64(x.exp())
    };
    y as f32
}

/// d/dx softplus = sigmoid(x).
pub fn softplus_grad(x: f32) -> f32 {
    sigmoid_f64(x as f64) as f32
}

/// ln sigmoid(x) = -softplus(-x).
pub fn log_sigmoid(x: f32) -> f32 {
    -softplus(-x)
}

/// d/dx log_sigmoid = sigmoid(-x).
pub fn log_sigmoid_grad(x: f32) -> f32 {
    sigmoid_f64(-(x as f64)) as f32
}

/// The error function.
pub fn erf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x as f64;
    let a = x.abs();
    let y = if a < 3.0 {
        erf_series(a)
    } else if a < 6.0 {
        1.0 - erfc_f64(a)
    } else {
        1.0 // erfc(6) = 2e-17: erf rounds to 1 in f32 from 3.9 on.
    };
    (y.copysign(x)) as f32
}

/// d/dx erf = 2/sqrt(pi) e^{-x^2}.
pub fn erf_grad(x: f32) -> f32 {
    let x = x as f64;
    (FRAC_2_SQRT_PI * (-(x * x)).exp()) as f32
}

/// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2.
pub fn normal_cdf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    phi_cdf_f64(x as f64) as f32
}

/// d/dx Phi = the standard normal density.
pub fn normal_cdf_grad(x: f32) -> f32 {
    phi_pdf_f64(x as f64) as f32
}

/// ln Phi(x), finite down to x = -2.6e19 (where -x^2/2 leaves f32).
pub fn normal_lcdf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x as f64;
    let z = -x / SQRT_2;
    let y = if x >= 0.0 {
        log1p_f64(-phi_cdf_f64(-x))
    } else if z < 2.0 {
        phi_cdf_f64(x).ln()
    } else {
        // ln(erfc(z) / 2) = -z^2 - ln sqrt(pi) - ln f(z) - ln 2, with
        // z^2 = x^2 / 2 exact: no underflow however far the tail.
        -0.5 * x * x - HALF_LN_PI - erfc_cf(z).ln() - std::f64::consts::LN_2
    };
    y as f32
}

/// d/dx ln Phi = phi(x) / Phi(x) (the inverse Mills ratio at -x).
pub fn normal_lcdf_grad(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x as f64;
    let z = -x / SQRT_2;
    let y = if z < 2.0 {
        phi_pdf_f64(x) / phi_cdf_f64(x)
    } else {
        // phi / Phi = sqrt(2) f(z) with f the continued fraction of erfc.
        SQRT_2 * erfc_cf(z)
    };
    y as f32
}

/// ln sum_i e^{x_i}, accumulated in f64 after subtracting the maximum.
/// -inf entries add nothing; all -inf (or empty) gives -inf, a +inf entry
/// gives +inf, a NaN entry gives NaN.
#[cfg(test)] // the slice forms; ops call the strided ones
pub fn logsumexp(xs: &[f32]) -> f32 {
    logsumexp_strided(xs, 0, xs.len(), 1)
}

/// The gradient of logsumexp: the softmax weights e^{x_i - lse}, written to
/// `out` (same length as `xs`). When the maximum is infinite (all -inf, or
/// a +inf entry) the weight is shared equally by the entries equal to it,
/// the limit of the softmax of equal values.
#[cfg(test)] // the slice forms; ops call the strided ones
pub fn logsumexp_grad(xs: &[f32], out: &mut [f32]) {
    assert_eq!(xs.len(), out.len(), "logsumexp_grad: lengths differ");
    out.fill(0.0);
    logsumexp_grad_add_strided(out, xs, 0, xs.len(), 1, 1.0);
}

/// [`logsumexp`] of the `n` entries `xs[start + j * stride]` (one line of an
/// axis of a row-major array).
pub fn logsumexp_strided(xs: &[f32], start: usize, n: usize, stride: usize) -> f32 {
    let at = |j: usize| xs[start + j * stride] as f64;
    let (m, _) = max_and_count(n, at);
    if m.is_nan() || m.is_infinite() {
        return m as f32;
    }
    let s: f64 = (0..n).map(|j| (at(j) - m).exp()).sum();
    (m + s.ln()) as f32
}

/// dx[p] += g * w_p over the same entries as [`logsumexp_strided`], with
/// w the weights of [`logsumexp_grad`].
pub fn logsumexp_grad_add_strided(
    dx: &mut [f32],
    xs: &[f32],
    start: usize,
    n: usize,
    stride: usize,
    g: f32,
) {
    let at = |j: usize| xs[start + j * stride] as f64;
    let (m, count) = max_and_count(n, at);
    let g = g as f64;
    let p = |j: usize| start + j * stride;
    if m.is_nan() {
        (0..n).for_each(|j| dx[p(j)] = f32::NAN);
        return;
    }
    if m.is_infinite() {
        let w = 1.0 / count as f64;
        for j in (0..n).filter(|&j| at(j) == m) {
            dx[p(j)] += (g * w) as f32;
        }
        return;
    }
    let s: f64 = (0..n).map(|j| (at(j) - m).exp()).sum();
    for j in 0..n {
        dx[p(j)] += (g * ((at(j) - m).exp() / s)) as f32;
    }
}

/// The maximum of the `n` values `at(j)` (NaN if any is NaN, -inf if
/// n = 0) and how many equal it.
fn max_and_count(n: usize, at: impl Fn(usize) -> f64) -> (f64, usize) {
    let mut m = f64::NEG_INFINITY;
    let mut count = 0;
    for j in 0..n {
        let x = at(j);
        if x.is_nan() {
            return (f64::NAN, 0);
        }
        if x > m {
            m = x;
            count = 1;
        } else if x == m {
            count += 1;
        }
    }
    (m, count.max(1))
}

#[cfg(test)]
mod tests;

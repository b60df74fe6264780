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
mod tests {
    //! Each kernel against a float64 reference rounded to float32: libm's
    //! (the `libm` crate) where it has the function, otherwise an f64
    //! algorithm independent of the kernel's (digamma near its zero by
    //! Gauss-Legendre quadrature of trigamma, shifts to x >= 40 elsewhere).
    //! The bound is 4 ulps, the target; the measured worst error of
    //! every function and derivative is printed (`--nocapture`).
    use super::*;

    /// Signed position of `f` on the line of floats, with -0 = +0.
    fn key(f: f32) -> i64 {
        let b = f.to_bits();
        if b >> 31 == 1 {
            -((b & 0x7fff_ffff) as i64)
        } else {
            b as i64
        }
    }

    /// Ulps between two floats; NaN equals NaN, inf equals inf, and a NaN
    /// against a number is the largest distance.
    fn ulps(a: f32, b: f32) -> u64 {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => 0,
            (false, false) => key(a).abs_diff(key(b)),
            _ => u64::MAX,
        }
    }

    /// splitmix64: fixed points on every machine.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn uniform(&mut self, lo: f64, hi: f64) -> f32 {
            let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
            (lo + (hi - lo) * u) as f32
        }
        /// A finite float with uniformly random bits: every binade equally.
        fn any_finite(&mut self, positive: bool) -> f32 {
            loop {
                let mut b = self.next() as u32;
                if positive {
                    b &= 0x7fff_ffff;
                }
                let f = f32::from_bits(b);
                if f.is_finite() && !(positive && f == 0.0) {
                    return f;
                }
            }
        }
    }

    /// The n floats on each side of `c` (and `c`).
    fn around(c: f32, n: u32) -> Vec<f32> {
        let b = c.to_bits();
        (b - n..=b + n).map(f32::from_bits).collect()
    }

    // ---- float64 references ----------------------------------------------

    const X0: f64 = 1.461_632_144_968_362;

    fn ref_trigamma(x: f64) -> f64 {
        let (mut acc, mut y) = (0.0, x);
        while y < 40.0 {
            acc += 1.0 / (y * y);
            y += 1.0;
        }
        let r = 1.0 / y;
        let r2 = r * r;
        acc + r + r2 / 2.0 + r2 * r * (1.0 / 6.0 - r2 / 30.0 + r2 * r2 / 42.0 - r2 * r2 * r2 / 30.0)
    }

    /// Nodes and weights of n-point Gauss-Legendre on [-1, 1] (Newton on P_n).
    fn gauss_legendre(n: usize) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        for i in 0..n.div_ceil(2) {
            let mut z = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
            let mut pp;
            loop {
                let (mut p1, mut p2) = (1.0, 0.0);
                for j in 1..=n {
                    let p3 = p2;
                    p2 = p1;
                    p1 = ((2.0 * j as f64 - 1.0) * z * p2 - (j as f64 - 1.0) * p3) / j as f64;
                }
                pp = n as f64 * (z * p1 - p2) / (z * z - 1.0);
                let z1 = z;
                z = z1 - p1 / pp;
                if (z - z1).abs() < 1e-15 {
                    break;
                }
            }
            let w = 2.0 / ((1.0 - z * z) * pp * pp);
            out.push((z, w));
            if 2 * i + 1 != n {
                out.push((-z, w));
            }
        }
        out
    }

    fn ref_digamma(x: f64, gl: &[(f64, f64)]) -> f64 {
        if (x - X0).abs() < 0.5 {
            // psi(x) = psi(1) + the integral of trigamma from 1 to x, psi(1) =
            // -Euler's constant: independent of the kernel's x0 and series.
            let (mid, half) = ((x + 1.0) / 2.0, (x - 1.0) / 2.0);
            let integral: f64 = gl
                .iter()
                .map(|&(t, w)| w * ref_trigamma(mid + half * t))
                .sum();
            return half * integral - 0.577_215_664_901_532_9;
        }
        let (mut acc, mut y) = (0.0, x);
        while y < 40.0 {
            acc -= 1.0 / y;
            y += 1.0;
        }
        let r2 = 1.0 / (y * y);
        acc + y.ln()
            - 0.5 / y
            - r2 * (1.0 / 12.0 - r2 / 120.0 + r2 * r2 / 252.0 - r2 * r2 * r2 / 240.0)
    }

    fn ref_softplus(x: f64) -> f64 {
        if x > 0.0 {
            x + libm::log1p(libm::exp(-x))
        } else {
            libm::log1p(libm::exp(x))
        }
    }

    fn ref_phi(x: f64) -> f64 {
        0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
    }

    fn ref_pdf(x: f64) -> f64 {
        libm::exp(-0.5 * x * x) / (2.0 * std::f64::consts::PI).sqrt()
    }

    /// Phi(x) = pdf(x) / -x * s(x) for x -> -inf (the Mills ratio series).
    fn mills_series(x: f64) -> f64 {
        let u = 1.0 / (x * x);
        1.0 - u * (1.0 - 3.0 * u * (1.0 - 5.0 * u * (1.0 - 7.0 * u * (1.0 - 9.0 * u))))
    }

    fn ref_log_phi(x: f64) -> f64 {
        if x < -30.0 {
            -0.5 * x * x - (-x).ln() - HALF_LN_2PI + mills_series(x).ln()
        } else if x < 0.0 {
            ref_phi(x).ln()
        } else {
            libm::log1p(-ref_phi(-x))
        }
    }

    fn ref_log_phi_grad(x: f64) -> f64 {
        if x < -30.0 {
            -x / mills_series(x)
        } else {
            ref_pdf(x) / ref_phi(x)
        }
    }

    // ---- the cases ----------------------------------------------------------

    type Kernel = fn(f32) -> f32;
    type Reference = Box<dyn Fn(f64) -> f64 + Sync>;

    struct Case {
        name: &'static str,
        f: Kernel,
        reference: Reference,
        /// Domain x > 0 (else every finite float).
        positive: bool,
        /// Uniform points are drawn from here besides the random-bit ones.
        lo: f64,
        hi: f64,
        tails: Vec<f32>,
    }

    fn cases() -> Vec<Case> {
        let gl = gauss_legendre(24);
        let gl2 = gl.clone();
        let mut big = Rng(7);
        let mut wide = |lo: f64, hi: f64, n: usize| -> Vec<f32> {
            (0..n).map(|_| big.uniform(lo, hi)).collect::<Vec<_>>()
        };
        let gamma_tails: Vec<f32> = [around(1.0, 20_000), around(2.0, 20_000)]
            .concat()
            .into_iter()
            .chain(wide(1e3, 1e7, 20_000))
            .chain(wide(1e30, 3e38, 2_000))
            .chain(around(1e-30, 2_000))
            .collect();
        let psi_tails: Vec<f32> = [around(1.461_632_1, 20_000), gamma_tails.clone()].concat();
        let abs20: Vec<f32> = [wide(20.0, 1e4, 20_000), wide(-1e4, -20.0, 20_000)].concat();
        let near0 = [around(0.0f32.next_up(), 1), wide(-1e-6, 1e-6, 20_000)].concat();
        let erf_tails = [wide(-10.0, 10.0, 20_000), near0.clone()].concat();
        let phi_tails = [
            wide(-40.0, -5.0, 20_000),
            wide(5.0, 40.0, 20_000),
            near0.clone(),
        ]
        .concat();
        let c = |name: &'static str, f: Kernel, r: Reference, positive, lo, hi, tails| Case {
            name,
            f,
            reference: r,
            positive,
            lo,
            hi,
            tails,
        };
        vec![
            c(
                "lgamma",
                lgamma,
                Box::new(libm::lgamma),
                true,
                0.0,
                30.0,
                gamma_tails.clone(),
            ),
            c(
                "lgamma'",
                lgamma_grad,
                Box::new(move |x| ref_digamma(x, &gl)),
                true,
                0.0,
                30.0,
                psi_tails.clone(),
            ),
            c(
                "digamma",
                digamma,
                Box::new(move |x| ref_digamma(x, &gl2)),
                true,
                0.0,
                30.0,
                psi_tails.clone(),
            ),
            c(
                "digamma'",
                digamma_grad,
                Box::new(ref_trigamma),
                true,
                0.0,
                30.0,
                psi_tails,
            ),
            c(
                "log1p",
                log1p,
                Box::new(libm::log1p),
                false,
                -1.0,
                30.0,
                [
                    around(-1.0f32.next_up(), 0),
                    wide(-1.0, -0.99, 20_000),
                    near0.clone(),
                ]
                .concat(),
            ),
            c(
                "log1p'",
                log1p_grad,
                Box::new(|x| 1.0 / (1.0 + x)),
                false,
                -1.0,
                30.0,
                near0.clone(),
            ),
            c(
                "expm1",
                expm1,
                Box::new(libm::expm1),
                false,
                -30.0,
                30.0,
                [
                    near0.clone(),
                    wide(-0.6, 0.6, 20_000),
                    wide(80.0, 89.0, 2_000),
                ]
                .concat(),
            ),
            c(
                "expm1'",
                expm1_grad,
                Box::new(libm::exp),
                false,
                -30.0,
                30.0,
                near0.clone(),
            ),
            c(
                "softplus",
                softplus,
                Box::new(ref_softplus),
                false,
                -30.0,
                30.0,
                abs20.clone(),
            ),
            c(
                "softplus'",
                softplus_grad,
                Box::new(|x| 1.0 / (1.0 + libm::exp(-x))),
                false,
                -30.0,
                30.0,
                abs20.clone(),
            ),
            c(
                "log_sigmoid",
                log_sigmoid,
                Box::new(|x| -ref_softplus(-x)),
                false,
                -30.0,
                30.0,
                abs20.clone(),
            ),
            c(
                "log_sigmoid'",
                log_sigmoid_grad,
                Box::new(|x| 1.0 / (1.0 + libm::exp(x))),
                false,
                -30.0,
                30.0,
                abs20,
            ),
            c(
                "erf",
                erf,
                Box::new(libm::erf),
                false,
                -5.0,
                5.0,
                erf_tails.clone(),
            ),
            c(
                "erf'",
                erf_grad,
                Box::new(|x| FRAC_2_SQRT_PI * libm::exp(-x * x)),
                false,
                -5.0,
                5.0,
                erf_tails,
            ),
            c(
                "Phi",
                normal_cdf,
                Box::new(ref_phi),
                false,
                -15.0,
                10.0,
                phi_tails.clone(),
            ),
            c(
                "Phi'",
                normal_cdf_grad,
                Box::new(ref_pdf),
                false,
                -15.0,
                10.0,
                phi_tails.clone(),
            ),
            c(
                "log Phi",
                normal_lcdf,
                Box::new(ref_log_phi),
                false,
                -40.0,
                10.0,
                phi_tails.clone(),
            ),
            c(
                "log Phi'",
                normal_lcdf_grad,
                Box::new(ref_log_phi_grad),
                false,
                -40.0,
                10.0,
                phi_tails,
            ),
        ]
    }

    /// Worst ulp error of `case` over `xs`, and where.
    fn worst(case: &Case, xs: impl Iterator<Item = f32>) -> (u64, f32, usize) {
        let (mut w, mut at, mut n) = (0, f32::NAN, 0);
        for x in xs {
            let got = (case.f)(x);
            let want = (case.reference)(x as f64) as f32;
            let e = ulps(got, want);
            if e > w || at.is_nan() {
                (w, at) = (e, x);
            }
            n += 1;
        }
        (w, at, n)
    }

    #[test]
    fn special_functions_within_4_ulps_at_fixed_points_and_tails() {
        let mut failures = Vec::new();
        for case in cases() {
            let mut rng = Rng(0x5eed ^ case.name.len() as u64);
            let mut xs: Vec<f32> = (0..500_000)
                .map(|_| rng.any_finite(case.positive))
                .collect();
            xs.extend((0..500_000).map(|_| rng.uniform(case.lo, case.hi)));
            if case.positive {
                xs.retain(|&x| x > 0.0);
            }
            let (w, at, n) = worst(&case, xs.iter().copied());
            let (wt, att, nt) = worst(&case, case.tails.iter().copied());
            println!(
                "{:<13} {:>8} points: worst {w} ulps at {at:e}; {:>6} tail points: worst {wt} at {att:e}",
                case.name, n, nt
            );
            if w > 4 || wt > 4 {
                failures.push(case.name);
            }
        }
        assert!(failures.is_empty(), "over 4 ulps: {failures:?}");
    }

    #[test]
    fn special_functions_at_known_values() {
        // Exact zeros and values that pin down the branches.
        assert_eq!(lgamma(1.0), 0.0);
        assert_eq!(lgamma(2.0), 0.0);
        assert_eq!(lgamma(0.0), f32::INFINITY);
        assert!(lgamma(-1.0).is_nan() && digamma(-0.5).is_nan());
        assert_eq!(lgamma(f32::MAX), f32::INFINITY);
        assert_eq!(digamma(1.0), -EULER as f32);
        assert_eq!(trigamma(1.0), (std::f64::consts::PI.powi(2) / 6.0) as f32);
        assert_eq!(log1p(-1.0), f32::NEG_INFINITY);
        assert_eq!(log1p(1e-30), 1e-30);
        assert_eq!(expm1(1e-30), 1e-30);
        assert_eq!(softplus(100.0), 100.0);
        assert_eq!(softplus(-100.0), (-100.0f64).exp() as f32);
        assert_eq!(log_sigmoid(-100.0), -100.0);
        assert_eq!(log_sigmoid_grad(-100.0), 1.0);
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::MAX), 1.0);
        assert_eq!(erf(-f32::MAX), -1.0);
        assert_eq!(normal_cdf(0.0), 0.5);
        assert_eq!(normal_lcdf(-1e20), f32::NEG_INFINITY);
        assert!(normal_lcdf(-1e19).is_finite());
        assert_eq!(normal_lcdf_grad(-1e19), 1e19);
        for f in [
            lgamma,
            digamma,
            log1p,
            expm1,
            softplus,
            log_sigmoid,
            erf,
            normal_cdf,
            normal_lcdf,
        ] {
            assert!(f(f32::NAN).is_nan());
        }
    }

    #[test]
    fn logsumexp_handles_infinities_and_matches_f64() {
        let ninf = f32::NEG_INFINITY;
        assert_eq!(logsumexp(&[]), ninf);
        assert_eq!(logsumexp(&[ninf, ninf]), ninf);
        assert_eq!(logsumexp(&[ninf, 0.0]), 0.0);
        assert_eq!(logsumexp(&[ninf, 3.5, ninf]), 3.5);
        assert_eq!(logsumexp(&[1.0, f32::INFINITY]), f32::INFINITY);
        assert!(logsumexp(&[1.0, f32::NAN, ninf]).is_nan());
        assert_eq!(logsumexp(&[1e30, 1e30]), 1e30);
        assert_eq!(logsumexp(&[-1e30, -1e30]), -1e30);
        assert_eq!(
            logsumexp(&[2.0, 2.0]),
            (2.0 + std::f64::consts::LN_2) as f32
        );
        let mut g = [0.0f32; 3];
        logsumexp_grad(&[ninf, 1.0, 1.0], &mut g);
        assert_eq!(g, [0.0, 0.5, 0.5]);
        logsumexp_grad(&[ninf, ninf], &mut g[..2]);
        assert_eq!(&g[..2], &[0.5, 0.5]);
        // Random vectors against the direct f64 sum (no overflow in range),
        // with some -inf entries; the gradient against e^{x - lse} in f64.
        let mut rng = Rng(11);
        let (mut worst, mut worst_g) = (0, 0);
        for trial in 0..20_000 {
            let n = 1 + trial % 40;
            let xs: Vec<f32> = (0..n)
                .map(|_| {
                    if rng.next().is_multiple_of(7) {
                        ninf
                    } else {
                        rng.uniform(-300.0, 300.0)
                    }
                })
                .collect();
            let want: f64 = xs.iter().map(|&x| libm::exp(x as f64)).sum::<f64>().ln();
            worst = worst.max(ulps(logsumexp(&xs), want as f32));
            if want == f64::NEG_INFINITY {
                continue; // all -inf: the exact cases above pin the weights
            }
            let mut g = vec![0.0; n];
            logsumexp_grad(&xs, &mut g);
            for (&x, &gi) in xs.iter().zip(&g) {
                worst_g = worst_g.max(ulps(gi, libm::exp(x as f64 - want) as f32));
            }
        }
        println!("logsumexp: worst {worst} ulps, gradient worst {worst_g} ulps");
        assert!(worst <= 4 && worst_g <= 4, "{worst} {worst_g}");
    }

    /// Every float of each domain (stride AG_SWEEP_STRIDE, default 1): hours
    /// of CPU, run by `make special-sweep`, never by `make test`.
    #[test]
    #[ignore]
    fn special_sweep_every_float() {
        let stride: u32 = std::env::var("AG_SWEEP_STRIDE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let mut failures = Vec::new();
        for case in cases() {
            let pos = (1u32..0x7f80_0000)
                .step_by(stride as usize)
                .map(f32::from_bits);
            let neg = (0x8000_0000u32..0xff80_0000)
                .step_by(stride as usize)
                .map(f32::from_bits);
            let (w, at, n) = if case.positive {
                worst(&case, pos)
            } else {
                let (a, b) = (worst(&case, pos), worst(&case, neg));
                if a.0 >= b.0 {
                    (a.0, a.1, a.2 + b.2)
                } else {
                    (b.0, b.1, a.2 + b.2)
                }
            };
            println!(
                "{:<13} every {stride}th float, {n} points: worst {w} ulps at {at:e}",
                case.name
            );
            if w > 4 {
                failures.push(case.name);
            }
        }
        assert!(failures.is_empty(), "over 4 ulps: {failures:?}");
    }
}

//! The gamma family: lgamma, digamma and trigamma on x > 0, each the
//! derivative of the one before. Its own room for the series tables at
//! 1, 2 and digamma's positive zero that only this family reads.

pub(super) const EULER: f64 = 0.5772156649015329;
pub(super) const HALF_LN_2PI: f64 = 0.9189385332046728;

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

/// Horner sum c[0] t + c[1] t^2 + ... (every coefficient times a power of t).
fn power_series(c: &[f64], t: f64) -> f64 {
    let mut s = 0.0;
    for &ck in c.iter().rev() {
        s = s * t + ck;
    }
    s * t
}

/// lgamma(x) in f64 for x > 0.
pub(crate) fn lgamma_f64(x: f64) -> f64 {
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
        (x - 0.5) * x.ln() - x + HALF_LN_2PI + stirling_tail(x)
    }
}

/// lgamma(1 + t) in f64 for |t| < 1/2, the series at 1: keeps its relative
/// accuracy as t -> 0, where lgamma_f64(1 + t) would round t away.
pub(super) fn lgamma1p_f64(t: f64) -> f64 {
    -EULER * t + power_series(&Z1, -t) * -t
}

/// lgamma(x) - ((x - 1/2) ln x - x + ln(2 pi) / 2) for x >= 10, Stirling's
/// series; its eighth term is below 1e-17 at x = 10.
pub(super) fn stirling_tail(x: f64) -> f64 {
    let r = 1.0 / x;
    let r2 = r * r;
    r * (1.0 / 12.0
        + r2 * (-1.0 / 360.0
            + r2 * (1.0 / 1260.0
                + r2 * (-1.0 / 1680.0
                    + r2 * (1.0 / 1188.0
                        + r2 * (-691.0 / 360360.0
                            + r2 * (1.0 / 156.0 + r2 * (-3617.0 / 122400.0))))))))
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
    acc + y.ln() - 0.5 / y - digamma_tail(y)
}

/// ln y - 1/(2y) - digamma(y) for y >= 10, the asymptotic series.
pub(super) fn digamma_tail(y: f64) -> f64 {
    let r2 = 1.0 / (y * y);
    r2 * (1.0 / 12.0
        + r2 * (-1.0 / 120.0
            + r2 * (1.0 / 252.0
                + r2 * (-1.0 / 240.0
                    + r2 * (1.0 / 132.0 + r2 * (-691.0 / 32760.0 + r2 * (1.0 / 12.0)))))))
}

/// trigamma(x) in f64 for x > 0 (every term positive: no cancellation).
pub(super) fn trigamma_f64(x: f64) -> f64 {
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

/// tetragamma psi''(x) in f64 for x > 0: up to y >= 10 by psi''(y) =
/// psi''(y + 1) - 2 / y^3 (terms of one sign), then the derivative of
/// trigamma's asymptotic series, -1/y^2 - 1/y^3 - sum (2k + 1) B_2k /
/// y^(2k + 2); its last term is below 1e-14 of the result at y = 10.
fn tetragamma_f64(x: f64) -> f64 {
    let mut acc = 0.0;
    let mut y = x;
    while y < 10.0 {
        acc -= 2.0 / (y * y * y);
        y += 1.0;
    }
    let r = 1.0 / y;
    let r2 = r * r;
    let series = 0.5
        + r2 * (-1.0 / 6.0
            + r2 * (1.0 / 6.0
                + r2 * (-3.0 / 10.0
                    + r2 * (5.0 / 6.0
                        + r2 * (-691.0 / 210.0 + r2 * (35.0 / 2.0 + r2 * (-3617.0 / 30.0)))))));
    acc - r2 - r2 * r - r2 * r2 * series
}

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

/// d/dx trigamma = tetragamma psi''(x) for x > 0; -inf at 0, NaN below 0,
/// -0 at +inf.
pub fn trigamma_grad(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x.is_infinite() {
        return -0.0;
    }
    tetragamma_f64(x as f64) as f32
}

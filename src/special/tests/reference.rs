//! The float64 references of the one-argument special functions: libm's,
//! closed forms, quadrature and series, each independent of the kernel it
//! checks.

use crate::special::gamma::HALF_LN_2PI;

pub(super) const X0: f64 = 1.461_632_144_968_362;

pub(super) fn ref_trigamma(x: f64) -> f64 {
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
pub(super) fn gauss_legendre(n: usize) -> Vec<(f64, f64)> {
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

pub(super) fn ref_digamma(x: f64, gl: &[(f64, f64)]) -> f64 {
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
    acc + y.ln() - 0.5 / y - r2 * (1.0 / 12.0 - r2 / 120.0 + r2 * r2 / 252.0 - r2 * r2 * r2 / 240.0)
}

/// psi''(x): shifts to y >= 40, then four terms of the asymptotic series.
pub(super) fn ref_tetragamma(x: f64) -> f64 {
    let (mut acc, mut y) = (0.0, x);
    while y < 40.0 {
        acc -= 2.0 / (y * y * y);
        y += 1.0;
    }
    let r2 = 1.0 / (y * y);
    let series = 0.5 - r2 / 6.0 + r2 * r2 / 6.0 - 0.3 * r2 * r2 * r2;
    acc - r2 - r2 / y - r2 * r2 * series
}

/// ln(1 - e^x) from libm's expm1 and log1p (NaN above 0).
pub(super) fn ref_log1m_exp(x: f64) -> f64 {
    if x > -std::f64::consts::LN_2 {
        libm::log(-libm::expm1(x))
    } else {
        libm::log1p(-libm::exp(x))
    }
}

pub(super) fn ref_softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + libm::log1p(libm::exp(-x))
    } else {
        libm::log1p(libm::exp(x))
    }
}

pub(super) fn ref_phi(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

pub(super) fn ref_pdf(x: f64) -> f64 {
    libm::exp(-0.5 * x * x) / (2.0 * std::f64::consts::PI).sqrt()
}

/// Phi(x) = pdf(x) / -x * s(x) for x -> -inf (the Mills ratio series).
pub(super) fn mills_series(x: f64) -> f64 {
    let u = 1.0 / (x * x);
    1.0 - u * (1.0 - 3.0 * u * (1.0 - 5.0 * u * (1.0 - 7.0 * u * (1.0 - 9.0 * u))))
}

pub(super) fn ref_log_phi(x: f64) -> f64 {
    if x < -30.0 {
        -0.5 * x * x - (-x).ln() - HALF_LN_2PI + mills_series(x).ln()
    } else if x < 0.0 {
        ref_phi(x).ln()
    } else {
        libm::log1p(-ref_phi(-x))
    }
}

pub(super) fn ref_log_phi_grad(x: f64) -> f64 {
    if x < -30.0 {
        -x / mills_series(x)
    } else {
        ref_pdf(x) / ref_phi(x)
    }
}

/// The p-quantile of the standard normal from libm's erfc alone: Newton on
/// ln Phi from x0 = -sqrt(-2 ln p), which lies below the root (Phi(x0) <=
/// p / 2 by the Chernoff bound); ln Phi is concave and increasing, so the
/// steps climb to the root without passing it.
pub(super) fn ref_inv_phi(p: f64) -> f64 {
    if !(0.0..=1.0).contains(&p) || p.is_nan() {
        return f64::NAN;
    }
    if p > 0.5 {
        return -ref_inv_phi(1.0 - p);
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 0.5 {
        return 0.0;
    }
    let target = p.ln();
    let mut x = -(-2.0 * target).sqrt();
    for _ in 0..200 {
        let step = (target - ref_log_phi(x)) / ref_log_phi_grad(x);
        x += step;
        if step.abs() <= 1e-16 * x.abs().max(1e-300) {
            break;
        }
    }
    x
}

pub(super) fn ref_inv_phi_grad(p: f64) -> f64 {
    let x = ref_inv_phi(p);
    if x.is_nan() {
        return f64::NAN;
    }
    (2.0 * std::f64::consts::PI).sqrt() * (0.5 * x * x).exp()
}

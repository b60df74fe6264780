//! Each kernel against a float64 reference rounded to float32: libm's
//! (the `libm` crate) where it has the function, otherwise an f64
//! algorithm independent of the kernel's (digamma near its zero by
//! Gauss-Legendre quadrature of trigamma, shifts to x >= 40 elsewhere).
//! The bound is 4 ulps (1 for exp and log); the measured worst error of
//! every function and derivative is printed (`--nocapture`).
use super::gamma::EULER;
use super::normal::FRAC_2_SQRT_PI;
use super::*;

mod binary;
mod incbeta;
mod reference;

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

use reference::*;

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
    /// The most ulps allowed: 4, the contract of a one-argument function,
    /// tighter where the kernel promises more.
    bound: u64,
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
    let log1m_tails: Vec<f32> = [
        wide(-1e-6, 0.0, 20_000),
        around(-f32::MIN_POSITIVE, 2_000),
        around(-std::f32::consts::LN_2, 20_000),
        wide(-104.0, -80.0, 20_000),
        wide(-1e30, -100.0, 2_000),
    ]
    .concat();
    let abs20: Vec<f32> = [wide(20.0, 1e4, 20_000), wide(-1e4, -20.0, 20_000)].concat();
    let near0 = [around(0.0f32.next_up(), 1), wide(-1e-6, 1e-6, 20_000)].concat();
    let erf_tails = [wide(-10.0, 10.0, 20_000), near0.clone()].concat();
    let phi_tails = [
        wide(-40.0, -5.0, 20_000),
        wide(5.0, 40.0, 20_000),
        near0.clone(),
    ]
    .concat();
    // Near 0 (subnormals included), 1/2 and 1, and the switch of the
    // first guess at 0.02425.
    let inv_phi_tails = [
        around(f32::MIN_POSITIVE, 2_000),
        around(1e-30, 2_000),
        around(0.02425, 2_000),
        around(0.5, 2_000),
        around(1.0 - f32::EPSILON * 1000.0, 1_000),
        (1..=1_000).map(f32::from_bits).collect(),
        wide(1e-6, 1e-3, 20_000),
        wide(0.999, 1.0, 20_000),
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
        bound: 4,
    };
    // exp near 0 and 1, across the subnormal results (e^-87.34 is the
    // smallest normal, e^-103.97 half the smallest subnormal) and at the
    // overflow threshold (e^88.72283 is finite, e^88.72284 inf).
    let exp_tails: Vec<f32> = [
        near0.clone(),
        around(1.0, 2_000),
        wide(-104.5, -85.0, 40_000),
        around(-103.972_08, 2_000),
        wide(80.0, 89.0, 20_000),
        around(88.722_83, 2_000),
    ]
    .concat();
    // log near 1 from both sides, at sqrt(1/2) and sqrt(2) (where the
    // mantissa split moves), on subnormals and huge floats.
    let log_tails: Vec<f32> = [
        around(1.0, 20_000),
        around(std::f32::consts::FRAC_1_SQRT_2, 2_000),
        around(std::f32::consts::SQRT_2, 2_000),
        (1..=20_000).map(f32::from_bits).collect(),
        around(f32::MIN_POSITIVE, 2_000),
        wide(1e30, 3.4e38, 2_000),
    ]
    .concat();
    vec![
        Case {
            bound: 1,
            ..c(
                "exp",
                exp,
                Box::new(libm::exp),
                false,
                -104.0,
                89.0,
                exp_tails,
            )
        },
        Case {
            bound: 1,
            ..c("log", log, Box::new(libm::log), true, 0.0, 4.0, log_tails)
        },
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
            psi_tails.clone(),
        ),
        c(
            "trigamma'",
            trigamma_grad,
            Box::new(ref_tetragamma),
            true,
            0.0,
            30.0,
            psi_tails.clone(),
        ),
        c(
            "log1m_exp",
            log1m_exp,
            Box::new(ref_log1m_exp),
            false,
            -40.0,
            0.0,
            log1m_tails.clone(),
        ),
        c(
            "log1m_exp'",
            log1m_exp_grad,
            Box::new(|x| {
                if x > 0.0 {
                    f64::NAN
                } else {
                    -1.0 / libm::expm1(-x)
                }
            }),
            false,
            -40.0,
            0.0,
            log1m_tails,
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
            "tanh",
            tanh,
            Box::new(libm::tanh),
            false,
            -20.0,
            20.0,
            [
                near0.clone(),
                around(1.0 / 4096.0, 2_000),
                around(-1.0 / 4096.0, 2_000),
                wide(8.0, 17.0, 20_000),
                wide(-17.0, -8.0, 20_000),
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
            "inv_Phi",
            inv_phi,
            Box::new(ref_inv_phi),
            true,
            0.0,
            1.0,
            inv_phi_tails.clone(),
        ),
        c(
            "inv_Phi'",
            inv_phi_grad,
            Box::new(ref_inv_phi_grad),
            true,
            0.0,
            1.0,
            inv_phi_tails,
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
fn special_functions_within_their_ulp_bounds_at_fixed_points_and_tails() {
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
        if w > case.bound || wt > case.bound {
            failures.push(case.name);
        }
    }
    assert!(failures.is_empty(), "over their bounds: {failures:?}");
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
    assert_eq!(trigamma_grad(1.0), (-2.0 * 1.202_056_903_159_594_3) as f32);
    assert_eq!(trigamma_grad(0.0), f32::NEG_INFINITY);
    assert!(trigamma_grad(-1.0).is_nan() && trigamma_grad(f32::INFINITY) == 0.0);
    assert_eq!(log1m_exp(0.0), f32::NEG_INFINITY);
    assert_eq!(log1m_exp_grad(0.0), f32::NEG_INFINITY);
    assert_eq!(log1m_exp(f32::NEG_INFINITY), 0.0);
    assert!(log1m_exp(1e-30).is_nan() && log1m_exp_grad(1e-30).is_nan());
    assert_eq!(
        log1m_exp(-std::f32::consts::LN_2),
        ref_log1m_exp(-std::f32::consts::LN_2 as f64) as f32
    );
    assert_eq!(log1p(-1.0), f32::NEG_INFINITY);
    assert_eq!(log1p(1e-30), 1e-30);
    assert_eq!(expm1(1e-30), 1e-30);
    assert_eq!(tanh(1e-30), 1e-30);
    assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(tanh(f32::INFINITY), 1.0);
    assert_eq!(tanh(-f32::MAX), -1.0);
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
        tanh,
        softplus,
        log_sigmoid,
        erf,
        normal_cdf,
        normal_lcdf,
        trigamma,
        trigamma_grad,
        log1m_exp,
        log1m_exp_grad,
    ] {
        assert!(f(f32::NAN).is_nan());
    }
}

/// exp and log at their IEEE special values and edges, as libm's expf and
/// logf give them.
#[test]
fn exp_and_log_at_special_values() {
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    assert_eq!(exp(ninf).to_bits(), 0);
    assert_eq!(exp(-104.0).to_bits(), 0);
    assert_eq!(exp(-1e30).to_bits(), 0);
    assert_eq!(exp(inf), inf);
    assert_eq!(exp(1e30), inf);
    assert_eq!(exp(0.0), 1.0);
    assert_eq!(exp(-0.0), 1.0);
    assert_eq!(exp(1.0), std::f32::consts::E);
    // The overflow threshold: the last float with a finite e^x, as libm.
    let last = 88.722_83f32;
    assert!(exp(last).is_finite() && libm::expf(last).is_finite());
    assert_eq!(exp(last.next_up()), inf);
    assert_eq!(libm::expf(last.next_up()), inf);
    // Subnormal results: e^-100 = 3.7e-44, 26 subnormal steps.
    assert_eq!(exp(-100.0), libm::exp(-100.0) as f32);
    assert!(exp(-100.0) > 0.0 && exp(-100.0) < f32::MIN_POSITIVE);
    assert_eq!(exp(-103.9), f32::from_bits(1));
    assert_eq!(log(0.0), ninf);
    assert_eq!(log(-0.0), ninf);
    assert!(log(-1.0).is_nan() && log(-f32::MIN_POSITIVE).is_nan() && log(ninf).is_nan());
    assert_eq!(log(inf), inf);
    assert_eq!(log(1.0).to_bits(), 0);
    assert_eq!(log(std::f32::consts::E), 1.0);
    assert_eq!(
        log(f32::from_bits(1)),
        (-149.0 * std::f64::consts::LN_2) as f32
    );
    assert_eq!(log(f32::MAX), (f32::MAX as f64).ln() as f32);
    // NaN in, the same NaN out.
    let nan = f32::from_bits(0x7fc0_1234);
    assert_eq!(exp(nan).to_bits(), nan.to_bits());
    assert_eq!(log(nan).to_bits(), nan.to_bits());
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

/// Every float of each domain (stride AG_SWEEP_STRIDE, default 1): about
/// two CPU-hours, run by `make special-sweep` (never by `make test`) on
/// every core, each thread taking a slice of the bit patterns.
/// AG_SWEEP_ONLY (names separated by commas, e.g. `exp,log`) sweeps those
/// functions only.
#[test]
#[ignore]
fn special_sweep_every_float() {
    let stride: u32 = std::env::var("AG_SWEEP_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let only = std::env::var("AG_SWEEP_ONLY").ok();
    let wanted = |name: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == name))
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let mut failures = Vec::new();
    for case in cases().into_iter().filter(|c| wanted(c.name)) {
        // Positive floats' bit patterns, then (off x > 0) the negative ones.
        let ranges = [
            Some(1u32..0x7f80_0000),
            (!case.positive).then_some(0x8000_0000u32..0xff80_0000),
        ];
        let parts: Vec<(u64, f32, usize)> = std::thread::scope(|scope| {
            let case = &case;
            let jobs: Vec<_> = ranges
                .iter()
                .flatten()
                .flat_map(|r| {
                    // Slices whose starts keep the stride's grid.
                    let step = (r.end - r.start).div_ceil(threads).div_ceil(stride) * stride;
                    (0..threads).map(move |k| {
                        let lo = r.start.saturating_add(k * step).min(r.end);
                        lo..lo.saturating_add(step).min(r.end)
                    })
                })
                .map(|slice| {
                    scope.spawn(move || {
                        let xs = slice.step_by(stride as usize).map(f32::from_bits);
                        worst(case, xs)
                    })
                })
                .collect();
            jobs.into_iter().map(|j| j.join().unwrap()).collect()
        });
        let n = parts.iter().map(|p| p.2).sum::<usize>();
        let (w, at) = parts.iter().fold((0, f32::NAN), |(w, at), p| {
            if p.0 > w || at.is_nan() {
                (p.0, p.1)
            } else {
                (w, at)
            }
        });
        println!(
            "{:<13} every {stride}th float, {n} points: worst {w} ulps at {at:e}",
            case.name
        );
        if w > case.bound {
            failures.push(case.name);
        }
    }
    assert!(failures.is_empty(), "over their bounds: {failures:?}");
}

/// The public tanh op's kernel is held to 1 ulp (its f64 evaluation
/// measures 0.5 over every float of [2^-12, 9]), tighter than the special
/// functions' 4: it replaced libm's tanhf, which is within 2.2.
#[test]
fn tanh_within_one_ulp_on_a_sweep() {
    let (mut worst, mut at) = (0, 0.0f32);
    for bits in (0u32..0x4180_0000).step_by(251) {
        for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
            let e = ulps(tanh(x), libm::tanh(x as f64) as f32);
            if e > worst {
                (worst, at) = (e, x);
            }
        }
    }
    assert!(worst <= 1, "tanh: {worst} ulps at {at:e}");
}

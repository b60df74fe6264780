//! Parameter initialisers: constants, normal and uniform draws, and the
//! Xavier (Glorot) and Kaiming (He) scalings, drawn from a counter-based
//! random stream.
//!
//! # Determinism
//! The parameter with index `i` (creation order, from 0) draws from a stream
//! keyed by `(seed, i)` (SplitMix64 read by random access). A uniform
//! draw for element `j` uses output `j`; normal draws come in Box-Muller
//! pairs, elements 2k and 2k+1 using outputs 2k and 2k+1. Every value is a function of
//! `(seed, i, j)` alone: filling in any order, in pieces or on any number of
//! threads gives the same bits, a parameter's values do not depend on what
//! was initialised before it, and parameters of one seed get unrelated
//! streams. Values are computed in f64 and rounded once to f32.
//!
//! # Fans (Xavier and Kaiming)
//! arenagrad's linear layer computes `x @ w` with `w: [in, out]` (PyTorch
//! stores `[out, in]`). For a shape `[..., in, out]`, `fan_in = in` (the
//! second-to-last dimension) and `fan_out = out` (the last); leading
//! dimensions stack independent matrices (one per head, say) and do not
//! change the fans. An embedding table `[V, C]` has `fan_in = V`,
//! `fan_out = C`. A 1-D parameter (a bias, a norm gain) has no fan pair and
//! is refused: use zeros, ones, normal or uniform for it.

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::rng::{GAMMA, mix};
use crate::shape::Shape;

/// How to fill a parameter; see the module docs for the random stream and
/// the fan convention.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Every value 0.
    Zeros,
    /// Every value 1.
    Ones,
    /// Normal(mean, std^2); std >= 0 (0 gives the constant mean).
    Normal { mean: f32, std: f32 },
    /// Uniform on [low, high] (high included only through rounding to f32);
    /// low <= high.
    Uniform { low: f32, high: f32 },
    /// Uniform(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)); gain > 0.
    XavierUniform { gain: f32 },
    /// Normal(0, s^2), s = gain * sqrt(2 / (fan_in + fan_out)); gain > 0.
    XavierNormal { gain: f32 },
    /// Uniform(-b, b), b = gain * sqrt(3 / fan_in); gain > 0 (sqrt(2) for
    /// ReLU layers, 1 for linear ones).
    KaimingUniform { gain: f32 },
    /// Normal(0, s^2), s = gain / sqrt(fan_in); gain > 0.
    KaimingNormal { gain: f32 },
}

/// What an `Init` becomes once checked against a shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dist {
    Const(f32),
    Normal { mean: f64, std: f64 },
    Uniform { low: f64, high: f64 },
}

/// Largest |z| Box-Muller can return: sqrt(-2 ln 2^-53) = 8.57.
const MAX_ABS_NORMAL: f64 = 8.6;

const OP: &str = "param_init";

fn bad(what: String) -> Error {
    Error::InvalidArgument { op: OP, what }
}

fn finite(name: &str, v: f32) -> Result<f64> {
    if v.is_finite() {
        Ok(v as f64)
    } else {
        Err(bad(format!("{name} = {v} must be finite")))
    }
}

fn gain(v: f32) -> Result<f64> {
    let g = finite("gain", v)?;
    if g > 0.0 {
        Ok(g)
    } else {
        Err(bad(format!("gain = {v} must be > 0")))
    }
}

/// (fan_in, fan_out) of a [..., in, out] weight.
fn fans(kind: &str, shape: Shape) -> Result<(f64, f64)> {
    let d = shape.dims();
    if d.len() < 2 {
        return Err(Error::BadShape {
            op: OP,
            what: format!(
                "{kind} needs a weight of rank >= 2 ([..., in, out]), got {shape}; use zeros, ones, normal or uniform for a 1-D parameter"
            ),
        });
    }
    Ok((d[d.len() - 2] as f64, d[d.len() - 1] as f64))
}

impl Init {
    /// Checks the arguments against `shape` and resolves the fans.
    fn dist(self, shape: Shape) -> Result<Dist> {
        let normal = |mean: f64, std: f64| -> Result<Dist> {
            // The widest draw must still be a finite f32.
            if mean.abs() + MAX_ABS_NORMAL * std > f32::MAX as f64 {
                return Err(bad(format!(
                    "mean {mean} and std {std} would give values beyond the f32 range"
                )));
            }
            Ok(Dist::Normal { mean, std })
        };
        match self {
            Init::Zeros => Ok(Dist::Const(0.0)),
            Init::Ones => Ok(Dist::Const(1.0)),
            Init::Normal { mean, std } => {
                let (m, s) = (finite("mean", mean)?, finite("std", std)?);
                if s < 0.0 {
                    return Err(bad(format!("std = {std} must be >= 0")));
                }
                normal(m, s)
            }
            Init::Uniform { low, high } => {
                let (lo, hi) = (finite("low", low)?, finite("high", high)?);
                if lo > hi {
                    return Err(bad(format!("low = {low} must be <= high = {high}")));
                }
                Ok(Dist::Uniform { low: lo, high: hi })
            }
            Init::XavierUniform { gain: g } => {
                let g = gain(g)?;
                let (fi, fo) = fans("xavier_uniform", shape)?;
                let b = g * (6.0 / (fi + fo)).sqrt();
                Ok(Dist::Uniform { low: -b, high: b })
            }
            Init::XavierNormal { gain: g } => {
                let g = gain(g)?;
                let (fi, fo) = fans("xavier_normal", shape)?;
                normal(0.0, g * (2.0 / (fi + fo)).sqrt())
            }
            Init::KaimingUniform { gain: g } => {
                let g = gain(g)?;
                let (fi, _) = fans("kaiming_uniform", shape)?;
                let b = g * (3.0 / fi).sqrt();
                Ok(Dist::Uniform { low: -b, high: b })
            }
            Init::KaimingNormal { gain: g } => {
                let g = gain(g)?;
                let (fi, _) = fans("kaiming_normal", shape)?;
                normal(0.0, g / fi.sqrt())
            }
        }
    }
}

// ---- the random stream ------------------------------------------------------

/// The stream key of parameter `index` under `seed`.
fn stream_key(seed: u64, index: u64) -> u64 {
    mix(mix(seed) ^ mix(index.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Output `n` of the stream `key` (SplitMix64 at position n, by random access).
fn word(key: u64, n: u64) -> u64 {
    mix(key.wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// The top 53 bits as a float in [0, 1).
fn unit(w: u64) -> f64 {
    (w >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal for element `j` by Box-Muller: the pair j / 2 uses
/// words 2(j/2) and 2(j/2)+1; even j takes the cosine, odd j the sine.
fn standard_normal(key: u64, j: u64) -> f64 {
    let pair = j / 2;
    let (w1, w2) = (word(key, 2 * pair), word(key, 2 * pair + 1));
    let u1 = 1.0 - unit(w1); // (0, 1]: ln never sees 0
    let theta = std::f64::consts::TAU * unit(w2);
    let r = (-2.0 * u1.ln()).sqrt();
    if j.is_multiple_of(2) {
        r * theta.cos()
    } else {
        r * theta.sin()
    }
}

/// Fills `out`, whose first element is element `start` of the parameter:
/// any split of a parameter into pieces gives the same bits as one call.
fn fill(out: &mut [f32], start: u64, dist: Dist, key: u64) {
    match dist {
        Dist::Const(v) => out.fill(v),
        Dist::Normal { mean, std } => {
            for (j, o) in (start..).zip(out.iter_mut()) {
                *o = (mean + std * standard_normal(key, j)) as f32;
            }
        }
        Dist::Uniform { low, high } => {
            for (j, o) in (start..).zip(out.iter_mut()) {
                *o = (low + (high - low) * unit(word(key, j))) as f32;
            }
        }
    }
}

impl Context {
    /// Overwrites parameter `p` with values drawn from `init`, a function of
    /// `(seed, parameter index, element index)` only (see the `init` module
    /// docs). Only the values change: the gradient and any optimizer state
    /// are kept. Errors: InvalidArgument (not a parameter; std < 0,
    /// low > high, gain <= 0, a non-finite argument, or a normal whose
    /// draws would overflow f32), BadShape (Xavier or Kaiming on a 1-D
    /// parameter), and the handle errors (stale, wrong context, invalid).
    pub fn param_init(&mut self, p: Tensor, init: Init, seed: u64) -> Result<()> {
        let id = self.resolve(OP, p)?;
        if id as usize >= self.param_count() {
            return Err(bad("tensor is not a parameter".into()));
        }
        let e = self.entry(id);
        let dist = init.dist(e.shape)?;
        fill(
            self.access_one(e.data),
            0,
            dist,
            stream_key(seed, id as u64),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(c: &mut Context, p: Tensor) -> Vec<f32> {
        let mut v = vec![0.0; c.numel(p).unwrap()];
        c.read(p, &mut v).unwrap();
        v
    }

    /// (mean, standard deviation) in f64.
    fn moments(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }

    /// Checks sample moments against the distribution's, with 5-sigma
    /// bounds for n samples: the sample mean's standard error is s/sqrt(n),
    /// the sample std's about s/sqrt(2n) for a normal (a uniform's is
    /// smaller, s/sqrt(5n), so the normal's bound serves both). A false
    /// failure has probability below 1e-6 per check.
    fn check_moments(what: &str, v: &[f32], mean: f64, std: f64) {
        let n = v.len() as f64;
        let (m, s) = moments(v);
        eprintln!("[init {what}] n {n}: mean {m:.5} (want {mean}), std {s:.5} (want {std:.5})");
        assert!(
            (m - mean).abs() <= 5.0 * std / n.sqrt(),
            "{what}: mean {m}, want {mean}"
        );
        assert!(
            (s - std).abs() <= 5.0 * std / (2.0 * n).sqrt(),
            "{what}: std {s}, want {std}"
        );
    }

    #[test]
    fn moments_match_each_distribution() {
        let mut c = Context::new();
        let (fi, fo) = (256usize, 512usize);
        let w = c.param(&[fi, fo], None).unwrap();
        let n = fi * fo;
        let sqrt_n = (n as f64).sqrt();

        c.param_init(
            w,
            Init::Normal {
                mean: 0.5,
                std: 2.0,
            },
            1,
        )
        .unwrap();
        let v = values(&mut c, w);
        check_moments("normal(0.5, 2)", &v, 0.5, 2.0);
        // The shape, not just two moments: P(|z| < 1) = 0.6827 and
        // P(|z| < 2) = 0.9545, each within 5 binomial standard errors.
        for (k, p) in [(1.0f32, 0.682_689_5f64), (2.0, 0.954_499_7)] {
            let inside = v.iter().filter(|&&x| ((x - 0.5) / 2.0).abs() < k).count() as f64;
            let se = (p * (1.0 - p)).sqrt() / sqrt_n;
            assert!((inside / n as f64 - p).abs() <= 5.0 * se, "P(|z| < {k})");
        }

        c.param_init(
            w,
            Init::Uniform {
                low: -3.0,
                high: 1.0,
            },
            2,
        )
        .unwrap();
        let v = values(&mut c, w);
        check_moments("uniform(-3, 1)", &v, -1.0, 4.0 / 12f64.sqrt());
        assert!(v.iter().all(|&x| (-3.0..=1.0).contains(&x)));

        let xb = (6.0 / (fi + fo) as f64).sqrt();
        c.param_init(w, Init::XavierUniform { gain: 1.0 }, 3)
            .unwrap();
        let v = values(&mut c, w);
        check_moments("xavier_uniform", &v, 0.0, xb / 3f64.sqrt());
        assert!(v.iter().all(|&x| x.abs() as f64 <= xb));

        c.param_init(w, Init::XavierNormal { gain: 2.0 }, 4)
            .unwrap();
        let v = values(&mut c, w);
        check_moments(
            "xavier_normal",
            &v,
            0.0,
            2.0 * (2.0 / (fi + fo) as f64).sqrt(),
        );

        let g = 2f32.sqrt();
        let kb = g as f64 * (3.0 / fi as f64).sqrt();
        c.param_init(w, Init::KaimingUniform { gain: g }, 5)
            .unwrap();
        let v = values(&mut c, w);
        check_moments("kaiming_uniform", &v, 0.0, kb / 3f64.sqrt());
        assert!(v.iter().all(|&x| x.abs() as f64 <= kb));

        c.param_init(w, Init::KaimingNormal { gain: g }, 6).unwrap();
        let v = values(&mut c, w);
        check_moments("kaiming_normal", &v, 0.0, g as f64 / (fi as f64).sqrt());

        c.param_init(w, Init::Ones, 7).unwrap();
        assert!(values(&mut c, w).iter().all(|&x| x == 1.0));
        c.param_init(w, Init::Zeros, 7).unwrap();
        assert!(values(&mut c, w).iter().all(|&x| x.to_bits() == 0));
        c.param_init(
            w,
            Init::Normal {
                mean: 3.0,
                std: 0.0,
            },
            7,
        )
        .unwrap();
        assert!(values(&mut c, w).iter().all(|&x| x == 3.0));
        c.param_init(
            w,
            Init::Uniform {
                low: -2.0,
                high: -2.0,
            },
            7,
        )
        .unwrap();
        assert!(values(&mut c, w).iter().all(|&x| x == -2.0));
    }

    /// Fans come from the last two dimensions; leading ones stack matrices.
    #[test]
    fn fans_use_the_last_two_dimensions() {
        let s = Shape::new("t", &[4, 8, 16]).unwrap();
        let Dist::Uniform { high, .. } = Init::XavierUniform { gain: 1.0 }.dist(s).unwrap() else {
            panic!("xavier_uniform is uniform");
        };
        assert_eq!(high, (6.0f64 / 24.0).sqrt());
        let Dist::Normal { std, .. } = Init::KaimingNormal { gain: 1.0 }.dist(s).unwrap() else {
            panic!("kaiming_normal is normal");
        };
        assert_eq!(std, 1.0 / 8f64.sqrt());
    }

    #[test]
    fn same_seed_same_bits_other_seed_or_parameter_other_values() {
        let make = |seed: u64| {
            let mut c = Context::new();
            let a = c.param(&[33, 7], None).unwrap();
            let b = c.param(&[33, 7], None).unwrap();
            // Initialised in the opposite order: no effect on the values.
            c.param_init(
                b,
                Init::Normal {
                    mean: 0.0,
                    std: 1.0,
                },
                seed,
            )
            .unwrap();
            c.param_init(
                a,
                Init::Normal {
                    mean: 0.0,
                    std: 1.0,
                },
                seed,
            )
            .unwrap();
            let (va, vb) = (values(&mut c, a), values(&mut c, b));
            (va, vb)
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (a1, b1) = make(9);
        let (a2, b2) = make(9);
        assert_eq!(bits(&a1), bits(&a2));
        assert_eq!(bits(&b1), bits(&b2));
        let (a3, _) = make(10);
        let differ = |x: &[f32], y: &[f32]| x.iter().zip(y).filter(|(p, q)| p != q).count();
        // Unrelated streams: every value differs (equal f32 draws are
        // possible but have probability ~1e-7 each).
        assert!(
            differ(&a1, &b1) >= a1.len() - 1,
            "parameters 0 and 1 share values"
        );
        assert!(
            differ(&a1, &a3) >= a1.len() - 1,
            "seeds 9 and 10 share values"
        );
        // And uncorrelated: |r| within 5 standard errors of 0.
        let r = a1
            .iter()
            .zip(&b1)
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum::<f64>()
            / a1.len() as f64;
        assert!(r.abs() < 5.0 / (a1.len() as f64).sqrt(), "correlation {r}");
    }

    /// Filling in pieces, split anywhere (even inside a Box-Muller pair),
    /// gives the bits of one fill: the values do not depend on how the work
    /// is divided, so no thread count can change them.
    #[test]
    fn pieces_give_the_bits_of_one_fill() {
        let key = stream_key(77, 3);
        for dist in [
            Dist::Normal {
                mean: 0.1,
                std: 0.02,
            },
            Dist::Uniform {
                low: -1.0,
                high: 2.0,
            },
        ] {
            let mut whole = vec![0.0f32; 101];
            fill(&mut whole, 0, dist, key);
            for cut in [1usize, 2, 50, 51, 100] {
                let mut parts = vec![0.0f32; 101];
                let (lo, hi) = parts.split_at_mut(cut);
                fill(hi, cut as u64, dist, key);
                fill(lo, 0, dist, key);
                assert!(
                    whole
                        .iter()
                        .zip(&parts)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{dist:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn bad_arguments_and_handles_are_refused_and_change_nothing() {
        let mut c = Context::new();
        let w = c.param(&[4, 3], Some(&[0.5; 12])).unwrap();
        let bias = c.param(&[3], None).unwrap();
        let inf = f32::INFINITY;
        for (init, want) in [
            (
                Init::Normal {
                    mean: 0.0,
                    std: -1.0,
                },
                "std = -1 must be >= 0",
            ),
            (
                Init::Normal {
                    mean: f32::NAN,
                    std: 1.0,
                },
                "mean = NaN must be finite",
            ),
            (
                Init::Normal {
                    mean: 0.0,
                    std: inf,
                },
                "std = inf must be finite",
            ),
            (
                Init::Normal {
                    mean: 0.0,
                    std: 1e38,
                },
                "beyond the f32 range",
            ),
            (
                Init::Uniform {
                    low: 1.0,
                    high: 0.0,
                },
                "low = 1 must be <= high = 0",
            ),
            (
                Init::Uniform {
                    low: -inf,
                    high: 0.0,
                },
                "low = -inf must be finite",
            ),
            (Init::XavierUniform { gain: 0.0 }, "gain = 0 must be > 0"),
            (
                Init::KaimingNormal { gain: f32::NAN },
                "gain = NaN must be finite",
            ),
        ] {
            let e = c.param_init(w, init, 1).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{init:?}: {e}");
            assert!(e.to_string().contains(want), "{init:?}: {e}");
        }
        for init in [
            Init::XavierUniform { gain: 1.0 },
            Init::XavierNormal { gain: 1.0 },
            Init::KaimingUniform { gain: 1.0 },
            Init::KaimingNormal { gain: 1.0 },
        ] {
            let e = c.param_init(bias, init, 1).unwrap_err();
            assert!(matches!(e, Error::BadShape { .. }), "{e}");
            assert!(e.to_string().contains("rank >= 2"), "{e}");
        }
        assert_eq!(
            values(&mut c, w),
            vec![0.5; 12],
            "a refused init wrote values"
        );

        let act = c.tensor(&[2], &[1.0, 2.0]).unwrap();
        let e = c.param_init(act, Init::Zeros, 1).unwrap_err();
        assert!(e.to_string().contains("not a parameter"), "{e}");
        c.reset();
        assert!(matches!(
            c.param_init(act, Init::Zeros, 1),
            Err(Error::StaleHandle { .. })
        ));
        let other = Context::new().param(&[1], None).unwrap();
        assert!(matches!(
            c.param_init(other, Init::Zeros, 1),
            Err(Error::WrongContext { .. })
        ));
    }
}

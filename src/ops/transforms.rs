//! Constraining transforms for samplers and variational inference: an
//! unconstrained x maps onto a bounded y, with ln |dy/dx| summed over the
//! elements (the log-Jacobian a density on y needs when it is sampled in
//! x). Built from the element-wise ops, so their gradients, capture and
//! replay come with them.

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};

/// A bound that must be finite, or an error naming `op`.
fn finite(op: &'static str, what: &str, v: f32) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            what: format!("{what} {v} must be finite"),
        })
    }
}

impl Context {
    /// y = lb + e^x (y > lb), and ln |dy/dx| summed: sum(x), a scalar.
    pub fn constrain_lower(&mut self, x: Tensor, lb: f32) -> Result<(Tensor, Tensor)> {
        const OP: &str = "constrain_lower";
        finite(OP, "the lower bound", lb)?;
        self.resolve(OP, x)?;
        let e = self.exp(x)?;
        // lb = 0 (a scale, a rate): e^x itself, the same bits as e^x + 0
        // and two ops fewer for a sampler's every gradient.
        let y = if lb == 0.0 {
            e
        } else {
            let bound = self.tensor(&[1], &[lb])?;
            self.add(e, bound)?
        };
        let log_jacobian = self.sum(x)?;
        Ok((y, log_jacobian))
    }

    /// y = ub - e^x (y < ub), and ln |dy/dx| summed: sum(x), a scalar.
    pub fn constrain_upper(&mut self, x: Tensor, ub: f32) -> Result<(Tensor, Tensor)> {
        const OP: &str = "constrain_upper";
        finite(OP, "the upper bound", ub)?;
        self.resolve(OP, x)?;
        let e = self.exp(x)?;
        let bound = self.tensor(&[1], &[ub])?;
        let y = self.sub(bound, e)?;
        let log_jacobian = self.sum(x)?;
        Ok((y, log_jacobian))
    }

    /// y = lb + (ub - lb) sigmoid(x) (lb < y < ub), and ln |dy/dx| summed:
    /// n ln(ub - lb) + sum(ln sigmoid(x) + ln sigmoid(-x)), a scalar,
    /// finite however large |x| is. ln sigmoid(-x) = ln sigmoid(x) - x, so
    /// the sum is taken as sum(2 ln sigmoid(x) - x): one ln sigmoid. When
    /// lb = -ub, y is computed as ub tanh(x / 2), the same function.
    pub fn constrain_interval(&mut self, x: Tensor, lb: f32, ub: f32) -> Result<(Tensor, Tensor)> {
        const OP: &str = "constrain_interval";
        finite(OP, "the lower bound", lb)?;
        finite(OP, "the upper bound", ub)?;
        let width = ub - lb;
        if !(width > 0.0 && width.is_finite()) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("the bounds [{lb}, {ub}] must have lb < ub and a finite width"),
            });
        }
        let ix = self.resolve(OP, x)?;
        let n = self.entry(ix).shape.numel();
        let y = if lb == -ub {
            // (-b, b), a correlation's: lb + 2b sigmoid(x) = b tanh(x / 2),
            // which keeps its relative accuracy near 0 where 2 sigmoid(x)
            // - 1 cancels (halving x is exact).
            let half = self.scale(x, 0.5)?;
            let t = self.tanh(half)?;
            if ub == 1.0 { t } else { self.scale(t, ub)? }
        } else {
            // A scale by 1 and an add of 0 change no bit: (0, 1), a
            // probability's interval, skips both.
            let mut y = self.sigmoid(x)?;
            if width != 1.0 {
                y = self.scale(y, width)?;
            }
            if lb != 0.0 {
                let low = self.tensor(&[1], &[lb])?;
                y = self.add(y, low)?;
            }
            y
        };
        let up = self.log_sigmoid(x)?;
        let twice = self.scale(up, 2.0)?;
        let both = self.sub(twice, x)?;
        let mut log_jacobian = self.sum(both)?;
        if width != 1.0 {
            let log_width = (n as f64 * (width as f64).ln()) as f32;
            let constant = self.tensor(&[1], &[log_width])?;
            log_jacobian = self.add(log_jacobian, constant)?;
        }
        Ok((y, log_jacobian))
    }
}

#[cfg(test)]
mod tests {
    use crate::Context;
    use crate::ops::gradcheck::{Check, gradcheck, read};

    /// Values and log-Jacobians against f64, the Jacobian against a
    /// central difference of y in f64 (within 1e-5 relative: one exp or
    /// sigmoid, a scale and an add in f32).
    #[test]
    fn transforms_match_f64_and_their_jacobians() {
        // (0, 1) and a lower bound of 0 take shorter paths.
        for (lb, ub) in [(-1.5f64, 4.0f64), (0.0, 1.0), (-1.0, 1.0), (-2.5, 2.5)] {
            transforms_match_f64_within(lb, ub);
        }
    }

    fn transforms_match_f64_within(lb: f64, ub: f64) {
        let xs = [-30.0f32, -2.0, -0.1, 0.0, 0.7, 3.0, 30.0];
        let mut c = Context::new();
        let x = c.tensor(&[xs.len()], &xs).unwrap();
        let (yl, jl) = c.constrain_lower(x, lb as f32).unwrap();
        let (yu, ju) = c.constrain_upper(x, ub as f32).unwrap();
        let (yi, ji) = c.constrain_interval(x, lb as f32, ub as f32).unwrap();
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let lower = |x: f64| lb + x.exp();
        let upper = |x: f64| ub - x.exp();
        let interval = |x: f64| lb + (ub - lb) * sig(x);
        let close = |a: f32, b: f64| (a as f64 - b).abs() <= 1e-5 * (1.0 + b.abs());
        let mut want_j = [0.0f64; 3];
        for (k, &x) in xs.iter().enumerate() {
            let x = x as f64;
            assert!(close(read(&c, yl)[k], lower(x)));
            assert!(close(read(&c, yu)[k], upper(x)));
            assert!(close(read(&c, yi)[k], interval(x)));
            // ln |dy/dx| in closed form (the interval's through
            // ln sigmoid, exact in the tails where sigmoid saturates).
            let ls = |x: f64| -((-x).exp().ln_1p());
            want_j[0] += x;
            want_j[1] += x;
            want_j[2] += (ub - lb).ln() + ls(x) + ls(-x);
            if x.abs() < 5.0 {
                let h = 1e-6;
                let fd = (interval(x + h) - interval(x - h)) / (2.0 * h);
                let closed = (ub - lb) * sig(x) * (1.0 - sig(x));
                assert!((fd.ln() - closed.ln()).abs() < 1e-6, "x = {x}");
            }
        }
        for (t, want) in [jl, ju, ji].into_iter().zip(want_j) {
            let got = read(&c, t)[0];
            assert!(close(got, want), "log-Jacobian {got} vs {want}");
        }
        assert!(
            read(&c, yi)
                .iter()
                .all(|&y| y >= lb as f32 && y <= ub as f32)
        );
    }

    #[test]
    fn symmetric_interval_keeps_relative_accuracy_near_zero() {
        // 2 sigmoid(x) - 1 would lose every digit below about 1e-7.
        let xs = [1e-7f32, -3e-5, 2e-3];
        let mut c = Context::new();
        let x = c.tensor(&[3], &xs).unwrap();
        let (y, _) = c.constrain_interval(x, -1.0, 1.0).unwrap();
        for (&got, &x) in read(&c, y).iter().zip(&xs) {
            let want = (x as f64 / 2.0).tanh();
            assert!(
                (got as f64 - want).abs() <= 4.0 * f32::EPSILON as f64 * want.abs(),
                "{got} vs {want}"
            );
        }
    }

    #[test]
    fn transform_gradients_check() {
        for which in 0..6 {
            gradcheck(
                Check::new("constrain", &[&[5]]).range(-2.0, 2.0),
                move |c, x| {
                    let (y, j) = match which {
                        0 => c.constrain_lower(x[0], 0.5)?,
                        1 => c.constrain_upper(x[0], 0.5)?,
                        2 => c.constrain_lower(x[0], 0.0)?,
                        3 => c.constrain_interval(x[0], 0.0, 1.0)?,
                        4 => c.constrain_interval(x[0], -2.0, 2.0)?,
                        _ => c.constrain_interval(x[0], -1.0, 3.0)?,
                    };
                    // Both outputs matter: y and the log-Jacobian.
                    let s = c.sum(y)?;
                    c.add(s, j)
                },
            );
        }
    }

    #[test]
    fn bad_bounds_name_the_function() {
        let mut c = Context::new();
        let x = c.tensor(&[2], &[0.0, 1.0]).unwrap();
        for (e, op) in [
            (
                c.constrain_lower(x, f32::NAN).unwrap_err(),
                "constrain_lower",
            ),
            (
                c.constrain_upper(x, f32::INFINITY).unwrap_err(),
                "constrain_upper",
            ),
            (
                c.constrain_interval(x, 2.0, 1.0).unwrap_err(),
                "constrain_interval",
            ),
            (
                c.constrain_interval(x, -3e38, 3e38).unwrap_err(),
                "constrain_interval",
            ),
        ] {
            let m = e.to_string();
            assert!(m.contains(op), "{m}");
        }
    }
}

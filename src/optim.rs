//! Optimizers over the context's parameters: SGD with momentum and AdamW,
//! plus global-norm gradient clipping. State is allocated once, when the
//! optimizer is created; a step allocates nothing.

use crate::arena::{Buf, Storage};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::simd;

/// Hyper-parameters of the two optimizers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// v = momentum * v + (g + weight_decay * p); p -= lr * v.
    Sgd {
        lr: f32,
        momentum: f32,
        weight_decay: f32,
    },
    /// Adam with bias correction and decoupled weight decay:
    /// p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p).
    AdamW {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

pub(crate) struct Optimizer {
    pub kind: OptimizerKind,
    /// Per parameter: [first moment, second moment] (SGD uses only the first),
    /// each covering the parameter's floats inside `shard` (None outside).
    pub state: Vec<[Option<Buf>; 2]>,
    /// The floats `first..end` of the flat parameter layout this optimizer
    /// updates and keeps state for: all of them unless
    /// [`Context::optimizer_shard`] said otherwise.
    pub shard: (usize, usize),
    pub step: u64,
    pub bytes: usize,
}

impl Optimizer {
    pub fn state_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the state covers only part of the parameters.
    pub fn sharded(&self, total: usize) -> bool {
        self.shard != (0, total)
    }
}

/// The part `lo..hi` of a parameter at `offset` with `n` floats inside
/// `shard` (lo == hi when they do not meet).
fn overlap(shard: (usize, usize), offset: usize, n: usize) -> (usize, usize) {
    let lo = shard.0.clamp(offset, offset + n) - offset;
    let hi = shard.1.clamp(offset, offset + n) - offset;
    (lo, hi.max(lo))
}

fn check(op: &'static str, name: &str, v: f32, ok: bool, want: &str) -> Result<()> {
    if v.is_finite() && ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            what: format!("{name} = {v} must be {want}"),
        })
    }
}

impl OptimizerKind {
    fn validate(&self) -> Result<()> {
        const OP: &str = "optimizer_new";
        match *self {
            OptimizerKind::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
                check(
                    OP,
                    "momentum",
                    momentum,
                    (0.0..1.0).contains(&momentum),
                    "in [0, 1)",
                )?;
                check(
                    OP,
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "finite and >= 0",
                )
            }
            OptimizerKind::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
                check(OP, "beta1", beta1, (0.0..1.0).contains(&beta1), "in [0, 1)")?;
                check(OP, "beta2", beta2, (0.0..1.0).contains(&beta2), "in [0, 1)")?;
                check(OP, "eps", eps, eps > 0.0, "finite and > 0")?;
                check(
                    OP,
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "finite and >= 0",
                )
            }
        }
    }
}

impl Context {
    /// Creates the optimizer for all parameters created so far, allocating
    /// its state now. One optimizer per context. Its weight decay applies
    /// to the parameters whose flag is on (see
    /// [`Context::set_weight_decay`]).
    pub fn optimizer(&mut self, kind: OptimizerKind) -> Result<()> {
        const OP: &str = "optimizer_new";
        kind.validate()?;
        if self.has_optimizer() {
            return Err(Error::Sequence {
                op: OP,
                what: "this context already has an optimizer".into(),
            });
        }
        if self.param_count() == 0 {
            return Err(Error::Sequence {
                op: OP,
                what: "create the parameters before the optimizer".into(),
            });
        }
        let moments = match kind {
            OptimizerKind::Sgd { momentum, .. } => usize::from(momentum > 0.0),
            OptimizerKind::AdamW { .. } => 2,
        };
        let mut state = Vec::new();
        state
            .try_reserve_exact(self.param_count())
            .map_err(|_| Error::AllocationFailed {
                op: OP,
                bytes: self.param_count() * 48,
            })?;
        let total = self.grads_len();
        let shard = self.pending_shard().unwrap_or((0, total));
        let keep = self.persistent_blocks();
        let before = self.persistent_bytes();
        let mut offset = 0;
        for i in 0..self.param_count() {
            let n = self.entry(i as u32).shape.numel();
            let (lo, hi) = overlap(shard, offset, n);
            offset += n;
            let mut s = [None, None];
            if hi == lo {
                state.push(s);
                continue;
            }
            for slot in s.iter_mut().take(moments) {
                match self.alloc_persistent(OP, hi - lo) {
                    Ok(b) => *slot = Some(b),
                    Err(e) => {
                        self.truncate_persistent(keep);
                        return Err(e);
                    }
                }
            }
            state.push(s);
        }
        let bytes = self.persistent_bytes() - before;
        // The model is complete (no parameter can follow the optimizer):
        // give back what the gradient block's geometric growth reserved.
        self.trim_grads();
        self.set_optimizer_state(Some(Optimizer {
            kind,
            state,
            shard,
            step: 0,
            bytes,
        }));
        Ok(())
    }

    /// Changes the learning rate (for schedules).
    pub fn optimizer_set_lr(&mut self, lr: f32) -> Result<()> {
        const OP: &str = "optimizer_set_lr";
        check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
        let opt = self.optimizer_state_mut().ok_or_else(|| Error::Sequence {
            op: OP,
            what: "no optimizer".into(),
        })?;
        match &mut opt.kind {
            OptimizerKind::Sgd { lr: l, .. } | OptimizerKind::AdamW { lr: l, .. } => *l = lr,
        }
        Ok(())
    }

    /// How many updates the optimizer has made (each successful
    /// [`optimizer_step`](Self::optimizer_step) adds one).
    pub fn optimizer_step_count(&self) -> u64 {
        self.optimizer_state().map_or(0, |o| o.step)
    }

    /// Deprecated: use [`optimizer_step_count`](Self::optimizer_step_count)
    /// (one letter away from `optimizer_step`, which takes a step).
    #[deprecated(note = "use optimizer_step_count")]
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer_step_count()
    }

    /// Global L2 norm of all parameter gradients, in f64.
    fn grad_norm_sq(&mut self) -> f64 {
        let mut total = 0.0f64;
        for i in 0..self.param_count() {
            if let Some(g) = self.entry(i as u32).grad {
                let g = self.read_only(g);
                total += crate::simd::dispatch!(crate::kernels::fastmath::sum_squares_f64(g));
            }
        }
        total
    }

    /// Scales all parameter gradients so their global L2 norm is at most
    /// `max_norm`; returns the norm before clipping. A non-finite norm is
    /// refused (NonFinite) and nothing is scaled.
    pub fn clip_grad_norm(&mut self, max_norm: f32) -> Result<f32> {
        const OP: &str = "clip_grad_norm";
        check(OP, "max_norm", max_norm, max_norm > 0.0, "finite and > 0")?;
        let norm = self.grad_norm_sq().sqrt();
        if !norm.is_finite() {
            return Err(Error::NonFinite {
                op: OP,
                what: format!("gradient norm is {norm}"),
            });
        }
        if norm > max_norm as f64 {
            let s = (max_norm as f64 / (norm + 1e-6)) as f32;
            for i in 0..self.param_count() {
                if let Some(g) = self.entry(i as u32).grad {
                    self.access_one(g).iter_mut().for_each(|v| *v *= s);
                }
            }
        }
        self.set_grads_checked_finite();
        Ok(norm as f32)
    }

    /// One update of every parameter from its accumulated gradient. Refused
    /// with NonFinite (parameters untouched) if any gradient is NaN or
    /// infinite, and with Sequence if no backward ran since the last step.
    pub fn optimizer_step(&mut self) -> Result<()> {
        const OP: &str = "optimizer_step";
        if !self.has_optimizer() {
            return Err(Error::Sequence {
                op: OP,
                what: "no optimizer (create one first)".into(),
            });
        }
        if !self.grads_pending() {
            return Err(Error::Sequence {
                op: OP,
                what: "no gradients since the last step (call ag_backward first)".into(),
            });
        }
        // One pass over all gradients, unless clipping already made it (it
        // refuses non-finite gradients, and scaling by at most 1 keeps them finite).
        let norm = if self.grads_checked_finite() {
            0.0
        } else {
            self.grad_norm_sq()
        };
        if !norm.is_finite() {
            return Err(Error::NonFinite {
                op: OP,
                what: "a parameter gradient is NaN or infinite; the step was skipped".into(),
            });
        }
        let total: usize = (0..self.param_count())
            .map(|i| self.entry(i as u32).shape.numel())
            .sum();
        let par = self.want_pool(total * 8);
        let Some(opt) = self.optimizer_state_mut() else {
            return Ok(());
        };
        opt.step += 1;
        let (t, kind, shard) = (opt.step, opt.kind, opt.shard);
        let mut offset = 0;
        for i in 0..self.param_count() {
            let (Some(g), p) = (self.entry(i as u32).grad, self.entry(i as u32).data) else {
                continue;
            };
            // This shard's part of the parameter (all of it, unsharded).
            let (lo, hi) = overlap(shard, offset, p.len());
            offset += p.len();
            if hi == lo {
                continue;
            }
            let (p, g) = (Storage::sub(p, lo, hi - lo), Storage::sub(g, lo, hi - lo));
            let [m, v] = self.optimizer_state().map_or([None, None], |o| o.state[i]);
            let decay = self.registry().decay(i);
            match kind {
                OptimizerKind::Sgd {
                    lr,
                    momentum,
                    weight_decay,
                } => match m {
                    Some(m) => {
                        let weight_decay = if decay { weight_decay } else { 0.0 };
                        let ([p, m], [g]) = self.access([p, m], [g]);
                        sgd_momentum_update(p, m, g, lr, momentum, weight_decay);
                    }
                    None => {
                        let weight_decay = if decay { weight_decay } else { 0.0 };
                        let ([p], [g]) = self.access([p], [g]);
                        for (p, &g) in p.iter_mut().zip(g) {
                            *p -= lr * (g + weight_decay * *p);
                        }
                    }
                },
                OptimizerKind::AdamW {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                } => {
                    let (Some(m), Some(v)) = (m, v) else { continue };
                    let weight_decay = if decay { weight_decay } else { 0.0 };
                    let par = par && p.len() >= 1 << 16;
                    let (pool, [p, m, v], [g]) = self.access_on(par, [p, m, v], [g]);
                    let k = AdamWStep::new(lr, beta1, beta2, eps, weight_decay, t);
                    let update = |p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]| {
                        simd::dispatch!(adamw_update(p, m, v, g, k))
                    };
                    // Large parameters: each half on its own thread.
                    match pool {
                        Some(pool) => {
                            let h = p.len() / 2;
                            let ((p0, p1), (m0, m1), (v0, v1)) =
                                (p.split_at_mut(h), m.split_at_mut(h), v.split_at_mut(h));
                            let (g0, g1) = g.split_at(h);
                            pool.join(|| update(p1, m1, v1, g1), || update(p0, m0, v0, g0));
                        }
                        None => update(p, m, v, g),
                    }
                }
            }
        }
        self.set_grads_pending(false);
        Ok(())
    }
}

/// v = mu v + (g + wd p); p -= lr v. All [N].
fn sgd_momentum_update(p: &mut [f32], v: &mut [f32], g: &[f32], lr: f32, mu: f32, wd: f32) {
    for ((p, v), &g) in p.iter_mut().zip(v.iter_mut()).zip(g) {
        *v = mu * *v + g + wd * *p;
        *p -= lr * *v;
    }
}

/// The constants of one AdamW step. The bias corrections 1 - beta^t are
/// computed in f64: in f32, `1 - beta2^t` for beta2 = 0.999 and small t
/// subtracts two numbers within 1e-3 of each other, so the rounding error of
/// beta2^t (6e-8) becomes a relative error of up to 1.5e-5 in the
/// correction, which made every early update systematically too small.
/// Rounded once to f32 afterwards, each constant is off by at most half an
/// ulp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamWStep {
    lr: f32,
    b1: f32,
    b2: f32,
    /// 1 - b1 and 1 - b2.
    one_minus_b1: f32,
    one_minus_b2: f32,
    eps: f32,
    wd: f32,
    /// 1 / (1 - b1^t) and 1 / sqrt(1 - b2^t).
    inv_c1: f32,
    inv_sqrt_c2: f32,
}

impl AdamWStep {
    /// Constants for step `t` (1-based).
    pub(crate) fn new(lr: f32, b1: f32, b2: f32, eps: f32, wd: f32, t: u64) -> AdamWStep {
        let t = t.clamp(1, i32::MAX as u64) as i32;
        let (b1d, b2d) = (b1 as f64, b2 as f64);
        let c1 = 1.0 - b1d.powi(t);
        let c2 = 1.0 - b2d.powi(t);
        AdamWStep {
            lr,
            b1,
            b2,
            one_minus_b1: (1.0 - b1d) as f32,
            one_minus_b2: (1.0 - b2d) as f32,
            eps,
            wd,
            inv_c1: (1.0 / c1) as f32,
            inv_sqrt_c2: (1.0 / c2.sqrt()) as f32,
        }
    }
}

/// AdamW update of one parameter. p, m, v, g: [N].
/// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr (m / c1 / (sqrt(v / c2) + eps) + wd p), with c = 1 - b^t.
/// Each element is independent: splitting the slices changes no bit.
#[inline(always)]
pub(crate) fn adamw_update(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], k: AdamWStep) {
    for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
        *m = k.b1 * *m + k.one_minus_b1 * g;
        *v = k.b2 * *v + k.one_minus_b2 * g * g;
        let mh = *m * k.inv_c1;
        let vh_sqrt = v.sqrt() * k.inv_sqrt_c2;
        *p -= k.lr * (mh / (vh_sqrt + k.eps) + k.wd * *p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quadratic_ctx(kind: OptimizerKind) -> (Context, crate::Tensor) {
        let mut c = Context::new();
        let p = c.param(&[3], Some(&[1.0, -2.0, 3.0])).unwrap();
        c.optimizer(kind).unwrap();
        (c, p)
    }

    fn step_quadratic(c: &mut Context, p: crate::Tensor) -> f32 {
        c.reset();
        let sq = c.mul(p, p).unwrap();
        let l = c.sum(sq).unwrap();
        let loss = c.item(l).unwrap();
        c.backward(l).unwrap();
        c.optimizer_step().unwrap();
        c.zero_grad();
        loss
    }

    #[test]
    fn adamw_first_step_moves_each_param_by_lr() {
        let (mut c, p) = quadratic_ctx(OptimizerKind::AdamW {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        });
        step_quadratic(&mut c, p);
        let mut v = [0.0; 3];
        c.read(p, &mut v).unwrap();
        // Bias-corrected first step is lr * sign(g).
        for (got, want) in v.iter().zip([0.9, -1.9, 2.9]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn optimizers_minimise_a_quadratic() {
        for kind in [
            OptimizerKind::Sgd {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 0.0,
            },
            OptimizerKind::Sgd {
                lr: 0.1,
                momentum: 0.0,
                weight_decay: 0.0,
            },
            OptimizerKind::AdamW {
                lr: 0.1,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
            },
        ] {
            let (mut c, p) = quadratic_ctx(kind);
            let first = step_quadratic(&mut c, p);
            let mut last = first;
            for _ in 0..200 {
                last = step_quadratic(&mut c, p);
            }
            assert!(last < first * 1e-2, "{kind:?}: {first} -> {last}");
        }
    }

    /// A large parameter takes the two-thread path; the result equals the
    /// single-threaded kernel bit for bit.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn adamw_split_path_matches_kernel() {
        let n = 1 << 18;
        let init: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
        let mut c = Context::new();
        let p = c.param(&[n], Some(&init)).unwrap();
        c.optimizer(OptimizerKind::AdamW {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
        })
        .unwrap();
        let sq = c.mul(p, p).unwrap();
        let l = c.sum(sq).unwrap();
        c.backward(l).unwrap();
        c.optimizer_step().unwrap();
        assert!(c.pool_started());
        let mut got = vec![0.0; n];
        c.read(p, &mut got).unwrap();
        let (mut want, mut m, mut v) = (init.clone(), vec![0.0; n], vec![0.0; n]);
        let g: Vec<f32> = init.iter().map(|x| 2.0 * x).collect();
        let k = AdamWStep::new(0.01, 0.9, 0.99, 1e-8, 0.1, 1);
        adamw_update(&mut want, &mut m, &mut v, &g, k);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }

    #[test]
    fn nonfinite_gradient_skips_the_step() {
        let (mut c, p) = quadratic_ctx(OptimizerKind::Sgd {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
        });
        let inf = c.tensor(&[3], &[f32::INFINITY, 1.0, 1.0]).unwrap();
        let m = c.mul(p, inf).unwrap();
        let l = c.sum(m).unwrap();
        c.backward(l).unwrap();
        let mut before = [0.0; 3];
        c.read(p, &mut before).unwrap();
        assert!(matches!(
            c.clip_grad_norm(1.0),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(c.optimizer_step(), Err(Error::NonFinite { .. })));
        let mut after = [0.0; 3];
        c.read(p, &mut after).unwrap();
        assert_eq!(before.map(f32::to_bits), after.map(f32::to_bits));
    }

    #[test]
    fn clip_scales_to_max_norm_and_bad_hparams_refused() {
        let (mut c, p) = quadratic_ctx(OptimizerKind::Sgd {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
        });
        let sq = c.mul(p, p).unwrap();
        let l = c.sum(sq).unwrap();
        c.backward(l).unwrap();
        let norm = c.clip_grad_norm(1.0).unwrap();
        assert!((norm - (4.0f32 + 16.0 + 36.0).sqrt()).abs() < 1e-4);
        assert!((c.clip_grad_norm(10.0).unwrap() - 1.0).abs() < 1e-4);
        let mut c2 = Context::new();
        c2.param(&[1], None).unwrap();
        for bad in [f32::NAN, -1.0, 0.0] {
            let k = OptimizerKind::AdamW {
                lr: bad,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            };
            assert!(matches!(
                c2.optimizer(k),
                Err(Error::InvalidArgument { .. })
            ));
        }
        let k = OptimizerKind::AdamW {
            lr: 0.1,
            beta1: 1.0,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        assert!(
            c2.optimizer(k)
                .unwrap_err()
                .to_string()
                .contains("beta1 = 1 must be in [0, 1)")
        );
        assert!(matches!(c2.optimizer_step(), Err(Error::Sequence { .. })));
    }

    /// Normwise relative error ||p - p_ref|| / ||p_ref|| after each of
    /// `steps` AdamW steps (beta2 = 0.999) on `n` parameters drawn from
    /// U(-0.02, 0.02) (GPT-2's init scale, where an early update is a large
    /// fraction of the parameter) with random gradients, against the same
    /// update computed in f64 from the same f32 hyper-parameters and inputs.
    fn adamw_vs_f64(n: usize, steps: usize) -> Vec<f64> {
        let (lr, b1, b2, eps, wd) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 0.1f32);
        let mut rng = crate::ops::gradcheck::Lcg(42);
        let p0: Vec<f32> = (0..n).map(|_| rng.range(-0.02, 0.02)).collect();
        let mut c = Context::new();
        let p = c.param(&[n], Some(&p0)).unwrap();
        c.optimizer(OptimizerKind::AdamW {
            lr,
            beta1: b1,
            beta2: b2,
            eps,
            weight_decay: wd,
        })
        .unwrap();
        let (lr, b1, b2, eps, wd) = (lr as f64, b1 as f64, b2 as f64, eps as f64, wd as f64);
        let mut rp: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        let (mut rm, mut rv) = (vec![0.0f64; n], vec![0.0f64; n]);
        let mut got = vec![0.0f32; n];
        let mut errs = Vec::new();
        for t in 1..=steps {
            // The gradient of sum(p * r) is r exactly; scales vary per element.
            let r: Vec<f32> = (0..n)
                .map(|i| rng.range(-1.0, 1.0) * (1.0 + (i % 7) as f32))
                .collect();
            c.reset();
            let rt = c.tensor(&[n], &r).unwrap();
            let pr = c.mul(p, rt).unwrap();
            let l = c.sum(pr).unwrap();
            c.backward(l).unwrap();
            c.optimizer_step().unwrap();
            c.zero_grad();
            let (c1, c2) = (1.0 - b1.powi(t as i32), 1.0 - b2.powi(t as i32));
            for i in 0..n {
                let g = r[i] as f64;
                rm[i] = b1 * rm[i] + (1.0 - b1) * g;
                rv[i] = b2 * rv[i] + (1.0 - b2) * g * g;
                let (mh, vh) = (rm[i] / c1, rv[i] / c2);
                rp[i] -= lr * (mh / (vh.sqrt() + eps) + wd * rp[i]);
            }
            c.read(p, &mut got).unwrap();
            let (num, den) = got.iter().zip(&rp).fold((0.0, 0.0), |(n, d), (&a, &b)| {
                (n + (a as f64 - b) * (a as f64 - b), d + b * b)
            });
            errs.push((num / den).sqrt());
        }
        errs
    }

    /// Parameters are stored in f32, so every step rounds them: those
    /// independent roundings add up like a random walk, u sqrt(t) with u =
    /// 2^-24 the unit roundoff, and no f32 optimizer can do better. The
    /// bound is that walk: err(t) <= 1.5 u sqrt(t) at every step (reached:
    /// at most 0.5 u sqrt(t)). A systematic error in the update (bias
    /// corrections rounded in f32 gave 1.6e-6 at step 20, 6.1 u sqrt(t))
    /// grows faster and fails it.
    #[test]
    fn adamw_matches_f64_reference_over_100_steps() {
        let errs = adamw_vs_f64(384, 100);
        let u = f64::from(f32::EPSILON) / 2.0;
        let mut worst = 0.0f64;
        for (i, &e) in errs.iter().enumerate() {
            worst = worst.max(e / (u * ((i + 1) as f64).sqrt()));
        }
        eprintln!(
            "[adamw vs f64] relative error: step 1 {:.3e}, step 20 {:.3e}, step 100 {:.3e}; worst err/(u sqrt t) {worst:.2}",
            errs[0], errs[19], errs[99]
        );
        assert!(
            worst <= 1.5,
            "AdamW drifts from the f64 reference: {worst:.2} u sqrt(t)"
        );
    }
}

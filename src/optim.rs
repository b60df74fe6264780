//! Optimizers over the context's parameters: SGD with momentum and AdamW,
//! plus global-norm gradient clipping. State is allocated once, when the
//! optimizer is created; a step allocates nothing.

use crate::arena::Buf;
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
    /// Per parameter: [first moment, second moment] (SGD uses only the first).
    pub state: Vec<[Option<Buf>; 2]>,
    pub step: u64,
    pub bytes: usize,
}

impl Optimizer {
    pub fn state_bytes(&self) -> usize {
        self.bytes
    }
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
    /// its state now. One optimizer per context.
    pub fn optimizer(&mut self, kind: OptimizerKind) -> Result<()> {
        const OP: &str = "optimizer_new";
        kind.validate()?;
        if self.optimizer.is_some() {
            return Err(Error::Sequence {
                op: OP,
                what: "this context already has an optimizer".into(),
            });
        }
        if self.n_params == 0 {
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
            .try_reserve_exact(self.n_params)
            .map_err(|_| Error::AllocationFailed {
                op: OP,
                bytes: self.n_params * 48,
            })?;
        let keep = self.store.persistent_blocks();
        let before = self.store.persistent_bytes();
        for i in 0..self.n_params {
            let n = self.table[i].shape.numel();
            let mut s = [None, None];
            for slot in s.iter_mut().take(moments) {
                match self.store.alloc_persistent(OP, n) {
                    Ok(b) => *slot = Some(b),
                    Err(e) => {
                        self.store.truncate_persistent(keep);
                        return Err(e);
                    }
                }
            }
            state.push(s);
        }
        let bytes = self.store.persistent_bytes() - before;
        self.optimizer = Some(Optimizer {
            kind,
            state,
            step: 0,
            bytes,
        });
        Ok(())
    }

    /// Changes the learning rate (for schedules).
    pub fn optimizer_set_lr(&mut self, lr: f32) -> Result<()> {
        const OP: &str = "optimizer_set_lr";
        check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
        let opt = self.optimizer.as_mut().ok_or_else(|| Error::Sequence {
            op: OP,
            what: "no optimizer".into(),
        })?;
        match &mut opt.kind {
            OptimizerKind::Sgd { lr: l, .. } | OptimizerKind::AdamW { lr: l, .. } => *l = lr,
        }
        Ok(())
    }

    /// Steps taken by the optimizer.
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer.as_ref().map_or(0, |o| o.step)
    }

    /// Global L2 norm of all parameter gradients, in f64.
    fn grad_norm_sq(&mut self) -> f64 {
        let mut total = 0.0f64;
        for i in 0..self.n_params {
            if let Some(g) = self.table[i].grad {
                total += self
                    .store
                    .read(g)
                    .iter()
                    .map(|&v| v as f64 * v as f64)
                    .sum::<f64>();
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
            for i in 0..self.n_params {
                if let Some(g) = self.table[i].grad {
                    self.store.access_one(g).iter_mut().for_each(|v| *v *= s);
                }
            }
        }
        self.grads_checked_finite = true;
        Ok(norm as f32)
    }

    /// One update of every parameter from its accumulated gradient. Refused
    /// with NonFinite (parameters untouched) if any gradient is NaN or
    /// infinite, and with Sequence if no backward ran since the last step.
    pub fn optimizer_step(&mut self) -> Result<()> {
        const OP: &str = "optimizer_step";
        if self.optimizer.is_none() {
            return Err(Error::Sequence {
                op: OP,
                what: "no optimizer (create one first)".into(),
            });
        }
        if !self.pending_grads {
            return Err(Error::Sequence {
                op: OP,
                what: "no gradients since the last step (call ag_backward first)".into(),
            });
        }
        // One pass over all gradients, unless clipping already made it (it
        // refuses non-finite gradients, and scaling by at most 1 keeps them finite).
        let norm = if self.grads_checked_finite {
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
        let total: usize = (0..self.n_params)
            .map(|i| self.table[i].shape.numel())
            .sum();
        let par = self.want_pool(total * 8);
        let Some(opt) = self.optimizer.as_mut() else {
            return Ok(());
        };
        opt.step += 1;
        let t = opt.step;
        for i in 0..self.n_params {
            let (Some(g), p) = (self.table[i].grad, self.table[i].data) else {
                continue;
            };
            let [m, v] = opt.state[i];
            match opt.kind {
                OptimizerKind::Sgd {
                    lr,
                    momentum,
                    weight_decay,
                } => match m {
                    Some(m) => {
                        let ([p, m], [g]) = self.store.access([p, m], [g]);
                        sgd_momentum_update(p, m, g, lr, momentum, weight_decay);
                    }
                    None => {
                        let ([p], [g]) = self.store.access([p], [g]);
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
                    let ([p, m, v], [g]) = self.store.access([p, m, v], [g]);
                    let c1 = 1.0 - beta1.powi(t.min(i32::MAX as u64) as i32);
                    let c2 = 1.0 - beta2.powi(t.min(i32::MAX as u64) as i32);
                    let update = |p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]| {
                        simd::dispatch!(adamw_update(
                            p,
                            m,
                            v,
                            g,
                            lr,
                            beta1,
                            beta2,
                            eps,
                            weight_decay,
                            c1,
                            c2
                        ))
                    };
                    // Large parameters: each half on its own thread.
                    match self.pool.as_ref().filter(|_| par && p.len() >= 1 << 16) {
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
        self.pending_grads = false;
        self.grads_checked_finite = false;
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

/// AdamW update, bias corrections c1 = 1 - beta1^t, c2 = 1 - beta2^t. All [N].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn adamw_update(
    p: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    wd: f32,
    c1: f32,
    c2: f32,
) {
    for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        let mh = *m / c1;
        let vh = *v / c2;
        *p -= lr * (mh / (vh.sqrt() + eps) + wd * *p);
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
        assert!(c.pool.is_some());
        let mut got = vec![0.0; n];
        c.read(p, &mut got).unwrap();
        let (mut want, mut m, mut v) = (init.clone(), vec![0.0; n], vec![0.0; n]);
        let g: Vec<f32> = init.iter().map(|x| 2.0 * x).collect();
        adamw_update(
            &mut want,
            &mut m,
            &mut v,
            &g,
            0.01,
            0.9,
            0.99,
            1e-8,
            0.1,
            1.0 - 0.9,
            1.0 - 0.99,
        );
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
}

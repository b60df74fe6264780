use super::*;
use crate::Context;
use crate::error::Error;

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

use crate::context::{BatchNormStats, Context};
use crate::ops::gradcheck::{Check, Lcg, gradcheck};
use crate::recompute::RecomputePolicy;

/// The statistics named `bn` of `c` channels, made on first use (the
/// gradient check calls its closure after a reset, before any activation).
fn stats(ctx: &mut Context, c: usize) -> BatchNormStats {
    ctx.batch_norm_stats_by_prefix("bn").unwrap_or_else(|| {
        let s = ctx.batch_norm_stats("bn", c).unwrap();
        let mean: Vec<f32> = (0..c).map(|k| 0.3 - 0.2 * k as f32).collect();
        let var: Vec<f32> = (0..c).map(|k| 0.5 + 0.4 * k as f32).collect();
        ctx.batch_norm_stats_write(s, &mean, &var, 0).unwrap();
        s
    })
}

#[test]
fn gradcheck_batch_norm_training_and_evaluation() {
    for training in [true, false] {
        for shape in [&[5usize, 3][..], &[2, 3, 2, 2][..]] {
            let c = shape[1];
            let check = Check::new("batch_norm", &[shape, &[c], &[c]]).range(-2.0, 2.0);
            gradcheck(check, |ctx, x| {
                ctx.set_training(training);
                let s = stats(ctx, c);
                ctx.batch_norm(x[0], Some(x[1]), Some(x[2]), Some(s), 0.1, 1e-5)
            });
        }
    }
}

/// Without a weight, a bias or both (PyTorch's affine=False), in both
/// modes: the gradient check takes the inputs present.
#[test]
fn gradcheck_batch_norm_without_affine_parameters() {
    for training in [true, false] {
        for (with_w, with_b) in [(false, false), (true, false), (false, true)] {
            let shape = &[3usize, 2, 2, 2][..];
            let c = [shape[1]];
            let mut shapes = vec![shape];
            shapes.extend([with_w, with_b].iter().filter(|&&on| on).map(|_| &c[..]));
            let check = Check::new("batch_norm without affine", &shapes).range(-2.0, 2.0);
            gradcheck(check, |ctx, x| {
                ctx.set_training(training);
                let s = stats(ctx, c[0]);
                let w = with_w.then(|| x[1]);
                let b = with_b.then(|| x[x.len() - 1]);
                ctx.batch_norm(x[0], w, b, Some(s), 0.1, 1e-5)
            });
        }
    }
}

/// Without affine parameters, y = (x - mean) / sqrt(var + eps) in f64 of
/// the same inputs (batch statistics, then the running ones), within
/// 1e-5 of values of order 1; a weight of ones and a bias of zeros give
/// the same bits; only x gets a gradient, and it is the affine one's with
/// those parameters.
#[test]
fn without_affine_matches_f64_reference_and_unit_affine() {
    let (n, c, s) = (4, 3, 5);
    let mut rng = Lcg(33);
    let x: Vec<f32> = (0..n * c * s).map(|_| rng.range(-2.0, 3.0)).collect();
    let run = |affine: bool, training: bool| {
        let mut ctx = Context::new();
        ctx.set_training(training);
        let st = ctx.batch_norm_stats("bn", c).unwrap();
        let var: Vec<f32> = (0..c).map(|k| 0.5 + k as f32).collect();
        ctx.batch_norm_stats_write(st, &[0.25, -0.5, 1.0], &var, 0)
            .unwrap();
        let (w, b) = if affine {
            let w = ctx.param(&[c], Some(&vec![1.0; c])).unwrap();
            (Some(w), Some(ctx.param(&[c], None).unwrap()))
        } else {
            (None, None)
        };
        assert_eq!(ctx.param_count(), if affine { 2 } else { 0 });
        let px = ctx.param(&[n, c, s], Some(&x)).unwrap();
        let y = ctx.batch_norm(px, w, b, Some(st), 0.1, 1e-5).unwrap();
        let y2 = ctx.mul(y, y).unwrap();
        let y3 = ctx.mul(y2, y).unwrap();
        let l = ctx.sum(y3).unwrap();
        ctx.backward(l).unwrap();
        let (mut yv, mut gx) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
        ctx.read(y, &mut yv).unwrap();
        ctx.read_grad(px, &mut gx).unwrap();
        let (mut mean, mut var) = (vec![0.0f32; c], vec![0.0f32; c]);
        ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
        (yv, gx, mean, var)
    };
    for training in [true, false] {
        let plain = run(false, training);
        assert_eq!(
            plain,
            run(true, training),
            "unit affine, training {training}"
        );
        let want = if training {
            let (mut rm, mut rv) = (vec![0.0f64; c], vec![1.0f64; c]);
            reference_step(&x, n, c, s, &mut rm, &mut rv)
        } else {
            let (rm, rv) = ([0.25, -0.5, 1.0], [0.5, 1.5, 2.5]);
            let ch = |k: usize| k / s % c;
            (0..x.len())
                .map(|k| (x[k] as f64 - rm[ch(k)]) / (rv[ch(k)] + 1e-5f64).sqrt())
                .collect()
        };
        for (g, w) in plain.0.iter().zip(&want) {
            assert!((*g as f64 - w).abs() <= 1e-5, "{g} vs {w}");
        }
    }
}

/// A weight or bias of the wrong shape is refused, each on its own.
#[test]
fn one_affine_parameter_of_the_wrong_shape_is_refused() {
    let mut ctx = Context::new();
    let good = ctx.param(&[2], Some(&[1.0, 2.0])).unwrap();
    let bad = ctx.param(&[3], None).unwrap();
    let x = ctx
        .tensor(&[3, 2], &[1.0, 2.0, 4.0, -1.0, 0.5, 3.0])
        .unwrap();
    let msg = |r: crate::error::Result<crate::Tensor>| r.unwrap_err().to_string();
    let e = msg(ctx.batch_norm(x, Some(bad), None, None, 0.1, 1e-5));
    assert!(e.contains("weight must be [C]"), "{e}");
    let e = msg(ctx.batch_norm(x, None, Some(bad), None, 0.1, 1e-5));
    assert!(e.contains("bias must be [C]"), "{e}");
    let e = msg(ctx.batch_norm(x, Some(good), Some(bad), None, 0.1, 1e-5));
    assert!(e.contains("bias must be [C]"), "{e}");
    ctx.batch_norm(x, None, Some(good), None, 0.1, 1e-5)
        .unwrap();
}

/// PyTorch's update of the running statistics, in f64: the batch's biased
/// variance normalises, the unbiased one is averaged in.
fn reference_step(
    x: &[f32],
    n: usize,
    c: usize,
    s: usize,
    rm: &mut [f64],
    rv: &mut [f64],
) -> Vec<f64> {
    let m = (n * s) as f64;
    let mut y = vec![0.0; x.len()];
    for ch in 0..c {
        let vals = || (0..n).flat_map(move |i| (0..s).map(move |p| (i * c + ch) * s + p));
        let mu = vals().map(|k| x[k] as f64).sum::<f64>() / m;
        let sq = vals().map(|k| (x[k] as f64 - mu).powi(2)).sum::<f64>();
        for k in vals() {
            y[k] = (x[k] as f64 - mu) / (sq / m + 1e-5).sqrt();
        }
        rm[ch] = 0.9 * rm[ch] + 0.1 * mu;
        rv[ch] = 0.9 * rv[ch] + 0.1 * sq / (m - 1.0);
    }
    y
}

/// Three training steps on different batches, then evaluation: outputs
/// and running statistics against the f64 reference. Tolerances: outputs
/// within 1e-5 (values of order 1: a few f32 roundings after f64 sums);
/// statistics within 1e-6 relative (three f32 multiply-adds per step).
#[test]
fn training_steps_match_f64_reference() {
    let (n, c, s) = (4, 3, 5);
    let mut ctx = Context::new();
    let w = ctx.param(&[c], Some(&vec![1.0; c])).unwrap();
    let b = ctx.param(&[c], None).unwrap();
    let st = ctx.batch_norm_stats("layer1.bn", c).unwrap();
    assert_eq!(ctx.param_count(), 2, "statistics are not parameters");
    let (mut rm, mut rv) = (vec![0.0f64; c], vec![1.0f64; c]);
    let mut rng = Lcg(21);
    for step in 0..3 {
        ctx.reset();
        let x: Vec<f32> = (0..n * c * s)
            .map(|_| rng.range(-2.0, 3.0) * (1 + step) as f32)
            .collect();
        let xt = ctx.tensor(&[n, c, s], &x).unwrap();
        let y = ctx
            .batch_norm(xt, Some(w), Some(b), Some(st), 0.1, 1e-5)
            .unwrap();
        let mut got = vec![0.0; x.len()];
        ctx.read(y, &mut got).unwrap();
        let want = reference_step(&x, n, c, s, &mut rm, &mut rv);
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() <= 1e-5, "{g} vs {w}");
        }
    }
    let (mut mean, mut var) = (vec![0.0; c], vec![0.0; c]);
    assert_eq!(
        ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap(),
        3
    );
    for (got, want) in mean.iter().chain(&var).zip(rm.iter().chain(&rv)) {
        assert!(
            (*got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }
    // Evaluation: the running statistics normalise and stay as they are.
    ctx.set_training(false);
    ctx.reset();
    let x = vec![1.5f32; n * c * s];
    let xt = ctx.tensor(&[n, c, s], &x).unwrap();
    let y = ctx
        .batch_norm(xt, Some(w), Some(b), Some(st), 0.1, 1e-5)
        .unwrap();
    let mut got = vec![0.0; x.len()];
    ctx.read(y, &mut got).unwrap();
    for (k, g) in got.iter().enumerate() {
        let ch = k / s % c;
        let want = (1.5 - rm[ch]) / (rv[ch] + 1e-5).sqrt();
        assert!((*g as f64 - want).abs() <= 1e-5, "{g} vs {want}");
    }
    let (mut mean2, mut var2) = (vec![0.0; c], vec![0.0; c]);
    assert_eq!(
        ctx.batch_norm_stats_read(st, &mut mean2, &mut var2)
            .unwrap(),
        3
    );
    assert_eq!((mean, var), (mean2, var2));
}

#[test]
fn one_value_per_channel_is_refused_in_training_only() {
    let mut ctx = Context::new();
    let w = ctx.param(&[3], Some(&[1.0; 3])).unwrap();
    let b = ctx.param(&[3], None).unwrap();
    let st = ctx.batch_norm_stats("bn", 3).unwrap();
    let x = ctx.tensor(&[1, 3, 1, 1], &[1.0, 2.0, 3.0]).unwrap();
    let e = ctx
        .batch_norm(x, Some(w), Some(b), Some(st), 0.1, 1e-5)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("batch_norm") && msg.contains("[1,3,1,1]"),
        "{msg}"
    );
    ctx.set_training(false);
    ctx.batch_norm(x, Some(w), Some(b), Some(st), 0.1, 1e-5)
        .unwrap();
    let other = ctx.batch_norm_stats_by_prefix("bn").unwrap();
    assert_eq!(other, st);
    // Without running statistics the batch's are used in either mode.
    assert!(
        ctx.batch_norm(x, Some(w), Some(b), None, 0.1, 1e-5)
            .is_err()
    );
}

/// Without running statistics, evaluation normalises as training does.
#[test]
fn without_statistics_both_modes_use_the_batch() {
    let mut ctx = Context::new();
    let w = ctx.param(&[2], Some(&[2.0, 1.0])).unwrap();
    let b = ctx.param(&[2], Some(&[0.5, 0.0])).unwrap();
    let x = ctx
        .tensor(&[3, 2], &[1.0, 2.0, 4.0, -1.0, 0.5, 3.0])
        .unwrap();
    let mut outs = [[0.0f32; 6]; 2];
    for (training, out) in [true, false].into_iter().zip(&mut outs) {
        ctx.set_training(training);
        let y = ctx
            .batch_norm(x, Some(w), Some(b), None, 0.1, 1e-5)
            .unwrap();
        ctx.read(y, out).unwrap();
    }
    assert_eq!(outs[0], outs[1]);
    assert!(outs[0][0] != outs[0][2], "normalised");
}

/// A recomputed segment replays batch_norm's forward during backward: the
/// running statistics must be updated once, as without the segment, and
/// the gradients must be the plain path's.
#[test]
fn recomputed_segment_updates_running_statistics_once() {
    let run = |segment: bool| {
        let (n, c) = (6, 4);
        let mut ctx = Context::new();
        let w = ctx.param(&[c], Some(&[1.0, 0.5, 2.0, -1.0])).unwrap();
        let b = ctx.param(&[c], Some(&[0.1, 0.2, 0.3, 0.4])).unwrap();
        let st = ctx.batch_norm_stats("bn", c).unwrap();
        ctx.set_recompute(RecomputePolicy::All);
        let mut rng = Lcg(5);
        let x: Vec<f32> = (0..n * c).map(|_| rng.range(-1.0, 2.0)).collect();
        let xt = ctx.tensor(&[n, c], &x).unwrap();
        if segment {
            ctx.segment_begin().unwrap();
        }
        let y = ctx
            .batch_norm(xt, Some(w), Some(b), Some(st), 0.1, 1e-5)
            .unwrap();
        let h = ctx.tanh(y).unwrap();
        if segment {
            ctx.segment_end(&[h]).unwrap();
        }
        let h = ctx.mul(h, h).unwrap();
        let loss = ctx.sum(h).unwrap();
        ctx.backward(loss).unwrap();
        assert_eq!(ctx.recompute_stats().recomputed, usize::from(segment));
        let (mut mean, mut var, mut gw) = (vec![0.0; c], vec![0.0; c], vec![0.0; c]);
        let count = ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
        ctx.read_grad(w, &mut gw).unwrap();
        (count, mean, var, gw)
    };
    let (plain, recomputed) = (run(false), run(true));
    assert_eq!(plain.0, 1);
    assert_eq!(plain, recomputed);
}

/// A captured step replayed updates the statistics once per replay, as
/// the eager step does: values, gradients and statistics bit for bit.
#[test]
fn captured_step_replays_match_eager_steps() {
    let (n, c, s) = (3, 2, 4);
    let batch = |k: usize| -> Vec<f32> {
        let mut rng = Lcg(40 + k as u64);
        (0..n * c * s)
            .map(|_| rng.range(-1.0, 1.0) + k as f32)
            .collect()
    };
    let make = || {
        let mut ctx = Context::new();
        let w = ctx.param(&[c], Some(&[1.5, -0.5])).unwrap();
        let b = ctx.param(&[c], Some(&[0.25, 0.0])).unwrap();
        let st = ctx.batch_norm_stats("bn", c).unwrap();
        (ctx, w, b, st)
    };
    let model = |ctx: &mut Context, w, b, st, x| {
        let y = ctx
            .batch_norm(x, Some(w), Some(b), Some(st), 0.1, 1e-5)
            .unwrap();
        let y2 = ctx.mul(y, y).unwrap();
        (y, ctx.sum(y2).unwrap())
    };
    let bits = |ctx: &mut Context, w, y, st| {
        let (mut yv, mut gw) = (vec![0.0f32; n * c * s], vec![0.0f32; c]);
        let (mut mean, mut var) = (vec![0.0f32; c], vec![0.0f32; c]);
        ctx.read(y, &mut yv).unwrap();
        ctx.read_grad(w, &mut gw).unwrap();
        let count = ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
        let all: Vec<u32> = [yv, gw, mean, var]
            .concat()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        (all, count)
    };
    let (mut eager, we, be, se) = make();
    let (mut rep, wr, br, sr) = make();
    rep.capture_begin().unwrap();
    let xi = rep.input_new(&[n, c, s]).unwrap();
    rep.input_write(xi, &batch(0)).unwrap();
    let (yr, loss_r) = model(&mut rep, wr, br, sr, xi);
    rep.backward(loss_r).unwrap();
    let step = rep.capture_end(loss_r).unwrap();
    for k in 0..4 {
        eager.reset();
        eager.zero_grad();
        let xe = eager.tensor(&[n, c, s], &batch(k)).unwrap();
        let (ye, loss_e) = model(&mut eager, we, be, se, xe);
        eager.backward(loss_e).unwrap();
        if k > 0 {
            rep.zero_grad();
            rep.input_write(xi, &batch(k)).unwrap();
            rep.replay(step).unwrap();
        }
        let (e, r) = (bits(&mut eager, we, ye, se), bits(&mut rep, wr, yr, sr));
        assert_eq!(e.1, k as u64 + 1);
        assert_eq!(e, r, "step {k}");
    }
}

/// Statistics are not parameters: not counted, no gradient, untouched by
/// the optimizer's step, and they survive a reset.
#[test]
fn statistics_stay_out_of_parameters_and_optimizer() {
    let mut ctx = Context::new();
    let w = ctx.param(&[2], Some(&[1.0, 1.0])).unwrap();
    let b = ctx.param(&[2], None).unwrap();
    let st = ctx.batch_norm_stats("bn", 2).unwrap();
    assert_eq!(ctx.param_count(), 2);
    assert_eq!(ctx.grads().len(), 4, "no gradient for the statistics");
    ctx.optimizer(crate::OptimizerKind::Sgd {
        lr: 0.1,
        momentum: 0.0,
        weight_decay: 0.0,
    })
    .unwrap();
    let x = ctx.tensor(&[2, 2], &[1.0, 2.0, 3.0, 5.0]).unwrap();
    let y = ctx
        .batch_norm(x, Some(w), Some(b), Some(st), 0.5, 1e-5)
        .unwrap();
    let l = ctx.sum(y).unwrap();
    ctx.backward(l).unwrap();
    ctx.optimizer_step().unwrap();
    ctx.reset();
    let (mut mean, mut var) = ([0.0; 2], [0.0; 2]);
    assert_eq!(
        ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap(),
        1
    );
    // mean: 0.5 * 0 + 0.5 * batch mean; var: 0.5 * 1 + 0.5 * unbiased var.
    assert_eq!(mean, [1.0, 1.75]);
    assert_eq!(var, [0.5 + 0.5 * 2.0, 0.5 + 0.5 * 4.5]);
    assert_eq!(ctx.batch_norm_stats_count(), 1);
}

/// Cut into several tasks (a large input), the values, gradients and
/// statistics equal those of one thread bit for bit.
#[test]
#[cfg_attr(miri, ignore)]
fn parallel_path_matches_one_thread() {
    let run = |single: bool| {
        let (n, c, s) = (32, 16, 1024);
        let mut ctx = Context::new();
        ctx.keep_on_one_thread(single);
        let mut rng = Lcg(9);
        let x: Vec<f32> = (0..n * c * s).map(|_| rng.range(-2.0, 2.0)).collect();
        let w = ctx.param(&[c], Some(&vec![1.25; c])).unwrap();
        let b = ctx.param(&[c], None).unwrap();
        let px = ctx.param(&[n, c, s], Some(&x)).unwrap();
        let st = ctx.batch_norm_stats("bn", c).unwrap();
        let y = ctx
            .batch_norm(px, Some(w), Some(b), Some(st), 0.1, 1e-5)
            .unwrap();
        let y = ctx.mul(y, y).unwrap();
        let l = ctx.sum(y).unwrap();
        ctx.backward(l).unwrap();
        assert!(single || ctx.pool_started());
        let (mut gx, mut mean, mut var) = (vec![0.0f32; n * c * s], vec![0.0; c], vec![0.0; c]);
        ctx.read_grad(px, &mut gx).unwrap();
        ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
        [gx, mean, var]
            .concat()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert!(
        super::tasks(super::Dims {
            n: 32,
            c: 16,
            s: 1024
        })
        .0 > 1
    );
    assert_eq!(run(true), run(false));
}

/// Checkpoints carry the running statistics (format version 2), restore
/// them on load, and refuse a model whose statistics differ; a model
/// without statistics still writes version 1.
#[test]
fn checkpoints_round_trip_running_statistics() {
    let make = |with_stats: bool, channels: usize| {
        let mut ctx = Context::new();
        let w = ctx.param(&[3], Some(&[1.0, 2.0, 3.0])).unwrap();
        let st = with_stats.then(|| ctx.batch_norm_stats("features.bn", channels).unwrap());
        (ctx, w, st)
    };
    let (mut a, _, sa) = make(true, 3);
    let sa = sa.unwrap();
    a.batch_norm_stats_write(sa, &[0.5, -1.0, 2.0], &[1.5, 0.25, 4.0], 7)
        .unwrap();
    let bytes = a.checkpoint_bytes(b"user").unwrap();
    assert_eq!(
        bytes[8..12],
        2u32.to_le_bytes(),
        "version 2 with statistics"
    );
    let (mut b, _, sb) = make(true, 3);
    assert_eq!(b.checkpoint_load_bytes(&bytes).unwrap(), b"user");
    let (mut mean, mut var) = ([0.0; 3], [0.0; 3]);
    assert_eq!(
        b.batch_norm_stats_read(sb.unwrap(), &mut mean, &mut var)
            .unwrap(),
        7
    );
    assert_eq!((mean, var), ([0.5, -1.0, 2.0], [1.5, 0.25, 4.0]));
    // Other statistics, or none, are a mismatch; nothing changes.
    let (mut other, _, so) = make(true, 4);
    assert!(other.checkpoint_load_bytes(&bytes).is_err());
    let (mut m4, mut v4) = ([0.0; 4], [0.0; 4]);
    assert_eq!(
        other
            .batch_norm_stats_read(so.unwrap(), &mut m4, &mut v4)
            .unwrap(),
        0
    );
    assert_eq!(v4, [1.0; 4]);
    let (mut none, _, _) = make(false, 0);
    assert!(none.checkpoint_load_bytes(&bytes).is_err());
    // Without statistics: version 1, loadable as before.
    let v1 = none.checkpoint_bytes(b"").unwrap();
    assert_eq!(v1[8..12], 1u32.to_le_bytes());
    let (mut none2, _, _) = make(false, 0);
    none2.checkpoint_load_bytes(&v1).unwrap();
    assert!(
        b.checkpoint_load_bytes(&v1).is_err(),
        "statistics missing from the file"
    );
}

/// Safetensors files hold the running statistics under PyTorch's names,
/// the count as an int64 scalar, and loading restores them.
#[test]
fn safetensors_names_and_round_trip() {
    let make = || {
        let mut ctx = Context::new();
        ctx.param_named("bn1.weight", &[2], Some(&[1.0, 2.0]))
            .unwrap();
        let st = ctx.batch_norm_stats("bn1", 2).unwrap();
        (ctx, st)
    };
    let (mut a, sa) = make();
    a.batch_norm_stats_write(sa, &[0.5, -0.5], &[2.0, 3.0], 1 << 40)
        .unwrap();
    let bytes = a.safetensors_bytes().unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    assert_eq!(header["bn1.running_mean"]["dtype"], "F32");
    assert_eq!(header["bn1.running_var"]["shape"], serde_json::json!([2]));
    assert_eq!(header["bn1.num_batches_tracked"]["dtype"], "I64");
    assert_eq!(
        header["bn1.num_batches_tracked"]["shape"],
        serde_json::json!([])
    );
    let (mut b, sb) = make();
    b.safetensors_load_bytes(&bytes).unwrap();
    let (mut mean, mut var) = ([0.0; 2], [0.0; 2]);
    assert_eq!(
        b.batch_norm_stats_read(sb, &mut mean, &mut var).unwrap(),
        1 << 40
    );
    assert_eq!((mean, var), ([0.5, -0.5], [2.0, 3.0]));
    // A file without the statistics is refused, and changes nothing.
    let mut plain = Context::new();
    plain
        .param_named("bn1.weight", &[2], Some(&[9.0, 9.0]))
        .unwrap();
    let without = plain.safetensors_bytes().unwrap();
    let e = b.safetensors_load_bytes(&without).unwrap_err().to_string();
    assert!(e.contains("bn1.running_mean"), "{e}");
    let mut w = [0.0; 2];
    b.read(b.param_by_name("bn1.weight").unwrap(), &mut w)
        .unwrap();
    assert_eq!(w, [1.0, 2.0]);
    // The standalone reader still takes float32 only.
    assert!(crate::safetensors_io::from_bytes(&bytes).is_err());
}

/// A batch norm without affine parameters has no weight or bias to save:
/// its safetensors entries are the running statistics alone, as PyTorch's
/// `BatchNorm2d(affine=False).state_dict()` (nothing is named by the op).
#[test]
fn without_affine_only_the_statistics_are_saved() {
    let mut ctx = Context::new();
    let st = ctx.batch_norm_stats("bn1", 2).unwrap();
    let x = ctx.tensor(&[2, 2], &[1.0, 2.0, 3.0, 5.0]).unwrap();
    ctx.batch_norm(x, None, None, Some(st), 0.1, 1e-5).unwrap();
    let bytes = ctx.safetensors_bytes().unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let mut names: Vec<&str> = header
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .filter(|k| *k != "__metadata__")
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "bn1.num_batches_tracked",
            "bn1.running_mean",
            "bn1.running_var"
        ]
    );
}

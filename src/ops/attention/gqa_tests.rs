use super::gqa::{GroupGrads, GroupSaved, group_backward, group_forward};
use crate::Context;
use crate::ops::gradcheck::{Check, Lcg, gradcheck};

fn random(rng: &mut Lcg, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.range(lo, hi)).collect()
}

#[test]
fn gradcheck_attention_gqa() {
    // Multi-head (KV == H), multi-query (KV == 1), and two query heads per
    // kv head at an odd length.
    for (name, q, kv) in [
        ("gqa kv=h", [2, 2, 5, 4], [2, 2, 5, 4]),
        ("gqa kv=1", [1, 3, 6, 4], [1, 1, 6, 4]),
        ("gqa h=4 kv=2", [1, 4, 7, 3], [1, 2, 7, 3]),
    ] {
        let check = Check::new(name, &[&q, &kv, &kv]).range(-2.0, 2.0);
        gradcheck(check, |c, x| c.attention_gqa(x[0], x[1], x[2]));
    }
}

/// One tensor as q, k and v: its gradient takes all three parts.
#[test]
fn gradcheck_attention_gqa_one_tensor_thrice() {
    let check = Check::new("gqa q=k=v", &[&[1, 2, 5, 4]]).range(-2.0, 2.0);
    gradcheck(check, |c, x| c.attention_gqa(x[0], x[0], x[0]));
}

/// Gradients computed in place and through the scratch in one call: k
/// passed once (fresh, in place), q already holding the residual's part
/// (added), and one tensor as q's residual and v (passed once, but not
/// fresh when attention's backward runs).
#[test]
fn gradcheck_attention_gqa_mixed_gradient_targets() {
    let check = Check::new(
        "gqa q, v also used",
        &[&[1, 2, 5, 4], &[1, 2, 5, 4], &[1, 2, 5, 4]],
    )
    .range(-2.0, 2.0);
    gradcheck(check, |c, x| {
        let y = c.attention_gqa(x[0], x[1], x[2])?;
        let y = c.add(y, x[0])?;
        c.mul(y, x[2])
    });
}

/// Only q needs a gradient (k and v are constants).
#[test]
fn gradcheck_attention_gqa_constant_kv() {
    let check = Check::new("gqa constant k, v", &[&[1, 4, 6, 4]]).range(-2.0, 2.0);
    gradcheck(check, |c, x| {
        let mut rng = Lcg(3);
        let k = c.tensor(&[1, 2, 6, 4], &random(&mut rng, 48, -2.0, 2.0))?;
        let v = c.tensor(&[1, 2, 6, 4], &random(&mut rng, 48, -2.0, 2.0))?;
        c.attention_gqa(x[0], k, v)
    });
}

/// Output, dq, dk and dv in f64 for q `[B, H, T, D]`, k and v
/// `[B, KV, T, D]` and the output's gradient `dy`, with the kv heads
/// repeated as `repeat_kv` does: kv head h / (H / KV) for query head h.
#[allow(clippy::type_complexity)]
fn reference(
    [q, k, v, dy]: [&[f32]; 4],
    [b, h, kv, t, d]: [usize; 5],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (d as f64).sqrt();
    let (mut y, mut dq) = (vec![0.0; b * h * t * d], vec![0.0; b * h * t * d]);
    let (mut dk, mut dv) = (vec![0.0; b * kv * t * d], vec![0.0; b * kv * t * d]);
    for bi in 0..b {
        for hi in 0..h {
            let qh = (bi * h + hi) * t * d;
            let kh = (bi * kv + hi / (h / kv)) * t * d;
            for i in 0..t {
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        let dot: f64 = (0..d)
                            .map(|e| q[qh + i * d + e] as f64 * k[kh + j * d + e] as f64)
                            .sum();
                        dot * scale
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|&x| (x - max).exp()).sum();
                let p: Vec<f64> = s.iter().map(|&x| (x - max).exp() / z).collect();
                let dp: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..d)
                            .map(|e| dy[qh + i * d + e] as f64 * v[kh + j * d + e] as f64)
                            .sum()
                    })
                    .collect();
                let dot: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for j in 0..=i {
                    let ds = p[j] * (dp[j] - dot) * scale;
                    for e in 0..d {
                        y[qh + i * d + e] += p[j] * v[kh + j * d + e] as f64;
                        dv[kh + j * d + e] += p[j] * dy[qh + i * d + e] as f64;
                        dq[qh + i * d + e] += ds * k[kh + j * d + e] as f64;
                        dk[kh + j * d + e] += ds * q[qh + i * d + e] as f64;
                    }
                }
            }
        }
    }
    (y, dq, dk, dv)
}

/// Forward and backward through `sum(attention_gqa(q, k, v) * dy)`: the
/// output, then the gradients of q, k and v.
fn run_gqa(
    ctx: &mut Context,
    [q, k, v, dy]: [&[f32]; 4],
    [b, h, kv, t, d]: [usize; 5],
) -> [Vec<f32>; 4] {
    let qt = ctx.param(&[b, h, t, d], Some(q)).unwrap();
    let kt = ctx.param(&[b, kv, t, d], Some(k)).unwrap();
    let vt = ctx.param(&[b, kv, t, d], Some(v)).unwrap();
    let y = ctx.attention_gqa(qt, kt, vt).unwrap();
    let g = ctx.tensor(&[b, h, t, d], dy).unwrap();
    let m = ctx.mul(y, g).unwrap();
    let l = ctx.sum(m).unwrap();
    ctx.backward(l).unwrap();
    let mut out = [q.len(), q.len(), k.len(), v.len()].map(|n| vec![0.0; n]);
    ctx.read(y, &mut out[0]).unwrap();
    ctx.read_grad(qt, &mut out[1]).unwrap();
    ctx.read_grad(kt, &mut out[2]).unwrap();
    ctx.read_grad(vt, &mut out[3]).unwrap();
    out
}

/// Against f64, at lengths that end on a partial causal block (33, 70)
/// and for each grouping. Inputs in [-2, 2], dy in [-1, 1]. Bound: the
/// largest error of each array is at most 2^-17 (7.6e-6) of its largest
/// magnitude (measured: 5.8e-7 of it at worst). Each f32 result sums up
/// to G T + D rounded terms (the score and dP dots over D; the mixes, dq,
/// dk and dv over T, and dk and dv also over the G query heads of their
/// group): (G T + D) eps is 2.9e-5 at G = 6, T = 70, D = 64 in the worst
/// case, and random signs keep it near sqrt(G T + D) eps = 1.3e-6.
#[test]
fn attention_gqa_matches_f64_reference() {
    for dims in [[1, 4, 2, 33, 16], [2, 6, 1, 70, 64], [1, 3, 3, 9, 8]] {
        let [b, h, kv, t, d] = dims;
        let mut rng = Lcg(7);
        let q = random(&mut rng, b * h * t * d, -2.0, 2.0);
        let k = random(&mut rng, b * kv * t * d, -2.0, 2.0);
        let v = random(&mut rng, b * kv * t * d, -2.0, 2.0);
        let dy = random(&mut rng, b * h * t * d, -1.0, 1.0);
        let got = run_gqa(&mut Context::new(), [&q, &k, &v, &dy], dims);
        let (y, dq, dk, dv) = reference([&q, &k, &v, &dy], dims);
        for (what, g, w) in [
            ("out", &got[0], y),
            ("dq", &got[1], dq),
            ("dk", &got[2], dk),
            ("dv", &got[3], dv),
        ] {
            let size = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let (_, worst) = crate::ops::gradcheck::abs_errors(g, &w);
            eprintln!("[gqa vs f64 {dims:?}] {what}: worst {worst:.2e} of {size:.2e}");
            assert!(worst <= size * 2f64.powi(-17), "{dims:?} {what}: {worst}");
        }
    }
}

/// With KV == H the op is the packed attention after a layout change:
/// q, k, v `[B, H, T, D]` are the column blocks of qkv `[B, T, 3C]` per
/// head. The products read the same values in the same order (only their
/// strides differ), so the results agree to within 1e-6 absolute; the
/// largest differences measured were 0 (the same bits).
#[test]
fn attention_gqa_with_kv_equal_h_matches_packed_attention() {
    let [b, h, t, d] = [2, 3, 37, 8];
    let c = h * d;
    let mut rng = Lcg(13);
    let qkv = random(&mut rng, b * t * 3 * c, -2.0, 2.0);
    let dy = random(&mut rng, b * t * c, -1.0, 1.0);
    // Element (bi, head, i, e) of part 0 (q), 1 (k) or 2 (v) in the packed
    // layout, and of the output's gradient.
    let packed = |part: usize, bi: usize, hi: usize, i: usize, e: usize| {
        (bi * t + i) * 3 * c + part * c + hi * d + e
    };
    let out_at = |bi: usize, hi: usize, i: usize, e: usize| (bi * t + i) * c + hi * d + e;
    let heads = |part: Option<usize>| {
        let mut x = Vec::with_capacity(b * h * t * d);
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..t {
                    for e in 0..d {
                        x.push(match part {
                            Some(p) => qkv[packed(p, bi, hi, i, e)],
                            None => dy[out_at(bi, hi, i, e)],
                        });
                    }
                }
            }
        }
        x
    };
    let (q, k, v, dyh) = (heads(Some(0)), heads(Some(1)), heads(Some(2)), heads(None));
    let got = run_gqa(&mut Context::new(), [&q, &k, &v, &dyh], [b, h, h, t, d]);

    let mut ctx = Context::new();
    let x = ctx.param(&[b, t, 3 * c], Some(&qkv)).unwrap();
    let y = ctx.attention(x, h).unwrap();
    let g = ctx.tensor(&[b, t, c], &dy).unwrap();
    let m = ctx.mul(y, g).unwrap();
    let l = ctx.sum(m).unwrap();
    ctx.backward(l).unwrap();
    let (mut want_y, mut want_g) = (vec![0.0; b * t * c], vec![0.0; b * t * 3 * c]);
    ctx.read(y, &mut want_y).unwrap();
    ctx.read_grad(x, &mut want_g).unwrap();

    let mut worst = 0.0f32;
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..t {
                for e in 0..d {
                    let at = ((bi * h + hi) * t + i) * d + e;
                    let pairs = [
                        (got[0][at], want_y[out_at(bi, hi, i, e)]),
                        (got[1][at], want_g[packed(0, bi, hi, i, e)]),
                        (got[2][at], want_g[packed(1, bi, hi, i, e)]),
                        (got[3][at], want_g[packed(2, bi, hi, i, e)]),
                    ];
                    for (a, w) in pairs {
                        worst = worst.max((a - w).abs());
                    }
                }
            }
        }
    }
    eprintln!("[gqa vs packed attention] worst abs difference {worst:.2e}");
    assert!(worst <= 1e-6, "{worst}");
}

/// At a size cut into several tasks, forward and gradients are the bits
/// of the group kernels run one group after another on one thread.
#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn attention_gqa_parallel_path_matches_one_thread() {
    let dims = [3, 6, 2, 67, 32];
    let [b, h, kv, t, d] = dims;
    let mut rng = Lcg(17);
    let q = random(&mut rng, b * h * t * d, -1.0, 1.0);
    let k = random(&mut rng, b * kv * t * d, -1.0, 1.0);
    let v = random(&mut rng, b * kv * t * d, -1.0, 1.0);
    let dy = random(&mut rng, b * h * t * d, -1.0, 1.0);
    let mut par = Context::new();
    let got = run_gqa(&mut par, [&q, &k, &v, &dy], dims);
    assert!(par.pool_started(), "this size should use the worker");
    // The group kernels, one group after another on this thread.
    let g = h / kv;
    let (mut y, mut p) = (vec![0.0; q.len()], vec![f32::NAN; b * h * t * t]);
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let mut dp = vec![f32::NAN; t * t];
    for grp in 0..b * kv {
        let heads = grp * g * t * d..(grp + 1) * g * t * d;
        let one = grp * t * d..(grp + 1) * t * d;
        let probs = grp * g * t * t..(grp + 1) * g * t * t;
        let (qg, kg, vg) = (&q[heads.clone()], &k[one.clone()], &v[one.clone()]);
        group_forward(
            &mut y[heads.clone()],
            &mut p[probs.clone()],
            qg,
            kg,
            vg,
            t,
            d,
        );
        let grads = GroupGrads {
            dq: &mut dq[heads.clone()],
            dk: &mut dk[one.clone()],
            dv: &mut dv[one],
            dp: &mut dp,
        };
        let saved = GroupSaved {
            dy: &dy[heads],
            p: &p[probs],
            q: qg,
            k: kg,
            v: vg,
        };
        group_backward(grads, saved, t, d);
    }
    for (got, want) in got.iter().zip([y, dq, dk, dv]) {
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

#[test]
fn errors_name_the_op_and_shapes() {
    let mut c = Context::new();
    let t = |c: &mut Context, dims: &[usize]| {
        let n = dims.iter().product();
        c.tensor(dims, &vec![0.0; n]).unwrap()
    };
    let q = t(&mut c, &[1, 4, 3, 2]);
    let kv2 = t(&mut c, &[1, 2, 3, 2]);
    let bad = [
        ([1, 4, 3, 2], &[2, 3, 2][..], &[2, 3, 2][..]), // rank 3 k, v
        ([1, 4, 3, 2], &[2, 2, 3, 2], &[2, 2, 3, 2]),   // B differs
        ([1, 4, 3, 2], &[1, 2, 4, 2], &[1, 2, 4, 2]),   // T differs
        ([1, 4, 3, 2], &[1, 2, 3, 4], &[1, 2, 3, 4]),   // D differs
        ([1, 4, 3, 2], &[1, 3, 3, 2], &[1, 3, 3, 2]),   // KV does not divide H
        ([1, 4, 3, 2], &[1, 2, 3, 2], &[1, 1, 3, 2]),   // k and v differ
        ([1, 2, 3, 2], &[1, 4, 3, 2], &[1, 4, 3, 2]),   // KV > H
    ];
    for (qd, kd, vd) in bad {
        let (qt, kt, vt) = (t(&mut c, &qd), t(&mut c, kd), t(&mut c, vd));
        let e = c.attention_gqa(qt, kt, vt).unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, crate::Error::BadShape { .. }), "{s}");
        assert!(
            s.contains("attention_gqa") && s.contains("[B, KV, T, D]"),
            "{s}"
        );
        assert!(s.contains(&format!("{}", c.shape(kt).unwrap())), "{s}");
    }
    let e = c.attention_gqa(kv2, kv2, q).unwrap_err().to_string();
    assert!(e.contains("attention_gqa"), "{e}");
    assert!(c.attention_gqa(q, kv2, kv2).is_ok());
    let q5 = t(&mut c, &[1, 4, 3, 2, 1]);
    assert!(c.attention_gqa(q5, kv2, kv2).is_err());
}

/// Median forward and backward seconds of `f` over 10 runs after 2 warm-up
/// runs; backward includes the `sum(y * dy)` loss's own.
fn time_fwd_bwd(
    ctx: &mut Context,
    dy: &[f32],
    f: impl Fn(&mut Context) -> crate::Result<crate::Tensor>,
) -> (f64, f64) {
    let mut times = Vec::new();
    for _ in 0..12 {
        ctx.reset();
        let start = std::time::Instant::now();
        let y = f(ctx).unwrap();
        let fwd = start.elapsed().as_secs_f64();
        let g = ctx.tensor(ctx.shape(y).unwrap().dims(), dy).unwrap();
        let m = ctx.mul(y, g).unwrap();
        let l = ctx.sum(m).unwrap();
        let start = std::time::Instant::now();
        ctx.backward(l).unwrap();
        times.push((fwd, start.elapsed().as_secs_f64()));
        ctx.zero_grad();
    }
    let warm = &mut times[2..];
    warm.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
    warm[warm.len() / 2]
}

/// Forward and backward ms of the grouped-query attention at B = 4,
/// H = 12, KV = 4, T = 256, D = 64 on 2 threads, and of the packed
/// attention with 12 heads of 64 on the same machine for scale:
/// `cargo test --release --lib attention_gqa_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn attention_gqa_speed() {
    crate::pool::set_threads(2);
    let dims = [4, 12, 4, 256, 64];
    let [b, h, kv, t, d] = dims;
    let mut rng = Lcg(23);
    let q = random(&mut rng, b * h * t * d, -1.0, 1.0);
    let k = random(&mut rng, b * kv * t * d, -1.0, 1.0);
    let v = random(&mut rng, b * kv * t * d, -1.0, 1.0);
    let dy = random(&mut rng, b * h * t * d, -1.0, 1.0);
    let qkv = random(&mut rng, b * t * 3 * h * d, -1.0, 1.0);
    let mut ctx = Context::new();
    let qt = ctx.param(&[b, h, t, d], Some(&q)).unwrap();
    let kt = ctx.param(&[b, kv, t, d], Some(&k)).unwrap();
    let vt = ctx.param(&[b, kv, t, d], Some(&v)).unwrap();
    let x = ctx.param(&[b, t, 3 * h * d], Some(&qkv)).unwrap();
    let gqa = time_fwd_bwd(&mut ctx, &dy, |c| c.attention_gqa(qt, kt, vt));
    let packed = time_fwd_bwd(&mut ctx, &dy, |c| c.attention(x, h));
    let gqa_shape = format!("attention_gqa B, H, KV, T, D = {dims:?}");
    let packed_shape = format!("packed attention qkv [{b}, {t}, {}], {h} heads", 3 * h * d);
    for (what, (f, bw)) in [(gqa_shape, gqa), (packed_shape, packed)] {
        eprintln!(
            "[{what}, 2 threads] forward {:.2} ms, backward {:.2} ms, \
             total {:.2} ms (median of 10)",
            f * 1e3,
            bw * 1e3,
            (f + bw) * 1e3,
        );
    }
}

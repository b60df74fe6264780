use super::fused::{
    Grad, HeadGrads, HeadLayout, Rows, attention_backward, attention_forward, head_backward,
    head_forward, unit_layout,
};
use crate::blas::blocks::split_units;
use crate::blas::{Gemm, sgemm};
use crate::ops::gradcheck::{Check, gradcheck};

/// The packed kernels over a whole batch cut into `tasks` tasks of
/// (batch item, head) units, run one after another: the output, the
/// probabilities, and `dqkv` after the backward adds to it. The
/// probabilities and each task's scratch start as NaN, so an entry read
/// before it is written shows.
#[allow(clippy::too_many_arguments)]
fn kernels_in_tasks(
    tasks: usize,
    qkv: &[f32],
    dy: &[f32],
    mut dqkv: Vec<f32>,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (mut out, mut probs) = (vec![0.0; b * t * c], vec![f32::NAN; b * nh * t * t]);
    let mut p_rest = &mut probs[..];
    for mut y in split_units(&mut out, unit_layout(b, t, c, nh, 1), tasks) {
        let (p, rest) = std::mem::take(&mut p_rest).split_at_mut(y.units().len() * t * t);
        p_rest = rest;
        attention_forward(&mut y, p, qkv, t, c, nh);
    }
    for mut dq in split_units(&mut dqkv, unit_layout(b, t, c, nh, 3), tasks) {
        let mut dp = vec![f32::NAN; t * t];
        attention_backward(&mut dq, &mut dp, dy, &probs, qkv, t, c, nh);
    }
    (out, probs, dqkv)
}

/// The packed attention as it ran before its heads were cut into tasks:
/// batch item by batch item, each head's output and gradients written
/// through slices of the whole buffers.
#[allow(clippy::too_many_arguments)]
fn reference_walk(
    qkv: &[f32],
    dy: &[f32],
    mut dqkv: Vec<f32>,
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    /// One head's columns of dqkv (`[T, 3C]` from its item's first row).
    struct Columns<'a> {
        dqkv: &'a mut [f32],
        c: usize,
        col: usize,
    }
    impl HeadGrads for Columns<'_> {
        fn gemm(&mut self, grad: Grad, row: usize, g: Gemm, a: &[f32], b: &[f32], beta: f32) {
            let at = row * 3 * self.c + grad as usize * self.c + self.col;
            sgemm(g, 1.0, a, b, beta, &mut self.dqkv[at..]);
        }
    }
    let hs = c / nh;
    let ld = HeadLayout {
        q: 3 * c,
        k: 3 * c,
        v: 3 * c,
        y: c,
    };
    let (mut out, mut probs) = (vec![0.0; b * t * c], vec![f32::NAN; b * nh * t * t]);
    let mut dp = vec![f32::NAN; t * t];
    for bi in 0..b {
        let base = bi * t * 3 * c;
        for h in 0..nh {
            let p = &mut probs[(bi * nh + h) * t * t..][..t * t];
            let [q, k, v] = [0, c, 2 * c].map(|at| &qkv[base + at + h * hs..]);
            let mut y = Rows {
                out: &mut out[bi * t * c + h * hs..],
                ld: c,
            };
            head_forward(&mut y, p, q, k, v, t, hs, ld);
        }
    }
    for bi in 0..b {
        let base = bi * t * 3 * c;
        for h in 0..nh {
            let p = &probs[(bi * nh + h) * t * t..][..t * t];
            let qkv_head = [0, c, 2 * c].map(|at| &qkv[base + at + h * hs..]);
            let mut grads = Columns {
                dqkv: &mut dqkv[base..],
                c,
                col: h * hs,
            };
            let dy = &dy[bi * t * c + h * hs..];
            head_backward(&mut grads, &mut dp, dy, p, qkv_head, t, hs, ld, 1.0);
        }
    }
    (out, probs, dqkv)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Cut into any number of tasks, the kernels give the bits of the walk
/// by batch item: one item, one head, lengths off the 32-row blocks, and
/// unit counts that the task counts do not divide. dqkv starts nonzero,
/// as a gradient already there does. Under Miri (products by the
/// reference loop) one small shape checks the handles' writes.
#[test]
fn unit_tasks_match_the_walk_by_batch_item() {
    let shapes: &[_] = if cfg!(miri) {
        &[(2, 9, 8, 2)]
    } else {
        &[
            (1, 70, 64, 4),
            (2, 64, 48, 3),
            (1, 33, 16, 1),
            (3, 40, 40, 5),
        ]
    };
    for &(b, t, c, nh) in shapes {
        let mut rng = crate::ops::gradcheck::Lcg(19);
        let qkv: Vec<f32> = (0..b * t * 3 * c).map(|_| rng.range(-2.0, 2.0)).collect();
        let dy: Vec<f32> = (0..b * t * c).map(|_| rng.range(-1.0, 1.0)).collect();
        let start: Vec<f32> = (0..b * t * 3 * c).map(|_| rng.range(-1.0, 1.0)).collect();
        let want = reference_walk(&qkv, &dy, start.clone(), b, t, c, nh);
        for tasks in 1..=b * nh {
            let got = kernels_in_tasks(tasks, &qkv, &dy, start.clone(), b, t, c, nh);
            let shape = format!("B {b} T {t} C {c} NH {nh}, {tasks} tasks");
            assert_eq!(bits(&got.0), bits(&want.0), "out, {shape}");
            assert_eq!(bits(&got.1), bits(&want.1), "probs, {shape}");
            assert_eq!(bits(&got.2), bits(&want.2), "dqkv, {shape}");
        }
    }
}

/// The task counts by shape: one batch item's heads are cut into tasks
/// of their own, and the count stops at the scratch's bound.
#[test]
fn one_item_is_cut_by_heads() {
    // GPT-2 small: 48 units in 16 tasks of 3.
    assert_eq!(super::unit_tasks(4, 256, 768, 12), 16);
    assert_eq!(super::unit_tasks(1, 100, 256, 8), 8);
    assert_eq!(super::unit_tasks(3, 64, 160, 5), 7, "runs of 2 or 3");
    assert_eq!(super::unit_tasks(1, 100, 256, 1), 1);
    assert_eq!(super::unit_tasks(2, 8, 16, 2), 1, "too small to cut");
}

#[test]
fn softmax_rows_sum_to_one_and_mask() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[2, 2], &[1.0, 2.0, 3.0, -1.0]).unwrap();
    let y = c.softmax(x, true, 1.0).unwrap();
    let mut v = [0.0; 4];
    c.read(y, &mut v).unwrap();
    assert_eq!(v[0], 1.0);
    assert_eq!(v[1], 0.0);
    assert!((v[2] + v[3] - 1.0).abs() < 1e-6 && v[2] > v[3]);
}

/// A negative scale flips which entry is largest; no overflow.
#[test]
fn softmax_negative_scale() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[1, 3], &[100.0, 0.0, -100.0]).unwrap();
    let y = c.softmax(x, false, -2.0).unwrap();
    let mut v = [0.0; 3];
    c.read(y, &mut v).unwrap();
    assert!(v.iter().all(|p| p.is_finite()));
    assert!((v[2] - 1.0).abs() < 1e-6 && v[0] < 1e-30, "{v:?}");
}

#[test]
fn gradcheck_softmax() {
    gradcheck(Check::new("softmax", &[&[3, 5]]), |c, x| {
        c.softmax(x[0], false, 1.0)
    });
    gradcheck(Check::new("softmax negative scale", &[&[3, 5]]), |c, x| {
        c.softmax(x[0], false, -0.7)
    });
    gradcheck(
        Check::new("softmax causal scaled", &[&[2, 4, 4]]),
        |c, x| c.softmax(x[0], true, 0.5),
    );
    gradcheck(Check::new("softmax causal Tq<Tk", &[&[2, 3]]), |c, x| {
        c.softmax(x[0], true, 1.3)
    });
}

#[test]
fn gradcheck_attention() {
    gradcheck(
        Check::new("attention", &[&[2, 4, 12]]).range(-2.0, 2.0),
        |c, x| c.attention(x[0], 2),
    );
}

/// At a size that takes the two-thread path, the op's forward output and
/// its gradient are bit-identical to the single-threaded kernels.
#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn parallel_path_matches_sequential_kernels() {
    let (b, t, c, nh) = (4, 64, 32, 2);
    let mut rng = crate::ops::gradcheck::Lcg(11);
    let data: Vec<f32> = (0..b * t * 3 * c).map(|_| rng.range(-1.0, 1.0)).collect();
    let r: Vec<f32> = (0..b * t * c).map(|_| rng.range(-1.0, 1.0)).collect();
    let mut ctx = crate::Context::new();
    let qkv = ctx.param(&[b, t, 3 * c], Some(&data)).unwrap();
    let out = ctx.attention(qkv, nh).unwrap();
    assert!(ctx.pool_started(), "this size should use the worker");
    let rt = ctx.tensor(&[b, t, c], &r).unwrap();
    let m = ctx.mul(out, rt).unwrap();
    let l = ctx.sum(m).unwrap();
    ctx.backward(l).unwrap();
    let mut got = vec![0.0; b * t * c];
    ctx.read(out, &mut got).unwrap();
    let mut got_grad = vec![0.0; b * t * 3 * c];
    ctx.read_grad(qkv, &mut got_grad).unwrap();
    let (want, _, want_grad) =
        kernels_in_tasks(1, &data, &r, vec![0.0; b * t * 3 * c], b, t, c, nh);
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    assert!(
        got_grad
            .iter()
            .zip(&want_grad)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
}

/// The blocked kernels against the same attention in f64, at lengths
/// that end on a partial block. The probabilities and the scratch
/// start as NaN, so an entry left unwritten, or read before it is
/// written, would show. Bound: the largest error is at most 2^-18 of
/// the array's largest magnitude (measured: 3.4e-7 of it at worst);
/// each f32 result sums up to T rounded terms, T eps = 70 x 2^-24 =
/// 4.2e-6 in the worst case, and random signs keep it near sqrt(T) eps.
#[test]
fn blocked_kernels_match_f64_reference() {
    for (b, t, c, nh) in [(1, 70, 64, 2), (2, 64, 48, 3), (1, 33, 16, 1)] {
        let hs = c / nh;
        let mut rng = crate::ops::gradcheck::Lcg(5);
        let qkv: Vec<f32> = (0..b * t * 3 * c).map(|_| rng.range(-2.0, 2.0)).collect();
        let dy: Vec<f32> = (0..b * t * c).map(|_| rng.range(-1.0, 1.0)).collect();
        let tasks = b * nh - 1;
        let (out, probs, dqkv) = kernels_in_tasks(
            tasks.max(1),
            &qkv,
            &dy,
            vec![0.0; b * t * 3 * c],
            b,
            t,
            c,
            nh,
        );

        let at = |bi: usize, i: usize, part: usize, h: usize, d: usize| {
            (bi * t + i) * 3 * c + part * c + h * hs + d
        };
        let scale = 1.0 / (hs as f64).sqrt();
        let (mut want_out, mut want_dqkv) = (vec![0.0f64; b * t * c], vec![0.0f64; b * t * 3 * c]);
        for bi in 0..b {
            for h in 0..nh {
                let x = |i, part, d| qkv[at(bi, i, part, h, d)] as f64;
                let g = |i: usize, d: usize| dy[(bi * t + i) * c + h * hs + d] as f64;
                let mut p = vec![0.0f64; t * t];
                for i in 0..t {
                    let s: Vec<f64> = (0..=i)
                        .map(|j| scale * (0..hs).map(|d| x(i, 0, d) * x(j, 1, d)).sum::<f64>())
                        .collect();
                    let top = s.iter().cloned().fold(f64::MIN, f64::max);
                    let z: f64 = s.iter().map(|v| (v - top).exp()).sum();
                    for j in 0..=i {
                        p[i * t + j] = (s[j] - top).exp() / z;
                    }
                    for d in 0..hs {
                        want_out[(bi * t + i) * c + h * hs + d] =
                            (0..=i).map(|j| p[i * t + j] * x(j, 2, d)).sum();
                    }
                }
                for i in 0..t {
                    let dpr: Vec<f64> = (0..=i)
                        .map(|j| (0..hs).map(|d| g(i, d) * x(j, 2, d)).sum())
                        .collect();
                    let dot: f64 = (0..=i).map(|j| dpr[j] * p[i * t + j]).sum();
                    for j in 0..=i {
                        let ds = scale * p[i * t + j] * (dpr[j] - dot);
                        for d in 0..hs {
                            want_dqkv[at(bi, i, 0, h, d)] += ds * x(j, 1, d);
                            want_dqkv[at(bi, j, 1, h, d)] += ds * x(i, 0, d);
                            want_dqkv[at(bi, j, 2, h, d)] += p[i * t + j] * g(i, d);
                        }
                    }
                }
                for i in 0..t {
                    for j in 0..t {
                        let got = probs[((bi * nh + h) * t + i) * t + j];
                        if j > i {
                            assert_eq!(got.to_bits(), 0, "masked prob ({i},{j}) t={t}");
                        } else {
                            assert!((got as f64 - p[i * t + j]).abs() <= 1e-6, "prob ({i},{j})");
                        }
                    }
                }
            }
        }
        for (name, got, want) in [("out", &out, &want_out), ("dqkv", &dqkv, &want_dqkv)] {
            let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            // A NaN error (an unwritten entry read) becomes infinite:
            // `max` would drop it.
            let err = got.iter().zip(want.iter()).fold(0.0f64, |m, (g, w)| {
                let e = (*g as f64 - w).abs();
                m.max(if e.is_nan() { f64::INFINITY } else { e })
            });
            assert!(
                err <= top / 262_144.0,
                "{name} t={t}: error {err:e} of {top:e}"
            );
        }
    }
}

/// The fused op equals the composition of split, bmm, causal softmax,
/// bmm and merge built from primitive ops.
#[test]
fn fused_attention_matches_primitive_composition() {
    let (b, t, ch, nh) = (2, 5, 8, 2);
    let hs = ch / nh;
    let mut rng = crate::ops::gradcheck::Lcg(7);
    let data: Vec<f32> = (0..b * t * 3 * ch).map(|_| rng.range(-1.0, 1.0)).collect();
    let mut c = crate::Context::new();
    let qkv = c.tensor(&[b, t, 3 * ch], &data).unwrap();
    let fused = c.attention(qkv, nh).unwrap();
    let r = c.reshape(qkv, &[b, t, 3, nh, hs]).unwrap();
    let p = c.permute(r, &[2, 0, 3, 1, 4]).unwrap(); // [3, B, NH, T, hs]
    let p = c.reshape(p, &[3, b * nh, t, hs]).unwrap();
    let all = c.permute(p, &[0, 1, 2, 3]).unwrap();
    let mut buf = vec![0.0; 3 * b * nh * t * hs];
    c.read(all, &mut buf).unwrap();
    let n = b * nh * t * hs;
    let q = c.tensor(&[b * nh, t, hs], &buf[..n]).unwrap();
    let k = c.tensor(&[b * nh, t, hs], &buf[n..2 * n]).unwrap();
    let v = c.tensor(&[b * nh, t, hs], &buf[2 * n..]).unwrap();
    let s = c.bmm(q, k, false, true).unwrap();
    let a = c.softmax(s, true, 1.0 / (hs as f32).sqrt()).unwrap();
    let o = c.bmm(a, v, false, false).unwrap();
    let o = c.reshape(o, &[b, nh, t, hs]).unwrap();
    let o = c.permute(o, &[0, 2, 1, 3]).unwrap();
    let mut want = vec![0.0; b * t * ch];
    let mut got = vec![0.0; b * t * ch];
    c.read(o, &mut want).unwrap();
    c.read(fused, &mut got).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
}

//! The same bits at any thread count: every case below runs at each count of
//! [`COUNTS`] (more threads than this machine has cores is fine: correctness
//! does not depend on them running at once) and must give exactly the
//! bits of one thread: every loss, the gradients of the last step and every
//! parameter after the AdamW steps.
//!
//! This is the harness new parallel kernels join: add a case to [`CASES`]
//! that trains (or runs forward and backward through) the new op at a size
//! large enough to be split into several tasks. The thread count is per
//! process, so the cases run one after another in one test.

mod common;

use arenagrad::{Context, RecomputePolicy};
use common::gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use common::text::generated_text;

/// The thread counts compared with one thread.
const COUNTS: [usize; 7] = [1, 2, 3, 4, 7, 8, 16];
const STEPS: usize = 10;

/// What a case produced, as bits.
#[derive(PartialEq, Eq, Default)]
struct Bits {
    losses: Vec<u32>,
    grads: Vec<u32>,
    params: Vec<u32>,
}

/// Standard normal draws from `Rng(seed)`, `n` a call.
fn normals(seed: u64) -> impl FnMut(usize) -> Vec<f32> {
    let mut rng = Rng(seed);
    move |n| (0..n).map(|_| rng.normal() as f32).collect()
}

/// Backward from `loss`: the loss's bits and every parameter's gradient
/// bits.
fn loss_bits(ctx: &mut Context, loss: arenagrad::Tensor) -> Bits {
    let losses = vec![ctx.item(loss).unwrap().to_bits()];
    ctx.backward(loss).unwrap();
    Bits {
        losses,
        grads: common::param_bits(ctx, true),
        params: vec![],
    }
}

/// The loss sum(out * weights), then backward, as [`loss_bits`].
fn weighted_sum_bits(ctx: &mut Context, out: arenagrad::Tensor, weights: &[f32]) -> Bits {
    let wt = ctx.tensor(ctx.shape(out).unwrap().dims(), weights).unwrap();
    let weighted = ctx.mul(out, wt).unwrap();
    let loss = ctx.sum(weighted).unwrap();
    loss_bits(ctx, loss)
}

/// Query [b, h, t, d], key and value [b, kv, t, d] parameters, filled
/// from `random` in that order.
fn attention_params(
    ctx: &mut Context,
    random: &mut impl FnMut(usize) -> Vec<f32>,
    [b, h, kv, t, d]: [usize; 5],
) -> (arenagrad::Tensor, arenagrad::Tensor, arenagrad::Tensor) {
    let q = ctx
        .param(&[b, h, t, d], Some(&random(b * h * t * d)))
        .unwrap();
    let k = ctx
        .param(&[b, kv, t, d], Some(&random(b * kv * t * d)))
        .unwrap();
    let v = ctx
        .param(&[b, kv, t, d], Some(&random(b * kv * t * d)))
        .unwrap();
    (q, k, v)
}

/// A norm's weight and bias [c] and its input x [n, c, 32, 32]
/// parameters, filled from `random` in that order.
fn norm_params(
    ctx: &mut Context,
    random: &mut impl FnMut(usize) -> Vec<f32>,
    n: usize,
    c: usize,
) -> (arenagrad::Tensor, arenagrad::Tensor, arenagrad::Tensor) {
    let w = ctx.param(&[c], Some(&random(c))).unwrap();
    let b = ctx.param(&[c], Some(&random(c))).unwrap();
    let x = ctx
        .param(&[n, c, 32, 32], Some(&random(n * c * 32 * 32)))
        .unwrap();
    (w, b, x)
}

/// The text, its vocabulary map and the model's shape for `cfg`.
fn setup(cfg: fn(usize) -> GptConfig) -> (Vec<u8>, [u8; 256], GptConfig) {
    let text = generated_text(120_000);
    let (map, v) = vocabulary(&text);
    (text, map, cfg(v))
}

/// A GPT trained for [`STEPS`] AdamW steps, eager, optionally with every
/// block recomputed in backward.
fn gpt_eager(cfg: fn(usize) -> GptConfig, policy: RecomputePolicy) -> Bits {
    let (text, map, cfg) = setup(cfg);
    let mut ctx = Context::new();
    let mut gpt = Gpt::new(&mut ctx, cfg, 3).unwrap();
    gpt.segments = policy != RecomputePolicy::None;
    ctx.set_recompute(policy);
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    let mut rng = Rng(9);
    let (t, mut ids, mut tg) = (cfg.block_size, vec![0; cfg.tokens()], vec![0; cfg.tokens()]);
    let mut out = Bits::default();
    for _ in 0..STEPS {
        sample_batch(&mut rng, &text, &map, t, &mut ids, &mut tg);
        let loss = gpt
            .train_step_observed(&mut ctx, &ids, &tg, |ctx| {
                out.grads = common::param_bits(ctx, true)
            })
            .unwrap();
        out.losses.push(loss.to_bits());
    }
    out.params = common::param_bits(&ctx, false);
    out
}

/// The same GPT, its step captured once and replayed.
fn gpt_replayed(cfg: fn(usize) -> GptConfig) -> Bits {
    let (text, map, cfg) = setup(cfg);
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg, 3).unwrap();
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    let mut rng = Rng(9);
    let (mut ids, mut targets) = (vec![0; cfg.tokens()], vec![0; cfg.tokens()]);
    let t = cfg.block_size;
    sample_batch(&mut rng, &text, &map, t, &mut ids, &mut targets);
    ctx.capture_begin().unwrap();
    let loss = gpt
        .loss(&mut ctx, &ids, &targets, cfg.batch, cfg.block_size)
        .unwrap();
    ctx.backward(loss).unwrap();
    let step = ctx.capture_end(loss).unwrap();
    let mut out = Bits {
        losses: vec![ctx.item(loss).unwrap().to_bits()],
        grads: common::param_bits(&ctx, true),
        params: vec![],
    };
    ctx.clip_grad_norm(1.0).unwrap();
    ctx.optimizer_step().unwrap();
    for _ in 1..STEPS {
        sample_batch(&mut rng, &text, &map, t, &mut ids, &mut targets);
        ctx.input_write_ids(step, 0, &ids).unwrap();
        ctx.input_write_ids(step, 1, &targets).unwrap();
        ctx.zero_grad();
        ctx.replay(step).unwrap();
        out.losses.push(ctx.item(loss).unwrap().to_bits());
        out.grads = common::param_bits(&ctx, true);
        ctx.clip_grad_norm(1.0).unwrap();
        ctx.optimizer_step().unwrap();
    }
    out.params = common::param_bits(&ctx, false);
    out
}

/// The row and element kernels on their own, at sizes that cut each into
/// several tasks: LayerNorm (one-pass backward on a parameter input, the
/// column sums on a constant one), GELU, residual add and sub,
/// cross-entropy and log-softmax, trained for a few AdamW steps.
fn row_kernels() -> Bits {
    let (rows, c) = (2048, 256);
    let mut rng = Rng(5);
    let mut values = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| (rng.below(2001) as f32 / 1000.0 - 1.0) * scale)
            .collect()
    };
    let (x0, z) = (values(rows * c, 2.0), values(rows * c, 3.0));
    let (w0, b0) = (values(c, 0.5), values(c, 0.5));
    let targets: Vec<i32> = (0..rows).map(|r| (r * 37 % c) as i32).collect();
    let mut ctx = Context::new();
    let x = ctx.param(&[rows, c], Some(&x0)).unwrap();
    let (w1, b1) = (
        ctx.param(&[c], Some(&w0)).unwrap(),
        ctx.param(&[c], Some(&b0)).unwrap(),
    );
    let (w2, b2) = (
        ctx.param(&[c], Some(&b0)).unwrap(),
        ctx.param(&[c], Some(&w0)).unwrap(),
    );
    Gpt::adamw(&mut ctx, 1e-2).unwrap();
    let mut out = Bits::default();
    for _ in 0..4 {
        ctx.reset();
        let zt = ctx.tensor(&[rows, c], &z).unwrap();
        let h = ctx.layernorm(x, w1, b1).unwrap();
        let g = ctx.gelu(h).unwrap();
        let r = ctx.add(g, x).unwrap();
        let q = ctx.layernorm(zt, w2, b2).unwrap();
        let m = ctx.sub(r, q).unwrap();
        let ce = ctx.cross_entropy(m, &targets).unwrap();
        let ls = ctx.log_softmax(m).unwrap();
        let s = ctx.sum(ls).unwrap();
        let s = ctx.scale(s, 1e-6).unwrap();
        let loss = ctx.add(ce, s).unwrap();
        out.losses.push(ctx.item(loss).unwrap().to_bits());
        out.losses.push(ctx.item(ce).unwrap().to_bits());
        ctx.backward(loss).unwrap();
        out.grads = common::param_bits(&ctx, true);
        ctx.optimizer_step().unwrap();
        ctx.zero_grad();
    }
    out.params = common::param_bits(&ctx, false);
    out
}

/// Every case: a name and what it computes. Sizes are chosen so that each
/// parallel kernel splits into several tasks (small and medium do; tiny
/// stays mostly on one thread and checks the small-problem paths).
type Case = (&'static str, fn() -> Bits);

const CASES: &[Case] = &[
    ("tiny, eager", || {
        gpt_eager(GptConfig::tiny, RecomputePolicy::None)
    }),
    ("small, eager", || {
        gpt_eager(GptConfig::small, RecomputePolicy::None)
    }),
    ("small, every block recomputed", || {
        gpt_eager(GptConfig::small, RecomputePolicy::All)
    }),
    ("small, captured and replayed", || {
        gpt_replayed(GptConfig::small)
    }),
    ("row and element kernels, several tasks each", row_kernels),
    // A causal softmax over 2048 rows of 128, and an attention over a
    // batch of 42 cut into runs of unequal length: forward and backward.
    ("softmax and attention ops", || {
        let mut random = normals(21);
        let mut out = Bits::default();
        for (shape, attention) in [([16, 128, 128], false), ([42, 32, 192], true)] {
            let mut ctx = Context::new();
            let n = shape.iter().product();
            let x = ctx.param(&shape, Some(&random(n))).unwrap();
            let y = if attention {
                ctx.attention(x, 2).unwrap()
            } else {
                ctx.softmax(x, true, 0.7).unwrap()
            };
            let weights = random(ctx.numel(y).unwrap());
            let w = ctx.tensor(ctx.shape(y).unwrap().dims(), &weights).unwrap();
            let wy = ctx.mul(y, w).unwrap();
            let loss = ctx.sum(wy).unwrap();
            out.losses.push(ctx.item(loss).unwrap().to_bits());
            ctx.backward(loss).unwrap();
            let mut g = vec![0.0; n];
            ctx.read_grad(x, &mut g).unwrap();
            out.grads.extend(g.iter().map(|x| x.to_bits()));
        }
        out
    }),
    // Packed attention cut into runs of (batch item, head) units: one
    // item with 8 heads of 32 channels over 100 rows, each head a task of
    // its own; then 3 items of 5 heads over 64 rows, 15 units in 7 runs
    // of 2 or 3 that cross from one item into the next. qkv also feeds a
    // product recorded after it, whose gradient is there before the
    // attention's backward adds to it.
    ("packed attention, tasks cut by heads", || {
        let mut random = normals(33);
        let mut out = Bits::default();
        for (b, t, c, nh) in [(1, 100, 256, 8), (3, 64, 160, 5)] {
            let mut ctx = Context::new();
            let x = ctx
                .param(&[b, t, 3 * c], Some(&random(b * t * 3 * c)))
                .unwrap();
            let y = ctx.attention(x, nh).unwrap();
            let wy = ctx.tensor(&[b, t, c], &random(b * t * c)).unwrap();
            let wx = ctx.tensor(&[b, t, 3 * c], &random(b * t * 3 * c)).unwrap();
            let (ly, lx) = (ctx.mul(y, wy).unwrap(), ctx.mul(x, wx).unwrap());
            let (sy, sx) = (ctx.sum(ly).unwrap(), ctx.sum(lx).unwrap());
            let loss = ctx.add(sy, sx).unwrap();
            let bits = loss_bits(&mut ctx, loss);
            out.losses.extend(bits.losses);
            out.grads.extend(bits.grads);
        }
        out
    }),
    // Permutes cut into row tasks: a head split that keeps the last axis
    // ([3, 128, 8, 64] -> [3, 8, 128, 64], 3 tasks) and one that moves it
    // ([64, 48, 50] -> [50, 64, 48], 2 tasks). x also feeds a product
    // recorded after, so backward adds to a gradient already there.
    ("permute, rows and elements", || {
        let mut random = normals(57);
        let mut out = Bits::default();
        for (shape, perm) in [
            (&[3, 128, 8, 64][..], &[0, 2, 1, 3][..]),
            (&[64, 48, 50], &[2, 0, 1]),
        ] {
            let n = shape.iter().product();
            let mut ctx = Context::new();
            let x = ctx.param(shape, Some(&random(n))).unwrap();
            let y = ctx.permute(x, perm).unwrap();
            let wy = ctx
                .tensor(ctx.shape(y).unwrap().dims(), &random(n))
                .unwrap();
            let wx = ctx.tensor(shape, &random(n)).unwrap();
            let (ly, lx) = (ctx.mul(y, wy).unwrap(), ctx.mul(x, wx).unwrap());
            let (sy, sx) = (ctx.sum(ly).unwrap(), ctx.sum(lx).unwrap());
            let loss = ctx.add(sy, sx).unwrap();
            let bits = loss_bits(&mut ctx, loss);
            out.losses.extend(bits.losses);
            out.grads.extend(bits.grads);
        }
        out
    }),
    // Grouped-query attention, 3 query heads per kv head over 6 (batch,
    // kv head) groups of an odd length: forward and the three gradients.
    ("grouped-query attention", || {
        let (b, h, kv, t, d) = (3, 6, 2, 67, 32);
        let mut random = normals(45);
        let mut ctx = Context::new();
        let (q, k, v) = attention_params(&mut ctx, &mut random, [b, h, kv, t, d]);
        let y = ctx.attention_gqa(q, k, v).unwrap();
        let weights = random(b * h * t * d);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // RMSNorm over 2048 rows of 256 (row tasks forward, and backward in
    // one pass whose tasks each sum their rows' weight terms), then SiLU:
    // forward and backward.
    ("rmsnorm and silu", || {
        let (rows, c) = (2048, 256);
        let mut random = normals(33);
        let mut ctx = Context::new();
        let w = ctx.param(&[c], Some(&random(c))).unwrap();
        let x = ctx.param(&[rows, c], Some(&random(rows * c))).unwrap();
        let y = ctx.rmsnorm(x, w, 1e-6).unwrap();
        let s = ctx.silu(y).unwrap();
        let weights = random(rows * c);
        weighted_sum_bits(&mut ctx, s, &weights)
    }),
    // RMSNorm over 512 rows of 1040, wider than the one-pass backward
    // takes: row tasks for dx, column tasks for the weight.
    ("rmsnorm of wide rows", || {
        let (rows, c) = (512, 1040);
        let mut random = normals(35);
        let mut ctx = Context::new();
        let w = ctx.param(&[c], Some(&random(c))).unwrap();
        let x = ctx.param(&[rows, c], Some(&random(rows * c))).unwrap();
        let y = ctx.rmsnorm(x, w, 1e-6).unwrap();
        let weights = random(rows * c);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // An embedding of 4096 ids into a table of 300 rows of 256, most ids
    // repeated: output-row tasks forward, table-row tasks backward.
    ("embedding of repeated ids", || {
        let (v, c, n) = (300, 256, 4096);
        let mut random = normals(37);
        let mut ctx = Context::new();
        let table = ctx.param(&[v, c], Some(&random(v * c))).unwrap();
        let ids: Vec<i32> = (0..n).map(|i| (i * i % v) as i32).collect();
        let y = ctx.embedding(table, &ids).unwrap();
        let weights = random(n * c);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // SwiGLU of gate and up [512, 1000] (element tasks whose edges fall
    // mid-row): forward and both gradients, written fresh.
    ("swiglu", || {
        let (rows, f) = (512, 1000);
        let mut rng = Rng(49);
        let mut random =
            |n: usize| -> Vec<f32> { (0..n).map(|_| 3.0 * rng.normal() as f32).collect() };
        let mut ctx = Context::new();
        let gate = ctx.param(&[rows, f], Some(&random(rows * f))).unwrap();
        let up = ctx.param(&[rows, f], Some(&random(rows * f))).unwrap();
        let y = ctx.swiglu(gate, up).unwrap();
        let weights = random(rows * f);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // RoPE of q [3, 12, 200, 64] (7 row tasks, which start mid-sequence)
    // and k [3, 4, 200, 64] (2 tasks), into grouped-query attention: the
    // gradients through both rotations.
    ("rope into grouped-query attention", || {
        let (b, h, kv, t, d) = (3, 12, 4, 200, 64);
        let mut random = normals(47);
        let mut ctx = Context::new();
        let (q, k, v) = attention_params(&mut ctx, &mut random, [b, h, kv, t, d]);
        let rq = ctx.rope(q, 10000.0, 5).unwrap();
        let rk = ctx.rope(k, 10000.0, 5).unwrap();
        let y = ctx.attention_gqa(rq, rk, v).unwrap();
        let weights = random(b * h * t * d);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // Batch norm over [32, 16, 32, 32] in training (channel tasks for the
    // statistics and gradient sums, plane tasks elsewhere), then evaluation
    // on the updated running statistics: values, gradients and statistics.
    ("batch_norm, training and evaluation", || {
        let (n, c, s) = (32, 16, 32 * 32);
        let mut random = normals(35);
        let mut ctx = Context::new();
        let (w, b, x) = norm_params(&mut ctx, &mut random, n, c);
        let st = ctx.batch_norm_stats("bn", c).unwrap();
        let r = random(n * c * s);
        let mut out = Bits::default();
        for training in [true, false] {
            ctx.reset();
            ctx.set_training(training);
            let y = ctx
                .batch_norm(x, Some(w), Some(b), Some(st), 0.1, 1e-5)
                .unwrap();
            let rt = ctx.tensor(&[n, c, 32, 32], &r).unwrap();
            let yr = ctx.mul(y, rt).unwrap();
            let loss = ctx.sum(yr).unwrap();
            out.losses.push(ctx.item(loss).unwrap().to_bits());
            ctx.backward(loss).unwrap();
            out.grads.extend(common::param_bits(&ctx, true));
            let (mut mean, mut var) = (vec![0.0f32; c], vec![0.0f32; c]);
            ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
            out.params
                .extend(mean.iter().chain(&var).map(|v| v.to_bits()));
        }
        out
    }),
    // Group norm over [16, 32, 32, 32] in 8 groups (row tasks forward and
    // for dx, channel tasks for the weight and bias sums).
    ("group_norm", || {
        let (n, c, s) = (16, 32, 32 * 32);
        let mut random = normals(36);
        let mut ctx = Context::new();
        let (w, b, x) = norm_params(&mut ctx, &mut random, n, c);
        let y = ctx.group_norm(x, Some(w), Some(b), 8, 1e-5).unwrap();
        let weights = random(n * c * s);
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // Both norms without a weight or bias (PyTorch's affine=False): batch
    // norm in training over [32, 16, 32, 32], then group norm over its
    // output in 8 groups; only x gets a gradient.
    (
        "batch_norm and group_norm without affine parameters",
        || {
            let (n, c, s) = (32, 16, 32 * 32);
            let mut random = normals(38);
            let mut ctx = Context::new();
            let x = ctx
                .param(&[n, c, 32, 32], Some(&random(n * c * s)))
                .unwrap();
            let st = ctx.batch_norm_stats("bn", c).unwrap();
            let y = ctx.batch_norm(x, None, None, Some(st), 0.1, 1e-5).unwrap();
            let y = ctx.group_norm(y, None, None, 8, 1e-5).unwrap();
            let weights = random(n * c * s);
            let mut out = weighted_sum_bits(&mut ctx, y, &weights);
            let (mut mean, mut var) = (vec![0.0f32; c], vec![0.0f32; c]);
            ctx.batch_norm_stats_read(st, &mut mean, &mut var).unwrap();
            out.params
                .extend(mean.iter().chain(&var).map(|v| v.to_bits()));
            out
        },
    ),
    // The statistics functions (serial kernels, element maps and small
    // matrices) inside a model that uses the pool elsewhere: inv_Phi,
    // the incomplete gamma and beta, Cholesky with a solve and ln det, a
    // transform, a linear recurrence over the rows of a matrix.
    (
        "inv_phi, gamma_p, beta_inc, cholesky, solve, log_det, transforms, recurrence, corr factor, lkj, glms, normal_lpdf",
        || {
            let n = 24;
            let mut random = normals(37);
            let mut ctx = Context::new();
            let x = ctx.param(&[n], Some(&random(n))).unwrap();
            let b = ctx.param(&[n, n], Some(&random(n * n))).unwrap();
            let p = ctx.sigmoid(x).unwrap();
            let q = ctx.inv_phi(p).unwrap();
            let a = ctx.exp(x).unwrap();
            let g = ctx.gamma_p(a, p).unwrap();
            let bi = ctx.beta_inc(a, g, p).unwrap();
            // A = B B^T + n I: positive definite.
            let bbt = ctx.matmul(b, b, false, true).unwrap();
            let eye: Vec<f32> = (0..n * n)
                .map(|k| if k % (n + 1) == 0 { n as f32 } else { 0.0 })
                .collect();
            let e = ctx.tensor(&[n, n], &eye).unwrap();
            let spd = ctx.add(bbt, e).unwrap();
            let l = ctx.cholesky(spd).unwrap();
            let z = ctx.solve_lower(l, q).unwrap();
            let ld = ctx.log_det_spd(spd).unwrap();
            let (y, jac) = ctx.constrain_interval(g, -1.0, 2.0).unwrap();
            let decay = ctx.tanh(b).unwrap();
            let filtered = ctx.linear_recurrence(decay, bbt).unwrap();
            // A 7 x 7 correlation factor from 21 of x's coordinates.
            let pairs = ctx.slice(x, 0, 0, 21).unwrap();
            let (corr, corr_jac) = ctx.constrain_cholesky_corr(pairs).unwrap();
            // A regression's likelihood: y = x, X^T = B, one alpha (x[0])
            // and one sigma (e^x[1]).
            let alpha = ctx.slice(x, 0, 0, 1).unwrap();
            let sigma = ctx.slice(a, 0, 1, 1).unwrap();
            let glm = ctx.normal_id_glm_lpdf(x, b, true, alpha, q, sigma).unwrap();
            // And a logistic one: y = p in (0, 1), X = B.
            let logit = ctx.bernoulli_logit_glm_lpmf(p, b, false, alpha, q).unwrap();
            let mut terms = Vec::new();
            for t in [z, y, bi, filtered, corr] {
                let sq = ctx.mul(t, t).unwrap();
                terms.push(ctx.sum(sq).unwrap());
            }
            let s0 = ctx.add(terms[0], terms[1]).unwrap();
            let s0 = ctx.add(s0, terms[3]).unwrap();
            let s0 = ctx.add(s0, terms[4]).unwrap();
            let s1 = ctx.add(s0, terms[2]).unwrap();
            let s2 = ctx.add(ld, jac).unwrap();
            let s2 = ctx.add(s2, corr_jac).unwrap();
            let lkj = ctx.lkj_corr_cholesky_lpdf(corr, 2.5).unwrap();
            let s2 = ctx.add(s2, lkj).unwrap();
            // y ~ normal(q, e^x) element by element.
            let normal = ctx.normal_lpdf(x, q, a).unwrap();
            let s2 = ctx.add(s2, normal).unwrap();
            let s2 = ctx.add(s2, glm).unwrap();
            let s2 = ctx.add(s2, logit).unwrap();
            let loss = ctx.add(s1, s2).unwrap();
            loss_bits(&mut ctx, loss)
        },
    ),
    // Matrix-vector products (they run as sgemv) large enough to be cut
    // into row tiles: a regression's X beta as a matmul and as a linear
    // layer with one output, and X^T times a vector; every gradient.
    ("matrix-vector products", || {
        let (rows, k) = (70_000, 256);
        let mut random = normals(40);
        let mut ctx = Context::new();
        let x = ctx.param(&[rows, k], Some(&random(rows * k))).unwrap();
        let beta = ctx.param(&[k, 1], Some(&random(k))).unwrap();
        let w = ctx.param(&[k, 1], Some(&random(k))).unwrap();
        let b = ctx.param(&[1], Some(&random(1))).unwrap();
        let eta = ctx.matmul(x, beta, false, false).unwrap();
        let lin = ctx.linear(x, w, Some(b)).unwrap();
        let xt_eta = ctx.matmul(x, eta, true, false).unwrap();
        let mut terms = Vec::new();
        for t in [eta, lin, xt_eta] {
            let sq = ctx.mul(t, t).unwrap();
            terms.push(ctx.sum(sq).unwrap());
        }
        let s0 = ctx.add(terms[0], terms[1]).unwrap();
        let loss = ctx.add(s0, terms[2]).unwrap();
        loss_bits(&mut ctx, loss)
    }),
    // A 3x3 convolution with bias over 16 images (cut into image tasks,
    // products tiled), then max pooling: x, weight and bias gradients.
    ("conv2d and max pooling", || {
        let mut random = normals(33);
        let mut ctx = Context::new();
        let x = ctx
            .param(&[16, 16, 14, 14], Some(&random(16 * 16 * 196)))
            .unwrap();
        let w = ctx
            .param(&[32, 16, 3, 3], Some(&random(32 * 16 * 9)))
            .unwrap();
        let b = ctx.param(&[32], Some(&random(32))).unwrap();
        let opts = arenagrad::Conv2dOptions {
            padding: [1, 1],
            ..Default::default()
        };
        let y = ctx.conv2d(x, w, Some(b), opts).unwrap();
        let pool = arenagrad::Pool2dOptions {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            ceil_mode: false,
        };
        let p = ctx.max_pool2d(y, pool).unwrap();
        let weights = random(ctx.numel(p).unwrap());
        weighted_sum_bits(&mut ctx, p, &weights)
    }),
    // The fused conv + ReLU over image tasks: each task masks its images'
    // output gradients into its own room; the bias sums are masked too.
    ("conv2d_relu", || {
        let mut random = normals(35);
        let mut ctx = Context::new();
        let x = ctx
            .param(&[32, 8, 28, 28], Some(&random(32 * 8 * 784)))
            .unwrap();
        let w = ctx
            .param(&[16, 8, 3, 3], Some(&random(16 * 8 * 9)))
            .unwrap();
        let b = ctx.param(&[16], Some(&random(16))).unwrap();
        let opts = arenagrad::Conv2dOptions {
            padding: [1, 1],
            ..Default::default()
        };
        let y = ctx.conv2d_relu(x, w, Some(b), opts).unwrap();
        let weights = random(ctx.numel(y).unwrap());
        weighted_sum_bits(&mut ctx, y, &weights)
    }),
    // A batch large enough that the bias gradient's channel sums are
    // split across threads, with an input whose gradient another use has
    // already begun (the columns fold into it by adding, not writing).
    (
        "conv2d bias split by channels, input gradient accumulated",
        || {
            let mut rng = Rng(39);
            let mut random =
                |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32).collect() };
            let mut ctx = Context::new();
            let x = ctx
                .param(&[32, 8, 28, 28], Some(&random(32 * 8 * 784)))
                .unwrap();
            let w = ctx
                .param(&[16, 8, 3, 3], Some(&random(16 * 8 * 9)))
                .unwrap();
            let b = ctx.param(&[16], Some(&random(16))).unwrap();
            let opts = arenagrad::Conv2dOptions {
                padding: [1, 1],
                ..Default::default()
            };
            let y = ctx.conv2d(x, w, Some(b), opts).unwrap();
            let flat = ctx.reshape(y, &[32, 16 * 8 * 98]).unwrap();
            // Recorded after the convolution, so its backward runs first.
            let x_flat = ctx.reshape(x, &[32, 16 * 8 * 98 / 2]).unwrap();
            let both = ctx.concat(&[flat, x_flat], 1).unwrap();
            let weights = random(ctx.numel(both).unwrap());
            weighted_sum_bits(&mut ctx, both, &weights)
        },
    ),
    // Pools large enough to be cut by planes: overlapping max windows
    // (shared input pixels in the backward), average windows clipped by
    // padding and ceil mode, and the global average.
    ("max, average and global pooling", || {
        let mut random = normals(34);
        let mut ctx = Context::new();
        let x = ctx
            .param(&[32, 32, 16, 16], Some(&random(32 * 32 * 256)))
            .unwrap();
        let overlapping = arenagrad::Pool2dOptions {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            ceil_mode: false,
        };
        let clipped = arenagrad::Pool2dOptions {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
            ceil_mode: true,
        };
        let m = ctx.max_pool2d(x, overlapping).unwrap();
        let a = ctx.avg_pool2d(m, clipped, false).unwrap();
        let g = ctx.global_avg_pool2d(a).unwrap();
        let weights = random(ctx.numel(g).unwrap());
        weighted_sum_bits(&mut ctx, g, &weights)
    }),
];

#[test]
fn every_case_gives_the_same_bits_at_every_thread_count() {
    for (name, case) in CASES {
        arenagrad::set_num_threads(1);
        let one = case();
        for &n in &COUNTS[1..] {
            arenagrad::set_num_threads(n);
            let many = case();
            assert!(
                one.losses == many.losses,
                "{name}: losses differ at {n} threads"
            );
            assert!(
                one.grads == many.grads,
                "{name}: gradients differ at {n} threads"
            );
            assert!(
                one.params == many.params,
                "{name}: parameters differ at {n} threads"
            );
        }
        eprintln!("{name}: the same bits at {COUNTS:?} threads");
    }
    arenagrad::set_num_threads(0);
}

/// Capture and replay give the eager bits (at one thread count: the test
/// above carries it to the others).
#[test]
fn replayed_gpt_matches_eager() {
    let eager = gpt_eager(GptConfig::small, RecomputePolicy::None);
    let replayed = gpt_replayed(GptConfig::small);
    assert!(eager.losses == replayed.losses, "losses");
    assert!(eager.params == replayed.params, "parameters");
}

//! Data-parallel training through the flat gradient block, without MPI:
//! two contexts (the "ranks") each run forward and backward on half of a
//! batch's rows; their gradients, averaged through `grads_copy_out` and
//! `grads_copy_in` (what an all-reduce does), equal the gradients of one
//! context on the whole batch within float rounding, and the two replicas
//! stay bit-identical to each other while they train.
//!
//! Tolerance: the two sides compute the same sums in a different order. The
//! loss is a mean over B*T tokens; a half batch's mean is over B*T/2, and
//! averaging the two halves' gradients multiplies by 0.5: both scalings are
//! exact powers of two. What differs is association: a weight gradient is
//! a sum over all B*T rows (one GEMM on the full batch; two GEMMs of half
//! the rows, then one addition), and f32 sums of n terms in two orders
//! differ by a few units of f32 rounding (eps = 2^-23 ~ 1.2e-7) of the sum
//! of the terms' magnitudes. With n = 256 rows and terms of mixed signs,
//! the bound is taken relative to each tensor's largest gradient: every
//! element within 1e-5 of it (about 80 eps), and the measured figure is
//! printed.

mod common;

use arenagrad::{Context, Tensor};
use common::gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use common::text::{generated_text, shakespeare_tiny};

const REL_TOL: f32 = 1e-5;

struct Side {
    ctx: Context,
    gpt: Gpt,
}

fn side(cfg: GptConfig) -> Side {
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg, 1).unwrap();
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    Side { ctx, gpt }
}

impl Side {
    /// reset, forward on `rows` sequences, backward; returns the loss.
    fn backward(&mut self, ids: &[i32], targets: &[i32], rows: usize) -> f32 {
        let t = self.gpt.cfg.block_size;
        self.ctx.reset();
        let loss = self.gpt.loss(&mut self.ctx, ids, targets, rows, t).unwrap();
        let v = self.ctx.item(loss).unwrap();
        self.ctx.backward(loss).unwrap();
        v
    }

    fn step(&mut self) {
        self.ctx.clip_grad_norm(1.0).unwrap();
        self.ctx.optimizer_step().unwrap();
        self.ctx.zero_grad();
    }

    fn params(&self) -> Vec<f32> {
        let mut all = Vec::new();
        for p in self.ctx.params() {
            let mut v = vec![0.0; self.ctx.numel(p).unwrap()];
            self.ctx.read(p, &mut v).unwrap();
            all.extend(v);
        }
        all
    }
}

/// Largest |a - b| over a parameter's gradient, relative to its largest |b|.
fn worst_relative(ctx: &Context, a: &[f32], b: &[f32]) -> (f32, usize) {
    let (mut worst, mut at, mut off) = (0.0f32, 0, 0);
    for (i, p) in ctx.params().enumerate() {
        let n = ctx.numel(p).unwrap();
        let (ga, gb) = (&a[off..off + n], &b[off..off + n]);
        let scale = gb.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        let diff = ga
            .iter()
            .zip(gb)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        if scale > 0.0 && diff / scale > worst {
            worst = diff / scale;
            at = i;
        }
        off += n;
    }
    (worst, at)
}

fn param_of(ctx: &Context, i: usize) -> Tensor {
    ctx.param_at(i).unwrap()
}

#[test]
fn two_half_batches_averaged_equal_one_full_batch() {
    let text = shakespeare_tiny().unwrap_or_else(|| generated_text(200_000));
    let (vocab, v) = vocabulary(&text);
    let full_cfg = GptConfig::tiny(v);
    let (b, t) = (full_cfg.batch, full_cfg.block_size);
    let half_cfg = GptConfig {
        batch: b / 2,
        ..full_cfg
    };
    let mut full = side(full_cfg);
    let mut ranks = [side(half_cfg), side(half_cfg)];
    let n = full.ctx.grads_len();
    assert_eq!(n, full.gpt.num_params());
    assert_eq!(full.params(), ranks[1].params(), "same initialisation");

    let mut rng = Rng(5);
    let (mut ids, mut targets) = (vec![0i32; b * t], vec![0i32; b * t]);
    let (mut g0, mut g1) = (vec![0.0f32; n], vec![0.0f32; n]);
    let mut worst_grad = 0.0f32;
    let mut worst_loss = 0.0f64;
    for step in 0..10 {
        // Every rank draws the same global batch and takes its rows.
        sample_batch(&mut rng, &text, &vocab, t, &mut ids, &mut targets);
        let want = full.backward(&ids, &targets, b);
        let h = b / 2 * t;
        let l0 = ranks[0].backward(&ids[..h], &targets[..h], b / 2);
        let l1 = ranks[1].backward(&ids[h..], &targets[h..], b / 2);
        // The all-reduce: sum, then scale by 1/world, on every rank.
        ranks[0].ctx.grads_copy_out(&mut g0).unwrap();
        ranks[1].ctx.grads_copy_out(&mut g1).unwrap();
        let avg: Vec<f32> = g0.iter().zip(&g1).map(|(a, b)| (a + b) * 0.5).collect();
        for r in &mut ranks {
            r.ctx.grads_copy_in(&avg).unwrap();
        }
        let got = 0.5 * (l0 as f64 + l1 as f64);
        let rel = (got - want as f64).abs() / want as f64;
        worst_loss = worst_loss.max(rel);
        assert!(rel < 1e-5, "step {step}: loss {got} vs {want}");
        if step == 0 {
            // Same parameters on both sides: the gradients must agree.
            let (worst, at) = worst_relative(&full.ctx, &avg, full.ctx.grads());
            let name = full.ctx.param_name(param_of(&full.ctx, at)).unwrap();
            assert!(
                worst <= REL_TOL,
                "gradient of {name} differs by {worst:e} of its largest element"
            );
            worst_grad = worst;
        }
        full.step();
        for r in &mut ranks {
            r.step();
        }
        assert_eq!(
            ranks[0].params(),
            ranks[1].params(),
            "step {step}: the replicas diverged"
        );
    }
    let (pf, pr) = (full.params(), ranks[0].params());
    let worst_param = pf
        .iter()
        .zip(&pr)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    println!(
        "data parallel, 2 x {} rows vs {b}: gradients within {worst_grad:.2e} of each tensor's largest, losses within {worst_loss:.2e} relative over 10 steps, parameters within {worst_param:.2e}; replicas bit-identical",
        b / 2
    );
    assert!(worst_param < 1e-4, "parameters drifted by {worst_param}");
}

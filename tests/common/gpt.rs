//! A GPT-2 style character model built from the public ops: the Rust twin
//! of `c_examples/train_full/`. Not part of the library: the integration
//! tests include it through `mod common;`, the examples with
//! `#[path = "../tests/common/gpt.rs"] mod gpt;`.
// The library's `Error` carries the op name and both shapes inline so that
// reporting a failure never allocates on the hot path; the size is the price.
#![allow(clippy::result_large_err)]

use arenagrad::{Context, OptimizerKind, Result, Tensor};

/// Model and batch dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptConfig {
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    /// Context length T.
    pub block_size: usize,
    pub vocab_size: usize,
    /// Batch size B.
    pub batch: usize,
}

impl GptConfig {
    /// L=1 NH=2 C=32 T=32 B=8.
    pub fn tiny(vocab_size: usize) -> GptConfig {
        GptConfig {
            n_layer: 1,
            n_head: 2,
            n_embd: 32,
            block_size: 32,
            vocab_size,
            batch: 8,
        }
    }
    /// L=4 NH=4 C=128 T=64 B=16.
    pub fn small(vocab_size: usize) -> GptConfig {
        GptConfig {
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
            block_size: 64,
            vocab_size,
            batch: 16,
        }
    }
    /// L=6 NH=6 C=192 T=128 B=16.
    pub fn medium(vocab_size: usize) -> GptConfig {
        GptConfig {
            n_layer: 6,
            n_head: 6,
            n_embd: 192,
            block_size: 128,
            vocab_size,
            batch: 16,
        }
    }
    pub fn preset(name: &str, vocab_size: usize) -> Option<GptConfig> {
        match name {
            "tiny" => Some(Self::tiny(vocab_size)),
            "small" => Some(Self::small(vocab_size)),
            "medium" => Some(Self::medium(vocab_size)),
            _ => None,
        }
    }
    /// Tokens per training step.
    pub fn tokens(&self) -> usize {
        self.batch * self.block_size
    }
}

struct Block {
    ln1: [Tensor; 2],
    qkv: [Tensor; 2],
    proj: [Tensor; 2],
    ln2: [Tensor; 2],
    fc: [Tensor; 2],
    fc_proj: [Tensor; 2],
}

/// Parameters of the model (handles into the context).
pub struct Gpt {
    pub cfg: GptConfig,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: [Tensor; 2],
    /// Marks each block as a recomputation segment (its output, the
    /// residual stream, is the segment's one output); which segments are
    /// recomputed is the context's policy.
    pub segments: bool,
}

/// SplitMix64: small, seedable, good enough for initialisation and batches.
#[derive(Clone, Copy, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

impl Gpt {
    /// Creates the parameters: weights N(0, 0.02), biases 0, LayerNorm 1/0.
    pub fn new(ctx: &mut Context, cfg: GptConfig, seed: u64) -> Result<Gpt> {
        let mut rng = Rng(seed);
        let (c, v, t) = (cfg.n_embd, cfg.vocab_size, cfg.block_size);
        let mut normal = |ctx: &mut Context, shape: &[usize]| -> Result<Tensor> {
            let n = shape.iter().product();
            let init: Vec<f32> = (0..n).map(|_| (rng.normal() * 0.02) as f32).collect();
            ctx.param(shape, Some(&init))
        };
        let wte = normal(ctx, &[v, c])?;
        let wpe = normal(ctx, &[t, c])?;
        let ones = vec![1.0f32; c];
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for _ in 0..cfg.n_layer {
            let ln1 = [ctx.param(&[c], Some(&ones))?, ctx.param(&[c], None)?];
            let qkv = [normal(ctx, &[c, 3 * c])?, ctx.param(&[3 * c], None)?];
            let proj = [normal(ctx, &[c, c])?, ctx.param(&[c], None)?];
            let ln2 = [ctx.param(&[c], Some(&ones))?, ctx.param(&[c], None)?];
            let fc = [normal(ctx, &[c, 4 * c])?, ctx.param(&[4 * c], None)?];
            let fc_proj = [normal(ctx, &[4 * c, c])?, ctx.param(&[c], None)?];
            blocks.push(Block {
                ln1,
                qkv,
                proj,
                ln2,
                fc,
                fc_proj,
            });
        }
        let ln_f = [ctx.param(&[c], Some(&ones))?, ctx.param(&[c], None)?];
        Ok(Gpt {
            cfg,
            wte,
            wpe,
            blocks,
            ln_f,
            segments: false,
        })
    }

    /// Number of parameter floats.
    pub fn num_params(&self) -> usize {
        let (c, v, t, l) = (
            self.cfg.n_embd,
            self.cfg.vocab_size,
            self.cfg.block_size,
            self.cfg.n_layer,
        );
        v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c
    }

    /// Logits [b*t, V] for `ids` ([b, t] row-major, t <= block_size).
    pub fn forward(&self, ctx: &mut Context, ids: &[i32], b: usize, t: usize) -> Result<Tensor> {
        let c = self.cfg.n_embd;
        let tok = ctx.embedding(self.wte, ids)?; // [b*t, C]
        let tok = ctx.reshape(tok, &[b, t, c])?;
        let pos = if t == self.cfg.block_size {
            self.wpe
        } else {
            // Positions 0..t of wpe: an embedding lookup keeps the gradient.
            let idx: [i32; 1024] = std::array::from_fn(|i| i as i32);
            ctx.embedding(self.wpe, &idx[..t.min(1024)])?
        };
        let mut x = ctx.add(tok, pos)?; // [b, t, C], wpe broadcast over b
        for blk in &self.blocks {
            if self.segments {
                ctx.segment_begin()?;
            }
            let h = ctx.layernorm(x, blk.ln1[0], blk.ln1[1])?;
            let qkv = ctx.linear(h, blk.qkv[0], Some(blk.qkv[1]))?; // [b, t, 3C]
            let att = ctx.attention(qkv, self.cfg.n_head)?; // [b, t, C]
            let att = ctx.linear(att, blk.proj[0], Some(blk.proj[1]))?;
            x = ctx.add(x, att)?;
            let h = ctx.layernorm(x, blk.ln2[0], blk.ln2[1])?;
            let h = ctx.linear(h, blk.fc[0], Some(blk.fc[1]))?; // [b, t, 4C]
            let h = ctx.gelu(h)?;
            let h = ctx.linear(h, blk.fc_proj[0], Some(blk.fc_proj[1]))?;
            x = ctx.add(x, h)?;
            if self.segments {
                ctx.segment_end(&[x])?;
            }
        }
        let x = ctx.layernorm(x, self.ln_f[0], self.ln_f[1])?;
        let x = ctx.reshape(x, &[b * t, c])?;
        ctx.matmul(x, self.wte, false, true) // tied: [b*t, V]
    }

    /// Mean cross-entropy of the next-token predictions.
    pub fn loss(
        &self,
        ctx: &mut Context,
        ids: &[i32],
        targets: &[i32],
        b: usize,
        t: usize,
    ) -> Result<Tensor> {
        let logits = self.forward(ctx, ids, b, t)?;
        ctx.cross_entropy(logits, targets)
    }

    /// The default optimizer: AdamW(lr, 0.9, 0.999, 1e-8, 0).
    pub fn adamw(ctx: &mut Context, lr: f32) -> Result<()> {
        ctx.optimizer(OptimizerKind::AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        })
    }

    /// One full training step (reset, forward, backward, clip at 1.0,
    /// AdamW, zero_grad); returns the loss.
    pub fn train_step(&self, ctx: &mut Context, ids: &[i32], targets: &[i32]) -> Result<f32> {
        self.train_step_observed(ctx, ids, targets, |_| {})
    }

    /// [`Gpt::train_step`], showing `after_backward` the context between
    /// backward and the clip, while the gradients are the batch's own.
    pub fn train_step_observed(
        &self,
        ctx: &mut Context,
        ids: &[i32],
        targets: &[i32],
        mut after_backward: impl FnMut(&Context),
    ) -> Result<f32> {
        ctx.reset();
        let loss = self.loss(ctx, ids, targets, self.cfg.batch, self.cfg.block_size)?;
        let value = ctx.item(loss)?;
        ctx.backward(loss)?;
        after_backward(ctx);
        ctx.clip_grad_norm(1.0)?;
        ctx.optimizer_step()?;
        ctx.zero_grad();
        Ok(value)
    }
}

/// Fills `ids`/`targets` (`[B*T]` each) with random windows of `data`.
pub fn sample_batch(
    rng: &mut Rng,
    data: &[u8],
    vocab: &[u8; 256],
    t: usize,
    ids: &mut [i32],
    targets: &mut [i32],
) {
    for (row_ids, row_tg) in ids.chunks_exact_mut(t).zip(targets.chunks_exact_mut(t)) {
        let start = rng.below(data.len() - t - 1);
        for j in 0..t {
            row_ids[j] = vocab[data[start + j] as usize] as i32;
            row_tg[j] = vocab[data[start + j + 1] as usize] as i32;
        }
    }
}

/// Byte -> token map over the sorted distinct bytes of `text`; returns
/// (map, vocabulary size).
pub fn vocabulary(text: &[u8]) -> ([u8; 256], usize) {
    let mut seen = [false; 256];
    text.iter().for_each(|&b| seen[b as usize] = true);
    let mut map = [0u8; 256];
    let mut n = 0usize;
    for (b, &s) in seen.iter().enumerate() {
        if s {
            map[b] = n as u8;
            n += 1;
        }
    }
    (map, n)
}

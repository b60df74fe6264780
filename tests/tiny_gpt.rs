//! Model test: the tiny GPT with a fixed seed. Its first losses are pinned, it learns, a
//! whole-model finite-difference check agrees with backward, backward is
//! reproducible bit for bit, and a zero upstream gradient gives exactly-zero
//! gradients.

mod common;

use arenagrad::{Context, Tensor};
use common::gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use common::text::{generated_text, shakespeare_tiny};

/// Where the text came from: the pins differ between the two.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Source {
    Shakespeare,
    Generated,
}

/// The tiny Shakespeare corpus if present, else a generated text, said on
/// stderr: the Shakespeare pins are then not checked. Under CI (`CI` set),
/// where the corpus is always laid beside the repository, its absence fails.
fn corpus() -> (Vec<u8>, Source) {
    match shakespeare_tiny() {
        Some(t) => (t, Source::Shakespeare),
        None => {
            let why = "../shared/data/shakespeare_tiny.txt is absent: \
                       the Shakespeare pins are not checked, generated text instead";
            assert!(std::env::var_os("CI").is_none(), "tiny_gpt: {why}");
            eprintln!("tiny_gpt: {why}");
            (generated_text(200_000), Source::Generated)
        }
    }
}

const MODEL_SEED: u64 = 1;
const DATA_SEED: u64 = 5;
const LR: f32 = 3e-3;

struct Run {
    ctx: Context,
    gpt: Gpt,
    text: Vec<u8>,
    map: [u8; 256],
    rng: Rng,
    ids: Vec<i32>,
    targets: Vec<i32>,
}

impl Run {
    fn new(text: Vec<u8>, batch: usize) -> Run {
        let (map, v) = vocabulary(&text);
        let cfg = GptConfig {
            batch,
            ..GptConfig::tiny(v)
        };
        let mut ctx = Context::new();
        let gpt = Gpt::new(&mut ctx, cfg, MODEL_SEED).unwrap();
        Gpt::adamw(&mut ctx, LR).unwrap();
        Run {
            ctx,
            gpt,
            text,
            map,
            rng: Rng(DATA_SEED),
            ids: vec![0; cfg.tokens()],
            targets: vec![0; cfg.tokens()],
        }
    }

    fn next_batch(&mut self) {
        let t = self.gpt.cfg.block_size;
        sample_batch(
            &mut self.rng,
            &self.text,
            &self.map,
            t,
            &mut self.ids,
            &mut self.targets,
        );
    }

    fn train_step(&mut self) -> f32 {
        self.next_batch();
        self.gpt
            .train_step(&mut self.ctx, &self.ids, &self.targets)
            .unwrap()
    }

    /// The loss of the current batch, forward only (grad mode off).
    fn loss_only(&mut self) -> f32 {
        let (b, t) = (self.gpt.cfg.batch, self.gpt.cfg.block_size);
        self.ctx.set_grad_enabled(false);
        self.ctx.reset();
        let l = self
            .gpt
            .loss(&mut self.ctx, &self.ids, &self.targets, b, t)
            .unwrap();
        let v = self.ctx.item(l).unwrap();
        self.ctx.set_grad_enabled(true);
        v
    }

    /// Backward of `scale * loss` on the current batch; returns every
    /// parameter gradient (and zeroes them in the context).
    fn gradients(&mut self, scale: Option<f32>) -> Vec<Vec<f32>> {
        let (b, t) = (self.gpt.cfg.batch, self.gpt.cfg.block_size);
        let ctx = &mut self.ctx;
        ctx.reset();
        let mut l = self.gpt.loss(ctx, &self.ids, &self.targets, b, t).unwrap();
        if let Some(s) = scale {
            l = ctx.scale(l, s).unwrap();
        }
        ctx.backward(l).unwrap();
        let params: Vec<Tensor> = ctx.params().collect();
        let grads = params
            .iter()
            .map(|&p| {
                let mut g = vec![0.0f32; ctx.shape(p).unwrap().numel()];
                ctx.read_grad(p, &mut g).unwrap();
                g
            })
            .collect();
        ctx.zero_grad();
        grads
    }
}

fn ln_v(run: &Run) -> f32 {
    (run.gpt.cfg.vocab_size as f32).ln()
}

// ---- pinned losses and learning ----------------------------------------------------

/// First five losses of `Run::new(text, 8)` trained with `train_step`,
/// recorded once (OpenBLAS, this seed) and kept to catch any change of
/// numerics across refactors. Tolerance 1e-4 (absolute).
const PINNED_SHAKESPEARE: [f32; 5] = [
    4.357_038_5,
    4.260_003,
    4.175_994_4,
    4.078_685_3,
    4.033_586_5,
];
const PINNED_GENERATED: [f32; 5] = [3.221_717_1, 3.124_427, 3.049_972_5, 2.996_642, 2.954_419_6];

fn pinned_losses(text: Vec<u8>, source: Source) {
    let mut run = Run::new(text, 8);
    let got: Vec<f32> = (0..5).map(|_| run.train_step()).collect();
    let want = match source {
        Source::Shakespeare => PINNED_SHAKESPEARE,
        Source::Generated => PINNED_GENERATED,
    };
    eprintln!("[pinned {source:?}] first five losses: {got:?}");
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4,
            "{source:?}: loss {i} is {g}, pinned {w}"
        );
    }
}

#[test]
fn first_five_losses_are_pinned() {
    let (text, source) = corpus();
    pinned_losses(text, source);
}

#[test]
fn first_five_losses_are_pinned_on_generated_text() {
    pinned_losses(generated_text(200_000), Source::Generated);
}

#[test]
fn loss_falls_below_80_percent_of_ln_v_within_300_steps() {
    let (text, source) = corpus();
    let mut run = Run::new(text, 8);
    let target = 0.8 * ln_v(&run);
    let first = run.train_step();
    assert!(
        (first - ln_v(&run)).abs() < 0.2,
        "initial loss {first} vs ln V {}",
        ln_v(&run)
    );
    let mut reached = None;
    let mut last = first;
    for step in 2..=300 {
        last = run.train_step();
        assert!(last.is_finite(), "step {step}: {last}");
        if last < target {
            reached = Some(step);
            break;
        }
    }
    eprintln!(
        "[learning {source:?}] V = {}, ln V = {:.4}, target {target:.4}: loss {first:.4} -> {last:.4}, below target at step {reached:?}",
        run.gpt.cfg.vocab_size,
        ln_v(&run)
    );
    assert!(
        reached.is_some(),
        "loss {last} still above {target} after 300 steps"
    );
}

// ---- whole-model gradient check -------------------------------------------------------

// Tolerances, tuned on the data rather than loosened to pass: with h = 1e-2
// on an f32 forward the 4-point stencil's noise is the loss's rounding
// (~5e-7 per evaluation) times 18 / (12 h), about 1e-5; the measured worst
// |numeric - analytic| over 256 coordinates is 1.7e-5 (mean 5e-6). The brief's starting
// point (atol 2e-3, rtol 5e-2) would let most coordinates of this model
// (|grad| ~ 1e-4..1e-2) pass even with a zero gradient, so the check uses
// atol 1e-4, rtol 1e-2 (worst case at 17% of the allowance) and also
// requires that at least half the checked gradients exceed 3 atol.
const COORDS: usize = 256;
const H: f32 = 1e-2;
const ATOL: f64 = 1e-4;
const RTOL: f64 = 1e-2;

#[test]
fn whole_model_gradient_check() {
    let (text, _) = corpus();
    let mut run = Run::new(text, 2);
    // A few steps first, so biases and LayerNorm parameters are no longer
    // at their symmetric initial values.
    for _ in 0..10 {
        run.train_step();
    }
    run.next_batch();
    let grads = run.gradients(None);
    let params: Vec<Tensor> = run.ctx.params().collect();
    let mut rng = Rng(77);
    let mut worst = (0.0f64, 0usize, 0usize, 0.0f64, 0.0f64);
    let mut significant = 0;
    let mut report = Vec::new();
    for k in 0..COORDS {
        // Round-robin over the parameters, a random coordinate in each.
        let pi = k % params.len();
        let p = params[pi];
        let n = grads[pi].len();
        let i = rng.below(n);
        let mut v = vec![0.0f32; n];
        run.ctx.read(p, &mut v).unwrap();
        let x0 = v[i];
        let f = |dx: f32, run: &mut Run, v: &mut Vec<f32>| -> f64 {
            v[i] = x0 + dx;
            run.ctx.param_write(p, v).unwrap();
            run.loss_only() as f64
        };
        let (fp1, fm1) = (f(H, &mut run, &mut v), f(-H, &mut run, &mut v));
        let (fp2, fm2) = (f(2.0 * H, &mut run, &mut v), f(-2.0 * H, &mut run, &mut v));
        v[i] = x0;
        run.ctx.param_write(p, &v).unwrap();
        let h = H as f64;
        let numeric = (8.0 * (fp1 - fm1) - (fp2 - fm2)) / (12.0 * h);
        let analytic = grads[pi][i] as f64;
        let err = (numeric - analytic).abs();
        let allowed = ATOL + RTOL * numeric.abs();
        if analytic.abs() > 3.0 * ATOL {
            significant += 1;
        }
        if err / allowed > worst.0 {
            worst = (err / allowed, pi, i, analytic, numeric);
        }
        report.push((pi, i, analytic, numeric, err));
        assert!(
            err <= allowed,
            "param {pi} coord {i}: analytic {analytic:.6e}, numeric {numeric:.6e}, |diff| {err:.3e} > {allowed:.3e}"
        );
    }
    let mean_err = report.iter().map(|r| r.4).sum::<f64>() / report.len() as f64;
    // Not vacuous: most checked gradients are well above the absolute tolerance.
    assert!(
        significant * 2 >= COORDS,
        "only {significant} of {COORDS} gradients exceed 3 atol"
    );
    eprintln!(
        "[gradcheck] {COORDS} coordinates over {} parameters, h = {H}, atol {ATOL}, rtol {RTOL}: worst err/allowed {:.3} (param {} coord {}: analytic {:.6e} numeric {:.6e}); mean |diff| {mean_err:.2e}; {significant} with |grad| > 3 atol",
        params.len(),
        worst.0,
        worst.1,
        worst.2,
        worst.3,
        worst.4
    );
}

// ---- reproducibility and zero upstream gradient -----------------------------------------

#[test]
fn two_backward_passes_give_bit_identical_gradients() {
    let (text, _) = corpus();
    let mut run = Run::new(text, 4);
    for _ in 0..3 {
        run.train_step();
    }
    run.next_batch();
    let g1 = run.gradients(None);
    let g2 = run.gradients(None);
    let bits =
        |g: &Vec<Vec<f32>>| -> Vec<u32> { g.iter().flatten().map(|x| x.to_bits()).collect() };
    assert_eq!(bits(&g1), bits(&g2));
    assert!(
        g1.iter().flatten().any(|&x| x != 0.0),
        "gradients are not all zero"
    );
}

#[test]
fn zero_upstream_gradient_gives_exactly_zero_gradients() {
    let (text, _) = corpus();
    let mut run = Run::new(text, 4);
    for _ in 0..3 {
        run.train_step();
    }
    run.next_batch();
    let g = run.gradients(Some(0.0));
    let bad: Vec<_> = g
        .iter()
        .enumerate()
        .flat_map(|(p, v)| v.iter().enumerate().map(move |(i, &x)| (p, i, x)))
        .filter(|&(_, _, x)| x != 0.0)
        .take(5)
        .collect();
    assert!(
        bad.is_empty(),
        "non-zero gradients from a zero upstream gradient: {bad:?}"
    );
    // The same batch with scale 1 does give gradients (the check is not vacuous).
    let g1 = run.gradients(Some(1.0));
    assert!(g1.iter().flatten().any(|&x| x != 0.0));
}

/// The model on a short repeated sentence: its parameter count fits the
/// parameter bytes, and 60 AdamW steps take the loss from ln V to well below.
#[test]
fn tiny_gpt_learns_and_counts_params() {
    let text: Vec<u8> = b"to be or not to be, that is the question. "
        .iter()
        .cycle()
        .take(4000)
        .copied()
        .collect();
    let (map, v) = vocabulary(&text);
    let cfg = GptConfig {
        batch: 4,
        ..GptConfig::tiny(v)
    };
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg, 1).unwrap();
    assert!(ctx.memory_stats().param_bytes as usize / 8 >= gpt.num_params());
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    let mut rng = Rng(2);
    let (mut ids, mut tg) = (vec![0; cfg.tokens()], vec![0; cfg.tokens()]);
    let mut first = 0.0;
    let mut last = 0.0;
    for i in 0..60 {
        sample_batch(&mut rng, &text, &map, cfg.block_size, &mut ids, &mut tg);
        last = gpt.train_step(&mut ctx, &ids, &tg).unwrap();
        if i == 0 {
            first = last;
        }
    }
    assert!(
        (first - (v as f32).ln()).abs() < 0.2,
        "initial loss {first} vs ln V"
    );
    assert!(last < first * 0.6, "{first} -> {last}");
}

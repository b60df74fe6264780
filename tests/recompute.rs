//! Recomputation segments: training with segments recomputed gives the same
//! bits as training without (losses, gradients, parameters), the arena
//! shrinks accordingly, `auto` picks a stable set under a cap, and handles
//! to a segment's internal tensors are refused after it ends.

mod common;

use arenagrad::{Context, Error, RecomputePolicy, Tensor};
use common::gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use common::text::{generated_text, shakespeare_tiny};

const STEPS: usize = 4;

fn corpus() -> Vec<u8> {
    shakespeare_tiny().unwrap_or_else(|| generated_text(200_000))
}

/// Tiny: one block, and nothing large enough to wake the worker thread.
fn tiny(v: usize) -> GptConfig {
    GptConfig::tiny(v)
}

/// Two blocks, large enough that the big kernels (products, attention,
/// GELU, LayerNorm, residual adds, bias sums) run on two threads.
fn two_blocks(v: usize) -> GptConfig {
    GptConfig {
        n_layer: 2,
        n_head: 4,
        n_embd: 128,
        block_size: 64,
        vocab_size: v,
        batch: 16,
    }
}

/// What a run leaves behind: per step the loss and the parameter
/// gradients (before the update), then the parameters; all as bits.
#[derive(PartialEq, Eq, Debug)]
struct Trace {
    losses: Vec<u32>,
    grads: Vec<Vec<u32>>,
    params: Vec<u32>,
    high_water: u64,
    recomputed: u64,
}

/// Trains `STEPS` steps of `cfg` with segments under `policy` and `limit`;
/// `single` keeps every kernel on the calling thread.
fn run(
    cfg: fn(usize) -> GptConfig,
    policy: RecomputePolicy,
    limit: Option<usize>,
    single: bool,
) -> Trace {
    let text = corpus();
    let (map, v) = vocabulary(&text);
    let mut gpt_cfg = cfg(v);
    gpt_cfg.vocab_size = v;
    let mut ctx = Context::new();
    ctx.set_single_thread_for_test(single);
    let mut gpt = Gpt::new(&mut ctx, gpt_cfg, 7).unwrap();
    gpt.segments = true;
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    ctx.set_recompute(policy);
    ctx.set_arena_limit(limit);
    let mut rng = Rng(11);
    let n = gpt_cfg.tokens();
    let (mut ids, mut targets) = (vec![0; n], vec![0; n]);
    let mut trace = Trace {
        losses: vec![],
        grads: vec![],
        params: vec![],
        high_water: 0,
        recomputed: 0,
    };
    let t = gpt_cfg.block_size;
    for _ in 0..STEPS {
        sample_batch(&mut rng, &text, &map, t, &mut ids, &mut targets);
        let loss = gpt
            .train_step_observed(&mut ctx, &ids, &targets, |ctx| {
                trace.grads.push(common::param_bits(ctx, true));
                trace.recomputed = ctx.memory_stats().recomputed_segments;
            })
            .unwrap();
        trace.losses.push(loss.to_bits());
    }
    trace.params = common::param_bits(&ctx, false);
    trace.high_water = ctx.memory_stats().arena_high_water_bytes;
    trace
}

fn check_bit_identical(name: &str, cfg: fn(usize) -> GptConfig, single: bool) {
    let none = run(cfg, RecomputePolicy::None, None, single);
    let all = run(cfg, RecomputePolicy::All, None, single);
    let layers = cfg(1).n_layer as u64;
    assert_eq!(none.recomputed, 0);
    assert_eq!(all.recomputed, layers, "{name}: all recomputes every block");
    assert_eq!(all.losses, none.losses, "{name}: losses");
    assert_eq!(all.grads, none.grads, "{name}: gradients");
    assert_eq!(all.params, none.params, "{name}: parameters");
    println!(
        "{name}: {STEPS} steps bit-identical with every block recomputed; arena high-water none {} B, all {} B",
        none.high_water, all.high_water
    );
    if layers < 2 {
        // One recomputed segment saves nothing: the scratch region is as
        // large as what it frees, and its output is copied out besides.
        return;
    }
    assert!(
        all.high_water < none.high_water,
        "{name}: recomputing every block uses {} bytes, not less than {}",
        all.high_water,
        none.high_water
    );
    // A cap between the two needs: auto recomputes some blocks, and the
    // bits still agree.
    let cap = (all.high_water + none.high_water) as usize / 2;
    let auto = run(cfg, RecomputePolicy::Auto, Some(cap), single);
    assert!(auto.recomputed >= 1 && auto.recomputed <= layers);
    assert!(auto.high_water as usize <= cap);
    assert_eq!(auto.losses, none.losses, "{name}: auto losses");
    assert_eq!(auto.grads, none.grads, "{name}: auto gradients");
    assert_eq!(auto.params, none.params, "{name}: auto parameters");
    println!(
        "{name}: auto under cap {cap} B: {} B, {} of {layers} blocks recomputed, bit-identical",
        auto.high_water, auto.recomputed
    );
}

#[test]
fn tiny_gpt_is_bit_identical_with_recomputation() {
    check_bit_identical("tiny", tiny, true);
}

#[test]
fn two_block_gpt_is_bit_identical_with_recomputation_on_one_thread() {
    check_bit_identical("2 blocks, 1 thread", two_blocks, true);
}

#[test]
fn two_block_gpt_is_bit_identical_with_recomputation_on_two_threads() {
    check_bit_identical("2 blocks, 2 threads", two_blocks, false);
}

/// The worker thread changes which thread computes what, never the bits:
/// each split kernel's halves are the one-thread kernel on disjoint parts.
#[test]
fn one_and_two_threads_give_the_same_bits() {
    let one = run(two_blocks, RecomputePolicy::None, None, true);
    let two = run(two_blocks, RecomputePolicy::None, None, false);
    assert_eq!(one.losses, two.losses, "losses");
    assert_eq!(one.grads, two.grads, "gradients");
    assert_eq!(one.params, two.params, "parameters");
}

/// `auto` measures the first iteration and then keeps the same choice,
/// the fewest blocks that fit, while the graph repeats.
#[test]
fn auto_choice_is_minimal_and_stable() {
    let text = corpus();
    let (map, v) = vocabulary(&text);
    let cfg = GptConfig::small(v);
    let mut ctx = Context::new();
    let mut gpt = Gpt::new(&mut ctx, cfg, 7).unwrap();
    gpt.segments = true;
    Gpt::adamw(&mut ctx, 3e-3).unwrap();
    let mut rng = Rng(3);
    let (mut ids, mut targets) = (vec![0; cfg.tokens()], vec![0; cfg.tokens()]);
    let t = cfg.block_size;
    let mut step = |ctx: &mut Context| {
        sample_batch(&mut rng, &text, &map, t, &mut ids, &mut targets);
        gpt.train_step(ctx, &ids, &targets).unwrap();
        ctx.memory_stats()
    };
    let first = step(&mut ctx).arena_used_bytes;
    let none = step(&mut ctx).arena_used_bytes;
    assert_eq!(first, none);
    let stats = ctx.memory_stats();
    assert_eq!(
        stats.arena_need_none_bytes, none,
        "need without recomputation"
    );
    let need_all = stats.arena_need_all_bytes;
    assert!(need_all < none);
    // One byte short of the no-recompute need: one block is enough.
    ctx.set_recompute(RecomputePolicy::Auto);
    ctx.set_arena_limit(Some(none as usize - 1));
    let mut counts = vec![];
    for _ in 0..4 {
        let s = step(&mut ctx);
        assert!(s.arena_used_bytes < none);
        counts.push(s.recomputed_segments);
    }
    // One recomputed block alone saves nothing (the scratch region is as
    // large as what it frees, and its output is copied out): two are the
    // fewest that fit.
    assert_eq!(counts, [2, 2, 2, 2], "auto under a cap just below the need");
    println!(
        "small: need {none} B without recomputation, {need_all} B with every block recomputed"
    );
    // The all-recompute need as the cap: every block, and it fits exactly.
    ctx.set_arena_limit(Some(need_all as usize));
    let s = step(&mut ctx);
    assert_eq!(s.recomputed_segments, cfg.n_layer as u64);
    assert_eq!(s.arena_used_bytes, need_all, "the estimate is exact");
    assert!(s.recompute_saved_bytes > 0);
    // Below it, the step cannot fit.
    ctx.set_arena_limit(Some(need_all as usize - 64));
    ctx.reset();
    let r = match gpt.loss(&mut ctx, &ids, &targets, cfg.batch, cfg.block_size) {
        Ok(l) => ctx.backward(l),
        Err(e) => Err(e),
    };
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
}

fn block(ctx: &mut Context, x: Tensor) -> (Tensor, Tensor) {
    let h = ctx.tanh(x).unwrap();
    let y = ctx.mul(h, x).unwrap();
    (h, y)
}

#[test]
fn internal_handles_are_refused_after_the_segment_ends() {
    for policy in [RecomputePolicy::None, RecomputePolicy::All] {
        let mut ctx = Context::new();
        ctx.set_recompute(policy);
        let w = ctx.param(&[4], Some(&[0.5, -1.0, 2.0, 0.25])).unwrap();
        ctx.segment_begin().unwrap();
        let (h, y) = block(&mut ctx, w);
        let mut v = [0.0; 4];
        ctx.read(h, &mut v).unwrap(); // inside the segment: fine
        ctx.segment_end(&[y]).unwrap();
        let e = ctx.read(h, &mut v).unwrap_err();
        assert!(
            matches!(e, Error::SegmentInternal { .. }),
            "{policy:?}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("tensor_read") && msg.contains("segment 0"),
            "{msg}"
        );
        assert!(matches!(
            ctx.exp(h),
            Err(Error::SegmentInternal { op: "exp", .. })
        ));
        // The output stays usable, and backward goes through the segment.
        let s = ctx.sum(y).unwrap();
        ctx.backward(s).unwrap();
        let mut g = [0.0; 4];
        ctx.read_grad(w, &mut g).unwrap();
        for (i, x) in [0.5f32, -1.0, 2.0, 0.25].into_iter().enumerate() {
            let t = x.tanh();
            let want = t + x * (1.0 - t * t);
            assert!(
                (g[i] - want).abs() < 1e-6,
                "{policy:?}: grad {i}: {} vs {want}",
                g[i]
            );
        }
    }
}

#[test]
fn segments_do_not_nest_and_must_be_closed() {
    let mut ctx = Context::new();
    let w = ctx.param(&[2], Some(&[1.0, 2.0])).unwrap();
    assert!(matches!(ctx.segment_end(&[w]), Err(Error::Sequence { .. })));
    ctx.segment_begin().unwrap();
    let e = ctx.segment_begin().unwrap_err();
    assert!(matches!(e, Error::Sequence { .. }) && e.to_string().contains("do not nest"));
    let y = ctx.exp(w).unwrap();
    let s = ctx.sum(y).unwrap();
    assert!(matches!(ctx.backward(s), Err(Error::Sequence { .. })));
    assert!(matches!(
        ctx.segment_end(&[]),
        Err(Error::InvalidArgument { .. })
    ));
    ctx.segment_end(&[s]).unwrap();
    ctx.backward(s).unwrap();
}

/// With grad mode off (evaluation, sampling) nothing is replayed, so every
/// internal tensor of a recomputed segment goes to the scratch region: the
/// same loss in less arena.
#[test]
fn evaluation_with_grad_off_uses_the_scratch_region_too() {
    let text = corpus();
    let (map, v) = vocabulary(&text);
    let cfg = two_blocks(v);
    let mut rng = Rng(5);
    let (mut ids, mut targets) = (vec![0; cfg.tokens()], vec![0; cfg.tokens()]);
    let t = cfg.block_size;
    sample_batch(&mut rng, &text, &map, t, &mut ids, &mut targets);
    let eval = |policy: RecomputePolicy| {
        let mut ctx = Context::new();
        let mut gpt = Gpt::new(&mut ctx, cfg, 7).unwrap();
        gpt.segments = true;
        ctx.set_recompute(policy);
        ctx.set_grad_enabled(false);
        let loss = gpt
            .loss(&mut ctx, &ids, &targets, cfg.batch, cfg.block_size)
            .unwrap();
        let s = ctx.memory_stats();
        (
            ctx.item(loss).unwrap().to_bits(),
            s.arena_used_bytes,
            s.recomputed_segments,
        )
    };
    let (none, none_bytes, _) = eval(RecomputePolicy::None);
    let (all, all_bytes, recomputed) = eval(RecomputePolicy::All);
    assert_eq!(all, none, "loss with grad mode off");
    assert_eq!(recomputed, 2);
    assert!(all_bytes < none_bytes, "{all_bytes} vs {none_bytes}");
    println!("evaluation, 2 blocks: {none_bytes} B keeping everything, {all_bytes} B recomputed");
}

//! A replayed step makes no system allocation after the first replay, and
//! neither does switching between the step and eager iterations once both
//! have run: a counting `#[global_allocator]` (no libtest harness, whose
//! threads allocate) counts every allocator call on every thread over
//! AG_REPLAYS replays (default 20,000; set 1,000,000 for a soak) with a new
//! input written before each and an optimizer step after, then over
//! alternating eager iterations and replays. The model has a product large
//! enough for the worker thread and a recomputed segment with a seeded
//! dropout (a new seed written before each replay). RSS must not move
//! by more than 1 MiB (allocator noise), and the arena figures not at all.
//! A scalar model (one-element ops: its replay runs the step's program,
//! not the walk) is counted the same way.

mod common;

use arenagrad::{Context, OptimizerKind, RecomputePolicy};
use common::counting_alloc::{CountingAlloc, count, take_calls};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const B: usize = 32;
const D: usize = 256;
const H: usize = 256;

fn fill(buf: &mut [f32], k: u64) {
    for (i, v) in buf.iter_mut().enumerate() {
        *v = ((i as u64 * 31 + k * 17) % 97) as f32 / 97.0 - 0.5;
    }
}

fn main() {
    let replays: u64 = std::env::var("AG_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut ctx = Context::new();
    ctx.set_recompute(RecomputePolicy::All);
    let w1 = ctx.param(&[D, H], None).unwrap();
    let w2 = ctx.param(&[H, 1], None).unwrap();
    let mut init = vec![0.0f32; D * H];
    fill(&mut init, 99);
    ctx.param_write(w1, &init).unwrap();
    ctx.param_write(w2, &init[..H]).unwrap();
    ctx.optimizer(OptimizerKind::Sgd {
        lr: 1e-4,
        momentum: 0.9,
        weight_decay: 0.0,
    })
    .unwrap();
    let mut x = vec![0.0f32; B * D];
    let mut y = vec![0.0f32; B];

    // The graph, from its two inputs and a dropout seed slot.
    let graph = |ctx: &mut Context, xt, yt, seed| {
        ctx.segment_begin().unwrap();
        let a = ctx.matmul(xt, w1, false, false).unwrap();
        let h = ctx.tanh(a).unwrap();
        let h = ctx.dropout_seeded(h, 0.1, seed).unwrap();
        ctx.segment_end(&[h]).unwrap();
        let p = ctx.matmul(h, w2, false, false).unwrap();
        ctx.mse_loss(p, yt).unwrap()
    };

    ctx.capture_begin().unwrap();
    let xi = ctx.input_new(&[B, D]).unwrap();
    let yi = ctx.input_new(&[B, 1]).unwrap();
    let si = ctx.input_new(&[4]).unwrap();
    let loss = graph(&mut ctx, xi, yi, si);
    ctx.backward(loss).unwrap();
    let step = ctx.capture_end(loss).unwrap();

    let replay = |ctx: &mut Context, k: u64, x: &mut [f32], y: &mut [f32]| {
        fill(x, k);
        fill(y, k + 1);
        ctx.input_write(xi, x).unwrap();
        ctx.input_write(yi, y).unwrap();
        ctx.seed_write(si, k).unwrap();
        ctx.zero_grad();
        ctx.replay(step).unwrap();
        let l = ctx.item(loss).unwrap();
        ctx.optimizer_step().unwrap();
        l
    };
    let eager = |ctx: &mut Context, x: &[f32], y: &[f32]| {
        ctx.reset();
        let xt = ctx.tensor(&[B, D], x).unwrap();
        let yt = ctx.tensor(&[B, 1], y).unwrap();
        let st = ctx.input_new(&[4]).unwrap();
        ctx.seed_write(st, 7).unwrap();
        ctx.zero_grad();
        let l = graph(ctx, xt, yt, st);
        ctx.backward(l).unwrap();
        ctx.optimizer_step().unwrap();
    };

    // Warm-up: the first replay, and both directions of the switch.
    for k in 0..3 {
        replay(&mut ctx, k, &mut x, &mut y);
        eager(&mut ctx, &x, &y);
    }
    replay(&mut ctx, 3, &mut x, &mut y);
    let stats = ctx.memory_stats();
    let rss0 = common::rss_kib();

    count(true);
    let mut sum = 0.0f32;
    for k in 0..replays {
        sum += replay(&mut ctx, k, &mut x, &mut y);
    }
    let pure = take_calls();
    for k in 0..replays / 20 {
        eager(&mut ctx, &x, &y);
        sum += replay(&mut ctx, k, &mut x, &mut y);
    }
    let mixed = common::counting_alloc::calls();
    count(false);
    let rss1 = common::rss_kib();

    let after = ctx.memory_stats();
    println!(
        "capture_steady_state: {replays} replays, {pure} allocator calls; {} mixed, {mixed} calls; rss {rss0} -> {rss1} KiB; loss sum {sum}",
        replays / 20
    );
    assert!(sum.is_finite());
    assert_eq!(pure, 0, "replays called the system allocator");
    assert_eq!(mixed, 0, "eager iterations between replays allocated");
    assert!(rss1 <= rss0 + 1024, "RSS grew from {rss0} to {rss1} KiB");
    assert_eq!(stats.arena_used_bytes, after.arena_used_bytes);
    assert_eq!(stats.arena_reserved_bytes, after.arena_reserved_bytes);
    assert_eq!(stats.tape_len, after.tape_len);
    assert_eq!(stats.live_tensors, after.live_tensors);
    scalar_program(replays);
    println!("1 passed, 0 failed");
}

/// A one-element model's replays (the program's path) allocate nothing.
fn scalar_program(replays: u64) {
    let mut ctx = Context::new();
    let a = ctx.param(&[1], Some(&[0.7])).unwrap();
    let b = ctx.param(&[1], Some(&[0.2])).unwrap();
    ctx.capture_begin().unwrap();
    let x = ctx.input_new(&[1]).unwrap();
    let mut h = x;
    for _ in 0..50 {
        let z = ctx.mul(a, h).unwrap();
        let z = ctx.add(z, b).unwrap();
        h = ctx.tanh(z).unwrap();
    }
    let loss = ctx.mul(h, h).unwrap();
    ctx.backward(loss).unwrap();
    let step = ctx.capture_end(loss).unwrap();
    let run = |ctx: &mut Context, k: u64| {
        ctx.input_write(x, &[(k % 13) as f32 / 13.0 - 0.5]).unwrap();
        ctx.zero_grad();
        ctx.replay(step).unwrap();
        ctx.item(loss).unwrap()
    };
    run(&mut ctx, 0);
    count(true);
    let mut sum = 0.0f32;
    for k in 0..replays {
        sum += run(&mut ctx, k);
    }
    count(false);
    let calls = take_calls();
    println!("capture_steady_state: scalar program, {replays} replays, {calls} allocator calls");
    assert!(sum.is_finite());
    assert_eq!(
        calls, 0,
        "a scalar step's replays called the system allocator"
    );
}

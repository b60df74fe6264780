//! Memory stays bounded: many steps, a generation
//! wrap, broadcasting without tiled copies, many models in one process.
//!
//! The tests of this file take one lock each so they never overlap: the RSS
//! test reads the whole process's memory, which a neighbour would disturb.

mod common;

use arenagrad::ffi::*;
use arenagrad::{Context, Error, MemoryStats, OptimizerKind, Tensor};
use common::ffi::ok;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes the arena charges for `n` f32s: a multiple of 64, at least 64.
fn padded(n: usize) -> u64 {
    ((n * 4).div_ceil(64) * 64).max(64) as u64
}

// ---- 100,000 steps ------------------------------------------------------------

/// Every figure except the two counters that must move.
fn without_counters(s: MemoryStats) -> MemoryStats {
    MemoryStats {
        resets: 0,
        generation: 0,
        ..s
    }
}

#[test]
fn hundred_thousand_steps_leave_every_figure_unchanged() {
    let _g = serial();
    const STEPS: u64 = 100_000;
    let mut ctx = Context::new();
    let w = ctx
        .param(
            &[6, 8],
            Some(
                &(0..48)
                    .map(|i| (i as f32 - 24.0) / 60.0)
                    .collect::<Vec<_>>(),
            ),
        )
        .unwrap();
    let b = ctx.param(&[8], None).unwrap();
    ctx.optimizer(OptimizerKind::Sgd {
        lr: 1e-3,
        momentum: 0.9,
        weight_decay: 0.0,
    })
    .unwrap();
    let mut x = [0.0f32; 4 * 6];
    let mut at_step3 = None;
    let mut last = MemoryStats::default();
    for step in 1..=STEPS {
        ctx.reset();
        assert_eq!(
            ctx.memory_stats().live_tensors,
            2,
            "only the parameters survive a reset"
        );
        x.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = ((i as u64 * 7 + step) % 13) as f32 / 13.0 - 0.5);
        let xt = ctx.tensor(&[4, 6], &x).unwrap();
        let h = ctx.linear(xt, w, Some(b)).unwrap();
        let h = ctx.tanh(h).unwrap();
        let s = ctx.sum_axis(h, 1, false).unwrap();
        let loss = ctx.mean(s).unwrap();
        ctx.backward(loss).unwrap();
        ctx.optimizer_step().unwrap();
        ctx.zero_grad();
        assert!(ctx.item(loss).unwrap().is_finite());
        last = ctx.memory_stats();
        if step == 3 {
            at_step3 = Some(last);
        }
    }
    let s3 = at_step3.unwrap();
    assert_eq!(without_counters(last), without_counters(s3));
    assert_eq!(last.resets - s3.resets, STEPS - 3);
    assert_eq!(last.generation - s3.generation, STEPS - 3);
    eprintln!("[100k steps] stats at step 3: {s3:?}\n[100k steps] stats at the end: {last:?}");
}

// ---- generation wrap -------------------------------------------------------------

/// The generation is a u64 bumped by every reset. At one reset per
/// nanosecond it wraps after 2^64 ns, about 584 years. At the wrap it goes
/// MAX -> 1, skipping 0 (0 marks parameters, which never go stale). Handles
/// from before the wrap carry a generation above the current one and are
/// refused as InvalidHandle ("from the future"); handles from an older
/// generation below the current one are StaleHandle. What a finite counter
/// cannot catch: a handle minted exactly 2^64 - 1 resets earlier (same
/// generation value) would be accepted again after the wrap; this test does
/// not pin that (it takes 584 years to happen by resets).
#[test]
fn generation_wrap_skips_zero_and_keeps_refusing_old_handles() {
    let _g = serial();
    let mut ctx = Context::new();
    let p = ctx.param(&[3], Some(&[1.0, -2.0, 0.5])).unwrap();
    ctx.reset();
    ctx.set_generation_for_test(u64::MAX - 2);
    let mut kept: Vec<Tensor> = Vec::new();
    let expected = [u64::MAX - 2, u64::MAX - 1, u64::MAX, 1, 2, 3];
    for (k, &gen_now) in expected.iter().enumerate() {
        assert_eq!(ctx.generation(), gen_now);
        assert_eq!(ctx.memory_stats().generation, gen_now);
        // Fresh handles work.
        let a = ctx.scale(p, 2.0).unwrap();
        let s = ctx.sum(a).unwrap();
        assert_eq!(a.generation, gen_now);
        assert_eq!(ctx.item(s).unwrap(), -1.0);
        ctx.backward(s).unwrap();
        let mut g = [0.0f32; 3];
        ctx.read_grad(p, &mut g).unwrap();
        assert_eq!(g, [2.0; 3]);
        ctx.zero_grad();
        // Every handle of an earlier iteration is refused, though the same
        // table slots (indices 1 and 2) are in use again.
        for old in &kept {
            assert!(old.index == 1 || old.index == 2);
            let e = ctx.shape(*old).unwrap_err();
            if old.generation < gen_now {
                assert!(matches!(e, Error::StaleHandle { .. }), "{old:?}: {e:?}");
            } else {
                assert!(matches!(e, Error::InvalidHandle { .. }), "{old:?}: {e:?}");
            }
            assert!(ctx.scale(*old, 1.0).is_err());
        }
        // The parameter (generation 0) is never stale.
        assert_eq!(p.generation, 0);
        let mut v = [0.0f32; 3];
        ctx.read(p, &mut v).unwrap();
        assert_eq!(v, [1.0, -2.0, 0.5]);
        kept.push(a);
        kept.push(s);
        if k + 1 < expected.len() {
            ctx.reset();
            assert_ne!(
                ctx.generation(),
                0,
                "generation 0 is reserved for parameters"
            );
        }
    }
}

// ---- broadcasting costs only its output --------------------------------------------

const B: usize = 3;
const N: usize = 5;
const D: usize = 7;

fn used(ctx: &Context) -> u64 {
    ctx.memory_stats().arena_used_bytes
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) * scale)
        .collect()
}

/// add(x [B,N,D], z [B,1,D]) with both operands parameters: the forward
/// allocates the output and nothing else; backward allocates the gradient
/// of the output and of the loss (the parameters' gradients are persistent,
/// outside the arena). A tiled copy of z would add padded(B*N*D) somewhere.
#[test]
fn broadcast_add_costs_only_its_output() {
    let _g = serial();
    let mut ctx = Context::new();
    let x = ctx.param(&[B, N, D], Some(&ramp(B * N * D, 0.1))).unwrap();
    let z = ctx.param(&[B, 1, D], Some(&ramp(B * D, 0.3))).unwrap();
    let param_bytes = ctx.memory_stats().param_bytes;
    ctx.reset();
    assert_eq!(used(&ctx), 0);

    let y = ctx.add(x, z).unwrap();
    let after_add = used(&ctx);
    // [B,N,D] = 105 floats = 420 B, padded to 448.
    assert_eq!(padded(B * N * D), 448);
    assert_eq!(after_add, 448, "add allocated more than its output");

    let loss = ctx.sum(y).unwrap();
    let after_forward = used(&ctx);
    assert_eq!(after_forward, 448 + 64);

    ctx.backward(loss).unwrap();
    let after_backward = used(&ctx);
    // Gradients of y (448) and of the loss (64); x's and z's are persistent.
    assert_eq!(after_backward, 448 + 64 + 448 + 64);
    assert_eq!(ctx.memory_stats().param_bytes, param_bytes);

    // dz[b, 0, d] = N (each z element fed N outputs), computed without a tile.
    let mut dz = [0.0f32; B * D];
    ctx.read_grad(z, &mut dz).unwrap();
    assert!(dz.iter().all(|&g| g == N as f32), "{dz:?}");
    eprintln!(
        "[broadcast add] arena bytes: after add {after_add}, after sum {after_forward}, after backward {after_backward}"
    );
}

/// mul(z [B,1,D], x [B,N,D]) with the broadcast operand on the left and both
/// operands activations that need gradients: the gradient of z has z's
/// shape (padded(B*D) = 128 B), not the broadcast shape.
#[test]
fn broadcast_mul_costs_only_its_output_and_small_gradients() {
    let _g = serial();
    let mut ctx = Context::new();
    let xp = ctx.param(&[B, N, D], Some(&ramp(B * N * D, 0.1))).unwrap();
    let zp = ctx.param(&[B, 1, D], Some(&ramp(B * D, 0.3))).unwrap();
    ctx.reset();
    let x = ctx.scale(xp, 1.0).unwrap(); // [B,N,D]: 448 B
    let z = ctx.scale(zp, 1.0).unwrap(); // [B,1,D]: 21 floats = 84 B -> 128 B
    assert_eq!(padded(B * D), 128);
    let before = used(&ctx);
    assert_eq!(before, 448 + 128);

    let y = ctx.mul(z, x).unwrap();
    let after_mul = used(&ctx);
    assert_eq!(
        after_mul - before,
        448,
        "mul allocated more than its output"
    );

    let loss = ctx.mean(y).unwrap();
    let after_forward = used(&ctx);
    assert_eq!(after_forward - after_mul, 64);

    ctx.retain_grad(z).unwrap();
    ctx.backward(loss).unwrap();
    let after_backward = used(&ctx);
    // Gradients of x (448), z (128) and y (448); the loss's (64) reuses x's
    // memory, as their lifetimes in the backward walk do not meet.
    assert_eq!(after_backward - after_forward, 448 + 128 + 448);

    // dz[b, 0, d] = sum_n x[b, n, d] / (B*N*D): reduced, not tiled.
    let (xv, mut dz) = (ramp(B * N * D, 0.1), [0.0f32; B * D]);
    ctx.read_grad(z, &mut dz).unwrap();
    for bb in 0..B {
        for d in 0..D {
            let want: f32 =
                (0..N).map(|n| xv[(bb * N + n) * D + d]).sum::<f32>() / (B * N * D) as f32;
            let got = dz[bb * D + d];
            assert!(
                (got - want).abs() <= 1e-6,
                "dz[{bb},{d}] = {got}, want {want}"
            );
        }
    }
    // And the broadcast-shape mul with a rank-1 operand: x [B,N,D] * w [D].
    let w = ctx.tensor(&[D], &ramp(D, 0.5)).unwrap();
    let before_w = used(&ctx);
    ctx.mul(x, w).unwrap();
    assert_eq!(used(&ctx) - before_w, 448);
    eprintln!(
        "[broadcast mul] arena bytes: operands {before}, after mul {after_mul}, after mean {after_forward}, after backward {after_backward}"
    );
}

// ---- many models in one process, through the C API -------------------------------

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let resident: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm resident field");
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    resident * page as u64
}

const NULL_T: ag_tensor = ag_tensor {
    index: 0,
    context: 0,
    generation: 0,
};

/// One round: a context, an MLP (8 -> 32 -> 4), AdamW, 20 steps, free.
/// Returns the last loss.
fn one_model_round(round: u32) -> f32 {
    let mut ctx: *mut ag_context = std::ptr::null_mut();
    ok(ag_context_new(&mut ctx), "ag_context_new");
    let param = |shape: &[usize], init: &[f32]| {
        let mut t = NULL_T;
        ok(
            ag_param_new(ctx, shape.as_ptr(), shape.len(), init.as_ptr(), &mut t),
            "ag_param_new",
        );
        t
    };
    let w1 = param(&[8, 32], &ramp(8 * 32, 0.05));
    let b1 = param(&[32], &[0.0; 32]);
    let w2 = param(&[32, 4], &ramp(32 * 4, 0.05));
    let b2 = param(&[4], &[0.0; 4]);
    ok(
        ag_optimizer_adamw(ctx, 1e-2, 0.9, 0.999, 1e-8, 0.0),
        "ag_optimizer_adamw",
    );
    let mut x = [0.0f32; 16 * 8];
    let mut y = [0i32; 16];
    let mut loss = 0.0f32;
    for step in 0..20u32 {
        x.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = ((i as u32 * 31 + step * 7 + round) % 17) as f32 / 17.0 - 0.5);
        y.iter_mut()
            .enumerate()
            .for_each(|(i, t)| *t = ((i as u32 + step) % 4) as i32);
        ok(ag_reset(ctx), "ag_reset");
        let (mut xt, mut h, mut a, mut lg, mut l) = (NULL_T, NULL_T, NULL_T, NULL_T, NULL_T);
        let shape = [16usize, 8];
        ok(
            ag_tensor_new(ctx, shape.as_ptr(), 2, x.as_ptr(), &mut xt),
            "ag_tensor_new",
        );
        ok(ag_linear(ctx, xt, w1, &b1, &mut h), "ag_linear");
        ok(ag_tanh(ctx, h, &mut a), "ag_tanh");
        ok(ag_linear(ctx, a, w2, &b2, &mut lg), "ag_linear");
        ok(
            ag_cross_entropy(ctx, lg, y.as_ptr(), y.len(), &mut l),
            "ag_cross_entropy",
        );
        ok(ag_tensor_item(ctx, l, &mut loss), "ag_tensor_item");
        ok(ag_backward(ctx, l), "ag_backward");
        ok(ag_optimizer_step(ctx), "ag_optimizer_step");
        ok(ag_zero_grad(ctx), "ag_zero_grad");
    }
    ok(ag_context_free(&mut ctx), "ag_context_free");
    assert!(ctx.is_null(), "ag_context_free clears the caller's pointer");
    loss
}

#[test]
fn thousand_models_in_one_process_keep_rss_flat() {
    let _g = serial();
    const ROUNDS: u32 = 1000;
    let start = live_contexts();
    let mut rss_10 = 0;
    let (mut lo, mut hi) = (u64::MAX, 0);
    for round in 1..=ROUNDS {
        let loss = one_model_round(round);
        assert!(loss.is_finite());
        assert_eq!(
            live_contexts(),
            start,
            "round {round} left a context registered"
        );
        let rss = rss_bytes();
        if round == 10 {
            rss_10 = rss;
        }
        if round >= 10 {
            lo = lo.min(rss);
            hi = hi.max(rss);
        }
    }
    let rss_last = rss_bytes();
    eprintln!(
        "[1000 models] RSS after round 10: {rss_10} B; after round {ROUNDS}: {rss_last} B; \
         difference {} B; min/max over rounds 10..={ROUNDS}: {lo}/{hi} B",
        rss_last as i64 - rss_10 as i64
    );
    assert!(
        rss_last.abs_diff(rss_10) <= 1 << 20,
        "RSS moved by more than 1 MiB: {rss_10} -> {rss_last}"
    );
}

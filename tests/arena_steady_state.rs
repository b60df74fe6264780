//! Steady state makes no system allocation.
//!
//! A counting `#[global_allocator]` wraps `std::alloc::System` and counts
//! alloc (and alloc_zeroed), realloc and dealloc calls in atomics while a
//! global flag is on, on every thread: the library's pool worker thread
//! runs parts of large kernels, and its allocations count too. That is why
//! this file runs without the libtest harness (`harness = false` in
//! Cargo.toml): the harness's own threads allocate whenever they like (for
//! example its "has been running for over 60 seconds" notice on a slow
//! machine), and nothing but the library may add to the counts. `main` runs
//! the sections one after another; a failed check panics, which exits
//! non-zero.
//!
//! Each figure is printed with `eprintln!` outside the measured regions (run
//! with `--nocapture` to see them).

mod common;

use arenagrad::ffi::*;
use arenagrad::{Context, GradEvent, MemoryStats, RecomputePolicy, Tensor};
use common::counting_alloc::{ALLOCS, COUNTING, CountingAlloc, DEALLOCS, REALLOCS};
use common::ffi::ok;
use common::gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use common::text::{generated_text, shakespeare_tiny};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

// ---- the counting allocator ----------------------------------------------

/// alloc (including alloc_zeroed), realloc and dealloc calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    alloc: u64,
    realloc: u64,
    dealloc: u64,
}

impl Counts {
    fn total(&self) -> u64 {
        self.alloc + self.realloc + self.dealloc
    }
    fn add(&mut self, o: Counts) {
        self.alloc += o.alloc;
        self.realloc += o.realloc;
        self.dealloc += o.dealloc;
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn snapshot() -> Counts {
    Counts {
        alloc: ALLOCS.load(Ordering::SeqCst),
        realloc: REALLOCS.load(Ordering::SeqCst),
        dealloc: DEALLOCS.load(Ordering::SeqCst),
    }
}

/// Runs `f` with counting on (all threads); returns its result and the
/// allocator calls made meanwhile.
fn counted<R>(f: impl FnOnce() -> R) -> (R, Counts) {
    let before = snapshot();
    COUNTING.store(true, Ordering::SeqCst);
    let r = f();
    COUNTING.store(false, Ordering::SeqCst);
    let after = snapshot();
    (
        r,
        Counts {
            alloc: after.alloc - before.alloc,
            realloc: after.realloc - before.realloc,
            dealloc: after.dealloc - before.dealloc,
        },
    )
}

/// Guards against a vacuous pass: the counter must see a Vec's traffic,
/// also on another thread.
fn the_counter_counts() {
    let ((), c) = counted(|| {
        let mut v: Vec<u64> = Vec::with_capacity(1);
        v.extend(0..100);
        drop(std::hint::black_box(v));
    });
    assert!(c.alloc >= 1 && c.realloc >= 1 && c.dealloc >= 1, "{c:?}");
    // Another thread's allocation, made while this thread only waits.
    static GO: AtomicBool = AtomicBool::new(false);
    static DONE: AtomicBool = AtomicBool::new(false);
    let h = std::thread::spawn(|| {
        while !GO.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        drop(std::hint::black_box(vec![1u64; 10]));
        DONE.store(true, Ordering::SeqCst);
    });
    let ((), c) = counted(|| {
        GO.store(true, Ordering::SeqCst);
        while !DONE.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    });
    h.join().unwrap();
    assert!(
        c.alloc >= 1 && c.dealloc >= 1,
        "another thread's traffic: {c:?}"
    );
}

// ---- shared helpers ----------------------------------------------------------

/// The figures that must not move once the loop is warm.
fn steady_figures(s: &MemoryStats) -> [u64; 5] {
    [
        s.arena_high_water_bytes,
        s.arena_reserved_bytes,
        s.tape_capacity,
        s.table_capacity,
        s.optimizer_bytes,
    ]
}

/// Tracks the per-iteration figures of a measured window and asserts that
/// no iteration allocated and that the figures never moved.
struct Window {
    name: &'static str,
    first_counted: usize,
    total: Counts,
    per_iter_max: u64,
    figures: Option<[u64; 5]>,
    warmup: Vec<Counts>,
}

impl Window {
    fn new(name: &'static str, first_counted: usize) -> Window {
        Window {
            name,
            first_counted,
            total: Counts::default(),
            per_iter_max: 0,
            figures: None,
            warmup: Vec::new(),
        }
    }

    /// Records iteration `i` (1-based) with its allocator counts and the
    /// stats taken at its end.
    fn record(&mut self, i: usize, c: Counts, s: &MemoryStats) {
        if i < self.first_counted {
            self.warmup.push(c);
            return;
        }
        assert_eq!(
            c.total(),
            0,
            "{}: iteration {i} made allocator calls: {c:?}",
            self.name
        );
        self.total.add(c);
        self.per_iter_max = self.per_iter_max.max(c.total());
        let f = steady_figures(s);
        match self.figures {
            None => self.figures = Some(f),
            Some(f0) => assert_eq!(
                f, f0,
                "{}: iteration {i}: [high water, reserved, tape cap, table cap, optimizer bytes] moved",
                self.name
            ),
        }
    }

    fn report(&self, last: usize) {
        let f = self.figures.unwrap_or_default();
        eprintln!(
            "[{}] warm-up iterations 1..{}: {:?}; iterations {}..={last}: alloc {} realloc {} dealloc {} \
             (max per iteration {}); arena high water {} B, reserved {} B",
            self.name,
            self.first_counted - 1,
            self.warmup
                .iter()
                .map(|c| (c.alloc, c.realloc, c.dealloc))
                .collect::<Vec<_>>(),
            self.first_counted,
            self.total.alloc,
            self.total.realloc,
            self.total.dealloc,
            self.per_iter_max,
            f[0],
            f[1],
        );
    }
}

// ---- the MLP through the Rust API -------------------------------------------

const MB: usize = 16; // batch
const MD: usize = 12; // inputs
const MH: usize = 32; // hidden
const MC: usize = 5; // classes

/// Deterministic pseudo-random values in [-scale, scale).
fn fill(rng: &mut Rng, v: &mut [f32], scale: f32) {
    v.iter_mut()
        .for_each(|x| *x = ((rng.uniform() * 2.0 - 1.0) as f32) * scale);
}

struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Mlp {
    fn new(ctx: &mut Context, seed: u64) -> Mlp {
        let mut rng = Rng(seed);
        let mut w1 = vec![0.0; MD * MH];
        let mut w2 = vec![0.0; MH * MC];
        fill(&mut rng, &mut w1, 0.3);
        fill(&mut rng, &mut w2, 0.3);
        let m = Mlp {
            w1: ctx.param(&[MD, MH], Some(&w1)).unwrap(),
            b1: ctx.param(&[MH], None).unwrap(),
            w2: ctx.param(&[MH, MC], Some(&w2)).unwrap(),
            b2: ctx.param(&[MC], None).unwrap(),
        };
        common::adamw(ctx, 1e-2, 0.01);
        m
    }

    /// reset, linear + tanh + linear + cross_entropy, backward, AdamW, zero_grad.
    fn step(&self, ctx: &mut Context, x: &[f32], y: &[i32]) -> f32 {
        ctx.reset();
        let x = ctx.tensor(&[MB, MD], x).unwrap();
        let h = ctx.linear(x, self.w1, Some(self.b1)).unwrap();
        let h = ctx.tanh(h).unwrap();
        let logits = ctx.linear(h, self.w2, Some(self.b2)).unwrap();
        let loss = ctx.cross_entropy(logits, y).unwrap();
        let v = ctx.item(loss).unwrap();
        ctx.backward(loss).unwrap();
        ctx.optimizer_step().unwrap();
        ctx.zero_grad();
        v
    }
}

/// A new batch each iteration, written into the caller's buffers.
fn mlp_batch(rng: &mut Rng, x: &mut [f32], y: &mut [i32]) {
    fill(rng, x, 1.0);
    y.iter_mut().for_each(|t| *t = rng.below(MC) as i32);
}

fn mlp_training_step_allocates_nothing_after_warmup() {
    let mut ctx = Context::new();
    let mlp = Mlp::new(&mut ctx, 7);
    let mut rng = Rng(11);
    let (mut x, mut y) = (vec![0.0f32; MB * MD], vec![0i32; MB]);
    let mut w = Window::new("mlp rust", 3);
    let mut losses = [0.0f32; 2];
    for i in 1..=100 {
        let (loss, c) = counted(|| {
            mlp_batch(&mut rng, &mut x, &mut y);
            mlp.step(&mut ctx, &x, &y)
        });
        assert!(loss.is_finite());
        if i == 1 {
            losses[0] = loss;
        }
        losses[1] = loss;
        w.record(i, c, &ctx.memory_stats());
    }
    w.report(100);
    // It trained (random labels, but 100 AdamW steps still fit some of them).
    assert!(losses[1] < losses[0], "{losses:?}");
}

// ---- the MLP through the C API ----------------------------------------------

struct CMlp {
    ctx: *mut ag_context,
    w1: ag_tensor,
    b1: ag_tensor,
    w2: ag_tensor,
    b2: ag_tensor,
}

impl CMlp {
    fn new(seed: u64) -> CMlp {
        let mut ctx: *mut ag_context = std::ptr::null_mut();
        ok(ag_context_new(&mut ctx), "ag_context_new");
        let mut rng = Rng(seed);
        let mut w1 = vec![0.0; MD * MH];
        let mut w2 = vec![0.0; MH * MC];
        fill(&mut rng, &mut w1, 0.3);
        fill(&mut rng, &mut w2, 0.3);
        let p = |shape: &[usize], init: Option<&[f32]>| {
            let mut t = ag_tensor {
                index: 0,
                context: 0,
                generation: 0,
            };
            let ip = init.map_or(std::ptr::null(), |v| v.as_ptr());
            ok(
                ag_param_new(ctx, shape.as_ptr(), shape.len(), ip, &mut t),
                "ag_param_new",
            );
            t
        };
        let m = CMlp {
            w1: p(&[MD, MH], Some(&w1)),
            b1: p(&[MH], None),
            w2: p(&[MH, MC], Some(&w2)),
            b2: p(&[MC], None),
            ctx,
        };
        ok(
            ag_optimizer_adamw(ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01),
            "ag_optimizer_adamw",
        );
        m
    }

    fn step(&self, x: &[f32], y: &[i32]) -> f32 {
        let c = self.ctx;
        let mut t = ag_tensor {
            index: 0,
            context: 0,
            generation: 0,
        };
        ok(ag_reset(c), "ag_reset");
        let shape = [MB, MD];
        let mut xt = t;
        ok(
            ag_tensor_new(c, shape.as_ptr(), 2, x.as_ptr(), &mut xt),
            "ag_tensor_new",
        );
        let mut h = t;
        ok(ag_linear(c, xt, self.w1, &self.b1, &mut h), "ag_linear");
        let mut a = t;
        ok(ag_tanh(c, h, &mut a), "ag_tanh");
        let mut logits = t;
        ok(ag_linear(c, a, self.w2, &self.b2, &mut logits), "ag_linear");
        ok(
            ag_cross_entropy(c, logits, y.as_ptr(), y.len(), &mut t),
            "ag_cross_entropy",
        );
        let mut loss = 0.0f32;
        ok(ag_tensor_item(c, t, &mut loss), "ag_tensor_item");
        ok(ag_backward(c, t), "ag_backward");
        ok(ag_optimizer_step(c), "ag_optimizer_step");
        ok(ag_zero_grad(c), "ag_zero_grad");
        loss
    }

    fn stats(&self) -> MemoryStats {
        let mut s = MemoryStats::default();
        ok(ag_memory_stats(self.ctx, &mut s), "ag_memory_stats");
        s
    }
}

impl Drop for CMlp {
    fn drop(&mut self) {
        ok(ag_context_free(&mut self.ctx), "ag_context_free");
    }
}

fn c_api_training_step_allocates_nothing_after_warmup() {
    let m = CMlp::new(7);
    let mut rng = Rng(11);
    let (mut x, mut y) = (vec![0.0f32; MB * MD], vec![0i32; MB]);
    let mut w = Window::new("mlp C API", 3);
    for i in 1..=100 {
        let (loss, c) = counted(|| {
            mlp_batch(&mut rng, &mut x, &mut y);
            m.step(&x, &y)
        });
        assert!(loss.is_finite());
        w.record(i, c, &m.stats());
    }
    w.report(100);

    // The C path computes exactly what the Rust path computes.
    let mut ctx = Context::new();
    let mlp = Mlp::new(&mut ctx, 7);
    let m2 = CMlp::new(7);
    let mut rng = Rng(12);
    for _ in 0..5 {
        mlp_batch(&mut rng, &mut x, &mut y);
        let a = mlp.step(&mut ctx, &x, &y);
        let b = m2.step(&x, &y);
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

// ---- the GPT ------------------------------------------------------------------

/// The tiny Shakespeare corpus if present, else a generated text.
fn corpus() -> Vec<u8> {
    shakespeare_tiny().unwrap_or_else(|| generated_text(200_000))
}

struct GptRun {
    ctx: Context,
    gpt: Gpt,
    text: Vec<u8>,
    map: [u8; 256],
    rng: Rng,
    ids: Vec<i32>,
    targets: Vec<i32>,
}

impl GptRun {
    fn new(preset: &str) -> GptRun {
        let text = corpus();
        let (map, v) = vocabulary(&text);
        let cfg = GptConfig::preset(preset, v).unwrap();
        let mut ctx = Context::new();
        let gpt = Gpt::new(&mut ctx, cfg, 1).unwrap();
        Gpt::adamw(&mut ctx, 3e-3).unwrap();
        GptRun {
            ctx,
            gpt,
            text,
            map,
            rng: Rng(5),
            ids: vec![0; cfg.tokens()],
            targets: vec![0; cfg.tokens()],
        }
    }

    fn step(&mut self) -> f32 {
        let t = self.gpt.cfg.block_size;
        sample_batch(
            &mut self.rng,
            &self.text,
            &self.map,
            t,
            &mut self.ids,
            &mut self.targets,
        );
        self.gpt
            .train_step(&mut self.ctx, &self.ids, &self.targets)
            .unwrap()
    }

    fn train(&mut self, name: &'static str, iters: usize) {
        let mut w = Window::new(name, 3);
        for i in 1..=iters {
            let (loss, c) = counted(|| self.step());
            assert!(loss.is_finite(), "{name}: loss {loss} at {i}");
            w.record(i, c, &self.ctx.memory_stats());
        }
        w.report(iters);
    }
}

fn gpt_tiny_training_step_allocates_nothing_after_warmup() {
    let mut run = GptRun::new("tiny");
    run.train("gpt tiny", 200);
}

fn gpt_small_training_step_allocates_nothing_after_warmup() {
    let mut run = GptRun::new("small");
    run.train("gpt small", 200);
}

/// Each block a recomputation segment, in every mode: none (segments only
/// mark their internal tensors), all, and auto under a cap halfway between
/// the two needs (it measured an uncapped step first, then keeps its
/// choice): the steady state allocates nothing either.
fn gpt_segments_allocate_nothing_after_warmup_in_every_mode() {
    for (name, policy) in [
        ("gpt small, segments, recompute none", RecomputePolicy::None),
        ("gpt small, segments, recompute all", RecomputePolicy::All),
        ("gpt small, segments, recompute auto", RecomputePolicy::Auto),
    ] {
        let mut run = GptRun::new("small");
        run.gpt.segments = true;
        run.ctx.set_recompute(policy);
        if policy == RecomputePolicy::Auto {
            run.step();
            let s = run.ctx.memory_stats();
            let cap = (s.arena_need_none_bytes + s.arena_need_all_bytes) / 2;
            run.ctx.set_arena_limit(Some(cap as usize));
        }
        run.train(name, 60);
        let s = run.ctx.memory_stats();
        assert_eq!(s.segments, run.gpt.cfg.n_layer as u64);
        let recomputed = s.recomputed_segments;
        match policy {
            RecomputePolicy::None => assert_eq!(recomputed, 0),
            RecomputePolicy::All => assert_eq!(recomputed, run.gpt.cfg.n_layer as u64),
            RecomputePolicy::Auto => assert!(recomputed >= 2, "{recomputed}"),
        }
        eprintln!("[{name}] {recomputed} blocks recomputed");
    }
}

/// A gradient-ready callback, as a data-parallel caller registers to start
/// its all-reduce per bucket during backward (here with every block
/// recomputed), adds no allocation; it sees every gradient float once per
/// backward.
fn grad_ready_callback_allocates_nothing_after_warmup() {
    let mut run = GptRun::new("tiny");
    run.gpt.segments = true;
    run.ctx.set_recompute(RecomputePolicy::All);
    let floats = std::sync::Arc::new(AtomicU64::new(0));
    let seen = floats.clone();
    run.ctx
        .set_grad_ready(
            4096,
            Some(Box::new(move |e: GradEvent<'_>| {
                if let GradEvent::Ready { grads, .. } = e {
                    seen.fetch_add(grads.len() as u64, Ordering::SeqCst);
                }
            })),
        )
        .unwrap();
    run.train("gpt tiny, grad-ready callback, recompute all", 60);
    let n = run.ctx.grads_len() as u64;
    assert_eq!(floats.load(Ordering::SeqCst), 60 * n);
}

/// Validation (a loss without backward) and sampling (forwards of [1, t]
/// for growing t) with grad mode off allocate nothing once warmed up, and
/// training resumes afterwards without allocating either.
fn gpt_validation_and_sampling_allocate_nothing_after_first_call() {
    let mut run = GptRun::new("tiny");
    for _ in 0..3 {
        run.step();
    }
    let cfg = run.gpt.cfg;
    let (b, t, v) = (cfg.batch, cfg.block_size, cfg.vocab_size);

    // Validation: the batch shape of training, grad mode off.
    let mut vrng = Rng(99);
    let (mut ids, mut tg) = (vec![0i32; b * t], vec![0i32; b * t]);
    let mut validate = |run: &mut GptRun| -> f32 {
        sample_batch(&mut vrng, &run.text, &run.map, t, &mut ids, &mut tg);
        let ctx = &mut run.ctx;
        ctx.set_grad_enabled(false);
        ctx.reset();
        let loss = run.gpt.loss(ctx, &ids, &tg, b, t).unwrap();
        let l = ctx.item(loss).unwrap();
        assert_eq!(
            ctx.memory_stats().tape_len,
            0,
            "grad mode off records nothing"
        );
        ctx.set_grad_enabled(true);
        l
    };
    let (first, c_first) = counted(|| validate(&mut run));
    let mut val = Counts::default();
    for _ in 0..20 {
        let (l, c) = counted(|| validate(&mut run));
        assert!(l.is_finite());
        val.add(c);
    }
    assert!(first.is_finite());
    assert_eq!(val.total(), 0, "validation passes allocated: {val:?}");

    // Sampling: one context window grown token by token, each forward [1, t']
    // for t' = 1..=T, then also a [2, T/2] forward (another batch shape).
    let mut logits = vec![0.0f32; t * v];
    let mut sample = |run: &mut GptRun, seed: u64| -> u64 {
        let mut window = [0i32; 1024];
        let mut srng = Rng(seed);
        let mut digest = 0u64;
        let ctx = &mut run.ctx;
        ctx.set_grad_enabled(false);
        for len in 1..=t {
            ctx.reset();
            let out = run.gpt.forward(ctx, &window[..len], 1, len).unwrap();
            ctx.read(out, &mut logits[..len * v]).unwrap();
            let last = &logits[(len - 1) * v..len * v];
            // Sample from softmax(last) with a fixed-seed uniform.
            let max = last.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let z: f32 = last.iter().map(|&x| (x - max).exp()).sum();
            let mut u = srng.uniform() as f32 * z;
            let mut pick = v - 1;
            for (j, &x) in last.iter().enumerate() {
                u -= (x - max).exp();
                if u <= 0.0 {
                    pick = j;
                    break;
                }
            }
            if len < t {
                window[len] = pick as i32;
            }
            digest = digest.wrapping_mul(131).wrapping_add(pick as u64);
        }
        ctx.reset();
        let out = run.gpt.forward(ctx, &window[..t], 2, t / 2).unwrap();
        ctx.read(out, &mut logits[..t * v]).unwrap();
        ctx.set_grad_enabled(true);
        digest
    };
    let (d1, c_sample_first) = counted(|| sample(&mut run, 3));
    let (d2, c_sample) = counted(|| sample(&mut run, 3));
    assert_eq!(
        d1, d2,
        "sampling with the same seed and weights is deterministic"
    );
    assert_eq!(c_sample.total(), 0, "sampling allocated: {c_sample:?}");

    // Training picks up again without allocating.
    let mut after = Counts::default();
    for _ in 0..5 {
        let (_, c) = counted(|| run.step());
        after.add(c);
    }
    assert_eq!(
        after.total(),
        0,
        "training after inference allocated: {after:?}"
    );
    eprintln!(
        "[gpt tiny inference] first validation pass: {c_first:?}; 20 more passes: {val:?}; \
         first sampling run ({t} forwards [1, t'] + one [2, {}]): {c_sample_first:?}; second run: {c_sample:?}; \
         5 training steps after: {after:?}",
        t / 2
    );
}

/// A context used only for inference. The first forward at the largest
/// shape grows the arena chunk by chunk; the reset that starts the second
/// forward swaps those chunks for one chunk of the high-water size (one
/// alloc, one dealloc per old chunk). That is the whole warm-up: every
/// forward of that shape or a smaller one after it is free.
fn fresh_inference_context_allocates_nothing_after_first_forward() {
    let text = corpus();
    let (map, v) = vocabulary(&text);
    let cfg = GptConfig::tiny(v);
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg, 1).unwrap();
    ctx.set_grad_enabled(false);
    let (b, t) = (cfg.batch, cfg.block_size);
    let mut rng = Rng(4);
    let (mut ids, mut tg) = (vec![0i32; b * t], vec![0i32; b * t]);
    sample_batch(&mut rng, &text, &map, t, &mut ids, &mut tg);
    let mut run = |b: usize, t: usize| {
        ctx.reset();
        let loss = gpt
            .loss(&mut ctx, &ids[..b * t], &tg[..b * t], b, t)
            .unwrap();
        ctx.item(loss).unwrap()
    };
    let (_, first) = counted(|| run(b, t));
    let (_, second) = counted(|| run(b, t));
    assert_eq!(
        second.alloc, 1,
        "the second reset consolidates the arena: {second:?}"
    );
    let mut rest = Counts::default();
    for (bb, tt) in [(b, t), (1, t), (1, 1), (2, t / 2), (b, t), (1, 7)] {
        let (l, c) = counted(|| run(bb, tt));
        assert!(l.is_finite());
        rest.add(c);
    }
    assert_eq!(rest.total(), 0, "inference forwards allocated: {rest:?}");
    eprintln!(
        "[fresh inference context] first forward [{b}, {t}]: {first:?}; second (its reset \
         consolidates the arena): {second:?}; six more of various shapes: {rest:?}"
    );
}

/// Every section in turn (see the module docs for why there is no harness).
fn main() {
    let sections: [(&str, fn()); 9] = [
        ("the_counter_counts", the_counter_counts),
        (
            "mlp_training_step_allocates_nothing_after_warmup",
            mlp_training_step_allocates_nothing_after_warmup,
        ),
        (
            "c_api_training_step_allocates_nothing_after_warmup",
            c_api_training_step_allocates_nothing_after_warmup,
        ),
        (
            "gpt_tiny_training_step_allocates_nothing_after_warmup",
            gpt_tiny_training_step_allocates_nothing_after_warmup,
        ),
        (
            "gpt_small_training_step_allocates_nothing_after_warmup",
            gpt_small_training_step_allocates_nothing_after_warmup,
        ),
        (
            "gpt_segments_allocate_nothing_after_warmup_in_every_mode",
            gpt_segments_allocate_nothing_after_warmup_in_every_mode,
        ),
        (
            "grad_ready_callback_allocates_nothing_after_warmup",
            grad_ready_callback_allocates_nothing_after_warmup,
        ),
        (
            "gpt_validation_and_sampling_allocate_nothing_after_first_call",
            gpt_validation_and_sampling_allocate_nothing_after_first_call,
        ),
        (
            "fresh_inference_context_allocates_nothing_after_first_forward",
            fresh_inference_context_allocates_nothing_after_first_forward,
        ),
    ];
    for (name, section) in sections {
        section();
        eprintln!("arena_steady_state: {name} ok");
    }
    println!("{} passed, 0 failed", sections.len());
}

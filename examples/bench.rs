//! `make bench`: speed and memory figures of arenagrad on this machine,
//! measured in one run and printed (never asserted).
//!
//! Per preset (each in a child process so peak RSS is its own):
//! step time with tokens/s and GFLOP/s, the matmul-only floor (the step's
//! own sgemm calls replayed, on two threads as the step splits them, and on
//! one), GEMM efficiency = two-thread floor / step, a breakdown of
//! the calling thread's wall time that adds up to 100% (the worker thread's
//! busy time is reported beside it, not mixed in), memory figures.
//! Then, per preset, arena high-water and step time with recomputation
//! segments (none, all, auto under two caps), and, with a Python that has
//! torch, the ratio to PyTorch's best configuration of the same step (first
//! right after ours, then over back-to-back pairs); tape overhead per op and
//! kernel bandwidth against memcpy.
//!
//! `--quick` runs a very short form (used by `make test`); `--child
//! <preset> <steps> [--batch B] --step-only` measures one preset's step
//! alone (`scripts/bench_scaling.py` runs it at each thread count);
//! `--contention PRESET STEPS ROUNDS` and `--contexts PRESET STEPS ROUNDS`
//! print those two figures alone.

// Closures below return arenagrad::Result, whose Err carries shapes inline.
#![allow(clippy::result_large_err)]

// The GPT model lives with the tests (it is not part of the library).
#[allow(dead_code)]
#[path = "../tests/common/gpt.rs"]
mod gpt;

use arenagrad::blas::{self, Gemm};
use arenagrad::trace;
use arenagrad::{Context, OptimizerKind, RecomputePolicy};
use gpt::{Gpt, GptConfig, Rng, sample_batch, vocabulary};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What `main` printed, for docs/benchmarks.md.
static PAGE: Mutex<String> = Mutex::new(String::new());

/// println! that also keeps the line for docs/benchmarks.md.
macro_rules! say {
    ($($t:tt)*) => {{
        let line = format!($($t)*);
        println!("{line}");
        let mut p = PAGE.lock().unwrap_or_else(|e| e.into_inner());
        p.push_str(&line);
        p.push('\n');
    }};
}

/// One machine-readable line: what runs underneath (ag_runtime_info).
fn runtime_line() -> String {
    use arenagrad::ffi::*;
    let text = |f: &[std::ffi::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut ctx = std::ptr::null_mut();
    let mut rt = ag_runtime::default();
    if ag_context_new(&mut ctx) != AG_STATUS_OK || ag_runtime_info(ctx, &mut rt) != AG_STATUS_OK {
        return "runtime: unavailable".into();
    }
    ag_context_free(&mut ctx);
    format!(
        "runtime: gemm={} version={} kernels={} simd={} cpu_isa={} threads={} note=\"{}\"",
        text(&rt.gemm_library),
        text(&rt.gemm_version),
        text(&rt.gemm_kernels),
        text(&rt.simd),
        text(&rt.cpu_isa),
        rt.threads,
        text(&rt.gemm_note)
    )
}

/// Busy loops pinned to the upper half of the CPUs this process may use
/// (other processes wanting half of the machine), killed when dropped.
struct BusyHalf(Vec<std::process::Child>);

impl BusyHalf {
    /// None when fewer than two CPUs or no `taskset`.
    fn start() -> Option<BusyHalf> {
        let cpus = affinity_cpus();
        if cpus.len() < 2 {
            return None;
        }
        let mut loops = Vec::new();
        for cpu in &cpus[cpus.len() - cpus.len() / 2..] {
            let child = std::process::Command::new("taskset")
                .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()?;
            loops.push(child);
        }
        Some(BusyHalf(loops))
    }
}

impl Drop for BusyHalf {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The CPUs of this process's affinity mask, in order.
fn affinity_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data, so all-zero is a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !ok {
        return (0..n).collect();
    }
    // SAFETY: CPU_ISSET reads the set filled above.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// One child's step time (ms) for `preset`, with `AG_NUM_THREADS=1` when
/// `one_thread`.
fn child_step_ms(
    exe: &std::path::Path,
    preset: &str,
    steps: usize,
    one_thread: bool,
) -> Option<f64> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--child", preset, &steps.to_string(), "--step-only"]);
    if one_thread {
        cmd.env("AG_NUM_THREADS", "1");
    } else {
        cmd.env_remove("AG_NUM_THREADS");
    }
    let out = cmd.output().ok()?;
    parse_step_ms(&String::from_utf8_lossy(&out.stdout))
}

/// The default thread count's step against the 1-thread step, on a quiet
/// machine and with busy loops on half of the CPUs, in alternated runs;
/// prints one machine-readable line per load.
fn contention(exe: &std::path::Path, preset: &str, steps: usize, rounds: usize) {
    for busy in [false, true] {
        let guard = if busy { BusyHalf::start() } else { None };
        if busy && guard.is_none() {
            say!("contention: preset={preset} load=busy_half skipped (one CPU or no taskset)");
            continue;
        }
        let loops = guard.as_ref().map_or(0, |g| g.0.len());
        let (mut one, mut many) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            one.extend(child_step_ms(exe, preset, steps, true));
            many.extend(child_step_ms(exe, preset, steps, false));
        }
        drop(guard);
        let (r1, rn) = (range(&one), range(&many));
        let (m1, mn) = (median(&mut one), median(&mut many));
        say!(
            "contention: preset={preset} load={} busy_loops={loops} runs={rounds} t1_ms={m1:.2} tdefault_ms={mn:.2} tdefault_over_t1={:.3} t1_range={r1} tdefault_range={rn}",
            if busy { "busy_half" } else { "quiet" },
            mn / m1
        );
    }
}

/// "lo-hi" of a set of timings.
fn range(v: &[f64]) -> String {
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(0.0, f64::max);
    format!("{lo:.1}-{hi:.1}")
}

/// k contexts training at once on k host threads (sampling chains, say):
/// their total wall time at the default thread count against at
/// `AG_NUM_THREADS=1`, alternated; k is 2 below 8 CPUs, else 4. Shared
/// threads must not make several contexts slower than one thread each.
fn contexts(exe: &std::path::Path, preset: &str, steps: usize, rounds: usize) {
    let k = if affinity_cpus().len() >= 8 { 4 } else { 2 };
    let run = |one_thread: bool| -> Option<f64> {
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--child-contexts",
            &k.to_string(),
            preset,
            &steps.to_string(),
        ]);
        if one_thread {
            cmd.env("AG_NUM_THREADS", "1");
        } else {
            cmd.env_remove("AG_NUM_THREADS");
        }
        let out = cmd.output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("contexts_ms ")?.parse().ok())
    };
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        one.extend(run(true));
        many.extend(run(false));
    }
    if one.is_empty() || many.is_empty() {
        say!("contexts: preset={preset} k={k} failed");
        return;
    }
    let (r1, rn) = (range(&one), range(&many));
    let (m1, mn) = (median(&mut one), median(&mut many));
    say!(
        "contexts: preset={preset} k={k} steps={steps} runs={rounds} n1_ms={m1:.1} ndefault_ms={mn:.1} ndefault_over_n1={:.3} n1_range={r1} ndefault_range={rn}",
        mn / m1
    );
}

/// The `--child-contexts` child: `k` host threads, each training its own
/// context (its own model and data order) for `steps` steps after two
/// warm-up steps; prints the wall time of the timed steps of all.
fn run_contexts(k: usize, name: &str, steps: usize) {
    let data = corpus();
    let (map, v) = vocabulary(&data);
    let cfg = GptConfig::preset(name, v).expect("preset");
    let start = std::sync::Barrier::new(k + 1);
    let end = std::sync::Barrier::new(k + 1);
    let wall = std::thread::scope(|s| {
        for c in 0..k as u64 {
            let (data, map, start, end) = (&data, &map, &start, &end);
            s.spawn(move || {
                let mut ctx = Context::new();
                let gpt = Gpt::new(&mut ctx, cfg, 1 + c).expect("model");
                Gpt::adamw(&mut ctx, 1e-3).expect("adamw");
                let mut rng = Rng(7 + c);
                let n = cfg.tokens();
                let (mut ids, mut tg) = (vec![0i32; n], vec![0i32; n]);
                let (b, t) = (cfg.batch, cfg.block_size);
                let mut step = |ctx: &mut Context| {
                    sample_batch(&mut rng, data, map, t, &mut ids, &mut tg);
                    ctx.reset();
                    let loss = gpt.loss(ctx, &ids, &tg, b, t).expect("forward");
                    ctx.backward(loss).expect("backward");
                    ctx.clip_grad_norm(1.0).expect("clip");
                    ctx.optimizer_step().expect("step");
                    ctx.zero_grad();
                };
                step(&mut ctx);
                step(&mut ctx);
                start.wait();
                for _ in 0..steps {
                    step(&mut ctx);
                }
                end.wait();
            });
        }
        start.wait();
        let t0 = Instant::now();
        end.wait();
        t0.elapsed()
    });
    println!("contexts_ms {:.3}", ms(wall));
}

/// The step as installed (no variable: the library's own kernel choice)
/// against every kernel family that applies to this CPU class set by hand
/// with OPENBLAS_CORETYPE, in alternated runs; prints one machine-readable
/// line with the ratio to the fastest.
fn coretype_ratio(exe: &std::path::Path, runtime: &str, preset: &str, steps: usize, rounds: usize) {
    let families: &[&str] = if runtime.contains("cpu_isa=AVX-512") {
        &["SkylakeX", "Cooperlake", "Haswell"]
    } else if runtime.contains("cpu_isa=AVX2") {
        &["Haswell", "Zen"]
    } else {
        say!("coretype: preset={preset} skipped (no AVX2)");
        return;
    };
    let run = |core: Option<&str>| {
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["--child", preset, &steps.to_string(), "--step-only"]);
        cmd.env_remove("AG_BLAS_CORE");
        match core {
            Some(c) => cmd.env("OPENBLAS_CORETYPE", c),
            None => cmd.env_remove("OPENBLAS_CORETYPE"),
        };
        cmd.output()
            .ok()
            .and_then(|o| parse_step_ms(&String::from_utf8_lossy(&o.stdout)))
    };
    let mut asis = Vec::new();
    let mut by_core = vec![Vec::new(); families.len()];
    for _ in 0..rounds {
        asis.extend(run(None));
        for (c, v) in families.iter().zip(by_core.iter_mut()) {
            v.extend(run(Some(c)));
        }
    }
    let asis_ms = median(&mut asis);
    let mut best = ("none", f64::INFINITY);
    let mut each = Vec::new();
    for (c, v) in families.iter().zip(by_core.iter_mut()) {
        let m = median(v);
        each.push(format!("{c}={m:.2}"));
        if m < best.1 {
            best = (c, m);
        }
    }
    say!(
        "coretype: preset={preset} runs={rounds} asis_ms={asis_ms:.2} {} best={} asis_over_best={:.3}",
        each.join(" "),
        best.0,
        asis_ms / best.1
    );
}

/// Writes docs/benchmarks.md: the figures this run printed, dated.
fn write_page() {
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let body = PAGE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let page = format!(
        "# Benchmarks\n\nGenerated by `make bench` on {date}; rerun it to refresh this page \
         (figures depend on the machine and its load). Earlier dated figures, per \
         host, are in [benchmarks-history.md](benchmarks-history.md).\n\n```text\n{body}```\n"
    );
    let written =
        std::fs::create_dir_all("docs").and_then(|()| std::fs::write("docs/benchmarks.md", page));
    match written {
        Ok(()) => println!("wrote docs/benchmarks.md"),
        Err(e) => println!("could not write docs/benchmarks.md: {e}"),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn corpus() -> Vec<u8> {
    for p in [
        "../shared/data/shakespeare_tiny.txt",
        "data/shakespeare.txt",
    ] {
        if let Ok(d) = std::fs::read(p) {
            return d;
        }
    }
    let words = [
        "the ", "king ", "and ", "queen ", "of ", "love ", "shall ", "be ", "not ", "to ", "\n",
    ];
    let mut r = Rng(1);
    (0..400_000)
        .flat_map(|_| words[r.below(words.len())].bytes())
        .collect()
}

fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs one preset in this process and prints its figures; `batch`
/// overrides the preset's batch (the scaling table's medium at batch 64).
fn run_preset(name: &str, steps: usize, batch: Option<usize>) {
    let data = corpus();
    let (map, v) = vocabulary(&data);
    let mut cfg = GptConfig::preset(name, v).expect("preset");
    if let Some(b) = batch {
        cfg.batch = b;
    }
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg, 1).expect("model");
    Gpt::adamw(&mut ctx, 1e-3).expect("adamw");
    let mut rng = Rng(7);
    let n = cfg.tokens();
    let (mut ids, mut tg) = (vec![0i32; n], vec![0i32; n]);
    let (b, t) = (cfg.batch, cfg.block_size);
    let mut step = |ctx: &mut Context, times: &mut [f64; 6]| {
        sample_batch(&mut rng, &data, &map, t, &mut ids, &mut tg);
        let t0 = Instant::now();
        ctx.reset();
        let t1 = Instant::now();
        let loss = gpt.loss(ctx, &ids, &tg, b, t).expect("forward");
        let t2 = Instant::now();
        ctx.backward(loss).expect("backward");
        let t3 = Instant::now();
        ctx.clip_grad_norm(1.0).expect("clip");
        let t4 = Instant::now();
        ctx.optimizer_step().expect("step");
        let t5 = Instant::now();
        ctx.zero_grad();
        let t6 = Instant::now();
        for (slot, d) in
            times
                .iter_mut()
                .zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5])
        {
            *slot = ms(d);
        }
    };
    let mut times = [0.0; 6];
    for _ in 0..3 {
        step(&mut ctx, &mut times);
    }
    let mut per: Vec<[f64; 6]> = Vec::with_capacity(steps);
    for _ in 0..steps {
        step(&mut ctx, &mut times);
        per.push(times);
    }
    let mut totals: Vec<f64> = per.iter().map(|t| t.iter().sum()).collect();
    let step_ms = median(&mut totals);
    let part = |i: usize| {
        let mut v: Vec<f64> = per.iter().map(|t| t[i]).collect();
        median(&mut v)
    };
    let (reset_ms, fwd_ms, bwd_ms, clip_ms, opt_ms, zero_ms) =
        (part(0), part(1), part(2), part(3), part(4), part(5));
    let ops = ctx.memory_stats().tape_len as f64;

    // Breakdown from traced steps: each step's phases partition its wall
    // time on the calling thread, and within forward + backward the
    // products made on this thread are timed; means over the same steps
    // add up exactly.
    let traced = steps.clamp(1, 10);
    let mut sum = [0.0f64; 6];
    let (mut blas_ms, mut worker_busy_ms, mut worker_blas_ms) = (0.0, 0.0, 0.0);
    let mut gemms = Vec::new();
    let mut op_times: Vec<trace::OpTime> = Vec::new();
    for _ in 0..traced {
        trace::start();
        step(&mut ctx, &mut times);
        let tr = trace::stop();
        sum.iter_mut().zip(times).for_each(|(s, t)| *s += t);
        blas_ms += ms(tr.blas);
        worker_busy_ms += ms(tr.worker_busy);
        worker_blas_ms += ms(tr.worker_blas);
        gemms = tr.gemms;
        for o in tr.ops {
            match op_times
                .iter_mut()
                .find(|x| x.kind == o.kind && x.backward == o.backward)
            {
                Some(x) => {
                    x.wall += o.wall;
                    x.blas += o.blas;
                }
                None => op_times.push(o),
            }
        }
    }
    let k = traced as f64;
    let [m_reset, m_fwd, m_bwd, m_clip, m_opt, m_zero] = sum.map(|s| s / k);
    let (blas_ms, worker_busy_ms, worker_blas_ms) =
        (blas_ms / k, worker_busy_ms / k, worker_blas_ms / k);
    let traced_step = sum.iter().sum::<f64>() / k;
    let flops: f64 = gemms.iter().map(|g| 2.0 * (g.m * g.n * g.k) as f64).sum();

    // Floor: replay this step's own GEMM shapes on warm buffers.
    let (floor_1t_ms, floor_ms) = replay(&gemms, if steps < 5 { 3 } else { 7 });
    let st = ctx.memory_stats();
    let hw = st.arena_high_water_bytes;
    let tape_ns = tape_overhead_ns(20_000);
    let other = (m_fwd + m_bwd - blas_ms).max(0.0);
    let bookkeeping = (ops * tape_ns * 1e-6).min(other);
    let pct = |x: f64| 100.0 * x / traced_step;
    println!(
        "preset {name}: L={} NH={} C={} T={} B={} V={} params={}",
        cfg.n_layer,
        cfg.n_head,
        cfg.n_embd,
        t,
        b,
        v,
        gpt.num_params()
    );
    println!(
        "  step_ms (median of {steps}) {step_ms:.3}   tok/s {:.0}   GFLOP/s {:.1} ({:.3} GFLOP of matrix products per step)",
        n as f64 / step_ms * 1e3,
        flops / (step_ms * 1e-3) / 1e9,
        flops / 1e9
    );
    println!(
        "  matmul-only floor {floor_ms:.3} ms on 2 threads, {floor_1t_ms:.3} on 1 ({} sgemm calls, {:.1} GFLOP/s on 2)   GEMM efficiency floor/step = {:.2}",
        gemms.len(),
        flops / (floor_ms * 1e-3) / 1e9,
        floor_ms / step_ms
    );
    let parts = [
        pct(blas_ms),
        pct(other - bookkeeping),
        pct(bookkeeping),
        pct(m_clip + m_opt + m_zero),
        pct(m_reset),
    ];
    println!(
        "  breakdown of the calling thread's wall time (mean of {traced} traced steps, {traced_step:.3} ms): BLAS {:.1}%  other kernels {:.1}%  tape bookkeeping {:.1}% (est. {} ops x {:.0} ns)  optimizer+clip+zero {:.1}%  reset {:.1}%  = {:.1}%",
        parts[0],
        parts[1],
        parts[2],
        ops,
        tape_ns,
        parts[3],
        parts[4],
        parts.iter().sum::<f64>()
    );
    println!(
        "  worker thread (beside, not in the 100%): busy {worker_busy_ms:.3} ms per step = {:.1}% of the step, of which its own BLAS {worker_blas_ms:.3} ms",
        pct(worker_busy_ms)
    );
    // Kernel time outside products, per op kind: where "other kernels" goes.
    let outside = |o: &trace::OpTime| ms(o.wall.saturating_sub(o.blas)) / k;
    op_times.sort_by(|a, b| outside(b).total_cmp(&outside(a)));
    let listed: Vec<String> = op_times
        .iter()
        .filter(|o| outside(o) >= 0.005 * traced_step)
        .map(|o| {
            let dir = if o.backward { "bwd" } else { "fwd" };
            format!("{} {dir} {:.3}", o.kind, outside(o))
        })
        .collect();
    println!(
        "  other kernels by op (ms per step on the calling thread, outside products; 0.5%+ of the step): {}",
        listed.join(", ")
    );
    println!(
        "  medians: forward {fwd_ms:.3} ms  backward {bwd_ms:.3} ms  clip {clip_ms:.3}  adamw {opt_ms:.3}  zero_grad {zero_ms:.3}  reset {reset_ms:.4}"
    );
    println!(
        "  memory: peak RSS {} KiB  arena high-water {} bytes ({:.0} bytes/token)  params+grads {} bytes  adam state {} bytes",
        status_kb("VmHWM:"),
        hw,
        hw as f64 / n as f64,
        st.param_bytes,
        st.optimizer_bytes
    );
}

/// Recomputation: each block a segment; arena high-water and step time with
/// no block recomputed, every block, and `auto` under two caps (halfway
/// between the two needs, and the all-recompute need itself). A fresh
/// context per mode, so each high-water is that mode's own.
fn recompute_figures(name: &str, steps: usize) {
    let data = corpus();
    let (map, v) = vocabulary(&data);
    let cfg = GptConfig::preset(name, v).expect("preset");
    let t = cfg.block_size;
    let run = |policy: RecomputePolicy, cap: Option<usize>| {
        let mut ctx = Context::new();
        let mut gpt = Gpt::new(&mut ctx, cfg, 1).expect("model");
        gpt.segments = true;
        Gpt::adamw(&mut ctx, 1e-3).expect("adamw");
        ctx.set_recompute(policy);
        ctx.set_arena_limit(cap);
        let mut rng = Rng(7);
        let (mut ids, mut tg) = (vec![0i32; cfg.tokens()], vec![0i32; cfg.tokens()]);
        let mut times = Vec::with_capacity(steps);
        for i in 0..steps + 3 {
            sample_batch(&mut rng, &data, &map, t, &mut ids, &mut tg);
            let t0 = Instant::now();
            gpt.train_step(&mut ctx, &ids, &tg).expect("step");
            if i >= 3 {
                times.push(ms(t0.elapsed()));
            }
        }
        (median(&mut times), ctx.memory_stats())
    };
    let (none_ms, none) = run(RecomputePolicy::None, None);
    let (all_ms, all) = run(RecomputePolicy::All, None);
    let mb = |x: u64| x as f64 / 1e6;
    println!(
        "  recompute (each of the {} blocks a segment, median of {steps} steps): none: arena high-water {:.2} MB, {none_ms:.3} ms/step | all: {:.2} MB, {all_ms:.3} ms/step ({:.2}x time, {:.2} MB saved)",
        cfg.n_layer,
        mb(none.arena_high_water_bytes),
        mb(all.arena_high_water_bytes),
        all_ms / none_ms,
        mb(all.recompute_saved_bytes)
    );
    let (lo, hi) = (all.arena_need_all_bytes, none.arena_need_none_bytes);
    for cap in [(lo + hi) / 2, lo] {
        if cap >= hi {
            println!(
                "  recompute auto under cap {:.2} MB: the cap is not below the no-recompute need",
                mb(cap)
            );
            continue;
        }
        let (ms_auto, s) = run(RecomputePolicy::Auto, Some(cap as usize));
        println!(
            "  recompute auto under cap {:.2} MB: arena high-water {:.2} MB, {ms_auto:.3} ms/step ({:.2}x time), {} of {} blocks recomputed",
            mb(cap),
            mb(s.arena_high_water_bytes),
            ms_auto / none_ms,
            s.recomputed_segments,
            cfg.n_layer
        );
    }
}

/// The matmul-only floors (ms): every recorded GEMM run on warm dense
/// buffers, each timed alone (median of `reps`). The first is each
/// product on one thread (the GEMM library's own threads at one or two,
/// keeping the faster). The second also tries each product as the step
/// runs it on two threads (split by rows across the worker when large),
/// keeping the fastest: the products' share of a two-thread step at best,
/// the floor that GEMM efficiency divides.
fn replay(gemms: &[Gemm], reps: usize) -> (f64, f64) {
    let need = |rows: usize, cols: usize, ld: usize| (rows - 1) * ld + cols;
    let size = gemms
        .iter()
        .map(|g| {
            let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
            let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
            need(ar, ac, g.lda)
                .max(need(br, bc, g.ldb))
                .max(need(g.m, g.n, g.ldc))
        })
        .max()
        .unwrap_or(1);
    let a = vec![0.5f32; size];
    let b = vec![0.25f32; size];
    let mut c = vec![0.0f32; size];
    let time = |run: &mut dyn FnMut()| {
        run();
        let mut runs: Vec<f64> = (0..reps)
            .map(|_| {
                let t0 = Instant::now();
                run();
                ms(t0.elapsed())
            })
            .collect();
        median(&mut runs)
    };
    let mut best = vec![f64::INFINITY; gemms.len()];
    for threads in [1, 2] {
        blas::set_blas_threads(threads);
        for (g, best) in gemms.iter().zip(best.iter_mut()) {
            *best = best.min(time(&mut || blas::sgemm(*g, 1.0, &a, &b, 1.0, &mut c)));
        }
    }
    blas::set_blas_threads(1);
    let one_thread: f64 = best.iter().sum();
    if let Some(split) = blas::SplitProducts::new() {
        for (g, best) in gemms.iter().zip(best.iter_mut()) {
            *best = best.min(time(&mut || split.sgemm(*g, 1.0, &a, &b, 1.0, &mut c)));
        }
    }
    if std::env::var_os("BENCH_SHAPES").is_some() {
        type Key = (bool, bool, usize, usize, usize);
        let mut groups: Vec<(Key, usize, f64)> = Vec::new();
        for (g, t) in gemms.iter().zip(&best) {
            let key = (g.trans_a, g.trans_b, g.m, g.n, g.k);
            match groups.iter_mut().find(|x| x.0 == key) {
                Some(x) => {
                    x.1 += 1;
                    x.2 += t;
                }
                None => groups.push((key, 1, *t)),
            }
        }
        groups.sort_by(|a, b| b.2.partial_cmp(&a.2).unwrap_or(std::cmp::Ordering::Equal));
        for ((ta, tb, m, n, k), count, t) in groups.iter().take(12) {
            let gflops = 2.0 * (*m * *n * *k * *count) as f64 / (t * 1e-3) / 1e9;
            println!(
                "    floor: {count:4} x [{m}x{k}]{} @ [{k}x{n}]{}  {t:8.3} ms  {gflops:6.1} GFLOP/s",
                if *ta { "^T" } else { "" },
                if *tb { "^T" } else { "" }
            );
        }
    }
    (one_thread, best.iter().sum())
}

/// ns per recorded op (record + forward + backward) on 1-element tensors.
fn tape_overhead_ns(total_ops: usize) -> f64 {
    let mut ctx = Context::new();
    let p = ctx.param(&[1], Some(&[0.5])).expect("param");
    let chain = 1000;
    let rounds = (total_ops / chain).max(1);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..rounds {
            ctx.reset();
            let mut x = p;
            for i in 0..chain {
                x = if i % 2 == 0 {
                    ctx.scale(x, 0.999).expect("op")
                } else {
                    ctx.tanh(x).expect("op")
                };
            }
            ctx.backward(x).expect("backward");
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e9 / (rounds * (chain + 1)) as f64);
        ctx.zero_grad();
    }
    best
}

/// GB/s of a kernel moving `bytes`, best of `reps`.
fn gbps(bytes: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

fn bandwidth(quick: bool) {
    let n: usize = if quick { 1 << 20 } else { 1 << 24 };
    let reps = if quick { 2 } else { 10 };
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let copy = gbps(8 * n, reps, || {
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
    });
    let mut ctx = Context::new();
    let cdim = 256;
    let w = ctx.param(&[cdim], Some(&vec![1.0; cdim])).expect("w");
    let bias = ctx.param(&[cdim], None).expect("b");
    ctx.set_grad_enabled(false);
    let data: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 16.0).collect();
    let mut kernel = |name: &str,
                      f: &dyn Fn(
        &mut Context,
        arenagrad::Tensor,
    ) -> arenagrad::Result<arenagrad::Tensor>| {
        // Input created once per iteration outside the timed op: time only the op.
        let mut best = f64::INFINITY;
        for _ in 0..=reps {
            ctx.reset();
            let x = ctx.tensor(&[n / cdim, cdim], &data).expect("x");
            let t0 = Instant::now();
            std::hint::black_box(f(&mut ctx, x).expect("op"));
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let g = 8.0 * n as f64 / best / 1e9;
        println!("  {name:<10} {g:6.1} GB/s  = {:.2} of copy", g / copy);
    };
    println!(
        "bandwidth ({} floats, copy of the same bytes {copy:.1} GB/s):",
        n
    );
    kernel("gelu", &|c, x| c.gelu(x));
    kernel("layernorm", &|c, x| c.layernorm(x, w, bias));
    kernel("softmax", &|c, x| c.softmax(x, false, 1.0));
    kernel("add", &|c, x| c.add(x, bias));
    // AdamW: reads p, g, m, v and writes p, m, v.
    let mut octx = Context::new();
    let p = octx.param(&[n], None).expect("p");
    octx.optimizer(OptimizerKind::AdamW {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    })
    .expect("opt");
    let mut best = f64::INFINITY;
    for _ in 0..=reps {
        octx.reset();
        let l = octx.sum(p).expect("sum");
        octx.backward(l).expect("backward");
        let t0 = Instant::now();
        octx.optimizer_step().expect("step");
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let g = 28.0 * n as f64 / best / 1e9;
    println!(
        "  {:<10} {g:6.1} GB/s  = {:.2} of copy (7 streams incl. the finiteness pass: 8)",
        "adamw",
        g / copy
    );
}

/// The step time a child printed (`step_ms (median of N) X`).
fn parse_step_ms(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("step_ms"))?;
    line.split(')')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A Python that can import torch: BENCH_PYTHON, else the venv
/// `make bench-deps` makes, else python3.
fn torch_python() -> Option<String> {
    let candidates = [
        std::env::var("BENCH_PYTHON").ok(),
        Some("target/bench-venv/bin/python".into()),
        Some("python3".into()),
    ];
    candidates.into_iter().flatten().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import torch"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// PyTorch's step time for `preset` (scripts/bench_torch.py): every
/// configuration, or only `config`; returns its best (ms, configuration)
/// after printing the per-configuration lines when `verbose`.
fn torch_step(
    python: &str,
    preset: &str,
    config: Option<&str>,
    verbose: bool,
) -> Option<(f64, String)> {
    let steps = match preset {
        "tiny" => "200",
        "small" => "20",
        _ => "6",
    };
    let mut args = vec!["scripts/bench_torch.py", preset, steps];
    args.extend(config);
    let out = std::process::Command::new(python)
        .args(&args)
        .stderr(std::process::Stdio::inherit())
        .output();
    let Ok(out) = out else {
        say!("  PyTorch: could not run {python}");
        return None;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let best = text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 4 && f[0] == "torch-best")
            .then(|| f[2].parse::<f64>().ok().map(|ms| (ms, f[3].to_string())))
            .flatten()
    });
    if verbose {
        for l in text.lines().filter(|l| !l.starts_with("torch-best")) {
            say!("{l}");
        }
    }
    best
}

/// Back-to-back pairs of (our step, PyTorch's best configuration) after the
/// first: on a shared machine a step's time drifts by tens of percent from
/// one minute to the next, and the median of per-pair ratios is steadier
/// than any one ratio. Three pairs left single outliers deciding the
/// median (ratios of 0.67 to 1.21 on one preset); five hold against two.
const TORCH_PAIRS: usize = 5;

/// Times the same step in PyTorch (scripts/bench_torch.py, right after ours,
/// on the same machine) and prints the ratio; then times further pairs of
/// our step alone and PyTorch's best configuration alone, back to back.
fn compare_with_torch(
    python: &str,
    exe: &std::path::Path,
    preset: &str,
    steps: usize,
    ours_ms: f64,
) -> Option<f64> {
    let Some((torch_ms, config)) = torch_step(python, preset, None, true) else {
        say!("  PyTorch: no configuration ran");
        return None;
    };
    say!(
        "  vs PyTorch's best ({config}, {torch_ms:.3} ms/step): arenagrad takes {:.2}x its time",
        ours_ms / torch_ms
    );
    let mut ratios = vec![ours_ms / torch_ms];
    for _ in 1..TORCH_PAIRS {
        let ours = std::process::Command::new(exe)
            .args(["--child", preset, &steps.to_string(), "--step-only"])
            .output()
            .ok()
            .and_then(|o| parse_step_ms(&String::from_utf8_lossy(&o.stdout)));
        let theirs = torch_step(python, preset, Some(&config), false);
        if let (Some(o), Some((t, _))) = (ours, theirs) {
            ratios.push(o / t);
        }
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let m = median(&mut ratios);
    say!(
        "  vs PyTorch's {config}, {} back-to-back pairs: ratios {}, median {m:.2}x",
        ratios.len(),
        shown.join(" "),
    );
    Some(m)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let arg = |i: usize| args.get(i).map(String::as_str);
    let num = |i: usize, default: usize| arg(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    if let Some(i) = args.iter().position(|a| a == "--child-contexts") {
        run_contexts(num(i + 1, 2), arg(i + 2).unwrap_or("small"), num(i + 3, 10));
        return;
    }
    // `--contention PRESET STEPS ROUNDS` / `--contexts PRESET STEPS ROUNDS`:
    // those figures alone (scripts/bench_scaling.py runs them).
    for (flag, figure) in [
        (
            "--contention",
            contention as fn(&std::path::Path, &str, usize, usize),
        ),
        ("--contexts", contexts),
    ] {
        if let Some(i) = args.iter().position(|a| a == flag) {
            let exe = std::env::current_exe().expect("exe");
            figure(
                &exe,
                arg(i + 1).unwrap_or("small"),
                num(i + 2, 20),
                num(i + 3, 5),
            );
            return;
        }
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let name = args.get(i + 1).map(String::as_str).unwrap_or("tiny");
        let steps = args.get(i + 2).and_then(|s| s.parse().ok()).unwrap_or(20);
        let batch = args
            .iter()
            .position(|a| a == "--batch")
            .and_then(|j| args.get(j + 1)?.parse().ok());
        run_preset(name, steps, batch);
        // `--step-only`: the step figures alone, for quick comparisons.
        if !args.iter().any(|a| a == "--step-only") {
            recompute_figures(name, steps.min(40));
        }
        return;
    }
    say!(
        "arenagrad bench ({} BLAS threads: OPENBLAS_NUM_THREADS={})",
        if quick { "quick," } else { "" },
        std::env::var("OPENBLAS_NUM_THREADS").unwrap_or_else(|_| "unset".into())
    );
    let presets: &[(&str, usize)] = if quick {
        &[("tiny", 5), ("small", 2)]
    } else {
        &[("tiny", 500), ("small", 40), ("medium", 10)]
    };
    let runtime = runtime_line();
    say!("{runtime}");
    let exe = std::env::current_exe().expect("exe");
    let python = (!quick).then(torch_python).flatten();
    for (name, steps) in presets {
        let out = std::process::Command::new(&exe)
            .args(["--child", name, &steps.to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("spawn");
        let text = String::from_utf8_lossy(&out.stdout);
        say!("{}", text.trim_end());
        if !out.status.success() {
            eprintln!("bench: preset {name} failed");
            std::process::exit(1);
        }
        if let (Some(py), Some(ours)) = (&python, parse_step_ms(&text))
            && let Some(r) = compare_with_torch(py, &exe, name, *steps, ours)
        {
            say!("torch_ratio: preset={name} median={r:.3}");
        }
    }
    if !quick {
        coretype_ratio(&exe, &runtime, "tiny", 300, 5);
        coretype_ratio(&exe, &runtime, "small", 20, 5);
        contention(&exe, "small", 20, 5);
        contexts(&exe, "small", 20, 5);
    }
    if !quick && python.is_none() {
        say!(
            "PyTorch comparison skipped: no Python with torch (`make bench-deps` installs one in target/bench-venv, or set BENCH_PYTHON)"
        );
    }
    let ops = if quick { 20_000 } else { 1_000_000 };
    println!(
        "tape overhead: {:.1} ns per recorded op (record + forward + backward), {} ops",
        tape_overhead_ns(ops),
        ops
    );
    bandwidth(quick);
    if !quick {
        write_page();
    }
}

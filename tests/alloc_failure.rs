//! Allocation-failure loops in the style of SQLite's OOM tests: every
//! fallible persistent allocation, failed in turn, gives ALLOCATION_FAILED
//! and leaves a context that still works.
//!
//! * Fault injection: for every k = 1..K, fail the k-th fallible persistent
//!   allocation (K = how many an uninjected run makes, as counted by the
//!   hook) during "create a tiny GPT, create AdamW, 3 training steps, save a
//!   checkpoint, load it", once in one-shot and once in sticky mode, through
//!   the Rust hook (`Context::inject_allocation_failure`) and through the C
//!   hook (`ag_test_fail_allocation`, on a small MLP built with the C API).
//!   Every call returns Ok or AllocationFailed; once injection stops, the
//!   failed call is retried (a failed model creation is redone from scratch
//!   in a fresh context) and every following loss equals the control run's
//!   bit for bit.
//! * Arena cap sweep: `set_arena_limit` from 0 to twice the peak arena use
//!   of a tiny GPT step, in 64 KiB steps, 4 KiB steps within 256 KiB of the
//!   peak and 64-byte steps within 4 KiB of it:
//!   every step returns Ok or OutOfMemory (Ok exactly when the cap is at
//!   least the peak), and after removing the cap the next losses match the
//!   control bit for bit.

// `Error` is large by design (see lib.rs); the helpers here return it as is.
#![allow(clippy::result_large_err)]

mod common;

use arenagrad::ffi::*;
use arenagrad::{Context, Error, RecomputePolicy};
use common::ffi::last_error;
use common::gpt::{Gpt, GptConfig, Rng};
use std::path::PathBuf;
use std::ptr::null_mut;

const SEED: u64 = 7;
const LR: f32 = 1e-3;
const STEPS: usize = 3;

/// The tiny preset (L=1, NH=2, C=32, T=32, B=8) over 16 tokens.
fn cfg() -> GptConfig {
    GptConfig::tiny(16)
}

/// Batch `i`: deterministic token ids and next-token targets.
fn batch(i: usize) -> (Vec<i32>, Vec<i32>) {
    let c = cfg();
    let mut rng = Rng(1000 + i as u64);
    let n = c.tokens();
    let seq: Vec<i32> = (0..=n).map(|_| rng.below(c.vocab_size) as i32).collect();
    (seq[..n].to_vec(), seq[1..].to_vec())
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ag_allocfail_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn is_alloc_failure<T>(r: &Result<T, Error>, what: &str) -> bool {
    match r {
        Ok(_) => false,
        Err(Error::AllocationFailed { .. }) => true,
        Err(e) => panic!("{what}: expected Ok or AllocationFailed, got {e}"),
    }
}

/// The stages of the scenario, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Create,
    Optimizer,
    Step(usize),
    Save,
    Load,
}

fn stages() -> Vec<Stage> {
    let mut s = vec![Stage::Create, Stage::Optimizer];
    s.extend((0..STEPS).map(Stage::Step));
    s.extend([Stage::Save, Stage::Load]);
    s
}

struct Run {
    ctx: Context,
    gpt: Option<Gpt>,
    path: PathBuf,
    /// Loss of each step (index = step), then of the final control step.
    losses: Vec<Option<f32>>,
}

impl Run {
    fn new(path: PathBuf) -> Run {
        Run {
            ctx: Context::new(),
            gpt: None,
            path,
            losses: vec![None; STEPS + 1],
        }
    }

    /// Runs one stage; Err only for an allocation failure (anything else
    /// fails the test).
    fn stage(&mut self, s: Stage) -> Result<(), Error> {
        match s {
            Stage::Create => {
                let r = Gpt::new(&mut self.ctx, cfg(), SEED);
                if is_alloc_failure(&r, "Gpt::new") {
                    return r.map(|_| ());
                }
                self.gpt = r.ok();
            }
            Stage::Optimizer => {
                let r = Gpt::adamw(&mut self.ctx, LR);
                if is_alloc_failure(&r, "adamw") {
                    return r;
                }
            }
            Stage::Step(i) => {
                let (ids, tg) = batch(i);
                let gpt = self.gpt.as_ref().expect("model");
                let r = gpt.train_step(&mut self.ctx, &ids, &tg);
                if is_alloc_failure(&r, "train_step") {
                    return r.map(|_| ());
                }
                self.losses[i] = r.ok();
            }
            Stage::Save => {
                let r = self.ctx.checkpoint_save(&self.path, b"user");
                if is_alloc_failure(&r, "checkpoint_save") {
                    return r;
                }
            }
            Stage::Load => {
                let r = self.ctx.checkpoint_load(&self.path);
                if is_alloc_failure(&r, "checkpoint_load") {
                    return r.map(|_| ());
                }
                assert_eq!(r.unwrap(), b"user");
            }
        }
        Ok(())
    }

    /// The step after the scenario (the one compared with the control).
    fn final_step(&mut self) {
        let (ids, tg) = batch(STEPS);
        let gpt = self.gpt.as_ref().expect("model");
        let loss = gpt.train_step(&mut self.ctx, &ids, &tg).unwrap();
        self.losses[STEPS] = Some(loss);
    }
}

fn control() -> (Vec<Option<f32>>, u64) {
    let dir = temp_dir("control");
    let mut run = Run::new(dir.join("m.ckpt"));
    assert_eq!(run.ctx.inject_allocation_failure(0, false), 0);
    for s in stages() {
        run.stage(s).unwrap();
    }
    let k = run.ctx.inject_allocation_failure(0, false);
    run.final_step();
    std::fs::remove_dir_all(&dir).unwrap();
    (run.losses, k)
}

fn bits(v: &[Option<f32>]) -> Vec<Option<u32>> {
    v.iter().map(|x| x.map(f32::to_bits)).collect()
}

fn no_temp_files(dir: &PathBuf) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp."), "temporary file left: {name}");
    }
}

#[test]
fn rust_hook_every_persistent_allocation_fails_once_and_sticky() {
    let (want, k_total) = control();
    assert!(k_total > 0, "no fallible persistent allocation counted");
    let mut cases = 0;
    let mut failures = 0;
    for sticky in [false, true] {
        for k in 1..=k_total {
            cases += 1;
            let dir = temp_dir(&format!("rust_{k}_{sticky}"));
            let mut run = Run::new(dir.join("m.ckpt"));
            run.ctx.inject_allocation_failure(k, sticky);
            let mut failed_at = None;
            for s in stages() {
                match run.stage(s) {
                    Ok(()) => {}
                    Err(_) => {
                        failures += 1;
                        failed_at = Some(s);
                        if sticky {
                            // Still injected: the retry fails again, cleanly.
                            assert!(
                                run.stage(s).is_err(),
                                "k={k}: sticky injection did not fail {s:?} again"
                            );
                        }
                        run.ctx.inject_allocation_failure(0, false);
                        no_temp_files(&dir);
                        if s == Stage::Create {
                            // A half-built model is dropped: start over in a
                            // fresh context.
                            run.ctx = Context::new();
                        }
                        run.stage(s).unwrap_or_else(|e| {
                            panic!("k={k} sticky={sticky}: retry of {s:?} failed: {e}")
                        });
                    }
                }
            }
            assert!(
                failed_at.is_some(),
                "k={k} sticky={sticky}: no injected failure fired"
            );
            run.inject_off_and_finish();
            assert_eq!(
                bits(&run.losses),
                bits(&want),
                "k={k} sticky={sticky} (failed at {failed_at:?}): losses differ from the control"
            );
            no_temp_files(&dir);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    println!(
        "rust hook: {k_total} injection points, {cases} cases (one-shot and sticky), {failures} injected failures, all recovered bit-exactly"
    );
}

impl Run {
    fn inject_off_and_finish(&mut self) {
        self.ctx.inject_allocation_failure(0, false);
        self.final_step();
    }
}

// ---------------------------------------------------------------------------
// Through the C hook, on a small MLP built with the C API.
// ---------------------------------------------------------------------------

struct CRun {
    ctx: *mut ag_context,
    params: Vec<ag_tensor>,
    path: std::ffi::CString,
    losses: Vec<Option<f32>>,
}

const MLP: [&[usize]; 3] = [&[8, 16], &[16], &[16, 4]];

fn c_ok(ctx: *mut ag_context, st: ag_status, what: &str) {
    assert_eq!(st, AG_STATUS_OK, "{what}: {}", last_error(ctx));
}

impl CRun {
    fn new(path: &std::path::Path) -> CRun {
        let mut ctx = null_mut();
        assert_eq!(ag_context_new(&mut ctx), AG_STATUS_OK);
        CRun {
            ctx,
            params: Vec::new(),
            path: std::ffi::CString::new(path.to_str().unwrap()).unwrap(),
            losses: vec![None; STEPS + 1],
        }
    }

    fn fresh(&mut self) {
        assert_eq!(ag_context_free(&mut self.ctx), AG_STATUS_OK);
        assert_eq!(ag_context_new(&mut self.ctx), AG_STATUS_OK);
        self.params.clear();
    }

    fn check(&self, st: ag_status, what: &str) -> ag_status {
        assert!(
            st == AG_STATUS_OK || st == AG_STATUS_ALLOCATION_FAILED,
            "{what}: expected OK or ALLOCATION_FAILED, got {st}: {}",
            last_error(self.ctx)
        );
        if st != AG_STATUS_OK {
            assert!(!last_error(self.ctx).is_empty());
        }
        st
    }

    fn stage(&mut self, s: Stage) -> ag_status {
        let c = self.ctx;
        match s {
            Stage::Create => {
                for (i, shape) in MLP.iter().enumerate().skip(self.params.len()) {
                    let n: usize = shape.iter().product();
                    let init: Vec<f32> = (0..n)
                        .map(|j| ((j * 7 + i * 3) % 17) as f32 / 17.0 - 0.5)
                        .collect();
                    let mut t = ag_tensor {
                        index: 0,
                        context: 0,
                        generation: 0,
                    };
                    let st = self.check(
                        ag_param_new(c, shape.as_ptr(), shape.len(), init.as_ptr(), &mut t),
                        "ag_param_new",
                    );
                    if st != AG_STATUS_OK {
                        return st;
                    }
                    self.params.push(t);
                }
                AG_STATUS_OK
            }
            Stage::Optimizer => self.check(
                ag_optimizer_adamw(c, 1e-2, 0.9, 0.999, 1e-8, 0.0),
                "ag_optimizer_adamw",
            ),
            Stage::Step(i) => {
                self.losses[i] = Some(self.train_step(i));
                AG_STATUS_OK
            }
            Stage::Save => {
                let u = b"cuser";
                self.check(
                    ag_checkpoint_save(c, self.path.as_ptr(), u.as_ptr(), u.len()),
                    "ag_checkpoint_save",
                )
            }
            Stage::Load => {
                let mut buf = [0u8; 16];
                let mut n = 0usize;
                let st = self.check(
                    ag_checkpoint_load(c, self.path.as_ptr(), buf.as_mut_ptr(), 16, &mut n),
                    "ag_checkpoint_load",
                );
                if st == AG_STATUS_OK {
                    assert_eq!(&buf[..n], b"cuser");
                }
                st
            }
        }
    }

    /// relu(x @ W1 + b1) @ W2, cross-entropy, backward, clip, AdamW step.
    fn train_step(&mut self, i: usize) -> f32 {
        let c = self.ctx;
        let z = ag_tensor {
            index: 0,
            context: 0,
            generation: 0,
        };
        let (mut x, mut h, mut h2, mut a, mut y, mut loss) = (z, z, z, z, z, z);
        c_ok(c, ag_reset(c), "reset");
        let xv: Vec<f32> = (0..32)
            .map(|j| ((j * 5 + i * 11) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let shape = [4usize, 8];
        c_ok(
            c,
            ag_tensor_new(c, shape.as_ptr(), 2, xv.as_ptr(), &mut x),
            "x",
        );
        let p = &self.params;
        c_ok(c, ag_matmul(c, x, p[0], false, false, &mut h), "matmul");
        c_ok(c, ag_add(c, h, p[1], &mut h2), "add");
        c_ok(c, ag_relu(c, h2, &mut a), "relu");
        c_ok(c, ag_matmul(c, a, p[2], false, false, &mut y), "matmul 2");
        let tg = [(i % 4) as i32, 1, 2, 3];
        c_ok(c, ag_cross_entropy(c, y, tg.as_ptr(), 4, &mut loss), "ce");
        let mut v = 0.0f32;
        c_ok(c, ag_tensor_item(c, loss, &mut v), "item");
        c_ok(c, ag_backward(c, loss), "backward");
        c_ok(c, ag_clip_grad_norm(c, 1.0, null_mut()), "clip");
        c_ok(c, ag_optimizer_step(c), "step");
        c_ok(c, ag_zero_grad(c), "zero_grad");
        v
    }

    fn inject(&self, at: u64, sticky: bool) -> u64 {
        let mut n = 0u64;
        c_ok(
            self.ctx,
            ag_test_fail_allocation(self.ctx, at, sticky, &mut n),
            "hook",
        );
        n
    }
}

impl Drop for CRun {
    fn drop(&mut self) {
        let _ = ag_context_free(&mut self.ctx);
    }
}

#[test]
fn c_hook_every_persistent_allocation_fails_once_and_sticky() {
    let dir = temp_dir("c");
    let path = dir.join("m.ckpt");
    let mut control = CRun::new(&path);
    control.inject(0, false);
    for s in stages() {
        assert_eq!(control.stage(s), AG_STATUS_OK);
    }
    let k_total = control.inject(0, false);
    control.losses[STEPS] = Some(control.train_step(STEPS));
    let want = bits(&control.losses);
    drop(control);
    assert!(k_total > 0);
    let mut cases = 0;
    for sticky in [false, true] {
        for k in 1..=k_total {
            cases += 1;
            let _ = std::fs::remove_file(&path);
            let mut run = CRun::new(&path);
            run.inject(k, sticky);
            let mut fired = false;
            for s in stages() {
                if run.stage(s) == AG_STATUS_OK {
                    continue;
                }
                fired = true;
                if sticky {
                    assert_eq!(
                        run.stage(s),
                        AG_STATUS_ALLOCATION_FAILED,
                        "k={k}: sticky retry of {s:?}"
                    );
                }
                run.inject(0, false);
                no_temp_files(&dir);
                if s == Stage::Create {
                    run.fresh();
                }
                assert_eq!(run.stage(s), AG_STATUS_OK, "k={k}: retry of {s:?}");
            }
            assert!(fired, "k={k} sticky={sticky}: nothing failed");
            run.inject(0, false);
            run.losses[STEPS] = Some(run.train_step(STEPS));
            assert_eq!(bits(&run.losses), want, "k={k} sticky={sticky}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    println!("C hook: {k_total} injection points, {cases} cases, all recovered bit-exactly");
}

// ---------------------------------------------------------------------------
// Arena cap sweep.
// ---------------------------------------------------------------------------

#[test]
fn arena_cap_sweep_gives_out_of_memory_then_recovers() {
    // Control: two steps, and the peak arena use of one step.
    let mut ctl = Context::new();
    let gpt = Gpt::new(&mut ctl, cfg(), SEED).unwrap();
    Gpt::adamw(&mut ctl, LR).unwrap();
    let (i0, t0) = batch(0);
    let (i1, t1) = batch(1);
    let want0 = gpt.train_step(&mut ctl, &i0, &t0).unwrap().to_bits();
    let peak = ctl.memory_stats().arena_high_water_bytes as usize;
    let want1 = gpt.train_step(&mut ctl, &i1, &t1).unwrap().to_bits();
    assert_eq!(ctl.memory_stats().arena_high_water_bytes as usize, peak);

    let mut limits: Vec<usize> = (0..=2 * peak).step_by(64 << 10).collect();
    limits.extend((peak.saturating_sub(256 << 10)..=peak + (256 << 10)).step_by(4096));
    limits.extend((peak.saturating_sub(4096)..=peak + 4096).step_by(64));
    limits.extend([1, 63, 64, 65, peak - 1, peak, peak + 1, 2 * peak]);
    limits.sort_unstable();
    limits.dedup();
    let (mut oom, mut ok) = (0, 0);
    for &limit in &limits {
        let mut ctx = Context::new();
        let gpt = Gpt::new(&mut ctx, cfg(), SEED).unwrap();
        Gpt::adamw(&mut ctx, LR).unwrap();
        ctx.set_arena_limit(Some(limit));
        let r = gpt.train_step(&mut ctx, &i0, &t0);
        let used = ctx.memory_stats().arena_used_bytes as usize;
        assert!(used <= limit, "cap {limit}: {used} bytes in use");
        let first_done = match r {
            Ok(loss) => {
                ok += 1;
                assert!(limit >= peak, "cap {limit} < peak {peak} but the step fit");
                assert_eq!(loss.to_bits(), want0, "cap {limit}: loss");
                true
            }
            Err(Error::OutOfMemory { .. }) => {
                oom += 1;
                assert!(limit < peak, "cap {limit} >= peak {peak} but OutOfMemory");
                false
            }
            Err(e) => panic!("cap {limit}: expected Ok or OutOfMemory, got {e}"),
        };
        ctx.set_arena_limit(None);
        ctx.reset();
        if !first_done {
            let loss = gpt.train_step(&mut ctx, &i0, &t0).unwrap();
            assert_eq!(
                loss.to_bits(),
                want0,
                "cap {limit}: loss after removing the cap"
            );
        }
        let loss = gpt.train_step(&mut ctx, &i1, &t1).unwrap();
        assert_eq!(loss.to_bits(), want1, "cap {limit}: next loss");
    }
    println!(
        "arena cap sweep: peak {peak} bytes, {} caps from 0 to {} ({oom} OutOfMemory, {ok} Ok), all recovered bit-exactly",
        limits.len(),
        2 * peak
    );
}

/// The model of the sweep with two blocks, each a recomputation segment.
fn two_blocks(ctx: &mut Context) -> Gpt {
    let cfg = GptConfig {
        n_layer: 2,
        ..cfg()
    };
    let mut gpt = Gpt::new(ctx, cfg, SEED).unwrap();
    gpt.segments = true;
    Gpt::adamw(ctx, LR).unwrap();
    gpt
}

/// The sweep again with policy `auto`: a step fits from the cap that
/// recomputing every block needs (the first iteration recomputes them all,
/// nothing being measured yet), well below what keeping every activation
/// needs; the next step keeps fitting under the same cap with auto's own
/// choice, and the losses are those of a run without recomputation.
#[test]
fn arena_cap_sweep_with_auto_recompute() {
    let mut ctl = Context::new();
    let gpt = two_blocks(&mut ctl);
    let (i0, t0) = batch(0);
    let (i1, t1) = batch(1);
    let want0 = gpt.train_step(&mut ctl, &i0, &t0).unwrap().to_bits();
    let need_none = ctl.memory_stats().arena_high_water_bytes as usize;
    let want1 = gpt.train_step(&mut ctl, &i1, &t1).unwrap().to_bits();
    let need_all = ctl.memory_stats().arena_need_all_bytes as usize;
    assert!(
        need_all > 0 && need_all < need_none,
        "{need_all} vs {need_none}"
    );

    let mut limits: Vec<usize> = (0..=2 * need_none).step_by(64 << 10).collect();
    for at in [need_all, need_none] {
        limits.extend((at.saturating_sub(256 << 10)..=at + (256 << 10)).step_by(4096));
        limits.extend((at.saturating_sub(4096)..=at + 4096).step_by(64));
        limits.extend([at - 1, at, at + 1]);
    }
    limits.extend([1, 63, 64, 65]);
    limits.sort_unstable();
    limits.dedup();
    let (mut oom, mut ok) = (0, 0);
    for &limit in &limits {
        let mut ctx = Context::new();
        let gpt = two_blocks(&mut ctx);
        ctx.set_recompute(RecomputePolicy::Auto);
        ctx.set_arena_limit(Some(limit));
        let r = gpt.train_step(&mut ctx, &i0, &t0);
        let used = ctx.memory_stats().arena_used_bytes as usize;
        assert!(used <= limit, "cap {limit}: {used} bytes in use");
        match r {
            Ok(loss) => {
                ok += 1;
                assert!(
                    limit >= need_all,
                    "cap {limit} < need {need_all} but the step fit"
                );
                assert_eq!(loss.to_bits(), want0, "cap {limit}: loss");
                let loss = gpt.train_step(&mut ctx, &i1, &t1).unwrap();
                assert_eq!(loss.to_bits(), want1, "cap {limit}: next loss, same cap");
                let s = ctx.memory_stats();
                assert!(s.arena_used_bytes as usize <= limit);
                if limit >= need_none {
                    assert_eq!(
                        s.recomputed_segments, 0,
                        "cap {limit}: nothing to recompute"
                    );
                }
            }
            Err(Error::OutOfMemory { .. }) => {
                oom += 1;
                assert!(
                    limit < need_all,
                    "cap {limit} >= need {need_all} but OutOfMemory"
                );
                ctx.set_arena_limit(None);
                ctx.reset();
                let loss = gpt.train_step(&mut ctx, &i0, &t0).unwrap();
                assert_eq!(
                    loss.to_bits(),
                    want0,
                    "cap {limit}: loss after removing the cap"
                );
                let loss = gpt.train_step(&mut ctx, &i1, &t1).unwrap();
                assert_eq!(loss.to_bits(), want1, "cap {limit}: next loss");
            }
            Err(e) => panic!("cap {limit}: expected Ok or OutOfMemory, got {e}"),
        }
    }
    println!(
        "arena cap sweep with auto recomputation: {need_all} bytes needed recomputing both blocks, {need_none} keeping everything; {} caps ({oom} OutOfMemory, {ok} Ok), all bit-exact",
        limits.len()
    );
}

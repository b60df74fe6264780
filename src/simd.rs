//! Run-time choice of instruction set for the element-wise kernels.
//!
//! The library is compiled for the x86-64 baseline (SSE2), so it runs on
//! every x86-64 CPU. The element-wise kernels (softmax, GELU, LayerNorm,
//! cross-entropy, AdamW, axis sums, broadcasting add/sub/mul/div, and the
//! exp/tanh/sum/dot helpers of `ops::fastmath` they call) are compiled a
//! second time with AVX2 and FMA enabled, 8 floats per instruction instead
//! of 4, and a third time with AVX-512 (F, BW, VL, DQ), 16 per instruction;
//! [`dispatch!`] runs the widest copy the CPU supports.
//!
//! How: `dispatch!(kernel(args))` hands an `#[inline(always)]` closure to
//! [`run`], which calls it either directly or inside [`avx2_fma`], a
//! `#[target_feature(enable = "avx2,fma")]` function. A kernel called this
//! way (or inside [`avx512`], the same with AVX-512) is itself
//! `#[inline(always)]`, so its loops are inlined into (and
//! vectorised inside) each copy; a kernel without that attribute would be
//! called, not inlined, and run as baseline code on both paths.
//!
//! Results are bit-identical on both paths. Rust never fuses `a * b + c`
//! into one FMA instruction by itself (only `f32::mul_add` does, and the
//! kernels do not call it), and it never reorders floating-point sums: the
//! vector width changes how many independent lanes run at once, not the
//! order of any operation. A test forces each path and compares bits.
//!
//! Detection runs once (on the first context) and is cached in an atomic,
//! so a kernel call costs one relaxed load and a branch. `AG_SIMD=baseline`
//! in the environment, read at that moment, forces the baseline path for
//! the whole process (for comparisons; the numbers are the same), and
//! `AG_SIMD=avx2` caps it at AVX2.
//!
//! # Safety invariant
//! [`avx2_fma`] executes AVX2 and FMA instructions, so it may only run on a
//! CPU that has both; [`avx512`] AVX-512 F/BW/VL/DQ as well. Their one
//! caller, [`run`], calls each only when the level in use (the detected one,
//! or a lower one a test forces) is at least theirs, and [`detect`] stores
//! a level only after `is_x86_feature_detected!` reported all of its
//! features on this CPU.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction set the dispatched kernels can run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// The target's baseline (SSE2 on x86-64).
    Baseline,
    /// x86-64 with AVX2 and FMA.
    Avx2Fma,
    /// x86-64 with AVX2, FMA and AVX-512 F, BW, VL, DQ.
    Avx512,
}

impl Level {
    /// As `ag_runtime_info` reports it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            Level::Avx2Fma => "AVX2+FMA",
            Level::Avx512 => "AVX-512",
        }
    }
}

const UNKNOWN: u8 = 0;
const BASELINE: u8 = 1;
const AVX2_FMA: u8 = 2;
const AVX512: u8 = 3;

static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The best level this CPU supports (unless `AG_SIMD=baseline`), detected
/// on the first call and cached.
#[inline]
pub(crate) fn detected() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        AVX512 => Level::Avx512,
        AVX2_FMA => Level::Avx2Fma,
        BASELINE => Level::Baseline,
        _ => detect(),
    }
}

#[cold]
fn detect() -> Level {
    let level = capped(cpu_level(), std::env::var("AG_SIMD").ok().as_deref());
    let code = match level {
        Level::Avx512 => AVX512,
        Level::Avx2Fma => AVX2_FMA,
        Level::Baseline => BASELINE,
    };
    // Threads racing here compute the same answer; any of them may win.
    LEVEL.store(code, Ordering::Relaxed);
    level
}

/// The CPU's level, lowered by `AG_SIMD` (`baseline` or `avx2`).
fn capped(cpu: Level, env: Option<&str>) -> Level {
    match env {
        Some("baseline") => Level::Baseline,
        Some("avx2") => cpu.min(Level::Avx2Fma),
        _ => cpu,
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn cpu_level() -> Level {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma")) {
        Level::Baseline
    } else if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") {
        Level::Avx512
    } else {
        Level::Avx2Fma
    }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn cpu_level() -> Level {
    Level::Baseline
}

/// Runs `f` with the best instruction set of this CPU.
#[inline(always)]
pub(crate) fn run<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    match detected().min(forced_cap()) {
        // SAFETY: `detected()` returns Avx512 only after
        // is_x86_feature_detected! found AVX2, FMA and AVX-512 F/BW/VL/DQ.
        Level::Avx512 => return unsafe { avx512(f) },
        // SAFETY: as above, Avx2Fma or higher means AVX2 and FMA exist.
        Level::Avx2Fma => return unsafe { avx2_fma(f) },
        Level::Baseline => {}
    }
    f()
}

/// `f`, compiled with AVX-512 (and AVX2, FMA) enabled.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")]
unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f`, compiled with AVX2 and FMA (closures and `#[inline(always)]`
/// functions inlined here are compiled with them too).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `dispatch!(expr)` evaluates `expr` (a call of an `#[inline(always)]`
/// kernel, or a block of loops) with the best instruction set of this CPU.
macro_rules! dispatch {
    ($e:expr) => {
        $crate::simd::run(
            #[inline(always)]
            || $e,
        )
    };
}
pub(crate) use dispatch;

#[cfg(not(test))]
#[inline(always)]
fn forced_cap() -> Level {
    Level::Avx512
}

// Tests cap the level on their own thread only, so that tests running
// beside them keep the detected one.
#[cfg(test)]
thread_local! {
    static FORCE_CAP: std::cell::Cell<Level> = const { std::cell::Cell::new(Level::Avx512) };
}

#[cfg(test)]
fn forced_cap() -> Level {
    FORCE_CAP.with(|f| f.get())
}

/// Runs `f` with every kernel it calls on this thread at `level` at most.
#[cfg(test)]
pub(crate) fn with_level<R>(level: Level, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCE_CAP.with(|f| f.set(Level::Avx512));
        }
    }
    FORCE_CAP.with(|f| f.set(level));
    let _reset = Reset;
    f()
}

/// Runs `f` with every kernel it calls on this thread on the baseline path.
#[cfg(test)]
pub(crate) fn with_baseline<R>(f: impl FnOnce() -> R) -> R {
    with_level(Level::Baseline, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gradcheck::Lcg;
    use crate::{Context, OptimizerKind, Result, Tensor};

    #[test]
    fn detection_is_cached_and_matches_the_cpu() {
        let first = detected();
        assert_eq!(detected(), first);
        let want = capped(cpu_level(), std::env::var("AG_SIMD").ok().as_deref());
        assert_eq!(first, want);
        assert_eq!(run(|| 2 + 2), 4);
        assert_eq!(forced_cap(), Level::Avx512);
        let inside = with_baseline(|| (forced_cap(), run(|| 3)));
        assert_eq!(inside, (Level::Baseline, 3));
        assert_eq!(forced_cap(), Level::Avx512);
        assert_eq!(capped(Level::Avx512, Some("avx2")), Level::Avx2Fma);
        assert_eq!(capped(Level::Avx2Fma, Some("avx2")), Level::Avx2Fma);
        assert_eq!(capped(Level::Avx512, Some("baseline")), Level::Baseline);
        assert_eq!(capped(Level::Avx512, None), Level::Avx512);
    }

    /// Every dispatched kernel on random inputs whose rows are not
    /// multiples of 8 or 4 (so vector bodies and scalar tails both run):
    /// the forward outputs, every gradient and the parameters after one
    /// AdamW step, as bit patterns. Sizes stay under the worker thread's
    /// threshold so that every kernel runs on the calling thread, where the
    /// baseline path is forced.
    fn every_kernel(seed: u64) -> Result<Vec<u32>> {
        let mut rng = Lcg(seed);
        let mut rand = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect()
        };
        let mut c = Context::new();
        let (rows, cols) = (6, 37);
        let x = c.param(&[rows, cols], Some(&rand(rows * cols, -4.0, 4.0)))?;
        let w = c.param(&[cols], Some(&rand(cols, 0.5, 1.5)))?;
        let b = c.param(&[cols], Some(&rand(cols, -0.5, 0.5)))?;
        let scores = c.param(&[2, 5, 37], Some(&rand(370, -3.0, 3.0)))?;
        // qkv [B=2, T=9, 3C] with C = 12 in 3 heads of 4.
        let qkv = c.param(&[2, 9, 36], Some(&rand(648, -2.0, 2.0)))?;
        let params = [x, w, b, scores, qkv];
        c.optimizer(OptimizerKind::AdamW {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
        })?;
        let targets: Vec<i32> = (0..rows as i32).map(|r| (r * 7) % cols as i32).collect();
        let outs = [
            c.gelu(x)?,
            c.softmax(x, false, 0.7)?,
            c.softmax(x, false, -1.3)?,
            c.softmax(scores, true, 1.1)?,
            c.layernorm(x, w, b)?,
            c.attention(qkv, 3)?,
            c.sum_axis(scores, 1, false)?,
            c.mean_axis(x, 0, true)?,
            c.add(x, b)?,
            c.sub(b, x)?,
            c.div(x, w)?,
        ];
        let ce = c.cross_entropy(x, &targets)?;
        // loss = ce + sum_k mean(out_k * r_k): every output gets its own
        // random upstream gradient.
        let mut loss = ce;
        for &o in &outs {
            let shape = c.shape(o)?;
            let r = c.tensor(shape.dims(), &rand(shape.numel(), -1.0, 1.0))?;
            let weighted = c.mul(o, r)?;
            let term = c.mean(weighted)?;
            loss = c.add(loss, term)?;
        }
        let mut bits = Vec::new();
        let mut take = |c: &Context, t: Tensor, grad: bool| -> Result<()> {
            let mut v = vec![0.0f32; c.numel(t)?];
            if grad {
                c.read_grad(t, &mut v)?;
            } else {
                c.read(t, &mut v)?;
            }
            bits.extend(v.iter().map(|f| f.to_bits()));
            Ok(())
        };
        for &t in outs.iter().chain([&ce, &loss]) {
            take(&c, t, false)?;
        }
        c.backward(loss)?;
        for &p in &params {
            take(&c, p, true)?;
        }
        c.optimizer_step()?;
        for &p in &params {
            take(&c, p, false)?;
        }
        Ok(bits)
    }

    /// Every path this CPU can run (AVX-512, AVX2 + FMA, each forced in
    /// turn) gives the baseline path's bits: no kernel uses a fused
    /// multiply-add or a reduction order that depends on the vector width.
    /// A path the CPU lacks cannot run here; the test says which ran.
    #[test]
    fn every_path_matches_the_baseline_bit_for_bit() {
        let levels = [Level::Avx2Fma, Level::Avx512];
        let ran: Vec<Level> = levels.into_iter().filter(|&l| l <= detected()).collect();
        eprintln!("[simd] paths compared with the baseline: {ran:?}");
        for seed in 1..4 {
            let base = with_baseline(|| every_kernel(seed)).unwrap();
            assert!(base.iter().all(|&b| f32::from_bits(b).is_finite()));
            for &level in &ran {
                let fast = with_level(level, || every_kernel(seed)).unwrap();
                assert_eq!(fast.len(), base.len());
                let diff = fast.iter().zip(&base).filter(|(a, b)| a != b).count();
                assert_eq!(
                    diff,
                    0,
                    "seed {seed} {level:?}: {diff} of {} values differ",
                    fast.len()
                );
            }
        }
    }

    /// Run as a child process with AG_SIMD=baseline by
    /// `environment_forces_the_baseline_path`.
    #[test]
    #[ignore = "run by environment_forces_the_baseline_path"]
    fn baseline_child() {
        assert_eq!(detected(), Level::Baseline);
    }

    #[test]
    fn environment_forces_the_baseline_path() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "simd::tests::baseline_child"])
            .env("AG_SIMD", "baseline")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(text.contains("1 passed"), "{text}");
    }
}

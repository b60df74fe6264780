//! Training calls: backward, the iteration's resets and switches, the
//! optimizers, gradient clipping, memory caps, allocation-failure injection.

use super::{ARENA_CAP, FfiOps, Target, documented, last_error};
use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

/// An optimizer was made: its hyper-parameters must have been valid.
fn check_accepted_hyper_parameters(func: &str, lr: f32, beta1_or_momentum: f32, wd: f32) {
    assert!(lr.is_finite() && lr > 0.0, "{func} accepted lr {lr}");
    assert!(
        (0.0..1.0).contains(&beta1_or_momentum),
        "{func} accepted beta1/momentum {beta1_or_momentum}"
    );
    assert!(
        wd.is_finite() && wd >= 0.0,
        "{func} accepted weight decay {wd}"
    );
}

/// Floats reported final by gradient-ready callbacks (any context).
static READY_FLOATS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The fuzzer's gradient-ready callback: it only counts (it may not call
/// into the context, which is busy in backward).
unsafe extern "C" fn count_ready(_: *mut std::ffi::c_void, _first: usize, count: usize) {
    READY_FLOATS.fetch_add(count, std::sync::atomic::Ordering::Relaxed);
}

impl FfiOps<'_> {
    pub(super) fn backward(&mut self) {
        let t = self.target();
        let x = self.handle();
        let pre = self.pre(t, &[x]);
        let st = ag_backward(self.ptr(t), x);
        self.post("ag_backward", t, &pre, st);
    }

    /// ag_reset: every activation handle goes stale, only parameters stay.
    pub(super) fn reset(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let st = ag_reset(self.ptr(t));
        self.post("ag_reset", t, &pre, st);
        if let Some(i) = pre.live {
            assert_eq!(st, AG_STATUS_OK);
            let s = self.stats(i);
            assert_eq!(s.generation, pre.stats.generation.wrapping_add(1).max(1));
            assert_eq!(s.live_tensors, s.param_count, "reset keeps only parameters");
            assert_eq!(s.arena_used_bytes, 0);
            assert_eq!(s.tape_len, 0);
        }
    }

    /// A call that must succeed on a live context.
    fn must_succeed(&self, func: &str, t: Target, st: ag_status) {
        if matches!(t, Target::Live(_)) {
            assert_eq!(
                st,
                AG_STATUS_OK,
                "{func} must succeed: {}",
                last_error(self.ptr(t))
            );
        }
    }

    pub(super) fn zero_grad(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let st = ag_zero_grad(self.ptr(t));
        self.post("ag_zero_grad", t, &pre, st);
        self.must_succeed("ag_zero_grad", t, st);
        if t == Target::Live(0) {
            assert!(
                self.grads().iter().all(|&g| g == 0),
                "zero_grad left a gradient"
            );
        }
    }

    /// Sets a gradient-ready callback (bucket size 0, 64 B or 1 MiB) or
    /// removes it; the backward calls that follow report through it.
    pub(super) fn grad_ready(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let mode = self.input.u8();
        let cb: ag_grad_ready_fn = if mode & 3 == 3 {
            None
        } else {
            Some(count_ready)
        };
        let bytes = [0usize, 64, 1 << 20, 0][(mode & 3) as usize];
        let st = ag_set_grad_ready_callback(self.ptr(t), cb, null_mut(), bytes);
        self.post("ag_set_grad_ready_callback", t, &pre, st);
        if st != AG_STATUS_ALLOCATION_FAILED {
            self.must_succeed("ag_set_grad_ready_callback", t, st);
        }
    }

    pub(super) fn optimizer_shard(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let st = ag_optimizer_shard(self.ptr(t), usize::MAX, 1);
        self.post("ag_optimizer_shard", t, &pre, st);
        if matches!(t, Target::Live(_)) {
            assert!(
                st == AG_STATUS_INVALID_ARGUMENT || st == AG_STATUS_SEQUENCE,
                "ag_optimizer_shard past the parameters: {st}"
            );
        }
        // A context of its own: AdamW on floats [cut, 6) of one parameter
        // moves them as the unsharded optimizer does, and nothing else.
        let cut = (self.input.u8() % 7) as usize;
        let step = |first: usize, len: usize| -> [u32; 6] {
            let mut c = null_mut();
            assert_eq!(ag_context_new(&mut c), AG_STATUS_OK);
            let mut p = ag_tensor {
                index: 0,
                context: 0,
                generation: 0,
            };
            let init = [0.5f32, -1.0, 2.0, 0.25, -0.75, 1.5];
            assert_eq!(
                ag_param_new(c, [6usize].as_ptr(), 1, init.as_ptr(), &mut p),
                AG_STATUS_OK
            );
            assert_eq!(ag_optimizer_shard(c, first, len), AG_STATUS_OK);
            assert_eq!(
                ag_optimizer_adamw(c, 0.1, 0.9, 0.999, 1e-8, 0.0),
                AG_STATUS_OK
            );
            let g = [1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0];
            assert_eq!(ag_grads_copy_in(c, g.as_ptr(), 6), AG_STATUS_OK);
            assert_eq!(ag_optimizer_step(c), AG_STATUS_OK);
            let mut v = [0f32; 6];
            assert_eq!(ag_params_copy_out(c, 0, v.as_mut_ptr(), 6), AG_STATUS_OK);
            ag_context_free(&mut c);
            v.map(f32::to_bits)
        };
        let (whole, part, init) = (
            step(0, 6),
            step(cut, 6 - cut),
            [0.5f32, -1.0, 2.0, 0.25, -0.75, 1.5],
        );
        for i in 0..6 {
            let want = if i < cut { init[i].to_bits() } else { whole[i] };
            assert_eq!(part[i], want, "sharded AdamW from {cut}: float {i}");
        }
        // The sharded optimizer's calls all succeeded (counted as this id's).
        self.ok += 1;
        self.by_id[self.id as usize].1 += 1;
    }

    pub(super) fn params_copy(&mut self) {
        let t = self.target();
        // A range inside the target's parameters when it has some (else
        // the refusals are exercised).
        let mut total = 0usize;
        let _ = ag_grads_len(self.ptr(t), &mut total);
        let (a, b) = (self.input.u8() as usize, self.input.u8() as usize);
        let first = if total > 0 { a % (total + 1) } else { a };
        let len = if total > 0 { b.min(total - first) } else { b };
        let mut buf = vec![0f32; len.max(1)];
        let pre = self.pre(t, &[]);
        let st = ag_params_copy_out(self.ptr(t), first, buf.as_mut_ptr(), len);
        self.post("ag_params_copy_out", t, &pre, st);
        if st != AG_STATUS_OK {
            return;
        }
        let pre = self.pre(t, &[]);
        let st = ag_params_copy_in(self.ptr(t), first, buf.as_ptr(), len);
        self.post("ag_params_copy_in", t, &pre, st);
        self.must_succeed("ag_params_copy_in", t, st);
    }

    pub(super) fn optimizer_state(&mut self) {
        let t = self.target();
        let mut total = 0usize;
        let _ = ag_grads_len(self.ptr(t), &mut total);
        let (w, a, b) = (
            self.input.u8(),
            self.input.u8() as usize,
            self.input.u8() as usize,
        );
        let which = u32::from(w % 3); // 2 is never a moment
        let first = if total > 0 { a % (total + 1) } else { a };
        let len = if total > 0 { b.min(total - first) } else { b };
        let mut buf = vec![0f32; len.max(1)];
        let pre = self.pre(t, &[]);
        let st = ag_optimizer_state_copy_out(self.ptr(t), which, first, buf.as_mut_ptr(), len);
        self.post("ag_optimizer_state_copy_out", t, &pre, st);
        if st == AG_STATUS_OK {
            let pre = self.pre(t, &[]);
            let st = ag_optimizer_state_copy_in(self.ptr(t), which, first, buf.as_ptr(), len);
            self.post("ag_optimizer_state_copy_in", t, &pre, st);
            self.must_succeed("ag_optimizer_state_copy_in", t, st);
        }
        // Both moments of every float when bit 3 of the input is clear (a
        // count an SGD optimizer refuses), else one float short.
        let n = (2 * total).saturating_sub(usize::from(w & 8 != 0));
        let moments = vec![0.25f32; n.max(1)];
        let _ = std::fs::create_dir_all(&self.dir);
        let path = CString::new(self.dir.join("g.ckpt").to_string_lossy().as_bytes()).unwrap();
        let pre = self.pre(t, &[]);
        let st =
            ag_checkpoint_save_gathered(self.ptr(t), path.as_ptr(), null(), 0, moments.as_ptr(), n);
        self.post("ag_checkpoint_save_gathered", t, &pre, st);
    }

    pub(super) fn set_grad_enabled(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let enabled = !self.input.bool();
        let st = ag_set_grad_enabled(self.ptr(t), enabled);
        self.post("ag_set_grad_enabled", t, &pre, st);
        self.must_succeed("ag_set_grad_enabled", t, st);
    }

    pub(super) fn memory_stats(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let null_out = self.input.bool();
        let mut s = MemoryStats::default();
        let p: *mut MemoryStats = if null_out { null_mut() } else { &mut s };
        let st = ag_memory_stats(self.ptr(t), p);
        if pre.live.is_some() && p.is_null() {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
            self.post("ag_memory_stats", t, &pre, st);
            return;
        }
        if st == AG_STATUS_OK {
            assert!(s.arena_used_bytes <= s.arena_reserved_bytes.max(s.arena_used_bytes));
            assert!(s.arena_used_bytes <= ARENA_CAP as u64, "arena over its cap");
            assert!(s.live_tensors >= s.param_count);
            assert!(s.tape_len <= s.tape_capacity);
        }
        self.post("ag_memory_stats", t, &pre, st);
        self.must_succeed("ag_memory_stats", t, st);
    }

    /// Sets a thread count from the input and reads it back; the results
    /// of every other call are the same bits at any count, so the rest of
    /// the input runs on the count this leaves (`run` restores the default).
    pub(super) fn threads(&mut self) {
        let pick = self.input.u8();
        let n = if pick >= 250 {
            AG_MAX_THREADS + 1 + pick as usize
        } else {
            pick as usize % 9
        };
        let st = ag_set_num_threads(n);
        self.calls += 1;
        assert!(
            documented(st),
            "ag_set_num_threads: undocumented status {st}"
        );
        if n > AG_MAX_THREADS {
            assert_eq!(st, AG_STATUS_INVALID_ARGUMENT, "ag_set_num_threads({n})");
        } else {
            assert_eq!(st, AG_STATUS_OK, "ag_set_num_threads({n})");
            self.ok += 1;
            self.by_id[self.id as usize].1 += 1;
        }
        let sizes = [0u32, 4, 8, 12, 16, 64];
        let size = sizes[self.input.u8() as usize % sizes.len()];
        let null = self.input.bool();
        // Room for a larger (newer) struct than this header's: 64 bytes.
        let mut buf = [0xEEEE_EEEEu32; 16];
        buf[0] = size;
        let p: *mut ag_thread_info = if null {
            null_mut()
        } else {
            buf.as_mut_ptr().cast()
        };
        let st = ag_thread_info_get(p);
        self.calls += 1;
        let whole = std::mem::size_of::<ag_thread_info>();
        if null {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "ag_thread_info_get(NULL)");
        } else if size < 8 {
            assert_eq!(
                st, AG_STATUS_INVALID_ARGUMENT,
                "ag_thread_info_get(size {size})"
            );
            assert!(
                buf[1..].iter().all(|&w| w == 0xEEEE_EEEE),
                "written on failure"
            );
        } else {
            assert_eq!(st, AG_STATUS_OK, "ag_thread_info_get(size {size})");
            let words = (size as usize).min(whole) / 4;
            assert!(
                (1..=AG_MAX_THREADS as u32).contains(&buf[1]),
                "threads {}",
                buf[1]
            );
            if words > 3 {
                assert!(buf[3] <= AG_THREADS_FROM_CALL, "source {}", buf[3]);
            }
            assert!(
                buf[words..].iter().all(|&w| w == 0xEEEE_EEEE),
                "written past size"
            );
        }
    }

    pub(super) fn runtime_info(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let null_out = self.input.bool();
        let mut r = ag_runtime::default();
        let p: *mut ag_runtime = if null_out { null_mut() } else { &mut r };
        let st = ag_runtime_info(self.ptr(t), p);
        if pre.live.is_some() && p.is_null() {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
        }
        if st == AG_STATUS_OK {
            assert!(
                (1..=AG_MAX_THREADS as u32).contains(&r.threads),
                "threads {}",
                r.threads
            );
            for f in [
                r.gemm_library,
                r.gemm_version,
                r.gemm_kernels,
                r.gemm_note,
                r.simd,
                r.cpu_isa,
            ] {
                assert_eq!(f[AG_RUNTIME_TEXT - 1], 0, "text field not terminated");
            }
            assert_ne!(r.gemm_library[0], 0, "no GEMM library named");
        }
        self.post("ag_runtime_info", t, &pre, st);
        if !null_out {
            self.must_succeed("ag_runtime_info", t, st);
        }
    }

    pub(super) fn optimizer_sgd(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let (lr, momentum, wd) = (self.input.f32(), self.input.f32(), self.input.f32());
        let st = ag_optimizer_sgd(self.ptr(t), lr, momentum, wd);
        self.post("ag_optimizer_sgd", t, &pre, st);
        if st == AG_STATUS_OK {
            check_accepted_hyper_parameters("ag_optimizer_sgd", lr, momentum, wd);
        }
    }

    pub(super) fn optimizer_adamw(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let (lr, b1, b2, eps, wd) = (
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
        );
        let st = ag_optimizer_adamw(self.ptr(t), lr, b1, b2, eps, wd);
        self.post("ag_optimizer_adamw", t, &pre, st);
        if st == AG_STATUS_OK {
            check_accepted_hyper_parameters("ag_optimizer_adamw", lr, b1, wd);
            assert!((0.0..1.0).contains(&b2) && eps.is_finite() && eps > 0.0);
        }
    }

    pub(super) fn optimizer_set_lr(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let lr = self.input.f32();
        let st = ag_optimizer_set_lr(self.ptr(t), lr);
        self.post("ag_optimizer_set_lr", t, &pre, st);
        if st == AG_STATUS_OK {
            assert!(lr.is_finite() && lr > 0.0, "set_lr accepted {lr}");
        }
    }

    pub(super) fn optimizer_step(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        if t == Target::Live(0) {
            self.verify_params("before ag_optimizer_step");
        }
        let st = ag_optimizer_step(self.ptr(t));
        self.post("ag_optimizer_step", t, &pre, st);
        self.param_event(t, "ag_optimizer_step", st);
    }

    pub(super) fn clip(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let max = self.input.f32();
        let mut norm = f32::NAN;
        let p: *mut f32 = if self.input.bool() {
            &mut norm
        } else {
            null_mut()
        };
        let before = (t == Target::Live(0)).then(|| self.grads());
        let st = ag_clip_grad_norm(self.ptr(t), max, p);
        self.post("ag_clip_grad_norm", t, &pre, st);
        if st == AG_STATUS_OK {
            assert!(max.is_finite() && max > 0.0, "clip accepted max_norm {max}");
            if !p.is_null() {
                assert!(norm.is_finite() && norm >= 0.0, "clip norm {norm}");
            }
        } else if let Some(g) = before {
            assert!(self.grads() == g, "failed clip changed gradients");
        }
    }

    pub(super) fn arena_limit(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let b = self.input.u8();
        let v = match b % 12 {
            0 => 0,
            1 => 1,
            2 => 63,
            3 => 64,
            4 => 65,
            5 => 4096,
            6 => 1 << 16,
            7 => 1 << 20,
            8 => usize::MAX,
            9 => self.input.u16() as usize * 64,
            10 => self.input.u32() as usize,
            _ => self.input.u16() as usize,
        };
        let st = ag_set_arena_limit(self.ptr(t), v);
        self.post("ag_set_arena_limit", t, &pre, st);
        if pre.live.is_some() {
            assert_eq!(st, AG_STATUS_OK);
            if v == 0 || v > ARENA_CAP {
                let st = ag_set_arena_limit(self.ptr(t), ARENA_CAP);
                assert_eq!(st, AG_STATUS_OK);
            }
        }
    }

    pub(super) fn fail_allocation(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let b = self.input.u8();
        let at = match b % 8 {
            0 => 0,
            7 => self.input.u64(),
            k => k as u64,
        };
        let mut counted = u64::MAX;
        let p: *mut u64 = if b & 8 == 0 { &mut counted } else { null_mut() };
        let st = ag_test_fail_allocation(self.ptr(t), at, b & 16 == 16, p);
        self.post("ag_test_fail_allocation", t, &pre, st);
        if pre.live.is_some() {
            assert_eq!(st, AG_STATUS_OK);
        }
    }
}

impl FfiOps<'_> {
    /// The gradient block: its length, a copy out or in (with the right
    /// length, one more, one less), the zero-copy pointer, NULL buffers.
    pub(super) fn grads_block(&mut self) {
        let t = self.target();
        let c = self.ptr(t);
        let pre = self.pre(t, &[]);
        let mut len = usize::MAX;
        let st = ag_grads_len(c, &mut len);
        self.post("ag_grads_len", t, &pre, st);
        self.must_succeed("ag_grads_len", t, st);
        if st != AG_STATUS_OK {
            assert_eq!(len, usize::MAX, "ag_grads_len wrote len on failure");
            return;
        }
        let live0 = t == Target::Live(0);
        if live0 {
            let want: usize = self.params0.iter().map(|p| p.1).sum();
            assert_eq!(len, want, "ag_grads_len differs from the parameters' sizes");
        }
        let mode = self.input.u8();
        let n = match (mode >> 2) & 3 {
            0 | 1 => len,
            2 => len + 1,
            _ => len.saturating_sub(1),
        };
        let before = live0.then(|| self.grads());
        let pre = self.pre(t, &[]);
        match mode & 3 {
            0 => {
                const UNTOUCHED: u32 = 0x7fc0_dead;
                let mut buf = vec![f32::from_bits(UNTOUCHED); n.max(1)];
                let st = ag_grads_copy_out(c, buf.as_mut_ptr(), n);
                self.post("ag_grads_copy_out", t, &pre, st);
                if n == len {
                    self.must_succeed("ag_grads_copy_out", t, st);
                    if let Some(g) = &before {
                        let got: Vec<u32> = buf[..n].iter().map(|v| v.to_bits()).collect();
                        assert!(&got == g, "ag_grads_copy_out differs from the gradients");
                    }
                } else {
                    assert_eq!(
                        st, AG_STATUS_INVALID_ARGUMENT,
                        "ag_grads_copy_out({n} of {len})"
                    );
                    assert!(
                        buf.iter().all(|v| v.to_bits() == UNTOUCHED),
                        "ag_grads_copy_out wrote on failure"
                    );
                }
            }
            1 => {
                let src: Vec<f32> = (0..n.min(4096)).map(|_| self.input.f32()).collect();
                if src.len() < n {
                    return; // a block too large to fill from the input
                }
                let st = ag_grads_copy_in(c, src.as_ptr(), n);
                self.post("ag_grads_copy_in", t, &pre, st);
                if n == len {
                    self.must_succeed("ag_grads_copy_in", t, st);
                    if live0 {
                        let want: Vec<u32> = src.iter().map(|v| v.to_bits()).collect();
                        assert!(
                            self.grads() == want,
                            "ag_grads_copy_in did not set the gradients"
                        );
                    }
                } else {
                    assert_eq!(
                        st, AG_STATUS_INVALID_ARGUMENT,
                        "ag_grads_copy_in({n} of {len})"
                    );
                    if let Some(g) = before {
                        assert!(
                            self.grads() == g,
                            "a refused ag_grads_copy_in changed gradients"
                        );
                    }
                }
            }
            2 => {
                let (mut p, mut l) = (std::ptr::null_mut::<f32>(), usize::MAX);
                let st = ag_grads_buffer(c, &mut p, &mut l);
                self.post("ag_grads_buffer", t, &pre, st);
                if !matches!(t, Target::Live(_)) {
                    return;
                }
                if len == 0 {
                    assert_eq!(st, AG_STATUS_SEQUENCE, "ag_grads_buffer without parameters");
                    return;
                }
                assert_eq!(st, AG_STATUS_OK, "{}", last_error(c));
                assert_eq!(l, len, "ag_grads_buffer length");
                assert!(
                    !p.is_null() && (p as usize).is_multiple_of(64),
                    "ag_grads_buffer alignment"
                );
                if let Some(g) = &before {
                    // SAFETY: documented as `len` floats owned by the
                    // context, valid until a parameter or the optimizer is
                    // added; nothing is called into the context meanwhile.
                    let block = unsafe { std::slice::from_raw_parts(p, l) };
                    let got: Vec<u32> = block.iter().map(|v| v.to_bits()).collect();
                    assert!(&got == g, "ag_grads_buffer differs from the gradients");
                }
            }
            _ => {
                let st = ag_grads_copy_out(c, std::ptr::null_mut(), len);
                self.post("ag_grads_copy_out", t, &pre, st);
                if matches!(t, Target::Live(_)) {
                    let want = if len == 0 {
                        AG_STATUS_OK
                    } else {
                        AG_STATUS_NULL_ARGUMENT
                    };
                    assert_eq!(st, want, "ag_grads_copy_out(NULL, {len})");
                }
                let pre = self.pre(t, &[]);
                let st = ag_grads_len(c, std::ptr::null_mut());
                self.post("ag_grads_len", t, &pre, st);
                if matches!(t, Target::Live(_)) {
                    assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "ag_grads_len(NULL)");
                }
            }
        }
    }
}

//! The checks every call gets, and the bookkeeping behind them: handles
//! the call may be given, parameter values of context 0 bit for bit.

use super::{
    FfiOps, MAX_NUMEL, POOL, Pre, SENTINEL, Target, documented, last_error, status_name, trace,
};
use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ptr::null_mut;

impl FfiOps<'_> {
    pub(super) fn pre(&self, t: Target, handles: &[ag_tensor]) -> Pre {
        let Target::Live(i) = t else {
            return Pre {
                live: None,
                stats: MemoryStats::default(),
                bad_handle: false,
            };
        };
        let s = self.stats(i);
        let bad = handles.iter().any(|h| {
            h.context != self.ids[i]
                || (h.generation == 0 && h.index as u64 >= s.param_count)
                || (h.generation != 0
                    && (h.generation != s.generation
                        || (h.index as u64) < s.param_count
                        || h.index as u64 >= s.live_tensors
                        || self.sealed(i, *h, s.generation)))
        });
        Pre {
            live: Some(i),
            stats: s,
            bad_handle: bad,
        }
    }

    /// The checks every call gets.
    pub(super) fn post(&mut self, func: &str, t: Target, pre: &Pre, st: ag_status) {
        self.calls += 1;
        if trace() {
            eprintln!("{func} {t:?} -> {}", status_name(st));
        }
        if st == AG_STATUS_OK {
            self.ok += 1;
            self.by_id[self.id as usize].1 += 1;
        }
        let ctx = self.ptr(t);
        assert!(documented(st), "{func}: undocumented status {st}");
        assert_ne!(
            st,
            AG_STATUS_PANIC,
            "{func}: internal panic: {}",
            last_error(ctx)
        );
        assert_ne!(st, AG_STATUS_POISONED, "{func}: POISONED without a panic");
        assert_ne!(st, AG_STATUS_BUSY, "{func}: BUSY with one thread");
        match t {
            Target::Null => assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "{func}(NULL ctx)"),
            Target::Invalid(a) => {
                assert_eq!(st, AG_STATUS_INVALID_CONTEXT, "{func}(ctx {a:#x})")
            }
            Target::Live(_) => {}
        }
        if st != AG_STATUS_OK {
            let msg = last_error(ctx);
            assert!(!msg.is_empty(), "{func}: failed ({st}) with no message");
        }
        if pre.live.is_some() {
            if pre.bad_handle {
                assert_ne!(st, AG_STATUS_OK, "{func}: accepted an invalid handle");
            } else {
                assert!(
                    !matches!(
                        st,
                        AG_STATUS_STALE_HANDLE | AG_STATUS_WRONG_CONTEXT | AG_STATUS_INVALID_HANDLE
                    ),
                    "{func}: refused valid handles ({}): {}",
                    status_name(st),
                    last_error(ctx)
                );
            }
        }
    }

    /// Runs an op that produces one tensor.
    pub(super) fn op(
        &mut self,
        func: &str,
        t: Target,
        inputs: &[ag_tensor],
        f: impl FnOnce(*mut ag_context, *mut ag_tensor) -> ag_status,
    ) {
        let pre = self.pre(t, inputs);
        let null_out = self.input.u8() == 255;
        let mut out = SENTINEL;
        let outp: *mut ag_tensor = if null_out { null_mut() } else { &mut out };
        let st = f(self.ptr(t), outp);
        self.post(func, t, &pre, st);
        if null_out && pre.live.is_some() {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "{func}: NULL out accepted");
        }
        if st != AG_STATUS_OK {
            assert_eq!(out, SENTINEL, "{func}: out written on failure");
            return;
        }
        let i = pre.live.expect("OK only on a live context");
        assert_eq!(out.context, self.ids[i], "{func}: handle context");
        assert_eq!(
            out.generation, pre.stats.generation,
            "{func}: handle generation"
        );
        assert_eq!(
            out.index as u64, pre.stats.live_tensors,
            "{func}: handle slot"
        );
        self.remember(out);
    }

    pub(super) fn remember(&mut self, t: ag_tensor) {
        if self.pool.len() < POOL {
            self.pool.push(t);
        } else {
            let i = self.calls as usize % POOL;
            self.pool.remove(i);
            self.pool.push(t);
        }
    }

    /// Parameter values of context 0, bit for bit.
    pub(super) fn snapshot(&self) -> Vec<u32> {
        let mut all = Vec::new();
        let mut buf = vec![0.0f32; MAX_NUMEL];
        for &(p, n) in &self.params0 {
            let st = ag_tensor_read(self.ctx[0], p, buf.as_mut_ptr(), n);
            assert_eq!(
                st,
                AG_STATUS_OK,
                "reading parameter: {}",
                last_error(self.ctx[0])
            );
            all.extend(buf[..n].iter().map(|v| v.to_bits()));
        }
        all
    }

    pub(super) fn grads(&self) -> Vec<u32> {
        let mut all = Vec::new();
        let mut buf = vec![0.0f32; MAX_NUMEL];
        for &(p, n) in &self.params0 {
            let st = ag_tensor_read_grad(self.ctx[0], p, buf.as_mut_ptr(), n);
            assert_eq!(
                st,
                AG_STATUS_OK,
                "reading gradient: {}",
                last_error(self.ctx[0])
            );
            all.extend(buf[..n].iter().map(|v| v.to_bits()));
        }
        all
    }

    pub(super) fn verify_params(&self, why: &str) {
        assert!(
            self.snapshot() == self.expected0,
            "parameters of context 0 changed: {why}"
        );
    }

    /// Around a call that may change parameters: they must be as expected
    /// before it, unchanged if it fails, and are re-read if it succeeds.
    pub(super) fn param_event(&mut self, t: Target, func: &str, st: ag_status) {
        if t != Target::Live(0) {
            return;
        }
        if st == AG_STATUS_OK {
            self.expected0 = self.snapshot();
        } else {
            self.verify_params(&format!("failed {func} ({})", status_name(st)));
        }
    }
}

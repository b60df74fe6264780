//! The ops: each reads the context, its tensor handles and its other
//! arguments from the input, then runs through [`FfiOps::op`], which checks
//! the status, the out-handle and what a failure leaves behind.

use super::{FfiOps, SENTINEL};
use arenagrad::ffi::*;
use std::ptr::{null, null_mut};

type Unary = extern "C" fn(*mut ag_context, ag_tensor, *mut ag_tensor) -> ag_status;
type Binary = extern "C" fn(*mut ag_context, ag_tensor, ag_tensor, *mut ag_tensor) -> ag_status;
type Product =
    extern "C" fn(*mut ag_context, ag_tensor, ag_tensor, bool, bool, *mut ag_tensor) -> ag_status;
type ReduceAxis = extern "C" fn(*mut ag_context, ag_tensor, i32, bool, *mut ag_tensor) -> ag_status;

impl FfiOps<'_> {
    /// Element-wise maps and full reductions: one tensor in.
    pub(super) fn unary(&mut self, name: &str, f: Unary) {
        let t = self.target();
        let x = self.handle();
        self.op(name, t, &[x], |c, o| f(c, x, o));
    }

    /// Broadcasting element-wise ops.
    pub(super) fn binary(&mut self, name: &str, f: Binary) {
        let t = self.target();
        let a = self.handle();
        let b = self.handle();
        self.op(name, t, &[a, b], |c, o| f(c, a, b, o));
    }

    pub(super) fn where_op(&mut self) {
        let t = self.target();
        let cond = self.handle();
        let a = self.handle();
        let b = self.handle();
        self.op("ag_where", t, &[cond, a, b], |c, o| {
            ag_where(c, cond, a, b, o)
        });
    }

    pub(super) fn beta_inc(&mut self) {
        let t = self.target();
        let a = self.handle();
        let b = self.handle();
        let x = self.handle();
        self.op("ag_beta_inc", t, &[a, b, x], |c, o| {
            ag_beta_inc(c, a, b, x, o)
        });
    }

    /// ag_normal_id_glm_lpdf: y, x, alpha, beta, sigma and the layout flag.
    pub(super) fn normal_id_glm(&mut self) {
        let t = self.target();
        let [y, x, a, b, s]: [ag_tensor; 5] = std::array::from_fn(|_| self.handle());
        let transpose = self.input.bool();
        self.op("ag_normal_id_glm_lpdf", t, &[y, x, a, b, s], |c, o| {
            ag_normal_id_glm_lpdf(c, y, x, transpose, a, b, s, o)
        });
    }

    /// ag_bernoulli_logit_glm_lpmf: y, x, alpha, beta and the layout flag.
    pub(super) fn bernoulli_glm(&mut self) {
        let t = self.target();
        let [y, x, a, b]: [ag_tensor; 4] = std::array::from_fn(|_| self.handle());
        let transpose = self.input.bool();
        self.op("ag_bernoulli_logit_glm_lpmf", t, &[y, x, a, b], |c, o| {
            ag_bernoulli_logit_glm_lpmf(c, y, x, transpose, a, b, o)
        });
    }

    pub(super) fn normal_lpdf(&mut self) {
        let t = self.target();
        let [y, mu, sigma]: [ag_tensor; 3] = std::array::from_fn(|_| self.handle());
        self.op("ag_normal_lpdf", t, &[y, mu, sigma], |c, o| {
            ag_normal_lpdf(c, y, mu, sigma, o)
        });
    }

    pub(super) fn layernorm(&mut self) {
        let t = self.target();
        let x = self.handle();
        let w = self.handle();
        let b = self.handle();
        self.op("ag_layernorm", t, &[x, w, b], |c, o| {
            ag_layernorm(c, x, w, b, o)
        });
    }

    pub(super) fn scale(&mut self) {
        let t = self.target();
        let x = self.handle();
        let s = self.input.f32();
        self.op("ag_scale", t, &[x], |c, o| ag_scale(c, x, s, o));
    }

    pub(super) fn reduce_axis(&mut self, name: &str, f: ReduceAxis) {
        let t = self.target();
        let x = self.handle();
        let axis = self.input.axis();
        let keep = self.input.bool();
        self.op(name, t, &[x], |c, o| f(c, x, axis, keep, o));
    }

    pub(super) fn reshape(&mut self) {
        let t = self.target();
        let x = self.handle();
        let (dims, nd) = self.shape();
        let p = if self.input.u8() == 0 {
            null()
        } else {
            dims.as_ptr()
        };
        self.op("ag_reshape", t, &[x], |c, o| ag_reshape(c, x, p, nd, o));
    }

    pub(super) fn permute(&mut self) {
        let t = self.target();
        let x = self.handle();
        let nd = self.input.u8() as usize % 8;
        let mut perm = [0usize; 8];
        let mode = self.input.u8();
        for (i, v) in perm.iter_mut().enumerate() {
            *v = match mode % 4 {
                0 => nd.saturating_sub(1 + i),
                1 => (i + 1) % nd.max(1),
                _ => self.input.small_usize(),
            };
        }
        let p = if mode == 255 { null() } else { perm.as_ptr() };
        self.op("ag_permute", t, &[x], |c, o| ag_permute(c, x, p, nd, o));
    }

    pub(super) fn transpose(&mut self) {
        let t = self.target();
        let x = self.handle();
        let a = self.input.small_usize();
        let b = self.input.small_usize();
        self.op("ag_transpose", t, &[x], |c, o| ag_transpose(c, x, a, b, o));
    }

    /// ag_matmul and ag_bmm: bits 0 and 1 of the flags byte transpose a
    /// and b.
    pub(super) fn product(&mut self, name: &str, f: Product) {
        let t = self.target();
        let a = self.handle();
        let b = self.handle();
        let fl = self.input.u8();
        let (ta, tb) = (fl & 1 == 1, fl & 2 == 2);
        self.op(name, t, &[a, b], |c, o| f(c, a, b, ta, tb, o));
    }

    pub(super) fn linear(&mut self) {
        let t = self.target();
        let x = self.handle();
        let w = self.handle();
        let bias = self.handle();
        if self.input.bool() {
            self.op("ag_linear", t, &[x, w, bias], |c, o| {
                ag_linear(c, x, w, &bias, o)
            });
        } else {
            self.op("ag_linear", t, &[x, w], |c, o| {
                ag_linear(c, x, w, null(), o)
            });
        }
    }

    pub(super) fn embedding(&mut self) {
        let t = self.target();
        let w = self.handle();
        let (ids, n, null_ids) = self.ids();
        let p = if null_ids { null() } else { ids.as_ptr() };
        self.op("ag_embedding", t, &[w], |c, o| ag_embedding(c, w, p, n, o));
    }

    pub(super) fn cross_entropy(&mut self) {
        let t = self.target();
        let x = self.handle();
        let (ids, n, null_ids) = self.ids();
        let p = if null_ids { null() } else { ids.as_ptr() };
        self.op("ag_cross_entropy", t, &[x], |c, o| {
            ag_cross_entropy(c, x, p, n, o)
        });
    }

    pub(super) fn softmax(&mut self) {
        let t = self.target();
        let x = self.handle();
        let causal = self.input.bool();
        let s = self.input.f32();
        self.op("ag_softmax", t, &[x], |c, o| ag_softmax(c, x, causal, s, o));
    }

    pub(super) fn pow(&mut self) {
        let t = self.target();
        let x = self.handle();
        let p = self.input.f32();
        self.op("ag_pow", t, &[x], |c, o| ag_pow(c, x, p, o));
    }

    pub(super) fn lkj_corr_cholesky(&mut self) {
        let t = self.target();
        let l = self.handle();
        let eta = self.input.f32();
        self.op("ag_lkj_corr_cholesky_lpdf", t, &[l], |c, o| {
            ag_lkj_corr_cholesky_lpdf(c, l, eta, o)
        });
    }

    pub(super) fn clamp_op(&mut self) {
        let t = self.target();
        let x = self.handle();
        let lo = self.input.f32();
        let hi = self.input.f32();
        self.op("ag_clamp", t, &[x], |c, o| ag_clamp(c, x, lo, hi, o));
    }

    pub(super) fn attention(&mut self) {
        let t = self.target();
        let x = self.handle();
        let nh = self.input.small_usize();
        self.op("ag_attention", t, &[x], |c, o| ag_attention(c, x, nh, o));
    }

    /// ag_concat: up to two more handles than AG_MAX_CONCAT, sometimes
    /// through a NULL array.
    pub(super) fn concat(&mut self) {
        let t = self.target();
        let n = self.input.u8() as usize % (AG_MAX_CONCAT + 3);
        let mut xs = [SENTINEL; AG_MAX_CONCAT + 2];
        for x in xs.iter_mut().take(n) {
            *x = self.handle();
        }
        let axis = self.input.axis();
        let p = if self.input.u8() == 255 {
            null()
        } else {
            xs.as_ptr()
        };
        // Past the cap the handles are never looked at.
        let checked = if n <= AG_MAX_CONCAT { &xs[..n] } else { &[] };
        self.op("ag_concat", t, checked, |c, o| ag_concat(c, p, n, axis, o));
    }

    pub(super) fn slice(&mut self) {
        let t = self.target();
        let x = self.handle();
        let axis = self.input.axis();
        let start = self.input.small_usize();
        let length = self.input.small_usize();
        self.op("ag_slice", t, &[x], |c, o| {
            ag_slice(c, x, axis, start, length, o)
        });
    }

    pub(super) fn dropout(&mut self) {
        let t = self.target();
        let x = self.handle();
        let p = self.input.f32();
        let seed = self.input.u64();
        self.op("ag_dropout", t, &[x], |c, o| ag_dropout(c, x, p, seed, o));
    }
}

impl FfiOps<'_> {
    /// A constraining transform (`which`: 0 lower, 1 upper, 2 interval, 3
    /// a correlation matrix's Cholesky factor, which reads no bounds):
    /// two results, each made of several ops, so the one-op checks of
    /// `op` do not apply; on success both handles are remembered, on
    /// failure neither out-value is written.
    pub(super) fn constrain(&mut self, which: u8) {
        let t = self.target();
        let x = self.handle();
        let (a, b) = (self.input.f32(), self.input.f32());
        let null_out = self.input.u8() == 255;
        let pre = self.pre(t, &[x]);
        let (mut y, mut j) = (SENTINEL, SENTINEL);
        let yp: *mut ag_tensor = if null_out { null_mut() } else { &mut y };
        let (func, st) = match which {
            0 => (
                "ag_constrain_lower",
                ag_constrain_lower(self.ptr(t), x, a, yp, &mut j),
            ),
            1 => (
                "ag_constrain_upper",
                ag_constrain_upper(self.ptr(t), x, a, yp, &mut j),
            ),
            2 => (
                "ag_constrain_interval",
                ag_constrain_interval(self.ptr(t), x, a, b, yp, &mut j),
            ),
            _ => (
                "ag_constrain_cholesky_corr",
                ag_constrain_cholesky_corr(self.ptr(t), x, yp, &mut j),
            ),
        };
        self.post(func, t, &pre, st);
        if null_out && pre.live.is_some() {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "{func}: NULL out accepted");
        }
        if st != AG_STATUS_OK {
            assert!(
                y == SENTINEL && j == SENTINEL,
                "{func}: out written on failure"
            );
            return;
        }
        let i = pre.live.expect("OK only on a live context");
        assert!(
            y.context == self.ids[i] && j.context == self.ids[i],
            "{func}: handle context"
        );
        self.remember(y);
        self.remember(j);
    }
}

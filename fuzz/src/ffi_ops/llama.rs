//! The Llama family's ops that take more than a handle: each reads the
//! context, its handles and its scalars from the input, then runs through
//! [`FfiOps::op`] as the ops of `ops.rs` do.

use super::FfiOps;
use arenagrad::ffi::*;

impl FfiOps<'_> {
    pub(super) fn rmsnorm(&mut self) {
        let t = self.target();
        let x = self.handle();
        let w = self.handle();
        let eps = self.input.f32();
        self.op("ag_rmsnorm", t, &[x, w], |c, o| ag_rmsnorm(c, x, w, eps, o));
    }

    pub(super) fn rope(&mut self) {
        let t = self.target();
        let x = self.handle();
        let theta = self.input.f32();
        let offset = self.input.small_usize();
        self.op("ag_rope", t, &[x], |c, o| ag_rope(c, x, theta, offset, o));
    }

    pub(super) fn attention_gqa(&mut self) {
        let t = self.target();
        let (q, k, v) = (self.handle(), self.handle(), self.handle());
        self.op("ag_attention_gqa", t, &[q, k, v], |c, o| {
            ag_attention_gqa(c, q, k, v, o)
        });
    }
}

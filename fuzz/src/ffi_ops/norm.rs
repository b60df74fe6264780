//! Training mode, batch norm's running statistics, and the normalisations
//! over channels: each reads its context, handles and scalars from the
//! input; the ops run through [`FfiOps::op`] as the ops of `ops.rs` do.

use super::{FfiOps, Target};
use arenagrad::ffi::*;
use std::ptr::null_mut;

impl FfiOps<'_> {
    /// ag_set_training, then ag_is_training reads the mode back.
    pub(super) fn set_training(&mut self) {
        let t = self.target();
        let training = !self.input.bool();
        let null_out = self.input.u8() == 255;
        let pre = self.pre(t, &[]);
        let st = ag_set_training(self.ptr(t), training);
        self.post("ag_set_training", t, &pre, st);
        if matches!(t, Target::Live(_)) {
            assert_eq!(st, AG_STATUS_OK, "ag_set_training must succeed");
        }
        let mut got = !training;
        let p: *mut bool = if null_out { null_mut() } else { &mut got };
        let st = ag_is_training(self.ptr(t), p);
        self.post("ag_is_training", t, &pre, st);
        if st == AG_STATUS_OK {
            assert_eq!(got, training, "ag_is_training: not the mode just set");
        } else {
            assert_eq!(got, !training, "ag_is_training: written on failure");
        }
    }

    /// ag_batch_norm_stats_new with a prefix and channel count from the
    /// input, then a read and a write of statistics 0..3 with a length
    /// that may be wrong.
    pub(super) fn batch_norm_stats(&mut self) {
        let t = self.target();
        let k = self.input.u8();
        let channels = self.input.small_usize();
        let prefix: &std::ffi::CStr = match k % 4 {
            0 => c"bn",
            1 => c"layer1.bn",
            2 => c"",
            _ => c"bn2",
        };
        let pre = self.pre(t, &[]);
        let mut index = u32::MAX;
        let p: *mut u32 = if k == 255 { null_mut() } else { &mut index };
        let st = ag_batch_norm_stats_new(self.ptr(t), prefix.as_ptr(), channels, p);
        self.post("ag_batch_norm_stats_new", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(
                index,
                u32::MAX,
                "ag_batch_norm_stats_new: out written on failure"
            );
        }
        let which = (self.input.u8() % 4) as u32;
        let n = self.input.small_usize().min(64);
        let (mut mean, mut var, mut count) = ([f32::NAN; 64], [f32::NAN; 64], -1i64);
        let st = ag_batch_norm_stats_read(
            self.ptr(t),
            which,
            mean.as_mut_ptr(),
            var.as_mut_ptr(),
            n,
            &mut count,
        );
        self.post("ag_batch_norm_stats_read", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(count, -1, "ag_batch_norm_stats_read: written on failure");
            return;
        }
        assert!(count >= 0, "ag_batch_norm_stats_read: a negative count");
        let scale = self.input.f32();
        mean.iter_mut().for_each(|v| *v *= scale);
        let st = ag_batch_norm_stats_write(
            self.ptr(t),
            which,
            mean.as_ptr(),
            var.as_ptr(),
            n,
            count + 1,
        );
        self.post("ag_batch_norm_stats_write", t, &pre, st);
    }

    /// ag_batch_norm of x, w and b with statistics 0..2 or none (a zero
    /// byte), momentum and eps from the input (zero bytes: PyTorch's).
    pub(super) fn batch_norm(&mut self) {
        let t = self.target();
        let (x, w, b) = (self.handle(), self.handle(), self.handle());
        let (stats, momentum, eps) = self.batch_norm_scalars();
        self.op("ag_batch_norm", t, &[x, w, b], |c, o| {
            ag_batch_norm(c, x, w, b, stats, momentum, eps, o)
        });
    }

    /// ag_batch_norm_opt: a byte whose bits pass w (bit 0) and b
    /// (bit 1), else NULL, then BATCH_NORM's input.
    pub(super) fn batch_norm_opt(&mut self) {
        let bits = self.input.u8();
        let t = self.target();
        let (x, w, b) = (self.handle(), self.handle(), self.handle());
        let (wp, bp, inputs) = optional_affine(bits, x, &w, &b);
        let (stats, momentum, eps) = self.batch_norm_scalars();
        self.op("ag_batch_norm_opt", t, &inputs, |c, o| {
            ag_batch_norm_opt(c, x, wp, bp, stats, momentum, eps, o)
        });
    }

    /// Batch norm's statistics index (0..2, or none for a zero byte),
    /// momentum and eps (zero bytes: PyTorch's) from the input.
    fn batch_norm_scalars(&mut self) -> (u32, f32, f32) {
        let stats = match self.input.u8() {
            0 => AG_NO_STATS,
            k => (k % 3) as u32,
        };
        let momentum = match self.input.u8() {
            0 => 0.1,
            _ => self.input.f32(),
        };
        let eps = match self.input.u8() {
            0 => 1e-5,
            _ => self.input.f32(),
        };
        (stats, momentum, eps)
    }

    /// ag_group_norm of x, w and b with a group count and eps from the
    /// input (zero bytes: one group, PyTorch's eps).
    pub(super) fn group_norm(&mut self) {
        let t = self.target();
        let (x, w, b) = (self.handle(), self.handle(), self.handle());
        let groups = self.input.small_usize().wrapping_add(1);
        let eps = match self.input.u8() {
            0 => 1e-5,
            _ => self.input.f32(),
        };
        self.op("ag_group_norm", t, &[x, w, b], |c, o| {
            ag_group_norm(c, x, w, b, groups, eps, o)
        });
    }

    /// ag_group_norm_opt: the byte of BATCH_NORM_OPT, then
    /// GROUP_NORM's input.
    pub(super) fn group_norm_opt(&mut self) {
        let bits = self.input.u8();
        let t = self.target();
        let (x, w, b) = (self.handle(), self.handle(), self.handle());
        let (wp, bp, inputs) = optional_affine(bits, x, &w, &b);
        let groups = self.input.small_usize().wrapping_add(1);
        let eps = match self.input.u8() {
            0 => 1e-5,
            _ => self.input.f32(),
        };
        self.op("ag_group_norm_opt", t, &inputs, |c, o| {
            ag_group_norm_opt(c, x, wp, bp, groups, eps, o)
        });
    }
}

/// Which of `w` and `b` a call passes, by the bits of `bits` (bit 0: w,
/// bit 1: b): the pointers (NULL for none) and the handles passed.
fn optional_affine(
    bits: u8,
    x: ag_tensor,
    w: &ag_tensor,
    b: &ag_tensor,
) -> (*const ag_tensor, *const ag_tensor, Vec<ag_tensor>) {
    let mut inputs = vec![x];
    let mut pass = |t: &ag_tensor, on: bool| {
        if on {
            inputs.push(*t);
            t as *const ag_tensor
        } else {
            std::ptr::null()
        }
    };
    let (wp, bp) = (pass(w, bits & 1 == 1), pass(b, bits & 2 == 2));
    (wp, bp, inputs)
}

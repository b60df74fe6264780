//! Batch and group norm without their weight, bias or both, through the C
//! API (`ag_batch_norm_opt`, `ag_group_norm_opt`: NULL for none): what a
//! missing parameter means, and what bad input behind the pointers gets
//! (the status the `Errors:` list names, the out-handle left alone, the
//! context still usable).

use arenagrad::ffi::*;
use std::ptr::{null, null_mut};

const NONE: ag_tensor = ag_tensor {
    index: 0,
    context: 0,
    generation: 0,
};

/// A handle the calls below must not overwrite on failure.
const SENTINEL: ag_tensor = ag_tensor {
    index: 0xdead,
    context: 0xbeef,
    generation: 0xfeed,
};

struct Ctx(*mut ag_context);

impl Ctx {
    fn new() -> Ctx {
        let mut c = null_mut();
        assert_eq!(ag_context_new(&mut c), AG_STATUS_OK);
        Ctx(c)
    }

    fn param(&self, shape: &[usize], v: &[f32]) -> ag_tensor {
        let mut t = NONE;
        let st = ag_param_new(self.0, shape.as_ptr(), shape.len(), v.as_ptr(), &mut t);
        assert_eq!(st, AG_STATUS_OK);
        t
    }

    fn tensor(&self, shape: &[usize], v: &[f32]) -> ag_tensor {
        let mut t = NONE;
        let st = ag_tensor_new(self.0, shape.as_ptr(), shape.len(), v.as_ptr(), &mut t);
        assert_eq!(st, AG_STATUS_OK);
        t
    }

    fn read(&self, t: ag_tensor, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        assert_eq!(ag_tensor_read(self.0, t, v.as_mut_ptr(), n), AG_STATUS_OK);
        v
    }

    fn grad(&self, t: ag_tensor, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        let st = ag_tensor_read_grad(self.0, t, v.as_mut_ptr(), n);
        assert_eq!(st, AG_STATUS_OK);
        v
    }

    /// The last error's message: it names the C function called.
    fn last_error(&self) -> String {
        // SAFETY: the context returns a NUL-terminated message that lives
        // until its next call.
        let msg = unsafe { std::ffi::CStr::from_ptr(ag_context_last_error(self.0)) };
        msg.to_string_lossy().into_owned()
    }

    /// Batch norm with batch statistics, `w` and `b` passed or NULL.
    fn bn(
        &self,
        x: ag_tensor,
        w: Option<&ag_tensor>,
        b: Option<&ag_tensor>,
    ) -> Result<ag_tensor, ag_status> {
        let mut out = SENTINEL;
        let (wp, bp) = (
            w.map_or(null(), |t| t as *const _),
            b.map_or(null(), |t| t as *const _),
        );
        let st = ag_batch_norm_opt(self.0, x, wp, bp, AG_NO_STATS, 0.1, 1e-5, &mut out);
        if st == AG_STATUS_OK {
            Ok(out)
        } else {
            assert_eq!(out, SENTINEL, "out written on failure");
            Err(st)
        }
    }

    /// Group norm in 2 groups, `w` and `b` passed or NULL.
    fn gn(
        &self,
        x: ag_tensor,
        w: Option<&ag_tensor>,
        b: Option<&ag_tensor>,
    ) -> Result<ag_tensor, ag_status> {
        let mut out = SENTINEL;
        let (wp, bp) = (
            w.map_or(null(), |t| t as *const _),
            b.map_or(null(), |t| t as *const _),
        );
        let st = ag_group_norm_opt(self.0, x, wp, bp, 2, 1e-5, &mut out);
        if st == AG_STATUS_OK {
            Ok(out)
        } else {
            assert_eq!(out, SENTINEL, "out written on failure");
            Err(st)
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        ag_context_free(&mut self.0);
    }
}

/// x [3, 2] of two channels whose batch statistics are easy: channel 0
/// holds 1, 2, 3 (mean 2, biased variance 2/3), channel 1 holds 4, 4, 7.
const X: [f32; 6] = [1.0, 4.0, 2.0, 4.0, 3.0, 7.0];

/// Backward from sum(y * [1, 2, 3, 4, 5, 6]).
fn backward_weighted(c: &Ctx, y: ag_tensor) {
    let g = c.tensor(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (mut p, mut l) = (NONE, NONE);
    assert_eq!(ag_mul(c.0, y, g, &mut p), AG_STATUS_OK);
    assert_eq!(ag_sum(c.0, p, &mut l), AG_STATUS_OK);
    assert_eq!(ag_backward(c.0, l), AG_STATUS_OK);
}

/// With w and b both NULL: y = (x - mean) / sqrt(var + eps) per channel,
/// and x's gradient is ag_batch_norm's with a weight of ones and a bias of
/// zeros, bit for bit. With one NULL, the other scales or shifts alone and
/// gets its gradient (a bias: sum of the upstream gradient per channel).
#[test]
fn a_null_weight_scales_by_one_and_a_null_bias_shifts_by_zero() {
    let c = Ctx::new();
    let x = c.param(&[3, 2], &X);
    let y = c.bn(x, None, None).unwrap();
    let got = c.read(y, 6);
    let s0 = (2.0f64 / 3.0 + 1e-5).sqrt();
    let s1 = (2.0f64 + 1e-5).sqrt();
    let want = [-1.0 / s0, -1.0 / s1, 0.0, -1.0 / s1, 1.0 / s0, 2.0 / s1];
    for (g, w) in got.iter().zip(want) {
        assert!((*g as f64 - w).abs() <= 1e-6, "{g} vs {w}");
    }
    backward_weighted(&c, y);
    let gx_plain = c.grad(x, 6);

    let u = Ctx::new();
    let (ux, uw, ub) = (
        u.param(&[3, 2], &X),
        u.param(&[2], &[1.0; 2]),
        u.param(&[2], &[0.0; 2]),
    );
    let mut uy = NONE;
    let st = ag_batch_norm(u.0, ux, uw, ub, AG_NO_STATS, 0.1, 1e-5, &mut uy);
    assert_eq!(st, AG_STATUS_OK);
    assert_eq!(u.read(uy, 6), got);
    backward_weighted(&u, uy);
    assert_eq!(u.grad(ux, 6), gx_plain);

    // A bias alone shifts the normalised values and gets sum(dout) per
    // channel; a weight alone scales them.
    let k = Ctx::new();
    let (kx, kb, kw) = (
        k.param(&[3, 2], &X),
        k.param(&[2], &[0.5, -1.0]),
        k.param(&[2], &[2.0, 3.0]),
    );
    let shifted = k.bn(kx, None, Some(&kb)).unwrap();
    let scaled = k.bn(kx, Some(&kw), None).unwrap();
    let (sv, wv) = (k.read(shifted, 6), k.read(scaled, 6));
    for i in 0..6 {
        assert_eq!(sv[i], got[i] + [0.5, -1.0][i % 2]);
        assert_eq!(wv[i], got[i] * [2.0, 3.0][i % 2]);
    }
    backward_weighted(&k, shifted);
    assert_eq!(k.grad(kb, 2), [1.0 + 3.0 + 5.0, 2.0 + 4.0 + 6.0]);

    // Group norm: both NULL gives the ones-and-zeros affine's values.
    let g = Ctx::new();
    let (gw, gb) = (g.param(&[4], &[1.0; 4]), g.param(&[4], &[0.0; 4]));
    let gx = g.tensor(
        &[1, 4, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0, 1.0, 9.0, 9.0, 2.0],
    );
    let plain = g.gn(gx, None, None).unwrap();
    let unit = g.gn(gx, Some(&gw), Some(&gb)).unwrap();
    assert_eq!(g.read(plain, 12), g.read(unit, 12));
}

/// Bad input behind the pointers is refused with the status the Errors:
/// list names, whether or not the other pointer is NULL, and the context
/// still computes afterwards.
#[test]
fn bad_handles_behind_the_pointers_are_refused() {
    let c = Ctx::new();
    let other = Ctx::new();
    let x = c.param(&[3, 2], &X);
    let x4 = c.param(&[1, 2, 3], &X);
    let good = c.param(&[2], &[1.0, 1.0]);
    let wrong_shape = c.param(&[3], &[1.0; 3]);
    let foreign = other.param(&[2], &[1.0, 1.0]);
    // A handle of the last iteration, its slot taken by a new tensor.
    let stale = c.tensor(&[2], &[1.0, 1.0]);
    assert_eq!(ag_reset(c.0), AG_STATUS_OK);
    c.tensor(&[2], &[2.0, 2.0]);
    let forged = ag_tensor { index: 777, ..good };
    for (bad, status) in [
        (wrong_shape, AG_STATUS_SHAPE_MISMATCH),
        (foreign, AG_STATUS_WRONG_CONTEXT),
        (stale, AG_STATUS_STALE_HANDLE),
        (forged, AG_STATUS_INVALID_HANDLE),
    ] {
        for (w, b) in [
            (Some(&bad), None),
            (None, Some(&bad)),
            (Some(&good), Some(&bad)),
            (Some(&bad), Some(&good)),
        ] {
            assert_eq!(c.bn(x, w, b), Err(status), "batch norm");
            assert!(c.last_error().starts_with("batch_norm_opt: "));
            assert_eq!(c.gn(x4, w, b), Err(status), "group norm");
            assert!(c.last_error().starts_with("group_norm_opt: "));
        }
    }
    // NULL out: refused before anything is read.
    let st = ag_batch_norm_opt(c.0, x, null(), null(), AG_NO_STATS, 0.1, 1e-5, null_mut());
    assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_group_norm_opt(c.0, x, null(), null(), 1, 1e-5, null_mut());
    assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
    // The scalar checks are ag_batch_norm's and ag_group_norm's.
    let mut out = SENTINEL;
    let st = ag_batch_norm_opt(c.0, x, null(), null(), AG_NO_STATS, 0.1, 0.0, &mut out);
    assert_eq!((st, out), (AG_STATUS_INVALID_ARGUMENT, SENTINEL));
    let st = ag_group_norm_opt(c.0, x, null(), null(), 3, 1e-5, &mut out);
    assert_eq!((st, out), (AG_STATUS_INVALID_ARGUMENT, SENTINEL));
    // Still usable.
    let y = c.bn(x, Some(&good), None).unwrap();
    assert_eq!(c.read(y, 6).len(), 6);
}

//! Parameters and tensors: creation, reads of values, gradients and shapes,
//! parameter writes.

use super::{BUF, FILL, FfiOps, MAX_PARAMS, SENTINEL, Target, status_name};
use arenagrad::ffi::*;
use std::ptr::{null, null_mut};

/// The functions that read from a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Read {
    Values,
    Grad,
    Item,
    Shape,
    Numel,
}

impl FfiOps<'_> {
    pub(super) fn param_new(&mut self) {
        let t = self.target();
        if let Target::Live(i) = t
            && self.stats(i).param_count as usize >= MAX_PARAMS
        {
            return;
        }
        let (dims, nd) = self.shape();
        let n = Self::numel_of(&dims[..nd.min(8)]);
        let init_mode = self.input.u8();
        let vals = self.values(n.unwrap_or(0));
        // NULL init (zeros) only for shapes the harness may allocate or the
        // library must refuse before allocating.
        let huge_ok = n.is_none();
        let init = if init_mode & 1 == 0 && (n.is_some() || huge_ok) {
            null()
        } else if n.is_some() {
            vals.as_ptr()
        } else {
            null()
        };
        let sp = if init_mode == 255 {
            null()
        } else {
            dims.as_ptr()
        };
        let pre = self.pre(t, &[]);
        if t == Target::Live(0) {
            self.verify_params("before ag_param_new");
        }
        let mut out = SENTINEL;
        let null_out = init_mode == 254;
        let outp: *mut ag_tensor = if null_out { null_mut() } else { &mut out };
        let st = ag_param_new(self.ptr(t), sp, nd, init, outp);
        self.post("ag_param_new", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(out, SENTINEL, "ag_param_new: out written on failure");
            self.param_event(t, "ag_param_new", st);
            return;
        }
        let i = pre.live.expect("live");
        assert_eq!(out.context, self.ids[i]);
        assert_eq!(out.generation, 0, "parameter handles have generation 0");
        assert_eq!(out.index as u64, pre.stats.param_count);
        let numel = n.expect("an allocated parameter has a small shape");
        if i == 0 {
            self.params0.push((out, numel));
            self.param_event(t, "ag_param_new", st);
            let got = &self.expected0[self.expected0.len() - numel..];
            if init.is_null() {
                assert!(got.iter().all(|&b| b == 0), "NULL init is not zeros");
            } else {
                assert!(
                    got.iter().zip(&vals).all(|(&g, v)| g == v.to_bits()),
                    "init not copied"
                );
            }
        }
        self.remember(out);
    }

    pub(super) fn tensor_new(&mut self) {
        let t = self.target();
        let (dims, nd) = self.shape();
        let n = Self::numel_of(&dims[..nd.min(8)]);
        let vals = self.values(n.unwrap_or(0));
        let mode = self.input.u8();
        let data = if mode == 255 || n.is_none() {
            null()
        } else {
            vals.as_ptr()
        };
        let sp = if mode == 254 { null() } else { dims.as_ptr() };
        self.op("ag_tensor_new", t, &[], |c, o| {
            ag_tensor_new(c, sp, nd, data, o)
        });
    }

    /// A read-like call: target, handle, a mode byte `k` (length mode in
    /// bits 3.., NULL destination when k >= 250, NULL ndim for tensor_shape
    /// when bit 6 is set) and, for some modes, an explicit length.
    pub(super) fn read(&mut self, what: Read) {
        let t = self.target();
        let x = self.handle();
        let k = self.input.u8();
        let pre = self.pre(t, &[x]);
        // The real element count when the handle is good (else a guess).
        let mut numel = 0usize;
        let good = pre.live.is_some()
            && !pre.bad_handle
            && ag_tensor_numel(self.ptr(t), x, &mut numel) == AG_STATUS_OK;
        let len = match (k >> 3) % 6 {
            0 | 1 if numel <= BUF => numel,
            2 => numel.saturating_add(1).min(BUF),
            3 => numel.saturating_sub(1),
            4 => usize::MAX,
            _ => self.input.u16() as usize % (BUF + 1),
        };
        let null_dst = k >= 250;
        let mut buf = [FILL; BUF];
        let dst = if null_dst {
            null_mut()
        } else {
            buf.as_mut_ptr()
        };
        let (func, st) = match what {
            Read::Values => ("ag_tensor_read", ag_tensor_read(self.ptr(t), x, dst, len)),
            Read::Grad => (
                "ag_tensor_read_grad",
                ag_tensor_read_grad(self.ptr(t), x, dst, len),
            ),
            Read::Item => {
                let mut v = FILL;
                let p: *mut f32 = if null_dst { null_mut() } else { &mut v };
                let st = ag_tensor_item(self.ptr(t), x, p);
                if st != AG_STATUS_OK {
                    assert_eq!(v.to_bits(), FILL.to_bits(), "item written on failure");
                } else {
                    assert_eq!(numel, 1, "item of a {numel}-element tensor");
                }
                ("ag_tensor_item", st)
            }
            Read::Shape => {
                let mut s = [7usize; 6];
                let mut nd = 99usize;
                let sp = if null_dst { null_mut() } else { s.as_mut_ptr() };
                let np: *mut usize = if k & 64 == 0 { &mut nd } else { null_mut() };
                let st = ag_tensor_shape(self.ptr(t), x, sp, np);
                if st == AG_STATUS_OK {
                    assert!((1..=6).contains(&nd));
                    assert_eq!(s[..nd].iter().product::<usize>(), numel);
                } else {
                    assert_eq!(nd, 99, "ndim written on failure");
                    assert_eq!(s, [7; 6], "shape written on failure");
                }
                ("ag_tensor_shape", st)
            }
            Read::Numel => {
                let mut n = 12345usize;
                let p: *mut usize = if null_dst { null_mut() } else { &mut n };
                let st = ag_tensor_numel(self.ptr(t), x, p);
                if st != AG_STATUS_OK {
                    assert_eq!(n, 12345, "numel written on failure");
                }
                ("ag_tensor_numel", st)
            }
        };
        self.post(func, t, &pre, st);
        if matches!(what, Read::Values | Read::Grad) {
            if st == AG_STATUS_OK {
                assert!(
                    good && len == numel,
                    "{func} accepted length {len} for {numel}"
                );
            } else {
                assert!(
                    buf.iter().all(|v| v.to_bits() == FILL.to_bits()),
                    "{func} wrote on failure"
                );
                if good && len != numel && !null_dst {
                    assert!(
                        matches!(st, AG_STATUS_INVALID_ARGUMENT | AG_STATUS_TOO_LARGE),
                        "{func}: wrong length {len} for {numel} gave {}",
                        status_name(st)
                    );
                }
            }
        }
    }

    pub(super) fn param_write(&mut self) {
        let t = self.target();
        let p = self.handle();
        let k = self.input.u8();
        let pre = self.pre(t, &[p]);
        let mut numel = 0usize;
        if pre.live.is_some() && !pre.bad_handle {
            assert_eq!(ag_tensor_numel(self.ptr(t), p, &mut numel), AG_STATUS_OK);
        }
        let len = match k % 5 {
            0 | 1 if numel <= BUF => numel,
            2 => (numel + 1).min(BUF),
            3 => usize::MAX,
            _ => self.input.u8() as usize,
        };
        let vals = self.values(BUF);
        let data = if k >= 250 { null() } else { vals.as_ptr() };
        if t == Target::Live(0) {
            self.verify_params("before ag_param_write");
        }
        let st = ag_param_write(self.ptr(t), p, data, len);
        self.post("ag_param_write", t, &pre, st);
        self.param_event(t, "ag_param_write", st);
        if st == AG_STATUS_OK {
            assert_eq!(len, numel, "param_write accepted length {len} for {numel}");
            assert!(p.generation == 0, "param_write accepted an activation");
        }
    }
}

//! Checkpoints (save, load, peek, load from bytes) and the life cycle of
//! contexts: free, double free, re-creation, NULLs, forged pointers.

use super::{FfiOps, Target, documented, last_error, new_context, status_name};
use arenagrad::ffi::*;
use std::ffi::{CStr, CString, c_char};
use std::ptr::{null, null_mut};

impl FfiOps<'_> {
    pub(super) fn load_bytes(&mut self) {
        let t = self.target();
        let len = self.input.u16() as usize % 2048;
        let bytes = self.input.take(len).to_vec();
        let k = self.input.u8();
        let cap = (k as usize) % 65;
        let mut user = [0xEEu8; 64];
        let mut ulen = 777usize;
        let up: *mut u8 = if k & 128 == 0 {
            user.as_mut_ptr()
        } else {
            null_mut()
        };
        let lp: *mut usize = if k == 255 { null_mut() } else { &mut ulen };
        let pre = self.pre(t, &[]);
        if t == Target::Live(0) {
            self.verify_params("before ag_checkpoint_load_bytes");
        }
        let st = ag_checkpoint_load_bytes(self.ptr(t), bytes.as_ptr(), bytes.len(), up, cap, lp);
        self.post("ag_checkpoint_load_bytes", t, &pre, st);
        if pre.live.is_some() {
            assert!(
                matches!(
                    st,
                    AG_STATUS_OK
                        | AG_STATUS_CHECKPOINT_CORRUPT
                        | AG_STATUS_CHECKPOINT_MISMATCH
                        | AG_STATUS_INVALID_ARGUMENT
                        | AG_STATUS_NULL_ARGUMENT
                ),
                "ag_checkpoint_load_bytes: {}",
                status_name(st)
            );
        }
        if st != AG_STATUS_OK {
            assert_eq!(ulen, 777, "user_len written on failure");
        }
        self.param_event(t, "ag_checkpoint_load_bytes", st);
    }

    /// Save to a path the input chooses (good, NULL, empty, not UTF-8, in a
    /// missing folder, a folder), load it back into a context of its choice,
    /// peek at it from a third.
    pub(super) fn save_load_peek(&mut self) {
        let t = self.target();
        let k = self.input.u8();
        let _ = std::fs::create_dir_all(&self.dir);
        let good = self.dir.join("m.ckpt");
        let path: Option<CString> = match k % 8 {
            0..=2 => Some(CString::new(good.to_string_lossy().as_bytes()).unwrap()),
            3 => None,
            4 => Some(CString::new("").unwrap()),
            5 => Some(CString::new(vec![0xff, 0xfe, b'x']).unwrap()),
            6 => Some(
                CString::new(self.dir.join("missing/m.ckpt").to_string_lossy().as_bytes()).unwrap(),
            ),
            _ => Some(CString::new(self.dir.to_string_lossy().as_bytes()).unwrap()),
        };
        let pp: *const c_char = path.as_ref().map_or(null(), |p| p.as_ptr());
        let user = *b"user-bytes-0123456789";
        let ul = self.input.u8() as usize % (user.len() + 1);
        let up = if k & 64 == 0 { user.as_ptr() } else { null() };
        let pre = self.pre(t, &[]);
        let st = ag_checkpoint_save(self.ptr(t), pp, up, ul);
        self.post("ag_checkpoint_save", t, &pre, st);
        if pre.live.is_some() && st != AG_STATUS_OK {
            assert!(
                matches!(
                    st,
                    AG_STATUS_IO
                        | AG_STATUS_NULL_ARGUMENT
                        | AG_STATUS_INVALID_ARGUMENT
                        | AG_STATUS_ALLOCATION_FAILED
                ),
                "ag_checkpoint_save: {}",
                status_name(st)
            );
        }
        // Never a temporary file left behind.
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(!name.contains(".tmp."), "temporary file left: {name}");
            }
        }
        // Load it back into a context of the input's choice.
        let t2 = self.target();
        let mut ubuf = [0u8; 32];
        let cap = self.input.u8() as usize % 33;
        let mut ulen = 0usize;
        let pre = self.pre(t2, &[]);
        if t2 == Target::Live(0) {
            self.verify_params("before ag_checkpoint_load");
        }
        let st = ag_checkpoint_load(self.ptr(t2), pp, ubuf.as_mut_ptr(), cap, &mut ulen);
        self.post("ag_checkpoint_load", t2, &pre, st);
        if pre.live.is_some() {
            assert!(
                matches!(
                    st,
                    AG_STATUS_OK
                        | AG_STATUS_IO
                        | AG_STATUS_CHECKPOINT_CORRUPT
                        | AG_STATUS_CHECKPOINT_MISMATCH
                        | AG_STATUS_INVALID_ARGUMENT
                        | AG_STATUS_NULL_ARGUMENT
                ),
                "ag_checkpoint_load: {}",
                status_name(st)
            );
        }
        self.param_event(t2, "ag_checkpoint_load", st);
        // Peek: validates like a load, changes nothing.
        let t3 = self.target();
        let pre = self.pre(t3, &[]);
        if t3 == Target::Live(0) {
            self.verify_params("before ag_checkpoint_peek");
        }
        let mut n = 4242usize;
        let st = ag_checkpoint_peek(self.ptr(t3), pp, ubuf.as_mut_ptr(), cap, &mut n);
        self.post("ag_checkpoint_peek", t3, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(n, 4242, "ag_checkpoint_peek: user_len written on failure");
        }
        if t3 == Target::Live(0) {
            self.verify_params("after ag_checkpoint_peek");
        }
        // The same file's bytes from memory, whole or cut short, or a NULL
        // pointer. The choices come from `k`'s spare bits, so corpus inputs
        // written before this call existed still read the same.
        let bytes = std::fs::read(&good).unwrap_or_default();
        let len = match (k >> 3) & 3 {
            0 | 1 => bytes.len(),
            2 => bytes.len() / 2,
            _ => bytes.len().min(ul),
        };
        let data = if k & 32 == 0 { bytes.as_ptr() } else { null() };
        let pre = self.pre(t3, &[]);
        if t3 == Target::Live(0) {
            self.verify_params("before ag_checkpoint_peek_bytes");
        }
        let mut n = 4242usize;
        let st = ag_checkpoint_peek_bytes(self.ptr(t3), data, len, ubuf.as_mut_ptr(), cap, &mut n);
        self.post("ag_checkpoint_peek_bytes", t3, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(
                n, 4242,
                "ag_checkpoint_peek_bytes: user_len written on failure"
            );
        }
        if pre.live.is_some() && data.is_null() && len > 0 {
            assert_eq!(
                st, AG_STATUS_NULL_ARGUMENT,
                "ag_checkpoint_peek_bytes(data NULL)"
            );
        }
        if t3 == Target::Live(0) {
            self.verify_params("after ag_checkpoint_peek_bytes");
        }
    }

    /// Frees context 1, then frees it again through a copy of the pointer.
    pub(super) fn context_free(&mut self) {
        self.calls += 1;
        if self.ctx[1].is_null() {
            return;
        }
        let old = self.ctx[1];
        let mut p = old;
        assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
        assert!(p.is_null(), "ag_context_free did not NULL the pointer");
        self.ctx[1] = null_mut();
        self.invalid.push(old as usize);
        let mut q = old;
        assert_eq!(ag_context_free(&mut q), AG_STATUS_INVALID_CONTEXT);
        assert_eq!(q, old, "refused free changed the pointer");
    }

    /// Makes context 1 again if it was freed.
    pub(super) fn context_new(&mut self) {
        self.calls += 1;
        if self.ctx[1].is_null() {
            let (c, id) = new_context();
            self.ctx[1] = c;
            self.ids[1] = id;
            self.invalid.retain(|&a| a != c as usize);
        }
    }

    pub(super) fn context_nulls(&mut self) {
        self.calls += 1;
        assert_eq!(ag_context_free(null_mut()), AG_STATUS_OK);
        let mut p: *mut ag_context = null_mut();
        assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
        assert_eq!(ag_context_new(null_mut()), AG_STATUS_NULL_ARGUMENT);
    }

    pub(super) fn status_str(&mut self) {
        self.calls += 1;
        let st = self.input.u32() as i32;
        let s = status_name(st);
        assert!(!s.is_empty());
        if !documented(st) {
            assert_eq!(s, "unknown status");
        }
        // SAFETY: static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(ag_version()) };
        assert!(!v.to_bytes().is_empty());
        // "X.Y.Z" and X * 10000 + Y * 100 + Z agree.
        let n: Vec<u32> = v
            .to_str()
            .unwrap()
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(ag_version_number(), n[0] * 10000 + n[1] * 100 + n[2]);
    }

    /// The last error of a live, NULL, freed or forged context.
    pub(super) fn last_error_of_any(&mut self) {
        self.calls += 1;
        let t = self.target();
        let msg = last_error(self.ptr(t));
        if !matches!(t, Target::Live(_)) {
            assert!(!msg.is_empty(), "no message for a dead or NULL context");
        }
    }

    /// A forged pointer to real memory that is not a context.
    pub(super) fn forged_context(&mut self) {
        self.calls += 1;
        let fake = Box::new([0u64; 64]);
        let p = &*fake as *const [u64; 64] as *mut ag_context;
        assert_eq!(ag_reset(p), AG_STATUS_INVALID_CONTEXT);
        let mut q = p;
        assert_eq!(ag_context_free(&mut q), AG_STATUS_INVALID_CONTEXT);
    }
}

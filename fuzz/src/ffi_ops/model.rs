//! A model's set-up and files: named parameters and listing them, their
//! initialisers and weight-decay flags, safetensors save and load, and the
//! recomputation segments (with the privacy of a segment's tensors, which
//! `check.rs` consults through [`FfiOps::sealed`]).

use super::{FfiOps, MAX_PARAMS, SENTINEL, Target, status_name};
use arenagrad::ffi::*;
use std::ffi::{CString, c_char};
use std::ptr::{null, null_mut};

/// A segment ended with OK: tensors `first..end` of that context and
/// generation are private to it, except `output`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sealed {
    context: u32,
    generation: u64,
    first: u64,
    end: u64,
    output: u32,
}

/// Names the harness gives parameters: a few fixed ones (so duplicates and
/// clashes with "param.N" happen), or bytes from the input.
const NAMES: [&[u8]; 8] = [
    b"w",
    b"b",
    b"param.0",
    b"param.1",
    b"transformer.wte.weight",
    b"__metadata__",
    b"",
    b"\xff\xfe",
];

impl FfiOps<'_> {
    /// Whether `t` (of the live context `i`) is private to an ended segment.
    pub(super) fn sealed(&self, i: usize, t: ag_tensor, generation: u64) -> bool {
        t.generation == generation
            && self.sealed.iter().any(|s| {
                s.context == self.ids[i]
                    && s.generation == generation
                    && (s.first..s.end).contains(&(t.index as u64))
                    && t.index != s.output
            })
    }

    pub(super) fn param_new_named(&mut self) {
        let t = self.target();
        if let Target::Live(i) = t
            && self.stats(i).param_count as usize >= MAX_PARAMS
        {
            return;
        }
        let k = self.input.u8();
        let name: Option<CString> = match k % 12 {
            0..=7 => CString::new(NAMES[k as usize % 8]).ok(),
            8 => None,
            9 => Some(CString::new(vec![b'n'; 300]).unwrap()),
            _ => {
                let n = self.input.u8() as usize % 24;
                let raw: Vec<u8> = self.input.take(n).iter().map(|&b| b.max(1)).collect();
                CString::new(raw).ok()
            }
        };
        let np: *const c_char = name.as_ref().map_or(null(), |n| n.as_ptr());
        let (dims, nd) = self.shape();
        let n = Self::numel_of(&dims[..nd.min(8)]);
        // Shapes the harness would not allocate are left to ag_param_new.
        if n.is_none() {
            return;
        }
        let pre = self.pre(t, &[]);
        if t == Target::Live(0) {
            self.verify_params("before ag_param_new_named");
        }
        let mut out = SENTINEL;
        let st = ag_param_new_named(self.ptr(t), np, dims.as_ptr(), nd, null(), &mut out);
        self.post("ag_param_new_named", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(out, SENTINEL, "ag_param_new_named: out written on failure");
            self.param_event(t, "ag_param_new_named", st);
            return;
        }
        let i = pre.live.expect("live");
        assert_eq!(out.generation, 0, "parameter handles have generation 0");
        assert_eq!(out.index as u64, pre.stats.param_count);
        // The name reads back as given.
        let mut buf = [0u8; AG_MAX_PARAM_NAME + 1];
        let mut len = 0usize;
        let st2 = ag_param_name(
            self.ptr(t),
            out,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut len,
        );
        assert_eq!(st2, AG_STATUS_OK, "ag_param_name of a new parameter");
        assert_eq!(Some(&buf[..len]), name.as_ref().map(|n| n.as_bytes()));
        if i == 0 {
            self.params0.push((out, n.expect("small shape")));
            self.param_event(t, "ag_param_new_named", st);
        }
        self.remember(out);
    }

    /// ag_param_count, ag_param_at (also past the end, NULL out) and
    /// ag_param_name (NULL buffer, short capacities) of the parameter found.
    pub(super) fn param_list(&mut self) {
        let t = self.target();
        let k = self.input.u8();
        let pre = self.pre(t, &[]);
        let mut count = usize::MAX;
        let cp: *mut usize = if k == 255 { null_mut() } else { &mut count };
        let st = ag_param_count(self.ptr(t), cp);
        self.post("ag_param_count", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(count, usize::MAX, "ag_param_count: written on failure");
            return;
        }
        assert_eq!(count as u64, pre.stats.param_count);
        let i = self.input.u8() as usize % (count + 2);
        let mut p = SENTINEL;
        let pp: *mut ag_tensor = if k == 254 { null_mut() } else { &mut p };
        let st = ag_param_at(self.ptr(t), i, pp);
        self.post("ag_param_at", t, &pre, st);
        if st != AG_STATUS_OK {
            assert_eq!(p, SENTINEL, "ag_param_at: out written on failure");
            assert!(
                k == 254 || i >= count,
                "ag_param_at({i}) of {count} refused"
            );
            return;
        }
        assert_eq!((p.index as usize, p.generation), (i, 0));
        let cap = match k % 4 {
            0 => 0,
            1 => self.input.u8() as usize % 8,
            _ => AG_MAX_PARAM_NAME + 1,
        };
        let mut buf = [0x55u8; AG_MAX_PARAM_NAME + 1];
        let bp: *mut c_char = if k & 4 != 0 && cap == 0 {
            null_mut()
        } else {
            buf.as_mut_ptr().cast()
        };
        let mut len = usize::MAX;
        let st = ag_param_name(self.ptr(t), p, bp, cap, &mut len);
        self.post("ag_param_name", t, &pre, st);
        if st == AG_STATUS_OK {
            assert!((1..=AG_MAX_PARAM_NAME).contains(&len), "name length {len}");
            if !bp.is_null() {
                assert!(cap > len && buf[len] == 0, "name not NUL-terminated");
            }
        } else {
            assert_eq!(len, usize::MAX, "ag_param_name: len written on failure");
        }
    }

    pub(super) fn param_init(&mut self) {
        let t = self.target();
        let p = self.handle();
        let kind = match self.input.u8() {
            k @ 0..=239 => (k % 9) as u32,
            _ => self.input.u32(),
        };
        let (a, b) = (self.input.f32(), self.input.f32());
        let seed = self.input.u64();
        let pre = self.pre(t, &[p]);
        if t == Target::Live(0) {
            self.verify_params("before ag_param_init");
        }
        let st = ag_param_init(self.ptr(t), p, kind, a, b, seed);
        self.post("ag_param_init", t, &pre, st);
        self.param_event(t, "ag_param_init", st);
        if st == AG_STATUS_OK {
            assert!(
                kind <= AG_INIT_KAIMING_NORMAL,
                "unknown kind {kind} accepted"
            );
        }
    }

    pub(super) fn param_set_weight_decay(&mut self) {
        let t = self.target();
        let p = self.handle();
        let on = self.input.bool();
        let pre = self.pre(t, &[p]);
        let st = ag_param_set_weight_decay(self.ptr(t), p, on);
        self.post("ag_param_set_weight_decay", t, &pre, st);
        if pre.live.is_some() && !pre.bad_handle && st != AG_STATUS_OK {
            assert_eq!(
                st,
                AG_STATUS_INVALID_ARGUMENT,
                "weight decay: {}",
                status_name(st)
            );
        }
    }

    /// Saves one context's parameters and loads the file into a context of
    /// the input's choice (the same one: values unchanged; the other: a
    /// mismatch unless the models agree), or loads a bad path.
    pub(super) fn safetensors_save_load(&mut self) {
        let t = self.target();
        let k = self.input.u8();
        let _ = std::fs::create_dir_all(&self.dir);
        let good =
            CString::new(self.dir.join("m.safetensors").to_string_lossy().as_bytes()).unwrap();
        let path: Option<CString> = match k % 8 {
            0..=4 => Some(good),
            5 => None,
            6 => Some(CString::new("").unwrap()),
            _ => Some(
                CString::new(self.dir.join("missing/m.st").to_string_lossy().as_bytes()).unwrap(),
            ),
        };
        let pp: *const c_char = path.as_ref().map_or(null(), |p| p.as_ptr());
        let pre = self.pre(t, &[]);
        let st = ag_safetensors_save(self.ptr(t), pp);
        self.post("ag_safetensors_save", t, &pre, st);
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(!name.contains(".tmp."), "temporary file left: {name}");
            }
        }
        let t2 = self.target();
        let pre = self.pre(t2, &[]);
        if t2 == Target::Live(0) {
            self.verify_params("before ag_safetensors_load");
        }
        let st2 = ag_safetensors_load(self.ptr(t2), pp);
        self.post("ag_safetensors_load", t2, &pre, st2);
        if st == AG_STATUS_OK && t2 == t && pre.live.is_some() {
            assert!(
                matches!(st2, AG_STATUS_OK | AG_STATUS_ALLOCATION_FAILED),
                "loading what was just saved: {}",
                status_name(st2)
            );
        }
        if t2 == Target::Live(0) && st2 == AG_STATUS_OK && t2 == t {
            self.verify_params("ag_safetensors_load of its own save");
        }
        self.param_event(t2, "ag_safetensors_load", st2);
    }

    pub(super) fn set_recompute(&mut self) {
        let t = self.target();
        let policy = match self.input.u8() {
            k @ 0..=239 => (k % 4) as u32,
            _ => self.input.u32(),
        };
        let pre = self.pre(t, &[]);
        let st = ag_set_recompute(self.ptr(t), policy);
        self.post("ag_set_recompute", t, &pre, st);
        if pre.live.is_some() {
            let known = policy <= AG_RECOMPUTE_AUTO;
            assert_eq!(
                st == AG_STATUS_OK,
                known,
                "policy {policy}: {}",
                status_name(st)
            );
        }
    }

    pub(super) fn segment_begin(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let st = ag_segment_begin(self.ptr(t));
        self.post("ag_segment_begin", t, &pre, st);
        if let Some(i) = pre.live {
            let open =
                self.open[i].is_some_and(|(c, g, _)| c == self.ids[i] && g == pre.stats.generation);
            if st == AG_STATUS_OK {
                assert!(!open, "ag_segment_begin: nested segment accepted");
                self.open[i] = Some((self.ids[i], pre.stats.generation, pre.stats.live_tensors));
            } else if st != AG_STATUS_ALLOCATION_FAILED {
                assert!(open, "ag_segment_begin refused: {}", status_name(st));
            }
        }
    }

    pub(super) fn segment_end(&mut self) {
        let t = self.target();
        let out = self.handle();
        let pre = self.pre(t, &[out]);
        let st = ag_segment_end(self.ptr(t), out);
        self.post("ag_segment_end", t, &pre, st);
        let Some(i) = pre.live else { return };
        let open = self.open[i].filter(|&(c, g, _)| c == self.ids[i] && g == pre.stats.generation);
        if open.is_none() {
            assert_ne!(
                st, AG_STATUS_OK,
                "ag_segment_end without a segment accepted"
            );
        }
        if st == AG_STATUS_OK {
            let (_, generation, first) = open.expect("an open segment");
            self.open[i] = None;
            self.sealed.push(Sealed {
                context: self.ids[i],
                generation,
                first,
                end: pre.stats.live_tensors,
                output: out.index,
            });
        }
    }

    pub(super) fn retain_grad(&mut self) {
        let t = self.target();
        let x = self.handle();
        let pre = self.pre(t, &[x]);
        let st = ag_tensor_retain_grad(self.ptr(t), x);
        self.post("ag_tensor_retain_grad", t, &pre, st);
    }
}

//! Decoding and checking logic of the arenagrad fuzz targets `ffi_ops` and
//! `checkpoint_load`, shared by the cargo-fuzz targets (`fuzz/fuzz_targets`)
//! and by the corpus replay test (`tests/fuzz_corpus_replay.rs`, which
//! includes this file with `#[path]`). It needs nothing but `arenagrad` and
//! `std`, and fails by panicking (a crash for libFuzzer, a failed test for
//! `cargo test`).
//!
//! Every C entry point is called through `arenagrad::ffi::ag_*` exactly as a
//! C caller would: raw pointers, NULLs, handles by value.
#![allow(dead_code)]

use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ffi::{CStr, CString, c_char};
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest element count of a tensor the harness creates itself (derived
/// tensors can be bigger: broadcasting, matmul).
pub const MAX_NUMEL: usize = 512;
/// Calls decoded from one input at most.
pub const MAX_CALLS: usize = 256;
/// Parameters per context the harness creates at most.
pub const MAX_PARAMS: usize = 32;
/// Arena cap the harness keeps in force between calls: a fuzzed limit of 0
/// ("no cap") or above this is set, checked, and replaced by this cap, so
/// chains of broadcasts cannot grow an input's memory without bound.
pub const ARENA_CAP: usize = 64 << 20;
/// Handles remembered (valid, stale, from the other context).
const POOL: usize = 64;
/// Capacity of the read buffers (one more than MAX_NUMEL: wrong lengths).
const BUF: usize = MAX_NUMEL + 1;
const MAX_IDS: usize = 64;

/// Statuses the library documents (AG_STATUS_OK down to AG_STATUS_POISONED).
pub fn documented(st: ag_status) -> bool {
    (AG_STATUS_POISONED..=AG_STATUS_OK).contains(&st)
}

pub fn status_name(st: ag_status) -> String {
    let p = ag_status_str(st);
    assert!(!p.is_null(), "ag_status_str({st}) returned NULL");
    // SAFETY: ag_status_str returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn last_error(ctx: *const ag_context) -> String {
    let p = ag_context_last_error(ctx);
    assert!(!p.is_null(), "ag_context_last_error returned NULL");
    // SAFETY: documented as a NUL-terminated string valid until the next call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("last error is not UTF-8")
        .to_owned()
}

/// Reads the input; past its end every read gives zeros.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    /// Up to `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start + n.max(end - start);
        &self.data[start..end]
    }
    /// An f32 that is usually interesting for hyper-parameters.
    pub fn f32(&mut self) -> f32 {
        const V: [f32; 20] = [
            1e-3,
            0.9,
            0.999,
            1e-8,
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            2.0,
            1e30,
            -1e-3,
            0.01,
            0.1,
        ];
        let b = self.u8();
        if b >= 240 {
            f32::from_bits(self.u32())
        } else {
            V[b as usize % V.len()]
        }
    }
    /// A small count or index, sometimes a huge one.
    pub fn small_usize(&mut self) -> usize {
        const HUGE: [usize; 8] = [
            usize::MAX,
            1 << 32,
            1 << 31,
            u32::MAX as usize,
            64,
            1000,
            usize::MAX / 4 + 1,
            isize::MAX as usize,
        ];
        let b = self.u8();
        if b >= 240 {
            HUGE[b as usize % HUGE.len()]
        } else {
            b as usize % 8
        }
    }
    pub fn axis(&mut self) -> i32 {
        const ODD: [i32; 4] = [i32::MIN, i32::MAX, 6, -7];
        let b = self.u8();
        if b >= 240 {
            ODD[b as usize % 4]
        } else {
            (b % 16) as i32 - 8
        }
    }
}

/// Which context pointer a call gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A live context of the harness (0 or 1).
    Live(usize),
    Null,
    /// A freed or forged pointer: must be refused with INVALID_CONTEXT.
    Invalid(usize),
}

/// What the harness knows before a call.
struct Pre {
    live: Option<usize>,
    stats: MemoryStats,
    /// Some handle argument is certainly invalid for the target context.
    bad_handle: bool,
}

const SENTINEL: ag_tensor = ag_tensor {
    index: 0xA5A5_A5A5,
    context: 0x5A5A_5A5A,
    generation: 0xDEAD_BEEF_DEAD_BEEF,
};
const FILL: f32 = -1234.5;

type Unary = extern "C" fn(*mut ag_context, ag_tensor, *mut ag_tensor) -> ag_status;
type Binary = extern "C" fn(*mut ag_context, ag_tensor, ag_tensor, *mut ag_tensor) -> ag_status;

const UNARY: [(&str, Unary); 9] = [
    ("ag_neg", ag_neg),
    ("ag_exp", ag_exp),
    ("ag_log", ag_log),
    ("ag_tanh", ag_tanh),
    ("ag_relu", ag_relu),
    ("ag_sigmoid", ag_sigmoid),
    ("ag_gelu", ag_gelu),
    ("ag_sum", ag_sum),
    ("ag_mean", ag_mean),
];
const BINARY: [(&str, Binary); 4] = [
    ("ag_add", ag_add),
    ("ag_sub", ag_sub),
    ("ag_mul", ag_mul),
    ("ag_div", ag_div),
];

static RUN: AtomicU64 = AtomicU64::new(0);

/// AG_FUZZ_TRACE=1 prints every call and its status (to see what an input
/// does).
fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("AG_FUZZ_TRACE").is_some())
}

/// State of one `ffi_ops` run: two contexts, remembered handles, the
/// expected parameter values of context 0.
pub struct FfiOps<'a> {
    input: Bytes<'a>,
    ctx: [*mut ag_context; 2],
    ids: [u32; 2],
    /// Addresses of contexts freed during the run, and forged ones.
    invalid: Vec<usize>,
    pool: Vec<ag_tensor>,
    params0: Vec<(ag_tensor, usize)>,
    expected0: Vec<u32>,
    dir: PathBuf,
    /// Calls made (for statistics).
    pub calls: u64,
    /// Calls that returned OK.
    pub ok: u64,
}

/// Runs one `ffi_ops` input. Panics on any broken guarantee.
pub fn run_ffi_ops(data: &[u8]) -> (u64, u64) {
    let mut h = FfiOps::new(data);
    h.run();
    h.finish();
    (h.calls, h.ok)
}

fn new_context() -> (*mut ag_context, u32) {
    let mut p: *mut ag_context = null_mut();
    assert_eq!(ag_context_new(&mut p), AG_STATUS_OK);
    assert!(!p.is_null());
    // Learn the context id from a probe handle, then end the iteration.
    let mut t = SENTINEL;
    let shape = [1usize];
    let v = [0.0f32];
    assert_eq!(
        ag_tensor_new(p, shape.as_ptr(), 1, v.as_ptr(), &mut t),
        AG_STATUS_OK
    );
    assert_eq!(ag_reset(p), AG_STATUS_OK);
    assert_eq!(ag_set_arena_limit(p, ARENA_CAP), AG_STATUS_OK);
    (p, t.context)
}

impl<'a> FfiOps<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        let (c0, i0) = new_context();
        let (c1, i1) = new_context();
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("ag_fuzz_{}_{run}", std::process::id()));
        FfiOps {
            input: Bytes::new(data),
            ctx: [c0, c1],
            ids: [i0, i1],
            // `ag_context *` values are tokens the library looks up, never
            // dereferences; tokens count up from 1, so these are never live.
            invalid: vec![0xd_eadb_eef0, usize::MAX & !7, 1 << 62],
            pool: Vec::new(),
            params0: Vec::new(),
            expected0: Vec::new(),
            dir,
            calls: 0,
            ok: 0,
        }
    }

    // ---- choosing arguments ----------------------------------------------

    fn target(&mut self) -> Target {
        let b = self.input.u8();
        let t = match b {
            0..=199 => Target::Live(0),
            200..=239 => Target::Live(1),
            240..=247 => Target::Null,
            _ => Target::Invalid(self.invalid[b as usize % self.invalid.len()]),
        };
        self.resolve_target(t)
    }

    /// Maps a freed context slot, or an address reused by a live context,
    /// onto what the library will see.
    fn resolve_target(&self, t: Target) -> Target {
        match t {
            Target::Live(i) if self.ctx[i].is_null() => Target::Invalid(self.invalid[0]),
            Target::Invalid(a) => match self.ctx.iter().position(|&c| c as usize == a) {
                Some(i) if a != 0 => Target::Live(i),
                _ => t,
            },
            _ => t,
        }
    }

    fn ptr(&self, t: Target) -> *mut ag_context {
        match t {
            Target::Live(i) => self.ctx[i],
            Target::Null => null_mut(),
            Target::Invalid(a) => a as *mut ag_context,
        }
    }

    fn stats(&self, i: usize) -> MemoryStats {
        let mut s = MemoryStats::default();
        assert_eq!(ag_memory_stats(self.ctx[i], &mut s), AG_STATUS_OK);
        s
    }

    fn handle(&mut self) -> ag_tensor {
        let b = self.input.u8();
        let n = self.pool.len();
        if n > 0 && b < 224 {
            return self.pool[n - 1 - (b as usize % n)];
        }
        if n > 0 && b < 240 {
            let mut t = self.pool[n - 1 - (b as usize % n)];
            match b % 5 {
                0 => t.generation = t.generation.wrapping_add(1),
                1 => t.generation = t.generation.wrapping_sub(1),
                2 => t.index = t.index.wrapping_add(1),
                3 => t.context = t.context.wrapping_add(1),
                _ => t.generation = 0,
            }
            return t;
        }
        let sel = self.input.u8();
        let context = match sel % 4 {
            0 => self.ids[0],
            1 => self.ids[1],
            2 => 0,
            _ => self.input.u32(),
        };
        let generation = match (sel >> 2) % 4 {
            0 => 0,
            1 => self.input.u8() as u64,
            2 => u64::MAX,
            _ => self.input.u64(),
        };
        let index = match (sel >> 4) % 3 {
            0 => self.input.u8() as u32,
            1 => u32::MAX,
            _ => self.input.u32(),
        };
        ag_tensor {
            index,
            context,
            generation,
        }
    }

    /// A shape: `ndim` (possibly invalid: 0 or 7) and dimensions (possibly
    /// zero or huge). Returns (dims buffer, ndim, numel or None if it
    /// overflows or exceeds what the harness may allocate).
    fn shape(&mut self) -> ([usize; 8], usize) {
        let mut dims = [1usize; 8];
        let b = self.input.u8();
        // Often copy the shape of a remembered tensor (so ops can match).
        if b < 96 && !self.pool.is_empty() {
            let t = self.handle();
            let mut nd = 0usize;
            let mut s = [0usize; 6];
            if ag_tensor_shape(self.ctx[0], t, s.as_mut_ptr(), &mut nd) == AG_STATUS_OK {
                dims[..nd].copy_from_slice(&s[..nd]);
                let m = self.input.u8();
                match m % 6 {
                    0 if nd >= 2 => dims.swap(nd - 1, nd - 2),
                    1 if nd < 6 => {
                        dims.copy_within(0..nd, 1);
                        dims[0] = 1 + (m as usize >> 4);
                        nd += 1;
                    }
                    2 if nd < 6 => {
                        dims[nd] = 1 + (m as usize >> 4);
                        nd += 1;
                    }
                    3 => dims[(m as usize >> 3) % nd] = 1,
                    _ => {}
                }
                self.clamp(&mut dims, nd);
                return (dims, nd);
            }
        }
        let nd = match b % 8 {
            0 => 0,
            7 => 7,
            n => n as usize,
        };
        const HUGE: [usize; 6] = [1 << 16, 1 << 31, 1 << 32, usize::MAX, 3 << 30, 1 << 62];
        for d in dims.iter_mut().take(nd.min(8)) {
            let v = self.input.u8();
            *d = match v >> 5 {
                0..=4 => (v & 7) as usize + 1,
                5 => (v & 31) as usize + 1,
                6 => 0,
                _ => HUGE[(v & 31) as usize % HUGE.len()],
            };
        }
        self.clamp(&mut dims, nd);
        (dims, nd)
    }

    /// Shrinks a shape whose element count is allocatable but above
    /// MAX_NUMEL; shapes the library must refuse (too many elements, zero
    /// dims, bad rank) are kept as they are.
    fn clamp(&self, dims: &mut [usize; 8], nd: usize) {
        if !(1..=6).contains(&nd) || dims[..nd].contains(&0) {
            return;
        }
        let n = dims[..nd].iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match n {
            Some(n) if n <= MAX_NUMEL => {}
            Some(n) if n > 1 << 31 => {}
            None => {}
            Some(_) => {
                for d in dims[..nd].iter_mut() {
                    *d = (*d).min(8);
                }
                let mut i = 0;
                while dims[..nd].iter().product::<usize>() > MAX_NUMEL {
                    dims[i] = 1;
                    i += 1;
                }
            }
        }
    }

    fn numel_of(dims: &[usize]) -> Option<usize> {
        if dims.is_empty() || dims.len() > 6 || dims.contains(&0) {
            return None;
        }
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= MAX_NUMEL)
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        let mode = self.input.u8();
        let k = self.input.u8() as f32;
        (0..n)
            .map(|i| match mode % 6 {
                0 => 0.0,
                1 => 1.0,
                2 => (i as f32 * 0.37 + k).sin(),
                3 => i as f32 - k,
                4 if i == k as usize % n.max(1) => {
                    [f32::NAN, f32::INFINITY, -0.0, 1e38][mode as usize / 64]
                }
                4 => 0.25,
                _ => ((i * 7 + k as usize) % 13) as f32 / 13.0 - 0.5,
            })
            .collect()
    }

    fn ids(&mut self) -> ([i32; MAX_IDS], usize, bool) {
        let mut ids = [0i32; MAX_IDS];
        let n = self.input.u8() as usize % (MAX_IDS + 1);
        let null = self.input.u8() >= 248;
        let mode = self.input.u8();
        for (i, v) in ids.iter_mut().enumerate().take(n) {
            *v = match mode % 4 {
                0 | 1 => (i % (1 + mode as usize / 8)) as i32,
                2 => self.input.u8() as i32 % 20,
                _ => [-1, i32::MIN, i32::MAX, 1 << 20, 0, 3, 7, 100][self.input.u8() as usize % 8],
            };
        }
        (ids, n, null)
    }

    // ---- checking a call ---------------------------------------------------

    fn pre(&self, t: Target, handles: &[ag_tensor]) -> Pre {
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
                        || h.index as u64 >= s.live_tensors))
        });
        Pre {
            live: Some(i),
            stats: s,
            bad_handle: bad,
        }
    }

    /// The checks every call gets.
    fn post(&mut self, func: &str, t: Target, pre: &Pre, st: ag_status) {
        self.calls += 1;
        if trace() {
            eprintln!("{func} {t:?} -> {}", status_name(st));
        }
        if st == AG_STATUS_OK {
            self.ok += 1;
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
    fn op(
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

    fn remember(&mut self, t: ag_tensor) {
        if self.pool.len() < POOL {
            self.pool.push(t);
        } else {
            let i = self.calls as usize % POOL;
            self.pool.remove(i);
            self.pool.push(t);
        }
    }

    /// Parameter values of context 0, bit for bit.
    fn snapshot(&self) -> Vec<u32> {
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

    fn grads(&self) -> Vec<u32> {
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

    fn verify_params(&self, why: &str) {
        assert!(
            self.snapshot() == self.expected0,
            "parameters of context 0 changed: {why}"
        );
    }

    /// Around a call that may change parameters: they must be as expected
    /// before it, unchanged if it fails, and are re-read if it succeeds.
    fn param_event(&mut self, t: Target, func: &str, st: ag_status) {
        if t != Target::Live(0) {
            return;
        }
        if st == AG_STATUS_OK {
            self.expected0 = self.snapshot();
        } else {
            self.verify_params(&format!("failed {func} ({})", status_name(st)));
        }
    }

    // ---- the calls -------------------------------------------------------

    pub fn run(&mut self) {
        let mut n = 0;
        while !self.input.done() && n < MAX_CALLS {
            n += 1;
            let op = self.input.u8();
            match op % 32 {
                0 => self.param_new(),
                1 | 2 => self.tensor_new(),
                3 => {
                    let t = self.target();
                    let (name, f) = UNARY[self.input.u8() as usize % UNARY.len()];
                    let x = self.handle();
                    self.op(name, t, &[x], |c, o| f(c, x, o));
                }
                4 | 5 => {
                    let t = self.target();
                    let k = self.input.u8() as usize % (BINARY.len() + 1);
                    let a = self.handle();
                    let b = self.handle();
                    if k == BINARY.len() {
                        let w = self.handle();
                        self.op("ag_layernorm", t, &[a, b, w], |c, o| {
                            ag_layernorm(c, a, b, w, o)
                        });
                    } else {
                        let (name, f) = BINARY[k];
                        self.op(name, t, &[a, b], |c, o| f(c, a, b, o));
                    }
                }
                6 => {
                    let t = self.target();
                    let x = self.handle();
                    let s = self.input.f32();
                    self.op("ag_scale", t, &[x], |c, o| ag_scale(c, x, s, o));
                }
                7 => {
                    let t = self.target();
                    let x = self.handle();
                    let axis = self.input.axis();
                    let keep = self.input.bool();
                    if self.input.bool() {
                        self.op("ag_sum_axis", t, &[x], |c, o| {
                            ag_sum_axis(c, x, axis, keep, o)
                        });
                    } else {
                        self.op("ag_mean_axis", t, &[x], |c, o| {
                            ag_mean_axis(c, x, axis, keep, o)
                        });
                    }
                }
                8 => {
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
                9 => {
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
                10 => {
                    let t = self.target();
                    let x = self.handle();
                    let a = self.input.small_usize();
                    let b = self.input.small_usize();
                    self.op("ag_transpose", t, &[x], |c, o| ag_transpose(c, x, a, b, o));
                }
                11 | 12 => {
                    let t = self.target();
                    let a = self.handle();
                    let b = self.handle();
                    let fl = self.input.u8();
                    let (ta, tb) = (fl & 1 == 1, fl & 2 == 2);
                    if fl & 4 == 0 {
                        self.op("ag_matmul", t, &[a, b], |c, o| {
                            ag_matmul(c, a, b, ta, tb, o)
                        });
                    } else {
                        self.op("ag_bmm", t, &[a, b], |c, o| ag_bmm(c, a, b, ta, tb, o));
                    }
                }
                13 => {
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
                14 => {
                    let t = self.target();
                    let w = self.handle();
                    let (ids, n, null_ids) = self.ids();
                    let p = if null_ids { null() } else { ids.as_ptr() };
                    self.op("ag_embedding", t, &[w], |c, o| ag_embedding(c, w, p, n, o));
                }
                15 => {
                    let t = self.target();
                    let x = self.handle();
                    let (ids, n, null_ids) = self.ids();
                    let p = if null_ids { null() } else { ids.as_ptr() };
                    self.op("ag_cross_entropy", t, &[x], |c, o| {
                        ag_cross_entropy(c, x, p, n, o)
                    });
                }
                16 => {
                    let t = self.target();
                    let x = self.handle();
                    let causal = self.input.bool();
                    let s = self.input.f32();
                    self.op("ag_softmax", t, &[x], |c, o| ag_softmax(c, x, causal, s, o));
                }
                17 => {
                    let t = self.target();
                    let x = self.handle();
                    let nh = self.input.small_usize();
                    self.op("ag_attention", t, &[x], |c, o| ag_attention(c, x, nh, o));
                }
                18 => self.backward(),
                19 | 20 => self.simple(),
                21 => self.optimizer_new(),
                22 => self.optimizer_step(),
                23 => self.clip(),
                24 => self.arena_limit(),
                25 => self.fail_allocation(),
                26 => self.read(),
                27 => self.param_write(),
                28 => self.load_bytes(),
                29 => self.save_load(),
                30 => self.contexts(),
                _ => self.reset_only(),
            }
        }
    }

    fn param_new(&mut self) {
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

    fn tensor_new(&mut self) {
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

    fn backward(&mut self) {
        let t = self.target();
        let x = self.handle();
        let pre = self.pre(t, &[x]);
        let st = ag_backward(self.ptr(t), x);
        self.post("ag_backward", t, &pre, st);
    }

    /// Calls that must succeed on a live context.
    fn simple(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let k = self.input.u8();
        let (func, st) = match k % 4 {
            0 => ("ag_reset", ag_reset(self.ptr(t))),
            1 => ("ag_zero_grad", ag_zero_grad(self.ptr(t))),
            2 => (
                "ag_set_grad_enabled",
                ag_set_grad_enabled(self.ptr(t), k & 4 == 0),
            ),
            _ => {
                let mut s = MemoryStats::default();
                let p: *mut MemoryStats = if k & 4 == 0 { &mut s } else { null_mut() };
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
                ("ag_memory_stats", st)
            }
        };
        self.post(func, t, &pre, st);
        if pre.live.is_some() {
            assert_eq!(
                st,
                AG_STATUS_OK,
                "{func} must succeed: {}",
                last_error(self.ptr(t))
            );
        }
        if func == "ag_zero_grad" && t == Target::Live(0) {
            assert!(
                self.grads().iter().all(|&g| g == 0),
                "zero_grad left a gradient"
            );
        }
    }

    fn reset_only(&mut self) {
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

    fn optimizer_new(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        let k = self.input.u8();
        let (lr, a, b, eps, wd) = (
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
            self.input.f32(),
        );
        let (func, st) = if k & 1 == 0 {
            ("ag_optimizer_sgd", ag_optimizer_sgd(self.ptr(t), lr, a, wd))
        } else {
            (
                "ag_optimizer_adamw",
                ag_optimizer_adamw(self.ptr(t), lr, a, b, eps, wd),
            )
        };
        self.post(func, t, &pre, st);
        if st == AG_STATUS_OK {
            assert!(lr.is_finite() && lr > 0.0, "{func} accepted lr {lr}");
            assert!(
                (0.0..1.0).contains(&a),
                "{func} accepted beta1/momentum {a}"
            );
            assert!(
                wd.is_finite() && wd >= 0.0,
                "{func} accepted weight decay {wd}"
            );
            if k & 1 == 1 {
                assert!((0.0..1.0).contains(&b) && eps.is_finite() && eps > 0.0);
            }
        }
    }

    fn optimizer_step(&mut self) {
        let t = self.target();
        let pre = self.pre(t, &[]);
        if self.input.bool() {
            let lr = self.input.f32();
            let st = ag_optimizer_set_lr(self.ptr(t), lr);
            self.post("ag_optimizer_set_lr", t, &pre, st);
            if st == AG_STATUS_OK {
                assert!(lr.is_finite() && lr > 0.0, "set_lr accepted {lr}");
            }
            return;
        }
        if t == Target::Live(0) {
            self.verify_params("before ag_optimizer_step");
        }
        let st = ag_optimizer_step(self.ptr(t));
        self.post("ag_optimizer_step", t, &pre, st);
        self.param_event(t, "ag_optimizer_step", st);
    }

    fn clip(&mut self) {
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

    fn arena_limit(&mut self) {
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

    fn fail_allocation(&mut self) {
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

    fn read(&mut self) {
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
        let (func, st) = match k % 5 {
            0 => ("ag_tensor_read", ag_tensor_read(self.ptr(t), x, dst, len)),
            1 => (
                "ag_tensor_read_grad",
                ag_tensor_read_grad(self.ptr(t), x, dst, len),
            ),
            2 => {
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
            3 => {
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
            _ => {
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
        if k % 5 < 2 {
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

    fn param_write(&mut self) {
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

    fn load_bytes(&mut self) {
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

    fn save_load(&mut self) {
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
    }

    /// Context life cycle: free and re-create context 1, double free,
    /// NULLs, status strings.
    fn contexts(&mut self) {
        let k = self.input.u8();
        self.calls += 1;
        match k % 6 {
            0 => {
                if self.ctx[1].is_null() {
                    return;
                }
                let old = self.ctx[1];
                let mut p = old;
                assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
                assert!(p.is_null(), "ag_context_free did not NULL the pointer");
                self.ctx[1] = null_mut();
                self.invalid.push(old as usize);
                // Double free through a copy of the pointer.
                let mut q = old;
                assert_eq!(ag_context_free(&mut q), AG_STATUS_INVALID_CONTEXT);
                assert_eq!(q, old, "refused free changed the pointer");
            }
            1 => {
                if self.ctx[1].is_null() {
                    let (c, id) = new_context();
                    self.ctx[1] = c;
                    self.ids[1] = id;
                    self.invalid.retain(|&a| a != c as usize);
                }
            }
            2 => {
                assert_eq!(ag_context_free(null_mut()), AG_STATUS_OK);
                let mut p: *mut ag_context = null_mut();
                assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
                assert_eq!(ag_context_new(null_mut()), AG_STATUS_NULL_ARGUMENT);
            }
            3 => {
                let st = self.input.u32() as i32;
                let s = status_name(st);
                assert!(!s.is_empty());
                if !documented(st) {
                    assert_eq!(s, "unknown status");
                }
                // SAFETY: static NUL-terminated string.
                let v = unsafe { CStr::from_ptr(ag_version()) };
                assert!(!v.to_bytes().is_empty());
            }
            4 => {
                let t = self.target();
                let msg = last_error(self.ptr(t));
                if !matches!(t, Target::Live(_)) {
                    assert!(!msg.is_empty(), "no message for a dead or NULL context");
                }
            }
            _ => {
                // A forged pointer to real memory that is not a context.
                let fake = Box::new([0u64; 64]);
                let p = &*fake as *const [u64; 64] as *mut ag_context;
                assert_eq!(ag_reset(p), AG_STATUS_INVALID_CONTEXT);
                let mut q = p;
                assert_eq!(ag_context_free(&mut q), AG_STATUS_INVALID_CONTEXT);
            }
        }
    }

    /// After the input: every live context must still work (a fixed
    /// iteration gives the exact expected value), then both are freed.
    pub fn finish(&mut self) {
        self.verify_params("by the end of the input");
        for i in 0..2 {
            let c = self.ctx[i];
            if c.is_null() {
                continue;
            }
            assert_eq!(
                ag_test_fail_allocation(c, 0, false, null_mut()),
                AG_STATUS_OK
            );
            assert_eq!(ag_set_arena_limit(c, 0), AG_STATUS_OK);
            assert_eq!(ag_set_grad_enabled(c, true), AG_STATUS_OK);
            assert_eq!(ag_reset(c), AG_STATUS_OK);
            let shape = [2usize];
            let v = [1.5f32, 2.5];
            let mut x = SENTINEL;
            let st = ag_tensor_new(c, shape.as_ptr(), 1, v.as_ptr(), &mut x);
            assert_eq!(st, AG_STATUS_OK, "context {i} unusable: {}", last_error(c));
            let mut s = SENTINEL;
            assert_eq!(ag_sum(c, x, &mut s), AG_STATUS_OK, "{}", last_error(c));
            let mut out = 0.0f32;
            assert_eq!(ag_tensor_item(c, s, &mut out), AG_STATUS_OK);
            assert_eq!(out, 4.0);
            let mut p = c;
            assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
            self.ctx[i] = null_mut();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// checkpoint_load
// ---------------------------------------------------------------------------

/// Shapes of the fixed model of the `checkpoint_load` target.
pub const CKPT_SHAPES: [&[usize]; 3] = [&[4, 3], &[3], &[2, 2, 2]];
/// Capacity of the user-bytes buffer given to ag_checkpoint_load_bytes.
pub const CKPT_USER_CAP: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SeedOptimizer {
    None,
    AdamW,
    Sgd,
}

/// A small model through the C API: parameters with deterministic values,
/// an optimizer, and (with an optimizer) one training step so the moments
/// are non-zero.
pub struct Model {
    pub ctx: *mut ag_context,
    pub params: Vec<(ag_tensor, usize)>,
}

impl Model {
    pub fn new(shapes: &[&[usize]], opt: SeedOptimizer) -> Model {
        let mut ctx = null_mut();
        assert_eq!(ag_context_new(&mut ctx), AG_STATUS_OK);
        let mut params = Vec::new();
        for (k, s) in shapes.iter().enumerate() {
            let n: usize = s.iter().product();
            let init: Vec<f32> = (0..n)
                .map(|i| ((i * 5 + k * 3) % 11) as f32 * 0.1 - 0.5)
                .collect();
            let mut t = SENTINEL;
            assert_eq!(
                ag_param_new(ctx, s.as_ptr(), s.len(), init.as_ptr(), &mut t),
                AG_STATUS_OK
            );
            params.push((t, n));
        }
        let st = match opt {
            SeedOptimizer::None => AG_STATUS_OK,
            SeedOptimizer::AdamW => ag_optimizer_adamw(ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01),
            SeedOptimizer::Sgd => ag_optimizer_sgd(ctx, 1e-2, 0.9, 0.0),
        };
        assert_eq!(st, AG_STATUS_OK);
        let m = Model { ctx, params };
        if opt != SeedOptimizer::None {
            assert_eq!(m.train_step(), AG_STATUS_OK);
        }
        m
    }

    /// loss = sum over parameters of sum(p * p * c); backward; step.
    /// Returns the first failing status, or OK.
    pub fn train_step(&self) -> ag_status {
        let c = self.ctx;
        let r = ag_reset(c);
        if r != AG_STATUS_OK {
            return r;
        }
        let mut total: Option<ag_tensor> = None;
        for &(p, _) in &self.params {
            let mut sq = SENTINEL;
            let mut s = SENTINEL;
            let st = ag_mul(c, p, p, &mut sq);
            if st != AG_STATUS_OK {
                return st;
            }
            let st = ag_sum(c, sq, &mut s);
            if st != AG_STATUS_OK {
                return st;
            }
            total = Some(match total {
                None => s,
                Some(t) => {
                    let mut o = SENTINEL;
                    let st = ag_add(c, t, s, &mut o);
                    if st != AG_STATUS_OK {
                        return st;
                    }
                    o
                }
            });
        }
        let loss = total.expect("a parameter");
        let st = ag_backward(c, loss);
        if st != AG_STATUS_OK {
            return st;
        }
        let st = ag_optimizer_step(c);
        if st != AG_STATUS_OK {
            return st;
        }
        ag_zero_grad(c)
    }

    pub fn values(&self) -> Vec<u32> {
        let mut all = Vec::new();
        for &(p, n) in &self.params {
            let mut v = vec![0.0f32; n];
            assert_eq!(ag_tensor_read(self.ctx, p, v.as_mut_ptr(), n), AG_STATUS_OK);
            all.extend(v.iter().map(|x| x.to_bits()));
        }
        all
    }

    /// The checkpoint of this model through ag_checkpoint_save (to a
    /// temporary file that is removed again).
    pub fn checkpoint(&self, user: &[u8]) -> Vec<u8> {
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ag_fuzz_seed_{}_{run}.ckpt", std::process::id()));
        let p = CString::new(path.to_string_lossy().as_bytes()).unwrap();
        let st = ag_checkpoint_save(self.ctx, p.as_ptr(), user.as_ptr(), user.len());
        assert_eq!(st, AG_STATUS_OK, "{}", last_error(self.ctx));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        assert_eq!(ag_context_free(&mut self.ctx), AG_STATUS_OK);
    }
}

/// Parameters of the fixed model after creation plus one more training step
/// (the control for a refused load).
fn control_after_step() -> &'static [u32] {
    static C: OnceLock<Vec<u32>> = OnceLock::new();
    C.get_or_init(|| {
        let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
        assert_eq!(m.train_step(), AG_STATUS_OK);
        m.values()
    })
}

/// CRC-32 (IEEE, reflected, as the checkpoint format uses), bitwise.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Runs one `checkpoint_load` input twice: as it is, and with its last four
/// bytes replaced by the CRC of the rest (so mutations get past the CRC
/// check to the structural validation behind it). Returns the status of
/// the load of the unmodified bytes.
pub fn run_checkpoint_load(data: &[u8]) -> ag_status {
    let st = load_one(data);
    if data.len() >= 12 {
        let mut fixed = data.to_vec();
        let body = fixed.len() - 4;
        let crc = crc32(&fixed[..body]);
        fixed[body..].copy_from_slice(&crc.to_le_bytes());
        if fixed != data {
            load_one(&fixed);
        }
    }
    st
}

fn load_one(data: &[u8]) -> ag_status {
    let control = control_after_step();
    let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let before = m.values();
    let mut user = [0xEEu8; CKPT_USER_CAP + 8];
    let mut ulen = 999usize;
    let st = ag_checkpoint_load_bytes(
        m.ctx,
        data.as_ptr(),
        data.len(),
        user.as_mut_ptr(),
        CKPT_USER_CAP,
        &mut ulen,
    );
    assert!(
        matches!(
            st,
            AG_STATUS_OK
                | AG_STATUS_CHECKPOINT_CORRUPT
                | AG_STATUS_CHECKPOINT_MISMATCH
                | AG_STATUS_INVALID_ARGUMENT
        ),
        "ag_checkpoint_load_bytes returned {} ({st}): {}",
        status_name(st),
        last_error(m.ctx)
    );
    assert!(
        user[CKPT_USER_CAP..].iter().all(|&b| b == 0xEE),
        "user bytes written past the capacity"
    );
    if st != AG_STATUS_OK {
        assert!(!last_error(m.ctx).is_empty(), "failure without a message");
        assert_eq!(ulen, 999, "user_len written on failure");
        assert!(
            user.iter().all(|&b| b == 0xEE),
            "user bytes written on failure"
        );
        assert!(
            m.values() == before,
            "refused checkpoint changed the parameters"
        );
        // Optimizer state and step count untouched too: the next step gives
        // exactly the control's parameters.
        assert_eq!(m.train_step(), AG_STATUS_OK, "{}", last_error(m.ctx));
        assert!(
            m.values() == control,
            "refused checkpoint changed the optimizer state"
        );
        return st;
    }
    assert!(ulen <= CKPT_USER_CAP);
    assert!(data.len() >= 4 + ulen);
    assert_eq!(&user[..ulen], &data[data.len() - 4 - ulen..data.len() - 4]);
    let loaded = m.values();
    // Loading the same bytes again is idempotent.
    let mut ulen2 = 0usize;
    let st2 = ag_checkpoint_load_bytes(
        m.ctx,
        data.as_ptr(),
        data.len(),
        user.as_mut_ptr(),
        CKPT_USER_CAP,
        &mut ulen2,
    );
    assert_eq!(st2, AG_STATUS_OK);
    assert_eq!(ulen2, ulen);
    assert!(m.values() == loaded);
    // The context keeps working (the loaded values may be non-finite).
    let st3 = m.train_step();
    assert!(
        matches!(st3, AG_STATUS_OK | AG_STATUS_NON_FINITE),
        "training after a load: {} {}",
        status_name(st3),
        last_error(m.ctx)
    );
    st
}

/// Seed checkpoints for the `checkpoint_load` corpus: (file name, bytes).
pub fn checkpoint_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let adamw = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let sgd = Model::new(&CKPT_SHAPES, SeedOptimizer::Sgd);
    let plain = Model::new(&CKPT_SHAPES, SeedOptimizer::None);
    let other = Model::new(&[&[4, 3], &[4], &[2, 2, 2]], SeedOptimizer::AdamW);
    vec![
        ("seed_adamw_user", adamw.checkpoint(b"user-16-bytes!!!")),
        ("seed_adamw", adamw.checkpoint(&[])),
        ("seed_adamw_big_user", adamw.checkpoint(&[7u8; 40])),
        ("seed_sgd", sgd.checkpoint(b"sgd")),
        ("seed_no_optimizer", plain.checkpoint(b"p")),
        ("seed_other_shape", other.checkpoint(&[])),
    ]
}

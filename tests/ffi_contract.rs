//! The C API contract, from Rust calling the `extern "C"` functions: NULL
//! arguments, out-params left
//! untouched on failure, stale / foreign / forged handles, free(NULL),
//! double free and use after free, panic then poisoning, concurrent use,
//! and a table that provokes every AG_STATUS_* of the header.
//!
//! After an error the context must still work: the next valid iterations
//! give losses bit-identical to a control context that never made the bad
//! call ([`assert_still_trains`]).

mod common;

use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use common::ffi::{last_error, ok, status_name};
use common::null_context;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString, c_char};
use std::ptr::{null, null_mut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

// ---- helpers ----------------------------------------------------------------------

/// What an out-param holds before a call that must not write it.
const SENTINEL: ag_tensor = ag_tensor {
    index: 0xA5A5_A5A5,
    context: 0x5A5A_5A5A,
    generation: 0xDEAD_BEEF_F00D_CAFE,
};

fn new_ctx() -> *mut ag_context {
    let mut c = null_mut();
    ok(ag_context_new(&mut c), "ag_context_new");
    assert!(!c.is_null());
    c
}

fn stats(ctx: *mut ag_context) -> MemoryStats {
    let mut s = MemoryStats::default();
    ok(ag_memory_stats(ctx, &mut s), "ag_memory_stats");
    s
}

/// Keeps the expected panics of `ag_test_panic` out of the test output;
/// every other panic still reaches the previous hook.
fn quiet_deliberate_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<&str>().copied().unwrap_or("");
            if !msg.contains("deliberate panic from ag_test_panic") {
                prev(info)
            }
        }));
    });
}

/// A context pointer that may cross threads (the C API's own busy flag is
/// what this file tests).
#[derive(Clone, Copy)]
struct SendCtx(*mut ag_context);
// SAFETY: the library guards every call with the context's busy flag; the
// tests only ever pass the pointer to the C API.
unsafe impl Send for SendCtx {}

// ---- the fixture: a small MLP trained through the C API ----------------------------

#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    d: usize,
    h: usize,
    c: usize,
}

const SMALL: Dims = Dims {
    b: 6,
    d: 4,
    h: 8,
    c: 3,
};

/// A context with the parameters of a 2-layer MLP; the AdamW optimizer is
/// made on the first iteration (or when a case asks for it), so cases that
/// need a context without one (parameter creation) can run first.
struct Fx {
    ctx: *mut ag_context,
    dims: Dims,
    w1: ag_tensor,
    b1: ag_tensor,
    w2: ag_tensor,
    b2: ag_tensor,
    has_opt: bool,
    iters: usize,
}

fn init_values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5) * 0.6)
        .collect()
}

fn param(ctx: *mut ag_context, shape: &[usize], init: &[f32]) -> ag_tensor {
    let mut t = SENTINEL;
    ok(
        ag_param_new(ctx, shape.as_ptr(), shape.len(), init.as_ptr(), &mut t),
        "ag_param_new",
    );
    t
}

impl Fx {
    fn new() -> Fx {
        Fx::with(SMALL, 1)
    }

    fn with(dims: Dims, seed: usize) -> Fx {
        let ctx = new_ctx();
        let Dims { d, h, c, .. } = dims;
        Fx {
            w1: param(ctx, &[d, h], &init_values(d * h, seed)),
            b1: param(ctx, &[h], &init_values(h, seed + 1)),
            w2: param(ctx, &[h, c], &init_values(h * c, seed + 2)),
            b2: param(ctx, &[c], &init_values(c, seed + 3)),
            ctx,
            dims,
            has_opt: false,
            iters: 0,
        }
    }

    fn ensure_optimizer(&mut self) {
        if !self.has_opt {
            ok(
                ag_optimizer_adamw(self.ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01),
                "ag_optimizer_adamw",
            );
            self.has_opt = true;
        }
    }

    /// The batch of iteration k: a function of k only.
    fn batch(&self, k: usize) -> (Vec<f32>, Vec<i32>) {
        let Dims { b, d, c, .. } = self.dims;
        let x = (0..b * d)
            .map(|i| ((i * 7 + k * 3) % 11) as f32 / 5.0 - 1.0)
            .collect();
        let y = (0..b).map(|i| ((i + k) % c) as i32).collect();
        (x, y)
    }

    /// One valid training iteration; returns the loss handle and value.
    fn iterate(&mut self) -> (ag_tensor, f32) {
        self.ensure_optimizer();
        let (x, y) = self.batch(self.iters);
        self.iters += 1;
        let c = self.ctx;
        let (mut xt, mut h, mut a, mut lg, mut l) =
            (SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL);
        ok(ag_reset(c), "ag_reset");
        let shape = [self.dims.b, self.dims.d];
        ok(
            ag_tensor_new(c, shape.as_ptr(), 2, x.as_ptr(), &mut xt),
            "ag_tensor_new",
        );
        ok(ag_linear(c, xt, self.w1, &self.b1, &mut h), "ag_linear");
        ok(ag_tanh(c, h, &mut a), "ag_tanh");
        ok(ag_linear(c, a, self.w2, &self.b2, &mut lg), "ag_linear");
        ok(
            ag_cross_entropy(c, lg, y.as_ptr(), y.len(), &mut l),
            "ag_cross_entropy",
        );
        let mut v = f32::NAN;
        ok(ag_tensor_item(c, l, &mut v), "ag_tensor_item");
        ok(ag_backward(c, l), "ag_backward");
        ok(ag_clip_grad_norm(c, 5.0, null_mut()), "ag_clip_grad_norm");
        ok(ag_optimizer_step(c), "ag_optimizer_step");
        ok(ag_zero_grad(c), "ag_zero_grad");
        (l, v)
    }

    /// A fresh activation of the current iteration (after an ag_reset).
    fn activation(&self) -> ag_tensor {
        let mut t = SENTINEL;
        ok(ag_tanh(self.ctx, self.w1, &mut t), "ag_tanh");
        t
    }

    fn params_bits(&self) -> Vec<u32> {
        let mut all = Vec::new();
        for p in [self.w1, self.b1, self.w2, self.b2] {
            let mut n = 0usize;
            ok(ag_tensor_numel(self.ctx, p, &mut n), "ag_tensor_numel");
            let mut v = vec![0.0f32; n];
            ok(
                ag_tensor_read(self.ctx, p, v.as_mut_ptr(), n),
                "ag_tensor_read",
            );
            all.extend(v.iter().map(|x| x.to_bits()));
        }
        all
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        let st = ag_context_free(&mut self.ctx);
        if !std::thread::panicking() {
            assert_eq!(st, AG_STATUS_OK, "ag_context_free of the fixture");
        }
    }
}

/// The context still works after whatever `fx` went through: replays fx's
/// valid iterations on a control context that never made the bad calls,
/// then runs 2 more iterations on both; losses and parameters must be
/// bit-identical.
fn assert_still_trains(fx: &mut Fx, what: &str) {
    let mut control = Fx::with(fx.dims, 1);
    for _ in 0..fx.iters {
        control.iterate();
    }
    for i in 0..2 {
        let (_, a) = fx.iterate();
        let (_, b) = control.iterate();
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: loss of the valid iteration {i} after the error differs from the control: {a} vs {b}"
        );
    }
    assert!(
        fx.params_bits() == control.params_bits(),
        "{what}: parameters differ from the control"
    );
}

// ---- NULL arguments -------------------------------------------------------------------

/// Every exported function with a NULL context: NULL_ARGUMENT, and no
/// out-param written (the table is in tests/common/null_context.rs;
/// tests/header_tables.rs checks it lists every function of the header).
#[test]
fn null_context_for_every_function() {
    let fx = Fx::new();
    for (name, st) in null_context::calls_with_a_null_context(fx.w1, fx.w2) {
        assert_eq!(st, AG_STATUS_NULL_ARGUMENT, "{name}(NULL, ...)");
    }
    null_context::check_functions_without_a_null_context_status();
}

/// NULL out-pointers and NULL data pointers on a live context: NULL_ARGUMENT
/// naming the argument, nothing computed or allocated, context still fine.
#[test]
fn null_out_and_data_pointers() {
    let mut fx = Fx::new();
    fx.iterate();
    let c = fx.ctx;
    ok(ag_reset(c), "ag_reset");
    let a = fx.activation();
    let (p, q) = (fx.w1, fx.w2);
    let before = stats(c);
    let shape = [2usize, 2];
    let data = [1.0f32; 4];
    let ids = [0i32; 2];
    let mut dims = [0usize; AG_MAX_DIMS];
    let mut nd = 0usize;
    let mut ulen = 0usize;
    let mut user = [0u8; 4];
    let path = CString::new("/tmp/x.ckpt").unwrap();
    let n_t = null_mut::<ag_tensor>();
    let mut spare = SENTINEL;
    let cases: Vec<(&str, &str, ag_status)> = vec![
        ("ag_memory_stats", "out", ag_memory_stats(c, null_mut())),
        ("ag_runtime_info", "out", ag_runtime_info(c, null_mut())),
        (
            "ag_param_new",
            "out",
            ag_param_new(c, shape.as_ptr(), 2, data.as_ptr(), n_t),
        ),
        (
            "ag_param_new",
            "shape",
            ag_param_new(c, null(), 2, data.as_ptr(), &mut spare),
        ),
        ("ag_param_write", "data", ag_param_write(c, p, null(), 32)),
        (
            "ag_tensor_new",
            "out",
            ag_tensor_new(c, shape.as_ptr(), 2, data.as_ptr(), n_t),
        ),
        (
            "ag_tensor_new",
            "data",
            ag_tensor_new(c, shape.as_ptr(), 2, null(), &mut spare),
        ),
        (
            "ag_tensor_shape",
            "shape",
            ag_tensor_shape(c, p, null_mut(), &mut nd),
        ),
        (
            "ag_tensor_shape",
            "ndim",
            ag_tensor_shape(c, p, dims.as_mut_ptr(), null_mut()),
        ),
        ("ag_tensor_numel", "out", ag_tensor_numel(c, p, null_mut())),
        (
            "ag_tensor_read",
            "dst",
            ag_tensor_read(c, p, null_mut(), 32),
        ),
        (
            "ag_tensor_read_grad",
            "dst",
            ag_tensor_read_grad(c, p, null_mut(), 32),
        ),
        ("ag_tensor_item", "out", ag_tensor_item(c, p, null_mut())),
        (
            "ag_checkpoint_save",
            "path",
            ag_checkpoint_save(c, null(), null(), 0),
        ),
        (
            "ag_checkpoint_save",
            "user",
            ag_checkpoint_save(c, path.as_ptr(), null(), 3),
        ),
        (
            "ag_checkpoint_load",
            "user_len",
            ag_checkpoint_load(c, path.as_ptr(), user.as_mut_ptr(), 4, null_mut()),
        ),
        (
            "ag_checkpoint_load_bytes",
            "data",
            ag_checkpoint_load_bytes(c, null(), 10, user.as_mut_ptr(), 4, &mut ulen),
        ),
        ("ag_add", "out", ag_add(c, a, a, n_t)),
        ("ag_tanh", "out", ag_tanh(c, a, n_t)),
        ("ag_sum_axis", "out", ag_sum_axis(c, a, 0, false, n_t)),
        (
            "ag_reshape",
            "out",
            ag_reshape(c, a, [32usize].as_ptr(), 1, n_t),
        ),
        (
            "ag_reshape",
            "shape",
            ag_reshape(c, a, null(), 1, &mut spare),
        ),
        (
            "ag_permute",
            "perm",
            ag_permute(c, a, null(), 2, &mut spare),
        ),
        ("ag_matmul", "out", ag_matmul(c, p, q, false, false, n_t)),
        ("ag_linear", "out", ag_linear(c, a, q, null(), n_t)),
        (
            "ag_embedding",
            "ids",
            ag_embedding(c, p, null(), 2, &mut spare),
        ),
        (
            "ag_embedding",
            "out",
            ag_embedding(c, p, ids.as_ptr(), 2, n_t),
        ),
        (
            "ag_cross_entropy",
            "targets",
            ag_cross_entropy(c, a, null(), 4, &mut spare),
        ),
        ("ag_attention", "out", ag_attention(c, a, 1, n_t)),
    ];
    for (func, arg, st) in &cases {
        assert_eq!(*st, AG_STATUS_NULL_ARGUMENT, "{func} with NULL {arg}");
    }
    // The message names the argument (checked on the last failure).
    ok(
        ag_memory_stats(c, &mut MemoryStats::default()),
        "ag_memory_stats",
    );
    assert_eq!(ag_tensor_item(c, p, null_mut()), AG_STATUS_NULL_ARGUMENT);
    let msg = last_error(c);
    assert!(
        msg.contains("ag_tensor_item") && msg.contains("`out`"),
        "{msg}"
    );
    // Nothing was computed or allocated by the refused calls.
    let after = stats(c);
    assert_eq!(after.arena_used_bytes, before.arena_used_bytes);
    assert_eq!(after.live_tensors, before.live_tensors);
    assert_eq!(after.param_count, before.param_count);
    assert_eq!(after.tape_len, before.tape_len);
    // Documented optional pointers: clip's norm_out and linear's bias.
    let mut o = SENTINEL;
    ok(ag_linear(c, a, q, null(), &mut o), "ag_linear without bias");
    assert_eq!(ag_clip_grad_norm(c, 1.0, null_mut()), AG_STATUS_OK);
    assert_still_trains(&mut fx, "NULL pointers");
}

// ---- out-params untouched on failure ---------------------------------------------------

#[test]
fn out_params_untouched_on_failure() {
    let mut fx = Fx::new();
    let (old, _) = fx.iterate();
    let c = fx.ctx;
    ok(ag_reset(c), "ag_reset");
    let a = fx.activation(); // [4, 8]
    let mut o = SENTINEL;
    // Stale input.
    assert_eq!(ag_tanh(c, old, &mut o), AG_STATUS_STALE_HANDLE);
    assert_eq!(o, SENTINEL);
    // Shape mismatch.
    assert_eq!(
        ag_matmul(c, a, a, false, false, &mut o),
        AG_STATUS_SHAPE_MISMATCH
    );
    assert_eq!(o, SENTINEL);
    let msg = last_error(c);
    assert!(
        msg.contains("[4,8] x [4,8]"),
        "the message names the shapes: {msg}"
    );
    // Shape and numel of a stale handle.
    let mut dims = [7usize; AG_MAX_DIMS];
    let mut nd = 7usize;
    assert_eq!(
        ag_tensor_shape(c, old, dims.as_mut_ptr(), &mut nd),
        AG_STATUS_STALE_HANDLE
    );
    assert_eq!((dims, nd), ([7; AG_MAX_DIMS], 7));
    let mut numel = 7usize;
    assert_eq!(ag_tensor_numel(c, old, &mut numel), AG_STATUS_STALE_HANDLE);
    assert_eq!(numel, 7);
    // A read with the wrong length.
    let mut buf = [7.0f32; 31];
    assert_eq!(
        ag_tensor_read(c, a, buf.as_mut_ptr(), 31),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(buf.iter().all(|&v| v == 7.0));
    // The gradient of an activation that took part in no backward.
    let mut g = [7.0f32; 32];
    assert_eq!(
        ag_tensor_read_grad(c, a, g.as_mut_ptr(), 32),
        AG_STATUS_SEQUENCE
    );
    assert!(g.iter().all(|&v| v == 7.0));
    // item of a non-scalar.
    let mut f = 7.0f32;
    assert_eq!(ag_tensor_item(c, a, &mut f), AG_STATUS_INVALID_ARGUMENT);
    assert_eq!(f, 7.0);
    // A parameter with a bad shape, and one after an activation (sequence).
    let mut p = SENTINEL;
    assert_eq!(
        ag_param_new(c, [2usize, 0].as_ptr(), 2, null(), &mut p),
        AG_STATUS_SHAPE_MISMATCH
    );
    assert_eq!(
        ag_param_new(c, [2usize].as_ptr(), 1, null(), &mut p),
        AG_STATUS_SEQUENCE
    );
    assert_eq!(p, SENTINEL);
    // Clip of a non-finite gradient leaves norm_out alone.
    let inf = [f32::INFINITY; 32];
    let mut t = SENTINEL;
    ok(
        ag_tensor_new(c, [4usize, 8].as_ptr(), 2, inf.as_ptr(), &mut t),
        "ag_tensor_new",
    );
    let mut m = SENTINEL;
    ok(ag_mul(c, fx.w1, t, &mut m), "ag_mul");
    let mut l = SENTINEL;
    ok(ag_sum(c, m, &mut l), "ag_sum");
    ok(ag_backward(c, l), "ag_backward");
    let mut norm = 7.0f32;
    assert_eq!(ag_clip_grad_norm(c, 1.0, &mut norm), AG_STATUS_NON_FINITE);
    assert_eq!(norm, 7.0);
    assert_eq!(ag_optimizer_step(c), AG_STATUS_NON_FINITE);
    ok(ag_zero_grad(c), "ag_zero_grad");
    // Checkpoint load of garbage: user buffer and length untouched.
    let mut user = [7u8; 8];
    let mut ulen = 7usize;
    let junk = [0u8; 64];
    assert_eq!(
        ag_checkpoint_load_bytes(
            c,
            junk.as_ptr(),
            junk.len(),
            user.as_mut_ptr(),
            8,
            &mut ulen
        ),
        AG_STATUS_CHECKPOINT_CORRUPT
    );
    assert_eq!((user, ulen), ([7; 8], 7));
    // Memory stats through a freed context.
    let mut dead = new_ctx();
    let copy = dead;
    ok(ag_context_free(&mut dead), "ag_context_free");
    let mut s = MemoryStats {
        resets: 77,
        ..Default::default()
    };
    assert_eq!(ag_memory_stats(copy, &mut s), AG_STATUS_INVALID_CONTEXT);
    assert_eq!(s.resets, 77);
    assert_still_trains(&mut fx, "out-params");
}

// ---- handles: stale, foreign, forged ---------------------------------------------------

#[test]
fn stale_handles_are_refused() {
    let mut fx = Fx::new();
    let (loss, _) = fx.iterate();
    let c = fx.ctx;
    ok(ag_reset(c), "ag_reset");
    let mut o = SENTINEL;
    let mut f = 0.0f32;
    assert_eq!(ag_tensor_item(c, loss, &mut f), AG_STATUS_STALE_HANDLE);
    assert_eq!(ag_backward(c, loss), AG_STATUS_STALE_HANDLE);
    assert_eq!(ag_add(c, fx.w1, loss, &mut o), AG_STATUS_STALE_HANDLE);
    assert_eq!(
        ag_cross_entropy(c, loss, [0i32].as_ptr(), 1, &mut o),
        AG_STATUS_STALE_HANDLE
    );
    assert_eq!(o, SENTINEL);
    assert!(last_error(c).contains("stale"), "{}", last_error(c));
    // The slot is reused by a new activation: the old handle still is stale.
    let fresh = fx.activation();
    let stale_same_slot = ag_tensor {
        generation: loss.generation,
        ..fresh
    };
    assert_eq!(ag_tanh(c, stale_same_slot, &mut o), AG_STATUS_STALE_HANDLE);
    // Parameters (generation 0) never go stale.
    ok(ag_tanh(c, fx.w1, &mut o), "parameter after reset");
    assert_still_trains(&mut fx, "stale handles");
}

#[test]
fn handles_of_another_context_are_refused() {
    let mut fx = Fx::new();
    let mut other = Fx::new();
    let (theirs, _) = other.iterate();
    let c = fx.ctx;
    let mut o = SENTINEL;
    let mut buf = [0.0f32; 32];
    assert_eq!(ag_tanh(c, other.w1, &mut o), AG_STATUS_WRONG_CONTEXT);
    assert_eq!(ag_add(c, fx.w1, other.w1, &mut o), AG_STATUS_WRONG_CONTEXT);
    assert_eq!(
        ag_tensor_read(c, other.w1, buf.as_mut_ptr(), 32),
        AG_STATUS_WRONG_CONTEXT
    );
    assert_eq!(
        ag_param_write(c, other.w1, buf.as_ptr(), 32),
        AG_STATUS_WRONG_CONTEXT
    );
    assert_eq!(ag_backward(c, theirs), AG_STATUS_WRONG_CONTEXT);
    assert_eq!(o, SENTINEL);
    assert!(last_error(c).contains("context"), "{}", last_error(c));
    assert_still_trains(&mut fx, "foreign handles");
    // The other context was not disturbed either.
    assert_still_trains(&mut other, "the other context");
}

#[test]
fn forged_handles_are_refused() {
    let mut fx = Fx::new();
    fx.iterate();
    let c = fx.ctx;
    ok(ag_reset(c), "ag_reset");
    let act = fx.activation();
    let id = fx.w1.context;
    let now = act.generation;
    let forged = [
        (
            "index 0xdeadbeef, current generation",
            ag_tensor {
                index: 0xdead_beef,
                context: id,
                generation: now,
            },
        ),
        (
            "index 0xdeadbeef, parameter generation",
            ag_tensor {
                index: 0xdead_beef,
                context: id,
                generation: 0,
            },
        ),
        (
            "generation u64::MAX",
            ag_tensor {
                generation: u64::MAX,
                ..act
            },
        ),
        (
            "generation from the future",
            ag_tensor {
                generation: now + 1,
                ..act
            },
        ),
        (
            "activation slot with parameter generation",
            ag_tensor {
                generation: 0,
                ..act
            },
        ),
        (
            "parameter slot with activation generation",
            ag_tensor {
                generation: now,
                ..fx.w1
            },
        ),
        (
            "free slot of this iteration",
            ag_tensor {
                index: act.index + 1,
                ..act
            },
        ),
        (
            "index u32::MAX",
            ag_tensor {
                index: u32::MAX,
                context: id,
                generation: now,
            },
        ),
    ];
    let mut o = SENTINEL;
    for (what, h) in forged {
        assert_eq!(ag_tanh(c, h, &mut o), AG_STATUS_INVALID_HANDLE, "{what}");
        let mut buf = [0.0f32; 32];
        assert_eq!(
            ag_tensor_read(c, h, buf.as_mut_ptr(), 32),
            AG_STATUS_INVALID_HANDLE,
            "{what}"
        );
        assert_eq!(ag_backward(c, h), AG_STATUS_INVALID_HANDLE, "{what}");
    }
    // An all-zero handle (a zero-initialised variable) carries context id 0,
    // which no context ever gets: it is malformed, not another context's
    // handle.
    let zero = ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    };
    let st = ag_tanh(c, zero, &mut o);
    assert_eq!(
        st,
        AG_STATUS_INVALID_HANDLE,
        "zeroed handle: {}",
        status_name(st)
    );
    assert_eq!(o, SENTINEL);
    assert_still_trains(&mut fx, "forged handles");
}

// ---- context lifetime ------------------------------------------------------------------

#[test]
fn free_null_double_free_and_use_after_free() {
    // free(NULL) and free of a NULL variable are no-ops.
    assert_eq!(ag_context_free(null_mut()), AG_STATUS_OK);
    let mut nothing: *mut ag_context = null_mut();
    assert_eq!(ag_context_free(&mut nothing), AG_STATUS_OK);
    assert!(nothing.is_null());

    let mut c = new_ctx();
    let mut copy = c;
    let p = param(c, &[2], &[1.0, 2.0]);
    ok(ag_context_free(&mut c), "ag_context_free");
    assert!(c.is_null(), "free clears the caller's variable");
    // Checked right away, before this thread makes another context (which
    // may get the freed memory: that case has its own test below).
    assert_eq!(
        ag_context_free(&mut copy),
        AG_STATUS_INVALID_CONTEXT,
        "double free"
    );
    assert!(!copy.is_null(), "a refused free leaves the variable alone");
    let mut o = SENTINEL;
    assert_eq!(ag_reset(copy), AG_STATUS_INVALID_CONTEXT);
    assert_eq!(ag_tanh(copy, p, &mut o), AG_STATUS_INVALID_CONTEXT);
    assert_eq!(ag_test_panic(copy), AG_STATUS_INVALID_CONTEXT);
    assert_eq!(o, SENTINEL);
    assert!(
        last_error(copy).contains("not live"),
        "{}",
        last_error(copy)
    );
    // A pointer that never was a context.
    let forged = 0x1000usize as *mut ag_context;
    assert_eq!(ag_reset(forged), AG_STATUS_INVALID_CONTEXT);
    let mut forged_var = forged;
    assert_eq!(ag_context_free(&mut forged_var), AG_STATUS_INVALID_CONTEXT);
}

#[test]
fn panic_is_caught_then_context_is_poisoned_and_free_works() {
    quiet_deliberate_panics();
    let mut fx = Fx::new();
    fx.iterate();
    let c = fx.ctx;
    assert_eq!(ag_test_panic(c), AG_STATUS_PANIC);
    let msg = last_error(c);
    assert!(msg.contains("panic") && msg.contains("poisoned"), "{msg}");
    let mut o = SENTINEL;
    let mut s = MemoryStats {
        resets: 77,
        ..Default::default()
    };
    assert_eq!(ag_reset(c), AG_STATUS_POISONED);
    assert_eq!(ag_tanh(c, fx.w1, &mut o), AG_STATUS_POISONED);
    assert_eq!(ag_memory_stats(c, &mut s), AG_STATUS_POISONED);
    assert_eq!(ag_test_panic(c), AG_STATUS_POISONED, "no second panic");
    assert_eq!((o, s.resets), (SENTINEL, 77));
    assert!(last_error(c).contains("poisoned"), "{}", last_error(c));
    // Other contexts are unaffected.
    let mut other = Fx::new();
    assert_still_trains(&mut other, "a neighbour of a poisoned context");
    // Free works on the poisoned context (Fx's Drop asserts OK).
}

// ---- threads ---------------------------------------------------------------------------

/// Retries a call that another thread's poll may bounce with BUSY.
fn retry(mut f: impl FnMut() -> ag_status) -> ag_status {
    loop {
        let st = f();
        if st != AG_STATUS_BUSY {
            return st;
        }
        std::thread::yield_now();
    }
}

/// Keeps `ctx` busy with [n, n] products until `stop`; counts its own
/// statuses. Every status must be OK or BUSY.
fn hammer(ctx: SendCtx, n: usize, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) -> (u64, u64) {
    let c = ctx.0;
    let data: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 / 13.0).collect();
    let shape = [n, n];
    let (mut oks, mut busy) = (0u64, 0u64);
    let mut tally = |st: ag_status| {
        assert!(
            st == AG_STATUS_OK || st == AG_STATUS_BUSY,
            "hammer got {}",
            status_name(st)
        );
        if st == AG_STATUS_OK {
            oks += 1
        } else {
            busy += 1
        }
        st
    };
    while !stop.load(Ordering::Relaxed) {
        retry(|| tally(ag_reset(c)));
        let mut a = SENTINEL;
        retry(|| tally(ag_tensor_new(c, shape.as_ptr(), 2, data.as_ptr(), &mut a)));
        for _ in 0..4 {
            let mut o = SENTINEL;
            if tally(ag_matmul(c, a, a, false, true, &mut o)) == AG_STATUS_OK {
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    (oks, busy)
}

/// Polls `ctx` from this thread while another hammers it, until a BUSY is
/// seen or the hammer has run `max_products` products. Returns
/// (polls, OK, BUSY) of the poller.
fn poll_until_busy(
    ctx: *mut ag_context,
    probe: ag_tensor,
    done: &AtomicU64,
    max_products: u64,
    hammer: &std::thread::JoinHandle<(u64, u64)>,
) -> (u64, u64, u64) {
    let (mut polls, mut oks, mut busy) = (0u64, 0u64, 0u64);
    // Also stops if the hammer died (its assertion failed): never hangs.
    while busy == 0 && done.load(Ordering::Relaxed) < max_products && !hammer.is_finished() {
        let mut n = 0usize;
        let st = ag_tensor_numel(ctx, probe, &mut n);
        assert!(
            st == AG_STATUS_OK || st == AG_STATUS_BUSY,
            "poll got {}",
            status_name(st)
        );
        polls += 1;
        if st == AG_STATUS_OK {
            assert_eq!(n, probe_numel());
            oks += 1;
        } else {
            busy += 1;
        }
    }
    (polls, oks, busy)
}

fn probe_numel() -> usize {
    SMALL.d * SMALL.h
}

#[test]
fn one_context_from_two_threads_gets_only_ok_or_busy() {
    let mut fx = Fx::new();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let h = {
        let (ctx, stop, done) = (SendCtx(fx.ctx), stop.clone(), done.clone());
        std::thread::spawn(move || hammer(ctx, 384, stop, done))
    };
    // The poller's calls are tiny; the hammer's products take milliseconds,
    // so the poller lands inside one almost at once. The bound (10,000
    // products) is generous, not a timing assumption.
    let (polls, p_ok, p_busy) = poll_until_busy(fx.ctx, fx.w1, &done, 10_000, &h);
    stop.store(true, Ordering::Relaxed);
    let (h_ok, h_busy) = h.join().expect("hammer thread");
    eprintln!(
        "[two threads, one context] poller: {polls} polls, {p_ok} OK, {p_busy} BUSY; \
         hammer: {h_ok} OK, {h_busy} BUSY; products done {}",
        done.load(Ordering::Relaxed)
    );
    assert!(p_busy + h_busy >= 1, "no BUSY seen in {polls} polls");
    assert!(p_busy >= 1, "the poller never landed inside a call");
    assert_still_trains(&mut fx, "after concurrent use");
}

/// Losses of `iters` iterations of an MLP big enough for its products to be
/// split across the context's pool worker (128 x 96 x 256 multiply-adds).
fn run_model(seed: usize, iters: usize) -> Vec<u32> {
    let dims = Dims {
        b: 128,
        d: 96,
        h: 256,
        c: 10,
    };
    let mut fx = Fx::with(dims, seed);
    (0..iters).map(|_| fx.iterate().1.to_bits()).collect()
}

#[test]
fn two_contexts_on_two_threads_match_a_serial_run() {
    let serial = [run_model(3, 25), run_model(4, 25)];
    let threads: Vec<_> = [3usize, 4]
        .into_iter()
        .map(|seed| std::thread::spawn(move || run_model(seed, 25)))
        .collect();
    let parallel: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(parallel[0], serial[0]);
    assert_eq!(parallel[1], serial[1]);
    assert_ne!(serial[0], serial[1], "the two models differ");
}

// ---- every status, table-driven ----------------------------------------------------------

/// `#define AG_STATUS_<NAME> <value>` lines of the committed header.
fn header_statuses() -> BTreeMap<String, ag_status> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/arenagrad.h");
    let text = std::fs::read_to_string(path).expect("include/arenagrad.h");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (w.next(), w.next()) else {
            continue;
        };
        if let Some(short) = name.strip_prefix("AG_STATUS_") {
            let v: ag_status = value
                .parse()
                .unwrap_or_else(|_| panic!("value of {name}: {value}"));
            assert!(
                out.insert(short.to_string(), v).is_none(),
                "{name} defined twice"
            );
        }
    }
    assert!(out.len() >= 21, "parsed only {} statuses", out.len());
    out
}

/// Lowers the address-space limit (RLIMIT_AS soft limit) to the current
/// virtual size plus `headroom` for the duration of `f`, restoring it after
/// (also on panic). Other test threads keep `headroom` to allocate in.
fn with_address_space_cap<R>(headroom: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(libc::rlimit);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: a valid rlimit for RLIMIT_AS (the one read before).
            let r = unsafe { libc::setrlimit(libc::RLIMIT_AS, &self.0) };
            assert_eq!(r, 0, "restoring RLIMIT_AS");
        }
    }
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: old is a valid, writable rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) }, 0);
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let cap = (pages * page + headroom).min(old.rlim_max);
    let new = libc::rlimit {
        rlim_cur: cap,
        rlim_max: old.rlim_max,
    };
    let _restore = Restore(old);
    // SAFETY: a valid rlimit; only the soft limit is lowered.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &new) }, 0);
    f()
}

fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "arenagrad_ffi_contract_{}_{tag}.ckpt",
        std::process::id()
    ))
}

fn c_path(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

struct Case {
    /// The header name without the AG_STATUS_ prefix.
    status: &'static str,
    what: &'static str,
    provoke: fn(&mut Fx) -> ag_status,
    /// Whether the context must still train afterwards (not for PANIC and
    /// POISONED, which end a context by design).
    usable_after: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            status: "OK",
            what: "a valid iteration, then a reset",
            provoke: |fx| {
                fx.iterate();
                ag_reset(fx.ctx)
            },
            usable_after: true,
        },
        Case {
            status: "NULL_ARGUMENT",
            what: "ag_tanh with a NULL out-pointer",
            provoke: |fx| ag_tanh(fx.ctx, fx.w1, null_mut()),
            usable_after: true,
        },
        Case {
            status: "NULL_ARGUMENT",
            what: "ag_reset(NULL)",
            provoke: |_| ag_reset(null_mut()),
            usable_after: true,
        },
        Case {
            status: "INVALID_CONTEXT",
            what: "a call through a copy of a freed context pointer",
            provoke: |_| {
                let mut c = new_ctx();
                let copy = c;
                ok(ag_context_free(&mut c), "ag_context_free");
                ag_reset(copy)
            },
            usable_after: true,
        },
        Case {
            status: "INVALID_CONTEXT",
            what: "a pointer that never was a context",
            provoke: |_| ag_zero_grad(0xdead_0000usize as *mut ag_context),
            usable_after: true,
        },
        Case {
            status: "STALE_HANDLE",
            what: "the loss of the previous iteration after ag_reset",
            provoke: |fx| {
                let (l, _) = fx.iterate();
                ok(ag_reset(fx.ctx), "ag_reset");
                let mut v = 0.0;
                ag_tensor_item(fx.ctx, l, &mut v)
            },
            usable_after: true,
        },
        Case {
            status: "WRONG_CONTEXT",
            what: "a parameter of another context",
            provoke: |fx| {
                let other = Fx::new();
                let mut t = SENTINEL;
                ag_tanh(fx.ctx, other.w1, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "INVALID_HANDLE",
            what: "index 0xdeadbeef",
            provoke: |fx| {
                let h = ag_tensor {
                    index: 0xdead_beef,
                    ..fx.w1
                };
                let mut t = SENTINEL;
                ag_tanh(fx.ctx, h, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "SHAPE_MISMATCH",
            what: "matmul [4,8] x [4,8]",
            provoke: |fx| {
                let mut t = SENTINEL;
                ag_matmul(fx.ctx, fx.w1, fx.w1, false, false, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "SHAPE_MISMATCH",
            what: "add [4,8] + [8,3]",
            provoke: |fx| {
                let mut t = SENTINEL;
                ag_add(fx.ctx, fx.w1, fx.w2, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "INVALID_ARGUMENT",
            what: "learning rate NaN",
            provoke: |fx| {
                fx.ensure_optimizer();
                ag_optimizer_set_lr(fx.ctx, f32::NAN)
            },
            usable_after: true,
        },
        Case {
            status: "INVALID_ARGUMENT",
            what: "AdamW beta1 = 1 (no optimizer is made)",
            provoke: |fx| ag_optimizer_adamw(fx.ctx, 1e-2, 1.0, 0.999, 1e-8, 0.0),
            usable_after: true,
        },
        Case {
            status: "TOO_LARGE",
            what: "a parameter of 2^32 elements",
            provoke: |fx| {
                let mut t = SENTINEL;
                ag_param_new(fx.ctx, [1usize << 31, 2].as_ptr(), 2, null(), &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "OUT_OF_MEMORY",
            what: "an activation past a 4 KiB arena cap",
            provoke: |fx| {
                let c = fx.ctx;
                ok(ag_reset(c), "ag_reset");
                ok(ag_set_arena_limit(c, 4096), "ag_set_arena_limit");
                let mut t = SENTINEL;
                let st = ag_matmul(c, fx.w1, fx.w1, true, false, &mut t); // [8,8]: fits
                assert_eq!(st, AG_STATUS_OK);
                let big = vec![0.5f32; 2048];
                let st = ag_tensor_new(c, [2048usize].as_ptr(), 1, big.as_ptr(), &mut t);
                ok(ag_set_arena_limit(c, 0), "ag_set_arena_limit(0)");
                st
            },
            usable_after: true,
        },
        Case {
            status: "ALLOCATION_FAILED",
            what: "a [2^30, 1] parameter (4 GiB, a valid shape) under a 2 GiB address-space headroom",
            // No fault injection here: a valid but huge shape fails for real
            // (the cases after this one use ag_test_fail_allocation). Without a cap it would not fail on this 24 GiB
            // machine (and, since the allocation is 64-byte aligned,
            // alloc_zeroed would memset all 8 GiB of value + gradient), so
            // the RLIMIT_AS soft limit is lowered for the one call.
            provoke: |fx| {
                let mut t = SENTINEL;
                let st = with_address_space_cap(2 << 30, || {
                    ag_param_new(fx.ctx, [1usize << 30, 1].as_ptr(), 2, null(), &mut t)
                });
                assert_eq!(t, SENTINEL);
                st
            },
            usable_after: true,
        },
        Case {
            status: "ALLOCATION_FAILED",
            what: "the optimizer's first state buffer, failed by ag_test_fail_allocation",
            provoke: |fx| {
                let mut counted = u64::MAX;
                ok(
                    ag_test_fail_allocation(fx.ctx, 1, false, &mut counted),
                    "ag_test_fail_allocation",
                );
                // 4 values, and the shared gradient block: made for w1 (32
                // floats), doubled for b1 (40) and for b2 (67).
                assert_eq!(counted, 7, "4 parameter values, 3 gradient blocks");
                ag_optimizer_adamw(fx.ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01)
            },
            usable_after: true,
        },
        Case {
            status: "ALLOCATION_FAILED",
            what: "the second AdamW moment of the last parameter (rolled back)",
            provoke: |fx| {
                ok(
                    ag_test_fail_allocation(fx.ctx, 8, true, null_mut()),
                    "ag_test_fail_allocation",
                );
                let st = ag_optimizer_adamw(fx.ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01);
                ok(
                    ag_test_fail_allocation(fx.ctx, 0, false, null_mut()),
                    "injection off",
                );
                st
            },
            usable_after: true,
        },
        Case {
            status: "ALLOCATION_FAILED",
            what: "the checkpoint buffer of a save",
            provoke: |fx| {
                fx.iterate();
                ok(
                    ag_test_fail_allocation(fx.ctx, 1, false, null_mut()),
                    "ag_test_fail_allocation",
                );
                let path = temp_path("allocfail");
                let cp = c_path(&path);
                let st = ag_checkpoint_save(fx.ctx, cp.as_ptr(), null(), 0);
                assert!(!path.exists(), "a failed save writes no file");
                st
            },
            usable_after: true,
        },
        Case {
            status: "INDEX_OUT_OF_RANGE",
            what: "embedding id 4 in a table of 4 rows",
            provoke: |fx| {
                let mut t = SENTINEL;
                ag_embedding(fx.ctx, fx.w1, [0i32, 4].as_ptr(), 2, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "INDEX_OUT_OF_RANGE",
            what: "cross-entropy target -1",
            provoke: |fx| {
                let mut t = SENTINEL;
                ag_cross_entropy(fx.ctx, fx.w2, [0, 1, 2, 0, 1, 2, 0, -1].as_ptr(), 8, &mut t)
            },
            usable_after: true,
        },
        Case {
            status: "NOT_SCALAR",
            what: "backward from a [4,8] tensor",
            provoke: |fx| {
                let a = fx.activation();
                ag_backward(fx.ctx, a)
            },
            usable_after: true,
        },
        Case {
            status: "SEQUENCE",
            what: "backward twice in one iteration",
            provoke: |fx| {
                let (l, _) = fx.iterate();
                ag_backward(fx.ctx, l)
            },
            usable_after: true,
        },
        Case {
            status: "SEQUENCE",
            what: "optimizer step without backward",
            provoke: |fx| {
                fx.ensure_optimizer();
                ag_optimizer_step(fx.ctx)
            },
            usable_after: true,
        },
        Case {
            status: "NON_FINITE",
            what: "a step over an infinite gradient",
            provoke: |fx| {
                fx.ensure_optimizer();
                let c = fx.ctx;
                ok(ag_reset(c), "ag_reset");
                let inf = [f32::INFINITY; 32];
                let (mut t, mut m, mut l) = (SENTINEL, SENTINEL, SENTINEL);
                ok(
                    ag_tensor_new(c, [4usize, 8].as_ptr(), 2, inf.as_ptr(), &mut t),
                    "tensor",
                );
                ok(ag_mul(c, fx.w1, t, &mut m), "ag_mul");
                ok(ag_sum(c, m, &mut l), "ag_sum");
                ok(ag_backward(c, l), "ag_backward");
                let st = ag_optimizer_step(c);
                ok(ag_zero_grad(c), "ag_zero_grad");
                st
            },
            usable_after: true,
        },
        Case {
            status: "IO",
            what: "loading from a folder that does not exist",
            provoke: |fx| {
                let p = CString::new("/nonexistent-arenagrad-dir/m.ckpt").unwrap();
                let (mut u, mut n) = ([0u8; 4], 0usize);
                ag_checkpoint_load(fx.ctx, p.as_ptr(), u.as_mut_ptr(), 4, &mut n)
            },
            usable_after: true,
        },
        Case {
            status: "IO",
            what: "saving into a folder that does not exist",
            provoke: |fx| {
                let p = CString::new("/nonexistent-arenagrad-dir/m.ckpt").unwrap();
                ag_checkpoint_save(fx.ctx, p.as_ptr(), null(), 0)
            },
            usable_after: true,
        },
        Case {
            status: "CHECKPOINT_CORRUPT",
            what: "a valid checkpoint with one bit flipped",
            provoke: |fx| {
                let path = temp_path("corrupt");
                let cp = c_path(&path);
                ok(
                    ag_checkpoint_save(fx.ctx, cp.as_ptr(), b"u".as_ptr(), 1),
                    "save",
                );
                let mut bytes = std::fs::read(&path).unwrap();
                let _ = std::fs::remove_file(&path);
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x10;
                let (mut u, mut n) = ([0u8; 4], 0usize);
                ag_checkpoint_load_bytes(
                    fx.ctx,
                    bytes.as_ptr(),
                    bytes.len(),
                    u.as_mut_ptr(),
                    4,
                    &mut n,
                )
            },
            usable_after: true,
        },
        Case {
            status: "CHECKPOINT_MISMATCH",
            what: "a valid checkpoint of a model with another hidden size",
            provoke: |fx| {
                let other = Fx::with(Dims { h: 9, ..SMALL }, 1);
                let path = temp_path("mismatch");
                let cp = c_path(&path);
                ok(
                    ag_checkpoint_save(other.ctx, cp.as_ptr(), null(), 0),
                    "save",
                );
                let (mut u, mut n) = ([0u8; 4], 0usize);
                let st = ag_checkpoint_load(fx.ctx, cp.as_ptr(), u.as_mut_ptr(), 4, &mut n);
                let _ = std::fs::remove_file(&path);
                st
            },
            usable_after: true,
        },
        Case {
            status: "BUSY",
            what: "a call while another thread is inside a matmul on the context",
            provoke: |fx| {
                let stop = Arc::new(AtomicBool::new(false));
                let done = Arc::new(AtomicU64::new(0));
                let h = {
                    let (ctx, stop, done) = (SendCtx(fx.ctx), stop.clone(), done.clone());
                    std::thread::spawn(move || hammer(ctx, 256, stop, done))
                };
                let (_, _, busy) = poll_until_busy(fx.ctx, fx.w1, &done, 20_000, &h);
                stop.store(true, Ordering::Relaxed);
                h.join().expect("hammer thread");
                if busy > 0 {
                    AG_STATUS_BUSY
                } else {
                    AG_STATUS_OK
                }
            },
            usable_after: true,
        },
        Case {
            status: "BUFFER_TOO_SMALL",
            what: "ag_tokenizer_encode into no room",
            provoke: |_| {
                let dir = std::env::temp_dir().join(format!("ag_contract_{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                // The 256 byte tokens of GPT-2's alphabet (bytes outside the
                // printable Latin-1 ones stand for U+0100 upwards) and the
                // end-of-text token; no merges.
                let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
                let mut shift = 0;
                let mut entries = Vec::new();
                for b in 0..=255u8 {
                    let c = if printable(b) {
                        char::from(b)
                    } else {
                        shift += 1;
                        char::from_u32(0xFF + shift).unwrap()
                    };
                    let t = c.to_string().replace('\\', "\\\\").replace('"', "\\\"");
                    entries.push(format!("\"{t}\": {b}"));
                }
                entries.push("\"<|endoftext|>\": 256".into());
                let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
                std::fs::write(&vocab, format!("{{{}}}", entries.join(","))).unwrap();
                std::fs::write(&merges, "").unwrap();
                let c = |p: &std::path::Path| CString::new(p.to_str().unwrap()).unwrap();
                let mut tok = null_mut();
                let st = ag_tokenizer_open(c(&vocab).as_ptr(), c(&merges).as_ptr(), &mut tok);
                ok(st, "ag_tokenizer_open");
                let mut needed = 0usize;
                let st =
                    ag_tokenizer_encode(tok, b"ab".as_ptr(), 2, false, null_mut(), 0, &mut needed);
                assert_eq!(needed, 2);
                ok(ag_tokenizer_close(&mut tok), "ag_tokenizer_close");
                let _ = std::fs::remove_dir_all(&dir);
                st
            },
            usable_after: true,
        },
        Case {
            status: "PANIC",
            what: "ag_test_panic",
            provoke: |fx| ag_test_panic(fx.ctx),
            usable_after: false,
        },
        Case {
            status: "POISONED",
            what: "ag_reset after a caught panic",
            provoke: |fx| {
                assert_eq!(ag_test_panic(fx.ctx), AG_STATUS_PANIC);
                ag_reset(fx.ctx)
            },
            usable_after: false,
        },
    ]
}

#[test]
fn every_header_status_is_provoked_and_the_context_survives() {
    quiet_deliberate_panics();
    let header = header_statuses();
    let table = cases();
    // Every case names a real status, and every status has a case.
    for c in &table {
        assert!(
            header.contains_key(c.status),
            "case `{}` names unknown status {}",
            c.what,
            c.status
        );
    }
    let mut provoked = BTreeSet::new();
    for case in &table {
        let want = header[case.status];
        let mut fx = Fx::new();
        let st = (case.provoke)(&mut fx);
        assert_eq!(
            st,
            want,
            "{}: expected AG_STATUS_{} ({want}), got {} ({})",
            case.what,
            case.status,
            st,
            status_name(st)
        );
        provoked.insert(case.status);
        if case.usable_after {
            assert_still_trains(&mut fx, case.what);
        } else {
            // A poisoned context still frees (Fx's Drop asserts OK).
            assert_eq!(ag_reset(fx.ctx), AG_STATUS_POISONED);
        }
    }
    let missing: Vec<_> = header
        .keys()
        .filter(|k| !provoked.contains(k.as_str()))
        .collect();
    assert!(missing.is_empty(), "statuses with no case: {missing:?}");
    eprintln!(
        "[status table] {} cases provoked all {} header statuses",
        table.len(),
        header.len()
    );
}

#[test]
fn status_strings_are_distinct_and_known() {
    let header = header_statuses();
    let unknown = status_name(12345);
    assert_eq!(unknown, "unknown status");
    assert_eq!(status_name(1), unknown);
    assert_eq!(status_name(i32::MIN), unknown);
    let mut seen = BTreeMap::new();
    for (name, &v) in &header {
        let s = status_name(v);
        assert!(
            !s.is_empty() && s != unknown,
            "AG_STATUS_{name} ({v}) has no string"
        );
        if let Some(prev) = seen.insert(s.clone(), name.clone()) {
            panic!("AG_STATUS_{name} and AG_STATUS_{prev} share the string {s:?}");
        }
    }
    // The Rust constants agree with the header.
    let rust: [(&str, ag_status); 21] = [
        ("OK", AG_STATUS_OK),
        ("NULL_ARGUMENT", AG_STATUS_NULL_ARGUMENT),
        ("INVALID_CONTEXT", AG_STATUS_INVALID_CONTEXT),
        ("STALE_HANDLE", AG_STATUS_STALE_HANDLE),
        ("WRONG_CONTEXT", AG_STATUS_WRONG_CONTEXT),
        ("INVALID_HANDLE", AG_STATUS_INVALID_HANDLE),
        ("SHAPE_MISMATCH", AG_STATUS_SHAPE_MISMATCH),
        ("INVALID_ARGUMENT", AG_STATUS_INVALID_ARGUMENT),
        ("TOO_LARGE", AG_STATUS_TOO_LARGE),
        ("OUT_OF_MEMORY", AG_STATUS_OUT_OF_MEMORY),
        ("ALLOCATION_FAILED", AG_STATUS_ALLOCATION_FAILED),
        ("INDEX_OUT_OF_RANGE", AG_STATUS_INDEX_OUT_OF_RANGE),
        ("NOT_SCALAR", AG_STATUS_NOT_SCALAR),
        ("SEQUENCE", AG_STATUS_SEQUENCE),
        ("NON_FINITE", AG_STATUS_NON_FINITE),
        ("IO", AG_STATUS_IO),
        ("CHECKPOINT_CORRUPT", AG_STATUS_CHECKPOINT_CORRUPT),
        ("CHECKPOINT_MISMATCH", AG_STATUS_CHECKPOINT_MISMATCH),
        ("BUSY", AG_STATUS_BUSY),
        ("PANIC", AG_STATUS_PANIC),
        ("POISONED", AG_STATUS_POISONED),
    ];
    for (name, v) in rust {
        assert_eq!(header.get(name), Some(&v), "AG_STATUS_{name}");
    }
}

/// The strings are static: a pointer stays valid and equal across calls.
#[test]
fn status_str_and_version_are_static() {
    let a: *const c_char = ag_status_str(AG_STATUS_BUSY);
    let b: *const c_char = ag_status_str(AG_STATUS_BUSY);
    assert_eq!(a, b);
    // SAFETY: static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(ag_version()) }.to_str().unwrap();
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
}

// ---- freed memory reused, crafted checkpoints --------------------------------------------

/// The allocator often hands a freed context's memory to the next context
/// made on the same thread. A stale copy of the freed pointer must still be
/// refused (INVALID_CONTEXT), and must neither act on nor free the new
/// context: the library's context pointers are tokens it never reuses, not
/// addresses.
#[test]
fn use_after_free_is_detected_even_when_the_address_is_reused() {
    let mut a = new_ctx();
    let stale = a;
    ok(ag_context_free(&mut a), "ag_context_free");
    let mut b = new_ctx();
    assert_eq!(
        ag_reset(stale),
        AG_STATUS_INVALID_CONTEXT,
        "reset through a freed pointer"
    );
    let mut s = stale;
    assert_eq!(
        ag_context_free(&mut s),
        AG_STATUS_INVALID_CONTEXT,
        "free through a freed pointer"
    );
    ok(ag_reset(b), "the new context is still alive");
    ok(ag_context_free(&mut b), "ag_context_free");
}

/// A checkpoint whose optimizer kind 0 ("none") comes with a moment count
/// is corrupt. Validation has to agree with what loading will read: loading
/// into an AdamW model reads two moments per parameter, so a file sized for
/// one would be read past its end (or, with user bytes after it, have those
/// bytes read as optimizer state). The CRC is no defence: anyone can
/// recompute a CRC32.
#[test]
fn crafted_checkpoint_with_inconsistent_moments_is_corrupt() {
    let mut src = arenagrad::Context::new();
    src.param(&[2], Some(&[1.0, 2.0])).unwrap();
    src.param(&[2], Some(&[3.0, 4.0])).unwrap();
    let bytes = src.checkpoint_bytes(&[]).unwrap(); // kind 0, 0 moments
    // Header: magic(8) version(4) n_params(4) step(8) kind(4) moments(4) ...
    let mut body = bytes[..bytes.len() - 4].to_vec();
    body[28..32].copy_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&[0u8; 16]); // one moment of 2 + 2 floats
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());

    let c = new_ctx();
    param(c, &[2], &[0.0, 0.0]);
    param(c, &[2], &[0.0, 0.0]);
    ok(
        ag_optimizer_adamw(c, 0.1, 0.9, 0.999, 1e-8, 0.0),
        "ag_optimizer_adamw",
    );
    let mut ulen = 0usize;
    let st = ag_checkpoint_load_bytes(c, body.as_ptr(), body.len(), null_mut(), 0, &mut ulen);
    assert_eq!(st, AG_STATUS_CHECKPOINT_CORRUPT, "{}", last_error(c));
    let mut c = c;
    ok(ag_context_free(&mut c), "ag_context_free");
}

// ---- the gradient block -----------------------------------------------------------

/// ag_grads_buffer, ag_grads_copy_out and ag_grads_copy_in: the pointer
/// sees what backward wrote and what the caller writes; it moves only when
/// a parameter is added or the optimizer is created; wrong lengths, NULL
/// arrays and a freed context are refused without writing anything.
#[test]
fn grads_buffer_and_copies() {
    let c = new_ctx();
    let mut w = SENTINEL;
    let mut b = SENTINEL;
    let wv: Vec<f32> = (0..6).map(|i| 0.25 * i as f32 - 0.5).collect();
    ok(
        ag_param_new(c, [2, 3].as_ptr(), 2, wv.as_ptr(), &mut w),
        "w",
    );
    let (mut p0, mut n0) = (null_mut::<f32>(), 0usize);
    ok(ag_grads_buffer(c, &mut p0, &mut n0), "ag_grads_buffer");
    assert_eq!(n0, 6);
    assert_eq!(p0 as usize % 64, 0, "the block is 64-byte aligned");
    ok(ag_param_new(c, [3].as_ptr(), 1, null(), &mut b), "b");
    let (mut p, mut n) = (null_mut::<f32>(), 0usize);
    ok(ag_grads_buffer(c, &mut p, &mut n), "ag_grads_buffer");
    assert_eq!(n, 9);
    let mut len = 0usize;
    ok(ag_grads_len(c, &mut len), "ag_grads_len");
    assert_eq!(len, 9);
    ok(ag_optimizer_sgd(c, 0.5, 0.0, 0.0), "sgd");
    ok(ag_grads_buffer(c, &mut p, &mut n), "ag_grads_buffer");
    let fixed = p;

    // loss = sum(x @ w + b) with x = ones [1, 2]: dw = 1, db = 1.
    let mut x = SENTINEL;
    let mut h = SENTINEL;
    let mut loss = SENTINEL;
    ok(
        ag_tensor_new(c, [1, 2].as_ptr(), 2, [1.0f32; 2].as_ptr(), &mut x),
        "x",
    );
    ok(ag_linear(c, x, w, &b, &mut h), "linear");
    ok(ag_sum(c, h, &mut loss), "sum");
    ok(ag_backward(c, loss), "backward");
    // SAFETY (test): the pointer is valid (no parameter added, no optimizer
    // created since it was taken); each access is made between calls.
    let view = || unsafe { std::slice::from_raw_parts(fixed, 9) }.to_vec();
    assert_eq!(view(), [1.0; 9]);
    // SAFETY (test): as above, writing between calls.
    unsafe { std::slice::from_raw_parts_mut(fixed.add(6), 3) }.fill(4.0);
    let mut db = [0.0f32; 3];
    ok(ag_tensor_read_grad(c, b, db.as_mut_ptr(), 3), "read_grad");
    assert_eq!(db, [4.0; 3], "writes through the pointer are the gradients");
    let mut all = [7.0f32; 9];
    ok(ag_grads_copy_out(c, all.as_mut_ptr(), 9), "copy_out");
    assert_eq!(all, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0]);

    // Wrong lengths: refused, nothing written or changed.
    let mut dst = [7.0f32; 10];
    for bad in [0usize, 8, 10, usize::MAX] {
        let st = ag_grads_copy_out(c, dst.as_mut_ptr(), bad);
        assert_eq!(st, AG_STATUS_INVALID_ARGUMENT, "copy_out len {bad}");
        assert!(
            last_error(c).contains("ag_grads_copy_out"),
            "{}",
            last_error(c)
        );
        let st = ag_grads_copy_in(c, dst.as_ptr(), bad);
        assert_eq!(st, AG_STATUS_INVALID_ARGUMENT, "copy_in len {bad}");
    }
    assert!(last_error(c).contains("9 floats"), "{}", last_error(c));
    assert_eq!(dst, [7.0; 10]);
    assert_eq!(view()[6], 4.0);
    assert_eq!(ag_grads_copy_out(c, null_mut(), 9), AG_STATUS_NULL_ARGUMENT);
    assert_eq!(ag_grads_copy_in(c, null(), 9), AG_STATUS_NULL_ARGUMENT);
    let mut q = null_mut::<f32>();
    assert_eq!(
        ag_grads_buffer(c, &mut q, null_mut()),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(
        ag_grads_buffer(c, null_mut(), &mut n),
        AG_STATUS_NULL_ARGUMENT
    );
    assert!(q.is_null());

    // copy_in replaces them; the step uses what was copied in.
    let halves = [0.5f32; 9];
    ok(ag_grads_copy_in(c, halves.as_ptr(), 9), "copy_in");
    assert_eq!(view(), [0.5; 9]);
    ok(ag_optimizer_step(c), "step");
    let mut wnow = [0.0f32; 6];
    ok(ag_tensor_read(c, w, wnow.as_mut_ptr(), 6), "read w");
    for (a, b) in wnow.iter().zip(&wv) {
        assert_eq!(*a, b - 0.25, "sgd with lr 0.5 on gradient 0.5");
    }
    ok(ag_zero_grad(c), "zero_grad");
    assert_eq!(view(), [0.0; 9]);
    ok(ag_grads_buffer(c, &mut p, &mut n), "ag_grads_buffer");
    assert_eq!(
        (p, n),
        (fixed, 9),
        "the block never moves once the optimizer exists"
    );

    // A freed context: refused, the out-params untouched.
    let mut dead = c;
    ok(ag_context_free(&mut dead), "free");
    let (mut dp, mut dn) = (null_mut::<f32>(), 123usize);
    assert_eq!(
        ag_grads_buffer(c, &mut dp, &mut dn),
        AG_STATUS_INVALID_CONTEXT
    );
    assert!(dp.is_null() && dn == 123);
    assert_eq!(ag_grads_len(c, &mut dn), AG_STATUS_INVALID_CONTEXT);
    assert_eq!(
        ag_grads_copy_out(c, dst.as_mut_ptr(), 9),
        AG_STATUS_INVALID_CONTEXT
    );
    assert_eq!(
        ag_grads_copy_in(c, dst.as_ptr(), 9),
        AG_STATUS_INVALID_CONTEXT
    );
    assert_eq!(dst, [7.0; 10]);
}

//! The C boundary: converts arguments, calls the safe Rust API, writes
//! out-parameters on success and turns every failure into a status code.
//! No math here.
//!
//! # Safety invariant
//! * The `ag_context *` a caller holds is a token; the context's address is
//!   looked up in the registry of live contexts (so a freed or forged token
//!   is refused, never dereferenced) and after this call won the context's busy flag
//!   (so no other thread is inside it; `ag_context_free` needs the flag too).
//! * Caller pointers (out-params, data) are dereferenced only after a NULL
//!   check, with the lengths the caller passed; the caller guarantees they
//!   are valid for those lengths, as the header documents.
//! * Nothing keeps a caller pointer after the call returns.
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]
// extern "C" entry points take raw pointers by design; each is NULL-checked
// and documented in the header (see the safety invariant above).
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod api;
mod init;
mod ops;

pub use api::*;
pub use init::*;
pub use ops::*;

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Status code returned by every fallible function: `AG_STATUS_OK` (0) or
/// one of the negative `AG_STATUS_*` codes.
pub type ag_status = i32;

/// Success.
pub const AG_STATUS_OK: ag_status = 0;
/// A required pointer argument was NULL.
pub const AG_STATUS_NULL_ARGUMENT: ag_status = -1;
/// The context pointer is not a live context (already freed, or never made).
pub const AG_STATUS_INVALID_CONTEXT: ag_status = -2;
/// An activation handle from an earlier iteration (before the last ag_reset).
pub const AG_STATUS_STALE_HANDLE: ag_status = -3;
/// A handle made by a different context.
pub const AG_STATUS_WRONG_CONTEXT: ag_status = -4;
/// A malformed handle (index out of range, forged generation).
pub const AG_STATUS_INVALID_HANDLE: ag_status = -5;
/// Incompatible or invalid shapes (rank, zero dimension, axis, broadcast).
pub const AG_STATUS_SHAPE_MISMATCH: ag_status = -6;
/// An invalid argument value (hyper-parameter, length, permutation, path).
pub const AG_STATUS_INVALID_ARGUMENT: ag_status = -7;
/// A shape whose element count overflows or exceeds 2^31 elements.
pub const AG_STATUS_TOO_LARGE: ag_status = -8;
/// The op would exceed the arena cap (see ag_set_arena_limit).
pub const AG_STATUS_OUT_OF_MEMORY: ag_status = -9;
/// A persistent allocation (parameter, optimizer state, checkpoint) failed.
pub const AG_STATUS_ALLOCATION_FAILED: ag_status = -10;
/// A token id or target outside [0, n).
pub const AG_STATUS_INDEX_OUT_OF_RANGE: ag_status = -11;
/// ag_backward on a tensor with more than one element.
pub const AG_STATUS_NOT_SCALAR: ag_status = -12;
/// A call out of order (backward twice, step without backward, parameter after activations).
pub const AG_STATUS_SEQUENCE: ag_status = -13;
/// A NaN or infinite gradient: the optimizer step was skipped.
pub const AG_STATUS_NON_FINITE: ag_status = -14;
/// A file could not be read or written.
pub const AG_STATUS_IO: ag_status = -15;
/// A checkpoint is truncated, damaged or of an unknown version.
pub const AG_STATUS_CHECKPOINT_CORRUPT: ag_status = -16;
/// A valid checkpoint of a different model (shapes or optimizer differ).
pub const AG_STATUS_CHECKPOINT_MISMATCH: ag_status = -17;
/// Another thread is inside a call on this context.
pub const AG_STATUS_BUSY: ag_status = -18;
/// An internal panic was caught; the context is now poisoned.
pub const AG_STATUS_PANIC: ag_status = -19;
/// The context was poisoned by an earlier panic; only ag_context_free works.
pub const AG_STATUS_POISONED: ag_status = -20;

/// Most dimensions a tensor can have.
pub const AG_MAX_DIMS: usize = 6;
const _: () = assert!(AG_MAX_DIMS == crate::shape::MAX_DIMS);

/// A tensor handle, passed by value. Activation handles die at the next
/// ag_reset; parameter handles (generation 0) live as long as the context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ag_tensor {
    /// Slot in the context's tensor table.
    pub index: u32,
    /// Id of the context that made the handle.
    pub context: u32,
    /// Iteration generation, 0 for parameters.
    pub generation: u64,
}

impl From<Tensor> for ag_tensor {
    fn from(t: Tensor) -> Self {
        ag_tensor {
            index: t.index,
            context: t.context,
            generation: t.generation,
        }
    }
}

impl From<ag_tensor> for Tensor {
    fn from(t: ag_tensor) -> Self {
        Tensor {
            index: t.index,
            context: t.context,
            generation: t.generation,
        }
    }
}

/// An arenagrad context (opaque): parameters, optimizer, arena and tape.
/// Made by ag_context_new, freed by ag_context_free; use it from one thread
/// at a time (a concurrent call gets AG_STATUS_BUSY). An `ag_context *` is
/// a token, not an address: never dereference it. Tokens are never reused,
/// so any call with a freed context is detected (INVALID_CONTEXT).
pub struct ag_context {
    inner: Context,
    busy: AtomicBool,
    poisoned: bool,
    last_error: CString,
}

/// Live contexts: (token, address). The `ag_context *` a C caller holds is
/// a token, never the address: tokens come from a counter and are never
/// reused, so a freed context stays detectably dead even when the allocator
/// hands its memory to a new context. Bounded by the number of contexts
/// alive at once (entries are removed at free).
static REGISTRY: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(1);

fn registry() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    // A panic never happens while the lock is held, but stay usable anyway.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Claims the context behind `token` for this call: its address, if it is
/// live and not busy.
fn claim(func: &'static str, token: *const ag_context) -> Result<*mut ag_context> {
    let reg = registry();
    let Some(&(_, addr)) = reg.iter().find(|(t, _)| *t == token as usize) else {
        return Err(Error::InvalidContext { func });
    };
    let ptr = addr as *mut ag_context;
    // SAFETY: registered, so it points to a live ag_context (entries are
    // removed under this lock before the Box is freed).
    let c = unsafe { &*ptr };
    if c.busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Err(Error::Busy { func });
    }
    Ok(ptr)
}

fn set_error(c: &mut ag_context, e: &Error) -> ag_status {
    c.last_error = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    e.status()
}

/// Runs `f` on the context behind `ctx` with every guarantee of the C API:
/// NULL and liveness checks, busy flag, poisoning, panic capture, last error.
pub(crate) fn guard(
    func: &'static str,
    ctx: *mut ag_context,
    f: impl FnOnce(&mut Context) -> Result<()>,
) -> ag_status {
    if ctx.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    let ptr = match claim(func, ctx) {
        Ok(p) => p,
        Err(e) => return e.status(),
    };
    // SAFETY: claim() proved it live and gave this call exclusive use.
    let c = unsafe { &mut *ptr };
    let st = if c.poisoned {
        set_error(c, &Error::Poisoned { func })
    } else {
        match catch_unwind(AssertUnwindSafe(|| f(&mut c.inner))) {
            Ok(Ok(())) => AG_STATUS_OK,
            Ok(Err(e)) => set_error(c, &e),
            Err(payload) => {
                c.poisoned = true;
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                set_error(c, &Error::Panic { func, what })
            }
        }
    };
    c.busy.store(false, Ordering::Release);
    st
}

/// Writes `v` through a caller out-pointer after a NULL check.
pub(crate) fn write_out<T>(func: &'static str, arg: &'static str, out: *mut T, v: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::NullArgument { func, arg });
    }
    // SAFETY: non-NULL; the caller guarantees it points to a writable T.
    unsafe { out.write(v) };
    Ok(())
}

/// Checks an out-pointer before any work is done (so nothing is computed,
/// or allocated, for a call whose result cannot be delivered).
pub(crate) fn need<T>(func: &'static str, arg: &'static str, p: *const T) -> Result<()> {
    if p.is_null() {
        Err(Error::NullArgument { func, arg })
    } else {
        Ok(())
    }
}

/// Checks a caller array: false for length 0 (no pointer needed), an error
/// for NULL or a byte length past isize::MAX, true when it can be sliced.
fn check_array<T>(func: &'static str, arg: &'static str, null: bool, len: usize) -> Result<bool> {
    if len == 0 {
        return Ok(false);
    }
    if null {
        return Err(Error::NullArgument { func, arg });
    }
    if len
        .checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::TooLarge {
            op: func,
            what: format!("{arg} length {len}"),
        });
    }
    Ok(true)
}

/// A caller array as a slice; NULL is allowed only with length 0.
pub(crate) fn slice_in<'a, T>(
    func: &'static str,
    arg: &'static str,
    p: *const T,
    len: usize,
) -> Result<&'a [T]> {
    if !check_array::<T>(func, arg, p.is_null(), len)? {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, and the caller guarantees `len` readable elements
    // for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A caller output array as a slice.
pub(crate) fn slice_out<'a, T>(
    func: &'static str,
    arg: &'static str,
    p: *mut T,
    len: usize,
) -> Result<&'a mut [T]> {
    if !check_array::<T>(func, arg, p.is_null(), len)? {
        return Ok(&mut []);
    }
    // SAFETY: non-NULL, and the caller guarantees `len` writable elements
    // that no one else accesses during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Creates a context and registers it; returns its token.
pub(crate) fn context_new() -> *mut ag_context {
    let b = Box::new(ag_context {
        inner: Context::new(),
        busy: AtomicBool::new(false),
        poisoned: false,
        last_error: CString::default(),
    });
    let addr = Box::into_raw(b) as usize;
    // Tokens are multiples of 64 (they look like aligned pointers and are
    // never NULL); 2^58 contexts would be needed to wrap.
    let token = NEXT_TOKEN
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(64)
        .max(64);
    registry().push((token, addr));
    std::ptr::without_provenance_mut(token)
}

/// Unregisters and frees a context; refuses unknown or busy ones.
pub(crate) fn context_free(token: *mut ag_context) -> ag_status {
    let mut reg = registry();
    let Some(pos) = reg.iter().position(|(t, _)| *t == token as usize) else {
        return AG_STATUS_INVALID_CONTEXT;
    };
    let ptr = reg[pos].1 as *mut ag_context;
    // SAFETY: registered, hence live.
    let c = unsafe { &*ptr };
    if c.busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return AG_STATUS_BUSY;
    }
    reg.swap_remove(pos);
    drop(reg);
    // SAFETY: the address came from Box::into_raw in context_new, was
    // registered until just now, and no other call can reach it any more.
    drop(unsafe { Box::from_raw(ptr) });
    AG_STATUS_OK
}

/// The last error message of a live, idle context.
pub(crate) fn last_error(ctx: *const ag_context) -> *const c_char {
    static NULL_CTX: &[u8] = b"ag_context_last_error: context is NULL\0";
    static INVALID: &[u8] =
        b"ag_context_last_error: context is not live (freed, or never created)\0";
    static BUSY: &[u8] = b"ag_context_last_error: context is in use by another thread\0";
    if ctx.is_null() {
        return NULL_CTX.as_ptr().cast();
    }
    let ptr = match claim("ag_context_last_error", ctx) {
        Ok(p) => p,
        Err(e) if e.status() == AG_STATUS_BUSY => return BUSY.as_ptr().cast(),
        Err(_) => return INVALID.as_ptr().cast(),
    };
    // SAFETY: claimed above.
    let c = unsafe { &*ptr };
    let p = c.last_error.as_ptr();
    c.busy.store(false, Ordering::Release);
    p
}

/// Number of live contexts (for tests of the registry's bound).
pub fn live_contexts() -> usize {
    registry().len()
}

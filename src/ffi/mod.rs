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
// These doc comments are the C header's text (cbindgen copies them), so
// shape notation such as [B, T, C] or [0, V) is not a Rust link.
#![allow(rustdoc::broken_intra_doc_links)]

// One file per API area, declared in the header's order (cbindgen writes
// the functions in the order it meets them; blank lines keep rustfmt from
// sorting these).
mod lifecycle;

mod tensors;

mod training;

mod capture;
mod checkpoints;
mod grads;
mod init;
mod ops;
mod params;
mod pointers;
mod recompute;
mod runtime;
mod shard;
#[cfg(feature = "test-hooks")]
mod test_hooks;

pub use capture::*;
pub use checkpoints::*;
pub use grads::*;
pub use init::*;
pub use lifecycle::*;
pub use ops::*;
pub use params::*;
pub(crate) use pointers::{need, slice_in, slice_out, write_out};
pub use recompute::*;
pub use runtime::*;
pub use shard::*;
pub use tensors::*;
#[cfg(feature = "test-hooks")]
pub use test_hooks::*;
pub use training::*;

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use crate::status::*;

/// Most dimensions a tensor can have.
pub const AG_MAX_DIMS: usize = 6;
const _: () = assert!(AG_MAX_DIMS == crate::shape::MAX_DIMS);

/// Most tensors one ag_concat joins.
pub const AG_MAX_CONCAT: usize = 8;
const _: () = assert!(AG_MAX_CONCAT == crate::ops::MAX_CONCAT);

/// Most user bytes a checkpoint may carry (64 MiB).
pub const AG_MAX_USER_BYTES: usize = 64 << 20;
const _: () = assert!(AG_MAX_USER_BYTES == crate::checkpoint::MAX_USER_BYTES);

/// Major version of this header; the library's is ag_version_number() / 10000.
pub const AG_VERSION_MAJOR: u32 = 0;
/// Minor version of this header.
pub const AG_VERSION_MINOR: u32 = 1;
/// Patch version of this header.
pub const AG_VERSION_PATCH: u32 = 0;
/// AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH,
/// comparable with ag_version_number() at run time.
pub const AG_VERSION_NUMBER: u32 =
    AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH;

// The version macros are literals so that cbindgen can copy them into the
// header; this stops the build when they drift from Cargo.toml's version.
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version part is not a number");
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}
const _: () = assert!(AG_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
const _: () = assert!(AG_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
const _: () = assert!(AG_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")));
const _: () = assert!(AG_VERSION_MINOR < 100 && AG_VERSION_PATCH < 100);

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

/// A live context: the token a C caller holds, the context's address, and
/// the thread that last claimed it for a call (current while its busy flag
/// is set).
struct LiveContext {
    token: usize,
    addr: usize,
    owner: Option<ThreadKey>,
}

/// Live contexts. The `ag_context *` a C caller holds is a token, never the
/// address: tokens come from a counter and are never reused, so a freed
/// context stays detectably dead even when the allocator hands its memory
/// to a new context. Bounded by the number of contexts alive at once
/// (entries are removed at free).
static REGISTRY: Mutex<Vec<LiveContext>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(1);

fn registry() -> std::sync::MutexGuard<'static, Vec<LiveContext>> {
    // A panic never happens while the lock is held, but stay usable anyway.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Identifies the calling thread without allocating and without a
/// thread-local of our own: the POSIX thread handle (on other systems,
/// None, and caught panics are always printed).
#[cfg(unix)]
type ThreadKey = libc::pthread_t;
#[cfg(unix)]
fn this_thread() -> Option<ThreadKey> {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    Some(unsafe { libc::pthread_self() })
}
#[cfg(not(unix))]
type ThreadKey = ();
#[cfg(not(unix))]
fn this_thread() -> Option<ThreadKey> {
    None
}

/// Claims the context behind `token` for this call: its address, if it is
/// live and not busy.
fn claim(func: &'static str, token: *const ag_context) -> Result<*mut ag_context> {
    let mut reg = registry();
    let Some(entry) = reg.iter_mut().find(|e| e.token == token as usize) else {
        return Err(Error::InvalidContext { func });
    };
    let ptr = entry.addr as *mut ag_context;
    // SAFETY: registered, so it points to a live ag_context (entries are
    // removed under this lock before the Box is freed).
    let c = unsafe { &*ptr };
    if c.busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Err(Error::Busy { func });
    }
    entry.owner = this_thread();
    Ok(ptr)
}

/// Caught panics are silent unless the environment asks for them.
///
/// A panic inside a C call is a library bug that `guard` turns into
/// AG_STATUS_PANIC, with the message kept for ag_context_last_error, so by
/// default nothing reaches the host program's stderr. AG_PRINT_PANICS=1
/// (read at each panic) restores the usual Rust message, with a backtrace
/// when RUST_BACKTRACE is set.
///
/// The hook is process-wide (Rust has one), installed once when the first
/// context is made, and hands every panic it does not silence to the hook
/// that was there before. It silences a panic only when it will be caught
/// by `guard`: the panicking thread is the owner of a context whose busy
/// flag is set (the registry records the owner at claim time, under the
/// lock it takes anyway, so no thread-local is needed), or it is a context's
/// worker thread while some context is inside a call (the worker's panic is
/// re-raised on the calling thread, inside that call). Every other panic,
/// e.g. from a Rust program using the crate directly, is printed as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if print_panics() || !caught_by_guard() {
                previous(info);
            }
        }));
    });
}

fn print_panics() -> bool {
    std::env::var_os("AG_PRINT_PANICS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// True when the current panic happens inside a guarded call (see
/// install_panic_hook).
fn caught_by_guard() -> bool {
    let Some(me) = this_thread() else {
        return false;
    };
    let worker = crate::pool::on_worker();
    // try_lock: the panicking thread may hold the lock itself (it never
    // panics there, but a hook must not deadlock); other holders keep it
    // for microseconds.
    for _ in 0..1000 {
        let reg = match REGISTRY.try_lock() {
            Ok(reg) => reg,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::yield_now();
                continue;
            }
        };
        return reg.iter().any(|e| {
            // SAFETY: registered, hence live (see claim).
            let busy = unsafe { &*(e.addr as *const ag_context) }
                .busy
                .load(Ordering::Acquire);
            busy && (worker || e.owner == Some(me))
        });
    }
    false
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
    install_panic_hook();
    registry().push(LiveContext {
        token,
        addr,
        owner: None,
    });
    std::ptr::without_provenance_mut(token)
}

/// Unregisters and frees a context; refuses unknown or busy ones.
pub(crate) fn context_free(token: *mut ag_context) -> ag_status {
    let mut reg = registry();
    let Some(pos) = reg.iter().position(|e| e.token == token as usize) else {
        return AG_STATUS_INVALID_CONTEXT;
    };
    let ptr = reg[pos].addr as *mut ag_context;
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

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
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

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
    poisoned: bool,
    last_error: CString,
}

/// Where a live context is found from its token. Slots live in chunks that
/// are never freed, so a call can read a slot without a lock even while
/// another thread frees its context: the token stored in the slot says
/// whether the context is still the one the caller named, and the busy
/// flag (taken by every call and by free) keeps it alive while it is used.
#[derive(Default)]
struct Slot {
    /// Token of the context in this slot; 0 when the slot is empty.
    token: AtomicUsize,
    /// The context's address; read only while `busy` is held and `token`
    /// still matches.
    addr: AtomicUsize,
    /// Set for the length of one call (or of a free).
    busy: AtomicBool,
    /// The thread that last claimed the slot (see install_panic_hook).
    owner: AtomicUsize,
}

/// Slots per chunk, and the most chunks: at most 2^22 contexts alive at
/// once (each owns a context's tables and arena, so memory runs out first).
const CHUNK: usize = 64;
const SLOT_BITS: u32 = 22;
const MAX_SLOTS: usize = 1 << SLOT_BITS;
static CHUNKS: [AtomicPtr<Slot>; MAX_SLOTS / CHUNK] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SLOTS / CHUNK];

/// The slot a token names (not necessarily its context's: compare tokens).
#[inline]
fn slot_of(token: usize) -> Option<&'static Slot> {
    let i = (token >> 6) & (MAX_SLOTS - 1);
    let chunk = CHUNKS[i / CHUNK].load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: a non-NULL chunk is a leaked `[Slot; CHUNK]` (see
    // Registry::take_slot), never freed, and i % CHUNK is inside it.
    Some(unsafe { &*chunk.add(i % CHUNK) })
}

/// A live context: the token a C caller holds and the index of its slot.
struct LiveContext {
    token: usize,
    slot: usize,
}

/// Live contexts and the slots they do not use. Only making and freeing
/// contexts (and the panic hook) take its lock; a call finds its context
/// through the slots.
struct Registry {
    live: Vec<LiveContext>,
    free: Vec<usize>,
    slots: usize,
}

impl Registry {
    /// A free slot index, making a chunk of slots when none is left; None
    /// when MAX_SLOTS contexts are alive.
    fn take_slot(&mut self) -> Option<usize> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        let i = self.slots;
        if i >= MAX_SLOTS {
            return None;
        }
        if i.is_multiple_of(CHUNK) {
            let chunk: Box<[Slot; CHUNK]> = Box::new(std::array::from_fn(|_| Slot::default()));
            // Leaked on purpose: a slot must stay readable for as long as
            // a stale token may be passed in, which is forever.
            let ptr = Box::leak(chunk).as_mut_ptr();
            CHUNKS[i / CHUNK].store(ptr, Ordering::Release);
        }
        self.slots += 1;
        Some(i)
    }
}

/// Live contexts. The `ag_context *` a C caller holds is a token, never the
/// address: tokens come from a counter and are never reused, so a freed
/// context stays detectably dead even when the allocator hands its memory
/// (or its slot) to a new context. Bounded by the number of contexts alive
/// at once (entries are removed at free).
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    free: Vec::new(),
    slots: 0,
});
static NEXT_SEQ: AtomicUsize = AtomicUsize::new(1);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic never happens while the lock is held, but stay usable anyway.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Identifies the calling thread without allocating and without a
/// thread-local of our own: the POSIX thread handle as a number (on other
/// systems, None, and caught panics are always printed).
#[cfg(unix)]
fn this_thread() -> Option<usize> {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    Some(unsafe { libc::pthread_self() } as usize)
}
#[cfg(not(unix))]
fn this_thread() -> Option<usize> {
    None
}

/// Claims the context behind `token` for this call: its slot (whose busy
/// flag is now held) and its address, if it is live and not busy. No lock:
/// a call pays one atomic exchange here and one store when it ends.
#[inline]
fn claim(func: &'static str, token: *const ag_context) -> Result<(&'static Slot, *mut ag_context)> {
    let token = token as usize;
    let Some(slot) =
        slot_of(token).filter(|s| token != 0 && s.token.load(Ordering::Acquire) == token)
    else {
        return Err(Error::InvalidContext { func });
    };
    if slot
        .busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Freed since the first look (and the slot maybe reused): dead.
        if slot.token.load(Ordering::Acquire) != token {
            return Err(Error::InvalidContext { func });
        }
        return Err(Error::Busy { func });
    }
    // Freed between the first look and taking the flag: free clears the
    // token while it holds the flag, so this load sees it.
    if slot.token.load(Ordering::Acquire) != token {
        slot.busy.store(false, Ordering::Release);
        return Err(Error::InvalidContext { func });
    }
    slot.owner
        .store(this_thread().unwrap_or(0), Ordering::Relaxed);
    Ok((slot, slot.addr.load(Ordering::Relaxed) as *mut ag_context))
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
/// flag is set (claim records the owner in the context's slot, so no
/// thread-local is needed), or it is a context's worker thread while some
/// context is inside a call (the worker's panic is re-raised on the calling
/// thread, inside that call). Every other panic, e.g. from a Rust program
/// using the crate directly, is printed as usual.
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
        return reg.live.iter().any(|e| {
            slot_of(e.token).is_some_and(|s| {
                s.busy.load(Ordering::Acquire) && (worker || s.owner.load(Ordering::Relaxed) == me)
            })
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
#[inline]
pub(crate) fn guard(
    func: &'static str,
    ctx: *mut ag_context,
    f: impl FnOnce(&mut Context) -> Result<()>,
) -> ag_status {
    if ctx.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    let (slot, ptr) = match claim(func, ctx) {
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
    slot.busy.store(false, Ordering::Release);
    st
}

/// Creates a context and registers it; returns its token, or None when
/// the registry is full.
pub(crate) fn context_new() -> Option<*mut ag_context> {
    install_panic_hook();
    let mut reg = registry();
    let i = reg.take_slot()?;
    // Tokens are multiples of 64 (they look like aligned pointers and are
    // never NULL) and carry their slot in the low bits above those 6; the
    // sequence number above makes each one new (2^36 contexts would be
    // needed to wrap).
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    let token = ((seq << SLOT_BITS) | i) << 6;
    let Some(slot) = slot_of(token) else {
        // take_slot made the chunk; keep the slot for a later context.
        reg.free.push(i);
        return None;
    };
    let b = Box::new(ag_context {
        inner: Context::new(),
        poisoned: false,
        last_error: CString::default(),
    });
    let addr = Box::into_raw(b) as usize;
    slot.addr.store(addr, Ordering::Relaxed);
    slot.owner.store(0, Ordering::Relaxed);
    // Publishes addr with it: a claim that reads this token sees the address.
    slot.token.store(token, Ordering::Release);
    reg.live.push(LiveContext { token, slot: i });
    Some(std::ptr::without_provenance_mut(token))
}

/// Unregisters and frees a context; refuses unknown or busy ones.
pub(crate) fn context_free(token: *mut ag_context) -> ag_status {
    let token = token as usize;
    let mut reg = registry();
    let Some(pos) = reg.live.iter().position(|e| e.token == token) else {
        return AG_STATUS_INVALID_CONTEXT;
    };
    let i = reg.live[pos].slot;
    let Some(slot) = slot_of(token) else {
        return AG_STATUS_INVALID_CONTEXT;
    };
    if slot
        .busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return AG_STATUS_BUSY;
    }
    let ptr = slot.addr.load(Ordering::Relaxed) as *mut ag_context;
    slot.token.store(0, Ordering::Release);
    slot.busy.store(false, Ordering::Release);
    reg.live.swap_remove(pos);
    reg.free.push(i);
    drop(reg);
    // SAFETY: the address came from Box::into_raw in context_new; its
    // token was cleared while this call held the busy flag, so no call
    // can reach it any more (claim re-reads the token after the flag).
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
    let (slot, ptr) = match claim("ag_context_last_error", ctx) {
        Ok(p) => p,
        Err(e) if e.status() == AG_STATUS_BUSY => return BUSY.as_ptr().cast(),
        Err(_) => return INVALID.as_ptr().cast(),
    };
    // SAFETY: claimed above.
    let c = unsafe { &*ptr };
    let p = c.last_error.as_ptr();
    slot.busy.store(false, Ordering::Release);
    p
}

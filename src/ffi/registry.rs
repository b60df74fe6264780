//! The registry of live contexts: how a token finds its context, how a call
//! claims it (the busy flag), and making and freeing contexts.

use super::handle::ag_context;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::status::{AG_STATUS_BUSY, AG_STATUS_INVALID_CONTEXT, AG_STATUS_OK, ag_status};
use std::ffi::{CString, c_char};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Where a live context is found from its token. Slots live in chunks that
/// are never freed, so a call can read a slot without a lock even while
/// another thread frees its context: the token stored in the slot says
/// whether the context is still the one the caller named, and the busy
/// flag (taken by every call and by free) keeps it alive while it is used.
#[derive(Default)]
pub(super) struct Slot {
    /// Token of the context in this slot; 0 when the slot is empty.
    token: AtomicUsize,
    /// The context's address; read only while `busy` is held and `token`
    /// still matches.
    addr: AtomicUsize,
    /// Set for the length of one call (or of a free).
    busy: AtomicBool,
    /// The thread that last claimed the slot (see the panic hook).
    owner: AtomicUsize,
}

impl Slot {
    /// Ends the call that claimed this slot.
    pub(super) fn release(&self) {
        self.busy.store(false, Ordering::Release);
    }
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

/// Number of live contexts.
#[cfg(feature = "test-hooks")]
pub(super) fn live_contexts() -> usize {
    registry().live.len()
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
pub(super) fn claim(
    func: &'static str,
    token: *const ag_context,
) -> Result<(&'static Slot, *mut ag_context)> {
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

/// True when the current panic happens inside a guarded call (see
/// the panic hook).
pub(super) fn caught_by_guard() -> bool {
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

/// Creates a context and registers it; returns its token, or None when
/// the registry is full. The caller installs the panic hook first.
pub(crate) fn context_new() -> Option<*mut ag_context> {
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

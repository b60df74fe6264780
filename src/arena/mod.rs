//! Tensor storage: the per-iteration bump arena and the persistent,
//! 64-byte aligned parameter buffers. This is the only module that turns
//! raw memory into slices.
//!
//! Its rooms: `bump` (the per-iteration arena and its reset), `scratch` (the
//! recompute scratch region), `persistent` (parameter, gradient and
//! optimizer blocks), `access` (buffers to slices, with the overlap checks)
//! and, with `debug-arena`, `canary` (overrun and stale-read detection).
//!
//! # Safety invariant
//! A [`Buf`] is a raw (pointer, length) pair minted here and nowhere else.
//! * An arena `Buf` carries the arena epoch it was allocated in; every access
//!   checks the epoch against the current one, and `reset` bumps the epoch
//!   before the bump allocator reuses memory, so a `Buf` is never read after
//!   its memory was recycled (a stale `Buf` panics, which the FFI guard turns
//!   into a status; it never reads freed memory).
//! * A persistent `Buf` (epoch 0) points into a [`PersistentBlock`] owned by
//!   this `Storage`; blocks are freed only when the `Storage` drops, except
//!   the gradient block (below).
//! * The parameter gradients share one block, parameter after parameter.
//!   It is replaced (grown, or trimmed to size) only by
//!   [`Storage::grads_grow`] and [`Storage::grads_trim`], which copy the
//!   gradients over and free the old block. Their caller holds the only
//!   `Buf`s into it (the parameters' rows of the context's table; no
//!   activation, hence no view of a parameter, exists while parameters are
//!   being added) and rebinds every one of them from [`Storage::grads`] at
//!   once. The raw pointer [`Storage::grads_ptr`] hands to the C boundary is
//!   written by the caller only between calls, when no slice is alive.
//! * Every byte of a buffer is initialised before the buffer is minted, so
//!   forming a slice over it is sound even when the allocation skips the
//!   zero fill: the arena's single chunk is filled once when it becomes the
//!   arena's chunk (see [`Storage::reset`]), and a buffer outside that chunk
//!   (warm-up iterations, which may spill into new chunks) is filled when it
//!   is allocated. Filled means zeros, or 0xFF bytes (NaN as f32) with the
//!   `debug-arena` feature, so a kernel that reads what it never wrote shows
//!   NaN there.
//! * Slices are handed out only through [`Storage::access`], which borrows the
//!   storage mutably (so no other slice is alive) and checks at run time that
//!   every writable buffer is disjoint from every other buffer in the call.
//! * The recomputation scratch region (see [`Storage::scratch_begin`]) is made
//!   of heap chunks owned by this `Storage`, zero-filled when allocated and
//!   freed only by `reset` (after the epoch bump) or drop, so its `Buf`s
//!   follow the same epoch rule as the arena's. Its buffers are reused by
//!   every recomputed segment of an iteration: which tensor's values they
//!   hold at a given moment is the context's business (it refuses handles
//!   to a segment's internal tensors), never a question of memory safety.
#![allow(unsafe_code)]

mod access;
mod bump;
#[cfg(feature = "debug-arena")]
mod canary;
mod persistent;
mod scratch;

use crate::error::{Error, Result};
use bumpalo::Bump;
use std::alloc::Layout;
use std::ptr::NonNull;

/// Alignment of every tensor buffer: a cache line, and a multiple of every
/// SIMD width. Sizes are padded to it too (OpenBLAS kernels may over-read).
pub const ALIGN: usize = 64;

/// A typed view of tensor memory, valid as described in the module docs.
#[derive(Clone, Copy, Debug)]
pub struct Buf<T = f32> {
    ptr: NonNull<T>,
    len: usize,
    epoch: u64,
}

// SAFETY: a Buf is plain (pointer, length) data; all dereferences go through
// `Storage::access`, which borrows the owning Storage, so moving a Buf (or
// the Storage holding it) to another thread cannot create shared mutation.
unsafe impl<T> Send for Buf<T> {}
unsafe impl<T> Sync for Buf<T> {}

impl<T> Buf<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether this buffer persists across resets (parameters, grads, state).
    #[cfg(test)]
    pub fn is_persistent(&self) -> bool {
        self.epoch == 0
    }

    fn range(&self) -> (usize, usize) {
        let start = self.ptr.as_ptr() as usize;
        (start, start + self.len * size_of::<T>())
    }

    /// Whether the two buffers share any byte (then they cannot both be
    /// written by one kernel call).
    pub(crate) fn overlaps<U>(&self, other: &Buf<U>) -> bool {
        let ((a0, a1), (b0, b1)) = (self.range(), other.range());
        a0 < b1 && b0 < a1
    }
}

/// Element types that may live in tensor memory: plain data, any bit
/// pattern valid, no Drop.
pub trait Plain: Copy + Default + 'static {}
impl Plain for f32 {}
impl Plain for u32 {}

/// One heap block outside the arena: parameters, their grads, optimizer state.
struct PersistentBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Drop for PersistentBlock {
    fn drop(&mut self) {
        // SAFETY: ptr was returned by alloc_zeroed with exactly this layout
        // and is freed only here, once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Hook for allocation-failure tests: fail the k-th persistent allocation.
#[derive(Default, Clone, Copy)]
pub struct FaultInjection {
    /// Persistent allocations made so far.
    pub count: u64,
    /// Fail allocation number `fail_at` (1-based); 0 disables.
    pub fail_at: u64,
    /// Keep failing after the first injected failure.
    pub sticky: bool,
}

/// Arena figures reported by `memory_stats`.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    pub used: usize,
    pub reserved: usize,
    pub high_water: usize,
    pub limit: usize,
}

/// Writable f32, read-only f32 and read-only u32 slices of one kernel call.
pub type Slices<'a, const W: usize, const R: usize, const I: usize> =
    ([&'a mut [f32]; W], [&'a [f32]; R], [&'a [u32]; I]);

/// Guard bytes after every arena buffer (feature `debug-arena` only).
#[cfg(feature = "debug-arena")]
const CANARY: usize = 64;
#[cfg(not(feature = "debug-arena"))]
const CANARY: usize = 0;
#[cfg(feature = "debug-arena")]
const CANARY_BYTE: u8 = 0xA5;

/// What never-written arena memory holds: zeros, or with `debug-arena` the
/// 0xFF bytes that recycled memory is poisoned with (NaN as f32).
#[cfg(feature = "debug-arena")]
const FILL_BYTE: u8 = 0xFF;
#[cfg(not(feature = "debug-arena"))]
const FILL_BYTE: u8 = 0;

#[cfg(feature = "debug-arena")]
struct Canary {
    op: &'static str,
    raw: NonNull<u8>,
    data_bytes: usize,
    total: usize,
}

pub struct Storage {
    /// The current iteration's activation memory. A captured step owns one
    /// of its own and swaps it in to replay (see [`Storage::swap_activations`]).
    act: Activations,
    high_water: usize,
    /// Arena cap in bytes; usize::MAX when unlimited.
    limit: usize,
    /// Current arena epoch, >= 1: a reset moves it to a fresh one, a
    /// captured step's replay back to that step's own.
    epoch: u64,
    /// The largest epoch ever issued: every reset takes the next one, so an
    /// epoch (hence a captured step's) is never issued twice.
    top_epoch: u64,
    persistent: Vec<PersistentBlock>,
    persistent_bytes: usize,
    /// The parameter gradients: `grads_len` floats in use out of
    /// `grads_cap` (None until the first parameter).
    grads: Option<PersistentBlock>,
    grads_len: usize,
    grads_cap: usize,
    pub fault: FaultInjection,
}

/// Activation memory: the bump arena, the recompute scratch region and
/// their counters. Its buffers carry the epoch they were made in, and are
/// reachable only while this memory is the storage's current one with that
/// epoch (a parked `Activations` is never read or written).
#[derive(Default)]
pub struct Activations {
    #[cfg(feature = "debug-arena")]
    canaries: Vec<Canary>,
    bump: Bump,
    /// Address range [start, end) of the arena's current chunk when every
    /// byte of it has been initialised (filled once when it became the
    /// chunk); allocations inside it skip the fill.
    filled: Option<(usize, usize)>,
    /// Bytes handed out this iteration (sizes padded to ALIGN).
    used: usize,
    /// Bytes the bump arena consumed this iteration (each buffer's padded
    /// size plus its canary), and the most in any iteration (the size its
    /// chunk is consolidated to, plus one alignment of slack).
    main_used: usize,
    main_high_water: usize,
    /// Padded bytes of every routable allocation (`alloc_scratchable`) this
    /// iteration, wherever it went: the context measures segments with it.
    routable: usize,
    scratch: Scratch,
}

/// The region recomputed segments put their internal buffers in. Each
/// segment's forward (and, during backward, its replay) uses the region from
/// its start, so the iteration pays for the largest segment only.
#[derive(Default)]
struct Scratch {
    chunks: Vec<PersistentBlock>,
    /// Bump position: chunk index and byte offset in that chunk.
    chunk: usize,
    offset: usize,
    /// Padded bytes handed out since the last rewind.
    pass: usize,
    /// The largest pass of this iteration: what `used` counts for the region.
    counted: usize,
    /// Allocations go here (between scratch_begin and scratch_end).
    on: bool,
}

/// Smallest scratch chunk: warm-up iterations grow the region in a few
/// steps; reset then replaces the chunks by one of the measured size.
const MIN_SCRATCH_CHUNK: usize = 1 << 18;

// SAFETY: every raw pointer held (the bump chunks, persistent blocks and the
// Bufs pointing into them) is owned by this Storage; nothing is shared with
// another owner, so moving the whole Storage across threads is sound.
unsafe impl Send for Storage {}

fn padded_bytes<T>(len: usize) -> Option<usize> {
    len.checked_mul(size_of::<T>())?
        .checked_add(ALIGN - 1)
        .map(|b| b / ALIGN * ALIGN)
        .map(|b| b.max(ALIGN))
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

impl Storage {
    pub fn new() -> Storage {
        Storage {
            act: Activations::default(),
            high_water: 0,
            limit: usize::MAX,
            epoch: 1,
            top_epoch: 1,
            persistent: Vec::new(),
            persistent_bytes: 0,
            grads: None,
            grads_len: 0,
            grads_cap: 0,
            fault: FaultInjection::default(),
        }
    }
    /// Sets (or with None clears) the arena cap in bytes.
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit.unwrap_or(usize::MAX);
        // Our byte counter enforces the cap exactly; bumpalo's own limit is
        // the backstop on what the arena reserves from the system (whole
        // chunks, with footers and halving chunk sizes: allow 2x + 64 KiB).
        let backstop = limit.map(|l| l.saturating_mul(2).saturating_add(1 << 16));
        self.act
            .bump
            .set_allocation_limit(backstop.map(|l| l.max(self.act.bump.allocated_bytes())));
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The largest epoch issued so far (a handle's generation above it
    /// cannot come from this storage).
    pub fn top_epoch(&self) -> u64 {
        self.top_epoch
    }

    /// Moves to an epoch never issued before: every arena Buf made so far
    /// becomes unusable until its own epoch is restored with its memory.
    pub fn fresh_epoch(&mut self) {
        self.top_epoch = self.top_epoch.wrapping_add(1);
        if self.top_epoch == 0 {
            // Epoch 0 marks persistent buffers; skip it on wrap (after 2^64
            // resets, i.e. never in practice).
            self.top_epoch = 1;
        }
        self.epoch = self.top_epoch;
    }

    /// Exchanges the current activation memory with `other` and makes
    /// `epoch` current. A captured step parks the eager memory here while
    /// its own (whose Bufs carry `epoch`) is current, and swaps back with a
    /// fresh epoch. Sound because a Buf is usable only under its own epoch,
    /// and an epoch is only ever restored together with the memory its Bufs
    /// point into (the step's, which it owns until dropped).
    pub fn swap_activations(&mut self, other: &mut Activations, epoch: u64) {
        std::mem::swap(&mut self.act, other);
        self.epoch = epoch;
        let limit = (self.limit != usize::MAX).then_some(self.limit);
        self.set_limit(limit);
    }

    /// An empty activation memory (a step's before its capture).
    pub fn empty_activations() -> Activations {
        Activations::default()
    }

    /// Test hook: start the epoch counter near its limit to exercise the wrap.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn set_epoch_for_test(&mut self, epoch: u64) {
        self.epoch = epoch.max(1);
        self.top_epoch = self.epoch;
    }

    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            used: self.act.used,
            reserved: self.act.bump.allocated_bytes()
                + self
                    .act
                    .scratch
                    .chunks
                    .iter()
                    .map(|c| c.layout.size())
                    .sum::<usize>(),
            high_water: self.high_water,
            limit: if self.limit == usize::MAX {
                0
            } else {
                self.limit
            },
        }
    }
}

#[cfg(test)]
mod tests;

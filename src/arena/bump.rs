//! The bump region: where an iteration's activation buffers come from (or
//! are routed from, to the recompute scratch region), and its reset, which
//! recycles the memory under a fresh epoch. It mints arena `Buf`s, so it
//! upholds the parent module's invariant: every byte of a buffer is filled
//! before the buffer exists (here, or once per chunk at reset), and a
//! buffer carries the epoch it was made in.

use super::*;

#[cold]
#[inline(never)]
fn too_many_elements(op: &'static str, len: usize) -> Error {
    Error::TooLarge {
        op,
        what: format!("{len} elements do not fit in memory"),
    }
}

impl Storage {
    /// Allocates a zero-filled arena buffer of `len` elements (the library
    /// itself only needs buffers it overwrites, see below).
    #[cfg(test)]
    pub fn alloc<T: Plain>(&mut self, op: &'static str, len: usize) -> Result<Buf<T>> {
        let b = self.alloc_scratchable::<T>(op, len)?;
        // SAFETY: b is a fresh buffer of len elements owned by this arena;
        // zero is a valid bit pattern for every Plain type.
        unsafe { std::ptr::write_bytes(b.ptr.as_ptr(), 0, len) };
        Ok(b)
    }

    /// Allocates an arena buffer of `len` elements that may be routed to the
    /// scratch region (hence the name): between
    /// [`scratch_begin`](Self::scratch_begin) and `scratch_end` it comes
    /// from there, so only for values the op can compute again from its
    /// inputs. Its contents are unspecified (whatever an earlier iteration
    /// left there; NaN with `debug-arena`): for outputs the caller writes
    /// completely before anything reads them. Skips the zero fill that
    /// `alloc` pays.
    #[inline(always)]
    pub fn alloc_scratchable<T: Plain>(&mut self, op: &'static str, len: usize) -> Result<Buf<T>> {
        let Some(bytes) = padded_bytes::<T>(len) else {
            return Err(too_many_elements(op, len));
        };
        let b = if self.act.scratch.on {
            self.alloc_scratch(op, len, bytes)?
        } else {
            self.alloc_main(op, len)?
        };
        self.act.routable += bytes;
        Ok(b)
    }

    /// Like [`alloc_scratchable`](Self::alloc_scratchable), always from
    /// the bump arena: for values that cannot be recomputed (copies of
    /// caller data, random masks) and for a segment's outputs.
    // Inlined whole: a Result<Buf> returned through memory and reloaded
    // with wider loads stalled every op's output allocation.
    #[inline(always)]
    pub fn alloc_main<T: Plain>(&mut self, op: &'static str, len: usize) -> Result<Buf<T>> {
        // The errors are built out of line: their formatting would
        // otherwise widen the frame of every op that allocates.
        let Some(bytes) = padded_bytes::<T>(len) else {
            return Err(too_many_elements(op, len));
        };
        if bytes > self.limit.saturating_sub(self.act.used) {
            return Err(self.out_of_memory(op, bytes));
        }
        let Ok(layout) = Layout::from_size_align(bytes + CANARY, ALIGN) else {
            return Err(too_many_elements(op, len));
        };
        let Ok(raw) = self.act.bump.try_alloc_layout(layout) else {
            return Err(self.out_of_memory(op, bytes));
        };
        self.act.used += bytes;
        self.high_water = self.high_water.max(self.act.used);
        self.act.main_used += bytes + CANARY;
        self.act.main_high_water = self.act.main_high_water.max(self.act.main_used);
        let start = raw.as_ptr().addr();
        let inside = self
            .act
            .filled
            .is_some_and(|(lo, hi)| lo <= start && start + bytes <= hi);
        if !inside {
            // SAFETY: raw is a fresh, exclusive, ALIGN-aligned block of at
            // least `bytes` bytes; filling initialises every one of them.
            unsafe { std::ptr::write_bytes(raw.as_ptr(), FILL_BYTE, bytes) };
        }
        #[cfg(feature = "debug-arena")]
        self.plant_canary(op, raw, len * size_of::<T>(), bytes + CANARY);
        Ok(Buf {
            ptr: raw.cast(),
            len,
            epoch: self.epoch,
        })
    }

    /// Ends the iteration: every arena Buf becomes invalid. Keeps the arena's
    /// memory; if the iteration spilled into several chunks, replaces them by
    /// one chunk that holds the whole high-water mark, so the steady state
    /// makes no system allocation. That chunk is filled once here, so later
    /// iterations reuse initialised bytes without filling them again.
    pub fn reset(&mut self) {
        #[cfg(feature = "debug-arena")]
        let overrun = self.check_and_poison();
        self.fresh_epoch();
        let chunks = self.act.bump.iter_allocated_chunks().count();
        if chunks > 1 {
            // The chunk set changes: whatever was filled may be freed.
            self.act.filled = None;
            // Buffers are ALIGN-sized and ALIGN-aligned, but the chunk's end
            // (where the bump starts) may not be: the first buffer can lose
            // up to ALIGN - 1 bytes. Without this slack whether the
            // iteration fits depended on the address malloc returned.
            let want = (self.act.main_high_water + ALIGN).min(self.limit);
            let limit = self.act.bump.allocation_limit();
            if let Ok(b) = Bump::try_with_capacity(want) {
                self.act.bump = b;
            } else {
                self.act.bump.reset();
            }
            self.act.bump.set_allocation_limit(limit);
        } else {
            self.act.bump.reset();
        }
        self.fill_chunk();
        self.act.used = 0;
        self.act.main_used = 0;
        self.act.routable = 0;
        self.reset_scratch();
        #[cfg(feature = "debug-arena")]
        if let Some(msg) = overrun {
            panic!("{msg}");
        }
    }

    /// Makes sure every byte of the (freshly reset) current chunk is
    /// initialised, filling it the first time it is seen, and records its
    /// address range. Borrows the whole free space of the chunk for a moment
    /// to learn where it is, then resets the bump pointer again.
    fn fill_chunk(&mut self) {
        let cap = self.act.bump.chunk_capacity();
        let whole = Layout::from_size_align(cap, 1).ok().filter(|_| cap > 0);
        let Some(raw) = whole.and_then(|l| self.act.bump.try_alloc_layout(l).ok()) else {
            self.act.filled = None;
            return;
        };
        let range = (raw.as_ptr().addr(), raw.as_ptr().addr() + cap);
        if self.act.filled != Some(range) {
            // SAFETY: raw..raw+cap is the free space of the current chunk,
            // just handed to us exclusively; no Buf of this epoch exists.
            unsafe { std::ptr::write_bytes(raw.as_ptr(), FILL_BYTE, cap) };
            self.act.filled = Some(range);
        }
        self.act.bump.reset();
    }

    #[cold]
    #[inline(never)]
    fn out_of_memory(&self, op: &'static str, bytes: usize) -> Error {
        Error::OutOfMemory {
            op,
            needed: bytes,
            used: self.act.used,
            limit: self.limit,
        }
    }
}

//! The recompute scratch region: a recomputed segment's buffers come from
//! one region that every recomputed segment reuses from its start, so the
//! arena holds only the largest segment's internals at once.

use super::*;

impl Storage {
    /// A buffer of `len` elements (`bytes` padded) from the scratch region.
    /// `used` counts the region's largest pass; growing the region (warm-up
    /// iterations only) adds a chunk and keeps the old ones until reset.
    pub(super) fn alloc_scratch<T: Plain>(
        &mut self,
        op: &'static str,
        len: usize,
        bytes: usize,
    ) -> Result<Buf<T>> {
        let oom = |s: &Self| Error::OutOfMemory {
            op,
            needed: bytes,
            used: s.act.used,
            limit: s.limit,
        };
        let pass = self.act.scratch.pass + bytes;
        let grow = pass.saturating_sub(self.act.scratch.counted);
        if grow > self.limit.saturating_sub(self.act.used) {
            return Err(oom(self));
        }
        let sc = &mut self.act.scratch;
        let fits = |c: &PersistentBlock, off: usize| off + bytes <= c.layout.size();
        let mut at = None;
        if sc.chunk < sc.chunks.len() && fits(&sc.chunks[sc.chunk], sc.offset) {
            at = Some((sc.chunk, sc.offset));
        } else if let Some(i) = (sc.chunk + 1..sc.chunks.len()).find(|&i| fits(&sc.chunks[i], 0)) {
            at = Some((i, 0));
        }
        let (chunk, offset) = match at {
            Some(a) => a,
            None => {
                let have: usize = sc.chunks.iter().map(|c| c.layout.size()).sum();
                let size = bytes.max(have).max(MIN_SCRATCH_CHUNK);
                let layout = Layout::from_size_align(size, ALIGN).map_err(|_| oom(self))?;
                if self.act.scratch.chunks.try_reserve(1).is_err() {
                    return Err(oom(self));
                }
                // SAFETY: layout has a non-zero size (at least MIN_SCRATCH_CHUNK).
                let raw = unsafe { std::alloc::alloc_zeroed(layout) };
                let Some(ptr) = NonNull::new(raw) else {
                    return Err(oom(self));
                };
                #[cfg(feature = "debug-arena")]
                // SAFETY: ptr..ptr+size is the block just allocated.
                unsafe {
                    std::ptr::write_bytes(ptr.as_ptr(), FILL_BYTE, size)
                };
                self.act
                    .scratch
                    .chunks
                    .push(PersistentBlock { ptr, layout });
                (self.act.scratch.chunks.len() - 1, 0)
            }
        };
        let sc = &mut self.act.scratch;
        sc.chunk = chunk;
        sc.offset = offset + bytes;
        sc.pass = pass;
        sc.counted += grow;
        self.act.used += grow;
        self.high_water = self.high_water.max(self.act.used);
        // SAFETY: offset + bytes <= the chunk's size (checked or just made),
        // so the pointer stays inside the block, which is ALIGN-aligned as
        // are offsets (sums of padded sizes).
        let ptr = unsafe { NonNull::new_unchecked(sc.chunks[chunk].ptr.as_ptr().add(offset)) };
        Ok(Buf {
            ptr: ptr.cast(),
            len,
            epoch: self.epoch,
        })
    }

    /// Starts a pass over the scratch region: routable allocations come from
    /// its start until [`scratch_end`](Self::scratch_end). The buffers of the
    /// previous pass are overwritten by this one's (with `debug-arena` they
    /// are poisoned with NaN first, so a read of them shows).
    pub fn scratch_begin(&mut self) {
        let sc = &mut self.act.scratch;
        sc.chunk = 0;
        sc.offset = 0;
        sc.pass = 0;
        sc.on = true;
        #[cfg(feature = "debug-arena")]
        for c in &sc.chunks {
            // SAFETY: the chunk is owned here and no slice into it is alive
            // (&mut self).
            unsafe { std::ptr::write_bytes(c.ptr.as_ptr(), FILL_BYTE, c.layout.size()) };
        }
    }

    /// Ends the pass: allocations go to the bump arena again.
    pub fn scratch_end(&mut self) {
        self.act.scratch.on = false;
    }

    /// Whether `b` lies in the scratch region.
    pub fn in_scratch<T>(&self, b: Buf<T>) -> bool {
        let (start, _) = b.range();
        self.act.scratch.chunks.iter().any(|c| {
            let lo = c.ptr.as_ptr().addr();
            lo <= start && start < lo + c.layout.size()
        })
    }

    /// Padded bytes of every `alloc_scratchable` this iteration.
    pub fn routable_bytes(&self) -> usize {
        self.act.routable
    }

    /// The bytes `used` counts for the scratch region this iteration.
    pub fn scratch_bytes(&self) -> usize {
        self.act.scratch.counted
    }

    /// Padded size of `len` elements of T, as the arena counts it.
    pub fn padded_len<T>(len: usize) -> usize {
        padded_bytes::<T>(len).unwrap_or(usize::MAX)
    }

    /// Rewinds the scratch region; if the iteration grew it into several
    /// chunks, replaces them by one chunk of the largest pass, so the steady
    /// state makes no system allocation (if that allocation fails, the old
    /// chunks stay and serve as they did).
    pub(super) fn reset_scratch(&mut self) {
        let sc = &mut self.act.scratch;
        let want = sc.counted;
        sc.chunk = 0;
        sc.offset = 0;
        sc.pass = 0;
        sc.counted = 0;
        sc.on = false;
        if sc.chunks.len() <= 1 {
            return;
        }
        let Ok(layout) = Layout::from_size_align(want.max(ALIGN), ALIGN) else {
            return;
        };
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        if let Some(ptr) = NonNull::new(raw) {
            #[cfg(feature = "debug-arena")]
            // SAFETY: ptr..ptr+size is the block just allocated.
            unsafe {
                std::ptr::write_bytes(ptr.as_ptr(), FILL_BYTE, layout.size())
            };
            // The epoch was bumped: no Buf into the old chunks is usable.
            sc.chunks.clear();
            sc.chunks.push(PersistentBlock { ptr, layout });
        }
    }
}

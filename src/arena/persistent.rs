//! Persistent blocks: parameters, the one gradient block (which grows
//! geometrically while parameters are added and is trimmed once the model
//! is complete) and optimizer state, each 64-byte aligned and zeroed; with
//! fault injection, so tests can fail the k-th allocation.

use super::*;

impl Storage {
    /// Allocates a zero-filled persistent buffer (parameters, grads,
    /// optimizer state). Fails with AllocationFailed instead of aborting.
    pub fn alloc_persistent(&mut self, op: &'static str, len: usize) -> Result<Buf<f32>> {
        let bytes = padded_bytes::<f32>(len).ok_or_else(|| Error::TooLarge {
            op,
            what: format!("{len} elements do not fit in memory"),
        })?;
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|_| Error::AllocationFailed { op, bytes })?;
        self.fault.count += 1;
        let injected = self.fault.fail_at != 0
            && (self.fault.count == self.fault.fail_at
                || (self.fault.sticky && self.fault.count > self.fault.fail_at));
        self.persistent
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed { op, bytes })?;
        if injected {
            return Err(Error::AllocationFailed { op, bytes });
        }
        // SAFETY: layout has a non-zero size (padded_bytes is at least ALIGN).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::AllocationFailed { op, bytes })?;
        self.persistent.push(PersistentBlock { ptr, layout });
        self.persistent_bytes += bytes;
        Ok(Buf {
            ptr: ptr.cast(),
            len,
            epoch: 0,
        })
    }

    /// Makes room for `extra` more gradient floats at the end of the
    /// gradient block (zeros), growing it geometrically so that adding P
    /// parameters copies O(total) floats. When the block moves, every
    /// gradient `Buf` taken from [`Storage::grads`] before is dangling: the
    /// caller rebinds them all (see the module docs). On error nothing
    /// changes.
    pub fn grads_grow(&mut self, op: &'static str, extra: usize) -> Result<()> {
        let too_large = || Error::TooLarge {
            op,
            what: "the parameter gradients do not fit in memory".into(),
        };
        let need = self.grads_len.checked_add(extra).ok_or_else(too_large)?;
        if need > self.grads_cap {
            let cap = need.max(self.grads_cap.saturating_mul(2));
            let bytes = padded_bytes::<f32>(cap).ok_or_else(too_large)?;
            self.fault_point(op, bytes)?;
            self.grads_move(op, cap)?;
        }
        self.grads_len = need;
        Ok(())
    }

    /// Shrinks the gradient block to exactly the floats in use (called once
    /// the model is complete, when the optimizer is made), so geometric
    /// growth wastes nothing for the rest of the run. If the smaller block
    /// cannot be had, the larger one simply stays. Moves the block like
    /// [`Storage::grads_grow`]; returns whether it moved.
    pub fn grads_trim(&mut self) -> bool {
        let same = padded_bytes::<f32>(self.grads_len) == padded_bytes::<f32>(self.grads_cap);
        if self.grads.is_none() || same {
            return false;
        }
        self.grads_move("grads_trim", self.grads_len).is_ok()
    }

    /// Replaces the gradient block by a zeroed one of `cap` floats holding a
    /// copy of the `grads_len` floats in use.
    pub(super) fn grads_move(&mut self, op: &'static str, cap: usize) -> Result<()> {
        debug_assert!(cap >= self.grads_len);
        let bytes = padded_bytes::<f32>(cap).ok_or(Error::AllocationFailed { op, bytes: 0 })?;
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|_| Error::AllocationFailed { op, bytes })?;
        // SAFETY: layout has a non-zero size (padded_bytes is at least ALIGN).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::AllocationFailed { op, bytes })?;
        if let Some(old) = &self.grads {
            // SAFETY: the old block holds at least grads_len floats (its
            // capacity), the new one at least cap >= grads_len; two separate
            // allocations never overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    old.ptr.as_ptr().cast::<f32>(),
                    ptr.as_ptr().cast::<f32>(),
                    self.grads_len,
                )
            };
        }
        let old_bytes = self.grads.as_ref().map_or(0, |b| b.layout.size());
        self.grads = Some(PersistentBlock { ptr, layout });
        self.persistent_bytes = self.persistent_bytes - old_bytes + bytes;
        self.grads_cap = cap;
        Ok(())
    }

    /// The whole gradient block in use (`grads_len` floats), None before
    /// the first parameter. Sub-ranges of it are the parameters' gradients.
    pub fn grads(&self) -> Option<Buf<f32>> {
        let b = self.grads.as_ref()?;
        Some(Buf {
            ptr: b.ptr.cast(),
            len: self.grads_len,
            epoch: 0,
        })
    }

    /// The gradient block's address and length in floats, for the C
    /// boundary's zero-copy access (see the module docs); None before the
    /// first parameter.
    pub fn grads_ptr(&mut self) -> Option<(*mut f32, usize)> {
        let b = self.grads.as_ref()?;
        Some((b.ptr.as_ptr().cast::<f32>(), self.grads_len))
    }

    /// Counts one fallible persistent allocation and fails it if the fault
    /// injection says so (tests of allocation failure, SQLite style).
    pub fn fault_point(&mut self, op: &'static str, bytes: usize) -> Result<()> {
        let f = &mut self.fault;
        f.count += 1;
        let hit = f.fail_at != 0 && (f.count == f.fail_at || (f.sticky && f.count > f.fail_at));
        if hit {
            Err(Error::AllocationFailed { op, bytes })
        } else {
            Ok(())
        }
    }

    /// Frees every persistent block allocated after the first `keep`
    /// (used to roll back a half-built parameter or optimizer).
    pub fn truncate_persistent(&mut self, keep: usize) {
        while self.persistent.len() > keep {
            if let Some(b) = self.persistent.pop() {
                self.persistent_bytes -= b.layout.size();
            }
        }
    }

    pub fn persistent_blocks(&self) -> usize {
        self.persistent.len()
    }

    pub fn persistent_bytes(&self) -> usize {
        self.persistent_bytes
    }
}

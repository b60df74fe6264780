//! Checked access to tensor memory: the only functions that turn a [`Buf`]
//! into a slice. They rely on the invariant of the parent module: a `Buf`
//! is reached only under its own epoch (checked here on every access), and
//! `&mut Storage` means no other slice is alive, so the only overlap left to
//! rule out is within one call, which [`Storage::access_ids`] checks.

use super::*;

impl Storage {
    // Inlined with the access functions below: their buffer arrays then
    // stay in registers (passed through memory, every kernel call paid
    // store-forwarding stalls reloading them).
    #[inline(always)]
    fn check_live<T>(&self, b: &Buf<T>) {
        // A stale Buf here is an internal bug (handles are checked first);
        // refuse loudly rather than read recycled memory.
        assert!(
            b.epoch == 0 || b.epoch == self.epoch,
            "arena buffer used after reset"
        );
    }

    /// One writable slice.
    pub fn access_one<T: Plain>(&mut self, b: Buf<T>) -> &mut [T] {
        self.check_live(&b);
        // SAFETY: b is live (checked above, module invariant); &mut self
        // guarantees no other slice of this storage is alive.
        unsafe { std::slice::from_raw_parts_mut(b.ptr.as_ptr(), b.len) }
    }

    /// One read-only slice.
    pub fn read<T: Plain>(&self, b: Buf<T>) -> &[T] {
        self.check_live(&b);
        // SAFETY: b is live; a shared borrow of the storage means no writable
        // slice exists (those need &mut self).
        unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), b.len) }
    }

    /// `W` writable and `R` read-only slices at once, plus read-only id
    /// slices. Panics if a writable buffer overlaps any other buffer of the
    /// call (reads may overlap each other).
    #[inline(always)]
    pub fn access<const W: usize, const R: usize>(
        &mut self,
        w: [Buf; W],
        r: [Buf; R],
    ) -> ([&mut [f32]; W], [&[f32]; R]) {
        let (wm, rm, _) = self.access_ids::<W, R, 0>(w, r, []);
        (wm, rm)
    }

    /// Like [`access`](Self::access), with `I` read-only u32 buffers.
    #[inline(always)]
    pub fn access_ids<const W: usize, const R: usize, const I: usize>(
        &mut self,
        w: [Buf; W],
        r: [Buf; R],
        ids: [Buf<u32>; I],
    ) -> Slices<'_, W, R, I> {
        // Plain loops over the fixed-size arrays unroll into a few compares
        // per pair; an iterator chain here cost a dozen per pair.
        let disjoint = |(a0, a1): (usize, usize), (b0, b1): (usize, usize)| {
            assert!(
                a1 <= b0 || b1 <= a0,
                "writable buffer overlaps another buffer of the same kernel call"
            );
        };
        for i in 0..W {
            self.check_live(&w[i]);
            let a = w[i].range();
            for b in &w[i + 1..] {
                disjoint(a, b.range());
            }
            for b in &r {
                disjoint(a, b.range());
            }
            for b in &ids {
                disjoint(a, b.range());
            }
        }
        r.iter().for_each(|b| self.check_live(b));
        ids.iter().for_each(|b| self.check_live(b));
        // SAFETY: all buffers are live; writable ones are pairwise disjoint
        // and disjoint from the read-only ones (checked above), and &mut self
        // rules out slices from other calls.
        unsafe {
            (
                w.map(|b| std::slice::from_raw_parts_mut(b.ptr.as_ptr(), b.len)),
                r.map(|b| std::slice::from_raw_parts(b.ptr.as_ptr() as *const f32, b.len)),
                ids.map(|b| std::slice::from_raw_parts(b.ptr.as_ptr() as *const u32, b.len)),
            )
        }
    }

    /// A sub-range of a buffer (same memory, same lifetime rules).
    pub fn sub<T>(b: Buf<T>, start: usize, len: usize) -> Buf<T> {
        assert!(
            start.checked_add(len).is_some_and(|e| e <= b.len),
            "sub-buffer out of range"
        );
        // SAFETY: start + len <= b.len, so the pointer stays inside the block.
        let ptr = unsafe { NonNull::new_unchecked(b.ptr.as_ptr().add(start)) };
        Buf {
            ptr,
            len,
            epoch: b.epoch,
        }
    }
}

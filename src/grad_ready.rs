//! Gradient-ready notifications: during backward, tell the caller as soon
//! as a range of the gradient block (see [`crate::grads`]) holds its final
//! values, so a data-parallel caller can start reducing it while the rest of
//! backward runs (what PyTorch DDP's buckets do), without the library
//! knowing anything about the transport.
//!
//! The block is cut into buckets of whole parameters, from its end
//! backwards (the last parameters made are usually the last used in the
//! forward pass, hence the first whose gradients are final), each at least
//! `bucket_bytes` long (the first one may be shorter). A parameter's
//! gradient is final once the reverse walk has passed its first reader on
//! the tape (every op that reads it, or a view of it, comes later in
//! forward order, so its backward already ran); a bucket is final once all
//! of its parameters are. Parameters nothing reads are final from the start.
//! Recomputed segments do not change this: their replay runs forward
//! kernels only, and their ops keep their tape positions.
//!
//! Every successful backward reports every non-empty bucket exactly once,
//! in the order they become final, plus a tick after every tape position so
//! a caller whose transport needs to be driven (MPI without a progress
//! thread) can call it while backward runs. Gradient accumulation just
//! means several backward calls, each reporting the whole block again.
//!
//! Memory: the bucket layout and the per-parameter first readers live in
//! vectors reserved when a parameter is added or the callback is set, so a
//! backward never allocates here.

use crate::error::{Error, Result};

/// What a gradient-ready callback is told.
#[derive(Debug)]
pub enum GradEvent<'a> {
    /// Floats `first..first + grads.len()` of the gradient block are final
    /// for this backward; `grads` are those floats (the callback may read
    /// and write them: the library does not touch them again before
    /// backward returns).
    Ready { first: usize, grads: &'a mut [f32] },
    /// The walk passed one more tape position; nothing new is final.
    Tick,
}

/// A gradient-ready callback (see
/// [`Context::set_grad_ready`](crate::Context::set_grad_ready)).
pub type GradReadyFn = Box<dyn FnMut(GradEvent<'_>) + Send>;

/// `reads(i, f)` calls `f` with the root (the tensor a view is of, else
/// itself) of every input of the op at tape position `i`.
pub(crate) type TapeReads<'a> = dyn Fn(u32, &mut dyn FnMut(u32)) + 'a;

/// Tape position meaning "read by no op": final before the walk starts.
const UNREAD: u32 = u32::MAX;

/// The callback and its bookkeeping, owned by the context, which drives it
/// (`context/grad_ready.rs`) with what each call needs: the parameters'
/// sizes, the tape's reads and the gradient block.
#[derive(Default)]
pub(crate) struct GradReady {
    callback: Option<GradReadyFn>,
    /// Smallest bucket, in floats (at least 1).
    bucket_floats: usize,
    /// The parameter count `buckets` was cut for (it is cut again when
    /// parameters were added since).
    laid_out_for: usize,
    /// Bucket k holds parameters `buckets[k].0..buckets[k].1`; bucket 0 is
    /// at the end of the block.
    buckets: Vec<(u32, u32)>,
    /// Float offset of each parameter in the block, and one past the last.
    offsets: Vec<usize>,
    /// Per parameter, the tape position of its first reader (UNREAD if
    /// none); per bucket, the smallest over its parameters.
    first_reader: Vec<u32>,
    ready_at: Vec<u32>,
    /// Bucket indices in the order they become final, and how many of
    /// them were reported in the current walk.
    order: Vec<u32>,
    next: usize,
}

impl GradReady {
    pub(crate) fn idle(&self) -> bool {
        self.callback.is_none()
    }

    /// Sets (or, with None, removes) the callback and the smallest bucket;
    /// the buckets are cut again at the next walk.
    pub(crate) fn set(&mut self, bucket_bytes: usize, callback: Option<GradReadyFn>) {
        self.callback = callback;
        self.bucket_floats = bucket_bytes.div_ceil(4).max(1);
        self.laid_out_for = usize::MAX;
    }

    /// Reserves room for `params` parameters (at most as many buckets), so
    /// no later layout or walk allocates.
    pub(crate) fn reserve(&mut self, op: &'static str, params: usize) -> Result<()> {
        let fail = |_| Error::AllocationFailed {
            op,
            bytes: params.saturating_mul(24),
        };
        self.buckets
            .try_reserve(params.saturating_sub(self.buckets.len()))
            .map_err(fail)?;
        self.offsets
            .try_reserve((params + 1).saturating_sub(self.offsets.len()))
            .map_err(fail)?;
        self.first_reader
            .try_reserve(params.saturating_sub(self.first_reader.len()))
            .map_err(fail)?;
        self.ready_at
            .try_reserve(params.saturating_sub(self.ready_at.len()))
            .map_err(fail)?;
        self.order
            .try_reserve(params.saturating_sub(self.order.len()))
            .map_err(fail)
    }

    /// Cuts the block into buckets, from the last of `sizes.len()`
    /// parameters backwards (within reserved capacity: allocates nothing).
    fn lay_out(&mut self, sizes: &dyn Fn(u32) -> usize, n: usize) {
        if self.laid_out_for == n && self.offsets.len() == n + 1 {
            return;
        }
        self.offsets.clear();
        let mut at = 0;
        for p in 0..n as u32 {
            self.offsets.push(at);
            at += sizes(p);
        }
        self.offsets.push(at);
        self.buckets.clear();
        let mut hi = n as u32;
        while hi > 0 {
            let mut lo = hi - 1;
            while lo > 0
                && self.offsets[hi as usize] - self.offsets[lo as usize] < self.bucket_floats
            {
                lo -= 1;
            }
            self.buckets.push((lo, hi));
            hi = lo;
        }
        self.laid_out_for = n;
    }

    /// Before a walk over `tape_len` ops of a context with `n_params`
    /// parameters (`sizes(p)` floats each), whose reads are `reads` (see
    /// [`TapeReads`]): finds each parameter's first reader
    /// and the order buckets become final in. False when no callback is
    /// set (nothing to do).
    pub(crate) fn start(
        &mut self,
        n_params: usize,
        sizes: &dyn Fn(u32) -> usize,
        tape_len: u32,
        reads: &TapeReads<'_>,
    ) -> bool {
        self.next = 0;
        if self.callback.is_none() {
            return false;
        }
        self.lay_out(sizes, n_params);
        let n_params = n_params as u32;
        self.first_reader.clear();
        self.first_reader.resize(n_params as usize, UNREAD);
        for i in 0..tape_len {
            let first_reader = &mut self.first_reader;
            reads(i, &mut |root| {
                if root < n_params && first_reader[root as usize] == UNREAD {
                    first_reader[root as usize] = i;
                }
            });
        }
        self.ready_at.clear();
        self.order.clear();
        for (k, &(lo, hi)) in self.buckets.iter().enumerate() {
            let at = self.first_reader[lo as usize..hi as usize]
                .iter()
                .min()
                .copied()
                .unwrap_or(UNREAD);
            self.ready_at.push(at);
            self.order.push(k as u32);
        }
        // Latest position first (the walk goes backwards); ties in bucket
        // order. Keys are unique, so the unstable sort (which never
        // allocates) is deterministic.
        let ready_at = &self.ready_at;
        self.order
            .sort_unstable_by_key(|&k| (std::cmp::Reverse(ready_at[k as usize]), k));
        true
    }

    /// The walk finished tape position `at` (or, with `at == None`, is
    /// about to start): reports every bucket final from there, its floats
    /// from `block` (the gradient block, None when there is none), then a
    /// tick.
    pub(crate) fn passed(&mut self, block: Option<&mut [f32]>, at: Option<u32>) {
        let Some(cb) = self.callback.as_mut() else {
            return;
        };
        let Some(block) = block else {
            return;
        };
        let pos = at.unwrap_or(UNREAD);
        while let Some(&k) = self.order.get(self.next) {
            if self.ready_at[k as usize] < pos {
                break;
            }
            self.next += 1;
            let (lo, hi) = self.buckets[k as usize];
            let (first, end) = (self.offsets[lo as usize], self.offsets[hi as usize]);
            if end > first {
                let grads = &mut block[first..end];
                cb(GradEvent::Ready { first, grads });
            }
        }
        if at.is_some() {
            cb(GradEvent::Tick);
        }
    }
}

#[cfg(test)]
mod tests;

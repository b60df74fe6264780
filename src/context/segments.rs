//! Recomputation segments, the context's side: the calls that open and
//! close a segment and read its figures. The segments themselves, the
//! policy and the cost model live in `crate::recompute`, which takes what
//! it needs of the tape, the table and the arena as arguments.

use super::{Context, Tensor};
use crate::arena::Storage;
use crate::error::{Error, Result};
use crate::recompute::{MAX_SEGMENT_OUTPUTS, RecomputePolicy, RecomputeStats, SegmentMark};

impl Context {
    /// Sets which segments are recomputed from the next segment on
    /// (default [`RecomputePolicy::None`]).
    pub fn set_recompute(&mut self, policy: RecomputePolicy) {
        self.rc_mut().set_policy(policy);
    }

    pub fn recompute_policy(&self) -> RecomputePolicy {
        self.rc().policy()
    }

    /// Where the tape, the table and the routable arena bytes stand now.
    fn segment_mark(&self) -> SegmentMark {
        SegmentMark {
            first_op: self.tape_len() as u32,
            first_tensor: self.live_tensors() as u32,
            routable_bytes: self.routable_bytes(),
            grad_enabled: self.grad_enabled(),
        }
    }

    /// Starts a segment: the ops recorded until [`segment_end`] may be
    /// recomputed during backward instead of keeping their activations (see
    /// [`set_recompute`]). Segments do not nest: SEQUENCE while one is open.
    ///
    /// [`segment_end`]: Self::segment_end
    /// [`set_recompute`]: Self::set_recompute
    pub fn segment_begin(&mut self) -> Result<()> {
        const OP: &str = "segment_begin";
        self.check_not_resident(OP)?;
        self.rc().check_can_begin(OP)?;
        if let Some(bytes) = self.rc().growth_bytes() {
            self.fault_point(OP, bytes)?;
        }
        let limit = self.arena_stats().limit;
        let mark = self.segment_mark();
        let recompute = self
            .rc_mut()
            .begin(OP, mark, (limit != 0).then_some(limit))?;
        if recompute {
            self.scratch_begin();
        }
        Ok(())
    }

    /// Ends the open segment. `outputs` (1 to [`MAX_SEGMENT_OUTPUTS`]) are
    /// the tensors made inside it that are used after it: they stay valid
    /// (a recomputed segment copies them into the arena). Every other tensor
    /// made inside the segment is private to it from now on: its handle is
    /// refused (STALE_HANDLE). Outputs made before the segment are allowed
    /// and left alone. SEQUENCE if no segment is open; on OUT_OF_MEMORY
    /// (copying an output) the segment stays open.
    pub fn segment_end(&mut self, outputs: &[Tensor]) -> Result<()> {
        const OP: &str = "segment_end";
        let seg = self.rc().open_segment(OP)?;
        if outputs.is_empty() || outputs.len() > MAX_SEGMENT_OUTPUTS {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} outputs; a segment declares 1 to {MAX_SEGMENT_OUTPUTS}",
                    outputs.len()
                ),
            });
        }
        let mut ids = [u32::MAX; MAX_SEGMENT_OUTPUTS];
        for (slot, &t) in ids.iter_mut().zip(outputs) {
            *slot = self.resolve(OP, t)?;
        }
        let ids = &ids[..outputs.len()];
        let end_tensor = self.live_tensors() as u32;
        let inside = |id: u32| id >= seg.first_tensor && id < end_tensor;
        // The outputs' own buffers, once each (a view shares its base's).
        let mut roots = [u32::MAX; MAX_SEGMENT_OUTPUTS];
        let mut n_roots = 0;
        for &id in ids {
            let root = self.entry(id).view_of.unwrap_or(id);
            if inside(root) && !roots.contains(&root) {
                roots[n_roots] = root;
                n_roots += 1;
            }
        }
        let mut kept = 0;
        for &root in &roots[..n_roots] {
            let e = self.entry(root);
            // What recomputation would copy: the routable outputs (those
            // that need a gradient, or all with grad mode off).
            if e.requires_grad || !seg.grad_enabled {
                kept += Storage::padded_len::<f32>(e.shape.numel());
            }
            if !seg.recompute || !self.in_scratch(e.data) {
                continue;
            }
            let copy = self.alloc_main::<f32>(OP, e.shape.numel())?;
            let ([dst], [src]) = self.access([copy], [e.data]);
            dst.copy_from_slice(src);
            for i in seg.first_tensor..end_tensor {
                let t = self.entry_mut(i);
                if i == root || t.view_of == Some(root) {
                    t.data = copy;
                }
            }
        }
        if seg.recompute {
            self.scratch_end();
        }
        let end = self.segment_mark();
        self.rc_mut().end(ids, end, kept);
        Ok(())
    }

    /// Refuses backward while a segment is open.
    pub(crate) fn check_no_open_segment(&self, op: &'static str) -> Result<()> {
        self.rc().check_none_open(op)
    }

    pub(crate) fn recompute_stats(&self) -> RecomputeStats {
        self.rc().stats(
            self.backward_done(),
            self.arena_stats().used,
            self.scratch_bytes(),
        )
    }
}

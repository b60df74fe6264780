//! Recomputation segments: train within a memory budget by keeping fewer
//! activations.
//!
//! A segment is a stretch of ops (a transformer block) between
//! [`Context::segment_begin`] and [`Context::segment_end`]. When the segment
//! is recomputed, the buffers of its ops (outputs that need a gradient and
//! the values saved for backward) come from one scratch region that every
//! recomputed segment reuses from its start; only the segment's declared
//! outputs are copied back into the arena at its end. During backward,
//! just before the segment's first backward op, its recorded ops are run
//! again through the forward dispatch, into the very buffers of the first
//! run, and its backward follows. The replay runs the same kernels on the
//! same inputs (the segment's inputs live outside the scratch region, and
//! values an op cannot recompute — token ids, targets, dropout masks of a
//! seed passed by value — are kept in the arena; a seeded dropout redraws
//! its mask from its seed slot), so every replayed value, and every gradient,
//! is bit-identical to a run without recomputation. The replay runs only
//! the ops whose values some backward reads (directly, or through an op that
//! is replayed): in a transformer block the two products whose only
//! consumer is a residual add are not run again.
//!
//! After `segment_end`, a handle to a tensor made inside the segment and not
//! listed as an output is refused (STALE_HANDLE, naming the segment), under
//! every policy: whether a program works never depends on which segments
//! the policy picked.
//!
//! The cost model is exact because the arena only grows within an
//! iteration: its high-water is the sum of what was handed out. With
//! `internal[s]` the bytes a segment's routable allocations take and
//! `kept[s]` those of its outputs among them, recomputing the set R needs
//! `base + sum(internal[s], s not in R) + sum(kept[s], s in R) +
//! max(internal[s], s in R)` bytes, the last term being the scratch region.
//! The sizes are measured in every iteration that reaches backward; the
//! next iteration's choice (policy `auto`) comes from them, so it does not
//! change while the graph repeats.

use crate::arena::Storage;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};

/// Most outputs one segment declares (held inline, so no allocation).
pub const MAX_SEGMENT_OUTPUTS: usize = 8;

/// Which segments a context recomputes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecomputePolicy {
    /// None: every activation is kept (segments only mark their internal
    /// tensors as private).
    #[default]
    None,
    /// Every segment.
    All,
    /// Under an arena cap, the fewest segments that make the iteration fit,
    /// the largest saving first, chosen from the previous iteration's
    /// measured sizes (every segment in the first iteration with a cap, as
    /// nothing is measured yet). Without a cap, none.
    Auto,
}

/// One segment of the current iteration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    /// Tape positions [first_op, end_op) and table rows
    /// [first_tensor, end_tensor) made inside the segment.
    first_op: u32,
    end_op: u32,
    first_tensor: u32,
    end_tensor: u32,
    outputs: [u32; MAX_SEGMENT_OUTPUTS],
    n_outputs: u8,
    recompute: bool,
    /// Routable bytes allocated inside (what recomputation moves to the
    /// scratch region), and those of them that hold outputs.
    internal: usize,
    kept: usize,
    /// `Storage::routable_bytes` at segment_begin.
    routable_at_begin: usize,
    /// Grad mode at segment_begin: with it off, every output is routable.
    grad_enabled: bool,
}

impl Segment {
    fn is_output(&self, id: u32) -> bool {
        self.outputs[..self.n_outputs as usize].contains(&id)
    }
}

/// A context's segments, policy and measurements.
#[derive(Debug, Default)]
pub(crate) struct Recompute {
    policy: RecomputePolicy,
    /// Ended segments of this iteration, in order (capacity kept).
    segments: Vec<Segment>,
    open: Option<Segment>,
    /// Measured in the last iteration that reached backward: per segment
    /// (internal, kept), and the bytes outside every segment's buffers.
    measured: Vec<(usize, usize)>,
    base: usize,
    has_measure: bool,
    /// Per segment index, the choice of `auto` for this iteration.
    chosen: Vec<bool>,
    /// Per op of the segment being replayed: its values are needed.
    needed: Vec<bool>,
}

impl Recompute {
    /// Called by Context::reset before the arena is recycled: keeps the
    /// measurements of a complete iteration (`used` and `scratch` are the
    /// arena's bytes of the iteration and the scratch region's share).
    pub(crate) fn end_iteration(&mut self, complete: bool, used: usize, scratch: usize) {
        if complete && self.open.is_none() {
            let mut base = used.saturating_sub(scratch);
            self.measured.clear();
            for s in &self.segments {
                base = base.saturating_sub(if s.recompute { s.kept } else { s.internal });
                // Capacity grows in warm-up iterations only.
                self.measured.push((s.internal, s.kept));
            }
            self.base = base;
            self.has_measure = true;
        }
        self.segments.clear();
        self.open = None;
    }

    /// Arena bytes an iteration needs when the segments in `pick` (by index)
    /// are recomputed, from the measurements (the same sums as
    /// `recompute_stats` makes over the current iteration).
    fn need(&self, pick: impl Fn(usize) -> bool) -> usize {
        let mut total = self.base;
        let mut scratch = 0;
        for (i, &(internal, kept)) in self.measured.iter().enumerate() {
            if pick(i) {
                total += kept;
                scratch = scratch.max(internal);
            } else {
                total += internal;
            }
        }
        total + scratch
    }

    /// The `auto` choice under `limit` bytes: segments are added, largest
    /// saving (internal - kept) first and the earlier one on ties, until the
    /// iteration fits; every segment if even that does not fit.
    fn choose(&mut self, limit: usize) {
        let n = self.measured.len();
        self.chosen.clear();
        self.chosen.resize(n, false);
        if self.need(|_| false) <= limit {
            return;
        }
        for _ in 0..n {
            let mut best: Option<usize> = None;
            for i in (0..n).filter(|&i| !self.chosen[i]) {
                let save = |j: usize| self.measured[j].0.saturating_sub(self.measured[j].1);
                if best.is_none_or(|b| save(i) > save(b)) {
                    best = Some(i);
                }
            }
            let Some(b) = best else { break };
            self.chosen[b] = true;
            let chosen = &self.chosen;
            if self.need(|i| chosen[i]) <= limit {
                return;
            }
        }
    }

    /// Whether segment `index` of this iteration is recomputed.
    fn recomputes(&mut self, index: usize, limit: Option<usize>) -> bool {
        match self.policy {
            RecomputePolicy::None => false,
            RecomputePolicy::All => true,
            RecomputePolicy::Auto => {
                let Some(limit) = limit else {
                    return false;
                };
                if index == 0 && self.has_measure {
                    self.choose(limit);
                }
                if self.has_measure && index < self.chosen.len() {
                    self.chosen[index]
                } else {
                    // Nothing measured for this segment: fit first.
                    true
                }
            }
        }
    }

    pub(crate) fn segments_len(&self) -> usize {
        self.segments.len()
    }

    /// Ended segment `k`: its tape positions [first, end) and whether it is
    /// recomputed.
    pub(crate) fn span(&self, k: usize) -> (u32, u32, bool) {
        let s = &self.segments[k];
        (s.first_op, s.end_op, s.recompute)
    }

    /// The per-op "replay needed" scratch (capacity kept across replays);
    /// give it back with [`put_needed`](Self::put_needed).
    pub(crate) fn take_needed(&mut self) -> Vec<bool> {
        std::mem::take(&mut self.needed)
    }

    pub(crate) fn put_needed(&mut self, needed: Vec<bool>) {
        self.needed = needed;
    }

    /// This iteration's ended segments (a captured step keeps a copy).
    pub(crate) fn segments_snapshot(&self) -> &[Segment] {
        &self.segments
    }

    /// Makes `segments` this iteration's (a captured step's, when it
    /// becomes the current iteration; none when it stops being it), with
    /// no segment open. Measurements are left alone.
    pub(crate) fn set_segments(&mut self, segments: &[Segment]) {
        self.segments.clear();
        self.segments.extend_from_slice(segments);
        self.open = None;
    }

    /// The segment whose internal tensors include table row `id`, if that
    /// row is not one of its outputs.
    pub(crate) fn sealed(&self, id: u32) -> Option<usize> {
        let k = self.segments.partition_point(|s| s.first_tensor <= id);
        let s = self.segments.get(k.checked_sub(1)?)?;
        (id < s.end_tensor && !s.is_output(id)).then_some(k - 1)
    }
}

/// Segment figures reported by `memory_stats`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecomputeStats {
    pub segments: usize,
    pub recomputed: usize,
    pub saved: usize,
    pub need_none: usize,
    pub need_all: usize,
}

impl Context {
    /// Sets which segments are recomputed from the next segment on
    /// (default [`RecomputePolicy::None`]).
    pub fn set_recompute(&mut self, policy: RecomputePolicy) {
        self.rc_mut().policy = policy;
    }

    pub fn recompute_policy(&self) -> RecomputePolicy {
        self.rc().policy
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
        if self.rc().open.is_some() {
            return Err(Error::Sequence {
                op: OP,
                what: format!(
                    "segment {} is still open: segments do not nest (call ag_segment_end first)",
                    self.rc().segments.len()
                ),
            });
        }
        let index = self.rc().segments.len();
        if index == self.rc().segments.capacity() {
            // Growing the list (warm-up iterations only) is an allocation
            // the fault-injection tests may fail.
            let bytes = size_of::<Segment>() * (index + 1);
            self.fault_point(OP, bytes)?;
            self.rc_mut()
                .segments
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed { op: OP, bytes })?;
        }
        let limit = self.arena_stats().limit;
        let recompute = self
            .rc_mut()
            .recomputes(index, (limit != 0).then_some(limit));
        let (first_op, first_tensor) = (self.tape_len() as u32, self.live_tensors() as u32);
        self.rc_mut().open = Some(Segment {
            first_op,
            end_op: first_op,
            first_tensor,
            end_tensor: first_tensor,
            outputs: [u32::MAX; MAX_SEGMENT_OUTPUTS],
            n_outputs: 0,
            recompute,
            internal: 0,
            kept: 0,
            routable_at_begin: self.routable_bytes(),
            grad_enabled: self.grad_enabled(),
        });
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
        let Some(mut seg) = self.rc().open else {
            return Err(Error::Sequence {
                op: OP,
                what: "no segment is open (call ag_segment_begin first)".into(),
            });
        };
        if outputs.is_empty() || outputs.len() > MAX_SEGMENT_OUTPUTS {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} outputs; a segment declares 1 to {MAX_SEGMENT_OUTPUTS}",
                    outputs.len()
                ),
            });
        }
        for (slot, &t) in seg.outputs.iter_mut().zip(outputs) {
            *slot = self.resolve(OP, t)?;
        }
        seg.n_outputs = outputs.len() as u8;
        seg.end_tensor = self.live_tensors() as u32;
        let inside = |id: u32| id >= seg.first_tensor && id < seg.end_tensor;
        // The outputs' own buffers, once each (a view shares its base's).
        let mut roots = [u32::MAX; MAX_SEGMENT_OUTPUTS];
        let mut n_roots = 0;
        for &id in &seg.outputs[..outputs.len()] {
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
            for i in seg.first_tensor..seg.end_tensor {
                let t = self.entry_mut(i);
                if i == root || t.view_of == Some(root) {
                    t.data = copy;
                }
            }
        }
        if seg.recompute {
            self.scratch_end();
        }
        seg.kept = kept;
        seg.internal = self.routable_bytes() - seg.routable_at_begin;
        seg.end_op = self.tape_len() as u32;
        self.rc_mut().segments.push(seg);
        self.rc_mut().open = None;
        Ok(())
    }

    /// Refuses backward while a segment is open.
    pub(crate) fn check_no_open_segment(&self, op: &'static str) -> Result<()> {
        match self.rc().open {
            Some(_) => Err(Error::Sequence {
                op,
                what: format!(
                    "segment {} is still open (call ag_segment_end before ag_backward)",
                    self.rc().segments.len()
                ),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn recompute_stats(&self) -> RecomputeStats {
        let r = self.rc();
        let recomputed = r.segments.iter().filter(|s| s.recompute);
        let moved: usize = recomputed
            .clone()
            .map(|s| s.internal.saturating_sub(s.kept))
            .sum();
        let (need_none, need_all) = if self.backward_done() && r.open.is_none() {
            // This iteration's own figures, as the next reset will keep them.
            let mut base = self.arena_stats().used - self.scratch_bytes();
            let (mut internal, mut kept, mut largest) = (0, 0, 0);
            for s in &r.segments {
                base = base.saturating_sub(if s.recompute { s.kept } else { s.internal });
                internal += s.internal;
                kept += s.kept;
                largest = largest.max(s.internal);
            }
            (base + internal, base + kept + largest)
        } else if r.has_measure {
            (r.need(|_| false), r.need(|_| true))
        } else {
            (0, 0)
        };
        RecomputeStats {
            segments: r.segments.len(),
            recomputed: recomputed.count(),
            saved: moved.saturating_sub(self.scratch_bytes()),
            need_none,
            need_all,
        }
    }
}

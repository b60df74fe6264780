//! Recomputation segments: train within a memory budget by keeping fewer
//! activations.
//!
//! A segment is a stretch of ops (a transformer block) between
//! `Context::segment_begin` and `Context::segment_end`. When the segment
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

    pub(crate) fn set_policy(&mut self, policy: RecomputePolicy) {
        self.policy = policy;
    }

    pub(crate) fn policy(&self) -> RecomputePolicy {
        self.policy
    }

    /// SEQUENCE for `segment_begin` while a segment is open.
    pub(crate) fn check_can_begin(&self, op: &'static str) -> Result<()> {
        if self.open.is_some() {
            return Err(Error::Sequence {
                op,
                what: format!(
                    "segment {} is still open: segments do not nest (call ag_segment_end first)",
                    self.segments.len()
                ),
            });
        }
        Ok(())
    }

    /// The bytes the segment list grows to when one more segment does not
    /// fit its capacity (warm-up iterations only), an allocation the
    /// fault-injection tests may fail; None when it fits.
    pub(crate) fn growth_bytes(&self) -> Option<usize> {
        let index = self.segments.len();
        (index == self.segments.capacity()).then(|| size_of::<Segment>() * (index + 1))
    }

    /// Opens the next segment at `start` (the caller checked
    /// [`check_can_begin`](Self::check_can_begin) and passed the fault
    /// point of [`growth_bytes`](Self::growth_bytes)); returns whether it
    /// is recomputed. `arena_limit` is the arena's cap, if any.
    pub(crate) fn begin(
        &mut self,
        op: &'static str,
        start: SegmentMark,
        arena_limit: Option<usize>,
    ) -> Result<bool> {
        let index = self.segments.len();
        if let Some(bytes) = self.growth_bytes() {
            self.segments
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed { op, bytes })?;
        }
        let recompute = self.recomputes(index, arena_limit);
        self.open = Some(Segment {
            first_op: start.first_op,
            end_op: start.first_op,
            first_tensor: start.first_tensor,
            end_tensor: start.first_tensor,
            outputs: [u32::MAX; MAX_SEGMENT_OUTPUTS],
            n_outputs: 0,
            recompute,
            internal: 0,
            kept: 0,
            routable_at_begin: start.routable_bytes,
            grad_enabled: start.grad_enabled,
        });
        Ok(recompute)
    }

    /// The open segment, for `segment_end` (SEQUENCE if none is open).
    pub(crate) fn open_segment(&self, op: &'static str) -> Result<OpenSegment> {
        match self.open {
            Some(s) => Ok(OpenSegment {
                first_tensor: s.first_tensor,
                recompute: s.recompute,
                grad_enabled: s.grad_enabled,
            }),
            None => Err(Error::Sequence {
                op,
                what: "no segment is open (call ag_segment_begin first)".into(),
            }),
        }
    }

    /// Ends the open segment (the caller copied its outputs out of the
    /// scratch region): `outputs` are its declared outputs' table rows,
    /// `end` where the tape, table and routable bytes stand now (after the
    /// scratch region closed), `kept` the bytes of its routable outputs.
    pub(crate) fn end(&mut self, outputs: &[u32], end: SegmentMark, kept: usize) {
        let Some(mut seg) = self.open.take() else {
            return;
        };
        seg.outputs[..outputs.len()].copy_from_slice(outputs);
        seg.n_outputs = outputs.len() as u8;
        seg.end_tensor = end.first_tensor;
        seg.end_op = end.first_op;
        seg.kept = kept;
        seg.internal = end.routable_bytes - seg.routable_at_begin;
        // Capacity was reserved by begin.
        self.segments.push(seg);
    }

    /// Refuses backward while a segment is open.
    pub(crate) fn check_none_open(&self, op: &'static str) -> Result<()> {
        match self.open {
            Some(_) => Err(Error::Sequence {
                op,
                what: format!(
                    "segment {} is still open (call ag_segment_end before ag_backward)",
                    self.segments.len()
                ),
            }),
            None => Ok(()),
        }
    }

    /// The segment figures of `memory_stats`. `backward_done`: this
    /// iteration's backward ran; `used` and `scratch`: the arena's bytes
    /// of this iteration and the scratch region's share.
    pub(crate) fn stats(&self, backward_done: bool, used: usize, scratch: usize) -> RecomputeStats {
        let recomputed = self.segments.iter().filter(|s| s.recompute);
        let moved: usize = recomputed
            .clone()
            .map(|s| s.internal.saturating_sub(s.kept))
            .sum();
        let (need_none, need_all) = if backward_done && self.open.is_none() {
            // This iteration's own figures, as the next reset will keep them.
            let mut base = used - scratch;
            let (mut internal, mut kept, mut largest) = (0, 0, 0);
            for s in &self.segments {
                base = base.saturating_sub(if s.recompute { s.kept } else { s.internal });
                internal += s.internal;
                kept += s.kept;
                largest = largest.max(s.internal);
            }
            (base + internal, base + kept + largest)
        } else if self.has_measure {
            (self.need(|_| false), self.need(|_| true))
        } else {
            (0, 0)
        };
        RecomputeStats {
            segments: self.segments.len(),
            recomputed: recomputed.count(),
            saved: moved.saturating_sub(scratch),
            need_none,
            need_all,
        }
    }
}

/// Where the tape, the table and the arena's routable bytes stand when a
/// segment begins or ends, and the grad mode then.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegmentMark {
    pub first_op: u32,
    pub first_tensor: u32,
    pub routable_bytes: usize,
    pub grad_enabled: bool,
}

/// What `segment_end` reads of the open segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpenSegment {
    pub first_tensor: u32,
    pub recompute: bool,
    pub grad_enabled: bool,
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

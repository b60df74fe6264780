//! Planned memory for activation gradients.
//!
//! When backward starts the tape is complete, so the lifetime of every
//! activation gradient is known. Walking the tape in reverse, the gradient
//! of tensor `x` is first written by the backward of the last op that read
//! `x` (its last consumer in forward order) and last read by the backward of
//! the op that produced `x`. With tape positions as time, `x`'s gradient is
//! alive over the closed interval `[producer, last consumer]`; two gradients
//! whose intervals are disjoint can share memory.
//!
//! The plan gives every such gradient an offset in one region so that
//! gradients alive at the same time never overlap, using the classic greedy
//! heuristic: place the largest first, each at the lowest offset that does
//! not collide with an already placed gradient whose interval intersects
//! its own. The intervals are the plan's key: while the next backward
//! produces the same intervals (the same graph, shapes and retained set),
//! the cached offsets are reused, and building the key reuses the vectors'
//! capacity, so a steady-state backward plans nothing and allocates nothing.
//!
//! Reshape views share their base's gradient: a view's consumers count as
//! consumers of its base. The loss's gradient, and the gradient of every
//! tensor whose gradient the caller asked to keep, is alive from before the
//! walk (position `tape.len()`) to its producer, so nothing else reuses it.

use crate::tape::Node;

/// Padding of every planned gradient, in f32 elements: 64 bytes, the arena's
/// alignment, so every gradient starts on a cache line.
const PAD: usize = crate::arena::ALIGN / size_of::<f32>();

/// A tape position that no op has (no producer, or no consumer yet).
const NONE: u32 = u32::MAX;

/// One gradient to place: tensor `id` of `len` floats, alive from tape
/// position `hi` (first written, or `tape.len()` for one alive from the
/// start) down to position `lo` (its producer's backward, the last reader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life {
    pub id: u32,
    pub lo: u32,
    pub hi: u32,
    pub len: usize,
}

impl Life {
    fn padded(&self) -> usize {
        self.len.div_ceil(PAD).max(1) * PAD
    }

    fn overlaps_in_time(&self, o: &Life) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }
}

/// What the plan needs of a table row.
pub(crate) struct Row {
    /// The tensor this row is a view of, if it is one.
    pub view_of: Option<u32>,
    pub requires_grad: bool,
    /// The caller keeps this row's gradient to the end of the walk.
    pub retain: bool,
    /// Floats in the row's tensor.
    pub len: usize,
}

/// The cached plan and the scratch used to build it (capacity kept).
#[derive(Default)]
pub(crate) struct GradPlan {
    /// The lifetimes the offsets were computed for, in table order.
    lives: Vec<Life>,
    /// Offset (f32 elements) of each of `lives` in the region.
    offsets: Vec<usize>,
    /// Indices into `lives` by decreasing birth position: the order in
    /// which the walk zeroes gradients before their first write.
    births: Vec<u32>,
    /// Region size in f32 elements.
    total: usize,
    /// Lifetimes of the current backward, compared with `lives`.
    next: Vec<Life>,
    /// Scratch: producer and last consumer position per table row.
    lo: Vec<u32>,
    hi: Vec<u32>,
    /// Scratch for solving: placement order, and placed (offset, end, life)
    /// kept sorted by offset.
    order: Vec<u32>,
    placed: Vec<(usize, usize, Life)>,
    /// How many times offsets were computed (tests check the cache).
    pub(crate) solves: u64,
}

impl GradPlan {
    /// Computes the gradient lifetimes of a backward from `loss` over
    /// `tape` and a table of `rows` rows (`row(id)` describes one) and, if
    /// they differ from the cached ones, a new placement. Rows before
    /// `n_params` are parameters (persistent gradients, not planned); a row
    /// with `retain` set keeps its gradient to the end of the walk.
    pub(crate) fn prepare(
        &mut self,
        tape: &[Node],
        rows: usize,
        n_params: usize,
        loss: u32,
        row: &dyn Fn(u32) -> Row,
    ) {
        let n = tape.len() as u32;
        self.lo.clear();
        self.lo.resize(rows, NONE);
        self.hi.clear();
        self.hi.resize(rows, NONE);
        // Slices held for the whole pass: their lengths are loaded once.
        let (lo, hi) = (&mut self.lo[..], &mut self.hi[..]);
        // Positions only grow: the first writer of `lo` and the last of
        // `hi` win. A view's consumers are folded into its base below.
        for (i, node) in (0..n).zip(tape) {
            let out = node.out as usize;
            if lo[out] == NONE {
                lo[out] = i;
            }
            node.op.for_each_input(|x| hi[x as usize] = i);
        }
        let root = row(loss).view_of.unwrap_or(loss) as usize;
        hi[root] = n;
        // Rows in reverse, so every view (made after its base) is folded
        // into its base before the base is reached. Each lifetime is
        // compared with the cached one as it is made: while they match
        // (every steady-state backward) nothing is copied.
        let mut same = 0;
        let mut differ = false;
        self.next.clear();
        for id in (n_params..rows).rev() {
            let e = row(id as u32);
            if let Some(r) = e.view_of {
                let (h, r) = (hi[id], r as usize);
                if h != NONE && (hi[r] == NONE || hi[r] < h) {
                    hi[r] = h;
                }
                continue;
            }
            if !e.requires_grad {
                continue;
            }
            let last = if e.retain { n } else { hi[id] };
            if last == NONE {
                // Nothing ever writes this gradient: no memory for it.
                continue;
            }
            let first = if lo[id] == NONE { 0 } else { lo[id] };
            let life = Life {
                id: id as u32,
                lo: first.min(last),
                hi: last,
                len: e.len,
            };
            if !differ {
                if self.lives.get(same) == Some(&life) {
                    same += 1;
                    continue;
                }
                differ = true;
                self.next.extend_from_slice(&self.lives[..same]);
            }
            self.next.push(life);
        }
        if !differ && same == self.lives.len() {
            return;
        }
        if !differ {
            // A prefix of the cached lifetimes: fewer gradients this time.
            self.next.extend_from_slice(&self.lives[..same]);
        }
        std::mem::swap(&mut self.next, &mut self.lives);
        self.solve();
    }

    /// Greedy by size: largest first, each at the lowest offset clear of
    /// every placed gradient alive at the same time.
    fn solve(&mut self) {
        self.solves += 1;
        let lives = &self.lives;
        self.order.clear();
        self.order.extend(0..lives.len() as u32);
        self.order.sort_unstable_by(|&a, &b| {
            let (x, y) = (&lives[a as usize], &lives[b as usize]);
            y.padded().cmp(&x.padded()).then(x.id.cmp(&y.id))
        });
        self.offsets.clear();
        self.offsets.resize(lives.len(), 0);
        self.placed.clear();
        self.total = 0;
        for &k in &self.order {
            let life = lives[k as usize];
            let size = life.padded();
            let mut at = 0usize;
            // `placed` is sorted by offset: the first gap that fits wins.
            for &(start, end, other) in &self.placed {
                if !life.overlaps_in_time(&other) || end <= at {
                    continue;
                }
                if at + size <= start {
                    break;
                }
                at = end;
            }
            self.offsets[k as usize] = at;
            self.total = self.total.max(at + size);
            let pos = self.placed.partition_point(|p| p.0 <= at);
            self.placed.insert(pos, (at, at + size, life));
        }
        self.births.clear();
        self.births.extend(0..lives.len() as u32);
        self.births
            .sort_unstable_by(|&a, &b| lives[b as usize].hi.cmp(&lives[a as usize].hi));
    }

    /// Region size in f32 elements.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The planned gradients: (tensor id, offset, length).
    pub(crate) fn slots(&self) -> impl Iterator<Item = (u32, usize, usize)> + '_ {
        self.lives
            .iter()
            .zip(&self.offsets)
            .map(|(l, &o)| (l.id, o, l.len))
    }

    /// Number of births (gradients to zero during the walk).
    pub(crate) fn births_len(&self) -> usize {
        self.births.len()
    }

    /// The `k`-th birth in walk order: (birth position, tensor id).
    pub(crate) fn birth(&self, k: usize) -> (u32, u32) {
        let l = self.lives[self.births[k] as usize];
        (l.hi, l.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(id: u32, lo: u32, hi: u32, len: usize) -> Life {
        Life { id, lo, hi, len }
    }

    fn solved(lives: &[Life]) -> GradPlan {
        let mut p = GradPlan {
            lives: lives.to_vec(),
            ..GradPlan::default()
        };
        p.solve();
        p
    }

    /// No two gradients alive at the same time share a byte, and the region
    /// holds every placement.
    fn assert_valid(p: &GradPlan) {
        for (i, (a, &oa)) in p.lives.iter().zip(&p.offsets).enumerate() {
            assert!(oa % PAD == 0 && oa + a.padded() <= p.total);
            for (b, &ob) in p.lives.iter().zip(&p.offsets).skip(i + 1) {
                if a.overlaps_in_time(b) {
                    assert!(
                        oa + a.padded() <= ob || ob + b.padded() <= oa,
                        "{a:?} at {oa} and {b:?} at {ob} overlap"
                    );
                }
            }
        }
    }

    #[test]
    fn disjoint_lifetimes_share_and_overlapping_ones_do_not() {
        // A chain: each gradient lives [i, i+1]; neighbours overlap at one
        // position, so two slots suffice for any length.
        let chain: Vec<Life> = (0..10).map(|i| life(i, i, i + 1, 100)).collect();
        let p = solved(&chain);
        assert_valid(&p);
        assert_eq!(p.total, 2 * 112);
        // Touching intervals conflict (both are used at that position).
        let p = solved(&[life(0, 0, 3, 16), life(1, 3, 5, 16)]);
        assert_valid(&p);
        assert_eq!(p.total, 32);
        // All alive together: no sharing at all.
        let all: Vec<Life> = (0..5).map(|i| life(i, 0, 9, 10 + i as usize)).collect();
        let p = solved(&all);
        assert_valid(&p);
        assert_eq!(p.total, 5 * 16);
    }

    #[test]
    fn small_gradients_fill_gaps_left_by_large_ones() {
        // A big one early, a big one late, small ones in between fitting into
        // the space the big ones do not use at their time.
        let lives = [
            life(0, 0, 2, 1000),
            life(1, 5, 8, 1000),
            life(2, 2, 5, 100),
            life(3, 3, 4, 100),
            life(4, 8, 9, 500),
        ];
        let p = solved(&lives);
        assert_valid(&p);
        // 0 and 1 share offset 0; 2, 3 and 4 fit beside them.
        assert_eq!(p.offsets[..2], [0, 0]);
        assert!(p.total <= 1008 + 512, "total {}", p.total);
    }

    #[test]
    fn random_lifetimes_are_always_valid() {
        let mut rng = crate::ops::gradcheck::Lcg(9);
        for _ in 0..50 {
            let lives: Vec<Life> = (0..40)
                .map(|id| {
                    let lo = (rng.uniform() * 50.0) as u32;
                    let hi = lo + (rng.uniform() * 10.0) as u32;
                    life(id, lo, hi, 1 + (rng.uniform() * 300.0) as usize)
                })
                .collect();
            let p = solved(&lives);
            assert_valid(&p);
            let peak = (0..60)
                .map(|t| {
                    lives
                        .iter()
                        .filter(|l| l.lo <= t && t <= l.hi)
                        .map(Life::padded)
                        .sum::<usize>()
                })
                .max()
                .unwrap();
            assert!(p.total >= peak);
            let all: usize = lives.iter().map(Life::padded).sum();
            assert!(p.total <= all);
        }
    }

    use crate::error::Error;

    /// Two chained layers: x (param) -> h = tanh(x) -> r = reshape(h)
    /// -> y = r * r -> loss = sum(y). Returns (loss, h, r).
    fn chain(c: &mut crate::Context, x: crate::Tensor) -> [crate::Tensor; 3] {
        let h = c.tanh(x).unwrap();
        let r = c.reshape(h, &[6]).unwrap();
        let y = c.mul(r, r).unwrap();
        [c.sum(y).unwrap(), h, r]
    }

    #[test]
    fn activation_gradients_need_retain_grad() {
        let xs = [0.1f32, -0.2, 0.3, -0.4, 0.5, -0.6];
        let mut c = crate::Context::new();
        let x = c.param(&[2, 3], Some(&xs)).unwrap();
        let [loss, h, r] = chain(&mut c, x);
        let mut g = [0.0f32; 6];
        // Each case has its own reason and advice: before backward, not
        // retained, and a constant (which no advice about retaining helps).
        let e = c.read_grad(h, &mut g).unwrap_err();
        assert!(e.to_string().contains("ag_backward has not run"), "{e}");
        let k = c.tensor(&[6], &[1.0; 6]).unwrap();
        let e = c.read_grad(k, &mut g).unwrap_err();
        assert!(matches!(e, Error::Sequence { .. }), "{e}");
        assert!(e.to_string().contains("it is a constant"), "{e}");
        assert!(!e.to_string().contains("retain"), "{e}");
        c.backward(loss).unwrap();
        for t in [h, r] {
            let e = c.read_grad(t, &mut g).unwrap_err();
            assert!(matches!(e, Error::Sequence { .. }), "{e}");
            assert!(e.to_string().contains("ag_tensor_retain_grad"), "{e}");
        }
        assert!(matches!(c.retain_grad(h), Err(Error::Sequence { .. })));
        // Parameters always keep theirs: d sum(tanh(x)^2) = 2 tanh (1 - tanh^2).
        c.read_grad(x, &mut g).unwrap();
        for (gi, &xi) in g.iter().zip(&xs) {
            let t = xi.tanh();
            assert!((gi - 2.0 * t * (1.0 - t * t)).abs() < 1e-6);
        }
        // Retaining the view keeps the base's gradient too (shared memory).
        c.zero_grad();
        c.reset();
        let [loss, h, r] = chain(&mut c, x);
        c.retain_grad(r).unwrap();
        c.retain_grad(x).unwrap();
        c.backward(loss).unwrap();
        let mut gh = [0.0f32; 6];
        c.read_grad(h, &mut gh).unwrap();
        c.read_grad(r, &mut g).unwrap();
        assert_eq!(g, gh);
        for (gi, &xi) in g.iter().zip(&xs) {
            assert!((gi - 2.0 * xi.tanh()).abs() < 1e-6);
        }
        // A constant has no gradient to keep.
        let k = c.tensor(&[1], &[1.0]).unwrap();
        assert!(matches!(
            c.retain_grad(k),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn plan_is_cached_while_the_graph_repeats() {
        let mut c = crate::Context::new();
        let x = c.param(&[2, 3], Some(&[0.5; 6])).unwrap();
        for _ in 0..3 {
            c.reset();
            let [loss, ..] = chain(&mut c, x);
            c.backward(loss).unwrap();
        }
        assert_eq!(c.plan_solves(), 1);
        // Retaining changes lifetimes, so the plan is solved again.
        c.reset();
        let [loss, h, _] = chain(&mut c, x);
        c.retain_grad(h).unwrap();
        c.backward(loss).unwrap();
        assert_eq!(c.plan_solves(), 2);
    }

    /// A longer graph (views folded into their bases), then a shorter one:
    /// each is planned again, and its gradients match a fresh context's.
    #[test]
    fn a_shorter_graph_is_planned_again() {
        let grad = |c: &mut crate::Context, x: crate::Tensor, extra: bool| {
            c.reset();
            let mut h = x;
            if extra {
                h = c.tanh(h).unwrap();
                h = c.reshape(h, &[6]).unwrap();
            }
            let [loss, ..] = chain(c, h);
            c.zero_grad();
            c.backward(loss).unwrap();
            let mut g = [0.0f32; 6];
            c.read_grad(x, &mut g).unwrap();
            g
        };
        let mut c = crate::Context::new();
        let x = c
            .param(&[2, 3], Some(&[0.5, -0.1, 0.2, 0.3, -0.7, 0.9]))
            .unwrap();
        let long = grad(&mut c, x, true);
        let short = grad(&mut c, x, false);
        assert_eq!(c.plan_solves(), 2);
        let mut fresh = crate::Context::new();
        let y = fresh
            .param(&[2, 3], Some(&[0.5, -0.1, 0.2, 0.3, -0.7, 0.9]))
            .unwrap();
        // Bit for bit natively; Miri perturbs tanh and exp by a few ulps
        // per call, so there the two contexts agree only to rounding.
        let same = |a: [f32; 6], b: [f32; 6]| {
            let tol = if cfg!(miri) { 1e-5 } else { 0.0 };
            a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= tol)
        };
        assert!(same(short, grad(&mut fresh, y, false)), "short graph");
        assert!(same(long, grad(&mut fresh, y, true)), "long graph");
    }

    /// Under an arena cap that holds the forward pass but not the gradient
    /// region, backward fails before writing anything and can be retried.
    #[test]
    fn out_of_memory_at_backward_changes_nothing() {
        let mut c = crate::Context::new();
        let x = c.param(&[2, 3], Some(&[0.5; 6])).unwrap();
        let [loss, ..] = chain(&mut c, x);
        let fwd = c.memory_stats().arena_used_bytes as usize;
        c.set_arena_limit(Some(fwd + 64));
        let e = c.backward(loss).unwrap_err();
        assert!(
            matches!(e, Error::OutOfMemory { op: "backward", .. }),
            "{e}"
        );
        let mut g = [1.0f32; 6];
        c.read_grad(x, &mut g).unwrap();
        assert_eq!(g, [0.0; 6]);
        c.set_arena_limit(None);
        c.backward(loss).unwrap();
        c.read_grad(x, &mut g).unwrap();
        assert!(g.iter().all(|&v| v != 0.0));
    }

    #[test]
    fn births_come_in_walk_order() {
        let p = solved(&[life(0, 0, 3, 8), life(1, 1, 9, 8), life(2, 2, 5, 8)]);
        let order: Vec<(u32, u32)> = (0..p.births_len()).map(|k| p.birth(k)).collect();
        assert_eq!(order, [(9, 1), (5, 2), (3, 0)]);
    }
}

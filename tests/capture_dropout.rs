//! Dropout in a captured step: `dropout_seeded` reads its seed from an
//! input slot each time its forward runs, so a replay with a new batch and a
//! new seed written before it matches an eager iteration with that batch
//! and seed bit for bit (losses, gradients, parameters after K optimizer
//! steps), on one and two threads, with and without recomputation (where
//! the mask sits in the scratch region another segment overwrites, so the
//! backward needs it redrawn). A replay that keeps the seed keeps the mask.

mod common;

use arenagrad::{Context, Error, RecomputePolicy, Tensor};

const B: usize = 16;
const D: usize = 64;
const H: usize = 64;

/// A cheap LCG stream, so runs are repeatable.
fn stream(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005) ^ 0x5851_f42d_4c95_7f2d;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// The batch and the two dropout seeds of step k (seeds use the high bits
/// too, so every limb of the slot matters).
fn data(k: u64) -> (Vec<f32>, Vec<f32>, [u64; 2]) {
    let seeds = [
        0x9e37_79b9_7f4a_7c15u64.wrapping_mul(k + 1),
        0xdead_beef_0000_0001 ^ (k << 48),
    ];
    (stream(2 * k, B * D), stream(2 * k + 1, B), seeds)
}

struct Model {
    ctx: Context,
    params: Vec<Tensor>,
}

impl Model {
    fn new(single_thread: bool, policy: RecomputePolicy) -> Model {
        let mut ctx = Context::new();
        ctx.set_single_thread_for_test(single_thread);
        ctx.set_recompute(policy);
        let params = vec![
            ctx.param(&[D, H], Some(&stream(100, D * H))).unwrap(),
            ctx.param(&[H, H], Some(&stream(101, H * H))).unwrap(),
            ctx.param(&[H, 1], Some(&stream(102, H))).unwrap(),
        ];
        common::adamw(&mut ctx, 1e-2, 0.01);
        Model { ctx, params }
    }

    /// Two segments, each with a seeded dropout, then an MSE loss.
    fn loss(&mut self, x: Tensor, y: Tensor, seeds: [Tensor; 2], segment: bool) -> Tensor {
        let c = &mut self.ctx;
        let [w1, w2, w3] = [self.params[0], self.params[1], self.params[2]];
        let mut h = x;
        for (i, (w, s)) in [(w1, seeds[0]), (w2, seeds[1])].into_iter().enumerate() {
            if segment {
                c.segment_begin().unwrap();
            }
            let a = c.matmul(h, w, false, false).unwrap();
            let t = c.tanh(a).unwrap();
            let d = c.dropout_seeded(t, 0.3, s).unwrap();
            // The first segment's consumer reads nothing in its backward, so
            // only the dropout's own backward needs its mask redrawn when
            // the segment is replayed (the second segment has overwritten
            // the scratch region by then); the second reads the output.
            h = if i == 0 { c.add(d, t) } else { c.mul(d, t) }.unwrap();
            if segment {
                c.segment_end(&[h]).unwrap();
            }
        }
        let pred = c.matmul(h, w3, false, false).unwrap();
        c.mse_loss(pred, y).unwrap()
    }

    fn bits(&self, grad: bool) -> Vec<u32> {
        let mut out = Vec::new();
        for &p in &self.params {
            let mut g = vec![0.0; self.ctx.numel(p).unwrap()];
            if grad {
                self.ctx.read_grad(p, &mut g).unwrap();
            } else {
                self.ctx.read(p, &mut g).unwrap();
            }
            out.extend(g.iter().map(|v| v.to_bits()));
        }
        out
    }
}

/// K steps eager against K replays (after the capture, step 0); with
/// `stale_seed`, the replays keep the captured seeds. Returns whether every
/// loss and gradient matched.
fn run(single: bool, policy: RecomputePolicy, segment: bool, stale_seed: bool) -> bool {
    const K: u64 = 5;
    let mut eager = Model::new(single, policy);
    let mut rep = Model::new(single, policy);

    let (x0, y0, s0) = data(0);
    rep.ctx.capture_begin().unwrap();
    let xi = rep.ctx.input_new(&[B, D]).unwrap();
    let yi = rep.ctx.input_new(&[B, 1]).unwrap();
    let si = [
        rep.ctx.input_new(&[4]).unwrap(),
        rep.ctx.input_new(&[4]).unwrap(),
    ];
    rep.ctx.input_write(xi, &x0).unwrap();
    rep.ctx.input_write(yi, &y0).unwrap();
    rep.ctx.seed_write(si[0], s0[0]).unwrap();
    rep.ctx.seed_write(si[1], s0[1]).unwrap();
    rep.ctx.zero_grad();
    let loss = rep.loss(xi, yi, si, segment);
    rep.ctx.backward(loss).unwrap();
    let step = rep.ctx.capture_end(loss).unwrap();

    let mut all_equal = true;
    for k in 0..K {
        let (x, y, s) = data(k);
        eager.ctx.reset();
        let xe = eager.ctx.tensor(&[B, D], &x).unwrap();
        let ye = eager.ctx.tensor(&[B, 1], &y).unwrap();
        let se = [
            eager.ctx.input_new(&[4]).unwrap(),
            eager.ctx.input_new(&[4]).unwrap(),
        ];
        eager.ctx.seed_write(se[0], s[0]).unwrap();
        eager.ctx.seed_write(se[1], s[1]).unwrap();
        eager.ctx.zero_grad();
        let le = eager.loss(xe, ye, se, segment);
        eager.ctx.backward(le).unwrap();

        if k > 0 {
            rep.ctx.input_write(xi, &x).unwrap();
            rep.ctx.input_write(yi, &y).unwrap();
            if !stale_seed {
                rep.ctx.seed_write(si[0], s[0]).unwrap();
                rep.ctx.seed_write(si[1], s[1]).unwrap();
            }
            rep.ctx.zero_grad();
            rep.ctx.replay(step).unwrap();
        }
        let (a, b) = (eager.ctx.item(le).unwrap(), rep.ctx.item(loss).unwrap());
        let same = a.to_bits() == b.to_bits() && eager.bits(true) == rep.bits(true);
        if !stale_seed {
            assert_eq!(a.to_bits(), b.to_bits(), "loss at step {k}: {a} vs {b}");
            assert!(same, "gradients differ at step {k}");
        }
        all_equal &= same;
        eager.ctx.optimizer_step().unwrap();
        rep.ctx.optimizer_step().unwrap();
    }
    if !stale_seed {
        assert!(eager.bits(false) == rep.bits(false), "parameters after {K}");
    }
    if segment && policy == RecomputePolicy::All {
        assert_eq!(rep.ctx.memory_stats().recomputed_segments, 2);
    }
    all_equal
}

#[test]
fn replay_with_new_seeds_matches_eager_bit_for_bit() {
    for single in [true, false] {
        assert!(run(single, RecomputePolicy::None, false, false));
        assert!(run(single, RecomputePolicy::None, true, false));
        assert!(run(single, RecomputePolicy::All, true, false));
    }
}

#[test]
fn replay_that_keeps_the_captured_seed_diverges_from_eager() {
    // Same batches, stale seeds: the masks repeat, so the run must differ.
    assert!(!run(true, RecomputePolicy::None, false, true));
    assert!(!run(true, RecomputePolicy::All, true, true));
}

#[test]
fn recomputation_redraws_the_same_mask() {
    // The eager path with every segment recomputed against no recomputation.
    let grads = |policy| {
        let mut m = Model::new(true, policy);
        let (x, y, s) = data(3);
        let xe = m.ctx.tensor(&[B, D], &x).unwrap();
        let ye = m.ctx.tensor(&[B, 1], &y).unwrap();
        let se = [
            m.ctx.input_new(&[4]).unwrap(),
            m.ctx.input_new(&[4]).unwrap(),
        ];
        m.ctx.seed_write(se[0], s[0]).unwrap();
        m.ctx.seed_write(se[1], s[1]).unwrap();
        let l = m.loss(xe, ye, se, true);
        m.ctx.backward(l).unwrap();
        assert_eq!(
            m.ctx.memory_stats().recomputed_segments,
            if policy == RecomputePolicy::All { 2 } else { 0 }
        );
        (m.ctx.item(l).unwrap().to_bits(), m.bits(true))
    };
    assert_eq!(grads(RecomputePolicy::None), grads(RecomputePolicy::All));
}

/// A one-op step: out = dropout_seeded(w), loss = sum(out * out).
fn small() -> (Context, Tensor, Tensor, Tensor, arenagrad::Step) {
    let mut c = Context::new();
    let w = c.param(&[256], Some(&stream(7, 256))).unwrap();
    c.capture_begin().unwrap();
    let s = c.input_new(&[4]).unwrap();
    c.seed_write(s, 11).unwrap();
    let out = c.dropout_seeded(w, 0.5, s).unwrap();
    let sq = c.mul(out, out).unwrap();
    let loss = c.sum(sq).unwrap();
    c.backward(loss).unwrap();
    let step = c.capture_end(loss).unwrap();
    (c, w, s, out, step)
}

fn read(c: &Context, t: Tensor) -> Vec<u32> {
    let mut v = vec![0.0; c.numel(t).unwrap()];
    c.read(t, &mut v).unwrap();
    v.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn kept_seed_keeps_the_mask_and_a_new_seed_changes_it() {
    let (mut c, w, s, out, step) = small();
    let captured = read(&c, out);
    // The step is resident: its graph cannot grow, and the refusal
    // allocates nothing in its memory.
    let used = c.memory_stats().arena_used_bytes;
    let e = c.dropout_seeded(w, 0.5, s).unwrap_err();
    assert!(matches!(e, Error::Sequence { .. }), "{e:?}");
    assert!(e.to_string().starts_with("dropout_seeded:"), "{e}");
    assert_eq!(c.memory_stats().arena_used_bytes, used);
    // Replays without writing the seed: the very same mask.
    for _ in 0..3 {
        c.replay(step).unwrap();
        assert_eq!(read(&c, out), captured, "seed kept, mask kept");
    }
    // A new seed: a new mask, the same as eager dropout with that seed.
    c.seed_write(s, 12).unwrap();
    c.replay(step).unwrap();
    let replayed = read(&c, out);
    assert_ne!(replayed, captured, "seed rewritten, mask redrawn");
    c.reset();
    let e = c.dropout(w, 0.5, 12).unwrap();
    assert_eq!(read(&c, e), replayed, "the by-value mask of that seed");
    // Back to the captured seed: the captured mask.
    c.seed_write(s, 11).unwrap();
    c.replay(step).unwrap();
    assert_eq!(read(&c, out), captured);
}

#[test]
fn by_value_dropout_is_refused_pointing_at_the_seeded_one() {
    let mut c = Context::new();
    let w = c.param(&[8], Some(&[1.0; 8])).unwrap();
    c.capture_begin().unwrap();
    let d = c.dropout(w, 0.5, 7).unwrap();
    let l = c.sum(d).unwrap();
    c.backward(l).unwrap();
    let e = c.capture_end(l).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("capture_end: the graph has an ag_dropout op")
            && m.contains("ag_dropout_seeded"),
        "{m}"
    );
}

#[test]
fn seed_write_follows_the_step_and_its_refusals() {
    let (mut c, _w, s, _out, step) = small();
    // An eager iteration parks the step; writing its seed brings it back.
    c.reset();
    let t = c.tensor(&[2], &[1.0, 2.0]).unwrap();
    c.sum(t).unwrap();
    c.seed_write(s, 99).unwrap();
    c.replay(step).unwrap();
    // A parameter added since the capture: refused, nothing changes.
    c.reset();
    c.param(&[1], Some(&[0.0])).unwrap();
    let e = c.seed_write(s, 1).unwrap_err();
    assert!(matches!(e, Error::Sequence { .. }), "{e:?}");
    assert!(e.to_string().starts_with("seed_write:"), "{e}");
    // A freed step's seed is refused.
    let (mut c, _w, s, _out, step) = small();
    c.step_free(step).unwrap();
    let e = c.seed_write(s, 1).unwrap_err();
    assert!(matches!(e, Error::StaleHandle { .. }), "{e:?}");
}

//! Capture and replay against the eager path, bit for bit: losses, every
//! parameter gradient, and the parameters after K optimizer steps, with a
//! new batch written into the input slots before every replay (a replay
//! that kept the captured batch diverges at the first step), on one and two
//! threads, with and without recomputation segments. Then the refusals:
//! each leaves the context as it was.

mod common;

use arenagrad::{Context, Error, RecomputePolicy, StepProblem, Tensor};

const B: usize = 64;
const D: usize = 256;
const H: usize = 256;

/// A batch that differs every step (a cheap LCG, so runs are repeatable).
fn batch(step: u64) -> (Vec<f32>, Vec<f32>) {
    let mut s = step
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let x: Vec<f32> = (0..B * D).map(|_| next()).collect();
    let y: Vec<f32> = (0..B).map(|_| next()).collect();
    (x, y)
}

fn init(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5)
        .map(|v| v * 0.1)
        .collect()
}

struct Model {
    ctx: Context,
    params: Vec<Tensor>,
}

impl Model {
    fn new(single_thread: bool, policy: RecomputePolicy) -> Model {
        let mut ctx = Context::new();
        if single_thread {
            ctx.set_single_thread_for_test(true);
        }
        ctx.set_recompute(policy);
        let params = vec![
            ctx.param(&[D, H], Some(&init(D * H, 1))).unwrap(),
            ctx.param(&[H], Some(&init(H, 2))).unwrap(),
            ctx.param(&[H, 1], Some(&init(H, 3))).unwrap(),
        ];
        common::adamw(&mut ctx, 1e-2, 0.01);
        Model { ctx, params }
    }

    /// The graph, from input tensors `x` [B, D] and `y` [B, 1].
    fn loss(&mut self, x: Tensor, y: Tensor, segment: bool) -> Tensor {
        let c = &mut self.ctx;
        let [w1, b1, w2] = [self.params[0], self.params[1], self.params[2]];
        // An op on inputs only: it needs no gradient, so only the replay's
        // forward log has it.
        let xs = c.scale(x, 0.5).unwrap();
        if segment {
            c.segment_begin().unwrap();
        }
        let a = c.matmul(xs, w1, false, false).unwrap();
        let a = c.add(a, b1).unwrap();
        let h = c.tanh(a).unwrap();
        let h2 = c.mul(h, h).unwrap();
        let h = c.add(h, h2).unwrap();
        if segment {
            c.segment_end(&[h]).unwrap();
        }
        let pred = c.matmul(h, w2, false, false).unwrap();
        let mse = c.mse_loss(pred, y).unwrap();
        let sq = c.mul(w2, w2).unwrap();
        let reg = c.sum(sq).unwrap();
        let reg = c.scale(reg, 1e-3).unwrap();
        c.add(mse, reg).unwrap()
    }

    fn grads(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for &p in &self.params {
            let mut g = vec![0.0; self.ctx.numel(p).unwrap()];
            self.ctx.read_grad(p, &mut g).unwrap();
            out.extend(g.iter().map(|v| v.to_bits()));
        }
        out
    }

    fn values(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for &p in &self.params {
            let mut v = vec![0.0; self.ctx.numel(p).unwrap()];
            self.ctx.read(p, &mut v).unwrap();
            out.extend(v.iter().map(|v| v.to_bits()));
        }
        out
    }
}

fn run(single_thread: bool, policy: RecomputePolicy, segment: bool) {
    const K: u64 = 6;
    let mut eager = Model::new(single_thread, policy);
    let mut rep = Model::new(single_thread, policy);

    // Step 0 is the capture itself, an ordinary eager iteration.
    let (x0, y0) = batch(0);
    rep.ctx.capture_begin().unwrap();
    let xi = rep.ctx.input_new(&[B, D]).unwrap();
    let yi = rep.ctx.input_new(&[B, 1]).unwrap();
    rep.ctx.input_write(xi, &x0).unwrap();
    rep.ctx.input_write(yi, &y0).unwrap();
    rep.ctx.zero_grad();
    let loss = rep.loss(xi, yi, segment);
    rep.ctx.backward(loss).unwrap();
    let step = rep.ctx.capture_end(loss).unwrap();

    for k in 0..K {
        let (x, y) = batch(k);
        eager.ctx.reset();
        let xe = eager.ctx.tensor(&[B, D], &x).unwrap();
        let ye = eager.ctx.tensor(&[B, 1], &y).unwrap();
        eager.ctx.zero_grad();
        let le = eager.loss(xe, ye, segment);
        eager.ctx.backward(le).unwrap();

        if k > 0 {
            rep.ctx.input_write(xi, &x).unwrap();
            rep.ctx.input_write(yi, &y).unwrap();
            rep.ctx.zero_grad();
            rep.ctx.replay(step).unwrap();
        }
        let (a, b) = (eager.ctx.item(le).unwrap(), rep.ctx.item(loss).unwrap());
        assert_eq!(a.to_bits(), b.to_bits(), "loss at step {k}: {a} vs {b}");
        assert!(eager.grads() == rep.grads(), "gradients differ at step {k}");
        eager.ctx.optimizer_step().unwrap();
        rep.ctx.optimizer_step().unwrap();
    }
    assert!(
        eager.values() == rep.values(),
        "parameters differ after {K} steps"
    );
    // The captured graph's segments are the step's, as in the eager run.
    assert_eq!(
        eager.ctx.memory_stats().recomputed_segments,
        rep.ctx.memory_stats().recomputed_segments
    );
}

#[test]
fn replay_matches_eager_bit_for_bit() {
    for single in [true, false] {
        run(single, RecomputePolicy::None, false);
        run(single, RecomputePolicy::None, true);
        run(single, RecomputePolicy::All, true);
    }
}

/// A small model for the sequence and refusal tests.
fn small() -> (Context, Tensor, Tensor, Tensor, arenagrad::Step) {
    let mut ctx = Context::new();
    let w = ctx.param(&[3], Some(&[0.5, -1.0, 2.0])).unwrap();
    ctx.capture_begin().unwrap();
    let x = ctx.input_new(&[3]).unwrap();
    ctx.input_write(x, &[1.0, 2.0, 3.0]).unwrap();
    let p = ctx.mul(w, x).unwrap();
    let loss = ctx.sum(p).unwrap();
    ctx.backward(loss).unwrap();
    let step = ctx.capture_end(loss).unwrap();
    (ctx, w, x, loss, step)
}

#[test]
fn handles_follow_the_step_through_eager_iterations() {
    let (mut ctx, w, x, loss, step) = small();
    assert_eq!(ctx.item(loss).unwrap(), 0.5 - 2.0 + 6.0);
    // An eager iteration in between: the step's handles are stale there.
    ctx.reset();
    assert!(matches!(ctx.item(loss), Err(Error::StaleHandle { .. })));
    let t = ctx.tensor(&[3], &[1.0, 1.0, 1.0]).unwrap();
    let q = ctx.mul(w, t).unwrap();
    let l2 = ctx.sum(q).unwrap();
    ctx.backward(l2).unwrap();
    assert_eq!(ctx.item(l2).unwrap(), 1.5);
    // Writing the step's input makes the step current again.
    ctx.input_write(x, &[2.0, 0.0, 0.0]).unwrap();
    assert!(matches!(ctx.item(l2), Err(Error::StaleHandle { .. })));
    ctx.zero_grad();
    ctx.replay(step).unwrap();
    assert_eq!(ctx.item(loss).unwrap(), 1.0);
    let mut g = [0.0; 3];
    ctx.read_grad(w, &mut g).unwrap();
    assert_eq!(g, [2.0, 0.0, 0.0]);
    // The replayed graph cannot grow; after a reset the eager path works.
    assert!(matches!(ctx.add(loss, loss), Err(Error::Sequence { .. })));
    assert!(matches!(ctx.segment_begin(), Err(Error::Sequence { .. })));
    assert!(matches!(ctx.backward(loss), Err(Error::Sequence { .. })));
    ctx.reset();
    let t = ctx.tensor(&[1], &[1.0]).unwrap();
    ctx.add(t, t).unwrap();
    // A freed step and its handles are refused for good.
    ctx.step_free(step).unwrap();
    let freed = |r: Result<(), Error>| {
        matches!(
            r,
            Err(Error::BadStep {
                why: StepProblem::Freed,
                ..
            })
        )
    };
    assert!(freed(ctx.replay(step)));
    assert!(freed(ctx.step_free(step)));
    let msg = ctx.replay(step).unwrap_err().to_string();
    assert!(msg.contains("was freed"), "{msg}");
    assert!(matches!(
        ctx.input_write(x, &[0.0; 3]),
        Err(Error::StaleHandle { .. })
    ));
    assert_eq!(ctx.step_count(), 0);
}

#[test]
fn refusals_change_nothing() {
    let (mut ctx, w, x, loss, step) = small();
    let before = ctx.memory_stats();
    // Another context's step.
    let (mut other, ..) = small();
    assert!(matches!(
        other.replay(step),
        Err(Error::BadStep {
            why: StepProblem::WrongContext { .. },
            ..
        })
    ));
    // A garbage handle.
    let mut forged = step;
    forged.generation += 1000;
    assert!(matches!(
        ctx.replay(forged),
        Err(Error::BadStep {
            why: StepProblem::Invalid,
            ..
        })
    ));
    // An arena cap below the step's bytes.
    ctx.set_arena_limit(Some(64));
    assert!(matches!(ctx.replay(step), Err(Error::OutOfMemory { .. })));
    ctx.set_arena_limit(None);
    // Input writes of the wrong length, or to a tensor that is no slot.
    assert!(matches!(
        ctx.input_write(x, &[0.0; 2]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        ctx.input_write(loss, &[0.0]),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(before, ctx.memory_stats());
    assert_eq!(ctx.item(loss).unwrap(), 4.5);
    // A parameter added since the capture.
    ctx.reset();
    ctx.param(&[2], None).unwrap();
    let st = ctx.memory_stats();
    assert!(matches!(ctx.replay(step), Err(Error::Sequence { .. })));
    assert!(matches!(
        ctx.input_write(x, &[0.0; 3]),
        Err(Error::Sequence { .. })
    ));
    assert_eq!(st, ctx.memory_stats());
    let _ = w;
}

#[test]
fn capture_sequence_errors() {
    let mut ctx = Context::new();
    let w = ctx.param(&[2], Some(&[1.0, 2.0])).unwrap();
    let t = ctx.tensor(&[2], &[1.0, 1.0]).unwrap();
    let no_loss = ctx.mul(w, t).unwrap();
    assert!(matches!(
        ctx.capture_end(no_loss),
        Err(Error::Sequence { .. })
    ));
    ctx.capture_begin().unwrap();
    assert!(matches!(ctx.capture_begin(), Err(Error::Sequence { .. })));
    let p = ctx.mul(w, w).unwrap();
    let loss = ctx.sum(p).unwrap();
    // No backward yet.
    assert!(matches!(ctx.capture_end(loss), Err(Error::Sequence { .. })));
    // Dropout cannot be replayed faithfully: refused.
    let d = ctx.dropout(p, 0.5, 7).unwrap();
    let l2 = ctx.sum(d).unwrap();
    ctx.backward(l2).unwrap();
    assert!(matches!(
        ctx.capture_end(l2),
        Err(Error::InvalidArgument { .. })
    ));
    // reset abandons the capture; the context works as before.
    ctx.reset();
    let t = ctx.tensor(&[2], &[3.0, 4.0]).unwrap();
    let p = ctx.mul(w, t).unwrap();
    let loss = ctx.sum(p).unwrap();
    ctx.backward(loss).unwrap();
    assert_eq!(ctx.item(loss).unwrap(), 11.0);
    assert_eq!(ctx.step_count(), 0);
}

#[test]
fn replayed_ids_and_targets_match_eager() {
    const V: usize = 11;
    const C: usize = 6;
    const N: usize = 5;
    let mk = || {
        let mut ctx = Context::new();
        let wte = ctx.param(&[V, C], Some(&init(V * C, 7))).unwrap();
        let head = ctx.param(&[C, V], Some(&init(C * V, 8))).unwrap();
        (ctx, wte, head)
    };
    let graph = |ctx: &mut Context, wte, head, ids: &[i32], targets: &[i32]| {
        let x = ctx.embedding(wte, ids).unwrap();
        let x = ctx.tanh(x).unwrap();
        let logits = ctx.matmul(x, head, false, false).unwrap();
        ctx.cross_entropy(logits, targets).unwrap()
    };
    let batch = |k: i32| -> (Vec<i32>, Vec<i32>) {
        (
            (0..N as i32).map(|i| (i * 3 + k) % V as i32).collect(),
            (0..N as i32)
                .map(|i| (i * 5 + 2 * k + 1) % V as i32)
                .collect(),
        )
    };
    let (mut eager, ew, eh) = mk();
    let (mut rep, rw, rh) = mk();
    let (ids, targets) = batch(0);
    rep.capture_begin().unwrap();
    let loss = graph(&mut rep, rw, rh, &ids, &targets);
    rep.backward(loss).unwrap();
    let step = rep.capture_end(loss).unwrap();
    for k in 1..5 {
        let (ids, targets) = batch(k);
        eager.reset();
        eager.zero_grad();
        let le = graph(&mut eager, ew, eh, &ids, &targets);
        eager.backward(le).unwrap();
        rep.input_write_ids(step, 0, &ids).unwrap();
        rep.input_write_ids(step, 1, &targets).unwrap();
        rep.zero_grad();
        rep.replay(step).unwrap();
        let (a, b) = (eager.item(le).unwrap(), rep.item(loss).unwrap());
        assert_eq!(a.to_bits(), b.to_bits(), "loss at batch {k}");
        for (pe, pr) in [(ew, rw), (eh, rh)] {
            let (mut ge, mut gr) = (vec![0.0; V * C], vec![0.0; V * C]);
            eager.read_grad(pe, &mut ge).unwrap();
            rep.read_grad(pr, &mut gr).unwrap();
            assert!(ge.iter().zip(&gr).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
    // Refusals: no such buffer, a wrong length, an id out of range.
    assert!(matches!(
        rep.input_write_ids(step, 2, &ids),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        rep.input_write_ids(step, 0, &ids[..2]),
        Err(Error::InvalidArgument { .. })
    ));
    let mut bad = ids.clone();
    bad[3] = V as i32;
    assert!(matches!(
        rep.input_write_ids(step, 1, &bad),
        Err(Error::IndexOutOfRange { position: 3, .. })
    ));
}

//! Replay program tests: each compares a replayed step with the eager path, bit for bit.

use crate::context::{Context, Tensor};

/// A scalar model with every op the program covers, shared operands
/// (a * a, a parameter read by many ops), broadcast one-element shapes
/// ([1] with [1, 1]) and an input slot `x`.
pub(super) fn model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (a, b, w) = (p[0], p[1], p[2]);
    let mut h = c.mul(a, x).unwrap();
    for k in 0..4 {
        let sq = c.mul(a, a).unwrap();
        let z = c.add(h, sq).unwrap();
        let z = c.sub(z, b).unwrap();
        let t = c.tanh(z).unwrap();
        let e = c.exp(t).unwrap();
        let d = c.div(e, w).unwrap(); // [1, 1] from [1] and [1, 1]
        let m = c.maximum(d, x).unwrap();
        let n = c.minimum(m, b).unwrap();
        let s = c.scale(n, 0.5 + k as f32).unwrap();
        let q = c.pow(s, 2.0).unwrap();
        let l = c.clamp(q, -3.0, 3.0).unwrap();
        let g = c.neg(l).unwrap();
        h = c.add(g, h).unwrap();
    }
    let y = c.sub(h, x).unwrap();
    c.mul(y, y).unwrap()
}

fn bits(c: &Context, p: &[Tensor], loss: Tensor) -> Vec<u32> {
    let mut out = vec![c.item(loss).unwrap().to_bits()];
    for &t in p {
        let mut g = vec![0.0; 1];
        c.read_grad(t, &mut g).unwrap();
        out.push(g[0].to_bits());
    }
    out
}

fn params(c: &mut Context, single_thread: bool) -> Vec<Tensor> {
    // Kept on this thread, or free to use the worker (one-element
    // kernels never do, but the walk must not depend on it either).
    c.keep_on_one_thread(single_thread);
    vec![
        c.param(&[1], Some(&[0.7])).unwrap(),
        c.param(&[1], Some(&[-0.2])).unwrap(),
        c.param(&[1, 1], Some(&[1.3])).unwrap(),
    ]
}

/// The program runs (the step has one) and gives the eager path's
/// bits over replays with new inputs, with and without zero_grad in
/// between (gradients accumulate across replays as across eager
/// iterations), on 1 and 2 threads.
#[test]
fn program_replay_matches_eager_bit_for_bit() {
    for single_thread in [true, false] {
        let (mut eager, mut rep) = (Context::new(), Context::new());
        let (pe, pr) = (
            params(&mut eager, single_thread),
            params(&mut rep, single_thread),
        );
        rep.capture_begin().unwrap();
        let xi = rep.input_new(&[1]).unwrap();
        rep.input_write(xi, &[0.25]).unwrap();
        let loss_r = model(&mut rep, &pr, xi);
        rep.backward(loss_r).unwrap();
        let step = rep.capture_end(loss_r).unwrap();
        assert!(rep.step_has_program(step));
        eager.zero_grad();
        rep.zero_grad();
        for i in 0..12u32 {
            let xv = [0.25 + 0.37 * i as f32 - 0.05 * (i * i) as f32];
            if i % 3 != 2 {
                eager.zero_grad();
                rep.zero_grad();
            }
            eager.reset();
            let xe = eager.tensor(&[1], &xv).unwrap();
            let loss_e = model(&mut eager, &pe, xe);
            eager.backward(loss_e).unwrap();
            rep.input_write(xi, &xv).unwrap();
            rep.replay(step).unwrap();
            let (be, br) = (bits(&eager, &pe, loss_e), bits(&rep, &pr, loss_r));
            assert_eq!(be, br, "replay {i} x {xv:?} single {single_thread}");
        }
        // A replay that kept the old input would differ: the check bites.
        rep.zero_grad();
        rep.replay(step).unwrap();
        let stale = bits(&rep, &pr, loss_r);
        rep.zero_grad();
        rep.input_write(xi, &[1.5]).unwrap();
        rep.replay(step).unwrap();
        assert_ne!(stale, bits(&rep, &pr, loss_r));
    }
}

/// A model over parameters and one input slot, for [`same_bits`].
pub(super) type Model = fn(&mut Context, &[Tensor], Tensor) -> Tensor;

/// The loss and every element of every parameter's gradient, as bits.
fn all_bits(c: &Context, p: &[Tensor], loss: Tensor) -> Vec<u32> {
    let mut out = vec![c.item(loss).unwrap().to_bits()];
    for &t in p {
        let mut g = vec![0.0; c.numel(t).unwrap()];
        c.read_grad(t, &mut g).unwrap();
        out.extend(g.iter().map(|v| v.to_bits()));
    }
    out
}

/// Captures `model` once (it must get a program), then replays it
/// with new input values (and parameters moved by hand between
/// replays) beside the eager path, and asserts the same bits each time
/// (loss, every gradient element), on 1 and 2 threads, with and
/// without zero_grad between iterations; a replay that keeps a stale
/// input must differ.
pub(super) fn same_bits(shapes: &[&[usize]], input: &[usize], model: Model) {
    let n_in: usize = input.iter().product();
    let value = |i: usize, k: usize, salt: f32| {
        let t = (i * 7 + k * 3) as f32 * 0.37 + salt;
        0.3 + 0.9 * t.sin()
    };
    for single_thread in [true, false] {
        let (mut eager, mut rep) = (Context::new(), Context::new());
        let mut pe = Vec::new();
        let mut pr = Vec::new();
        for (i, sh) in shapes.iter().enumerate() {
            let n: usize = sh.iter().product();
            let v: Vec<f32> = (0..n).map(|k| value(i, k, 0.1)).collect();
            pe.push(eager.param(sh, Some(&v)).unwrap());
            pr.push(rep.param(sh, Some(&v)).unwrap());
        }
        eager.single_thread = single_thread;
        rep.single_thread = single_thread;
        rep.capture_begin().unwrap();
        let xi = rep.input_new(input).unwrap();
        let x0: Vec<f32> = (0..n_in).map(|k| value(9, k, 0.0)).collect();
        rep.input_write(xi, &x0).unwrap();
        let loss_r = model(&mut rep, &pr, xi);
        rep.backward(loss_r).unwrap();
        let step = rep.capture_end(loss_r).unwrap();
        assert!(rep.step_has_program(step), "no program");
        eager.zero_grad();
        rep.zero_grad();
        for i in 0..6usize {
            let xv: Vec<f32> = (0..n_in).map(|k| value(11 + i, k, 0.5)).collect();
            if i % 3 != 2 {
                eager.zero_grad();
                rep.zero_grad();
            }
            if i == 3 {
                // Moved parameters, as an optimizer or sampler does.
                for (j, sh) in shapes.iter().enumerate() {
                    let n: usize = sh.iter().product();
                    let v: Vec<f32> = (0..n).map(|k| value(j, k, 1.3)).collect();
                    eager.param_write(pe[j], &v).unwrap();
                    rep.param_write(pr[j], &v).unwrap();
                }
            }
            eager.reset();
            let xe = eager.tensor(input, &xv).unwrap();
            let loss_e = model(&mut eager, &pe, xe);
            eager.backward(loss_e).unwrap();
            rep.input_write(xi, &xv).unwrap();
            rep.replay(step).unwrap();
            let (be, br) = (all_bits(&eager, &pe, loss_e), all_bits(&rep, &pr, loss_r));
            assert_eq!(be, br, "replay {i} single {single_thread}");
        }
        rep.zero_grad();
        rep.replay(step).unwrap();
        let stale = all_bits(&rep, &pr, loss_r);
        rep.zero_grad();
        rep.input_write(xi, &vec![1.7; n_in]).unwrap();
        rep.replay(step).unwrap();
        assert_ne!(stale, all_bits(&rep, &pr, loss_r));
    }
}

/// The non-centred eight-schools log density (`x`: y / sigma, 16
/// values, sliced in two), as the benchmark writes it: slices, a
/// broadcast mul and add on 8 elements, same-shape sub and div, sums.
#[test]
fn eight_schools_matches_eager() {
    same_bits(&[&[10]], &[16], |c, p, x| {
        let q = p[0];
        let (tt, mu, ltau) = (
            c.slice(q, 0, 0, 8).unwrap(),
            c.slice(q, 0, 8, 1).unwrap(),
            c.slice(q, 0, 9, 1).unwrap(),
        );
        let (y, sigma) = (c.slice(x, 0, 0, 8).unwrap(), c.slice(x, 0, 8, 8).unwrap());
        let sigma = c.exp(sigma).unwrap(); // positive
        let tau = c.exp(ltau).unwrap();
        let theta = c.mul(tt, tau).unwrap();
        let theta = c.add(theta, mu).unwrap();
        let r = c.sub(y, theta).unwrap();
        let z = c.div(r, sigma).unwrap();
        let sumsq = |c: &mut Context, v: Tensor, s: f32| {
            let v2 = c.mul(v, v).unwrap();
            let t = c.sum(v2).unwrap();
            c.scale(t, s).unwrap()
        };
        let a = sumsq(c, z, -0.5);
        let b = sumsq(c, tt, -0.5);
        let lp = c.add(a, b).unwrap();
        let m = sumsq(c, mu, -0.02);
        let lp = c.add(lp, m).unwrap();
        let t2 = c.scale(ltau, 2.0).unwrap();
        let e = c.exp(t2).unwrap();
        let e = c.scale(e, 0.04).unwrap();
        let one = c.tensor(&[1], &[1.0]).unwrap();
        let e = c.add(e, one).unwrap();
        let lc = c.log(e).unwrap();
        let lp = c.sub(lp, lc).unwrap();
        c.add(lp, ltau).unwrap()
    });
}

/// Unary, scale, pow and clamp maps on several elements (every unary
/// function; gelu's newborn-gradient `=` path included), and a mean.
#[test]
fn maps_match_eager() {
    same_bits(&[&[5], &[5]], &[5], |c, p, x| {
        let h = c.mul(p[0], x).unwrap();
        let mut acc = c.sum(h).unwrap();
        let fs: [fn(&mut Context, Tensor) -> crate::Result<Tensor>; 10] = [
            Context::exp,
            Context::tanh,
            Context::relu,
            Context::sigmoid,
            Context::abs,
            Context::gelu,
            Context::softplus,
            Context::erf,
            Context::lgamma,
            Context::digamma,
        ];
        for f in fs {
            let u = f(c, h).unwrap();
            let s = c.mean(u).unwrap();
            acc = c.add(acc, s).unwrap();
        }
        let e = c.exp(p[1]).unwrap(); // positive, for log, sqrt and pow
        let l = c.log(e).unwrap();
        let r = c.sqrt(e).unwrap();
        let q = c.pow(e, 1.5).unwrap();
        let k = c.clamp(h, -0.4, 0.4).unwrap();
        let s = c.scale(k, -2.5).unwrap();
        for t in [l, r, q, s] {
            let t = c.sum(t).unwrap();
            acc = c.add(acc, t).unwrap();
        }
        // gelu alone on a gradient born there: its `=` path.
        let g = c.gelu(p[1]).unwrap();
        let g = c.sum(g).unwrap();
        c.add(acc, g).unwrap()
    });
}

/// Binary ops on several elements: every function, same shapes,
/// broadcasts on both sides ([3, 1] with [4], [3, 4] with [1]), one
/// tensor on both sides (v * v, v + v), same-shape add and sub with
/// newborn gradients.
#[test]
fn binaries_match_eager() {
    same_bits(&[&[3, 1], &[4], &[3, 4]], &[3, 4], |c, p, x| {
        let (a, b, w) = (p[0], p[1], p[2]);
        let ab = c.mul(a, b).unwrap(); // [3, 4] from [3, 1] and [4]
        let d = c.div(x, ab).unwrap();
        let s = c.sub(d, w).unwrap();
        let t = c.add(s, x).unwrap();
        let m = c.maximum(t, b).unwrap();
        let n = c.minimum(a, m).unwrap();
        let vv = c.mul(n, n).unwrap();
        let v2 = c.add(vv, vv).unwrap();
        let one = c.tensor(&[1], &[0.25]).unwrap();
        let o = c.sub(one, v2).unwrap(); // [1] with [3, 4]
        let bd = c.div(b, a).unwrap(); // [4] / [3, 1]
        let z = c.add(o, bd).unwrap();
        let y = c.sub(z, w).unwrap();
        c.sum(y).unwrap()
    });
}

/// Slices along the first and the last axis of a matrix, and of a
/// slice.
#[test]
fn slices_match_eager() {
    same_bits(&[&[3, 4]], &[2, 4], |c, p, x| {
        let w = p[0];
        let rows = c.slice(w, 0, 1, 2).unwrap(); // [2, 4]
        let cols = c.slice(w, 1, 1, 2).unwrap(); // [3, 2]
        let inner = c.slice(cols, 0, 2, 1).unwrap(); // [1, 2]
        let a = c.mul(rows, x).unwrap();
        let b = c.tanh(inner).unwrap();
        let (sa, sb) = (c.sum(a).unwrap(), c.sum(b).unwrap());
        let sc = c.mean(cols).unwrap();
        let t = c.add(sa, sb).unwrap();
        c.sub(t, sc).unwrap()
    });
}

/// Events a gradient-ready callback saw: (first float, gradient bits)
/// per ready bucket, `usize::MAX` per tick.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(usize, Vec<u32>)>>>;

fn watch(c: &mut Context) -> Seen {
    use crate::grad_ready::GradEvent;
    let seen = Seen::default();
    let log = seen.clone();
    let cb = move |e: GradEvent<'_>| {
        let ev = match e {
            GradEvent::Ready { first, grads } => {
                (first, grads.iter().map(|g| g.to_bits()).collect())
            }
            GradEvent::Tick => (usize::MAX, Vec::new()),
        };
        log.lock().unwrap().push(ev);
    };
    c.set_grad_ready(0, Some(Box::new(cb))).unwrap();
    seen
}

/// With a gradient-ready callback set, a replay takes the ordinary
/// walk: the callback sees what it sees in the eager backward.
#[test]
fn grad_ready_callback_fires_as_eager() {
    let (mut eager, mut rep) = (Context::new(), Context::new());
    let (pe, pr) = (params(&mut eager, true), params(&mut rep, true));
    rep.capture_begin().unwrap();
    let xi = rep.input_new(&[1]).unwrap();
    let loss_r = model(&mut rep, &pr, xi);
    rep.backward(loss_r).unwrap();
    let step = rep.capture_end(loss_r).unwrap();
    let (se, sr) = (watch(&mut eager), watch(&mut rep));
    for i in 0..3 {
        let xv = [0.4 - 0.3 * i as f32];
        eager.reset();
        eager.zero_grad();
        let xe = eager.tensor(&[1], &xv).unwrap();
        let loss_e = model(&mut eager, &pe, xe);
        eager.backward(loss_e).unwrap();
        rep.input_write(xi, &xv).unwrap();
        rep.zero_grad();
        rep.replay(step).unwrap();
        assert_eq!(bits(&eager, &pe, loss_e), bits(&rep, &pr, loss_r));
    }
    let (se, sr) = (se.lock().unwrap().clone(), sr.lock().unwrap().clone());
    assert!(se.iter().filter(|e| e.0 != usize::MAX).count() >= 3 * pe.len());
    assert_eq!(se, sr);
}

/// A step with an op the program does not cover (a log-softmax) has no
/// program (its replay is the ordinary one); one with an
/// element-wise op on more than MAXN elements has one.
#[test]
fn other_steps_have_no_program() {
    let mut c = Context::new();
    let w = c.param(&[3], Some(&[1.0, 2.0, 3.0])).unwrap();
    let n = super::MAXN + 1;
    let v = c.param(&[n], Some(&vec![0.5; n])).unwrap();
    c.capture_begin().unwrap();
    // Dropout draws its mask: it keeps the ordinary walk.
    let seed = c.input_new(&[4]).unwrap();
    let t = c.dropout_seeded(w, 0.5, seed).unwrap();
    let loss = c.sum(t).unwrap();
    c.backward(loss).unwrap();
    let step = c.capture_end(loss).unwrap();
    assert!(!c.step_has_program(step));
    c.replay(step).unwrap();
    c.capture_begin().unwrap();
    let t = c.tanh(v).unwrap();
    let loss = c.sum(t).unwrap();
    c.backward(loss).unwrap();
    let step = c.capture_end(loss).unwrap();
    assert!(c.step_has_program(step));
    c.replay(step).unwrap();
}

/// Element-wise ops on `R * C` elements, more than MAXN: equal shapes, a
/// one-element operand, a row broadcast ([C] over [R, C]) and a column
/// one ([R, 1]), every kind of map, an operand read twice (w * w, y + y)
/// and a reshape view, ending in a small scalar tail. Parameters: w [R *
/// C], s [1], r [C], col [R, 1]; input [R * C].
fn wide_model<const R: usize, const C: usize>(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, s, r, col) = (p[0], p[1], p[2], p[3]);
    let h = c.mul(w, x).unwrap();
    let h = c.add(h, s).unwrap();
    let h = c.sub(s, h).unwrap();
    let t = c.tanh(h).unwrap();
    let e = c.exp(t).unwrap();
    let q = c.pow(e, 1.5).unwrap();
    let k = c.clamp(q, 0.3, 3.0).unwrap();
    let z = c.scale(k, -0.5).unwrap();
    let sq = c.mul(w, w).unwrap();
    let z = c.sub(z, sq).unwrap();
    let zr = c.reshape(z, &[R, C]).unwrap();
    let y = c.mul(zr, r).unwrap();
    let y = c.div(y, col).unwrap();
    let y = c.maximum(y, s).unwrap();
    let y = c.sigmoid(y).unwrap();
    let y = c.minimum(r, y).unwrap();
    let y = c.add(y, y).unwrap();
    let m = c.mean(y).unwrap();
    c.mul(m, s).unwrap()
}

/// Element-wise ops of 100 and 1000 elements replay through the program
/// (no fallback: `same_bits` checks the step has one) with the eager
/// path's bits, gradients of the broadcast operands included.
#[test]
fn wide_element_ops_match_eager() {
    same_bits(
        &[&[100], &[1], &[10], &[10, 1]],
        &[100],
        wide_model::<10, 10>,
    );
    same_bits(
        &[&[1000], &[1], &[40], &[25, 1]],
        &[1000],
        wide_model::<25, 40>,
    );
}

/// logsumexp along an axis replays through the program with the eager
/// path's bits: along an axis of two (the pair kernel), a longer first
/// axis, the last axis of a small tensor, and lines holding -inf (the
/// general rules' path).
#[test]
fn logsumexp_axis_matches_eager() {
    same_bits(&[&[2, 1], &[3, 1]], &[1, 40], |c, p, x| {
        let z = c.sub(x, p[0]).unwrap(); // [2, 40]
        let z = c.mul(z, z).unwrap();
        let z = c.scale(z, -0.5).unwrap();
        let pair = c.logsumexp_axis(z, 0, false).unwrap(); // [40]
        let h = c.mul(x, p[1]).unwrap(); // [3, 40]
        let three = c.logsumexp_axis(h, 0, true).unwrap(); // [1, 40]
        let small = c.slice(h, 1, 0, 4).unwrap(); // [3, 4]
        let last = c.logsumexp_axis(small, 1, false).unwrap(); // [3]
        let ninf = c.tensor(&[1, 40], &[f32::NEG_INFINITY; 40]).unwrap();
        let with_ninf = c.concat(&[z, ninf], 0).unwrap(); // [3, 40]
        let masked = c.logsumexp_axis(with_ninf, 0, false).unwrap(); // [40]
        let l = c.sum(pair).unwrap();
        let t = c.mean(three).unwrap();
        let l = c.add(l, t).unwrap();
        let t = c.sum(last).unwrap();
        let l = c.sub(l, t).unwrap();
        let t = c.mean(masked).unwrap();
        c.add(l, t).unwrap()
    });
}

/// Element-wise ops large enough for the eager path to cut them into
/// tasks on two threads (equal-shape binary ops, a splitting unary map)
/// give the same bits through the program.
#[test]
fn wide_ops_cut_into_tasks_match_eager() {
    const N: usize = 1 << 18;
    same_bits(&[&[N], &[1]], &[N], |c, p, x| {
        let h = c.mul(p[0], x).unwrap();
        let h = c.add(h, p[0]).unwrap();
        let t = c.tanh(h).unwrap();
        let e = c.exp(t).unwrap();
        let d = c.sub(e, h).unwrap();
        let d = c.mul(d, p[1]).unwrap();
        c.mean(d).unwrap()
    });
}

/// A view made with gradients off needs none while the tensor it views
/// does: the program, which reads a view as that tensor, cannot hold it,
/// so the step replays the ordinary way, with the eager path's bits.
#[test]
fn view_without_gradient_takes_the_ordinary_path() {
    let model = |c: &mut Context, p: &[Tensor], x: Tensor| {
        c.set_grad_enabled(false);
        let frozen = c.reshape(p[0], &[2, 1]).unwrap();
        c.set_grad_enabled(true);
        let live = c.reshape(p[0], &[2, 1]).unwrap();
        let h = c.mul(frozen, live).unwrap();
        let h = c.mul(h, x).unwrap();
        c.sum(h).unwrap()
    };
    let (mut eager, mut rep) = (Context::new(), Context::new());
    let pe = [eager.param(&[2], Some(&[0.5, -1.5])).unwrap()];
    let pr = [rep.param(&[2], Some(&[0.5, -1.5])).unwrap()];
    rep.capture_begin().unwrap();
    let xi = rep.input_new(&[2, 1]).unwrap();
    rep.input_write(xi, &[1.0, 1.0]).unwrap();
    let loss_r = model(&mut rep, &pr, xi);
    rep.backward(loss_r).unwrap();
    let step = rep.capture_end(loss_r).unwrap();
    assert!(!rep.step_has_program(step));
    for i in 0..3 {
        let xv = [0.3 + i as f32, -0.7 * i as f32];
        eager.reset();
        eager.zero_grad();
        let xe = eager.tensor(&[2, 1], &xv).unwrap();
        let loss_e = model(&mut eager, &pe, xe);
        eager.backward(loss_e).unwrap();
        rep.zero_grad();
        rep.input_write(xi, &xv).unwrap();
        rep.replay(step).unwrap();
        assert_eq!(all_bits(&eager, &pe, loss_e), all_bits(&rep, &pr, loss_r));
    }
}

/// Every op kind the program adds to element ops, in one step: views of
/// a parameter, the input and an activation, sums along axes, `where`
/// with a broadcast condition, concat and a transpose.
#[test]
fn shape_ops_match_eager() {
    same_bits(&[&[2, 3], &[3]], &[6], |c, p, x| {
        let (w, v) = (p[0], p[1]);
        let xr = c.reshape(x, &[2, 3]).unwrap();
        let h = c.mul(w, xr).unwrap();
        let rows = c.sum_axis(h, 1, true).unwrap(); // [2, 1]
        let cols = c.mean_axis(h, 0, false).unwrap(); // [3]
        let cond = c.relu(xr).unwrap();
        let s = c.select(cond, v, rows).unwrap(); // [2, 3]
        let j = c.concat(&[s, h], 0).unwrap(); // [4, 3]
        let jt = c.transpose(j, 0, 1).unwrap(); // [3, 4]
        let jf = c.reshape(jt, &[12]).unwrap();
        let t = c.tanh(jf).unwrap();
        let a = c.sum(t).unwrap();
        let b = c.sum(cols).unwrap();
        c.mul(a, b).unwrap()
    });
}

/// A multivariate normal through the matrix ops, each run by its eager
/// entry points: a covariance (positive definite: a small tanh plus
/// 2 I), its Cholesky factor, a solve of the data, ln det twice (a view's
/// diagonal, `log_det_spd`), and a solve with one tensor as both L and B
/// (two inputs sharing a gradient slot and its "born" mark).
fn matrix_model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (raw, mu) = (p[0], p[1]); // [3, 3], [3, 1]
    let two_eye = c
        .tensor(&[3, 3], &[2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0])
        .unwrap();
    let t = c.tanh(raw).unwrap();
    let t = c.scale(t, 0.2).unwrap();
    let s = c.add(t, two_eye).unwrap();
    let l = c.cholesky(s).unwrap();
    let xm = c.sub(x, mu).unwrap(); // [3, 2]
    let z = c.solve_lower(l, xm).unwrap();
    let q = c.mul(z, z).unwrap();
    let q = c.sum(q).unwrap();
    let lv = c.reshape(l, &[9]).unwrap();
    let lv = c.reshape(lv, &[3, 3]).unwrap();
    let d = c.diagonal(lv).unwrap();
    let d = c.log(d).unwrap();
    let d = c.sum(d).unwrap();
    let ld = c.log_det_spd(s).unwrap();
    let self_solve = c.solve_lower(l, l).unwrap(); // L^{-1} L
    let u = c.sum(self_solve).unwrap();
    let out = c.sub(q, d).unwrap();
    let out = c.add(out, ld).unwrap();
    c.mul(out, u).unwrap()
}

#[test]
fn matrix_ops_match_eager() {
    same_bits(&[&[3, 3], &[3, 1]], &[3, 2], matrix_model);
}

/// The incomplete beta function on broadcast operands, one tensor as
/// both a and b, a ternary op the program runs by its eager entries.
#[test]
fn beta_inc_matches_eager() {
    same_bits(&[&[4], &[1]], &[4], |c, p, x| {
        let a = c.exp(p[0]).unwrap();
        let b = c.exp(p[1]).unwrap();
        let xs = c.sigmoid(x).unwrap();
        let i1 = c.beta_inc(a, b, xs).unwrap();
        let i2 = c.beta_inc(a, a, xs).unwrap();
        let l = c.log(i1).unwrap();
        let l = c.sum(l).unwrap();
        let m = c.mul(i1, i2).unwrap();
        let m = c.sum(m).unwrap();
        c.add(l, m).unwrap()
    });
}

/// What the walk leaves in the table (each row's gradient buffer, its
/// "born" mark and its flow mark), as text.
fn walk_state(c: &Context) -> Vec<String> {
    c.table_rows()
        .iter()
        .map(|e| format!("{:?} {} {}", e.grad, e.unzeroed, e.flow))
        .collect()
}

/// An op run by its eager entry points has the program's gradient state
/// lent to its table rows only for its backward: after a replay, the
/// table's rows are as the ordinary walk leaves them.
#[test]
fn eager_steps_leave_the_table_as_the_walk_does() {
    let mut c = Context::new();
    let p = [
        c.param(
            &[3, 3],
            Some(&[0.3, -0.2, 0.1, 0.5, 0.7, -0.4, 0.2, 0.6, -0.1]),
        )
        .unwrap(),
        c.param(&[3, 1], Some(&[0.1, -0.3, 0.2])).unwrap(),
    ];
    c.capture_begin().unwrap();
    let xi = c.input_new(&[3, 2]).unwrap();
    c.input_write(xi, &[0.5, -0.5, 1.0, 0.25, -1.0, 0.75])
        .unwrap();
    let loss = matrix_model(&mut c, &p, xi);
    c.backward(loss).unwrap();
    let walked = walk_state(&c);
    let step = c.capture_end(loss).unwrap();
    assert!(c.step_has_program(step));
    let grad_of_walk = all_bits(&c, &p, loss);
    c.zero_grad();
    c.replay(step).unwrap();
    assert_eq!(walk_state(&c), walked);
    assert_eq!(all_bits(&c, &p, loss), grad_of_walk);
}

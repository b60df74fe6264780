//! Replay against eager, per recorded op, for small models built from the
//! shape ops a replay program may cover: a GARCH(1,1) log-likelihood read
//! through length-1 slices of one series, axis sums, `where`, concat,
//! permutes and reshape views, beside a chain of scalar element ops (the program's
//! best case, for reference). Each model is captured once, then timed as eager
//! iterations (reset, zero_grad, forward, backward) and as replays
//! (zero_grad, replay), alternating batches; the figures are medians in ns
//! per recorded op (forward and backward together). Before timing, the
//! replay's loss and gradients are compared with the eager ones bit for bit
//! (a mismatch exits 1).
//!
//! `cargo run --release --example bench_replay_ops [-- --reps N] [--model NAME]`

use arenagrad::{Context, Tensor};
use std::time::Instant;

/// A model: builds the graph over the parameters and one input slot,
/// counting the ops it records; returns the loss.
type Model = fn(&mut Context, &[Tensor], Tensor, &mut usize) -> Tensor;

/// T steps of sigma2_t = w + a r_{t-1}^2 + b sigma2_{t-1}, summing
/// -0.5 (ln sigma2_t + r_t^2 / sigma2_t); the series is one tensor read
/// through length-1 slices, the parameters are one-element tensors.
const T: usize = 400;

fn garch(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let (w, a, b) = (p[0], p[1], p[2]);
    let mut sigma2 = p[3];
    let r0 = op(c.slice(x, 0, 0, 1));
    let mut r2_prev = op(c.mul(r0, r0));
    let mut ll: Option<Tensor> = None;
    for t in 1..T {
        let ar = op(c.mul(a, r2_prev));
        let bs = op(c.mul(b, sigma2));
        let s = op(c.add(w, ar));
        sigma2 = op(c.add(s, bs));
        let r = op(c.slice(x, 0, t, 1));
        let r2 = op(c.mul(r, r));
        let ls = op(c.log(sigma2));
        let q = op(c.div(r2, sigma2));
        let term = op(c.add(ls, q));
        ll = Some(match ll {
            None => term,
            Some(acc) => op(c.add(acc, term)),
        });
        r2_prev = r2;
    }
    let ll = ll.unwrap();
    op(c.scale(ll, -0.5))
}

/// The reference: bench_replay.c's scalar chain (element ops only, the
/// series as constants), 250 steps of h = tanh(a h + b x_t + c),
/// acc += exp(s h).
fn chain(c: &mut Context, p: &[Tensor], _x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let (a, b, cc, s) = (p[0], p[1], p[2], p[3]);
    let mut h = cc;
    let mut acc: Option<Tensor> = None;
    for t in 0..250 {
        let ah = op(c.mul(a, h));
        let bx = op(c.scale(b, (t as f32 * 0.7).sin()));
        let z = op(c.add(ah, bx));
        let z = op(c.add(z, cc));
        h = op(c.tanh(z));
        let sh = op(c.mul(s, h));
        let e = op(c.exp(sh));
        acc = Some(match acc {
            None => e,
            Some(acc) => op(c.add(acc, e)),
        });
    }
    let acc = acc.unwrap();
    op(c.scale(acc, 1.0 / 250.0))
}

/// Rows summed along each axis of small matrices, mixed with element ops.
fn axis_sums(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let w = p[0]; // [3, 4]
    let mut acc = op(c.sum(x));
    for k in 0..100 {
        let h = op(c.mul(w, x));
        let rows = op(c.sum_axis(h, 1, false)); // [3]
        let cols = op(c.mean_axis(h, 0, true)); // [1, 4]
        let t = op(c.tanh(rows));
        let s = op(c.sum_axis(t, 0, false)); // [1]
        let u = op(c.sum_axis(cols, -1, false)); // [1]
        let v = op(c.add(s, u));
        let v = op(c.scale(v, 1.0 / (k + 1) as f32));
        acc = op(c.add(acc, v));
    }
    acc
}

/// A piecewise recursion through `where` on one-element tensors, with a
/// broadcast select on a few elements.
fn select(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let (a, v) = (p[0], p[1]); // [1], [4]
    let mut h = op(c.mul(a, a));
    for k in 0..200 {
        let r = op(c.slice(x, 0, k % 4, 1));
        let d = op(c.sub(h, r));
        let pos = op(c.relu(d));
        let t = op(c.select(pos, d, r));
        h = op(c.scale(t, 0.9));
    }
    let m = op(c.select(x, v, h)); // [4] from [4], [4], [1]
    let s = op(c.sum(m));
    op(c.add(s, h))
}

/// A recursion that joins one-element terms with concat and sums them.
fn concat(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let (a, b) = (p[0], p[1]);
    let mut h = op(c.mul(a, b));
    let mut acc = op(c.sum(x));
    for k in 0..100 {
        let r = op(c.slice(x, 0, k % 4, 1));
        let u = op(c.mul(h, r));
        let e = op(c.tanh(u));
        let j = op(c.concat(&[e, a, b, u], 0)); // [4]
        let m = op(c.mul(j, x));
        let s = op(c.sum(m));
        h = op(c.scale(s, 0.5));
        acc = op(c.add(acc, h));
    }
    acc
}

/// Element ops on reshape views of parameters, inputs and activations.
fn views(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let w = p[0]; // [2, 2]
    let mut h = op(c.reshape(x, &[2, 2]));
    for _ in 0..200 {
        let m = op(c.mul(h, w));
        let f = op(c.reshape(m, &[4]));
        let t = op(c.tanh(f));
        h = op(c.reshape(t, &[2, 2]));
    }
    let v = op(c.reshape(h, &[4, 1]));
    op(c.sum(v))
}

/// Transposes of a small matrix between element ops.
fn permutes(c: &mut Context, p: &[Tensor], x: Tensor, n: &mut usize) -> Tensor {
    let mut op = |t: arenagrad::Result<Tensor>| {
        *n += 1;
        t.unwrap()
    };
    let w = p[0]; // [2, 3]
    let mut h = op(c.reshape(x, &[3, 2]));
    for _ in 0..100 {
        let t = op(c.transpose(h, 0, 1)); // [2, 3]
        let m = op(c.mul(t, w));
        let e = op(c.tanh(m));
        h = op(c.permute(e, &[1, 0])); // [3, 2]
    }
    op(c.sum(h))
}

struct Case {
    name: &'static str,
    params: &'static [(&'static [usize], &'static [f32])],
    input: &'static [f32],
    model: Model,
}

const CASES: &[Case] = &[
    Case {
        name: "chain",
        params: &[
            (&[1], &[0.7]),
            (&[1], &[0.5]),
            (&[1], &[0.1]),
            (&[1], &[0.3]),
        ],
        input: &[0.0],
        model: chain,
    },
    Case {
        name: "garch",
        params: &[
            (&[1], &[0.05]),
            (&[1], &[0.1]),
            (&[1], &[0.85]),
            (&[1], &[0.4]),
        ],
        input: &[],
        model: garch,
    },
    Case {
        name: "axis_sums",
        params: &[(
            &[3, 4],
            &[
                0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -1.0, 1.1, 1.2,
            ],
        )],
        input: &[0.3, -0.2, 0.5, 0.1],
        model: axis_sums,
    },
    Case {
        name: "where",
        params: &[(&[1], &[0.7]), (&[4], &[0.5, -0.5, 0.25, 1.0])],
        input: &[0.3, 0.0, 0.5, -0.1],
        model: select,
    },
    Case {
        name: "concat",
        params: &[(&[1], &[0.7]), (&[1], &[0.6])],
        input: &[0.3, -0.2, 0.5, 0.1],
        model: concat,
    },
    Case {
        name: "permutes",
        params: &[(&[2, 3], &[0.9, 1.1, -0.8, 1.2, 0.5, -0.7])],
        input: &[0.3, -0.2, 0.5, 0.1, -0.4, 0.6],
        model: permutes,
    },
    Case {
        name: "views",
        params: &[(&[2, 2], &[0.9, 1.1, -0.8, 1.2])],
        input: &[0.3, -0.2, 0.5, 0.1],
        model: views,
    },
];

/// The GARCH series: a deterministic return-like sequence.
fn series() -> Vec<f32> {
    (0..T)
        .map(|t| 0.3 * ((t as f32 * 0.7).sin() + 0.5 * (t as f32 * 0.13).cos()))
        .collect()
}

fn grads(c: &Context, p: &[Tensor], loss: Tensor) -> Vec<u32> {
    let mut out = vec![c.item(loss).unwrap().to_bits()];
    for &t in p {
        let mut g = vec![0.0; c.numel(t).unwrap()];
        c.read_grad(t, &mut g).unwrap();
        out.extend(g.iter().map(|v| v.to_bits()));
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(case: &Case, reps: usize) {
    let garch_input = series();
    let input: &[f32] = if case.input.is_empty() {
        &garch_input
    } else {
        case.input
    };
    let (mut eager, mut rep) = (Context::new(), Context::new());
    let mut pe = Vec::new();
    let mut pr = Vec::new();
    for (shape, v) in case.params {
        pe.push(eager.param(shape, Some(v)).unwrap());
        pr.push(rep.param(shape, Some(v)).unwrap());
    }
    let mut ops = 0;
    rep.capture_begin().unwrap();
    let xi = rep.input_new(&[input.len()]).unwrap();
    rep.input_write(xi, input).unwrap();
    let loss_r = (case.model)(&mut rep, &pr, xi, &mut ops);
    rep.backward(loss_r).unwrap();
    let step = rep.capture_end(loss_r).unwrap();

    let mut eager_iter = |check: bool| -> Option<Vec<u32>> {
        eager.reset();
        eager.zero_grad();
        let x = eager.tensor(&[input.len()], input).unwrap();
        let mut n = 0;
        let loss = (case.model)(&mut eager, &pe, x, &mut n);
        eager.backward(loss).unwrap();
        check.then(|| grads(&eager, &pe, loss))
    };
    let mut replay = |check: bool| -> Option<Vec<u32>> {
        rep.zero_grad();
        rep.replay(step).unwrap();
        check.then(|| grads(&rep, &pr, loss_r))
    };
    if eager_iter(true) != replay(true) {
        eprintln!("bench_replay_ops: {}: replay differs from eager", case.name);
        std::process::exit(1);
    }
    let batch = (200_000 / ops).max(1);
    let (mut te, mut tr) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t0 = Instant::now();
        for _ in 0..batch {
            eager_iter(false);
        }
        let t1 = Instant::now();
        for _ in 0..batch {
            replay(false);
        }
        let t2 = Instant::now();
        let per = (batch * ops) as f64;
        te.push((t1 - t0).as_nanos() as f64 / per);
        tr.push((t2 - t1).as_nanos() as f64 / per);
    }
    let (e, r) = (median(&mut te), median(&mut tr));
    println!(
        "bench replay_ops model={} ops={ops} eager_ns_per_op={e:.1} replay_ns_per_op={r:.1} replay_us_per_step={:.1} speedup={:.2}",
        case.name,
        r * ops as f64 / 1000.0,
        e / r
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let reps = value("--reps").and_then(|v| v.parse().ok()).unwrap_or(15);
    let only = value("--model");
    for case in CASES {
        if only.as_deref().is_none_or(|m| m == case.name) {
            run(case, reps);
        }
    }
}

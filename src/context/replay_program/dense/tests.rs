//! Dense form tests: which steps get it, and its replays against the
//! eager path, bit for bit.

use crate::context::replay_program::tests::{Model, model, same_bits};
use crate::context::{Context, Tensor};

/// Whether `model`, captured as [`same_bits`] captures it, gets a
/// program with the dense form of one-element steps.
fn is_dense(shapes: &[&[usize]], input: &[usize], model: Model) -> bool {
    let mut c = Context::new();
    let p: Vec<Tensor> = shapes
        .iter()
        .map(|sh| {
            let n: usize = sh.iter().product();
            c.param(sh, Some(&vec![0.4; n])).unwrap()
        })
        .collect();
    c.capture_begin().unwrap();
    let x = c.input_new(input).unwrap();
    c.input_write(x, &vec![0.3; input.iter().product()])
        .unwrap();
    let loss = model(&mut c, &p, x);
    c.backward(loss).unwrap();
    let step = c.capture_end(loss).unwrap();
    c.step_has_dense_program(step)
}

/// A scalar model over one-element slices of a parameter vector and of
/// the input (a sampler's position, a data series): every unary
/// function, every binary function, scale, pow and clamp, shared
/// operands (v * v, v + v, v - v), a one-element slice of a
/// one-element tensor, and equal-shape and broadcast ([1] with [1, 1])
/// adds.
fn scalar_model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let pick = |c: &mut Context, t: Tensor, i: usize| c.slice(t, 0, i, 1).unwrap();
    let (a, b, w) = (pick(c, p[0], 0), pick(c, p[0], 2), p[1]);
    let x0 = pick(c, x, 0);
    let x1 = pick(c, x, 1);
    let h = c.mul(a, x0).unwrap();
    let h = c.add(h, b).unwrap();
    let u = c.sigmoid(h).unwrap(); // in (0, 1): every function's domain
    let fs: [fn(&mut Context, Tensor) -> crate::Result<Tensor>; 18] = [
        Context::exp,
        Context::log,
        Context::tanh,
        Context::relu,
        Context::sigmoid,
        Context::gelu,
        Context::silu,
        Context::sqrt,
        Context::abs,
        Context::lgamma,
        Context::digamma,
        Context::trigamma,
        Context::softplus,
        Context::log_sigmoid,
        Context::erf,
        Context::normal_cdf,
        Context::normal_lcdf,
        Context::inv_phi,
    ];
    let mut acc = c.mul(h, h).unwrap();
    for f in fs {
        let v = f(c, u).unwrap();
        acc = c.add(acc, v).unwrap();
    }
    let e = c.exp(x1).unwrap(); // positive
    let e2 = c.add(e, e).unwrap();
    let lb = c.lbeta(e, u).unwrap();
    let ld = c.log_diff_exp(e2, e).unwrap();
    let gp = c.gamma_p(e, u).unwrap();
    let gq = c.gamma_q(u, e).unwrap();
    let d = c.div(lb, e2).unwrap();
    let mx = c.maximum(ld, gp).unwrap();
    let mn = c.minimum(gq, mx).unwrap();
    let z = c.sub(e, e).unwrap();
    let s = c.scale(mn, -1.5).unwrap();
    let q = c.pow(u, 2.5).unwrap();
    let k = c.clamp(h, -0.2, 0.2).unwrap();
    let one = pick(c, k, 0); // a slice of a one-element tensor
    for t in [d, mx, z, s, q, one] {
        acc = c.sub(acc, t).unwrap();
    }
    let g = c.gelu(b).unwrap(); // a gradient born at an `=` write
    let acc = c.add(acc, g).unwrap();
    c.mul(acc, w).unwrap() // [1] with [1, 1]
}

/// The dense form of a scalar step gives the eager path's bits.
#[test]
fn dense_scalar_steps_match_eager() {
    assert!(is_dense(&[&[4], &[1, 1]], &[3], scalar_model));
    same_bits(&[&[4], &[1, 1]], &[3], scalar_model);
}

/// A model over short vectors (at most MAXN elements): element-wise ops
/// with each broadcast ([4] with [1], [2, 3] with [3] and with [2, 1]),
/// equal-shape add and sub (one with shared operands), v * v, sums and
/// means (of one element too), slices of rows and of columns, a concat
/// along each axis, and one-element picks of a vector: the kinds a small
/// model's dense form runs element by element.
fn vector_model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (v, m, w) = (p[0], p[1], p[2]); // [6], [2, 3], [1]
    let head = c.slice(v, 0, 0, 4).unwrap(); // [4]
    let tail = c.slice(v, 0, 4, 2).unwrap(); // [2]
    let h = c.mul(head, w).unwrap(); // [4] with [1]
    let h = c.add(h, x).unwrap(); // x is [4]
    let s = c.sigmoid(h).unwrap();
    let l = c.log(s).unwrap();
    let q = c.mul(l, l).unwrap();
    let q = c.scale(q, 0.5).unwrap();
    let e = c.exp(tail).unwrap();
    let ee = c.add(e, e).unwrap(); // shared operands, equal shapes
    let e3 = c.sub(ee, e).unwrap();
    let row = c.reshape(e3, &[2, 1]).unwrap();
    let b1 = c.mul(m, row).unwrap(); // [2, 3] with [2, 1]
    let col = c.slice(m, 1, 1, 1).unwrap(); // [2, 1]: a column
    let r1 = c.slice(m, 0, 1, 1).unwrap(); // [1, 3]: a row
    let r1 = c.reshape(r1, &[3]).unwrap();
    let b2 = c.div(b1, r1).unwrap(); // [2, 3] with [3]
    let cat = c.concat(&[b2, col], 1).unwrap(); // [2, 4]
    let cat2 = c.concat(&[cat, cat], 0).unwrap(); // [4, 4]
    let t = c.tanh(cat2).unwrap();
    let k = c.clamp(t, -0.5, 0.5).unwrap();
    let pw = c.pow(e, 1.5).unwrap();
    let one = c.slice(pw, 0, 1, 1).unwrap(); // a pick
    let sq = c.sum(q).unwrap();
    let mk = c.mean(k).unwrap();
    let s1 = c.sum(one).unwrap(); // a sum of one element
    let acc = c.add(sq, mk).unwrap();
    let acc = c.sub(acc, s1).unwrap();
    let mw = c.mean(w).unwrap();
    // One-element activations broadcast over two elements (as the first
    // operand and as the second), each gradient born at that op: vectors
    // this short run as one instruction per element, the zero fill
    // folded into the first.
    let ew = c.exp(w).unwrap();
    let pair = c.mul(tail, ew).unwrap();
    let sp = c.sum(pair).unwrap();
    let acc = c.add(acc, sp).unwrap();
    let sw = c.sigmoid(w).unwrap();
    let pair = c.div(sw, tail).unwrap();
    let sp = c.sum(pair).unwrap();
    let acc = c.add(acc, sp).unwrap();
    c.mul(acc, mw).unwrap()
}

/// The dense form of a step of short-vector ops gives the eager path's
/// bits.
#[test]
fn dense_vector_steps_match_eager() {
    let shapes: [&[usize]; 3] = [&[6], &[2, 3], &[1]];
    assert!(is_dense(&shapes, &[4], vector_model));
    same_bits(&shapes, &[4], vector_model);
}

/// The dense form writes every activation back: a caller reading one
/// after a replay reads the eager path's value.
#[test]
fn dense_replay_writes_activations() {
    let model = |c: &mut Context, x: Tensor| {
        let t = c.slice(x, 0, 1, 3).unwrap();
        let u = c.exp(t).unwrap();
        let cat = c.concat(&[u, t], 0).unwrap();
        (cat, c.sum(cat).unwrap())
    };
    let mut c = Context::new();
    let p = c.param(&[5], Some(&[0.1, 0.2, 0.3, 0.4, 0.5])).unwrap();
    c.capture_begin().unwrap();
    let (cat, loss) = model(&mut c, p);
    c.backward(loss).unwrap();
    let step = c.capture_end(loss).unwrap();
    assert!(c.step_has_dense_program(step));
    let v = [0.9, -0.3, 0.7, 1.1, -2.0];
    c.param_write(p, &v).unwrap();
    c.zero_grad();
    c.replay(step).unwrap();
    let mut e = Context::new();
    let pe = e.param(&[5], Some(&v)).unwrap();
    let (cat_e, _) = model(&mut e, pe);
    let bits = |c: &Context, t: Tensor| -> Vec<u32> {
        let mut out = [0.0f32; 6];
        c.read(t, &mut out).unwrap();
        out.iter().map(|v| v.to_bits()).collect()
    };
    assert_eq!(bits(&c, cat), bits(&e, cat_e));
}

/// A model with escapes among at least ten small ops: element-wise ops
/// on more than MAXN elements (binary, unary, with a broadcast operand the
/// dense form holds), a sum of such a tensor (read by a dense sum), a sum
/// along an axis and a matmul (read by dense ops), gradients born for
/// tensors only escapes touch, and parameters read by escapes only and by
/// both.
fn escape_model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (v, m, w) = (p[0], p[1], p[2]); // [20], [2, 3], [1]
    let e = c.exp(w).unwrap(); // dense, [1]
    let t = c.mul(v, x).unwrap(); // escape: [20]
    let t = c.mul(t, e).unwrap(); // escape, a broadcast dense operand
    let u = c.tanh(t).unwrap(); // escape
    let su = c.sum(u).unwrap(); // dense, reads an escape's [20]
    let ax = c.sum_axis(m, 0, false).unwrap(); // escape: [3]
    let mm = c.matmul(m, m, false, true).unwrap(); // escape (eager): [2, 2]
    let a = c.exp(ax).unwrap();
    let b = c.mul(a, w).unwrap();
    let sb = c.sum(b).unwrap();
    let d = c.mul(mm, mm).unwrap();
    let sd = c.mean(d).unwrap();
    let r = c.slice(m, 1, 0, 2).unwrap(); // dense, m read by escapes too
    let sr = c.sum(r).unwrap();
    let ee = c.mul(e, e).unwrap();
    let acc = c.add(su, sb).unwrap();
    let acc = c.sub(acc, sd).unwrap();
    let acc = c.add(acc, sr).unwrap();
    let acc = c.mul(acc, ee).unwrap();
    c.log_sigmoid(acc).unwrap()
}

/// A model of element-wise ops on more than MAXN elements, the eager
/// kernels on the dense ranges: equal shapes (v * x, shared operands in
/// t + t and t - t), a one-element operand over rows of 40 (its gradient
/// summed in running lanes), a [6, 8] table with a [6, 1] column and an
/// [8] row, an outer product of 400 elements (above OUTSIDE_MAX: a range
/// only ops fill), every kind of unary kernel (gradients born at `=` and
/// at `+=` writes), scale, pow and clamp, slices and a concat of wide
/// tensors, sums and means of them, and a matmul escape among them.
fn wide_model(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (v, m, w) = (p[0], p[1], p[2]); // [40], [6, 8], [1]
    let t = c.mul(v, x).unwrap();
    let t = c.mul(t, w).unwrap(); // [40] with [1]
    let tt = c.add(t, t).unwrap();
    let z = c.sub(tt, t).unwrap();
    let e = c.exp(z).unwrap(); // `=` into a born gradient
    let s = c.sigmoid(z).unwrap();
    let l = c.log(s).unwrap();
    let g = c.gelu(t).unwrap();
    let q = c.scale(g, 0.25).unwrap();
    let pw = c.pow(e, 1.5).unwrap();
    let k = c.clamp(l, -0.6, -0.1).unwrap();
    let col = c.slice(m, 1, 2, 1).unwrap(); // [6, 1]
    let row = c.slice(m, 0, 3, 1).unwrap(); // [1, 8]
    let row = c.reshape(row, &[8]).unwrap();
    let d = c.div(m, col).unwrap(); // [6, 8] with [6, 1]
    let d = c.mul(d, row).unwrap(); // [6, 8] with [8]
    let th = c.tanh(d).unwrap();
    let head = c.slice(v, 0, 0, 20).unwrap();
    let a = c.reshape(head, &[20, 1]).unwrap();
    let b = c.slice(x, 0, 20, 20).unwrap();
    let b = c.reshape(b, &[1, 20]).unwrap();
    let outer = c.mul(a, b).unwrap(); // [20, 20]
    let so = c.mean(outer).unwrap();
    let mm = c.matmul(th, th, false, true).unwrap(); // escape: [6, 6]
    let sm = c.sum(mm).unwrap();
    let cat = c.concat(&[pw, k, q], 0).unwrap(); // [120]
    let mid = c.slice(cat, 0, 30, 50).unwrap();
    let sc = c.sum(mid).unwrap();
    let sth = c.mean(th).unwrap();
    let acc = c.add(sc, so).unwrap();
    let acc = c.add(acc, sm).unwrap();
    let acc = c.sub(acc, sth).unwrap();
    let st = c.sum(t).unwrap();
    let acc = c.mul(acc, st).unwrap();
    c.log_sigmoid(acc).unwrap()
}

/// The dense form of wide element-wise ops gives the eager path's bits.
#[test]
fn dense_wide_steps_match_eager() {
    let shapes: [&[usize]; 3] = [&[40], &[6, 8], &[1]];
    assert!(is_dense(&shapes, &[40], wide_model));
    same_bits(&shapes, &[40], wide_model);
}

/// The dense form with escapes gives the eager path's bits.
#[test]
fn dense_steps_with_escapes_match_eager() {
    let shapes: [&[usize]; 3] = [&[20], &[2, 3], &[1]];
    assert!(is_dense(&shapes, &[20], escape_model));
    same_bits(&shapes, &[20], escape_model);
}

/// Which steps get the dense form: small ops only, or enough small ops
/// around escapes (the ops it does not run).
#[test]
fn dense_form_is_for_steps_with_small_ops() {
    assert!(is_dense(&[&[1], &[1], &[1, 1]], &[1], model));
    assert!(is_dense(&[&[3]], &[3], |c, p, x| {
        let t = c.mul(p[0], x).unwrap();
        c.sum(t).unwrap()
    }));
    // An element-wise op on more than MAXN elements runs in it too.
    assert!(is_dense(&[&[17]], &[17], |c, p, x| {
        let t = c.mul(p[0], x).unwrap();
        c.sum(t).unwrap()
    }));
    // One small op after an escape (data above OUTSIDE_MAX): the general
    // program.
    assert!(!is_dense(&[&[300]], &[300], |c, p, x| {
        let t = c.mul(p[0], x).unwrap();
        c.sum(t).unwrap()
    }));
    // Escapes only.
    assert!(!is_dense(&[&[1, 17]], &[17, 1], |c, p, x| {
        c.matmul(p[0], x, false, false).unwrap()
    }));
    // Ten small ops around three eager ones: with every tensor small, the
    // dense form; with a large parameter, eight small ops per eager one
    // are wanted.
    let ten_around_three = |c: &mut Context, p: &[Tensor], x: Tensor| {
        let m = c.slice(p[0], 0, 0, 4).unwrap();
        let m = c.reshape(m, &[2, 2]).unwrap();
        let mut acc = c.sum(x).unwrap();
        for _ in 0..3 {
            let mm = c.matmul(m, m, false, true).unwrap();
            let s = c.sum(mm).unwrap();
            let e = c.exp(s).unwrap();
            acc = c.add(acc, e).unwrap();
        }
        c.scale(acc, 0.5).unwrap()
    };
    assert!(is_dense(&[&[4]], &[2], ten_around_three));
    assert!(!is_dense(&[&[5000]], &[2], ten_around_three));
}

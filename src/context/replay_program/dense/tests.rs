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

/// Which steps get the dense form: one-element ops and slices only.
#[test]
fn dense_form_is_for_scalar_steps_only() {
    assert!(is_dense(&[&[1], &[1], &[1, 1]], &[1], model));
    // A sum over several elements: not a scalar step.
    assert!(!is_dense(&[&[3]], &[3], |c, p, x| {
        let t = c.mul(p[0], x).unwrap();
        c.sum(t).unwrap()
    }));
}

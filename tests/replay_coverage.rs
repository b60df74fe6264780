//! The replay program's coverage beyond small element ops: slices, sums
//! and means along an axis, logsumexp along an axis, `where`, concat,
//! permutes, reshape views and element-wise ops on hundreds of elements,
//! and ops run through their own eager entry points (the matrix functions,
//! the incomplete beta function, the linear recurrence, the correlation
//! factor and its LKJ prior, the fused likelihoods (normal_lpdf and the
//! regressions'), matmuls, norms (with and without their
//! affine parameters), losses, attention, convolutions and pools). Each model is
//! captured once and must get a program (`step_has_program`, a
//! `test-hooks` entry); its replays, with new inputs and moved parameters,
//! must give the eager path's loss and every gradient element bit for bit
//! (on 1 and 2 threads, with and without zero_grad between iterations),
//! a replay that keeps a stale input must differ, and once warm its
//! replays must not call the system allocator (a counting
//! `#[global_allocator]`, so no libtest harness: its threads allocate).

mod common;

use arenagrad::{Context, Conv2dOptions, Pool2dOptions, Tensor};
use common::counting_alloc::{CountingAlloc, count, take_calls};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A model over parameters and one input slot.
type Model = fn(&mut Context, &[Tensor], Tensor) -> Tensor;

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

/// A value in about [-0.6, 1.2], varied by (i, k, salt); some negative,
/// so a `relu` of it has exact zeros (a `where` condition).
fn value(i: usize, k: usize, salt: f32) -> f32 {
    let t = (i * 7 + k * 3) as f32 * 0.37 + salt;
    0.3 + 0.9 * t.sin()
}

/// Captures `model` once (it must get a program), then replays it beside
/// the eager path and asserts the same bits each time; then counts the
/// allocator calls of warm replays (must be none).
fn same_bits(name: &str, shapes: &[&[usize]], input: &[usize], model: Model) {
    let n_in: usize = input.iter().product();
    for single_thread in [true, false] {
        let (mut eager, mut rep) = (Context::new(), Context::new());
        eager.set_single_thread_for_test(single_thread);
        rep.set_single_thread_for_test(single_thread);
        let mut pe = Vec::new();
        let mut pr = Vec::new();
        for (i, sh) in shapes.iter().enumerate() {
            let n: usize = sh.iter().product();
            let v: Vec<f32> = (0..n).map(|k| value(i, k, 0.1)).collect();
            pe.push(eager.param(sh, Some(&v)).unwrap());
            pr.push(rep.param(sh, Some(&v)).unwrap());
        }
        rep.capture_begin().unwrap();
        let xi = rep.input_new(input).unwrap();
        let x0: Vec<f32> = (0..n_in).map(|k| value(9, k, 0.0)).collect();
        rep.input_write(xi, &x0).unwrap();
        let loss_r = model(&mut rep, &pr, xi);
        rep.backward(loss_r).unwrap();
        let step = rep.capture_end(loss_r).unwrap();
        assert!(rep.step_has_program(step), "{name}: no program");
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
            assert_eq!(be, br, "{name}: replay {i} single {single_thread}");
        }
        rep.zero_grad();
        rep.replay(step).unwrap();
        let stale = all_bits(&rep, &pr, loss_r);
        rep.zero_grad();
        rep.input_write(xi, &vec![1.7; n_in]).unwrap();
        rep.replay(step).unwrap();
        assert_ne!(stale, all_bits(&rep, &pr, loss_r), "{name}: stale input");

        // Warm: no allocator call per replay.
        let xv: Vec<f32> = (0..n_in).map(|k| value(5, k, 0.2)).collect();
        count(true);
        for _ in 0..200 {
            rep.input_write(xi, &xv).unwrap();
            rep.zero_grad();
            rep.replay(step).unwrap();
        }
        count(false);
        let calls = take_calls();
        assert_eq!(calls, 0, "{name}: replays called the system allocator");
    }
    println!("replay_coverage: {name} ok");
}

/// GARCH(1,1): sigma2_t = w + a r_{t-1}^2 + b sigma2_{t-1}, the loss
/// -0.5 sum (ln sigma2_t + r_t^2 / sigma2_t); the series (the input) read
/// through length-1 slices, the parameters exp of one-element tensors.
fn garch(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, a, b) = (
        c.exp(p[0]).unwrap(),
        c.exp(p[1]).unwrap(),
        c.exp(p[2]).unwrap(),
    );
    let mut sigma2 = c.exp(p[3]).unwrap();
    let r0 = c.slice(x, 0, 0, 1).unwrap();
    let mut r2_prev = c.mul(r0, r0).unwrap();
    let n = c.numel(x).unwrap();
    let mut ll = c.scale(r2_prev, 0.0).unwrap();
    for t in 1..n {
        let ar = c.mul(a, r2_prev).unwrap();
        let bs = c.mul(b, sigma2).unwrap();
        let s = c.add(w, ar).unwrap();
        sigma2 = c.add(s, bs).unwrap();
        let r = c.slice(x, 0, t, 1).unwrap();
        let r2 = c.mul(r, r).unwrap();
        let ls = c.log(sigma2).unwrap();
        let q = c.div(r2, sigma2).unwrap();
        let term = c.add(ls, q).unwrap();
        ll = c.add(ll, term).unwrap();
        r2_prev = r2;
    }
    c.scale(ll, -0.5).unwrap()
}

/// Sums and means along every axis of a 3-D parameter, with and without
/// keepdim, then reduced further along axes; one of a larger matrix
/// (beyond the element ops' size limit).
fn axis_sums(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, big) = (p[0], p[1]); // [2, 3, 2], [40, 50]
    let xr = c.reshape(x, &[1, 3, 2]).unwrap();
    let h = c.mul(w, xr).unwrap(); // [2, 3, 2], broadcast
    let s0 = c.sum_axis(h, 0, false).unwrap(); // [3, 2]
    let s1 = c.mean_axis(h, 1, true).unwrap(); // [2, 1, 2]
    let s2 = c.sum_axis(h, -1, false).unwrap(); // [2, 3]
    let t0 = c.tanh(s0).unwrap();
    let a = c.mean_axis(t0, 1, false).unwrap(); // [3]
    let a = c.sum_axis(a, 0, true).unwrap(); // [1]
    let b = c.sum_axis(s1, 2, false).unwrap(); // [2, 1]
    let b = c.sum(b).unwrap();
    let d = c.mean_axis(s2, 0, false).unwrap(); // [3]
    let d = c.mul(d, d).unwrap();
    let d = c.sum(d).unwrap();
    let e = c.sum_axis(big, 1, false).unwrap(); // [40]
    let e = c.mean_axis(e, 0, false).unwrap(); // [1]
    let l = c.add(a, b).unwrap();
    let l = c.sub(l, d).unwrap();
    c.add(l, e).unwrap()
}

/// `where` at broadcasting shapes, its condition from the input or from
/// a parameter (a relu, so exact zeros), one tensor on both sides, and a
/// large select.
fn select(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (a, b, m, big) = (p[0], p[1], p[2], p[3]); // [4], [3, 1], [5], [30, 30]
    let cx = c.relu(x).unwrap(); // [3, 4]
    let y1 = c.select(cx, a, b).unwrap(); // [3, 4] from [3, 4], [4], [3, 1]
    let c3 = c.reshape(cx, &[3, 1, 4]).unwrap();
    let y2 = c.select(c3, b, a).unwrap(); // [3, 3, 4]
    let cm = c.relu(m).unwrap(); // condition that needs no gradient of its own
    let y3 = c.select(cm, m, m).unwrap(); // where(c, x, x)
    let one = c.tensor(&[1], &[0.5]).unwrap();
    let y4 = c.select(one, y3, one).unwrap(); // [5] from [1], [5], [1]
    // Large: beyond the element ops' size limit, a `where` still runs.
    let yb = c.select(big, one, big).unwrap(); // [30, 30]
    let s1 = c.sum(y1).unwrap();
    let s2 = c.mean(y2).unwrap();
    let s3 = c.sum(y4).unwrap();
    let sb = c.mean(yb).unwrap();
    let l = c.add(s1, s2).unwrap();
    let l = c.mul(l, s3).unwrap();
    c.add(l, sb).unwrap()
}

/// Concat along the first, a middle and the last axis, one tensor twice,
/// eight inputs, one-element terms joined, and a large join.
fn concat(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (a, b, s, big) = (p[0], p[1], p[2], p[3]); // [2, 1, 3], [2, 2, 3], [1], [20, 30]
    let xr = c.reshape(x, &[2, 3, 3]).unwrap();
    let j1 = c.concat(&[a, b, xr], 1).unwrap(); // [2, 6, 3]
    let t = c.slice(j1, 1, 2, 2).unwrap(); // [2, 2, 3]
    let j0 = c.concat(&[t, b], 0).unwrap(); // [4, 2, 3]
    let jj = c.concat(&[a, a], -1).unwrap(); // [2, 1, 6]
    let e = c.exp(s).unwrap();
    let ss = c.mul(s, s).unwrap();
    let j8 = c.concat(&[s, e, ss, s, e, s, ss, e], 0).unwrap(); // [8]
    let w = c.tanh(j8).unwrap();
    let jb = c.concat(&[big, big], 0).unwrap(); // [40, 30]
    let l0 = c.sum(j0).unwrap();
    let l1 = c.mean(jj).unwrap();
    let l2 = c.sum(w).unwrap();
    let lb = c.mean(jb).unwrap();
    let l = c.mul(l0, l1).unwrap();
    let l = c.add(l, l2).unwrap();
    c.add(l, lb).unwrap()
}

/// Permutes of 2-D and 3-D tensors (a transpose, a heads split), one of a
/// view, and a large transpose.
fn permutes(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, big) = (p[0], p[1]); // [2, 3, 2], [30, 40]
    let t = c.permute(w, &[2, 0, 1]).unwrap(); // [2, 2, 3]
    let xr = c.reshape(x, &[2, 2, 3]).unwrap();
    let h = c.mul(t, xr).unwrap();
    let hr = c.reshape(h, &[4, 3]).unwrap();
    let ht = c.transpose(hr, 0, 1).unwrap(); // [3, 4]
    let e = c.exp(ht).unwrap();
    let s = c.sum_axis(e, 0, false).unwrap(); // [4]
    let bt = c.transpose(big, 0, 1).unwrap(); // [40, 30]
    let col = c.slice(bt, 1, 3, 1).unwrap(); // [40, 1]
    let l = c.sum(s).unwrap();
    let lb = c.mean(col).unwrap();
    c.mul(l, lb).unwrap()
}

/// Reshape views of a parameter, the input and activations, a view of a
/// view, a view used beside its base (their gradients share a slot), a
/// view fed to a slice and a sum along an axis, and a loss that is a view.
fn views(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, v) = (p[0], p[1]); // [2, 3], [6]
    let wr = c.reshape(w, &[3, 2]).unwrap();
    let wrr = c.reshape(wr, &[2, 3]).unwrap();
    let e = c.exp(wrr).unwrap();
    let ew = c.mul(e, w).unwrap(); // [2, 3]
    let xr = c.reshape(x, &[2, 3]).unwrap();
    let h = c.add(ew, xr).unwrap();
    let hf = c.reshape(h, &[6]).unwrap();
    let hv = c.mul(hf, v).unwrap(); // [6]
    let vr = c.reshape(v, &[3, 2]).unwrap();
    let col = c.slice(vr, 1, 1, 1).unwrap(); // [3, 1]
    let hr = c.reshape(hv, &[3, 2]).unwrap();
    let y = c.mul(hr, col).unwrap(); // [3, 2]
    let rows = c.sum_axis(y, 1, false).unwrap(); // [3]
    let t = c.tanh(rows).unwrap();
    let l = c.sum(t).unwrap(); // [1]
    let l2 = c.reshape(l, &[1, 1]).unwrap();
    let l3 = c.mul(l2, l2).unwrap(); // [1, 1]
    c.reshape(l3, &[1]).unwrap()
}

/// Element-wise ops over 300 data points, more than a program's small
/// ops hold (a posterior's vector part): the data minus a scalar and over
/// another's exp, squared, times a row-broadcast parameter [20] on the
/// data seen as [15, 20], plus an equal-shape one, maps, a sum.
fn wide(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (mu, sig, w, r) = (p[0], p[1], p[2], p[3]);
    let z = c.sub(x, mu).unwrap();
    let s = c.exp(sig).unwrap();
    let z = c.div(z, s).unwrap();
    let z2 = c.mul(z, z).unwrap();
    let zr = c.reshape(z2, &[15, 20]).unwrap();
    let y = c.mul(zr, r).unwrap(); // [15, 20]
    let yf = c.reshape(y, &[300]).unwrap();
    let y = c.add(yf, w).unwrap();
    let y = c.tanh(y).unwrap();
    let y = c.pow(y, 2.0).unwrap();
    let y = c.clamp(y, 0.01, 0.9).unwrap();
    let y = c.scale(y, -0.5).unwrap();
    let l = c.sum(y).unwrap();
    c.sub(l, sig).unwrap()
}

/// A multivariate normal's density as an LKJ / MVN model writes it: a
/// covariance S (a parameter's small tanh plus a constant 2 I, so
/// positive definite), its Cholesky factor L, the data's residuals solved
/// through L ([3, 2]), ln det S twice (through L's diagonal, read through
/// a view of L, and `log_det_spd`), and a Cholesky factor given directly
/// (exp of a parameter: a positive diagonal; its upper triangle unread)
/// solving a vector ([3], a view of a parameter).
fn mvn(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (raw, mu, chol) = (p[0], p[1], p[2]); // [3, 3], [3, 1], [3, 3]
    let two_eye = c
        .tensor(&[3, 3], &[2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0])
        .unwrap();
    let t = c.tanh(raw).unwrap();
    let t = c.scale(t, 0.2).unwrap();
    let s = c.add(t, two_eye).unwrap(); // [3, 3]
    let l = c.cholesky(s).unwrap();
    let xm = c.sub(x, mu).unwrap(); // [3, 2]
    let z = c.solve_lower(l, xm).unwrap(); // [3, 2]
    let q = c.mul(z, z).unwrap();
    let q = c.sum(q).unwrap();
    let lf = c.reshape(l, &[9]).unwrap();
    let lv = c.reshape(lf, &[3, 3]).unwrap();
    let d = c.diagonal(lv).unwrap(); // [3]
    let half_ld = c.log(d).unwrap();
    let half_ld = c.sum(half_ld).unwrap();
    let ld = c.log_det_spd(s).unwrap();
    let l2 = c.exp(chol).unwrap();
    let mv = c.reshape(mu, &[3]).unwrap();
    let w = c.solve_lower(l2, mv).unwrap(); // [3]
    let w = c.mul(w, w).unwrap();
    let w = c.sum(w).unwrap();
    let d2 = c.diagonal(l2).unwrap();
    let d2 = c.sum(d2).unwrap();
    let out = c.scale(q, -0.5).unwrap();
    let out = c.sub(out, half_ld).unwrap();
    let out = c.add(out, ld).unwrap();
    let out = c.sub(out, w).unwrap();
    c.add(out, d2).unwrap()
}

/// The regularized incomplete beta function I_x(a, b) (a Beta CDF): a
/// [4] against a broadcast b [1], one tensor as both a and b, and on
/// 40 elements; x from the input through a sigmoid.
fn beta_inc(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (ar, br, big) = (p[0], p[1], p[2]); // [4], [1], [10, 4]
    let a = c.exp(ar).unwrap();
    let b = c.exp(br).unwrap();
    let xs = c.sigmoid(x).unwrap(); // [4]
    let i1 = c.beta_inc(a, b, xs).unwrap(); // [4]
    let i2 = c.beta_inc(a, a, xs).unwrap();
    let ab = c.exp(big).unwrap();
    let i3 = c.beta_inc(ab, b, xs).unwrap(); // [10, 4]
    let l1 = c.log(i1).unwrap();
    let l1 = c.sum(l1).unwrap();
    let l2 = c.mul(i2, i1).unwrap();
    let l2 = c.sum(l2).unwrap();
    let l3 = c.mean(i3).unwrap();
    let l = c.add(l1, l2).unwrap();
    c.add(l, l3).unwrap()
}

/// A transformer-like block through ops run by their eager entries: an
/// embedding added to the input, layernorm, a linear with bias into fused
/// attention, rmsnorm, a matmul, a batched matmul into a causal softmax,
/// rope on a view, grouped-query attention with one tensor as both k and
/// v, log-softmax, cross-entropy and an MSE loss.
fn dense(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (emb, ln_w, ln_b, w1, b1, rms_w, w2, kv) = (p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
    let e = c.embedding(emb, &[0, 3, 1, 4, 2, 2, 0, 1]).unwrap(); // [8, 6]
    let e = c.reshape(e, &[2, 4, 6]).unwrap();
    let h = c.add(x, e).unwrap(); // [2, 4, 6]
    let h = c.layernorm(h, ln_w, ln_b).unwrap();
    let qkv = c.linear(h, w1, Some(b1)).unwrap(); // [2, 4, 18]
    let a = c.attention(qkv, 2).unwrap(); // [2, 4, 6]
    let r = c.rmsnorm(a, rms_w, 1e-5).unwrap();
    let rf = c.reshape(r, &[8, 6]).unwrap();
    let m = c.matmul(rf, w2, false, true).unwrap(); // [8, 6]
    let m = c.swiglu(m, rf).unwrap(); // [8, 6]
    let bm = c.bmm(r, r, false, true).unwrap(); // [2, 4, 4]
    let sm = c.softmax(bm, true, 0.5).unwrap();
    let rv = c.reshape(r, &[2, 1, 4, 6]).unwrap();
    let rp = c.rope(rv, 10000.0, 1).unwrap(); // [2, 1, 4, 6]
    let rp = c.reshape(rp, &[8, 6]).unwrap();
    let q = c.reshape(m, &[2, 2, 3, 4]).unwrap();
    let g = c.attention_gqa(q, kv, kv).unwrap(); // [2, 2, 3, 4]
    let ls = c.log_softmax(m).unwrap();
    let ce = c.cross_entropy(m, &[0, 1, 2, 3, 4, 5, 0, 1]).unwrap();
    let mse = c.mse_loss(rp, ls).unwrap();
    let s1 = c.mean(sm).unwrap();
    let s2 = c.mean(g).unwrap();
    let l = c.add(ce, mse).unwrap();
    let l = c.add(l, s1).unwrap();
    c.add(l, s2).unwrap()
}

/// A small convolutional net through ops run by their eager entries: a
/// padded conv with bias, group norm, a fused conv + ReLU, max, average
/// and global average pools (ceil mode).
fn cnn(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, bias, gn_w, gn_b) = (p[0], p[1], p[2], p[3]);
    let opts = Conv2dOptions {
        padding: [1, 1],
        ..Conv2dOptions::default()
    };
    let y = c.conv2d(x, w, Some(bias), opts).unwrap(); // [1, 3, 5, 5]
    let y = c.group_norm(y, Some(gn_w), Some(gn_b), 3, 1e-5).unwrap();
    let y = c.conv2d_relu(y, p[4], Some(bias), opts).unwrap(); // [1, 3, 5, 5]
    let pool = Pool2dOptions {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        ceil_mode: true,
    };
    let mp = c.max_pool2d(y, pool).unwrap(); // [1, 3, 3, 3]
    let ap = c.avg_pool2d(y, pool, true).unwrap();
    let g = c.global_avg_pool2d(mp).unwrap();
    let t = c.mul(mp, ap).unwrap();
    let t = c.sum(t).unwrap();
    let g = c.sum(g).unwrap();
    c.add(t, g).unwrap()
}

/// Group norm without a weight or bias, and with a bias alone (the
/// optional inputs of its record), between two convolutions.
fn cnn_no_affine(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (w, gn_b) = (p[0], p[1]);
    let opts = Conv2dOptions {
        padding: [1, 1],
        ..Conv2dOptions::default()
    };
    let y = c.conv2d(x, w, None, opts).unwrap(); // [1, 4, 5, 5]
    let y = c.group_norm(y, None, None, 2, 1e-5).unwrap();
    let y = c.tanh(y).unwrap();
    let y = c.group_norm(y, None, Some(gn_b), 4, 1e-5).unwrap();
    let y = c.mul(y, y).unwrap();
    c.sum(y).unwrap()
}

/// A two-component mixture over 300 data points (logsumexp along an
/// axis of two, as a posterior's), and logsumexp along a longer first
/// axis, a middle one (keepdim) and the last one.
fn logsumexp(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (mu, lw, w) = (p[0], p[1], p[2]); // [2, 1], [2, 1], [3, 1]
    let z = c.sub(x, mu).unwrap(); // [2, 300]
    let z = c.mul(z, z).unwrap();
    let z = c.scale(z, -0.5).unwrap();
    let z = c.add(z, lw).unwrap();
    let mix = c.logsumexp_axis(z, 0, false).unwrap(); // [300]
    let h = c.mul(x, w).unwrap(); // [3, 300]
    let a = c.logsumexp_axis(h, 0, true).unwrap(); // [1, 300]
    let h3 = c.reshape(h, &[3, 15, 20]).unwrap();
    let b = c.logsumexp_axis(h3, 1, true).unwrap(); // [3, 1, 20]
    let d = c.logsumexp_axis(h3, -1, false).unwrap(); // [3, 15]
    let l = c.sum(mix).unwrap();
    let a = c.mean(a).unwrap();
    let b = c.mean(b).unwrap();
    let d = c.sum(d).unwrap();
    let l = c.add(l, a).unwrap();
    let l = c.sub(l, b).unwrap();
    c.add(l, d).unwrap()
}

/// GARCH's variance filter as one op: sigma2_t = b sigma2_{t-1} + e^w +
/// r_t^2 with one coefficient, then a second recurrence with a
/// coefficient per element ([20, 3], a view of the input scaled), a
/// parameter's tanh.
fn recurrence(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let (b, w, coef) = (p[0], p[1], p[2]); // [1], [1], [20, 3]
    let r2 = c.mul(x, x).unwrap(); // [60]
    let w = c.exp(w).unwrap();
    let drive = c.add(r2, w).unwrap(); // positive, so is sigma2
    let b = c.sigmoid(b).unwrap();
    let s2 = c.linear_recurrence(b, drive).unwrap();
    let l = c.log(s2).unwrap();
    let l = c.sum(l).unwrap();
    let grid = c.reshape(x, &[20, 3]).unwrap();
    let a = c.tanh(coef).unwrap();
    let y = c.linear_recurrence(a, grid).unwrap();
    let y = c.mul(y, y).unwrap();
    let y = c.sum(y).unwrap();
    c.add(l, y).unwrap()
}

/// An LKJ-style density: a 4 x 4 correlation factor from 6 coordinates
/// (a parameter plus the input), its ln diagonal, its LKJ log density
/// and its log-Jacobian.
fn lkj(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let u = c.add(p[0], x).unwrap(); // [6]
    let (l, jac) = c.constrain_cholesky_corr(u).unwrap();
    let d = c.diagonal(l).unwrap();
    let d = c.log(d).unwrap();
    let w = c.mul(d, p[1]).unwrap(); // per-row LKJ weights
    let s = c.sum(w).unwrap();
    let sq = c.mul(l, l).unwrap();
    let sq = c.sum(sq).unwrap();
    let s = c.add(s, sq).unwrap();
    let prior = c.lkj_corr_cholesky_lpdf(l, 1.7).unwrap();
    let s = c.add(s, prior).unwrap();
    c.add(s, jac).unwrap()
}

/// A regression's likelihood: y the input, X^T [3, 20], alpha, beta and
/// log sigma parameters (every operand's gradient taken).
fn glm(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let sigma = c.exp(p[3]).unwrap();
    c.normal_id_glm_lpdf(x, p[0], true, p[1], p[2], sigma)
        .unwrap()
}

/// A logistic regression's likelihood: y = sigmoid(input), X [20, 3],
/// alpha and beta parameters.
fn logistic_glm(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let y = c.sigmoid(x).unwrap();
    c.bernoulli_logit_glm_lpmf(y, p[0], false, p[1], p[2])
        .unwrap()
}

/// y ~ normal(mu, sigma): y the input [4, 5], mu a shared parameter,
/// sigma = e^(per-element parameter); then again with y as its own mu's
/// operand and a shared sigma.
fn normal(c: &mut Context, p: &[Tensor], x: Tensor) -> Tensor {
    let sigma = c.exp(p[1]).unwrap();
    let a = c.normal_lpdf(x, p[0], sigma).unwrap();
    let s = c.exp(p[0]).unwrap();
    let b = c.normal_lpdf(p[1], x, s).unwrap();
    c.add(a, b).unwrap()
}

fn main() {
    same_bits("normal_lpdf", &[&[1], &[4, 5]], &[4, 5], normal);
    same_bits(
        "linear recurrence",
        &[&[1], &[1], &[20, 3]],
        &[60],
        recurrence,
    );
    same_bits("garch T=60", &[&[1], &[1], &[1], &[1]], &[60], garch);
    same_bits("lkj", &[&[6], &[4]], &[6], lkj);
    same_bits("glm", &[&[3, 20], &[1], &[3], &[1]], &[20], glm);
    same_bits(
        "logistic glm",
        &[&[20, 3], &[20], &[3]],
        &[20],
        logistic_glm,
    );
    same_bits("axis sums", &[&[2, 3, 2], &[40, 50]], &[6], axis_sums);
    same_bits("where", &[&[4], &[3, 1], &[5], &[30, 30]], &[3, 4], select);
    same_bits(
        "concat",
        &[&[2, 1, 3], &[2, 2, 3], &[1], &[20, 30]],
        &[18],
        concat,
    );
    same_bits("views", &[&[2, 3], &[6]], &[6], views);
    same_bits("permutes", &[&[2, 3, 2], &[30, 40]], &[12], permutes);
    same_bits("wide", &[&[1], &[1], &[300], &[20]], &[300], wide);
    same_bits("mvn", &[&[3, 3], &[3, 1], &[3, 3]], &[3, 2], mvn);
    same_bits("beta_inc", &[&[4], &[1], &[10, 4]], &[4], beta_inc);
    same_bits(
        "dense",
        &[
            &[5, 6],
            &[6],
            &[6],
            &[6, 18],
            &[18],
            &[6],
            &[6, 6],
            &[2, 1, 3, 4],
        ],
        &[2, 4, 6],
        dense,
    );
    same_bits(
        "cnn",
        &[&[3, 2, 3, 3], &[3], &[3], &[3], &[3, 3, 3, 3]],
        &[1, 2, 5, 5],
        cnn,
    );
    same_bits(
        "cnn without affine norms",
        &[&[4, 2, 3, 3], &[4]],
        &[1, 2, 5, 5],
        cnn_no_affine,
    );
    same_bits(
        "logsumexp",
        &[&[2, 1], &[2, 1], &[3, 1]],
        &[1, 300],
        logsumexp,
    );
    println!("replay_coverage: all passed");
}

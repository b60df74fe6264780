//! Cross-entropy from logits with integer targets, fused with the softmax
//! and the mean over rows. When recording it saves the probabilities, so
//! the backward pass is one multiply-add per logit. Also log-softmax over
//! the last axis (fused and stable; its backward recomputes the softmax
//! from the output, so nothing is saved) and the mean squared error.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::ops::check_ids;
use crate::pool::{self, Pool};
use crate::shape::Shape;
use crate::simd;

/// Sum over rows of lse[r] - logits[r, t_r], lse[r] = log sum_j exp(logits[r, j]),
/// in f64, row after row. When `probs` is given (recording for backward)
/// it receives softmax(logits), so the backward pass needs no exp.
/// logits, probs: `[N, V]`; targets: `[N]`.
#[inline(always)]
fn cross_entropy_forward(
    mut probs: Option<&mut [f32]>,
    logits: &[f32],
    targets: &[u32],
    v: usize,
) -> f64 {
    let mut total = 0.0f64;
    for (r, (row, &t)) in logits.chunks_exact(v).zip(targets).enumerate() {
        let max = fastmath::max(row);
        let s = match probs.as_deref_mut() {
            Some(p) => {
                let p = &mut p[r * v..(r + 1) * v];
                p.iter_mut()
                    .zip(row)
                    .for_each(|(p, &x)| *p = fastmath::exp(x - max));
                let s = fastmath::sum(p);
                let inv = 1.0 / s;
                p.iter_mut().for_each(|p| *p *= inv);
                s
            }
            None => {
                let mut acc = [0.0f32; 8];
                let chunks = row.chunks_exact(8);
                let tail: f32 = chunks
                    .remainder()
                    .iter()
                    .map(|&x| fastmath::exp(x - max))
                    .sum();
                for c in chunks {
                    for i in 0..8 {
                        acc[i] += fastmath::exp(c[i] - max);
                    }
                }
                acc.iter().sum::<f32>() + tail
            }
        };
        total += (max + s.ln() - row[t as usize]) as f64;
    }
    total
}

/// dlogits[r, j] += s * (probs[r, j] - `[j == t_r]`), s = dloss / N.
#[inline(always)]
fn cross_entropy_backward(dlogits: &mut [f32], s: f32, probs: &[f32], targets: &[u32], v: usize) {
    for ((d, p), &t) in dlogits
        .chunks_exact_mut(v)
        .zip(probs.chunks_exact(v))
        .zip(targets)
    {
        d.iter_mut().zip(p).for_each(|(dj, &pj)| *dj += s * pj);
        d[t as usize] -= s;
    }
}

/// y = (x - max) - ln(sum exp(x - max)) per row: every exponent is <= 0,
/// so large logits neither overflow nor lose the row's spread. x, y: `[N, V]`.
fn log_softmax_forward(y: &mut [f32], x: &[f32], v: usize) {
    for (yr, xr) in y.chunks_exact_mut(v).zip(x.chunks_exact(v)) {
        let max = fastmath::max(xr);
        // y is the scratch for the exponentials, then gets the result.
        yr.iter_mut()
            .zip(xr)
            .for_each(|(y, &x)| *y = fastmath::exp(x - max));
        let ln_s = fastmath::sum(yr).ln();
        yr.iter_mut()
            .zip(xr)
            .for_each(|(y, &x)| *y = (x - max) - ln_s);
    }
}

/// dx += dy - softmax(x) * sum(dy) per row, softmax(x) = e^y. All `[N, V]`.
fn log_softmax_backward(dx: &mut [f32], dy: &[f32], y: &[f32], v: usize) {
    for ((d, g), y) in dx
        .chunks_exact_mut(v)
        .zip(dy.chunks_exact(v))
        .zip(y.chunks_exact(v))
    {
        let s = fastmath::sum(g);
        for ((d, &g), &y) in d.iter_mut().zip(g).zip(y) {
            *d += g - fastmath::exp(y) * s;
        }
    }
}

/// mean((p - t)^2), summed in f64. p, t: `[N]`.
fn mse_forward(p: &[f32], t: &[f32]) -> f32 {
    (fastmath::sum_sq_diff_f64(p, t) / p.len() as f64) as f32
}

/// dx += dloss * 2 (x - y) / N, where x is the operand differentiated and y
/// the other one (so the target gets the opposite sign). All `[N]`.
fn mse_backward(dx: &mut [f32], dloss: f32, x: &[f32], y: &[f32]) {
    let s = 2.0 * dloss / x.len() as f32;
    for ((d, &x), &y) in dx.iter_mut().zip(x).zip(y) {
        *d += s * (x - y);
    }
}

impl Context {
    /// Mean squared error: the mean of (pred - target)^2 over all elements
    /// -> `[1]`. The shapes must be equal (no broadcasting); both operands
    /// get a gradient.
    pub fn mse_loss(&mut self, pred: Tensor, target: Tensor) -> Result<Tensor> {
        const OP: &str = "mse_loss";
        let (ip, it) = (self.resolve(OP, pred)?, self.resolve(OP, target)?);
        let (ep, et) = (self.entry(ip), self.entry(it));
        if ep.shape != et.shape {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "pred and target shapes differ",
                a: ep.shape,
                b: et.shape,
            });
        }
        let tracks = self.tracks(&[ip, it]);
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let op = Op::MseLoss {
            pred: ip,
            target: it,
        };
        Ok(self.run(op, out))
    }

    /// log(softmax(x)) over the last axis, fused and stable (the row's
    /// maximum is subtracted first): x `[..., V]` -> the same shape.
    pub fn log_softmax(&mut self, x: Tensor) -> Result<Tensor> {
        const OP: &str = "log_softmax";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, ex.shape, tracks)?;
        Ok(self.run(Op::LogSoftmax { x: ix }, out))
    }

    /// Mean cross-entropy of `logits` (`[..., V]`, rows = all leading
    /// elements) against one target per row, each in [0, V). -> `[1]`.
    pub fn cross_entropy(&mut self, logits: Tensor, targets: &[i32]) -> Result<Tensor> {
        const OP: &str = "cross_entropy";
        let il = self.resolve(OP, logits)?;
        let el = self.entry(il);
        let (rows, v) = (el.shape.rows(), el.shape.last());
        if targets.len() != rows {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} targets for logits {} with {rows} rows",
                    targets.len(),
                    el.shape
                ),
            });
        }
        check_ids(OP, targets, v)?;
        let tracks = self.tracks(&[il]);
        let tbuf = self.alloc_main::<u32>(OP, rows)?;
        self.access_one(tbuf)
            .iter_mut()
            .zip(targets)
            .for_each(|(d, &s)| *d = s as u32);
        let probs = self.alloc_scratchable::<f32>(OP, if tracks { el.shape.numel() } else { 1 })?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let op = Op::CrossEntropy {
            logits: il,
            targets: tbuf,
            probs,
        };
        Ok(self.run(op, out))
    }
}

pub(crate) fn forward_mse(ctx: &mut Context, out: u32, pred: u32, target: u32) {
    let (ep, et, eo) = (ctx.entry(pred), ctx.entry(target), ctx.entry(out));
    let ([y], [p, t]) = ctx.access([eo.data], [ep.data, et.data]);
    y[0] = mse_forward(p, t);
}

/// How many row tasks a kernel over `rows` rows of `v` logits is cut into
/// (by the shape alone): an exp or a multiply-add per logit.
fn row_tasks(rows: usize, v: usize) -> usize {
    let worth = rows >= 2 && Context::worth_two_threads(rows * v * fastmath::ELEMENT_COST);
    fastmath::task_split(worth, rows, v * fastmath::ELEMENT_COST)
}

/// The thread pool for `n` tasks over `numel` logits, if it should run
/// them (else they loop on this thread).
fn pool_for(ctx: &mut Context, n: usize, numel: usize) -> Option<Pool> {
    (n > 1 && ctx.want_pool(numel * fastmath::ELEMENT_COST)).then(Pool::global)
}

pub(crate) fn forward_log_softmax(ctx: &mut Context, out: u32, x: u32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let (rows, v) = (ex.shape.rows(), ex.shape.last());
    let n = row_tasks(rows, v);
    let pool = pool_for(ctx, n, ex.shape.numel());
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    if n == 1 {
        return log_softmax_forward(y, x, v);
    }
    fastmath::run_parts(pool.as_ref(), fastmath::row_parts(y, v, n), &|i, y| {
        let x = &x[pool::task_range(rows, n, i).start * v..][..y.len()];
        log_softmax_forward(y, x, v)
    });
}

/// The probabilities are saved only when the loss is recorded (its output
/// needs a gradient); otherwise `probs` is a one-element placeholder.
/// Each row task sums its rows' losses in f64; the partial sums are added
/// in task order, so the loss does not depend on the thread count.
pub(crate) fn forward_cross_entropy(
    ctx: &mut Context,
    out: u32,
    logits: u32,
    targets: Buf<u32>,
    probs: Buf,
) {
    let (el, eo) = (ctx.entry(logits), ctx.entry(out));
    let (rows, v) = (el.shape.rows(), el.shape.last());
    let tracks = eo.requires_grad;
    let n = row_tasks(rows, v);
    let pool = pool_for(ctx, n, el.shape.numel());
    let ([y, p], [l], [t]) = ctx.access_ids([eo.data, probs], [el.data], [targets]);
    let total = if n == 1 {
        simd::dispatch!(cross_entropy_forward(tracks.then_some(p), l, t, v))
    } else {
        let mut partials = [0.0f64; pool::MAX_TASKS];
        // Without a gradient there are no probabilities to write.
        let p: &mut [f32] = if tracks { p } else { &mut [] };
        let parts = fastmath::row_parts(p, v, n).zip(partials.iter_mut());
        fastmath::run_parts(pool.as_ref(), parts, &|i, (p, partial)| {
            let at = pool::task_range(rows, n, i);
            let (l, t) = (&l[at.start * v..at.end * v], &t[at]);
            *partial = simd::dispatch!(cross_entropy_forward(tracks.then_some(p), l, t, v));
        });
        partials[1..n].iter().fold(partials[0], |sum, &p| sum + p)
    };
    y[0] = (total / rows as f64) as f32;
}

pub(crate) fn backward_cross_entropy(
    ctx: &mut Context,
    out: u32,
    logits: u32,
    targets: Buf<u32>,
    probs: Buf,
) {
    let (Some(dl), Some(dout)) = (ctx.grad_of(logits), ctx.grad_out(out)) else {
        return;
    };
    let el = ctx.entry(logits);
    let (rows, v) = (el.shape.rows(), el.shape.last());
    let n = row_tasks(rows, v);
    let pool = pool_for(ctx, n, el.shape.numel());
    let ([dl], [dout, p], [t]) = ctx.access_ids([dl], [dout, probs], [targets]);
    let s = dout[0] / rows as f32;
    if n == 1 {
        return simd::dispatch!(cross_entropy_backward(dl, s, p, t, v));
    }
    fastmath::run_parts(pool.as_ref(), fastmath::row_parts(dl, v, n), &|i, dl| {
        let at = pool::task_range(rows, n, i);
        let (p, t) = (&p[at.start * v..at.end * v], &t[at]);
        simd::dispatch!(cross_entropy_backward(dl, s, p, t, v))
    });
}

pub(crate) fn backward_log_softmax(ctx: &mut Context, out: u32, x: u32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let eo = ctx.entry(out);
    let (rows, v) = (eo.shape.rows(), eo.shape.last());
    let n = row_tasks(rows, v);
    let pool = pool_for(ctx, n, eo.shape.numel());
    let ([dx], [dout, y]) = ctx.access([dx], [dout, eo.data]);
    if n == 1 {
        return log_softmax_backward(dx, dout, y, v);
    }
    fastmath::run_parts(pool.as_ref(), fastmath::row_parts(dx, v, n), &|i, dx| {
        let at = pool::task_range(rows, n, i);
        let (g, y) = (
            &dout[at.start * v..at.end * v],
            &y[at.start * v..at.end * v],
        );
        log_softmax_backward(dx, g, y, v)
    });
}

pub(crate) fn backward_mse(ctx: &mut Context, out: u32, pred: u32, target: u32) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ep, et) = (ctx.entry(pred), ctx.entry(target));
    // One operand at a time: pred and target may be the same tensor.
    if let Some(dp) = ctx.grad_of(pred) {
        let ([dp], [g, p, t]) = ctx.access([dp], [dout, ep.data, et.data]);
        mse_backward(dp, g[0], p, t);
    }
    if let Some(dt) = ctx.grad_of(target) {
        let ([dt], [g, p, t]) = ctx.access([dt], [dout, ep.data, et.data]);
        mse_backward(dt, g[0], t, p);
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn uniform_logits_give_ln_v() {
        let mut c = crate::Context::new();
        let l = c.tensor(&[2, 4], &[0.0; 8]).unwrap();
        let loss = c.cross_entropy(l, &[1, 3]).unwrap();
        assert!((c.item(loss).unwrap() - 4f32.ln()).abs() < 1e-6);
        // Large logits stay finite (max subtraction).
        let big = c.tensor(&[1, 2], &[1000.0, 0.0]).unwrap();
        let lb = c.cross_entropy(big, &[0]).unwrap();
        assert!(c.item(lb).unwrap().abs() < 1e-6);
        assert!(matches!(
            c.cross_entropy(l, &[1]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            c.cross_entropy(l, &[1, 4]),
            Err(Error::IndexOutOfRange {
                position: 1,
                value: 4,
                ..
            })
        ));
    }

    /// Cut into several row tasks, cross-entropy's loss is the tasks' f64
    /// sums added in task order, and its gradient and log-softmax's values
    /// and gradient equal the single-threaded kernels bit for bit.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn row_tasks_match_the_kernels() {
        let (rows, v) = (2048, 256);
        let n = super::row_tasks(rows, v);
        assert!(n >= 4, "{n} tasks");
        let mut rng = crate::ops::gradcheck::Lcg(21);
        let x: Vec<f32> = (0..rows * v).map(|_| rng.range(-4.0, 4.0)).collect();
        let t: Vec<u32> = (0..rows).map(|r| (r * 37 % v) as u32).collect();
        let ti: Vec<i32> = t.iter().map(|&t| t as i32).collect();
        let mut c = crate::Context::new();
        let px = c.param(&[rows, v], Some(&x)).unwrap();
        let loss = c.cross_entropy(px, &ti).unwrap();
        assert!(c.pool_started());
        let ls = c.log_softmax(px).unwrap();
        let s = c.sum(ls).unwrap();
        let s = c.scale(s, 1e-3).unwrap();
        let total = c.add(loss, s).unwrap();
        c.backward(total).unwrap();
        let (mut y, mut gx) = (vec![0.0; rows * v], vec![0.0; rows * v]);
        c.read(ls, &mut y).unwrap();
        c.read_grad(px, &mut gx).unwrap();

        let mut probs = vec![0.0; rows * v];
        let mut sum = 0.0f64;
        for i in 0..n {
            let at = crate::pool::task_range(rows, n, i);
            let (lo, hi) = (at.start * v, at.end * v);
            let part =
                super::cross_entropy_forward(Some(&mut probs[lo..hi]), &x[lo..hi], &t[at], v);
            sum = if i == 0 { part } else { sum + part };
        }
        let got = c.item(loss).unwrap();
        assert_eq!(got.to_bits(), ((sum / rows as f64) as f32).to_bits());
        let whole = super::cross_entropy_forward(None, &x, &t, v) / rows as f64;
        assert!(
            (got as f64 - whole).abs() <= 1e-6 * whole.abs(),
            "{got} vs {whole}"
        );

        let mut want_y = vec![0.0; rows * v];
        super::log_softmax_forward(&mut want_y, &x, v);
        let mut want_g = vec![0.0; rows * v];
        // In the tape's reverse order: log-softmax's term, then the loss's.
        super::log_softmax_backward(&mut want_g, &vec![1e-3; rows * v], &want_y, v);
        super::cross_entropy_backward(&mut want_g, 1.0 / rows as f32, &probs, &t, v);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same(&y, &want_y), "log_softmax values");
        assert!(same(&gx, &want_g), "gradient");
    }

    #[test]
    fn log_softmax_values_and_stability() {
        let mut c = crate::Context::new();
        let xs = [1.0f32, 2.0, 3.0, -1.0, 0.0, 0.5];
        let x = c.tensor(&[2, 3], &xs).unwrap();
        let y = c.log_softmax(x).unwrap();
        let mut v = [0.0; 6];
        c.read(y, &mut v).unwrap();
        for (r, row) in xs.chunks(3).enumerate() {
            let lse = row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
            for j in 0..3 {
                let want = row[j] as f64 - lse;
                assert!((v[r * 3 + j] as f64 - want).abs() < 1e-6, "{v:?}");
            }
        }
        // Huge logits: finite, and the same as the shifted row.
        let big = c.tensor(&[1, 3], &[1001.0, 1002.0, 1003.0]).unwrap();
        let yb = c.log_softmax(big).unwrap();
        let mut w = [0.0; 3];
        c.read(yb, &mut w).unwrap();
        for j in 0..3 {
            assert!((w[j] - v[j]).abs() < 1e-5, "{w:?} vs {v:?}");
        }
        let tiny = c.tensor(&[2], &[0.0, -1e4]).unwrap();
        let yt = c.log_softmax(tiny).unwrap();
        let mut t = [0.0; 2];
        c.read(yt, &mut t).unwrap();
        assert_eq!(t, [0.0, -1e4]);
    }

    #[test]
    fn mse_loss_values_gradients_and_shapes() {
        let mut c = crate::Context::new();
        let p = c.param(&[2, 2], Some(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        let t = c.param(&[2, 2], Some(&[1.5, 2.0, 1.0, 5.0])).unwrap();
        let l = c.mse_loss(p, t).unwrap();
        // (0.25 + 0 + 4 + 1) / 4
        assert_eq!(c.item(l).unwrap(), 1.3125);
        c.backward(l).unwrap();
        let (mut gp, mut gt) = ([0.0; 4], [0.0; 4]);
        c.read_grad(p, &mut gp).unwrap();
        c.read_grad(t, &mut gt).unwrap();
        assert_eq!(gp, [-0.25, 0.0, 1.0, -0.5]);
        assert_eq!(gt, [0.25, 0.0, -1.0, 0.5]);
        c.zero_grad();
        c.reset();
        // The same tensor twice: loss 0, gradients cancel exactly.
        let same = c.mse_loss(p, p).unwrap();
        assert_eq!(c.item(same).unwrap(), 0.0);
        c.backward(same).unwrap();
        c.read_grad(p, &mut gp).unwrap();
        assert_eq!(gp, [0.0; 4]);
        c.reset();
        // Equal element counts are not enough, and nothing is allocated.
        let q = c.tensor(&[4], &[0.0; 4]).unwrap();
        let used = c.memory_stats().arena_used_bytes;
        let e = c.mse_loss(p, q).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mse_loss: pred and target shapes differ: [2,2] x [4]"
        );
        assert_eq!(c.memory_stats().arena_used_bytes, used);
    }

    #[test]
    fn mse_loss_matches_f64() {
        // Lengths that fill the sum's eight lanes, leave a tail, or are
        // all tail. Each square is exact in f64 and the sum of at most 437
        // of them adds under 437 * 2^-53 relative, so the f32 result is
        // the f64 mean rounded once: within half an ulp plus that.
        for n in [1, 7, 8, 64, 437] {
            let pv: Vec<f32> = (0..n).map(|i| (i as f32 * 0.61).sin() * 3.0).collect();
            let tv: Vec<f32> = (0..n).map(|i| (i as f32 * 0.29).cos()).collect();
            let want = pv
                .iter()
                .zip(&tv)
                .map(|(&p, &t)| ((p - t) as f64).powi(2))
                .sum::<f64>()
                / n as f64;
            let mut c = crate::Context::new();
            let p = c.tensor(&[n], &pv).unwrap();
            let t = c.tensor(&[n], &tv).unwrap();
            let l = c.mse_loss(p, t).unwrap();
            let got = c.item(l).unwrap() as f64;
            assert!(
                (got - want).abs() <= 0.6 * f32::EPSILON as f64 * want,
                "n {n}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn gradcheck_mse_loss() {
        gradcheck(Check::new("mse_loss", &[&[3, 4], &[3, 4]]), |c, x| {
            c.mse_loss(x[0], x[1])
        });
        gradcheck(
            Check::new("mse_loss 3d", &[&[2, 1, 3], &[2, 1, 3]]),
            |c, x| c.mse_loss(x[0], x[1]),
        );
    }

    #[test]
    fn gradcheck_log_softmax() {
        gradcheck(
            Check::new("log_softmax", &[&[3, 5]]).range(-2.0, 2.0),
            |c, x| c.log_softmax(x[0]),
        );
        gradcheck(Check::new("log_softmax 3d", &[&[2, 2, 3]]), |c, x| {
            c.log_softmax(x[0])
        });
        gradcheck(Check::new("log_softmax 1d", &[&[7]]), |c, x| {
            c.log_softmax(x[0])
        });
    }

    #[test]
    fn gradcheck_cross_entropy() {
        gradcheck(
            Check::new("cross_entropy", &[&[3, 5]]).range(-2.0, 2.0),
            |c, x| c.cross_entropy(x[0], &[0, 4, 2]),
        );
        gradcheck(Check::new("cross_entropy 3d", &[&[2, 2, 3]]), |c, x| {
            c.cross_entropy(x[0], &[0, 1, 2, 2])
        });
    }
}

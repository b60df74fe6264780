//! LayerNorm over the last axis, fused: one forward pass saves each row's
//! mean and 1/std, which the backward pass reuses.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::pool;
use crate::simd;

/// Default epsilon (GPT-2's).
pub const LAYERNORM_EPS: f32 = 1e-5;

/// y = (x - mean) * rstd * w + b per row. x, y: `[N, C]`; w, b: `[C]`;
/// mean, rstd: `[N]`.
#[inline(always)]
fn layernorm_forward(
    y: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    w: &[f32],
    b: &[f32],
    c: usize,
) {
    for (((yr, xr), m), r) in y
        .chunks_exact_mut(c)
        .zip(x.chunks_exact(c))
        .zip(mean.iter_mut())
        .zip(rstd.iter_mut())
    {
        let mu = fastmath::sum(xr) / c as f32;
        let var = fastmath::sum_sq_dev(xr, mu) / c as f32;
        let rs = 1.0 / (var + LAYERNORM_EPS).sqrt();
        for (((yv, &xv), &wv), &bv) in yr.iter_mut().zip(xr).zip(w).zip(b) {
            *yv = (xv - mu) * rs * wv + bv;
        }
        *m = mu;
        *r = rs;
    }
}

/// dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with
/// norm = (x - mean) * rstd and dnorm = dout * w.
#[inline(always)]
fn layernorm_backward_dx(
    dx: &mut [f32],
    dout: &[f32],
    x: &[f32],
    w: &[f32],
    mean: &[f32],
    rstd: &[f32],
    c: usize,
) {
    let rows = dx
        .chunks_exact_mut(c)
        .zip(dout.chunks_exact(c))
        .zip(x.chunks_exact(c));
    for (((dxr, gr), xr), (&mu, &rs)) in rows.zip(mean.iter().zip(rstd)) {
        // m1 = mean(g w), m2 = mean(g w (x - mu) rstd).
        let (gw, gwx) = fastmath::dot2(gr, w, xr);
        let (m1, m2) = (gw / c as f32, (gwx - mu * gw) * rs / c as f32);
        for (((d, &g), &xv), &wv) in dxr.iter_mut().zip(gr).zip(xr).zip(w) {
            let norm = (xv - mu) * rs;
            *d += (g * wv - m1 - norm * m2) * rs;
        }
    }
}

/// One row's term of the weight gradient, dout * (x - mean) * rstd, in
/// f64. Both backward paths take it from here, so their sums agree.
#[inline(always)]
fn weight_term(g: f32, xv: f32, mu: f64, rs: f64) -> f64 {
    g as f64 * ((xv as f64 - mu) * rs)
}

/// dw += sum_rows dout * norm, norm = (x - mean) * rstd, each term and the
/// sum in f64 (see `fastmath::accumulate_cols_f64`).
#[inline(always)]
fn layernorm_backward_dw(
    dw: &mut [f32],
    first: usize,
    dout: &[f32],
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    c: usize,
) {
    fastmath::accumulate_cols_f64(dw, first, mean.len(), |r, cols, acc| {
        let (g, xr) = (&dout[r * c..][cols.clone()], &x[r * c..][cols]);
        let (mu, rs) = (mean[r] as f64, rstd[r] as f64);
        for ((a, &g), &xv) in acc.iter_mut().zip(g).zip(xr) {
            *a += weight_term(g, xv, mu, rs);
        }
    });
}

/// Widest rows the one-pass backward takes: its f64 weight and bias sums
/// (2 x 512 x 8 bytes per task) live on the calling thread's stack.
pub(crate) const ONE_PASS_MAX_C: usize = 512;

/// f64 sums the one-pass backward's tasks hold on the stack (64 KiB): at
/// least 8 tasks at the widest rows, 32 at C = 128.
pub(crate) const ONE_PASS_PARTIALS: usize = 16 * ONE_PASS_MAX_C;

/// Rows per chunk of [`layernorm_backward_rows`]: their dx, then their
/// terms of the weight and bias sums while the rows are still in L1.
pub(crate) const ONE_PASS_CHUNK_ROWS: usize = 16;

/// dx for a run of rows (as [`layernorm_backward_dx`]), and their terms of
/// the weight and bias sums added in f64, row after row, to `acc` (`[2C]`:
/// the weight's columns, then the bias's), the terms of
/// [`layernorm_backward_dw`] and of `fastmath::sum_rows_into_on`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn layernorm_backward_rows(
    dx: &mut [f32],
    acc: &mut [f64],
    dout: &[f32],
    x: &[f32],
    w: &[f32],
    mean: &[f32],
    rstd: &[f32],
    c: usize,
) {
    let (acc_w, acc_b) = acc.split_at_mut(c);
    let step = ONE_PASS_CHUNK_ROWS * c;
    let chunks = dx
        .chunks_mut(step)
        .zip(dout.chunks(step))
        .zip(x.chunks(step))
        .zip(
            mean.chunks(ONE_PASS_CHUNK_ROWS)
                .zip(rstd.chunks(ONE_PASS_CHUNK_ROWS)),
        );
    for (((dx, g), x), (m, r)) in chunks {
        layernorm_backward_dx(dx, g, x, w, m, r, c);
        let rows = g.chunks_exact(c).zip(x.chunks_exact(c));
        for ((gr, xr), (&mu, &rs)) in rows.zip(m.iter().zip(r)) {
            let (mu, rs) = (mu as f64, rs as f64);
            for (((aw, ab), &g), &xv) in acc_w.iter_mut().zip(acc_b.iter_mut()).zip(gr).zip(xr) {
                *aw += weight_term(g, xv, mu, rs);
                *ab += g as f64;
            }
        }
    }
}

impl Context {
    /// LayerNorm over the last axis with weight and bias (eps 1e-5).
    /// x: `[..., C]`, w: `[C]`, b: `[C]` -> `[..., C]`.
    pub fn layernorm(&mut self, x: Tensor, w: Tensor, b: Tensor) -> Result<Tensor> {
        const OP: &str = "layernorm";
        let (ix, iw, ib) = (
            self.resolve(OP, x)?,
            self.resolve(OP, w)?,
            self.resolve(OP, b)?,
        );
        let (ex, ew, eb) = (self.entry(ix), self.entry(iw), self.entry(ib));
        let c = ex.shape.last();
        for (what, s) in [
            ("weight must be [C] for x [...,C]", ew.shape),
            ("bias must be [C] for x [...,C]", eb.shape),
        ] {
            if s.ndim() != 1 || s.numel() != c {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    what,
                    a: ex.shape,
                    b: s,
                });
            }
        }
        let tracks = self.tracks(&[ix, iw, ib]);
        let rows = ex.shape.rows();
        let mean = self.alloc_scratchable::<f32>(OP, rows)?;
        let rstd = self.alloc_scratchable::<f32>(OP, rows)?;
        let out = self.push_output(OP, ex.shape, tracks)?;
        let op = Op::LayerNorm {
            x: ix,
            w: iw,
            b: ib,
            mean,
            rstd,
        };
        Ok(self.run(op, out))
    }
}

/// How many row tasks a row kernel (LayerNorm's, RMSNorm's) over `rows`
/// rows of `c` is cut into: a shape-only rule, so the bits do not depend
/// on the thread count.
pub(crate) fn row_tasks(rows: usize, c: usize) -> usize {
    let worth = rows >= 2 && Context::worth_two_threads(rows * c * fastmath::ELEMENT_COST);
    fastmath::task_split(worth, rows, c * fastmath::ELEMENT_COST)
}

/// Tasks of the one-pass backward: as [`row_tasks`], but no more than
/// [`ONE_PASS_PARTIALS`] holds sums for.
fn one_pass_tasks(rows: usize, c: usize) -> usize {
    row_tasks(rows, c).min(ONE_PASS_PARTIALS / (2 * c).max(1))
}

/// `inputs` are x (`[rows, C]`), w and b (`[C]`); writes y (`[rows, C]`),
/// the per-row mean and 1/std (`[rows]`).
pub(crate) fn forward_layernorm(
    ctx: &mut Context,
    out: u32,
    inputs: [u32; 3],
    mean: Buf,
    rstd: Buf,
) {
    let [ex, ew, eb] = inputs.map(|i| ctx.entry(i));
    let eo = ctx.entry(out);
    let (rows, c) = (ex.shape.rows(), ex.shape.last());
    let n = row_tasks(rows, c);
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y, m, r], [x, w, b]) =
        ctx.access_on(par, [eo.data, mean, rstd], [ex.data, ew.data, eb.data]);
    if n == 1 {
        return simd::dispatch!(layernorm_forward(y, m, r, x, w, b, c));
    }
    // Rows are independent: each task owns a run of them.
    let parts = fastmath::row_parts(y, c, n)
        .zip(fastmath::row_parts(m, 1, n))
        .zip(fastmath::row_parts(r, 1, n));
    fastmath::run_parts(pool, parts, &|i, ((y, m), r)| {
        let x = &x[pool::task_range(rows, n, i).start * c..][..y.len()];
        simd::dispatch!(layernorm_forward(y, m, r, x, w, b, c))
    });
}

/// `inputs` are x, w and b.
pub(crate) fn backward_layernorm(
    ctx: &mut Context,
    out: u32,
    inputs: [u32; 3],
    mean: Buf,
    rstd: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let [ix, iw, ib] = inputs;
    let (ex, ew) = (ctx.entry(ix), ctx.entry(iw));
    let (rows, c, numel) = (ex.shape.rows(), ex.shape.last(), ex.shape.numel());
    let work = numel * fastmath::ELEMENT_COST;
    let (gx, gw, gb) = (ctx.grad_of(ix), ctx.grad_of(iw), ctx.grad_of(ib));
    if let (Some(dx), Some(dw), Some(db)) = (gx, gw, gb)
        && c <= ONE_PASS_MAX_C
        && !dx.overlaps(&dw)
        && !dx.overlaps(&db)
        && !dw.overlaps(&db)
    {
        // One pass over dout and x instead of three.
        let n = one_pass_tasks(rows, c);
        let par = n > 1 && ctx.want_pool(work);
        let (pool, [dx, dw, db], [g, x, w, m, r]) =
            ctx.access_on(par, [dx, dw, db], [dout, ex.data, ew.data, mean, rstd]);
        let run = |dx: &mut [f32], acc: &mut [f64], rows: std::ops::Range<usize>| {
            let (g, x) = (
                &g[rows.start * c..rows.end * c],
                &x[rows.start * c..rows.end * c],
            );
            let (m, r) = (&m[rows.clone()], &r[rows]);
            simd::dispatch!(layernorm_backward_rows(dx, acc, g, x, w, m, r, c))
        };
        let add_into = |dw: &mut [f32], db: &mut [f32], sums: &[f64]| {
            for (o, &sum) in dw.iter_mut().chain(db.iter_mut()).zip(sums) {
                *o = (*o as f64 + sum) as f32;
            }
        };
        if n == 1 {
            let mut acc = [0.0f64; 2 * ONE_PASS_MAX_C];
            let acc = &mut acc[..2 * c];
            run(dx, acc, 0..rows);
            // One run of rows adds nothing more (not even a zero, which
            // would turn a sum of -0 into +0): the old sequence exactly.
            return add_into(dw, db, acc);
        }
        // Each task sums its own rows, whether or not another thread runs
        // it; the partial sums are then added in task order, so the bits
        // do not depend on the thread count.
        let mut partials = [0.0f64; ONE_PASS_PARTIALS];
        let parts = fastmath::row_parts(dx, c, n).zip(partials.chunks_exact_mut(2 * c));
        fastmath::run_parts(pool, parts, &|i, (dx, acc)| {
            run(dx, acc, pool::task_range(rows, n, i))
        });
        let (first, rest) = partials[..n * 2 * c].split_at_mut(2 * c);
        for part in rest.chunks_exact(2 * c) {
            first.iter_mut().zip(part).for_each(|(s, &p)| *s += p);
        }
        return add_into(dw, db, first);
    }
    if let Some(dx) = gx {
        let n = row_tasks(rows, c);
        let par = n > 1 && ctx.want_pool(work);
        let (pool, [dx], [g, x, w, m, r]) =
            ctx.access_on(par, [dx], [dout, ex.data, ew.data, mean, rstd]);
        if n == 1 {
            simd::dispatch!(layernorm_backward_dx(dx, g, x, w, m, r, c));
        } else {
            fastmath::run_parts(pool, fastmath::row_parts(dx, c, n), &|i, dx| {
                let rows = pool::task_range(rows, n, i);
                let (g, x) = (
                    &g[rows.start * c..rows.end * c],
                    &x[rows.start * c..rows.end * c],
                );
                let (m, r) = (&m[rows.clone()], &r[rows]);
                simd::dispatch!(layernorm_backward_dx(dx, g, x, w, m, r, c))
            });
        }
    }
    // Weight and bias sums: each column is independent, so the columns
    // split across the pool.
    let par = ctx.want_pool(work);
    if let Some(dw) = gw {
        let (pool, [dw], [g, x, m, r]) = ctx.access_on(par, [dw], [dout, ex.data, mean, rstd]);
        fastmath::split_columns(pool, dw, rows, |dw, first| {
            simd::dispatch!(layernorm_backward_dw(dw, first, g, x, m, r, c))
        });
    }
    if let Some(db) = gb {
        let (pool, [db], [g]) = ctx.access_on(par, [db], [dout]);
        fastmath::sum_rows_into_on(pool, db, g);
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn normalises_rows() {
        let mut c = crate::Context::new();
        let w = c.param(&[4], Some(&[1.0; 4])).unwrap();
        let b = c.param(&[4], None).unwrap();
        let x = c
            .tensor(&[2, 4], &[1., 2., 3., 4., -1., 0., 1., 10.])
            .unwrap();
        let y = c.layernorm(x, w, b).unwrap();
        let mut v = [0.0; 8];
        c.read(y, &mut v).unwrap();
        for row in v.chunks(4) {
            let m: f32 = row.iter().sum::<f32>() / 4.0;
            let var: f32 = row.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / 4.0;
            assert!(m.abs() < 1e-5 && (var - 1.0).abs() < 1e-3);
        }
        let bad = c.param(&[3], None);
        assert!(bad.is_err(), "params after activations are refused");
    }

    /// Cut into several tasks (large inputs), forward and backward equal
    /// the single-threaded kernels bit for bit, and the weight and bias
    /// sums are each task's rows summed on their own, added in task order.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn parallel_path_matches_kernels() {
        let (rows, c) = (4096, 128);
        let n = super::one_pass_tasks(rows, c);
        assert!(n >= 4, "{n} tasks");
        let mut rng = crate::ops::gradcheck::Lcg(3);
        let x: Vec<f32> = (0..rows * c).map(|_| rng.range(-2.0, 2.0)).collect();
        let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
        let b: Vec<f32> = (0..c).map(|_| rng.range(-0.5, 0.5)).collect();
        let mut ctx = crate::Context::new();
        let (pw, pb) = (
            ctx.param(&[c], Some(&w)).unwrap(),
            ctx.param(&[c], Some(&b)).unwrap(),
        );
        let px = ctx.param(&[rows, c], Some(&x)).unwrap();
        let y = ctx.layernorm(px, pw, pb).unwrap();
        assert!(ctx.pool_started());
        let l = ctx.sum(y).unwrap();
        ctx.backward(l).unwrap();
        let (mut gy, mut gdx) = (vec![0.0; rows * c], vec![0.0; rows * c]);
        ctx.read(y, &mut gy).unwrap();
        ctx.read_grad(px, &mut gdx).unwrap();
        let (mut wy, mut m, mut r, mut wdx) = (
            vec![0.0; rows * c],
            vec![0.0; rows],
            vec![0.0; rows],
            vec![0.0; rows * c],
        );
        super::layernorm_forward(&mut wy, &mut m, &mut r, &x, &w, &b, c);
        super::layernorm_backward_dx(&mut wdx, &vec![1.0; rows * c], &x, &w, &m, &r, c);
        assert!(gy.iter().zip(&wy).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(
            gdx.iter()
                .zip(&wdx)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        let (mut gdw, mut gdb) = (vec![0.0; c], vec![0.0; c]);
        ctx.read_grad(pw, &mut gdw).unwrap();
        ctx.read_grad(pb, &mut gdb).unwrap();
        let ones = vec![1.0; rows * c];
        let mut sum = vec![0.0f64; 2 * c];
        for i in 0..n {
            let rs = crate::pool::task_range(rows, n, i);
            let mut a = vec![0.0f64; 2 * c];
            let mut scratch = vec![0.0; rs.len() * c];
            let (xs, gs) = (
                &x[rs.start * c..rs.end * c],
                &ones[rs.start * c..rs.end * c],
            );
            let (ms, rstd) = (&m[rs.clone()], &r[rs]);
            super::layernorm_backward_rows(&mut scratch, &mut a, gs, xs, &w, ms, rstd, c);
            if i == 0 {
                sum = a;
            } else {
                sum.iter_mut().zip(&a).for_each(|(s, &p)| *s += p);
            }
        }
        let want: Vec<f32> = sum.iter().map(|&s| s as f32).collect();
        let got: Vec<f32> = gdw.iter().chain(&gdb).copied().collect();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // And within one unit of the last place of the three-pass kernels,
        // which sum each column over all rows in one f64 sequence.
        let (mut dw3, mut db3) = (vec![0.0; c], vec![0.0; c]);
        super::layernorm_backward_dw(&mut dw3, 0, &ones, &x, &m, &r, c);
        crate::kernels::fastmath::sum_rows_into_on(None, &mut db3, &ones);
        for (a, b) in got.iter().zip(dw3.iter().chain(&db3)) {
            assert!(
                (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1,
                "{a} vs {b}"
            );
        }
    }

    #[test]
    fn gradcheck_layernorm() {
        gradcheck(
            Check::new("layernorm", &[&[3, 2, 5], &[5], &[5]]).range(-2.0, 2.0),
            |c, x| c.layernorm(x[0], x[1], x[2]),
        );
    }

    /// LayerNorm's weight and bias gradients sum over every row. Over 2,048
    /// rows they must be within 2x of the same sums accumulated in f64 from
    /// the same f32 inputs (saved mean and 1/std) and rounded once, which is
    /// within half an ulp of exact.
    #[test]
    fn weight_and_bias_gradients_are_accurately_summed() {
        use crate::ops::gradcheck::{Lcg, column_data};
        let (rows, c) = (2048, 64);
        let mut rng = Lcg(12);
        let (r, db_exact) = column_data(&mut rng, rows, c);
        let x: Vec<f32> = (0..rows * c).map(|_| rng.range(-2.0, 2.0)).collect();
        let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
        // x a constant: three passes (no dx); x a parameter: one pass.
        for x_param in [false, true] {
            check_sums(rows, c, &r, &db_exact, &x, &w, x_param);
        }
    }

    fn check_sums(
        rows: usize,
        c: usize,
        r: &[f32],
        db_exact: &[f64],
        x: &[f32],
        w: &[f32],
        x_param: bool,
    ) {
        use crate::ops::gradcheck::abs_errors;
        let mut ctx = crate::Context::new();
        let pw = ctx.param(&[c], Some(w)).unwrap();
        let pb = ctx.param(&[c], None).unwrap();
        let xt = if x_param {
            ctx.param(&[rows, c], Some(x)).unwrap()
        } else {
            ctx.tensor(&[rows, c], x).unwrap()
        };
        let y = ctx.layernorm(xt, pw, pb).unwrap();
        let rt = ctx.tensor(&[rows, c], r).unwrap();
        let yr = ctx.mul(y, rt).unwrap();
        let l = ctx.sum(yr).unwrap();
        ctx.backward(l).unwrap();
        let (mut dw, mut db) = (vec![0.0f32; c], vec![0.0f32; c]);
        ctx.read_grad(pw, &mut dw).unwrap();
        ctx.read_grad(pb, &mut db).unwrap();
        // The forward kernel gives the mean and 1/std backward reuses.
        let (mut yv, mut mean, mut rstd) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
        super::layernorm_forward(&mut yv, &mut mean, &mut rstd, x, w, &vec![0.0; c], c);
        let mut dw_exact = vec![0.0f64; c];
        for ((gr, xr), (&mu, &rs)) in r
            .chunks_exact(c)
            .zip(x.chunks_exact(c))
            .zip(mean.iter().zip(&rstd))
        {
            for ((d, &g), &xv) in dw_exact.iter_mut().zip(gr).zip(xr) {
                *d += g as f64 * (xv as f64 - mu as f64) * rs as f64;
            }
        }
        let mut ok = true;
        for (name, got, exact) in [("dw", &dw[..], &dw_exact[..]), ("db", &db, db_exact)] {
            let rounded: Vec<f32> = exact.iter().map(|&s| s as f32).collect();
            let (got_rms, got_max) = abs_errors(got, exact);
            let (ref_rms, ref_max) = abs_errors(&rounded, exact);
            eprintln!(
                "[layernorm {name}, {rows} rows, one pass: {x_param}] abs error rms/max: got {got_rms:.3e}/{got_max:.3e}, f64-accumulated {ref_rms:.3e}/{ref_max:.3e}"
            );
            ok &= got_rms <= 2.0 * ref_rms && got_max <= 2.0 * ref_max;
        }
        assert!(
            ok,
            "a LayerNorm parameter gradient is not accurately summed"
        );
    }
}

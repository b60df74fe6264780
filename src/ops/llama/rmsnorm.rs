//! RMSNorm over the last axis (Llama's): no mean subtraction, no bias. The
//! forward pass saves each row's 1/rms, which the backward pass reuses.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
// The row kernels cut rows as LayerNorm's do, and the one-pass backward
// holds its sums in the same stack space.
use crate::ops::norm::{self, ONE_PASS_CHUNK_ROWS, ONE_PASS_PARTIALS, row_tasks};
use crate::pool;
use crate::simd;

/// y = x * rstd * w per row, rstd = 1 / sqrt(mean(x^2) + eps). x, y:
/// `[N, C]`; w: `[C]`; rstd: `[N]`. The sum of squares is f32, as
/// Hugging Face's LlamaRMSNorm computes it in float32.
#[inline(always)]
fn rmsnorm_forward(y: &mut [f32], rstd: &mut [f32], x: &[f32], w: &[f32], eps: f32, c: usize) {
    for ((yr, xr), r) in y
        .chunks_exact_mut(c)
        .zip(x.chunks_exact(c))
        .zip(rstd.iter_mut())
    {
        let ms = fastmath::sum_sq_dev(xr, 0.0) / c as f32;
        let rs = 1.0 / (ms + eps).sqrt();
        for ((yv, &xv), &wv) in yr.iter_mut().zip(xr).zip(w) {
            *yv = xv * rs * wv;
        }
        *r = rs;
    }
}

/// dx += rstd * (dout * w - x * rstd^2 * mean(dout * w * x)), the
/// derivative of x * rstd * w through rstd = (mean(x^2) + eps)^(-1/2),
/// whose own derivative is -rstd^3 x / C.
#[inline(always)]
fn rmsnorm_backward_dx(dx: &mut [f32], dout: &[f32], x: &[f32], w: &[f32], rstd: &[f32], c: usize) {
    let rows = dx
        .chunks_exact_mut(c)
        .zip(dout.chunks_exact(c))
        .zip(x.chunks_exact(c));
    for (((dxr, gr), xr), &rs) in rows.zip(rstd) {
        let (_, gwx) = fastmath::dot2(gr, w, xr);
        let k = rs * rs * gwx / c as f32;
        for (((d, &g), &xv), &wv) in dxr.iter_mut().zip(gr).zip(xr).zip(w) {
            *d += (g * wv - xv * k) * rs;
        }
    }
}

/// One row's term of the weight gradient, dout * x * rstd, in f64. Both
/// backward paths take it from here, so their sums agree.
#[inline(always)]
fn weight_term(g: f32, xv: f32, rs: f64) -> f64 {
    g as f64 * (xv as f64 * rs)
}

/// dw += sum_rows dout * x * rstd, each term and the sum in f64 (see
/// `fastmath::accumulate_cols_f64`).
#[inline(always)]
fn rmsnorm_backward_dw(dw: &mut [f32], first: usize, dout: &[f32], x: &[f32], rstd: &[f32]) {
    let c = dout.len() / rstd.len().max(1);
    fastmath::accumulate_cols_f64(dw, first, rstd.len(), |r, cols, acc| {
        let (g, xr) = (&dout[r * c..][cols.clone()], &x[r * c..][cols]);
        let rs = rstd[r] as f64;
        for ((a, &g), &xv) in acc.iter_mut().zip(g).zip(xr) {
            *a += weight_term(g, xv, rs);
        }
    });
}

/// Widest rows the one-pass backward takes: one f64 sum per column (the
/// weight's), where LayerNorm's holds two, in the same stack space.
const ONE_PASS_MAX_C: usize = 2 * norm::ONE_PASS_MAX_C;

/// Tasks of the one-pass backward: as [`row_tasks`], but no more than
/// [`ONE_PASS_PARTIALS`] holds sums for.
fn one_pass_tasks(rows: usize, c: usize) -> usize {
    row_tasks(rows, c).min(ONE_PASS_PARTIALS / c.max(1))
}

/// dx for a run of rows (as [`rmsnorm_backward_dx`]), and their terms of
/// the weight sum (those of [`rmsnorm_backward_dw`]) added in f64, row
/// after row, to `acc` (`[C]`) while the rows are still in L1: one pass
/// over dout and x instead of two.
#[inline(always)]
fn rmsnorm_backward_rows(
    dx: &mut [f32],
    acc: &mut [f64],
    dout: &[f32],
    x: &[f32],
    w: &[f32],
    rstd: &[f32],
    c: usize,
) {
    let step = ONE_PASS_CHUNK_ROWS * c;
    let chunks = dx
        .chunks_mut(step)
        .zip(dout.chunks(step))
        .zip(x.chunks(step))
        .zip(rstd.chunks(ONE_PASS_CHUNK_ROWS));
    for (((dx, g), x), r) in chunks {
        rmsnorm_backward_dx(dx, g, x, w, r, c);
        let rows = g.chunks_exact(c).zip(x.chunks_exact(c));
        for ((gr, xr), &rs) in rows.zip(r) {
            let rs = rs as f64;
            for ((a, &g), &xv) in acc.iter_mut().zip(gr).zip(xr) {
                *a += weight_term(g, xv, rs);
            }
        }
    }
}

impl Context {
    /// RMSNorm over the last axis: y = x / sqrt(mean(x^2) + eps) * w, as
    /// Llama's (no mean subtraction, no bias). x: `[..., C]`, w: `[C]` ->
    /// `[..., C]`. `eps` must be finite and >= 0 (Llama uses 1e-5 or 1e-6).
    pub fn rmsnorm(&mut self, x: Tensor, w: Tensor, eps: f32) -> Result<Tensor> {
        const OP: &str = "rmsnorm";
        let (ix, iw) = (self.resolve(OP, x)?, self.resolve(OP, w)?);
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("eps {eps} must be finite and >= 0"),
            });
        }
        let (ex, ew) = (self.entry(ix), self.entry(iw));
        if ew.shape.ndim() != 1 || ew.shape.numel() != ex.shape.last() {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "weight must be [C] for x [...,C]",
                a: ex.shape,
                b: ew.shape,
            });
        }
        let tracks = self.tracks(&[ix, iw]);
        let rstd = self.alloc_scratchable::<f32>(OP, ex.shape.rows())?;
        let out = self.push_output(OP, ex.shape, tracks)?;
        let op = Op::RmsNorm {
            x: ix,
            w: iw,
            eps,
            rstd,
        };
        Ok(self.run(op, out))
    }
}

/// Writes y (`[rows, C]`) and the per-row 1/rms (`[rows]`) from x
/// (`[rows, C]`) and w (`[C]`).
pub(crate) fn forward_rmsnorm(ctx: &mut Context, out: u32, x: u32, w: u32, eps: f32, rstd: Buf) {
    let (ex, ew, eo) = (ctx.entry(x), ctx.entry(w), ctx.entry(out));
    let (rows, c) = (ex.shape.rows(), ex.shape.last());
    let n = row_tasks(rows, c);
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y, r], [x, w]) = ctx.access_on(par, [eo.data, rstd], [ex.data, ew.data]);
    if n == 1 {
        return simd::dispatch!(rmsnorm_forward(y, r, x, w, eps, c));
    }
    // Rows are independent: each task owns a run of them.
    let parts = fastmath::row_parts(y, c, n).zip(fastmath::row_parts(r, 1, n));
    fastmath::run_parts(pool, parts, &|i, (y, r)| {
        let x = &x[pool::task_range(rows, n, i).start * c..][..y.len()];
        simd::dispatch!(rmsnorm_forward(y, r, x, w, eps, c))
    });
}

/// Gradients of x and w: in one pass over dout and x (row tasks, each
/// with its own weight sums, added in task order) when both are wanted,
/// in separate buffers, and the rows are narrow enough; else x's by row
/// tasks and w's by column tasks. Each task list is fixed by the shape.
pub(crate) fn backward_rmsnorm(ctx: &mut Context, out: u32, x: u32, w: u32, rstd: Buf) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ex, ew) = (ctx.entry(x), ctx.entry(w));
    let (rows, c) = (ex.shape.rows(), ex.shape.last());
    let work = ex.shape.numel() * fastmath::ELEMENT_COST;
    let (gx, gw) = (ctx.grad_of(x), ctx.grad_of(w));
    if let (Some(dx), Some(dw)) = (gx, gw)
        && (1..=ONE_PASS_MAX_C).contains(&c)
        && !dx.overlaps(&dw)
    {
        let n = one_pass_tasks(rows, c);
        let par = n > 1 && ctx.want_pool(work);
        let (pool, [dx, dw], [g, x, w, r]) =
            ctx.access_on(par, [dx, dw], [dout, ex.data, ew.data, rstd]);
        let run = |dx: &mut [f32], acc: &mut [f64], rows: std::ops::Range<usize>| {
            let (g, x) = (
                &g[rows.start * c..rows.end * c],
                &x[rows.start * c..rows.end * c],
            );
            simd::dispatch!(rmsnorm_backward_rows(dx, acc, g, x, w, &r[rows], c))
        };
        let add_into = |dw: &mut [f32], sums: &[f64]| {
            for (o, &sum) in dw.iter_mut().zip(sums) {
                *o = (*o as f64 + sum) as f32;
            }
        };
        if n == 1 {
            // The column kernel's sequence exactly: each column's terms
            // in row order from zero, then added to dw once.
            let mut acc = [0.0f64; ONE_PASS_MAX_C];
            let acc = &mut acc[..c];
            run(dx, acc, 0..rows);
            return add_into(dw, acc);
        }
        // Each task sums its own rows, whether or not another thread runs
        // it; the partial sums are then added in task order, so the bits
        // do not depend on the thread count.
        let mut partials = [0.0f64; ONE_PASS_PARTIALS];
        let parts = fastmath::row_parts(dx, c, n).zip(partials.chunks_exact_mut(c));
        fastmath::run_parts(pool, parts, &|i, (dx, acc)| {
            run(dx, acc, pool::task_range(rows, n, i))
        });
        let (first, rest) = partials[..n * c].split_at_mut(c);
        for part in rest.chunks_exact(c) {
            first.iter_mut().zip(part).for_each(|(s, &p)| *s += p);
        }
        return add_into(dw, first);
    }
    if let Some(dx) = gx {
        let n = row_tasks(rows, c);
        let par = n > 1 && ctx.want_pool(work);
        let (pool, [dx], [g, x, w, r]) = ctx.access_on(par, [dx], [dout, ex.data, ew.data, rstd]);
        if n == 1 {
            simd::dispatch!(rmsnorm_backward_dx(dx, g, x, w, r, c));
        } else {
            fastmath::run_parts(pool, fastmath::row_parts(dx, c, n), &|i, dx| {
                let rows = pool::task_range(rows, n, i);
                let (g, x) = (
                    &g[rows.start * c..rows.end * c],
                    &x[rows.start * c..rows.end * c],
                );
                simd::dispatch!(rmsnorm_backward_dx(dx, g, x, w, &r[rows], c))
            });
        }
    }
    if let Some(dw) = gw {
        let par = ctx.want_pool(work);
        let (pool, [dw], [g, x, r]) = ctx.access_on(par, [dw], [dout, ex.data, rstd]);
        fastmath::split_columns(pool, dw, rows, |dw, first| {
            simd::dispatch!(rmsnorm_backward_dw(dw, first, g, x, r))
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, Lcg, gradcheck};

    /// y, dx and dw of sum(rmsnorm(x, w) * r) in f64 from the same f32
    /// inputs.
    fn reference(x: &[f32], w: &[f32], r: &[f32], eps: f64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let c = w.len();
        let (mut y, mut dx, mut dw) = (vec![], vec![], vec![0.0; c]);
        for (xr, gr) in x.chunks(c).zip(r.chunks(c)) {
            let ms = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / c as f64;
            let rs = 1.0 / (ms + eps).sqrt();
            let gwx: f64 = (0..c)
                .map(|i| gr[i] as f64 * w[i] as f64 * xr[i] as f64)
                .sum();
            for i in 0..c {
                let (xv, wv, g) = (xr[i] as f64, w[i] as f64, gr[i] as f64);
                y.push(xv * rs * wv);
                dx.push(rs * g * wv - rs * rs * rs * xv * gwx / c as f64);
                dw[i] += g * xv * rs;
            }
        }
        (y, dx, dw)
    }

    /// Forward and both gradients of sum(rmsnorm(x, w) * r) at `rows` x
    /// `c`, each against f64 within `bound` of the row's scale (dw's: the
    /// row count).
    fn check_against_f64(rows: usize, c: usize, seed: u64, bound: f64) {
        let eps = 1e-6f32;
        let mut rng = Lcg(seed);
        let x: Vec<f32> = (0..rows * c).map(|_| rng.range(-3.0, 3.0)).collect();
        let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
        let r: Vec<f32> = (0..rows * c).map(|_| rng.range(-1.0, 1.0)).collect();
        let mut ctx = crate::Context::new();
        let pw = ctx.param(&[c], Some(&w)).unwrap();
        let px = ctx.param(&[rows, c], Some(&x)).unwrap();
        let y = ctx.rmsnorm(px, pw, eps).unwrap();
        let rt = ctx.tensor(&[rows, c], &r).unwrap();
        let yr = ctx.mul(y, rt).unwrap();
        let l = ctx.sum(yr).unwrap();
        ctx.backward(l).unwrap();
        let (mut gy, mut gdx, mut gdw) = (vec![0.0; rows * c], vec![0.0; rows * c], vec![0.0; c]);
        ctx.read(y, &mut gy).unwrap();
        ctx.read_grad(px, &mut gdx).unwrap();
        ctx.read_grad(pw, &mut gdw).unwrap();
        let (wy, wdx, wdw) = reference(&x, &w, &r, eps as f64);
        let worst = |got: &[f32], want: &[f64], scale: f64| {
            got.iter()
                .zip(want)
                .map(|(&g, &e)| (g as f64 - e).abs() / scale)
                .fold(0.0f64, f64::max)
        };
        // Unit-variance-ish rows: rstd about 0.6, |y| and |dx| of order 1,
        // dw a sum over the rows.
        let (ey, edx, edw) = (
            worst(&gy, &wy, 1.0),
            worst(&gdx, &wdx, 1.0),
            worst(&gdw, &wdw, rows as f64),
        );
        eprintln!("[rmsnorm {rows}x{c} vs f64] y {ey:.2e}, dx {edx:.2e}, dw {edw:.2e}");
        assert!(ey < bound && edx < bound && edw < bound);
    }

    /// Forward and both gradients against f64 (Hugging Face's float32
    /// module is the f32 rounding of this). Each f32 value is a short
    /// chain of roundings after a sum of C = 64 squares (8 lanes of 8):
    /// relative error a few 1e-7, so 4e-6 of the row's scale (|x| rstd |w|
    /// summed terms) is a safe bound that still catches any wrong term.
    /// One task of the one-pass backward.
    #[test]
    fn rmsnorm_matches_f64_reference() {
        check_against_f64(37, 64, 17, 4e-6);
    }

    /// The same bound where the one-pass backward runs in several row
    /// tasks whose weight sums are added at the end (4096 x 128: 8), and
    /// where rows wider than it holds sums for take the two passes (1040:
    /// sums of 1040 squares, whose rounding the bound still covers).
    #[test]
    #[cfg_attr(miri, ignore)] // large sizes
    fn rmsnorm_matches_f64_reference_in_tasks_and_wide_rows() {
        assert!(super::one_pass_tasks(4096, 128) >= 4);
        const { assert!(1040 > super::ONE_PASS_MAX_C) };
        check_against_f64(4096, 128, 19, 4e-6);
        check_against_f64(40, 1040, 23, 4e-6);
    }

    #[test]
    fn gradcheck_rmsnorm() {
        gradcheck(
            Check::new("rmsnorm", &[&[3, 2, 5], &[5]]).range(-2.0, 2.0),
            |c, x| c.rmsnorm(x[0], x[1], 1e-5),
        );
    }

    /// The same tensor as x and weight (a [C] input): both gradients add
    /// into one buffer.
    #[test]
    fn gradcheck_rmsnorm_of_its_own_weight() {
        gradcheck(
            Check::new("rmsnorm(w, w)", &[&[6]]).range(0.5, 2.0),
            |c, x| c.rmsnorm(x[0], x[0], 1e-5),
        );
    }

    #[test]
    fn errors_name_the_op_and_shapes() {
        let mut c = crate::Context::new();
        let w = c.param(&[3], None).unwrap();
        let x = c.tensor(&[2, 4], &[1.0; 8]).unwrap();
        let e = c.rmsnorm(x, w, 1e-5).unwrap_err().to_string();
        assert!(
            e.contains("rmsnorm") && e.contains("[2,4]") && e.contains("[3]"),
            "{e}"
        );
        let x = c.tensor(&[2, 3], &[1.0; 6]).unwrap();
        for eps in [f32::NAN, -1e-5, f32::INFINITY] {
            let e = c.rmsnorm(x, w, eps).unwrap_err().to_string();
            assert!(e.contains("rmsnorm") && e.contains("eps"), "{e}");
        }
    }

    /// Cut into several tasks, forward and dx equal the single-threaded
    /// kernels bit for bit, and dw the tasks' f64 sums of the column
    /// kernel's terms added in task order; at one task, dw is the column
    /// kernel's bits.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn parallel_path_matches_kernels() {
        for (rows, c) in [(4096, 128), (40, 64)] {
            let n = super::one_pass_tasks(rows, c);
            assert_eq!(n > 1, rows == 4096, "{n} tasks");
            let mut rng = Lcg(3);
            let x: Vec<f32> = (0..rows * c).map(|_| rng.range(-2.0, 2.0)).collect();
            let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
            let mut ctx = crate::Context::new();
            let pw = ctx.param(&[c], Some(&w)).unwrap();
            let px = ctx.param(&[rows, c], Some(&x)).unwrap();
            let y = ctx.rmsnorm(px, pw, 1e-5).unwrap();
            assert!(n == 1 || ctx.pool_started());
            let l = ctx.sum(y).unwrap();
            ctx.backward(l).unwrap();
            let (mut gy, mut gdx, mut gdw) =
                (vec![0.0; rows * c], vec![0.0; rows * c], vec![0.0; c]);
            ctx.read(y, &mut gy).unwrap();
            ctx.read_grad(px, &mut gdx).unwrap();
            ctx.read_grad(pw, &mut gdw).unwrap();
            let (mut wy, mut r, mut wdx, mut wdw) = (
                vec![0.0; rows * c],
                vec![0.0; rows],
                vec![0.0; rows * c],
                vec![0.0; c],
            );
            let ones = vec![1.0; rows * c];
            super::rmsnorm_forward(&mut wy, &mut r, &x, &w, 1e-5, c);
            super::rmsnorm_backward_dx(&mut wdx, &ones, &x, &w, &r, c);
            if n == 1 {
                super::rmsnorm_backward_dw(&mut wdw, 0, &ones, &x, &r);
            } else {
                let mut sums = vec![0.0f64; c];
                for i in 0..n {
                    let at = crate::pool::task_range(rows, n, i);
                    let rows_of = |v: &[f32]| v[at.start * c..at.end * c].to_vec();
                    let (mut dx, mut acc) = (rows_of(&x), vec![0.0f64; c]);
                    let (g, xs) = (rows_of(&ones), rows_of(&x));
                    super::rmsnorm_backward_rows(&mut dx, &mut acc, &g, &xs, &w, &r[at], c);
                    sums.iter_mut().zip(&acc).for_each(|(s, &a)| *s += a);
                }
                wdw.iter_mut()
                    .zip(&sums)
                    .for_each(|(o, &s)| *o = (*o as f64 + s) as f32);
            }
            let same =
                |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same(&gy, &wy) && same(&gdx, &wdx) && same(&gdw, &wdw),
                "{rows}x{c}"
            );
        }
    }
}

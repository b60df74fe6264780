//! RMSNorm over the last axis (Llama's): no mean subtraction, no bias. The
//! forward pass saves each row's 1/rms, which the backward pass reuses.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
// The row kernels cut rows as LayerNorm's do.
use crate::ops::norm::row_tasks;
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

/// dw += sum_rows dout * x * rstd, each term and the sum in f64 (see
/// `fastmath::accumulate_cols_f64`).
#[inline(always)]
fn rmsnorm_backward_dw(dw: &mut [f32], first: usize, dout: &[f32], x: &[f32], rstd: &[f32]) {
    let c = dout.len() / rstd.len().max(1);
    fastmath::accumulate_cols_f64(dw, first, rstd.len(), |r, cols, acc| {
        let (g, xr) = (&dout[r * c..][cols.clone()], &x[r * c..][cols]);
        let rs = rstd[r] as f64;
        for ((a, &g), &xv) in acc.iter_mut().zip(g).zip(xr) {
            *a += g as f64 * (xv as f64 * rs);
        }
    });
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

/// Gradients of x (row tasks) and w (column tasks), each task list fixed
/// by the shape.
pub(crate) fn backward_rmsnorm(ctx: &mut Context, out: u32, x: u32, w: u32, rstd: Buf) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ex, ew) = (ctx.entry(x), ctx.entry(w));
    let (rows, c) = (ex.shape.rows(), ex.shape.last());
    let work = ex.shape.numel() * fastmath::ELEMENT_COST;
    if let Some(dx) = ctx.grad_of(x) {
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
    if let Some(dw) = ctx.grad_of(w) {
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

    /// Forward and both gradients against f64 (Hugging Face's float32
    /// module is the f32 rounding of this). Each f32 value is a short
    /// chain of roundings after a sum of C = 64 squares (8 lanes of 8):
    /// relative error a few 1e-7, so 4e-6 of the row's scale (|x| rstd |w|
    /// summed terms) is a safe bound that still catches any wrong term.
    #[test]
    fn rmsnorm_matches_f64_reference() {
        let (rows, c, eps) = (37, 64, 1e-6f32);
        let mut rng = Lcg(17);
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
        // dw a sum over 37 rows.
        let (ey, edx, edw) = (
            worst(&gy, &wy, 1.0),
            worst(&gdx, &wdx, 1.0),
            worst(&gdw, &wdw, rows as f64),
        );
        eprintln!("[rmsnorm vs f64] y {ey:.2e}, dx {edx:.2e}, dw {edw:.2e}");
        assert!(ey < 4e-6 && edx < 4e-6 && edw < 4e-6);
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
    /// kernels bit for bit, and dw the column kernel over all rows.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn parallel_path_matches_kernels() {
        let (rows, c) = (4096, 128);
        assert!(super::row_tasks(rows, c) >= 4);
        let mut rng = Lcg(3);
        let x: Vec<f32> = (0..rows * c).map(|_| rng.range(-2.0, 2.0)).collect();
        let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
        let mut ctx = crate::Context::new();
        let pw = ctx.param(&[c], Some(&w)).unwrap();
        let px = ctx.param(&[rows, c], Some(&x)).unwrap();
        let y = ctx.rmsnorm(px, pw, 1e-5).unwrap();
        assert!(ctx.pool_started());
        let l = ctx.sum(y).unwrap();
        ctx.backward(l).unwrap();
        let (mut gy, mut gdx, mut gdw) = (vec![0.0; rows * c], vec![0.0; rows * c], vec![0.0; c]);
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
        super::rmsnorm_backward_dw(&mut wdw, 0, &ones, &x, &r);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same(&gy, &wy) && same(&gdx, &wdx) && same(&gdw, &wdw));
    }
}

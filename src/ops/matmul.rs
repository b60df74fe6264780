//! Matrix products through `blas::sgemm`: 2-D matmul with optional
//! transposes, linear (x @ W + b, bias fused into the GEMM's C operand) and
//! batched matmul. Backward GEMMs accumulate straight into the gradient
//! buffers (beta = 1), so no temporary is needed.

use crate::blas::{Gemm, sgemm_bias_on, sgemm_on};
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::pool::Pool;
use crate::shape::{MAX_DIMS, Shape};

/// (rows, cols) of a stored 2-D matrix after an optional transpose.
/// The error for a product whose inner dimensions differ. With a transpose
/// flag set, the message shows each operand as passed, marked `^T`, and
/// then the shapes the product actually multiplies, e.g.
/// `[8,32] x [32,4]^T = [8,32] x [4,32]`.
fn inner_mismatch(op: &'static str, a: Shape, b: Shape, trans_a: bool, trans_b: bool) -> Error {
    if !trans_a && !trans_b {
        return Error::ShapeMismatch {
            op,
            what: "inner dimensions differ",
            a,
            b,
        };
    }
    let marked = |s: Shape, t: bool| if t { format!("{s}^T") } else { s.to_string() };
    let applied = |s: Shape, t: bool| {
        let mut d = [0usize; MAX_DIMS];
        let n = s.ndim();
        d[..n].copy_from_slice(s.dims());
        if t {
            d.swap(n - 2, n - 1);
        }
        Shape::from_valid(&d[..n])
    };
    Error::BadShape {
        op,
        what: format!(
            "inner dimensions differ: {} x {} = {} x {}",
            marked(a, trans_a),
            marked(b, trans_b),
            applied(a, trans_a),
            applied(b, trans_b)
        ),
    }
}

fn op_dims(rows: usize, cols: usize, trans: bool) -> (usize, usize) {
    if trans { (cols, rows) } else { (rows, cols) }
}

/// Gradients of C = op(A) op(B) (each of one batch item), accumulated:
/// dA_stored += ..., dB_stored += ... . m, n, k as in the forward.
#[allow(clippy::too_many_arguments)]
fn matmul_backward(
    pool: Option<&Pool>,
    da: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
    dc: &[f32],
    a: &[f32],
    b: &[f32],
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
) {
    if let Some(da) = da {
        if ta {
            // A stored [k, m]: dA = op(B) @ dC^T.
            sgemm_on(
                pool,
                Gemm {
                    ldc: m,
                    ..Gemm::dense(tb, true, k, m, n)
                },
                1.0,
                b,
                dc,
                1.0,
                da,
            );
        } else {
            // dA [m, k] = dC @ op(B)^T.
            sgemm_on(pool, Gemm::dense(false, !tb, m, k, n), 1.0, dc, b, 1.0, da);
        }
    }
    if let Some(db) = db {
        if tb {
            // B stored [n, k]: dB = dC^T @ op(A).
            sgemm_on(pool, Gemm::dense(true, ta, n, k, m), 1.0, dc, a, 1.0, db);
        } else {
            // dB [k, n] = op(A)^T @ dC.
            sgemm_on(pool, Gemm::dense(!ta, false, k, n, m), 1.0, a, dc, 1.0, db);
        }
    }
}

impl Context {
    /// 2-D matrix product op(a) @ op(b), where op transposes when asked.
    /// a: `[M,K]` (or `[K,M]` with trans_a), b: `[K,N]` (or `[N,K]`) -> `[M,N]`.
    pub fn matmul(&mut self, a: Tensor, b: Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
        const OP: &str = "matmul";
        let (ia, ib) = (self.resolve(OP, a)?, self.resolve(OP, b)?);
        let (ea, eb) = (self.entry(ia), self.entry(ib));
        if ea.shape.ndim() != 2 || eb.shape.ndim() != 2 {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "operands must be 2-D",
                a: ea.shape,
                b: eb.shape,
            });
        }
        let (m, k) = op_dims(ea.shape.dims()[0], ea.shape.dims()[1], trans_a);
        let (k2, n) = op_dims(eb.shape.dims()[0], eb.shape.dims()[1], trans_b);
        if k != k2 {
            return Err(inner_mismatch(OP, ea.shape, eb.shape, trans_a, trans_b));
        }
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(OP, Shape::new(OP, &[m, n])?, tracks)?;
        let op = Op::Matmul {
            a: ia,
            b: ib,
            trans_a,
            trans_b,
        };
        Ok(self.run(op, out))
    }

    /// Fully connected layer: x @ w + bias. x: `[..., K]`, w: `[K, N]`,
    /// bias: `[N]` or None -> `[..., N]`. The bias is written into the output
    /// before the GEMM accumulates onto it (no separate add pass).
    pub fn linear(&mut self, x: Tensor, w: Tensor, bias: Option<Tensor>) -> Result<Tensor> {
        const OP: &str = "linear";
        let (ix, iw) = (self.resolve(OP, x)?, self.resolve(OP, w)?);
        let ib = bias.map(|b| self.resolve(OP, b)).transpose()?;
        let (ex, ew) = (self.entry(ix), self.entry(iw));
        if ew.shape.ndim() != 2 || ex.shape.last() != ew.shape.dims()[0] {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "x's last dimension must equal w's rows",
                a: ex.shape,
                b: ew.shape,
            });
        }
        let n = ew.shape.dims()[1];
        if let Some(ib) = ib {
            let eb = self.entry(ib);
            if eb.shape.numel() != n || eb.shape.ndim() != 1 {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    what: "bias must be [N] for w [K,N]",
                    a: eb.shape,
                    b: ew.shape,
                });
            }
        }
        let mut dims = [0usize; MAX_DIMS];
        let nd = ex.shape.ndim();
        dims[..nd].copy_from_slice(ex.shape.dims());
        dims[nd - 1] = n;
        let oshape = Shape::new(OP, &dims[..nd])?;
        let tracks = match ib {
            Some(ib) => self.tracks(&[ix, iw, ib]),
            None => self.tracks(&[ix, iw]),
        };
        let out = self.push_output(OP, oshape, tracks)?;
        let op = Op::Linear {
            x: ix,
            w: iw,
            bias: ib,
        };
        Ok(self.run(op, out))
    }

    /// Batched product over matching leading (batch) dimensions:
    /// a: `[..., M, K]` (or `[..., K, M]`), b: `[..., K, N]` (or `[..., N, K]`) -> `[..., M, N]`.
    pub fn bmm(&mut self, a: Tensor, b: Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
        const OP: &str = "bmm";
        let (ia, ib) = (self.resolve(OP, a)?, self.resolve(OP, b)?);
        let (ea, eb) = (self.entry(ia), self.entry(ib));
        let nd = ea.shape.ndim();
        if nd < 3 || eb.shape.ndim() != nd || ea.shape.dims()[..nd - 2] != eb.shape.dims()[..nd - 2]
        {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "operands must be rank >= 3 with equal batch dimensions",
                a: ea.shape,
                b: eb.shape,
            });
        }
        let (m, k) = op_dims(ea.shape.dims()[nd - 2], ea.shape.dims()[nd - 1], trans_a);
        let (k2, n) = op_dims(eb.shape.dims()[nd - 2], eb.shape.dims()[nd - 1], trans_b);
        if k != k2 {
            return Err(inner_mismatch(OP, ea.shape, eb.shape, trans_a, trans_b));
        }
        let mut dims = [0usize; MAX_DIMS];
        dims[..nd].copy_from_slice(ea.shape.dims());
        dims[nd - 2] = m;
        dims[nd - 1] = n;
        let oshape = Shape::new(OP, &dims[..nd])?;
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(OP, oshape, tracks)?;
        let op = Op::Bmm {
            a: ia,
            b: ib,
            trans_a,
            trans_b,
        };
        Ok(self.run(op, out))
    }
}

/// c = op(a) @ op(b). a: `[M,K]` (or `[K,M]`), b: `[K,N]` (or `[N,K]`), c: `[M,N]`.
pub(crate) fn forward_matmul(ctx: &mut Context, out: u32, ia: u32, ib: u32, ta: bool, tb: bool) {
    let (ea, eb, eo) = (ctx.entry(ia), ctx.entry(ib), ctx.entry(out));
    let (m, n, k) = mnk(ea.shape, eo.shape, ta);
    let par = ctx.want_pool(m * n * k);
    let (pool, [c], [a, b]) = ctx.access_on(par, [eo.data], [ea.data, eb.data]);
    sgemm_on(pool, Gemm::dense(ta, tb, m, n, k), 1.0, a, b, 0.0, c);
}

/// y = x @ w (+ bias, written into y first so the GEMM accumulates onto it).
/// x: `[..., K]`, w: `[K, N]`, bias: `[N]`, y: `[..., N]`.
pub(crate) fn forward_linear(ctx: &mut Context, out: u32, ix: u32, iw: u32, bias: Option<u32>) {
    let (ex, ew, eo) = (ctx.entry(ix), ctx.entry(iw), ctx.entry(out));
    let (k, n) = (ew.shape.dims()[0], ew.shape.dims()[1]);
    let rows = ex.shape.rows();
    let par = ctx.want_pool(rows * n * k);
    let g = Gemm::dense(false, false, rows, n, k);
    match bias {
        Some(ib) => {
            let eb = ctx.entry(ib);
            let (pool, [y], [x, w, b]) = ctx.access_on(par, [eo.data], [ex.data, ew.data, eb.data]);
            sgemm_bias_on(pool, g, x, w, b, y);
        }
        None => {
            let (pool, [y], [x, w]) = ctx.access_on(par, [eo.data], [ex.data, ew.data]);
            sgemm_on(pool, g, 1.0, x, w, 0.0, y);
        }
    }
}

/// c[i] = op(a[i]) @ op(b[i]) over the batch. a: `[..., M, K]`, b: `[..., K, N]`,
/// c: `[..., M, N]` (transposes as for matmul).
pub(crate) fn forward_bmm(ctx: &mut Context, out: u32, ia: u32, ib: u32, ta: bool, tb: bool) {
    let (ea, eb, eo) = (ctx.entry(ia), ctx.entry(ib), ctx.entry(out));
    let (m, n, k) = mnk(ea.shape, eo.shape, ta);
    let batch = eo.shape.numel() / (m * n);
    let ([c], [a, b]) = ctx.access([eo.data], [ea.data, eb.data]);
    let g = Gemm::dense(ta, tb, m, n, k);
    let pool = None;
    for ((c, a), b) in c
        .chunks_exact_mut(m * n)
        .zip(a.chunks_exact(m * k))
        .zip(b.chunks_exact(k * n))
        .take(batch)
    {
        sgemm_on(pool, g, 1.0, a, b, 0.0, c);
    }
}

/// Dims (m, n, k) of a recorded matmul/bmm from its output and input a.
fn mnk(a: Shape, out: Shape, ta: bool) -> (usize, usize, usize) {
    let nd = out.ndim();
    let (m, n) = (out.dims()[nd - 2], out.dims()[nd - 1]);
    let k = if ta {
        a.dims()[nd - 2]
    } else {
        a.dims()[nd - 1]
    };
    (m, n, k)
}

/// Backward of matmul and bmm (bmm is matmul over a batch of one or more).
pub(crate) fn backward_product(ctx: &mut Context, out: u32, ia: u32, ib: u32, ta: bool, tb: bool) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ea, eb, eo) = (ctx.entry(ia), ctx.entry(ib), ctx.entry(out));
    let (m, n, k) = mnk(ea.shape, eo.shape, ta);
    let batch = eo.shape.numel() / (m * n);
    let par = batch == 1 && ctx.want_pool(m * n * k);
    // One gradient at a time (a and b may be the same tensor).
    if let Some(da) = ctx.grad_of(ia) {
        let (pool, [da], [dc, b]) = ctx.access_on(par, [da], [dout, eb.data]);
        for i in 0..batch {
            let (dc, b) = (&dc[i * m * n..][..m * n], &b[i * k * n..][..k * n]);
            matmul_backward(
                pool,
                Some(&mut da[i * m * k..][..m * k]),
                None,
                dc,
                &[],
                b,
                ta,
                tb,
                m,
                n,
                k,
            );
        }
    }
    if let Some(db) = ctx.grad_of(ib) {
        let (pool, [db], [dc, a]) = ctx.access_on(par, [db], [dout, ea.data]);
        for i in 0..batch {
            let (dc, a) = (&dc[i * m * n..][..m * n], &a[i * m * k..][..m * k]);
            matmul_backward(
                pool,
                None,
                Some(&mut db[i * k * n..][..k * n]),
                dc,
                a,
                &[],
                ta,
                tb,
                m,
                n,
                k,
            );
        }
    }
}

pub(crate) fn backward_linear(ctx: &mut Context, out: u32, ix: u32, iw: u32, bias: Option<u32>) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ex, ew) = (ctx.entry(ix), ctx.entry(iw));
    let (k, n) = (ew.shape.dims()[0], ew.shape.dims()[1]);
    let rows = ex.shape.rows();
    let par = ctx.want_pool(rows * n * k);
    let (gx, gw) = (ctx.grad_of(ix), ctx.grad_of(iw));
    let gb = bias.and_then(|b| ctx.grad_of(b));
    if let (Some(dx), Some(dw)) = (gx, gw)
        && !dx.overlaps(&dw)
        && gb.is_none_or(|db| !db.overlaps(&dx) && !db.overlaps(&dw))
    {
        let dims = LinearDims { rows, n, k };
        match gb {
            Some(db) => {
                let (pool, [dx, dw, db], [dc, w, x]) =
                    ctx.access_on(par, [dx, dw, db], [dout, ew.data, ex.data]);
                linear_grads_side_by_side(pool, dims, dx, dw, Some(db), dc, w, x);
            }
            None => {
                let (pool, [dx, dw], [dc, w, x]) =
                    ctx.access_on(par, [dx, dw], [dout, ew.data, ex.data]);
                linear_grads_side_by_side(pool, dims, dx, dw, None, dc, w, x);
            }
        }
        return;
    }
    // One gradient at a time (x and W may share a buffer).
    if let Some(dx) = gx {
        let (pool, [dx], [dc, w]) = ctx.access_on(par, [dx], [dout, ew.data]);
        matmul_backward(pool, Some(dx), None, dc, &[], w, false, false, rows, n, k);
    }
    if let Some(dw) = gw {
        let (pool, [dw], [dc, x]) = ctx.access_on(par, [dw], [dout, ex.data]);
        matmul_backward(pool, None, Some(dw), dc, x, &[], false, false, rows, n, k);
    }
    if let Some(db) = gb {
        let par = ctx.want_pool(rows * n * 16);
        let (pool, [db], [dc]) = ctx.access_on(par, [db], [dout]);
        fastmath::sum_rows_into_on(pool, db, dc);
    }
}

/// x: [rows, k], W: [k, n], y: [rows, n].
#[derive(Clone, Copy)]
struct LinearDims {
    rows: usize,
    n: usize,
    k: usize,
}

/// dX += dY W^T and dW += X^T dY (and the bias's column sums of dY): two
/// products of the same size, each whole on its own thread, where
/// splitting each by rows across both threads ran them at two thirds of
/// the speed (the small preset's products: 26.1 ms split on two threads,
/// against 39.4 on one). One thread runs the same whole products in turn,
/// so the bits do not depend on the thread count.
#[allow(clippy::too_many_arguments)]
fn linear_grads_side_by_side(
    pool: Option<&Pool>,
    d: LinearDims,
    dx: &mut [f32],
    dw: &mut [f32],
    db: Option<&mut [f32]>,
    dc: &[f32],
    w: &[f32],
    x: &[f32],
) {
    let mut run_x = || {
        crate::blas::sgemm(
            Gemm::dense(false, true, d.rows, d.k, d.n),
            1.0,
            dc,
            w,
            1.0,
            dx,
        )
    };
    let run_w = || {
        crate::blas::sgemm(
            Gemm::dense(true, false, d.k, d.n, d.rows),
            1.0,
            x,
            dc,
            1.0,
            dw,
        );
        if let Some(db) = db {
            fastmath::sum_rows_into_on(None, db, dc);
        }
    };
    match pool {
        Some(pool) => pool.join(run_w, run_x),
        None => {
            run_x();
            run_w();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn matmul_forward_and_errors() {
        let mut c = crate::Context::new();
        let a = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let b = c.tensor(&[3, 2], &[7., 8., 9., 10., 11., 12.]).unwrap();
        let mut v = [0.0; 4];
        let p = c.matmul(a, b, false, false).unwrap();
        c.read(p, &mut v).unwrap();
        assert_eq!(v, [58., 64., 139., 154.]);
        let pt = c.matmul(a, a, false, true).unwrap();
        c.read(pt, &mut v).unwrap();
        assert_eq!(v, [14., 32., 32., 77.]);
        let x = c.tensor(&[8, 32], &[0.0; 256]).unwrap();
        let y = c.tensor(&[16, 4], &[0.0; 64]).unwrap();
        let e = c.matmul(x, y, false, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "matmul: inner dimensions differ: [8,32] x [16,4]"
        );
        // With a transpose, the message shows the shapes multiplied.
        let w = c.tensor(&[32, 4], &[0.0; 128]).unwrap();
        let e = c.matmul(x, w, false, true).unwrap_err();
        assert!(matches!(e, crate::Error::BadShape { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "matmul: inner dimensions differ: [8,32] x [32,4]^T = [8,32] x [4,32]"
        );
        let used = c.memory_stats().arena_used_bytes;
        assert!(c.bmm(x, y, false, false).is_err());
        assert!(c.linear(x, y, None).is_err());
        assert_eq!(
            c.memory_stats().arena_used_bytes,
            used,
            "a refused op allocates nothing"
        );
    }

    #[test]
    fn gradcheck_matmul_all_transposes() {
        for ta in [false, true] {
            for tb in [false, true] {
                let sa: &[usize] = if ta { &[4, 3] } else { &[3, 4] };
                let sb: &[usize] = if tb { &[5, 4] } else { &[4, 5] };
                gradcheck(Check::new("matmul", &[sa, sb]), |c, x| {
                    c.matmul(x[0], x[1], ta, tb)
                });
                let ba: &[usize] = if ta { &[2, 4, 3] } else { &[2, 3, 4] };
                let bb: &[usize] = if tb { &[2, 5, 4] } else { &[2, 4, 5] };
                gradcheck(Check::new("bmm", &[ba, bb]), |c, x| {
                    c.bmm(x[0], x[1], ta, tb)
                });
            }
        }
        gradcheck(Check::new("matmul 1x1", &[&[1, 1], &[1, 1]]), |c, x| {
            c.matmul(x[0], x[1], false, false)
        });
        gradcheck(Check::new("x @ x^T", &[&[3, 4]]), |c, x| {
            c.matmul(x[0], x[0], false, true)
        });
    }

    #[test]
    fn gradcheck_linear() {
        gradcheck(
            Check::new("linear+bias", &[&[2, 3, 4], &[4, 5], &[5]]),
            |c, x| c.linear(x[0], x[1], Some(x[2])),
        );
        gradcheck(Check::new("linear", &[&[3, 4], &[4, 2]]), |c, x| {
            c.linear(x[0], x[1], None)
        });
    }

    /// The bias gradient of a linear layer over 2,048 rows is a column sum;
    /// it must be within 2x of the same sum accumulated in f64 and rounded
    /// once to f32 (which is within half an ulp of exact, the best an f32
    /// result can be; 2x leaves room for a last rounding of the += into the
    /// gradient). Adding the rows one by one in f32 was 26x worse here.
    #[test]
    fn linear_bias_gradient_is_accurately_summed() {
        let (rows, k, n) = (2048, 4, 256);
        let mut rng = crate::ops::gradcheck::Lcg(11);
        let (r, exact) = crate::ops::gradcheck::column_data(&mut rng, rows, n);
        let mut c = crate::Context::new();
        let x: Vec<f32> = (0..rows * k).map(|_| rng.range(-1.0, 1.0)).collect();
        let px = c.param(&[rows, k], Some(&x)).unwrap();
        let w = c.param(&[k, n], None).unwrap();
        let b = c.param(&[n], None).unwrap();
        let y = c.linear(px, w, Some(b)).unwrap();
        let rt = c.tensor(&[rows, n], &r).unwrap();
        let yr = c.mul(y, rt).unwrap();
        let l = c.sum(yr).unwrap();
        c.backward(l).unwrap();
        let mut db = vec![0.0f32; n];
        c.read_grad(b, &mut db).unwrap();
        let rounded: Vec<f32> = exact.iter().map(|&s| s as f32).collect();
        let mut naive = vec![0.0f32; n];
        for row in r.chunks_exact(n) {
            naive.iter_mut().zip(row).for_each(|(d, &v)| *d += v);
        }
        let (got_rms, got_max) = crate::ops::gradcheck::abs_errors(&db, &exact);
        let (ref_rms, ref_max) = crate::ops::gradcheck::abs_errors(&rounded, &exact);
        let (naive_rms, naive_max) = crate::ops::gradcheck::abs_errors(&naive, &exact);
        eprintln!(
            "[linear db, {rows} rows] abs error rms/max: got {got_rms:.3e}/{got_max:.3e}, f64-accumulated {ref_rms:.3e}/{ref_max:.3e}, f32 row by row {naive_rms:.3e}/{naive_max:.3e}"
        );
        assert!(got_rms <= 2.0 * ref_rms && got_max <= 2.0 * ref_max);
    }

    /// A linear layer large enough for the worker: dX on one thread and
    /// dW with the bias sums on the other give the bits of the same whole
    /// products run in turn on one thread, and dW is within 1e-5 of a
    /// float64 X^T dY (k = 256 rows summed in f32: a few ulps of the
    /// largest partial sums).
    #[test]
    #[cfg_attr(miri, ignore)] // no worker under Miri, and slow there
    fn linear_gradients_side_by_side_match_one_thread() {
        use crate::blas::{Gemm, sgemm};
        let (rows, k, n) = (256, 64, 128);
        let mut rng = crate::ops::gradcheck::Lcg(5);
        let mut data =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.range(-1.0, 1.0)).collect() };
        let (x, w, r) = (data(rows * k), data(k * n), data(rows * n));
        let mut c = crate::Context::new();
        let px = c.param(&[rows, k], Some(&x)).unwrap();
        let pw = c.param(&[k, n], Some(&w)).unwrap();
        let pb = c.param(&[n], None).unwrap();
        // An activation input, so dX is a planned activation gradient.
        let xa = c.scale(px, 1.0).unwrap();
        let y = c.linear(xa, pw, Some(pb)).unwrap();
        assert!(c.pool_started());
        let rt = c.tensor(&[rows, n], &r).unwrap();
        let l = c.mul(y, rt).unwrap();
        let l = c.sum(l).unwrap();
        c.backward(l).unwrap();
        let (mut dx, mut dw, mut db) = (vec![0.0; rows * k], vec![0.0; k * n], vec![0.0; n]);
        c.read_grad(px, &mut dx).unwrap();
        c.read_grad(pw, &mut dw).unwrap();
        c.read_grad(pb, &mut db).unwrap();
        let (mut want_x, mut want_w, mut want_b) =
            (vec![0.0; rows * k], vec![0.0; k * n], vec![0.0; n]);
        sgemm(
            Gemm::dense(false, true, rows, k, n),
            1.0,
            &r,
            &w,
            1.0,
            &mut want_x,
        );
        sgemm(
            Gemm::dense(true, false, k, n, rows),
            1.0,
            &x,
            &r,
            1.0,
            &mut want_w,
        );
        crate::kernels::fastmath::sum_rows_into_on(None, &mut want_b, &r);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&dx), bits(&want_x));
        assert_eq!(bits(&dw), bits(&want_w));
        assert_eq!(bits(&db), bits(&want_b));
        // Each element against its float64 value, relative to the sum of
        // the magnitudes of its 256 terms (the scale of an f32 dot
        // product's rounding error): a blocked f32 sum stays within a few
        // 2^-24 of it.
        let mut worst = 0.0f64;
        for i in 0..k {
            for j in 0..n {
                let terms = (0..rows).map(|t| x[t * k + i] as f64 * r[t * n + j] as f64);
                let (exact, scale) = terms.fold((0.0, 0.0), |(s, a), v| (s + v, a + v.abs()));
                worst = worst.max((dw[i * n + j] as f64 - exact).abs() / scale);
            }
        }
        eprintln!("[linear dW side by side] worst error / sum|terms| = {worst:.2e}");
        assert!(worst <= 16.0 * f32::EPSILON as f64 / 2.0, "{worst:e}");
    }
}

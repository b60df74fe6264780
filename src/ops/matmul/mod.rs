//! Matrix products through `blas::sgemm`: 2-D matmul with optional
//! transposes, linear (x @ W + b, bias fused into the GEMM's C operand) and
//! batched matmul. Backward GEMMs accumulate straight into the gradient
//! buffers (beta = 1), so no temporary is needed. A product whose result
//! is one column (a matrix times a vector, as a regression's X beta and
//! its gradient X^T dmu) runs as `sgemv` (`blas::gemv`).

use crate::blas::gemv::{product_on, product_tile};
use crate::blas::{Gemm, sgemm_bias_on, sgemm_pair_on};
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

/// A backward product: C += op(A) op(B) for the shape in `Gemm`.
type Product<'f> = &'f dyn Fn(Gemm, &[f32], &[f32], &mut [f32]);

/// dC += op(A) op(B), split like [`product_on`] (across `pool` when given).
fn split_on(pool: Option<&Pool>) -> impl Fn(Gemm, &[f32], &[f32], &mut [f32]) + Sync + '_ {
    move |g, a, b, c| product_on(pool, g, 1.0, a, b, 1.0, c)
}

/// Gradients of C = op(A) op(B) (each of one batch item), accumulated:
/// dA_stored += ..., dB_stored += ... . m, n, k as in the forward; each
/// product through `product` ([`split_on`]).
#[allow(clippy::too_many_arguments)]
fn matmul_backward(
    product: Product<'_>,
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
        let (g, x, y) = da_product(ta, tb, m, n, k, dc, b);
        product(g, x, y, da);
    }
    if let Some(db) = db {
        let (g, x, y) = db_product(ta, tb, m, n, k, dc, a);
        product(g, x, y, db);
    }
}

/// The product that accumulates dA for C = op(A) op(B): its shape and
/// its two operands, from dC and B (see [`matmul_backward`]).
fn da_product<'a>(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    dc: &'a [f32],
    b: &'a [f32],
) -> (Gemm, &'a [f32], &'a [f32]) {
    if ta {
        let g = Gemm {
            ldc: m,
            ..Gemm::dense(tb, true, k, m, n)
        };
        (g, b, dc)
    } else {
        (Gemm::dense(false, !tb, m, k, n), dc, b)
    }
}

/// The product that accumulates dB, from dC and A.
fn db_product<'a>(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    dc: &'a [f32],
    a: &'a [f32],
) -> (Gemm, &'a [f32], &'a [f32]) {
    if tb {
        (Gemm::dense(true, ta, n, k, m), dc, a)
    } else {
        (Gemm::dense(!ta, false, k, n, m), a, dc)
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
    product_on(pool, Gemm::dense(ta, tb, m, n, k), 1.0, a, b, 0.0, c);
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
            sgemm_bias_on(pool, product_tile, g, x, w, b, y);
        }
        None => {
            let (pool, [y], [x, w]) = ctx.access_on(par, [eo.data], [ex.data, ew.data]);
            product_on(pool, g, 1.0, x, w, 0.0, y);
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
        product_on(pool, g, 1.0, a, b, 0.0, c);
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
    let (ga, gb) = (ctx.grad_of(ia), ctx.grad_of(ib));
    // One product: dA and dB whole, side by side.
    if batch == 1
        && let (Some(da), Some(db)) = (ga, gb)
        && !da.overlaps(&db)
    {
        let (pool, [da, db], [dc, a, b]) = ctx.access_on(par, [da, db], [dout, ea.data, eb.data]);
        let (ga, a0, a1) = da_product(ta, tb, m, n, k, dc, b);
        let (gb, b0, b1) = db_product(ta, tb, m, n, k, dc, a);
        sgemm_pair_on(pool, product_tile, (ga, a0, a1, da), (gb, b0, b1, db), None);
        return;
    }
    // One gradient at a time (a and b may be the same tensor).
    if let Some(da) = ga {
        let (pool, [da], [dc, b]) = ctx.access_on(par, [da], [dout, eb.data]);
        for i in 0..batch {
            let (dc, b) = (&dc[i * m * n..][..m * n], &b[i * k * n..][..k * n]);
            matmul_backward(
                &split_on(pool),
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
    if let Some(db) = gb {
        let (pool, [db], [dc, a]) = ctx.access_on(par, [db], [dout, ea.data]);
        for i in 0..batch {
            let (dc, a) = (&dc[i * m * n..][..m * n], &a[i * m * k..][..m * k]);
            matmul_backward(
                &split_on(pool),
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
        // dX's and dW's tiles and the bias sums in one task list: every
        // thread takes whatever is left. Each tile and the sums are one
        // fixed kernel call, so the bits do not depend on who runs them.
        let run = |pool, dx, dw, db: Option<&mut [f32]>, dc: &[f32], w, x| {
            let bias = std::sync::Mutex::new(db);
            let bias_sums = || {
                let db = bias.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(db) = db {
                    fastmath::sum_rows_into_on(None, db, dc);
                }
            };
            let (gx, x0, x1) = da_product(false, false, rows, n, k, dc, w);
            let (gw, w0, w1) = db_product(false, false, rows, n, k, dc, x);
            let has_bias = bias.lock().unwrap_or_else(|e| e.into_inner()).is_some();
            sgemm_pair_on(
                pool,
                product_tile,
                (gx, x0, x1, dx),
                (gw, w0, w1, dw),
                has_bias.then_some(&bias_sums as &(dyn Fn() + Sync)),
            )
        };
        match gb {
            Some(db) => {
                let (pool, [dx, dw, db], [dc, w, x]) =
                    ctx.access_on(par, [dx, dw, db], [dout, ew.data, ex.data]);
                run(pool, dx, dw, Some(db), dc, w, x);
            }
            None => {
                let (pool, [dx, dw], [dc, w, x]) =
                    ctx.access_on(par, [dx, dw], [dout, ew.data, ex.data]);
                run(pool, dx, dw, None, dc, w, x);
            }
        }
        return;
    }
    // One gradient at a time (x and W may share a buffer).
    if let Some(dx) = gx {
        let (pool, [dx], [dc, w]) = ctx.access_on(par, [dx], [dout, ew.data]);
        matmul_backward(
            &split_on(pool),
            Some(dx),
            None,
            dc,
            &[],
            w,
            false,
            false,
            rows,
            n,
            k,
        );
    }
    if let Some(dw) = gw {
        let (pool, [dw], [dc, x]) = ctx.access_on(par, [dw], [dout, ex.data]);
        matmul_backward(
            &split_on(pool),
            None,
            Some(dw),
            dc,
            x,
            &[],
            false,
            false,
            rows,
            n,
            k,
        );
    }
    if let Some(db) = gb {
        let par = ctx.want_pool(rows * n * 16);
        let (pool, [db], [dc]) = ctx.access_on(par, [db], [dout]);
        fastmath::sum_rows_into_on(pool, db, dc);
    }
}

#[cfg(test)]
mod tests;

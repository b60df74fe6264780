//! Linear algebra for statistical models: the Cholesky factor, a solve
//! with a lower-triangular matrix, ln det of a symmetric positive-definite
//! matrix, and a matrix's diagonal (with `ln` and `sum`, ln det of a
//! Cholesky factor). With them a multivariate normal's density is written
//! from its covariance or from its Cholesky factor. And the first-order
//! linear recurrence x_t = a_t x_{t-1} + c_t, a solve with a bidiagonal
//! matrix: the AR, ARMA and GARCH filters of time-series models in one op
//! rather than a loop of T.
//!
//! The matrix ops read only the lower triangle of a matrix that is
//! symmetric (Cholesky, ln det) or triangular (the solve): their gradient
//! lands there, one entry below the diagonal standing for the pair, so a
//! finite difference of any entry agrees with it. A matrix that is not
//! positive definite gives NaN (the factor, ln det) rather than an error:
//! a sampler's proposal may wander there, and it rejects a NaN density.

mod kernels;
mod scan;

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::Shape;

/// n of a square `[n, n]` matrix with n >= 1, or a shape error naming `op`.
fn square(op: &'static str, what: &'static str, s: Shape) -> Result<usize> {
    match s.dims() {
        &[r, c] if r == c && r > 0 => Ok(r),
        _ => Err(Error::BadShape {
            op,
            what: format!("{what}, not {s}"),
        }),
    }
}

impl Context {
    /// The Cholesky factor L of a symmetric positive-definite A `[n, n]`
    /// (A = L L^T, L lower triangular with a positive diagonal, zeros
    /// above). Only A's lower triangle is read. NaN-filled when A is not
    /// positive definite.
    pub fn cholesky(&mut self, a: Tensor) -> Result<Tensor> {
        const OP: &str = "cholesky";
        let ia = self.resolve(OP, a)?;
        let sa = self.entry(ia).shape;
        let n = square(OP, "the matrix must be square [n, n], n >= 1", sa)?;
        let tracks = self.tracks(&[ia]);
        let work = self.alloc_scratchable::<f32>(OP, n * n)?;
        let out = self.push_output(OP, sa, tracks)?;
        Ok(self.run(Op::Cholesky { a: ia, work }, out))
    }

    /// X = L^{-1} B (Stan's mdivide_left_tri_low): L `[n, n]` lower
    /// triangular (its upper triangle is not read), B `[n]` or `[n, k]`.
    pub fn solve_lower(&mut self, l: Tensor, b: Tensor) -> Result<Tensor> {
        const OP: &str = "solve_lower";
        let (il, ib) = (self.resolve(OP, l)?, self.resolve(OP, b)?);
        let (sl, sb) = (self.entry(il).shape, self.entry(ib).shape);
        let n = square(OP, "L must be square [n, n], n >= 1", sl)?;
        let fits = match *sb.dims() {
            [r] => r == n,
            [r, k] => r == n && k > 0,
            _ => false,
        };
        if !fits {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "B must be [n] or [n, k] for L [n, n]",
                a: sl,
                b: sb,
            });
        }
        let tracks = self.tracks(&[il, ib]);
        let work = self.alloc_scratchable::<f32>(OP, sb.numel())?;
        let out = self.push_output(OP, sb, tracks)?;
        Ok(self.run(Op::SolveLower { l: il, b: ib, work }, out))
    }

    /// ln det A of a symmetric positive-definite A `[n, n]` (Stan's
    /// log_determinant_spd), a scalar, through its Cholesky factor. Only
    /// A's lower triangle is read. NaN when A is not positive definite.
    pub fn log_det_spd(&mut self, a: Tensor) -> Result<Tensor> {
        const OP: &str = "log_det_spd";
        let ia = self.resolve(OP, a)?;
        let sa = self.entry(ia).shape;
        let n = square(OP, "the matrix must be square [n, n], n >= 1", sa)?;
        let tracks = self.tracks(&[ia]);
        let chol = self.alloc_scratchable::<f32>(OP, n * n)?;
        let work = self.alloc_scratchable::<f32>(OP, n * n)?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        Ok(self.run(Op::LogDetSpd { a: ia, chol, work }, out))
    }

    /// The first-order linear recurrence along axis 0: x_0 = c_0 and
    /// x_t = a_t x_{t-1} + c_t, each column of `c` `[T, ...]` a sequence
    /// of its own. `a` has `c`'s shape (a_0 is not read) or one element
    /// (one coefficient throughout).
    pub fn linear_recurrence(&mut self, a: Tensor, c: Tensor) -> Result<Tensor> {
        const OP: &str = "linear_recurrence";
        let (ia, ic) = (self.resolve(OP, a)?, self.resolve(OP, c)?);
        let (sa, sc) = (self.entry(ia).shape, self.entry(ic).shape);
        if sa.numel() != 1 && sa != sc {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "a must have c's shape or one element",
                a: sa,
                b: sc,
            });
        }
        let tracks = self.tracks(&[ia, ic]);
        let work = self.alloc_scratchable::<f32>(OP, sc.numel())?;
        let out = self.push_output(OP, sc, tracks)?;
        Ok(self.run(Op::LinearRecurrence { a: ia, c: ic, work }, out))
    }

    /// The diagonal of a matrix `[r, c]`: `[min(r, c)]`.
    pub fn diagonal(&mut self, a: Tensor) -> Result<Tensor> {
        const OP: &str = "diagonal";
        let ia = self.resolve(OP, a)?;
        let sa = self.entry(ia).shape;
        let &[r, c] = sa.dims() else {
            return Err(Error::BadShape {
                op: OP,
                what: format!("the input must be a matrix [r, c], not {sa}"),
            });
        };
        let tracks = self.tracks(&[ia]);
        let out = self.push_output(OP, Shape::from_valid(&[r.min(c)]), tracks)?;
        Ok(self.run(Op::Diagonal { a: ia }, out))
    }
}

pub(crate) fn forward_cholesky(ctx: &mut Context, out: u32, a: u32) {
    let (ea, eo) = (ctx.entry(a), ctx.entry(out));
    let n = ea.shape.dims()[0];
    let ([l], [a]) = ctx.access([eo.data], [ea.data]);
    kernels::cholesky(l, a, n);
}

pub(crate) fn backward_cholesky(ctx: &mut Context, out: u32, a: u32, work: Buf) {
    let (Some(da), Some(dl)) = (ctx.grad_of(a), ctx.grad_out(out)) else {
        return;
    };
    let eo = ctx.entry(out);
    let n = eo.shape.dims()[0];
    let ([da, work], [dl, l]) = ctx.access([da, work], [dl, eo.data]);
    kernels::cholesky_backward(da, dl, l, work, n);
}

pub(crate) fn forward_solve_lower(ctx: &mut Context, out: u32, l: u32, b: u32) {
    let (el, eb, eo) = (ctx.entry(l), ctx.entry(b), ctx.entry(out));
    let n = el.shape.dims()[0];
    let k = eb.shape.numel() / n;
    let ([x], [l, b]) = ctx.access([eo.data], [el.data, eb.data]);
    kernels::solve_lower(x, l, b, n, k);
}

pub(crate) fn backward_solve_lower(ctx: &mut Context, out: u32, l: u32, b: u32, work: Buf) {
    let Some(dx) = ctx.grad_out(out) else {
        return;
    };
    let (dl, db) = (ctx.grad_of(l), ctx.grad_of(b));
    if dl.is_none() && db.is_none() {
        return;
    }
    let (el, eo) = (ctx.entry(l), ctx.entry(out));
    let n = el.shape.dims()[0];
    let k = eo.shape.numel() / n;
    {
        // dB = L^{-T} dX, kept in `work` for dL.
        let ([w], [dx, l]) = ctx.access([work], [dx, el.data]);
        w.copy_from_slice(dx);
        kernels::solve_lower_transposed_in_place(w, l, n, k);
    }
    if let Some(db) = db {
        let ([db], [w]) = ctx.access([db], [work]);
        db.iter_mut().zip(w).for_each(|(d, &w)| *d += w);
    }
    if let Some(dl) = dl {
        let ([dl], [w, x]) = ctx.access([dl], [work, eo.data]);
        kernels::solve_lower_backward_l(dl, w, x, n, k);
    }
}

pub(crate) fn forward_log_det_spd(ctx: &mut Context, out: u32, a: u32, chol: Buf) {
    let (ea, eo) = (ctx.entry(a), ctx.entry(out));
    let n = ea.shape.dims()[0];
    let ([y, l], [a]) = ctx.access([eo.data, chol], [ea.data]);
    kernels::cholesky(l, a, n);
    y[0] = kernels::log_det_from_cholesky(l, n);
}

pub(crate) fn backward_log_det_spd(ctx: &mut Context, out: u32, a: u32, chol: Buf, work: Buf) {
    let (Some(da), Some(dout)) = (ctx.grad_of(a), ctx.grad_out(out)) else {
        return;
    };
    let n = ctx.entry(a).shape.dims()[0];
    let ([da, w], [g, l]) = ctx.access([da, work], [dout, chol]);
    kernels::lower_inverse(w, l, n);
    kernels::log_det_backward(da, w, g[0], n);
}

pub(crate) fn forward_diagonal(ctx: &mut Context, out: u32, a: u32) {
    let (ea, eo) = (ctx.entry(a), ctx.entry(out));
    let c = ea.shape.dims()[1];
    let ([y], [a]) = ctx.access([eo.data], [ea.data]);
    for (i, y) in y.iter_mut().enumerate() {
        *y = a[i * c + i];
    }
}

pub(crate) fn backward_diagonal(ctx: &mut Context, out: u32, a: u32) {
    let (Some(da), Some(dout)) = (ctx.grad_of(a), ctx.grad_out(out)) else {
        return;
    };
    let c = ctx.entry(a).shape.dims()[1];
    let ([da], [g]) = ctx.access([da], [dout]);
    for (i, &g) in g.iter().enumerate() {
        da[i * c + i] += g;
    }
}

/// The length of one step of a recurrence over `c`'s axis 0: the
/// product of its other dims.
fn step_width(ctx: &Context, c: u32) -> usize {
    ctx.entry(c).shape.dims()[1..].iter().product()
}

pub(crate) fn forward_linear_recurrence(ctx: &mut Context, out: u32, a: u32, c: u32) {
    let (ea, ec, eo) = (ctx.entry(a), ctx.entry(c), ctx.entry(out));
    let width = step_width(ctx, c);
    let ([x], [a, c]) = ctx.access([eo.data], [ea.data, ec.data]);
    kernels::linear_recurrence(x, a, c, width);
}

pub(crate) fn backward_linear_recurrence(ctx: &mut Context, out: u32, a: u32, c: u32, work: Buf) {
    let Some(dx) = ctx.grad_out(out) else {
        return;
    };
    let (da, dc) = (ctx.grad_of(a), ctx.grad_of(c));
    if da.is_none() && dc.is_none() {
        return;
    }
    let (ea, eo) = (ctx.entry(a), ctx.entry(out));
    let width = step_width(ctx, c);
    {
        // g_t = dL/dc_t, every later step's share included, kept in `work`.
        let ([g], [dx, a]) = ctx.access([work], [dx, ea.data]);
        kernels::linear_recurrence_reversed(g, a, dx, width);
    }
    if let Some(dc) = dc {
        let ([dc], [g]) = ctx.access([dc], [work]);
        dc.iter_mut().zip(g).for_each(|(d, &g)| *d += g);
    }
    if let Some(da) = da {
        let ([da], [g, x]) = ctx.access([da], [work, eo.data]);
        kernels::linear_recurrence_backward_a(da, g, x, width);
    }
}

#[cfg(test)]
mod tests;

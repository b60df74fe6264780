//! Element-wise ops: add/sub/mul/div/maximum/minimum with numpy
//! broadcasting (the smaller operand is read with stride 0, never tiled; the
//! loops in `broadcast.rs`, the op functions in `binary.rs`), scale, unary
//! maps, pow, clamp, the select `where` (in `select.rs`) and the
//! incomplete beta function's three operands (in `incbeta.rs`). This file
//! holds the recording functions and the op functions of the one-input ops;
//! the slice kernels live in `kernels.rs`, one row of
//! [`unary_fns`](crate::ops::unary_fns) per unary function.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::{BinaryFn, Op, UnaryFn};
use crate::shape::Shape;
use crate::simd;

/// `simd::dispatch!($e)`, or `$e` directly when `$n` is at most
/// [`SMALL`](kernels::SMALL).
macro_rules! run_kernel {
    ($n:expr, $e:expr) => {
        if $n <= $crate::ops::elementwise::kernels::SMALL {
            $e
        } else {
            $crate::simd::dispatch!($e)
        }
    };
}

mod binary;
mod broadcast;
mod incbeta;
mod kernels;
pub(crate) mod scalar;
mod select;
mod special_fns;
pub(crate) use binary::{backward_binary, forward_binary};
pub(crate) use incbeta::{backward_beta_inc, forward_beta_inc};
// SwiGLU's fused kernel computes SiLU exactly as the `silu` op does.
pub(crate) use kernels::{SILU_ZERO_BELOW, sigmoid_pair};
use kernels::{
    clamp_backward, clamp_forward, pow_backward, pow_forward, scale_backward, scale_forward,
    unary_backward, unary_forward,
};
#[cfg(test)]
use kernels::{gelu_backward, gelu_forward};
pub(crate) use select::{backward_where, forward_where, where_backward, where_forward};

impl Context {
    fn binary(&mut self, f: BinaryFn, op: &'static str, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (ia, ib) = (self.resolve(op, a)?, self.resolve(op, b)?);
        let (sa, sb) = (&self.entry_ref(ia).shape, &self.entry_ref(ib).shape);
        // Equal shapes need no broadcast (most ops of a scalar model).
        let shape = if sa == sb {
            *sa
        } else {
            Shape::broadcast(op, *sa, *sb)?
        };
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(op, shape, tracks)?;
        Ok(self.run(Op::Binary { a: ia, b: ib, f }, out))
    }

    /// a + b with broadcasting.
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Add, "add", a, b)
    }

    /// a - b with broadcasting.
    pub fn sub(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Sub, "sub", a, b)
    }

    /// a * b (element-wise) with broadcasting.
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Mul, "mul", a, b)
    }

    /// a / b (element-wise) with broadcasting.
    pub fn div(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Div, "div", a, b)
    }

    /// Element-wise maximum with broadcasting. NaN propagates (from
    /// either operand). The gradient goes to the operand the output was
    /// taken from; on ties (a == b) that is `a`, so b gets none.
    pub fn maximum(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Max, "maximum", a, b)
    }

    /// Element-wise minimum with broadcasting; NaN and ties as
    /// [`Context::maximum`] (on ties the gradient goes to `a`).
    pub fn minimum(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Min, "minimum", a, b)
    }

    /// ln Beta(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b) element-wise
    /// with broadcasting, accurate for large arguments: +inf where either
    /// is 0, -inf where either is +inf, NaN below 0. Gradients digamma(a)
    /// - digamma(a + b) and digamma(b) - digamma(a + b).
    pub fn lbeta(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::Lbeta, "lbeta", a, b)
    }

    /// ln(e^a - e^b) element-wise with broadcasting, for a >= b: -inf
    /// where a == b, NaN where a < b. Gradients -1 / expm1(b - a) in a and
    /// -1 / expm1(a - b) in b; where a == b they are +inf and -inf (the
    /// limits from a > b), so a step there gives inf or NaN.
    pub fn log_diff_exp(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::LogDiffExp, "log_diff_exp", a, b)
    }

    /// The regularised lower incomplete gamma P(a, x) = gamma(a, x) /
    /// Gamma(a) element-wise with broadcasting, for a > 0, x >= 0 (Stan's
    /// gamma_p): 0 at x = 0, 1 at x = +inf, NaN for a <= 0 or x < 0.
    /// Gradients: no closed form in a (an f64 central difference of ln P
    /// or ln Q, whichever tail is smaller), x^(a - 1) e^-x / Gamma(a) in x.
    pub fn gamma_p(&mut self, a: Tensor, x: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::GammaP, "gamma_p", a, x)
    }

    /// The regularised upper incomplete gamma Q(a, x) = 1 - P(a, x)
    /// element-wise with broadcasting (Stan's gamma_q): 1 at x = 0, 0 at
    /// x = +inf, NaN where [`Context::gamma_p`] is; gradients the negated
    /// ones of P, the smaller tail keeping its relative accuracy.
    pub fn gamma_q(&mut self, a: Tensor, x: Tensor) -> Result<Tensor> {
        self.binary(BinaryFn::GammaQ, "gamma_q", a, x)
    }

    /// x limited to [lo, hi] element-wise (NaN stays NaN). `lo <= hi` is
    /// required and neither may be NaN; infinite bounds leave that side
    /// open. The gradient is 1 strictly inside (lo < x < hi) and 0 outside
    /// and at the bounds themselves.
    pub fn clamp(&mut self, x: Tensor, lo: f32, hi: f32) -> Result<Tensor> {
        const OP: &str = "clamp";
        let ix = self.resolve(OP, x)?;
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("bounds [{lo}, {hi}] need lo <= hi, neither NaN"),
            });
        }
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, ex.shape, tracks)?;
        Ok(self.run(Op::Clamp { x: ix, lo, hi }, out))
    }

    fn unary(&mut self, f: UnaryFn, x: Tensor) -> Result<Tensor> {
        let op = f.name();
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, ex.shape, tracks)?;
        Ok(self.run(Op::Unary { x: ix, f }, out))
    }

    fn scale_op(&mut self, op: &'static str, x: Tensor, s: f32) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, ex.shape, tracks)?;
        Ok(self.run(Op::Scale { x: ix, s }, out))
    }

    /// s * x.
    pub fn scale(&mut self, x: Tensor, s: f32) -> Result<Tensor> {
        self.scale_op("scale", x, s)
    }

    /// -x.
    pub fn neg(&mut self, x: Tensor) -> Result<Tensor> {
        self.scale_op("neg", x, -1.0)
    }

    /// x^p element-wise for a finite scalar exponent `p` (NaN or infinite
    /// `p` is refused). Values follow IEEE `pow`: a negative x with a
    /// non-integer p gives NaN, 0^p is 0 for p > 0 and +inf for p < 0, and
    /// x^0 is 1 for every x (NaN included). The gradient is p x^(p-1), so
    /// it is NaN where x < 0 and p - 1 is not an integer, and infinite at
    /// x = 0 for p < 1; for p = 0 it is 0 everywhere (the output is the
    /// constant 1).
    pub fn pow(&mut self, x: Tensor, p: f32) -> Result<Tensor> {
        const OP: &str = "pow";
        let ix = self.resolve(OP, x)?;
        if !p.is_finite() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("exponent {p} is not finite"),
            });
        }
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, ex.shape, tracks)?;
        Ok(self.run(Op::Pow { x: ix, p }, out))
    }
}

/// From the rows of [`unary_fns`](crate::ops::unary_fns): the `Context`
/// methods.
macro_rules! unary_methods {
    ($($v:ident, $name:ident, $reads:ident, $fwd:ident, $bwd:expr, $assign:tt, $split:tt, ($lo:expr, $hi:expr, $away:expr), $doc:literal;)*) => {
        impl Context {
            $(
                #[doc = $doc]
                pub fn $name(&mut self, x: Tensor) -> Result<Tensor> {
                    self.unary(UnaryFn::$v, x)
                }
            )*
        }
    };
}
crate::ops::unary_fns!(unary_methods);

pub(crate) fn forward_scale(ctx: &mut Context, out: u32, x: u32, s: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    run_kernel!(x.len(), scale_forward(y, x, s));
}

pub(crate) fn forward_unary(ctx: &mut Context, out: u32, x: u32, f: UnaryFn) {
    let (vx, vy) = (ctx.entry(x).data, ctx.entry(out).data);
    if vy.len() == 1 {
        // One element: no shapes or pool to consult.
        let ([y], [x]) = ctx.access([vy], [vx]);
        unary_forward(f, y, x);
    } else {
        forward_unary_many(ctx, out, x, f);
    }
}

/// The general path of [`forward_unary`] (see [`backward_binary_many`]).
#[inline(never)]
fn forward_unary_many(ctx: &mut Context, out: u32, x: u32, f: UnaryFn) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let n = unary_tasks(f, ex.shape.numel());
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y], [x]) = ctx.access_on(par, [eo.data], [ex.data]);
    if n == 1 {
        return run_kernel!(x.len(), unary_forward(f, y, x));
    }
    let part = fastmath::part_len(x.len(), n);
    fastmath::run_parts(pool, y.chunks_mut(part), &|i, y| {
        let x = &x[i * part..][..y.len()];
        simd::dispatch!(unary_forward(f, y, x))
    });
}

/// How many element tasks a unary map over `len` elements is cut into (by
/// the shape alone): the rows marked `split` split when large; the cheap
/// maps stay on the calling thread.
fn unary_tasks(f: UnaryFn, len: usize) -> usize {
    let worth = f.splits_into_tasks() && Context::worth_two_threads(len * fastmath::ELEMENT_COST);
    fastmath::task_split(worth, len, fastmath::ELEMENT_COST)
}

pub(crate) fn forward_pow(ctx: &mut Context, out: u32, x: u32, p: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    pow_forward(y, x, p);
}

pub(crate) fn forward_clamp(ctx: &mut Context, out: u32, x: u32, lo: f32, hi: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    run_kernel!(x.len(), clamp_forward(y, x, lo, hi));
}

pub(crate) fn backward_scale(ctx: &mut Context, out: u32, x: u32, s: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ([dx], [dout]) = ctx.access([dx], [dout]);
    run_kernel!(dx.len(), scale_backward(dx, dout, s));
}

pub(crate) fn backward_unary(ctx: &mut Context, out: u32, x: u32, f: UnaryFn) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some((dx, fresh)) = ctx.grad_to_overwrite(x) else {
        return;
    };
    // A row with an `assign` kernel writes a newborn gradient with `=`;
    // the rest zero it and add.
    let assign = fresh && f.assigns_fresh_grad();
    if dout.len() == 1 {
        let (vx, vy) = (ctx.entry(x).data, ctx.entry(out).data);
        let ([dx], [dout, x, y]) = ctx.access([dx], [dout, vx, vy]);
        if fresh && !assign {
            dx[0] = 0.0;
        }
        unary_backward(f, assign, dx, dout, x, y);
    } else {
        backward_unary_many(ctx, dout, (dx, fresh), out, x, f, assign);
    }
}

/// The general path of [`backward_unary`] (see [`backward_binary_many`]).
#[inline(never)]
fn backward_unary_many(
    ctx: &mut Context,
    dout: Buf,
    (dx, fresh): (Buf, bool),
    out: u32,
    x: u32,
    f: UnaryFn,
    assign: bool,
) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let n = unary_tasks(f, ex.shape.numel());
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [dx], [dout, x, y]) = ctx.access_on(par, [dx], [dout, ex.data, eo.data]);
    if fresh && !assign {
        dx.fill(0.0);
    }
    if n == 1 {
        return run_kernel!(x.len(), unary_backward(f, assign, dx, dout, x, y));
    }
    let part = fastmath::part_len(x.len(), n);
    fastmath::run_parts(pool, dx.chunks_mut(part), &|i, dx| {
        let at = i * part..i * part + dx.len();
        let (g, x, y) = (&dout[at.clone()], &x[at.clone()], &y[at]);
        simd::dispatch!(unary_backward(f, assign, dx, g, x, y))
    });
}

pub(crate) fn backward_pow(ctx: &mut Context, out: u32, x: u32, p: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ex = ctx.entry(x);
    let ([dx], [dout, x]) = ctx.access([dx], [dout, ex.data]);
    pow_backward(dx, dout, x, p);
}

pub(crate) fn backward_clamp(ctx: &mut Context, out: u32, x: u32, lo: f32, hi: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ex = ctx.entry(x);
    let ([dx], [dout, x]) = ctx.access([dx], [dout, ex.data]);
    run_kernel!(dx.len(), clamp_backward(dx, dout, x, lo, hi));
}

#[cfg(test)]
mod simd_paths_tests;
#[cfg(test)]
mod tests;

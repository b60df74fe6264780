//! Element-wise ops: add/sub/mul/div/maximum/minimum with numpy broadcasting (the smaller
//! operand is read with stride 0, never tiled; the loops in `broadcast.rs`),
//! scale, unary maps, and the
//! select `where` (in `select.rs`). Each
//! unary function has its `<f>_forward` / `<f>_backward` kernels below (the
//! special functions' in `special_fns.rs`), and one arm in each of
//! `unary_forward` / `unary_backward`.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::{BinaryFn, Op, UnaryFn};
use crate::shape::Shape;
use crate::simd;

mod broadcast;
pub(crate) mod scalar;
mod select;
mod special_fns;
use broadcast::{binary_backward_into, binary_forward};
use scalar::{backward_binary_one, binary_kernel_one};
pub(crate) use select::{backward_where, forward_where};
use special_fns::*;

/// Up to this many elements a kernel runs on the baseline path: the
/// dispatch to the wide instruction sets costs more than the work (a
/// scalar model's ops are one element each). The results are the same
/// bits: these kernels use only IEEE operations and libm calls, no fused
/// or approximate instructions that differ between instruction sets.
const SMALL: usize = 8;

/// `simd::dispatch!($e)`, or `$e` directly when `$n` is at most [`SMALL`].
macro_rules! run_kernel {
    ($n:expr, $e:expr) => {
        if $n <= SMALL { $e } else { simd::dispatch!($e) }
    };
}

/// dst += s * src, or dst = s * src with `assign`, element by element
/// (s = 1 or -1: exact).
#[inline(always)]
fn add_scaled_into(dst: &mut [f32], src: &[f32], s: f32, assign: bool) {
    if assign {
        dst.iter_mut().zip(src).for_each(|(d, &v)| *d = s * v);
    } else {
        dst.iter_mut().zip(src).for_each(|(d, &v)| *d += s * v);
    }
}

/// max(a, b), taking `a` on ties and NaN from either side.
fn max_of(a: f32, b: f32) -> f32 {
    if takes_a_max(a, b) { a } else { b }
}

/// min(a, b), taking `a` on ties and NaN from either side.
fn min_of(a: f32, b: f32) -> f32 {
    if takes_a_min(a, b) { a } else { b }
}

/// Whether max(a, b) is `a` (the operand that gets the gradient).
fn takes_a_max(a: f32, b: f32) -> bool {
    a >= b || a.is_nan()
}

/// Whether min(a, b) is `a`.
fn takes_a_min(a: f32, b: f32) -> bool {
    a <= b || a.is_nan()
}

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

/// y = s * x. x, y: `[N]`.
fn scale_forward(y: &mut [f32], x: &[f32], s: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = s * x);
}

/// dx += s * dout.
fn scale_backward(dx: &mut [f32], dout: &[f32], s: f32) {
    dx.iter_mut().zip(dout).for_each(|(d, &g)| *d += s * g);
}

/// The kernel argument a row's `reads` names: `x` or `y`.
macro_rules! pick {
    (x, $x:expr, $y:expr) => {
        $x
    };
    (y, $x:expr, $y:expr) => {
        $y
    };
}

/// From the rows of [`unary_fns`](crate::ops::unary_fns): the `Context`
/// methods and the two dispatches over `UnaryFn`.
macro_rules! unary_kernels {
    ($($v:ident, $name:ident, $reads:ident, $fwd:ident, $bwd:expr, ($lo:expr, $hi:expr, $away:expr), $doc:literal;)*) => {
        impl Context {
            $(
                #[doc = $doc]
                pub fn $name(&mut self, x: Tensor) -> Result<Tensor> {
                    self.unary(UnaryFn::$v, x)
                }
            )*
        }

        /// y = f(x). x, y: `[N]`.
        #[inline(always)]
        fn unary_forward(f: UnaryFn, y: &mut [f32], x: &[f32]) {
            match f {
                $(UnaryFn::$v => $fwd(y, x),)*
            }
        }

        /// dx += dout * f'(x), given x and the forward output y = f(x). All
        /// `[N]`. `assign`: write dx with `=` (its slot holds stale values);
        /// only GELU takes it (see `backward_unary`), the others always add.
        #[inline(always)]
        fn unary_backward(
            f: UnaryFn,
            assign: bool,
            dx: &mut [f32],
            dout: &[f32],
            x: &[f32],
            y: &[f32],
        ) {
            match f {
                UnaryFn::Gelu if assign => gelu_backward::<true>(dx, dout, x),
                $(UnaryFn::$v => ($bwd)(dx, dout, pick!($reads, x, y)),)*
            }
        }
    };
}
crate::ops::unary_fns!(unary_kernels);

/// y = e^x.
fn exp_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.exp());
}

/// dx += dout * y, since (e^x)' = e^x = y.
fn exp_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * y;
    }
}

/// y = ln x.
fn log_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.ln());
}

/// dx += dout / x.
fn log_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g / x;
    }
}

/// y = tanh x.
fn tanh_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = crate::special::tanh(x));
}

/// dx += dout * (1 - y^2).
fn tanh_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * (1.0 - y * y);
    }
}

/// y = max(x, 0).
fn relu_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0));
}

/// dx += dout where x > 0 (the subgradient at 0 is taken as 0).
fn relu_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if x > 0.0 { g } else { 0.0 };
    }
}

/// y = 1 / (1 + e^-x).
fn sigmoid_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = 1.0 / (1.0 + (-x).exp()));
}

/// dx += dout * y (1 - y).
fn sigmoid_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * y * (1.0 - y);
    }
}

/// y = sqrt(x).
fn sqrt_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.sqrt());
}

/// dx += dout / (2 y), since (sqrt x)' = 1 / (2 sqrt x) = 1 / (2 y).
fn sqrt_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g / (2.0 * y);
    }
}

/// y = |x|.
fn abs_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.abs());
}

/// dx += dout * sign(x), with the subgradient 0 at x = 0 (and for NaN).
fn abs_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if x > 0.0 {
            g
        } else if x < 0.0 {
            -g
        } else {
            0.0
        };
    }
}

/// y = min(max(x, lo), hi), NaN staying NaN. lo <= hi, neither NaN.
fn clamp_forward(y: &mut [f32], x: &[f32], lo: f32, hi: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.clamp(lo, hi));
}

/// dx += dout where lo < x < hi (0 at the bounds, outside, and for NaN).
fn clamp_backward(dx: &mut [f32], dout: &[f32], x: &[f32], lo: f32, hi: f32) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if lo < x && x < hi { g } else { 0.0 };
    }
}

/// y = x^p. x, y: `[N]`.
fn pow_forward(y: &mut [f32], x: &[f32], p: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.powf(p));
}

/// dx += dout * p x^(p-1); nothing when p = 0 (x^0 is constant, and
/// 0 * 0^-1 would be NaN at x = 0).
fn pow_backward(dx: &mut [f32], dout: &[f32], x: &[f32], p: f32) {
    if p == 0.0 {
        return;
    }
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * p * x.powf(p - 1.0);
    }
}

const GELU_K: f32 = 0.797_884_6; // sqrt(2/pi)

/// y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))). x, y: `[N]`.
#[inline(always)]
pub(crate) fn gelu_forward(y: &mut [f32], x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        *y = 0.5 * x * (1.0 + fastmath::tanh(u));
    }
}

/// dx += dout * gelu'(x), or dx = dout * gelu'(x) with `ASSIGN`.
#[inline(always)]
pub(crate) fn gelu_backward<const ASSIGN: bool>(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        let t = fastmath::tanh(u);
        let sech2 = 1.0 - t * t;
        let local = 0.5 * (1.0 + t) + 0.5 * x * sech2 * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        if ASSIGN {
            *d = g * local;
        } else {
            *d += g * local;
        }
    }
}

pub(crate) fn forward_binary(ctx: &mut Context, out: u32, ia: u32, ib: u32, f: BinaryFn) {
    let (da, db, dout) = (ctx.entry(ia).data, ctx.entry(ib).data, ctx.entry(out).data);
    if dout.len() == 1 {
        // One element each (a scalar model's op): no shapes to copy around.
        let ([o], [x, y]) = ctx.access([dout], [da, db]);
        binary_kernel_one(f, o, x, y);
    } else {
        forward_binary_many(ctx, out, ia, ib, f);
    }
}

/// The general path of [`forward_binary`] (see [`backward_binary_many`]).
#[inline(never)]
fn forward_binary_many(ctx: &mut Context, out: u32, ia: u32, ib: u32, f: BinaryFn) {
    // Read once, as in backward_binary_many.
    let (sa, va) = (ctx.entry_ref(ia).shape, ctx.entry_ref(ia).data);
    let (sb, vb) = (ctx.entry_ref(ib).shape, ctx.entry_ref(ib).data);
    let (shape, vo) = (ctx.entry_ref(out).shape, ctx.entry_ref(out).data);
    // Equal shapes (a residual add): the halves are independent.
    let par = sa == sb && ctx.want_pool(shape.numel() * 16);
    let (pool, [o], [x, y]) = ctx.access_on(par, [vo], [va, vb]);
    if let Some(pool) = pool {
        let h = o.len() / 2;
        let ((o0, o1), (x0, x1), (y0, y1)) = (o.split_at_mut(h), x.split_at(h), y.split_at(h));
        let run = |o: &mut [f32], x: &[f32], y: &[f32]| binary_kernel(f, o, x, y, shape, sa, sb);
        pool.join(|| run(o1, x1, y1), || run(o0, x0, y0));
        return;
    }
    binary_kernel(f, o, x, y, shape, sa, sb);
}

/// The forward kernel of a binary op (over the whole output, or over a
/// slice of it when both operands have the output's shape).
fn binary_kernel(
    f: BinaryFn,
    o: &mut [f32],
    x: &[f32],
    y: &[f32],
    shape: Shape,
    sa: Shape,
    sb: Shape,
) {
    if o.len() == 1 {
        binary_kernel_one(f, o, x, y);
        return;
    }
    simd::dispatch!(match f {
        BinaryFn::Add => binary_forward(o, x, y, shape, sa, sb, |p, q| p + q),
        BinaryFn::Sub => binary_forward(o, x, y, shape, sa, sb, |p, q| p - q),
        BinaryFn::Mul => binary_forward(o, x, y, shape, sa, sb, |p, q| p * q),
        BinaryFn::Div => binary_forward(o, x, y, shape, sa, sb, |p, q| p / q),
        BinaryFn::Max => binary_forward(o, x, y, shape, sa, sb, max_of),
        BinaryFn::Min => binary_forward(o, x, y, shape, sa, sb, min_of),
    });
}

pub(crate) fn forward_scale(ctx: &mut Context, out: u32, x: u32, s: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    scale_forward(y, x, s);
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
    let par = f == UnaryFn::Gelu && ctx.want_pool(ex.shape.numel() * 16);
    let (pool, [y], [x]) = ctx.access_on(par, [eo.data], [ex.data]);
    match pool {
        Some(pool) => {
            let h = x.len() / 2;
            let ((y0, y1), (x0, x1)) = (y.split_at_mut(h), x.split_at(h));
            pool.join(
                || simd::dispatch!(unary_forward(f, y1, x1)),
                || simd::dispatch!(unary_forward(f, y0, x0)),
            );
        }
        None => run_kernel!(x.len(), unary_forward(f, y, x)),
    }
}

pub(crate) fn forward_pow(ctx: &mut Context, out: u32, x: u32, p: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    pow_forward(y, x, p);
}

pub(crate) fn forward_clamp(ctx: &mut Context, out: u32, x: u32, lo: f32, hi: f32) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x]) = ctx.access([eo.data], [ex.data]);
    clamp_forward(y, x, lo, hi);
}

pub(crate) fn backward_scale(ctx: &mut Context, out: u32, x: u32, s: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ([dx], [dout]) = ctx.access([dx], [dout]);
    scale_backward(dx, dout, s);
}

pub(crate) fn backward_unary(ctx: &mut Context, out: u32, x: u32, f: UnaryFn) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some((dx, fresh)) = ctx.grad_to_overwrite(x) else {
        return;
    };
    // GELU (an MLP's, on the largest activation) writes a newborn gradient
    // with `=`; the rest zero it and add.
    let assign = fresh && f == UnaryFn::Gelu;
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
    let par = f == UnaryFn::Gelu && ctx.want_pool(ex.shape.numel() * 16);
    let (pool, [dx], [dout, x, y]) = ctx.access_on(par, [dx], [dout, ex.data, eo.data]);
    if fresh && !assign {
        dx.fill(0.0);
    }
    match pool {
        Some(pool) => {
            let h = x.len() / 2;
            let ((d0, d1), (g0, g1)) = (dx.split_at_mut(h), dout.split_at(h));
            let ((x0, x1), (y0, y1)) = (x.split_at(h), y.split_at(h));
            pool.join(
                || simd::dispatch!(unary_backward(f, assign, d1, g1, x1, y1)),
                || simd::dispatch!(unary_backward(f, assign, d0, g0, x0, y0)),
            );
        }
        None => run_kernel!(x.len(), unary_backward(f, assign, dx, dout, x, y)),
    }
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
    clamp_backward(dx, dout, x, lo, hi);
}

pub(crate) fn backward_binary(ctx: &mut Context, out: u32, ia: u32, ib: u32, f: BinaryFn) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    if dout.len() == 1 {
        backward_binary_one(ctx, dout, out, ia, ib, f);
    } else {
        backward_binary_many(ctx, dout, out, ia, ib, f);
    }
}

/// The general path of [`backward_binary`], apart so that a scalar model's
/// one-element ops do not pay its frame.
#[inline(never)]
fn backward_binary_many(ctx: &mut Context, dout: Buf, out: u32, ia: u32, ib: u32, f: BinaryFn) {
    // The three shapes and two buffers, read once (rows are 120 bytes).
    let (sa, va) = (ctx.entry_ref(ia).shape, ctx.entry_ref(ia).data);
    let (sb, vb) = (ctx.entry_ref(ib).shape, ctx.entry_ref(ib).data);
    let so = ctx.entry_ref(out).shape;
    // Equal shapes (a residual add or sub): da += g and db += ±g, each
    // written with `=` where its slot is newborn, the two side by side on
    // two threads when they are separate buffers.
    if matches!(f, BinaryFn::Add | BinaryFn::Sub) && sa == so && sb == so {
        let sign = if f == BinaryFn::Sub { -1.0 } else { 1.0 };
        // In this order: if a and b share a gradient, a's write comes first.
        let (ga, gb) = (ctx.grad_to_overwrite(ia), ctx.grad_to_overwrite(ib));
        match (ga, gb) {
            (Some((da, fa)), Some((db, fb))) if !da.overlaps(&db) => {
                let par = ctx.want_pool(so.numel() * 16);
                let (pool, [da, db], [g]) = ctx.access_on(par, [da, db], [dout]);
                let n = g.len();
                let mut run_a = || run_kernel!(n, add_scaled_into(da, g, 1.0, fa));
                let mut run_b = || run_kernel!(n, add_scaled_into(db, g, sign, fb));
                match pool {
                    Some(pool) => pool.join(run_b, run_a),
                    None => {
                        run_a();
                        run_b();
                    }
                }
            }
            (ga, gb) => {
                for (grad, s) in [(ga, 1.0), (gb, sign)] {
                    if let Some((d, fresh)) = grad {
                        let ([d], [g]) = ctx.access([d], [dout]);
                        run_kernel!(g.len(), add_scaled_into(d, g, s, fresh));
                    }
                }
            }
        }
        return;
    }
    // One operand at a time: if a and b are the same tensor, their grad
    // buffers are the same and must not be borrowed twice.
    if let Some(da) = ctx.grad_of(ia) {
        let ([da], [dout, a, b]) = ctx.access([da], [dout, va, vb]);
        run_kernel!(
            dout.len(),
            match f {
                BinaryFn::Add | BinaryFn::Sub => {
                    binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, _| g)
                }
                BinaryFn::Mul => binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, y| g * y),
                BinaryFn::Div => binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, y| g / y),
                BinaryFn::Max => binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                    if takes_a_max(x, y) { g } else { 0.0 }
                }),
                BinaryFn::Min => binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                    if takes_a_min(x, y) { g } else { 0.0 }
                }),
            }
        );
    }
    if let Some(db) = ctx.grad_of(ib) {
        let ([db], [dout, a, b]) = ctx.access([db], [dout, va, vb]);
        run_kernel!(
            dout.len(),
            match f {
                BinaryFn::Add => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, _| g),
                BinaryFn::Sub => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, _| -g),
                BinaryFn::Mul => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, x| g * x),
                BinaryFn::Div => {
                    binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| -g * x / (y * y))
                }
                BinaryFn::Max => binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                    if takes_a_max(x, y) { 0.0 } else { g }
                }),
                BinaryFn::Min => binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                    if takes_a_min(x, y) { 0.0 } else { g }
                }),
            }
        );
    }
}

#[cfg(test)]
mod tests;

//! Element-wise ops: add/sub/mul/div with numpy broadcasting (the smaller
//! operand is read with stride 0, never tiled), scale, and unary maps. Each
//! unary function has its `<f>_forward` / `<f>_backward` kernels below, and
//! one arm in each of `unary_forward` / `unary_backward`.

use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::ops::{Op, fastmath};
use crate::shape::{MAX_DIMS, Shape};
use crate::simd;

/// Calls `row(o, a, sa, b, sb, len)` for every innermost row of `out`: the
/// row starts at `o` in the output and at `a`/`b` in the operands, which
/// advance by `sa`/`sb` (0 or 1) per element.
#[inline(always)]
fn for_each_row(
    out: Shape,
    a: Shape,
    b: Shape,
    mut row: impl FnMut(usize, usize, usize, usize, usize, usize),
) {
    let nd = out.ndim();
    let (sa, sb) = (a.broadcast_strides(&out), b.broadcast_strides(&out));
    let len = out.last();
    let rows = out.rows();
    let mut idx = [0usize; MAX_DIMS];
    let (mut ao, mut bo) = (0usize, 0usize);
    for r in 0..rows {
        row(r * len, ao, sa[nd - 1], bo, sb[nd - 1], len);
        // Odometer over the outer dimensions.
        for d in (0..nd.saturating_sub(1)).rev() {
            idx[d] += 1;
            ao += sa[d];
            bo += sb[d];
            if idx[d] < out.dims()[d] {
                break;
            }
            ao -= sa[d] * idx[d];
            bo -= sb[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/// out = f(a, b) elementwise with broadcasting. a, b, out: broadcast shapes.
#[inline(always)]
fn binary_forward(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    so: Shape,
    sa: Shape,
    sb: Shape,
    f: impl Fn(f32, f32) -> f32,
) {
    if sa == sb {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
        return;
    }
    for_each_row(so, sa, sb, |o, ao, sta, bo, stb, len| {
        let out = &mut out[o..o + len];
        // The innermost stride of each operand is 1 (it varies) or 0 (it
        // is broadcast along the row).
        match (sta == 1, stb == 1) {
            (true, true) => out
                .iter_mut()
                .zip(&a[ao..ao + len])
                .zip(&b[bo..bo + len])
                .for_each(|((o, &x), &y)| *o = f(x, y)),
            (true, false) => out
                .iter_mut()
                .zip(&a[ao..ao + len])
                .for_each(|(o, &x)| *o = f(x, b[bo])),
            (false, true) => out
                .iter_mut()
                .zip(&b[bo..bo + len])
                .for_each(|(o, &y)| *o = f(a[ao], y)),
            (false, false) => out.iter_mut().for_each(|o| *o = f(a[ao], b[bo])),
        }
    });
}

/// dx += g(dout, x, y) reduced onto x's (possibly broadcast) shape, where x is
/// the operand being differentiated and y the other one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn binary_backward_into(
    dx: &mut [f32],
    dout: &[f32],
    x: &[f32],
    y: &[f32],
    so: Shape,
    sx: Shape,
    sy: Shape,
    g: impl Fn(f32, f32, f32) -> f32,
) {
    if sx == so && sy == so {
        for (((d, &go), &xv), &yv) in dx.iter_mut().zip(dout).zip(x).zip(y) {
            *d += g(go, xv, yv);
        }
        return;
    }
    for_each_row(so, sx, sy, |o, xo, stx, yo, sty, len| {
        for j in 0..len {
            let (xi, yi) = (xo + j * stx, yo + j * sty);
            dx[xi] += g(dout[o + j], x[xi], y[yi]);
        }
    });
}

/// The element-wise binary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
}

/// The element-wise unary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryFn {
    Exp,
    Log,
    Tanh,
    Relu,
    Sigmoid,
    Gelu,
}

impl Context {
    fn binary(&mut self, f: BinaryFn, op: &'static str, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (ia, ib) = (self.resolve(op, a)?, self.resolve(op, b)?);
        let (ea, eb) = (self.entry(ia), self.entry(ib));
        let shape = Shape::broadcast(op, ea.shape, eb.shape)?;
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(op, shape, tracks)?;
        let ([o], [x, y]) = self
            .store
            .access([self.table[out as usize].data], [ea.data, eb.data]);
        let (sa, sb) = (ea.shape, eb.shape);
        simd::dispatch!(match f {
            BinaryFn::Add => binary_forward(o, x, y, shape, sa, sb, |p, q| p + q),
            BinaryFn::Sub => binary_forward(o, x, y, shape, sa, sb, |p, q| p - q),
            BinaryFn::Mul => binary_forward(o, x, y, shape, sa, sb, |p, q| p * q),
            BinaryFn::Div => binary_forward(o, x, y, shape, sa, sb, |p, q| p / q),
        });
        self.record(Op::Binary { a: ia, b: ib, f }, out);
        Ok(self.handle(out))
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

    fn unary(&mut self, f: UnaryFn, op: &'static str, x: Tensor) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, ex.shape, tracks)?;
        let par = f == UnaryFn::Gelu && self.want_pool(ex.shape.numel() * 16);
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        match self.pool.as_ref().filter(|_| par) {
            Some(pool) => {
                let h = x.len() / 2;
                let ((y0, y1), (x0, x1)) = (y.split_at_mut(h), x.split_at(h));
                pool.join(
                    || simd::dispatch!(unary_forward(f, y1, x1)),
                    || simd::dispatch!(unary_forward(f, y0, x0)),
                );
            }
            None => simd::dispatch!(unary_forward(f, y, x)),
        }
        self.record(Op::Unary { x: ix, f }, out);
        Ok(self.handle(out))
    }

    fn scale_op(&mut self, op: &'static str, x: Tensor, s: f32) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, ex.shape, tracks)?;
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        scale_forward(y, x, s);
        self.record(Op::Scale { x: ix, s }, out);
        Ok(self.handle(out))
    }

    /// s * x.
    pub fn scale(&mut self, x: Tensor, s: f32) -> Result<Tensor> {
        self.scale_op("scale", x, s)
    }

    /// -x.
    pub fn neg(&mut self, x: Tensor) -> Result<Tensor> {
        self.scale_op("neg", x, -1.0)
    }

    /// e^x.
    pub fn exp(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Exp, "exp", x)
    }

    /// Natural log (NaN for negative inputs, -inf at 0, as in IEEE).
    pub fn log(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Log, "log", x)
    }

    pub fn tanh(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Tanh, "tanh", x)
    }

    pub fn relu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Relu, "relu", x)
    }

    pub fn sigmoid(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Sigmoid, "sigmoid", x)
    }

    /// GELU, tanh approximation (GPT-2's).
    pub fn gelu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryFn::Gelu, "gelu", x)
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

/// y = f(x). x, y: `[N]`.
#[inline(always)]
fn unary_forward(f: UnaryFn, y: &mut [f32], x: &[f32]) {
    match f {
        UnaryFn::Exp => exp_forward(y, x),
        UnaryFn::Log => log_forward(y, x),
        UnaryFn::Tanh => tanh_forward(y, x),
        UnaryFn::Relu => relu_forward(y, x),
        UnaryFn::Sigmoid => sigmoid_forward(y, x),
        UnaryFn::Gelu => gelu_forward(y, x),
    }
}

/// dx += dout * f'(x), given x and the forward output y = f(x). All `[N]`.
#[inline(always)]
fn unary_backward(f: UnaryFn, dx: &mut [f32], dout: &[f32], x: &[f32], y: &[f32]) {
    match f {
        UnaryFn::Exp => exp_backward(dx, dout, y),
        UnaryFn::Log => log_backward(dx, dout, x),
        UnaryFn::Tanh => tanh_backward(dx, dout, y),
        UnaryFn::Relu => relu_backward(dx, dout, x),
        UnaryFn::Sigmoid => sigmoid_backward(dx, dout, y),
        UnaryFn::Gelu => gelu_backward(dx, dout, x),
    }
}

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
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.tanh());
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

const GELU_K: f32 = 0.797_884_6; // sqrt(2/pi)

/// y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))). x, y: `[N]`.
#[inline(always)]
pub(crate) fn gelu_forward(y: &mut [f32], x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        *y = 0.5 * x * (1.0 + fastmath::tanh(u));
    }
}

/// dx += dout * gelu'(x).
#[inline(always)]
pub(crate) fn gelu_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        let t = fastmath::tanh(u);
        let sech2 = 1.0 - t * t;
        let local = 0.5 * (1.0 + t) + 0.5 * x * sech2 * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        *d += g * local;
    }
}

pub(crate) fn backward_scale(ctx: &mut Context, out: u32, x: u32, s: f32) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ([dx], [dout]) = ctx.store.access([dx], [dout]);
    scale_backward(dx, dout, s);
}

pub(crate) fn backward_unary(ctx: &mut Context, out: u32, x: u32, f: UnaryFn) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let par = f == UnaryFn::Gelu && ctx.want_pool(ex.shape.numel() * 16);
    let ([dx], [dout, x, y]) = ctx.store.access([dx], [dout, ex.data, eo.data]);
    match ctx.pool.as_ref().filter(|_| par) {
        Some(pool) => {
            let h = x.len() / 2;
            let ((d0, d1), (g0, g1)) = (dx.split_at_mut(h), dout.split_at(h));
            let ((x0, x1), (y0, y1)) = (x.split_at(h), y.split_at(h));
            pool.join(
                || simd::dispatch!(unary_backward(f, d1, g1, x1, y1)),
                || simd::dispatch!(unary_backward(f, d0, g0, x0, y0)),
            );
        }
        None => simd::dispatch!(unary_backward(f, dx, dout, x, y)),
    }
}

pub(crate) fn backward_binary(ctx: &mut Context, out: u32, ia: u32, ib: u32, f: BinaryFn) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ea, eb, eo) = (ctx.entry(ia), ctx.entry(ib), ctx.entry(out));
    let so = eo.shape;
    // One operand at a time: if a and b are the same tensor, their grad
    // buffers are the same and must not be borrowed twice.
    if let Some(da) = ctx.grad_of(ia) {
        let ([da], [dout, a, b]) = ctx.store.access([da], [dout, ea.data, eb.data]);
        let (sa, sb) = (ea.shape, eb.shape);
        simd::dispatch!(match f {
            BinaryFn::Add | BinaryFn::Sub => {
                binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, _| g)
            }
            BinaryFn::Mul => binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, y| g * y),
            BinaryFn::Div => binary_backward_into(da, dout, a, b, so, sa, sb, |g, _, y| g / y),
        });
    }
    if let Some(db) = ctx.grad_of(ib) {
        let ([db], [dout, a, b]) = ctx.store.access([db], [dout, ea.data, eb.data]);
        let (sa, sb) = (ea.shape, eb.shape);
        simd::dispatch!(match f {
            BinaryFn::Add => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, _| g),
            BinaryFn::Sub => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, _| -g),
            BinaryFn::Mul => binary_backward_into(db, dout, b, a, so, sb, sa, |g, _, x| g * x),
            BinaryFn::Div => {
                binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| -g * x / (y * y))
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn forward_values_with_broadcast() {
        let mut c = crate::Context::new();
        let a = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let b = c.tensor(&[3], &[10., 20., 30.]).unwrap();
        let col = c.tensor(&[2, 1], &[100., 200.]).unwrap();
        let mut out = [0.0; 6];
        let s = c.add(a, b).unwrap();
        c.read(s, &mut out).unwrap();
        assert_eq!(out, [11., 22., 33., 14., 25., 36.]);
        let m = c.mul(a, col).unwrap();
        c.read(m, &mut out).unwrap();
        assert_eq!(out, [100., 200., 300., 800., 1000., 1200.]);
        let d = c.div(col, a).unwrap();
        c.read(d, &mut out).unwrap();
        assert_eq!(out[3], 50.0);
        let g = c.gelu(a).unwrap();
        c.read(g, &mut out).unwrap();
        assert!((out[0] - 0.841192).abs() < 1e-5);
    }

    #[test]
    fn shape_mismatch_names_op_and_shapes() {
        let mut c = crate::Context::new();
        let a = c.tensor(&[3, 4], &[0.0; 12]).unwrap();
        let b = c.tensor(&[4, 3], &[0.0; 12]).unwrap();
        for (name, e) in [
            ("add", c.add(a, b)),
            ("sub", c.sub(a, b)),
            ("mul", c.mul(a, b)),
            ("div", c.div(a, b)),
        ] {
            let msg = e.unwrap_err().to_string();
            assert_eq!(
                msg,
                format!("{name}: shapes cannot be broadcast together: [3,4] x [4,3]")
            );
        }
    }

    #[test]
    fn gradcheck_binary_broadcast_both_directions() {
        for (sa, sb) in [
            (&[3, 4][..], &[3, 4][..]),
            (&[2, 3, 4], &[4]),
            (&[3, 1], &[1, 4]),
            (&[2, 1, 4], &[2, 3, 1]),
            (&[1], &[3, 2]),
        ] {
            gradcheck(Check::new("add", &[sa, sb]), |c, x| c.add(x[0], x[1]));
            gradcheck(Check::new("sub", &[sa, sb]), |c, x| c.sub(x[0], x[1]));
            gradcheck(Check::new("mul", &[sa, sb]), |c, x| c.mul(x[0], x[1]));
            gradcheck(Check::new("div", &[sa, sb]).range(0.5, 2.0), |c, x| {
                c.div(x[0], x[1])
            });
        }
    }

    #[test]
    fn gradcheck_same_tensor_twice() {
        gradcheck(Check::new("mul(x,x)", &[&[3, 5]]), |c, x| c.mul(x[0], x[0]));
        gradcheck(Check::new("add(x,x)", &[&[7]]), |c, x| c.add(x[0], x[0]));
        gradcheck(Check::new("div(x,x)", &[&[4]]).range(0.5, 2.0), |c, x| {
            c.div(x[0], x[0])
        });
    }

    #[test]
    fn gradcheck_unary() {
        let s = &[&[4, 5][..]];
        gradcheck(Check::new("scale", s), |c, x| c.scale(x[0], -1.7));
        gradcheck(Check::new("neg", s), |c, x| c.neg(x[0]));
        gradcheck(Check::new("exp", s), |c, x| c.exp(x[0]));
        gradcheck(Check::new("log", s).range(0.5, 3.0), |c, x| c.log(x[0]));
        gradcheck(Check::new("tanh", s), |c, x| c.tanh(x[0]));
        gradcheck(Check::new("relu", s).away_from_zero(), |c, x| c.relu(x[0]));
        gradcheck(Check::new("sigmoid", s), |c, x| c.sigmoid(x[0]));
        gradcheck(Check::new("gelu", s).range(-3.0, 3.0), |c, x| c.gelu(x[0]));
    }

    /// GELU on the two-thread path equals the single-threaded kernels.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn gelu_parallel_path_matches_kernels() {
        let n = 1 << 17;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 8.0).collect();
        let mut c = crate::Context::new();
        let p = c.param(&[n], Some(&x)).unwrap();
        let y = c.gelu(p).unwrap();
        assert!(c.pool.is_some());
        let l = c.sum(y).unwrap();
        c.backward(l).unwrap();
        let (mut got, mut gotg) = (vec![0.0; n], vec![0.0; n]);
        c.read(y, &mut got).unwrap();
        c.read_grad(p, &mut gotg).unwrap();
        let (mut want, mut wantg) = (vec![0.0; n], vec![0.0; n]);
        super::gelu_forward(&mut want, &x);
        super::gelu_backward(&mut wantg, &vec![1.0; n], &x);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        assert!(
            gotg.iter()
                .zip(&wantg)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }

    #[test]
    fn gradcheck_composition_reuses_intermediate() {
        // y = tanh(x) used by two consumers: grads from both must add up.
        gradcheck(Check::new("tanh reused", &[&[6]]), |c, x| {
            let t = c.tanh(x[0])?;
            let e = c.exp(t)?;
            c.mul(t, e)
        });
    }
}

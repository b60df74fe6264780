//! Element-wise ops: add/sub/mul/div with numpy broadcasting (the smaller
//! operand is read with stride 0, never tiled), scale, and unary maps.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::ops::fastmath;
use crate::shape::{MAX_DIMS, Shape};
use crate::tape::{Attrs, Node, OpKind};

/// Calls `row(o, a, sa, b, sb, len)` for every innermost row of `out`: the
/// row starts at `o` in the output and at `a`/`b` in the operands, which
/// advance by `sa`/`sb` (0 or 1) per element.
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
        match (sta, stb) {
            (1, 1) => out
                .iter_mut()
                .zip(&a[ao..ao + len])
                .zip(&b[bo..bo + len])
                .for_each(|((o, &x), &y)| *o = f(x, y)),
            (1, 0) => out
                .iter_mut()
                .zip(&a[ao..ao + len])
                .for_each(|(o, &x)| *o = f(x, b[bo])),
            (0, 1) => out
                .iter_mut()
                .zip(&b[bo..bo + len])
                .for_each(|(o, &y)| *o = f(a[ao], y)),
            _ => out.iter_mut().for_each(|o| *o = f(a[ao], b[bo])),
        }
    });
}

/// dx += g(dout, x, y) reduced onto x's (possibly broadcast) shape, where x is
/// the operand being differentiated and y the other one.
#[allow(clippy::too_many_arguments)]
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

impl Context {
    fn binary(&mut self, kind: OpKind, op: &'static str, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (ia, ib) = (self.resolve(op, a)?, self.resolve(op, b)?);
        let (ea, eb) = (self.entry(ia), self.entry(ib));
        let shape = Shape::broadcast(op, ea.shape, eb.shape)?;
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(op, shape, tracks)?;
        let ([o], [x, y]) = self
            .store
            .access([self.table[out as usize].data], [ea.data, eb.data]);
        match kind {
            OpKind::Add => binary_forward(o, x, y, shape, ea.shape, eb.shape, |p, q| p + q),
            OpKind::Sub => binary_forward(o, x, y, shape, ea.shape, eb.shape, |p, q| p - q),
            OpKind::Mul => binary_forward(o, x, y, shape, ea.shape, eb.shape, |p, q| p * q),
            _ => binary_forward(o, x, y, shape, ea.shape, eb.shape, |p, q| p / q),
        }
        self.record(kind, &[ia, ib], out, Attrs::None);
        Ok(self.handle(out))
    }

    /// a + b with broadcasting.
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(OpKind::Add, "add", a, b)
    }

    /// a - b with broadcasting.
    pub fn sub(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(OpKind::Sub, "sub", a, b)
    }

    /// a * b (element-wise) with broadcasting.
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(OpKind::Mul, "mul", a, b)
    }

    /// a / b (element-wise) with broadcasting.
    pub fn div(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(OpKind::Div, "div", a, b)
    }

    fn unary(&mut self, kind: OpKind, op: &'static str, x: Tensor, attrs: Attrs) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, ex.shape, tracks)?;
        let par = kind == OpKind::Gelu && self.want_pool(ex.shape.numel() * 16);
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        match self.pool.as_ref().filter(|_| par) {
            Some(pool) => {
                let h = x.len() / 2;
                let ((y0, y1), (x0, x1)) = (y.split_at_mut(h), x.split_at(h));
                pool.join(
                    || unary_forward(kind, attrs, y1, x1),
                    || unary_forward(kind, attrs, y0, x0),
                );
            }
            None => unary_forward(kind, attrs, y, x),
        }
        self.record(kind, &[ix], out, attrs);
        Ok(self.handle(out))
    }

    /// s * x.
    pub fn scale(&mut self, x: Tensor, s: f32) -> Result<Tensor> {
        self.unary(OpKind::Scale, "scale", x, Attrs::Scale(s))
    }

    /// -x.
    pub fn neg(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Scale, "neg", x, Attrs::Scale(-1.0))
    }

    /// e^x.
    pub fn exp(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Exp, "exp", x, Attrs::None)
    }

    /// Natural log (NaN for negative inputs, -inf at 0, as in IEEE).
    pub fn log(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Log, "log", x, Attrs::None)
    }

    pub fn tanh(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Tanh, "tanh", x, Attrs::None)
    }

    pub fn relu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Relu, "relu", x, Attrs::None)
    }

    pub fn sigmoid(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Sigmoid, "sigmoid", x, Attrs::None)
    }

    /// GELU, tanh approximation (GPT-2's).
    pub fn gelu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(OpKind::Gelu, "gelu", x, Attrs::None)
    }
}

const GELU_K: f32 = 0.797_884_6; // sqrt(2/pi)

/// y = f(x) for the unary kinds. x, y: [N].
fn unary_forward(kind: OpKind, attrs: Attrs, y: &mut [f32], x: &[f32]) {
    let map =
        |f: &dyn Fn(f32) -> f32, y: &mut [f32]| y.iter_mut().zip(x).for_each(|(y, &x)| *y = f(x));
    match kind {
        OpKind::Scale => {
            let s = if let Attrs::Scale(s) = attrs { s } else { 1.0 };
            y.iter_mut().zip(x).for_each(|(y, &x)| *y = s * x);
        }
        OpKind::Exp => map(&f32::exp, y),
        OpKind::Log => map(&f32::ln, y),
        OpKind::Tanh => map(&f32::tanh, y),
        OpKind::Relu => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0)),
        OpKind::Sigmoid => map(&|v: f32| 1.0 / (1.0 + (-v).exp()), y),
        _ => gelu_forward(y, x),
    }
}

/// y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))). x, y: [N].
pub(crate) fn gelu_forward(y: &mut [f32], x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        *y = 0.5 * x * (1.0 + fastmath::tanh(u));
    }
}

/// dx += dout * gelu'(x).
pub(crate) fn gelu_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        let t = fastmath::tanh(u);
        let sech2 = 1.0 - t * t;
        let local = 0.5 * (1.0 + t) + 0.5 * x * sech2 * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        *d += g * local;
    }
}

pub(crate) fn unary_backward(ctx: &mut Context, node: &Node) {
    let ix = node.input(0);
    let Some(dx) = ctx.grad_of(ix) else { return };
    let (ex, eo) = (ctx.entry(ix), ctx.entry(node.out));
    let Some(dout) = eo.grad else { return };
    if node.kind == OpKind::Gelu && ctx.want_pool(ex.shape.numel() * 16) {
        let ([dx], [dout, x]) = ctx.store.access([dx], [dout, ex.data]);
        if let Some(pool) = ctx.pool.as_ref() {
            let h = x.len() / 2;
            let ((d0, d1), (g0, g1), (x0, x1)) =
                (dx.split_at_mut(h), dout.split_at(h), x.split_at(h));
            pool.join(|| gelu_backward(d1, g1, x1), || gelu_backward(d0, g0, x0));
        }
        return;
    }
    let ([dx], [dout, x, y]) = ctx.store.access([dx], [dout, ex.data, eo.data]);
    let each = |f: &dyn Fn(f32, f32, f32) -> f32, dx: &mut [f32]| {
        for (((d, &g), &x), &y) in dx.iter_mut().zip(dout).zip(x).zip(y) {
            *d += f(g, x, y);
        }
    };
    match node.kind {
        OpKind::Scale => {
            let s = if let Attrs::Scale(s) = node.attrs {
                s
            } else {
                1.0
            };
            dx.iter_mut().zip(dout).for_each(|(d, &g)| *d += s * g);
        }
        OpKind::Exp => each(&|g, _, y| g * y, dx),
        OpKind::Log => each(&|g, x, _| g / x, dx),
        OpKind::Tanh => each(&|g, _, y| g * (1.0 - y * y), dx),
        OpKind::Relu => each(&|g, x, _| if x > 0.0 { g } else { 0.0 }, dx),
        OpKind::Sigmoid => each(&|g, _, y| g * y * (1.0 - y), dx),
        _ => gelu_backward(dx, dout, x),
    }
}

pub(crate) fn binary_backward(ctx: &mut Context, node: &Node) {
    let (ia, ib) = (node.input(0), node.input(1));
    let (ea, eb, eo) = (ctx.entry(ia), ctx.entry(ib), ctx.entry(node.out));
    let Some(dout) = eo.grad else { return };
    let so = eo.shape;
    // One operand at a time: if a and b are the same tensor, their grad
    // buffers are the same and must not be borrowed twice.
    let da: Option<Buf> = ctx.grad_of(ia);
    if let Some(da) = da {
        let ([da], [dout, a, b]) = ctx.store.access([da], [dout, ea.data, eb.data]);
        match node.kind {
            OpKind::Add | OpKind::Sub => {
                binary_backward_into(da, dout, a, b, so, ea.shape, eb.shape, |g, _, _| g)
            }
            OpKind::Mul => {
                binary_backward_into(da, dout, a, b, so, ea.shape, eb.shape, |g, _, y| g * y)
            }
            _ => binary_backward_into(da, dout, a, b, so, ea.shape, eb.shape, |g, _, y| g / y),
        }
    }
    if let Some(db) = ctx.grad_of(ib) {
        let ([db], [dout, a, b]) = ctx.store.access([db], [dout, ea.data, eb.data]);
        match node.kind {
            OpKind::Add => {
                binary_backward_into(db, dout, b, a, so, eb.shape, ea.shape, |g, _, _| g)
            }
            OpKind::Sub => {
                binary_backward_into(db, dout, b, a, so, eb.shape, ea.shape, |g, _, _| -g)
            }
            OpKind::Mul => {
                binary_backward_into(db, dout, b, a, so, eb.shape, ea.shape, |g, _, x| g * x)
            }
            _ => binary_backward_into(db, dout, b, a, so, eb.shape, ea.shape, |g, y, x| {
                -g * x / (y * y)
            }),
        }
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

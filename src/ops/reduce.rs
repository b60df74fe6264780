//! Reductions: sum and mean over all elements or along one axis.

use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::shape::{MAX_DIMS, Shape};
use crate::tape::{Attrs, Node, OpKind};

/// (outer, n, inner) view of `shape` around `axis`.
fn split(shape: Shape, axis: usize) -> (usize, usize, usize) {
    let d = shape.dims();
    (
        d[..axis].iter().product(),
        d[axis],
        d[axis + 1..].iter().product(),
    )
}

/// out[o, i] = s * sum_j x[o, j, i]. x: [outer, n, inner], out: [outer, inner].
fn sum_axis_forward(out: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize, s: f32) {
    for o in 0..outer {
        let acc = &mut out[o * inner..(o + 1) * inner];
        for j in 0..n {
            let row = &x[(o * n + j) * inner..(o * n + j + 1) * inner];
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
        }
        acc.iter_mut().for_each(|a| *a *= s);
    }
}

/// dx[o, j, i] += s * dout[o, i].
fn sum_axis_backward(dx: &mut [f32], dout: &[f32], outer: usize, n: usize, inner: usize, s: f32) {
    for o in 0..outer {
        let g = &dout[o * inner..(o + 1) * inner];
        for j in 0..n {
            let row = &mut dx[(o * n + j) * inner..(o * n + j + 1) * inner];
            row.iter_mut().zip(g).for_each(|(d, &g)| *d += s * g);
        }
    }
}

impl Context {
    fn reduce_all(&mut self, kind: OpKind, op: &'static str, x: Tensor) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, Shape::scalar(), tracks)?;
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        let s: f64 = x.iter().map(|&v| v as f64).sum();
        y[0] = if kind == OpKind::Mean {
            (s / x.len() as f64) as f32
        } else {
            s as f32
        };
        self.record(kind, &[ix], out, Attrs::None);
        Ok(self.handle(out))
    }

    /// Sum of all elements, shape [1].
    pub fn sum(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce_all(OpKind::Sum, "sum", x)
    }

    /// Mean of all elements, shape [1].
    pub fn mean(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce_all(OpKind::Mean, "mean", x)
    }

    fn reduce_axis(
        &mut self,
        kind: OpKind,
        op: &'static str,
        x: Tensor,
        axis: i32,
        keepdim: bool,
    ) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        let ax = ex.shape.axis(op, axis)?;
        let mut dims = [0usize; MAX_DIMS];
        let mut nd = 0;
        for (i, &d) in ex.shape.dims().iter().enumerate() {
            if i != ax {
                dims[nd] = d;
                nd += 1;
            } else if keepdim {
                dims[nd] = 1;
                nd += 1;
            }
        }
        if nd == 0 {
            dims[0] = 1;
            nd = 1;
        }
        let oshape = Shape::from_valid(&dims[..nd]);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(op, oshape, tracks)?;
        let (outer, n, inner) = split(ex.shape, ax);
        let s = if kind == OpKind::MeanAxis {
            1.0 / n as f32
        } else {
            1.0
        };
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        sum_axis_forward(y, x, outer, n, inner, s);
        self.record(kind, &[ix], out, Attrs::Axis { axis: ax as u8 });
        Ok(self.handle(out))
    }

    /// Sum along `axis` (negative counts from the end); `keepdim` keeps it as size 1.
    pub fn sum_axis(&mut self, x: Tensor, axis: i32, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(OpKind::SumAxis, "sum_axis", x, axis, keepdim)
    }

    /// Mean along `axis`.
    pub fn mean_axis(&mut self, x: Tensor, axis: i32, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(OpKind::MeanAxis, "mean_axis", x, axis, keepdim)
    }
}

pub(crate) fn backward(ctx: &mut Context, node: &Node) {
    let ix = node.input(0);
    let Some(dx) = ctx.grad_of(ix) else { return };
    let (ex, eo) = (ctx.entry(ix), ctx.entry(node.out));
    let Some(dout) = eo.grad else { return };
    let ([dx], [dout]) = ctx.store.access([dx], [dout]);
    match (node.kind, node.attrs) {
        (OpKind::SumAxis | OpKind::MeanAxis, Attrs::Axis { axis }) => {
            let (outer, n, inner) = split(ex.shape, axis as usize);
            let s = if node.kind == OpKind::MeanAxis {
                1.0 / n as f32
            } else {
                1.0
            };
            sum_axis_backward(dx, dout, outer, n, inner, s);
        }
        _ => {
            let s = if node.kind == OpKind::Mean {
                1.0 / dx.len() as f32
            } else {
                1.0
            };
            let g = s * dout[0];
            dx.iter_mut().for_each(|d| *d += g);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn forward_values() {
        let mut c = crate::Context::new();
        let x = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let mut v2 = [0.0; 2];
        let mut v3 = [0.0; 3];
        let (s, m) = (c.sum(x).unwrap(), c.mean(x).unwrap());
        assert_eq!(c.item(s).unwrap(), 21.0);
        assert_eq!(c.item(m).unwrap(), 3.5);
        let s1 = c.sum_axis(x, 1, false).unwrap();
        c.read(s1, &mut v2).unwrap();
        assert_eq!(v2, [6., 15.]);
        let m0 = c.mean_axis(x, 0, true).unwrap();
        assert_eq!(c.shape(m0).unwrap().dims(), &[1, 3]);
        c.read(m0, &mut v3).unwrap();
        assert_eq!(v3, [2.5, 3.5, 4.5]);
        assert!(
            c.sum_axis(x, 2, false)
                .unwrap_err()
                .to_string()
                .contains("axis 2 is out of range for shape [2,3]")
        );
    }

    #[test]
    fn gradcheck_reductions() {
        let s = &[&[2, 3, 4][..]];
        gradcheck(Check::new("sum", s), |c, x| c.sum(x[0]));
        gradcheck(Check::new("mean", s), |c, x| c.mean(x[0]));
        for axis in [0, 1, -1] {
            gradcheck(Check::new("sum_axis", s), |c, x| {
                c.sum_axis(x[0], axis, false)
            });
            gradcheck(Check::new("mean_axis", s), |c, x| {
                c.mean_axis(x[0], axis, true)
            });
        }
        // Softmax-like composition: x - mean(x, -1, keepdim) broadcasts back.
        gradcheck(Check::new("center", &[&[3, 4]]), |c, x| {
            let m = c.mean_axis(x[0], -1, true)?;
            c.sub(x[0], m)
        });
    }
}

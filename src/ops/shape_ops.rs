//! Reshape (a free view: same memory, same gradient buffer) and permute
//! (a copy into the new axis order; backward copies back).

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::{MAX_DIMS, Shape};

/// Row-major strides of `s`.
fn strides(s: Shape) -> [usize; MAX_DIMS] {
    let mut st = [0usize; MAX_DIMS];
    let mut acc = 1;
    for i in (0..s.ndim()).rev() {
        st[i] = acc;
        acc *= s.dims()[i];
    }
    st
}

/// Visits every element of `out` (shape `oshape`) with the offset of the
/// input element it comes from: out axis i is input axis perm[i].
fn permute_walk(xshape: Shape, oshape: Shape, perm: &[u8], mut f: impl FnMut(usize, usize)) {
    let xs = strides(xshape);
    let nd = oshape.ndim();
    let mut src_stride = [0usize; MAX_DIMS];
    for i in 0..nd {
        src_stride[i] = xs[perm[i] as usize];
    }
    let mut idx = [0usize; MAX_DIMS];
    let mut src = 0usize;
    for o in 0..oshape.numel() {
        f(o, src);
        for d in (0..nd).rev() {
            idx[d] += 1;
            src += src_stride[d];
            if idx[d] < oshape.dims()[d] {
                break;
            }
            src -= src_stride[d] * idx[d];
            idx[d] = 0;
        }
    }
}

impl Context {
    /// Same data, new shape with the same element count. Free: no copy,
    /// and the result shares its gradient with `x`.
    pub fn reshape(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor> {
        const OP: &str = "reshape";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let s = Shape::new(OP, shape)?;
        if s.numel() != ex.shape.numel() {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "element counts differ",
                a: ex.shape,
                b: s,
            });
        }
        let out = self.push_view(OP, ix, s)?;
        Ok(self.handle(out))
    }

    /// Reorders axes: output axis i is input axis `perm[i]` (a copy).
    pub fn permute(&mut self, x: Tensor, perm: &[usize]) -> Result<Tensor> {
        const OP: &str = "permute";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        let nd = ex.shape.ndim();
        let mut seen = [false; MAX_DIMS];
        if perm.len() != nd
            || perm
                .iter()
                .any(|&p| p >= nd || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{perm:?} is not a permutation of the {nd} axes of {}",
                    ex.shape
                ),
            });
        }
        let mut p8 = [0u8; MAX_DIMS];
        let mut dims = [0usize; MAX_DIMS];
        for i in 0..nd {
            p8[i] = perm[i] as u8;
            dims[i] = ex.shape.dims()[perm[i]];
        }
        let oshape = Shape::from_valid(&dims[..nd]);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, oshape, tracks)?;
        let ([y], [x]) = self
            .store
            .access([self.table[out as usize].data], [ex.data]);
        permute_forward(y, x, ex.shape, oshape, &p8[..nd]);
        self.record(Op::Permute { x: ix, perm: p8 }, out);
        Ok(self.handle(out))
    }

    /// Swaps two axes (a permute).
    pub fn transpose(&mut self, x: Tensor, a: usize, b: usize) -> Result<Tensor> {
        let nd = self.shape_for("transpose", x)?.ndim();
        if a >= nd || b >= nd {
            return Err(Error::InvalidArgument {
                op: "transpose",
                what: format!("axes {a},{b} out of range for rank {nd}"),
            });
        }
        let mut perm = [0usize; MAX_DIMS];
        for (i, p) in perm.iter_mut().enumerate().take(nd) {
            *p = i;
        }
        perm.swap(a, b);
        self.permute(x, &perm[..nd])
    }
}

/// y[o] = x[src(o)]: output axis i is input axis perm[i].
fn permute_forward(y: &mut [f32], x: &[f32], xshape: Shape, yshape: Shape, perm: &[u8]) {
    permute_walk(xshape, yshape, perm, |o, s| y[o] = x[s]);
}

/// dx[src(o)] += dout[o].
fn permute_backward(dx: &mut [f32], dout: &[f32], xshape: Shape, yshape: Shape, perm: &[u8]) {
    permute_walk(xshape, yshape, perm, |o, s| dx[s] += dout[o]);
}

pub(crate) fn backward_permute(ctx: &mut Context, out: u32, x: u32, perm: [u8; MAX_DIMS]) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (xs, ys) = (ctx.entry(x).shape, ctx.entry(out).shape);
    let ([dx], [dout]) = ctx.store.access([dx], [dout]);
    permute_backward(dx, dout, xs, ys, &perm[..xs.ndim()]);
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn permute_values_and_reshape_view() {
        let mut c = crate::Context::new();
        let x = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let t = c.transpose(x, 0, 1).unwrap();
        let mut v = [0.0; 6];
        c.read(t, &mut v).unwrap();
        assert_eq!(v, [1., 4., 2., 5., 3., 6.]);
        let before = c.memory_stats().arena_used_bytes;
        let r = c.reshape(x, &[3, 2]).unwrap();
        assert_eq!(
            c.memory_stats().arena_used_bytes,
            before,
            "reshape must not copy"
        );
        assert_eq!(c.shape(r).unwrap().dims(), &[3, 2]);
        assert!(
            c.reshape(x, &[4, 2])
                .unwrap_err()
                .to_string()
                .contains("reshape: element counts differ: [2,3] x [4,2]")
        );
        assert!(c.permute(x, &[0, 0]).is_err());
    }

    #[test]
    fn gradcheck_shape_ops() {
        gradcheck(Check::new("permute", &[&[2, 3, 4]]), |c, x| {
            c.permute(x[0], &[2, 0, 1])
        });
        gradcheck(Check::new("heads split", &[&[2, 4, 6]]), |c, x| {
            let r = c.reshape(x[0], &[2, 4, 2, 3])?;
            c.permute(r, &[0, 2, 1, 3])
        });
        // A reshape view of a parameter, used alongside the parameter itself.
        gradcheck(Check::new("reshape + original", &[&[2, 3]]), |c, x| {
            let r = c.reshape(x[0], &[3, 2])?;
            let r2 = c.reshape(r, &[2, 3])?;
            let e = c.exp(r2)?;
            c.mul(e, x[0])
        });
    }
}

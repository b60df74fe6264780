//! Element-wise select: out = cond ? a : b, the three operands broadcast
//! together as the binary ops broadcast two (stride 0 where stretched,
//! never tiled). `cond` is read as true where it is not zero (NaN counts as
//! true, as in C). The gradient goes to the operand each element was taken
//! from; `cond` gets none (it is a mask, piecewise constant).

use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::ops::Op;
use crate::shape::{MAX_DIMS, Shape};

impl Context {
    /// `a` where `cond` is not zero, else `b`, element-wise; the three
    /// shapes broadcast to the output's. Gradient: to `a` where cond is
    /// true, to `b` where it is false, none to `cond`.
    pub fn select(&mut self, cond: Tensor, a: Tensor, b: Tensor) -> Result<Tensor> {
        const OP: &str = "where";
        let ic = self.resolve(OP, cond)?;
        let ia = self.resolve(OP, a)?;
        let ib = self.resolve(OP, b)?;
        let (ec, ea, eb) = (self.entry(ic), self.entry(ia), self.entry(ib));
        let ab = Shape::broadcast(OP, ea.shape, eb.shape)?;
        let shape = Shape::broadcast(OP, ec.shape, ab)?;
        let tracks = self.tracks(&[ia, ib]);
        let out = self.push_output(OP, shape, tracks)?;
        Ok(self.run(
            Op::Where {
                cond: ic,
                a: ia,
                b: ib,
            },
            out,
        ))
    }
}

/// Calls `f(o, c, a, b)` for every element of `out`: its flat index and
/// the flat indices of the cond, a and b elements it reads (shapes `sc`,
/// `sa`, `sb`, each broadcast to `out`). Also the loop of the other
/// three-operand op, beta_inc.
pub(super) fn for_each_element(
    out: Shape,
    sc: Shape,
    sa: Shape,
    sb: Shape,
    mut f: impl FnMut([usize; 4]),
) {
    if sc == out && sa == out && sb == out {
        (0..out.numel()).for_each(|i| f([i; 4]));
        return;
    }
    let st = [
        sc.broadcast_strides(&out),
        sa.broadcast_strides(&out),
        sb.broadcast_strides(&out),
    ];
    let dims = out.dims();
    let mut idx = [0usize; MAX_DIMS];
    let mut at = [0usize; 3];
    for o in 0..out.numel() {
        f([o, at[0], at[1], at[2]]);
        // Odometer over the output's dimensions, innermost first.
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            (0..3).for_each(|k| at[k] += st[k][d]);
            if idx[d] < dims[d] {
                break;
            }
            (0..3).for_each(|k| at[k] -= st[k][d] * idx[d]);
            idx[d] = 0;
        }
    }
}

/// out = cond != 0 ? a : b. out: the broadcast shape `so`; cond, a, b:
/// shapes `sc`, `sa`, `sb`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn where_forward(
    out: &mut [f32],
    cond: &[f32],
    a: &[f32],
    b: &[f32],
    so: Shape,
    sc: Shape,
    sa: Shape,
    sb: Shape,
) {
    for_each_element(so, sc, sa, sb, |[o, c, i, j]| {
        out[o] = if cond[c] != 0.0 { a[i] } else { b[j] };
    });
}

/// dx += dout where the select took x: where cond != 0 for `take == true`
/// (x is a), where cond == 0 otherwise (x is b). dx has shape `sx`, which
/// is `sa` or `sb` as `take` says; dout has shape `so`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn where_backward(
    dx: &mut [f32],
    dout: &[f32],
    cond: &[f32],
    take: bool,
    so: Shape,
    sc: Shape,
    sa: Shape,
    sb: Shape,
) {
    for_each_element(so, sc, sa, sb, |[o, c, i, j]| {
        if (cond[c] != 0.0) == take {
            dx[if take { i } else { j }] += dout[o];
        }
    });
}

pub(crate) fn forward_where(ctx: &mut Context, out: u32, cond: u32, a: u32, b: u32) {
    let (ec, ea, eb, eo) = (ctx.entry(cond), ctx.entry(a), ctx.entry(b), ctx.entry(out));
    let ([o], [c, x, y]) = ctx.access([eo.data], [ec.data, ea.data, eb.data]);
    where_forward(o, c, x, y, eo.shape, ec.shape, ea.shape, eb.shape);
}

pub(crate) fn backward_where(ctx: &mut Context, out: u32, cond: u32, a: u32, b: u32) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ec, ea, eb, eo) = (ctx.entry(cond), ctx.entry(a), ctx.entry(b), ctx.entry(out));
    let shapes = (eo.shape, ec.shape, ea.shape, eb.shape);
    // One operand at a time: where(c, x, x) gives both the same gradient
    // buffer, which must not be borrowed twice.
    for (x, take) in [(a, true), (b, false)] {
        if let Some(dx) = ctx.grad_of(x) {
            let ([dx], [g, c]) = ctx.access([dx], [dout, ec.data]);
            let (so, sc, sa, sb) = shapes;
            where_backward(dx, g, c, take, so, sc, sa, sb);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::context::Context;
    use crate::error::Error;
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn values_with_broadcast_and_nan_cond() {
        let mut c = Context::new();
        // cond [2, 1] picks whole rows; a [3] broadcast over rows; b [2, 3].
        let cond = c.tensor(&[2, 1], &[1.0, 0.0]).unwrap();
        let a = c.tensor(&[3], &[1.0, 2.0, 3.0]).unwrap();
        let b = c.tensor(&[2, 3], &[10., 20., 30., 40., 50., 60.]).unwrap();
        let y = c.select(cond, a, b).unwrap();
        assert_eq!(c.shape(y).unwrap().dims(), &[2, 3]);
        let mut out = [0.0; 6];
        c.read(y, &mut out).unwrap();
        assert_eq!(out, [1., 2., 3., 40., 50., 60.]);
        // NaN and -0.0 in cond: NaN is true, -0.0 is false.
        let cond = c.tensor(&[3], &[f32::NAN, -0.0, 2.0]).unwrap();
        let b = c.tensor(&[1], &[9.0]).unwrap();
        let y = c.select(cond, a, b).unwrap();
        let mut out = [0.0; 3];
        c.read(y, &mut out).unwrap();
        assert_eq!(out, [1., 9., 3.]);
    }

    #[test]
    fn shape_mismatch_names_op_and_shapes() {
        let mut c = Context::new();
        let cond = c.tensor(&[4], &[1.0; 4]).unwrap();
        let a = c.tensor(&[2, 3], &[0.0; 6]).unwrap();
        let e = c.select(cond, a, a).unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { op: "where", .. }), "{e}");
        assert!(
            e.to_string().contains("[4]") && e.to_string().contains("[2,3]"),
            "{e}"
        );
    }

    /// A 0/1 mask of `n` elements with both values present.
    fn mask(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + 3) % 5 < 2) as u8 as f32).collect()
    }

    #[test]
    fn gradcheck_broadcast_shapes() {
        for (sc, sa, sb) in [
            (&[3, 4][..], &[3, 4][..], &[3, 4][..]),
            (&[3, 4], &[4], &[3, 1]),
            (&[2, 1, 4], &[3, 1], &[1]),
            (&[5], &[2, 5], &[2, 1]),
        ] {
            let m = mask(sc.iter().product());
            let shape = sc.to_vec();
            gradcheck(Check::new("where", &[sa, sb]), move |c, x| {
                let cond = c.tensor(&shape, &m)?;
                c.select(cond, x[0], x[1])
            });
        }
        // The same tensor on both sides gets the whole gradient.
        gradcheck(Check::new("where(c, x, x)", &[&[6]]), |c, x| {
            let cond = c.tensor(&[6], &mask(6))?;
            c.select(cond, x[0], x[0])
        });
        // A cond that depends on the input gets no gradient, and the
        // input's gradient through a and b is unchanged by it.
        gradcheck(
            Check::new("where(x, x, 2x)", &[&[6]]).away_from_zero(),
            |c, x| {
                let two = c.scale(x[0], 2.0)?;
                c.select(x[0], x[0], two)
            },
        );
    }
}

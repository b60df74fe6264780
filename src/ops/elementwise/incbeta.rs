//! The regularised incomplete beta function I_x(a, b) as an op: three
//! operands broadcast together as `where`'s do (stride 0 where stretched),
//! the kernel in `crate::special::beta_inc`, a gradient to each of a, b
//! and x.

use super::select::for_each_element;
use crate::context::{Context, Tensor};
use crate::error::Result;
use crate::ops::Op;
use crate::shape::Shape;
use crate::special;

impl Context {
    /// The regularised incomplete beta function I_x(a, b) = B(x; a, b) /
    /// B(a, b), the CDF of Beta(a, b) at x, element-wise with the three
    /// shapes broadcast together (Stan's inc_beta), for a > 0, b > 0, 0 <=
    /// x <= 1: 0 at x = 0, 1 at x = 1; NaN for a <= 0, b <= 0 or x outside
    /// [0, 1]. Gradients: x^(a - 1) (1 - x)^(b - 1) / B(a, b) in x; in a
    /// and b no closed form (an f64 central difference of the log of the
    /// smaller tail, I or 1 - I).
    pub fn beta_inc(&mut self, a: Tensor, b: Tensor, x: Tensor) -> Result<Tensor> {
        const OP: &str = "beta_inc";
        let ia = self.resolve(OP, a)?;
        let ib = self.resolve(OP, b)?;
        let ix = self.resolve(OP, x)?;
        let (ea, eb, ex) = (self.entry(ia), self.entry(ib), self.entry(ix));
        let ab = Shape::broadcast(OP, ea.shape, eb.shape)?;
        let shape = Shape::broadcast(OP, ab, ex.shape)?;
        let tracks = self.tracks(&[ia, ib, ix]);
        let out = self.push_output(OP, shape, tracks)?;
        Ok(self.run(
            Op::BetaInc {
                a: ia,
                b: ib,
                x: ix,
            },
            out,
        ))
    }
}

/// out = I_x(a, b). out: the broadcast shape `so`; a, b, x: shapes `sa`,
/// `sb`, `sx`.
#[allow(clippy::too_many_arguments)]
fn beta_inc_forward(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    x: &[f32],
    so: Shape,
    sa: Shape,
    sb: Shape,
    sx: Shape,
) {
    for_each_element(so, sa, sb, sx, |[o, i, j, k]| {
        out[o] = special::beta_inc(a[i], b[j], x[k]);
    });
}

/// Which operand a gradient goes to.
#[derive(Clone, Copy)]
enum Wrt {
    A,
    B,
    X,
}

/// d(operand) += dout times the partial of I in `wrt`; d has the shape of
/// that operand, dout the broadcast shape `so`.
#[allow(clippy::too_many_arguments)]
fn beta_inc_backward(
    d: &mut [f32],
    dout: &[f32],
    [a, b, x]: [&[f32]; 3],
    wrt: Wrt,
    so: Shape,
    sa: Shape,
    sb: Shape,
    sx: Shape,
) {
    for_each_element(so, sa, sb, sx, |[o, i, j, k]| {
        let (pa, pb, px) = (a[i], b[j], x[k]);
        let (at, partial) = match wrt {
            Wrt::A => (i, special::beta_inc_grad_a(pa, pb, px)),
            Wrt::B => (j, special::beta_inc_grad_b(pa, pb, px)),
            Wrt::X => (k, special::beta_inc_grad_x(pa, pb, px)),
        };
        d[at] += dout[o] * partial;
    });
}

pub(crate) fn forward_beta_inc(ctx: &mut Context, out: u32, a: u32, b: u32, x: u32) {
    let (ea, eb, ex, eo) = (ctx.entry(a), ctx.entry(b), ctx.entry(x), ctx.entry(out));
    let ([o], [pa, pb, px]) = ctx.access([eo.data], [ea.data, eb.data, ex.data]);
    beta_inc_forward(o, pa, pb, px, eo.shape, ea.shape, eb.shape, ex.shape);
}

pub(crate) fn backward_beta_inc(ctx: &mut Context, out: u32, a: u32, b: u32, x: u32) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (ea, eb, ex, eo) = (ctx.entry(a), ctx.entry(b), ctx.entry(x), ctx.entry(out));
    // One operand at a time: beta_inc(t, t, x) gives a and b the same
    // gradient buffer, which must not be borrowed twice.
    for (id, wrt) in [(a, Wrt::A), (b, Wrt::B), (x, Wrt::X)] {
        if let Some(d) = ctx.grad_of(id) {
            let ([d], [g, pa, pb, px]) = ctx.access([d], [dout, ea.data, eb.data, ex.data]);
            let shapes = (eo.shape, ea.shape, eb.shape, ex.shape);
            beta_inc_backward(
                d,
                g,
                [pa, pb, px],
                wrt,
                shapes.0,
                shapes.1,
                shapes.2,
                shapes.3,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::context::{Context, Tensor};
    use crate::error::{Error, Result};
    use crate::ops::gradcheck::{Check, gradcheck};

    /// I_x(a, b) of one-element tensors, and the three partials.
    fn one(a: f32, b: f32, x: f32) -> (f32, [f32; 3]) {
        let mut c = Context::new();
        let p: Vec<Tensor> = [a, b, x]
            .iter()
            .map(|&v| c.param(&[1], Some(&[v])).unwrap())
            .collect();
        let y = c.beta_inc(p[0], p[1], p[2]).unwrap();
        let s = c.sum(y).unwrap();
        c.backward(s).unwrap();
        let mut v = [0.0];
        c.read(y, &mut v).unwrap();
        let mut g = [0.0f32; 3];
        for (k, t) in p.iter().enumerate() {
            let mut d = [0.0];
            c.read_grad(*t, &mut d).unwrap();
            g[k] = d[0];
        }
        (v[0], g)
    }

    /// beta_inc as the CDF of Beta(a, b), against closed forms: Beta(1, 1)
    /// is uniform, Beta(2, 3)'s CDF is 6x^2 - 8x^3 + 3x^4, Beta(1/2, 1/2)'s
    /// (2 / pi) asin(sqrt x), Beta(a, 1)'s x^a, Beta(1, b)'s
    /// 1 - (1 - x)^b; the x-partial is the density.
    #[test]
    fn beta_cdf_at_known_points() {
        let close = |got: f32, want: f64| {
            assert!(
                (got as f64 - want).abs() <= 2.0 * f32::EPSILON as f64 * want.abs(),
                "{got} vs {want}"
            )
        };
        for x in [0.01f32, 0.25, 0.5, 0.9, 0.999] {
            let xd = x as f64;
            close(one(1.0, 1.0, x).0, xd);
            let (v, g) = one(2.0, 3.0, x);
            close(v, 6.0 * xd * xd - 8.0 * xd.powi(3) + 3.0 * xd.powi(4));
            close(g[2], 12.0 * xd * (1.0 - xd) * (1.0 - xd));
            let (v, g) = one(0.5, 0.5, x);
            let pi = std::f64::consts::PI;
            close(v, 2.0 / pi * xd.sqrt().asin());
            close(g[2], 1.0 / (pi * (xd * (1.0 - xd)).sqrt()));
            let (v, g) = one(3.5, 1.0, x);
            close(v, xd.powf(3.5));
            // d/da x^a = x^a ln x.
            close(g[0], xd.powf(3.5) * xd.ln());
            let (v, g) = one(1.0, 4.0, x);
            close(v, 1.0 - (1.0 - xd).powi(4));
            // d/db (1 - (1 - x)^b) = -(1 - x)^b ln(1 - x).
            close(g[1], -(1.0 - xd).powi(4) * (1.0 - xd).ln());
        }
        // The median of Beta(2, 2) is 1/2 by symmetry; Beta(2, 3) at 0.4
        // is 0.5248 (6(0.16) - 8(0.064) + 3(0.0256)).
        assert_eq!(one(2.0, 2.0, 0.5).0, 0.5);
        close(one(2.0, 3.0, 0.4).0, 0.5248);
    }

    #[test]
    fn values_broadcast_and_domain() {
        let mut c = Context::new();
        // a [2, 1], b [3], x [1]: the output is [2, 3].
        let a = c.tensor(&[2, 1], &[1.0, 2.0]).unwrap();
        let b = c.tensor(&[3], &[1.0, 2.0, 3.0]).unwrap();
        let x = c.tensor(&[1], &[0.5]).unwrap();
        let y = c.beta_inc(a, b, x).unwrap();
        assert_eq!(c.shape(y).unwrap().dims(), &[2, 3]);
        let mut out = [0.0; 6];
        c.read(y, &mut out).unwrap();
        let want = [0.5, 0.75, 0.875, 0.25, 0.5, 0.6875];
        for (g, w) in out.iter().zip(want) {
            assert!((g - w).abs() <= 2.0 * f32::EPSILON, "{out:?}");
        }
        // x = 0 and 1 are the ends; outside the domain NaN.
        let x = c.tensor(&[4], &[0.0, 1.0, -0.5, 1.5]).unwrap();
        let one = c.tensor(&[1], &[2.0]).unwrap();
        let y = c.beta_inc(one, one, x).unwrap();
        let mut out = [0.0; 4];
        c.read(y, &mut out).unwrap();
        assert_eq!(&out[..2], &[0.0, 1.0]);
        assert!(out[2].is_nan() && out[3].is_nan());
        let neg = c.tensor(&[1], &[-1.0]).unwrap();
        let half = c.tensor(&[1], &[0.5]).unwrap();
        let y = c.beta_inc(neg, one, half).unwrap();
        assert!(c.item(y).unwrap().is_nan());
    }

    #[test]
    fn shape_mismatch_names_the_op() {
        let mut c = Context::new();
        let a = c.tensor(&[4], &[1.0; 4]).unwrap();
        let x = c.tensor(&[3], &[0.5; 3]).unwrap();
        let e = c.beta_inc(a, a, x).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { op: "beta_inc", .. }),
            "{e}"
        );
    }

    /// x = 0.1 + 0.8 u for u in [0, 1]: inside (0, 1) with room for the
    /// check's steps.
    fn to_unit(c: &mut Context, u: Tensor) -> Result<Tensor> {
        let s = c.scale(u, 0.8)?;
        let tenth = c.tensor(&[1], &[0.1])?;
        c.add(s, tenth)
    }

    /// All three partials, broadcasting every way; a and b over [0.5, 4]
    /// (both sides of the switch at x = (a + 1) / (a + b + 2)).
    #[test]
    fn gradcheck_beta_inc() {
        for shapes in [
            [&[6][..], &[6][..], &[6][..]],
            [&[2, 3], &[3], &[2, 1]],
            [&[1], &[2, 3], &[3]],
            [&[3, 1], &[1], &[1, 4]],
        ] {
            gradcheck(Check::new("beta_inc", &shapes).range(0.5, 4.0), |c, x| {
                let u = c.scale(x[2], 0.25)?;
                let u = to_unit(c, u)?;
                c.beta_inc(x[0], x[1], u)
            });
        }
        // The same tensor as a and b gets both partials.
        gradcheck(
            Check::new("beta_inc(t, t, x)", &[&[5], &[5]]).range(0.5, 4.0),
            |c, x| {
                let u = c.scale(x[1], 0.25)?;
                let u = to_unit(c, u)?;
                c.beta_inc(x[0], x[0], u)
            },
        );
    }

    /// A broadcast operand's gradient is the sum of the kernel's partials
    /// over what it was broadcast over; an unbroadcast one gets the
    /// kernel's partial itself.
    #[test]
    fn broadcast_gradient_sums() {
        let mut c = Context::new();
        let a = c.param(&[1], Some(&[2.5])).unwrap();
        let b = c.param(&[3], Some(&[0.7, 3.0, 40.0])).unwrap();
        let x = c.param(&[3], Some(&[0.2, 0.5, 0.9])).unwrap();
        let y = c.beta_inc(a, b, x).unwrap();
        let s = c.sum(y).unwrap();
        c.backward(s).unwrap();
        let mut ga = [0.0];
        c.read_grad(a, &mut ga).unwrap();
        let mut gb = [0.0; 3];
        c.read_grad(b, &mut gb).unwrap();
        let want_a: f32 = [(0.7, 0.2), (3.0, 0.5), (40.0, 0.9)]
            .iter()
            .map(|&(bb, xx)| crate::special::beta_inc_grad_a(2.5, bb, xx))
            .sum();
        assert!((ga[0] - want_a).abs() <= 4.0 * f32::EPSILON * want_a.abs());
        assert_eq!(gb[1], crate::special::beta_inc_grad_b(2.5, 3.0, 0.5));
    }
}

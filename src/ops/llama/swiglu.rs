//! SwiGLU, the gate of Llama's MLP: y = silu(gate) * up, elementwise, as
//! one op. Against `silu` then `mul` it makes one pass forward and one
//! backward and keeps no `[N, F]` temporary (the SiLU output and its
//! gradient). Each value is computed as those two ops compute it (the same
//! SiLU, then one product), so the results are theirs, bit for bit.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::ops::elementwise::{SILU_ZERO_BELOW, sigmoid_pair};
use crate::simd;

/// silu(x) = x sigmoid(x) and its slope s (1 + x (1 - s)), each held at
/// its limits (0 below, 1 above) where |x| > 87, as the `silu` op does.
#[inline(always)]
fn silu_and_slope(x: f32) -> (f32, f32) {
    let (s, one_minus_s) = sigmoid_pair(x);
    let silu = if x < SILU_ZERO_BELOW { -0.0 } else { x * s };
    let slope = if x < SILU_ZERO_BELOW {
        0.0
    } else if x > -SILU_ZERO_BELOW {
        1.0
    } else {
        s * (1.0 + x * one_minus_s)
    };
    (silu, slope)
}

/// y = silu(gate) * up. y, gate, up: `[N]`.
#[inline(always)]
fn swiglu_forward(y: &mut [f32], gate: &[f32], up: &[f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(gate).zip(up) {
        let (s, _) = sigmoid_pair(g);
        let silu = if g < SILU_ZERO_BELOW { -0.0 } else { g * s };
        *y = silu * u;
    }
}

/// dgate += dout * up * silu'(gate) and dup += dout * silu(gate), or `=`
/// with `ASSIGN`. All `[N]`.
#[inline(always)]
fn swiglu_backward<const ASSIGN: bool>(
    dgate: &mut [f32],
    dup: &mut [f32],
    dout: &[f32],
    gate: &[f32],
    up: &[f32],
) {
    let grads = dgate.iter_mut().zip(dup.iter_mut());
    for (((dg, du), &d), (&g, &u)) in grads.zip(dout).zip(gate.iter().zip(up)) {
        let (silu, slope) = silu_and_slope(g);
        let (vg, vu) = (d * u * slope, d * silu);
        if ASSIGN {
            *dg = vg;
            *du = vu;
        } else {
            *dg += vg;
            *du += vu;
        }
    }
}

/// Which input one gradient buffer belongs to, when only one is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum One {
    /// dgate only (up needs none).
    Gate,
    /// dup only (gate needs none).
    Up,
    /// gate and up are one tensor x: dx gets both terms, the gate's first.
    Shared,
}

/// The gradient of one input (see [`One`]) into `dx`, added, or written with
/// `ASSIGN`. All `[N]`.
#[inline(always)]
fn swiglu_backward_one<const ASSIGN: bool>(
    which: One,
    dx: &mut [f32],
    dout: &[f32],
    gate: &[f32],
    up: &[f32],
) {
    let put = |dx: &mut f32, v: f32| {
        if ASSIGN {
            *dx = v;
        } else {
            *dx += v;
        }
    };
    let elems = dx.iter_mut().zip(dout).zip(gate.iter().zip(up));
    match which {
        One::Gate => elems.for_each(|((dx, &d), (&g, &u))| put(dx, d * u * silu_and_slope(g).1)),
        One::Up => elems.for_each(|((dx, &d), (&g, _))| put(dx, d * silu_and_slope(g).0)),
        // The two terms one after the other, as two ops would add them.
        One::Shared => elems.for_each(|((dx, &d), (&g, &u))| {
            let (silu, slope) = silu_and_slope(g);
            if ASSIGN {
                *dx = d * u * slope;
            } else {
                *dx += d * u * slope;
            }
            *dx += d * silu;
        }),
    }
}

/// How many element tasks `len` elements are cut into: by the shape alone
/// (each element is its own, so the cut changes no bit).
fn tasks(len: usize) -> usize {
    let worth = Context::worth_two_threads(len * fastmath::ELEMENT_COST);
    fastmath::task_split(worth, len, fastmath::ELEMENT_COST)
}

impl Context {
    /// SwiGLU: silu(gate) * up, elementwise (Llama's MLP gate). gate and
    /// up: the same shape -> that shape. The same values as `silu` then
    /// `mul`, in one pass each way and without their temporaries.
    pub fn swiglu(&mut self, gate: Tensor, up: Tensor) -> Result<Tensor> {
        const OP: &str = "swiglu";
        let (ig, iu) = (self.resolve(OP, gate)?, self.resolve(OP, up)?);
        let (eg, eu) = (self.entry(ig), self.entry(iu));
        if eg.shape != eu.shape {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "gate and up must have the same shape",
                a: eg.shape,
                b: eu.shape,
            });
        }
        let tracks = self.tracks(&[ig, iu]);
        let out = self.push_output(OP, eg.shape, tracks)?;
        Ok(self.run(Op::Swiglu { gate: ig, up: iu }, out))
    }
}

/// Writes y = silu(gate) * up (all one shape) in element tasks.
pub(crate) fn forward_swiglu(ctx: &mut Context, out: u32, gate: u32, up: u32) {
    let (eg, eu, eo) = (ctx.entry(gate), ctx.entry(up), ctx.entry(out));
    let len = eg.shape.numel();
    let n = tasks(len);
    let par = n > 1 && ctx.want_pool(len * fastmath::ELEMENT_COST);
    let (pool, [y], [g, u]) = ctx.access_on(par, [eo.data], [eg.data, eu.data]);
    if n == 1 {
        return simd::dispatch!(swiglu_forward(y, g, u));
    }
    let part = fastmath::part_len(len, n);
    fastmath::run_parts(pool, y.chunks_mut(part), &|i, y| {
        let at = i * part..i * part + y.len();
        simd::dispatch!(swiglu_forward(y, &g[at.clone()], &u[at]))
    });
}

/// Sends dout to gate and up in one pass over the elements: both
/// gradients from one SiLU each, or the one that is needed, or their sum
/// when gate and up are one tensor. A gradient not yet written is written
/// with `=` (no zeroing pass) when every written one is.
pub(crate) fn backward_swiglu(ctx: &mut Context, out: u32, gate: u32, up: u32) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let dgate = ctx.grad_to_overwrite(gate);
    let dup = if up == gate {
        None
    } else {
        ctx.grad_to_overwrite(up)
    };
    match (dgate, dup) {
        (Some(dg), Some(du)) => backward_both(ctx, dout, [dg, du], gate, up),
        (Some(dx), None) => {
            let which = if up == gate { One::Shared } else { One::Gate };
            backward_one(ctx, dout, dx, which, gate, up);
        }
        (None, Some(du)) => backward_one(ctx, dout, du, One::Up, gate, up),
        (None, None) => {}
    }
}

/// Both gradients (gate and up distinct), each `(buffer, fresh)`.
fn backward_both(ctx: &mut Context, dout: Buf, [dg, du]: [(Buf, bool); 2], gate: u32, up: u32) {
    let (eg, eu) = (ctx.entry(gate), ctx.entry(up));
    let len = eg.shape.numel();
    let n = tasks(len);
    let par = n > 1 && ctx.want_pool(len * fastmath::ELEMENT_COST);
    let (pool, [dgv, duv], [d, g, u]) = ctx.access_on(par, [dg.0, du.0], [dout, eg.data, eu.data]);
    let assign = dg.1 && du.1;
    if !assign {
        // A fresh one of an added pair starts from zero.
        for (grad, fresh) in [(&mut *dgv, dg.1), (&mut *duv, du.1)] {
            if fresh {
                grad.fill(0.0);
            }
        }
    }
    let kernel = |dg: &mut [f32], du: &mut [f32], at: std::ops::Range<usize>| {
        let (d, g, u) = (&d[at.clone()], &g[at.clone()], &u[at]);
        if assign {
            simd::dispatch!(swiglu_backward::<true>(dg, du, d, g, u))
        } else {
            simd::dispatch!(swiglu_backward::<false>(dg, du, d, g, u))
        }
    };
    if n == 1 {
        return kernel(dgv, duv, 0..len);
    }
    let part = fastmath::part_len(len, n);
    let parts = dgv.chunks_mut(part).zip(duv.chunks_mut(part));
    fastmath::run_parts(pool, parts, &|i, (dg, du)| {
        kernel(dg, du, i * part..i * part + dg.len())
    });
}

/// One gradient buffer `(buffer, fresh)`: see [`One`].
fn backward_one(ctx: &mut Context, dout: Buf, dx: (Buf, bool), which: One, gate: u32, up: u32) {
    let (eg, eu) = (ctx.entry(gate), ctx.entry(up));
    let len = eg.shape.numel();
    let n = tasks(len);
    let par = n > 1 && ctx.want_pool(len * fastmath::ELEMENT_COST);
    let (pool, [dxv], [d, g, u]) = ctx.access_on(par, [dx.0], [dout, eg.data, eu.data]);
    let assign = dx.1;
    let kernel = |dx: &mut [f32], at: std::ops::Range<usize>| {
        let (d, g, u) = (&d[at.clone()], &g[at.clone()], &u[at]);
        if assign {
            simd::dispatch!(swiglu_backward_one::<true>(which, dx, d, g, u))
        } else {
            simd::dispatch!(swiglu_backward_one::<false>(which, dx, d, g, u))
        }
    };
    if n == 1 {
        return kernel(dxv, 0..len);
    }
    let part = fastmath::part_len(len, n);
    fastmath::run_parts(pool, dxv.chunks_mut(part), &|i, dx| {
        kernel(dx, i * part..i * part + dx.len())
    });
}

#[cfg(test)]
mod tests {
    use crate::context::{Context, Tensor};
    use crate::ops::gradcheck::{Check, Lcg, gradcheck};

    /// silu(g) u, d/dg and d/du in f64.
    fn reference(g: f64, u: f64) -> (f64, f64, f64) {
        let s = 1.0 / (1.0 + (-g).exp());
        (g * s * u, u * s * (1.0 + g * (1.0 - s)), g * s)
    }

    /// y, dgate and dup of sum(swiglu(gate, up) * r), read back.
    fn run(
        ctx: &mut Context,
        gate: Tensor,
        up: Tensor,
        r: &[f32],
        y: impl Fn(&mut Context) -> Tensor,
    ) -> [Vec<f32>; 3] {
        let n = r.len();
        let out = y(ctx);
        let rt = ctx.tensor(&[n], r).unwrap();
        let weighted = ctx.mul(out, rt).unwrap();
        let l = ctx.sum(weighted).unwrap();
        ctx.backward(l).unwrap();
        let mut got = [vec![0.0; n], vec![0.0; n], vec![0.0; n]];
        ctx.read(out, &mut got[0]).unwrap();
        ctx.read_grad(gate, &mut got[1]).unwrap();
        ctx.read_grad(up, &mut got[2]).unwrap();
        got
    }

    /// Forward and both gradients against f64 over gate in [-20, 20]:
    /// one libm-grade exp and a few roundings, so 6 f32 ulp of the size of
    /// the terms (SiLU's gradient cancels near its zero at -1.28, so that
    /// bound scales with s (1 + |g| (1 - s)), not with the result).
    #[test]
    fn swiglu_matches_f64_reference() {
        let n = 4001;
        let mut rng = Lcg(5);
        let g: Vec<f32> = (0..n).map(|i| -20.0 + i as f32 * 0.01).collect();
        let u: Vec<f32> = (0..n).map(|_| rng.range(-2.0, 2.0)).collect();
        let r: Vec<f32> = (0..n).map(|_| rng.range(-1.0, 1.0)).collect();
        let mut ctx = Context::new();
        let pg = ctx.param(&[n], Some(&g)).unwrap();
        let pu = ctx.param(&[n], Some(&u)).unwrap();
        let [y, dg, du] = run(&mut ctx, pg, pu, &r, |c| c.swiglu(pg, pu).unwrap());
        for i in 0..n {
            let (g64, u64, r64) = (g[i] as f64, u[i] as f64, r[i] as f64);
            let (wy, wdg, wdu) = reference(g64, u64);
            let s = 1.0 / (1.0 + (-g64).exp());
            let slope_size = s * (1.0 + g64.abs() * (1.0 - s));
            for (what, got, want, size) in [
                ("y", y[i], wy, wy.abs()),
                ("dgate", dg[i], wdg * r64, (u64 * r64).abs() * slope_size),
                ("dup", du[i], wdu * r64, (wdu * r64).abs()),
            ] {
                let err = (got as f64 - want).abs();
                assert!(
                    err <= 6.0 * size * f32::EPSILON as f64 + 1e-30,
                    "{what} at gate {} up {}: {got}, f64 says {want}",
                    g[i],
                    u[i]
                );
            }
        }
    }

    /// The same bits as `silu` then `mul`, forward and both gradients, on
    /// sizes that run on one thread and in several tasks, with inputs far
    /// out (+-90, +-inf) where SiLU is held at its limits.
    #[test]
    #[cfg_attr(miri, ignore)] // the large size is slow under Miri
    fn swiglu_equals_silu_then_mul_bit_for_bit() {
        for n in [37, 1 << 18] {
            let mut rng = Lcg(9);
            let mut g: Vec<f32> = (0..n).map(|_| rng.range(-8.0, 8.0)).collect();
            g[..6].copy_from_slice(&[-90.0, 90.0, f32::NEG_INFINITY, f32::INFINITY, 0.0, -1.28]);
            let u: Vec<f32> = (0..n).map(|_| rng.range(-2.0, 2.0)).collect();
            let r: Vec<f32> = (0..n).map(|_| rng.range(-1.0, 1.0)).collect();
            let both = |fused: bool| {
                let mut ctx = Context::new();
                let pg = ctx.param(&[n], Some(&g)).unwrap();
                let pu = ctx.param(&[n], Some(&u)).unwrap();
                run(&mut ctx, pg, pu, &r, |c| {
                    if fused {
                        c.swiglu(pg, pu).unwrap()
                    } else {
                        let s = c.silu(pg).unwrap();
                        c.mul(s, pu).unwrap()
                    }
                })
            };
            let (fused, apart) = (both(true), both(false));
            for (what, a, b) in [
                ("y", &fused[0], &apart[0]),
                ("dgate", &fused[1], &apart[1]),
                ("dup", &fused[2], &apart[2]),
            ] {
                // +0 and -0 alike: a gradient written afresh here is
                // zeroed then added by the two ops.
                let same = a
                    .iter()
                    .zip(b.iter())
                    .all(|(x, y)| x == y || x.to_bits() == y.to_bits());
                assert!(same, "{what} differs at n = {n}");
            }
        }
    }

    #[test]
    fn gradcheck_swiglu() {
        gradcheck(
            Check::new("swiglu", &[&[3, 7], &[3, 7]]).range(-4.0, 4.0),
            |c, x| c.swiglu(x[0], x[1]),
        );
    }

    /// One tensor as gate and up: x silu(x), both terms into one gradient.
    #[test]
    fn gradcheck_swiglu_of_one_tensor() {
        gradcheck(
            Check::new("swiglu(x, x)", &[&[11]]).range(-4.0, 4.0),
            |c, x| c.swiglu(x[0], x[0]),
        );
    }

    /// Only one input needs a gradient: the other is a constant.
    #[test]
    fn gradcheck_swiglu_with_a_constant_side() {
        let k: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 3.0).collect();
        gradcheck(
            Check::new("swiglu(x, const)", &[&[12]]).range(-4.0, 4.0),
            |c, x| {
                let up = c.tensor(&[12], &k)?;
                c.swiglu(x[0], up)
            },
        );
        gradcheck(
            Check::new("swiglu(const, x)", &[&[12]]).range(-4.0, 4.0),
            |c, x| {
                let gate = c.tensor(&[12], &k)?;
                c.swiglu(gate, x[0])
            },
        );
    }

    /// A gradient that already holds a value is added to, not written:
    /// gate also feeds a second op.
    #[test]
    fn gradcheck_swiglu_adds_to_a_used_gradient() {
        gradcheck(
            Check::new("swiglu(x, y) + x", &[&[9], &[9]]).range(-3.0, 3.0),
            |c, x| {
                let y = c.swiglu(x[0], x[1])?;
                c.add(y, x[0])
            },
        );
    }

    #[test]
    fn errors_name_the_op_and_shapes() {
        let mut c = Context::new();
        let g = c.tensor(&[2, 3], &[1.0; 6]).unwrap();
        let u = c.tensor(&[3, 2], &[1.0; 6]).unwrap();
        let e = c.swiglu(g, u).unwrap_err().to_string();
        assert!(
            e.contains("swiglu") && e.contains("[2,3]") && e.contains("[3,2]"),
            "{e}"
        );
    }
}

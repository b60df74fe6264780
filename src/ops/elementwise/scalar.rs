//! One-element binary ops (a scalar model's every op): the same arithmetic,
//! in the same order, as the general kernels of `binary.rs` and `kernels.rs` (so the same
//! bits), without their shape handling and SIMD dispatch.

use super::kernels::{
    add_scaled_into, clamp_backward, clamp_forward, max_of, min_of, pow_backward, pow_forward,
    scale_backward, scale_forward, takes_a_max, takes_a_min, unary_backward, unary_forward,
};
use crate::arena::Buf;
use crate::context::Context;
use crate::context::OneKernels;
use crate::ops::{BinaryFn, OneOp, UnaryFn};
use crate::shape::Shape;
use crate::special;

/// The forward kernel of a binary op on one element: the same arithmetic
/// as the loops of `binary_kernel`, without the dispatch.
#[inline(always)]
pub(super) fn binary_kernel_one(f: BinaryFn, o: &mut [f32], x: &[f32], y: &[f32]) {
    let (x, y) = (x[0], y[0]);
    o[0] = match f {
        BinaryFn::Add => x + y,
        BinaryFn::Sub => x - y,
        BinaryFn::Mul => x * y,
        BinaryFn::Div => x / y,
        BinaryFn::Max => max_of(x, y),
        BinaryFn::Min => min_of(x, y),
        BinaryFn::Lbeta => special::lbeta(x, y),
        BinaryFn::LogDiffExp => special::log_diff_exp(x, y),
        BinaryFn::GammaP => special::gamma_p(x, y),
        BinaryFn::GammaQ => special::gamma_q(x, y),
    };
}

/// `backward_binary` when every operand has one element: the same
/// arithmetic, in the same order, as the general path (so the same bits),
/// without its shape handling and dispatch.
pub(super) fn backward_binary_one(
    ctx: &mut Context,
    dout: Buf,
    out: u32,
    ia: u32,
    ib: u32,
    f: BinaryFn,
) {
    // Shapes matter to Add and Sub only (the general path's `=` write).
    if let Some(sign) = f.sum_sign() {
        let so = ctx.entry_ref(out).shape;
        if ctx.entry_ref(ia).shape == so && ctx.entry_ref(ib).shape == so {
            // a's write first: if a and b share a gradient, a's is the newborn one.
            let (ga, gb) = (ctx.grad_to_overwrite(ia), ctx.grad_to_overwrite(ib));
            if let Some((d, fresh)) = ga {
                let ([d], [g]) = ctx.access([d], [dout]);
                d[0] = add_scaled_one(d[0], g[0], 1.0, fresh);
            }
            if let Some((d, fresh)) = gb {
                let ([d], [g]) = ctx.access([d], [dout]);
                d[0] = add_scaled_one(d[0], g[0], sign, fresh);
            }
            return;
        }
    }
    let (va, vb) = (ctx.entry(ia).data, ctx.entry(ib).data);
    // One operand at a time, as the general path (a and b may be one
    // tensor). A newborn slot adds to 0.0, as the general path's zero fill
    // then `+=` does, without the fill.
    if let Some((da, fresh)) = ctx.grad_to_overwrite(ia) {
        let ([da], [g, a, b]) = ctx.access([da], [dout, va, vb]);
        let d = if fresh { 0.0 } else { da[0] };
        da[0] = d + grad_a(f, g[0], a[0], b[0]);
    }
    if let Some((db, fresh)) = ctx.grad_to_overwrite(ib) {
        let ([db], [g, a, b]) = ctx.access([db], [dout, va, vb]);
        let d = if fresh { 0.0 } else { db[0] };
        db[0] = d + grad_b(f, g[0], a[0], b[0]);
    }
}

/// What a one-element binary op adds to its first operand's gradient.
#[inline(always)]
pub(crate) fn grad_a(f: BinaryFn, g: f32, a: f32, b: f32) -> f32 {
    match f {
        BinaryFn::Add | BinaryFn::Sub => g,
        BinaryFn::Mul => g * b,
        BinaryFn::Div => g / b,
        BinaryFn::Max => {
            if takes_a_max(a, b) {
                g
            } else {
                0.0
            }
        }
        BinaryFn::Min => {
            if takes_a_min(a, b) {
                g
            } else {
                0.0
            }
        }
        BinaryFn::Lbeta => g * special::lbeta_grad_a(a, b),
        BinaryFn::LogDiffExp => g * special::log_diff_exp_grad_a(a, b),
        BinaryFn::GammaP => g * special::gamma_p_grad_a(a, b),
        BinaryFn::GammaQ => g * special::gamma_q_grad_a(a, b),
    }
}

/// What a one-element binary op adds to its second operand's gradient.
#[inline(always)]
pub(crate) fn grad_b(f: BinaryFn, g: f32, a: f32, b: f32) -> f32 {
    match f {
        BinaryFn::Add => g,
        BinaryFn::Sub => -g,
        BinaryFn::Mul => g * a,
        BinaryFn::Div => -g * a / (b * b),
        BinaryFn::Max => {
            if takes_a_max(a, b) {
                0.0
            } else {
                g
            }
        }
        BinaryFn::Min => {
            if takes_a_min(a, b) {
                0.0
            } else {
                g
            }
        }
        BinaryFn::Lbeta => g * special::lbeta_grad_b(a, b),
        BinaryFn::LogDiffExp => g * special::log_diff_exp_grad_b(a, b),
        BinaryFn::GammaP => g * special::gamma_p_grad_b(a, b),
        BinaryFn::GammaQ => g * special::gamma_q_grad_b(a, b),
    }
}

/// The output of `op` on one element (`y` is read by binary ops only):
/// the kernels the eager forward runs on one-element slices.
#[inline(always)]
pub(crate) fn forward_one(op: OneOp, x: f32, y: f32) -> f32 {
    let mut o = [0.0];
    match op {
        OneOp::Binary(f) => binary_kernel_one(f, &mut o, &[x], &[y]),
        OneOp::Unary(f) => unary_forward(f, &mut o, &[x]),
        OneOp::Scale(s) => scale_forward(&mut o, &[x], s),
        OneOp::Pow(p) => pow_forward(&mut o, &[x], p),
        OneOp::Clamp(lo, hi) => clamp_forward(&mut o, &[x], lo, hi),
    }
    o[0]
}

/// `d` after `add_scaled_into` on one element.
#[inline(always)]
pub(crate) fn add_scaled_one(d: f32, g: f32, s: f32, assign: bool) -> f32 {
    let mut o = [d];
    add_scaled_into(&mut o, &[g], s, assign);
    o[0]
}

/// `dx` after the backward kernel of a unary, scale, pow or clamp op on
/// one element (input `x`, output `y`, output gradient `g`): the kernels
/// the eager backward runs on one-element slices. `assign` for a unary op
/// as `backward_unary` decides it.
#[inline(always)]
pub(crate) fn backward_one(op: OneOp, assign: bool, dx: f32, g: f32, x: f32, y: f32) -> f32 {
    let mut d = [dx];
    match op {
        // Binary ops have their own paths (grad_a, grad_b, add_scaled_one).
        OneOp::Binary(_) => {}
        OneOp::Unary(f) => unary_backward(f, assign, &mut d, &[g], &[x], &[y]),
        OneOp::Scale(s) => scale_backward(&mut d, &[g], s),
        OneOp::Pow(p) => pow_backward(&mut d, &[g], &[x], p),
        OneOp::Clamp(lo, hi) => clamp_backward(&mut d, &[g], &[x], lo, hi),
    }
    d[0]
}

/// The one-element kernels, for replay programs
/// (`context::replay_program`, which does not import ops).
pub(crate) struct ScalarKernels;

impl OneKernels for ScalarKernels {
    #[inline(always)]
    fn forward(op: OneOp, x: f32, y: f32) -> f32 {
        forward_one(op, x, y)
    }
    #[inline(always)]
    fn backward(op: OneOp, assign: bool, dx: f32, g: f32, x: f32, y: f32) -> f32 {
        backward_one(op, assign, dx, g, x, y)
    }
    #[inline(always)]
    fn add_scaled(d: f32, g: f32, s: f32, assign: bool) -> f32 {
        add_scaled_one(d, g, s, assign)
    }
    #[inline(always)]
    fn grad_a(f: BinaryFn, g: f32, a: f32, b: f32) -> f32 {
        grad_a(f, g, a, b)
    }
    #[inline(always)]
    fn grad_b(f: BinaryFn, g: f32, a: f32, b: f32) -> f32 {
        grad_b(f, g, a, b)
    }
    #[inline(always)]
    fn sum(x: &[f32], mean: bool) -> f32 {
        crate::ops::reduce::reduce_forward(x, mean)
    }
    #[inline(always)]
    fn sum_backward(dx: &mut [f32], g: f32, mean: bool) {
        crate::ops::reduce::reduce_backward(dx, g, mean)
    }
    #[inline(always)]
    fn slice(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize) {
        crate::ops::shape_ops::slice_forward(y, x, row, off, len)
    }
    #[inline(always)]
    fn slice_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize) {
        crate::ops::shape_ops::slice_backward(dx, dout, row, off, len)
    }
    #[inline(always)]
    fn sum_axis(y: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize, mean: bool) {
        crate::ops::reduce::reduce_axis_forward(y, x, outer, n, inner, mean)
    }
    #[inline(always)]
    fn sum_axis_backward(
        dx: &mut [f32],
        dout: &[f32],
        outer: usize,
        n: usize,
        inner: usize,
        mean: bool,
    ) {
        crate::ops::reduce::reduce_axis_backward(dx, dout, outer, n, inner, mean)
    }
    #[inline(always)]
    fn logsumexp_axis(y: &mut [f32], x: &[f32], outer: usize, n: usize, inner: usize) {
        crate::ops::reduce::logsumexp_axis_forward(y, x, outer, n, inner)
    }
    #[inline(always)]
    fn logsumexp_axis_backward(
        dx: &mut [f32],
        dout: &[f32],
        x: &[f32],
        outer: usize,
        n: usize,
        inner: usize,
    ) {
        crate::ops::reduce::logsumexp_axis_backward(dx, dout, x, outer, n, inner)
    }
    #[inline(always)]
    fn select(out: &mut [f32], cond: &[f32], a: &[f32], b: &[f32], shapes: &[Shape; 4]) {
        let [so, sc, sa, sb] = *shapes;
        super::where_forward(out, cond, a, b, so, sc, sa, sb)
    }
    #[inline(always)]
    fn select_backward(
        dx: &mut [f32],
        dout: &[f32],
        cond: &[f32],
        take: bool,
        shapes: &[Shape; 4],
    ) {
        let [so, sc, sa, sb] = *shapes;
        super::where_backward(dx, dout, cond, take, so, sc, sa, sb)
    }
    #[inline(always)]
    fn concat(y: &mut [f32], x: &[f32], row: usize, off: usize, len: usize) {
        crate::ops::shape_ops::concat_forward(y, x, row, off, len)
    }
    #[inline(always)]
    fn concat_backward(dx: &mut [f32], dout: &[f32], row: usize, off: usize, len: usize) {
        crate::ops::shape_ops::concat_backward(dx, dout, row, off, len)
    }
    #[inline(always)]
    fn permute(y: &mut [f32], x: &[f32], shapes: &[Shape; 2], perm: &[u8]) {
        crate::ops::shape_ops::permute_forward(y, x, shapes[0], shapes[1], perm)
    }
    #[inline(always)]
    fn permute_backward(dx: &mut [f32], dout: &[f32], shapes: &[Shape; 2], perm: &[u8]) {
        crate::ops::shape_ops::permute_backward(dx, dout, shapes[0], shapes[1], perm)
    }
    fn forward_rows(ctx: &mut Context, op: OneOp, out: u32, a: u32, b: u32) {
        match op {
            OneOp::Binary(f) => super::forward_binary(ctx, out, a, b, f),
            OneOp::Unary(f) => super::forward_unary(ctx, out, a, f),
            OneOp::Scale(s) => super::forward_scale(ctx, out, a, s),
            OneOp::Pow(p) => super::forward_pow(ctx, out, a, p),
            OneOp::Clamp(lo, hi) => super::forward_clamp(ctx, out, a, lo, hi),
        }
    }
    fn unary_backward_rows(
        ctx: &mut Context,
        dout: Buf,
        (dx, fresh): (Buf, bool),
        out: u32,
        x: u32,
        f: UnaryFn,
    ) {
        // As `backward_unary` decides it.
        let assign = fresh && f.assigns_fresh_grad();
        super::backward_unary_many(ctx, dout, (dx, fresh), out, x, f, assign)
    }
    fn forward_slices(op: OneOp, y: &mut [f32], a: &[f32], b: &[f32], shapes: &[Shape; 3]) {
        // As the eager entry points run each op on one task.
        match op {
            OneOp::Binary(f) => {
                let [so, sa, sb] = *shapes;
                super::binary::binary_kernel(f, y, a, b, so, sa, sb)
            }
            OneOp::Unary(f) => run_kernel!(y.len(), unary_forward(f, y, a)),
            OneOp::Scale(s) => run_kernel!(y.len(), scale_forward(y, a, s)),
            OneOp::Pow(p) => pow_forward(y, a, p),
            OneOp::Clamp(lo, hi) => run_kernel!(y.len(), clamp_forward(y, a, lo, hi)),
        }
    }
    fn unary_backward(
        f: UnaryFn,
        assign: bool,
        dx: &mut [f32],
        dout: &[f32],
        x: &[f32],
        y: &[f32],
    ) {
        run_kernel!(dx.len(), unary_backward(f, assign, dx, dout, x, y));
    }
    fn map_backward(op: OneOp, dx: &mut [f32], dout: &[f32], x: &[f32]) {
        match op {
            // Binary and unary ops have their own paths.
            OneOp::Binary(_) | OneOp::Unary(_) => {}
            OneOp::Scale(s) => scale_backward(dx, dout, s),
            OneOp::Pow(p) => pow_backward(dx, dout, x, p),
            OneOp::Clamp(lo, hi) => clamp_backward(dx, dout, x, lo, hi),
        }
    }
    fn add_scaled_into(d: &mut [f32], g: &[f32], s: f32, assign: bool) {
        run_kernel!(g.len(), add_scaled_into(d, g, s, assign));
    }
    fn binary_backward(
        f: BinaryFn,
        into_a: bool,
        d: &mut [f32],
        dout: &[f32],
        a: &[f32],
        b: &[f32],
        shapes: &[Shape; 3],
    ) {
        // The eager path's kernels (their arithmetic is `grad_a` and
        // `grad_b`: the one-element path's test pins it).
        if into_a {
            super::binary::grad_into_a(f, d, dout, a, b, *shapes)
        } else {
            super::binary::grad_into_b(f, d, dout, a, b, *shapes)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::context::Context;
    use crate::ops::BinaryFn;

    /// y = f(a, b) over `n` copies of (a, b) (one tensor on both sides
    /// when `same`), L = sum(y * w); returns y[0], dL/da[0], dL/db[0].
    fn run(f: BinaryFn, a: f32, b: f32, w: f32, n: usize, same: bool) -> [f32; 3] {
        let mut c = Context::new();
        let pa = c.param(&[n], Some(&vec![a; n])).unwrap();
        let pb = if same {
            pa
        } else {
            c.param(&[n], Some(&vec![b; n])).unwrap()
        };
        let y = match f {
            BinaryFn::Add => c.add(pa, pb),
            BinaryFn::Sub => c.sub(pa, pb),
            BinaryFn::Mul => c.mul(pa, pb),
            BinaryFn::Div => c.div(pa, pb),
            BinaryFn::Max => c.maximum(pa, pb),
            BinaryFn::Min => c.minimum(pa, pb),
            BinaryFn::Lbeta => c.lbeta(pa, pb),
            BinaryFn::LogDiffExp => c.log_diff_exp(pa, pb),
            BinaryFn::GammaP => c.gamma_p(pa, pb),
            BinaryFn::GammaQ => c.gamma_q(pa, pb),
        }
        .unwrap();
        let wt = c.tensor(&[n], &vec![w; n]).unwrap();
        let yw = c.mul(y, wt).unwrap();
        let loss = c.sum(yw).unwrap();
        c.backward(loss).unwrap();
        let (mut v, mut ga, mut gb) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        c.read(y, &mut v).unwrap();
        c.read_grad(pa, &mut ga).unwrap();
        c.read_grad(pb, &mut gb).unwrap();
        [v[0], ga[0], gb[0]]
    }

    /// The one-element path gives the bits of the general path (two
    /// elements), signed zeros, infinities, NaN and ties included.
    #[test]
    fn one_element_path_is_bit_identical() {
        let vals = [0.0, -0.0, 1.5, -2.25, 3.0e-39, f32::INFINITY, f32::NAN, 7.0];
        let fs = [
            BinaryFn::Add,
            BinaryFn::Sub,
            BinaryFn::Mul,
            BinaryFn::Div,
            BinaryFn::Max,
            BinaryFn::Min,
            BinaryFn::Lbeta,
            BinaryFn::LogDiffExp,
            BinaryFn::GammaP,
            BinaryFn::GammaQ,
        ];
        for f in fs {
            for &a in &vals {
                for &b in &vals {
                    for w in [1.0, -0.0, -3.5] {
                        for same in [false, true] {
                            let one = run(f, a, b, w, 1, same).map(f32::to_bits);
                            let two = run(f, a, b, w, 2, same).map(f32::to_bits);
                            assert_eq!(one, two, "{f:?}({a}, {b}) w {w} same {same}");
                        }
                    }
                }
            }
        }
    }
}

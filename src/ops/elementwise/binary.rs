//! The binary ops' forward and backward over tensors: the one-element
//! path (in `scalar.rs`), the general broadcasting path, and the element tasks
//! of equal-shape operands.

use super::broadcast::{binary_backward_into, binary_forward};
use super::kernels::{add_scaled_into, max_of, min_of, takes_a_max, takes_a_min};
use super::scalar::{backward_binary_one, binary_kernel_one};
use crate::arena::Buf;
use crate::context::Context;
use crate::kernels::fastmath;
use crate::ops::BinaryFn;
use crate::shape::Shape;
use crate::simd;
use crate::special;

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
    // Equal shapes (a residual add): element tasks are independent.
    let work = shape.numel() * fastmath::ELEMENT_COST;
    let worth = sa == sb && Context::worth_two_threads(work);
    let n = fastmath::task_split(worth, shape.numel(), fastmath::ELEMENT_COST);
    let par = n > 1 && ctx.want_pool(work);
    let (pool, [o], [x, y]) = ctx.access_on(par, [vo], [va, vb]);
    if n == 1 {
        return binary_kernel(f, o, x, y, shape, sa, sb);
    }
    let part = fastmath::part_len(o.len(), n);
    fastmath::run_parts(pool, o.chunks_mut(part), &|i, o| {
        let at = i * part..i * part + o.len();
        binary_kernel(f, o, &x[at.clone()], &y[at], shape, sa, sb)
    });
}

/// The forward kernel of a binary op (over the whole output, or over a
/// slice of it when both operands have the output's shape).
pub(super) fn binary_kernel(
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
        BinaryFn::Lbeta => binary_forward(o, x, y, shape, sa, sb, special::lbeta),
        BinaryFn::LogDiffExp => binary_forward(o, x, y, shape, sa, sb, special::log_diff_exp),
        BinaryFn::GammaP => binary_forward(o, x, y, shape, sa, sb, special::gamma_p),
        BinaryFn::GammaQ => binary_forward(o, x, y, shape, sa, sb, special::gamma_q),
    });
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
    if let Some(sign) = f.sum_sign()
        && sa == so
        && sb == so
    {
        // In this order: if a and b share a gradient, a's write comes first.
        let (ga, gb) = (ctx.grad_to_overwrite(ia), ctx.grad_to_overwrite(ib));
        match (ga, gb) {
            (Some((da, fa)), Some((db, fb))) if !da.overlaps(&db) => {
                // The pair costs what one heavier element kernel does: a
                // buffer just over the threshold is one task of two.
                let work = so.numel() * fastmath::ELEMENT_COST;
                let worth = Context::worth_two_threads(work);
                let n = fastmath::task_split(worth, so.numel(), fastmath::ELEMENT_COST / 2);
                let par = worth && ctx.want_pool(work);
                let (pool, [da, db], [g]) = ctx.access_on(par, [da, db], [dout]);
                if !worth {
                    run_kernel!(g.len(), add_scaled_into(da, g, 1.0, fa));
                    run_kernel!(g.len(), add_scaled_into(db, g, sign, fb));
                    return;
                }
                // da's element tasks, then db's.
                let part = fastmath::part_len(g.len(), n);
                let n_a = da.len().div_ceil(part);
                let parts = da.chunks_mut(part).chain(db.chunks_mut(part));
                fastmath::run_parts(pool, parts, &|i, d| {
                    let (j, s, fresh) = if i < n_a {
                        (i, 1.0, fa)
                    } else {
                        (i - n_a, sign, fb)
                    };
                    let g = &g[j * part..][..d.len()];
                    simd::dispatch!(add_scaled_into(d, g, s, fresh))
                });
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
        grad_into_a(f, da, dout, a, b, [so, sa, sb]);
    }
    if let Some(db) = ctx.grad_of(ib) {
        let ([db], [dout, a, b]) = ctx.access([db], [dout, va, vb]);
        grad_into_b(f, db, dout, a, b, [so, sa, sb]);
    }
}

/// da += the gradient of `f(a, b)` in a, reduced onto a's (possibly
/// broadcast) shape; shapes are (out, a, b). The match on `f` sits inside
/// the SIMD dispatch, so each op's loops are compiled with its arithmetic
/// (the eager path and the replay program both run these).
pub(super) fn grad_into_a(
    f: BinaryFn,
    da: &mut [f32],
    dout: &[f32],
    a: &[f32],
    b: &[f32],
    [so, sa, sb]: [Shape; 3],
) {
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
            BinaryFn::Lbeta => binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                g * special::lbeta_grad_a(x, y)
            }),
            BinaryFn::LogDiffExp => {
                binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                    g * special::log_diff_exp_grad_a(x, y)
                })
            }
            BinaryFn::GammaP => binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                g * special::gamma_p_grad_a(x, y)
            }),
            BinaryFn::GammaQ => binary_backward_into(da, dout, a, b, so, sa, sb, |g, x, y| {
                g * special::gamma_q_grad_a(x, y)
            }),
        }
    );
}

/// db += the gradient of `f(a, b)` in b, reduced onto b's shape, as
/// [`grad_into_a`].
pub(super) fn grad_into_b(
    f: BinaryFn,
    db: &mut [f32],
    dout: &[f32],
    a: &[f32],
    b: &[f32],
    [so, sa, sb]: [Shape; 3],
) {
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
            BinaryFn::Lbeta => binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                g * special::lbeta_grad_b(x, y)
            }),
            BinaryFn::LogDiffExp => {
                binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                    g * special::log_diff_exp_grad_b(x, y)
                })
            }
            BinaryFn::GammaP => binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                g * special::gamma_p_grad_b(x, y)
            }),
            BinaryFn::GammaQ => binary_backward_into(db, dout, b, a, so, sb, sa, |g, y, x| {
                g * special::gamma_q_grad_b(x, y)
            }),
        }
    );
}

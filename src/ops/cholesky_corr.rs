//! The Cholesky factor of a correlation matrix from unconstrained
//! coordinates (Stan's cholesky_corr_constrain), as two ops on the same x:
//! the factor L and the log-Jacobian. Built entry by entry from element-wise
//! ops, a K = 3 factor took some 25 ops and each replay paid for each; here
//! it is one kernel each way, in f64, each coordinate's tanh and sech from
//! one exponential (its c, for the log-Jacobian, from one more logarithm).
//!
//! The map: z = tanh(x), one per entry below the diagonal, row by row.
//! Row i of L is z_{i0}, z_{i1} w_1, .., z_{i,i-1} w_{i-1}, then w_i, with
//! w_j = sqrt(1 - sum_{k<j} L_ik^2) = prod_{k<j} sqrt(1 - z_ik^2): each row
//! has unit norm. With c = ln(1 - z^2) and P_j = sum_{k<j} c_k,
//! L_ij = z_j e^{P_j / 2} and L_ii = e^{P_i / 2}, e^{c/2} = sech(x); and
//! ln |J| = sum over the entries of c_k (tanh's) plus, per row,
//! sum_{j>=1} P_j / 2 (the rows'), which is sum_k c_k (1 + (i - 1 - k) / 2).

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::shape::Shape;

use super::Op;

/// K for a vector of K (K - 1) / 2 coordinates, K >= 2; None otherwise.
fn order_of(n: usize) -> Option<usize> {
    // Rounded by truncation of the positive x + 0.5 (`f64::round` is a
    // libm call, and the kernels ask for K at every replay).
    let k = ((1.0 + (1.0 + 8.0 * n as f64).sqrt()) / 2.0 + 0.5) as usize;
    (n >= 1 && k * (k - 1) / 2 == n).then_some(k)
}

/// What the kernels need of one coordinate x, from one exponential
/// (t = e^{-2|x|}): z = tanh(x) = (1 - t) / (1 + t) and sech(x) =
/// sqrt(1 - z^2) = 2 sqrt(t) / (1 + t) = e^{c/2}. Near 0, t comes from
/// expm1 so that 1 - t keeps its relative accuracy (z ~ x however small).
#[derive(Clone, Copy)]
struct Coord {
    z: f64,
    sech: f64,
    t: f64,
}

/// Below it t = e^{-2|x|} > 1/2 and 1 - t is taken from expm1; above it
/// 1 - t > 1/2 and t's own exponential loses nothing.
const SMALL_X: f64 = 0.35;

fn coord(x: f32) -> Coord {
    let a = (x as f64).abs();
    let (t, one_minus_t) = if a < SMALL_X {
        let em = (-2.0 * a).exp_m1();
        (1.0 + em, -em)
    } else {
        let t = (-2.0 * a).exp();
        (t, 1.0 - t)
    };
    Coord {
        z: (one_minus_t / (1.0 + t)).copysign(x as f64),
        sech: 2.0 * t.sqrt() / (1.0 + t),
        t,
    }
}

/// c = ln(1 - z^2): log1p(-z^2) near 0 (where c ~ -x^2 and the closed form
/// would cancel), else 2 ln 2 - 2|x| - 2 ln(1 + t) (no ln of a rounded
/// 1 - z^2, however large |x|).
fn log1m_z_sq(x: f32, c: Coord) -> f64 {
    let a = (x as f64).abs();
    if a < SMALL_X {
        (-c.z * c.z).ln_1p()
    } else {
        2.0 * std::f64::consts::LN_2 - 2.0 * a - 2.0 * c.t.ln_1p()
    }
}

/// Calls `row(i, first)` for rows 1..k: row i's coordinates are
/// x[first..first + i].
fn rows(k: usize, mut row: impl FnMut(usize, usize)) {
    let mut first = 0;
    for i in 1..k {
        row(i, first);
        first += i;
    }
}

/// L `[k, k]` (row-major, 0 above the diagonal) from x: e^{P_j / 2} as the
/// product of the row's earlier sech.
fn factor(l: &mut [f32], x: &[f32], k: usize) {
    l.fill(0.0);
    l[0] = 1.0;
    rows(k, |i, first| {
        let mut e = 1.0f64; // e^{P_j / 2}
        for j in 0..i {
            let c = coord(x[first + j]);
            l[i * k + j] = (c.z * e) as f32;
            e *= c.sech;
        }
        l[i * k + i] = e as f32;
    });
}

/// ln |J| of the map x -> L.
fn log_jacobian(x: &[f32], k: usize) -> f32 {
    let mut s = 0.0f64;
    rows(k, |i, first| {
        for j in 0..i {
            let x = x[first + j];
            let weight = 1.0 + 0.5 * (i - 1 - j) as f64;
            s += weight * log1m_z_sq(x, coord(x));
        }
    });
    s as f32
}

/// The longest row whose coordinates [`factor_backward`] keeps between
/// its two passes (on the stack: 768 bytes).
const KEPT_COORDS: usize = 32;

/// dx += the gradient of sum(dL * L(x)): for entry j of row i,
/// dL_ij (1 - z_j^2) e^{P_j / 2} - z_j sum_{m > j} dL_im L_im (every later
/// entry of the row and its diagonal, through P; dc/dx = -2z). Two
/// passes forward: the row's whole sum of dL_im L_im, then each entry's
/// later part as that sum less the entries so far (its error is f64's
/// eps times the row's sum of |dL_im L_im|, far below the f32 result's).
fn factor_backward(dx: &mut [f32], dl: &[f32], x: &[f32], k: usize) {
    // A row's coordinates, kept from the first pass for the second (rows
    // longer than this take them again).
    let mut kept = [Coord {
        z: 0.0,
        sech: 0.0,
        t: 0.0,
    }; KEPT_COORDS];
    rows(k, |i, first| {
        let (row, xs) = (&dl[i * k..i * k + i + 1], &x[first..first + i]);
        let keep = i <= KEPT_COORDS;
        let (mut total, mut e) = (0.0f64, 1.0f64);
        for (j, (&d, &x)) in row.iter().zip(xs).enumerate() {
            let c = coord(x);
            if keep {
                kept[j] = c;
            }
            total += d as f64 * c.z * e;
            e *= c.sech;
        }
        total += row[i] as f64 * e;
        let (mut so_far, mut e) = (0.0f64, 1.0f64);
        let it = dx[first..first + i].iter_mut().zip(row).zip(xs);
        for (j, ((dx, &d), &x)) in it.enumerate() {
            let c = if keep { kept[j] } else { coord(x) };
            let d = d as f64;
            so_far += d * c.z * e;
            *dx += (d * c.sech * c.sech * e - c.z * (total - so_far)) as f32;
            e *= c.sech;
        }
    });
}

/// dx += g d(ln |J|)/dx = g (1 + (i - 1 - j) / 2) (-2 z_j).
fn log_jacobian_backward(dx: &mut [f32], g: f32, x: &[f32], k: usize) {
    rows(k, |i, first| {
        for j in 0..i {
            let weight = 1.0 + 0.5 * (i - 1 - j) as f64;
            let z = coord(x[first + j]).z;
            dx[first + j] += (g as f64 * weight * -2.0 * z) as f32;
        }
    });
}

impl Context {
    /// The Cholesky factor L `[K, K]` of a K x K correlation matrix from
    /// K (K - 1) / 2 unconstrained coordinates x (a vector, K >= 2), and
    /// ln |dL/dx|, a scalar: Stan's cholesky_corr_constrain (z = tanh(x),
    /// row by row below the diagonal, each row scaled to unit norm). L's
    /// diagonal is positive and its upper triangle 0; any x gives a valid
    /// factor (an |x| in the tens pins z at +-1 and the rest of its row at
    /// 0). An LKJ(eta) prior on L adds sum_i (K - i - 1 + 2 eta - 2) ln
    /// L_ii (rows from 0) to the density.
    pub fn constrain_cholesky_corr(&mut self, x: Tensor) -> Result<(Tensor, Tensor)> {
        const OP: &str = "constrain_cholesky_corr";
        let ix = self.resolve(OP, x)?;
        let sx = self.entry(ix).shape;
        let k = match sx.dims() {
            &[n] => order_of(n),
            _ => None,
        };
        let Some(k) = k else {
            return Err(Error::BadShape {
                op: OP,
                what: format!(
                    "x must be a vector of K (K - 1) / 2 coordinates (K >= 2: 1, 3, 6, ..), not {sx}"
                ),
            });
        };
        let tracks = self.tracks(&[ix]);
        let l = self.push_output(OP, Shape::from_valid(&[k, k]), tracks)?;
        let l = self.run(Op::CholeskyCorr { x: ix }, l);
        let tracks = self.tracks(&[ix]);
        let j = self.push_output(OP, Shape::scalar(), tracks)?;
        let j = self.run(Op::CholeskyCorrLogJacobian { x: ix }, j);
        Ok((l, j))
    }
}

/// K from the coordinates' count (checked when the op was recorded).
fn order(ctx: &Context, x: u32) -> usize {
    order_of(ctx.entry(x).shape.numel()).unwrap_or(0)
}

pub(crate) fn forward_cholesky_corr(ctx: &mut Context, out: u32, x: u32) {
    let (k, eo, ex) = (order(ctx, x), ctx.entry(out), ctx.entry(x));
    let ([l], [x]) = ctx.access([eo.data], [ex.data]);
    factor(l, x, k);
}

pub(crate) fn backward_cholesky_corr(ctx: &mut Context, out: u32, x: u32) {
    let (Some(dx), Some(dl)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (k, ex) = (order(ctx, x), ctx.entry(x));
    let ([dx], [dl, x]) = ctx.access([dx], [dl, ex.data]);
    factor_backward(dx, dl, x, k);
}

pub(crate) fn forward_cholesky_corr_log_jacobian(ctx: &mut Context, out: u32, x: u32) {
    let (k, eo, ex) = (order(ctx, x), ctx.entry(out), ctx.entry(x));
    let ([j], [x]) = ctx.access([eo.data], [ex.data]);
    j[0] = log_jacobian(x, k);
}

pub(crate) fn backward_cholesky_corr_log_jacobian(ctx: &mut Context, out: u32, x: u32) {
    let (Some(dx), Some(g)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let (k, ex) = (order(ctx, x), ctx.entry(x));
    let ([dx], [g, x]) = ctx.access([dx], [g, ex.data]);
    log_jacobian_backward(dx, g[0], x, k);
}

#[cfg(test)]
#[path = "cholesky_corr_tests.rs"]
mod tests;

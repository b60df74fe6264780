//! Stan's normal_id_glm_lpdf as one op: the log density of
//! y ~ normal(alpha + X beta, sigma) summed over the rows, with its
//! gradient in every argument. Written with the general ops, a regression's likelihood is a
//! product, a loss and a handful of scalar ops, each paying the replay's
//! per-op cost and the product BLAS's per-call cost; here it is one pass
//! over X forward (the residuals saved) and one back.
//!
//! X is x [n, d] or, transposed, x [d, n] (as `matmul`'s flags): the second
//! keeps each column of X contiguous, so both passes run along the rows in
//! vector registers. X beta is taken in f32, as a product would be (f64
//! there halves the vector width and adds conversions: it ran slower than
//! the unfused ops); the sums over the rows are taken in f64, but for X^T r
//! on the transposed layout with one sigma (f32, in 64 lanes).

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::lanes;
use crate::shape::Shape;
use crate::simd;

use super::Op;

/// ln sqrt(2 pi).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Rows per block of the forward pass (held in registers: four AVX-512
/// vectors).
const BLOCK: usize = 64;

/// The operands' values as the kernels read them. `alpha` and `sigma` are
/// one element (the same for every row) or n.
struct Glm<'a> {
    y: &'a [f32],
    x: &'a [f32],
    alpha: &'a [f32],
    beta: &'a [f32],
    sigma: &'a [f32],
    n: usize,
    d: usize,
    transposed: bool,
}

/// v's element for row i: v[0] when v has one element.
#[inline(always)]
fn per_row(v: &[f32], i: usize) -> f64 {
    v[if v.len() == 1 { 0 } else { i }] as f64
}

/// Lanes of [`dot_wide`]: four AVX-512 registers' worth, so four
/// independent chains of adds however wide the instruction set.
const WIDE: usize = 64;

/// sum_i a_i b_i in f32, element i in lane i mod 64 of its chunk (the tail
/// after), the lanes then added in a fixed order: the same bits on every
/// instruction set. Its error is at most about (n / 64 + 7) eps of the
/// terms' magnitudes.
#[inline(always)]
fn dot_wide(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; WIDE];
    let (ca, cb) = (a.chunks_exact(WIDE), b.chunks_exact(WIDE));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        let (x, y): (&[f32; WIDE], &[f32; WIDE]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for k in 0..WIDE {
            acc[k] += x[k] * y[k];
        }
    }
    // The rest in eighths of a chunk (lanes 0..8), then one by one.
    let (ea, eb) = (ra.chunks_exact(8), rb.chunks_exact(8));
    let tail: f32 = (ea.remainder().iter().zip(eb.remainder()))
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ea.zip(eb) {
        let (x, y): (&[f32; 8], &[f32; 8]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    // Fold halves: 64 -> 32 -> .. -> 1, a fixed tree.
    let mut width = WIDE;
    while width > 1 {
        width /= 2;
        for k in 0..width {
            acc[k] += acc[k + width];
        }
    }
    acc[0] + tail
}

impl Glm<'_> {
    /// X_ij.
    #[inline(always)]
    fn x_at(&self, i: usize, j: usize) -> f32 {
        if self.transposed {
            self.x[j * self.n + i]
        } else {
            self.x[i * self.d + j]
        }
    }

    /// 1 / sigma_i^2 for row i.
    #[inline(always)]
    fn inv_var(&self, i: usize) -> f64 {
        let s = per_row(self.sigma, i);
        1.0 / (s * s)
    }

    /// Writes r = y - alpha - X beta in f32 (as a product and a
    /// subtraction would: each product and difference rounded, in the
    /// order y, alpha, then X's columns) and returns the log density, its
    /// sums in f64. Both layouts take the same steps, so give the same
    /// bits.
    #[inline(always)]
    fn forward(&self, r: &mut [f32]) -> f64 {
        let n = self.n;
        for start in (0..n).step_by(BLOCK) {
            let len = BLOCK.min(n - start);
            let (t, y) = (&mut r[start..start + len], &self.y[start..start + len]);
            if let &[a] = self.alpha {
                for (t, &y) in t.iter_mut().zip(y) {
                    *t = y - a;
                }
            } else {
                let a = &self.alpha[start..start + len];
                for ((t, &y), &a) in t.iter_mut().zip(y).zip(a) {
                    *t = y - a;
                }
            }
            if self.transposed {
                self.subtract_columns(t, start);
            } else {
                for (j, &b) in self.beta.iter().enumerate() {
                    for (k, t) in t.iter_mut().enumerate() {
                        *t -= self.x[(start + k) * self.d + j] * b;
                    }
                }
            }
        }
        if let &[s] = self.sigma {
            let s = s as f64;
            let sq = lanes::sum_squares_f64(r);
            -0.5 * sq / (s * s) - n as f64 * (s.ln() + LN_SQRT_2PI)
        } else {
            let sq = lanes::sum_indexed_f64(n, |i| {
                let (r, s) = (r[i] as f64, self.sigma[i] as f64);
                r * r / (s * s)
            });
            let log_sigma = lanes::sum_indexed_f64(n, |i| (self.sigma[i] as f64).ln());
            -0.5 * sq - log_sigma - n as f64 * LN_SQRT_2PI
        }
    }

    /// t -= X beta for the rows from `start` (X transposed: its columns
    /// contiguous). A full block is held in registers through every
    /// column (a pass per column loaded and stored it d times); each
    /// row's subtractions keep the columns' order.
    #[inline(always)]
    fn subtract_columns(&self, t: &mut [f32], start: usize) {
        let n = self.n;
        if let Ok(t) = <&mut [f32; BLOCK]>::try_from(&mut *t) {
            let mut acc = *t;
            for (j, &b) in self.beta.iter().enumerate() {
                let col: &[f32; BLOCK] = self.x[j * n + start..][..BLOCK].try_into().unwrap();
                for k in 0..BLOCK {
                    acc[k] -= col[k] * b;
                }
            }
            *t = acc;
            return;
        }
        for (j, &b) in self.beta.iter().enumerate() {
            let col = &self.x[j * n + start..][..t.len()];
            for (t, &x) in t.iter_mut().zip(col) {
                *t -= x * b;
            }
        }
    }

    /// r_i / sigma_i^2, the log density's derivative in row i's mean.
    #[inline(always)]
    fn slope(&self, r: &[f32], i: usize) -> f64 {
        r[i] as f64 * self.inv_var(i)
    }

    /// Adds g times the gradient in operand `k` (y, x, alpha, beta, sigma)
    /// into `dv`, from the saved residuals r.
    #[inline(always)]
    fn backward(&self, k: usize, dv: &mut [f32], r: &[f32], g: f64) {
        let (n, d) = (self.n, self.d);
        let one_sigma = self.sigma.len() == 1;
        match k {
            0 => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv -= (g * self.slope(r, i)) as f32;
                }
            }
            // dX_ij = r_i beta_j / sigma_i^2, along x's rows in memory.
            1 if self.transposed => {
                for (j, &b) in self.beta.iter().enumerate() {
                    let row = &mut dv[j * n..][..n];
                    for (i, dv) in row.iter_mut().enumerate() {
                        *dv += (g * self.slope(r, i) * b as f64) as f32;
                    }
                }
            }
            1 => {
                for (i, row) in dv.chunks_exact_mut(d).enumerate() {
                    let w = g * self.slope(r, i);
                    for (dv, &b) in row.iter_mut().zip(self.beta) {
                        *dv += (w * b as f64) as f32;
                    }
                }
            }
            2 if dv.len() == 1 => {
                let s = if one_sigma {
                    lanes::sum_indexed_f64(n, |i| r[i] as f64) * self.inv_var(0)
                } else {
                    lanes::sum_indexed_f64(n, |i| self.slope(r, i))
                };
                dv[0] += (g * s) as f32;
            }
            2 => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv += (g * self.slope(r, i)) as f32;
                }
            }
            3 => {
                for (j, dv) in dv.iter_mut().enumerate() {
                    let s = match (self.transposed, one_sigma) {
                        // A contiguous column of X and one sigma.
                        (true, true) => dot_wide(&self.x[j * n..][..n], r) as f64 * self.inv_var(0),
                        (true, false) => lanes::sum_indexed_f64(n, |i| {
                            self.x[j * n + i] as f64 * self.slope(r, i)
                        }),
                        _ => {
                            lanes::sum_indexed_f64(n, |i| self.x_at(i, j) as f64 * self.slope(r, i))
                        }
                    };
                    *dv += (g * s) as f32;
                }
            }
            _ if one_sigma => {
                // d/dsigma of -n ln sigma - sum r^2 / (2 sigma^2).
                let s = self.sigma[0] as f64;
                let sq = lanes::sum_squares_f64(r);
                dv[0] += (g * (sq / (s * s * s) - n as f64 / s)) as f32;
            }
            _ => {
                for (i, dv) in dv.iter_mut().enumerate() {
                    let (s, r) = (self.sigma[i] as f64, r[i] as f64);
                    *dv += (g * (r * r / (s * s * s) - 1.0 / s)) as f32;
                }
            }
        }
    }
}

impl Context {
    /// Stan's normal_id_glm_lpdf: sum over the n rows of
    /// ln N(y_i | alpha_i + X_i beta, sigma_i), the normalising constant
    /// included, as a scalar. y is [n]; X is x [n, d], or x [d, n] read as its transpose
    /// when `transpose_x` (the faster layout); beta is [d]; alpha and sigma
    /// are one element or n. Every operand gets a gradient. A sigma that is
    /// not positive gives NaN.
    pub fn normal_id_glm_lpdf(
        &mut self,
        y: Tensor,
        x: Tensor,
        transpose_x: bool,
        alpha: Tensor,
        beta: Tensor,
        sigma: Tensor,
    ) -> Result<Tensor> {
        const OP: &str = "normal_id_glm_lpdf";
        let (iy, ix) = (self.resolve(OP, y)?, self.resolve(OP, x)?);
        let (ia, ib, is) = (
            self.resolve(OP, alpha)?,
            self.resolve(OP, beta)?,
            self.resolve(OP, sigma)?,
        );
        let [sy, sx, sa, sb, ss] = [iy, ix, ia, ib, is].map(|i| self.entry(i).shape);
        let &[n] = sy.dims() else {
            return Err(Error::BadShape {
                op: OP,
                what: format!("y must be a vector [n], not {sy}"),
            });
        };
        let (rows, d) = match (sx.dims(), transpose_x) {
            (&[r, d], false) => (r, d),
            (&[d, r], true) => (r, d),
            _ => (0, 0),
        };
        let mismatch = |what, b| Error::ShapeMismatch {
            op: OP,
            what,
            a: sy,
            b,
        };
        if rows != n {
            return Err(mismatch(
                if transpose_x {
                    "x must be [d, n] (transposed) for y [n]"
                } else {
                    "x must be [n, d] for y [n]"
                },
                sx,
            ));
        }
        if sb.dims() != [d] {
            return Err(Error::ShapeMismatch {
                op: OP,
                what: "beta must be [d] for x's d columns",
                a: sx,
                b: sb,
            });
        }
        for (what, s) in [
            ("alpha must be one element or [n] for y [n]", sa),
            ("sigma must be one element or [n] for y [n]", ss),
        ] {
            if s.numel() != 1 && s.dims() != [n] {
                return Err(mismatch(what, s));
            }
        }
        let tracks = self.tracks(&[iy, ix, ia, ib, is]);
        let resid = self.alloc_scratchable::<f32>(OP, n)?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let op = Op::NormalIdGlm {
            y: iy,
            x: ix,
            alpha: ia,
            beta: ib,
            sigma: is,
            transposed: transpose_x,
            resid,
        };
        Ok(self.run(op, out))
    }
}

/// The five operands' buffers and the shape facts the kernels need.
fn operands(ctx: &Context, ids: [u32; 5]) -> ([Buf; 5], usize, usize) {
    let n = ctx.entry(ids[0]).shape.numel();
    let d = ctx.entry(ids[3]).shape.numel();
    (ids.map(|i| ctx.entry(i).data), n, d)
}

/// Builds the kernels' view of the operands from their slices.
fn view<'a>(v: [&'a [f32]; 5], n: usize, d: usize, transposed: bool) -> Glm<'a> {
    let [y, x, alpha, beta, sigma] = v;
    Glm {
        y,
        x,
        alpha,
        beta,
        sigma,
        n,
        d,
        transposed,
    }
}

pub(crate) fn forward_normal_id_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 5],
    transposed: bool,
    resid: Buf,
) {
    let (bufs, n, d) = operands(ctx, ids);
    let lp = ctx.entry(out).data;
    let ([lp, r], v) = ctx.access([lp, resid], bufs);
    let m = view(v, n, d, transposed);
    lp[0] = simd::dispatch!(m.forward(r)) as f32;
}

pub(crate) fn backward_normal_id_glm(
    ctx: &mut Context,
    out: u32,
    ids: [u32; 5],
    transposed: bool,
    resid: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let (bufs, n, d) = operands(ctx, ids);
    let g = ctx.read_only(dout)[0] as f64;
    // One operand at a time, in input order: two operands may be the same
    // tensor (alpha and sigma both a shared scalar), their gradients then
    // added in turn.
    for (k, &id) in ids.iter().enumerate() {
        let Some(dv) = ctx.grad_of(id) else {
            continue;
        };
        let [y, x, alpha, beta, sigma] = bufs;
        let ([dv], [r, y, x, alpha, beta, sigma]) =
            ctx.access([dv], [resid, y, x, alpha, beta, sigma]);
        let m = view([y, x, alpha, beta, sigma], n, d, transposed);
        simd::dispatch!(m.backward(k, dv, r, g));
    }
}

#[cfg(test)]
#[path = "glm_tests.rs"]
mod tests;

//! Rotary position embeddings (RoPE) as Hugging Face's Llama applies them:
//! `q * cos + rotate_half(q) * sin`, element i of a head pairing with
//! element i + D/2.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
// Rows are cut as LayerNorm's and RMSNorm's are.
use crate::ops::norm::row_tasks;
use crate::pool;
use crate::simd;

/// The rotation table: cos then sin of (offset + t) * theta^(-2i/D), for
/// t < T and i < D/2, each `[T, D/2]`, so `table` is `[2, T, D/2]`. The
/// angle, its frequency and the cos and sin are computed in f64 and rounded
/// once: each entry is within half an f32 ulp of exact.
fn rope_table(table: &mut [f32], theta: f64, offset: usize, t: usize, d: usize) {
    let half = d / 2;
    let (cos, sin) = table.split_at_mut(t * half);
    for i in 0..half {
        let freq = theta.powf(-2.0 * i as f64 / d as f64);
        for p in 0..t {
            let angle = (offset + p) as f64 * freq;
            cos[p * half + i] = angle.cos() as f32;
            sin[p * half + i] = angle.sin() as f32;
        }
    }
}

/// y = rotate(x) per row: for i < D/2, with c, s the table's entries at
/// the row's position t,
/// y[i] = x[i] c - x[i + D/2] s and y[i + D/2] = x[i + D/2] c + x[i] s.
/// x, y: rows of D of `[B*H, T, D]`, the first of them row `first` (its
/// position `first % T`); table: `[2, T, D/2]`.
#[inline(always)]
fn rope_forward(y: &mut [f32], x: &[f32], table: &[f32], first: usize, t: usize, d: usize) {
    let half = d / 2;
    let (cos, sin) = table.split_at(t * half);
    let rows = y.chunks_exact_mut(d).zip(x.chunks_exact(d));
    for (j, (yr, xr)) in rows.enumerate() {
        let p = (first + j) % t;
        let (c, s) = (&cos[p * half..][..half], &sin[p * half..][..half]);
        let (y1, y2) = yr.split_at_mut(half);
        let (x1, x2) = xr.split_at(half);
        let pairs = y1.iter_mut().zip(y2).zip(x1.iter().zip(x2));
        for (((ya, yb), (&xa, &xb)), (&c, &s)) in pairs.zip(c.iter().zip(s)) {
            *ya = xa * c - xb * s;
            *yb = xb * c + xa * s;
        }
    }
}

/// dx += the rotation of dout by the opposite angle (the transpose of the
/// forward's rotation): dx[i] += g[i] c + g[i + D/2] s, dx[i + D/2] +=
/// g[i + D/2] c - g[i] s. dx, dout: rows of `[B*H, T, D]` from row
/// `first`, as in [`rope_forward`]; table: `[2, T, D/2]`.
#[inline(always)]
fn rope_backward(dx: &mut [f32], dout: &[f32], table: &[f32], first: usize, t: usize, d: usize) {
    let half = d / 2;
    let (cos, sin) = table.split_at(t * half);
    let rows = dx.chunks_exact_mut(d).zip(dout.chunks_exact(d));
    for (j, (dr, gr)) in rows.enumerate() {
        let p = (first + j) % t;
        let (c, s) = (&cos[p * half..][..half], &sin[p * half..][..half]);
        let (d1, d2) = dr.split_at_mut(half);
        let (g1, g2) = gr.split_at(half);
        let pairs = d1.iter_mut().zip(d2).zip(g1.iter().zip(g2));
        for (((da, db), (&ga, &gb)), (&c, &s)) in pairs.zip(c.iter().zip(s)) {
            *da += ga * c + gb * s;
            *db += gb * c - ga * s;
        }
    }
}

impl Context {
    /// Rotary position embeddings of x `[B, H, T, D]` (heads before time,
    /// Hugging Face's layout after its transpose) -> `[B, H, T, D]`: the
    /// pair (i, i + D/2) of each head at time t turns by the angle
    /// (offset + t) * theta^(-2i/D), i < D/2. D must be even; theta finite
    /// and > 0 (Llama: 10000 or 500000); offset + T at most 2^32 (a
    /// cached prefix's length; 0 for a whole sequence).
    pub fn rope(&mut self, x: Tensor, theta: f32, offset: usize) -> Result<Tensor> {
        const OP: &str = "rope";
        let ix = self.resolve(OP, x)?;
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("theta {theta} must be finite and > 0"),
            });
        }
        let ex = self.entry(ix);
        let dims = ex.shape.dims();
        if dims.len() != 4 || !dims[3].is_multiple_of(2) {
            return Err(Error::BadShape {
                op: OP,
                what: format!(
                    "x {} must be [B, H, T, D] with an even head size D",
                    ex.shape
                ),
            });
        }
        let t = dims[2];
        let offset = match u32::try_from(offset) {
            Ok(o) if o as u64 + t as u64 <= 1 << 32 => o,
            _ => {
                return Err(Error::InvalidArgument {
                    op: OP,
                    what: format!("offset {offset} + T {t} must be at most 2^32"),
                });
            }
        };
        let tracks = self.tracks(&[ix]);
        let table = self.alloc_scratchable::<f32>(OP, t * dims[3])?;
        let out = self.push_output(OP, ex.shape, tracks)?;
        let op = Op::Rope {
            x: ix,
            theta,
            offset,
            table,
        };
        Ok(self.run(op, out))
    }
}

/// Fills the table, then rotates x into the output: rows are independent,
/// so row tasks (cut by the shape alone) change no bit.
pub(crate) fn forward_rope(
    ctx: &mut Context,
    out: u32,
    x: u32,
    theta: f32,
    offset: u32,
    table: Buf,
) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let (t, d) = (ex.shape.dims()[2], ex.shape.dims()[3]);
    let rows = ex.shape.rows();
    let n = row_tasks(rows, d);
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y, tab], [x]) = ctx.access_on(par, [eo.data, table], [ex.data]);
    rope_table(tab, theta as f64, offset as usize, t, d);
    let tab = &*tab;
    if n == 1 {
        return simd::dispatch!(rope_forward(y, x, tab, 0, t, d));
    }
    fastmath::run_parts(pool, fastmath::row_parts(y, d, n), &|i, y| {
        let first = pool::task_range(rows, n, i).start;
        let x = &x[first * d..][..y.len()];
        simd::dispatch!(rope_forward(y, x, tab, first, t, d))
    });
}

/// Rotates dout back into x's gradient with the table the forward saved
/// (the forward's row tasks).
pub(crate) fn backward_rope(ctx: &mut Context, out: u32, x: u32, table: Buf) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let Some(dx) = ctx.grad_of(x) else {
        return;
    };
    let ex = ctx.entry(x);
    let (t, d) = (ex.shape.dims()[2], ex.shape.dims()[3]);
    let rows = ex.shape.rows();
    let n = row_tasks(rows, d);
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [dx], [g, tab]) = ctx.access_on(par, [dx], [dout, table]);
    if n == 1 {
        return simd::dispatch!(rope_backward(dx, g, tab, 0, t, d));
    }
    fastmath::run_parts(pool, fastmath::row_parts(dx, d, n), &|i, dx| {
        let first = pool::task_range(rows, n, i).start;
        let g = &g[first * d..][..dx.len()];
        simd::dispatch!(rope_backward(dx, g, tab, first, t, d))
    });
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, Lcg, gradcheck};

    /// rope in f64 from the f32 input: [B*H, T, D].
    fn reference(x: &[f32], theta: f64, offset: usize, t: usize, d: usize) -> Vec<f64> {
        let half = d / 2;
        let mut y = vec![0.0; x.len()];
        for (k, row) in x.chunks(d).enumerate() {
            let pos = (offset + k % t) as f64;
            for i in 0..half {
                let a = pos * theta.powf(-2.0 * i as f64 / d as f64);
                let (x1, x2) = (row[i] as f64, row[i + half] as f64);
                y[k * d + i] = x1 * a.cos() - x2 * a.sin();
                y[k * d + i + half] = x2 * a.cos() + x1 * a.sin();
            }
        }
        y
    }

    /// Against f64 (angles and products exact to 1e-16): each output is
    /// two products of f32 values (|x| <= 1, table entries within half an
    /// ulp of exact) and a sum, so within 4 * 2^-24 * (|x1| + |x2|) of
    /// the f64 value; we test 3e-7 absolute with |x| <= 1.
    #[test]
    fn rope_matches_f64_reference() {
        let (b, h, t, d, offset) = (2, 3, 17, 16, 4000);
        let mut rng = Lcg(5);
        let x: Vec<f32> = (0..b * h * t * d).map(|_| rng.range(-1.0, 1.0)).collect();
        let mut c = crate::Context::new();
        let xt = c.tensor(&[b, h, t, d], &x).unwrap();
        let y = c.rope(xt, 10000.0, offset).unwrap();
        let mut got = vec![0.0; x.len()];
        c.read(y, &mut got).unwrap();
        let want = reference(&x, 10000.0, offset, t, d);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(&g, &w)| (g as f64 - w).abs())
            .fold(0.0, f64::max);
        eprintln!("[rope vs f64] worst abs error {worst:.2e}");
        assert!(worst < 3e-7, "{worst}");
    }

    /// Hugging Face computes inv_freq = 1 / theta^(2i/D) in float32, the
    /// angle pos * inv_freq in float32, then cos and sin in float32: its
    /// angle is off by up to about 2 f32 roundings of pos * inv_freq, i.e.
    /// pos * inv_freq * 2^-23 (plus half an ulp from cos/sin). Our table is
    /// exact to half an ulp, so the two agree within that bound; at
    /// position 8191 and theta 500000 (Llama 3) we test it elementwise.
    #[test]
    fn table_matches_hugging_face_float32_within_its_angle_rounding() {
        let (t, d, offset, theta) = (64, 128, 8128, 500000.0f32);
        let mut table = vec![0.0f32; t * d];
        super::rope_table(&mut table, theta as f64, offset, t, d);
        let half = d / 2;
        for p in 0..t {
            let pos = (offset + p) as f32;
            for i in 0..half {
                let inv_freq = 1.0 / theta.powf((2 * i) as f32 / d as f32);
                let angle = pos * inv_freq;
                let bound = angle as f64 * 2f64.powi(-23) + 2f64.powi(-24);
                let (c, s) = (table[p * half + i], table[t * half + p * half + i]);
                assert!(
                    (c as f64 - angle.cos() as f64).abs() <= 1.5 * bound,
                    "cos {p} {i}"
                );
                assert!(
                    (s as f64 - angle.sin() as f64).abs() <= 1.5 * bound,
                    "sin {p} {i}"
                );
            }
        }
    }

    /// Position 0 is the identity; a rotation keeps each pair's norm.
    #[test]
    fn rotates_pairs_half_a_head_apart() {
        let mut c = crate::Context::new();
        let x = c
            .tensor(&[1, 1, 2, 4], &[1., 2., 3., 4., 1., 0., 0., 0.])
            .unwrap();
        let y = c.rope(x, 10000.0, 0).unwrap();
        let mut v = [0.0; 8];
        c.read(y, &mut v).unwrap();
        assert_eq!(&v[..4], &[1., 2., 3., 4.]);
        // Position 1, pair (0, 2): angle 1 radian.
        assert_eq!(&v[4..], &[1f64.cos() as f32, 0.0, 1f64.sin() as f32, 0.0]);
    }

    #[test]
    fn gradcheck_rope() {
        gradcheck(Check::new("rope", &[&[2, 2, 3, 6]]), |c, x| {
            c.rope(x[0], 100.0, 5)
        });
    }

    #[test]
    fn errors_name_the_op_and_shape() {
        let mut c = crate::Context::new();
        for dims in [&[1, 2, 3, 5][..], &[2, 3, 4]] {
            let n = dims.iter().product();
            let x = c.tensor(dims, &vec![0.0; n]).unwrap();
            let e = c.rope(x, 10000.0, 0).unwrap_err().to_string();
            assert!(e.contains("rope") && e.contains("even"), "{e}");
        }
        let x = c.tensor(&[1, 1, 2, 4], &[0.0; 8]).unwrap();
        for theta in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = c.rope(x, theta, 0).unwrap_err().to_string();
            assert!(e.contains("rope") && e.contains("theta"), "{e}");
        }
        let e = c.rope(x, 10.0, u32::MAX as usize).unwrap_err().to_string();
        assert!(e.contains("rope") && e.contains("offset"), "{e}");
        assert!(c.rope(x, 10.0, u32::MAX as usize - 1).is_ok());
    }

    /// Cut into several tasks, forward and dx equal the single-task
    /// kernels bit for bit.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn parallel_path_matches_kernels() {
        let (b, h, t, d, offset) = (2, 8, 384, 64, 3);
        let rows = b * h * t;
        assert!(crate::ops::norm::row_tasks(rows, d) >= 4);
        let mut rng = Lcg(9);
        let x: Vec<f32> = (0..rows * d).map(|_| rng.range(-2.0, 2.0)).collect();
        let r: Vec<f32> = (0..rows * d).map(|_| rng.range(-1.0, 1.0)).collect();
        let mut ctx = crate::Context::new();
        let px = ctx.param(&[b, h, t, d], Some(&x)).unwrap();
        let y = ctx.rope(px, 10000.0, offset).unwrap();
        assert!(ctx.pool_started());
        let rt = ctx.tensor(&[b, h, t, d], &r).unwrap();
        let yr = ctx.mul(y, rt).unwrap();
        let l = ctx.sum(yr).unwrap();
        ctx.backward(l).unwrap();
        let (mut gy, mut gdx) = (vec![0.0; rows * d], vec![0.0; rows * d]);
        ctx.read(y, &mut gy).unwrap();
        ctx.read_grad(px, &mut gdx).unwrap();
        let mut table = vec![0.0; t * d];
        super::rope_table(&mut table, 10000.0, offset, t, d);
        let (mut wy, mut wdx) = (vec![0.0; rows * d], vec![0.0; rows * d]);
        super::rope_forward(&mut wy, &x, &table, 0, t, d);
        super::rope_backward(&mut wdx, &r, &table, 0, t, d);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same(&gy, &wy) && same(&gdx, &wdx));
    }
}

//! Group normalisation over `[N, C, *]`: the C channels split into G
//! groups, each image's group normalised on its own (its `C / G` channels
//! times every position form one contiguous row), then scaled and shifted
//! per channel (each of the weight and bias optional, as batch norm's).
//! Row tasks for the normalisation and dx, channel tasks for
//! the weight and bias sums; both cut by shape alone, sums in f64 in one
//! fixed order, so the bits do not depend on the thread count.

use crate::arena::{Buf, Storage};
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::ops::batch_norm::{check_affine, optional_data, present, scale_at, shift_at};
use crate::ops::norm::row_tasks;
use crate::pool;
use std::ops::Range;

/// PyTorch's default.
pub const GROUP_NORM_EPS: f32 = 1e-5;

/// The sizes of `[N, C, *]` cut into G groups.
#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    c: usize,
    g: usize,
    /// Positions per plane.
    s: usize,
}

impl Dims {
    fn of(shape: crate::shape::Shape, groups: usize) -> Dims {
        let d = shape.dims();
        Dims {
            n: d[0],
            c: d[1],
            g: groups,
            s: d[2..].iter().product(),
        }
    }

    /// One row's length: its group's channels times the positions.
    fn row_len(self) -> usize {
        self.c / self.g * self.s
    }

    fn rows(self) -> usize {
        self.n * self.g
    }

    /// The channels of row `r`, in order: one plane of the row each.
    fn channels_of(self, r: usize) -> Range<usize> {
        let per_group = self.c / self.g;
        let first = (r % self.g) * per_group;
        first..first + per_group
    }
}

/// Normalises the rows `rows`, saving each one's mean and 1/std; scales
/// by w and shifts by b where present.
#[allow(clippy::too_many_arguments)]
fn forward_rows(
    y: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    d: Dims,
    rows: Range<usize>,
    eps: f32,
) {
    let l = d.row_len();
    let xs = x[rows.start * l..].chunks_exact(l);
    let it = y.chunks_exact_mut(l).zip(xs).zip(mean.iter_mut().zip(rstd));
    for (r, ((yr, xr), (m, rs))) in rows.zip(it) {
        let mu = xr.iter().map(|&v| v as f64).sum::<f64>() / l as f64;
        let var = xr.iter().map(|&v| (v as f64 - mu).powi(2)).sum::<f64>() / l as f64;
        let (mu32, rs32) = (mu as f32, (1.0 / (var + eps as f64).sqrt()) as f32);
        // The row's planes, one per channel of its group.
        let planes = yr.chunks_exact_mut(d.s).zip(xr.chunks_exact(d.s));
        for (ch, (yp, xp)) in d.channels_of(r).zip(planes) {
            let (wv, bv) = (scale_at(w, ch), shift_at(b, ch));
            for (yv, &xv) in yp.iter_mut().zip(xp) {
                *yv = (xv - mu32) * rs32 * wv + bv;
            }
        }
        (*m, *rs) = (mu32, rs32);
    }
}

/// dx += rstd (dout w - mean(dout w) - xhat mean(dout w xhat)) over the
/// rows `rows`; w is 1 where absent.
#[allow(clippy::too_many_arguments)]
fn dx_rows(
    dx: &mut [f32],
    g: &[f32],
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    w: Option<&[f32]>,
    d: Dims,
    rows: Range<usize>,
) {
    let l = d.row_len();
    let at = rows.start * l;
    let it = dx
        .chunks_exact_mut(l)
        .zip(g[at..].chunks_exact(l))
        .zip(x[at..].chunks_exact(l));
    for (r, ((dr, gr), xr)) in rows.zip(it) {
        let (mu, rs) = (mean[r], rstd[r]);
        let (mut a1, mut a2) = (0.0f64, 0.0f64);
        let planes = gr.chunks_exact(d.s).zip(xr.chunks_exact(d.s));
        for (ch, (gp, xp)) in d.channels_of(r).zip(planes) {
            let wv = scale_at(w, ch) as f64;
            for (&gv, &xv) in gp.iter().zip(xp) {
                let gw = gv as f64 * wv;
                a1 += gw;
                a2 += gw * ((xv - mu) * rs) as f64;
            }
        }
        let (m1, m2) = ((a1 / l as f64) as f32, (a2 / l as f64) as f32);
        let planes = dr
            .chunks_exact_mut(d.s)
            .zip(gr.chunks_exact(d.s))
            .zip(xr.chunks_exact(d.s));
        for (ch, ((dp, gp), xp)) in d.channels_of(r).zip(planes) {
            let wv = scale_at(w, ch);
            for ((o, &gv), &xv) in dp.iter_mut().zip(gp).zip(xp) {
                let xhat = (xv - mu) * rs;
                *o += rs * (gv * wv - m1 - xhat * m2);
            }
        }
    }
}

/// Per channel: sum(dout) and sum(dout * xhat), in f64.
#[allow(clippy::too_many_arguments)]
fn channel_sums(
    sg: &mut [f32],
    sgx: &mut [f32],
    g: &[f32],
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    d: Dims,
    channels: Range<usize>,
) {
    let per_group = d.c / d.g;
    for (k, ch) in channels.enumerate() {
        let (mut a, mut bsum) = (0.0f64, 0.0f64);
        for i in 0..d.n {
            let row = i * d.g + ch / per_group;
            let (mu, rs) = (mean[row], rstd[row]);
            let p = (i * d.c + ch) * d.s..(i * d.c + ch + 1) * d.s;
            for (&gv, &xv) in g[p.clone()].iter().zip(&x[p]) {
                a += gv as f64;
                bsum += gv as f64 * ((xv - mu) * rs) as f64;
            }
        }
        sg[k] = a as f32;
        sgx[k] = bsum as f32;
    }
}

impl Context {
    /// Group normalisation of x `[N, C, *]` (rank 2 or more) over `groups`
    /// groups (C a multiple of it), with weight and bias `[C]`, each
    /// optional (None: scale 1, shift 0; neither is PyTorch's
    /// `affine=False`); `eps`
    /// (PyTorch's 1e-5 is [`GROUP_NORM_EPS`]) is added to each group's
    /// biased variance. The same in training and evaluation mode.
    pub fn group_norm(
        &mut self,
        x: Tensor,
        w: Option<Tensor>,
        b: Option<Tensor>,
        groups: usize,
        eps: f32,
    ) -> Result<Tensor> {
        self.group_norm_named("group_norm", x, [w, b], groups, eps)
    }

    /// [`group_norm`](Self::group_norm) whose errors name `op`: the C
    /// function called (`ag_group_norm_opt`'s are `group_norm_opt`).
    pub(crate) fn group_norm_named(
        &mut self,
        op: &'static str,
        x: Tensor,
        [w, b]: [Option<Tensor>; 2],
        groups: usize,
        eps: f32,
    ) -> Result<Tensor> {
        let ix = self.resolve(op, x)?;
        let (iw, ib) = (
            w.map(|t| self.resolve(op, t)).transpose()?,
            b.map(|t| self.resolve(op, t)).transpose()?,
        );
        let ex = self.entry(ix);
        if ex.shape.ndim() < 2 {
            return Err(Error::InvalidArgument {
                op,
                what: format!("x {} must be [N, C, *] (rank 2 or more)", ex.shape),
            });
        }
        let c = ex.shape.dims()[1];
        if groups == 0 || !c.is_multiple_of(groups) {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "{groups} groups do not divide the {c} channels of x {}",
                    ex.shape
                ),
            });
        }
        check_affine(self, op, [iw, ib], ex.shape, c)?;
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(Error::InvalidArgument {
                op,
                what: format!("eps {eps} must be finite and above 0"),
            });
        }
        let d = Dims::of(ex.shape, groups);
        // An absent parameter stands in as x (a repeat changes nothing).
        let tracks = self.tracks(&[ix, iw.unwrap_or(ix), ib.unwrap_or(ix)]);
        let saved = self.alloc_scratchable::<f32>(op, 2 * d.rows() + 2 * c)?;
        let out = self.push_output(op, ex.shape, tracks)?;
        let record = Op::GroupNorm {
            x: ix,
            w: iw,
            b: ib,
            groups: groups as u32,
            eps,
            saved,
        };
        Ok(self.run(record, out))
    }
}

/// The parts of the saved buffer: each row's mean and 1/std, then the
/// per-channel gradient sums.
fn parts(saved: Buf, d: Dims) -> [Buf; 4] {
    let (r, c) = (d.rows(), d.c);
    [
        Storage::sub(saved, 0, r),
        Storage::sub(saved, r, r),
        Storage::sub(saved, 2 * r, c),
        Storage::sub(saved, 2 * r + c, c),
    ]
}

/// The inputs are x, and w and b where present.
pub(crate) fn forward_group_norm(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    [iw, ib]: [Option<u32>; 2],
    groups: usize,
    eps: f32,
    saved: Buf,
) {
    let ex = ctx.entry(ix);
    let (wd, bd) = (
        optional_data(ctx, iw, ex.data),
        optional_data(ctx, ib, ex.data),
    );
    let d = Dims::of(ex.shape, groups);
    let [mean, rstd, _, _] = parts(saved, d);
    let n = row_tasks(d.rows(), d.row_len());
    let par = n > 1 && ctx.want_pool(ex.shape.numel() * fastmath::ELEMENT_COST);
    let (pool, [y, m, r], [x, w, b]) =
        ctx.access_on(par, [ctx.entry(out).data, mean, rstd], [ex.data, wd, bd]);
    let (w, b) = (present(w), present(b));
    let parts = fastmath::row_parts(y, d.row_len(), n)
        .zip(fastmath::row_parts(m, 1, n))
        .zip(fastmath::row_parts(r, 1, n));
    fastmath::run_parts(pool, parts, &|i, ((y, m), r)| {
        forward_rows(y, m, r, x, w, b, d, pool::task_range(d.rows(), n, i), eps)
    });
}

/// The inputs are x, and w and b where present.
pub(crate) fn backward_group_norm(
    ctx: &mut Context,
    out: u32,
    ix: u32,
    [iw, ib]: [Option<u32>; 2],
    groups: usize,
    saved: Buf,
) {
    let Some(dout) = ctx.grad_out(out) else {
        return;
    };
    let ex = ctx.entry(ix);
    let wd = optional_data(ctx, iw, ex.data);
    let d = Dims::of(ex.shape, groups);
    let [mean, rstd, sg, sgx] = parts(saved, d);
    let work = ex.shape.numel() * fastmath::ELEMENT_COST;
    if let Some(dx) = ctx.grad_of(ix) {
        let n = row_tasks(d.rows(), d.row_len());
        let par = n > 1 && ctx.want_pool(work);
        let (pool, [dx], [g, x, m, r, w]) =
            ctx.access_on(par, [dx], [dout, ex.data, mean, rstd, wd]);
        let w = present(w);
        fastmath::run_parts(pool, fastmath::row_parts(dx, d.row_len(), n), &|i, dx| {
            dx_rows(dx, g, x, m, r, w, d, pool::task_range(d.rows(), n, i))
        });
    }
    let (gw, gb) = (
        iw.and_then(|i| ctx.grad_of(i)),
        ib.and_then(|i| ctx.grad_of(i)),
    );
    if gw.is_none() && gb.is_none() {
        return;
    }
    let n = row_tasks(d.c, d.n * d.s);
    let par = n > 1 && ctx.want_pool(work);
    let (pool, [s1, s2], [g, x, m, r]) = ctx.access_on(par, [sg, sgx], [dout, ex.data, mean, rstd]);
    let parts = fastmath::row_parts(s1, 1, n).zip(fastmath::row_parts(s2, 1, n));
    fastmath::run_parts(pool, parts, &|i, (s1, s2)| {
        channel_sums(s1, s2, g, x, m, r, d, pool::task_range(d.c, n, i))
    });
    for (grad, sums) in [(gw, sgx), (gb, sg)] {
        if let Some(grad) = grad {
            let ([o], [s]) = ctx.access([grad], [sums]);
            o.iter_mut().zip(s).for_each(|(o, &v)| *o += v);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, Lcg, gradcheck};

    #[test]
    fn gradcheck_group_norm() {
        for (shape, groups) in [
            (&[3usize, 4][..], 2usize),
            (&[2, 6, 2, 3][..], 3),
            (&[2, 4, 5][..], 1),
        ] {
            let c = shape[1];
            gradcheck(
                Check::new("group_norm", &[shape, &[c], &[c]]).range(-2.0, 2.0),
                |ctx, x| ctx.group_norm(x[0], Some(x[1]), Some(x[2]), groups, 1e-5),
            );
        }
    }

    /// Without a weight, a bias or both (PyTorch's affine=False): the
    /// gradient check takes the inputs present.
    #[test]
    fn gradcheck_group_norm_without_affine_parameters() {
        for (with_w, with_b) in [(false, false), (true, false), (false, true)] {
            let (shape, groups) = (&[2usize, 4, 3][..], 2);
            let c = [shape[1]];
            let mut shapes = vec![shape];
            shapes.extend([with_w, with_b].iter().filter(|&&on| on).map(|_| &c[..]));
            let check = Check::new("group_norm without affine", &shapes).range(-2.0, 2.0);
            gradcheck(check, |ctx, x| {
                let w = with_w.then(|| x[1]);
                let b = with_b.then(|| x[x.len() - 1]);
                ctx.group_norm(x[0], w, b, groups, 1e-5)
            });
        }
    }

    /// Without affine parameters: each group of each image normalised, as
    /// a naive f64 group norm of the same inputs (within 1e-5 of values of
    /// order 1); a weight of ones and a bias of zeros give the same
    /// values and x gradient bit for bit, and a lone bias only shifts.
    #[test]
    fn without_affine_matches_f64_reference_and_unit_affine() {
        let (n, c, s, g) = (2, 6, 4, 3);
        let mut rng = Lcg(17);
        let x: Vec<f32> = (0..n * c * s).map(|_| rng.range(-3.0, 3.0)).collect();
        let run = |w: Option<&[f32]>, b: Option<&[f32]>| {
            let mut ctx = crate::Context::new();
            let w = w.map(|v| ctx.param(&[c], Some(v)).unwrap());
            let b = b.map(|v| ctx.param(&[c], Some(v)).unwrap());
            let px = ctx.param(&[n, c, s], Some(&x)).unwrap();
            let y = ctx.group_norm(px, w, b, g, 1e-5).unwrap();
            let y2 = ctx.mul(y, y).unwrap();
            let y3 = ctx.mul(y2, y).unwrap();
            let l = ctx.sum(y3).unwrap();
            ctx.backward(l).unwrap();
            let (mut yv, mut gx) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
            ctx.read(y, &mut yv).unwrap();
            ctx.read_grad(px, &mut gx).unwrap();
            (yv, gx)
        };
        let plain = run(None, None);
        assert_eq!(plain, run(Some(&[1.0; 6]), Some(&[0.0; 6])));
        let l = c / g * s;
        for (r, row) in x.chunks(l).enumerate() {
            let mu = row.iter().map(|&v| v as f64).sum::<f64>() / l as f64;
            let var = row.iter().map(|&v| (v as f64 - mu).powi(2)).sum::<f64>() / l as f64;
            for (j, &v) in row.iter().enumerate() {
                let want = (v as f64 - mu) / (var + 1e-5).sqrt();
                let have = plain.0[r * l + j] as f64;
                assert!((have - want).abs() <= 1e-5, "{have} vs {want}");
            }
        }
        let bias = [0.5f32, -1.0, 0.0, 2.0, 0.25, -0.75];
        let shifted = run(None, Some(&bias));
        for (k, (&a, &p)) in shifted.0.iter().zip(&plain.0).enumerate() {
            assert_eq!(a, p + bias[k / s % c]);
        }
    }

    /// Against a naive f64 group norm of the same f32 inputs: within 1e-5
    /// relative of the output's scale, the rounding of a handful of f32
    /// operations on values of order 1 (the sums are taken in f64).
    #[test]
    fn matches_f64_reference() {
        let (n, c, s, g) = (3, 6, 5, 2);
        let mut rng = Lcg(7);
        let x: Vec<f32> = (0..n * c * s).map(|_| rng.range(-3.0, 3.0)).collect();
        let w: Vec<f32> = (0..c).map(|_| rng.range(0.5, 1.5)).collect();
        let b: Vec<f32> = (0..c).map(|_| rng.range(-0.5, 0.5)).collect();
        let mut ctx = crate::Context::new();
        let (pw, pb) = (
            ctx.param(&[c], Some(&w)).unwrap(),
            ctx.param(&[c], Some(&b)).unwrap(),
        );
        let px = ctx.tensor(&[n, c, s], &x).unwrap();
        let y = ctx.group_norm(px, Some(pw), Some(pb), g, 1e-5).unwrap();
        let mut got = vec![0.0; n * c * s];
        ctx.read(y, &mut got).unwrap();
        let l = c / g * s;
        for (r, row) in x.chunks(l).enumerate() {
            let mu = row.iter().map(|&v| v as f64).sum::<f64>() / l as f64;
            let var = row.iter().map(|&v| (v as f64 - mu).powi(2)).sum::<f64>() / l as f64;
            for (j, &v) in row.iter().enumerate() {
                let ch = (r % g) * (c / g) + j / s;
                let want = (v as f64 - mu) / (var + 1e-5).sqrt() * w[ch] as f64 + b[ch] as f64;
                let have = got[r * l + j] as f64;
                assert!(
                    (have - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{have} vs {want}"
                );
            }
        }
        let bad = ctx.group_norm(px, Some(pw), Some(pb), 4, 1e-5).unwrap_err();
        assert!(
            bad.to_string()
                .contains("4 groups do not divide the 6 channels")
        );
    }
}

//! Cross-entropy from logits with integer targets, fused with the softmax
//! and the mean over rows. When recording it saves the probabilities, so
//! the backward pass is one multiply-add per logit.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::embedding::check_ids;
use crate::ops::{Op, fastmath};
use crate::shape::Shape;

/// Mean over rows of lse[r] - logits[r, t_r], lse[r] = log sum_j exp(logits[r, j]).
/// When `probs` is given (recording for backward) it receives
/// softmax(logits), so the backward pass needs no exp.
/// logits, probs: [N, V]; targets: [N].
fn cross_entropy_forward(
    mut probs: Option<&mut [f32]>,
    logits: &[f32],
    targets: &[u32],
    v: usize,
) -> f32 {
    let mut total = 0.0f64;
    for (r, (row, &t)) in logits.chunks_exact(v).zip(targets).enumerate() {
        let max = fastmath::max(row);
        let s = match probs.as_deref_mut() {
            Some(p) => {
                let p = &mut p[r * v..(r + 1) * v];
                p.iter_mut()
                    .zip(row)
                    .for_each(|(p, &x)| *p = fastmath::exp(x - max));
                let s = fastmath::sum(p);
                let inv = 1.0 / s;
                p.iter_mut().for_each(|p| *p *= inv);
                s
            }
            None => {
                let mut acc = [0.0f32; 8];
                let chunks = row.chunks_exact(8);
                let tail: f32 = chunks
                    .remainder()
                    .iter()
                    .map(|&x| fastmath::exp(x - max))
                    .sum();
                for c in chunks {
                    for i in 0..8 {
                        acc[i] += fastmath::exp(c[i] - max);
                    }
                }
                acc.iter().sum::<f32>() + tail
            }
        };
        total += (max + s.ln() - row[t as usize]) as f64;
    }
    (total / targets.len() as f64) as f32
}

/// dlogits[r, j] += dloss / N * (probs[r, j] - [j == t_r]).
fn cross_entropy_backward(
    dlogits: &mut [f32],
    dloss: f32,
    probs: &[f32],
    targets: &[u32],
    v: usize,
) {
    let s = dloss / targets.len() as f32;
    for ((d, p), &t) in dlogits
        .chunks_exact_mut(v)
        .zip(probs.chunks_exact(v))
        .zip(targets)
    {
        d.iter_mut().zip(p).for_each(|(dj, &pj)| *dj += s * pj);
        d[t as usize] -= s;
    }
}

impl Context {
    /// Mean cross-entropy of `logits` ([..., V], rows = all leading
    /// elements) against one target per row, each in [0, V). -> [1].
    pub fn cross_entropy(&mut self, logits: Tensor, targets: &[i32]) -> Result<Tensor> {
        const OP: &str = "cross_entropy";
        let il = self.resolve(OP, logits)?;
        let el = self.entry(il);
        let (rows, v) = (el.shape.rows(), el.shape.last());
        if targets.len() != rows {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} targets for logits {} with {rows} rows",
                    targets.len(),
                    el.shape
                ),
            });
        }
        check_ids(OP, targets, v)?;
        let tracks = self.tracks(&[il]);
        let tbuf = self.store.alloc_for_overwrite::<u32>(OP, rows)?;
        self.store
            .access_one(tbuf)
            .iter_mut()
            .zip(targets)
            .for_each(|(d, &s)| *d = s as u32);
        let probs = self
            .store
            .alloc_for_overwrite::<f32>(OP, if tracks { el.shape.numel() } else { 1 })?;
        let out = self.push_output(OP, Shape::scalar(), tracks)?;
        let ([y, p], [l], [t]) =
            self.store
                .access_ids([self.table[out as usize].data, probs], [el.data], [tbuf]);
        y[0] = cross_entropy_forward(tracks.then_some(p), l, t, v);
        let op = Op::CrossEntropy {
            logits: il,
            targets: tbuf,
            probs,
        };
        self.record(op, out);
        Ok(self.handle(out))
    }
}

pub(crate) fn backward_cross_entropy(
    ctx: &mut Context,
    out: u32,
    logits: u32,
    targets: Buf<u32>,
    probs: Buf,
) {
    let (Some(dl), Some(dout)) = (ctx.grad_of(logits), ctx.grad_out(out)) else {
        return;
    };
    let v = ctx.entry(logits).shape.last();
    let ([dl], [dout, p], [t]) = ctx.store.access_ids([dl], [dout, probs], [targets]);
    cross_entropy_backward(dl, dout[0], p, t, v);
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn uniform_logits_give_ln_v() {
        let mut c = crate::Context::new();
        let l = c.tensor(&[2, 4], &[0.0; 8]).unwrap();
        let loss = c.cross_entropy(l, &[1, 3]).unwrap();
        assert!((c.item(loss).unwrap() - 4f32.ln()).abs() < 1e-6);
        // Large logits stay finite (max subtraction).
        let big = c.tensor(&[1, 2], &[1000.0, 0.0]).unwrap();
        let lb = c.cross_entropy(big, &[0]).unwrap();
        assert!(c.item(lb).unwrap().abs() < 1e-6);
        assert!(matches!(
            c.cross_entropy(l, &[1]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            c.cross_entropy(l, &[1, 4]),
            Err(Error::IndexOutOfRange {
                position: 1,
                value: 4,
                ..
            })
        ));
    }

    #[test]
    fn gradcheck_cross_entropy() {
        gradcheck(
            Check::new("cross_entropy", &[&[3, 5]]).range(-2.0, 2.0),
            |c, x| c.cross_entropy(x[0], &[0, 4, 2]),
        );
        gradcheck(Check::new("cross_entropy 3d", &[&[2, 2, 3]]), |c, x| {
            c.cross_entropy(x[0], &[0, 1, 2, 2])
        });
    }
}

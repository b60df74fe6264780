//! Embedding lookup: gather rows of a table by integer id; backward
//! scatter-adds the output gradient rows into the table's gradient.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::Shape;

/// out[i, :] = weight[ids[i], :]. weight: `[V, C]`, out: `[N, C]`.
fn embedding_forward(out: &mut [f32], weight: &[f32], ids: &[u32], c: usize) {
    for (row, &id) in out.chunks_exact_mut(c).zip(ids) {
        row.copy_from_slice(&weight[id as usize * c..(id as usize + 1) * c]);
    }
}

/// dweight[ids[i], :] += dout[i, :].
fn embedding_backward(dweight: &mut [f32], dout: &[f32], ids: &[u32], c: usize) {
    for (g, &id) in dout.chunks_exact(c).zip(ids) {
        let d = &mut dweight[id as usize * c..(id as usize + 1) * c];
        d.iter_mut().zip(g).for_each(|(d, &g)| *d += g);
    }
}

impl Context {
    /// Rows of `weight` (`[V, C]`) picked by `ids` (each in [0, V)) -> `[len(ids), C]`.
    pub fn embedding(&mut self, weight: Tensor, ids: &[i32]) -> Result<Tensor> {
        const OP: &str = "embedding";
        let iw = self.resolve(OP, weight)?;
        let ew = self.entry(iw);
        if ew.shape.ndim() != 2 {
            return Err(Error::BadShape {
                op: OP,
                what: format!("weight must be 2-D [V,C], got {}", ew.shape),
            });
        }
        if ids.is_empty() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: "no ids given".into(),
            });
        }
        let (v, c) = (ew.shape.dims()[0], ew.shape.dims()[1]);
        super::check_ids(OP, ids, v)?;
        let oshape = Shape::new(OP, &[ids.len(), c])?;
        let tracks = self.tracks(&[iw]);
        let ids_buf = self.alloc_main::<u32>(OP, ids.len())?;
        self.access_one(ids_buf)
            .iter_mut()
            .zip(ids)
            .for_each(|(d, &s)| *d = s as u32);
        let out = self.push_output(OP, oshape, tracks)?;
        let op = Op::Embedding {
            w: iw,
            ids: ids_buf,
        };
        Ok(self.run(op, out))
    }
}

pub(crate) fn forward_embedding(ctx: &mut Context, out: u32, w: u32, ids: Buf<u32>) {
    let (ew, eo) = (ctx.entry(w), ctx.entry(out));
    let c = ew.shape.dims()[1];
    let ([y], [w], [ids]) = ctx.access_ids([eo.data], [ew.data], [ids]);
    embedding_forward(y, w, ids, c);
}

pub(crate) fn backward_embedding(ctx: &mut Context, out: u32, w: u32, ids: Buf<u32>) {
    let (Some(dw), Some(dout)) = (ctx.grad_of(w), ctx.grad_out(out)) else {
        return;
    };
    let c = ctx.entry(w).shape.dims()[1];
    let ([dw], [dout], [ids]) = ctx.access_ids([dw], [dout], [ids]);
    embedding_backward(dw, dout, ids, c);
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::ops::gradcheck::{Check, gradcheck};

    #[test]
    fn gathers_and_refuses_bad_ids() {
        let mut c = crate::Context::new();
        let w = c
            .param(&[3, 2], Some(&[0., 1., 10., 11., 20., 21.]))
            .unwrap();
        let e = c.embedding(w, &[2, 0, 2]).unwrap();
        let mut v = [0.0; 6];
        c.read(e, &mut v).unwrap();
        assert_eq!(v, [20., 21., 0., 1., 20., 21.]);
        for bad in [3, -1, i32::MAX] {
            let err = c.embedding(w, &[0, bad]).unwrap_err();
            assert!(
                matches!(err, Error::IndexOutOfRange { position: 1, .. }),
                "{err}"
            );
            assert!(err.to_string().starts_with("embedding: index"));
        }
    }

    #[test]
    fn gradcheck_embedding_with_repeated_ids() {
        gradcheck(Check::new("embedding", &[&[5, 3]]), |c, x| {
            c.embedding(x[0], &[4, 1, 4, 0, 4])
        });
    }
}

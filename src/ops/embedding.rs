//! Embedding lookup: gather rows of a table by integer id; backward
//! scatter-adds the output gradient rows into the table's gradient.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::kernels::fastmath;
use crate::ops::Op;
use crate::pool::{self, Pool};
use crate::shape::Shape;

/// out[i, :] = weight[ids[i], :]. weight: `[V, C]`, out: `[N, C]`.
fn embedding_forward(out: &mut [f32], weight: &[f32], ids: &[u32], c: usize) {
    for (row, &id) in out.chunks_exact_mut(c).zip(ids) {
        row.copy_from_slice(&weight[id as usize * c..(id as usize + 1) * c]);
    }
}

/// dweight[ids[i] - first, :] += dout[i, :] for the ids that fall in
/// dweight, a run of the table's rows from row `first`, in the order of
/// `ids`: each row gets the same additions in the same order however the
/// table is cut.
fn embedding_backward(dweight: &mut [f32], first: usize, dout: &[f32], ids: &[u32], c: usize) {
    let rows = first..first + dweight.len() / c;
    for (g, &id) in dout.chunks_exact(c).zip(ids) {
        let id = id as usize;
        if rows.contains(&id) {
            let d = &mut dweight[(id - first) * c..(id - first + 1) * c];
            d.iter_mut().zip(g).for_each(|(d, &g)| *d += g);
        }
    }
}

/// How many tasks the lookup and its backward are cut into: as the
/// element kernels weigh a copy or an add of `ids` rows of `c`, and a
/// shape-only rule, so the bits do not depend on the thread count.
fn tasks(ids: usize, c: usize) -> usize {
    let worth = ids >= 2 && Context::worth_two_threads(ids * c * fastmath::ELEMENT_COST);
    fastmath::task_split(worth, ids, c * fastmath::ELEMENT_COST)
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

/// The pool for `n` tasks of `work`, if it should run them.
fn pool_for(ctx: &mut Context, n: usize, work: usize) -> Option<Pool> {
    (n > 1 && ctx.want_pool(work)).then(Pool::global)
}

/// Output rows are independent: each task copies a run of them.
pub(crate) fn forward_embedding(ctx: &mut Context, out: u32, w: u32, ids: Buf<u32>) {
    let (ew, eo) = (ctx.entry(w), ctx.entry(out));
    let (rows, c) = (eo.shape.rows(), ew.shape.dims()[1]);
    let n = tasks(rows, c);
    let pool = pool_for(ctx, n, rows * c * fastmath::ELEMENT_COST);
    let ([y], [w], [ids]) = ctx.access_ids([eo.data], [ew.data], [ids]);
    fastmath::run_parts(pool.as_ref(), fastmath::row_parts(y, c, n), &|i, y| {
        embedding_forward(y, w, &ids[pool::task_range(rows, n, i)], c)
    });
}

/// Ids repeat, so output rows may add into one table row: each task owns a
/// run of the table's rows instead and takes, in order, the ids that fall
/// in it.
pub(crate) fn backward_embedding(ctx: &mut Context, out: u32, w: u32, ids: Buf<u32>) {
    let (Some(dw), Some(dout)) = (ctx.grad_of(w), ctx.grad_out(out)) else {
        return;
    };
    let shape = ctx.entry(w).shape;
    let (v, c) = (shape.dims()[0], shape.dims()[1]);
    let rows = ctx.entry(out).shape.rows();
    let n = tasks(rows, c).min(v);
    let pool = pool_for(ctx, n, rows * c * fastmath::ELEMENT_COST);
    let ([dw], [dout], [ids]) = ctx.access_ids([dw], [dout], [ids]);
    fastmath::run_parts(pool.as_ref(), fastmath::row_parts(dw, c, n), &|i, dw| {
        embedding_backward(dw, pool::task_range(v, n, i).start, dout, ids, c)
    });
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

    /// Cut into several tasks (output rows forward, table rows backward),
    /// the lookup and the gradient of sum(embedding * r) over repeated ids
    /// equal the one-task kernels bit for bit.
    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn parallel_path_matches_kernels() {
        let (v, c, n) = (300, 256, 4096);
        assert!(super::tasks(n, c) >= 4);
        let mut rng = crate::ops::gradcheck::Lcg(11);
        let w: Vec<f32> = (0..v * c).map(|_| rng.range(-1.0, 1.0)).collect();
        let r: Vec<f32> = (0..n * c).map(|_| rng.range(-1.0, 1.0)).collect();
        // Squares mod v: most rows repeat, some rows are never picked.
        let ids: Vec<i32> = (0..n).map(|i| (i * i % v) as i32).collect();
        let mut ctx = crate::Context::new();
        let pw = ctx.param(&[v, c], Some(&w)).unwrap();
        let e = ctx.embedding(pw, &ids).unwrap();
        assert!(ctx.pool_started());
        let rt = ctx.tensor(&[n, c], &r).unwrap();
        let er = ctx.mul(e, rt).unwrap();
        let l = ctx.sum(er).unwrap();
        ctx.backward(l).unwrap();
        let (mut got, mut gw) = (vec![0.0; n * c], vec![0.0; v * c]);
        ctx.read(e, &mut got).unwrap();
        ctx.read_grad(pw, &mut gw).unwrap();
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        let (mut want, mut want_gw) = (vec![0.0; n * c], vec![0.0; v * c]);
        super::embedding_forward(&mut want, &w, &ids, c);
        super::embedding_backward(&mut want_gw, 0, &r, &ids, c);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same(&got, &want) && same(&gw, &want_gw));
    }
}

//! Building a step's program at capture end: each recorded op resolved to
//! its kind and operand rows, small broadcasts to element indices (larger
//! element-wise ops keep their shapes), and what the
//! backward walk does that does not depend on values. Its own room: it
//! runs once per captured step and decides whether there is a program.

use super::dense::Dense;
use super::{Bcast, EagerStep, Join, Kind, MAXN, Permute, Program, Row, Select, Side, Step1, Wide};
use crate::arena::{Buf, Storage};
use crate::context::Context;
use crate::ops::{MAX_CONCAT, MAX_INPUTS, OneOp, ReplayForm};
use crate::shape::Shape;
use crate::tape::Node;

/// Per element of `so`, the element of `sa` and of `sb` it reads (the
/// strides of the eager broadcast loops); `so` has at most [`MAXN`].
fn broadcast(so: Shape, sa: Shape, sb: Shape) -> Bcast {
    let (ta, tb) = (sa.broadcast_strides(&so), sb.broadcast_strides(&so));
    let dims = so.dims();
    let mut out = Bcast {
        n: so.numel() as u8,
        ia: [0; MAXN],
        ib: [0; MAXN],
    };
    for o in 0..so.numel() {
        let (mut rest, mut ia, mut ib) = (o, 0, 0);
        for d in (0..dims.len()).rev() {
            let i = rest % dims[d];
            rest /= dims[d];
            ia += i * ta[d];
            ib += i * tb[d];
        }
        // Both below MAXN (each operand has at most the output's elements).
        out.ia[o] = ia as u8;
        out.ib[o] = ib as u8;
    }
    out
}

/// The shape `sx` seen as `[outer, n, inner]` around `axis`.
fn split_axis(sx: Shape, axis: u8) -> (u32, u32, u32) {
    let dims = sx.dims();
    let axis = axis as usize;
    // Each within MAX_ELEMENTS < 2^31: fits.
    (
        dims[..axis].iter().product::<usize>() as u32,
        dims[axis] as u32,
        dims[axis + 1..].iter().product::<usize>() as u32,
    )
}

/// A vector of `n` copies of `v`, or None if it cannot be allocated.
fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

impl Program {
    /// The program of the step `ctx` just captured (its table, tape and
    /// plan are current), or None if the step needs the ordinary path or
    /// its program cannot be allocated (replay is then the ordinary one).
    pub(in crate::context) fn build(
        ctx: &Context,
        log: &[Node],
        region: Option<Buf>,
        loss: u32,
    ) -> Option<Box<Program>> {
        // Op timing (feature `trace`) lives in the dispatch: keep it whole.
        if cfg!(feature = "trace") {
            return None;
        }
        let region = region?;
        let rows = ctx.table_rows();
        let n_params = ctx.param_count();
        // A view is its root's buffer, gradient slot and "born" mark; it
        // stands for its root once its shape has been read, which holds
        // only if it needs a gradient exactly when its root does (not so
        // for a view made with gradients off).
        let root = |id: u32| rows[id as usize].view_of.unwrap_or(id);
        if !rows[loss as usize].requires_grad
            || !ctx.rc().segments_snapshot().is_empty()
            || rows.iter().enumerate().any(|(i, e)| {
                (i >= n_params && e.retain)
                    || e.view_of
                        .is_some_and(|r| rows[r as usize].requires_grad != e.requires_grad)
            })
        {
            return None;
        }
        let shape = |id: u32| rows[id as usize].shape;
        let mut side = Side::default();
        let mut resolve = |n: &Node| {
            let so = shape(n.out);
            let (op, a, b) = match n.op.replay_form()? {
                ReplayForm::Sum { x, mean } => (Kind::Sum(mean), x, x),
                ReplayForm::SumAxis { x, axis, mean } => {
                    let (outer, n, inner) = split_axis(shape(x), axis);
                    let op = Kind::SumAxis {
                        outer,
                        n,
                        inner,
                        mean,
                    };
                    (op, x, x)
                }
                ReplayForm::LogSumExpAxis { x, axis } => {
                    let (outer, n, inner) = split_axis(shape(x), axis);
                    (Kind::LogSumExpAxis { outer, n, inner }, x, x)
                }
                ReplayForm::Slice { x, axis, start } => {
                    let sx = shape(x);
                    let dims = sx.dims();
                    let axis = axis as usize;
                    let inner: usize = dims[axis + 1..].iter().product();
                    let len = so.dims()[axis] * inner;
                    // Within MAX_ELEMENTS < 2^31: fits. One element
                    // taken means one row (outer is 1).
                    let off = (start as usize * inner) as u32;
                    let op = if len == 1 && so.numel() == 1 {
                        Kind::Pick(off)
                    } else {
                        Kind::Slice {
                            row: (dims[axis] * inner) as u32,
                            off,
                            len: len as u32,
                        }
                    };
                    (op, x, x)
                }
                ReplayForm::Where { cond, a, b } => {
                    side.selects.try_reserve(1).ok()?;
                    side.selects.push(Select {
                        cond: root(cond),
                        shapes: [so, shape(cond), shape(a), shape(b)],
                    });
                    (Kind::Select(side.selects.len() as u32 - 1), a, b)
                }
                ReplayForm::Concat { xs, n, axis } => {
                    let axis = axis as usize;
                    let inner: usize = so.dims()[axis + 1..].iter().product();
                    let mut join = Join {
                        xs: [0; MAX_CONCAT],
                        lens: [0; MAX_CONCAT],
                        n,
                        // Within MAX_ELEMENTS < 2^31: fits.
                        row: (so.dims()[axis] * inner) as u32,
                    };
                    for (k, &x) in xs[..n as usize].iter().enumerate() {
                        join.xs[k] = root(x);
                        join.lens[k] = (shape(x).dims()[axis] * inner) as u32;
                    }
                    side.joins.try_reserve(1).ok()?;
                    side.joins.push(join);
                    (Kind::Join(side.joins.len() as u32 - 1), xs[0], xs[0])
                }
                ReplayForm::Permute { x, perm } => {
                    side.permutes.try_reserve(1).ok()?;
                    side.permutes.push(Permute {
                        shapes: [shape(x), so],
                        perm,
                    });
                    (Kind::Permute(side.permutes.len() as u32 - 1), x, x)
                }
                ReplayForm::Eager => {
                    let mut step = EagerStep {
                        op: n.op,
                        lend: [(0, 0); MAX_INPUTS + 1],
                        n: 0,
                    };
                    let inputs = n.op.inputs();
                    for &id in std::iter::once(&n.out).chain(inputs.as_slice()) {
                        step.lend[step.n as usize] = (id, root(id));
                        step.n += 1;
                    }
                    side.eager.try_reserve(1).ok()?;
                    side.eager.push(step);
                    (Kind::Eager(side.eager.len() as u32 - 1), n.out, n.out)
                }
                ReplayForm::Map(op, a, b) => {
                    let n_out = so.numel();
                    let kind = if n_out == 1 && shape(a).numel() == 1 && shape(b).numel() == 1 {
                        Kind::One(op)
                    } else if n_out > MAXN {
                        side.wide.try_reserve(1).ok()?;
                        side.wide.push(Wide {
                            op,
                            a,
                            b,
                            shapes: [so, shape(a), shape(b)],
                        });
                        Kind::Wide(side.wide.len() as u32 - 1)
                    } else if let OneOp::Binary(f) = op {
                        side.bcast.try_reserve(1).ok()?;
                        side.bcast.push(broadcast(so, shape(a), shape(b)));
                        Kind::Bin(f, side.bcast.len() as u32 - 1)
                    } else {
                        Kind::Map(op)
                    };
                    (kind, a, b)
                }
            };
            let same = shape(a) == so && shape(b) == so;
            Some(Step1 {
                op,
                out: n.out,
                a: root(a),
                b: root(b),
                same,
                runs: false,
            })
        };
        let mut list = |nodes: &[Node]| -> Option<Vec<Step1>> {
            let mut v = Vec::new();
            v.try_reserve_exact(nodes.len()).ok()?;
            for n in nodes {
                v.push(resolve(n)?);
            }
            Some(v)
        };
        let fwd = list(log)?;
        let mut bwd = list(ctx.tape_nodes())?;
        // The flow of the loss's gradient depends on the graph only: an
        // op runs if its output (never a view) is reached; reaching a view
        // reaches its root.
        let loss = root(loss);
        let mut flow = filled(rows.len(), false)?;
        flow[loss as usize] = true;
        for (s, n) in bwd.iter_mut().zip(ctx.tape_nodes()).rev() {
            if flow[s.out as usize] {
                s.runs = true;
                for &x in n.op.inputs().as_slice() {
                    flow[root(x) as usize] = true;
                }
            }
        }
        let mut births = Vec::new();
        let plan = ctx.current_plan();
        births.try_reserve_exact(plan.births_len()).ok()?;
        births.extend((0..plan.births_len()).map(|k| plan.birth(k)));
        let mut dense = Vec::new();
        dense.try_reserve_exact(rows.len()).ok()?;
        dense.extend(rows.iter().map(|e| Row {
            data: e.data,
            grad: None,
            needs: e.requires_grad,
            unzeroed: false,
        }));
        for (t, offset, len) in plan.slots() {
            dense[t as usize].grad = Some(Storage::sub(region, offset, len));
        }
        let compact = Dense::build(ctx, (&fwd, &bwd, &side), &births, &dense, loss).map(Box::new);
        Some(Box::new(Program {
            fwd,
            bwd,
            side,
            births,
            rows: dense,
            loss,
            n_params,
            dense: compact,
        }))
    }
}

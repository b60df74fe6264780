//! The dispatch over recorded ops: [`forward`] computes an op's output
//! from its record (the first run and a recomputed segment's replay alike),
//! [`backward`] sends its output's gradient to its inputs. One arm per op,
//! no wildcard, so a new `Op` variant does not build until both have one.

#[cfg(feature = "trace")]
use super::BinaryFn;
use super::{
    Op, attention, dropout, elementwise, embedding, loss, matmul, norm, reduce, shape_ops,
};
use crate::context::{Context, Tensor};

impl Context {
    /// Computes `op` into `out` through the forward dispatch and records it:
    /// the tail of every recording function, once its arguments are checked
    /// and its buffers allocated.
    #[inline(always)]
    pub(crate) fn run(&mut self, op: Op, out: u32) -> Tensor {
        forward(self, &op, out);
        self.record(op, out);
        self.handle(out)
    }
}

/// Forward dispatch: writes the output of `op` (and the buffers it saves for
/// backward) from its inputs. One arm per op, no wildcard.
pub(crate) fn forward(ctx: &mut Context, op: &Op, out: u32) {
    #[cfg(feature = "trace")]
    let _timer = OpTimer::new(*op, false);
    match *op {
        Op::Binary { a, b, f } => elementwise::forward_binary(ctx, out, a, b, f),
        Op::Scale { x, s } => elementwise::forward_scale(ctx, out, x, s),
        Op::Unary { x, f } => elementwise::forward_unary(ctx, out, x, f),
        Op::Pow { x, p } => elementwise::forward_pow(ctx, out, x, p),
        Op::Clamp { x, lo, hi } => elementwise::forward_clamp(ctx, out, x, lo, hi),
        Op::Where { cond, a, b } => elementwise::forward_where(ctx, out, cond, a, b),
        Op::Reduce { x, mean } => reduce::forward_reduce(ctx, out, x, mean),
        Op::ReduceAxis { x, axis, mean } => {
            reduce::forward_reduce_axis(ctx, out, x, axis as usize, mean)
        }
        Op::LogSumExpAxis { x, axis } => reduce::forward_logsumexp_axis(ctx, out, x, axis as usize),
        Op::Permute { x, perm } => shape_ops::forward_permute(ctx, out, x, perm),
        Op::Concat { xs, n, axis } => {
            shape_ops::forward_concat(ctx, out, &xs[..n as usize], axis as usize)
        }
        Op::Slice { x, axis, start } => {
            shape_ops::forward_slice(ctx, out, x, axis as usize, start as usize)
        }
        Op::Dropout { x, scale } => dropout::forward_dropout(ctx, out, x, scale),
        Op::DropoutSeeded { x, seed, p, scale } => {
            dropout::forward_dropout_seeded(ctx, out, x, seed, p, scale)
        }
        Op::Matmul {
            a,
            b,
            trans_a,
            trans_b,
        } => matmul::forward_matmul(ctx, out, a, b, trans_a, trans_b),
        Op::Bmm {
            a,
            b,
            trans_a,
            trans_b,
        } => matmul::forward_bmm(ctx, out, a, b, trans_a, trans_b),
        Op::Linear { x, w, bias } => matmul::forward_linear(ctx, out, x, w, bias),
        Op::Embedding { w, ids } => embedding::forward_embedding(ctx, out, w, ids),
        Op::LogSoftmax { x } => loss::forward_log_softmax(ctx, out, x),
        Op::CrossEntropy {
            logits,
            targets,
            probs,
        } => loss::forward_cross_entropy(ctx, out, logits, targets, probs),
        Op::MseLoss { pred, target } => loss::forward_mse(ctx, out, pred, target),
        Op::LayerNorm {
            x,
            w,
            b,
            mean,
            rstd,
        } => norm::forward_layernorm(ctx, out, [x, w, b], mean, rstd),
        Op::Softmax { x, scale, causal } => attention::forward_softmax(ctx, out, x, scale, causal),
        Op::Attention { qkv, n_head, probs } => {
            attention::forward_attention(ctx, out, qkv, n_head as usize, probs)
        }
    }
}

/// Backward dispatch: accumulates the gradient of `out` into the gradients
/// of the op's inputs. One arm per op, no wildcard.
pub(crate) fn backward(ctx: &mut Context, op: &Op, out: u32) {
    #[cfg(feature = "trace")]
    let _timer = OpTimer::new(*op, true);
    match *op {
        Op::Binary { a, b, f } => elementwise::backward_binary(ctx, out, a, b, f),
        Op::Scale { x, s } => elementwise::backward_scale(ctx, out, x, s),
        Op::Unary { x, f } => elementwise::backward_unary(ctx, out, x, f),
        Op::Pow { x, p } => elementwise::backward_pow(ctx, out, x, p),
        Op::Clamp { x, lo, hi } => elementwise::backward_clamp(ctx, out, x, lo, hi),
        Op::Where { cond, a, b } => elementwise::backward_where(ctx, out, cond, a, b),
        Op::Reduce { x, mean } => reduce::backward_reduce(ctx, out, x, mean),
        Op::ReduceAxis { x, axis, mean } => {
            reduce::backward_reduce_axis(ctx, out, x, axis as usize, mean)
        }
        Op::LogSumExpAxis { x, axis } => {
            reduce::backward_logsumexp_axis(ctx, out, x, axis as usize)
        }
        Op::Permute { x, perm } => shape_ops::backward_permute(ctx, out, x, perm),
        Op::Concat { xs, n, axis } => {
            shape_ops::backward_concat(ctx, out, &xs[..n as usize], axis as usize)
        }
        Op::Slice { x, axis, start } => {
            shape_ops::backward_slice(ctx, out, x, axis as usize, start as usize)
        }
        Op::Dropout { x, scale } | Op::DropoutSeeded { x, scale, .. } => {
            dropout::backward_dropout(ctx, out, x, scale)
        }
        Op::Matmul {
            a,
            b,
            trans_a,
            trans_b,
        }
        | Op::Bmm {
            a,
            b,
            trans_a,
            trans_b,
        } => matmul::backward_product(ctx, out, a, b, trans_a, trans_b),
        Op::Linear { x, w, bias } => matmul::backward_linear(ctx, out, x, w, bias),
        Op::Embedding { w, ids } => embedding::backward_embedding(ctx, out, w, ids),
        Op::LogSoftmax { x } => loss::backward_log_softmax(ctx, out, x),
        Op::CrossEntropy {
            logits,
            targets,
            probs,
        } => loss::backward_cross_entropy(ctx, out, logits, targets, probs),
        Op::MseLoss { pred, target } => loss::backward_mse(ctx, out, pred, target),
        Op::LayerNorm {
            x,
            w,
            b,
            mean,
            rstd,
        } => norm::backward_layernorm(ctx, out, [x, w, b], mean, rstd),
        Op::Softmax { x, scale, .. } => attention::backward_softmax(ctx, out, x, scale),
        Op::Attention { qkv, n_head, probs } => {
            attention::backward_attention(ctx, out, qkv, n_head as usize, probs)
        }
    }
}

/// Bench instrumentation (feature `trace`): times one op's kernels.
#[cfg(feature = "trace")]
struct OpTimer {
    kind: &'static str,
    backward: bool,
    t0: std::time::Instant,
    blas0: std::time::Duration,
}

#[cfg(feature = "trace")]
impl OpTimer {
    fn new(op: Op, backward: bool) -> OpTimer {
        let kind = match op {
            Op::Binary { f, .. } => match f {
                BinaryFn::Add => "add",
                BinaryFn::Sub => "sub",
                BinaryFn::Mul => "mul",
                BinaryFn::Div => "div",
                BinaryFn::Max => "max",
                BinaryFn::Min => "min",
            },
            Op::Unary { f, .. } => f.name(),
            Op::Scale { .. } => "scale",
            Op::Pow { .. } => "pow",
            Op::Clamp { .. } => "clamp",
            Op::Where { .. } => "where",
            Op::Reduce { .. } => "reduce",
            Op::ReduceAxis { .. } => "reduce_axis",
            Op::LogSumExpAxis { .. } => "logsumexp_axis",
            Op::Permute { .. } => "permute",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::Dropout { .. } => "dropout",
            Op::DropoutSeeded { .. } => "dropout_seeded",
            Op::Matmul { .. } => "matmul",
            Op::Bmm { .. } => "bmm",
            Op::Linear { .. } => "linear",
            Op::Embedding { .. } => "embedding",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::CrossEntropy { .. } => "cross_entropy",
            Op::MseLoss { .. } => "mse_loss",
            Op::LayerNorm { .. } => "layernorm",
            Op::Softmax { .. } => "softmax",
            Op::Attention { .. } => "attention",
        };
        OpTimer {
            kind,
            backward,
            t0: std::time::Instant::now(),
            blas0: crate::blas::trace::blas_so_far(),
        }
    }
}

#[cfg(feature = "trace")]
impl Drop for OpTimer {
    fn drop(&mut self) {
        let blas = crate::blas::trace::blas_so_far().saturating_sub(self.blas0);
        crate::blas::trace::op(self.kind, self.backward, self.t0.elapsed(), blas);
    }
}

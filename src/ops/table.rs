//! The table of recorded ops: one row per [`Op`] variant, from which
//! [`op_table`]'s macros generate every per-op match that is not a kernel:
//! the forward and backward dispatch, [`Op::for_each_input`] (and so
//! [`Op::inputs`]), [`Op::backward_reads`] and the trace name. A variant
//! without a row leaves those matches non-exhaustive, so it does not build.
//!
//! A row reads
//!
//! ```text
//! Variant { field, .. }:
//!     name <&'static str>, inputs <ids>, reads (<inputs>, <own>),
//!     forward <fn>(<args>), backward <fn>(<args>);
//! ```
//!
//! where every expression may use the fields the row binds:
//!
//! * `name`: the op's name in traces (unary ops: their row's name).
//! * `inputs`: the ids the op reads, in order, i.e. those its backward
//!   sends gradient to: an array, a slice, or an array plus optional ids
//!   (see [`InputIds`]).
//! * `reads`: what its backward reads besides the gradient of its output
//!   (see [`BackwardReads`]): the values of its inputs, its own output or
//!   saved buffers. When in doubt, true.
//! * `forward` / `backward`: the op function and its arguments after the
//!   `ctx, out` that the dispatch passes first.
//! * `replay`: what the op is to the replay program's interpreter (see
//!   [`ReplayForm`]), or None where a replay takes the ordinary walk. The
//!   interpreter reads this column and names no op. `ReplayForm::Eager`
//!   (the op's own entry points) only for an op whose forward and backward
//!   touch nothing but its table rows and the buffers its record saved.
//! * `capture`: what capture must know (see [`CaptureRule`]): the ids a
//!   caller may rewrite before each replay, or a seed recorded by value
//!   that a replay would reuse.
//!
//! A new column is a new labelled field in the macros' pattern: every row
//! must then state it, or the table does not build.

use super::{
    BackwardReads, CaptureRule, IdAxis, IdBuffer, OneOp, Op, ReplayForm, attention, batch_norm,
    cholesky_corr, conv, dropout, elementwise, embedding, glm, group_norm, linalg, lkj, llama,
    loss, lpdf, matmul, norm, reduce, shape_ops,
};
use crate::context::Context;

/// The rows, handed to the macro `$then`.
macro_rules! op_table {
    ($then:ident) => {
        $then! {
            Binary { a, b, f }:
                name f.name(),
                inputs [a, b],
                reads (f.sum_sign().is_none(), false),
                forward elementwise::forward_binary(a, b, f),
                backward elementwise::backward_binary(a, b, f),
                replay Some(ReplayForm::Map(OneOp::Binary(f), a, b)),
                capture CaptureRule::Plain;
            Scale { x, s }:
                name "scale", inputs [x], reads (false, false),
                forward elementwise::forward_scale(x, s),
                backward elementwise::backward_scale(x, s),
                replay Some(ReplayForm::Map(OneOp::Scale(s), x, x)),
                capture CaptureRule::Plain;
            // The unary functions: one row each in `unary_fns`.
            Unary { x, f }:
                name f.name(), inputs [x], reads (!f.reads_output(), f.reads_output()),
                forward elementwise::forward_unary(x, f),
                backward elementwise::backward_unary(x, f),
                replay Some(ReplayForm::Map(OneOp::Unary(f), x, x)),
                capture CaptureRule::Plain;
            Pow { x, p }:
                name "pow", inputs [x], reads (true, false),
                forward elementwise::forward_pow(x, p),
                backward elementwise::backward_pow(x, p),
                replay Some(ReplayForm::Map(OneOp::Pow(p), x, x)),
                capture CaptureRule::Plain;
            Clamp { x, lo, hi }:
                name "clamp", inputs [x], reads (true, false),
                forward elementwise::forward_clamp(x, lo, hi),
                backward elementwise::backward_clamp(x, lo, hi),
                replay Some(ReplayForm::Map(OneOp::Clamp(lo, hi), x, x)),
                capture CaptureRule::Plain;
            // cond gets no gradient, but its backward reads it (a replay
            // must recompute it).
            Where { cond, a, b }:
                name "where", inputs [cond, a, b], reads (true, false),
                forward elementwise::forward_where(cond, a, b),
                backward elementwise::backward_where(cond, a, b),
                replay Some(ReplayForm::Where { cond, a, b }),
                capture CaptureRule::Plain;
            BetaInc { a, b, x }:
                name "beta_inc", inputs [a, b, x], reads (true, false),
                forward elementwise::forward_beta_inc(a, b, x),
                backward elementwise::backward_beta_inc(a, b, x),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Reduce { x, mean }:
                name "reduce", inputs [x], reads (false, false),
                forward reduce::forward_reduce(x, mean),
                backward reduce::backward_reduce(x, mean),
                replay Some(ReplayForm::Sum { x, mean }),
                capture CaptureRule::Plain;
            ReduceAxis { x, axis, mean }:
                name "reduce_axis", inputs [x], reads (false, false),
                forward reduce::forward_reduce_axis(x, axis as usize, mean),
                backward reduce::backward_reduce_axis(x, axis as usize, mean),
                replay Some(ReplayForm::SumAxis { x, axis, mean }),
                capture CaptureRule::Plain;
            LogSumExpAxis { x, axis }:
                name "logsumexp_axis", inputs [x], reads (true, false),
                forward reduce::forward_logsumexp_axis(x, axis as usize),
                backward reduce::backward_logsumexp_axis(x, axis as usize),
                replay Some(ReplayForm::LogSumExpAxis { x, axis }),
                capture CaptureRule::Plain;
            Permute { x, perm }:
                name "permute", inputs [x], reads (false, false),
                forward shape_ops::forward_permute(x, perm),
                backward shape_ops::backward_permute(x, perm),
                replay Some(ReplayForm::Permute { x, perm }),
                capture CaptureRule::Plain;
            Concat { xs, n, axis }:
                name "concat", inputs &xs[..n as usize], reads (false, false),
                forward shape_ops::forward_concat(&xs[..n as usize], axis as usize),
                backward shape_ops::backward_concat(&xs[..n as usize], axis as usize),
                replay Some(ReplayForm::Concat { xs, n, axis }),
                capture CaptureRule::Plain;
            Slice { x, axis, start }:
                name "slice", inputs [x], reads (false, false),
                forward shape_ops::forward_slice(x, axis as usize, start as usize),
                backward shape_ops::backward_slice(x, axis as usize, start as usize),
                replay Some(ReplayForm::Slice { x, axis, start }),
                capture CaptureRule::Plain;
            // The dropouts and batch norm keep the ordinary walk: their
            // forward draws random numbers or updates running statistics,
            // state beyond the op's own rows.
            Dropout { x, scale }:
                name "dropout", inputs [x], reads (false, false),
                forward dropout::forward_dropout(x, scale),
                backward dropout::backward_dropout(x, scale),
                replay None,
                capture CaptureRule::FixedSeed;
            // The seed gets no gradient; it is data, read by the forward.
            // The mask is redrawn by the forward (it may sit in scratch).
            DropoutSeeded { x, seed, p, scale }:
                name "dropout_seeded", inputs [x, seed], reads (false, true),
                forward dropout::forward_dropout_seeded(x, seed, p, scale),
                backward dropout::backward_dropout(x, scale),
                replay None,
                capture CaptureRule::Plain;
            Matmul { a, b, trans_a, trans_b }:
                name "matmul", inputs [a, b], reads (true, false),
                forward matmul::forward_matmul(a, b, trans_a, trans_b),
                backward matmul::backward_product(a, b, trans_a, trans_b),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Bmm { a, b, trans_a, trans_b }:
                name "bmm", inputs [a, b], reads (true, false),
                forward matmul::forward_bmm(a, b, trans_a, trans_b),
                backward matmul::backward_product(a, b, trans_a, trans_b),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Linear { x, w, bias }:
                name "linear", inputs ([x, w], bias), reads (true, false),
                forward matmul::forward_linear(x, w, bias),
                backward matmul::backward_linear(x, w, bias),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Embedding { w, ids }:
                name "embedding", inputs [w], reads (false, false),
                forward embedding::forward_embedding(w, ids),
                backward embedding::backward_embedding(w, ids),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Ids(IdBuffer {
                    ids,
                    bounded_by: w,
                    axis: IdAxis::First,
                    op: "embedding",
                });
            LogSoftmax { x }:
                name "log_softmax", inputs [x], reads (false, true),
                forward loss::forward_log_softmax(x),
                backward loss::backward_log_softmax(x),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            CrossEntropy { logits, targets, probs }:
                name "cross_entropy", inputs [logits], reads (false, true),
                forward loss::forward_cross_entropy(logits, targets, probs),
                backward loss::backward_cross_entropy(logits, targets, probs),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Ids(IdBuffer {
                    ids: targets,
                    bounded_by: logits,
                    axis: IdAxis::Last,
                    op: "cross_entropy",
                });
            MseLoss { pred, target }:
                name "mse_loss", inputs [pred, target], reads (true, false),
                forward loss::forward_mse(pred, target),
                backward loss::backward_mse(pred, target),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            LayerNorm { x, w, b, mean, rstd }:
                name "layernorm", inputs [x, w, b], reads (true, true),
                forward norm::forward_layernorm([x, w, b], mean, rstd),
                backward norm::backward_layernorm([x, w, b], mean, rstd),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Forward updates the running statistics (training, not in a
            // recomputed segment's replay); backward reads the mean and
            // 1/std it saved.
            BatchNorm { x, w, b, stats, training, momentum, eps, saved }:
                name "batch_norm", inputs ([x], [w, b]), reads (true, true),
                forward batch_norm::forward_batch_norm(
                    x, [w, b], stats, training, momentum, eps, saved),
                backward batch_norm::backward_batch_norm(x, [w, b], training, saved),
                replay None,
                capture CaptureRule::Plain;
            GroupNorm { x, w, b, groups, eps, saved }:
                name "group_norm", inputs ([x], [w, b]), reads (true, true),
                forward group_norm::forward_group_norm(x, [w, b], groups as usize, eps, saved),
                backward group_norm::backward_group_norm(x, [w, b], groups as usize, saved),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            RmsNorm { x, w, eps, rstd }:
                name "rmsnorm", inputs [x, w], reads (true, true),
                forward llama::rmsnorm::forward_rmsnorm(x, w, eps, rstd),
                backward llama::rmsnorm::backward_rmsnorm(x, w, rstd),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Swiglu { gate, up }:
                name "swiglu", inputs [gate, up], reads (true, false),
                forward llama::swiglu::forward_swiglu(gate, up),
                backward llama::swiglu::backward_swiglu(gate, up),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Backward reads only the forward's cos and sin table.
            Rope { x, theta, offset, table }:
                name "rope", inputs [x], reads (false, true),
                forward llama::rope::forward_rope(x, theta, offset, table),
                backward llama::rope::backward_rope(x, table),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // The causal mask leaves exact zeros: only forward reads the flag.
            Softmax { x, scale, causal }:
                name "softmax", inputs [x], reads (false, true),
                forward attention::forward_softmax(x, scale, causal),
                backward attention::backward_softmax(x, scale),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Attention { qkv, n_head, probs }:
                name "attention", inputs [qkv], reads (true, true),
                forward attention::forward_attention(qkv, n_head as usize, probs),
                backward attention::backward_attention(qkv, n_head as usize, probs),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            AttentionGqa { q, k, v, probs }:
                name "attention_gqa", inputs [q, k, v], reads (true, true),
                forward attention::gqa::forward_attention_gqa([q, k, v], probs),
                backward attention::gqa::backward_attention_gqa([q, k, v], probs),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Backward unfolds x again into `col`: nothing saved is read.
            Conv2d { x, w, bias, geom, col }:
                name "conv2d", inputs ([x, w], bias), reads (true, false),
                forward conv::forward_conv2d(x, w, bias, geom, col),
                backward conv::backward_conv2d(x, w, bias, geom, col),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Backward unfolds x again, and masks by the output.
            Conv2dRelu { x, w, bias, geom, col }:
                name "conv2d_relu", inputs ([x, w], bias), reads (true, true),
                forward conv::forward_conv2d_relu(x, w, bias, geom, col),
                backward conv::backward_conv2d_relu(x, w, bias, geom, col),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            MaxPool2d { x, geom, argmax }:
                name "max_pool2d", inputs [x], reads (false, true),
                forward conv::forward_max_pool2d(x, geom, argmax),
                backward conv::backward_max_pool2d(x, geom, argmax),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            AvgPool2d { x, geom, count_include_pad }:
                name "avg_pool2d", inputs [x], reads (false, false),
                forward conv::forward_avg_pool2d(x, geom, count_include_pad),
                backward conv::backward_avg_pool2d(x, geom, count_include_pad),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Cholesky { a, work }:
                name "cholesky", inputs [a], reads (false, true),
                forward linalg::forward_cholesky(a),
                backward linalg::backward_cholesky(a, work),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Backward reads L and its own output X.
            SolveLower { l, b, work }:
                name "solve_lower", inputs [l, b], reads (true, true),
                forward linalg::forward_solve_lower(l, b),
                backward linalg::backward_solve_lower(l, b, work),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            LogDetSpd { a, chol, work }:
                name "log_det_spd", inputs [a], reads (false, true),
                forward linalg::forward_log_det_spd(a, chol),
                backward linalg::backward_log_det_spd(a, chol, work),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Backward reads a and its own output x.
            LinearRecurrence { a, c, work }:
                name "linear_recurrence", inputs [a, c], reads (true, true),
                forward linalg::forward_linear_recurrence(a, c),
                backward linalg::backward_linear_recurrence(a, c, work),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            Diagonal { a }:
                name "diagonal", inputs [a], reads (false, false),
                forward linalg::forward_diagonal(a),
                backward linalg::backward_diagonal(a),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            // Both backwards recompute from x alone.
            CholeskyCorr { x }:
                name "constrain_cholesky_corr", inputs [x], reads (true, false),
                forward cholesky_corr::forward_cholesky_corr(x),
                backward cholesky_corr::backward_cholesky_corr(x),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            CholeskyCorrLogJacobian { x }:
                name "constrain_cholesky_corr", inputs [x], reads (true, false),
                forward cholesky_corr::forward_cholesky_corr_log_jacobian(x),
                backward cholesky_corr::backward_cholesky_corr_log_jacobian(x),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            NormalIdGlm { y, x, alpha, beta, sigma, transposed, resid }:
                name "normal_id_glm_lpdf", inputs [y, x, alpha, beta, sigma], reads (true, true),
                forward glm::forward_normal_id_glm([y, x, alpha, beta, sigma], transposed, resid),
                backward glm::backward_normal_id_glm([y, x, alpha, beta, sigma], transposed, resid),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            BernoulliLogitGlm { y, x, alpha, beta, transposed, saved }:
                name "bernoulli_logit_glm_lpmf", inputs [y, x, alpha, beta], reads (true, true),
                forward glm::forward_bernoulli_logit_glm([y, x, alpha, beta], transposed, saved),
                backward glm::backward_bernoulli_logit_glm([y, x, alpha, beta], transposed, saved),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            LkjCorrCholesky { l, eta, constant }:
                name "lkj_corr_cholesky_lpdf", inputs [l], reads (true, false),
                forward lkj::forward_lkj_corr_cholesky(l, eta, constant),
                backward lkj::backward_lkj_corr_cholesky(l, eta),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            NormalLpdf { y, mu, sigma }:
                name "normal_lpdf", inputs [y, mu, sigma], reads (true, false),
                forward lpdf::forward_normal_lpdf([y, mu, sigma]),
                backward lpdf::backward_normal_lpdf([y, mu, sigma]),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
            GlobalAvgPool2d { x }:
                name "global_avg_pool2d", inputs [x], reads (false, false),
                forward conv::forward_global_avg_pool2d(x),
                backward conv::backward_global_avg_pool2d(x),
                replay Some(ReplayForm::Eager),
                capture CaptureRule::Plain;
        }
    };
}

/// What a row's `inputs` may be: the ids in order, with no array built.
pub(crate) trait InputIds {
    fn each(self, f: &mut impl FnMut(u32));
}

impl<const N: usize> InputIds for [u32; N] {
    #[inline(always)]
    fn each(self, f: &mut impl FnMut(u32)) {
        self.into_iter().for_each(f);
    }
}

impl InputIds for &[u32] {
    #[inline(always)]
    fn each(self, f: &mut impl FnMut(u32)) {
        self.iter().for_each(|&x| f(x));
    }
}

/// Fixed ids, then one that may be absent (a bias).
impl<const N: usize> InputIds for ([u32; N], Option<u32>) {
    #[inline(always)]
    fn each(self, f: &mut impl FnMut(u32)) {
        self.0.into_iter().for_each(&mut *f);
        self.1.into_iter().for_each(f);
    }
}

/// Fixed ids, then several that may each be absent (a weight and a bias).
impl<const N: usize, const M: usize> InputIds for ([u32; N], [Option<u32>; M]) {
    #[inline(always)]
    fn each(self, f: &mut impl FnMut(u32)) {
        self.0.into_iter().for_each(&mut *f);
        self.1.into_iter().flatten().for_each(f);
    }
}

macro_rules! define_op_matches {
    ($(
        $v:ident { $($field:ident),* }:
            name $name:expr, inputs $inputs:expr, reads ($ri:expr, $ro:expr),
            forward $($fwd:ident)::+ ($($fa:expr),*),
            backward $($bwd:ident)::+ ($($ba:expr),*),
            replay $replay:expr,
            capture $capture:expr;
    )*) => {
        /// Forward dispatch: one arm per row.
        #[inline(always)]
        pub(super) fn forward_op(ctx: &mut Context, op: &Op, out: u32) {
            // Buffers only backward uses (its scratch) go unnamed here.
            #[allow(unused_variables)]
            match *op {
                $(Op::$v { $($field),* } => $($fwd)::+(ctx, out, $($fa),*),)*
            }
        }

        /// Backward dispatch: one arm per row.
        #[inline(always)]
        pub(super) fn backward_op(ctx: &mut Context, op: &Op, out: u32) {
            #[allow(unused_variables)]
            match *op {
                $(Op::$v { $($field),* } => $($bwd)::+(ctx, out, $($ba),*),)*
            }
        }

        impl Op {
            /// The op's name in traces.
            #[cfg(feature = "trace")]
            #[allow(unused_variables)]
            pub(crate) fn trace_name(&self) -> &'static str {
                match *self {
                    $(Op::$v { $($field),* } => $name,)*
                }
            }

            /// What this op's backward reads (see [`BackwardReads`]).
            #[allow(unused_variables)]
            pub(crate) fn backward_reads(&self) -> BackwardReads {
                match *self {
                    $(Op::$v { $($field),* } => BackwardReads { inputs: $ri, own: $ro },)*
                }
            }

            /// What the op is to the replay program (see [`ReplayForm`]):
            /// None where a replay takes the ordinary walk.
            #[allow(unused_variables)]
            pub(crate) fn replay_form(&self) -> Option<ReplayForm> {
                match *self {
                    $(Op::$v { $($field),* } => $replay,)*
                }
            }

            /// What capture must know of the op (see [`CaptureRule`]).
            #[allow(unused_variables)]
            pub(crate) fn capture_rule(&self) -> CaptureRule {
                match *self {
                    $(Op::$v { $($field),* } => $capture,)*
                }
            }

            /// Calls `f` on each of [`inputs`](Self::inputs), in order, with
            /// no array built: the form the per-op passes of backward use.
            #[inline(always)]
            #[allow(unused_variables)]
            pub(crate) fn for_each_input(&self, mut f: impl FnMut(u32)) {
                match *self {
                    $(Op::$v { $($field),* } => InputIds::each($inputs, &mut f),)*
                }
            }
        }
    };
}
op_table!(define_op_matches);

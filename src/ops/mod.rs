//! Ops: each family file holds the recording function (a `Context` method),
//! the forward and backward kernels side by side, and their tests.

pub(crate) mod attention;
pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod fastmath;
pub(crate) mod loss;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod reduce;
pub(crate) mod shape_ops;

#[cfg(test)]
pub(crate) mod gradcheck;

use crate::context::Context;
use crate::tape::{Node, OpKind};

/// Backward dispatch: one arm per op kind, no wildcard.
pub(crate) fn backward(ctx: &mut Context, node: &Node) {
    use OpKind::*;
    match node.kind {
        Add | Sub | Mul | Div => elementwise::binary_backward(ctx, node),
        Scale | Exp | Log | Tanh | Relu | Sigmoid | Gelu => elementwise::unary_backward(ctx, node),
        Sum | Mean | SumAxis | MeanAxis => reduce::backward(ctx, node),
        Permute => shape_ops::permute_backward_node(ctx, node),
        Matmul | Bmm => matmul::product_backward(ctx, node),
        Linear => matmul::linear_backward_node(ctx, node),
        Embedding => embedding::embedding_backward_node(ctx, node),
        CrossEntropy => loss::cross_entropy_backward_node(ctx, node),
        LayerNorm => norm::layernorm_backward_node(ctx, node),
        Softmax => attention::softmax_backward_node(ctx, node),
        Attention => attention::attention_backward_node(ctx, node),
    }
}

//! The tape: one fixed-size, `Copy` record per op, with inputs and attributes
//! inline. Nothing in a record points at caller memory; the only buffers a
//! record names are arena buffers the op saved for its backward pass.

use crate::arena::Buf;

/// Most inputs any op takes (linear and layernorm take three).
pub const MAX_INPUTS: usize = 3;

/// What an op was. The backward dispatch in `ops::backward` matches on it
/// exhaustively, so adding a kind without a backward does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Add,
    Sub,
    Mul,
    Div,
    Scale,
    Exp,
    Log,
    Tanh,
    Relu,
    Sigmoid,
    Gelu,
    Sum,
    Mean,
    SumAxis,
    MeanAxis,
    Permute,
    Matmul,
    Linear,
    Bmm,
    Embedding,
    CrossEntropy,
    LayerNorm,
    Softmax,
    Attention,
}

/// Op attributes, inline.
#[derive(Clone, Copy, Debug)]
pub enum Attrs {
    None,
    Scale(f32),
    Matmul {
        trans_a: bool,
        trans_b: bool,
    },
    Axis {
        axis: u8,
    },
    Permute {
        perm: [u8; crate::shape::MAX_DIMS],
    },
    /// Token ids (copied into the arena).
    Ids {
        ids: Buf<u32>,
    },
    /// Targets and the softmax probabilities saved by the forward pass.
    CrossEntropy {
        targets: Buf<u32>,
        probs: Buf,
    },
    /// Per-row mean and 1/std saved by the forward pass.
    LayerNorm {
        mean: Buf,
        rstd: Buf,
    },
    Softmax {
        scale: f32,
    },
    /// Attention probabilities [B, NH, T, T] saved by the forward pass,
    /// followed by a [T, T] scratch for the backward pass.
    Attention {
        n_head: u32,
        probs: Buf,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Node {
    pub kind: OpKind,
    pub inputs: [u32; MAX_INPUTS],
    pub n_inputs: u8,
    pub out: u32,
    pub attrs: Attrs,
}

impl Node {
    pub fn new(kind: OpKind, inputs: &[u32], out: u32, attrs: Attrs) -> Node {
        debug_assert!(inputs.len() <= MAX_INPUTS);
        let mut arr = [u32::MAX; MAX_INPUTS];
        arr[..inputs.len()].copy_from_slice(inputs);
        Node {
            kind,
            inputs: arr,
            n_inputs: inputs.len() as u8,
            out,
            attrs,
        }
    }

    pub fn input(&self, i: usize) -> u32 {
        debug_assert!(i < self.n_inputs as usize);
        self.inputs[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_small_and_inline() {
        // Inline records keep the tape one contiguous, allocation-free array.
        assert!(
            size_of::<Node>() <= 96,
            "Node is {} bytes",
            size_of::<Node>()
        );
        let n = Node::new(OpKind::Add, &[3, 4], 5, Attrs::None);
        assert_eq!((n.input(0), n.input(1), n.n_inputs), (3, 4, 2));
    }
}

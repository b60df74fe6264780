//! Slice kernels that know nothing of tensors or the context: branch-free
//! exp/tanh and f32/f64 reductions shared by the ops and the optimizer.

pub(crate) mod fastmath;
pub(crate) mod lanes;

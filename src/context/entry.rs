//! One row of the tensor table: plain data a room of the context (or a
//! captured step's copy of the table) holds without the context itself.

use crate::arena::Buf;
use crate::shape::Shape;

/// One row of the tensor table (plain data; the buffers live in Storage).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorEntry {
    pub shape: Shape,
    pub data: Buf,
    /// Gradient buffer: persistent for parameters; for activations, a slot
    /// of the planned gradient region during backward, kept afterwards only
    /// when `retain` is set.
    pub grad: Option<Buf>,
    pub requires_grad: bool,
    /// The caller asked to keep this activation's gradient past backward.
    pub retain: bool,
    /// For reshape views: the entry whose memory (and gradient) this shares.
    pub view_of: Option<u32>,
    /// Set during backward once a gradient flows into this tensor from the
    /// loss; ops whose output never receives one are skipped (they are not
    /// part of the loss's graph, and 0 * NaN would poison gradients).
    pub flow: bool,
    /// During backward: this tensor's gradient slot is born (its first
    /// write comes next) but still holds whatever the slot held before.
    /// The first access zeroes it, unless the kernel asked to overwrite it
    /// whole ([`Context::grad_to_overwrite`]): then no fill is wasted.
    pub unzeroed: bool,
}

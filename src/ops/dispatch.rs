//! The dispatch over recorded ops: [`forward`] computes an op's output
//! from its record (the first run and a recomputed segment's replay alike),
//! [`backward`] sends its output's gradient to its inputs. Their arms are
//! generated from the op table (`table.rs`), one row per `Op` variant, no
//! wildcard: a new variant does not build until it has a row.

use super::elementwise::scalar::ScalarKernels;
use super::{Op, table};
use crate::context::{Context, EagerOps, Tensor};

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
/// backward) from its inputs.
pub(crate) fn forward(ctx: &mut Context, op: &Op, out: u32) {
    #[cfg(feature = "trace")]
    let _timer = OpTimer::new(*op, false);
    table::forward_op(ctx, op, out);
}

/// Backward dispatch: accumulates the gradient of `out` into the gradients
/// of the op's inputs.
pub(crate) fn backward(ctx: &mut Context, op: &Op, out: u32) {
    #[cfg(feature = "trace")]
    let _timer = OpTimer::new(*op, true);
    table::backward_op(ctx, op, out);
}

/// The replay program's generic step runs an op through these very
/// entry points.
impl EagerOps for ScalarKernels {
    #[inline(always)]
    fn eager_forward(ctx: &mut Context, op: &Op, out: u32) {
        forward(ctx, op, out);
    }
    #[inline(always)]
    fn eager_backward(ctx: &mut Context, op: &Op, out: u32) {
        backward(ctx, op, out);
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
        let kind = op.trace_name();
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

//! Slice kernels that know nothing of tensors or the context: branch-free
//! exp/tanh and f32/f64 reductions shared by the ops and the optimizer.

pub(crate) mod fastmath;
pub(crate) mod lanes;

/// Fills `s` with zeros. A one-element slice (a scalar model's gradient
/// slot, zeroed at each backward) is one store: `fill` on a slice of
/// unknown length calls memset, whose call and dispatch cost more.
#[inline(always)]
pub(crate) fn zero(s: &mut [f32]) {
    if let [x] = s {
        *x = 0.0;
    } else {
        s.fill(0.0);
    }
}

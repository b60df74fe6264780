//! Shape helpers the convolution and pooling kernels share.

use crate::shape::Shape;

/// The four dims of an NCHW input, or of an NCL one read as N, C, 1, L.
pub(crate) fn nchw(s: Shape) -> [usize; 4] {
    match *s.dims() {
        [n, c, h, w] => [n, c, h, w],
        [n, c, l] => [n, c, 1, l],
        _ => unreachable!("conv and pool records hold 3-D or 4-D inputs"),
    }
}

/// The output positions whose kernel tap at offset `tap` lands inside the
/// input (not in the padding) along one axis: `lo..hi`, reading input
/// positions `first`, `first + stride`, ...
pub(super) struct Taps {
    pub lo: usize,
    pub hi: usize,
    pub first: usize,
}

impl Taps {
    /// Along an axis of `len` inputs and `out_len` outputs.
    pub fn along(len: usize, out_len: usize, stride: usize, pad: usize, tap: usize) -> Taps {
        // i = o stride + tap - pad is in 0..len for o in lo..hi.
        let lo = pad.saturating_sub(tap).div_ceil(stride);
        let hi = (len + pad)
            .saturating_sub(tap)
            .div_ceil(stride)
            .min(out_len);
        let lo = lo.min(hi);
        // No tap inside: nothing is read, and `first` must stay in bounds.
        let first = if lo < hi { lo * stride + tap - pad } else { 0 };
        Taps { lo, hi, first }
    }
}

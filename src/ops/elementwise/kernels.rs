//! The element kernels of the element-wise ops, on plain slices: the
//! unary functions' `<f>_forward` / `<f>_backward` (the special functions'
//! in `special_fns.rs`) and their dispatch over `UnaryFn`, scale, pow,
//! clamp, and the helpers the binary ops share. A leaf: the op functions in
//! `mod.rs`, `binary.rs` and `scalar.rs` call into it, never the reverse.

use super::special_fns::*;
use crate::kernels::fastmath;
use crate::ops::UnaryFn;

/// Up to this many elements a kernel runs on the baseline path: the
/// dispatch to the wide instruction sets costs more than the work (a
/// scalar model's ops are one element each). The results are the same
/// bits: these kernels use only IEEE operations and libm calls, no fused
/// or approximate instructions that differ between instruction sets.
pub(super) const SMALL: usize = 8;

/// dst += s * src, or dst = s * src with `assign`, element by element
/// (s = 1 or -1: exact).
#[inline(always)]
pub(super) fn add_scaled_into(dst: &mut [f32], src: &[f32], s: f32, assign: bool) {
    if assign {
        dst.iter_mut().zip(src).for_each(|(d, &v)| *d = s * v);
    } else {
        dst.iter_mut().zip(src).for_each(|(d, &v)| *d += s * v);
    }
}

/// max(a, b), taking `a` on ties and NaN from either side.
pub(super) fn max_of(a: f32, b: f32) -> f32 {
    if takes_a_max(a, b) { a } else { b }
}

/// min(a, b), taking `a` on ties and NaN from either side.
pub(super) fn min_of(a: f32, b: f32) -> f32 {
    if takes_a_min(a, b) { a } else { b }
}

/// Whether max(a, b) is `a` (the operand that gets the gradient).
pub(super) fn takes_a_max(a: f32, b: f32) -> bool {
    a >= b || a.is_nan()
}

/// Whether min(a, b) is `a`.
pub(super) fn takes_a_min(a: f32, b: f32) -> bool {
    a <= b || a.is_nan()
}

/// y = s * x. x, y: `[N]`.
#[inline(always)]
pub(super) fn scale_forward(y: &mut [f32], x: &[f32], s: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = s * x);
}

/// dx += s * dout.
#[inline(always)]
pub(super) fn scale_backward(dx: &mut [f32], dout: &[f32], s: f32) {
    dx.iter_mut().zip(dout).for_each(|(d, &g)| *d += s * g);
}

/// The kernel argument a row's `reads` names: `x` or `y`.
/// A row's `assign` kernel, or its `backward` where it has none.
macro_rules! assign_or {
    (-, $bwd:expr) => {
        $bwd
    };
    (($kernel:expr), $bwd:expr) => {
        $kernel
    };
}

macro_rules! pick {
    (x, $x:expr, $y:expr) => {
        $x
    };
    (y, $x:expr, $y:expr) => {
        $y
    };
}

/// From the rows of [`unary_fns`](crate::ops::unary_fns): the two
/// dispatches over `UnaryFn`.
macro_rules! unary_kernels {
    ($($v:ident, $name:ident, $reads:ident, $fwd:ident, $bwd:expr, $assign:tt, $split:tt, ($lo:expr, $hi:expr, $away:expr), $doc:literal;)*) => {
        /// y = f(x). x, y: `[N]`.
        #[inline(always)]
        pub(super) fn unary_forward(f: UnaryFn, y: &mut [f32], x: &[f32]) {
            match f {
                $(UnaryFn::$v => $fwd(y, x),)*
            }
        }

        /// dx += dout * f'(x), given x and the forward output y = f(x). All
        /// `[N]`. `assign`: write dx with `=` (its slot holds stale values);
        /// only rows with an `assign` kernel take it, the others always add.
        #[inline(always)]
        pub(super) fn unary_backward(
            f: UnaryFn,
            assign: bool,
            dx: &mut [f32],
            dout: &[f32],
            x: &[f32],
            y: &[f32],
        ) {
            match f {
                $(UnaryFn::$v if assign => (assign_or!($assign, $bwd))(dx, dout, pick!($reads, x, y)),)*
                $(UnaryFn::$v => ($bwd)(dx, dout, pick!($reads, x, y)),)*
            }
        }
    };
}
crate::ops::unary_fns!(unary_kernels);

/// y = e^x, within 1 ulp (`special::exp`: branch-free, so the loop
/// vectorises in each SIMD copy; libm's expf is a call per element).
#[inline(always)]
pub(super) fn exp_forward(y: &mut [f32], x: &[f32]) {
    let x = &x[..y.len()];
    for i in 0..y.len() {
        y[i] = crate::special::exp(x[i]);
    }
}

/// dx += dout * y, since (e^x)' = e^x = y.
#[inline(always)]
pub(super) fn exp_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * y;
    }
}

/// y = ln x, within 1 ulp (`special::log`, vectorised as `exp_forward`).
#[inline(always)]
pub(super) fn log_forward(y: &mut [f32], x: &[f32]) {
    let x = &x[..y.len()];
    for i in 0..y.len() {
        y[i] = crate::special::log(x[i]);
    }
}

/// dx += dout / x.
#[inline(always)]
pub(super) fn log_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g / x;
    }
}

/// y = tanh x.
#[inline(always)]
pub(super) fn tanh_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = crate::special::tanh(x));
}

/// dx += dout * (1 - y^2).
#[inline(always)]
pub(super) fn tanh_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * (1.0 - y * y);
    }
}

/// y = max(x, 0).
#[inline(always)]
pub(super) fn relu_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0));
}

/// dx += dout where x > 0 (the subgradient at 0 is taken as 0).
#[inline(always)]
pub(super) fn relu_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if x > 0.0 { g } else { 0.0 };
    }
}

/// y = 1 / (1 + e^-x).
#[inline(always)]
pub(super) fn sigmoid_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = 1.0 / (1.0 + (-x).exp()));
}

/// dx += dout * y (1 - y).
#[inline(always)]
pub(super) fn sigmoid_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g * y * (1.0 - y);
    }
}

/// y = sqrt(x).
#[inline(always)]
pub(super) fn sqrt_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.sqrt());
}

/// dx += dout / (2 y), since (sqrt x)' = 1 / (2 sqrt x) = 1 / (2 y).
#[inline(always)]
pub(super) fn sqrt_backward(dx: &mut [f32], dout: &[f32], y: &[f32]) {
    for ((d, &g), &y) in dx.iter_mut().zip(dout).zip(y) {
        *d += g / (2.0 * y);
    }
}

/// y = |x|.
#[inline(always)]
pub(super) fn abs_forward(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.abs());
}

/// dx += dout * sign(x), with the subgradient 0 at x = 0 (and for NaN).
#[inline(always)]
pub(super) fn abs_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if x > 0.0 {
            g
        } else if x < 0.0 {
            -g
        } else {
            0.0
        };
    }
}

/// y = min(max(x, lo), hi), NaN staying NaN. lo <= hi, neither NaN.
#[inline(always)]
pub(super) fn clamp_forward(y: &mut [f32], x: &[f32], lo: f32, hi: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.clamp(lo, hi));
}

/// dx += dout where lo < x < hi (0 at the bounds, outside, and for NaN).
#[inline(always)]
pub(super) fn clamp_backward(dx: &mut [f32], dout: &[f32], x: &[f32], lo: f32, hi: f32) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += if lo < x && x < hi { g } else { 0.0 };
    }
}

/// y = x^p. x, y: `[N]`.
#[inline(always)]
pub(super) fn pow_forward(y: &mut [f32], x: &[f32], p: f32) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.powf(p));
}

/// dx += dout * p x^(p-1); nothing when p = 0 (x^0 is constant, and
/// 0 * 0^-1 would be NaN at x = 0).
#[inline(always)]
pub(super) fn pow_backward(dx: &mut [f32], dout: &[f32], x: &[f32], p: f32) {
    if p == 0.0 {
        return;
    }
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        *d += g * p * x.powf(p - 1.0);
    }
}

const GELU_K: f32 = 0.797_884_6; // sqrt(2/pi)

/// y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))). x, y: `[N]`.
#[inline(always)]
pub(crate) fn gelu_forward(y: &mut [f32], x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        *y = 0.5 * x * (1.0 + fastmath::tanh(u));
    }
}

/// dx += dout * gelu'(x), or dx = dout * gelu'(x) with `ASSIGN`.
#[inline(always)]
pub(crate) fn gelu_backward<const ASSIGN: bool>(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        let u = GELU_K * (x + 0.044715 * x * x * x);
        let t = fastmath::tanh(u);
        let sech2 = 1.0 - t * t;
        let local = 0.5 * (1.0 + t) + 0.5 * x * sech2 * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        if ASSIGN {
            *d = g * local;
        } else {
            *d += g * local;
        }
    }
}

/// Below this x, e^-|x| is under fastmath's clamp (e^-87.3) and silu(x) =
/// x e^x (1 + e^x)^-1 is below 2e-36 in magnitude: -0 stands for it (and
/// is the limit at -inf).
pub(crate) const SILU_ZERO_BELOW: f32 = -87.0;

/// (sigmoid(x), 1 - sigmoid(x)) = (sigmoid(x), sigmoid(-x)) from one
/// e^-|x|, which never overflows; each side keeps its relative accuracy
/// (1 - s computed by subtraction would lose it for large x). Branch-free
/// (fastmath's exp, selects) so that a slice of them vectorises.
#[inline(always)]
pub(crate) fn sigmoid_pair(x: f32) -> (f32, f32) {
    let e = fastmath::exp(-x.abs());
    let r = 1.0 / (1.0 + e);
    let (big, small) = (r, e * r);
    if x < 0.0 { (small, big) } else { (big, small) }
}

/// y = x sigmoid(x). x, y: `[N]`. Far below 0 (x < -87, -inf included) y is
/// -0: the true value is below 2e-36 in magnitude, and -inf * 0 would be NaN.
#[inline(always)]
pub(super) fn silu_forward(y: &mut [f32], x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let (s, _) = sigmoid_pair(x);
        *y = if x < SILU_ZERO_BELOW { -0.0 } else { x * s };
    }
}

/// dx += dout * s (1 + x (1 - s)), s = sigmoid(x). Beyond |x| = 87 the
/// factor is within 2e-36 of its limits, 1 above and 0 below, which stand
/// for it (fastmath's clamped e^-|x| would spoil x (1 - s) there, and at
/// +-inf the formula gives inf * 0).
#[inline(always)]
pub(super) fn silu_backward(dx: &mut [f32], dout: &[f32], x: &[f32]) {
    for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
        let (s, one_minus_s) = sigmoid_pair(x);
        let local = s * (1.0 + x * one_minus_s);
        let local = if x < SILU_ZERO_BELOW {
            0.0
        } else if x > -SILU_ZERO_BELOW {
            1.0
        } else {
            local
        };
        *d += g * local;
    }
}

//! The element-wise functions: the binary ones ([`BinaryFn`]) and the
//! table of unary ones ([`unary_fns`]), from which macros generate
//! `UnaryFn`, its methods, the `Context` methods, the kernels' dispatch and
//! the gradient checks.

/// The element-wise binary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// ln Beta(a, b) (`crate::special::lbeta`).
    Lbeta,
    /// ln(e^a - e^b) (`crate::special::log_diff_exp`).
    LogDiffExp,
    /// The regularised lower incomplete gamma P(a, x) (`crate::special::gamma_p`).
    GammaP,
    /// The regularised upper incomplete gamma Q(a, x) (`crate::special::gamma_q`).
    GammaQ,
}

impl BinaryFn {
    /// For a ± b, the factor on b's gradient (a's is 1): both gradients
    /// are the output's, scaled, so backward reads neither operand and may
    /// write a newborn slot with `=`. None for the other functions.
    pub(crate) fn sum_sign(self) -> Option<f32> {
        match self {
            BinaryFn::Add => Some(1.0),
            BinaryFn::Sub => Some(-1.0),
            _ => None,
        }
    }

    /// `body(f)` with `f` a constant in each arm: the element kernels'
    /// match on it then folds away inside the body's loops.
    #[inline(always)]
    pub(crate) fn with_const(self, mut body: impl FnMut(BinaryFn)) {
        match self {
            BinaryFn::Add => body(BinaryFn::Add),
            BinaryFn::Sub => body(BinaryFn::Sub),
            BinaryFn::Mul => body(BinaryFn::Mul),
            BinaryFn::Div => body(BinaryFn::Div),
            BinaryFn::Max => body(BinaryFn::Max),
            BinaryFn::Min => body(BinaryFn::Min),
            BinaryFn::Lbeta => body(BinaryFn::Lbeta),
            BinaryFn::LogDiffExp => body(BinaryFn::LogDiffExp),
            BinaryFn::GammaP => body(BinaryFn::GammaP),
            BinaryFn::GammaQ => body(BinaryFn::GammaQ),
        }
    }

    /// The op's name in traces.
    #[cfg(feature = "trace")]
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryFn::Add => "add",
            BinaryFn::Sub => "sub",
            BinaryFn::Mul => "mul",
            BinaryFn::Div => "div",
            BinaryFn::Max => "max",
            BinaryFn::Min => "min",
            BinaryFn::Lbeta => "lbeta",
            BinaryFn::LogDiffExp => "log_diff_exp",
            BinaryFn::GammaP => "gamma_p",
            BinaryFn::GammaQ => "gamma_q",
        }
    }
}

/// The unary functions, one row each:
/// `Variant, name, reads, forward, backward, assign, split, (lo, hi, away_from_zero), "doc";`
///
/// * `name`: the [`Context`](crate::Context) method, the trace name and the
///   op named in errors (the C wrapper is `ag_<name>` in `ffi/ops.rs`).
/// * `reads`: what the backward kernel takes besides `dout`, `x` (the input)
///   or `y` (the output). It is also what [`Op::backward_reads`](crate::ops::Op::backward_reads) reports, so a
///   recomputed segment's replay restores exactly what the kernel reads.
/// * `forward(y, x)` and `backward(dx, dout, x_or_y)`: the kernels in
///   `ops/elementwise`; `backward` adds into `dx`.
/// * `assign`: `-`, or `(kernel)`, a backward that writes a gradient slot
///   with `=` when the slot is newborn (instead of zeroing it, then adding).
///   Both interpreters, eager and replay, take it from here. Worth a second
///   kernel only for an MLP's widest activation.
/// * `split`: `split` when a large map is cut into element tasks across
///   the pool, `-` when it stays on the calling thread (a cheap map).
/// * `(lo, hi, away_from_zero)`: where the finite-difference gradient check
///   samples x (`away_from_zero` keeps kinks at 0 out of the stencil).
///
/// From a row, macros generate the `UnaryFn` variant, its name and
/// `backward_reads`, the `Context` method, both dispatch arms and the
/// gradient check: a row cannot be half-written, and a row whose kernels do
/// not exist does not build.
macro_rules! unary_fns {
    ($then:ident) => {
        $then! {
            Exp, exp, y, exp_forward, exp_backward, -, -, (-1.0, 1.0, false), "e^x.";
            Log, log, x, log_forward, log_backward, -, -, (0.5, 3.0, false),
                "Natural log (NaN for negative inputs, -inf at 0, as in IEEE).";
            Tanh, tanh, y, tanh_forward, tanh_backward, -, -, (-1.0, 1.0, false), "tanh(x).";
            Relu, relu, x, relu_forward, relu_backward, -, -, (-1.0, 1.0, true), "max(x, 0).";
            Sigmoid, sigmoid, y, sigmoid_forward, sigmoid_backward, -, -, (-1.0, 1.0, false),
                "1 / (1 + e^-x).";
            Gelu, gelu, x, gelu_forward, gelu_backward::<false>, (gelu_backward::<true>), split, (-3.0, 3.0, false),
                "GELU, tanh approximation (GPT-2's).";
            Silu, silu, x, silu_forward, silu_backward, -, split, (-4.0, 4.0, false),
                "SiLU (swish), x sigmoid(x): finite for every finite x, 0 at -inf, x at +inf.";
            Sqrt, sqrt, y, sqrt_forward, sqrt_backward, -, -, (0.5, 3.0, false),
                "Square root (NaN below 0, as in IEEE; its gradient is infinite at 0).";
            Abs, abs, x, abs_forward, abs_backward, -, -, (-1.0, 1.0, true),
                "|x|. Its gradient is sign(x), taking the subgradient 0 at x = 0 (and for NaN).";
            Log1p, log1p, x, log1p_forward, log1p_backward, -, -, (-0.5, 2.0, false),
                "ln(1 + x), accurate for small x (NaN below -1, -inf at -1, as in IEEE).";
            // The special functions (crate::special): the check stays clear
            // of the poles of lgamma and digamma at 0.
            Lgamma, lgamma, x, lgamma_forward, lgamma_backward, -, -, (0.5, 4.0, false),
                "ln Gamma(x) for x > 0 (NaN for x < 0, +inf at 0; Gamma's sign is not kept).";
            Digamma, digamma, x, digamma_forward, digamma_backward, -, -, (0.75, 4.0, false),
                "digamma(x) = d/dx ln Gamma(x) for x > 0 (NaN for x < 0, -inf at 0).";
            Trigamma, trigamma, x, trigamma_forward, trigamma_backward, -, -, (0.75, 4.0, false),
                "trigamma(x) = d/dx digamma(x) for x > 0 (NaN for x < 0, +inf at 0).";
            // Kept below 0, where log1m_exp is defined.
            Log1mExp, log1m_exp, x, log1m_exp_forward, log1m_exp_backward, -, -, (-3.0, -0.2, false),
                "ln(1 - e^x) for x <= 0, accurate near 0 and far below (NaN above 0, -inf at 0).";
            Expm1, expm1, x, expm1_forward, expm1_backward, -, -, (-2.0, 2.0, false),
                "e^x - 1, accurate for small x.";
            Softplus, softplus, x, softplus_forward, softplus_backward, -, -, (-4.0, 4.0, false),
                "ln(1 + e^x) without overflow (Stan's log1p_exp).";
            LogSigmoid, log_sigmoid, x, log_sigmoid_forward, log_sigmoid_backward, -, -,
                (-4.0, 4.0, false), "ln sigmoid(x) = -softplus(-x), without overflow.";
            Erf, erf, x, erf_forward, erf_backward, -, -, (-2.0, 2.0, false), "The error function.";
            NormalCdf, normal_cdf, x, normal_cdf_forward, normal_cdf_backward, -, -,
                (-3.0, 3.0, false), "Phi(x), the standard normal CDF.";
            NormalLcdf, normal_lcdf, x, normal_lcdf_forward, normal_lcdf_backward, -, -,
                (-3.0, 3.0, false), "ln Phi(x), finite far into the lower tail.";
            // Kept clear of 0 and 1, where the quantile leaves for infinity.
            InvPhi, inv_phi, x, inv_phi_forward, inv_phi_backward, -, -, (0.05, 0.95, false),
                "inv_Phi(p), the standard normal quantile: NaN outside [0, 1], -inf at 0, +inf at 1.";
        }
    };
}
pub(crate) use unary_fns;

/// The `assign` column of a row of [`unary_fns`], as a bool.
macro_rules! has_assign_kernel {
    (-) => {
        false
    };
    (($kernel:expr)) => {
        true
    };
}

/// The `split` column of a row of [`unary_fns`], as a bool.
macro_rules! splits_into_tasks {
    (-) => {
        false
    };
    (split) => {
        true
    };
}

/// `x` or `y` of a row of [`unary_fns`], as a bool: whether it is `y`.
macro_rules! reads_output {
    (x) => {
        false
    };
    (y) => {
        true
    };
}

macro_rules! define_unary_fn {
    ($($v:ident, $name:ident, $reads:ident, $fwd:ident, $bwd:expr, $assign:tt, $split:tt, ($lo:expr, $hi:expr, $away:expr), $doc:literal;)*) => {
        /// The element-wise unary functions (rows of [`unary_fns`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum UnaryFn {
            $($v,)*
        }

        impl UnaryFn {
            /// Every function, in table order.
            #[cfg(test)]
            pub(crate) const ALL: &[UnaryFn] = &[$(UnaryFn::$v,)*];

            /// The op's name (method, trace, messages).
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(UnaryFn::$v => stringify!($name),)*
                }
            }

            /// Whether the backward kernel reads the output (else the input).
            pub(crate) fn reads_output(self) -> bool {
                match self {
                    $(UnaryFn::$v => reads_output!($reads),)*
                }
            }

            /// Whether backward writes a newborn gradient slot with `=`
            /// (the row's `assign` kernel) instead of zeroing it and adding.
            pub(crate) fn assigns_fresh_grad(self) -> bool {
                match self {
                    $(UnaryFn::$v => has_assign_kernel!($assign),)*
                }
            }

            /// Whether a large map is cut into element tasks.
            pub(crate) fn splits_into_tasks(self) -> bool {
                match self {
                    $(UnaryFn::$v => splits_into_tasks!($split),)*
                }
            }

            /// Where the gradient check samples x: (lo, hi, away from zero).
            #[cfg(test)]
            pub(crate) fn check_domain(self) -> (f32, f32, bool) {
                match self {
                    $(UnaryFn::$v => ($lo, $hi, $away),)*
                }
            }
        }
    };
}
unary_fns!(define_unary_fn);

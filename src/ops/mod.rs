//! Ops. `Op` is the tape's record of one op: each variant holds its input
//! ids, its scalar attributes and the arena buffers it saved for backward,
//! so a kernel never has to check that its attributes fit its kind.
//!
//! Each family file holds, side by side: the recording function (a
//! `Context` method that validates its arguments, allocates the output and
//! the buffers saved for backward, then runs and records the op), the
//! `<op>_forward` / `<op>_backward` kernels, the `forward_<op>` and
//! `backward_<op>` functions that fetch the buffers of a recorded op and call
//! its kernels, and the tests (forward values and a finite-difference
//! gradient check).
//!
//! Forward values are computed only through
//! [`dispatch::forward`], from the record alone: the first run and the
//! replay of a recomputed segment during backward run the very same kernels
//! on the same inputs, so the replayed values are bit-identical. Whatever an
//! op cannot recompute from its inputs (token ids, targets, a dropout mask
//! drawn from a seed passed by value) is stored in a buffer the record names, outside any
//! recomputed region.
//!
//! # Adding an op
//!
//! Every place a new op is written by hand, and what catches a forgotten
//! one. Everything else (the `UnaryFn` variant, `Op::inputs`,
//! `Op::backward_reads`, both dispatch arms, the trace name, the unary
//! `Context` method and gradient check, `include/arenagrad.h` through
//! `make header`) is generated.
//!
//! A unary function (one input, one output of its shape, no attributes):
//!
//! 1. A row of [`unary_fns`] (below): name, what backward reads, kernels,
//!    gradient-check domain, doc. The compiler: the row must be complete.
//! 2. `<name>_forward` / `<name>_backward` in `elementwise/kernels.rs` (the
//!    special functions' in `elementwise/special_fns.rs`). The compiler:
//!    the row names them.
//! 3. The C wrapper `ag_<name>` in `src/ffi/ops/<family>.rs`, with its
//!    `Errors:` list. `tests/header.rs` (header regenerated),
//!    `tests/status_contract.rs` (the list is what the code returns).
//! 4. Its row in the C-function table (`tests/common/c_functions.rs`),
//!    which generates the NULL-context row, the status-contract arm, its
//!    `tests/c/ops.def` row (`c:` cell, then `make header`), `ids::FUNCTIONS`
//!    and the fuzz arm (`fuzz: ID => unary`). `tests/header_tables.rs`
//!    (a header function without a row or without a `c:` cell),
//!    `tests/header.rs` (ops.def regenerated).
//! 5. Its fuzz id constant in `fuzz/src/ffi_ops/ids.rs`. The compiler: the
//!    row names it; `tests/fuzz_corpus_replay.rs` (each id has an arm and
//!    a successful call in the committed corpus).
//! 6. Its name in `README.md`'s `## Ops` section. `tests/readme.rs`.
//!
//! Any other op:
//!
//! 1. Its [`Op`] variant (below): input ids, attributes, saved buffers.
//!    The compiler: the table's matches are exhaustive.
//! 2. Its row in the op table (`table.rs`): name, inputs, what backward
//!    reads, forward and backward op functions. The compiler: the
//!    generated matches (no `_ =>` arm) and the row pattern (every column
//!    stated). What backward reads is also checked, for every
//!    `tests/c/ops.def` row, by the recomputed segments of
//!    `tests/c/test_segments.c`, whose gradients must equal the plain
//!    path's bit for bit.
//! 3. In its family file: the recording function (a `Context` method) and
//!    the `forward_<op>` / `backward_<op>` op functions with their kernels.
//!    The compiler: the row names the op functions, the C wrapper calls the
//!    method.
//! 4. A finite-difference `gradcheck` case in the family's tests. Review:
//!    no test can tell that a check is missing.
//! 5. The C wrapper `ag_<name>` in `src/ffi/ops/<family>.rs`, with its
//!    `Errors:` list. `tests/header.rs`, `tests/status_contract.rs`.
//! 6. Its row in the C-function table, as for a unary function; its fuzz
//!    cell `ID => binary` / `reduce_axis` / `product` when the harness has
//!    that shape, else `ID` and a hand-written arm in
//!    `fuzz/src/ffi_ops/mod.rs` (two more places). `tests/header_tables.rs`,
//!    `tests/header.rs`, `tests/fuzz_corpus_replay.rs`.
//! 7. Its fuzz id constant in `fuzz/src/ffi_ops/ids.rs`. The compiler,
//!    `tests/fuzz_corpus_replay.rs`.
//! 8. Its name in `README.md`'s `## Ops` section. `tests/readme.rs`.
//!
//! An op that an element-wise replay program should cover as one element
//! op also needs its [`OneOp`] and the replay program's arms
//! (`context::replay_program`); without them it runs through the general
//! dispatch, with the same values.

pub(crate) mod attention;
pub(crate) mod batch_norm;
pub(crate) mod conv;
pub(crate) mod dropout;
pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod group_norm;
pub(crate) mod llama;
pub(crate) mod loss;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod reduce;
pub(crate) mod shape_ops;

pub(crate) mod dispatch;
#[cfg(test)]
pub(crate) mod gradcheck;
mod table;

use crate::arena::Buf;
use crate::error::{Error, Result};
use crate::shape::MAX_DIMS;

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
}

impl BinaryFn {
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
        }
    }
}

/// The unary functions, one row each:
/// `Variant, name, reads, forward, backward, (lo, hi, away_from_zero), "doc";`
///
/// * `name`: the [`Context`](crate::Context) method, the trace name and the
///   op named in errors (the C wrapper is `ag_<name>` in `ffi/ops.rs`).
/// * `reads`: what the backward kernel takes besides `dout`, `x` (the input)
///   or `y` (the output). It is also what [`Op::backward_reads`] reports, so a
///   recomputed segment's replay restores exactly what the kernel reads.
/// * `forward(y, x)` and `backward(dx, dout, x_or_y)`: the kernels in
///   `ops/elementwise`; `backward` adds into `dx`.
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
            Exp, exp, y, exp_forward, exp_backward, (-1.0, 1.0, false), "e^x.";
            Log, log, x, log_forward, log_backward, (0.5, 3.0, false),
                "Natural log (NaN for negative inputs, -inf at 0, as in IEEE).";
            Tanh, tanh, y, tanh_forward, tanh_backward, (-1.0, 1.0, false), "tanh(x).";
            Relu, relu, x, relu_forward, relu_backward, (-1.0, 1.0, true), "max(x, 0).";
            Sigmoid, sigmoid, y, sigmoid_forward, sigmoid_backward, (-1.0, 1.0, false),
                "1 / (1 + e^-x).";
            Gelu, gelu, x, gelu_forward, gelu_backward::<false>, (-3.0, 3.0, false),
                "GELU, tanh approximation (GPT-2's).";
            Silu, silu, x, silu_forward, silu_backward, (-4.0, 4.0, false),
                "SiLU (swish), x sigmoid(x): finite for every finite x, 0 at -inf, x at +inf.";
            Sqrt, sqrt, y, sqrt_forward, sqrt_backward, (0.5, 3.0, false),
                "Square root (NaN below 0, as in IEEE; its gradient is infinite at 0).";
            Abs, abs, x, abs_forward, abs_backward, (-1.0, 1.0, true),
                "|x|. Its gradient is sign(x), taking the subgradient 0 at x = 0 (and for NaN).";
            Log1p, log1p, x, log1p_forward, log1p_backward, (-0.5, 2.0, false),
                "ln(1 + x), accurate for small x (NaN below -1, -inf at -1, as in IEEE).";
            // The special functions (crate::special): the check stays clear
            // of the poles of lgamma and digamma at 0.
            Lgamma, lgamma, x, lgamma_forward, lgamma_backward, (0.5, 4.0, false),
                "ln Gamma(x) for x > 0 (NaN for x < 0, +inf at 0; Gamma's sign is not kept).";
            Digamma, digamma, x, digamma_forward, digamma_backward, (0.75, 4.0, false),
                "digamma(x) = d/dx ln Gamma(x) for x > 0 (NaN for x < 0, -inf at 0).";
            Trigamma, trigamma, x, trigamma_forward, trigamma_backward, (0.75, 4.0, false),
                "trigamma(x) = d/dx digamma(x) for x > 0 (NaN for x < 0, +inf at 0).";
            // Kept below 0, where log1m_exp is defined.
            Log1mExp, log1m_exp, x, log1m_exp_forward, log1m_exp_backward, (-3.0, -0.2, false),
                "ln(1 - e^x) for x <= 0, accurate near 0 and far below (NaN above 0, -inf at 0).";
            Expm1, expm1, x, expm1_forward, expm1_backward, (-2.0, 2.0, false),
                "e^x - 1, accurate for small x.";
            Softplus, softplus, x, softplus_forward, softplus_backward, (-4.0, 4.0, false),
                "ln(1 + e^x) without overflow (Stan's log1p_exp).";
            LogSigmoid, log_sigmoid, x, log_sigmoid_forward, log_sigmoid_backward,
                (-4.0, 4.0, false), "ln sigmoid(x) = -softplus(-x), without overflow.";
            Erf, erf, x, erf_forward, erf_backward, (-2.0, 2.0, false), "The error function.";
            NormalCdf, normal_cdf, x, normal_cdf_forward, normal_cdf_backward,
                (-3.0, 3.0, false), "Phi(x), the standard normal CDF.";
            NormalLcdf, normal_lcdf, x, normal_lcdf_forward, normal_lcdf_backward,
                (-3.0, 3.0, false), "ln Phi(x), finite far into the lower tail.";
        }
    };
}
pub(crate) use unary_fns;

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
    ($($v:ident, $name:ident, $reads:ident, $fwd:ident, $bwd:expr, ($lo:expr, $hi:expr, $away:expr), $doc:literal;)*) => {
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

/// Most tensors one concat joins: their ids are held inline in the tape
/// record, so a concat never allocates for its inputs.
pub const MAX_CONCAT: usize = 8;

/// Stride, padding, dilation and groups of a convolution, as recorded.
/// Index 0 is the height axis, 1 the width axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub stride: [u16; 2],
    pub pad: [u16; 2],
    pub dilation: [u16; 2],
    pub groups: u16,
}

/// Kernel, stride and padding of a pooling window, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolGeom {
    pub kernel: [u16; 2],
    pub stride: [u16; 2],
    pub pad: [u16; 2],
}

/// Most inputs any op reads (concat; linear with a bias and layernorm read
/// three). [`Inputs`] is only ever a return value, never stored in the tape.
pub const MAX_INPUTS: usize = MAX_CONCAT;

/// One recorded op. Ids are rows of the context's tensor table; `Buf`s are
/// arena buffers the forward pass saved for the backward pass. `Copy` and
/// free of pointers to caller memory, so the tape is one flat array.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// f(a, b) element-wise with broadcasting.
    Binary { a: u32, b: u32, f: BinaryFn },
    /// s * x.
    Scale { x: u32, s: f32 },
    /// f(x) element-wise.
    Unary { x: u32, f: UnaryFn },
    /// x^p element-wise for a scalar exponent p.
    Pow { x: u32, p: f32 },
    /// x limited to [lo, hi].
    Clamp { x: u32, lo: f32, hi: f32 },
    /// a where cond is not zero, else b, with broadcasting.
    Where { cond: u32, a: u32, b: u32 },
    /// Sum (or mean) of all elements.
    Reduce { x: u32, mean: bool },
    /// Sum (or mean) along `axis`.
    ReduceAxis { x: u32, axis: u8, mean: bool },
    /// ln sum e^x along `axis`.
    LogSumExpAxis { x: u32, axis: u8 },
    /// Output axis i is input axis perm[i] (first rank(x) entries used).
    Permute { x: u32, perm: [u8; MAX_DIMS] },
    /// The first `n` of `xs` joined along `axis`.
    Concat {
        xs: [u32; MAX_CONCAT],
        n: u8,
        axis: u8,
    },
    /// Elements `start..start + len` of `axis` (len is the output's size
    /// along `axis`).
    Slice { x: u32, axis: u8, start: u32 },
    /// Inverted dropout; `scale` holds, per element, 0 (dropped) or
    /// 1 / (1 - p) (kept).
    Dropout { x: u32, scale: Buf },
    /// Inverted dropout whose mask every forward run draws into `scale`
    /// from the seed held by data tensor `seed` (read then, not recorded).
    DropoutSeeded {
        x: u32,
        seed: u32,
        p: f32,
        scale: Buf,
    },
    /// op(a) @ op(b), 2-D.
    Matmul {
        a: u32,
        b: u32,
        trans_a: bool,
        trans_b: bool,
    },
    /// Batched op(a) @ op(b) over equal leading dimensions.
    Bmm {
        a: u32,
        b: u32,
        trans_a: bool,
        trans_b: bool,
    },
    /// x @ w + bias.
    Linear { x: u32, w: u32, bias: Option<u32> },
    /// Rows of `w` gathered by `ids`.
    Embedding { w: u32, ids: Buf<u32> },
    /// log(softmax(x)) over the last axis.
    LogSoftmax { x: u32 },
    /// Mean cross-entropy; `probs` is softmax(logits) saved by the forward.
    CrossEntropy {
        logits: u32,
        targets: Buf<u32>,
        probs: Buf,
    },
    /// Mean of (pred - target)^2 over all elements.
    MseLoss { pred: u32, target: u32 },
    /// LayerNorm over the last axis; per-row mean and 1/std saved.
    LayerNorm {
        x: u32,
        w: u32,
        b: u32,
        mean: Buf,
        rstd: Buf,
    },
    /// Batch normalisation of `[N, C, *]` per channel; `stats` is the
    /// running statistics' registry index; `saved` holds the mean and
    /// 1/std used (`[C]` each) and `[2C]` of scratch.
    BatchNorm {
        x: u32,
        w: u32,
        b: u32,
        stats: u32,
        training: bool,
        momentum: f32,
        eps: f32,
        saved: Buf,
    },
    /// Group normalisation of `[N, C, *]` over `groups` groups of
    /// channels; `saved` holds each (image, group) row's mean and 1/std
    /// (`[N G]` each) and `[2C]` of scratch.
    GroupNorm {
        x: u32,
        w: u32,
        b: u32,
        groups: u32,
        eps: f32,
        saved: Buf,
    },
    /// RMSNorm over the last axis (no bias); per-row 1/rms saved.
    RmsNorm { x: u32, w: u32, eps: f32, rstd: Buf },
    /// Rotary position embeddings of [B, H, T, D]; `table` holds the cos
    /// and sin the forward computed.
    Rope {
        x: u32,
        theta: f32,
        offset: u32,
        table: Buf,
    },
    /// softmax(scale * x) over the last axis, causally masked when asked
    /// (the mask leaves exact zeros, so only forward reads the flag).
    Softmax { x: u32, scale: f32, causal: bool },
    /// Fused causal self-attention over packed qkv; `probs` holds the
    /// attention probabilities followed by the backward pass's scratch.
    Attention { qkv: u32, n_head: u32, probs: Buf },
    /// Convolution (2-D, or 1-D with H = 1) through im2col; `col` holds one
    /// image's columns per task, rewritten by backward.
    Conv2d {
        x: u32,
        w: u32,
        bias: Option<u32>,
        geom: ConvGeom,
        col: Buf,
    },
    /// Max pooling; `argmax` holds each window's first maximum as its
    /// row-major offset in the window.
    MaxPool2d { x: u32, geom: PoolGeom, argmax: Buf },
    /// Average pooling.
    AvgPool2d {
        x: u32,
        geom: PoolGeom,
        count_include_pad: bool,
    },
    /// Mean over each image plane, [N, C, H, W] -> [N, C].
    GlobalAvgPool2d { x: u32 },
}

/// The input ids of one op, inline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs {
    ids: [u32; MAX_INPUTS],
    n: u8,
}

impl Inputs {
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.ids[..self.n as usize]
    }
}

/// What an op's backward reads besides the gradient of its output: the
/// values of its inputs, and its own output or the buffers its forward saved.
/// A replay of a recomputed segment skips the ops whose values no backward
/// reads (a residual branch's last product, whose only consumer is an add).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BackwardReads {
    pub inputs: bool,
    pub own: bool,
}

impl Op {
    /// The tensors this op reads, i.e. those its backward sends gradient to.
    /// Inlined: the gradient plan and the backward walk ask it of every op.
    #[inline(always)]
    pub(crate) fn inputs(&self) -> Inputs {
        let (mut ids, mut n) = ([u32::MAX; MAX_INPUTS], 0);
        self.for_each_input(|x| {
            ids[n] = x;
            n += 1;
        });
        Inputs { ids, n: n as u8 }
    }
}

/// Validates every id before anything is gathered.
pub(crate) fn check_ids(op: &'static str, ids: &[i32], bound: usize) -> Result<()> {
    match ids.iter().position(|&t| t < 0 || t as usize >= bound) {
        Some(position) => Err(Error::IndexOutOfRange {
            op,
            position,
            value: ids[position] as i64,
            bound,
        }),
        None => Ok(()),
    }
}

/// A one-element op of a replay program (`context::replay_program`), with
/// its constants.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OneOp {
    Binary(BinaryFn),
    Unary(UnaryFn),
    Scale(f32),
    Pow(f32),
    Clamp(f32, f32),
}

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
//! 1. A row of [`unary_fns`] (`functions.rs`): name, what backward reads, kernels,
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
//!    reads, forward and backward op functions, what the replay program
//!    runs (`replay`, usually None) and what capture checks (`capture`).
//!    The compiler: the generated matches (no `_ =>` arm) and the row
//!    pattern (every column stated); `tests/op_names.rs`: no code outside
//!    `src/ops/` and `src/ffi/ops/` names the op (a rule is a column, not a
//!    match elsewhere). What backward reads is also checked, for every
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
pub(crate) mod cholesky_corr;
pub(crate) mod conv;
pub(crate) mod dropout;
pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod glm;
pub(crate) mod group_norm;
pub(crate) mod linalg;
pub(crate) mod lkj;
pub(crate) mod llama;
pub(crate) mod loss;
pub(crate) mod lpdf;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod reduce;
pub(crate) mod shape_ops;
pub(crate) mod transforms;

pub(crate) mod dispatch;
mod functions;
#[cfg(test)]
pub(crate) mod gradcheck;
mod rules;
mod table;

pub(crate) use functions::{BinaryFn, UnaryFn, unary_fns};
pub use rules::MAX_CONCAT;
pub(crate) use rules::{CaptureRule, IdAxis, IdBuffer, OneOp, ReplayForm};

use crate::arena::Buf;
use crate::error::{Error, Result};
use crate::shape::MAX_DIMS;

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
    /// I_x(a, b), the regularised incomplete beta function, with
    /// broadcasting.
    BetaInc { a: u32, b: u32, x: u32 },
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
    /// Batch normalisation of `[N, C, *]` per channel, with an optional
    /// weight and bias; `stats` is the running statistics' registry index;
    /// `saved` holds the mean and 1/std used (`[C]` each) and `[2C]` of
    /// scratch.
    BatchNorm {
        x: u32,
        w: Option<u32>,
        b: Option<u32>,
        stats: u32,
        training: bool,
        momentum: f32,
        eps: f32,
        saved: Buf,
    },
    /// Group normalisation of `[N, C, *]` over `groups` groups of
    /// channels, with an optional weight and bias; `saved` holds each
    /// (image, group) row's mean and 1/std (`[N G]` each) and `[2C]` of
    /// scratch.
    GroupNorm {
        x: u32,
        w: Option<u32>,
        b: Option<u32>,
        groups: u32,
        eps: f32,
        saved: Buf,
    },
    /// RMSNorm over the last axis (no bias); per-row 1/rms saved.
    RmsNorm { x: u32, w: u32, eps: f32, rstd: Buf },
    /// silu(gate) * up, elementwise (Llama's MLP gate).
    Swiglu { gate: u32, up: u32 },
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
    /// Causal grouped-query attention over head-major q, k and v; `probs`
    /// holds the probabilities followed by the backward pass's scratch.
    AttentionGqa { q: u32, k: u32, v: u32, probs: Buf },
    /// Convolution (2-D, or 1-D with H = 1) through im2col; `col` holds one
    /// image's columns per task, rewritten by backward.
    Conv2d {
        x: u32,
        w: u32,
        bias: Option<u32>,
        geom: ConvGeom,
        col: Buf,
    },
    /// Convolution as `Conv2d`, then ReLU; `col` also holds each task's
    /// masked output gradient after its columns.
    Conv2dRelu {
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
    /// The Cholesky factor of `a`'s lower triangle; `work` is backward's
    /// scratch.
    Cholesky { a: u32, work: Buf },
    /// L^{-1} B; `work` holds L^{-T} dX during backward.
    SolveLower { l: u32, b: u32, work: Buf },
    /// ln det of a symmetric positive-definite matrix; `chol` its factor
    /// (written by the forward), `work` backward's scratch.
    LogDetSpd { a: u32, chol: Buf, work: Buf },
    /// x_t = a_t x_{t-1} + c_t along axis 0; `work` holds dL/dc during
    /// backward.
    LinearRecurrence { a: u32, c: u32, work: Buf },
    /// A matrix's diagonal.
    Diagonal { a: u32 },
    /// Stan's cholesky_corr_constrain: L from x (`cholesky_corr`).
    CholeskyCorr { x: u32 },
    /// Its log-Jacobian, a scalar, from the same x.
    CholeskyCorrLogJacobian { x: u32 },
    /// Stan's lkj_corr_cholesky_lpdf of L (`lkj`): eta and ln c_K(eta),
    /// the normalising constant, fixed when recorded.
    LkjCorrCholesky { l: u32, eta: f32, constant: f64 },
    /// Stan's normal_lpdf, summed (`lpdf`): mu and sigma one element or
    /// y's shape.
    NormalLpdf { y: u32, mu: u32, sigma: u32 },
    /// Stan's normal_id_glm_lpdf; the residuals y - alpha - X beta saved.
    NormalIdGlm {
        y: u32,
        x: u32,
        alpha: u32,
        beta: u32,
        sigma: u32,
        transposed: bool,
        resid: Buf,
    },
    /// Stan's bernoulli_logit_glm_lpmf; y - sigmoid(eta) and eta saved.
    BernoulliLogitGlm {
        y: u32,
        x: u32,
        alpha: u32,
        beta: u32,
        transposed: bool,
        saved: Buf,
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

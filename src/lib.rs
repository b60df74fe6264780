//! arenagrad: reverse-mode autograd whose memory per training step is
//! bounded by construction.
//!
//! * Activations, their gradients and scratch live in a bump arena that
//!   [`Context::reset`] recycles every iteration; parameters, their gradients
//!   and optimizer state live in persistent 64-byte aligned buffers.
//! * Tensors are small handles ([`Tensor`]) carrying a generation, so an
//!   activation handle kept past a reset is refused, never dereferenced.
//! * The tape is a `Vec` of fixed-size records with inputs and attributes
//!   inline; backward walks it in reverse.
//! * Every matrix product goes through BLAS (`cblas_sgemm`).
//!
//! # The iteration protocol
//!
//! Make the parameters, then the optimizer, then loop: build the forward
//! graph with ops on the [`Context`], [`Context::backward`] from a scalar
//! loss, optionally [`Context::clip_grad_norm`], [`Context::optimizer_step`],
//! [`Context::zero_grad`], then [`Context::reset`], after which every
//! activation handle is stale. After the first iterations this loop makes
//! no system allocation. Tensors are row-major, contiguous `f32`.
//!
//! ```
//! use arenagrad::{Context, OptimizerKind};
//!
//! # fn main() -> arenagrad::Result<()> {
//! // Fit y = 3x + 1 with one linear layer.
//! let xs = [-1.0f32, -0.5, 0.0, 0.5, 1.0, 1.5];
//! let ys: Vec<f32> = xs.iter().map(|x| 3.0 * x + 1.0).collect();
//! let mut ctx = Context::new();
//! let w = ctx.param(&[1, 1], None)?; // zeros
//! let b = ctx.param(&[1], None)?;
//! ctx.optimizer(OptimizerKind::Sgd { lr: 0.3, momentum: 0.0, weight_decay: 0.0 })?;
//! let mut losses = Vec::new();
//! for _ in 0..100 {
//!     let x = ctx.tensor(&[6, 1], &xs)?;
//!     let y = ctx.tensor(&[6, 1], &ys)?;
//!     let pred = ctx.linear(x, w, Some(b))?;
//!     let diff = ctx.sub(pred, y)?;
//!     let sq = ctx.mul(diff, diff)?;
//!     let loss = ctx.mean(sq)?;
//!     losses.push(ctx.item(loss)?);
//!     ctx.backward(loss)?;
//!     ctx.optimizer_step()?;
//!     ctx.zero_grad();
//!     ctx.reset(); // `x`, `y`, `pred`, ... are stale from here on
//! }
//! let mut wb = [0.0f32; 1];
//! ctx.read(w, &mut wb)?;
//! assert!((wb[0] - 3.0).abs() < 1e-3, "w = {}", wb[0]);
//! assert!(losses[99] < 1e-6 * losses[0]);
//! # Ok(())
//! # }
//! ```
//!
//! `examples/rust_mlp.rs` trains a two-layer classifier the same way
//! (`cargo run --release --example rust_mlp`).
//!
//! # Public Rust API
//!
//! * [`Context`]: parameters, optimizer, ops, backward, checkpoints
//!   (`checkpoint_save`, `checkpoint_load`, `checkpoint_bytes`), memory
//!   figures ([`MemoryStats`]). Every fallible call returns [`Result`] with
//!   an [`Error`] that names the op and the shapes involved.
//! * [`Tensor`] handles, [`Shape`], [`OptimizerKind`], and the constants
//!   [`MAX_DIMS`], [`MAX_PARAM_NAME_BYTES`] and [`LAYERNORM_EPS`].
//! * [`blas`]: the checked `sgemm` wrapper; [`checkpoint`]: the file format.
//!
//! Every change to a [`Context`] takes `&mut self`: one thread works on a
//! context at a time. Unlike the C API, the Rust API does not catch panics
//! (a panic is a bug).
//! The `extern "C"` functions (`ag_*`) live in the `ffi` module, which is
//! public only so the crate's tests and fuzz targets can call them; it is
//! hidden from these docs and not part of the Rust API: C programs use
//! `include/arenagrad.h`.
#![deny(unsafe_code)]
// `Error` carries the op name and both shapes inline so that reporting a
// failure never allocates on the hot path; the size is the price.
#![allow(clippy::result_large_err)]

mod arena;
mod backward;
pub mod blas;
mod buffers;
pub mod checkpoint;
mod context;
pub mod error;
#[doc(hidden)]
pub mod ffi;
mod fs;
mod grad_ready;
mod grads;
pub mod infer;
mod init;
mod kernels;
mod ops;
mod optim;
mod params;
mod plan;
// Public for the pool's own test binaries (thread counts, allocation and
// idle-CPU checks need a process of their own); not part of the Rust API.
#[doc(hidden)]
pub mod pool;
mod recompute;
mod replay;
mod rng;
pub mod safetensors_io;
pub mod shape;
mod shard;
mod simd;
mod special;
pub mod status;
mod tape;
pub mod tokenizer;
#[cfg(feature = "trace")]
pub mod trace;

pub use buffers::MAX_PREFIX_BYTES as MAX_STATS_PREFIX_BYTES;
pub use context::BatchNormStats;
pub use context::{Context, MemoryStats, Step, Tensor};
pub use error::{Error, Result, StepProblem};
pub use grad_ready::{GradEvent, GradReadyFn};
pub use init::Init;
pub use ops::batch_norm::{BATCH_NORM_EPS, BATCH_NORM_MOMENTUM};
pub use ops::conv::{Conv2dOptions, Pool2dOptions};
pub use ops::group_norm::GROUP_NORM_EPS;
pub use ops::norm::LAYERNORM_EPS;
pub use optim::OptimizerKind;
pub use params::MAX_PARAM_NAME_BYTES;
pub use pool::{ThreadInfo, ThreadSource, set_threads as set_num_threads, thread_info};
pub use recompute::{MAX_SEGMENT_OUTPUTS, RecomputePolicy};
pub use shape::{MAX_DIMS, Shape};

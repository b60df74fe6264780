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
//! One iteration: build the forward graph with ops on the [`Context`],
//! [`Context::backward`] from a scalar loss, optionally
//! [`Context::clip_grad_norm`], [`Context::optimizer_step`],
//! [`Context::zero_grad`], then [`Context::reset`]. After the first
//! iterations, this loop makes no system allocation.
#![deny(unsafe_code)]
// `Error` carries the op name and both shapes inline so that reporting a
// failure never allocates on the hot path; the size is the price.
#![allow(clippy::result_large_err)]

mod arena;
pub mod blas;
pub mod checkpoint;
mod context;
pub mod error;
pub mod ffi;
pub mod gpt;
mod ops;
mod optim;
mod plan;
mod pool;
pub mod shape;
pub mod status;
mod tape;

pub use context::{Context, MemoryStats, Tensor};
pub use error::{Error, Result};
pub use ops::norm::LAYERNORM_EPS;
pub use optim::OptimizerKind;
pub use shape::{MAX_DIMS, Shape};

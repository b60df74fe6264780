//! The C boundary: converts arguments, calls the safe Rust API, writes
//! out-parameters on success and turns every failure into a status code.
//! No math here.
//!
//! # Safety invariant
//! * The `ag_context *` a caller holds is a token; the context's address is
//!   looked up in the registry of live contexts (so a freed or forged token
//!   is refused, never dereferenced) and after this call won the context's busy flag
//!   (so no other thread is inside it; `ag_context_free` needs the flag too).
//! * Caller pointers (out-params, data) are dereferenced only after a NULL
//!   check, with the lengths the caller passed; the caller guarantees they
//!   are valid for those lengths, as the header documents.
//! * Nothing keeps a caller pointer after the call returns.
//!
//! # Layout
//! The foundation modules (version, handle, pointers, registry, panic_hook,
//! guard) import nothing from the entry-point files; the entry-point files
//! import the foundation through `prelude` and never each other. This file
//! only declares modules and re-exports what the crate exports.
// The C boundary is where raw pointers meet the safe API: unsafe code is
// allowed here, for this module and all its children, and nowhere else in
// ffi needs to repeat it (each unsafe block still carries its SAFETY line).
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]
// extern "C" entry points take raw pointers by design; each is NULL-checked
// and documented in the header (see the safety invariant above).
#![allow(clippy::not_unsafe_ptr_arg_deref)]
// These doc comments are the C header's text (cbindgen copies them), so
// shape notation such as [B, T, C] or [0, V) is not a Rust link.
#![allow(rustdoc::broken_intra_doc_links)]

// Foundation: what every entry point uses.
mod guard;
mod handle;
mod panic_hook;
mod pointers;
mod prelude;
mod registry;
mod version;

// One file per API area, declared in the header's order (cbindgen writes
// the functions in the order it meets them; blank lines keep rustfmt from
// sorting these).
mod lifecycle;

mod tensors;

mod training;

mod buffers;

mod capture;
mod checkpoints;
mod grads;
mod init;
mod ops;
mod params;
mod recompute;
mod runtime;
mod shard;
#[cfg(feature = "test-hooks")]
mod test_hooks;

mod tokenizer;

mod sampler;

pub use buffers::*;
pub use capture::*;
pub use checkpoints::*;
pub use grads::*;
pub use handle::{ag_context, ag_tensor};
pub use init::*;
pub use lifecycle::*;
pub use ops::*;
pub use params::*;
pub use recompute::*;
pub use runtime::*;
pub use sampler::*;
pub use shard::*;
pub use tensors::*;
#[cfg(feature = "test-hooks")]
pub use test_hooks::*;
pub use tokenizer::*;
pub use training::*;
pub use version::*;

pub use crate::status::*;

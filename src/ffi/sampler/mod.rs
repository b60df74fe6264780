//! The NUTS sampler from C: `model.rs` (the model, config and draws types,
//! ag_sampler_new, free, cancel, the last error) and `run.rs` (ag_nuts_run
//! and the draws' accessors). This file only declares and re-exports.

mod advi;
mod density;
mod model;
mod run;

pub use advi::*;
pub use model::*;
pub use run::*;

//! The samplers from C: `model.rs` (the model, config and draws types,
//! ag_sampler_new, free, cancel, the last error), `density.rs` (a chain's
//! evaluation of the density and its reported quantities), `run.rs`
//! (ag_nuts_run and the draws' accessors) and `advi.rs` (ag_advi_run,
//! ag_draws_advi). This file only declares and re-exports.

mod advi;
mod density;
mod model;
mod run;

pub use advi::*;
pub use model::*;
pub use run::*;

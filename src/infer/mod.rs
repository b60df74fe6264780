//! Bayesian inference over a log density's gradient: the No-U-Turn
//! sampler with Stan's warm-up, ADVI, and the diagnostics of their draws. Pure
//! algorithms over a closure `q -> (log p(q), d log p / dq)`: they know
//! nothing of contexts (src/ffi/sampler.rs evaluates the density).

pub mod adapt;
pub mod advi;
pub mod chain;
pub mod diagnostics;
pub mod nuts;
pub mod rng;
pub mod summary;

pub use advi::{AdviError, AdviFit, AdviSettings, Family, Stage, run_advi};
pub use nuts::{ChainDraws, ChainError, Settings, run_chain};
pub use summary::{SummaryRow, summarise};

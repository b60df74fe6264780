//! Bayesian inference over a log density's gradient: the No-U-Turn
//! sampler with Stan's warm-up, and the diagnostics of its draws. Pure
//! algorithms over a closure `q -> (log p(q), d log p / dq)`: they know
//! nothing of contexts (src/ffi/sampler.rs evaluates the density).

pub mod adapt;
pub mod chain;
pub mod diagnostics;
pub mod nuts;
pub mod rng;
pub mod summary;

pub use nuts::{ChainDraws, ChainError, Settings, run_chain};
pub use summary::{SummaryRow, summarise};

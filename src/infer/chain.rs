//! What a chain takes (its settings) and gives (its draws, or why it
//! stopped).

use super::adapt::DualAveragingConstants;

/// The settings of one chain (Stan's defaults in [`Default`]).
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub warmup: u32,
    pub draws: u32,
    pub max_depth: u32,
    pub dual_averaging: DualAveragingConstants,
    pub init_buffer: u32,
    pub term_buffer: u32,
    pub base_window: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            warmup: 1000,
            draws: 1000,
            max_depth: 10,
            dual_averaging: DualAveragingConstants::default(),
            init_buffer: 75,
            term_buffer: 50,
            base_window: 25,
        }
    }
}

/// Why a chain stopped early.
#[derive(Debug)]
pub enum ChainError<E> {
    /// The density failed at iteration `iteration` (0 is the search for an
    /// initial point, 1.. the transitions, warm-up first).
    Density { iteration: u32, error: E },
    /// No finite log density at 100 uniform(-2, 2) initial points.
    NoInitialPoint,
    /// The step size heuristic passed 1e7 or reached 0 (improper posterior?).
    StepSize { iteration: u32 },
}

/// One chain's output: `completed` draws after warm-up.
#[derive(Clone, Debug, Default)]
pub struct ChainDraws {
    pub dim: usize,
    /// Unconstrained positions, [completed * dim].
    pub positions: Vec<f64>,
    pub lp: Vec<f64>,
    pub accept_stat: Vec<f64>,
    pub tree_depth: Vec<u32>,
    pub n_leapfrog: Vec<u32>,
    pub divergent: Vec<bool>,
    /// The step size after warm-up (0 until warm-up ends).
    pub step_size: f64,
    /// The diagonal inverse metric after warm-up.
    pub inv_metric: Vec<f64>,
    /// Transitions run, warm-up included.
    pub iterations: u32,
}

impl ChainDraws {
    /// Draws kept after warm-up.
    pub fn completed(&self) -> usize {
        self.lp.len()
    }
}

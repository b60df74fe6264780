//! A chain's run: its state between turns of transitions ([`Chain`]), so
//! that chains can take turns on the library's threads, and [`run_chain`],
//! one turn of every transition.

use super::{ChainDraws, ChainError, ChainRng, Integrator, Level, Point, Settings, Top};
use crate::infer::adapt::{DualAveraging, MetricWindows};

/// Runs one chain: `grad(q, g)` returns log p(q) up to a constant and
/// writes its gradient to g (a non-finite value or gradient counts as
/// log p = -inf); `keep_going(iteration)` is asked after each transition
/// (1-based) and stops the chain when it returns false, keeping the draws
/// made so far. On an error the chain's draws so far come back with it.
pub fn run_chain<E, F, K>(
    dim: usize,
    settings: &Settings,
    seed: u64,
    chain: u32,
    grad: F,
    mut keep_going: K,
) -> (ChainDraws, Option<ChainError<E>>)
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    K: FnMut(u32) -> bool,
{
    let mut c = Chain::new(dim, settings, seed, chain);
    c.advance(grad, u32::MAX, &mut keep_going);
    c.finish()
}

/// A chain run a few transitions at a time, so that chains can take
/// turns on threads (a chain's state lives here between turns, not on a
/// thread's stack): the same transitions, so the same draws, however it
/// is cut. [`run_chain`] is one turn of every transition.
pub struct Chain<E> {
    settings: Settings,
    /// The integrator's state (its density is lent at each turn).
    core: Integrator<()>,
    cur: Point,
    top: Top,
    da: DualAveraging,
    windows: MetricWindows,
    /// Transitions run so far; None before the initial point is found.
    done: Option<u32>,
    finished: bool,
    error: Option<ChainError<E>>,
    out: ChainDraws,
}

impl<E> Chain<E> {
    /// Chain `chain` of a run seeded `seed` (its random stream comes from
    /// the two alone).
    pub fn new(dim: usize, settings: &Settings, seed: u64, chain: u32) -> Self {
        let mut out = ChainDraws {
            dim,
            inv_metric: vec![1.0; dim],
            ..ChainDraws::default()
        };
        let draws = settings.draws as usize;
        out.positions.reserve_exact(draws * dim);
        for v in [&mut out.lp, &mut out.accept_stat] {
            v.reserve_exact(draws);
        }
        out.tree_depth.reserve_exact(draws);
        out.n_leapfrog.reserve_exact(draws);
        out.divergent.reserve_exact(draws);
        let c = settings;
        let windows =
            MetricWindows::new(dim, c.warmup, c.init_buffer, c.term_buffer, c.base_window);
        Chain {
            settings: *settings,
            core: Integrator {
                grad: (),
                iteration: 0,
                minv: vec![1.0; dim],
                eps: 1.0,
                rng: ChainRng::for_chain(seed, chain),
                divergent: false,
                n_leapfrog: 0,
                sum_metro: 0.0,
            },
            cur: Point::new(dim),
            top: Top {
                fwd: Point::new(dim),
                bck: Point::new(dim),
                sample: Point::new(dim),
                propose: Point::new(dim),
                v: std::array::from_fn(|_| vec![0.0; dim]),
                levels: (0..=settings.max_depth).map(|_| Level::new(dim)).collect(),
            },
            da: DualAveraging::default(),
            windows,
            done: None,
            finished: false,
            error: None,
            out,
        }
    }

    /// Whether the chain has stopped: every transition run, `keep_going`
    /// said no, or an error.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Runs up to `transitions` more transitions (the first turn also
    /// finds the initial point and step size), with `grad` and
    /// `keep_going` as [`run_chain`] takes them.
    pub fn advance<F, K>(&mut self, grad: F, transitions: u32, keep_going: &mut K)
    where
        F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
        K: FnMut(u32) -> bool,
    {
        if self.finished {
            return;
        }
        let mut s = std::mem::replace(&mut self.core, Integrator::idle()).lend(grad);
        let r = self.turn(&mut s, transitions, keep_going);
        self.core = s.lend(());
        if let Err(e) = r {
            self.error = Some(e);
            self.finished = true;
        }
    }

    /// The draws so far, and the error that stopped the chain if any.
    pub fn finish(mut self) -> (ChainDraws, Option<ChainError<E>>) {
        self.out.inv_metric.copy_from_slice(&self.core.minv);
        (self.out, self.error)
    }

    fn turn<F, K>(
        &mut self,
        s: &mut Integrator<F>,
        transitions: u32,
        keep_going: &mut K,
    ) -> Result<(), ChainError<E>>
    where
        F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
        K: FnMut(u32) -> bool,
    {
        let (c, cur, top, out) = (&self.settings, &mut self.cur, &mut self.top, &mut self.out);
        let start = match self.done {
            Some(done) => done,
            None => {
                initial_point(s, cur)?;
                s.init_step_size(cur, &mut top.propose)?;
                self.da.restart(s.eps);
                self.done = Some(0);
                0
            }
        };
        let w = c.warmup;
        let end = start.saturating_add(transitions).min(w + c.draws);
        for it in start..end {
            s.iteration = it + 1;
            let t = s.transition(cur, c.max_depth, top)?;
            out.iterations = it + 1;
            self.done = Some(it + 1);
            if it < w {
                s.eps = self.da.learn(&c.dual_averaging, t.accept_stat);
                if self.windows.observe(it, cur.q(), &mut s.minv) {
                    s.init_step_size(cur, &mut top.propose)?;
                    self.da.restart(s.eps);
                }
                if it == w - 1 {
                    s.eps = self.da.final_step_size();
                    out.step_size = s.eps;
                }
            } else {
                if w == 0 && it == 0 {
                    out.step_size = s.eps;
                }
                out.positions.extend_from_slice(cur.q());
                out.lp.push(cur.lp);
                out.accept_stat.push(t.accept_stat);
                out.tree_depth.push(t.depth);
                out.n_leapfrog.push(t.n_leapfrog);
                out.divergent.push(t.divergent);
            }
            if !keep_going(it + 1) {
                self.finished = true;
                return Ok(());
            }
        }
        self.finished = end == w + c.draws;
        Ok(())
    }
}

impl Integrator<()> {
    /// A placeholder while the chain's integrator is lent out.
    fn idle() -> Self {
        Integrator {
            grad: (),
            iteration: 0,
            minv: Vec::new(),
            eps: 0.0,
            rng: ChainRng::for_chain(0, 0),
            divergent: false,
            n_leapfrog: 0,
            sum_metro: 0.0,
        }
    }
}

impl<F> Integrator<F> {
    /// The same state with another density.
    fn lend<G>(self, grad: G) -> Integrator<G> {
        Integrator {
            grad,
            iteration: self.iteration,
            minv: self.minv,
            eps: self.eps,
            rng: self.rng,
            divergent: self.divergent,
            n_leapfrog: self.n_leapfrog,
            sum_metro: self.sum_metro,
        }
    }
}

/// Initial point: uniform(-2, 2) on the unconstrained scale, as Stan,
/// until the log density is finite (100 tries).
fn initial_point<E, F>(s: &mut Integrator<F>, cur: &mut Point) -> Result<(), ChainError<E>>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
{
    for _ in 0..100 {
        for q in cur.q_mut() {
            *q = 4.0 * s.rng.uniform() - 2.0;
        }
        s.eval(cur)?;
        if cur.lp.is_finite() {
            return Ok(());
        }
    }
    Err(ChainError::NoInitialPoint)
}

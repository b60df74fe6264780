//! The No-U-Turn sampler as Stan runs it, over a gradient closure.
//!
//! A transition doubles the trajectory forwards or backwards at random up
//! to `max_depth`; within a subtree the next state is drawn by multinomial
//! sampling (weights e^{-H}), at the top level by biased progressive
//! sampling. A subtree stops on the generalised U-turn criterion
//! (p#_minus . rho > 0 and p#_plus . rho > 0, p# = M^-1 p), checked over
//! each merged tree and across its two halves. A leapfrog step whose energy
//! error exceeds 1000 is a divergence and ends the transition.

use super::adapt::{DualAveraging, MetricWindows};
pub use super::chain::{ChainDraws, ChainError, Settings};
use super::rng::ChainRng;

#[derive(Clone, Debug, Default)]
struct Point {
    q: Vec<f64>,
    p: Vec<f64>,
    g: Vec<f64>,
    lp: f64,
}

impl Point {
    fn new(n: usize) -> Self {
        Point {
            q: vec![0.0; n],
            p: vec![0.0; n],
            g: vec![0.0; n],
            lp: 0.0,
        }
    }

    fn copy_from(&mut self, o: &Point) {
        self.q.copy_from_slice(&o.q);
        self.p.copy_from_slice(&o.p);
        self.g.copy_from_slice(&o.g);
        self.lp = o.lp;
    }
}

/// Workspace of one tree depth.
#[derive(Clone, Debug, Default)]
struct Level {
    prop_final: Point,
    p_init_end: Vec<f64>,
    ps_init_end: Vec<f64>,
    rho_init: Vec<f64>,
    p_final_beg: Vec<f64>,
    ps_final_beg: Vec<f64>,
    rho_final: Vec<f64>,
    rho_ext: Vec<f64>,
}

/// The ends of a subtree a call of build_tree writes.
struct Ends<'a> {
    ps_beg: &'a mut [f64],
    ps_end: &'a mut [f64],
    rho: &'a mut [f64],
    p_beg: &'a mut [f64],
    p_end: &'a mut [f64],
}

struct Integrator<F> {
    grad: F,
    iteration: u32,
    minv: Vec<f64>,
    eps: f64,
    rng: ChainRng,
    z: Point,
    divergent: bool,
    n_leapfrog: u32,
    sum_metro: f64,
    levels: Vec<Level>,
}

fn log_sum_exp(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let m = a.max(b);
    m + ((a - m).exp() + (b - m).exp()).ln()
}

fn sum2(out: &mut [f64], a: &[f64], b: &[f64]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

fn add_to(acc: &mut [f64], v: &[f64]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += x;
    }
}

impl<E, F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>> Integrator<F> {
    fn eval(&mut self, z: &mut Point) -> Result<(), ChainError<E>> {
        let lp = (self.grad)(&z.q, &mut z.g).map_err(|error| ChainError::Density {
            iteration: self.iteration,
            error,
        })?;
        z.lp = if lp.is_finite() && z.g.iter().all(|g| g.is_finite()) {
            lp
        } else {
            f64::NEG_INFINITY
        };
        Ok(())
    }

    fn hamiltonian(&self, z: &Point) -> f64 {
        let k: f64 = z.p.iter().zip(&self.minv).map(|(p, m)| p * p * m).sum();
        let h = -z.lp + 0.5 * k;
        if h.is_nan() { f64::INFINITY } else { h }
    }

    fn sample_momentum(&mut self, z: &mut Point) {
        for (p, m) in z.p.iter_mut().zip(&self.minv) {
            *p = self.rng.normal() / m.sqrt();
        }
    }

    fn leapfrog(&mut self, z: &mut Point, eps: f64) -> Result<(), ChainError<E>> {
        for (p, g) in z.p.iter_mut().zip(&z.g) {
            *p += 0.5 * eps * g;
        }
        for ((q, p), m) in z.q.iter_mut().zip(&z.p).zip(&self.minv) {
            *q += eps * m * p;
        }
        self.eval(z)?;
        for (p, g) in z.p.iter_mut().zip(&z.g) {
            *p += 0.5 * eps * g;
        }
        Ok(())
    }

    fn sharp(&self, p: &[f64], out: &mut [f64]) {
        for ((o, p), m) in out.iter_mut().zip(p).zip(&self.minv) {
            *o = m * p;
        }
    }

    /// The generalised U-turn criterion.
    fn criterion(ps_minus: &[f64], ps_plus: &[f64], rho: &[f64]) -> bool {
        let a: f64 = ps_plus.iter().zip(rho).map(|(x, r)| x * r).sum();
        let b: f64 = ps_minus.iter().zip(rho).map(|(x, r)| x * r).sum();
        a > 0.0 && b > 0.0
    }

    /// Extends the trajectory from self.z by 2^depth leapfrog steps in
    /// direction `sign`; `propose` receives the subtree's multinomial sample.
    fn build_tree(
        &mut self,
        depth: usize,
        propose: &mut Point,
        e: Ends<'_>,
        h0: f64,
        sign: f64,
        log_sum_weight: &mut f64,
    ) -> Result<bool, ChainError<E>> {
        if depth == 0 {
            let mut z = std::mem::take(&mut self.z);
            let r = self.leapfrog(&mut z, sign * self.eps);
            self.z = z;
            r?;
            self.n_leapfrog += 1;
            let h = self.hamiltonian(&self.z);
            if h - h0 > 1000.0 {
                self.divergent = true;
            }
            *log_sum_weight = log_sum_exp(*log_sum_weight, h0 - h);
            self.sum_metro += if h0 - h > 0.0 { 1.0 } else { (h0 - h).exp() };
            propose.copy_from(&self.z);
            self.sharp(&self.z.p, e.ps_beg);
            e.ps_end.copy_from_slice(e.ps_beg);
            add_to(e.rho, &self.z.p);
            e.p_beg.copy_from_slice(&self.z.p);
            e.p_end.copy_from_slice(&self.z.p);
            return Ok(!self.divergent);
        }
        let mut l = std::mem::take(&mut self.levels[depth]);
        let result = self.merge_halves(depth, &mut l, propose, e, h0, sign, log_sum_weight);
        self.levels[depth] = l;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn merge_halves(
        &mut self,
        depth: usize,
        l: &mut Level,
        propose: &mut Point,
        e: Ends<'_>,
        h0: f64,
        sign: f64,
        log_sum_weight: &mut f64,
    ) -> Result<bool, ChainError<E>> {
        let mut lsw_init = f64::NEG_INFINITY;
        l.rho_init.fill(0.0);
        let first = Ends {
            ps_beg: &mut *e.ps_beg,
            ps_end: &mut l.ps_init_end,
            rho: &mut l.rho_init,
            p_beg: &mut *e.p_beg,
            p_end: &mut l.p_init_end,
        };
        if !self.build_tree(depth - 1, propose, first, h0, sign, &mut lsw_init)? {
            return Ok(false);
        }
        let mut lsw_final = f64::NEG_INFINITY;
        l.rho_final.fill(0.0);
        let second = Ends {
            ps_beg: &mut l.ps_final_beg,
            ps_end: &mut *e.ps_end,
            rho: &mut l.rho_final,
            p_beg: &mut l.p_final_beg,
            p_end: &mut *e.p_end,
        };
        if !self.build_tree(
            depth - 1,
            &mut l.prop_final,
            second,
            h0,
            sign,
            &mut lsw_final,
        )? {
            return Ok(false);
        }
        let lsw_sub = log_sum_exp(lsw_init, lsw_final);
        *log_sum_weight = log_sum_exp(*log_sum_weight, lsw_sub);
        if lsw_final > lsw_sub || self.rng.uniform() < (lsw_final - lsw_sub).exp() {
            propose.copy_from(&l.prop_final);
        }
        sum2(&mut l.rho_ext, &l.rho_init, &l.rho_final);
        add_to(e.rho, &l.rho_ext);
        let mut persist = Self::criterion(e.ps_beg, e.ps_end, &l.rho_ext);
        sum2(&mut l.rho_ext, &l.rho_init, &l.p_final_beg);
        persist = persist && Self::criterion(e.ps_beg, &l.ps_final_beg, &l.rho_ext);
        sum2(&mut l.rho_ext, &l.rho_final, &l.p_init_end);
        persist = persist && Self::criterion(&l.ps_init_end, e.ps_end, &l.rho_ext);
        Ok(persist)
    }
}

/// The points and vectors of a transition's top level.
struct Top {
    fwd: Point,
    bck: Point,
    sample: Point,
    propose: Point,
    /// ps_fb, ps_ff, ps_bf, ps_bb, p_fb, p_ff, p_bf, p_bb, rho, rho_f,
    /// rho_b, rho_ext
    v: [Vec<f64>; 12],
}

struct Transition {
    accept_stat: f64,
    depth: u32,
    n_leapfrog: u32,
    divergent: bool,
}

impl<E, F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>> Integrator<F> {
    /// One NUTS transition from `cur` (updated in place).
    fn transition(
        &mut self,
        cur: &mut Point,
        max_depth: u32,
        t: &mut Top,
    ) -> Result<Transition, ChainError<E>> {
        let [
            ps_fb,
            ps_ff,
            ps_bf,
            ps_bb,
            p_fb,
            p_ff,
            p_bf,
            p_bb,
            rho,
            rho_f,
            rho_b,
            rho_ext,
        ] = &mut t.v;
        self.sample_momentum(cur);
        t.fwd.copy_from(cur);
        t.bck.copy_from(cur);
        t.sample.copy_from(cur);
        self.sharp(&cur.p, ps_fb);
        for v in [&mut *ps_ff, &mut *ps_bf, &mut *ps_bb] {
            v.copy_from_slice(ps_fb);
        }
        for v in [&mut *p_fb, &mut *p_ff, &mut *p_bf, &mut *p_bb, &mut *rho] {
            v.copy_from_slice(&cur.p);
        }
        let mut lsw = 0.0;
        let h0 = self.hamiltonian(cur);
        self.divergent = false;
        self.n_leapfrog = 0;
        self.sum_metro = 0.0;
        let mut depth = 0;
        while depth < max_depth {
            rho_f.fill(0.0);
            rho_b.fill(0.0);
            let mut lsw_sub = f64::NEG_INFINITY;
            let valid = if self.rng.uniform() > 0.5 {
                // forwards: the old tree is the backward part
                rho_b.copy_from_slice(rho);
                p_bf.copy_from_slice(p_fb);
                ps_bf.copy_from_slice(ps_fb);
                self.z.copy_from(&t.fwd);
                let e = Ends {
                    ps_beg: ps_fb,
                    ps_end: ps_ff,
                    rho: rho_f,
                    p_beg: p_fb,
                    p_end: p_ff,
                };
                let v =
                    self.build_tree(depth as usize, &mut t.propose, e, h0, 1.0, &mut lsw_sub)?;
                t.fwd.copy_from(&self.z);
                v
            } else {
                rho_f.copy_from_slice(rho);
                p_fb.copy_from_slice(p_bf);
                ps_fb.copy_from_slice(ps_bf);
                self.z.copy_from(&t.bck);
                let e = Ends {
                    ps_beg: ps_bf,
                    ps_end: ps_bb,
                    rho: rho_b,
                    p_beg: p_bf,
                    p_end: p_bb,
                };
                let v =
                    self.build_tree(depth as usize, &mut t.propose, e, h0, -1.0, &mut lsw_sub)?;
                t.bck.copy_from(&self.z);
                v
            };
            if !valid {
                break;
            }
            depth += 1;
            // biased progressive sampling
            if lsw_sub > lsw || self.rng.uniform() < (lsw_sub - lsw).exp() {
                t.sample.copy_from(&t.propose);
            }
            lsw = log_sum_exp(lsw, lsw_sub);
            sum2(rho, rho_b, rho_f);
            let mut persist = Self::criterion(ps_bb, ps_ff, rho);
            sum2(rho_ext, rho_b, p_fb);
            persist = persist && Self::criterion(ps_bb, ps_fb, rho_ext);
            sum2(rho_ext, rho_f, p_bf);
            persist = persist && Self::criterion(ps_bf, ps_ff, rho_ext);
            if !persist {
                break;
            }
        }
        cur.copy_from(&t.sample);
        let accept_stat = if self.n_leapfrog > 0 {
            self.sum_metro / f64::from(self.n_leapfrog)
        } else {
            0.0
        };
        Ok(Transition {
            accept_stat,
            depth,
            n_leapfrog: self.n_leapfrog,
            divergent: self.divergent,
        })
    }

    /// Stan's heuristic: doubles or halves the step size until one leapfrog
    /// step's acceptance crosses 0.8.
    fn init_step_size(&mut self, cur: &Point, tmp: &mut Point) -> Result<(), ChainError<E>> {
        let log_08 = 0.8f64.ln();
        let mut direction = 0.0;
        for _ in 0..200 {
            tmp.copy_from(cur);
            self.sample_momentum(tmp);
            let h0 = self.hamiltonian(tmp);
            self.leapfrog(tmp, self.eps)?;
            let dh = h0 - self.hamiltonian(tmp);
            if direction == 0.0 {
                direction = if dh > log_08 { 1.0 } else { -1.0 };
                continue;
            }
            if (direction > 0.0 && dh <= log_08) || (direction < 0.0 && dh >= log_08) {
                break;
            }
            self.eps = if direction > 0.0 {
                2.0 * self.eps
            } else {
                0.5 * self.eps
            };
            if self.eps > 1e7 || self.eps == 0.0 {
                return Err(ChainError::StepSize {
                    iteration: self.iteration,
                });
            }
        }
        Ok(())
    }
}

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
                z: Point::new(dim),
                divergent: false,
                n_leapfrog: 0,
                sum_metro: 0.0,
                levels: (0..=settings.max_depth).map(|_| Level::new(dim)).collect(),
            },
            cur: Point::new(dim),
            top: Top {
                fwd: Point::new(dim),
                bck: Point::new(dim),
                sample: Point::new(dim),
                propose: Point::new(dim),
                v: std::array::from_fn(|_| vec![0.0; dim]),
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
                if self.windows.observe(it, &cur.q, &mut s.minv) {
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
                out.positions.extend_from_slice(&cur.q);
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
            z: Point::default(),
            divergent: false,
            n_leapfrog: 0,
            sum_metro: 0.0,
            levels: Vec::new(),
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
            z: self.z,
            divergent: self.divergent,
            n_leapfrog: self.n_leapfrog,
            sum_metro: self.sum_metro,
            levels: self.levels,
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
        for q in &mut cur.q {
            *q = 4.0 * s.rng.uniform() - 2.0;
        }
        s.eval(cur)?;
        if cur.lp.is_finite() {
            return Ok(());
        }
    }
    Err(ChainError::NoInitialPoint)
}

impl Level {
    fn new(n: usize) -> Self {
        let v = || vec![0.0; n];
        Level {
            prop_final: Point::new(n),
            p_init_end: v(),
            ps_init_end: v(),
            rho_init: v(),
            p_final_beg: v(),
            ps_final_beg: v(),
            rho_final: v(),
            rho_ext: v(),
        }
    }
}

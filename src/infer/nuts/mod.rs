//! The No-U-Turn sampler as Stan runs it, over a gradient closure.
//!
//! A transition doubles the trajectory forwards or backwards at random up
//! to `max_depth`; within a subtree the next state is drawn by multinomial
//! sampling (weights e^{-H}), at the top level by biased progressive
//! sampling. A subtree stops on the generalised U-turn criterion
//! (p#_minus . rho > 0 and p#_plus . rho > 0, p# = M^-1 p), checked over
//! each merged tree and across its two halves. A leapfrog step whose energy
//! error exceeds 1000 is a divergence and ends the transition.

pub use super::chain::{ChainDraws, ChainError, Settings};
use super::rng::ChainRng;

mod run;
pub use run::{Chain, run_chain};

/// A point of a trajectory: the position q, the momentum p and the log
/// density's gradient g in one buffer (q | p | g), so that a copy of a
/// point is one copy, and the log density lp.
#[derive(Clone, Debug, Default)]
struct Point {
    v: Vec<f64>,
    lp: f64,
}

impl Point {
    fn new(n: usize) -> Self {
        Point {
            v: vec![0.0; 3 * n],
            lp: 0.0,
        }
    }

    fn q(&self) -> &[f64] {
        &self.v[..self.v.len() / 3]
    }

    fn p(&self) -> &[f64] {
        let n = self.v.len() / 3;
        &self.v[n..2 * n]
    }

    fn q_mut(&mut self) -> &mut [f64] {
        self.parts().0
    }

    fn p_mut(&mut self) -> &mut [f64] {
        self.parts().1
    }

    /// q, p and g, each writable.
    fn parts(&mut self) -> (&mut [f64], &mut [f64], &mut [f64]) {
        let n = self.v.len() / 3;
        let (q, rest) = self.v.split_at_mut(n);
        let (p, g) = rest.split_at_mut(n);
        (q, p, g)
    }

    fn copy_from(&mut self, o: &Point) {
        self.v.copy_from_slice(&o.v);
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
    divergent: bool,
    n_leapfrog: u32,
    sum_metro: f64,
}

fn log_sum_exp(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    // The larger plus log1p of the smaller's exponential relative to it,
    // as Stan's log_sum_exp: one exponential where two (one of them of
    // zero) took a tenth of a small model's transition.
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
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
        let (q, _, g) = z.parts();
        let lp = (self.grad)(q, g).map_err(|error| ChainError::Density {
            iteration: self.iteration,
            error,
        })?;
        z.lp = if lp.is_finite() && g.iter().all(|g| g.is_finite()) {
            lp
        } else {
            f64::NEG_INFINITY
        };
        Ok(())
    }

    fn hamiltonian(&self, z: &Point) -> f64 {
        let k: f64 = z.p().iter().zip(&self.minv).map(|(p, m)| p * p * m).sum();
        let h = -z.lp + 0.5 * k;
        if h.is_nan() { f64::INFINITY } else { h }
    }

    fn sample_momentum(&mut self, z: &mut Point) {
        for (p, m) in z.p_mut().iter_mut().zip(&self.minv) {
            *p = self.rng.normal() / m.sqrt();
        }
    }

    fn leapfrog(&mut self, z: &mut Point, eps: f64) -> Result<(), ChainError<E>> {
        let (q, p, g) = z.parts();
        for ((q, p), (g, m)) in q.iter_mut().zip(p.iter_mut()).zip(g.iter().zip(&self.minv)) {
            *p += 0.5 * eps * g;
            *q += eps * m * *p;
        }
        self.eval(z)?;
        let (_, p, g) = z.parts();
        for (p, g) in p.iter_mut().zip(g.iter()) {
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

    /// Extends the trajectory from its end `z` by 2^depth leapfrog steps
    /// in direction `sign` (z ends at the new end), with `levels[d]` the
    /// workspace of a merge at depth d (d from 1 to depth); `propose`
    /// receives the subtree's multinomial sample.
    #[allow(clippy::too_many_arguments)]
    fn build_tree(
        &mut self,
        z: &mut Point,
        levels: &mut [Level],
        depth: usize,
        propose: &mut Point,
        e: Ends<'_>,
        h0: f64,
        sign: f64,
        log_sum_weight: &mut f64,
    ) -> Result<bool, ChainError<E>> {
        if depth == 0 {
            self.leapfrog(z, sign * self.eps)?;
            self.n_leapfrog += 1;
            let h = self.hamiltonian(z);
            if h - h0 > 1000.0 {
                self.divergent = true;
            }
            *log_sum_weight = log_sum_exp(*log_sum_weight, h0 - h);
            self.sum_metro += if h0 - h > 0.0 { 1.0 } else { (h0 - h).exp() };
            propose.copy_from(z);
            // The leaf's p# at both ends, its p into rho and at both ends:
            // one pass.
            let ends = e.ps_beg.iter_mut().zip(e.ps_end.iter_mut());
            let ends = ends.zip(e.p_beg.iter_mut().zip(e.p_end.iter_mut()));
            let ins = z.p().iter().zip(&self.minv).zip(e.rho.iter_mut());
            for (((ps_beg, ps_end), (p_beg, p_end)), ((&p, m), rho)) in ends.zip(ins) {
                let ps = m * p;
                (*ps_beg, *ps_end) = (ps, ps);
                *rho += p;
                (*p_beg, *p_end) = (p, p);
            }
            return Ok(!self.divergent);
        }
        let (below, rest) = levels.split_at_mut(depth);
        self.merge_halves(z, below, &mut rest[0], propose, e, h0, sign, log_sum_weight)
    }

    #[allow(clippy::too_many_arguments)]
    fn merge_halves(
        &mut self,
        z: &mut Point,
        below: &mut [Level],
        l: &mut Level,
        propose: &mut Point,
        e: Ends<'_>,
        h0: f64,
        sign: f64,
        log_sum_weight: &mut f64,
    ) -> Result<bool, ChainError<E>> {
        let depth = below.len();
        let mut lsw_init = f64::NEG_INFINITY;
        l.rho_init.fill(0.0);
        let first = Ends {
            ps_beg: &mut *e.ps_beg,
            ps_end: &mut l.ps_init_end,
            rho: &mut l.rho_init,
            p_beg: &mut *e.p_beg,
            p_end: &mut l.p_init_end,
        };
        if !self.build_tree(z, below, depth - 1, propose, first, h0, sign, &mut lsw_init)? {
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
        let (sub, fin) = (&mut *below, &mut l.prop_final);
        if !self.build_tree(z, sub, depth - 1, fin, second, h0, sign, &mut lsw_final)? {
            return Ok(false);
        }
        let lsw_sub = log_sum_exp(lsw_init, lsw_final);
        *log_sum_weight = log_sum_exp(*log_sum_weight, lsw_sub);
        if lsw_final > lsw_sub || self.rng.uniform() < (lsw_final - lsw_sub).exp() {
            propose.copy_from(&l.prop_final);
        }
        sum2(&mut l.rho_ext, &l.rho_init, &l.rho_final);
        add_to(e.rho, &l.rho_ext);
        if !Self::criterion(e.ps_beg, e.ps_end, &l.rho_ext) {
            return Ok(false);
        }
        sum2(&mut l.rho_ext, &l.rho_init, &l.p_final_beg);
        if !Self::criterion(e.ps_beg, &l.ps_final_beg, &l.rho_ext) {
            return Ok(false);
        }
        sum2(&mut l.rho_ext, &l.rho_final, &l.p_init_end);
        Ok(Self::criterion(&l.ps_init_end, e.ps_end, &l.rho_ext))
    }
}

/// The points and vectors of a transition's top level, and its subtrees'
/// workspace (`levels[d]`, depth d).
struct Top {
    /// The trajectory's two ends: each doubling extends one in place.
    fwd: Point,
    bck: Point,
    sample: Point,
    propose: Point,
    /// ps_fb, ps_ff, ps_bf, ps_bb, p_fb, p_ff, p_bf, p_bb, rho, rho_f,
    /// rho_b, rho_ext
    v: [Vec<f64>; 12],
    levels: Vec<Level>,
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
        let (fwd, bck, levels) = (&mut t.fwd, &mut t.bck, &mut t.levels[..]);
        self.sample_momentum(cur);
        fwd.copy_from(cur);
        bck.copy_from(cur);
        t.sample.copy_from(cur);
        self.sharp(cur.p(), ps_fb);
        for v in [&mut *ps_ff, &mut *ps_bf, &mut *ps_bb] {
            v.copy_from_slice(ps_fb);
        }
        for v in [&mut *p_fb, &mut *p_ff, &mut *p_bf, &mut *p_bb, &mut *rho] {
            v.copy_from_slice(cur.p());
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
                let e = Ends {
                    ps_beg: ps_fb,
                    ps_end: ps_ff,
                    rho: rho_f,
                    p_beg: p_fb,
                    p_end: p_ff,
                };
                let (d, propose) = (depth as usize, &mut t.propose);
                self.build_tree(fwd, levels, d, propose, e, h0, 1.0, &mut lsw_sub)?
            } else {
                rho_f.copy_from_slice(rho);
                p_fb.copy_from_slice(p_bf);
                ps_fb.copy_from_slice(ps_bf);
                let e = Ends {
                    ps_beg: ps_bf,
                    ps_end: ps_bb,
                    rho: rho_b,
                    p_beg: p_bf,
                    p_end: p_bb,
                };
                let (d, propose) = (depth as usize, &mut t.propose);
                self.build_tree(bck, levels, d, propose, e, h0, -1.0, &mut lsw_sub)?
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

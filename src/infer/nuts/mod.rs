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

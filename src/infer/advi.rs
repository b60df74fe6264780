//! Automatic differentiation variational inference as Stan runs it
//! (Kucukelbir et al. 2017), over the same gradient closure as NUTS.
//!
//! The approximation is a Gaussian on the unconstrained space: mean-field,
//! N(mu, diag(e^{2 omega})), or full-rank, N(mu, L L^T) with L an
//! unconstrained lower triangle (its entropy sums log |L_ii|). The ELBO's
//! gradient comes from `grad_samples` reparameterised draws
//! z = mu + e^omega * eta (or mu + L eta), eta ~ N(0, I); the step of
//! iteration k is eta_k = eta * k^(-1/2 + 1e-16) / (1 + sqrt(s_k)) per
//! coordinate, s_k = 0.1 g^2 + 0.9 s_{k-1} (s_1 = g^2). Every `eval_elbo`
//! iterations the ELBO is estimated from `elbo_samples` draws, and the run
//! stops when the mean or the median of the relative ELBO changes kept in
//! a circular buffer falls under `tol_rel_obj`. With `eta` 0 the step size
//! is adapted first: 100, 10, 1, 0.1 and 0.01 are each tried for
//! `adapt_iterations` iterations from the initial fit, keeping the one
//! with the best ELBO.
//!
//! Stan reports the last iterate, which wanders around the optimum by the
//! step size's noise. With `average_fraction` f > 0 the fit reported is
//! instead the mean of the ascent's iterates over its last steps
//! (Polyak-Ruppert averaging): mu and omega, or mu and L with each column
//! of L signed so that its diagonal entry is positive (L and L with a
//! column negated are the same covariance, and the ascent may cross
//! between them). The end of a run is not known in advance (it stops when
//! the ELBO converges), so two running sums are kept: the older one is
//! reported, and a newer one replaces it once it covers f of the steps so
//! far. The steps averaged are then between f and f (2 - f) of the
//! ascent's, the last of them included.

use super::chain::ChainDraws;
use super::rng::ChainRng;
use average::TailAverage;

mod average;

/// The Gaussian family fitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Independent coordinates: mu and omega = log sd.
    MeanField,
    /// Any covariance: mu and the lower triangle of its Cholesky factor.
    FullRank,
}

/// The settings of a run (Stan's defaults in [`Default`], but for `eta`,
/// whose 0 asks for the adaptation).
#[derive(Clone, Copy, Debug)]
pub struct AdviSettings {
    pub family: Family,
    /// The most gradient steps after the adaptation.
    pub iterations: u32,
    pub grad_samples: u32,
    pub elbo_samples: u32,
    pub eval_elbo: u32,
    /// The step size; 0 adapts it.
    pub eta: f64,
    pub adapt_iterations: u32,
    pub tol_rel_obj: f64,
    pub output_draws: u32,
    /// The fraction of the ascent's last steps whose iterates are averaged
    /// into the fit, in [0, 1]; 0 reports the last iterate, as Stan does.
    pub average_fraction: f64,
}

impl Default for AdviSettings {
    fn default() -> Self {
        AdviSettings {
            family: Family::MeanField,
            iterations: 10_000,
            grad_samples: 1,
            elbo_samples: 100,
            eval_elbo: 100,
            eta: 0.0,
            adapt_iterations: 50,
            tol_rel_obj: 0.01,
            output_draws: 1000,
            average_fraction: 0.0,
        }
    }
}

/// A fitted approximation.
#[derive(Clone, Debug, PartialEq)]
pub struct AdviFit {
    pub family: Family,
    pub mu: Vec<f64>,
    /// Mean-field: omega = log sd, `[dim]`. Full-rank: L row-major, `[dim * dim]`,
    /// zero above the diagonal.
    pub scale: Vec<f64>,
    /// The ELBO of this fit (up to the log density's constant), estimated
    /// from `elbo_samples` draws; NaN when no draw had a finite density.
    pub elbo: f64,
    /// The step size used (the adapted one when `eta` was 0).
    pub eta: f64,
    /// Gradient steps taken after the adaptation.
    pub iterations: u32,
    /// The relative ELBO change fell under `tol_rel_obj`.
    pub converged: bool,
}

impl AdviFit {
    /// The standard deviations of the coordinates' marginals.
    pub fn marginal_sd(&self) -> Vec<f64> {
        let d = self.mu.len();
        match self.family {
            Family::MeanField => self.scale.iter().map(|w| w.exp()).collect(),
            Family::FullRank => (0..d)
                .map(|i| {
                    let row = &self.scale[i * d..i * d + i + 1];
                    row.iter().map(|v| v * v).sum::<f64>().sqrt()
                })
                .collect(),
        }
    }
}

/// Where in a run something happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The search for an initial point.
    Init,
    /// The step size adaptation.
    Adapt,
    /// The stochastic gradient ascent.
    Optimise,
    /// The draws from the fitted approximation.
    Draws,
}

/// Why a run stopped without a fit.
#[derive(Debug)]
pub enum AdviError<E> {
    /// The density failed at gradient step `iteration` of the run (counted
    /// over the adaptation and the ascent together), or at draw
    /// `iteration` of the output.
    Density {
        stage: Stage,
        iteration: u32,
        error: E,
    },
    /// No finite log density and gradient at 100 uniform(-2, 2) points.
    NoInitialPoint,
    /// Every ELBO draw of the initial fit had a non-finite density.
    InitialElbo,
    /// Every step size tried made the ELBO worse than the initial fit's.
    AllStepSizesFailed,
    /// A gradient draw of the ascent had a non-finite density or gradient.
    NonFiniteGradient { iteration: u32 },
    /// Every ELBO draw of the ascent had a non-finite density.
    Elbo { iteration: u32 },
}

/// The fit's parameters, flat: mu `[dim]` then omega `[dim]` or L `[dim * dim]`.
struct Params {
    family: Family,
    dim: usize,
    theta: Vec<f64>,
}

impl Params {
    /// mu = q0, omega = 0 or L = I: Stan's initial fit.
    fn initial(family: Family, q0: &[f64]) -> Self {
        let dim = q0.len();
        let mut theta = q0.to_vec();
        match family {
            Family::MeanField => theta.resize(2 * dim, 0.0),
            Family::FullRank => {
                theta.resize(dim + dim * dim, 0.0);
                for i in 0..dim {
                    theta[dim + i * dim + i] = 1.0;
                }
            }
        }
        Params { family, dim, theta }
    }

    /// z = mu + e^omega * eta, or mu + L eta.
    fn transform(&self, eta: &[f64], z: &mut [f64]) {
        let d = self.dim;
        let (mu, s) = self.theta.split_at(d);
        for i in 0..d {
            z[i] = mu[i]
                + match self.family {
                    Family::MeanField => s[i].exp() * eta[i],
                    Family::FullRank => (0..=i).map(|j| s[i * d + j] * eta[j]).sum::<f64>(),
                };
        }
    }

    /// The Gaussian's entropy.
    fn entropy(&self) -> f64 {
        let d = self.dim;
        let s = &self.theta[d..];
        let log_det: f64 = match self.family {
            Family::MeanField => s.iter().sum(),
            Family::FullRank => (0..d).map(|i| s[i * d + i].abs().ln()).sum(),
        };
        0.5 * d as f64 * (1.0 + (2.0 * std::f64::consts::PI).ln()) + log_det
    }
}

/// What a run carries between its steps.
struct Advi<'a, F> {
    grad: F,
    rng: ChainRng,
    settings: &'a AdviSettings,
    eta_draw: Vec<f64>,
    z: Vec<f64>,
    g: Vec<f64>,
    /// The gradient steps taken so far (adaptation and ascent).
    step: u32,
}

/// A failed gradient estimate: the density's error, or a non-finite value.
enum GradFailure<E> {
    Density(E),
    NonFinite,
}

impl<E, F> Advi<'_, F>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
{
    fn draw_eta(&mut self) {
        for e in &mut self.eta_draw {
            *e = self.rng.normal();
        }
    }

    /// The ELBO's gradient with respect to theta into `out`, from
    /// `grad_samples` reparameterised draws.
    fn elbo_grad(&mut self, p: &Params, out: &mut [f64]) -> Result<(), GradFailure<E>> {
        let d = p.dim;
        out.fill(0.0);
        let n = self.settings.grad_samples;
        for _ in 0..n {
            self.draw_eta();
            p.transform(&self.eta_draw, &mut self.z);
            let lp = (self.grad)(&self.z, &mut self.g).map_err(GradFailure::Density)?;
            if !lp.is_finite() || !self.g.iter().all(|v| v.is_finite()) {
                return Err(GradFailure::NonFinite);
            }
            let (dmu, ds) = out.split_at_mut(d);
            for i in 0..d {
                dmu[i] += self.g[i];
                match p.family {
                    Family::MeanField => ds[i] += self.g[i] * self.eta_draw[i],
                    Family::FullRank => {
                        for j in 0..=i {
                            ds[i * d + j] += self.g[i] * self.eta_draw[j];
                        }
                    }
                }
            }
        }
        for v in out.iter_mut() {
            *v /= f64::from(n);
        }
        // the entropy's gradient, and the chain rule through e^omega
        let s = &p.theta[d..];
        let ds = &mut out[d..];
        for i in 0..d {
            match p.family {
                Family::MeanField => ds[i] = ds[i] * s[i].exp() + 1.0,
                Family::FullRank => ds[i * d + i] += 1.0 / s[i * d + i],
            }
        }
        Ok(())
    }

    /// The ELBO from `elbo_samples` draws; draws with a non-finite density
    /// are dropped but still counted in the average, as Stan does. None
    /// when every draw was dropped.
    fn elbo(&mut self, p: &Params) -> Result<Option<f64>, E> {
        let n = self.settings.elbo_samples;
        let (mut sum, mut kept) = (0.0, 0);
        for _ in 0..n {
            self.draw_eta();
            p.transform(&self.eta_draw, &mut self.z);
            let lp = (self.grad)(&self.z, &mut self.g)?;
            if lp.is_finite() {
                sum += lp;
                kept += 1;
            }
        }
        Ok((kept > 0).then(|| sum / f64::from(n) + p.entropy()))
    }
}

/// One adaptive step: s = g^2 at the first step of a sequence, else
/// 0.1 g^2 + 0.9 s; theta += eta k^(-1/2 + 1e-16) g / (1 + sqrt(s)).
fn ascend(theta: &mut [f64], s: &mut [f64], g: &[f64], eta: f64, k: u32) {
    let scaled = eta * f64::from(k).powf(-0.5 + 1e-16);
    for ((t, s), &g) in theta.iter_mut().zip(s.iter_mut()).zip(g) {
        *s = if k == 1 {
            g * g
        } else {
            0.1 * g * g + 0.9 * *s
        };
        *t += scaled * g / (1.0 + s.sqrt());
    }
}

/// The median of the relative ELBO changes, Stan's way: the upper middle
/// one when their number is even.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// What [`run_advi`] gives: the fit (None when it failed before having
/// one), its draws as a chain (positions and lp; the NUTS statistics are
/// filled with accept_stat 1, depth and leapfrog steps 0, no divergence,
/// step size 0, and the approximation's marginal variances as the
/// inverse metric), and the error that stopped the run.
pub type AdviOutput<E> = (Option<AdviFit>, ChainDraws, Option<AdviError<E>>);

/// Runs ADVI from a uniform(-2, 2) initial point; random numbers come from
/// the stream of (seed, chain 0). `keep_going(step)` is called with 0
/// before the first gradient step, then after each (adaptation first);
/// false stops the run there, and the fit so far (the initial one during
/// adaptation, the mean of the iterates so far when averaging) is drawn
/// from.
pub fn run_advi<E, F, K>(
    dim: usize,
    settings: &AdviSettings,
    seed: u64,
    grad: F,
    mut keep_going: K,
) -> AdviOutput<E>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    K: FnMut(u32) -> bool,
{
    let mut a = Advi {
        grad,
        rng: ChainRng::for_chain(seed, 0),
        settings,
        eta_draw: vec![0.0; dim],
        z: vec![0.0; dim],
        g: vec![0.0; dim],
        step: 0,
    };
    let mut draws = ChainDraws {
        dim,
        ..ChainDraws::default()
    };
    let fit = match fit(&mut a, &mut keep_going) {
        Ok(f) => f,
        Err(e) => return (None, draws, Some(e)),
    };
    let error = output_draws(&mut a, &fit, &mut draws).err();
    (Some(fit), draws, error)
}

fn fit<E, F, K>(a: &mut Advi<'_, F>, keep_going: &mut K) -> Result<AdviFit, AdviError<E>>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    K: FnMut(u32) -> bool,
{
    let dim = a.z.len();
    let density = |stage, iteration| {
        move |error| AdviError::Density {
            stage,
            iteration,
            error,
        }
    };
    // initial point: uniform(-2, 2) with a finite density and gradient
    let mut q0 = vec![0.0; dim];
    for attempt in 1.. {
        for q in &mut q0 {
            *q = 4.0 * a.rng.uniform() - 2.0;
        }
        let lp = (a.grad)(&q0, &mut a.g).map_err(density(Stage::Init, 0))?;
        if lp.is_finite() && a.g.iter().all(|v| v.is_finite()) {
            break;
        }
        if attempt == 100 {
            return Err(AdviError::NoInitialPoint);
        }
    }
    let family = a.settings.family;
    let mut eta = a.settings.eta;
    let mut stopped = !keep_going(0);
    if eta == 0.0 && !stopped {
        match adapt_eta(a, &q0, keep_going)? {
            Some(e) => eta = e,
            None => stopped = true,
        }
    }
    let mut p = Params::initial(family, &q0);
    let mut g = vec![0.0; p.theta.len()];
    let mut s = vec![0.0; p.theta.len()];
    let mut elbo = 0.0;
    let mut elbo_is_current = false;
    let (mut k, mut converged) = (0, false);
    let settings = a.settings;
    let window =
        ((0.1 * f64::from(settings.iterations) / f64::from(settings.eval_elbo)) as usize).max(2);
    let mut changes: Vec<f64> = Vec::with_capacity(window);
    let mut average = (settings.average_fraction > 0.0)
        .then(|| TailAverage::new(settings.average_fraction, p.theta.len()));
    while !stopped && k < settings.iterations {
        k += 1;
        a.step += 1;
        a.elbo_grad(&p, &mut g).map_err(|f| match f {
            GradFailure::Density(e) => density(Stage::Optimise, a.step)(e),
            GradFailure::NonFinite => AdviError::NonFiniteGradient { iteration: a.step },
        })?;
        ascend(&mut p.theta, &mut s, &g, eta, k);
        if let Some(avg) = &mut average {
            avg.add(&p, k);
        }
        elbo_is_current = false;
        if k % settings.eval_elbo == 0 {
            let elbo_prev = elbo;
            elbo = a
                .elbo(&p)
                .map_err(density(Stage::Optimise, a.step))?
                .ok_or(AdviError::Elbo { iteration: a.step })?;
            elbo_is_current = true;
            let change = ((elbo - elbo_prev) / elbo_prev).abs();
            if changes.len() == window {
                changes.remove(0);
            }
            changes.push(change);
            let mean = changes.iter().sum::<f64>() / changes.len() as f64;
            converged = mean < settings.tol_rel_obj || median(&changes) < settings.tol_rel_obj;
        }
        stopped = converged || !keep_going(a.step);
    }
    if let Some(avg) = average.filter(|avg| avg.n > 0) {
        // the ELBOs above were the iterates'; the fit is their mean
        avg.write_mean(&mut p.theta);
        elbo_is_current = false;
    }
    if !elbo_is_current {
        elbo = a
            .elbo(&p)
            .map_err(density(Stage::Optimise, a.step))?
            .unwrap_or(f64::NAN);
    }
    let Params { theta, .. } = p;
    Ok(AdviFit {
        family,
        scale: theta[dim..].to_vec(),
        mu: theta[..dim].to_vec(),
        elbo,
        eta,
        iterations: k,
        converged,
    })
}

/// Stan's step size adaptation: each of 100, 10, 1, 0.1, 0.01 runs
/// `adapt_iterations` steps from the initial fit (a failed gradient counts
/// as zero); the sequence stops at the first ELBO worse than the best one
/// so far once that best beats the initial ELBO. None when `keep_going`
/// stopped it.
fn adapt_eta<E, F, K>(
    a: &mut Advi<'_, F>,
    q0: &[f64],
    keep_going: &mut K,
) -> Result<Option<f64>, AdviError<E>>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    K: FnMut(u32) -> bool,
{
    const SEQUENCE: [f64; 5] = [100.0, 10.0, 1.0, 0.1, 0.01];
    let family = a.settings.family;
    let density = |iteration| {
        move |error| AdviError::Density {
            stage: Stage::Adapt,
            iteration,
            error,
        }
    };
    let init = Params::initial(family, q0);
    let elbo_init = a
        .elbo(&init)
        .map_err(density(a.step))?
        .ok_or(AdviError::InitialElbo)?;
    let (mut elbo_best, mut eta_best) = (-f64::MAX, 0.0);
    let mut g = vec![0.0; init.theta.len()];
    let mut s = vec![0.0; init.theta.len()];
    for (index, &eta) in SEQUENCE.iter().enumerate() {
        let mut p = Params::initial(family, q0);
        s.fill(0.0);
        for k in 1..=a.settings.adapt_iterations {
            a.step += 1;
            match a.elbo_grad(&p, &mut g) {
                Ok(()) => {}
                Err(GradFailure::NonFinite) => g.fill(0.0),
                Err(GradFailure::Density(e)) => return Err(density(a.step)(e)),
            }
            ascend(&mut p.theta, &mut s, &g, eta, k);
            if !keep_going(a.step) {
                return Ok(None);
            }
        }
        // a diverged fit may give non-finite parameters: its ELBO is the worst
        let finite = p.theta.iter().all(|v| v.is_finite());
        let elbo = match finite {
            true => a.elbo(&p).map_err(density(a.step))?,
            false => None,
        }
        .filter(|e| e.is_finite())
        .unwrap_or(-f64::MAX);
        if elbo < elbo_best && elbo_best > elbo_init {
            return Ok(Some(eta_best));
        }
        if index + 1 < SEQUENCE.len() {
            (elbo_best, eta_best) = (elbo, eta);
        } else if elbo > elbo_init {
            return Ok(Some(eta));
        }
    }
    Err(AdviError::AllStepSizesFailed)
}

/// `output_draws` draws from the fit, each with its log density.
fn output_draws<E, F>(
    a: &mut Advi<'_, F>,
    fit: &AdviFit,
    out: &mut ChainDraws,
) -> Result<(), AdviError<E>>
where
    F: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
{
    let dim = fit.mu.len();
    let n = a.settings.output_draws as usize;
    let mut theta = fit.mu.clone();
    theta.extend_from_slice(&fit.scale);
    let p = Params {
        family: fit.family,
        dim,
        theta,
    };
    out.positions.reserve_exact(n * dim);
    out.lp.reserve_exact(n);
    out.inv_metric = fit.marginal_sd().iter().map(|s| s * s).collect();
    for k in 0..n {
        a.draw_eta();
        p.transform(&a.eta_draw, &mut a.z);
        let lp = (a.grad)(&a.z, &mut a.g).map_err(|error| AdviError::Density {
            stage: Stage::Draws,
            iteration: k as u32 + 1,
            error,
        })?;
        out.positions.extend_from_slice(&a.z);
        out.lp.push(lp);
        out.accept_stat.push(1.0);
        out.tree_depth.push(0);
        out.n_leapfrog.push(0);
        out.divergent.push(false);
    }
    out.iterations = a.step;
    Ok(())
}

//! ag_advi_run (ADVI on the sampler's model, on one context, through
//! src/infer/advi.rs) and ag_draws_advi (the fitted approximation).

use super::density::{ChainContext, Running, report_draws};
use super::model::{
    AdviOut, DRAWS, Failure, SAMPLERS, ag_draws, ag_progress_fn, ag_sampler, check_size, entry,
    fail, locked, lookup,
};
use crate::ffi::prelude::*;
use crate::infer::{AdviError, AdviSettings, Family, Stage, run_advi};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// ag_advi_config's `algorithm`: independent coordinates, N(mu, diag(sd^2)).
pub const AG_ADVI_MEANFIELD: u32 = 0;
/// ag_advi_config's `algorithm`: N(mu, L L^T) with L lower triangular.
pub const AG_ADVI_FULLRANK: u32 = 1;

/// The largest dim a full-rank fit takes (its L has dim^2 entries).
const MAX_FULLRANK_DIM: usize = 2048;

/// ag_advi_config_default's average_fraction: the last quarter or so of
/// the steps, where the step size has decayed and the iterates wander
/// around the optimum rather than approach it.
const DEFAULT_AVERAGE_FRACTION: f64 = 0.25;

/// The settings of an ADVI run (ag_advi_config_default fills Stan's
/// defaults, but for eta: 0 here, which adapts it).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_advi_config {
    /// sizeof(ag_advi_config).
    pub struct_size: usize,
    /// AG_ADVI_MEANFIELD (default) or AG_ADVI_FULLRANK.
    pub algorithm: u32,
    /// The most gradient steps after the eta adaptation (at least 1;
    /// default 10000).
    pub iterations: u32,
    /// Draws per ELBO gradient (at least 1; default 1).
    pub grad_samples: u32,
    /// Draws per ELBO estimate (at least 1; default 100).
    pub elbo_samples: u32,
    /// The ELBO is estimated, and convergence tested, every eval_elbo
    /// steps (at least 1; default 100).
    pub eval_elbo: u32,
    /// The step size scale, finite and >= 0; 0 (default) adapts it,
    /// trying 100, 10, 1, 0.1 and 0.01.
    pub eta: f64,
    /// Steps per eta tried when adapting (at least 1 when eta is 0;
    /// default 50).
    pub adapt_iterations: u32,
    /// Converged when the mean or median relative ELBO change over the
    /// last evaluations falls under this (finite, > 0; default 0.01).
    pub tol_rel_obj: f64,
    /// Draws from the fitted approximation (at least 1; default 1000).
    pub output_draws: u32,
    /// The run's random numbers come from this only (default 1234).
    pub seed: u64,
    /// Called after each gradient step with chain 0, the steps so far
    /// (adaptation first) and the most there can be (the run may stop
    /// sooner), or NULL.
    pub progress: ag_progress_fn,
    /// Passed to progress as it is.
    pub progress_user: *mut c_void,
    /// The fit reported is the mean of the ascent's iterates over its last
    /// steps (Polyak-Ruppert averaging: the mean and log-sds, or the mean
    /// and L with each column signed so that its diagonal is positive),
    /// which wanders far less than the last iterate Stan reports. Between
    /// average_fraction and average_fraction * (2 - average_fraction) of
    /// the steps are averaged, the last included (the end is known only
    /// once the ELBO converges); 0 reports the last iterate. In [0, 1];
    /// default 0.25. This field was added later: a caller whose
    /// struct_size ends before it gets 0.
    pub average_fraction: f64,
}

/// The fields of ag_advi_config before average_fraction: what a caller
/// whose struct_size ends there passes.
#[repr(C)]
#[derive(Clone, Copy)]
struct AdviConfigBase {
    struct_size: usize,
    algorithm: u32,
    iterations: u32,
    grad_samples: u32,
    elbo_samples: u32,
    eval_elbo: u32,
    eta: f64,
    adapt_iterations: u32,
    tol_rel_obj: f64,
    output_draws: u32,
    seed: u64,
    progress: ag_progress_fn,
    progress_user: *mut c_void,
}

/// The approximation ag_advi_run fitted (ag_draws_advi): pointers into the
/// ag_draws, valid until ag_draws_free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_advi_fit {
    /// The model's dim.
    pub dim: usize,
    /// AG_ADVI_MEANFIELD or AG_ADVI_FULLRANK.
    pub algorithm: u32,
    /// The approximation's mean on the unconstrained space, [dim].
    pub mean: *const f64,
    /// Mean-field: the sds, [dim]. Full-rank: the Cholesky factor L of the
    /// covariance, row-major [dim * dim], zero above the diagonal (its
    /// diagonal may be negative: the covariance is L L^T).
    pub scale: *const f64,
    /// The ELBO of this fit (up to the log density's constant), from
    /// elbo_samples draws; NaN when none had a finite density.
    pub elbo: f64,
    /// Gradient steps run after the eta adaptation.
    pub iterations_run: u32,
    /// The relative ELBO change fell under tol_rel_obj.
    pub converged: bool,
}

/// Fills `*out` with the defaults: mean-field, 10000 iterations, 1 gradient
/// draw, 100 ELBO draws every 100 steps, eta 0 (adapted over 50 steps per
/// value tried), tol_rel_obj 0.01, 1000 output draws, seed 1234, no
/// progress function, average_fraction 0.25; struct_size is set.
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_advi_config_default(out: *mut ag_advi_config) -> ag_status {
    const F: &str = "ag_advi_config_default";
    entry(F, || {
        let s = AdviSettings::default();
        let c = ag_advi_config {
            struct_size: size_of::<ag_advi_config>(),
            algorithm: AG_ADVI_MEANFIELD,
            iterations: s.iterations,
            grad_samples: s.grad_samples,
            elbo_samples: s.elbo_samples,
            eval_elbo: s.eval_elbo,
            eta: s.eta,
            adapt_iterations: s.adapt_iterations,
            tol_rel_obj: s.tol_rel_obj,
            output_draws: s.output_draws,
            seed: 1234,
            progress: None,
            progress_user: std::ptr::null_mut(),
            average_fraction: DEFAULT_AVERAGE_FRACTION,
        };
        Ok(write_out(F, "out", out, c)?)
    })
}

/// The settings of `c` for a model of `dim` coordinates, and the most
/// gradient steps the run can take.
fn settings_of(
    c: &ag_advi_config,
    dim: usize,
) -> std::result::Result<(AdviSettings, u32), Failure> {
    const F: &str = "ag_advi_run";
    let bad = |what: String| {
        Err(fail(
            AG_STATUS_INVALID_ARGUMENT,
            format!("{F}: config->{what}"),
        ))
    };
    let family = match c.algorithm {
        AG_ADVI_MEANFIELD => Family::MeanField,
        AG_ADVI_FULLRANK if dim > MAX_FULLRANK_DIM => {
            return bad(format!(
                "algorithm is AG_ADVI_FULLRANK, and the model's dim {dim} passes {MAX_FULLRANK_DIM}"
            ));
        }
        AG_ADVI_FULLRANK => Family::FullRank,
        a => {
            return bad(format!(
                "algorithm is {a}, not AG_ADVI_MEANFIELD or AG_ADVI_FULLRANK"
            ));
        }
    };
    for (name, v) in [
        ("iterations", c.iterations),
        ("grad_samples", c.grad_samples),
        ("elbo_samples", c.elbo_samples),
        ("eval_elbo", c.eval_elbo),
        ("output_draws", c.output_draws),
    ] {
        if v == 0 {
            return bad(format!("{name} is 0"));
        }
    }
    if !(c.eta.is_finite() && c.eta >= 0.0) {
        return bad(format!("eta is {}, not finite and >= 0", c.eta));
    }
    let adapting = c.eta == 0.0;
    if adapting && c.adapt_iterations == 0 {
        return bad("adapt_iterations is 0 and eta is 0 (adapt)".into());
    }
    if !(c.tol_rel_obj.is_finite() && c.tol_rel_obj > 0.0) {
        return bad(format!(
            "tol_rel_obj is {}, not finite and > 0",
            c.tol_rel_obj
        ));
    }
    if !(0.0..=1.0).contains(&c.average_fraction) {
        return bad(format!(
            "average_fraction is {}, not in [0, 1]",
            c.average_fraction
        ));
    }
    let adapt_steps = if adapting {
        c.adapt_iterations.checked_mul(5)
    } else {
        Some(0)
    };
    let Some(total) = adapt_steps.and_then(|a| a.checked_add(c.iterations)) else {
        return bad("iterations + 5 adapt_iterations passes 2^32 - 1".into());
    };
    let s = AdviSettings {
        family,
        iterations: c.iterations,
        grad_samples: c.grad_samples,
        elbo_samples: c.elbo_samples,
        eval_elbo: c.eval_elbo,
        eta: c.eta,
        adapt_iterations: c.adapt_iterations,
        tol_rel_obj: c.tol_rel_obj,
        output_draws: c.output_draws,
        average_fraction: c.average_fraction,
    };
    Ok((s, total))
}

fn failure_of(e: AdviError<Failure>) -> Failure {
    const F: &str = "ag_advi_run";
    let non_finite = |what: String| fail(AG_STATUS_NON_FINITE, format!("{F}: {what}"));
    match e {
        AdviError::Density {
            stage,
            iteration,
            error,
        } => {
            let at = match stage {
                Stage::Init => "the search for an initial point".to_string(),
                Stage::Adapt => format!("eta adaptation, step {iteration}"),
                Stage::Optimise => format!("step {iteration}"),
                Stage::Draws => format!("output draw {iteration}"),
            };
            fail(error.status, format!("{F}: {at}: {}", error.message))
        }
        AdviError::NoInitialPoint => non_finite(
            "no finite log density and gradient at 100 initial points in (-2, 2)^dim".into(),
        ),
        AdviError::InitialElbo => non_finite(
            "no ELBO draw of the initial fit has a finite log density (misspecified model?)".into(),
        ),
        AdviError::AllStepSizesFailed => non_finite(
            "every eta tried (100 to 0.01) left the ELBO worse than the initial fit's".into(),
        ),
        AdviError::NonFiniteGradient { iteration } => non_finite(format!(
            "step {iteration}: a gradient draw has a non-finite log density or gradient"
        )),
        AdviError::Elbo { iteration } => non_finite(format!(
            "step {iteration}: no ELBO draw has a finite log density"
        )),
    }
}

/// Fits a Gaussian approximation to the sampler's model by ADVI (Stan's
/// algorithm: Kucukelbir et al. 2017) on one context, from a uniform(-2, 2)
/// initial point, and writes `output_draws` draws from it to `*out` as one
/// chain (free them with ag_draws_free): ag_draws_chain gives their
/// positions and log densities (accept_stat 1, tree_depth and n_leapfrog
/// 0, divergent false, step_size 0, inv_metric the approximation's
/// marginal variances), ag_draws_summary their summary (the draws are
/// independent), ag_draws_advi the fit itself (with average_fraction > 0,
/// the mean of the last iterates). A struct_size that ends before
/// average_fraction (an older ag_advi_config) is taken as average_fraction
/// 0. The same bits at any ag_set_num_threads, for a fixed graph or not.
/// After ag_sampler_cancel the run stops at the next gradient step and the
/// draws come from the fit so far (the initial one if the eta adaptation
/// was under way; at once for a sampler cancelled before), with
/// ag_draws_info's `cancelled` set. A failure writes nothing to `*out`;
/// the message (ag_sampler_last_error) names the step or draw.
/// Errors: NULL_ARGUMENT (s, config, out), INVALID_HANDLE (s is not a live
/// sampler), BUSY (a run on s is under way), INVALID_ARGUMENT (struct_size
/// smaller than ag_advi_config up to its progress_user, algorithm unknown,
/// or full-rank with dim above 2048, iterations, grad_samples,
/// elbo_samples, eval_elbo or output_draws 0, eta negative or not finite,
/// adapt_iterations 0 with eta 0, tol_rel_obj not finite and positive,
/// average_fraction not in [0, 1], iterations + 5 adapt_iterations above
/// 2^32 - 1), NOT_SCALAR (the density's result is not one element),
/// NON_FINITE (no finite initial point, every step size failed, a
/// non-finite gradient draw, no finite ELBO draw), OUT_OF_MEMORY (no
/// context), PANIC, or the status an ag call of the density or the
/// density itself returned.
#[unsafe(no_mangle)]
pub extern "C" fn ag_advi_run(
    s: *mut ag_sampler,
    config: *const ag_advi_config,
    out: *mut *mut ag_draws,
) -> ag_status {
    const F: &str = "ag_advi_run";
    entry(F, || {
        let sampler = lookup(F, &SAMPLERS, "sampler", s.cast_const())?;
        need(F, "config", config)?;
        need(F, "out", out)?;
        // SAFETY: non-NULL; struct_size is checked before the rest is read.
        let size = unsafe { config.cast::<usize>().read_unaligned() };
        check_size(F, "ag_advi_config", size, size_of::<AdviConfigBase>())?;
        let c = if size >= size_of::<ag_advi_config>() {
            // SAFETY: non-NULL and, by struct_size, a whole ag_advi_config.
            unsafe { config.read_unaligned() }
        } else {
            // SAFETY: non-NULL and, by struct_size, at least the base fields.
            let b = unsafe { config.cast::<AdviConfigBase>().read_unaligned() };
            ag_advi_config {
                struct_size: b.struct_size,
                algorithm: b.algorithm,
                iterations: b.iterations,
                grad_samples: b.grad_samples,
                elbo_samples: b.elbo_samples,
                eval_elbo: b.eval_elbo,
                eta: b.eta,
                adapt_iterations: b.adapt_iterations,
                tol_rel_obj: b.tol_rel_obj,
                output_draws: b.output_draws,
                seed: b.seed,
                progress: b.progress,
                progress_user: b.progress_user,
                average_fraction: 0.0,
            }
        };
        let (settings, total) = settings_of(&c, sampler.dim)?;
        let running = Running::start(F, &sampler)?;
        let sp = &*sampler;
        let mut cc = ChainContext::new(F, sp.dim)?;
        let mut buf = vec![0.0f32; sp.dim];
        let grad = |q: &[f64], g: &mut [f64]| cc.log_density(sp, q, g, &mut buf);
        let user = c.progress_user;
        let keep_going = |step: u32| {
            if let (Some(p), 1..) = (c.progress, step) {
                // SAFETY: the caller's function with its own user pointer,
                // as the header documents.
                unsafe { p(user, 0, step, total) };
            }
            !sp.cancelled.load(Ordering::Acquire)
        };
        let (fit, draws, error) = run_advi(sp.dim, &settings, c.seed, grad, keep_going);
        drop(running);
        if let Some(e) = error {
            return Err(failure_of(e));
        }
        let fit = fit.ok_or_else(|| fail(AG_STATUS_PANIC, format!("{F}: no fit and no error")))?;
        let scale = match fit.family {
            Family::MeanField => fit.marginal_sd(),
            Family::FullRank => fit.scale.clone(),
        };
        let advi = AdviOut {
            algorithm: c.algorithm,
            mean: fit.mu,
            scale,
            elbo: fit.elbo,
            iterations: fit.iterations,
            converged: fit.converged,
        };
        let reported = report_draws(F, sp, 0, &draws)?;
        let draws = Arc::new(ag_draws {
            cancelled: sp.cancelled.load(Ordering::Acquire),
            chains: vec![draws],
            dim: sp.dim,
            names: sp.names.clone(),
            advi: Some(advi),
            reported: vec![reported],
            reporter: sp.reporter.clone(),
        });
        let addr = Arc::as_ptr(&draws) as usize;
        locked(&DRAWS).insert(addr, draws);
        Ok(write_out(F, "out", out, addr as *mut ag_draws)?)
    })
}

/// Writes the approximation ag_advi_run fitted to `*out` (pointers into
/// `d`, valid until ag_draws_free).
/// Errors: NULL_ARGUMENT (d, out), INVALID_HANDLE (d is not live draws),
/// INVALID_ARGUMENT (d comes from ag_nuts_run, not ag_advi_run).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_advi(d: *const ag_draws, out: *mut ag_advi_fit) -> ag_status {
    const F: &str = "ag_draws_advi";
    entry(F, || {
        let d = lookup(F, &DRAWS, "draws", d)?;
        need(F, "out", out)?;
        let a = d.advi.as_ref().ok_or_else(|| {
            fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{F}: the draws come from ag_nuts_run, not ag_advi_run"),
            )
        })?;
        let fit = ag_advi_fit {
            dim: d.dim,
            algorithm: a.algorithm,
            mean: a.mean.as_ptr(),
            scale: a.scale.as_ptr(),
            elbo: a.elbo,
            iterations_run: a.iterations,
            converged: a.converged,
        };
        Ok(write_out(F, "out", out, fit)?)
    })
}

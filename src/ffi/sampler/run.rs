//! ag_nuts_run (a context per chain, capture and replay of fixed graphs,
//! chains on the library's threads) and the accessors of its draws.

use super::density::{ChainContext, Running, report_draws};
use super::model::{
    DRAWS, Failure, SAMPLERS, UserPtr, ag_chain_draws, ag_draws, ag_draws_info_t, ag_nuts_config,
    ag_progress_fn, ag_sampler, ag_summary_row, check_size, entry, fail, locked, lookup,
};
use crate::ffi::prelude::*;
use crate::infer::nuts::Chain;
use crate::infer::{ChainDraws, ChainError, Settings, SummaryRow, summarise};
use std::ffi::CString;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What every chain of a run shares.
struct Run<'a> {
    sampler: &'a ag_sampler,
    settings: Settings,
    seed: u64,
    progress: ag_progress_fn,
    progress_user: UserPtr,
    /// Set when a chain fails, to stop the others.
    failed: AtomicBool,
}

/// Transitions a chain runs per turn when there are more chains than
/// threads: short, so that the chains advance together (a run lasts as
/// long as its slowest thread), yet a turn's hand-over (a lock, a cold
/// cache) is small beside it.
const TURN: u32 = 8;

/// A chain between turns: what it runs on from its first turn until it
/// stops, then its result.
struct Job {
    chain: u32,
    live: Option<Live>,
    result: Option<std::result::Result<(ChainDraws, ChainDraws), Failure>>,
}

/// A started chain's context, position buffer and sampler state.
struct Live {
    context: ChainContext,
    buf: Vec<f32>,
    state: Chain<Failure>,
}

impl Run<'_> {
    /// Chain `chain` in one turn: its draws and their reported quantities.
    fn chain(&self, chain: u32) -> std::result::Result<(ChainDraws, ChainDraws), Failure> {
        let mut job = self.job(chain);
        self.turn(&mut job, u32::MAX);
        job.result
            .expect("a turn of every transition finishes the chain")
    }

    fn job(&self, chain: u32) -> Job {
        Job {
            chain,
            live: None,
            result: None,
        }
    }

    /// Runs up to `transitions` of the job's chain (its first turn makes
    /// its context); once the chain stops, sets the job's result and frees
    /// its context.
    fn turn(&self, job: &mut Job, transitions: u32) {
        const F: &str = "ag_nuts_run";
        let (s, chain) = (self.sampler, job.chain);
        if job.result.is_some() {
            return;
        }
        if job.live.is_none() {
            if s.cancelled.load(Ordering::Acquire) {
                job.result = Some(Ok((
                    ChainDraws {
                        dim: s.dim,
                        inv_metric: vec![1.0; s.dim],
                        ..ChainDraws::default()
                    },
                    ChainDraws::default(),
                )));
                return;
            }
            match ChainContext::new(F, s.dim) {
                Ok(context) => {
                    job.live = Some(Live {
                        context,
                        buf: vec![0.0f32; s.dim],
                        state: Chain::new(s.dim, &self.settings, self.seed, chain),
                    })
                }
                Err(f) => {
                    self.failed.store(true, Ordering::Relaxed);
                    let message = format!("{F}: chain {chain}: {}", f.message);
                    job.result = Some(Err(fail(f.status, message)));
                    return;
                }
            }
        }
        let Some(Live {
            context: cc,
            buf,
            state,
        }) = &mut job.live
        else {
            return;
        };
        let total = self.settings.warmup + self.settings.draws;
        let grad = |q: &[f64], g: &mut [f64]| cc.log_density(s, q, g, buf);
        let mut keep_going = |it: u32| {
            if let Some(p) = self.progress {
                // SAFETY: the caller's function with its own user pointer,
                // as the header documents.
                unsafe { p(self.progress_user.0, chain, it, total) };
            }
            !s.cancelled.load(Ordering::Acquire) && !self.failed.load(Ordering::Relaxed)
        };
        state.advance(grad, transitions, &mut keep_going);
        if !state.finished() {
            return;
        }
        // The chain's context is freed here, with the rest of `live`.
        let (draws, error) = job
            .live
            .take()
            .map(|l| l.state.finish())
            .unwrap_or_default();
        job.result = Some(match error {
            None => report_draws(F, s, chain, &draws)
                .inspect_err(|_| self.failed.store(true, Ordering::Relaxed))
                .map(|reported| (draws, reported)),
            Some(e) => {
                self.failed.store(true, Ordering::Relaxed);
                Err(chain_failure(chain, e))
            }
        });
    }

    /// Every chain on the library's threads: one task per thread (at most
    /// one per chain), each taking turns of the chains in rotation, so
    /// that with more chains than threads all advance together. Each
    /// chain's draws are its own transitions, whichever thread runs them.
    fn in_parallel(
        &self,
        chains: u32,
    ) -> Vec<std::result::Result<(ChainDraws, ChainDraws), Failure>> {
        let jobs: Vec<Mutex<Job>> = (0..chains).map(|k| Mutex::new(self.job(k))).collect();
        let tasks = crate::pool::thread_info().threads.clamp(1, chains as usize);
        // A chain per thread needs no turns.
        let transitions = if tasks == chains as usize {
            u32::MAX
        } else {
            TURN
        };
        let next = AtomicUsize::new(0);
        crate::pool::Pool::global().run(tasks, &|_| {
            // Take the next chain nobody runs, a turn of it, and again; stop
            // when every chain left is running (its runner takes it on).
            'turns: loop {
                for _ in 0..jobs.len() {
                    let k = next.fetch_add(1, Ordering::Relaxed) % jobs.len();
                    let Ok(mut job) = jobs[k].try_lock() else {
                        continue;
                    };
                    if job.result.is_none() {
                        self.turn(&mut job, transitions);
                        continue 'turns;
                    }
                }
                break;
            }
        });
        jobs.into_iter()
            .map(|job| {
                let job = job.into_inner().unwrap_or_else(|e| e.into_inner());
                job.result.unwrap_or_else(|| {
                    Err(fail(
                        AG_STATUS_PANIC,
                        format!("ag_nuts_run: chain {} did not finish", job.chain),
                    ))
                })
            })
            .collect()
    }
}

/// A chain's error as the run reports it.
fn chain_failure(chain: u32, e: ChainError<Failure>) -> Failure {
    const F: &str = "ag_nuts_run";
    match e {
        ChainError::Density { iteration, error } => fail(
            error.status,
            format!(
                "{F}: chain {chain}, iteration {iteration}: {}",
                error.message
            ),
        ),
        ChainError::NoInitialPoint => fail(
            AG_STATUS_NON_FINITE,
            format!(
                "{F}: chain {chain}: no finite log density at 100 initial points in (-2, 2)^dim"
            ),
        ),
        ChainError::StepSize { iteration } => fail(
            AG_STATUS_NON_FINITE,
            format!(
                "{F}: chain {chain}, iteration {iteration}: the step size heuristic diverged (improper posterior?)"
            ),
        ),
    }
}

fn settings_of(c: &ag_nuts_config) -> std::result::Result<Settings, Failure> {
    const F: &str = "ag_nuts_run";
    let bad = |what: String| {
        Err(fail(
            AG_STATUS_INVALID_ARGUMENT,
            format!("{F}: config->{what}"),
        ))
    };
    if !(1..=1024).contains(&c.chains) {
        return bad(format!("chains is {}, not in 1..1024", c.chains));
    }
    if c.draws == 0 {
        return bad("draws is 0".into());
    }
    if c.warmup.checked_add(c.draws).is_none() {
        return bad("warmup + draws passes 2^32 - 1".into());
    }
    if !(1..=20).contains(&c.max_depth) {
        return bad(format!("max_depth is {}, not in 1..20", c.max_depth));
    }
    if !(c.target_accept > 0.0 && c.target_accept < 1.0) {
        return bad(format!(
            "target_accept is {}, not in (0, 1)",
            c.target_accept
        ));
    }
    let mut s = Settings {
        warmup: c.warmup,
        draws: c.draws,
        max_depth: c.max_depth,
        ..Settings::default()
    };
    s.dual_averaging.target_accept = c.target_accept;
    Ok(s)
}

/// Runs NUTS with Stan's warm-up on the sampler's model: config->chains
/// chains (each on its own context, seeded from (seed, chain)), and writes
/// the draws to `*out` (free them with ag_draws_free). The draws are the
/// same bits in parallel or one chain after another, and at any
/// ag_set_num_threads. After ag_sampler_cancel the draws made so far come
/// back with AG_STATUS_OK and ag_draws_info's `cancelled` set. A failing
/// chain stops the run: nothing is written to `*out`, and the message
/// (ag_sampler_last_error) names the chain and iteration (0: the search
/// for an initial point).
/// Errors: NULL_ARGUMENT (s, config, out), INVALID_HANDLE (s is not a live
/// sampler), BUSY (a run on s is under way), INVALID_ARGUMENT (struct_size
/// smaller than sizeof(ag_nuts_config), chains not in 1..1024, draws 0,
/// max_depth not in 1..20, target_accept not in (0, 1)), NOT_SCALAR (the
/// density's result is not one element), NON_FINITE (no finite initial
/// point, or the step size heuristic diverged), OUT_OF_MEMORY (no context
/// for a chain), PANIC, or the status an ag call of the density or the
/// density itself returned.
#[unsafe(no_mangle)]
pub extern "C" fn ag_nuts_run(
    s: *mut ag_sampler,
    config: *const ag_nuts_config,
    out: *mut *mut ag_draws,
) -> ag_status {
    const F: &str = "ag_nuts_run";
    entry(F, || {
        let sampler = lookup(F, &SAMPLERS, "sampler", s.cast_const())?;
        need(F, "config", config)?;
        need(F, "out", out)?;
        // SAFETY: non-NULL; struct_size is checked before the rest is read.
        let size = unsafe { config.cast::<usize>().read_unaligned() };
        check_size(F, "ag_nuts_config", size, size_of::<ag_nuts_config>())?;
        // SAFETY: non-NULL and, by struct_size, a whole ag_nuts_config.
        let c = unsafe { config.read_unaligned() };
        let settings = settings_of(&c)?;
        let running = Running::start(F, &sampler)?;
        let run = Run {
            sampler: &sampler,
            settings,
            seed: c.seed,
            progress: c.progress,
            progress_user: UserPtr(c.progress_user),
            failed: AtomicBool::new(false),
        };
        let results: Vec<_> = if c.parallel {
            run.in_parallel(c.chains)
        } else {
            (0..c.chains).map(|k| run.chain(k)).collect()
        };
        drop(running);
        let (chains, reported) = results
            .into_iter()
            .collect::<std::result::Result<(Vec<_>, Vec<_>), _>>()?;
        let draws = Arc::new(ag_draws {
            cancelled: sampler.cancelled.load(Ordering::Acquire),
            chains,
            dim: sampler.dim,
            names: sampler.names.clone(),
            advi: None,
            reported,
            reporter: sampler.reporter.clone(),
        });
        let addr = Arc::as_ptr(&draws) as usize;
        locked(&DRAWS).insert(addr, draws);
        Ok(write_out(F, "out", out, addr as *mut ag_draws)?)
    })
}

/// Writes the counts of `d` to `*out`.
/// Errors: NULL_ARGUMENT (d, out), INVALID_HANDLE (d is not live draws).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_info(d: *const ag_draws, out: *mut ag_draws_info_t) -> ag_status {
    const F: &str = "ag_draws_info";
    entry(F, || {
        let d = lookup(F, &DRAWS, "draws", d)?;
        let info = ag_draws_info_t {
            chains: d.chains.len(),
            draws: common_draws(&d),
            dim: d.dim,
            cancelled: d.cancelled,
        };
        Ok(write_out(F, "out", out, info)?)
    })
}

fn common_draws(d: &ag_draws) -> usize {
    d.chains
        .iter()
        .map(ChainDraws::completed)
        .min()
        .unwrap_or(0)
}

/// Writes chain `chain`'s draws and statistics to `*out` (pointers into
/// `d`, valid until ag_draws_free).
/// Errors: NULL_ARGUMENT (d, out), INVALID_HANDLE (d is not live draws),
/// INDEX_OUT_OF_RANGE (chain >= the number of chains).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_chain(
    d: *const ag_draws,
    chain: usize,
    out: *mut ag_chain_draws,
) -> ag_status {
    const F: &str = "ag_draws_chain";
    entry(F, || {
        let d = lookup(F, &DRAWS, "draws", d)?;
        let c = d.chains.get(chain).ok_or_else(|| {
            fail(
                AG_STATUS_INDEX_OUT_OF_RANGE,
                format!("{F}: chain {chain} of {} chains", d.chains.len()),
            )
        })?;
        let v = ag_chain_draws {
            draws: c.completed(),
            positions: c.positions.as_ptr(),
            lp: c.lp.as_ptr(),
            accept_stat: c.accept_stat.as_ptr(),
            tree_depth: c.tree_depth.as_ptr(),
            n_leapfrog: c.n_leapfrog.as_ptr(),
            divergent: c.divergent.as_ptr(),
            step_size: c.step_size,
            inv_metric: c.inv_metric.as_ptr(),
            reported: match d.reporter {
                Some(_) => d.reported[chain].positions.as_ptr(),
                None => std::ptr::null(),
            },
        };
        Ok(write_out(F, "out", out, v)?)
    })
}

/// Writes the summary of each coordinate of `chains` over their first
/// `draws` draws to `rows[0..n]`.
fn write_summary(
    func: &'static str,
    chains: &[ChainDraws],
    names: Option<&Arc<Vec<CString>>>,
    draws: usize,
    rows: *mut ag_summary_row,
    n: usize,
) -> std::result::Result<(), Failure> {
    if draws < 4 {
        return Err(fail(
            AG_STATUS_INVALID_ARGUMENT,
            format!("{func}: {draws} draws per chain; a summary needs at least 4"),
        ));
    }
    let out = slice_out(func, "rows", rows, n)?;
    for (j, row) in out.iter_mut().enumerate() {
        let SummaryRow {
            mean,
            sd,
            mcse_mean,
            q5,
            q50,
            q95,
            ess_bulk,
            ess_tail,
            rhat,
        } = summarise(chains, j, draws);
        let name = names.map_or(std::ptr::null(), |v| v[j].as_ptr());
        *row = ag_summary_row {
            name,
            mean,
            sd,
            mcse_mean,
            q5,
            q50,
            q95,
            ess_bulk,
            ess_tail,
            rhat,
        };
    }
    Ok(())
}

/// Writes the summary of each coordinate, over the draws every chain
/// completed (ag_draws_info's `draws`), to `rows[0..n]`; n must be the
/// model's dim.
/// Errors: NULL_ARGUMENT (d, rows), INVALID_HANDLE (d is not live draws),
/// INVALID_ARGUMENT (n is not dim, or fewer than 4 draws per chain).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_summary(
    d: *const ag_draws,
    rows: *mut ag_summary_row,
    n: usize,
) -> ag_status {
    const F: &str = "ag_draws_summary";
    entry(F, || {
        let d = lookup(F, &DRAWS, "draws", d)?;
        need(F, "rows", rows)?;
        if n != d.dim {
            return Err(fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{F}: n is {n}, the model's dim is {}", d.dim),
            ));
        }
        write_summary(F, &d.chains, d.names.as_ref(), common_draws(&d), rows, n)
    })
}

/// Writes the summary of each reported quantity (ag_model_spec's report),
/// over the draws every chain completed, to `rows[0..n]`, named by
/// reported_names; n must be the model's n_reported.
/// Errors: NULL_ARGUMENT (d, rows), INVALID_HANDLE (d is not live draws),
/// INVALID_ARGUMENT (the model reports nothing, n is not n_reported, or
/// fewer than 4 draws per chain).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_summary_reported(
    d: *const ag_draws,
    rows: *mut ag_summary_row,
    n: usize,
) -> ag_status {
    const F: &str = "ag_draws_summary_reported";
    entry(F, || {
        let d = lookup(F, &DRAWS, "draws", d)?;
        need(F, "rows", rows)?;
        let Some(r) = &d.reporter else {
            return Err(fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{F}: the model reports nothing (its n_reported is 0)"),
            ));
        };
        if n != r.n {
            return Err(fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{F}: n is {n}, the model's n_reported is {}", r.n),
            ));
        }
        write_summary(F, &d.reported, r.names.as_ref(), common_draws(&d), rows, n)
    })
}

/// Frees the draws `d`; the pointers ag_draws_chain gave die with them.
/// NULL does nothing.
/// Errors: INVALID_HANDLE (not live draws).
#[unsafe(no_mangle)]
pub extern "C" fn ag_draws_free(d: *mut ag_draws) -> ag_status {
    const F: &str = "ag_draws_free";
    if d.is_null() {
        return AG_STATUS_OK;
    }
    entry(F, || {
        locked(&DRAWS)
            .remove(&(d as usize))
            .map(drop)
            .ok_or_else(|| {
                fail(
                    AG_STATUS_INVALID_HANDLE,
                    format!("{F}: `d` is not live draws (freed, or never made)"),
                )
            })
    })
}

//! The NUTS sampler from C: a model is a log density the caller builds with
//! ag ops from a position tensor; ag_nuts_run runs chains, each on its own
//! context (on the library's threads when parallel), through src/infer.
//!
//! An `ag_sampler *` and an `ag_draws *` are the addresses of objects kept
//! alive by a table of live ones: every call but ag_sampler_cancel looks
//! the address up there first, so a freed or forged pointer is refused
//! (INVALID_HANDLE). ag_sampler_cancel cannot take a lock (it must be
//! async-signal-safe), so it trusts its pointer: one atomic store.

use crate::ffi::prelude::*;
use crate::infer::{ChainDraws, Settings};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A model's log density: build log p(position) (up to a constant) with ag
/// ops on `ctx` from `position`, a parameter of shape [dim] holding the
/// unconstrained position, and write the scalar result (shape [1]) to
/// `*log_density`; return AG_STATUS_OK, or an error status to stop the
/// run. Each chain has its own context; with several chains in parallel
/// the function is called from several threads at once with the same
/// `user`, which must then be read-only or synchronised by the caller.
/// Do not call ag_reset, ag_backward or capture functions on `ctx` here.
pub type ag_log_density_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut ag_context,
        position: ag_tensor,
        user: *mut c_void,
        log_density: *mut ag_tensor,
    ) -> ag_status,
>;

/// Called after each iteration of each chain (warm-up included):
/// `iteration` counts from 1 to `total` = warmup + draws. Called from the
/// thread running the chain, concurrently when chains run in parallel.
pub type ag_progress_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, chain: u32, iteration: u32, total: u32)>;

/// A model's reported quantities at one draw: write `n_reported` plain
/// doubles (constrained parameters, generated quantities) to `reported`,
/// computed from the unconstrained `position` ([dim]); return
/// AG_STATUS_OK, or an error status to stop the run. Called once per kept
/// draw, from the thread running the chain (concurrently for parallel
/// chains, with the model's `user`).
pub type ag_report_fn = Option<
    unsafe extern "C" fn(position: *const f64, user: *mut c_void, reported: *mut f64) -> ag_status,
>;

/// A model for ag_sampler_new (copied; nothing is kept but `user`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_model_spec {
    /// sizeof(ag_model_spec).
    pub struct_size: usize,
    /// The number of unconstrained parameters (at least 1).
    pub dim: usize,
    /// The log density (not NULL).
    pub log_density: ag_log_density_fn,
    /// Passed to log_density as it is.
    pub user: *mut c_void,
    /// true: the first evaluation of each chain is captured and replayed
    /// after (much faster), which is right only when the density builds
    /// the same ops whatever the position: a density that branches on the
    /// position's values keeps the branch of the first evaluation for the
    /// whole run. false: the density is built anew at each evaluation.
    pub fixed_graph: bool,
    /// `dim` NUL-terminated names of the coordinates (copied), or NULL.
    pub names: *const *const c_char,
    /// The number of reported quantities per draw (0: none; at most 2^20).
    /// This field and the two after it were added later: a caller whose
    /// struct_size ends before them reports nothing.
    pub n_reported: usize,
    /// Computes the reported quantities of a draw (not NULL when
    /// n_reported > 0; NULL when it is 0).
    pub report: ag_report_fn,
    /// `n_reported` NUL-terminated names of the reported quantities
    /// (copied), or NULL.
    pub reported_names: *const *const c_char,
}

/// The fields of ag_model_spec before the reported quantities: what a
/// caller whose struct_size ends there passes.
#[repr(C)]
#[derive(Clone, Copy)]
struct ModelSpecBase {
    struct_size: usize,
    dim: usize,
    log_density: ag_log_density_fn,
    user: *mut c_void,
    fixed_graph: bool,
    names: *const *const c_char,
}

/// The settings of a run (ag_nuts_config_default fills Stan's defaults).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_nuts_config {
    /// sizeof(ag_nuts_config).
    pub struct_size: usize,
    /// Chains (1 to 1024; default 4).
    pub chains: u32,
    /// Warm-up iterations per chain (default 1000).
    pub warmup: u32,
    /// Draws kept per chain after warm-up (at least 1; default 1000).
    pub draws: u32,
    /// The largest tree depth, 2^max_depth leapfrog steps (1 to 20; default 10).
    pub max_depth: u32,
    /// The acceptance statistic warm-up aims at, in (0, 1) (default 0.8).
    pub target_accept: f64,
    /// Chain c's random stream comes from (seed, c) only (default 1234).
    pub seed: u64,
    /// true: the chains run on the library's threads (as many at once as
    /// ag_set_num_threads allows; with more chains than threads they take
    /// turns of a few iterations, so a chain may move between threads
    /// between iterations, never within an evaluation); false: one after
    /// another on the calling thread. The draws are the same bits either
    /// way (default true).
    pub parallel: bool,
    /// Called after each iteration of each chain, or NULL.
    pub progress: ag_progress_fn,
    /// Passed to progress as it is.
    pub progress_user: *mut c_void,
}

/// What ag_draws_info reports of a run's draws.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ag_draws_info_t {
    pub chains: usize,
    /// Draws every chain completed (config.draws unless cancelled).
    pub draws: usize,
    pub dim: usize,
    /// ag_sampler_cancel was called before the run ended (its chains
    /// stopped early, unless they were finishing anyway).
    pub cancelled: bool,
}

/// One chain's draws (ag_draws_chain): pointers into the ag_draws, valid
/// until ag_draws_free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_chain_draws {
    /// Draws this chain completed (may exceed ag_draws_info's after a cancel).
    pub draws: usize,
    /// Unconstrained positions, [draws * dim], draw after draw.
    pub positions: *const f64,
    /// log p of each draw (up to the density's constant).
    pub lp: *const f64,
    /// Mean Metropolis acceptance over each draw's trajectory.
    pub accept_stat: *const f64,
    pub tree_depth: *const u32,
    pub n_leapfrog: *const u32,
    pub divergent: *const bool,
    /// The step size after warm-up.
    pub step_size: f64,
    /// The diagonal inverse metric after warm-up, [dim].
    pub inv_metric: *const f64,
    /// The reported quantities of each draw, [draws * n_reported], draw
    /// after draw (NULL when the model reports nothing).
    pub reported: *const f64,
}

/// One coordinate's summary over all chains (ag_draws_summary).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ag_summary_row {
    /// The coordinate's name (valid until ag_draws_free), or NULL.
    pub name: *const c_char,
    pub mean: f64,
    pub sd: f64,
    /// Monte Carlo standard error of the mean.
    pub mcse_mean: f64,
    pub q5: f64,
    pub q50: f64,
    pub q95: f64,
    /// Bulk and tail effective sample sizes (Vehtari et al. 2021).
    pub ess_bulk: f64,
    pub ess_tail: f64,
    /// Rank-normalised split R-hat.
    pub rhat: f64,
}

/// A model ready to sample (opaque): ag_sampler_new, ag_sampler_free.
pub struct ag_sampler {
    pub(super) cancelled: AtomicBool,
    pub(super) running: AtomicBool,
    pub(super) dim: usize,
    pub(super) log_density:
        unsafe extern "C" fn(*mut ag_context, ag_tensor, *mut c_void, *mut ag_tensor) -> ag_status,
    pub(super) user: UserPtr,
    pub(super) fixed_graph: bool,
    pub(super) names: Option<Arc<Vec<CString>>>,
    pub(super) reporter: Option<Reporter>,
}

/// A model's reported quantities: how many, the function, their names.
#[derive(Clone, Debug)]
pub(super) struct Reporter {
    pub(super) n: usize,
    pub(super) report: unsafe extern "C" fn(*const f64, *mut c_void, *mut f64) -> ag_status,
    pub(super) names: Option<Arc<Vec<CString>>>,
}

/// The draws of a run (opaque): ag_nuts_run or ag_advi_run, ag_draws_free.
pub struct ag_draws {
    pub(super) chains: Vec<ChainDraws>,
    pub(super) dim: usize,
    pub(super) cancelled: bool,
    pub(super) names: Option<Arc<Vec<CString>>>,
    /// The fitted approximation, for ag_advi_run's draws.
    pub(super) advi: Option<AdviOut>,
    /// Per chain, the reported quantities as positions of dim n_reported
    /// (no chains when the model reports nothing).
    pub(super) reported: Vec<ChainDraws>,
    pub(super) reporter: Option<Reporter>,
}

/// What ag_draws_advi points into.
pub(super) struct AdviOut {
    pub(super) algorithm: u32,
    pub(super) mean: Vec<f64>,
    /// Mean-field: the sds [dim]; full-rank: L row-major [dim * dim].
    pub(super) scale: Vec<f64>,
    pub(super) elbo: f64,
    pub(super) iterations: u32,
    pub(super) converged: bool,
}

/// A caller's `user` pointer, handed to the callbacks on the threads running the chains.
#[derive(Clone, Copy, Debug)]
pub(super) struct UserPtr(pub(super) *mut c_void);
// SAFETY: the library never dereferences it; the header tells the caller
// that the callbacks receive it on several threads at once.
unsafe impl Send for UserPtr {}
// SAFETY: as above.
unsafe impl Sync for UserPtr {}

pub(super) static SAMPLERS: Mutex<BTreeMap<usize, Arc<ag_sampler>>> = Mutex::new(BTreeMap::new());
pub(super) static DRAWS: Mutex<BTreeMap<usize, Arc<ag_draws>>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The message of the last failed sampler call on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(super) fn locked<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A failed call: its status and its message.
pub(super) struct Failure {
    pub(super) status: ag_status,
    pub(super) message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure {
            status: e.status(),
            message: e.to_string(),
        }
    }
}

pub(super) fn fail(status: ag_status, message: String) -> Failure {
    Failure { status, message }
}

/// Runs `f` with panics caught; records a failure's message.
pub(super) fn entry(
    func: &'static str,
    f: impl FnOnce() -> std::result::Result<(), Failure>,
) -> ag_status {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(fail(
            AG_STATUS_PANIC,
            format!("{func}: internal panic caught ({what})"),
        ))
    });
    match r {
        Ok(()) => AG_STATUS_OK,
        Err(f) => {
            let message = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|m| *m.borrow_mut() = message);
            f.status
        }
    }
}

pub(super) fn lookup<T>(
    func: &str,
    table: &'static Mutex<BTreeMap<usize, Arc<T>>>,
    what: &str,
    p: *const T,
) -> std::result::Result<Arc<T>, Failure> {
    if p.is_null() {
        return Err(fail(
            AG_STATUS_NULL_ARGUMENT,
            format!("{func}: argument `{what}` is NULL"),
        ));
    }
    locked(table).get(&(p as usize)).cloned().ok_or_else(|| {
        fail(
            AG_STATUS_INVALID_HANDLE,
            format!("{func}: `{what}` is not a live {what} (freed, or never made)"),
        )
    })
}

/// Checks a caller struct's size field: at least the size this library knows.
pub(super) fn check_size(
    func: &str,
    what: &str,
    size: usize,
    known: usize,
) -> std::result::Result<(), Failure> {
    if size < known {
        return Err(fail(
            AG_STATUS_INVALID_ARGUMENT,
            format!(
                "{func}: struct_size is {size}, {what} is {known} bytes: set struct_size = sizeof({what})"
            ),
        ));
    }
    Ok(())
}

/// Fills `*out` with the defaults: 4 chains in parallel, 1000 warm-up
/// iterations and 1000 draws each, max_depth 10, target_accept 0.8, seed
/// 1234, no progress function; struct_size is set.
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_nuts_config_default(out: *mut ag_nuts_config) -> ag_status {
    const F: &str = "ag_nuts_config_default";
    entry(F, || {
        let s = Settings::default();
        let c = ag_nuts_config {
            struct_size: size_of::<ag_nuts_config>(),
            chains: 4,
            warmup: s.warmup,
            draws: s.draws,
            max_depth: s.max_depth,
            target_accept: s.dual_averaging.target_accept,
            seed: 1234,
            parallel: true,
            progress: None,
            progress_user: std::ptr::null_mut(),
        };
        Ok(write_out(F, "out", out, c)?)
    })
}

/// `n` NUL-terminated UTF-8 names at `p` (copied), or None for NULL.
fn names_of(
    func: &'static str,
    what: &'static str,
    p: *const *const c_char,
    n: usize,
) -> std::result::Result<Option<Arc<Vec<CString>>>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    let ptrs = slice_in(func, what, p, n)?;
    let mut names = Vec::with_capacity(n);
    for (i, &p) in ptrs.iter().enumerate() {
        if p.is_null() {
            return Err(fail(
                AG_STATUS_NULL_ARGUMENT,
                format!("{func}: {what}[{i}] is NULL"),
            ));
        }
        // SAFETY: non-NULL, NUL-terminated (the header's contract).
        let s = unsafe { CStr::from_ptr(p) };
        if s.to_str().is_err() {
            return Err(fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{func}: {what}[{i}] is not UTF-8"),
            ));
        }
        names.push(s.to_owned());
    }
    Ok(Some(Arc::new(names)))
}

/// Makes a sampler of the model `*model` (copied) and writes it to `*out`.
/// Free it with ag_sampler_free.
/// A struct_size that ends before n_reported (an older ag_model_spec) is
/// taken as reporting nothing.
/// Errors: NULL_ARGUMENT (model, out, model->log_density, a name when
/// names or reported_names is not NULL, report when n_reported > 0),
/// INVALID_ARGUMENT (struct_size smaller than ag_model_spec up to its
/// names, dim 0 or above 2^20, n_reported above 2^20, report set with
/// n_reported 0, a name not UTF-8).
/// Messages: ag_sampler_last_error.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sampler_new(
    model: *const ag_model_spec,
    out: *mut *mut ag_sampler,
) -> ag_status {
    const F: &str = "ag_sampler_new";
    entry(F, || {
        need(F, "model", model)?;
        need(F, "out", out)?;
        // SAFETY: non-NULL; struct_size is read first and checked before
        // the rest of the struct (the caller's struct is at least that big).
        let size = unsafe { model.cast::<usize>().read_unaligned() };
        check_size(F, "ag_model_spec", size, size_of::<ModelSpecBase>())?;
        // SAFETY: non-NULL and, by struct_size, at least the base fields.
        let m = unsafe { model.cast::<ModelSpecBase>().read_unaligned() };
        let (n_reported, report, reported_names) = if size >= size_of::<ag_model_spec>() {
            // SAFETY: non-NULL and, by struct_size, a whole ag_model_spec.
            let full = unsafe { model.read_unaligned() };
            (full.n_reported, full.report, full.reported_names)
        } else {
            (0, None, std::ptr::null())
        };
        let log_density = m.log_density.ok_or_else(|| {
            fail(
                AG_STATUS_NULL_ARGUMENT,
                format!("{F}: model->log_density is NULL"),
            )
        })?;
        if m.dim == 0 || m.dim > 1 << 20 {
            return Err(fail(
                AG_STATUS_INVALID_ARGUMENT,
                format!("{F}: model->dim is {}, not in 1..2^20", m.dim),
            ));
        }
        let names = names_of(F, "model->names", m.names, m.dim)?;
        let reporter = match (n_reported, report) {
            (0, None) => None,
            (0, Some(_)) => {
                return Err(fail(
                    AG_STATUS_INVALID_ARGUMENT,
                    format!("{F}: model->report is set and model->n_reported is 0"),
                ));
            }
            (_, None) => {
                return Err(fail(
                    AG_STATUS_NULL_ARGUMENT,
                    format!("{F}: model->report is NULL and model->n_reported is {n_reported}"),
                ));
            }
            (n, Some(_)) if n > 1 << 20 => {
                return Err(fail(
                    AG_STATUS_INVALID_ARGUMENT,
                    format!("{F}: model->n_reported is {n}, above 2^20"),
                ));
            }
            (n, Some(report)) => Some(Reporter {
                n,
                report,
                names: names_of(F, "model->reported_names", reported_names, n)?,
            }),
        };
        let s = Arc::new(ag_sampler {
            cancelled: AtomicBool::new(false),
            running: AtomicBool::new(false),
            dim: m.dim,
            log_density,
            user: UserPtr(m.user),
            fixed_graph: m.fixed_graph,
            names,
            reporter,
        });
        let addr = Arc::as_ptr(&s) as usize;
        locked(&SAMPLERS).insert(addr, s);
        Ok(write_out(F, "out", out, addr as *mut ag_sampler)?)
    })
}

/// Frees the sampler `s`. NULL does nothing.
/// Errors: INVALID_HANDLE (not a live sampler), BUSY (ag_nuts_run or
/// ag_advi_run is running on it).
#[unsafe(no_mangle)]
pub extern "C" fn ag_sampler_free(s: *mut ag_sampler) -> ag_status {
    const F: &str = "ag_sampler_free";
    if s.is_null() {
        return AG_STATUS_OK;
    }
    entry(F, || {
        let mut table = locked(&SAMPLERS);
        let found = table.get(&(s as usize)).ok_or_else(|| {
            fail(
                AG_STATUS_INVALID_HANDLE,
                format!("{F}: `s` is not a live sampler (freed, or never made)"),
            )
        })?;
        if found.running.load(Ordering::Acquire) {
            return Err(fail(
                AG_STATUS_BUSY,
                format!("{F}: a run is under way on this sampler"),
            ));
        }
        table.remove(&(s as usize));
        Ok(())
    })
}

/// Asks ag_nuts_run on `s` to stop after the current iteration of each
/// chain (ag_advi_run: after the current gradient step); it then returns AG_STATUS_OK with the draws made so far and
/// ag_draws_info's `cancelled` set. The request stays: a later run on `s`
/// stops at once (make a new sampler to sample again). Async-signal-safe
/// (one atomic store) and callable from any thread; `s` must be a live
/// sampler (it is not looked up: freed or forged pointers are undefined
/// behaviour here). NULL does nothing.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sampler_cancel(s: *mut ag_sampler) -> ag_status {
    if !s.is_null() {
        // SAFETY: the caller passes a live sampler (documented above); the
        // table keeps it alive until ag_sampler_free.
        unsafe { (*s).cancelled.store(true, Ordering::Release) };
    }
    AG_STATUS_OK
}

/// The message of the last failed sampler or draws call on this thread
/// (empty if none failed). Valid until the next such call on this thread;
/// never free it.
#[unsafe(no_mangle)]
pub extern "C" fn ag_sampler_last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

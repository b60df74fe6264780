//! The NUTS sampler: the algorithm over a closure (src/infer) and the C API
//! (ag_sampler_new, ag_nuts_run, ag_draws_*) on models written against it:
//! known posteriors within Monte Carlo error, bit-identical draws whatever
//! the threads, cancel, progress, the fixed-graph trade-off, bad inputs.

use arenagrad::ffi::*;
#[macro_use]
#[path = "common/sampler.rs"]
mod sampler_common;
use arenagrad::infer::{ChainError, Settings, run_chain};
use sampler_common::{
    NO_TENSOR, corr_normal, failed_run, last_error, not_scalar, nuts_config, spec,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// A standard normal in `dim` dimensions, with sd `scale[i]` per axis.
fn normal(scale: &[f64]) -> impl FnMut(&[f64], &mut [f64]) -> Result<f64, ()> + '_ {
    move |q, g| {
        let mut lp = 0.0;
        for ((q, g), s) in q.iter().zip(g.iter_mut()).zip(scale) {
            lp -= 0.5 * q * q / (s * s);
            *g = -q / (s * s);
        }
        Ok(lp)
    }
}

#[test]
fn a_scaled_normal_is_sampled_and_the_metric_learns_its_scales() {
    let scale = [1.0, 10.0, 0.1];
    let settings = Settings {
        warmup: 500,
        draws: 1000,
        ..Settings::default()
    };
    let (d, err) = run_chain(3, &settings, 11, 0, normal(&scale), |_| true);
    assert!(err.is_none());
    assert_eq!(d.completed(), 1000);
    for (j, s) in scale.iter().enumerate() {
        let x: Vec<f64> = d.positions.chunks_exact(3).map(|q| q[j]).collect();
        let mean = x.iter().sum::<f64>() / 1000.0;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 999.0;
        assert!(
            mean.abs() < 5.0 * s / 1000f64.sqrt() * 2.0,
            "mean {j}: {mean}"
        );
        assert!(
            (var.sqrt() / s - 1.0).abs() < 0.15,
            "sd {j}: {}",
            var.sqrt()
        );
        let m = d.inv_metric[j] / (s * s);
        assert!(m > 0.5 && m < 2.0, "inv metric {j}: {}", d.inv_metric[j]);
    }
    let accept = d.accept_stat.iter().sum::<f64>() / 1000.0;
    assert!(accept > 0.6 && accept < 0.97, "mean accept_stat {accept}");
    assert!(d.step_size > 0.0 && !d.divergent.iter().any(|&v| v));
}

#[test]
fn a_density_error_names_its_iteration_and_keeps_the_draws() {
    let settings = Settings {
        warmup: 20,
        draws: 50,
        ..Settings::default()
    };
    let mut calls = 0;
    let grad = |q: &[f64], g: &mut [f64]| {
        calls += 1;
        if calls > 40 {
            return Err("boom");
        }
        g[0] = -q[0];
        Ok(-0.5 * q[0] * q[0])
    };
    let (d, err) = run_chain(1, &settings, 1, 0, grad, |_| true);
    match err {
        Some(ChainError::Density { iteration, error }) => {
            assert_eq!(error, "boom");
            assert_eq!(iteration, d.iterations + 1);
        }
        other => panic!("{other:?}"),
    }
}

/// log p = -|q|^2 / 2: a standard normal in any dimension.
unsafe extern "C" fn std_normal(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let (mut sq, mut s) = (NO_TENSOR, NO_TENSOR);
    try_ag!(ag_mul(ctx, q, q, &mut sq));
    try_ag!(ag_sum(ctx, sq, &mut s));
    ag_scale(ctx, s, -0.5, out)
}

/// corr_normal::<RHO_PERCENT>'s correlation.
const RHO_PERCENT: u32 = 90;
const RHO: f32 = RHO_PERCENT as f32 / 100.0;

/// The standard normal, but with sd 2 where q[0] > 0: a density whose
/// graph depends on the position (continuous, with a continuous gradient).
unsafe extern "C" fn branching(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let mut v = [0.0f32; 1];
    try_ag!(ag_tensor_read(ctx, q, v.as_mut_ptr(), 1));
    let (mut sq, mut s) = (NO_TENSOR, NO_TENSOR);
    try_ag!(ag_mul(ctx, q, q, &mut sq));
    try_ag!(ag_sum(ctx, sq, &mut s));
    ag_scale(ctx, s, if v[0] > 0.0 { -0.125 } else { -0.5 }, out)
}

/// Eight schools, non-centred: q = (theta_trans[8], mu, log tau).
const SCHOOLS_Y: [f32; 8] = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0];
const SCHOOLS_SIGMA: [f32; 8] = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0];
unsafe extern "C" fn eight_schools(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let [mut tt, mut mu, mut log_tau, mut tau, mut y, mut sigma] = [NO_TENSOR; 6];
    let [mut a, mut b, mut c, mut d, mut e] = [NO_TENSOR; 5];
    let shape = [8usize];
    try_ag!(ag_slice(ctx, q, 0, 0, 8, &mut tt));
    try_ag!(ag_slice(ctx, q, 0, 8, 1, &mut mu));
    try_ag!(ag_slice(ctx, q, 0, 9, 1, &mut log_tau));
    try_ag!(ag_exp(ctx, log_tau, &mut tau));
    try_ag!(ag_tensor_new(
        ctx,
        shape.as_ptr(),
        1,
        SCHOOLS_Y.as_ptr(),
        &mut y
    ));
    try_ag!(ag_tensor_new(
        ctx,
        shape.as_ptr(),
        1,
        SCHOOLS_SIGMA.as_ptr(),
        &mut sigma
    ));
    // -|tt|^2 / 2
    try_ag!(ag_mul(ctx, tt, tt, &mut a));
    try_ag!(ag_sum(ctx, a, &mut b));
    try_ag!(ag_scale(ctx, b, -0.5, &mut a));
    // -sum(((y - mu - tau tt) / sigma)^2) / 2
    try_ag!(ag_mul(ctx, tau, tt, &mut c));
    try_ag!(ag_add(ctx, c, mu, &mut d));
    try_ag!(ag_sub(ctx, y, d, &mut c));
    try_ag!(ag_div(ctx, c, sigma, &mut d));
    try_ag!(ag_mul(ctx, d, d, &mut c));
    try_ag!(ag_sum(ctx, c, &mut d));
    try_ag!(ag_scale(ctx, d, -0.5, &mut c));
    try_ag!(ag_add(ctx, a, c, &mut b));
    // - mu^2 / 50 - log(1 + tau^2 / 25) + log tau
    try_ag!(ag_mul(ctx, mu, mu, &mut c));
    try_ag!(ag_scale(ctx, c, -1.0 / 50.0, &mut d));
    try_ag!(ag_add(ctx, b, d, &mut a));
    try_ag!(ag_mul(ctx, tau, tau, &mut c));
    try_ag!(ag_scale(ctx, c, 1.0 / 25.0, &mut d));
    try_ag!(ag_log1p(ctx, d, &mut e));
    try_ag!(ag_sub(ctx, a, e, &mut b));
    ag_add(ctx, b, log_tau, out)
}

/// A sampler's draws, copied out: per chain (positions, lp, step size).
struct Sampled {
    info: ag_draws_info_t,
    chains: Vec<(Vec<f64>, Vec<f64>, f64)>,
    summary: Vec<ag_summary_row>,
}

fn sample(model: &ag_model_spec, cfg: &ag_nuts_config) -> Sampled {
    let mut s = null_mut();
    assert_eq!(
        ag_sampler_new(model, &mut s),
        AG_STATUS_OK,
        "{}",
        last_error()
    );
    let mut d = null_mut();
    assert_eq!(
        ag_nuts_run(s, cfg, &mut d),
        AG_STATUS_OK,
        "{}",
        last_error()
    );
    let out = read_draws(d);
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
    out
}

fn read_draws(d: *mut ag_draws) -> Sampled {
    let mut info = ag_draws_info_t::default();
    assert_eq!(ag_draws_info(d, &mut info), AG_STATUS_OK);
    let chains = (0..info.chains)
        .map(|k| {
            let mut c = std::mem::MaybeUninit::uninit();
            assert_eq!(ag_draws_chain(d, k, c.as_mut_ptr()), AG_STATUS_OK);
            // SAFETY: written by ag_draws_chain; its arrays hold c.draws
            // entries (positions draws * dim) until ag_draws_free.
            unsafe {
                let c: ag_chain_draws = c.assume_init();
                let pos = std::slice::from_raw_parts(c.positions, c.draws * info.dim).to_vec();
                let lp = std::slice::from_raw_parts(c.lp, c.draws).to_vec();
                (pos, lp, c.step_size)
            }
        })
        .collect();
    let mut summary = Vec::new();
    if info.draws >= 4 {
        summary = vec![std::mem::MaybeUninit::<ag_summary_row>::zeroed(); info.dim]
            .into_iter()
            // SAFETY: an all-zero ag_summary_row is valid (NULL name, zeros).
            .map(|r| unsafe { r.assume_init() })
            .collect();
        assert_eq!(
            ag_draws_summary(d, summary.as_mut_ptr(), info.dim),
            AG_STATUS_OK,
            "{}",
            last_error()
        );
    }
    Sampled {
        info,
        chains,
        summary,
    }
}

/// Asserts a summary row's mean is `mean` within 4 MCSE and its sd is `sd`
/// within 10%, with R-hat below 1.02.
fn assert_row(r: &ag_summary_row, mean: f64, sd: f64, what: &str) {
    assert!(
        (r.mean - mean).abs() < 4.0 * r.mcse_mean,
        "{what}: mean {} (mcse {}), want {mean}",
        r.mean,
        r.mcse_mean
    );
    assert!(
        (r.sd / sd - 1.0).abs() < 0.1,
        "{what}: sd {}, want {sd}",
        r.sd
    );
    assert!(r.rhat < 1.02, "{what}: rhat {}", r.rhat);
    assert!(
        r.ess_bulk > 200.0 && r.ess_tail > 100.0,
        "{what}: ess {} {}",
        r.ess_bulk,
        r.ess_tail
    );
}

#[test]
fn an_iid_normal_in_5_dimensions_is_recovered() {
    for fixed in [true, false] {
        let out = sample(
            &spec(5, Some(std_normal), fixed),
            &nuts_config(4, 300, 500, 42),
        );
        assert_eq!(
            (
                out.info.chains,
                out.info.draws,
                out.info.dim,
                out.info.cancelled
            ),
            (4, 500, 5, false)
        );
        for (j, r) in out.summary.iter().enumerate() {
            assert_row(r, 0.0, 1.0, &format!("fixed {fixed}, q[{j}]"));
            assert!(
                (r.q5 + 1.645).abs() < 0.2 && (r.q95 - 1.645).abs() < 0.2 && r.q50.abs() < 0.15
            );
        }
    }
}

#[test]
fn a_correlated_2d_normal_is_recovered() {
    let out = sample(
        &spec(2, Some(corr_normal::<RHO_PERCENT>), true),
        &nuts_config(4, 400, 600, 7),
    );
    assert_row(&out.summary[0], 0.0, 1.0, "q[0]");
    assert_row(&out.summary[1], 0.0, 1.0, "q[1]");
    let (mut sxx, mut syy, mut sxy) = (0.0, 0.0, 0.0);
    for (pos, _, _) in &out.chains {
        for q in pos.chunks_exact(2) {
            sxx += q[0] * q[0];
            syy += q[1] * q[1];
            sxy += q[0] * q[1];
        }
    }
    let corr = sxy / (sxx * syy).sqrt();
    assert!((corr - f64::from(RHO)).abs() < 0.05, "correlation {corr}");
}

#[test]
fn eight_schools_matches_the_reference_posterior() {
    let out = sample(
        &spec(10, Some(eight_schools), true),
        &nuts_config(4, 500, 500, 1234),
    );
    // posteriordb's reference for eight_schools_noncentered: mu 4.4 (sd 3.3)
    let mu = &out.summary[8];
    assert!(
        (mu.mean - 4.4).abs() < 4.0 * mu.mcse_mean + 0.2,
        "mu {} mcse {}",
        mu.mean,
        mu.mcse_mean
    );
    assert!((mu.sd - 3.3).abs() < 0.5, "mu sd {}", mu.sd);
    assert!(out.summary.iter().all(|r| r.rhat < 1.05));
}

#[test]
fn draws_are_the_same_bits_at_any_thread_count_and_in_parallel_or_not() {
    static THREADS: Mutex<()> = Mutex::new(());
    let _one_at_a_time = THREADS.lock().unwrap_or_else(|p| p.into_inner());
    let model = spec(10, Some(eight_schools), true);
    let mut cfg = nuts_config(3, 100, 100, 99);
    let mut runs = Vec::new();
    // 3 chains on 1 or 2 threads take turns (moving between threads on
    // 2); on 3, one each.
    for (threads, parallel, fixed) in [
        (1, true, true),
        (2, true, true),
        (3, true, true),
        (3, false, true),
        (1, false, false),
        (2, true, false),
    ] {
        assert_eq!(ag_set_num_threads(threads), AG_STATUS_OK);
        cfg.parallel = parallel;
        let m = ag_model_spec {
            fixed_graph: fixed,
            ..model
        };
        runs.push(sample(&m, &cfg).chains);
    }
    assert_eq!(ag_set_num_threads(0), AG_STATUS_OK);
    for r in &runs[1..] {
        for ((a, la, ea), (b, lb, eb)) in runs[0].iter().zip(r) {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
            assert!(la.iter().zip(lb).all(|(x, y)| x.to_bits() == y.to_bits()));
            assert_eq!(ea.to_bits(), eb.to_bits());
        }
    }
    // distinct chains
    assert_ne!(runs[0][0].0, runs[0][1].0);
}

/// What the progress function sees.
struct Progress {
    calls: AtomicUsize,
    last: [AtomicU32; 4],
    sampler: AtomicUsize,
    cancel_after: usize,
}

unsafe extern "C" fn on_progress(user: *mut c_void, chain: u32, iteration: u32, total: u32) {
    // SAFETY: the tests pass a &Progress as user.
    let p = unsafe { &*(user as *const Progress) };
    p.calls.fetch_add(1, Ordering::SeqCst);
    assert!(iteration >= 1 && iteration <= total);
    p.last[chain as usize].fetch_max(iteration, Ordering::SeqCst);
}

#[test]
fn progress_is_called_once_per_iteration_of_each_chain() {
    let p = Progress {
        calls: AtomicUsize::new(0),
        last: Default::default(),
        sampler: AtomicUsize::new(0),
        cancel_after: 0,
    };
    let mut cfg = nuts_config(4, 30, 20, 5);
    cfg.progress = Some(on_progress);
    cfg.progress_user = &p as *const Progress as *mut c_void;
    let out = sample(&spec(3, Some(std_normal), true), &cfg);
    assert_eq!(p.calls.load(Ordering::SeqCst), 4 * 50);
    assert!(p.last.iter().all(|l| l.load(Ordering::SeqCst) == 50));
    assert_eq!(out.info.draws, 20);
}

#[test]
fn cancel_from_another_thread_returns_the_draws_so_far() {
    let p = Progress {
        calls: AtomicUsize::new(0),
        last: Default::default(),
        sampler: AtomicUsize::new(0),
        cancel_after: 4 * 150,
    };
    let mut s = null_mut();
    assert_eq!(
        ag_sampler_new(&spec(4, Some(std_normal), false), &mut s),
        AG_STATUS_OK
    );
    let mut cfg = nuts_config(4, 100, 100_000, 3);
    cfg.progress = Some(on_progress);
    cfg.progress_user = &p as *const Progress as *mut c_void;
    p.sampler.store(s as usize, Ordering::SeqCst);
    let mut d = null_mut();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while p.calls.load(Ordering::SeqCst) < p.cancel_after {
                std::thread::yield_now();
            }
            assert_eq!(
                ag_sampler_cancel(p.sampler.load(Ordering::SeqCst) as *mut ag_sampler),
                AG_STATUS_OK
            );
        });
        assert_eq!(
            ag_nuts_run(s, &cfg, &mut d),
            AG_STATUS_OK,
            "{}",
            last_error()
        );
    });
    let out = read_draws(d);
    assert!(out.info.cancelled);
    assert!(out.info.draws < 100_000, "{} draws", out.info.draws);
    for (pos, lp, _) in &out.chains {
        assert_eq!(pos.len(), lp.len() * 4);
        assert!(lp.iter().all(|v| v.is_finite()));
    }
    // sticky: a later run stops at once, with no draws
    let mut d2 = null_mut();
    assert_eq!(ag_nuts_run(s, &cfg, &mut d2), AG_STATUS_OK);
    let again = read_draws(d2);
    assert!(again.info.cancelled && again.info.draws == 0);
    assert_eq!(ag_draws_free(d2), AG_STATUS_OK);
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
}

/// P(q[0] > 0) of the branching density is 2/3 (mass sqrt(2 pi) of the sd-2
/// half against sqrt(2 pi) / 2 of the sd-1 half).
#[test]
fn a_branching_density_needs_the_dynamic_graph() {
    let positive = |fixed: bool| {
        let out = sample(
            &spec(1, Some(branching), fixed),
            &nuts_config(4, 300, 1000, 21),
        );
        let (mut pos, mut n) = (0.0, 0.0);
        for (q, _, _) in &out.chains {
            pos += q.iter().filter(|&&v| v > 0.0).count() as f64;
            n += q.len() as f64;
        }
        pos / n
    };
    let dynamic = positive(false);
    assert!(
        (dynamic - 2.0 / 3.0).abs() < 0.05,
        "dynamic: P(q > 0) = {dynamic}"
    );
    // fixed: every chain keeps the formula of its first evaluation, a
    // symmetric normal, so half the draws are positive
    let fixed = positive(true);
    assert!((fixed - 0.5).abs() < 0.06, "fixed: P(q > 0) = {fixed}");
}

unsafe extern "C" fn failing(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let mut v = [0.0f32; 1];
    try_ag!(ag_tensor_read(ctx, q, v.as_mut_ptr(), 1));
    if v[0] > 1.5 {
        return AG_STATUS_INVALID_ARGUMENT;
    }
    unsafe { std_normal(ctx, q, null_mut(), out) }
}

#[test]
fn bad_inputs_are_refused_with_a_message_naming_the_function() {
    let mut s = null_mut();
    assert_eq!(ag_sampler_new(null(), &mut s), AG_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("ag_sampler_new"));
    assert_eq!(
        ag_sampler_new(&spec(2, Some(std_normal), true), null_mut()),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(
        ag_sampler_new(&spec(2, None, true), &mut s),
        AG_STATUS_NULL_ARGUMENT
    );
    assert!(last_error().contains("log_density"), "{}", last_error());
    assert_eq!(
        ag_sampler_new(&spec(0, Some(std_normal), true), &mut s),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(last_error().contains("dim is 0"), "{}", last_error());
    let small = ag_model_spec {
        struct_size: 8,
        ..spec(2, Some(std_normal), true)
    };
    assert_eq!(ag_sampler_new(&small, &mut s), AG_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("struct_size"));
    assert!(s.is_null(), "nothing written on failure");
    assert_eq!(ag_nuts_config_default(null_mut()), AG_STATUS_NULL_ARGUMENT);

    assert_eq!(
        ag_sampler_new(&spec(2, Some(std_normal), true), &mut s),
        AG_STATUS_OK
    );
    let mut d = null_mut();
    let good = nuts_config(2, 10, 10, 1);
    assert_eq!(
        ag_nuts_run(null_mut(), &good, &mut d),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(ag_nuts_run(s, null(), &mut d), AG_STATUS_NULL_ARGUMENT);
    assert_eq!(ag_nuts_run(s, &good, null_mut()), AG_STATUS_NULL_ARGUMENT);
    for (bad, what) in [
        (ag_nuts_config { chains: 0, ..good }, "chains"),
        (ag_nuts_config { draws: 0, ..good }, "draws"),
        (
            ag_nuts_config {
                max_depth: 0,
                ..good
            },
            "max_depth",
        ),
        (
            ag_nuts_config {
                target_accept: 1.0,
                ..good
            },
            "target_accept",
        ),
        (
            ag_nuts_config {
                target_accept: f64::NAN,
                ..good
            },
            "target_accept",
        ),
        (
            ag_nuts_config {
                struct_size: 4,
                ..good
            },
            "struct_size",
        ),
    ] {
        assert_eq!(
            ag_nuts_run(s, &bad, &mut d),
            AG_STATUS_INVALID_ARGUMENT,
            "{what}"
        );
        let e = last_error();
        assert!(e.contains("ag_nuts_run") && e.contains(what), "{e}");
    }
    assert!(d.is_null());
    assert_eq!(ag_nuts_run(s, &good, &mut d), AG_STATUS_OK);
    let mut rows = [ag_summary_row {
        name: null(),
        mean: 0.0,
        sd: 0.0,
        mcse_mean: 0.0,
        q5: 0.0,
        q50: 0.0,
        q95: 0.0,
        ess_bulk: 0.0,
        ess_tail: 0.0,
        rhat: 0.0,
    }; 3];
    assert_eq!(
        ag_draws_summary(d, rows.as_mut_ptr(), 3),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(last_error().contains("dim is 2"));
    assert_eq!(ag_draws_summary(d, null_mut(), 2), AG_STATUS_NULL_ARGUMENT);
    let mut c = std::mem::MaybeUninit::uninit();
    assert_eq!(
        ag_draws_chain(d, 2, c.as_mut_ptr()),
        AG_STATUS_INDEX_OUT_OF_RANGE
    );
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    let mut info = ag_draws_info_t::default();
    assert_eq!(
        ag_draws_info(d, &mut info),
        AG_STATUS_INVALID_HANDLE,
        "freed draws"
    );
    assert_eq!(ag_draws_free(d), AG_STATUS_INVALID_HANDLE);
    assert_eq!(ag_draws_free(null_mut()), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
    assert_eq!(
        ag_nuts_run(s, &good, &mut d),
        AG_STATUS_INVALID_HANDLE,
        "freed sampler"
    );
    assert_eq!(ag_sampler_free(s), AG_STATUS_INVALID_HANDLE);
    assert_eq!(ag_sampler_free(null_mut()), AG_STATUS_OK);
    assert_eq!(ag_sampler_cancel(null_mut()), AG_STATUS_OK);
}

#[test]
fn a_failing_or_non_scalar_density_stops_the_run_naming_chain_and_iteration() {
    for parallel in [true, false] {
        let cfg = ag_nuts_config {
            parallel,
            ..nuts_config(3, 200, 200, 8)
        };
        let model = spec(1, Some(failing), false);
        let e = failed_run(&model, AG_STATUS_INVALID_ARGUMENT, |s, d| {
            ag_nuts_run(s, &cfg, d)
        });
        assert!(
            e.starts_with("ag_nuts_run: chain ") && e.contains(", iteration "),
            "{e}"
        );
    }
    let cfg = nuts_config(2, 10, 10, 1);
    let model = spec(3, Some(not_scalar), true);
    let e = failed_run(&model, AG_STATUS_NOT_SCALAR, |s, d| ag_nuts_run(s, &cfg, d));
    assert!(e.contains("iteration 0") && e.contains("3 elements"), "{e}");
}

#[test]
fn names_reach_the_summary() {
    let names = [c"alpha".as_ptr(), c"beta".as_ptr()];
    let m = ag_model_spec {
        names: names.as_ptr(),
        ..spec(2, Some(std_normal), true)
    };
    let out = sample(&m, &nuts_config(2, 50, 50, 2));
    // SAFETY: the names live until ag_draws_free; sample copied the rows
    // before freeing, so compare the pointers' text inside sample instead.
    let _ = out;
    let mut s = null_mut();
    assert_eq!(ag_sampler_new(&m, &mut s), AG_STATUS_OK);
    let mut d = null_mut();
    assert_eq!(
        ag_nuts_run(s, &nuts_config(2, 50, 50, 2), &mut d),
        AG_STATUS_OK
    );
    let out = read_draws(d);
    // SAFETY: valid until ag_draws_free, below.
    let n1 = unsafe { CStr::from_ptr(out.summary[1].name) };
    assert_eq!(n1, c"beta");
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
}

/// Eight schools, 4 chains of 1000 + 1000, in parallel and one after
/// another: prints the wall times (run with --ignored --nocapture).
#[test]
#[ignore]
fn eight_schools_wall_time() {
    for parallel in [true, false] {
        for fixed in [true, false] {
            let cfg = ag_nuts_config {
                parallel,
                ..nuts_config(4, 1000, 1000, 1234)
            };
            let t = std::time::Instant::now();
            let out = sample(&spec(10, Some(eight_schools), fixed), &cfg);
            println!(
                "eight schools 4 x (1000 + 1000), parallel {parallel}, fixed_graph {fixed}: {:.3} s (mu {:.2} sd {:.2}, log tau {:.2})",
                t.elapsed().as_secs_f64(),
                out.summary[8].mean,
                out.summary[8].sd,
                out.summary[9].mean
            );
        }
    }
}

/// Forwards to `System`, counting the calls a thread makes while its
/// COUNT_HERE is set (the libtest harness's own threads are not counted).
struct ThreadCountingAlloc;

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
}
static CHAIN_ALLOCS: AtomicUsize = AtomicUsize::new(0);

fn bump() {
    if COUNT_HERE.try_with(Cell::get).unwrap_or(false) {
        CHAIN_ALLOCS.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the bookkeeping
// touches a const-initialised thread-local and an atomic, which never allocate.
unsafe impl GlobalAlloc for ThreadCountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's (valid) layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        bump();
        // SAFETY: ptr/layout come from this allocator (i.e. from System).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: as alloc.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: as dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: ThreadCountingAlloc = ThreadCountingAlloc;

/// Counts on the chain's thread from the end of warm-up to the last draw.
unsafe extern "C" fn count_after_warmup(user: *mut c_void, _: u32, iteration: u32, total: u32) {
    let warmup = user as usize as u32;
    COUNT_HERE.with(|c| c.set(iteration >= warmup && iteration < total));
}

#[test]
fn sampling_after_warm_up_allocates_nothing() {
    // the counter counts this thread's calls
    COUNT_HERE.with(|c| c.set(true));
    let v = std::hint::black_box(vec![1u8; 64]);
    drop(v);
    COUNT_HERE.with(|c| c.set(false));
    assert_eq!(CHAIN_ALLOCS.swap(0, Ordering::SeqCst), 2);
    for fixed in [true, false] {
        let mut cfg = nuts_config(2, 200, 500, 17);
        cfg.progress = Some(count_after_warmup);
        cfg.progress_user = 200usize as *mut c_void;
        let out = sample(&spec(10, Some(eight_schools), fixed), &cfg);
        assert_eq!(out.info.draws, 500);
        let n = CHAIN_ALLOCS.load(Ordering::SeqCst);
        assert_eq!(
            n, 0,
            "fixed_graph {fixed}: {n} allocator calls in 2 x 499 iterations after warm-up"
        );
    }
}

/// Reports exp(q): a standard normal's position reported as a lognormal.
unsafe extern "C" fn report_exp(position: *const f64, _: *mut c_void, out: *mut f64) -> ag_status {
    // SAFETY: the library passes 2 positions and room for 2 values.
    unsafe {
        for j in 0..2 {
            *out.add(j) = (*position.add(j)).exp();
        }
    }
    AG_STATUS_OK
}

/// Fails where q[0] > 1.5 (a standard normal gets there within a few draws).
unsafe extern "C" fn report_failing(
    position: *const f64,
    user: *mut c_void,
    out: *mut f64,
) -> ag_status {
    // SAFETY: as report_exp.
    if unsafe { *position } > 1.5 {
        return AG_STATUS_INVALID_ARGUMENT;
    }
    unsafe { report_exp(position, user, out) }
}

fn reporting(report: ag_report_fn, names: *const *const std::ffi::c_char) -> ag_model_spec {
    ag_model_spec {
        n_reported: 2,
        report,
        reported_names: names,
        ..spec(2, Some(std_normal), true)
    }
}

fn summary_reported(d: *mut ag_draws, n: usize) -> (ag_status, Vec<ag_summary_row>) {
    let mut rows = vec![std::mem::MaybeUninit::<ag_summary_row>::zeroed(); n];
    let st = ag_draws_summary_reported(d, rows.as_mut_ptr().cast(), n);
    // SAFETY: zeroed rows are valid (NULL names, zeros); written on success.
    let rows = rows
        .into_iter()
        .map(|r| unsafe { r.assume_init() })
        .collect();
    (st, rows)
}

/// exp of a standard normal is lognormal: mean e^(1/2), sd sqrt((e - 1) e).
#[test]
fn reported_quantities_of_a_lognormal_match_its_known_moments() {
    let names = [c"exp_a".as_ptr(), c"exp_b".as_ptr()];
    let mut s = null_mut();
    assert_eq!(
        ag_sampler_new(&reporting(Some(report_exp), names.as_ptr()), &mut s),
        AG_STATUS_OK
    );
    let mut d = null_mut();
    assert_eq!(
        ag_nuts_run(s, &nuts_config(4, 300, 1000, 5), &mut d),
        AG_STATUS_OK
    );
    let (st, rows) = summary_reported(d, 2);
    assert_eq!(st, AG_STATUS_OK, "{}", last_error());
    let e = std::f64::consts::E;
    for (j, r) in rows.iter().enumerate() {
        assert!(
            (r.mean - e.sqrt()).abs() < 4.0 * r.mcse_mean,
            "exp(q[{j}]): mean {} mcse {}",
            r.mean,
            r.mcse_mean
        );
        // the sd of a heavy tail converges slowly: 25%
        assert!(
            (r.sd / ((e - 1.0) * e).sqrt() - 1.0).abs() < 0.25,
            "sd {}",
            r.sd
        );
        // SAFETY: valid until ag_draws_free, below.
        let name = unsafe { CStr::from_ptr(r.name) };
        assert_eq!(name, [c"exp_a", c"exp_b"][j]);
    }
    for k in 0..4 {
        let mut c = std::mem::MaybeUninit::<ag_chain_draws>::uninit();
        assert_eq!(ag_draws_chain(d, k, c.as_mut_ptr()), AG_STATUS_OK);
        // SAFETY: written by ag_draws_chain; positions and reported hold
        // draws * 2 values until ag_draws_free.
        let (pos, rep) = unsafe {
            let c = c.assume_init();
            (
                std::slice::from_raw_parts(c.positions, c.draws * 2),
                std::slice::from_raw_parts(c.reported, c.draws * 2),
            )
        };
        assert!(
            pos.iter()
                .zip(rep)
                .all(|(q, r)| r.to_bits() == q.exp().to_bits())
        );
    }
    let (st, _) = summary_reported(d, 3);
    assert_eq!(st, AG_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("n_reported is 2"), "{}", last_error());
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);

    // ADVI's draws carry them too
    let mut a = std::mem::MaybeUninit::<ag_advi_config>::uninit();
    assert_eq!(ag_advi_config_default(a.as_mut_ptr()), AG_STATUS_OK);
    // SAFETY: written by ag_advi_config_default.
    let a = unsafe { a.assume_init() };
    assert_eq!(ag_advi_run(s, &a, &mut d), AG_STATUS_OK, "{}", last_error());
    let (st, rows) = summary_reported(d, 2);
    assert_eq!(st, AG_STATUS_OK, "{}", last_error());
    assert!(
        rows.iter().all(|r| (r.mean - e.sqrt()).abs() < 0.5),
        "{rows:?}"
    );
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
}

#[test]
fn a_failing_report_stops_the_run_and_bad_report_specs_are_refused() {
    let cfg = nuts_config(2, 50, 200, 3);
    let model = reporting(Some(report_failing), null());
    let e = failed_run(&model, AG_STATUS_INVALID_ARGUMENT, |s, d| {
        ag_nuts_run(s, &cfg, d)
    });
    assert!(
        e.starts_with("ag_nuts_run: chain ") && e.contains(", draw "),
        "{e}"
    );

    let mut s = null_mut();
    let no_fn = reporting(None, null());
    assert_eq!(ag_sampler_new(&no_fn, &mut s), AG_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("report is NULL"), "{}", last_error());
    let no_count = ag_model_spec {
        n_reported: 0,
        ..reporting(Some(report_exp), null())
    };
    assert_eq!(
        ag_sampler_new(&no_count, &mut s),
        AG_STATUS_INVALID_ARGUMENT
    );
    let bad_name = [c"ok".as_ptr(), null()];
    let m = reporting(Some(report_exp), bad_name.as_ptr());
    assert_eq!(ag_sampler_new(&m, &mut s), AG_STATUS_NULL_ARGUMENT);
    assert!(
        last_error().contains("reported_names[1]"),
        "{}",
        last_error()
    );
    assert!(s.is_null());

    // an older, shorter spec (up to names) reports nothing
    let old = ag_model_spec {
        struct_size: std::mem::offset_of!(ag_model_spec, n_reported),
        ..reporting(Some(report_exp), null())
    };
    assert_eq!(
        ag_sampler_new(&old, &mut s),
        AG_STATUS_OK,
        "{}",
        last_error()
    );
    let mut d = null_mut();
    assert_eq!(
        ag_nuts_run(s, &nuts_config(1, 20, 20, 3), &mut d),
        AG_STATUS_OK
    );
    let mut c = std::mem::MaybeUninit::<ag_chain_draws>::uninit();
    assert_eq!(ag_draws_chain(d, 0, c.as_mut_ptr()), AG_STATUS_OK);
    // SAFETY: written by ag_draws_chain.
    assert!(unsafe { c.assume_init() }.reported.is_null());
    let (st, _) = summary_reported(d, 2);
    assert_eq!(st, AG_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("reports nothing"), "{}", last_error());
    assert_eq!(
        ag_draws_summary_reported(d, null_mut(), 2),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(ag_draws_free(d), AG_STATUS_OK);
    assert_eq!(ag_sampler_free(s), AG_STATUS_OK);
    let small = ag_model_spec {
        struct_size: std::mem::offset_of!(ag_model_spec, names),
        ..spec(2, Some(std_normal), true)
    };
    assert_eq!(ag_sampler_new(&small, &mut s), AG_STATUS_INVALID_ARGUMENT);
}

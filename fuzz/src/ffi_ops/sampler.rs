//! The NUTS sampler: a standard normal model the harness writes, sampled
//! with chains, warm-up, draws, parallel and fixed_graph from the input
//! (or a bad spec or config); the draws read back, summarised and freed
//! twice; a cancel from the progress function; ADVI on the same model.

use super::{FfiOps, documented, status_name};
use arenagrad::ffi::*;
use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

const NONE: ag_tensor = ag_tensor {
    index: 0,
    context: 0,
    generation: 0,
};

/// log p = -|q|^2 / 2.
unsafe extern "C" fn std_normal(
    ctx: *mut ag_context,
    q: ag_tensor,
    _: *mut c_void,
    out: *mut ag_tensor,
) -> ag_status {
    let (mut sq, mut s) = (NONE, NONE);
    let st = ag_mul(ctx, q, q, &mut sq);
    if st != AG_STATUS_OK {
        return st;
    }
    let st = ag_sum(ctx, sq, &mut s);
    if st != AG_STATUS_OK {
        return st;
    }
    ag_scale(ctx, s, -0.5, out)
}

/// What the progress function of a cancelled run sees.
struct Canceller {
    sampler: AtomicUsize,
    after: u32,
    calls: AtomicU32,
}

unsafe extern "C" fn cancel_after(user: *mut c_void, _chain: u32, iteration: u32, total: u32) {
    // SAFETY: sampler_cancel passes a &Canceller that outlives the run.
    let c = unsafe { &*(user as *const Canceller) };
    assert!(
        (1..=total).contains(&iteration),
        "progress iteration {iteration} of {total}"
    );
    if c.calls.fetch_add(1, Ordering::SeqCst) + 1 >= c.after {
        let s = c.sampler.load(Ordering::SeqCst) as *mut ag_sampler;
        assert_eq!(ag_sampler_cancel(s), AG_STATUS_OK);
    }
}

fn sampler_error() -> String {
    let p = ag_sampler_last_error();
    assert!(!p.is_null(), "ag_sampler_last_error returned NULL");
    // SAFETY: a NUL-terminated string valid until the next sampler call on
    // this thread.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl FfiOps<'_> {
    /// Counts one sampler call, checks its status is `want` (when given)
    /// and documented, and that a failure's message names the function.
    fn sampler_call(&mut self, func: &str, st: ag_status, want: Option<ag_status>) {
        self.calls += 1;
        assert!(documented(st), "{func}: undocumented status {st}");
        if let Some(w) = want {
            assert_eq!(st, w, "{func}: {} ({})", status_name(st), sampler_error());
        }
        if st == AG_STATUS_OK {
            self.ok += 1;
            self.by_id[self.id as usize].1 += 1;
        } else {
            let e = sampler_error();
            assert!(
                e.starts_with(func),
                "{func} -> {}: message {e:?}",
                status_name(st)
            );
        }
    }

    /// A model and config from the input: (spec, config, spec is bad,
    /// config is bad).
    fn sampler_setup(&mut self) -> (ag_model_spec, ag_nuts_config, bool, bool) {
        let k = self.input.u8();
        let mut c = std::mem::MaybeUninit::<ag_nuts_config>::uninit();
        let st = ag_nuts_config_default(c.as_mut_ptr());
        self.sampler_call("ag_nuts_config_default", st, Some(AG_STATUS_OK));
        // SAFETY: written by ag_nuts_config_default.
        let mut c = unsafe { c.assume_init() };
        c.chains = 1 + u32::from(k & 3);
        c.parallel = k & 4 != 0;
        c.warmup = u32::from(self.input.u8() % 40);
        c.draws = 1 + u32::from(self.input.u8() % 40);
        c.max_depth = 1 + u32::from(self.input.u8() % 6);
        c.seed = u64::from(self.input.u8());
        let dim = 1 + usize::from(self.input.u8() % 4);
        let mut spec = ag_model_spec {
            struct_size: size_of::<ag_model_spec>(),
            dim,
            log_density: Some(std_normal),
            user: null_mut(),
            fixed_graph: k & 8 != 0,
            names: null(),
            n_reported: 0,
            report: None,
            reported_names: null(),
        };
        let (mut bad_spec, mut bad_config) = (false, false);
        match k >> 4 {
            0 => (spec.dim, bad_spec) = (0, true),
            1 => (spec.struct_size, bad_spec) = (4, true),
            2 => (c.chains, bad_config) = (0, true),
            3 => (c.target_accept, bad_config) = (f64::NAN, true),
            4 => (c.max_depth, bad_config) = (21, true),
            _ => {}
        }
        (spec, c, bad_spec, bad_config)
    }

    pub(super) fn sampler_run(&mut self) {
        let (spec, cfg, bad_spec, bad_config) = self.sampler_setup();
        let mut s = null_mut();
        let st = ag_sampler_new(&spec, &mut s);
        if bad_spec {
            self.sampler_call("ag_sampler_new", st, Some(AG_STATUS_INVALID_ARGUMENT));
            assert!(s.is_null(), "ag_sampler_new wrote *out on failure");
            return;
        }
        self.sampler_call("ag_sampler_new", st, Some(AG_STATUS_OK));
        let mut d = null_mut();
        let st = ag_nuts_run(s, &cfg, &mut d);
        if bad_config {
            self.sampler_call("ag_nuts_run", st, Some(AG_STATUS_INVALID_ARGUMENT));
            assert!(d.is_null(), "ag_nuts_run wrote *out on failure");
        } else {
            self.sampler_call("ag_nuts_run", st, Some(AG_STATUS_OK));
            self.read_draws(d, spec.dim, cfg.chains as usize, Some(cfg.draws as usize));
            let st = ag_draws_free(d);
            self.sampler_call("ag_draws_free", st, Some(AG_STATUS_OK));
            let st = ag_draws_free(d);
            self.sampler_call("ag_draws_free", st, Some(AG_STATUS_INVALID_HANDLE));
        }
        let st = ag_sampler_free(s);
        self.sampler_call("ag_sampler_free", st, Some(AG_STATUS_OK));
        let st = ag_sampler_free(s);
        self.sampler_call("ag_sampler_free", st, Some(AG_STATUS_INVALID_HANDLE));
        let st = ag_nuts_run(s, &cfg, &mut d);
        self.sampler_call("ag_nuts_run", st, Some(AG_STATUS_INVALID_HANDLE));
    }

    /// Reads live draws back: counts, each chain, the summary.
    fn read_draws(&mut self, d: *mut ag_draws, dim: usize, chains: usize, draws: Option<usize>) {
        let mut info = ag_draws_info_t::default();
        let st = ag_draws_info(d, &mut info);
        self.sampler_call("ag_draws_info", st, Some(AG_STATUS_OK));
        assert_eq!((info.chains, info.dim), (chains, dim));
        if let Some(n) = draws {
            assert_eq!((info.draws, info.cancelled), (n, false));
        }
        for k in 0..=chains {
            let mut c = std::mem::MaybeUninit::<ag_chain_draws>::uninit();
            let st = ag_draws_chain(d, k, c.as_mut_ptr());
            if k == chains {
                self.sampler_call("ag_draws_chain", st, Some(AG_STATUS_INDEX_OUT_OF_RANGE));
                continue;
            }
            self.sampler_call("ag_draws_chain", st, Some(AG_STATUS_OK));
            // SAFETY: written by ag_draws_chain; its arrays hold c.draws
            // entries (positions draws * dim) until ag_draws_free.
            let (c, pos) = unsafe {
                let c = c.assume_init();
                (c, std::slice::from_raw_parts(c.positions, c.draws * dim))
            };
            assert!(c.draws >= info.draws, "chain {k}: {} draws", c.draws);
            assert!(
                pos.iter().all(|v| v.is_finite()),
                "chain {k}: a non-finite position"
            );
        }
        let mut rows = vec![std::mem::MaybeUninit::<ag_summary_row>::uninit(); dim];
        let st = ag_draws_summary(d, rows.as_mut_ptr().cast(), dim);
        let want = if info.draws >= 4 {
            AG_STATUS_OK
        } else {
            AG_STATUS_INVALID_ARGUMENT
        };
        self.sampler_call("ag_draws_summary", st, Some(want));
    }

    pub(super) fn sampler_cancel(&mut self) {
        let (spec, mut cfg, _, _) = self.sampler_setup();
        let spec = ag_model_spec {
            dim: spec.dim.max(1),
            struct_size: size_of::<ag_model_spec>(),
            ..spec
        };
        cfg = ag_nuts_config {
            chains: cfg.chains.max(1),
            target_accept: 0.8,
            max_depth: cfg.max_depth.min(20),
            ..cfg
        };
        let canceller = Canceller {
            sampler: AtomicUsize::new(0),
            after: 1 + u32::from(self.input.u8()),
            calls: AtomicU32::new(0),
        };
        cfg.progress = Some(cancel_after);
        cfg.progress_user = &canceller as *const Canceller as *mut c_void;
        let mut s = null_mut();
        let st = ag_sampler_new(&spec, &mut s);
        self.sampler_call("ag_sampler_new", st, Some(AG_STATUS_OK));
        canceller.sampler.store(s as usize, Ordering::SeqCst);
        let mut d = null_mut();
        let st = ag_nuts_run(s, &cfg, &mut d);
        self.sampler_call("ag_nuts_run", st, Some(AG_STATUS_OK));
        self.read_draws(d, spec.dim, cfg.chains as usize, None);
        let mut info = ag_draws_info_t::default();
        assert_eq!(ag_draws_info(d, &mut info), AG_STATUS_OK);
        let total = (cfg.warmup + cfg.draws) * cfg.chains;
        assert_eq!(info.cancelled, canceller.after <= total);
        let st = ag_draws_free(d);
        self.sampler_call("ag_draws_free", st, Some(AG_STATUS_OK));
        let st = ag_sampler_free(s);
        self.sampler_call("ag_sampler_free", st, Some(AG_STATUS_OK));
    }

    /// ADVI on the normal model: a config from the input (mean-field or
    /// full-rank, eta given or adapted, a bad field, or a cancel from the
    /// progress function), the draws and the fit read back, and
    /// ag_draws_advi refusing NUTS draws.
    pub(super) fn advi_run(&mut self) {
        let k = self.input.u8();
        let mut c = std::mem::MaybeUninit::<ag_advi_config>::uninit();
        let st = ag_advi_config_default(c.as_mut_ptr());
        self.sampler_call("ag_advi_config_default", st, Some(AG_STATUS_OK));
        // SAFETY: written by ag_advi_config_default.
        let mut c = unsafe { c.assume_init() };
        c.algorithm = u32::from(k & 1);
        c.eta = [0.0, 0.1, 1.0, 0.0][usize::from(k >> 1) & 3];
        c.iterations = 1 + u32::from(self.input.u8() % 200);
        c.adapt_iterations = 1 + u32::from(self.input.u8() % 20);
        c.eval_elbo = 1 + u32::from(self.input.u8() % 50);
        c.elbo_samples = 1 + u32::from(self.input.u8() % 20);
        c.grad_samples = 1 + u32::from(self.input.u8() % 3);
        c.output_draws = 1 + u32::from(self.input.u8() % 40);
        c.seed = u64::from(self.input.u8());
        // 0 (the last iterate), the default 0.25, 1 (every iterate).
        c.average_fraction = [0.0, 0.25, 1.0, 0.25][usize::from(k >> 6) & 3];
        let dim = 1 + usize::from(self.input.u8() % 4);
        let spec = ag_model_spec {
            struct_size: size_of::<ag_model_spec>(),
            dim,
            log_density: Some(std_normal),
            user: null_mut(),
            fixed_graph: k & 8 != 0,
            names: null(),
            n_reported: 0,
            report: None,
            reported_names: null(),
        };
        let canceller = Canceller {
            sampler: AtomicUsize::new(0),
            after: 1 + u32::from(self.input.u8()),
            calls: AtomicU32::new(0),
        };
        let mut bad = true;
        match k >> 4 {
            0 => c.algorithm = 7,
            1 => c.iterations = 0,
            2 => c.eta = -1.0,
            3 => c.struct_size = 4,
            4 => c.tol_rel_obj = f64::NAN,
            6 => c.average_fraction = 1.5,
            7 => c.average_fraction = f64::NAN,
            5 => {
                c.progress = Some(cancel_after);
                c.progress_user = &canceller as *const Canceller as *mut c_void;
                bad = false;
            }
            _ => bad = false,
        }
        let mut s = null_mut();
        let st = ag_sampler_new(&spec, &mut s);
        self.sampler_call("ag_sampler_new", st, Some(AG_STATUS_OK));
        canceller.sampler.store(s as usize, Ordering::SeqCst);
        let mut d = null_mut();
        let st = ag_advi_run(s, &c, &mut d);
        if bad {
            self.sampler_call("ag_advi_run", st, Some(AG_STATUS_INVALID_ARGUMENT));
            assert!(d.is_null(), "ag_advi_run wrote *out on failure");
        } else {
            // a short run may diverge or find every eta worse: NON_FINITE
            let want = (st != AG_STATUS_NON_FINITE).then_some(AG_STATUS_OK);
            self.sampler_call("ag_advi_run", st, want);
        }
        if st == AG_STATUS_OK {
            self.read_draws(d, dim, 1, None);
            let mut fit = std::mem::MaybeUninit::<ag_advi_fit>::uninit();
            let st = ag_draws_advi(d, fit.as_mut_ptr());
            self.sampler_call("ag_draws_advi", st, Some(AG_STATUS_OK));
            // SAFETY: written by ag_draws_advi; mean holds dim entries and
            // scale dim (mean-field) or dim * dim (full-rank) until
            // ag_draws_free.
            let (fit, scale) = unsafe {
                let fit = fit.assume_init();
                let n = if fit.algorithm == AG_ADVI_FULLRANK {
                    dim * dim
                } else {
                    dim
                };
                (fit, std::slice::from_raw_parts(fit.scale, n).to_vec())
            };
            assert_eq!((fit.dim, fit.algorithm), (dim, c.algorithm));
            assert!(fit.iterations_run <= c.iterations);
            if fit.algorithm == AG_ADVI_MEANFIELD {
                assert!(scale.iter().all(|&v| v >= 0.0), "negative sd {scale:?}");
            }
            let st = ag_draws_free(d);
            self.sampler_call("ag_draws_free", st, Some(AG_STATUS_OK));
        }
        // NUTS draws carry no fit
        let mut nc = std::mem::MaybeUninit::<ag_nuts_config>::uninit();
        assert_eq!(ag_nuts_config_default(nc.as_mut_ptr()), AG_STATUS_OK);
        // SAFETY: written by ag_nuts_config_default.
        let mut nc = unsafe { nc.assume_init() };
        (nc.chains, nc.warmup, nc.draws) = (1, 0, 1);
        let mut d = null_mut();
        let st = ag_nuts_run(s, &nc, &mut d);
        if st == AG_STATUS_OK {
            let mut fit = std::mem::MaybeUninit::<ag_advi_fit>::uninit();
            let st = ag_draws_advi(d, fit.as_mut_ptr());
            self.sampler_call("ag_draws_advi", st, Some(AG_STATUS_INVALID_ARGUMENT));
            assert_eq!(ag_draws_free(d), AG_STATUS_OK);
        }
        let st = ag_sampler_free(s);
        self.sampler_call("ag_sampler_free", st, Some(AG_STATUS_OK));
    }

    /// A model that reports exp(q) (failing where q[0] passes a bound the
    /// input picks), run by NUTS or ADVI; the reported values are checked
    /// against the positions and summarised.
    pub(super) fn sampler_reported(&mut self) {
        let k = self.input.u8();
        let bound = BOUNDS[usize::from(k & 3)];
        let spec = ag_model_spec {
            struct_size: size_of::<ag_model_spec>(),
            dim: 2,
            log_density: Some(std_normal),
            user: &bound as *const f64 as *mut c_void,
            fixed_graph: true,
            names: null(),
            n_reported: 2,
            report: Some(report_exp),
            reported_names: null(),
        };
        let mut s = null_mut();
        let st = ag_sampler_new(&spec, &mut s);
        self.sampler_call("ag_sampler_new", st, Some(AG_STATUS_OK));
        let draws = 4 + u32::from(self.input.u8() % 40);
        let mut d = null_mut();
        let (func, st) = if k & 4 == 0 {
            let mut c = std::mem::MaybeUninit::<ag_nuts_config>::uninit();
            assert_eq!(ag_nuts_config_default(c.as_mut_ptr()), AG_STATUS_OK);
            // SAFETY: written by ag_nuts_config_default.
            let mut c = unsafe { c.assume_init() };
            (c.chains, c.warmup, c.draws) = (2, 10, draws);
            ("ag_nuts_run", ag_nuts_run(s, &c, &mut d))
        } else {
            let mut c = std::mem::MaybeUninit::<ag_advi_config>::uninit();
            assert_eq!(ag_advi_config_default(c.as_mut_ptr()), AG_STATUS_OK);
            // SAFETY: written by ag_advi_config_default.
            let mut c = unsafe { c.assume_init() };
            (c.eta, c.iterations, c.output_draws) = (1.0, 100, draws);
            ("ag_advi_run", ag_advi_run(s, &c, &mut d))
        };
        // a finite bound can fail the report: its status comes back
        let want = if bound.is_infinite() {
            AG_STATUS_OK
        } else {
            st
        };
        self.sampler_call(func, st, Some(want));
        if st == AG_STATUS_OK {
            let mut c = std::mem::MaybeUninit::<ag_chain_draws>::uninit();
            assert_eq!(ag_draws_chain(d, 0, c.as_mut_ptr()), AG_STATUS_OK);
            // SAFETY: written by ag_draws_chain; positions and reported
            // hold draws * 2 values until ag_draws_free.
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
            let mut rows = [std::mem::MaybeUninit::<ag_summary_row>::uninit(); 3];
            let st = ag_draws_summary_reported(d, rows.as_mut_ptr().cast(), 2);
            self.sampler_call("ag_draws_summary_reported", st, Some(AG_STATUS_OK));
            let st = ag_draws_summary_reported(d, rows.as_mut_ptr().cast(), 3);
            self.sampler_call(
                "ag_draws_summary_reported",
                st,
                Some(AG_STATUS_INVALID_ARGUMENT),
            );
            assert_eq!(ag_draws_free(d), AG_STATUS_OK);
        } else {
            assert_eq!(st, AG_STATUS_INVALID_ARGUMENT, "{}", sampler_error());
            assert!(sampler_error().contains(", draw "), "{}", sampler_error());
            assert!(d.is_null());
        }
        let st = ag_sampler_free(s);
        self.sampler_call("ag_sampler_free", st, Some(AG_STATUS_OK));
    }
}

/// Where report_exp fails (q[0] above it), by the input's choice.
const BOUNDS: [f64; 4] = [f64::INFINITY, 1.0, 2.5, f64::INFINITY];

/// reported = exp(q) for dim 2; fails (INVALID_ARGUMENT) where q[0] passes
/// the bound `user` points to.
unsafe extern "C" fn report_exp(q: *const f64, user: *mut c_void, out: *mut f64) -> ag_status {
    // SAFETY: the library passes 2 positions and room for 2 values; user
    // is the &f64 bound sampler_reported gives.
    unsafe {
        if *q > *(user as *const f64) {
            return AG_STATUS_INVALID_ARGUMENT;
        }
        for j in 0..2 {
            *out.add(j) = (*q.add(j)).exp();
        }
    }
    AG_STATUS_OK
}

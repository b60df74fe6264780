//! Bench instrumentation (feature `trace`): which GEMMs ran and how long,
//! with the time of the calling thread and of the pool's worker apart.
//! Built only with the `trace` feature (see lib.rs).

use crate::blas::Gemm;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What one traced stretch of work did.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Every product, on either thread (a split product counts once).
    pub gemms: Vec<Gemm>,
    /// Wall time of the products made on the calling thread (a split
    /// product's wall time includes waiting for the worker's half).
    pub blas: Duration,
    /// Time of the products the worker thread made on its own share
    /// (attention heads), outside split products.
    pub worker_blas: Duration,
    /// Time the worker spent running jobs of any kind.
    pub worker_busy: Duration,
    /// Per op kind and direction: wall time of its kernels on the
    /// calling thread, and the part of it spent in products.
    pub ops: Vec<OpTime>,
}

/// The traced time of one op kind in one direction.
#[derive(Clone, Copy, Debug)]
pub struct OpTime {
    pub kind: &'static str,
    pub backward: bool,
    pub calls: usize,
    pub wall: Duration,
    pub blas: Duration,
}

static ON: AtomicBool = AtomicBool::new(false);
/// Off when the run only wants op times (`AG_TRACE_OPS`): keeping every
/// product would take the log's lock on each worker's products.
static GEMMS_ON: AtomicBool = AtomicBool::new(true);
static LOG: Mutex<Option<Trace>> = Mutex::new(None);

fn log() -> std::sync::MutexGuard<'static, Option<Trace>> {
    LOG.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts recording (clears the log).
pub fn start() {
    let mut l = log();
    let t = l.get_or_insert_with(Trace::default);
    t.gemms.clear();
    t.ops.clear();
    (t.blas, t.worker_blas, t.worker_busy) = Default::default();
    GEMMS_ON.store(true, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
}

/// Starts recording op times alone (products not kept, so workers never
/// take the log's lock): `AG_TRACE_OPS` (see `Context::new`).
pub(crate) fn start_ops_only() {
    start();
    GEMMS_ON.store(false, Ordering::SeqCst);
}

/// What has been recorded so far, if recording.
pub(crate) fn snapshot() -> Option<Trace> {
    ON.load(Ordering::SeqCst).then(|| log().clone()).flatten()
}

/// Stops recording; returns what was recorded.
pub fn stop() -> Trace {
    ON.store(false, Ordering::SeqCst);
    log().take().unwrap_or_default()
}

/// The calling thread's product time so far (zero when not tracing):
/// an op's share is the difference around it.
pub(crate) fn blas_so_far() -> Duration {
    if !ON.load(Ordering::Relaxed) {
        return Duration::ZERO;
    }
    log().as_ref().map_or(Duration::ZERO, |t| t.blas)
}

/// Adds one op's kernel time (`blas` of it in products).
pub(crate) fn op(kind: &'static str, backward: bool, wall: Duration, blas: Duration) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    if let Some(t) = log().as_mut() {
        match t
            .ops
            .iter_mut()
            .find(|o| o.kind == kind && o.backward == backward)
        {
            Some(o) => {
                o.calls += 1;
                o.wall += wall;
                o.blas += blas;
            }
            None => t.ops.push(OpTime {
                kind,
                backward,
                calls: 1,
                wall,
                blas,
            }),
        }
    }
}

/// Called by the worker thread after each job.
pub(crate) fn worker_job(d: Duration) {
    if ON.load(Ordering::Relaxed)
        && let Some(t) = log().as_mut()
    {
        t.worker_busy += d;
    }
}

fn on_worker() -> bool {
    crate::pool::on_worker()
}

/// While a split product runs, its halves are not recorded; the
/// logical product is, with its wall time, when this guard drops.
static IN_SPLIT: AtomicBool = AtomicBool::new(false);

pub(crate) struct Logical(Gemm, std::time::Instant);

impl Logical {
    pub(crate) fn new(g: Gemm) -> Logical {
        IN_SPLIT.store(true, Ordering::SeqCst);
        Logical(g, std::time::Instant::now())
    }
}

impl Drop for Logical {
    fn drop(&mut self) {
        IN_SPLIT.store(false, Ordering::SeqCst);
        record_always(self.0, self.1.elapsed());
    }
}

pub(crate) fn record(g: Gemm, d: Duration) {
    if !IN_SPLIT.load(Ordering::Relaxed) {
        record_always(g, d);
    }
}

fn record_always(g: Gemm, d: Duration) {
    if ON.load(Ordering::Relaxed) && GEMMS_ON.load(Ordering::Relaxed) {
        let worker = on_worker();
        if let Some(t) = log().as_mut() {
            t.gemms.push(g);
            if worker {
                t.worker_blas += d;
            } else {
                t.blas += d;
            }
        }
    }
}

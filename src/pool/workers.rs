//! The worker threads and the claim protocol behind every parallel-for.
//!
//! One job runs at a time, published by the caller that holds `busy`. Its
//! tasks are claimed through one word, `claim` = epoch << 24 | next index:
//! a claim is a compare-and-swap of that word from (epoch, i) to
//! (epoch, i + 1), so it succeeds only while that job is still open. The
//! caller closes the job by swapping the index to `CLOSED`, which tells it
//! exactly how many tasks were claimed, and then waits for those alone.
//! The job's closure pointer and task count sit beside the word; they are
//! rewritten only after the close, so a thread whose claim succeeded read
//! the values of its own job, and no one dereferences the pointer without
//! a successful claim.

use super::{ON_WORKER, WORKER_NAME, threads};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a thread polls before it sleeps: waking a thread that sleeps
/// on a futex costs tens of microseconds on a virtual machine, and a
/// step's kernels follow each other within microseconds.
const SPIN: Duration = Duration::from_micros(200);

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// The index of a closed job: nothing left to claim.
const CLOSED: u64 = INDEX_MASK;
/// The most tasks one job holds; longer lists run as several jobs.
pub(super) const MAX_JOB_TASKS: usize = (CLOSED - 1) as usize;

/// What a claim dereferences: lives on the publishing caller's stack.
struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
}

type Payload = Box<dyn Any + Send>;

struct Shared {
    /// Held by the one caller whose job runs (a try-lock: others run
    /// inline rather than wait).
    busy: AtomicBool,
    claim: AtomicU64,
    job: AtomicPtr<Job<'static>>,
    n_tasks: AtomicUsize,
    /// Tasks of the current job that workers have finished.
    worker_done: AtomicUsize,
    panicked: AtomicBool,
    payload: Mutex<Option<Payload>>,
    /// Guards sleeping only; the protocol's state is in the atomics.
    sleep: Mutex<()>,
    /// Idle workers sleep here.
    work: Condvar,
    /// A caller waiting for started tasks sleeps here (and a spawner
    /// waiting for a thread to start).
    finished: Condvar,
    /// Workers beyond the thread count sleep here.
    retired: Condvar,
    sleepers: AtomicUsize,
    caller_waiting: AtomicBool,
    /// Workers that take part (the thread count less the caller).
    active: AtomicUsize,
    /// Workers that take part in the current job (at most `active`:
    /// fewer while other host threads compute, see `hosts`).
    job_workers: AtomicUsize,
    /// Workers started so far; they are never stopped.
    spawned: AtomicUsize,
    started: AtomicUsize,
    /// Set when the OS refused a thread: workers beyond `spawned` are
    /// not tried again.
    spawn_failed: AtomicBool,
}

static SHARED: Shared = Shared {
    busy: AtomicBool::new(false),
    claim: AtomicU64::new(CLOSED),
    job: AtomicPtr::new(std::ptr::null_mut()),
    n_tasks: AtomicUsize::new(0),
    worker_done: AtomicUsize::new(0),
    panicked: AtomicBool::new(false),
    payload: Mutex::new(None),
    sleep: Mutex::new(()),
    work: Condvar::new(),
    finished: Condvar::new(),
    retired: Condvar::new(),
    sleepers: AtomicUsize::new(0),
    caller_waiting: AtomicBool::new(false),
    active: AtomicUsize::new(0),
    job_workers: AtomicUsize::new(0),
    spawned: AtomicUsize::new(0),
    started: AtomicUsize::new(0),
    spawn_failed: AtomicBool::new(false),
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn wait<'a>(cv: &Condvar, g: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    cv.wait(g).unwrap_or_else(|p| p.into_inner())
}

fn epoch(word: u64) -> u64 {
    word >> INDEX_BITS
}

/// Polls `ready` for up to [`SPIN`], yielding between rounds so that a
/// thread of another process sharing the core gets it; true if it held.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Claims the next task of the job of epoch `e`: its index and the job.
fn claim(e: u64) -> Option<(usize, *const Job<'static>)> {
    let sh = &SHARED;
    let mut word = sh.claim.load(SeqCst);
    loop {
        let i = word & INDEX_MASK;
        if epoch(word) != e || i == CLOSED {
            return None;
        }
        // Read before the swap; valid for epoch `e` if the swap succeeds
        // (they are rewritten only after `e` is closed).
        let n = sh.n_tasks.load(SeqCst) as u64;
        let job = sh.job.load(SeqCst);
        if i >= n {
            return None;
        }
        match sh
            .claim
            .compare_exchange_weak(word, word + 1, SeqCst, SeqCst)
        {
            Ok(_) => return Some((i as usize, job)),
            Err(now) => word = now,
        }
    }
}

/// Keeps the first panic of a job for its caller.
fn record_panic(payload: Payload) {
    let mut slot = lock(&SHARED.payload);
    if slot.is_none() {
        *slot = Some(payload);
    }
    drop(slot);
    SHARED.panicked.store(true, SeqCst);
}

/// Releases `busy` on every path out of [`run_job`], unwinding included.
pub(super) struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        SHARED.busy.store(false, SeqCst);
    }
}

/// Takes the pool if no other caller has it.
pub(super) fn try_acquire() -> Option<Busy> {
    SHARED
        .busy
        .compare_exchange(false, true, SeqCst, SeqCst)
        .ok()
        .map(|_| Busy(()))
}

/// Brings the workers to the thread setting (the pool is idle: `_busy`
/// is held); the number of workers that take part.
pub(super) fn sync_threads(_busy: &Busy) -> usize {
    let sh = &SHARED;
    let want = threads::setting().threads - 1;
    let mut spawned = sh.spawned.load(SeqCst);
    while spawned < want && !sh.spawn_failed.load(SeqCst) {
        if spawn(spawned) {
            spawned += 1;
            sh.spawned.store(spawned, SeqCst);
        } else {
            sh.spawn_failed.store(true, SeqCst);
        }
    }
    let active = want.min(spawned);
    if sh.active.swap(active, SeqCst) < active {
        let _g = lock(&sh.sleep);
        sh.retired.notify_all();
    }
    active
}

/// Workers that can start: 1 + this is the thread count in effect.
pub(super) fn worker_limit() -> Option<usize> {
    SHARED
        .spawn_failed
        .load(SeqCst)
        .then(|| SHARED.spawned.load(SeqCst))
}

/// Starts worker `index` and waits until it runs its loop, so that the
/// thread's own start-up allocations happen now, in the call that made
/// it, not whenever the scheduler first runs it.
fn spawn(index: usize) -> bool {
    let sh = &SHARED;
    let seen = epoch(sh.claim.load(SeqCst));
    let started = std::thread::Builder::new()
        .name(WORKER_NAME.into())
        .spawn(move || worker_loop(index, seen));
    if started.is_err() {
        return false;
    }
    let mut g = lock(&sh.sleep);
    while sh.started.load(SeqCst) <= index {
        g = wait(&sh.finished, g);
    }
    true
}

/// Runs `n_tasks` tasks (1..=MAX_JOB_TASKS) across the caller and the
/// first `workers` workers; `local` runs on this thread first. Returns
/// once every claimed task has finished; resumes the first panic.
pub(super) fn run_job(
    _busy: &Busy,
    workers: usize,
    n_tasks: usize,
    task: &(dyn Fn(usize) + Sync),
    local: Option<&mut dyn FnMut()>,
) {
    debug_assert!((1..=MAX_JOB_TASKS).contains(&n_tasks));
    let sh = &SHARED;
    let job = Job { task };
    let e = (epoch(sh.claim.load(SeqCst)) + 1) & (u64::MAX >> INDEX_BITS);
    sh.n_tasks.store(n_tasks, SeqCst);
    sh.job.store((&raw const job).cast_mut().cast(), SeqCst);
    sh.worker_done.store(0, SeqCst);
    sh.panicked.store(false, SeqCst);
    sh.job_workers.store(workers, SeqCst);
    sh.claim.store(e << INDEX_BITS, SeqCst);
    let helpers = (n_tasks - usize::from(local.is_none())).min(workers);
    let sleeping = sh.sleepers.load(SeqCst).min(helpers);
    if sleeping > 0 {
        let _g = lock(&sh.sleep);
        for _ in 0..sleeping {
            sh.work.notify_one();
        }
    }

    let mut mine = 0;
    let mut own_panic = None;
    if let Some(local) = local
        && let Err(p) = catch_unwind(AssertUnwindSafe(local))
    {
        own_panic = Some(p);
        sh.panicked.store(true, SeqCst);
    }
    while !sh.panicked.load(SeqCst) {
        let Some((i, _)) = claim(e) else { break };
        mine += 1;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| task(i))) {
            own_panic = Some(p);
            sh.panicked.store(true, SeqCst);
        }
    }
    // Close the job: whatever was not claimed by now never will be, so
    // the wait below is for tasks already started, never for a worker
    // that another process keeps off its core.
    let closed = sh.claim.swap((e << INDEX_BITS) | CLOSED, SeqCst);
    let claimed = ((closed & INDEX_MASK) as usize).min(n_tasks);
    let theirs = claimed - mine;
    if !spin_until(|| sh.worker_done.load(SeqCst) == theirs) {
        let mut g = lock(&sh.sleep);
        sh.caller_waiting.store(true, SeqCst);
        while sh.worker_done.load(SeqCst) != theirs {
            g = wait(&sh.finished, g);
        }
        sh.caller_waiting.store(false, SeqCst);
    }
    sh.job.store(std::ptr::null_mut(), SeqCst);
    let theirs = if sh.panicked.load(SeqCst) {
        lock(&sh.payload).take()
    } else {
        None
    };
    if let Some(p) = own_panic.or(theirs) {
        resume_unwind(p);
    }
}

fn worker_loop(index: usize, mut seen: u64) {
    let sh = &SHARED;
    ON_WORKER.with(|w| w.set(true));
    {
        let _g = lock(&sh.sleep);
        sh.started.fetch_add(1, SeqCst);
        sh.finished.notify_all();
    }
    loop {
        seen = next_job(index, seen);
        // Left out of this job: other host threads compute on the cores
        // it would take (which thread runs a task never changes its bits).
        if index >= sh.job_workers.load(SeqCst) {
            continue;
        }
        while !sh.panicked.load(SeqCst) {
            let Some((i, job)) = claim(seen) else { break };
            #[cfg(feature = "trace")]
            let t0 = Instant::now();
            // SAFETY: the claim succeeded, so the job is open and its
            // caller waits for this task before it returns (module
            // invariant): the pointer is live.
            let task = unsafe { (*job).task };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| task(i))) {
                record_panic(p);
            }
            #[cfg(feature = "trace")]
            crate::trace::worker_job(t0.elapsed());
            sh.worker_done.fetch_add(1, SeqCst);
            if sh.caller_waiting.load(SeqCst) {
                let _g = lock(&sh.sleep);
                sh.finished.notify_all();
            }
        }
    }
}

/// Waits for a job newer than `seen` that this worker takes part in;
/// returns its epoch. Polls for [`SPIN`], then sleeps.
fn next_job(index: usize, seen: u64) -> u64 {
    let sh = &SHARED;
    let newer = || epoch(sh.claim.load(SeqCst)) != seen;
    if !spin_until(newer) {
        let mut g = lock(&sh.sleep);
        loop {
            sh.sleepers.fetch_add(1, SeqCst);
            if newer() {
                sh.sleepers.fetch_sub(1, SeqCst);
                break;
            }
            g = wait(&sh.work, g);
            sh.sleepers.fetch_sub(1, SeqCst);
        }
    }
    if index >= sh.active.load(SeqCst) {
        // Beyond the thread count: sleep until it grows again, then wait
        // for the job after the current one.
        let mut g = lock(&sh.sleep);
        while index >= sh.active.load(SeqCst) {
            g = wait(&sh.retired, g);
        }
        drop(g);
        return next_job(index, epoch(sh.claim.load(SeqCst)));
    }
    epoch(sh.claim.load(SeqCst))
}

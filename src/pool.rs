//! A one-worker fork-join pool: the library's only threads of its own.
//!
//! The machines this targets have few cores, and OpenBLAS runs on one
//! thread inside arenagrad (large products are split across the pool
//! instead), so arenagrad adds exactly one worker, used only for work large
//! enough to pay for the hand-off: big products, attention heads and big
//! element-wise kernels. `join` makes no heap allocation.
//!
//! Hand-off: a step's kernels come in quick succession, and waking a
//! thread sleeping on a futex costs tens of microseconds on a virtual
//! machine (measured: a 0.1 ms LayerNorm split in two ran slower than on
//! one thread). So after each job the worker polls for the next one for
//! [`SPIN`] before it sleeps on the condition variable, and the caller
//! polls for the worker's half for as long before it sleeps. Outside a step
//! the worker sleeps; it never spins for more than [`SPIN`] at a time.
//!
//! # Safety invariant
//! `join` hands the worker a raw pointer to a closure living on the caller's
//! stack, erasing its lifetime. This is sound because `join` does not return
//! (or unwind) before the worker has finished running the closure and
//! released the pointer, or the caller has taken the pointer back out of
//! the slot unstarted (under the lock, so the worker can no longer see it):
//! the wait happens in a drop guard, which runs on the normal path and
//! during unwinding alike.
//!
//! Under load: when another process holds the worker's core, the worker
//! may not start its half for milliseconds. The caller then runs that half
//! itself once its own is done, so two threads are never slower than one
//! by more than the hand-off; and both sides yield between polls.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long either side polls before sleeping (see the module comment).
const SPIN: Duration = Duration::from_micros(200);

/// Polls `ready` for up to [`SPIN`]; true if it turned true.
/// Between rounds of polls it yields, so that a thread of another process
/// (or the other side of the join) sharing this core gets it.
fn spin_until(ready: &AtomicBool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready.load(Ordering::Acquire) {
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

type Job = *mut (dyn FnMut() + Send);

/// The worker thread's name, as debuggers and `top -H` show it.
pub(crate) const WORKER_NAME: &str = "arenagrad-worker";

thread_local! {
    /// Set once by each worker thread. A `const` thread-local of a plain
    /// bool costs no allocation, unlike `std::thread::current()`, whose
    /// handle for the main thread is allocated on first use and never freed.
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// True on a pool's worker thread: the bench's trace tells its time apart
/// by it, and the C layer's panic hook recognises it.
pub(crate) fn on_worker() -> bool {
    ON_WORKER.with(Cell::get)
}

struct Slot {
    job: Option<SendJob>,
    done: bool,
    panicked: bool,
    shutdown: bool,
    /// The worker runs its loop: the thread's own start-up (the standard
    /// library allocates and frees its start record there) is over.
    started: bool,
}

struct SendJob(Job);
// SAFETY: the pointee is `Send` (the bound on `join`'s closure), and the
// pointer is only dereferenced by the worker while `join` waits.
unsafe impl Send for SendJob {}

struct Shared {
    slot: Mutex<Slot>,
    wake: Condvar,
    finished: Condvar,
    /// Mirrors of `slot.job.is_some()` and `slot.done`, written under the
    /// lock, read without it while polling (the lock stays the authority).
    posted: AtomicBool,
    done: AtomicBool,
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

/// Whether the environment forbids the worker: `AG_NUM_THREADS=1` (read
/// when a context is made) keeps every kernel on the calling thread, e.g.
/// for one MPI rank per core.
pub(crate) fn disabled_by_env() -> bool {
    std::env::var_os("AG_NUM_THREADS").is_some_and(|v| v == "1")
}

impl Pool {
    /// Starts the worker thread; None if the OS refuses a thread (then
    /// everything runs on the caller's thread).
    pub fn new() -> Option<Pool> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                job: None,
                done: false,
                panicked: false,
                shutdown: false,
                started: false,
            }),
            wake: Condvar::new(),
            finished: Condvar::new(),
            posted: AtomicBool::new(false),
            done: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name(WORKER_NAME.into())
            .spawn(move || worker_loop(&s))
            .ok()?;
        // Wait for the thread to start, so that its start-up allocations
        // happen now, in the warm-up that made the pool, not whenever the
        // scheduler first runs it (under load, in the middle of a step
        // that must not allocate).
        let mut s = lock(&shared.slot);
        while !s.started {
            s = shared.finished.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        drop(s);
        Some(Pool {
            shared,
            worker: Some(worker),
        })
    }

    /// Runs `a` on the worker and `b` on this thread; returns when both are
    /// done. A panic in either is resumed here after both finished.
    pub fn join<A: FnOnce() + Send, B: FnOnce()>(&self, a: A, b: B) {
        let mut a = Some(a);
        let mut call_a = move || {
            if let Some(f) = a.take() {
                f()
            }
        };
        let dyn_a: &mut (dyn FnMut() + Send) = &mut call_a;
        // SAFETY: lifetime erasure, see the module invariant: `Wait` below
        // blocks until the worker is done with the pointer.
        let job: Job = unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send), Job>(dyn_a) };
        {
            let mut s = lock(&self.shared.slot);
            s.job = Some(SendJob(job));
            s.done = false;
            s.panicked = false;
            self.shared.done.store(false, Ordering::Release);
            self.shared.posted.store(true, Ordering::Release);
        }
        self.shared.wake.notify_one();
        struct Wait<'p>(&'p Shared);
        impl Drop for Wait<'_> {
            fn drop(&mut self) {
                spin_until(&self.0.done);
                let mut s = lock(&self.0.slot);
                while !s.done {
                    s = self.0.finished.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        let wait = Wait(&self.shared);
        b();
        // If the worker has not started `a` yet (it is asleep, or another
        // process holds its core), run it here rather than wait: the
        // caller never waits for work nobody has begun. What runs is fixed
        // by the caller's split, so the bits do not depend on who ran it.
        let unstarted = {
            let mut s = lock(&self.shared.slot);
            let job = s.job.take();
            if job.is_some() {
                self.shared.posted.store(false, Ordering::Release);
                s.done = true;
                self.shared.done.store(true, Ordering::Release);
            }
            job.is_some()
        };
        drop(wait);
        if unstarted {
            // The raw pointer taken back above is dropped unused: `call_a`
            // is called directly, on this thread.
            call_a();
            return;
        }
        if lock(&self.shared.slot).panicked {
            resume_unwind(Box::new("panic in the arenagrad worker thread"));
        }
    }
}

fn worker_loop(shared: &Shared) {
    ON_WORKER.with(|w| w.set(true));
    lock(&shared.slot).started = true;
    shared.finished.notify_all();
    loop {
        // Poll first: the next kernel usually follows within microseconds.
        spin_until(&shared.posted);
        let job = {
            let mut s = lock(&shared.slot);
            loop {
                if s.shutdown {
                    return;
                }
                if let Some(j) = s.job.take() {
                    shared.posted.store(false, Ordering::Release);
                    break j;
                }
                s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        #[cfg(feature = "trace")]
        let t0 = std::time::Instant::now();
        // SAFETY: the pointer is live until we set `done` (module invariant)
        // and no one else calls it.
        let ok = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)() })).is_ok();
        #[cfg(feature = "trace")]
        crate::trace::worker_job(t0.elapsed());
        let mut s = lock(&shared.slot);
        s.panicked = !ok;
        s.done = true;
        shared.done.store(true, Ordering::Release);
        drop(s);
        shared.finished.notify_all();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.slot).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_runs_both_halves_and_propagates_panics() {
        let pool = Pool::new().unwrap();
        let mut v = vec![0u32; 1000];
        for round in 0..100u32 {
            let (lo, hi) = v.split_at_mut(500);
            pool.join(
                || lo.iter_mut().for_each(|x| *x += round),
                || hi.iter_mut().for_each(|x| *x += 2 * round),
            );
        }
        assert_eq!(v[0], (0..100).sum::<u32>());
        assert_eq!(v[999], 2 * (0..100).sum::<u32>());
        let r = catch_unwind(AssertUnwindSafe(|| pool.join(|| panic!("boom"), || ())));
        assert!(r.is_err());
        // Still usable after a panic.
        let mut x = 0;
        pool.join(|| (), || x = 1);
        assert_eq!(x, 1);
    }
}

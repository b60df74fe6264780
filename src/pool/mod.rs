//! The library's threads: one pool of N threads for the whole process,
//! the calling thread being one of them, and one parallel primitive,
//! [`Pool::run`]: a parallel-for over a task list.
//!
//! # What the primitive promises
//! `run(n, task)` calls `task(i)` exactly once for each `i` in `0..n`, on
//! some thread of the pool (the caller claims tasks too), and returns when
//! all have finished. Tasks are claimed one at a time from a counter, so
//! which thread runs which task varies from call to call: a kernel's
//! result must depend only on its task list (fixed by shapes and
//! constants), never on the thread, so it is the same bits at any N. A sum
//! across tasks writes one partial per task ([`Pool::run_slots`]) that the
//! caller combines in task order. A call makes no heap allocation.
//!
//! # Never waiting on others
//! - A parallel-for started on a worker (nested in a task), or while the
//!   pool runs another caller's job (another context on another host
//!   thread), runs inline on the calling thread: it neither waits nor
//!   deadlocks, and k host threads never pile k × N threads on the cores.
//! - When another process holds a worker's core, the caller does not wait
//!   for that worker to start: it keeps claiming tasks itself, and when
//!   none is left it closes the job and waits only for tasks already
//!   started. So N threads are never much slower than one on a busy
//!   machine.
//!
//! # Hand-off and parking
//! A step's kernels come in quick succession, and waking a thread that
//! sleeps on a futex costs tens of microseconds on a virtual machine (a
//! 0.1 ms kernel split in two ran slower than on one thread). So after
//! each job a worker polls for the next one for about 200 µs, yielding
//! between polls, before it sleeps on a condition variable; the caller
//! polls as long for started tasks before it sleeps. An idle process
//! costs no CPU.
//!
//! # The thread count
//! [`default_threads`]: the physical cores the process may use (affinity
//! mask, cgroup quota, hyperthread siblings counted once). `AG_NUM_THREADS`
//! overrides it (read once, when the pool is first used; 0 is the default)
//! and [`set_threads`] overrides both, from the next parallel-for that
//! finds the pool idle. Workers (N − 1 of them) start on the first
//! parallel-for, and more when the count grows; beyond the count they
//! sleep. [`thread_info`] reports the count and its source.
//!
//! # Safety invariant
//! A job hands the workers a raw pointer to a closure that lives on the
//! caller's stack, its lifetime erased. This is sound because a worker
//! dereferences the pointer only after claiming a task of that job, and
//! the caller does not return, nor unwind, before every claimed task has
//! finished: a panic in a task (on any thread) is caught, the caller
//! stops claiming, closes the job, waits for the started tasks, and only
//! then resumes the first panic.
#![allow(unsafe_code)]

mod hosts;
mod threads;
mod workers;

use std::cell::{Cell, UnsafeCell};

#[cfg(test)]
pub(crate) use threads::MAX_THREADS;
pub use threads::{ThreadInfo, ThreadSource, default_threads, set_threads};

/// The most tasks one kernel is cut into: enough to keep 64 threads busy
/// with some left for balance, few enough that a task stays a sizable
/// piece of work (a claim costs one atomic add).
pub(crate) const MAX_TASKS: usize = 64;

/// How many tasks to cut `units` (rows, columns, elements) into so that
/// each holds at least `min_per_task`, at most [`MAX_TASKS`]. It depends on
/// the shape alone, never on the thread count: that is what makes a
/// kernel's bits the same at any N.
pub(crate) fn task_count(units: usize, min_per_task: usize) -> usize {
    (units / min_per_task.max(1)).clamp(1, MAX_TASKS)
}

/// The units task `i` of `n` owns: contiguous ranges in task order whose
/// sizes differ by at most one, covering `0..units`.
pub(crate) fn task_range(units: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let (base, extra) = (units / n, units % n);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// The worker threads' name, as debuggers and `top -H` show it.
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

/// The process's thread count (the caller included) and its source. The
/// count is the setting a parallel-for uses, or fewer threads if the OS
/// refused to start as many.
pub fn thread_info() -> ThreadInfo {
    let mut info = threads::setting();
    if let Some(workers) = workers::worker_limit() {
        info.threads = info.threads.min(workers + 1);
    }
    info
}

/// A handle to the process's pool (it holds nothing: copying it is free).
#[derive(Clone, Copy, Debug)]
pub struct Pool(());

impl Pool {
    /// The pool, or None when the thread count is 1 (then every kernel
    /// runs on the caller's thread). Reads the setting on first use.
    pub fn new() -> Option<Pool> {
        (thread_info().threads > 1).then_some(Pool(()))
    }

    /// The pool whatever the thread count: with one thread, `run` loops.
    pub fn global() -> Pool {
        Pool(())
    }

    /// Runs `task(i)` once for every `i` in `0..n_tasks`, across the
    /// caller and the workers; returns when all have finished. Inline when
    /// called from a task, or while another caller's job runs. A panic in
    /// a task is resumed here once every started task has finished.
    pub fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        dispatch(n_tasks, task, None);
    }

    /// Runs one task per slot: `task(i, &mut slots[i])`, as [`run`]. For
    /// partial results by task index, which the caller then combines in
    /// index order (the same bits at any thread count).
    ///
    /// [`run`]: Pool::run
    pub fn run_slots<T: Send>(&self, slots: &mut [T], task: &(dyn Fn(usize, &mut T) + Sync)) {
        let base = SharedMut(slots.as_mut_ptr());
        self.run(slots.len(), &|i| {
            // SAFETY: `i < slots.len()`, and each index runs exactly once
            // while `slots` is borrowed mutably by this call, so no two
            // references to one slot exist.
            task(i, unsafe { &mut *base.at(i) })
        });
    }

    /// Runs one task per `chunk_len` elements of `data` (the last chunk
    /// may be shorter): `task(i, &mut data[i * chunk_len..][..chunk_len])`,
    /// as [`run`]. A `chunk_len` of 0 is taken as 1.
    ///
    /// [`run`]: Pool::run
    pub fn run_chunks<T: Send>(
        &self,
        data: &mut [T],
        chunk_len: usize,
        task: &(dyn Fn(usize, &mut [T]) + Sync),
    ) {
        let chunk_len = chunk_len.max(1);
        let len = data.len();
        let base = SharedMut(data.as_mut_ptr());
        self.run(len.div_ceil(chunk_len), &|i| {
            let start = i * chunk_len;
            let n = chunk_len.min(len - start);
            // SAFETY: chunk `i` lies inside `data`, chunks do not overlap,
            // and each runs exactly once while `data` is borrowed mutably
            // by this call.
            task(i, unsafe {
                std::slice::from_raw_parts_mut(base.at(start), n)
            })
        });
    }

    /// Runs `a` and `b` (`b` on this thread, `a` on a worker or, if none
    /// has started it by the time `b` is done, here too); returns when both
    /// are done. A panic in either is resumed here after both finished.
    pub fn join<A: FnOnce() + Send, B: FnOnce()>(&self, a: A, b: B) {
        let a = RunOnce(UnsafeCell::new(Some(a)));
        let mut b = Some(b);
        dispatch(
            1,
            &|_| {
                if let Some(a) = a.take() {
                    a()
                }
            },
            Some(&mut || {
                if let Some(b) = b.take() {
                    b()
                }
            }),
        );
    }
}

/// A mutable base pointer that tasks share; each task reaches only its
/// own elements.
struct SharedMut<T>(*mut T);

// SAFETY: tasks on several threads derive disjoint `&mut` from the
// pointer (see its uses), so sharing it is sending `T`s.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

/// A closure that the one task of a job takes and calls.
struct RunOnce<F>(UnsafeCell<Option<F>>);

// SAFETY: the cell is touched only by the job's one task, which the pool
// runs exactly once, on one thread; `F: Send` lets it move there.
unsafe impl<F: Send> Sync for RunOnce<F> {}

impl<F> RunOnce<F> {
    /// Called only by the one task of the job (see the `Sync` above).
    fn take(&self) -> Option<F> {
        // SAFETY: exactly one call, so no other reference to the cell.
        unsafe { (*self.0.get()).take() }
    }
}

/// Runs `local` (if any) on this thread and the tasks across the pool, or
/// everything here when the pool is not for this call.
fn dispatch(n_tasks: usize, task: &(dyn Fn(usize) + Sync), mut local: Option<&mut dyn FnMut()>) {
    let parallel = n_tasks + usize::from(local.is_some()) >= 2 && !on_worker();
    let (busy, other_hosts) = if parallel {
        let other_hosts = hosts::starting_kernel();
        (workers::try_acquire(), other_hosts)
    } else {
        (None, 0)
    };
    // With no worker to take part, the pool is let go before the loop.
    if let Some(busy) = busy {
        let workers = workers::sync_threads(&busy).saturating_sub(other_hosts);
        if workers > 0 {
            let mut base = 0;
            while base < n_tasks {
                let len = (n_tasks - base).min(workers::MAX_JOB_TASKS);
                workers::run_job(&busy, workers, len, &|i| task(base + i), local.take());
                base += len;
            }
            return;
        }
    }
    if let Some(local) = local {
        local();
    }
    for i in 0..n_tasks {
        task(i);
    }
}

#[cfg(test)]
mod tests;

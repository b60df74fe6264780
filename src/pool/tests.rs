//! Tests beside the pool. They share the process with the crate's other
//! tests (whose contexts use the pool at the same time), so they check
//! what holds at any thread count and never set the count to 1 (contexts
//! of other tests expect a pool). The thread-count sweep, the allocation
//! count and the idle-CPU check run in their own processes
//! (tests/pool_*.rs).

use super::*;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

fn pool() -> Pool {
    Pool::global()
}

fn each_once(n: usize) {
    let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    pool().run(n, &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
    });
    assert!(
        hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
        "n = {n}"
    );
}

#[test]
fn every_task_runs_exactly_once() {
    for n in [0, 1, 2, 3, 5, 16, 17, 100, 1000] {
        for _ in 0..20 {
            each_once(n);
        }
    }
}

#[test]
fn join_runs_both_halves_and_propagates_panics() {
    let pool = pool();
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
    let r = catch_unwind(AssertUnwindSafe(|| pool.join(|| (), || panic!("here"))));
    assert!(r.is_err());
    // Still usable after a panic.
    let mut x = 0;
    pool.join(|| (), || x = 1);
    assert_eq!(x, 1);
}

#[test]
fn a_panic_surfaces_after_started_tasks_finish() {
    let finished = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        pool().run(64, &|i| {
            if i == 5 {
                panic!("task 5");
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
            finished.fetch_add(1, Ordering::SeqCst);
        })
    }));
    let msg = r.expect_err("the panic must reach the caller");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"task 5"));
    // Whatever ran has finished: the count no longer moves.
    let seen = finished.load(Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(finished.load(Ordering::SeqCst), seen);
    each_once(10);
}

#[test]
fn nested_runs_run_inline() {
    let sums: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
    pool().run(8, &|i| {
        pool().run(10, &|j| {
            sums[i].fetch_add(j, Ordering::Relaxed);
        });
    });
    assert!(sums.iter().all(|s| s.load(Ordering::Relaxed) == 45));
}

#[test]
fn slots_and_chunks_each_get_their_own() {
    let mut slots = [0usize; 37];
    pool().run_slots(&mut slots, &|i, s| *s = i * i);
    assert!(slots.iter().enumerate().all(|(i, &s)| s == i * i));
    let mut data = vec![0usize; 103];
    pool().run_chunks(&mut data, 10, &|i, chunk| {
        assert!(chunk.len() == 10 || (i == 10 && chunk.len() == 3));
        chunk.iter_mut().for_each(|x| *x += i + 1);
    });
    assert!(data.iter().enumerate().all(|(k, &x)| x == k / 10 + 1));
    pool().run_chunks(&mut data[..0], 4, &|_, _| panic!("no chunks"));
    pool().run_chunks(&mut data[..3], 0, &|_, c| assert_eq!(c.len(), 1));
}

#[test]
fn two_host_threads_at_once_both_finish() {
    std::thread::scope(|s| {
        for t in 0..4usize {
            s.spawn(move || {
                for round in 0..200 {
                    let n = 1 + (t * 7 + round) % 40;
                    each_once(n);
                }
            });
        }
    });
}

#[test]
fn the_setting_reports_a_count() {
    let info = thread_info();
    assert!(info.threads >= 1 && info.default >= 1);
    assert!(info.threads <= threads::MAX_THREADS);
}

#[test]
fn task_ranges_cover_the_units_in_order() {
    for units in [0usize, 1, 5, 63, 64, 65, 1000] {
        for n in 1..=9 {
            let mut next = 0;
            for i in 0..n {
                let r = super::task_range(units, n, i);
                assert_eq!(r.start, next, "units {units}, {n} tasks, task {i}");
                assert!(r.len() + 1 >= units / n && r.len() <= units / n + 1);
                next = r.end;
            }
            assert_eq!(next, units);
        }
    }
    assert_eq!(super::task_count(10, 64), 1);
    assert_eq!(super::task_count(1 << 20, 64), super::MAX_TASKS);
    assert_eq!(super::task_count(640, 64), 10);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "Miri's clock may pass the 10 ms window while a thread starts"
)]
fn another_host_thread_computing_is_counted() {
    // A thread that started a kernel just now is counted by the next one,
    // which then leaves a worker out for it. (Beyond 64 threads slots are
    // shared: three tries make a shared slot each time vanishingly rare.)
    let counted = (0..3).any(|_| {
        std::thread::scope(|s| {
            s.spawn(hosts::starting_kernel).join().unwrap();
        });
        hosts::starting_kernel() >= 1
    });
    assert!(counted);
}

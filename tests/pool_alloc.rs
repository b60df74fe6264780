//! A parallel-for makes no heap allocation once the pool's threads run.
//!
//! A counting `#[global_allocator]` counts allocator calls on every
//! thread (the workers' included) while counting is on. The binary runs
//! without the libtest harness, whose threads allocate whenever they
//! like; a failed check panics, which exits non-zero.

// Shared with the other steady-state tests; `calls` is theirs.
#[allow(dead_code)]
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use arenagrad::pool::{Pool, set_threads};
use counting_alloc::{CountingAlloc, count, take_calls};
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn work(pool: Pool, sum: &AtomicUsize, slots: &mut [u64], data: &mut [f32]) {
    pool.run(37, &|i| {
        sum.fetch_add(i, Ordering::Relaxed);
    });
    pool.run_slots(slots, &|i, s| *s = i as u64 * 3);
    pool.run_chunks(data, 100, &|i, c| c.iter_mut().for_each(|x| *x += i as f32));
    let (lo, hi) = data.split_at_mut(500);
    pool.join(|| lo[0] += 1.0, || hi[0] += 1.0);
    // Nested: inline, also without allocating.
    pool.run(4, &|_| {
        pool.run(3, &|j| {
            sum.fetch_add(j, Ordering::Relaxed);
        })
    });
}

fn main() {
    // The counter must see a worker's allocation, or a pass means nothing.
    count(true);
    std::thread::spawn(|| drop(std::hint::black_box(vec![1u8; 64])))
        .join()
        .unwrap();
    count(false);
    assert!(take_calls() > 0, "the counting allocator counts nothing");

    let pool = Pool::global();
    let sum = AtomicUsize::new(0);
    let mut slots = vec![0u64; 16];
    let mut data = vec![0f32; 1000];
    for n_threads in [2, 4, 8] {
        set_threads(n_threads);
        // Warm-up: starts the workers (their start-up allocates).
        for _ in 0..10 {
            work(pool, &sum, &mut slots, &mut data);
        }
        take_calls();
        count(true);
        for _ in 0..2000 {
            work(pool, &sum, &mut slots, &mut data);
        }
        // Let the workers sleep and wake again: parking allocates nothing.
        std::thread::sleep(std::time::Duration::from_millis(5));
        work(pool, &sum, &mut slots, &mut data);
        count(false);
        let calls = take_calls();
        eprintln!("N = {n_threads}: {calls} allocator calls in 2001 rounds");
        assert_eq!(calls, 0, "N = {n_threads}");
    }
    assert!(slots.iter().enumerate().all(|(i, &s)| s == i as u64 * 3));
    eprintln!("pool_alloc: no allocation per call");
}

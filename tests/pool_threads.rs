//! The pool at thread counts 1 to 16 (more threads than this machine's
//! cores is fine), in a process of its own: `set_threads` changes the one
//! pool of the process, which other tests' contexts would share. Runs
//! without the libtest harness, whose own threads would run beside it;
//! `main` runs the checks one after another and a failed one panics.
//!
//! Also prints the cost of an empty `run` at 2 and 4 threads (median of
//! many calls; run with `--nocapture` to see it), and checks through a
//! child process of this binary how `AG_NUM_THREADS` is read.

use arenagrad::pool::{Pool, ThreadSource, set_threads, thread_info};
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

const COUNTS: [usize; 7] = [1, 2, 3, 4, 7, 8, 16];

/// Runs `n` tasks; checks each ran once; returns the threads that ran them.
fn each_once(n: usize) -> HashSet<ThreadId> {
    let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let threads = Mutex::new(HashSet::new());
    Pool::global().run(n, &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
        // Long enough that woken workers get a share.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        threads.lock().unwrap().insert(std::thread::current().id());
    });
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.load(Ordering::Relaxed), 1, "task {i} of {n}");
    }
    threads.into_inner().unwrap()
}

fn every_task_runs_once_at_every_count() {
    for &n_threads in &COUNTS {
        set_threads(n_threads);
        let info = thread_info();
        assert_eq!(info.threads, n_threads);
        assert_eq!(info.source, ThreadSource::Call);
        let mut seen = HashSet::new();
        for round in 0..300 {
            let n = [1, 2, 3, 5, 8, 16, 33, 100][round % 8];
            seen.extend(each_once(n));
        }
        assert!(
            seen.len() <= n_threads,
            "{} threads ran tasks at N = {n_threads}",
            seen.len()
        );
        eprintln!("N = {n_threads:2}: tasks ran on {} threads", seen.len());
        assert_eq!(Pool::new().is_some(), n_threads > 1);
    }
    set_threads(0);
    assert_ne!(thread_info().source, ThreadSource::Call);
}

fn nested_runs_run_inline() {
    set_threads(4);
    let sums: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
    Pool::global().run(8, &|i| {
        let outer = std::thread::current().id();
        Pool::global().run(10, &|j| {
            assert_eq!(std::thread::current().id(), outer, "a nested task moved");
            sums[i].fetch_add(j, Ordering::Relaxed);
        });
    });
    assert!(sums.iter().all(|s| s.load(Ordering::Relaxed) == 45));
}

fn host_threads_at_once_all_finish() {
    set_threads(4);
    std::thread::scope(|s| {
        for t in 0..3usize {
            s.spawn(move || {
                for round in 0..300 {
                    each_once(1 + (t * 7 + round) % 40);
                }
            });
        }
    });
}

fn panics_reach_the_caller_after_started_tasks() {
    set_threads(4);
    // The panics below are expected: keep the default hook's report quiet.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let running = AtomicUsize::new(0);
    for bad in [0, 3, 63] {
        let r = catch_unwind(AssertUnwindSafe(|| {
            Pool::global().run(64, &|i| {
                running.fetch_add(1, Ordering::SeqCst);
                if i == bad {
                    panic!("task {i} failed");
                }
                std::thread::sleep(Duration::from_micros(100));
                running.fetch_sub(1, Ordering::SeqCst);
            })
        }));
        let payload = r.expect_err("the panic must reach the caller");
        let msg = payload
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert_eq!(*msg, format!("task {bad} failed"));
        // Only the panicking task is unfinished: the others had ended.
        assert_eq!(running.swap(0, Ordering::SeqCst), 1);
    }
    std::panic::set_hook(hook);
    each_once(50);
}

fn median_empty_run(n_threads: usize, n_tasks: usize) -> Duration {
    set_threads(n_threads);
    let pool = Pool::global();
    let mut times = Vec::with_capacity(20_000);
    for k in 0..21_000 {
        let t0 = Instant::now();
        pool.run(n_tasks, &|_| {});
        if k >= 1000 {
            times.push(t0.elapsed());
        }
    }
    times.sort();
    times[times.len() / 2]
}

/// Median wall time of `run(n_tasks)` whose tasks each spin for `task`.
fn median_busy_run(n_threads: usize, n_tasks: usize, task: Duration) -> Duration {
    set_threads(n_threads);
    let pool = Pool::global();
    let mut times = Vec::with_capacity(2000);
    for k in 0..2100 {
        let t0 = Instant::now();
        pool.run(n_tasks, &|_| {
            let t = Instant::now();
            while t.elapsed() < task {
                std::hint::spin_loop();
            }
        });
        if k >= 100 {
            times.push(t0.elapsed());
        }
    }
    times.sort();
    times[times.len() / 2]
}

fn report_overhead() {
    for n_threads in [2, 4] {
        for n_tasks in [n_threads, 64] {
            let m = median_empty_run(n_threads, n_tasks);
            eprintln!("empty run({n_tasks:2}) at N = {n_threads}: median {m:?}");
        }
        let task = Duration::from_micros(20);
        let m = median_busy_run(n_threads, n_threads, task);
        eprintln!("run({n_threads}) of 20 µs tasks at N = {n_threads}: median {m:?}");
    }
}

/// In a child process: prints the count and its source, as the parent
/// set AG_NUM_THREADS for it.
fn child() {
    let info = thread_info();
    println!("{} {:?} {}", info.threads, info.source, info.default);
}

fn environment_is_read() {
    let exe = std::env::current_exe().unwrap();
    let run = |value: &str| {
        let out = std::process::Command::new(&exe)
            .arg("--child")
            .env("AG_NUM_THREADS", value)
            .output()
            .unwrap();
        assert!(out.status.success());
        let stdout = String::from_utf8(out.stdout).unwrap();
        let f: Vec<String> = stdout.split_whitespace().map(String::from).collect();
        let stderr = String::from_utf8(out.stderr).unwrap();
        (
            f[0].parse::<usize>().unwrap(),
            f[1].clone(),
            f[2].parse::<usize>().unwrap(),
            stderr,
        )
    };
    let (n, source, default, err) = run("3");
    assert_eq!((n, source.as_str()), (3, "Environment"));
    assert_eq!(err.contains("more than"), 3 > default, "{err}");
    let (n, source, default, err) = run("0");
    assert_eq!(n, default);
    assert_ne!(source, "Environment");
    assert!(err.is_empty(), "{err}");
    let (n, _, default, err) = run("lots");
    assert_eq!(n, default);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a thread count"), "{err}");
    let (n, _, _, err) = run("100000");
    assert!(n < 100000, "{n}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("capped at {n}")), "{err}");
}

fn main() {
    if std::env::args().any(|a| a == "--child") {
        return child();
    }
    every_task_runs_once_at_every_count();
    nested_runs_run_inline();
    host_threads_at_once_all_finish();
    panics_reach_the_caller_after_started_tasks();
    environment_is_read();
    report_overhead();
    eprintln!("pool_threads: all checks passed");
}

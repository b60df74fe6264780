//! An idle pool costs no CPU: after parallel work, the workers poll only
//! briefly, then sleep. This binary runs alone, without the libtest
//! harness (other tests' threads would add CPU time of their own).

use arenagrad::pool::{Pool, set_threads};
use std::time::{Duration, Instant};

/// User plus system CPU time of the whole process.
fn cpu_time() -> Duration {
    // SAFETY: rusage is plain data, so all-zero is a valid value.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a live rusage for the call to fill.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(r.ru_utime) + tv(r.ru_stime)
}

fn main() {
    set_threads(4);
    let pool = Pool::global();
    let t0 = Instant::now();
    let mut rounds = 0u32;
    while t0.elapsed() < Duration::from_millis(300) {
        pool.run(16, &|i| {
            std::hint::black_box((0..1000).fold(i, |a, b| a ^ b));
        });
        rounds += 1;
    }
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(3));
    let idle = cpu_time() - before;
    eprintln!("after {rounds} parallel-fors: {idle:?} of CPU in 3 s idle");
    assert!(
        idle < Duration::from_millis(30),
        "idle threads used {idle:?}"
    );
    // And they still wake for work.
    pool.run(8, &|_| ());
    eprintln!("pool_idle: idle threads park");
}

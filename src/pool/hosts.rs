//! Other host threads computing at the same time as the pool's caller.
//!
//! Several contexts stepping on their own host threads share one pool: the
//! first to start a kernel gets it, and the others, finding it busy, run
//! their kernels on their own threads. Each of those threads occupies a
//! core the pool's caller would otherwise hand to a worker, so the caller
//! leaves out one worker per other host thread that started a kernel
//! lately: k host threads on N cores keep about N threads busy, not
//! N + k - 1. Which threads run a task never changes its bits: the task
//! lists depend on the shape alone.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

/// How long a host thread counts as computing after its last inline
/// kernel: longer than the gaps between a step's kernels.
const RECENT: Duration = Duration::from_millis(10);

/// Slots for the host threads' last kernel (nanoseconds since [`base`],
/// 0 for never); threads share a slot beyond this many, which only makes
/// the count low.
const SLOTS: usize = 64;

static LAST_KERNEL: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// Host threads that ever started a kernel: with one, nothing to count.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, taken on first use (a `const` thread-local of
    /// a plain value costs no allocation).
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Nanoseconds since [`base`], at least 1 (0 means never).
fn now() -> u64 {
    (base().elapsed().as_nanos() as u64).max(1)
}

/// This host thread starts a kernel that could run in parallel: marks
/// it as computing and returns how many OTHER host threads started one
/// within [`RECENT`].
pub(super) fn starting_kernel() -> usize {
    let mine = SLOT.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SLOT.fetch_add(1, Relaxed) % SLOTS);
        }
        s.get()
    });
    let t = now();
    LAST_KERNEL[mine].store(t, Relaxed);
    if NEXT_SLOT.load(Relaxed) <= 1 {
        return 0;
    }
    let since = t.saturating_sub(RECENT.as_nanos() as u64);
    LAST_KERNEL
        .iter()
        .enumerate()
        .filter(|&(i, last)| i != mine && last.load(Relaxed) > since)
        .count()
}

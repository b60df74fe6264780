//! A counting global allocator for the steady-state tests: it forwards
//! every call to `System` and, while `COUNTING` is set, counts allocations,
//! reallocations and frees on every thread. A test installs it with
//! `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;` and
//! runs without the libtest harness (whose threads allocate).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub static COUNTING: AtomicBool = AtomicBool::new(false);
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);
pub static REALLOCS: AtomicU64 = AtomicU64::new(0);
pub static DEALLOCS: AtomicU64 = AtomicU64::new(0);

fn bump(counter: &AtomicU64) {
    if COUNTING.load(Ordering::SeqCst) {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Every call counted so far.
pub fn calls() -> u64 {
    [&ALLOCS, &REALLOCS, &DEALLOCS]
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .sum()
}

/// Every call counted so far, and the counters back to zero.
pub fn take_calls() -> u64 {
    [&ALLOCS, &REALLOCS, &DEALLOCS]
        .iter()
        .map(|c| c.swap(0, Ordering::SeqCst))
        .sum()
}

/// Starts (true) or stops counting.
pub fn count(on: bool) {
    COUNTING.store(on, Ordering::SeqCst);
}

pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`; the bookkeeping
// only touches atomics, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump(&ALLOCS);
        // SAFETY: forwarded with the caller's (valid) layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump(&ALLOCS);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump(&REALLOCS);
        // SAFETY: ptr/layout come from this allocator (i.e. from System).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        bump(&DEALLOCS);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

//! Test-only entry points, compiled only with the `test-hooks` feature:
//! they are absent from the default library and from include/arenagrad.h.
//! Their declarations for C tests are generated into
//! tests/c/arenagrad_test_hooks.h.

use super::prelude::*;

/// Test hook: panics inside the library so tests can check that the panic
/// is caught (PANIC) and the context poisoned (later calls: POISONED).
/// Never call it outside tests. Errors: PANIC.
#[unsafe(no_mangle)]
pub extern "C" fn ag_test_panic(ctx: *mut ag_context) -> ag_status {
    guard("ag_test_panic", ctx, |_| {
        panic!("deliberate panic from ag_test_panic")
    })
}

/// Test hook for allocation-failure tests: the `fail_at`-th fallible
/// persistent allocation (parameter, gradient, optimizer state, checkpoint
/// buffer) from now on fails with ALLOCATION_FAILED, and every later one
/// too if `sticky`; `fail_at` = 0 turns injection off. Writes how many such
/// allocations were counted since the previous call to `*counted` (may be
/// NULL). Never call it outside tests. Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_test_fail_allocation(
    ctx: *mut ag_context,
    fail_at: u64,
    sticky: bool,
    counted: *mut u64,
) -> ag_status {
    const F: &str = "ag_test_fail_allocation";
    guard(F, ctx, |c| {
        let n = c.inject_allocation_failure(fail_at, sticky);
        if !counted.is_null() {
            write_out(F, "counted", counted, n)?;
        }
        Ok(())
    })
}

/// Number of live contexts (for tests of the registry's bound).
/// Rust only.
pub fn live_contexts() -> usize {
    super::registry::live_contexts()
}

/*
 * Test-only entry points of libarenagrad (panic and allocation-failure
 * injection) for the C tests. Not part of the public API and not
 * installed. Generated from src/ffi by tests/header.rs; do not edit by
 * hand (run `make header`).
 */

#ifndef AG_TEST_HOOKS_H
#define AG_TEST_HOOKS_H

#include "arenagrad.h"

#ifdef __cplusplus
extern "C" {
#endif

// Test hook: panics inside the library so tests can check that the panic
// is caught (PANIC) and the context poisoned (later calls: POISONED).
// Never call it outside tests. Errors: PANIC.
ag_status ag_test_panic(struct ag_context *ctx);

// Test hook for allocation-failure tests: the `fail_at`-th fallible
// persistent allocation (parameter, gradient, optimizer state, checkpoint
// buffer) from now on fails with ALLOCATION_FAILED, and every later one
// too if `sticky`; `fail_at` = 0 turns injection off. Writes how many such
// allocations were counted since the previous call to `*counted` (may be
// NULL). Never call it outside tests. Errors: none of its own.
ag_status ag_test_fail_allocation(struct ag_context *ctx, uint64_t fail_at, bool sticky, uint64_t *counted);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif /* AG_TEST_HOOKS_H */

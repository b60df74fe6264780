/*
 * Coverage feedback for the gcc-compiled train_full.c under libFuzzer.
 *
 * gcc only offers -fsanitize-coverage=trace-pc (a call at every basic
 * block), which libFuzzer no longer supports. build.rs renames that call in
 * train_full.o to ag_cov_trace_pc (objcopy --redefine-sym), implemented here:
 * each block's return address is hashed into a table of 8-bit counters that
 * is registered with libFuzzer like clang's inline counters. This file itself
 * is compiled without instrumentation.
 *
 * gcc's -fsanitize-coverage=trace-cmp also traces float comparisons, which
 * libFuzzer has no callbacks for: those are accepted and ignored.
 */
#include <stdint.h>

#define AG_COV_SLOTS 8192u

static uint8_t ag_cov_counters[AG_COV_SLOTS];
/* libFuzzer wants one (pc, flags) pair per counter: slot numbers stand in
 * for the program counters (they are only printed, with -print_pcs). */
static uintptr_t ag_cov_pcs[2 * AG_COV_SLOTS];

void __sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop);
void __sanitizer_cov_pcs_init(const uintptr_t *start, const uintptr_t *stop);
void ag_cov_trace_pc(void);
void __sanitizer_cov_trace_cmpf(float a, float b);
void __sanitizer_cov_trace_cmpd(double a, double b);

__attribute__((constructor)) static void ag_cov_register(void)
{
    for (uintptr_t i = 0; i < AG_COV_SLOTS; i++) ag_cov_pcs[2 * i] = 0x1000 + i;
    __sanitizer_cov_8bit_counters_init(ag_cov_counters, ag_cov_counters + AG_COV_SLOTS);
    __sanitizer_cov_pcs_init(ag_cov_pcs, ag_cov_pcs + 2 * AG_COV_SLOTS);
}

void ag_cov_trace_pc(void)
{
    uint64_t pc = (uint64_t)(uintptr_t)__builtin_return_address(0);
    uint64_t h = pc * 0x9E3779B97F4A7C15ull;
    uint8_t *c = &ag_cov_counters[(h >> 40) % AG_COV_SLOTS];
    if (*c != 255) (*c)++;
}

void __sanitizer_cov_trace_cmpf(float a, float b) { (void)a; (void)b; }
void __sanitizer_cov_trace_cmpd(double a, double b) { (void)a; (void)b; }

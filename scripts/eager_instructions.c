/*
 * eager_instructions.c: runs the two eager models of bench_eager (the
 * scalar chain and eight schools) for a number of gradients with
 * callgrind's instrumentation on only after warm-up, so that callgrind's
 * instruction count is the steady state's alone. Instruction counts do
 * not depend on the machine's load, where times on a shared host move by
 * tens of percent: they are how a change to the per-op path is judged
 * before it is timed. Built and run by scripts/eager_instructions.sh.
 *
 * Usage: eager_instructions scalar_chain|eight_schools GRADIENTS
 * Prints "ops=N gradients=G" for the script to divide by.
 */
#define BENCH_NAME "eager_instructions"
#include "bench_models.h"
#include <valgrind/callgrind.h>

static void chain_gradient(void) {
    CALL(ag_zero_grad(ctx));
    ag_tensor loss = chain_forward();
    float v;
    CALL(ag_tensor_item(ctx, loss, &v));
    CALL(ag_backward(ctx, loss));
    CALL(ag_reset(ctx));
}

static void eight_schools_gradient(void) {
    float pos[J + 2], g[J + 2], v;
    for (int i = 0; i < J + 2; i++) pos[i] = 0.1f * (float)(i - 4);
    CALL(ag_param_write(ctx, q, pos, J + 2));
    CALL(ag_zero_grad(ctx));
    ag_tensor lp = eight_schools_logp();
    CALL(ag_tensor_item(ctx, lp, &v));
    CALL(ag_backward(ctx, lp));
    CALL(ag_tensor_read_grad(ctx, q, g, J + 2));
    CALL(ag_reset(ctx));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s scalar_chain|eight_schools GRADIENTS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    void (*gradient)(void);
    CALL(ag_context_new(&ctx));
    if (!strcmp(argv[1], "scalar_chain")) {
        for (int t = 0; t < T_STEPS; t++) xs[t] = (float)sin(0.1 * t) + 0.3f * (float)cos(0.37 * t);
        size_t one[1] = {1};
        for (int k = 0; k < N_PARAMS; k++) {
            float v = (float)init[k];
            CALL(ag_param_new(ctx, one, 1, &v, &p[k]));
        }
        gradient = chain_gradient;
    } else if (!strcmp(argv[1], "eight_schools")) {
        size_t shape[1] = {J + 2};
        CALL(ag_param_new(ctx, shape, 1, NULL, &q));
        gradient = eight_schools_gradient;
    } else {
        fprintf(stderr, "eager_instructions: unknown model %s\n", argv[1]);
        return 2;
    }
    for (int i = 0; i < 5; i++) gradient(); /* warm-up: capacities and the gradient plan */
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < n; i++) gradient();
    CALLGRIND_STOP_INSTRUMENTATION;
    printf("ops=%ld gradients=%d\n", ops, n);
    ag_context_free(&ctx);
    return 0;
}

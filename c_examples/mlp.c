/*
 * mlp.c: the smallest complete arenagrad program in C.
 *
 * A two-layer perceptron (linear+bias -> tanh -> linear+bias) learns to
 * classify a 2-D three-armed spiral (K = 3 classes, N = 64 points per arm),
 * generated here from a fixed seed, with softmax cross-entropy and AdamW,
 * full batch, for STEPS steps. Every iteration is the documented cycle:
 *
 *   ag_reset -> forward ops -> ag_backward -> ag_optimizer_step -> ag_zero_grad
 *
 * Checks (exit 1 if any fails, 0 otherwise):
 *  - every call returns AG_STATUS_OK (else: status name + last error, exit 1);
 *  - the final loss is below LOSS_THRESHOLD. The loss starts near ln 3 = 1.0986
 *    (chance for 3 classes); with this seed it ends near 0.04 after 400
 *    steps, so the threshold of 0.25 leaves a wide margin while still failing
 *    for a model that has not learnt the spiral (a linear classifier stays
 *    near 0.74 on this data);
 *  - the arena's high-water mark is the same at step 3 and at the last step
 *    (memory per iteration is flat once the arena has warmed up).
 *
 * Build: make build/mlp && ./build/mlp
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "arenagrad.h"

#define K 3              /* classes (spiral arms) */
#define N_PER_CLASS 64   /* points per arm */
#define ROWS (K * N_PER_CLASS)
#define D_IN 2
#define HIDDEN 32
#define STEPS 400
#define PRINT_EVERY 50
#define LOSS_THRESHOLD 0.25f
#define SEED 20240601u

static ag_context *ctx;

/* Prints the failing call, its status and the context's last error; exits 1. */
static void check(ag_status st, const char *what) {
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "mlp: %s failed: %s: %s\n", what, ag_status_str(st),
                ag_context_last_error(ctx));
        ag_context_free(&ctx);
        exit(1);
    }
}
#define CALL(x) check((x), #x)

/* xorshift32: a tiny deterministic generator, same numbers on every machine. */
static uint32_t rng_state = SEED;
static float rand_uniform(void) { /* [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (float)(rng_state >> 8) / 16777216.0f;
}
static float rand_normal(void) { /* Box-Muller */
    float u1 = rand_uniform(), u2 = rand_uniform();
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

int main(void) {
    /* ---- data: K spiral arms, radius 0..1, angle grows with radius ---- */
    static float xs[ROWS * D_IN];  /* [ROWS, D_IN] */
    static int32_t ys[ROWS];       /* [ROWS] */
    for (int c = 0; c < K; c++) {
        for (int i = 0; i < N_PER_CLASS; i++) {
            int row = c * N_PER_CLASS + i;
            float r = (float)i / (float)(N_PER_CLASS - 1);
            float t = (float)c * 4.0f + r * 4.0f + 0.2f * rand_normal();
            xs[row * D_IN + 0] = r * sinf(t);
            xs[row * D_IN + 1] = r * cosf(t);
            ys[row] = c;
        }
    }

    /* ---- parameters, initialised as N(0, 1/fan_in) ---- */
    static float w1_init[D_IN * HIDDEN], w2_init[HIDDEN * K];
    for (int i = 0; i < D_IN * HIDDEN; i++) w1_init[i] = rand_normal() / sqrtf((float)D_IN);
    for (int i = 0; i < HIDDEN * K; i++) w2_init[i] = rand_normal() / sqrtf((float)HIDDEN);

    printf("arenagrad %s: MLP %d-%d-%d on a %d-point spiral, AdamW, %d steps\n", ag_version(),
           D_IN, HIDDEN, K, ROWS, STEPS);
    ag_status st = ag_context_new(&ctx);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "mlp: ag_context_new failed: %s\n", ag_status_str(st));
        return 1;
    }
    ag_tensor w1, b1, w2, b2;
    const size_t w1_shape[2] = {D_IN, HIDDEN}, b1_shape[1] = {HIDDEN};
    const size_t w2_shape[2] = {HIDDEN, K}, b2_shape[1] = {K};
    CALL(ag_param_new(ctx, w1_shape, 2, w1_init, &w1));
    CALL(ag_param_new(ctx, b1_shape, 1, NULL, &b1)); /* NULL init: zeros */
    CALL(ag_param_new(ctx, w2_shape, 2, w2_init, &w2));
    CALL(ag_param_new(ctx, b2_shape, 1, NULL, &b2));
    CALL(ag_optimizer_adamw(ctx, 0.02f, 0.9f, 0.999f, 1e-8f, 1e-4f));

    const size_t x_shape[2] = {ROWS, D_IN};
    float first_loss = 0.0f, loss = 0.0f;
    uint64_t high_water_step3 = 0, high_water_last = 0;
    ag_memory_stats_t mem;
    for (int step = 1; step <= STEPS; step++) {
        CALL(ag_reset(ctx));
        ag_tensor x, h, a, logits, l;
        CALL(ag_tensor_new(ctx, x_shape, 2, xs, &x));       /* [ROWS, 2] */
        CALL(ag_linear(ctx, x, w1, &b1, &h));               /* [ROWS, HIDDEN] */
        CALL(ag_tanh(ctx, h, &a));                          /* [ROWS, HIDDEN] */
        CALL(ag_linear(ctx, a, w2, &b2, &logits));          /* [ROWS, K] */
        CALL(ag_cross_entropy(ctx, logits, ys, ROWS, &l));  /* [1] */
        CALL(ag_tensor_item(ctx, l, &loss));
        CALL(ag_backward(ctx, l));
        CALL(ag_optimizer_step(ctx));
        CALL(ag_zero_grad(ctx));
        if (step == 1) first_loss = loss;
        if (step == 3) {
            CALL(ag_memory_stats(ctx, &mem));
            high_water_step3 = mem.arena_high_water_bytes;
        }
        if (step == STEPS) {
            CALL(ag_memory_stats(ctx, &mem));
            high_water_last = mem.arena_high_water_bytes;
        }
        if (step == 1 || step % PRINT_EVERY == 0) {
            printf("step %4d  loss %.4f\n", step, (double)loss);
        }
    }

    /* Accuracy with gradient recording off (nothing goes on the tape). */
    CALL(ag_reset(ctx));
    CALL(ag_set_grad_enabled(ctx, false));
    ag_tensor x, h, a, logits;
    CALL(ag_tensor_new(ctx, x_shape, 2, xs, &x));
    CALL(ag_linear(ctx, x, w1, &b1, &h));
    CALL(ag_tanh(ctx, h, &a));
    CALL(ag_linear(ctx, a, w2, &b2, &logits));
    static float out[ROWS * K];
    CALL(ag_tensor_read(ctx, logits, out, ROWS * K));
    int correct = 0;
    for (int r = 0; r < ROWS; r++) {
        int best = 0;
        for (int c = 1; c < K; c++) {
            if (out[r * K + c] > out[r * K + best]) best = c;
        }
        correct += best == ys[r];
    }
    CALL(ag_memory_stats(ctx, &mem));
    CALL(ag_set_grad_enabled(ctx, true));

    printf("accuracy %d/%d (%.1f%%)\n", correct, ROWS, 100.0 * correct / ROWS);
    printf("memory: arena used %llu B, reserved %llu B, high-water %llu B (step 3: %llu B)\n",
           (unsigned long long)mem.arena_used_bytes, (unsigned long long)mem.arena_reserved_bytes,
           (unsigned long long)mem.arena_high_water_bytes,
           (unsigned long long)high_water_step3);
    printf("        tape %llu/%llu ops, live tensors %llu/%llu, %llu params (%llu B), "
           "optimizer %llu B, %llu resets\n",
           (unsigned long long)mem.tape_len, (unsigned long long)mem.tape_capacity,
           (unsigned long long)mem.live_tensors, (unsigned long long)mem.table_capacity,
           (unsigned long long)mem.param_count, (unsigned long long)mem.param_bytes,
           (unsigned long long)mem.optimizer_bytes, (unsigned long long)mem.resets);

    int rc = 0;
    if (!(loss < LOSS_THRESHOLD)) { /* also catches NaN */
        fprintf(stderr, "mlp: FAIL: final loss %.4f is not below %.2f (first %.4f)\n",
                (double)loss, (double)LOSS_THRESHOLD, (double)first_loss);
        rc = 1;
    }
    if (high_water_last != high_water_step3) {
        fprintf(stderr, "mlp: FAIL: arena high-water changed from %llu B at step 3 to %llu B "
                "at step %d\n", (unsigned long long)high_water_step3,
                (unsigned long long)high_water_last, STEPS);
        rc = 1;
    }
    CALL(ag_context_free(&ctx));
    if (rc == 0) {
        printf("mlp: OK: final loss %.4f < %.2f, arena high-water flat at %llu B\n", (double)loss,
               (double)LOSS_THRESHOLD, (unsigned long long)high_water_step3);
    }
    return rc;
}

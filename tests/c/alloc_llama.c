/*
 * alloc_llama.c: a steady-state training step of train_full's Llama model
 * (c_examples/train_full/model.c, linked in: RMSNorm, RoPE, grouped-query
 * attention, SwiGLU, untied lm_head, cross-entropy, backward, clipping,
 * AdamW) calls the C allocator zero times, on every thread. Counted as
 * alloc_steady.c counts: with tests/c/malloc_count.c preloaded (make
 * test-alloc; run bare, it re-executes itself with the counter beside it).
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdlib.h>

#include "alloc_count.h"
#include "train_full.h"

struct run {
    ag_context *ctx;
    struct model m;
    size_t B;
    int32_t *ids, *targets;
    uint64_t rng;
    float loss;
};

/* One training step, as train_full makes it (eagerly). */
static ag_status step(void *arg, int iter)
{
    struct run *r = arg;
    const size_t n = r->B * (size_t)r->m.T;
    for (size_t i = 0; i < n; i++) {
        r->ids[i] = (int32_t)(rng_next(&r->rng) % (uint64_t)r->m.V);
        r->targets[i] = (int32_t)(rng_next(&r->rng) % (uint64_t)r->m.V);
    }
    ag_tensor loss;
    float norm;
    TRY(ag_reset(r->ctx));
    TRY(model_forward(r->ctx, &r->m, r->ids, r->targets, r->B, (size_t)r->m.T, NULL, &loss));
    TRY(ag_tensor_item(r->ctx, loss, &r->loss));
    TRY(ag_backward(r->ctx, loss));
    TRY(ag_clip_grad_norm(r->ctx, GRAD_CLIP, &norm));
    TRY(ag_optimizer_set_lr(r->ctx, 1e-3f / (float)(1 + iter)));
    TRY(ag_optimizer_step(r->ctx));
    return ag_zero_grad(r->ctx);
}

/* Steps after `warm` uncounted ones; returns the allocator calls counted,
   ULONG_MAX if a step failed. */
static unsigned long run_case(const char *name, int L, int NH, int KV, int C, int T, size_t B,
                              bool tie, uint32_t recompute, int warm, int iters)
{
    struct run r = {.B = B, .rng = 42};
    r.m = (struct model){.arch = ARCH_LLAMA, .L = L, .NH = NH, .KV = KV, .C = C,
                         .F = (8 * C / 3 + 31) / 32 * 32, .T = T, .V = 65,
                         .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tie = tie};
    size_t biggest = (size_t)r.m.F * (size_t)C;
    if ((size_t)C * (size_t)C > biggest) biggest = (size_t)C * (size_t)C;
    if ((size_t)r.m.V * (size_t)C > biggest) biggest = (size_t)r.m.V * (size_t)C;
    float *scratch = malloc(biggest * sizeof *scratch);
    r.ids = malloc(B * (size_t)T * sizeof *r.ids);
    r.targets = malloc(B * (size_t)T * sizeof *r.targets);
    unsigned long calls = ULONG_MAX;
    ag_status st = scratch && r.ids && r.targets ? ag_context_new(&r.ctx) : AG_STATUS_OUT_OF_MEMORY;
    if (st == AG_STATUS_OK) st = model_build(r.ctx, &r.m, 7, scratch);
    if (st == AG_STATUS_OK) st = ag_optimizer_adamw(r.ctx, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f);
    if (st == AG_STATUS_OK) st = ag_set_recompute(r.ctx, recompute);
    if (st == AG_STATUS_OK) {
        calls = counted(name, step, &r, warm, iters);
        if (calls == ULONG_MAX || !isfinite(r.loss)) {
            fprintf(stderr, "%s: %s: loss %g\n", name,
                    r.ctx != NULL ? ag_context_last_error(r.ctx) : "", (double)r.loss);
            calls = ULONG_MAX;
        } else {
            printf("  last loss %.4f\n", (double)r.loss);
        }
    } else {
        fprintf(stderr, "%s: %s: %s\n", name, ag_status_str(st),
                r.ctx != NULL ? ag_context_last_error(r.ctx) : "");
    }
    if (r.ctx != NULL) ag_context_free(&r.ctx);
    free(scratch);
    free(r.ids);
    free(r.targets);
    return calls;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!find_counter()) return reexec_with_counter("alloc_llama", argv);
    setenv("AG_NUM_THREADS", "2", 1);
    /* Widths of 128 (heads of 32): with heads of 8 at T = 32, the per-head
       products of ag_attention_gqa reach OpenBLAS 0.3.21's small-matrix
       sgemm kernel, which calls malloc itself. */
    int failed = 0;
    failed += run_case("llama, 4 heads on 2 kv heads", 2, 4, 2, 128, 64, 8, false,
                       AG_RECOMPUTE_NONE, 3, 20) != 0;
    failed += run_case("llama, every block recomputed, tied", 2, 4, 2, 128, 64, 8, true,
                       AG_RECOMPUTE_ALL, 3, 20) != 0;
    failed += run_case("llama, multi-head (kv = heads), wider", 2, 4, 4, 128, 64, 16, false,
                       AG_RECOMPUTE_NONE, 3, 5) != 0;
    printf("alloc_llama: %s\n", failed == 0 ? "all passed" : "FAILED");
    return failed == 0 ? 0 : 1;
}

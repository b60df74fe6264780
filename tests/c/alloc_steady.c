/*
 * alloc_steady.c: a steady-state step calls the C allocator zero times, on
 * every thread, including OpenBLAS's and libc's own calls.
 *
 * Run with tests/c/malloc_count.c preloaded (`make test-alloc`; run bare, the
 * program re-executes itself with LD_PRELOAD set to the libmalloc_count.so
 * beside it). Each case makes a few warm-up iterations, then turns counting
 * on for N more and requires a count of zero:
 *   1. train_full's GPT (embeddings, pre-LayerNorm attention and MLP blocks
 *      as segments, tied logits, cross-entropy, backward, clipping, AdamW
 *      with a changing learning rate), tiny preset, no recompute;
 *   2. the same with every block recomputed;
 *   3. the small preset with two threads: products, attention, GELU and
 *      AdamW large enough to be split with the worker thread, and OpenBLAS
 *      called from both threads;
 *   4. a posterior's gradient loop (eight schools, non-centred): write the
 *      position, zero the gradient, build log p, backward, read the
 *      gradient, reset;
 *   5. c_examples/cnn's convolutional network at its default widths (conv,
 *      ReLU, max pooling, linear, dropout with a new seed each step,
 *      cross-entropy, AdamW with a changing learning rate) on 4 images, and
 *      its evaluation forward with gradients off.
 * On failure it prints the call stack of the first counted call.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "alloc_count.h"

/* ------------------------------------------------------------------------ */
/* The GPT of train_full                                                    */
/* ------------------------------------------------------------------------ */

#define MAX_L 4
#define VOCAB 65

typedef struct block {
    ag_tensor ln1_w, ln1_b, w_qkv, b_qkv, w_proj, b_proj, ln2_w, ln2_b, w_fc, b_fc, w_fc2, b_fc2;
} block;

typedef struct gpt {
    ag_context *ctx;
    size_t L, NH, C, T, B;
    ag_tensor wte, wpe, lnf_w, lnf_b;
    block blocks[MAX_L];
    int32_t *ids, *targets;
    uint64_t rng;
    float loss;
} gpt;

static uint32_t next_u32(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

static ag_status new_param(gpt *g, size_t d0, size_t d1, int kind, float *scratch,
                           ag_tensor *out) {
    size_t n = d0 * (d1 == 0 ? 1 : d1);
    for (size_t i = 0; i < n; i++) {
        float u = (float)next_u32(&g->rng) / 2147483648.0f - 1.0f;
        scratch[i] = kind == 0 ? 0.035f * u : kind == 1 ? 1.0f : 0.0f;
    }
    size_t shape[2] = {d0, d1};
    ag_status st = ag_param_new(g->ctx, shape, d1 == 0 ? 1 : 2, scratch, out);
    if (st != AG_STATUS_OK) return st;
    return ag_param_set_weight_decay(g->ctx, *out, d1 != 0);
}

#define TRY(x) do { ag_status st_ = (x); if (st_ != AG_STATUS_OK) return st_; } while (0)

static ag_status gpt_build(gpt *g, float *scratch) {
    size_t C = g->C;
    TRY(new_param(g, VOCAB, C, 0, scratch, &g->wte));
    TRY(new_param(g, g->T, C, 0, scratch, &g->wpe));
    for (size_t l = 0; l < g->L; l++) {
        block *b = &g->blocks[l];
        TRY(new_param(g, C, 0, 1, scratch, &b->ln1_w));
        TRY(new_param(g, C, 0, 2, scratch, &b->ln1_b));
        TRY(new_param(g, C, 3 * C, 0, scratch, &b->w_qkv));
        TRY(new_param(g, 3 * C, 0, 2, scratch, &b->b_qkv));
        TRY(new_param(g, C, C, 0, scratch, &b->w_proj));
        TRY(new_param(g, C, 0, 2, scratch, &b->b_proj));
        TRY(new_param(g, C, 0, 1, scratch, &b->ln2_w));
        TRY(new_param(g, C, 0, 2, scratch, &b->ln2_b));
        TRY(new_param(g, C, 4 * C, 0, scratch, &b->w_fc));
        TRY(new_param(g, 4 * C, 0, 2, scratch, &b->b_fc));
        TRY(new_param(g, 4 * C, C, 0, scratch, &b->w_fc2));
        TRY(new_param(g, C, 0, 2, scratch, &b->b_fc2));
    }
    TRY(new_param(g, C, 0, 1, scratch, &g->lnf_w));
    TRY(new_param(g, C, 0, 2, scratch, &g->lnf_b));
    return ag_optimizer_adamw(g->ctx, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f);
}

/* One training iteration, as train_full makes it. */
static ag_status gpt_step(void *arg, int iter) {
    gpt *g = arg;
    ag_context *ctx = g->ctx;
    size_t B = g->B, T = g->T, C = g->C;
    for (size_t i = 0; i < B * T; i++) {
        g->ids[i] = (int32_t)(next_u32(&g->rng) % VOCAB);
        g->targets[i] = (int32_t)(next_u32(&g->rng) % VOCAB);
    }
    ag_tensor x, h, a, tok, logits, loss;
    TRY(ag_reset(ctx));
    TRY(ag_embedding(ctx, g->wte, g->ids, B * T, &tok));
    TRY(ag_reshape(ctx, tok, (size_t[]){B, T, C}, 3, &tok));
    TRY(ag_add(ctx, tok, g->wpe, &x));
    for (size_t l = 0; l < g->L; l++) {
        const block *b = &g->blocks[l];
        TRY(ag_segment_begin(ctx));
        TRY(ag_layernorm(ctx, x, b->ln1_w, b->ln1_b, &h));
        TRY(ag_linear(ctx, h, b->w_qkv, &b->b_qkv, &h));
        TRY(ag_attention(ctx, h, g->NH, &a));
        TRY(ag_linear(ctx, a, b->w_proj, &b->b_proj, &a));
        TRY(ag_add(ctx, x, a, &x));
        TRY(ag_layernorm(ctx, x, b->ln2_w, b->ln2_b, &h));
        TRY(ag_linear(ctx, h, b->w_fc, &b->b_fc, &h));
        TRY(ag_gelu(ctx, h, &h));
        TRY(ag_linear(ctx, h, b->w_fc2, &b->b_fc2, &h));
        TRY(ag_add(ctx, x, h, &x));
        TRY(ag_segment_end(ctx, x));
    }
    TRY(ag_layernorm(ctx, x, g->lnf_w, g->lnf_b, &x));
    TRY(ag_reshape(ctx, x, (size_t[]){B * T, C}, 2, &x));
    TRY(ag_matmul(ctx, x, g->wte, false, true, &logits));
    TRY(ag_cross_entropy(ctx, logits, g->targets, B * T, &loss));
    TRY(ag_tensor_item(ctx, loss, &g->loss));
    TRY(ag_backward(ctx, loss));
    float norm;
    TRY(ag_clip_grad_norm(ctx, 1.0f, &norm));
    TRY(ag_optimizer_set_lr(ctx, 1e-3f / (float)(1 + iter)));
    TRY(ag_optimizer_step(ctx));
    ag_memory_stats_t mem;
    TRY(ag_memory_stats(ctx, &mem));
    return ag_zero_grad(ctx);
}

static void gpt_case(const char *name, size_t L, size_t NH, size_t C, size_t T, size_t B,
                     uint32_t recompute, int warm, int iters) {
    check_begin(name);
    gpt g = {.L = L, .NH = NH, .C = C, .T = T, .B = B, .rng = 42};
    g.ids = malloc(B * T * sizeof(int32_t));
    g.targets = malloc(B * T * sizeof(int32_t));
    float *scratch = malloc(VOCAB * 4 * C * C * sizeof(float));
    REQUIRE(g.ids != NULL && g.targets != NULL && scratch != NULL);
    REQUIRE_OK(ag_context_new(&g.ctx));
    check_set_ctx(g.ctx);
    CHECK_OK(gpt_build(&g, scratch));
    CHECK_OK(ag_set_recompute(g.ctx, recompute));
    ag_runtime rt;
    if (ag_runtime_info(g.ctx, &rt) == AG_STATUS_OK) {
        printf("%s: GEMM %s %s %s (%s), element-wise %s\n", name, rt.gemm_library,
               rt.gemm_version, rt.gemm_kernels, rt.gemm_note, rt.simd);
    }
    CHECK(counted(name, gpt_step, &g, warm, iters) == 0);
    CHECK(isfinite(g.loss) && g.loss > 0.0f);
    if (L * C >= 256) CHECK(ag_runtime_info(g.ctx, &rt) == AG_STATUS_OK && rt.threads == 2);
    CHECK_OK(ag_context_free(&g.ctx));
    check_set_ctx(NULL);
    free(g.ids);
    free(g.targets);
    free(scratch);
}

/* ------------------------------------------------------------------------ */
/* Eight schools                                                            */
/* ------------------------------------------------------------------------ */

typedef struct posterior {
    ag_context *ctx;
    ag_tensor q;
    float lp;
    uint64_t rng;
} posterior;

static ag_status schools_eval(void *arg, int iter) {
    static const float y[8] = {28, 8, -3, 7, -1, 1, 18, 12};
    static const float sigma[8] = {15, 10, 16, 11, 9, 11, 10, 18};
    posterior *p = arg;
    ag_context *c = p->ctx;
    float q[10], grad[10];
    for (int i = 0; i < 10; i++) q[i] = (float)next_u32(&p->rng) / 2147483648.0f - 1.0f;
    (void)iter;
    ag_tensor one, ty, ts, th, mu, lt, tau, t[16];
    float unit = 1.0f;
    TRY(ag_param_write(c, p->q, q, 10));
    TRY(ag_zero_grad(c));
    TRY(ag_tensor_new(c, (size_t[]){1}, 1, &unit, &one));
    TRY(ag_tensor_new(c, (size_t[]){8}, 1, y, &ty));
    TRY(ag_tensor_new(c, (size_t[]){8}, 1, sigma, &ts));
    TRY(ag_slice(c, p->q, 0, 0, 8, &th));
    TRY(ag_slice(c, p->q, 0, 8, 1, &mu));
    TRY(ag_slice(c, p->q, 0, 9, 1, &lt));
    TRY(ag_exp(c, lt, &tau));
    TRY(ag_mul(c, th, tau, &t[0]));
    TRY(ag_add(c, t[0], mu, &t[1]));                 /* theta */
    TRY(ag_sub(c, ty, t[1], &t[2]));
    TRY(ag_div(c, t[2], ts, &t[3]));                 /* z */
    TRY(ag_mul(c, t[3], t[3], &t[4]));
    TRY(ag_mul(c, th, th, &t[5]));
    TRY(ag_add(c, t[4], t[5], &t[6]));
    TRY(ag_sum(c, t[6], &t[7]));
    TRY(ag_scale(c, t[7], -0.5f, &t[8]));
    TRY(ag_mul(c, mu, mu, &t[9]));
    TRY(ag_scale(c, t[9], -1.0f / 50.0f, &t[10]));  /* mu ~ normal(0, 5) */
    TRY(ag_mul(c, tau, tau, &t[11]));
    TRY(ag_scale(c, t[11], 1.0f / 25.0f, &t[12]));
    TRY(ag_add(c, t[12], one, &t[12]));
    TRY(ag_log(c, t[12], &t[13]));                  /* tau ~ cauchy(0, 5) */
    TRY(ag_sub(c, t[8], t[13], &t[14]));
    TRY(ag_add(c, t[14], t[10], &t[15]));
    TRY(ag_add(c, t[15], lt, &t[15]));              /* + log tau */
    TRY(ag_tensor_item(c, t[15], &p->lp));
    TRY(ag_backward(c, t[15]));
    TRY(ag_tensor_read_grad(c, p->q, grad, 10));
    return ag_reset(c);
}

static void schools_case(int warm, int iters) {
    const char *name = "eight schools gradient";
    check_begin(name);
    posterior p = {.rng = 7};
    REQUIRE_OK(ag_context_new(&p.ctx));
    check_set_ctx(p.ctx);
    CHECK_OK(ag_param_new(p.ctx, (size_t[]){10}, 1, NULL, &p.q));
    CHECK(counted(name, schools_eval, &p, warm, iters) == 0);
    CHECK(isfinite(p.lp));
    CHECK_OK(ag_context_free(&p.ctx));
    check_set_ctx(NULL);
}

/* ------------------------------------------------------------------------ */
/* The convolutional network of c_examples/cnn                              */
/* ------------------------------------------------------------------------ */

typedef struct convnet {
    ag_context *ctx;
    size_t B, C1, C2, H;
    ag_tensor w[5], b[5]; /* conv1, conv2, conv3, fc1, fc2 */
    float *images;
    int32_t *labels;
    uint64_t rng;
    float loss;
} convnet;

static ag_status convnet_build(convnet *n) {
    const size_t flat = n->C2 * 7 * 7;
    const size_t wshape[5][4] = {
        {n->C1, 1, 3, 3}, {n->C1, n->C1, 3, 3}, {n->C2, n->C1, 3, 3}, {flat, n->H}, {n->H, 10}};
    const size_t wdims[5] = {4, 4, 4, 2, 2};
    const size_t bsize[5] = {n->C1, n->C1, n->C2, n->H, 10};
    for (int i = 0; i < 5; i++) {
        TRY(ag_param_new(n->ctx, wshape[i], wdims[i], NULL, &n->w[i]));
        TRY(ag_param_init(n->ctx, n->w[i], AG_INIT_UNIFORM, -0.1f, 0.1f, (uint64_t)i));
        TRY(ag_param_new(n->ctx, &bsize[i], 1, NULL, &n->b[i]));
    }
    return ag_optimizer_adamw(n->ctx, 2e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f);
}

/* The logits of the current images, as c_examples/cnn/model.c makes them. */
static ag_status convnet_forward(convnet *n, bool training, uint64_t seed, ag_tensor *logits) {
    ag_context *ctx = n->ctx;
    ag_tensor h;
    TRY(ag_tensor_new(ctx, (size_t[]){n->B, 1, 28, 28}, 4, n->images, &h));
    for (int i = 0; i < 3; i++) {
        TRY(ag_conv2d(ctx, h, n->w[i], &n->b[i], 1, 1, 1, 1, 1, 1, 1, &h));
        TRY(ag_relu(ctx, h, &h));
        if (i > 0) TRY(ag_max_pool2d(ctx, h, 2, 2, 2, 2, 0, 0, false, &h));
    }
    TRY(ag_reshape(ctx, h, (size_t[]){n->B, n->C2 * 7 * 7}, 2, &h));
    TRY(ag_linear(ctx, h, n->w[3], &n->b[3], &h));
    TRY(ag_relu(ctx, h, &h));
    if (training) TRY(ag_dropout(ctx, h, 0.25f, seed, &h));
    return ag_linear(ctx, h, n->w[4], &n->b[4], logits);
}

static void convnet_fill(convnet *n) {
    for (size_t i = 0; i < n->B * 28 * 28; i++)
        n->images[i] = (float)next_u32(&n->rng) / 2147483648.0f - 1.0f;
    for (size_t i = 0; i < n->B; i++) n->labels[i] = (int32_t)(next_u32(&n->rng) % 10);
}

static ag_status convnet_step(void *arg, int iter) {
    convnet *n = arg;
    ag_context *ctx = n->ctx;
    convnet_fill(n);
    ag_tensor logits, loss;
    TRY(ag_reset(ctx));
    TRY(convnet_forward(n, true, 1000 + (uint64_t)iter, &logits));
    TRY(ag_cross_entropy(ctx, logits, n->labels, n->B, &loss));
    TRY(ag_tensor_item(ctx, loss, &n->loss));
    TRY(ag_backward(ctx, loss));
    TRY(ag_optimizer_set_lr(ctx, 2e-3f / (float)(1 + iter)));
    TRY(ag_optimizer_step(ctx));
    return ag_zero_grad(ctx);
}

static ag_status convnet_eval(void *arg, int iter) {
    convnet *n = arg;
    ag_context *ctx = n->ctx;
    float logits_out[4 * 10];
    (void)iter;
    convnet_fill(n);
    ag_tensor logits;
    TRY(ag_set_grad_enabled(ctx, false));
    TRY(ag_reset(ctx));
    TRY(convnet_forward(n, false, 0, &logits));
    TRY(ag_tensor_read(ctx, logits, logits_out, n->B * 10));
    TRY(ag_reset(ctx));
    return ag_set_grad_enabled(ctx, true);
}

static void convnet_case(int warm, int iters) {
    const char *name = "cnn convnet";
    check_begin(name);
    convnet n = {.B = 4, .C1 = 16, .C2 = 64, .H = 128, .rng = 11};
    n.images = malloc(n.B * 28 * 28 * sizeof(float));
    n.labels = malloc(n.B * sizeof(int32_t));
    REQUIRE(n.images != NULL && n.labels != NULL);
    REQUIRE_OK(ag_context_new(&n.ctx));
    check_set_ctx(n.ctx);
    CHECK_OK(convnet_build(&n));
    CHECK(counted(name, convnet_step, &n, warm, iters) == 0);
    CHECK(isfinite(n.loss) && n.loss > 0.0f);
    CHECK(counted("cnn convnet, evaluation", convnet_eval, &n, warm, iters) == 0);
    CHECK_OK(ag_context_free(&n.ctx));
    check_set_ctx(NULL);
    free(n.images);
    free(n.labels);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!find_counter()) return reexec_with_counter("alloc_steady", argv);
    /* The worker thread and OpenBLAS on two threads, whatever the caller's
     * environment says. */
    setenv("AG_NUM_THREADS", "2", 1);
    gpt_case("gpt tiny", 1, 2, 32, 32, 8, AG_RECOMPUTE_NONE, 3, 30);
    gpt_case("gpt tiny, every block recomputed", 1, 2, 32, 32, 8, AG_RECOMPUTE_ALL, 3, 30);
    gpt_case("gpt small, two threads", 4, 4, 128, 64, 16, AG_RECOMPUTE_NONE, 3, 5);
    schools_case(50, 2000);
    convnet_case(3, 20);
    return check_summary();
}

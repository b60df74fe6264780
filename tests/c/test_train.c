/*
 * test_train.c: training through the C API.
 *
 *  - a tiny attention model (embedding, layernorm, linear, attention, gelu,
 *    cross-entropy) trains: its loss falls;
 *  - gradients accumulate over two backward passes (2x one pass), a repeated
 *    single pass is bit-identical, ag_zero_grad clears them;
 *  - grad mode off records nothing and its backward returns OK and changes
 *    nothing (also a loss of constants only);
 *  - memory figures are flat across iterations 3..50;
 *  - the optimizers' first steps match hand-computed updates, clipping works;
 *  - checkpoints: save -> load round trip (parameters, user bytes, optimizer
 *    state: training resumes bit-identically), truncated and bit-flipped
 *    files (CHECKPOINT_CORRUPT, nothing changes), other shapes and other
 *    optimizers (CHECKPOINT_MISMATCH), failed saves (IO, no temporary file);
 *  - forward values (and some gradients) of every op against hand-computed
 *    numbers;
 *  - the gradient of every op of ops.def, with respect to each tensor
 *    argument, against central differences;
 *  - only ops the loss depends on are differentiated: a NaN or inf in a dead
 *    branch leaves gradients, clipping and the step bit-identical.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "op_table.h"

/* ------------------------------------------------------------------------ */
/* Value checks                                                              */
/* ------------------------------------------------------------------------ */

static bool close_to(float got, double want, double tol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == (float)want;
    return fabs((double)got - want) <= tol * (1.0 + fabs(want));
}

/* Checks shape dims[0..ndim] and values want[0..n] of tensor t. */
static void expect_tensor(ag_context *c, ag_tensor t, size_t ndim, const size_t *dims,
                          const double *want, double tol, const char *what, int line) {
    size_t got_dims[AG_MAX_DIMS] = {0}, nd = 0, n = 1;
    for (size_t i = 0; i < ndim; i++) n *= dims[i];
    ag_status st = ag_tensor_shape(c, t, got_dims, &nd);
    bool ok = st == AG_STATUS_OK && nd == ndim;
    for (size_t i = 0; ok && i < ndim; i++) ok = got_dims[i] == dims[i];
    if (!check_record(ok, __FILE__, line, what)) {
        fprintf(stderr, "    shape: status %s, rank %zu (want %zu)\n", ag_status_str(st), nd, ndim);
        return;
    }
    float got[256];
    if (!check_record(n <= 256 && ag_tensor_read(c, t, got, n) == AG_STATUS_OK, __FILE__, line, what)) return;
    for (size_t i = 0; i < n; i++) {
        if (!check_record(close_to(got[i], want[i], tol), __FILE__, line, what)) {
            fprintf(stderr, "    element %zu: got %.9g, want %.9g\n", i, (double)got[i], want[i]);
        }
    }
}
#define EXPECT(c, t, dims, want, tol)                                                        \
    expect_tensor((c), (t), sizeof(dims) / sizeof((dims)[0]), (dims), (want), (tol), #t, \
                  __LINE__)

/* Checks the gradient of t against want[0..n]. */
static void expect_grad(ag_context *c, ag_tensor t, size_t n, const double *want, double tol,
                        const char *what, int line) {
    float got[256];
    if (!check_record(n <= 256 && ag_tensor_read_grad(c, t, got, n) == AG_STATUS_OK, __FILE__,
                      line, what)) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!check_record(close_to(got[i], want[i], tol), __FILE__, line, what)) {
            fprintf(stderr, "    grad element %zu: got %.9g, want %.9g\n", i, (double)got[i],
                    want[i]);
        }
    }
}
#define EXPECT_GRAD(c, t, want, tol) \
    expect_grad((c), (t), sizeof(want) / sizeof((want)[0]), (want), (tol), "grad of " #t, __LINE__)

static ag_tensor konst(ag_context *c, size_t ndim, const size_t *dims, const float *v) {
    ag_tensor t = {0, 0, 0};
    CHECK_OK(ag_tensor_new(c, dims, ndim, v, &t));
    return t;
}
#define KONST(c, dims, ...) \
    konst((c), sizeof(dims) / sizeof((dims)[0]), (dims), (const float[]){__VA_ARGS__})

static ag_tensor param(ag_context *c, size_t ndim, const size_t *dims, const float *v) {
    ag_tensor t = {0, 0, 0};
    CHECK_OK(ag_param_new(c, dims, ndim, v, &t));
    return t;
}
#define PARAM(c, dims, ...) \
    param((c), sizeof(dims) / sizeof((dims)[0]), (dims), (const float[]){__VA_ARGS__})

/* ------------------------------------------------------------------------ */
/* The tiny attention model                                                 */
/* ------------------------------------------------------------------------ */

#define V 8
#define C 8
#define T 6
#define NH 2
#define NP 7

typedef struct model {
    ag_tensor p[NP]; /* E [V,C], g [C], b [C], Wqkv [C,3C], bqkv [3C], Wo [C,V], bo [V] */
    int v;           /* vocabulary (V, or V + 1 for the "other shape" model) */
} model;

static const int32_t IDS[T] = {1, 3, 5, 7, 2, 4};
static const int32_t TARGETS[T] = {3, 5, 7, 2, 4, 6};

static size_t numel_of(int i, int v) {
    static const size_t base[NP] = {0, C, C, C * 3 * C, 3 * C, 0, 0};
    if (i == 0) return (size_t)v * C;
    if (i == 5) return (size_t)C * v;
    if (i == 6) return (size_t)v;
    return base[i];
}
static size_t total_params(int v) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += numel_of(i, v);
    return n;
}

/* A context with the model, initialised from a fixed seed. opt: 0 none,
 * 1 AdamW, 2 SGD with momentum. */
static ag_context *new_model(model *m, int v, int opt) {
    ag_context *c = NULL;
    if (ag_context_new(&c) != AG_STATUS_OK) {
        CHECK(false);
        return NULL;
    }
    check_set_ctx(c);
    m->v = v;
    uint32_t s = 12345u;
    static float init[V * 3 * C * 4];
    const size_t shapes[NP][2] = {{(size_t)v, C}, {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0},
                                  {C, (size_t)v}, {(size_t)v, 0}};
    for (int i = 0; i < NP; i++) {
        size_t n = numel_of(i, v);
        for (size_t k = 0; k < n; k++) {
            s = s * 1664525u + 1013904223u;
            float u = (float)(s >> 8) / 16777216.0f - 0.5f; /* [-0.5, 0.5) */
            init[k] = i == 1 ? 1.0f : (i == 2 || i == 4 || i == 6) ? 0.0f : 0.6f * u;
        }
        size_t nd = shapes[i][1] == 0 ? 1 : 2;
        CHECK_OK(ag_param_new(c, shapes[i], nd, init, &m->p[i]));
    }
    if (opt == 1) CHECK_OK(ag_optimizer_adamw(c, 0.05f, 0.9f, 0.99f, 1e-8f, 0.001f));
    if (opt == 2) CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.9f, 0.0f));
    return c;
}

/* Forward pass of the current iteration; writes the loss handle. */
static ag_status forward(ag_context *c, const model *m, ag_tensor *loss) {
    ag_tensor x, n, qkv, q3, att, a2, r, a, logits;
    ag_status st = ag_embedding(c, m->p[0], IDS, T, &x);                        /* [T,C] */
    if (!st) st = ag_layernorm(c, x, m->p[1], m->p[2], &n);                     /* [T,C] */
    if (!st) st = ag_linear(c, n, m->p[3], &m->p[4], &qkv);                     /* [T,3C] */
    if (!st) st = ag_reshape(c, qkv, (const size_t[]){1, T, 3 * C}, 3, &q3);    /* [1,T,3C] */
    if (!st) st = ag_attention(c, q3, NH, &att);                                /* [1,T,C] */
    if (!st) st = ag_reshape(c, att, (const size_t[]){T, C}, 2, &a2);           /* [T,C] */
    if (!st) st = ag_add(c, x, a2, &r);                                         /* [T,C] */
    if (!st) st = ag_gelu(c, r, &a);                                            /* [T,C] */
    if (!st) st = ag_linear(c, a, m->p[5], &m->p[6], &logits);                  /* [T,V] */
    if (!st) st = ag_cross_entropy(c, logits, TARGETS, T, loss);                /* [1] */
    return st;
}

/* reset, forward, backward, step, zero_grad. */
static ag_status train_step(ag_context *c, const model *m, float *loss) {
    ag_tensor l;
    ag_status st = ag_reset(c);
    if (!st) st = forward(c, m, &l);
    if (!st) st = ag_tensor_item(c, l, loss);
    if (!st) st = ag_backward(c, l);
    if (!st) st = ag_optimizer_step(c);
    if (!st) st = ag_zero_grad(c);
    return st;
}

/* All parameter values (or gradients) concatenated into dst. */
static ag_status read_all(ag_context *c, const model *m, float *dst, bool grad) {
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        size_t n = numel_of(i, m->v);
        ag_status st = grad ? ag_tensor_read_grad(c, m->p[i], dst + off, n)
                            : ag_tensor_read(c, m->p[i], dst + off, n);
        if (st) return st;
        off += n;
    }
    return AG_STATUS_OK;
}

#define NTOT (V * C + C + C + C * 3 * C + 3 * C + C * V + V)

/* ------------------------------------------------------------------------ */

static void test_loss_falls(void) {
    check_begin("loss falls");
    model m;
    ag_context *c = new_model(&m, V, 1);
    REQUIRE(c != NULL);
    float losses[60];
    for (int i = 0; i < 60; i++) {
        losses[i] = NAN;
        CHECK_OK(train_step(c, &m, &losses[i]));
        CHECK(isfinite(losses[i]));
    }
    printf("tiny attention model: loss %.4f -> %.4f -> %.4f (steps 1, 20, 60)\n",
           (double)losses[0], (double)losses[19], (double)losses[59]);
    /* Chance level is ln 8 = 2.08; memorising 6 transitions drives it to ~0. */
    CHECK(losses[0] > 1.5f && losses[0] < 2.8f);
    CHECK(losses[19] < losses[0]);
    CHECK(losses[59] < 0.2f * losses[0]);
    CHECK_OK(ag_context_free(&c));
}

static void test_grad_accumulation(void) {
    check_begin("gradient accumulation");
    model m;
    ag_context *c = new_model(&m, V, 0);
    REQUIRE(c != NULL);
    static float g1[NTOT], g2[NTOT], g3[NTOT];
    ag_tensor l;
    REQUIRE_OK(forward(c, &m, &l));
    REQUIRE_OK(ag_backward(c, l));
    CHECK_OK(read_all(c, &m, g1, true));
    /* Second iteration, no zero_grad: gradients add up. */
    CHECK_OK(ag_reset(c));
    REQUIRE_OK(forward(c, &m, &l));
    REQUIRE_OK(ag_backward(c, l));
    CHECK_OK(read_all(c, &m, g2, true));
    int bad = 0, nonzero = 0;
    for (int i = 0; i < NTOT; i++) {
        double want = 2.0 * g1[i];
        if (fabs(g2[i] - want) > 1e-7 + 1e-5 * fabs(want)) bad++;
        nonzero += g1[i] != 0.0f;
    }
    CHECK(bad == 0);
    CHECK(nonzero > NTOT / 2);
    /* zero_grad clears every gradient exactly. */
    CHECK_OK(ag_zero_grad(c));
    CHECK_OK(read_all(c, &m, g3, true));
    int zeros = 0;
    for (int i = 0; i < NTOT; i++) zeros += g3[i] == 0.0f;
    CHECK(zeros == NTOT);
    /* One more single pass: bit-identical to the first one. */
    CHECK_OK(ag_reset(c));
    REQUIRE_OK(forward(c, &m, &l));
    REQUIRE_OK(ag_backward(c, l));
    CHECK_OK(read_all(c, &m, g3, true));
    CHECK(memcmp(g1, g3, sizeof g1) == 0);
    CHECK_OK(ag_context_free(&c));
}

static void test_grad_mode_off(void) {
    check_begin("grad mode off");
    model m;
    ag_context *c = new_model(&m, V, 0);
    REQUIRE(c != NULL);
    static float g0[NTOT], g1[NTOT];
    ag_tensor l;
    float loss_on = 0, loss_off = 1, none[1];
    REQUIRE_OK(forward(c, &m, &l));
    CHECK_OK(ag_tensor_item(c, l, &loss_on));
    REQUIRE_OK(ag_backward(c, l));
    CHECK_OK(read_all(c, &m, g0, true)); /* non-zero gradients to protect */

    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_set_grad_enabled(c, false));
    REQUIRE_OK(forward(c, &m, &l));
    CHECK_OK(ag_tensor_item(c, l, &loss_off));
    CHECK(memcmp(&loss_on, &loss_off, sizeof loss_on) == 0); /* same forward values */
    ag_memory_stats_t mf;
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.tape_len == 0);
    CHECK_OK(ag_backward(c, l)); /* nothing recorded: a no-op */
    CHECK_OK(read_all(c, &m, g1, true));
    CHECK(memcmp(g0, g1, sizeof g0) == 0);
    CHECK_ERR(c, ag_tensor_read_grad(c, l, none, 1), AG_STATUS_SEQUENCE, "tensor_read_grad", "no gradient");
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.tape_len == 0);

    /* Built with grad mode off, backward after turning it back on: still OK
     * and nothing changes (what counts is the mode the loss was built in). */
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_set_grad_enabled(c, false));
    REQUIRE_OK(forward(c, &m, &l));
    CHECK_OK(ag_set_grad_enabled(c, true));
    CHECK_OK(ag_backward(c, l));
    CHECK_OK(read_all(c, &m, g1, true));
    CHECK(memcmp(g0, g1, sizeof g0) == 0);

    /* Grad mode on, but the loss depends on constants only: OK, no change. */
    CHECK_OK(ag_reset(c));
    const size_t s3[1] = {3};
    ag_tensor k = KONST(c, s3, 1, 2, 3), ks = {0, 0, 0};
    CHECK_OK(ag_sum(c, k, &ks));
    CHECK_OK(ag_backward(c, ks));
    CHECK_OK(read_all(c, &m, g1, true));
    CHECK(memcmp(g0, g1, sizeof g0) == 0);

    /* Back on: recording resumes. */
    CHECK_OK(ag_reset(c));
    REQUIRE_OK(forward(c, &m, &l));
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.tape_len > 0);
    CHECK_OK(ag_context_free(&c));
}

static void test_memory_stats(void) {
    check_begin("memory stats");
    model m;
    ag_context *c = new_model(&m, V, 1);
    REQUIRE(c != NULL);
    ag_memory_stats_t mf, at3;
    memset(&at3, 0, sizeof at3);
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.param_count == NP);
    CHECK(mf.param_bytes >= 2 * 4 * total_params(V)); /* values + gradients */
    CHECK(mf.optimizer_bytes >= 2 * 4 * total_params(V)); /* AdamW: two moments */
    CHECK(mf.arena_limit_bytes == 0);
    int flat = 0;
    for (int it = 1; it <= 50; it++) {
        CHECK_OK(ag_reset(c));
        CHECK_OK(ag_memory_stats(c, &mf));
        CHECK(mf.tape_len == 0);
        CHECK(mf.live_tensors == mf.param_count);
        CHECK(mf.arena_used_bytes == 0);
        ag_tensor l;
        REQUIRE_OK(forward(c, &m, &l));
        CHECK_OK(ag_backward(c, l));
        CHECK_OK(ag_optimizer_step(c));
        CHECK_OK(ag_zero_grad(c));
        CHECK_OK(ag_memory_stats(c, &mf));
        CHECK(mf.tape_len > 0 && mf.tape_len <= mf.tape_capacity);
        CHECK(mf.live_tensors > mf.param_count && mf.live_tensors <= mf.table_capacity);
        CHECK(mf.arena_used_bytes > 0 && mf.arena_used_bytes <= mf.arena_high_water_bytes);
        CHECK(mf.arena_high_water_bytes <= mf.arena_reserved_bytes);
        if (it == 3) at3 = mf;
        if (it > 3) {
            flat += mf.arena_high_water_bytes == at3.arena_high_water_bytes &&
                    mf.arena_reserved_bytes == at3.arena_reserved_bytes &&
                    mf.arena_used_bytes == at3.arena_used_bytes &&
                    mf.tape_capacity == at3.tape_capacity &&
                    mf.table_capacity == at3.table_capacity &&
                    mf.param_bytes == at3.param_bytes && mf.optimizer_bytes == at3.optimizer_bytes;
        }
    }
    CHECK(flat == 47);
    CHECK(mf.resets == 50);
    printf("memory: arena high-water %llu B (reserved %llu B) flat over iterations 3..50, "
           "tape %llu ops, %llu live tensors\n",
           (unsigned long long)at3.arena_high_water_bytes,
           (unsigned long long)at3.arena_reserved_bytes, (unsigned long long)at3.tape_len,
           (unsigned long long)at3.live_tensors);
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.live_tensors == mf.param_count && mf.tape_len == 0);
    CHECK_OK(ag_context_free(&c));
}

static void test_optimizer_updates(void) {
    check_begin("optimizer updates by hand");
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    /* SGD, momentum 0.5: loss = sum(p * x), so g = x. */
    const size_t s3[1] = {3};
    ag_tensor p = PARAM(c, s3, 1.0f, -2.0f, 0.5f);
    CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.5f, 0.0f));
    ag_tensor x, y, l;
    for (int step = 0; step < 2; step++) {
        CHECK_OK(ag_reset(c));
        x = KONST(c, s3, 2.0f, 4.0f, -1.0f);
        CHECK_OK(ag_mul(c, p, x, &y));
        CHECK_OK(ag_sum(c, y, &l));
        CHECK_OK(ag_backward(c, l));
        CHECK_OK(ag_optimizer_step(c));
        CHECK_OK(ag_zero_grad(c));
    }
    /* v1 = g, p1 = p0 - 0.1 g; v2 = 0.5 g + g = 1.5 g, p2 = p1 - 0.15 g = p0 - 0.25 g */
    const double want_sgd[3] = {1.0 - 0.5, -2.0 - 1.0, 0.5 + 0.25};
    EXPECT(c, p, s3, want_sgd, 1e-6);
    /* Learning-rate change takes effect. */
    CHECK_OK(ag_optimizer_set_lr(c, 0.2f));
    CHECK_OK(ag_context_free(&c));

    /* AdamW, first step: m_hat = g, v_hat = g^2, so
     * p1 = p0 - lr (g / (|g| + eps) + wd p0) = p0 - lr (sign(g) + wd p0). */
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    p = PARAM(c, s3, 1.0f, -2.0f, 0.5f);
    CHECK_OK(ag_optimizer_adamw(c, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f));
    x = KONST(c, s3, 2.0f, 4.0f, -1.0f);
    CHECK_OK(ag_mul(c, p, x, &y));
    CHECK_OK(ag_sum(c, y, &l));
    CHECK_OK(ag_backward(c, l));
    /* Clipping: norm of g = sqrt(4 + 16 + 1) = sqrt(21); clip to 1. */
    float norm = 0;
    CHECK_OK(ag_clip_grad_norm(c, 1.0f, &norm));
    CHECK(close_to(norm, sqrt(21.0), 1e-6));
    const double s21 = sqrt(21.0);
    const double want_g[3] = {2.0 / s21, 4.0 / s21, -1.0 / s21};
    EXPECT_GRAD(c, p, want_g, 1e-5);
    CHECK_OK(ag_clip_grad_norm(c, 10.0f, &norm)); /* under the bound: unchanged */
    CHECK(close_to(norm, 1.0, 1e-5));
    EXPECT_GRAD(c, p, want_g, 1e-5);
    CHECK_OK(ag_optimizer_step(c));
    const double want_adam[3] = {1.0 - 0.01 * (1.0 + 0.1), -2.0 - 0.01 * (1.0 - 0.2),
                                 0.5 - 0.01 * (-1.0 + 0.05)};
    EXPECT(c, p, s3, want_adam, 1e-6);
    CHECK_OK(ag_context_free(&c));
}

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

static char dir[64];

static bool file_bytes(const char *path, uint8_t **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(n > 0 ? (size_t)n : 1);
    bool ok = n > 0 && *data != NULL && fread(*data, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    *len = ok ? (size_t)n : 0;
    return ok;
}

static bool write_bytes(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* Number of entries in `dir` whose name contains `needle`. */
static int count_files(const char *needle) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, needle) != NULL) n++;
    }
    closedir(d);
    return n;
}

/* Every checkpoint validation error starts with this (file or bytes). */
#define CORRUPT "checkpoint_load: checkpoint corrupt: "

static void test_checkpoint(void) {
    check_begin("checkpoint");
    strcpy(dir, "/tmp/ag_test_train.XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    char path[128], other[128];
    snprintf(path, sizeof path, "%s/model.ckpt", dir);

    uint8_t user[37];
    for (int i = 0; i < 37; i++) user[i] = (uint8_t)((i * 7) ^ 0x5A);
    user[5] = 0; /* opaque bytes, zeros included */
    user[36] = 0;

    model ma, mb;
    ag_context *a = new_model(&ma, V, 1), *b = new_model(&mb, V, 1);
    REQUIRE(a != NULL && b != NULL);
    float l, la[2], lb[2];
    for (int i = 0; i < 3; i++) CHECK_OK(train_step(a, &ma, &l));
    check_set_ctx(a);
    CHECK_OK(ag_checkpoint_save(a, path, user, sizeof user));
    CHECK(count_files(".tmp") == 0);
    static float saved[NTOT], pb[NTOT], now[NTOT];
    CHECK_OK(read_all(a, &ma, saved, false));
    for (int i = 0; i < 2; i++) CHECK_OK(train_step(a, &ma, &la[i]));

    /* Load into a context that trained differently. */
    CHECK_OK(train_step(b, &mb, &l));
    CHECK_OK(read_all(b, &mb, pb, false));
    CHECK(memcmp(pb, saved, sizeof pb) != 0);
    uint8_t ubuf[64];
    memset(ubuf, 0xCC, sizeof ubuf);
    size_t ulen = 0;
    check_set_ctx(b);
    CHECK_OK(ag_checkpoint_load(b, path, ubuf, sizeof ubuf, &ulen));
    CHECK(ulen == sizeof user);
    CHECK(memcmp(ubuf, user, sizeof user) == 0);
    CHECK(ubuf[sizeof user] == 0xCC); /* nothing written past the user bytes */
    CHECK_OK(read_all(b, &mb, now, false));
    CHECK(memcmp(now, saved, sizeof now) == 0);
    /* Optimizer moments and step count came back too: training resumes
     * bit-identically to the uninterrupted run. */
    for (int i = 0; i < 2; i++) CHECK_OK(train_step(b, &mb, &lb[i]));
    CHECK(memcmp(la, lb, sizeof la) == 0);
    static float pa[NTOT];
    CHECK_OK(read_all(a, &ma, pa, false));
    CHECK_OK(read_all(b, &mb, now, false));
    CHECK(memcmp(pa, now, sizeof pa) == 0);

    /* The same from memory, into a fresh context; an exact-size user buffer. */
    uint8_t *bytes = NULL;
    size_t n = 0;
    CHECK(file_bytes(path, &bytes, &n));
    model mc;
    ag_context *cc = new_model(&mc, V, 1);
    if (cc != NULL && bytes != NULL) {
        CHECK_OK(ag_checkpoint_load_bytes(cc, bytes, n, ubuf, sizeof user, &ulen));
        CHECK(ulen == sizeof user && memcmp(ubuf, user, sizeof user) == 0);
        CHECK_OK(read_all(cc, &mc, now, false));
        CHECK(memcmp(now, saved, sizeof now) == 0);
    }
    if (cc != NULL) CHECK_OK(ag_context_free(&cc));

    /* Truncated at every byte (in memory) and at a few offsets (as files):
     * CHECKPOINT_CORRUPT, parameters and out-parameters untouched. */
    check_set_ctx(b);
    CHECK_OK(read_all(b, &mb, pb, false));
    if (bytes != NULL) {
        int wrong = 0;
        for (size_t cut = 0; cut < n; cut++) {
            ulen = 4242;
            ag_status st = ag_checkpoint_load_bytes(b, bytes, cut, ubuf, sizeof ubuf, &ulen);
            if (st != AG_STATUS_CHECKPOINT_CORRUPT || ulen != 4242 ||
                strncmp(ag_context_last_error(b), CORRUPT, strlen(CORRUPT)) != 0) {
                if (wrong++ < 5) {
                    fprintf(stderr, "    truncated at %zu of %zu: %s: %s\n", cut, n,
                            ag_status_str(st), ag_context_last_error(b));
                }
            }
        }
        CHECK(wrong == 0);
        const size_t cuts[] = {0, 1, 8, 12, 20, n / 2, n - 5, n - 4, n - 1};
        snprintf(other, sizeof other, "%s/truncated.ckpt", dir);
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            CHECK(write_bytes(other, bytes, cuts[i]));
            ulen = 4242;
            CHECK_ERR(b, ag_checkpoint_load(b, other, ubuf, sizeof ubuf, &ulen),
                      AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: ");
            CHECK(ulen == 4242);
        }
        /* Single bit flips anywhere are caught. */
        wrong = 0;
        for (size_t i = 0; i < n; i += 3) {
            bytes[i] ^= (uint8_t)(1u << (i % 8));
            ag_status st = ag_checkpoint_load_bytes(b, bytes, n, ubuf, sizeof ubuf, &ulen);
            if ((st != AG_STATUS_CHECKPOINT_CORRUPT ||
                 strncmp(ag_context_last_error(b), CORRUPT, strlen(CORRUPT)) != 0) &&
                wrong++ < 5) {
                fprintf(stderr, "    bit flip at byte %zu: %s: %s\n", i, ag_status_str(st),
                        ag_context_last_error(b));
            }
            bytes[i] ^= (uint8_t)(1u << (i % 8));
        }
        CHECK(wrong == 0);
        /* Trailing garbage. */
        uint8_t *longer = malloc(n + 3);
        if (longer != NULL) {
            memcpy(longer, bytes, n);
            memset(longer + n, 0, 3);
            CHECK_ERR(b, ag_checkpoint_load_bytes(b, longer, n + 3, ubuf, sizeof ubuf, &ulen),
                      AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: ");
            free(longer);
        }
    }
    CHECK_OK(read_all(b, &mb, now, false));
    CHECK(memcmp(now, pb, sizeof now) == 0);
    free(bytes);

    /* Another model shape, another optimizer, no optimizer: MISMATCH. */
    model md;
    for (int kind = 0; kind < 3; kind++) {
        ag_context *d = kind == 0 ? new_model(&md, V + 1, 1) : new_model(&md, V, kind == 1 ? 2 : 0);
        if (d == NULL) continue;
        static float before[NTOT + 2 * C + 1], after[NTOT + 2 * C + 1];
        CHECK_OK(read_all(d, &md, before, false));
        ulen = 4242;
        CHECK_ERR(d, ag_checkpoint_load(d, path, ubuf, sizeof ubuf, &ulen),
                  AG_STATUS_CHECKPOINT_MISMATCH, "checkpoint_load: checkpoint does not match the model: ",
                  kind == 0 ? "parameter 0" : "optimizer");
        CHECK(ulen == 4242);
        CHECK_OK(read_all(d, &md, after, false));
        CHECK(memcmp(before, after, total_params(md.v) * sizeof(float)) == 0);
        CHECK_OK(ag_context_free(&d));
    }

    /* Saving into a missing folder: IO, nothing left behind. */
    check_set_ctx(a);
    snprintf(other, sizeof other, "%s/missing/model.ckpt", dir);
    CHECK_ERR(a, ag_checkpoint_save(a, other, user, sizeof user), AG_STATUS_IO,
              "checkpoint_save", "missing/model.ckpt");
    snprintf(other, sizeof other, "%s/missing", dir);
    CHECK(access(other, F_OK) != 0);
    CHECK(count_files(".tmp") == 0);
    /* Saving onto a folder: the temporary file is written, the rename fails,
     * and the temporary file is removed. */
    snprintf(other, sizeof other, "%s/folder", dir);
    CHECK(mkdir(other, 0700) == 0);
    CHECK_ERR(a, ag_checkpoint_save(a, other, user, sizeof user), AG_STATUS_IO,
              "checkpoint_save", "folder");
    CHECK(count_files(".tmp") == 0);
    rmdir(other);
    /* A save that cannot create its temporary file leaves the earlier
     * checkpoint intact (only meaningful when not root: root ignores modes). */
    if (geteuid() != 0) {
        CHECK(chmod(dir, 0500) == 0);
        CHECK_ERR(a, ag_checkpoint_save(a, path, NULL, 0), AG_STATUS_IO, "checkpoint_save");
        CHECK(chmod(dir, 0700) == 0);
        CHECK_OK(ag_checkpoint_load(b, path, ubuf, sizeof ubuf, &ulen));
        CHECK(ulen == sizeof user);
        CHECK_OK(read_all(b, &mb, now, false));
        CHECK(memcmp(now, saved, sizeof now) == 0);
        /* A folder that can be written but not opened (0300): the temporary
         * file and the rename work, the fsync of the folder cannot. As
         * documented, the save then returns IO with a message saying the new
         * file is in place (the rename happened); no temporary file is left. */
        CHECK(chmod(dir, 0300) == 0);
        ag_status st = ag_checkpoint_save(a, path, NULL, 0);
        CHECK(chmod(dir, 0700) == 0);
        CHECK(count_files(".tmp") == 0);
        ulen = 4242;
        CHECK_OK(ag_checkpoint_load(b, path, ubuf, sizeof ubuf, &ulen));
        if (st != AG_STATUS_OK) {
            CHECK(st == AG_STATUS_IO);
            CHECK(strstr(ag_context_last_error(a), "renamed into place") != NULL);
            st = AG_STATUS_OK; /* the new file is in place either way */
        }
        if (st == AG_STATUS_OK) CHECK(ulen == 0);
    } else {
        printf("checkpoint: running as root, folder-permission checks skipped\n");
    }
    /* Overwriting an existing checkpoint. */
    CHECK_OK(ag_checkpoint_save(a, path, NULL, 0));
    CHECK_OK(ag_checkpoint_load(b, path, NULL, 0, &ulen));
    CHECK(ulen == 0);
    CHECK_OK(read_all(b, &mb, now, false));
    CHECK(memcmp(now, pa, sizeof now) == 0);
    CHECK(count_files(".tmp") == 0);

    CHECK_OK(ag_context_free(&a));
    CHECK_OK(ag_context_free(&b));
    unlink(path);
    snprintf(other, sizeof other, "%s/truncated.ckpt", dir);
    unlink(other);
    CHECK(rmdir(dir) == 0); /* empty: nothing else was left behind */
}

/* ------------------------------------------------------------------------ */
/* Op values against hand-computed numbers                                   */
/* ------------------------------------------------------------------------ */

static void test_op_values(void) {
    check_begin("op values");
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    const double LN2 = 0.69314718055994531, LN3 = 1.0986122886681098, E = 2.718281828459045;
    const double tol = 2e-6;
    ag_tensor o = {0, 0, 0}, o2 = {0, 0, 0};

    /* Parameters first (before any activation). */
    const size_t s22[2] = {2, 2}, s23[2] = {2, 3}, s3[1] = {3}, s32[2] = {3, 2};
    ag_tensor lw = PARAM(c, s23, 1, 0, -1, 2, 1, 0);            /* linear w [2,3] */
    ag_tensor lb = PARAM(c, s3, 0.5f, -0.5f, 1.0f);             /* linear bias [3] */
    ag_tensor emb = PARAM(c, s32, 1, 2, 3, 4, 5, 6);            /* embedding [3,2] */
    ag_tensor ce = PARAM(c, s23, 0, (float)LN2, (float)LN3, 0, 0, 0); /* logits [2,3] */
    ag_tensor up = PARAM(c, s3, 0.5f, 2.0f, -1.0f);             /* unary ops */

    /* ag_linear: [[1,2],[3,4]] @ [[1,0,-1],[2,1,0]] + [0.5,-0.5,1] */
    CHECK_OK(ag_reset(c));
    ag_tensor x = KONST(c, s22, 1, 2, 3, 4);
    CHECK_OK(ag_linear(c, x, lw, &lb, &o));
    const double want_lin[6] = {5.5, 1.5, 0, 11.5, 3.5, -2};
    EXPECT(c, o, s23, want_lin, tol);
    CHECK_OK(ag_sum(c, o, &o2));
    CHECK_OK(ag_backward(c, o2));
    const double dlw[6] = {4, 4, 4, 6, 6, 6}; /* column sums of x, per output */
    const double dlb[3] = {2, 2, 2};
    EXPECT_GRAD(c, lw, dlw, tol);
    EXPECT_GRAD(c, lb, dlb, tol);
    CHECK_OK(ag_zero_grad(c));
    /* Without bias, and matmul with transposes: x^T @ x = [[10,14],[14,20]]. */
    CHECK_OK(ag_reset(c));
    x = KONST(c, s22, 1, 2, 3, 4);
    CHECK_OK(ag_linear(c, x, lw, NULL, &o));
    const double want_lin0[6] = {5, 2, -1, 11, 4, -3};
    EXPECT(c, o, s23, want_lin0, tol);
    CHECK_OK(ag_matmul(c, x, x, true, false, &o));
    const double want_xtx[4] = {10, 14, 14, 20};
    EXPECT(c, o, s22, want_xtx, tol);
    CHECK_OK(ag_matmul(c, x, x, false, true, &o)); /* x x^T = [[5,11],[11,25]] */
    const double want_xxt[4] = {5, 11, 11, 25};
    EXPECT(c, o, s22, want_xxt, tol);

    /* ag_layernorm: rows [1,2,3] and [2,2,2], w [1,2,0.5], b [0.1,0.2,0.3]. */
    x = KONST(c, s23, 1, 2, 3, 2, 2, 2);
    ag_tensor w = KONST(c, s3, 1, 2, 0.5f), b = KONST(c, s3, 0.1f, 0.2f, 0.3f);
    CHECK_OK(ag_layernorm(c, x, w, b, &o));
    const double want_ln[6] = {-1.1247356859083901, 0.2, 0.912367842954195, 0.1, 0.2, 0.3};
    EXPECT(c, o, s23, want_ln, 1e-5);

    /* ag_gelu (tanh approximation). */
    const size_t s5[1] = {5};
    x = KONST(c, s5, -1, 0, 1, 2, -3);
    CHECK_OK(ag_gelu(c, x, &o));
    const double want_gelu[5] = {-0.15880800939172324, 0.0, 0.8411919906082768,
                                 1.954597694087775, -0.0036373920817729943};
    EXPECT(c, o, s5, want_gelu, 1e-5);

    /* ag_attention, B=1, T=2, C=2, one head, scale 1/sqrt(2): row 0 sees only
     * itself (out = v0); row 1 scores [0, ln 3] -> weights [1/4, 3/4]. */
    const size_t s126[3] = {1, 2, 6}, s122[3] = {1, 2, 2};
    const float k1 = (float)(1.4142135623730951 * LN3);
    /*                   q0     k0     v0     q1     k1      v1 */
    x = KONST(c, s126, 1, 0, 0, 0, 4, 8, 1, 0, k1, 0, 8, 0);
    CHECK_OK(ag_attention(c, x, 1, &o));
    const double want_att[4] = {4, 8, 7, 2};
    EXPECT(c, o, s122, want_att, 1e-5);
    /* Two heads: head 0 (channels 0-1) as above; head 1 (channels 2-3) has
     * k = 0, so row 1 gets the plain average of its v rows. */
    const size_t s1212[3] = {1, 2, 12}, s124[3] = {1, 2, 4};
    /* C = 4, two heads of 2 channels; each row is [q(4) | k(4) | v(4)]. */
    x = KONST(c, s1212,
              1, 0, 1, 0,   0, 0, 0, 0,    4, 8, 2, 6,
              1, 0, 1, 0,   k1, 0, 0, 0,   8, 0, 4, 2);
    CHECK_OK(ag_attention(c, x, 2, &o));
    const double want_att2[8] = {4, 8, 2, 6, 7, 2, 3, 4};
    EXPECT(c, o, s124, want_att2, 1e-5);

    /* ag_embedding and its gradient (scatter-add). */
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_embedding(c, emb, (const int32_t[]){2, 0, 2}, 3, &o));
    const double want_emb[6] = {5, 6, 1, 2, 5, 6};
    EXPECT(c, o, s32, want_emb, 0);
    CHECK_OK(ag_sum(c, o, &o2));
    CHECK_OK(ag_backward(c, o2));
    const double demb[6] = {1, 1, 0, 0, 2, 2};
    EXPECT_GRAD(c, emb, demb, 0);
    CHECK_OK(ag_zero_grad(c));

    /* ag_softmax: [0, ln2, ln3] -> [1,2,3]/6; scale 2 -> [1,4,9]/14; causal. */
    CHECK_OK(ag_reset(c));
    x = KONST(c, s3, 0, (float)LN2, (float)LN3);
    CHECK_OK(ag_softmax(c, x, false, 1.0f, &o));
    const double want_sm[3] = {1.0 / 6, 2.0 / 6, 3.0 / 6};
    EXPECT(c, o, s3, want_sm, 1e-6);
    CHECK_OK(ag_softmax(c, x, false, 2.0f, &o));
    const double want_sm2[3] = {1.0 / 14, 4.0 / 14, 9.0 / 14};
    EXPECT(c, o, s3, want_sm2, 1e-6);
    x = KONST(c, s23, 0, 0, 0, 0, 0, 0); /* Tq = 2, Tk = 3: row i sees columns 0..i+1 */
    CHECK_OK(ag_softmax(c, x, true, 1.0f, &o));
    const double want_smc[6] = {0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
    EXPECT(c, o, s23, want_smc, 1e-6);

    /* ag_cross_entropy: rows [0, ln2, ln3] -> target 2: ln 2; [0,0,0] -> 1:
     * ln 3; mean ln(6)/2. Gradient (softmax - onehot) / rows. */
    CHECK_OK(ag_cross_entropy(c, ce, (const int32_t[]){2, 1}, 2, &o));
    const size_t s1[1] = {1};
    const double want_ce[1] = {0.8958797346140275};
    EXPECT(c, o, s1, want_ce, 1e-6);
    CHECK_OK(ag_backward(c, o));
    const double dce[6] = {1.0 / 12, 1.0 / 6, -0.25, 1.0 / 6, -1.0 / 3, 1.0 / 6};
    EXPECT_GRAD(c, ce, dce, 1e-6);
    CHECK_OK(ag_zero_grad(c));

    /* Reductions over [[1,2,3],[4,5,6]]. */
    CHECK_OK(ag_reset(c));
    x = KONST(c, s23, 1, 2, 3, 4, 5, 6);
    const size_t s21[2] = {2, 1}, s2[1] = {2}, s13[2] = {1, 3};
    CHECK_OK(ag_sum_axis(c, x, 0, false, &o));
    const double want_s0[3] = {5, 7, 9};
    EXPECT(c, o, s3, want_s0, 0);
    CHECK_OK(ag_sum_axis(c, x, 1, true, &o));
    const double want_s1[2] = {6, 15};
    EXPECT(c, o, s21, want_s1, 0);
    CHECK_OK(ag_sum_axis(c, x, -1, false, &o));
    EXPECT(c, o, s2, want_s1, 0);
    CHECK_OK(ag_mean_axis(c, x, 0, true, &o));
    const double want_m0[3] = {2.5, 3.5, 4.5};
    EXPECT(c, o, s13, want_m0, 1e-7);
    CHECK_OK(ag_mean_axis(c, x, -1, false, &o));
    const double want_m1[2] = {2, 5};
    EXPECT(c, o, s2, want_m1, 1e-7);
    CHECK_OK(ag_sum(c, x, &o));
    const double want_sum[1] = {21};
    EXPECT(c, o, s1, want_sum, 0);
    CHECK_OK(ag_mean(c, x, &o));
    const double want_mean[1] = {3.5};
    EXPECT(c, o, s1, want_mean, 1e-7);

    /* ag_transpose and ag_permute. */
    CHECK_OK(ag_transpose(c, x, 0, 1, &o));
    const double want_tr[6] = {1, 4, 2, 5, 3, 6};
    EXPECT(c, o, s32, want_tr, 0);
    float v24[24];
    for (int i = 0; i < 24; i++) v24[i] = (float)i;
    const size_t s234[3] = {2, 3, 4}, s423[3] = {4, 2, 3};
    ag_tensor x3 = konst(c, 3, s234, v24);
    CHECK_OK(ag_permute(c, x3, (const size_t[]){2, 0, 1}, 3, &o));
    double want_perm[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++) want_perm[i * 6 + j * 3 + k] = j * 12 + k * 4 + i;
    EXPECT(c, o, s423, want_perm, 0);
    CHECK_OK(ag_transpose(c, x3, 2, 0, &o)); /* [4,3,2]: out[i][j][k] = x[k][j][i] */
    const size_t s432[3] = {4, 3, 2};
    double want_tr3[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++) want_tr3[i * 6 + j * 2 + k] = k * 12 + j * 4 + i;
    EXPECT(c, o, s432, want_tr3, 0);
    CHECK_OK(ag_reshape(c, x3, (const size_t[]){6, 4}, 2, &o));
    const size_t s64[2] = {6, 4};
    double want_rs[24];
    for (int i = 0; i < 24; i++) want_rs[i] = i;
    EXPECT(c, o, s64, want_rs, 0);

    /* ag_bmm: two batches of 2x2, plain and with a transposed b. */
    const size_t s222[3] = {2, 2, 2};
    ag_tensor ba = KONST(c, s222, 1, 2, 3, 4, 0, 1, 1, 0);
    ag_tensor bb = KONST(c, s222, 5, 6, 7, 8, 2, 3, 4, 5);
    CHECK_OK(ag_bmm(c, ba, bb, false, false, &o));
    const double want_bmm[8] = {19, 22, 43, 50, 4, 5, 2, 3};
    EXPECT(c, o, s222, want_bmm, 0);
    CHECK_OK(ag_bmm(c, ba, bb, false, true, &o));
    const double want_bmmt[8] = {17, 23, 39, 53, 3, 5, 2, 4};
    EXPECT(c, o, s222, want_bmmt, 0);

    /* Element-wise and broadcasting. */
    ag_tensor row = KONST(c, s3, 10, 20, 30);
    CHECK_OK(ag_add(c, x, row, &o));
    const double want_add[6] = {11, 22, 33, 14, 25, 36};
    EXPECT(c, o, s23, want_add, 0);
    CHECK_OK(ag_sub(c, row, x, &o));
    const double want_sub[6] = {9, 18, 27, 6, 15, 24};
    EXPECT(c, o, s23, want_sub, 0);
    ag_tensor col = KONST(c, s21, 2, -1);
    CHECK_OK(ag_mul(c, x, col, &o));
    const double want_mul[6] = {2, 4, 6, -4, -5, -6};
    EXPECT(c, o, s23, want_mul, 0);
    CHECK_OK(ag_div(c, x, col, &o));
    const double want_div[6] = {0.5, 1, 1.5, -4, -5, -6};
    EXPECT(c, o, s23, want_div, 1e-7);
    CHECK_OK(ag_scale(c, x, -0.5f, &o));
    const double want_scale[6] = {-0.5, -1, -1.5, -2, -2.5, -3};
    EXPECT(c, o, s23, want_scale, 0);
    CHECK_OK(ag_neg(c, x, &o));
    const double want_neg[6] = {-1, -2, -3, -4, -5, -6};
    EXPECT(c, o, s23, want_neg, 0);

    /* Unary maps. */
    const size_t s4[1] = {4};
    x = KONST(c, s4, 0, 1, -1, (float)LN3);
    CHECK_OK(ag_exp(c, x, &o));
    const double want_exp[4] = {1, E, 1 / E, 3};
    EXPECT(c, o, s4, want_exp, 2e-6);
    CHECK_OK(ag_sigmoid(c, x, &o));
    const double want_sig[4] = {0.5, 0.7310585786300049, 0.2689414213699951, 0.75};
    EXPECT(c, o, s4, want_sig, 2e-6);
    CHECK_OK(ag_tanh(c, x, &o));
    const double want_tanh[4] = {0, 0.7615941559557649, -0.7615941559557649, 0.8};
    EXPECT(c, o, s4, want_tanh, 2e-6);
    CHECK_OK(ag_relu(c, x, &o));
    const double want_relu[4] = {0, 1, 0, LN3};
    EXPECT(c, o, s4, want_relu, 1e-7);
    x = KONST(c, s4, 1, (float)E, 0.5f, 0);
    CHECK_OK(ag_log(c, x, &o));
    const double want_log[4] = {0, 1, -LN2, -INFINITY};
    EXPECT(c, o, s4, want_log, 2e-6);
    x = KONST(c, s1, -1);
    CHECK_OK(ag_log(c, x, &o));
    const double want_nan[1] = {NAN}; /* documented: NaN below 0, as IEEE */
    EXPECT(c, o, s1, want_nan, 0);

    /* Gradients of the unary maps, p = [0.5, 2, -1] (rows of ops.def). */
    struct { int op; double d[3]; } un[] = {
        {OP_relu, {1, 1, 0}},
        {OP_exp, {1.6487212707001282, 7.38905609893065, 0.36787944117144233}},
        {OP_sigmoid, {0.2350037122015945, 0.10499358540350662, 0.19661193324148185}},
        {OP_tanh, {0.7864477329659274, 0.07065082485316443, 0.41997434161402614}},
        {OP_neg, {-1, -1, -1}},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        const ag_tensor args[3] = {up, up, up};
        op_scratch scratch;
        op_scratch_init(&scratch);
        CHECK_OK(ag_reset(c));
        CHECK_OK(call_op(un[i].op, c, args, &o, &scratch));
        CHECK_OK(ag_sum(c, o, &o2));
        CHECK_OK(ag_backward(c, o2));
        expect_grad(c, up, 3, un[i].d, 2e-6, OPS[un[i].op].name, __LINE__);
        CHECK_OK(ag_zero_grad(c));
    }
    /* d/dp sum(log(|p| * 2)) = 1/p for p > 0: use [0.5, 2] part via mul. */
    CHECK_OK(ag_reset(c));
    ag_tensor sq = {0, 0, 0};
    CHECK_OK(ag_mul(c, up, up, &sq));
    CHECK_OK(ag_log(c, sq, &o));    /* log(p^2): d = 2/p */
    CHECK_OK(ag_mean(c, o, &o2));   /* mean: / 3 */
    CHECK_OK(ag_backward(c, o2));
    const double dlog[3] = {2.0 / 0.5 / 3, 2.0 / 2.0 / 3, 2.0 / -1.0 / 3};
    EXPECT_GRAD(c, up, dlog, 2e-6);
    CHECK_OK(ag_zero_grad(c));
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_scale(c, up, 3.0f, &o));
    CHECK_OK(ag_sum(c, o, &o2));
    CHECK_OK(ag_backward(c, o2));
    const double dscale[3] = {3, 3, 3};
    EXPECT_GRAD(c, up, dscale, 0);
    CHECK_OK(ag_zero_grad(c));

    CHECK_OK(ag_context_free(&c));
}

/* ------------------------------------------------------------------------ */
/* Every op: gradients through the C API against central differences        */
/* ------------------------------------------------------------------------ */

/* Inputs in [0.55, 1.45], away from every op's kinks and poles (relu and log
 * at 0), distinct within a row (layernorm needs a spread). */
static float grad_input(int op, int pos, size_t i) {
    const float v = 0.55f + 0.1f * (float)((i * 7 + (size_t)pos * 3 + (size_t)op) % 10);
    /* Inside the domains: log1m_exp needs x < 0, log_diff_exp(a, b) a > b. */
    if (op == OP_log1m_exp) return -v;
    if (op == OP_log_diff_exp && pos == 0) return v + 1.0f;
    /* inv_phi needs 0 < x < 1, and [0.25, 0.7] keeps its curvature mild for
     * the step h; the symmetric-matrix ops need a positive-definite [3, 3]:
     * a diagonal of 3.55 or more outweighs the rest of its row. */
    if (op == OP_inv_phi) return 0.25f + 0.5f * (v - 0.55f);
    /* beta_inc's x must lie in [0, 1]: [0.2, 0.65] keeps x +- h inside. */
    if (op == OP_beta_inc && pos == 2) return 0.2f + 0.5f * (v - 0.55f);
    if ((op == OP_cholesky || op == OP_log_det_spd) && i % 4 == 0) return v + 3.0f;
    /* Max pooling: distinct values 0.05 apart (37 is prime to the row's 50
     * elements), so no step of h crosses a window's maximum. */
    if (op == OP_max_pool2d) return 0.05f * (float)((i * 37) % 50);
    return v;
}

/* Weights of the loss sum(out * r): mixed signs, so no output's gradient
 * cancels (the sum of a softmax row is constant, for example). */
static float loss_weight(size_t j) { return -0.6f + 0.37f * (float)(j % 5); }

/* One forward pass of row `op` on parameters p, loss = sum(out * r), and
 * its backward when `backward`. */
static ag_status op_loss(ag_context *c, int op, const ag_tensor p[3], bool backward,
                         float *loss) {
    ag_tensor out = {0, 0, 0}, r = {0, 0, 0}, y = {0, 0, 0}, l = {0, 0, 0};
    size_t dims[AG_MAX_DIMS], nd = 0, n = 0;
    static float w[256];
    op_scratch scratch;
    op_scratch_init(&scratch);
    ag_status st = ag_reset(c);
    if (!st) st = call_op(op, c, p, &out, &scratch);
    if (!st) st = ag_tensor_shape(c, out, dims, &nd);
    if (!st) st = ag_tensor_numel(c, out, &n);
    if (!st && n > 256) st = AG_STATUS_TOO_LARGE;
    for (size_t j = 0; !st && j < n; j++) w[j] = loss_weight(j);
    if (!st) st = ag_tensor_new(c, dims, nd, w, &r);
    if (!st) st = ag_mul(c, out, r, &y);
    if (!st) st = ag_sum(c, y, &l);
    if (!st) st = ag_tensor_item(c, l, loss);
    if (!st && backward) st = ag_backward(c, l);
    return st;
}

/* For every op row of ops.def, with each tensor argument made a parameter:
 * the gradient ag_backward gives it matches central differences of the
 * loss (float32 throughout, hence the step and the tolerance). */
static void test_every_op_gradient(void) {
    const float h = 1e-2f;
    const double tol = 2e-3; /* measured worst: 1.6e-4 */
    int checked = 0;
    double worst = 0;
    const char *worst_fn = "-";
    for (int op = 0; op < OP_COUNT; op++) {
        if (!OPS[op].is_op) continue;
        check_begin(OPS[op].fn);
        ag_context *c = NULL;
        REQUIRE_OK(ag_context_new(&c));
        check_set_ctx(c);
        ag_tensor p[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
        static float v[3][64], analytic[3][64];
        bool fits = true;
        for (int pos = 0; pos < OPS[op].arity; pos++) {
            const op_shape *sh = &OPS[op].shape[pos];
            size_t n = op_numel(op, pos);
            fits = fits && n <= 64;
            for (size_t i = 0; fits && i < n; i++) v[pos][i] = grad_input(op, pos, i);
            if (fits) CHECK_OK(ag_param_new(c, sh->dims, sh->ndim, v[pos], &p[pos]));
        }
        CHECK(fits);
        float l0 = NAN;
        ag_status st = fits ? op_loss(c, op, p, true, &l0) : AG_STATUS_TOO_LARGE;
        if (!check_record(st == AG_STATUS_OK && isfinite(l0), __FILE__, __LINE__,
                          "the op, a weighted sum and backward run")) {
            fprintf(stderr, "    %s: %s: %s\n", OPS[op].fn, ag_status_str(st),
                    ag_context_last_error(c));
            CHECK_OK(ag_context_free(&c));
            continue;
        }
        for (int pos = 0; pos < OPS[op].arity; pos++) {
            CHECK_OK(ag_tensor_read_grad(c, p[pos], analytic[pos], op_numel(op, pos)));
        }
        for (int pos = 0; pos < OPS[op].arity; pos++) {
            size_t n = op_numel(op, pos);
            for (size_t i = 0; i < n; i++) {
                const float keep = v[pos][i], up = keep + h, down = keep - h;
                float lp = NAN, lm = NAN;
                v[pos][i] = up;
                CHECK_OK(ag_param_write(c, p[pos], v[pos], n));
                CHECK_OK(op_loss(c, op, p, false, &lp));
                v[pos][i] = down;
                CHECK_OK(ag_param_write(c, p[pos], v[pos], n));
                CHECK_OK(op_loss(c, op, p, false, &lm));
                v[pos][i] = keep;
                CHECK_OK(ag_param_write(c, p[pos], v[pos], n));
                const double numeric = ((double)lp - (double)lm) / ((double)up - (double)down);
                const double got = analytic[pos][i];
                const double err = fabs(got - numeric) / (1.0 + fabs(numeric));
                if (err > worst) {
                    worst = err;
                    worst_fn = OPS[op].fn;
                }
                if (!check_record(err <= tol, __FILE__, __LINE__,
                                  "gradient matches central differences")) {
                    fprintf(stderr, "    %s argument %d element %zu: backward %.7g, numeric %.7g\n",
                            OPS[op].fn, pos, i, got, numeric);
                }
            }
        }
        checked++;
        CHECK_OK(ag_context_free(&c));
    }
    check_set_ctx(NULL);
    printf("gradients of %d ops match central differences (worst relative error %.2g, %s)\n",
           checked, worst, worst_fn);
}

/*
 * The gradient of a parameter comes only from the loss's graph: ag_backward
 * differentiates only the ops the loss depends on, so a NaN or an infinity
 * in a branch recorded this iteration that does not reach the loss (before
 * or after the loss, hanging off a parameter or off a live intermediate)
 * changes nothing: gradients, clipping norm and the optimizer step are
 * bit-identical to a context that never recorded the dead branch.
 */
typedef struct dead_run {
    float grad[2], norm, after[2];
    ag_status clip, step;
} dead_run;

/* with_dead: 0 none; 1 NaN branch before the loss; 2 inf branch after the
 * loss; 3 a NaN branch hanging off the live intermediate; 4 all of them and
 * a longer dead chain (log of a negative). */
static void dead_branch_run(int with_dead, dead_run *r) {
    memset(r, 0xff, sizeof *r);
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    const size_t s2[1] = {2};
    ag_tensor w = PARAM(c, s2, 1, 2);
    CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.0f, 0.0f));
    ag_tensor xn = KONST(c, s2, NAN, 1), xi = KONST(c, s2, 1, INFINITY), y = KONST(c, s2, 3, 4);
    ag_tensor d1 = {0, 0, 0}, d2 = {0, 0, 0}, d3 = {0, 0, 0}, d4 = {0, 0, 0};
    ag_tensor live = {0, 0, 0}, l = {0, 0, 0};
    if (with_dead == 1 || with_dead == 4) {
        CHECK_OK(ag_mul(c, w, xn, &d1)); /* recorded before the loss, not used by it */
    }
    if (with_dead == 4) {
        CHECK_OK(ag_neg(c, w, &d2));
        CHECK_OK(ag_log(c, d2, &d3)); /* log(-w) = NaN */
        CHECK_OK(ag_sum(c, d3, &d4));
    }
    CHECK_OK(ag_mul(c, w, y, &live));
    if (with_dead == 3 || with_dead == 4) {
        CHECK_OK(ag_mul(c, live, xn, &d1)); /* consumes a live tensor, feeds nothing */
        CHECK_OK(ag_sum(c, d1, &d2));
    }
    CHECK_OK(ag_sum(c, live, &l));
    if (with_dead == 2 || with_dead == 4) {
        CHECK_OK(ag_mul(c, w, xi, &d1)); /* recorded after the loss */
        CHECK_OK(ag_exp(c, d1, &d2));
    }
    CHECK_OK(ag_backward(c, l));
    CHECK_OK(ag_tensor_read_grad(c, w, r->grad, 2));
    r->clip = ag_clip_grad_norm(c, 100.0f, &r->norm);
    r->step = ag_optimizer_step(c);
    CHECK_OK(ag_tensor_read(c, w, r->after, 2));
    CHECK_OK(ag_context_free(&c));
    check_set_ctx(NULL);
}

static void test_dead_branch(void) {
    check_begin("dead branch");
    dead_run control, r;
    dead_branch_run(0, &control);
    CHECK(control.grad[0] == 3.0f && control.grad[1] == 4.0f);
    CHECK_OK(control.clip);
    CHECK(control.norm == 5.0f);
    CHECK_OK(control.step);
    for (int kind = 1; kind <= 4; kind++) {
        dead_branch_run(kind, &r);
        /* Exactly the live branch's gradient: d sum(w * y) / dw = y. */
        if (!check_record(r.grad[0] == 3.0f && r.grad[1] == 4.0f, __FILE__, __LINE__,
                          "a dead branch leaves the parameter gradient exactly the live one")) {
            fprintf(stderr, "    dead branch kind %d: gradient [%g, %g], want [3, 4]\n", kind,
                    (double)r.grad[0], (double)r.grad[1]);
        }
        CHECK_OK(r.clip);
        CHECK(r.norm == 5.0f);
        CHECK_OK(r.step); /* not NON_FINITE */
        CHECK(memcmp(r.after, control.after, sizeof r.after) == 0);
    }
    /* w - 0.1 * [3, 4] */
    CHECK(close_to(control.after[0], 0.7, 1e-7) && close_to(control.after[1], 1.6, 1e-7));
}

int main(void) {
    test_op_values();
    test_every_op_gradient();
    test_loss_falls();
    test_grad_accumulation();
    test_grad_mode_off();
    test_memory_stats();
    test_optimizer_updates();
    test_checkpoint();
    test_dead_branch();
    return check_summary();
}

/*
 * test_capture.c: capture a step once, replay it through the C API.
 *
 * A two-layer model (tanh hidden layer in a recomputed segment, mean
 * squared error) trained with AdamW for K steps twice: eagerly, and by
 * replaying one captured step with a new batch written into the input
 * slots before every replay. Losses, every parameter gradient and the
 * parameters after K steps must be bit-identical (a replay that kept the
 * captured batch diverges at the first step). Then what bad input gets:
 * freed, foreign and forged steps, a lowered arena cap, a parameter added
 * since the capture, ops on a replayed graph, NULL pointers; each refusal
 * names the function and changes nothing. Dropout whose seed is an input
 * slot, rewritten before each replay, against the eager path.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"

enum { B = 8, D = 16, H = 32, K = 5 };

typedef struct model {
    ag_context *c;
    ag_tensor w1, b1, w2;
} model;

static float init_value(int i, int seed) {
    return (float)(((unsigned)i * 2654435761u ^ (unsigned)seed) % 1000u) / 10000.0f - 0.05f;
}

static void batch(int step, float *x, float *y) {
    for (int i = 0; i < B * D; i++) x[i] = sinf(0.37f * (float)i + (float)step);
    for (int i = 0; i < B; i++) y[i] = cosf(0.11f * (float)i * (float)(step + 1));
}

static bool model_new(model *m, bool recompute, bool optimizer) {
    float w1[D * H], b1[H], w2[H];
    for (int i = 0; i < D * H; i++) w1[i] = init_value(i, 1);
    for (int i = 0; i < H; i++) b1[i] = init_value(i, 2);
    for (int i = 0; i < H; i++) w2[i] = init_value(i, 3);
    m->c = NULL;
    if (ag_context_new(&m->c) != AG_STATUS_OK) return false;
    check_set_ctx(m->c);
    CHECK_OK(ag_param_new(m->c, (const size_t[]){D, H}, 2, w1, &m->w1));
    CHECK_OK(ag_param_new(m->c, (const size_t[]){H}, 1, b1, &m->b1));
    CHECK_OK(ag_param_new(m->c, (const size_t[]){H, 1}, 2, w2, &m->w2));
    if (optimizer) CHECK_OK(ag_optimizer_adamw(m->c, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f));
    if (recompute) CHECK_OK(ag_set_recompute(m->c, AG_RECOMPUTE_ALL));
    return true;
}

/* loss = mse(tanh(x w1 + b1) w2, y), the hidden layer in a segment. */
static ag_tensor build(model *m, ag_tensor x, ag_tensor y) {
    ag_context *c = m->c;
    ag_tensor a = {0, 0, 0}, h = a, p = a, loss = a;
    CHECK_OK(ag_segment_begin(c));
    CHECK_OK(ag_linear(c, x, m->w1, &m->b1, &a));
    CHECK_OK(ag_tanh(c, a, &h));
    CHECK_OK(ag_segment_end(c, h));
    CHECK_OK(ag_matmul(c, h, m->w2, false, false, &p));
    CHECK_OK(ag_mse_loss(c, p, y, &loss));
    return loss;
}

static bool same_grads(model *a, model *b) {
    size_t n = 0, n2 = 0;
    CHECK_OK(ag_grads_len(a->c, &n));
    CHECK_OK(ag_grads_len(b->c, &n2));
    if (n != n2) return false;
    float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
    bool same = ga != NULL && gb != NULL && ag_grads_copy_out(a->c, ga, n) == AG_STATUS_OK &&
                ag_grads_copy_out(b->c, gb, n) == AG_STATUS_OK &&
                memcmp(ga, gb, n * sizeof *ga) == 0;
    free(ga);
    free(gb);
    return same;
}

static bool same_params(model *a, model *b) {
    float pa[D * H], pb[D * H];
    const ag_tensor ta[3] = {a->w1, a->b1, a->w2}, tb[3] = {b->w1, b->b1, b->w2};
    const size_t n[3] = {D * H, H, H};
    for (int i = 0; i < 3; i++) {
        if (ag_tensor_read(a->c, ta[i], pa, n[i]) != AG_STATUS_OK) return false;
        if (ag_tensor_read(b->c, tb[i], pb, n[i]) != AG_STATUS_OK) return false;
        if (memcmp(pa, pb, n[i] * sizeof(float)) != 0) return false;
    }
    return true;
}

static void test_bit_identical(bool recompute) {
    check_begin(recompute ? "replay = eager, recomputed segment" : "replay = eager");
    model e, r;
    REQUIRE(model_new(&e, recompute, true));
    REQUIRE(model_new(&r, recompute, true));
    float x[B * D], y[B];
    ag_tensor xi, yi, loss, le;
    ag_step step = {0, 0, 0};
    batch(0, x, y);
    check_set_ctx(r.c);
    REQUIRE_OK(ag_capture_begin(r.c));
    REQUIRE_OK(ag_input_new(r.c, (const size_t[]){B, D}, 2, &xi));
    REQUIRE_OK(ag_input_new(r.c, (const size_t[]){B, 1}, 2, &yi));
    CHECK_OK(ag_input_write(r.c, xi, x, B * D));
    CHECK_OK(ag_input_write(r.c, yi, y, B));
    loss = build(&r, xi, yi);
    REQUIRE_OK(ag_backward(r.c, loss));
    REQUIRE_OK(ag_capture_end(r.c, loss, &step));
    for (int k = 0; k < K; k++) {
        batch(k, x, y);
        check_set_ctx(e.c);
        CHECK_OK(ag_reset(e.c));
        ag_tensor xe, ye;
        CHECK_OK(ag_tensor_new(e.c, (const size_t[]){B, D}, 2, x, &xe));
        CHECK_OK(ag_tensor_new(e.c, (const size_t[]){B, 1}, 2, y, &ye));
        CHECK_OK(ag_zero_grad(e.c));
        le = build(&e, xe, ye);
        CHECK_OK(ag_backward(e.c, le));
        check_set_ctx(r.c);
        if (k > 0) {
            CHECK_OK(ag_input_write(r.c, xi, x, B * D));
            CHECK_OK(ag_input_write(r.c, yi, y, B));
            CHECK_OK(ag_zero_grad(r.c));
            CHECK_OK(ag_replay(r.c, step));
        }
        float lr = NAN, lev = NAN;
        CHECK_OK(ag_tensor_item(r.c, loss, &lr));
        CHECK_OK(ag_tensor_item(e.c, le, &lev));
        CHECK(memcmp(&lr, &lev, sizeof lr) == 0);
        CHECK(same_grads(&e, &r));
        CHECK_OK(ag_optimizer_step(e.c));
        CHECK_OK(ag_optimizer_step(r.c));
    }
    CHECK(same_params(&e, &r));
    CHECK_OK(ag_step_free(r.c, &step));
    CHECK(step.index == 0 && step.context == 0 && step.generation == 0);
    CHECK_OK(ag_context_free(&e.c));
    CHECK_OK(ag_context_free(&r.c));
}

static void test_bad_input(void) {
    check_begin("capture and replay: bad input");
    model m, o;
    REQUIRE(model_new(&m, false, false));
    REQUIRE(model_new(&o, false, false));
    ag_context *c = m.c;
    float x[B * D], y[B];
    batch(0, x, y);
    ag_tensor xi, yi, loss, t;
    ag_step step = {0, 0, 0}, other = {0, 0, 0};
    const ag_step sentinel = {7, 7, 7};
    ag_step out = sentinel;
    /* The sequence: capture_end without a capture, or before backward. */
    check_set_ctx(c);
    CHECK_ERR(c, ag_capture_end(c, m.w1, &out), AG_STATUS_SEQUENCE, "capture_end: ",
              "ag_capture_begin");
    REQUIRE_OK(ag_capture_begin(c));
    CHECK_ERR(c, ag_capture_begin(c), AG_STATUS_SEQUENCE, "capture_begin: ", "already open");
    REQUIRE_OK(ag_input_new(c, (const size_t[]){B, D}, 2, &xi));
    REQUIRE_OK(ag_input_new(c, (const size_t[]){B, 1}, 2, &yi));
    CHECK_OK(ag_input_write(c, xi, x, B * D));
    CHECK_OK(ag_input_write(c, yi, y, B));
    loss = build(&m, xi, yi);
    CHECK_ERR(c, ag_capture_end(c, loss, &out), AG_STATUS_SEQUENCE, "capture_end: ",
              "ag_backward");
    CHECK_STATUS(ag_capture_end(c, loss, NULL), AG_STATUS_NULL_ARGUMENT);
    CHECK(out.index == 7 && out.generation == 7);
    REQUIRE_OK(ag_backward(c, loss));
    REQUIRE_OK(ag_capture_end(c, loss, &step));
    /* Bad writes: wrong length, NULL data, a tensor no slot. */
    CHECK_ERR(c, ag_input_write(c, xi, x, 3), AG_STATUS_INVALID_ARGUMENT, "input_write: ",
              "needs");
    CHECK_STATUS(ag_input_write(c, xi, NULL, B * D), AG_STATUS_NULL_ARGUMENT);
    CHECK_ERR(c, ag_input_write(c, loss, x, 1), AG_STATUS_INVALID_ARGUMENT, "input_write: ",
              "not an input slot");
    /* The replayed graph cannot grow until ag_reset. */
    CHECK_ERR(c, ag_add(c, loss, loss, &t), AG_STATUS_SEQUENCE, "add: ", "ag_reset");
    CHECK_ERR(c, ag_input_new(c, (const size_t[]){2}, 1, &t), AG_STATUS_SEQUENCE,
              "input_new: ", "ag_reset");
    /* Another context's step; forged steps. */
    check_set_ctx(o.c);
    REQUIRE_OK(ag_capture_begin(o.c));
    ag_tensor ox, oy;
    REQUIRE_OK(ag_input_new(o.c, (const size_t[]){B, D}, 2, &ox));
    REQUIRE_OK(ag_input_new(o.c, (const size_t[]){B, 1}, 2, &oy));
    ag_tensor ol = build(&o, ox, oy);
    REQUIRE_OK(ag_backward(o.c, ol));
    REQUIRE_OK(ag_capture_end(o.c, ol, &other));
    check_set_ctx(c);
    CHECK_ERR(c, ag_replay(c, other), AG_STATUS_WRONG_CONTEXT, "replay: ", "step handle belongs to context");
    CHECK_ERR(c, ag_replay(c, (ag_step){0, 0, 0}), AG_STATUS_INVALID_HANDLE, "replay: ", "invalid step handle");
    CHECK_ERR(c, ag_replay(c, (ag_step){step.index, step.context, UINT64_MAX}),
              AG_STATUS_INVALID_HANDLE, "replay: ");
    /* A lowered cap, then a parameter added (no optimizer yet): refused,
     * nothing changes. */
    ag_memory_stats_t before, after;
    CHECK_OK(ag_set_arena_limit(c, 4096));
    CHECK_OK(ag_memory_stats(c, &before));
    CHECK_ERR(c, ag_replay(c, step), AG_STATUS_OUT_OF_MEMORY, "replay: ", "cap");
    CHECK_OK(ag_memory_stats(c, &after));
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    CHECK_OK(ag_set_arena_limit(c, 0));
    float l0 = NAN, l1 = NAN;
    CHECK_OK(ag_tensor_item(c, loss, &l0));
    CHECK_OK(ag_replay(c, step));
    CHECK_OK(ag_tensor_item(c, loss, &l1));
    CHECK(l0 == l1);
    CHECK_OK(ag_reset(c));
    CHECK_ERR(c, ag_tensor_item(c, loss, &l1), AG_STATUS_STALE_HANDLE, "tensor_item: ");
    /* Writing the step's slot makes it current again. */
    CHECK_OK(ag_input_write(c, xi, x, B * D));
    CHECK_OK(ag_tensor_item(c, loss, &l1));
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_param_new(c, (const size_t[]){2}, 1, NULL, &t));
    CHECK_ERR(c, ag_replay(c, step), AG_STATUS_SEQUENCE, "replay: ", "parameters");
    CHECK_ERR(c, ag_input_write(c, xi, x, B * D), AG_STATUS_SEQUENCE, "input_write: ",
              "parameters");
    /* Freed: refused for good; freeing NULL or a zeroed step does nothing. */
    ag_step copy = step;
    CHECK_OK(ag_step_free(c, &step));
    CHECK_ERR(c, ag_replay(c, copy), AG_STATUS_STALE_HANDLE, "replay: ", "was freed");
    CHECK_ERR(c, ag_step_free(c, &copy), AG_STATUS_STALE_HANDLE, "step_free: ");
    CHECK_OK(ag_step_free(c, &step));
    CHECK_OK(ag_step_free(c, NULL));
    CHECK_STATUS(ag_replay(NULL, copy), AG_STATUS_NULL_ARGUMENT);
    CHECK_OK(ag_context_free(&m.c));
    CHECK_OK(ag_context_free(&o.c));
}

/* Token ids and targets of a captured step (ag_input_write_ids) against
 * the eager path, and what bad ids get. */
static void test_ids(void) {
    check_begin("id buffers of a step");
    enum { V = 7, N = 4 };
    ag_context *c[2] = {NULL, NULL};
    ag_tensor w[2], loss[2], e;
    float wv[V * V];
    for (int i = 0; i < V * V; i++) wv[i] = init_value(i, 5) * 10.0f;
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(ag_context_new(&c[k]));
        REQUIRE_OK(ag_param_new(c[k], (const size_t[]){V, V}, 2, wv, &w[k]));
    }
    ag_step step = {0, 0, 0};
    int ids[N] = {0, 1, 2, 3}, tg[N] = {1, 2, 3, 4};
    check_set_ctx(c[1]);
    REQUIRE_OK(ag_capture_begin(c[1]));
    REQUIRE_OK(ag_embedding(c[1], w[1], ids, N, &e));
    REQUIRE_OK(ag_cross_entropy(c[1], e, tg, N, &loss[1]));
    REQUIRE_OK(ag_backward(c[1], loss[1]));
    REQUIRE_OK(ag_capture_end(c[1], loss[1], &step));
    for (int b = 1; b < 4; b++) {
        for (int i = 0; i < N; i++) ids[i] = (i * 3 + b) % V, tg[i] = (i * 5 + b) % V;
        check_set_ctx(c[0]);
        CHECK_OK(ag_reset(c[0]));
        CHECK_OK(ag_embedding(c[0], w[0], ids, N, &e));
        CHECK_OK(ag_cross_entropy(c[0], e, tg, N, &loss[0]));
        check_set_ctx(c[1]);
        CHECK_OK(ag_input_write_ids(c[1], step, 0, ids, N));
        CHECK_OK(ag_input_write_ids(c[1], step, 1, tg, N));
        CHECK_OK(ag_replay(c[1], step));
        float a = NAN, r = NAN;
        CHECK_OK(ag_tensor_item(c[0], loss[0], &a));
        CHECK_OK(ag_tensor_item(c[1], loss[1], &r));
        CHECK(memcmp(&a, &r, sizeof a) == 0);
    }
    ids[2] = V;
    CHECK_ERR(c[1], ag_input_write_ids(c[1], step, 0, ids, N), AG_STATUS_INDEX_OUT_OF_RANGE,
              "input_write_ids: ");
    CHECK_ERR(c[1], ag_input_write_ids(c[1], step, 2, ids, N), AG_STATUS_INVALID_ARGUMENT,
              "input_write_ids: ", "no buffer 2");
    CHECK_ERR(c[1], ag_input_write_ids(c[1], step, 1, tg, 2), AG_STATUS_INVALID_ARGUMENT,
              "input_write_ids: ", "holds 4");
    CHECK_STATUS(ag_input_write_ids(c[1], step, 0, NULL, N), AG_STATUS_NULL_ARGUMENT);
    CHECK_OK(ag_context_free(&c[0]));
    CHECK_OK(ag_context_free(&c[1]));
}

/* ag_dropout_seeded in a captured step: with a new seed written before
 * each replay, the loss and the gradient match the eager path with that
 * seed bit for bit; a replay that keeps the seed keeps them. */
static void test_seeded_dropout(void) {
    check_begin("seeded dropout in a step");
    enum { N = 64 };
    ag_context *c[2] = {NULL, NULL};
    ag_tensor w[2], loss[2], seed = {0, 0, 0}, d, sq;
    float wv[N], g[2][N];
    for (int i = 0; i < N; i++) wv[i] = init_value(i, 9) * 10.0f;
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(ag_context_new(&c[k]));
        REQUIRE_OK(ag_param_new(c[k], (const size_t[]){N}, 1, wv, &w[k]));
    }
    /* loss = sum(dropout(w)^2) on both; c[1] captures it. */
    ag_step step = {0, 0, 0};
    check_set_ctx(c[1]);
    REQUIRE_OK(ag_capture_begin(c[1]));
    REQUIRE_OK(ag_input_new(c[1], (const size_t[]){4}, 1, &seed));
    REQUIRE_OK(ag_seed_write(c[1], seed, 1));
    REQUIRE_OK(ag_dropout_seeded(c[1], w[1], 0.5f, seed, &d));
    REQUIRE_OK(ag_mul(c[1], d, d, &sq));
    REQUIRE_OK(ag_sum(c[1], sq, &loss[1]));
    REQUIRE_OK(ag_backward(c[1], loss[1]));
    REQUIRE_OK(ag_capture_end(c[1], loss[1], &step));
    float prev = NAN;
    for (uint64_t b = 2; b < 6; b++) {
        const uint64_t v = b * 0x9e3779b97f4a7c15ull;
        ag_tensor s0 = {0, 0, 0};
        check_set_ctx(c[0]);
        CHECK_OK(ag_reset(c[0]));
        CHECK_OK(ag_zero_grad(c[0]));
        CHECK_OK(ag_input_new(c[0], (const size_t[]){4}, 1, &s0));
        CHECK_OK(ag_seed_write(c[0], s0, v));
        CHECK_OK(ag_dropout_seeded(c[0], w[0], 0.5f, s0, &d));
        CHECK_OK(ag_mul(c[0], d, d, &sq));
        CHECK_OK(ag_sum(c[0], sq, &loss[0]));
        CHECK_OK(ag_backward(c[0], loss[0]));
        check_set_ctx(c[1]);
        CHECK_OK(ag_zero_grad(c[1]));
        CHECK_OK(ag_seed_write(c[1], seed, v));
        CHECK_OK(ag_replay(c[1], step));
        float a = NAN, r = NAN;
        CHECK_OK(ag_tensor_item(c[0], loss[0], &a));
        CHECK_OK(ag_tensor_item(c[1], loss[1], &r));
        CHECK(memcmp(&a, &r, sizeof a) == 0);
        CHECK(memcmp(&r, &prev, sizeof r) != 0); /* a new seed, a new mask */
        for (int k = 0; k < 2; k++) CHECK_OK(ag_tensor_read_grad(c[k], w[k], g[k], N));
        CHECK(memcmp(g[0], g[1], sizeof g[0]) == 0);
        /* The seed kept: the same loss again. */
        CHECK_OK(ag_zero_grad(c[1]));
        CHECK_OK(ag_replay(c[1], step));
        float again = NAN;
        CHECK_OK(ag_tensor_item(c[1], loss[1], &again));
        CHECK(memcmp(&again, &r, sizeof r) == 0);
        prev = r;
    }
    CHECK_OK(ag_context_free(&c[0]));
    CHECK_OK(ag_context_free(&c[1]));
}

int main(void) {
    test_ids();
    test_seeded_dropout();
    test_bit_identical(false);
    test_bit_identical(true);
    test_bad_input();
    return check_summary();
}

/*
 * test_stale.c: activation handles die at ag_reset, parameter handles do not.
 *
 * Iteration 1 builds one valid set of operands for every function that takes
 * a tensor handle (the rows of ops.def), and checks each call succeeds. After ag_reset, iteration 2
 * builds the same set again (so the old handles' table slots are reused by
 * live tensors: the stale handle's index is valid, only its generation is
 * old). Then every call is made with the iteration-2 operands (must succeed)
 * and once per tensor argument with the iteration-1 handle in that position
 * (must return AG_STATUS_STALE_HANDLE, name the op first, "op: ...", and
 * write nothing through its out-pointers; ag_transpose and ag_tensor_numel
 * name themselves, not the tensor_shape query they use). Parameters keep
 * working across many resets.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "op_table.h"

#define SENTINEL_TENSOR ((ag_tensor){0xA5A5A5A5u, 0x5A5A5A5Au, 0xA5A5A5A55A5A5A5Aull})

static bool same_tensor(ag_tensor a, ag_tensor b) {
    return a.index == b.index && a.context == b.context && a.generation == b.generation;
}

static ag_context *ctx;
static ag_tensor p_w; /* parameter [2,3] */
static ag_tensor p_e; /* parameter [4,3] */

/* One iteration's operands: valid tensor arguments for every function that
 * takes a tensor handle (op_table.h), plus a trainable graph. */
typedef struct operands {
    ag_tensor arg[OP_COUNT][3];
    ag_tensor x;    /* [2,3] constant */
    ag_tensor h;    /* mul(x, p_w): has a gradient after backward */
    ag_tensor loss; /* sum(h) */
    ag_tensor view; /* reshape(x) to [3,2] */
} operands;

static float data[64];

static ag_tensor mk(size_t ndim, const size_t *dims) {
    ag_tensor t = SENTINEL_TENSOR;
    CHECK_OK(ag_tensor_new(ctx, dims, ndim, data, &t));
    return t;
}
#define MK(...) mk(sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t), (const size_t[]){__VA_ARGS__})

/* Makes the operands; the same calls in the same order every iteration, so
 * the second iteration's tensors take the first one's table slots. */
static void build(operands *o) {
    o->x = MK(2, 3);
    o->h = o->loss = o->view = SENTINEL_TENSOR;
    CHECK_OK(ag_mul(ctx, o->x, p_w, &o->h));
    CHECK_OK(ag_sum(ctx, o->h, &o->loss));
    CHECK_OK(ag_reshape(ctx, o->x, (const size_t[]){3, 2}, 2, &o->view));
    for (int op = 0; op < OP_COUNT; op++) {
        for (int pos = 0; pos < 3; pos++) {
            int need = pos == 0 ? OPS[op].need : AG_NEED_ANY;
            ag_tensor *t = &o->arg[op][pos];
            if (pos >= OPS[op].arity || need == AG_NEED_LOSS) {
                *t = SENTINEL_TENSOR;
            } else if (need == AG_NEED_GRAD) {
                *t = o->h;
            } else if (need == AG_NEED_PARAM) {
                *t = p_w;
            } else {
                *t = mk(OPS[op].shape[pos].ndim, OPS[op].shape[pos].dims);
            }
        }
    }
}

/* ag_backward (AG_NEED_LOSS) is not in the loops below: each iteration has
 * one backward, so it is checked on its own after them. */
static bool in_loop(int op) { return OPS[op].need != AG_NEED_LOSS; }

/* Calls row `op` with t; the result must be OK. */
static void expect_valid(int op, const ag_tensor t[3], const char *what) {
    ag_tensor out = SENTINEL_TENSOR;
    op_scratch scratch;
    op_scratch_init(&scratch);
    ag_status st = call_op(op, ctx, t, &out, &scratch);
    if (!check_record(st == AG_STATUS_OK, __FILE__, __LINE__, what)) {
        fprintf(stderr, "    %s: %s: %s\n", OPS[op].fn, ag_status_str(st),
                ag_context_last_error(ctx));
    }
}

/* Calls row `op` with t, where some argument is stale: STALE_HANDLE, an
 * error starting with the op's name, nothing written. */
static void expect_stale(int op, const ag_tensor t[3], int pos) {
    ag_tensor out = SENTINEL_TENSOR;
    op_scratch scratch;
    op_scratch_init(&scratch);
    ag_status st = call_op(op, ctx, t, &out, &scratch);
    char prefix[48];
    snprintf(prefix, sizeof prefix, "%s: ", OPS[op].name);
    bool ok = check_err_impl(ctx, st, AG_STATUS_STALE_HANDLE,
                             (const char *const[]){prefix, "stale", NULL}, __FILE__, __LINE__,
                             "stale handle");
    if (ok) {
        const char *msg = ag_context_last_error(ctx);
        ok = check_record(strncmp(msg, prefix, strlen(prefix)) == 0, __FILE__, __LINE__,
                          "the stale-handle error starts with the op's name");
        if (!ok) fprintf(stderr, "    last error: \"%s\"\n", msg);
    }
    if (!ok) fprintf(stderr, "    %s, tensor argument %d\n", OPS[op].fn, pos);
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK(op_scratch_untouched(&scratch));
}

static void test_every_call(void) {
    check_begin("every call with a stale handle");
    static operands o1, o2;
    REQUIRE_OK(ag_reset(ctx));
    build(&o1);
    /* In its own iteration every call is valid. */
    REQUIRE_OK(ag_tensor_retain_grad(ctx, o1.h));
    REQUIRE_OK(ag_backward(ctx, o1.loss));
    for (int op = 0; op < OP_COUNT; op++) {
        if (in_loop(op)) expect_valid(op, o1.arg[op], "valid call in iteration 1");
    }
    ag_memory_stats_t mf;
    CHECK_OK(ag_memory_stats(ctx, &mf));
    const uint64_t gen1 = mf.generation;
    CHECK(o1.x.generation == gen1);

    REQUIRE_OK(ag_reset(ctx));
    build(&o2);
    CHECK_OK(ag_memory_stats(ctx, &mf));
    CHECK(mf.generation > gen1);
    /* The new activations took the old slots: only the generation differs. */
    CHECK(o2.x.index == o1.x.index && o2.x.generation != o1.x.generation);
    CHECK(o2.loss.index == o1.loss.index);
    CHECK(o2.arg[OP_add][1].index == o1.arg[OP_add][1].index);

    for (int op = 0; op < OP_COUNT; op++) {
        if (!in_loop(op)) continue;
        for (int pos = 0; pos < OPS[op].arity; pos++) {
            ag_tensor t[3];
            memcpy(t, o2.arg[op], sizeof t);
            /* A parameter never goes stale: a row that needs one gets last
             * iteration's activation instead. */
            bool param = pos == 0 && OPS[op].need == AG_NEED_PARAM;
            t[pos] = param ? o1.x : o1.arg[op][pos];
            expect_stale(op, t, pos);
        }
        /* The same call with current handles works (the failure changed
         * nothing), except reading a gradient before this iteration's
         * backward. */
        if (OPS[op].need == AG_NEED_GRAD) {
            ag_tensor out = SENTINEL_TENSOR;
            op_scratch scratch;
            op_scratch_init(&scratch);
            CHECK_STATUS(call_op(op, ctx, o2.arg[op], &out, &scratch), AG_STATUS_SEQUENCE);
        } else {
            expect_valid(op, o2.arg[op], "valid call in iteration 2");
        }
    }
    /* A reshape of a view (which shares its source's storage). */
    ag_tensor out = SENTINEL_TENSOR;
    CHECK_ERR(ctx, ag_reshape(ctx, o1.view, (const size_t[]){6}, 1, &out), AG_STATUS_STALE_HANDLE, "reshape: ", "stale");
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK_OK(ag_reshape(ctx, o2.view, (const size_t[]){6}, 1, &out));
    /* Backward from a stale loss is refused and does not use up this
     * iteration's backward. */
    CHECK_ERR(ctx, ag_backward(ctx, o1.loss), AG_STATUS_STALE_HANDLE, "backward: ", "stale");
    float g[6];
    CHECK_OK(ag_zero_grad(ctx));
    CHECK_OK(ag_tensor_retain_grad(ctx, o2.h));
    CHECK_OK(ag_backward(ctx, o2.loss));
    CHECK_OK(ag_tensor_read_grad(ctx, o2.h, g, 6));
    for (int i = 0; i < 6; i++) CHECK(g[i] == 1.0f); /* d sum(h) / dh */
    CHECK_ERR(ctx, ag_tensor_read_grad(ctx, o1.h, g, 6), AG_STATUS_STALE_HANDLE, "tensor_read_grad", "stale");
    /* A stale bias passed through the pointer argument of ag_linear. */
    out = SENTINEL_TENSOR;
    const ag_tensor *lin = o2.arg[OP_linear];
    CHECK_ERR(ctx, ag_linear(ctx, lin[0], lin[1], &o1.arg[OP_linear][2], &out), AG_STATUS_STALE_HANDLE, "linear", "stale");
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK_OK(ag_zero_grad(ctx));
}

static void test_many_resets(void) {
    check_begin("many resets");
    float w0[6] = {1, 2, 3, 4, 5, 6}, w[6];
    CHECK_OK(ag_param_write(ctx, p_w, w0, 6));
    CHECK_OK(ag_reset(ctx));
    ag_tensor first = MK(2, 3), prev = first;
    ag_memory_stats_t mf;
    CHECK_OK(ag_memory_stats(ctx, &mf));
    const uint64_t resets0 = mf.resets, gen0 = mf.generation;
    for (int i = 0; i < 1000; i++) {
        CHECK_OK(ag_reset(ctx));
        ag_tensor now = MK(2, 3), y = SENTINEL_TENSOR;
        if (i % 100 == 0) {
            /* The previous iteration's handle (one generation back) and the
             * very first one are both stale, never "invalid". */
            CHECK_ERR(ctx, ag_neg(ctx, prev, &y), AG_STATUS_STALE_HANDLE, "neg", "stale");
            CHECK_ERR(ctx, ag_add(ctx, now, first, &y), AG_STATUS_STALE_HANDLE, "add", "stale");
        }
        /* Parameter handles survive every reset. */
        CHECK_OK(ag_mul(ctx, now, p_w, &y));
        prev = now;
    }
    CHECK_OK(ag_memory_stats(ctx, &mf));
    CHECK(mf.resets == resets0 + 1000);
    CHECK(mf.generation == gen0 + 1000);
    CHECK(mf.live_tensors == mf.param_count + 2); /* `now` and the mul output */
    CHECK_OK(ag_tensor_read(ctx, p_w, w, 6));
    CHECK(memcmp(w, w0, sizeof w) == 0);
    /* A parameter gradient survives resets too. */
    ag_tensor x = MK(2, 3), h = SENTINEL_TENSOR, l = SENTINEL_TENSOR;
    CHECK_OK(ag_mul(ctx, x, p_w, &h));
    CHECK_OK(ag_sum(ctx, h, &l));
    CHECK_OK(ag_backward(ctx, l));
    float g0[6], g1[6];
    CHECK_OK(ag_tensor_read_grad(ctx, p_w, g0, 6));
    for (int i = 0; i < 6; i++) CHECK(g0[i] == data[i]); /* d sum(x*w) / dw = x */
    for (int i = 0; i < 3; i++) CHECK_OK(ag_reset(ctx));
    CHECK_OK(ag_tensor_read_grad(ctx, p_w, g1, 6));
    CHECK(memcmp(g0, g1, sizeof g0) == 0);
    size_t dims[AG_MAX_DIMS], nd = 0;
    CHECK_OK(ag_tensor_shape(ctx, p_e, dims, &nd));
    CHECK(nd == 2 && dims[0] == 4 && dims[1] == 3);
    CHECK(p_w.generation == 0 && p_e.generation == 0);
    CHECK_OK(ag_zero_grad(ctx));
}

/* Grad mode off: a handle made without recording goes stale the same way. */
static void test_stale_without_grad(void) {
    check_begin("stale without grad mode");
    CHECK_OK(ag_reset(ctx));
    CHECK_OK(ag_set_grad_enabled(ctx, false));
    ag_tensor a = MK(3), b = SENTINEL_TENSOR, c = SENTINEL_TENSOR;
    CHECK_OK(ag_exp(ctx, a, &b));
    CHECK_OK(ag_reset(ctx));
    CHECK_ERR(ctx, ag_exp(ctx, b, &c), AG_STATUS_STALE_HANDLE, "exp", "stale");
    float v[3];
    CHECK_ERR(ctx, ag_tensor_read(ctx, b, v, 3), AG_STATUS_STALE_HANDLE, "tensor_read", "stale");
    CHECK_ERR(ctx, ag_tensor_item(ctx, b, v), AG_STATUS_STALE_HANDLE, "tensor_item", "stale");
    CHECK_OK(ag_set_grad_enabled(ctx, true));
    CHECK(same_tensor(c, SENTINEL_TENSOR));
}

int main(void) {
    for (int i = 0; i < 64; i++) data[i] = 0.25f + 0.125f * (float)(i % 9);
    if (ag_context_new(&ctx) != AG_STATUS_OK) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    check_set_ctx(ctx);
    CHECK_OK(ag_param_new(ctx, (const size_t[]){2, 3}, 2, data, &p_w));
    CHECK_OK(ag_param_new(ctx, (const size_t[]){4, 3}, 2, data, &p_e));
    CHECK_OK(ag_optimizer_sgd(ctx, 0.1f, 0.0f, 0.0f));
    test_every_call();
    test_many_resets();
    test_stale_without_grad();
    CHECK_OK(ag_context_free(&ctx));
    return check_summary();
}

/*
 * test_stale.c: activation handles die at ag_reset, parameter handles do not.
 *
 * Iteration 1 builds one valid set of operands for every function that takes
 * a tensor handle, and checks each call succeeds. After ag_reset, iteration 2
 * builds the same set again (so the old handles' table slots are reused by
 * live tensors: the stale handle's index is valid, only its generation is
 * old). Then every call is made with the iteration-2 operands (must succeed)
 * and once per tensor argument with the iteration-1 handle in that position
 * (must return AG_STATUS_STALE_HANDLE, name the op first, "op: ...", and
 * leave the out-pointer untouched; ag_transpose and ag_tensor_numel name
 * themselves, not the tensor_shape query they use). Parameters keep working
 * across many resets.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define SENTINEL_TENSOR ((ag_tensor){0xA5A5A5A5u, 0x5A5A5A5Au, 0xA5A5A5A55A5A5A5Aull})

static bool same_tensor(ag_tensor a, ag_tensor b) {
    return a.index == b.index && a.context == b.context && a.generation == b.generation;
}

static ag_context *ctx;
static ag_tensor p_w; /* parameter [2,3] */
static ag_tensor p_e; /* parameter [4,3] (embedding table) */

/* One iteration's operands: constants, plus a trainable graph for backward. */
typedef struct operands {
    ag_tensor a23, b23, m34, v4, v3, v3b, bp, bq, emb, qkv, scalar;
    ag_tensor h;    /* mul(a23, p_w): has a gradient after backward */
    ag_tensor loss; /* sum(h) */
    ag_tensor view; /* reshape(a23) to [3,2] */
} operands;

static float data[64];

static ag_tensor mk(size_t ndim, const size_t *dims) {
    ag_tensor t = SENTINEL_TENSOR;
    CHECK_OK(ag_tensor_new(ctx, dims, ndim, data, &t));
    return t;
}
#define MK(...) mk(sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t), (const size_t[]){__VA_ARGS__})

static void build(operands *o) {
    o->a23 = MK(2, 3);
    o->b23 = MK(2, 3);
    o->m34 = MK(3, 4);
    o->v4 = MK(4);
    o->v3 = MK(3);
    o->v3b = MK(3);
    o->bp = MK(2, 2, 3);
    o->bq = MK(2, 3, 2);
    o->emb = MK(4, 3);
    o->qkv = MK(1, 2, 6);
    o->scalar = MK(1);
    o->h = o->loss = o->view = SENTINEL_TENSOR;
    CHECK_OK(ag_mul(ctx, o->a23, p_w, &o->h));
    CHECK_OK(ag_sum(ctx, o->h, &o->loss));
    CHECK_OK(ag_reshape(ctx, o->a23, (const size_t[]){3, 2}, 2, &o->view));
}

typedef struct op_case {
    const char *fn;
    const char *name; /* op name the message must start with ("name: ...") */
    int arity;
} op_case;

enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_NEG, OP_EXP, OP_LOG, OP_TANH, OP_RELU, OP_SIGMOID,
    OP_GELU, OP_SUM, OP_MEAN, OP_SCALE, OP_SUM_AXIS, OP_MEAN_AXIS, OP_RESHAPE, OP_RESHAPE_VIEW,
    OP_PERMUTE, OP_TRANSPOSE, OP_MATMUL, OP_BMM, OP_LINEAR, OP_EMBEDDING, OP_CROSS_ENTROPY,
    OP_LAYERNORM, OP_SOFTMAX, OP_ATTENTION, OP_SHAPE, OP_NUMEL, OP_READ, OP_READ_GRAD, OP_ITEM,
    OP_PARAM_WRITE, OP_COUNT
};

static const op_case OPS[OP_COUNT] = {
    [OP_ADD] = {"ag_add", "add", 2},
    [OP_SUB] = {"ag_sub", "sub", 2},
    [OP_MUL] = {"ag_mul", "mul", 2},
    [OP_DIV] = {"ag_div", "div", 2},
    [OP_NEG] = {"ag_neg", "neg", 1},
    [OP_EXP] = {"ag_exp", "exp", 1},
    [OP_LOG] = {"ag_log", "log", 1},
    [OP_TANH] = {"ag_tanh", "tanh", 1},
    [OP_RELU] = {"ag_relu", "relu", 1},
    [OP_SIGMOID] = {"ag_sigmoid", "sigmoid", 1},
    [OP_GELU] = {"ag_gelu", "gelu", 1},
    [OP_SUM] = {"ag_sum", "sum", 1},
    [OP_MEAN] = {"ag_mean", "mean", 1},
    [OP_SCALE] = {"ag_scale", "scale", 1},
    [OP_SUM_AXIS] = {"ag_sum_axis", "sum_axis", 1},
    [OP_MEAN_AXIS] = {"ag_mean_axis", "mean_axis", 1},
    [OP_RESHAPE] = {"ag_reshape", "reshape", 1},
    [OP_RESHAPE_VIEW] = {"ag_reshape (of a view)", "reshape", 1},
    [OP_PERMUTE] = {"ag_permute", "permute", 1},
    [OP_TRANSPOSE] = {"ag_transpose", "transpose", 1},
    [OP_MATMUL] = {"ag_matmul", "matmul", 2},
    [OP_BMM] = {"ag_bmm", "bmm", 2},
    [OP_LINEAR] = {"ag_linear", "linear", 3},
    [OP_EMBEDDING] = {"ag_embedding", "embedding", 1},
    [OP_CROSS_ENTROPY] = {"ag_cross_entropy", "cross_entropy", 1},
    [OP_LAYERNORM] = {"ag_layernorm", "layernorm", 3},
    [OP_SOFTMAX] = {"ag_softmax", "softmax", 1},
    [OP_ATTENTION] = {"ag_attention", "attention", 1},
    [OP_SHAPE] = {"ag_tensor_shape", "tensor_shape", 1},
    [OP_NUMEL] = {"ag_tensor_numel", "tensor_numel", 1},
    [OP_READ] = {"ag_tensor_read", "tensor_read", 1},
    [OP_READ_GRAD] = {"ag_tensor_read_grad", "tensor_read_grad", 1},
    [OP_ITEM] = {"ag_tensor_item", "tensor_item", 1},
    [OP_PARAM_WRITE] = {"ag_param_write", "param_write", 1},
};

/* The valid tensor arguments of `op` taken from `o`. */
static void args_of(int op, const operands *o, ag_tensor t[3]) {
    t[0] = o->a23;
    t[1] = o->b23;
    t[2] = o->v4;
    switch (op) {
    case OP_RESHAPE_VIEW: t[0] = o->view; break;
    case OP_MATMUL: t[1] = o->m34; break;
    case OP_BMM: t[0] = o->bp; t[1] = o->bq; break;
    case OP_LINEAR: t[1] = o->m34; t[2] = o->v4; break;
    case OP_EMBEDDING: t[0] = o->emb; break;
    case OP_LAYERNORM: t[1] = o->v3; t[2] = o->v3b; break;
    case OP_ATTENTION: t[0] = o->qkv; break;
    case OP_READ_GRAD: t[0] = o->h; break;
    case OP_ITEM: t[0] = o->scalar; break;
    case OP_PARAM_WRITE: t[0] = p_w; break; /* replaced by a stale activation below */
    default: break;
    }
}

static ag_status call(int op, const ag_tensor t[3], ag_tensor *out) {
    static const int32_t ids[2] = {0, 3}, targets[2] = {0, 2};
    size_t dims[AG_MAX_DIMS], nd, n;
    float buf[6], item;
    ag_tensor bias = t[2];
    switch (op) {
    case OP_ADD: return ag_add(ctx, t[0], t[1], out);
    case OP_SUB: return ag_sub(ctx, t[0], t[1], out);
    case OP_MUL: return ag_mul(ctx, t[0], t[1], out);
    case OP_DIV: return ag_div(ctx, t[0], t[1], out);
    case OP_NEG: return ag_neg(ctx, t[0], out);
    case OP_EXP: return ag_exp(ctx, t[0], out);
    case OP_LOG: return ag_log(ctx, t[0], out);
    case OP_TANH: return ag_tanh(ctx, t[0], out);
    case OP_RELU: return ag_relu(ctx, t[0], out);
    case OP_SIGMOID: return ag_sigmoid(ctx, t[0], out);
    case OP_GELU: return ag_gelu(ctx, t[0], out);
    case OP_SUM: return ag_sum(ctx, t[0], out);
    case OP_MEAN: return ag_mean(ctx, t[0], out);
    case OP_SCALE: return ag_scale(ctx, t[0], 0.5f, out);
    case OP_SUM_AXIS: return ag_sum_axis(ctx, t[0], 1, true, out);
    case OP_MEAN_AXIS: return ag_mean_axis(ctx, t[0], 0, false, out);
    case OP_RESHAPE:
    case OP_RESHAPE_VIEW: return ag_reshape(ctx, t[0], (const size_t[]){6}, 1, out);
    case OP_PERMUTE: return ag_permute(ctx, t[0], (const size_t[]){1, 0}, 2, out);
    case OP_TRANSPOSE: return ag_transpose(ctx, t[0], 1, 0, out);
    case OP_MATMUL: return ag_matmul(ctx, t[0], t[1], false, false, out);
    case OP_BMM: return ag_bmm(ctx, t[0], t[1], false, false, out);
    case OP_LINEAR: return ag_linear(ctx, t[0], t[1], &bias, out);
    case OP_EMBEDDING: return ag_embedding(ctx, t[0], ids, 2, out);
    case OP_CROSS_ENTROPY: return ag_cross_entropy(ctx, t[0], targets, 2, out);
    case OP_LAYERNORM: return ag_layernorm(ctx, t[0], t[1], t[2], out);
    case OP_SOFTMAX: return ag_softmax(ctx, t[0], true, 1.0f, out);
    case OP_ATTENTION: return ag_attention(ctx, t[0], 2, out);
    case OP_SHAPE: {
        ag_status st = ag_tensor_shape(ctx, t[0], dims, &nd);
        if (st == AG_STATUS_OK) *out = (ag_tensor){(uint32_t)nd, 0, dims[0]};
        return st;
    }
    case OP_NUMEL: {
        ag_status st = ag_tensor_numel(ctx, t[0], &n);
        if (st == AG_STATUS_OK) *out = (ag_tensor){(uint32_t)n, 0, 0};
        return st;
    }
    case OP_READ: {
        ag_status st = ag_tensor_read(ctx, t[0], buf, 6);
        if (st == AG_STATUS_OK) *out = (ag_tensor){0, 0, 0};
        return st;
    }
    case OP_READ_GRAD: {
        ag_status st = ag_tensor_read_grad(ctx, t[0], buf, 6);
        if (st == AG_STATUS_OK) *out = (ag_tensor){0, 0, 0};
        return st;
    }
    case OP_ITEM: {
        ag_status st = ag_tensor_item(ctx, t[0], &item);
        if (st == AG_STATUS_OK) *out = (ag_tensor){0, 0, 0};
        return st;
    }
    case OP_PARAM_WRITE: {
        float w[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
        ag_status st = ag_param_write(ctx, t[0], w, 6);
        if (st == AG_STATUS_OK) *out = (ag_tensor){0, 0, 0};
        return st;
    }
    default: return AG_STATUS_OK;
    }
}

static void test_every_call(void) {
    check_begin("every call with a stale handle");
    operands o1, o2;
    REQUIRE_OK(ag_reset(ctx));
    build(&o1);
    /* In its own iteration every call is valid. */
    REQUIRE_OK(ag_tensor_retain_grad(ctx, o1.h));
    REQUIRE_OK(ag_backward(ctx, o1.loss));
    for (int op = 0; op < OP_COUNT; op++) {
        ag_tensor t[3], out = SENTINEL_TENSOR;
        args_of(op, &o1, t);
        ag_status st = call(op, t, &out);
        if (!check_record(st == AG_STATUS_OK, __FILE__, __LINE__, "valid call in iteration 1")) {
            fprintf(stderr, "    %s: %s: %s\n", OPS[op].fn, ag_status_str(st),
                    ag_context_last_error(ctx));
        }
    }
    ag_memory_figures mf;
    CHECK_OK(ag_memory_stats(ctx, &mf));
    const uint64_t gen1 = mf.generation;
    CHECK(o1.a23.generation == gen1);

    REQUIRE_OK(ag_reset(ctx));
    build(&o2);
    CHECK_OK(ag_memory_stats(ctx, &mf));
    CHECK(mf.generation > gen1);
    /* The new activations took the old slots: only the generation differs. */
    CHECK(o2.a23.index == o1.a23.index && o2.a23.generation != o1.a23.generation);
    CHECK(o2.loss.index == o1.loss.index);

    for (int op = 0; op < OP_COUNT; op++) {
        for (int pos = 0; pos < OPS[op].arity; pos++) {
            ag_tensor t[3], t1[3], out = SENTINEL_TENSOR;
            args_of(op, &o2, t);
            args_of(op, &o1, t1);
            if (op == OP_PARAM_WRITE) t1[0] = o1.a23;
            t[pos] = t1[pos];
            ag_status st = call(op, t, &out);
            char prefix[48];
            snprintf(prefix, sizeof prefix, "%s: ", OPS[op].name);
            bool ok = check_err_impl(ctx, st, AG_STATUS_STALE_HANDLE,
                                     (const char *const[]){prefix, "stale", NULL}, __FILE__,
                                     __LINE__, "stale handle");
            if (ok) {
                const char *msg = ag_context_last_error(ctx);
                ok = check_record(strncmp(msg, prefix, strlen(prefix)) == 0, __FILE__, __LINE__,
                                  "the stale-handle error starts with the op's name");
                if (!ok) fprintf(stderr, "    last error: \"%s\"\n", msg);
            }
            if (!ok) fprintf(stderr, "    %s, tensor argument %d\n", OPS[op].fn, pos);
            CHECK(same_tensor(out, SENTINEL_TENSOR));
        }
        /* The same call with current handles works (the failure changed nothing). */
        ag_tensor t[3], out = SENTINEL_TENSOR;
        args_of(op, &o2, t);
        ag_status st = call(op, t, &out);
        if (op == OP_READ_GRAD) {
            CHECK_STATUS(st, AG_STATUS_SEQUENCE); /* no backward in iteration 2 yet */
        } else if (!check_record(st == AG_STATUS_OK, __FILE__, __LINE__,
                                 "valid call in iteration 2")) {
            fprintf(stderr, "    %s: %s: %s\n", OPS[op].fn, ag_status_str(st),
                    ag_context_last_error(ctx));
        }
    }
    /* Backward from a stale loss is refused and does not use up this
     * iteration's backward. */
    CHECK_ERR(ctx, ag_backward(ctx, o1.loss), AG_STATUS_STALE_HANDLE, "backward", "stale");
    float g[6];
    CHECK_OK(ag_zero_grad(ctx));
    CHECK_OK(ag_tensor_retain_grad(ctx, o2.h));
    CHECK_OK(ag_backward(ctx, o2.loss));
    CHECK_OK(ag_tensor_read_grad(ctx, o2.h, g, 6));
    for (int i = 0; i < 6; i++) CHECK(g[i] == 1.0f); /* d sum(h) / dh */
    CHECK_ERR(ctx, ag_tensor_read_grad(ctx, o1.h, g, 6), AG_STATUS_STALE_HANDLE, "tensor_read_grad", "stale");
    /* A stale bias passed through the pointer argument of ag_linear. */
    ag_tensor out = SENTINEL_TENSOR;
    CHECK_ERR(ctx, ag_linear(ctx, o2.a23, o2.m34, &o1.v4, &out), AG_STATUS_STALE_HANDLE, "linear", "stale");
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK_OK(ag_zero_grad(ctx));
}

static void test_many_resets(void) {
    check_begin("many resets");
    float w0[6] = {1, 2, 3, 4, 5, 6}, w[6];
    CHECK_OK(ag_param_write(ctx, p_w, w0, 6));
    CHECK_OK(ag_reset(ctx));
    ag_tensor first = MK(2, 3), prev = first;
    ag_memory_figures mf;
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

/*
 * mlp_io.c: a model's parameters by name, in and out of safetensors.
 *
 * A regression MLP, y = fc2(dropout(relu(fc1(x)))), learns
 * y = sin(2 x0) + x1^2 / 2 on 128 fixed points with ag_mse_loss and AdamW
 * (dropout p = 0.1 while training, a new mask each step; the identity with
 * grad mode off). Its
 * parameters are created by name ("fc1.weight" [2, 32], "fc1.bias" [32],
 * "fc2.weight" [32, 1], "fc2.bias" [1]; weights are [in, out], the layout
 * ag_linear uses), initialised with ag_param_init, and weight decay is
 * turned off for the biases. After training the program
 *
 *  - lists the parameters from the context alone (ag_param_count,
 *    ag_param_at, ag_param_name, ag_tensor_shape);
 *  - exports them with ag_safetensors_save;
 *  - builds a fresh context whose parameters are created in another order
 *    and zeroed, loads the file with ag_safetensors_load (by name), and
 *    checks that every parameter and the model's outputs on the training
 *    points are bit-identical to the trained model's;
 *  - checks that a model whose fc1 is [2, 16] refuses the file with
 *    AG_STATUS_CHECKPOINT_MISMATCH and keeps its values.
 *
 * Exit status: 0 when every check holds, 1 otherwise (a failed call prints
 * its status and the context's last error). The file goes to the path given
 * as the first argument, or to $TMPDIR (else /tmp), and is removed at the
 * end.
 *
 * Build: make build/mlp_io && ./build/mlp_io
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arenagrad.h"

#define ROWS 128
#define D_IN 2
#define HIDDEN 32
#define STEPS 300
#define SEED 7u

static int failures = 0;

/* Prints the failing call, its status and the context's last error; exits 1. */
static void check(ag_context *ctx, ag_status st, const char *what) {
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "mlp_io: %s failed: %s: %s\n", what, ag_status_str(st),
                ag_context_last_error(ctx));
        exit(1);
    }
}
#define CALL(ctx, x) check((ctx), (x), #x)

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "mlp_io: FAILED: %s\n", what);
        failures++;
    }
}

struct mlp {
    ag_context *ctx;
    ag_tensor w1, b1, w2, b2;
};

/* Creates the parameters by name; `reversed` creates them last to first
 * (a load fills them by name, whatever the order); `hidden` is fc1's width. */
static void mlp_new(struct mlp *m, size_t hidden, int reversed) {
    CALL(NULL, ag_context_new(&m->ctx));
    struct {
        const char *name;
        size_t shape[2];
        size_t ndim;
        ag_tensor *out;
    } p[4] = {
        {"fc1.weight", {D_IN, hidden}, 2, &m->w1},
        {"fc1.bias", {hidden, 0}, 1, &m->b1},
        {"fc2.weight", {hidden, 1}, 2, &m->w2},
        {"fc2.bias", {1, 0}, 1, &m->b2},
    };
    for (int k = 0; k < 4; k++) {
        int i = reversed ? 3 - k : k;
        CALL(m->ctx, ag_param_new_named(m->ctx, p[i].name, p[i].shape, p[i].ndim, NULL, p[i].out));
    }
}

/* Model outputs [ROWS, 1] for x [ROWS, D_IN]; with targets, the MSE loss.
 * `seed` picks the dropout mask (grad mode off: no dropout). */
static ag_status forward(const struct mlp *m, const float *x, const float *y, uint64_t seed,
                         ag_tensor *out, ag_tensor *loss) {
    ag_context *c = m->ctx;
    ag_tensor xt, h, pred, yt;
    ag_status st;
    if ((st = ag_tensor_new(c, (const size_t[]){ROWS, D_IN}, 2, x, &xt)) != AG_STATUS_OK) return st;
    if ((st = ag_linear(c, xt, m->w1, &m->b1, &h)) != AG_STATUS_OK) return st;
    if ((st = ag_relu(c, h, &h)) != AG_STATUS_OK) return st;
    if ((st = ag_dropout(c, h, 0.1f, seed, &h)) != AG_STATUS_OK) return st;
    if ((st = ag_linear(c, h, m->w2, &m->b2, &pred)) != AG_STATUS_OK) return st;
    *out = pred;
    if (y == NULL) return AG_STATUS_OK;
    if ((st = ag_tensor_new(c, (const size_t[]){ROWS, 1}, 2, y, &yt)) != AG_STATUS_OK) return st;
    return ag_mse_loss(c, pred, yt, loss);
}

/* The outputs of m on x with grad mode off, into out[ROWS]. */
static void predict(const struct mlp *m, const float *x, float *out) {
    ag_tensor pred;
    CALL(m->ctx, ag_reset(m->ctx));
    CALL(m->ctx, ag_set_grad_enabled(m->ctx, false));
    CALL(m->ctx, forward(m, x, NULL, 0, &pred, NULL));
    CALL(m->ctx, ag_tensor_read(m->ctx, pred, out, ROWS));
    CALL(m->ctx, ag_set_grad_enabled(m->ctx, true));
}

/* Copies the values of m's parameter `name` into buf (cap floats); returns
 * the element count (0 if there is no such parameter). */
static size_t values_of(const struct mlp *m, const char *name, float *buf, size_t cap) {
    size_t n = 0;
    CALL(m->ctx, ag_param_count(m->ctx, &n));
    for (size_t i = 0; i < n; i++) {
        ag_tensor p;
        char pname[AG_MAX_PARAM_NAME + 1];
        size_t len, numel;
        CALL(m->ctx, ag_param_at(m->ctx, i, &p));
        CALL(m->ctx, ag_param_name(m->ctx, p, pname, sizeof pname, &len));
        if (strcmp(pname, name) != 0) continue;
        CALL(m->ctx, ag_tensor_numel(m->ctx, p, &numel));
        if (numel > cap) return 0;
        CALL(m->ctx, ag_tensor_read(m->ctx, p, buf, numel));
        return numel;
    }
    return 0;
}

static float xs[ROWS * D_IN], ys[ROWS];

int main(int argc, char **argv) {
    char path[4096];
    if (argc > 1) {
        snprintf(path, sizeof path, "%s", argv[1]);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/mlp_io.%ld.safetensors",
                 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", (long)getpid());
    }
    /* Fixed points on [-1, 1]^2 (xorshift32) and their targets. */
    uint32_t r = 2463534242u;
    for (int i = 0; i < ROWS * D_IN; i++) {
        r ^= r << 13;
        r ^= r >> 17;
        r ^= r << 5;
        xs[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < ROWS; i++) {
        float x0 = xs[i * D_IN], x1 = xs[i * D_IN + 1];
        ys[i] = sinf(2.0f * x0) + 0.5f * x1 * x1;
    }

    struct mlp a;
    mlp_new(&a, HIDDEN, 0);
    ag_context *c = a.ctx;
    CALL(c, ag_param_init(c, a.w1, AG_INIT_KAIMING_UNIFORM, sqrtf(2.0f), 0.0f, SEED));
    CALL(c, ag_param_init(c, a.w2, AG_INIT_XAVIER_UNIFORM, 1.0f, 0.0f, SEED));
    CALL(c, ag_param_init(c, a.b1, AG_INIT_ZEROS, 0.0f, 0.0f, SEED));
    CALL(c, ag_param_init(c, a.b2, AG_INIT_ZEROS, 0.0f, 0.0f, SEED));
    CALL(c, ag_param_set_weight_decay(c, a.b1, false));
    CALL(c, ag_param_set_weight_decay(c, a.b2, false));
    CALL(c, ag_optimizer_adamw(c, 1e-2f, 0.9f, 0.999f, 1e-8f, 1e-4f));

    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < STEPS; step++) {
        ag_tensor pred, loss;
        CALL(c, ag_reset(c));
        CALL(c, forward(&a, xs, ys, (uint64_t)step, &pred, &loss));
        CALL(c, ag_tensor_item(c, loss, &last));
        if (step == 0) first = last;
        CALL(c, ag_backward(c, loss));
        CALL(c, ag_optimizer_step(c));
        CALL(c, ag_zero_grad(c));
        if (step % 100 == 0 || step == STEPS - 1) printf("step %3d  mse %.5f\n", step, last);
    }
    /* The targets' variance is about 0.4; a model that learnt nothing stays
     * near it, this one ends two orders of magnitude lower. */
    expect(last < 0.05f * first, "the MSE fell to under 5% of its first value");

    /* The parameters, from the context alone. */
    size_t n = 0;
    CALL(c, ag_param_count(c, &n));
    printf("%zu parameters:\n", n);
    expect(n == 4, "four parameters");
    for (size_t i = 0; i < n; i++) {
        ag_tensor p;
        char name[AG_MAX_PARAM_NAME + 1];
        size_t len, dims[AG_MAX_DIMS], nd;
        CALL(c, ag_param_at(c, i, &p));
        CALL(c, ag_param_name(c, p, name, sizeof name, &len));
        CALL(c, ag_tensor_shape(c, p, dims, &nd));
        printf("  %-10s [", name);
        for (size_t d = 0; d < nd; d++) printf(d ? ", %zu" : "%zu", dims[d]);
        printf("]\n");
    }

    float want[ROWS], got[ROWS];
    predict(&a, xs, want);
    CALL(c, ag_safetensors_save(c, path));
    printf("exported %s\n", path);

    /* A fresh model, parameters made in another order and left at zero. */
    struct mlp b;
    mlp_new(&b, HIDDEN, 1);
    CALL(b.ctx, ag_safetensors_load(b.ctx, path));
    predict(&b, xs, got);
    expect(memcmp(want, got, sizeof want) == 0, "outputs after the load are bit-identical");
    static const char *const names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    for (int i = 0; i < 4; i++) {
        static float va[D_IN * HIDDEN], vb[D_IN * HIDDEN];
        size_t na = values_of(&a, names[i], va, D_IN * HIDDEN);
        size_t nb = values_of(&b, names[i], vb, D_IN * HIDDEN);
        expect(na > 0 && na == nb && memcmp(va, vb, na * sizeof(float)) == 0, names[i]);
    }

    /* Another shape: refused, nothing changes. */
    struct mlp d;
    mlp_new(&d, HIDDEN / 2, 0);
    ag_status st = ag_safetensors_load(d.ctx, path);
    printf("load into fc1 [2, 16]: %s: %s\n", ag_status_str(st), ag_context_last_error(d.ctx));
    expect(st == AG_STATUS_CHECKPOINT_MISMATCH, "a model of another shape is refused");
    float z[D_IN * HIDDEN];
    size_t nz = values_of(&d, "fc2.bias", z, D_IN * HIDDEN);
    expect(nz == 1 && z[0] == 0.0f, "a refused load changes nothing");

    remove(path);
    CALL(NULL, ag_context_free(&a.ctx));
    CALL(NULL, ag_context_free(&b.ctx));
    CALL(NULL, ag_context_free(&d.ctx));
    if (failures > 0) {
        fprintf(stderr, "mlp_io: %d check(s) failed\n", failures);
        return 1;
    }
    printf("mlp_io: trained, listed, exported and reloaded bit-exactly\n");
    return 0;
}

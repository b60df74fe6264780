/* guide.c: the README's example, whole. A two-layer classifier learns which
 * third of the plane (by angle) a point of [-1, 1]^2 is in: parameters by
 * name and ag_param_init, AdamW, the training loop in the header's order,
 * evaluation with grad mode off, a safetensors save and a load into a fresh
 * context. Exit 0 when the test accuracy is at least 90% and the reloaded
 * model predicts the same bits. Build: make examples; run: build/guide */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "arenagrad.h"

enum { N = 300, TRAIN = 240, IN = 2, HID = 32, CLASSES = 3, STEPS = 300 };

/* Every call returns a status; on failure the context says what and why. */
#define CALL(ctx, x) do { ag_status st_ = (x); if (st_ != AG_STATUS_OK) { \
    fprintf(stderr, "%s: %s: %s\n", #x, ag_status_str(st_), ag_context_last_error(ctx)); \
    exit(1); } } while (0)

typedef struct { ag_context *ctx; ag_tensor w1, b1, w2, b2; } model;

static void model_new(model *m) {
    CALL(NULL, ag_context_new(&m->ctx));
    ag_context *c = m->ctx;
    /* Weights are [in, out] (ag_linear computes x @ w + b). */
    CALL(c, ag_param_new_named(c, "fc1.weight", (size_t[]){IN, HID}, 2, NULL, &m->w1));
    CALL(c, ag_param_new_named(c, "fc1.bias", (size_t[]){HID}, 1, NULL, &m->b1));
    CALL(c, ag_param_new_named(c, "fc2.weight", (size_t[]){HID, CLASSES}, 2, NULL, &m->w2));
    CALL(c, ag_param_new_named(c, "fc2.bias", (size_t[]){CLASSES}, 1, NULL, &m->b2));
}

/* logits [rows, CLASSES] of x [rows, IN]: activations, valid until ag_reset. */
static ag_tensor forward(model *m, const float *x, size_t rows) {
    ag_context *c = m->ctx;
    ag_tensor xt, h, logits;
    CALL(c, ag_tensor_new(c, (size_t[]){rows, IN}, 2, x, &xt));
    CALL(c, ag_linear(c, xt, m->w1, &m->b1, &h));
    CALL(c, ag_relu(c, h, &h));
    CALL(c, ag_linear(c, h, m->w2, &m->b2, &logits));
    return logits;
}

/* Evaluation: grad mode off records nothing; read the values, then reset. */
static float accuracy(model *m, const float *x, const int32_t *y, size_t rows, float *out) {
    ag_context *c = m->ctx;
    CALL(c, ag_set_grad_enabled(c, false));
    ag_tensor logits = forward(m, x, rows), loss;
    CALL(c, ag_tensor_read(c, logits, out, rows * CLASSES));
    CALL(c, ag_cross_entropy(c, logits, y, rows, &loss));
    float l;
    CALL(c, ag_tensor_item(c, loss, &l));
    CALL(c, ag_reset(c));
    CALL(c, ag_set_grad_enabled(c, true));
    size_t right = 0;
    for (size_t i = 0; i < rows; i++) {
        const float *o = out + i * CLASSES;
        int best = o[1] > o[0] ? 1 : 0;
        best = o[2] > o[best] ? 2 : best;
        right += best == y[i];
    }
    printf("  loss %.4f, accuracy %zu/%zu\n", l, right, rows);
    return (float)right / (float)rows;
}

int main(void) {
    static float x[N * IN], out[N * CLASSES], out2[N * CLASSES];
    static int32_t y[N];
    uint32_t r = 12345u; /* xorshift32: the same points on every run */
    for (int i = 0; i < N * IN; i++) {
        r ^= r << 13; r ^= r >> 17; r ^= r << 5;
        x[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < N; i++) {
        double a = atan2(x[2 * i + 1], x[2 * i]) + 3.14159265358979;
        y[i] = (int32_t)(a / (2 * 3.14159265358979 / 3)) % CLASSES;
    }

    model m;
    model_new(&m);
    ag_context *c = m.ctx;
    /* Initialise: Kaiming for the ReLU layer, Xavier for the output layer,
     * zero biases (the default of a NULL init); no weight decay on biases. */
    CALL(c, ag_param_init(c, m.w1, AG_INIT_KAIMING_UNIFORM, sqrtf(2.0f), 0.0f, 1));
    CALL(c, ag_param_init(c, m.w2, AG_INIT_XAVIER_UNIFORM, 1.0f, 0.0f, 1));
    CALL(c, ag_param_set_weight_decay(c, m.b1, false));
    CALL(c, ag_param_set_weight_decay(c, m.b2, false));
    /* The optimizer comes after the last parameter. */
    CALL(c, ag_optimizer_adamw(c, 1e-2f, 0.9f, 0.999f, 1e-8f, 1e-4f));

    for (int step = 0; step < STEPS; step++) {
        ag_tensor logits = forward(&m, x, TRAIN), loss;
        CALL(c, ag_cross_entropy(c, logits, y, TRAIN, &loss));
        CALL(c, ag_backward(c, loss));
        CALL(c, ag_clip_grad_norm(c, 1.0f, NULL));
        CALL(c, ag_optimizer_step(c));
        CALL(c, ag_zero_grad(c));
        if (step % 100 == 0 || step == STEPS - 1) {
            float l; /* the loss is readable from its op until ag_reset */
            CALL(c, ag_tensor_item(c, loss, &l));
            printf("step %3d: train loss %.4f\n", step, l);
        }
        CALL(c, ag_reset(c)); /* this step's activations and handles die here */
    }
    printf("train:\n");
    accuracy(&m, x, y, TRAIN, out);
    printf("test:\n");
    float acc = accuracy(&m, x + TRAIN * IN, y + TRAIN, N - TRAIN, out);

    /* Save by name; load into a fresh context made the same way. */
    const char *path = "guide.safetensors";
    CALL(c, ag_safetensors_save(c, path));
    model m2;
    model_new(&m2);
    CALL(m2.ctx, ag_safetensors_load(m2.ctx, path));
    printf("reloaded from %s:\n", path);
    accuracy(&m2, x + TRAIN * IN, y + TRAIN, N - TRAIN, out2);
    int same = 1;
    for (int i = 0; i < (N - TRAIN) * CLASSES; i++) same &= out[i] == out2[i];
    remove(path);
    CALL(NULL, ag_context_free(&m.ctx));
    CALL(NULL, ag_context_free(&m2.ctx));
    printf("%s\n", same && acc >= 0.9f ? "ok" : "FAILED");
    return same && acc >= 0.9f ? 0 : 1;
}

/*
 * score.c: --score, the figures a reference implementation can check.
 *
 * The model (--init-from) reads --data's first T tokens and
 * predicts each next one (the targets are tokens 1..T). Printed on stdout,
 * one figure a line, floats with 9 significant digits (every float32
 * apart):
 *
 *   loss L                the mean cross-entropy
 *   grad_norm G           the global L2 norm of every parameter's gradient
 *   sgd_loss L            the loss after one plain SGD step, p -= lr * grad
 *                         (--lr; no momentum, no decay, no clipping)
 *   logits t v0 .. vV-1   position t's logits, t = 0 .. T-1
 *
 * With --score-grads FILE, the gradient of every parameter after that
 * backward pass (before the step) goes to FILE as a float32 safetensors
 * file under the parameters' names (transformers' names: model.c). The
 * bytes are written here rather than through ag_safetensors_save, which
 * saves the parameters' values: copying each gradient into its parameter
 * would change the weights the SGD step and its loss still need.
 *
 * c_examples/train_full/tests/test_lm_parity.sh compares these with what
 * torch computes for the same weights.
 */
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_full.h"

/* Every parameter's gradient, in creation order. */
struct grads {
    size_t n;        /* parameters */
    char *header;    /* the safetensors header: length (8 bytes), JSON, padding */
    size_t header_len;
    float *values;   /* every gradient, packed in the header's order */
    size_t numel;
};

static void grads_free(struct grads *g)
{
    free(g->header);
    free(g->values);
    memset(g, 0, sizeof *g);
}

/* Appends to the JSON header being built in g->header (cap bytes). */
static bool append(struct grads *g, size_t *cap, const char *text)
{
    size_t n = strlen(text);
    if (g->header_len + n + 8 > *cap) {
        size_t want = (*cap + n + 8) * 2;
        char *grown = realloc(g->header, want);
        if (grown == NULL) return false;
        g->header = grown;
        *cap = want;
    }
    memcpy(g->header + g->header_len, text, n);
    g->header_len += n;
    return true;
}

/* Reads every parameter's gradient and lays out the file's header. */
static ag_status grads_collect(ag_context *ctx, struct grads *g, const char **what)
{
    *what = "ag_param_count";
    ag_status st = ag_param_count(ctx, &g->n);
    size_t cap = 0;
    if (st == AG_STATUS_OK && !append(g, &cap, "01234567{")) /* the length: below */
        st = AG_STATUS_OUT_OF_MEMORY;
    size_t offset = 0;
    for (size_t i = 0; st == AG_STATUS_OK && i < g->n; i++) {
        ag_tensor p;
        size_t shape[AG_MAX_DIMS], ndim = 0, numel = 0, len = 0;
        char name[AG_MAX_PARAM_NAME + 1];
        *what = "reading a parameter's gradient";
        st = ag_param_at(ctx, i, &p);
        if (st == AG_STATUS_OK) st = ag_param_name(ctx, p, name, sizeof name, &len);
        if (st == AG_STATUS_OK) st = ag_tensor_shape(ctx, p, shape, &ndim);
        if (st == AG_STATUS_OK) st = ag_tensor_numel(ctx, p, &numel);
        if (st != AG_STATUS_OK) break;
        float *grown = realloc(g->values, (g->numel + numel) * sizeof(float));
        if (grown == NULL) {
            st = AG_STATUS_OUT_OF_MEMORY;
            break;
        }
        g->values = grown;
        st = ag_tensor_read_grad(ctx, p, g->values + g->numel, numel);
        if (st != AG_STATUS_OK) break;
        g->numel += numel;
        /* Parameter names are model.c's: letters, digits, '.' and '_'. */
        char entry[AG_MAX_PARAM_NAME + 200];
        int m = snprintf(entry, sizeof entry, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                         i > 0 ? "," : "", name);
        for (size_t d = 0; d < ndim; d++)
            m += snprintf(entry + m, sizeof entry - (size_t)m, "%s%zu", d > 0 ? "," : "", shape[d]);
        snprintf(entry + m, sizeof entry - (size_t)m, "],\"data_offsets\":[%zu,%zu]}", offset,
                 offset + numel * sizeof(float));
        offset += numel * sizeof(float);
        if (!append(g, &cap, entry)) st = AG_STATUS_OUT_OF_MEMORY;
    }
    if (st == AG_STATUS_OK && !append(g, &cap, "}")) st = AG_STATUS_OUT_OF_MEMORY;
    if (st != AG_STATUS_OK) return st;
    while (g->header_len % 8 != 0) g->header[g->header_len++] = ' ';
    uint64_t json_len = g->header_len - 8;
    for (int b = 0; b < 8; b++) g->header[b] = (char)(json_len >> (8 * b) & 0xff);
    return AG_STATUS_OK;
}

/* The values as little-endian float32, as safetensors stores them. */
static bool grads_write(struct grads *g, const char *path, char *err, size_t errlen)
{
    unsigned char *bytes = malloc(g->numel * 4 + 1);
    if (bytes == NULL) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (size_t i = 0; i < g->numel; i++) {
        uint32_t u;
        memcpy(&u, &g->values[i], 4);
        for (int b = 0; b < 4; b++) bytes[4 * i + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    bool ok = write_replace(path, g->header, g->header_len, bytes, g->numel * 4, "", 0, err, errlen);
    free(bytes);
    return ok;
}

int score(struct trainer *tr)
{
    const struct dataset *d = tr->data;
    ag_context *ctx = tr->ctx;
    const size_t T = tr->T, V = tr->V;
    if (dist_world() > 1) {
        if (dist_root()) fprintf(stderr, "train_full: --score runs in one process\n");
        return EXIT_USAGE;
    }
    for (size_t t = 0; t < T; t++) {
        tr->ids[t] = d->shards ? (int32_t)d->tok[t] : d->tokens[t];
        tr->targets[t] = d->shards ? (int32_t)d->tok[t + 1] : d->tokens[t + 1];
    }
    ag_tensor logits, loss;
    float before = 0.0f, norm = 0.0f, after = 0.0f;
    const char *what = "ag_reset";
    ag_status st = ag_reset(ctx);
    if (st == AG_STATUS_OK) {
        what = "forward";
        st = model_forward(ctx, &tr->model, tr->ids, tr->targets, 1, T, &logits, &loss);
    }
    if (st == AG_STATUS_OK) st = ag_tensor_item(ctx, loss, &before);
    if (st == AG_STATUS_OK) st = ag_tensor_read(ctx, logits, tr->logits, T * V);
    if (st == AG_STATUS_OK) {
        what = "ag_backward";
        st = ag_backward(ctx, loss);
    }
    if (st == AG_STATUS_OK) {
        /* A bound no norm reaches: the norm is measured, nothing scaled. */
        what = "ag_clip_grad_norm";
        st = ag_clip_grad_norm(ctx, FLT_MAX, &norm);
    }
    struct grads grads = {0};
    if (st == AG_STATUS_OK && tr->cfg->score_grads != NULL) st = grads_collect(ctx, &grads, &what);
    if (st == AG_STATUS_OK) {
        what = "ag_optimizer_step";
        st = ag_optimizer_step(ctx);
    }
    if (st == AG_STATUS_OK) st = ag_reset(ctx);
    if (st == AG_STATUS_OK) st = ag_set_grad_enabled(ctx, false);
    if (st == AG_STATUS_OK) {
        what = "forward after the step";
        st = model_forward(ctx, &tr->model, tr->ids, tr->targets, 1, T, NULL, &loss);
    }
    if (st == AG_STATUS_OK) st = ag_tensor_item(ctx, loss, &after);
    if (st != AG_STATUS_OK) {
        grads_free(&grads);
        return report_failure(&tr->reporter, what, st);
    }
    if (tr->cfg->score_grads != NULL) {
        char err[PATH_CAP + 200];
        bool ok = grads_write(&grads, tr->cfg->score_grads, err, sizeof err);
        grads_free(&grads);
        if (!ok) {
            fprintf(stderr, "train_full: --score-grads %s: %s\n", tr->cfg->score_grads, err);
            return EXIT_IO;
        }
    }
    printf("loss %.9g\ngrad_norm %.9g\nsgd_loss %.9g\n", (double)before, (double)norm,
           (double)after);
    for (size_t t = 0; t < T; t++) {
        printf("logits %zu", t);
        for (size_t v = 0; v < V; v++) printf(" %.9g", (double)tr->logits[t * V + v]);
        putchar('\n');
    }
    return fflush(stdout) == 0 ? 0 : EXIT_IO;
}

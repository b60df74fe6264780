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
 * Nothing is written; c_examples/train_full/tests/test_llama_parity.sh
 * compares these with what torch computes for the same weights.
 */
#include <float.h>
#include <stdio.h>

#include "train_full.h"

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
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, what, st);
    printf("loss %.9g\ngrad_norm %.9g\nsgd_loss %.9g\n", (double)before, (double)norm,
           (double)after);
    for (size_t t = 0; t < T; t++) {
        printf("logits %zu", t);
        for (size_t v = 0; v < V; v++) printf(" %.9g", (double)tr->logits[t * V + v]);
        putchar('\n');
    }
    return fflush(stdout) == 0 ? 0 : EXIT_IO;
}

/*
 * eval.c: the density evaluated directly on a context of the caller's own
 * (m->ctx), for build/advi and build/nuts's --soak and --grad-bench; the
 * sampler (ag_nuts_run) makes its own contexts instead.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nuts.h"

void nuts_check(ag_context *ctx, ag_status st, const char *what) {
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "nuts: %s failed: %s: %s\n", what, ag_status_str(st), ag_context_last_error(ctx));
        exit(1);
    }
}

void sampler_fail(const char *prog, const char *what, ag_status st) {
    fprintf(stderr, "%s: %s failed: %s: %s\n", prog, what, ag_status_str(st), ag_sampler_last_error());
    exit(1);
}

#define CALL(x) nuts_check(m->ctx, (x), #x)

void model_open(model *m, const char *path) {
    model_load(m, path);
    nuts_check(NULL, ag_context_new(&m->ctx), "ag_context_new");
    size_t shape[1] = {(size_t)m->dim};
    CALL(ag_param_new(m->ctx, shape, 1, NULL, &m->q));
}

ag_tensor model_logp(model *m, ag_tensor q) {
    ag_tensor lp;
    CALL(model_density(m->ctx, q, m, &lp));
    return lp;
}

/* With m->capture, the first evaluation is captured (ag_capture_begin ..
 * ag_capture_end) and every later one replays it (ag_replay): the same
 * kernels on the new position, without building the graph again, and
 * bit-identical to the eager path. A replay always runs backward; where
 * log p is not finite its gradient is ignored, as the eager path never
 * computes it. */
double model_logp_grad(model *m, const double *q, double *g) {
    float qf[NUTS_MAX_NAMES], gf[NUTS_MAX_NAMES];
    for (int i = 0; i < m->dim; i++) qf[i] = (float)q[i];
    CALL(ag_param_write(m->ctx, m->q, qf, (size_t)m->dim));
    CALL(ag_zero_grad(m->ctx));
    bool replay = m->capture && m->step.context != 0;
    ag_tensor lp = m->step_lp;
    if (replay) {
        CALL(ag_replay(m->ctx, m->step));
    } else {
        if (m->capture) CALL(ag_capture_begin(m->ctx));
        lp = model_logp(m, m->q);
    }
    float v;
    CALL(ag_tensor_item(m->ctx, lp, &v));
    double out = v;
    if (m->capture && !replay) {
        CALL(ag_backward(m->ctx, lp));
        CALL(ag_capture_end(m->ctx, lp, &m->step));
        m->step_lp = lp;
    }
    if (isfinite(v)) {
        if (!m->capture) CALL(ag_backward(m->ctx, lp));
        CALL(ag_tensor_read_grad(m->ctx, m->q, gf, (size_t)m->dim));
        for (int i = 0; i < m->dim; i++) {
            if (!isfinite(gf[i])) out = -INFINITY;
            g[i] = gf[i];
        }
    } else {
        out = -INFINITY;
    }
    /* A captured step stays the current iteration between replays. */
    if (!m->capture) CALL(ag_reset(m->ctx));
    m->evals++;
    return out;
}

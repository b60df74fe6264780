/*
 * bench_models.h: what bench_eager.c and bench_replay.c share, so that
 * both time the same graphs: the context and its error check, timing
 * helpers, the command line, and the two models built through include/arenagrad.h: (a) the
 * scalar chain, a tanh recursion of one-element ops, and (b) the
 * non-centred eight-schools log density. Each program defines BENCH_NAME
 * (its name in error messages) before including it.
 */
#ifndef BENCH_MODELS_H
#define BENCH_MODELS_H

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arenagrad.h"

static ag_context *ctx;

static void check(ag_status st, const char *what) {
    if (st != AG_STATUS_OK) {
        fprintf(stderr, BENCH_NAME ": %s failed: %s: %s\n", what, ag_status_str(st),
                ag_context_last_error(ctx));
        exit(1);
    }
}
#define CALL(x) check((x), #x)

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median, least and greatest of the times t[0..n), n >= 1, into
 * out[0], out[1] and out[2] (sorts t). */
static void summarise_times(double *t, int n, double out[3]) {
    double lo = t[0], hi = t[0];
    for (int r = 1; r < n; r++) { lo = fmin(lo, t[r]); hi = fmax(hi, t[r]); }
    out[0] = median(t, n);
    out[1] = lo;
    out[2] = hi;
}

/* The command line: --quick, --model NAME (one model), --reps N (21, or 5
 * with --quick, where absent or below 1), and --replay-only where the
 * program takes it (replay_only not NULL). Other arguments are ignored:
 * they belong to the other benches, which share BENCH_ARGS. */
typedef struct {
    bool quick;
    const char *only;
    int reps;
} bench_args;

static bench_args parse_bench_args(int argc, char **argv, bool *replay_only) {
    bench_args a = {false, NULL, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) a.quick = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) a.only = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) a.reps = atoi(argv[++i]);
        else if (replay_only && !strcmp(argv[i], "--replay-only")) *replay_only = true;
    }
    if (a.reps < 1) a.reps = a.quick ? 5 : 21;
    return a;
}

/* Whether the model called name runs: no --model, or --model name. */
static bool bench_runs(const bench_args *a, const char *name) { return !a->only || !strcmp(a->only, name); }

/* ---- (a) the scalar chain ---- */

#define T_STEPS 250
#define N_PARAMS 4
static const double init[N_PARAMS] = {0.7, 0.5, 0.1, 0.3}; /* a, b, c, s */
static float xs[T_STEPS];
static ag_tensor p[N_PARAMS];
static long ops; /* ops recorded by the last forward */

static ag_tensor op2(ag_status (*f)(ag_context *, ag_tensor, ag_tensor, ag_tensor *), ag_tensor x,
                     ag_tensor y) {
    ag_tensor t;
    check(f(ctx, x, y, &t), "binary op");
    ops++;
    return t;
}

static ag_tensor op1(ag_status (*f)(ag_context *, ag_tensor, ag_tensor *), ag_tensor x) {
    ag_tensor t;
    check(f(ctx, x, &t), "unary op");
    ops++;
    return t;
}

static ag_tensor scale(ag_tensor x, float s) {
    ag_tensor t;
    CALL(ag_scale(ctx, x, s, &t));
    ops++;
    return t;
}

/* The chain's inputs x_t, and a new context holding its parameters. */
static void chain_open(void) {
    for (int t = 0; t < T_STEPS; t++) xs[t] = (float)sin(0.1 * t) + 0.3f * (float)cos(0.37 * t);
    CALL(ag_context_new(&ctx));
    size_t one[1] = {1};
    for (int k = 0; k < N_PARAMS; k++) {
        float v = (float)init[k];
        CALL(ag_param_new(ctx, one, 1, &v, &p[k]));
    }
}

/* the loss L(a, b, c, s); h_0 = c */
static ag_tensor chain_forward(void) {
    ag_tensor a = p[0], b = p[1], c = p[2], s = p[3], h = c, acc = {0, 0, 0};
    ops = 0;
    for (int t = 0; t < T_STEPS; t++) {
        ag_tensor z = op2(ag_add, op2(ag_add, op2(ag_mul, a, h), scale(b, xs[t])), c);
        h = op1(ag_tanh, z);
        ag_tensor e = op1(ag_exp, op2(ag_mul, s, h));
        acc = t == 0 ? e : op2(ag_add, acc, e);
    }
    return scale(acc, 1.0f / T_STEPS);
}

/* One eager gradient on the context as it stands: the loss, the four
 * gradients into g. */
static float chain_grad(float g[N_PARAMS]) {
    CALL(ag_zero_grad(ctx));
    ag_tensor loss = chain_forward();
    float v;
    CALL(ag_tensor_item(ctx, loss, &v));
    CALL(ag_backward(ctx, loss));
    for (int k = 0; k < N_PARAMS; k++) CALL(ag_tensor_read_grad(ctx, p[k], &g[k], 1));
    return v;
}

/* ---- (b) eight schools, non-centred ---- */

#define J 8
static const float es_y[J] = {28, 8, -3, 7, -1, 1, 18, 12};
static const float es_sigma[J] = {15, 10, 16, 11, 9, 11, 10, 18};
static ag_tensor q;

static ag_tensor slice(ag_tensor x, size_t start, size_t len) {
    ag_tensor t;
    CALL(ag_slice(ctx, x, 0, start, len, &t));
    ops++;
    return t;
}

static ag_tensor constant(const float *v, size_t n) {
    size_t shape[1] = {n};
    ag_tensor t;
    CALL(ag_tensor_new(ctx, shape, 1, v, &t));
    ops++;
    return t;
}

static ag_tensor sumsq(ag_tensor v, float s) {
    return scale(op1(ag_sum, op2(ag_mul, v, v)), s);
}

/* log p(theta_trans, mu, log tau), as models.c writes it */
static ag_tensor eight_schools_logp(void) {
    static const float onev = 1.0f;
    ops = 0;
    ag_tensor one = constant(&onev, 1);
    ag_tensor tt = slice(q, 0, J), mu = slice(q, J, 1), ltau = slice(q, J + 1, 1);
    ag_tensor tau = op1(ag_exp, ltau);
    ag_tensor theta = op2(ag_add, op2(ag_mul, tt, tau), mu);
    ag_tensor r = op2(ag_sub, constant(es_y, J), theta);
    ag_tensor z = op2(ag_div, r, constant(es_sigma, J));
    ag_tensor lp = op2(ag_add, sumsq(z, -0.5f), sumsq(tt, -0.5f));
    lp = op2(ag_add, lp, sumsq(mu, -1.0f / 50.0f));
    /* log(1 + tau^2 / 25): the half-Cauchy(0, 5) prior; + log tau: Jacobian */
    ag_tensor c = op1(ag_log, op2(ag_add, scale(op1(ag_exp, scale(ltau, 2.0f)), 1.0f / 25.0f), one));
    return op2(ag_add, op2(ag_sub, lp, c), ltau);
}

#endif

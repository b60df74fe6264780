/*
 * bench_eager.c: the eager path's cost per op, through include/arenagrad.h
 * alone (run by `make bench`; `--quick` for the short form `make test` runs).
 *
 * (a) scalar_chain: a recursion of one-element ops over T = 250 steps,
 *       h_t = tanh(a h_{t-1} + b x_t + c),  L = (1/T) sum_t exp(s h_t),
 *     8 ops per step (mul, scale, add, add, tanh, mul, exp, add), 2,000
 *     recorded ops in all. One iteration is what a sampler's gradient does:
 *     zero_grad, forward, backward, read the four gradients, reset.
 *     Reported: ns per recorded forward op, forward and backward together.
 *     Before timing, the gradient is checked against a float64 forward-mode
 *     (dual number) evaluation of the same recursion in C; a mismatch
 *     exits 1, so the figure cannot come from a wrong graph.
 * (b) eight_schools: the non-centred eight-schools log density (10
 *     parameters, the op chain of c_examples/nuts/models.c) and its
 *     gradient, as NUTS evaluates it (param_write ... reset). Reported:
 *     microseconds per gradient.
 *
 * Figures are medians over repetitions after a warm-up; each repetition
 * times a batch of iterations. Output: one machine-readable line per model,
 *   bench eager model=scalar_chain ops=2000 ns_per_op=... us_per_grad=...
 *   bench eager model=eight_schools ops=... us_per_grad=... ns_per_op=...
 * then a line for people. `--model scalar_chain|eight_schools` runs one
 * model and `--reps N` sets the repetitions (for profiling); other
 * arguments are ignored (they belong to the Rust bench, which shares
 * BENCH_ARGS).
 */
#define BENCH_NAME "bench_eager"
#include "bench_models.h"

/* float64 forward mode: value and d/d(a, b, c, s) of the same recursion */
static double chain_reference(double grad[N_PARAMS]) {
    double a = init[0], b = init[1], c = init[2], s = init[3];
    double h = c, dh[N_PARAMS] = {0, 0, 1, 0}, acc = 0, dacc[N_PARAMS] = {0};
    for (int t = 0; t < T_STEPS; t++) {
        double z = a * h + b * (double)xs[t] + c, dz[N_PARAMS];
        for (int k = 0; k < N_PARAMS; k++) dz[k] = a * dh[k];
        dz[0] += h;
        dz[1] += (double)xs[t];
        dz[2] += 1;
        h = tanh(z);
        for (int k = 0; k < N_PARAMS; k++) dh[k] = (1 - h * h) * dz[k];
        double e = exp(s * h);
        for (int k = 0; k < N_PARAMS; k++) dacc[k] += e * s * dh[k];
        dacc[3] += e * h;
        acc += e;
    }
    for (int k = 0; k < N_PARAMS; k++) grad[k] = dacc[k] / T_STEPS;
    return acc / T_STEPS;
}

static float chain_iteration(float g[N_PARAMS]) {
    float v = chain_grad(g);
    CALL(ag_reset(ctx));
    return v;
}

/* Times `batch` calls of f(i), `reps` times: the median, least and
 * greatest ns per call into out (as summarise_times). */
static void time_batches(void (*f)(int i), int reps, int batch, double out[3]) {
    double *t = calloc((size_t)reps, sizeof *t);
    if (t == NULL) exit(1);
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < batch; i++) f(i);
        t[r] = (now_ns() - t0) / batch;
    }
    summarise_times(t, reps, out);
    free(t);
}

static float gbuf[J + 2];
static void chain_i(int i) {
    (void)i;
    chain_iteration(gbuf);
}

/* The tolerance: float32 rounding over 2,000 ops of a contractive
 * recursion (|a (1 - h^2)| < 0.7) leaves errors near 1e-6 relative; 1e-4
 * of the largest gradient has margin for that and still catches a missing
 * or doubled edge, which moves a gradient by percents. */
#define CHAIN_TOL 1e-4

static int bench_chain(int reps, int batch) {
    chain_open();
    float g[N_PARAMS];
    double ref[N_PARAMS];
    double lref = chain_reference(ref);
    float l = chain_iteration(g);
    double gmax = 0, err = 0;
    for (int k = 0; k < N_PARAMS; k++) gmax = fmax(gmax, fabs(ref[k]));
    for (int k = 0; k < N_PARAMS; k++) err = fmax(err, fabs(g[k] - ref[k]) / gmax);
    double lerr = fabs(l - lref) / fabs(lref);
    if (!(err <= CHAIN_TOL) || !(lerr <= CHAIN_TOL)) {
        fprintf(stderr, "bench_eager: scalar_chain gradient check FAILED: loss %.9g vs %.9g, "
                        "max |g - g_ref| / max|g_ref| = %.3g (tolerance %.0e)\n", l, lref, err, CHAIN_TOL);
        for (int k = 0; k < N_PARAMS; k++) fprintf(stderr, "  g[%d] %.9g ref %.9g\n", k, g[k], ref[k]);
        return 1;
    }
    for (int i = 0; i < batch; i++) chain_iteration(g); /* warm-up: arena and tape reach capacity */
    double times[3];
    time_batches(chain_i, reps, batch, times);
    double med = times[0], lo = times[1], hi = times[2];
    printf("bench eager model=scalar_chain ops=%ld ns_per_op=%.1f ns_per_op_min=%.1f ns_per_op_max=%.1f "
           "us_per_grad=%.1f reps=%d batch=%d grad_err=%.2g\n",
           ops, med / ops, lo / ops, hi / ops, med / 1e3, reps, batch, err);
    printf("scalar chain: %ld one-element ops, %.0f ns per op forward+backward (median of %d, range %.0f-%.0f), "
           "%.1f us per gradient; gradient within %.1g of float64 forward mode\n",
           ops, med / ops, reps, lo / ops, hi / ops, med / 1e3, err);
    ag_context_free(&ctx);
    return 0;
}

static float eight_schools_grad(const float *pos, float *g) {
    CALL(ag_param_write(ctx, q, pos, J + 2));
    CALL(ag_zero_grad(ctx));
    ag_tensor lp = eight_schools_logp();
    float v;
    CALL(ag_tensor_item(ctx, lp, &v));
    CALL(ag_backward(ctx, lp));
    CALL(ag_tensor_read_grad(ctx, q, g, J + 2));
    CALL(ag_reset(ctx));
    return v;
}

static float es_pos[J + 2];
static void es_i(int i) {
    es_pos[i % (J + 2)] += 1e-6f; /* a moving position, as in a sampler */
    eight_schools_grad(es_pos, gbuf);
}

static int bench_eight_schools(int reps, int batch) {
    CALL(ag_context_new(&ctx));
    size_t shape[1] = {J + 2};
    CALL(ag_param_new(ctx, shape, 1, NULL, &q));
    for (int i = 0; i < J + 2; i++) es_pos[i] = 0.1f * (float)(i - 4);
    for (int i = 0; i < batch; i++) eight_schools_grad(es_pos, gbuf);
    double times[3];
    time_batches(es_i, reps, batch, times);
    double med = times[0], lo = times[1], hi = times[2];
    printf("bench eager model=eight_schools ops=%ld us_per_grad=%.3f us_per_grad_min=%.3f us_per_grad_max=%.3f "
           "ns_per_op=%.1f reps=%d batch=%d\n",
           ops, med / 1e3, lo / 1e3, hi / 1e3, med / ops, reps, batch);
    printf("eight schools (non-centred, 10 parameters): %.2f us per gradient (median of %d, range %.2f-%.2f), "
           "%ld ops\n", med / 1e3, reps, lo / 1e3, hi / 1e3, ops);
    ag_context_free(&ctx);
    return 0;
}

int main(int argc, char **argv) {
    bench_args a = parse_bench_args(argc, argv, NULL);
    int rc = 0;
    if (bench_runs(&a, "scalar_chain")) rc = bench_chain(a.reps, a.quick ? 5 : 40);
    if (rc == 0 && bench_runs(&a, "eight_schools")) rc = bench_eight_schools(a.reps, a.quick ? 500 : 5000);
    return rc;
}

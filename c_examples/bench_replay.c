/*
 * bench_replay.c: a captured step replayed (ag_capture_begin/end,
 * ag_replay) against the eager path it was captured from, through
 * include/arenagrad.h alone (run by `make bench`; `--quick` for a short
 * run). The models are bench_eager.c's:
 *
 * (a) scalar_chain: 2,000 one-element ops (a tanh recursion over 250
 *     steps, 4 parameters); one iteration is zero_grad, forward and
 *     backward (or one replay), the loss and the four gradients read.
 * (b) eight_schools: the non-centred eight-schools log density and its
 *     gradient (10 parameters), with the position written into the
 *     parameter before each evaluation, as a sampler does.
 *
 * (c) garch11: a GARCH(1,1) log likelihood written as a scalar recursion
 *     over 200 observations (one-element slices of the series, then
 *     sigma_t^2 = alpha0 + alpha1 r_{t-1}^2 + beta1 sigma_{t-1}^2), about
 *     2,200 ops; the position written before each evaluation as in (b).
 *
 * Before timing, the replayed loss and gradients are compared bit for bit
 * with the eager ones at several positions; a mismatch exits 1. Eager and
 * replay batches alternate within each repetition (the machine may be
 * shared); the figures are medians. Output, one line per model:
 *   bench replay model=scalar_chain ops=2000 eager_ns_per_op=... replay_ns_per_op=... speedup=...
 *   bench replay model=eight_schools ops=... eager_us_per_grad=... replay_us_per_grad=... ...
 *   bench replay model=garch11 ops=... eager_us_per_grad=... replay_us_per_grad=... ...
 * (ns per recorded forward op, forward and backward together). `--model
 * NAME` runs one model, `--reps N` sets the repetitions, `--replay-only`
 * times replays alone (for profiling); other arguments
 * are ignored (BENCH_ARGS is shared with the other benches).
 */
#define BENCH_NAME "bench_replay"
#include "bench_models.h"

/* One eager evaluation: the loss, the gradients into g[0..n). */
static float chain_eager(float g[N_PARAMS]) {
    CALL(ag_reset(ctx)); /* ends the previous iteration (a replayed step's too) */
    return chain_grad(g);
}

static ag_step step;
static ag_tensor step_loss;

/* Captures one iteration of `forward` (whose loss it returns). */
static void capture(ag_tensor (*forward)(void)) {
    CALL(ag_capture_begin(ctx));
    CALL(ag_zero_grad(ctx));
    step_loss = forward();
    CALL(ag_backward(ctx, step_loss));
    CALL(ag_capture_end(ctx, step_loss, &step));
}

static float chain_replay(float g[N_PARAMS]) {
    CALL(ag_zero_grad(ctx));
    CALL(ag_replay(ctx, step));
    float v;
    CALL(ag_tensor_item(ctx, step_loss, &v));
    for (int k = 0; k < N_PARAMS; k++) CALL(ag_tensor_read_grad(ctx, p[k], &g[k], 1));
    return v;
}

static bool same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Times `batch` calls of f, alternating with g, `reps` times: medians
 * (and ranges) of both, in ns per call. */
typedef void (*bench_fn)(int i);
static bool replay_only; /* --replay-only: time the replays alone (profiling) */
static void ab(bench_fn f, bench_fn g, int reps, int batch, double out[6]) {
    double *ta = malloc(sizeof(double) * (size_t)reps), *tb = malloc(sizeof(double) * (size_t)reps);
    if (ta == NULL || tb == NULL) exit(1);
    for (int i = 0; i < batch; i++) { f(i); g(i); } /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < batch && !replay_only; i++) f(i);
        double t1 = now_ns();
        for (int i = 0; i < batch; i++) g(i);
        double t2 = now_ns();
        ta[r] = (t1 - t0) / batch;
        tb[r] = (t2 - t1) / batch;
    }
    summarise_times(ta, reps, out);
    summarise_times(tb, reps, out + 3);
    free(ta);
    free(tb);
}

static float gbuf[16];
static void chain_eager_i(int i) { (void)i; chain_eager(gbuf); }
static void chain_replay_i(int i) { (void)i; chain_replay(gbuf); }

static int bench_chain(int reps, int batch) {
    chain_open();
    capture(chain_forward);
    long n_ops = ops;
    /* Bit for bit against eager, at the initial and at moved parameters. */
    for (int trial = 0; trial < 3; trial++) {
        float ge[N_PARAMS], gr[N_PARAMS];
        float le = chain_eager(ge), lr = chain_replay(gr);
        bool ok = same(le, lr);
        for (int k = 0; k < N_PARAMS; k++) ok = ok && same(ge[k], gr[k]);
        if (!ok) {
            fprintf(stderr, "bench_replay: scalar_chain replay differs from eager (trial %d): loss %.9g vs %.9g\n",
                    trial, lr, le);
            return 1;
        }
        CALL(ag_reset(ctx));
        for (int k = 0; k < N_PARAMS; k++) {
            float v = (float)init[k] + 0.05f * (float)(trial + 1) * (float)(k + 1);
            CALL(ag_param_write(ctx, p[k], &v, 1));
        }
    }
    double r[6];
    ab(chain_eager_i, chain_replay_i, reps, batch, r);
    printf("bench replay model=scalar_chain ops=%ld eager_ns_per_op=%.1f replay_ns_per_op=%.1f "
           "replay_ns_per_op_min=%.1f replay_ns_per_op_max=%.1f speedup=%.2f reps=%d batch=%d\n",
           n_ops, r[0] / n_ops, r[3] / n_ops, r[4] / n_ops, r[5] / n_ops, r[0] / r[3], reps, batch);
    printf("scalar chain replayed: %.1f ns per op (eager %.1f; range %.1f-%.1f), %.2fx, bit-identical\n",
           r[3] / n_ops, r[0] / n_ops, r[4] / n_ops, r[5] / n_ops, r[0] / r[3]);
    CALL(ag_step_free(ctx, &step));
    ag_context_free(&ctx);
    return 0;
}

/* The models of a position vector (eight_schools, garch11): the log
 * density reads the parameter q, n values, into which each evaluation
 * first writes the position, as a sampler does. */
#define POS_MAX 16
static struct {
    ag_tensor q;
    size_t n;
    ag_tensor (*logp)(void);
    float pos[POS_MAX]; /* the position the timed evaluations move */
} pm;

/* One evaluation at pos, eager or the captured step replayed: the loss,
 * the gradient into g[0..pm.n). */
static float position_eval(const float *pos, float *g, bool replay) {
    if (!replay) CALL(ag_reset(ctx)); /* ends the previous iteration (a replayed step's too) */
    CALL(ag_param_write(ctx, pm.q, pos, pm.n));
    CALL(ag_zero_grad(ctx));
    ag_tensor lp = step_loss;
    if (replay) {
        CALL(ag_replay(ctx, step));
    } else {
        lp = pm.logp();
        CALL(ag_backward(ctx, lp));
    }
    float v;
    CALL(ag_tensor_item(ctx, lp, &v));
    CALL(ag_tensor_read_grad(ctx, pm.q, g, pm.n));
    return v;
}

static void position_eager_i(int i) {
    pm.pos[(size_t)i % pm.n] += 1e-6f; /* a moving position, as in a sampler */
    position_eval(pm.pos, gbuf, false);
}
static void position_replay_i(int i) {
    pm.pos[(size_t)i % pm.n] -= 1e-6f;
    position_eval(pm.pos, gbuf, true);
}

/* Captures pm's model at pm.pos (q already on ctx), compares the replay
 * with eager bit for bit at the four positions trial_pos writes, then
 * times both into r (as ab) and prints the machine-readable line. Returns
 * the ops one evaluation records, or -1 when the replay differs. */
static long bench_position(const char *name, void (*trial_pos)(int trial, float *pos), int reps, int batch,
                           double r[6]) {
    CALL(ag_param_write(ctx, pm.q, pm.pos, pm.n));
    capture(pm.logp);
    long n_ops = ops;
    for (int trial = 0; trial < 4; trial++) {
        float pos[POS_MAX], ge[POS_MAX], gr[POS_MAX];
        trial_pos(trial, pos);
        float le = position_eval(pos, ge, false), lr = position_eval(pos, gr, true);
        bool ok = same(le, lr);
        for (size_t k = 0; k < pm.n; k++) ok = ok && same(ge[k], gr[k]);
        if (!ok) {
            fprintf(stderr, "bench_replay: %s replay differs from eager (trial %d): %.9g vs %.9g\n", name, trial,
                    lr, le);
            return -1;
        }
    }
    ab(position_eager_i, position_replay_i, reps, batch, r);
    printf("bench replay model=%s ops=%ld eager_us_per_grad=%.3f replay_us_per_grad=%.3f "
           "replay_us_per_grad_min=%.3f replay_us_per_grad_max=%.3f eager_ns_per_op=%.1f replay_ns_per_op=%.1f "
           "speedup=%.2f reps=%d batch=%d\n",
           name, n_ops, r[0] / 1e3, r[3] / 1e3, r[4] / 1e3, r[5] / 1e3, r[0] / n_ops, r[3] / n_ops,
           r[0] / r[3], reps, batch);
    return n_ops;
}

static void eight_schools_trial_pos(int trial, float *pos) {
    for (int i = 0; i < J + 2; i++) pos[i] = 0.3f * (float)sin(1.7 * (i + 1) * (trial + 1));
}

static int bench_eight_schools(int reps, int batch) {
    CALL(ag_context_new(&ctx));
    size_t shape[1] = {J + 2};
    CALL(ag_param_new(ctx, shape, 1, NULL, &q));
    pm.q = q;
    pm.n = J + 2;
    pm.logp = eight_schools_logp;
    for (int i = 0; i < J + 2; i++) pm.pos[i] = 0.1f * (float)(i - 4);
    double r[6];
    if (bench_position("eight_schools", eight_schools_trial_pos, reps, batch, r) < 0) return 1;
    printf("eight schools replayed: %.3f us per gradient (eager %.3f; range %.3f-%.3f), %.2fx, bit-identical\n",
           r[3] / 1e3, r[0] / 1e3, r[4] / 1e3, r[5] / 1e3, r[0] / r[3]);
    CALL(ag_step_free(ctx, &step));
    ag_context_free(&ctx);
    return 0;
}

#define G_T 200
static float g_y[G_T];
static ag_tensor gq; /* (mu, alpha0, alpha1, beta1) */
static const float g_s1 = 0.5f; /* sigma_1^2 */
static const float g_start[4] = {0.05f, 0.1f, 0.2f, 0.7f};

/* -2 log p(y | mu, alpha0, alpha1, beta1) up to a constant, step by step */
static ag_tensor garch_logp(void) {
    ops = 0;
    ag_tensor y = constant(g_y, G_T), s2 = constant(&g_s1, 1), lp = {0, 0, 0}, r2 = {0, 0, 0};
    ag_tensor mu = slice(gq, 0, 1), a0 = slice(gq, 1, 1), a1 = slice(gq, 2, 1), b1 = slice(gq, 3, 1);
    for (size_t t = 0; t < G_T; t++) {
        if (t > 0) s2 = op2(ag_add, a0, op2(ag_add, op2(ag_mul, a1, r2), op2(ag_mul, b1, s2)));
        ag_tensor r = op2(ag_sub, slice(y, t, 1), mu);
        r2 = op2(ag_mul, r, r);
        ag_tensor term = op2(ag_add, op1(ag_log, s2), op2(ag_div, r2, s2));
        lp = t == 0 ? term : op2(ag_add, lp, term);
    }
    return scale(lp, -0.5f);
}

static void garch_trial_pos(int trial, float *pos) {
    for (int i = 0; i < 4; i++) pos[i] = g_start[i] * (1.0f + 0.1f * (float)sin(1.3 * (i + 1) * (trial + 1)));
}

static int bench_garch(int reps, int batch) {
    for (int t = 0; t < G_T; t++) g_y[t] = 0.8f * (float)sin(0.3 * t) + 0.4f * (float)cos(1.7 * t);
    CALL(ag_context_new(&ctx));
    size_t shape[1] = {4};
    CALL(ag_param_new(ctx, shape, 1, g_start, &gq));
    pm.q = gq;
    pm.n = 4;
    pm.logp = garch_logp;
    memcpy(pm.pos, g_start, sizeof g_start);
    double r[6];
    long n_ops = bench_position("garch11", garch_trial_pos, reps, batch, r);
    if (n_ops < 0) return 1;
    printf("garch11 replayed: %.1f ns per op, %.2f us per gradient (eager %.2f; range %.2f-%.2f), %.2fx, "
           "bit-identical\n",
           r[3] / n_ops, r[3] / 1e3, r[0] / 1e3, r[4] / 1e3, r[5] / 1e3, r[0] / r[3]);
    CALL(ag_step_free(ctx, &step));
    ag_context_free(&ctx);
    return 0;
}

int main(int argc, char **argv) {
    bench_args a = parse_bench_args(argc, argv, &replay_only);
    int rc = 0;
    if (bench_runs(&a, "scalar_chain")) rc = bench_chain(a.reps, a.quick ? 5 : 40);
    if (rc == 0 && bench_runs(&a, "eight_schools")) rc = bench_eight_schools(a.reps, a.quick ? 500 : 5000);
    if (rc == 0 && bench_runs(&a, "garch11")) rc = bench_garch(a.reps, a.quick ? 20 : 200);
    return rc;
}

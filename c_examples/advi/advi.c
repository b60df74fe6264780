/*
 * advi.c: mean-field ADVI on the NUTS models (c_examples/nuts/models.c).
 *
 * The approximation is q(z) = N(mu, diag(e^{2 omega})) on the unconstrained
 * space, fitted by the library's AdamW on the negative ELBO,
 * -E_q[log p(z)] - sum(omega) (the Gaussian entropy up to its constant),
 * estimated each step from S reparameterised draws z = mu + e^omega * eps,
 * so the gradient flows through the draws (Kucukelbir et al. 2017).
 *
 * Three things make one set of defaults work on posteriors whose scales
 * differ by 10^4 and whose coefficients are correlated (no per-model flag):
 *  - Start: a damped Newton optimisation of log p (Hessian by central
 *    differences of the library's gradients) finds the mode q0, and the
 *    start is mu = q0, sd_j = 1/sqrt(H_jj) with H = -Hessian of log p at
 *    q0: for a Gaussian posterior that is exactly the mean-field optimum,
 *    so ADVI only has to correct for the non-Gaussian part.
 *  - Scale: the trained parameters are in units of that start,
 *    mu = q0 + s0 * mt, omega = log s0 + ot (s0 = 1/sqrt(diag H)), so an
 *    Adam step of lr moves a mean by lr posterior sds on every model. This
 *    is a diagonal change of variables: the family stays mean-field.
 *  - Draws in antithetic pairs (eps, -eps): the part of the gradient that
 *    is linear in eps, the largest noise near a Gaussian's optimum,
 *    cancels within each pair.
 * The learning rate is held for the first half of the steps, then decays
 * linearly to 1% of itself; the reported mu and omega are the averages of
 * the iterates over the last quarter (Polyak averaging).
 *
 *   advi MODEL.data [--iters 2000] [--samples 4] [--lr 0.05] [--seed 1]
 *        [--nuts | --ref REF] [--check-means SD] [--no-capture]
 *
 * The first step's graph is captured and every later step replays it with
 * the new draws written into its eps constant (ag_input_write, ag_replay):
 * the same steps bit for bit; --no-capture builds the graph every step.
 *
 * Prints the ELBO (estimated from 200 draws, up to log p's constant) as it
 * goes, then each reported quantity's mean and sd (4,000 draws from q,
 * transformed to the constrained scale). --nuts also runs NUTS (4 chains x
 * 1,000 draws) and prints its means and sds beside them, with the gap
 * |mean_advi - mean_nuts| / sd_nuts; --check-means SD exits 1 when any gap
 * exceeds SD. --ref REF takes the NUTS means and sds from a posteriordb
 * summary (tests/data/posteriordb/NAME.ref) instead of running NUTS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nuts/nuts.h"

static model m;
#define CALL(x) nuts_check(m.ctx, (x), #x)

static double elbo(const double *mv, const double *om, rng_t *r, int draws) {
    int d = m.dim;
    float *eps = malloc(sizeof(float) * (size_t)d);
    CALL(ag_reset(m.ctx)); /* ends a replayed step's iteration too */
    CALL(ag_set_grad_enabled(m.ctx, false));
    double s = 0;
    for (int k = 0; k < draws; k++) {
        for (int i = 0; i < d; i++) eps[i] = (float)(mv[i] + exp(om[i]) * rng_normal(r));
        size_t shape[1] = {(size_t)d};
        ag_tensor z, lp;
        float v;
        CALL(ag_tensor_new(m.ctx, shape, 1, eps, &z));
        lp = model_logp(&m, z);
        CALL(ag_tensor_item(m.ctx, lp, &v));
        CALL(ag_reset(m.ctx));
        s += v;
    }
    CALL(ag_set_grad_enabled(m.ctx, true));
    double ent = 0;
    for (int i = 0; i < d; i++) ent += om[i];
    free(eps);
    return s / draws + ent;
}

/* In-place Cholesky of the n x n matrix a (lower triangle); 0 if a is not
 * positive definite. */
static int cholesky(double *a, int n) {
    for (int j = 0; j < n; j++) {
        double dsum = a[j * n + j];
        for (int k = 0; k < j; k++) dsum -= a[j * n + k] * a[j * n + k];
        if (!(dsum > 0)) return 0;
        a[j * n + j] = sqrt(dsum);
        for (int i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int k = 0; k < j; k++) v -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = v / a[j * n + j];
        }
    }
    return 1;
}

/* b <- (L L^T)^{-1} b */
static void chol_solve(const double *l, int n, double *b) {
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++) b[i] -= l[i * n + k] * b[k];
        b[i] /= l[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        for (int k = i + 1; k < n; k++) b[i] -= l[k * n + i] * b[k];
        b[i] /= l[i * n + i];
    }
}

/* h = -(Hessian of log p) at q, symmetrised, by central differences of the
 * gradient with steps step[j] (measured after rounding to float, which is
 * what the library sees). Returns 0 when log p is not finite around q. */
static int neg_hessian(const double *q, const double *step, double *h) {
    int d = m.dim;
    double qq[NUTS_MAX_NAMES], gp[NUTS_MAX_NAMES], gm[NUTS_MAX_NAMES];
    for (int j = 0; j < d; j++) {
        memcpy(qq, q, sizeof(double) * (size_t)d);
        double hi = (float)(q[j] + step[j]), lo = (float)(q[j] - step[j]);
        qq[j] = hi;
        if (!isfinite(model_logp_grad(&m, qq, gp))) return 0;
        qq[j] = lo;
        if (!isfinite(model_logp_grad(&m, qq, gm))) return 0;
        for (int i = 0; i < d; i++) h[i * d + j] = -(gp[i] - gm[i]) / (hi - lo);
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < i; j++) h[i * d + j] = h[j * d + i] = 0.5 * (h[i * d + j] + h[j * d + i]);
    return 1;
}

/* The mode of log p from q = 0 by Levenberg-damped Newton steps, and the
 * scale sd_j = 1/sqrt(H_jj) there. Stops when a step moves every
 * coordinate by under 1e-3 of its scale. Returns the Newton steps taken,
 * or -1 when it found no finite mode (the caller then starts at 0, sd 1). */
static int find_mode(double *q, double *sd) {
    int d = m.dim, steps = 0;
    double g[NUTS_MAX_NAMES], gn[NUTS_MAX_NAMES], qn[NUTS_MAX_NAMES], dq[NUTS_MAX_NAMES];
    double step[NUTS_MAX_NAMES];
    double *h = malloc(sizeof(double) * (size_t)d * d), *a = malloc(sizeof(double) * (size_t)d * d);
    for (int j = 0; j < d; j++) { q[j] = 0; sd[j] = 1; step[j] = 1e-3; }
    double lp = model_logp_grad(&m, q, g), damp = 1e-3;
    int ok = isfinite(lp) && neg_hessian(q, step, h);
    while (ok && steps < 200) {
        memcpy(a, h, sizeof(double) * (size_t)d * d);
        for (int j = 0; j < d; j++) a[j * d + j] += damp * (fabs(h[j * d + j]) + 1e-8);
        memcpy(dq, g, sizeof(double) * (size_t)d);
        if (!cholesky(a, d)) {
            damp *= 10;
            if (damp > 1e12) ok = 0;
            continue;
        }
        chol_solve(a, d, dq);
        for (int j = 0; j < d; j++) qn[j] = q[j] + dq[j];
        double lpn = model_logp_grad(&m, qn, gn);
        if (!(isfinite(lpn) && lpn >= lp)) {
            damp *= 10;
            if (damp > 1e12) break; /* no step improves: q is the mode to float precision */
            continue;
        }
        steps++;
        double moved = 0;
        for (int j = 0; j < d; j++) {
            double hj = h[j * d + j];
            sd[j] = hj > 0 ? 1 / sqrt(hj) : 1;
            moved = fmax(moved, fabs(dq[j]) / sd[j]);
            step[j] = fmin(1e-3, 0.1 * sd[j]);
        }
        memcpy(q, qn, sizeof(double) * (size_t)d);
        memcpy(g, gn, sizeof(double) * (size_t)d);
        lp = lpn;
        damp = fmax(damp / 10, 1e-9);
        if (!neg_hessian(q, step, h)) ok = 0;
        else if (moved < 1e-3) break;
    }
    if (ok)
        for (int j = 0; j < d; j++) sd[j] = h[j * d + j] > 0 ? 1 / sqrt(h[j * d + j]) : 1;
    free(h);
    free(a);
    if (!ok) {
        for (int j = 0; j < d; j++) { q[j] = 0; sd[j] = 1; }
        return -1;
    }
    return steps;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: advi MODEL.data [--iters N] [--samples S] [--lr LR] [--seed N] [--nuts] "
                        "[--ref REF] [--check-means SD] [--no-capture]\n");
        return 2;
    }
    int iters = 2000, S = 4;
    double lr = 0.05, check = -1;
    uint64_t seed = 1;
    int with_nuts = 0, capture = 1;
    const char *ref = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--nuts")) { with_nuts = 1; continue; }
        if (!strcmp(a, "--no-capture")) { capture = 0; continue; }
        i++;
        if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--samples")) S = atoi(v);
        else if (!strcmp(a, "--lr")) lr = atof(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--check-means")) { check = atof(v); with_nuts = 1; }
        else if (!strcmp(a, "--ref")) ref = v;
        else { fprintf(stderr, "advi: unknown option %s\n", a); return 2; }
    }
    if (iters < 100 || S < 1 || S > 64 || !(lr > 0)) {
        fprintf(stderr, "advi: need --iters >= 100, --samples in 1..64, --lr > 0\n");
        return 2;
    }
    model_open(&m, argv[1]);
    int d = m.dim;
    size_t shape[1] = {(size_t)d};
    ag_tensor mt, ot; /* mu and omega in units of the start (see the top) */
    CALL(ag_param_new_named(m.ctx, "advi.mu", shape, 1, NULL, &mt));
    CALL(ag_param_new_named(m.ctx, "advi.omega", shape, 1, NULL, &ot));
    double q0[NUTS_MAX_NAMES], s0[NUTS_MAX_NAMES];
    int newton = find_mode(q0, s0);
    float q0f[NUTS_MAX_NAMES], s0f[NUTS_MAX_NAMES];
    double mv[NUTS_MAX_NAMES], om[NUTS_MAX_NAMES];
    for (int i = 0; i < d; i++) {
        q0f[i] = (float)q0[i];
        s0f[i] = (float)s0[i];
        mv[i] = q0[i];
        om[i] = log(s0[i]);
    }
    CALL(ag_optimizer_adamw(m.ctx, (float)lr, 0.9f, 0.999f, 1e-8f, 0.0f));
    rng_t r;
    rng_seed(&r, seed);
    float *eps = malloc(sizeof(float) * (size_t)S * d);
    double *avg_mu = calloc((size_t)d, sizeof(double)), *avg_om = calloc((size_t)d, sizeof(double));
    float tmp[NUTS_MAX_NAMES], tmo[NUTS_MAX_NAMES];
    int avg_n = 0, skipped = 0;
    ag_step step = {0, 0, 0};
    ag_tensor eps_t = {0, 0, 0}; /* the captured step's eps [S, d] */
    printf("%s: mean-field ADVI, %d steps of %d draws, AdamW lr %g\n", m.name, iters, S, lr);
    if (newton >= 0)
        printf("  start: the mode after %d Newton steps, sds from the Hessian's diagonal; ELBO %.3f\n", newton,
               elbo(mv, om, &r, 200));
    else
        printf("  start: no finite mode found; mu = 0, sd = 1\n");
    for (int it = 0; it < iters; it++) {
        double frac = (double)it / iters;
        double lr_t = frac < 0.5 ? lr : lr * (1 - 0.99 * (frac - 0.5) / 0.5);
        CALL(ag_optimizer_set_lr(m.ctx, (float)lr_t));
        /* antithetic pairs: row s + S/2 is minus row s */
        for (int s = 0; s < S; s++)
            for (int i = 0; i < d; i++)
                eps[s * d + i] = s >= S / 2 + S % 2 ? -eps[(s - S / 2) * d + i] : (float)rng_normal(&r);
        if (capture && step.context != 0) {
            CALL(ag_input_write(m.ctx, eps_t, eps, (size_t)S * (size_t)d));
            CALL(ag_replay(m.ctx, step));
        } else {
            if (capture) CALL(ag_capture_begin(m.ctx));
            size_t es[2] = {(size_t)S, (size_t)d}, row[1] = {(size_t)d};
            ag_tensor e, eom, u, z, total = {0, 0, 0}, lp, zi, zr, loss, ent, mean_lp, c0, c1;
            CALL(ag_tensor_new(m.ctx, es, 2, eps, &e));
            CALL(ag_tensor_new(m.ctx, shape, 1, q0f, &c0));
            CALL(ag_tensor_new(m.ctx, shape, 1, s0f, &c1));
            CALL(ag_exp(m.ctx, ot, &eom));
            CALL(ag_mul(m.ctx, e, eom, &u));
            CALL(ag_add(m.ctx, u, mt, &u));
            CALL(ag_mul(m.ctx, u, c1, &z));
            CALL(ag_add(m.ctx, z, c0, &z)); /* z = q0 + s0 (mt + e^ot eps) */
            for (int s = 0; s < S; s++) {
                CALL(ag_slice(m.ctx, z, 0, (size_t)s, 1, &zi));
                CALL(ag_reshape(m.ctx, zi, row, 1, &zr));
                lp = model_logp(&m, zr);
                if (s == 0) total = lp;
                else CALL(ag_add(m.ctx, total, lp, &total));
            }
            CALL(ag_scale(m.ctx, total, 1.0f / S, &mean_lp));
            CALL(ag_sum(m.ctx, ot, &ent));
            CALL(ag_add(m.ctx, mean_lp, ent, &loss));
            CALL(ag_scale(m.ctx, loss, -1.0f, &loss));
            CALL(ag_backward(m.ctx, loss));
            if (capture) {
                CALL(ag_capture_end(m.ctx, loss, &step));
                eps_t = e;
            }
        }
        ag_status st = ag_optimizer_step(m.ctx);
        if (st == AG_STATUS_NON_FINITE) skipped++; /* a draw far in a tail: skip it */
        else CALL(st);
        CALL(ag_zero_grad(m.ctx));
        if (!capture) CALL(ag_reset(m.ctx)); /* a captured step stays current */
        int report = (it + 1) % (iters / 10) == 0;
        if (it >= iters - iters / 4 || report) {
            CALL(ag_tensor_read(m.ctx, mt, tmp, (size_t)d));
            CALL(ag_tensor_read(m.ctx, ot, tmo, (size_t)d));
            for (int i = 0; i < d; i++) {
                mv[i] = q0[i] + s0[i] * tmp[i];
                om[i] = log(s0[i]) + tmo[i];
            }
        }
        if (it >= iters - iters / 4) {
            for (int i = 0; i < d; i++) {
                avg_mu[i] += mv[i];
                avg_om[i] += om[i];
            }
            avg_n++;
        }
        if (report) printf("  step %6d  lr %.4f  ELBO %.3f\n", it + 1, lr_t, elbo(mv, om, &r, 200));
    }
    for (int i = 0; i < d; i++) {
        avg_mu[i] /= avg_n;
        avg_om[i] /= avg_n;
    }
    printf("  averaged iterates: ELBO %.3f (%d steps skipped for a non-finite gradient)\n",
           elbo(avg_mu, avg_om, &r, 1000), skipped);

    /* the approximation's moments on the constrained scale */
    int K = m.n_out, D = 4000;
    double *sum = calloc((size_t)K, sizeof(double)), *sq = calloc((size_t)K, sizeof(double));
    double q[NUTS_MAX_NAMES], out[NUTS_MAX_NAMES];
    for (int k = 0; k < D; k++) {
        for (int i = 0; i < d; i++) q[i] = avg_mu[i] + exp(avg_om[i]) * rng_normal(&r);
        model_constrain(&m, q, out);
        for (int j = 0; j < K; j++) { sum[j] += out[j]; sq[j] += out[j] * out[j]; }
    }
    double *nm = NULL, *ns = NULL;
    if (ref) { /* a posteriordb summary (quantity,mean,sd,mcse_mean): Stan's NUTS */
        FILE *f = fopen(ref, "r");
        char line[512];
        if (!f || !fgets(line, sizeof line, f)) { fprintf(stderr, "advi: cannot read %s\n", ref); return 2; }
        nm = calloc((size_t)K, sizeof(double));
        ns = calloc((size_t)K, sizeof(double));
        int found = 0;
        while (fgets(line, sizeof line, f)) {
            char *c1 = strchr(line, ',');
            if (!c1) continue;
            *c1 = 0;
            for (int j = 0; j < K; j++)
                if (!strcmp(line, m.names[j]) && sscanf(c1 + 1, "%lf,%lf", &nm[j], &ns[j]) == 2) found++;
        }
        fclose(f);
        if (found != K) { fprintf(stderr, "advi: %s lacks some quantities\n", ref); return 2; }
        with_nuts = 1;
    } else if (with_nuts) { /* the library's NUTS on the same density, Stan's defaults */
        ag_model_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.struct_size = sizeof spec;
        spec.dim = (size_t)d;
        spec.log_density = model_density;
        spec.user = &m;
        spec.fixed_graph = true;
        ag_nuts_config c;
        ag_sampler *s;
        ag_draws *dr;
        ag_draws_info_t info;
        if (ag_nuts_config_default(&c) != AG_STATUS_OK || ag_sampler_new(&spec, &s) != AG_STATUS_OK ||
            ag_nuts_run(s, &c, &dr) != AG_STATUS_OK || ag_draws_info(dr, &info) != AG_STATUS_OK) {
            fprintf(stderr, "advi: NUTS failed: %s\n", ag_sampler_last_error());
            return 1;
        }
        nm = calloc((size_t)K, sizeof(double));
        ns = calloc((size_t)K, sizeof(double));
        double *nq = calloc((size_t)K, sizeof(double));
        for (size_t ch = 0; ch < info.chains; ch++) {
            ag_chain_draws o;
            if (ag_draws_chain(dr, ch, &o) != AG_STATUS_OK) return 1;
            for (size_t i = 0; i < info.draws; i++) {
                model_constrain(&m, o.positions + i * (size_t)d, out);
                for (int j = 0; j < K; j++) {
                    nm[j] += out[j];
                    nq[j] += out[j] * out[j];
                }
            }
        }
        double n = (double)info.chains * (double)info.draws;
        for (int j = 0; j < K; j++) {
            nm[j] /= n;
            ns[j] = sqrt((nq[j] - n * nm[j] * nm[j]) / (n - 1));
        }
        free(nq);
        ag_draws_free(dr);
        ag_sampler_free(s);
    }
    printf("\n%-12s %11s %11s", "quantity", "advi mean", "advi sd");
    if (with_nuts) printf(" %11s %11s %9s", "nuts mean", "nuts sd", "gap/sd");
    printf("\n");
    int fails = 0;
    for (int j = 0; j < K; j++) {
        double mean = sum[j] / D, sd = sqrt((sq[j] - D * mean * mean) / (D - 1));
        printf("%-12s %11.4g %11.4g", m.names[j], mean, sd);
        if (with_nuts) {
            double gap = fabs(mean - nm[j]) / ns[j];
            printf(" %11.4g %11.4g %9.3f", nm[j], ns[j], gap);
            if (check >= 0 && gap > check) fails++;
        }
        printf("\n");
    }
    if (check >= 0)
        printf("%s: %s (ADVI means within %.2f NUTS sd)\n", m.name, fails ? "CHECK FAILED" : "check passed", check);
    free(eps); free(avg_mu); free(avg_om); free(sum); free(sq); free(nm); free(ns);
    model_free(&m);
    return fails ? 1 : 0;
}

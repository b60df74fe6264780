/*
 * advi.c: mean-field ADVI on the NUTS models (c_examples/nuts/models.c).
 *
 * The approximation is q(z) = N(mu, diag(e^{2 omega})) on the unconstrained
 * space; mu and omega are library parameters trained by the library's AdamW
 * on the negative ELBO, -E_q[log p(z)] - sum(omega) (the Gaussian entropy
 * up to its constant), estimated each step from S reparameterised draws
 * z = mu + e^omega * eps, eps ~ N(0, I), so the gradient flows through the
 * draws (Kucukelbir et al. 2017). The learning rate is held for the first
 * half of the steps, then decays linearly to 1% of itself; the reported
 * mu and omega are the averages of the iterates over the last quarter
 * (Polyak averaging), which removes most of the step noise.
 *
 *   advi MODEL.data [--iters 10000] [--samples 4] [--lr 0.05] [--seed 1]
 *        [--nuts] [--check-means SD]
 *
 * Prints the ELBO (estimated from 200 draws, up to log p's constant) as it
 * goes, then each reported quantity's mean and sd (4,000 draws from q,
 * transformed to the constrained scale). --nuts also runs NUTS (4 chains x
 * 1,000 draws) and prints its means and sds beside them, with the gap
 * |mean_advi - mean_nuts| / sd_nuts; --check-means SD exits 1 when any gap
 * exceeds SD.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nuts/nuts.h"

static model m;
#define CALL(x) nuts_check(m.ctx, (x), #x)

static double elbo(ag_tensor mu, ag_tensor omega, rng_t *r, int draws) {
    int d = m.dim;
    float *eps = malloc(sizeof(float) * (size_t)d), om[NUTS_MAX_NAMES], mv[NUTS_MAX_NAMES];
    CALL(ag_tensor_read(m.ctx, mu, mv, (size_t)d));
    CALL(ag_tensor_read(m.ctx, omega, om, (size_t)d));
    CALL(ag_set_grad_enabled(m.ctx, false));
    double s = 0;
    for (int k = 0; k < draws; k++) {
        for (int i = 0; i < d; i++) eps[i] = mv[i] + expf(om[i]) * (float)rng_normal(r);
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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: advi MODEL.data [--iters N] [--samples S] [--lr LR] [--seed N] [--nuts] "
                        "[--check-means SD]\n");
        return 2;
    }
    int iters = 10000, S = 4;
    double lr = 0.05, check = -1;
    uint64_t seed = 1;
    int with_nuts = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--nuts")) { with_nuts = 1; continue; }
        i++;
        if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--samples")) S = atoi(v);
        else if (!strcmp(a, "--lr")) lr = atof(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--check-means")) { check = atof(v); with_nuts = 1; }
        else { fprintf(stderr, "advi: unknown option %s\n", a); return 2; }
    }
    if (iters < 100 || S < 1 || S > 64 || !(lr > 0)) {
        fprintf(stderr, "advi: need --iters >= 100, --samples in 1..64, --lr > 0\n");
        return 2;
    }
    model_load(&m, argv[1]);
    int d = m.dim;
    size_t shape[1] = {(size_t)d};
    ag_tensor mu, omega;
    CALL(ag_param_new_named(m.ctx, "advi.mu", shape, 1, NULL, &mu));
    CALL(ag_param_new_named(m.ctx, "advi.omega", shape, 1, NULL, &omega));
    CALL(ag_optimizer_adamw(m.ctx, (float)lr, 0.9f, 0.999f, 1e-8f, 0.0f));
    rng_t r;
    rng_seed(&r, seed);
    float *eps = malloc(sizeof(float) * (size_t)S * d);
    double *avg_mu = calloc((size_t)d, sizeof(double)), *avg_om = calloc((size_t)d, sizeof(double));
    float tmp[NUTS_MAX_NAMES];
    int avg_n = 0, skipped = 0;
    printf("%s: mean-field ADVI, %d steps of %d draws, AdamW lr %g\n", m.name, iters, S, lr);
    for (int it = 0; it < iters; it++) {
        double frac = (double)it / iters;
        double lr_t = frac < 0.5 ? lr : lr * (1 - 0.99 * (frac - 0.5) / 0.5);
        CALL(ag_optimizer_set_lr(m.ctx, (float)lr_t));
        for (int i = 0; i < S * d; i++) eps[i] = (float)rng_normal(&r);
        size_t es[2] = {(size_t)S, (size_t)d}, row[1] = {(size_t)d};
        ag_tensor e, eom, scaled, z, total = {0, 0, 0}, lp, zi, zr, loss, ent, mean_lp;
        CALL(ag_tensor_new(m.ctx, es, 2, eps, &e));
        CALL(ag_exp(m.ctx, omega, &eom));
        CALL(ag_mul(m.ctx, e, eom, &scaled));
        CALL(ag_add(m.ctx, scaled, mu, &z));
        for (int s = 0; s < S; s++) {
            CALL(ag_slice(m.ctx, z, 0, (size_t)s, 1, &zi));
            CALL(ag_reshape(m.ctx, zi, row, 1, &zr));
            lp = model_logp(&m, zr);
            if (s == 0) total = lp;
            else CALL(ag_add(m.ctx, total, lp, &total));
        }
        CALL(ag_scale(m.ctx, total, 1.0f / S, &mean_lp));
        CALL(ag_sum(m.ctx, omega, &ent));
        CALL(ag_add(m.ctx, mean_lp, ent, &loss));
        CALL(ag_scale(m.ctx, loss, -1.0f, &loss));
        CALL(ag_backward(m.ctx, loss));
        ag_status st = ag_optimizer_step(m.ctx);
        if (st == AG_STATUS_NON_FINITE) skipped++; /* a draw far in a tail: skip it */
        else CALL(st);
        CALL(ag_zero_grad(m.ctx));
        CALL(ag_reset(m.ctx));
        if (it >= iters - iters / 4) {
            CALL(ag_tensor_read(m.ctx, mu, tmp, (size_t)d));
            for (int i = 0; i < d; i++) avg_mu[i] += tmp[i];
            CALL(ag_tensor_read(m.ctx, omega, tmp, (size_t)d));
            for (int i = 0; i < d; i++) avg_om[i] += tmp[i];
            avg_n++;
        }
        if ((it + 1) % (iters / 10) == 0)
            printf("  step %6d  lr %.4f  ELBO %.3f\n", it + 1, lr_t, elbo(mu, omega, &r, 200));
    }
    for (int i = 0; i < d; i++) {
        avg_mu[i] /= avg_n;
        avg_om[i] /= avg_n;
        tmp[i] = (float)avg_mu[i];
    }
    CALL(ag_param_write(m.ctx, mu, tmp, (size_t)d));
    for (int i = 0; i < d; i++) tmp[i] = (float)avg_om[i];
    CALL(ag_param_write(m.ctx, omega, tmp, (size_t)d));
    printf("  averaged iterates: ELBO %.3f (%d steps skipped for a non-finite gradient)\n",
           elbo(mu, omega, &r, 1000), skipped);

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
    if (with_nuts) {
        model mn;
        model_load(&mn, argv[1]);
        nuts_config c;
        nuts_default_config(&c);
        c.quiet = true;
        nm = calloc((size_t)K, sizeof(double));
        ns = calloc((size_t)K, sizeof(double));
        double *nq = calloc((size_t)K, sizeof(double));
        for (int ch = 0; ch < c.chains; ch++) {
            chain_out o;
            nuts_run_chain(&mn, &c, ch, &o);
            for (int i = 0; i < c.draws; i++)
                for (int j = 0; j < K; j++) {
                    double v = o.values[(size_t)i * K + j];
                    nm[j] += v;
                    nq[j] += v * v;
                }
            chain_out_free(&o);
        }
        double n = (double)c.chains * c.draws;
        for (int j = 0; j < K; j++) {
            nm[j] /= n;
            ns[j] = sqrt((nq[j] - n * nm[j] * nm[j]) / (n - 1));
        }
        free(nq);
        model_free(&mn);
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

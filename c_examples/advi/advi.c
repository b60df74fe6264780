/*
 * advi.c: build/advi, mean-field ADVI on the NUTS models
 * (c_examples/nuts/models.c) by the library's ag_advi_run.
 *
 *   advi MODEL.data [--iters 10000] [--samples 4] [--lr 0 (adapted)]
 *        [--tol 1e-4] [--seed 1234] [--draws 4000] [--nuts | --ref REF]
 *        [--check-means SD] [--no-capture]
 *
 * The model (its density and its report map, the constrained quantities)
 * goes to ag_sampler_new, ag_advi_run fits q(z) = N(mu, diag(sd^2)) on the
 * unconstrained space with Stan's algorithm (--iters: the most gradient
 * steps, --samples: draws per gradient, --lr: the step size scale eta, 0
 * adapting it, --tol: the relative ELBO change that stops it) and draws
 * --draws positions from the fit. Stan's tol_rel_obj of 0.01 and one draw
 * per gradient stop at the ELBO's first plateau, where the logistic
 * regression's means are still 0.3 sd from NUTS's; 1e-4 and 4 draws run
 * on until they are within 0.1. The reported quantities' means and sds are
 * those of the draws (ag_draws_summary_reported). The density's first evaluation is captured
 * and replayed after; --no-capture builds it at every evaluation, the same
 * output byte for byte.
 *
 * --nuts also runs the library's NUTS on the same model (4 chains x 1,000
 * draws, Stan's defaults) and prints its means and sds beside ADVI's, with
 * the gap |mean_advi - mean_nuts| / sd_nuts; --check-means SD (implies
 * --nuts) exits 1 when any gap exceeds SD. --ref REF takes the NUTS means
 * and sds from a posteriordb summary (tests/data/posteriordb/NAME.ref)
 * instead of running NUTS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nuts/nuts.h"

static void sampler_fail(const char *what, ag_status st) {
    fprintf(stderr, "advi: %s failed: %s: %s\n", what, ag_status_str(st), ag_sampler_last_error());
    exit(1);
}
#define SCALL(x)                                        \
    do {                                                \
        ag_status st_ = (x);                            \
        if (st_ != AG_STATUS_OK) sampler_fail(#x, st_); \
    } while (0)

/* The reported quantities' summary over a run's draws. */
static ag_summary_row *summarise_run(const model *m, ag_draws *d) {
    ag_summary_row *rows = calloc((size_t)m->n_out, sizeof *rows);
    SCALL(ag_draws_summary_reported(d, rows, (size_t)m->n_out));
    return rows;
}

/* Reads a posteriordb summary (quantity,mean,sd,mcse_mean: Stan's NUTS)
 * into mean and sd, in the model's order; exits when it lacks one. */
static void read_ref(const model *m, const char *path, double *mean, double *sd) {
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f || !fgets(line, sizeof line, f)) {
        fprintf(stderr, "advi: cannot read %s\n", path);
        exit(2);
    }
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        char *comma = strchr(line, ',');
        if (!comma) continue;
        *comma = 0;
        for (int j = 0; j < m->n_out; j++)
            if (!strcmp(line, m->names[j]) && sscanf(comma + 1, "%lf,%lf", &mean[j], &sd[j]) == 2) found++;
    }
    fclose(f);
    if (found != m->n_out) {
        fprintf(stderr, "advi: %s lacks some quantities\n", path);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: advi MODEL.data [--iters N] [--samples S] [--lr ETA] [--seed N] [--draws N] "
                        "[--nuts] [--ref REF] [--check-means SD] [--no-capture]\n");
        return 2;
    }
    ag_advi_config c;
    SCALL(ag_advi_config_default(&c));
    c.output_draws = 4000;
    c.grad_samples = 4;
    c.tol_rel_obj = 1e-4;
    double check = -1;
    bool with_nuts = false, capture = true;
    const char *ref = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--nuts")) { with_nuts = true; continue; }
        if (!strcmp(a, "--no-capture")) { capture = false; continue; }
        i++;
        if (!strcmp(a, "--iters")) c.iterations = (uint32_t)atoi(v);
        else if (!strcmp(a, "--samples")) c.grad_samples = (uint32_t)atoi(v);
        else if (!strcmp(a, "--lr")) c.eta = atof(v);
        else if (!strcmp(a, "--seed")) c.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--tol")) c.tol_rel_obj = atof(v);
        else if (!strcmp(a, "--draws")) c.output_draws = (uint32_t)atoi(v);
        else if (!strcmp(a, "--check-means")) { check = atof(v); with_nuts = true; }
        else if (!strcmp(a, "--ref")) ref = v;
        else { fprintf(stderr, "advi: unknown option %s\n", a); return 2; }
    }
    if (c.iterations < 1 || c.grad_samples < 1 || c.output_draws < 4 || !(c.eta >= 0) ||
        !(c.tol_rel_obj > 0)) {
        fprintf(stderr, "advi: need --iters >= 1, --samples >= 1, --draws >= 4, --lr >= 0, --tol > 0\n");
        return 2;
    }
    model m;
    model_load(&m, argv[1]);
    int K = m.n_out;
    ag_model_spec spec;
    model_spec(&m, capture, &spec);
    ag_sampler *s;
    SCALL(ag_sampler_new(&spec, &s));

    ag_draws *d;
    ag_advi_fit fit;
    SCALL(ag_advi_run(s, &c, &d));
    SCALL(ag_draws_advi(d, &fit));
    char eta[32] = "adapted";
    if (c.eta > 0) snprintf(eta, sizeof eta, "%g", c.eta);
    printf("%s: mean-field ADVI, at most %u steps of %u draws, eta %s, seed %llu\n", m.name, c.iterations,
           c.grad_samples, eta, (unsigned long long)c.seed);
    printf("  %u steps, %s; ELBO %.3f; %u draws from the fit\n", fit.iterations_run,
           fit.converged ? "converged" : "not converged", fit.elbo, c.output_draws);
    ag_summary_row *advi = summarise_run(&m, d);
    SCALL(ag_draws_free(d));

    double *nm = calloc((size_t)K, sizeof(double)), *ns = calloc((size_t)K, sizeof(double));
    if (ref) {
        read_ref(&m, ref, nm, ns);
        with_nuts = true;
    } else if (with_nuts) {
        ag_nuts_config nc;
        SCALL(ag_nuts_config_default(&nc));
        SCALL(ag_nuts_run(s, &nc, &d));
        ag_summary_row *nuts = summarise_run(&m, d);
        for (int j = 0; j < K; j++) {
            nm[j] = nuts[j].mean;
            ns[j] = nuts[j].sd;
        }
        free(nuts);
        SCALL(ag_draws_free(d));
    }
    SCALL(ag_sampler_free(s));

    printf("\n%-12s %11s %11s", "quantity", "advi mean", "advi sd");
    if (with_nuts) printf(" %11s %11s %9s", "nuts mean", "nuts sd", "gap/sd");
    printf("\n");
    int fails = 0;
    for (int j = 0; j < K; j++) {
        printf("%-12s %11.4g %11.4g", m.names[j], advi[j].mean, advi[j].sd);
        if (with_nuts) {
            double gap = fabs(advi[j].mean - nm[j]) / ns[j];
            printf(" %11.4g %11.4g %9.3f", nm[j], ns[j], gap);
            if (check >= 0 && !(gap <= check)) fails++;
        }
        printf("\n");
    }
    if (check >= 0)
        printf("%s: %s (ADVI means within %.2f NUTS sd)\n", m.name, fails ? "CHECK FAILED" : "check passed", check);
    free(advi);
    free(nm);
    free(ns);
    model_free(&m);
    return fails ? 1 : 0;
}

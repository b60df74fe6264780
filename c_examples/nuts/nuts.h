/*
 * nuts.h: posteriordb's models as arenagrad log densities (see README.md
 * here), sampled by the library's NUTS (ag_nuts_run).
 *
 * A model is a log density over an unconstrained vector q: model_density,
 * an ag_log_density_fn, builds log p with the library's ops from the
 * position parameter, constrained parameters entering through the
 * library's transforms (ag_constrain_lower, ag_constrain_interval) with
 * their log Jacobians. The model's data is read-only once loaded, so the
 * chains' threads share it.
 *
 * build/advi fits ADVI to the same model (ag_advi_run). build/nuts's
 * --soak and --grad-bench evaluate the density directly on a context of
 * their own (eval.c): write q into a parameter, ag_zero_grad, build log p,
 * ag_backward, read the gradient.
 */
#ifndef NUTS_H
#define NUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arenagrad.h"

#define NUTS_MAX_NAMES 64

typedef struct model {
    char kind[32];      /* eight_schools, linreg, logistic, mixture2, gamma_iid, beta_iid, mvn_lkj, hier_lkj, arma11, garch11 */
    char name[128];     /* file stem, e.g. kidiq-kidscore_momiq */
    int rows, cols;     /* data table */
    float *y;           /* [rows] response (linreg, logistic, gamma_reg) */
    float *x;           /* [rows, d] design matrix (beta_iid: [log y; log(1 - y)], gamma_iid: log y) */
    float *sigma_obs;   /* eight_schools: the known standard errors */
    int d;              /* regression coefficients / schools */
    double beta_sd;     /* normal(0, beta_sd) prior on coefficients; 0 = flat */
    char sigma_prior[16];
    double sigma_scale; /* half-cauchy or half-normal scale of sigma */
    double lkj_eta;     /* mvn_lkj: the LKJ prior's shape */
    float *yt;          /* [cols, rows]: the data table transposed (mvn_lkj) */
    float *obs, *se;    /* hier_lkj: [rows, K] group means, [rows] their standard errors */
    double sigma1;      /* garch11: the first volatility */
    float *gram;        /* mixture2: [3, rows] (1, y, y^2), then their sums */
    int dim;            /* unconstrained parameters */
    int n_out;          /* reported (constrained) quantities */
    char *names[NUTS_MAX_NAMES];
    char *coord_names[NUTS_MAX_NAMES]; /* the unconstrained coordinates, e.g. log_sigma */
    /* The direct evaluation path (eval.c): a context of the caller's own. */
    ag_context *ctx;
    ag_tensor q;        /* the parameter holding the position */
    uint64_t evals;     /* gradient evaluations so far */
    int capture;        /* 1: capture the first gradient evaluation, replay it after */
    ag_step step;       /* the captured evaluation (all zero until captured) */
    ag_tensor step_lp;  /* its log density */
} model;

/* models.c */
void model_load(model *m, const char *path); /* the data only; exits with a message on error */
void model_free(model *m);                   /* and m->ctx, if model_open made one */
/* The log density (an ag_log_density_fn; user is the model): log p(q) up
 * to a constant, from q of shape [dim], any tensor on ctx. */
ag_status model_density(ag_context *ctx, ag_tensor q, void *user, ag_tensor *log_density);
/* the reported quantities of position q, n_out values */
void model_constrain(const model *m, const double *q, double *out);
/* The report map (an ag_report_fn; user is the model): model_constrain,
 * so the sampler keeps each draw's reported quantities and summarises them
 * as quantities of their own (ag_draws_summary_reported). */
ag_status model_report(const double *position, void *user, double *reported);
void model_spec(model *m, bool fixed_graph, ag_model_spec *spec); /* the density and report map */

/* eval.c: the direct path on a context of the caller's own, m->ctx */
/* model_load, then m->ctx and its position parameter m->q */
void model_open(model *m, const char *path);
/* log p of an unconstrained position tensor q (exits on an error) */
ag_tensor model_logp(model *m, ag_tensor q);
/* log p(q) (up to a constant) and its gradient g = d log p / dq; -inf
 * (and g untouched) when the density is not finite there. */
double model_logp_grad(model *m, const double *q, double *g);
/* fails with the status name and the context's last error */
void nuts_check(ag_context *ctx, ag_status st, const char *what);
/* Exits with "prog: what failed: <status name>: <the sampler's last error>". */
void sampler_fail(const char *prog, const char *what, ag_status st);
/* SCALL(x) runs x, a sampler call returning ag_status, and exits through
 * sampler_fail when it fails; the program defines SCALL_PROG, its name. */
#define SCALL(x)                                                    \
    do {                                                            \
        ag_status st_ = (x);                                        \
        if (st_ != AG_STATUS_OK) sampler_fail(SCALL_PROG, #x, st_); \
    } while (0)

/* rng: xoshiro256** seeded by splitmix64 */
typedef struct { uint64_t s[4]; } rng_t;
void rng_seed(rng_t *r, uint64_t seed);
double rng_uniform(rng_t *r); /* [0, 1) */
double rng_normal(rng_t *r);

#endif

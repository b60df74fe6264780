/*
 * nuts.h: the No-U-Turn sampler on arenagrad (see README.md here).
 *
 * A model is a log density over an unconstrained vector q (constrained
 * parameters enter through a transform plus its log Jacobian), built with
 * the library's ops from a parameter tensor of shape [dim]. Its gradient
 * comes through the public header only: write q into the parameter,
 * ag_zero_grad, build log p, ag_backward, read the gradient, ag_reset.
 */
#ifndef NUTS_H
#define NUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arenagrad.h"

#define NUTS_MAX_NAMES 64

typedef struct model {
    char kind[32];      /* eight_schools, linreg, logistic, mixture2 */
    char name[128];     /* file stem, e.g. kidiq-kidscore_momiq */
    int rows, cols;     /* data table */
    float *y;           /* [rows] response (linreg, logistic) */
    float *x;           /* [rows, d] design matrix */
    float *sigma_obs;   /* eight_schools: the known standard errors */
    int d;              /* regression coefficients / schools */
    double beta_sd;     /* normal(0, beta_sd) prior on coefficients; 0 = flat */
    char sigma_prior[16];
    double sigma_scale; /* half-cauchy or half-normal scale of sigma */
    int dim;            /* unconstrained parameters */
    int n_out;          /* reported (constrained) quantities */
    char *names[NUTS_MAX_NAMES];
    ag_context *ctx;
    ag_tensor q;        /* the parameter holding the position */
    uint64_t evals;     /* gradient evaluations so far */
    int capture;        /* 1: capture the first gradient evaluation, replay it after */
    ag_step step;       /* the captured evaluation (all zero until captured) */
    ag_tensor step_lp;  /* its log density */
} model;

/* models.c */
void model_load(model *m, const char *path);   /* exits with a message on error */
void model_free(model *m);
/* log p(q) (up to a constant) and its gradient g = d log p / dq; -inf
 * (and g untouched) when the density is not finite there. */
double model_logp_grad(model *m, const double *q, double *g);
/* log p of an unconstrained position tensor q of shape [dim] (any tensor:
 * the sampler passes the parameter, ADVI a reparameterised draw) */
ag_tensor model_logp(model *m, ag_tensor q);
/* the reported quantities of position q, n_out values */
void model_constrain(const model *m, const double *q, double *out);
/* fails with the status name and the context's last error */
void nuts_check(ag_context *ctx, ag_status st, const char *what);

/* rng: xoshiro256** seeded by splitmix64 */
typedef struct { uint64_t s[4]; } rng_t;
void rng_seed(rng_t *r, uint64_t seed);
double rng_uniform(rng_t *r); /* [0, 1) */
double rng_normal(rng_t *r);

typedef struct {
    int chains, warmup, draws, max_depth;
    double delta, gamma, kappa, t0;  /* dual averaging */
    int init_buffer, term_buffer, base_window;
    uint64_t seed;
    bool quiet;
} nuts_config;

void nuts_default_config(nuts_config *c);

/* One chain's output: draws x n_out constrained values and the sampler's
 * per-draw statistics. */
typedef struct {
    double *values;       /* [draws * n_out] */
    double *lp;           /* [draws] */
    double *accept_stat;  /* [draws] */
    int *treedepth, *n_leapfrog;
    bool *divergent;
    double step_size;     /* after warm-up */
    double *inv_metric;   /* [dim] */
    int divergences;      /* during sampling */
    double seconds;
} chain_out;

void nuts_run_chain(model *m, const nuts_config *c, int chain, chain_out *out);
void chain_out_free(chain_out *o);

/* diagnostics.c: Vehtari et al. (2021) rank-normalised split R-hat and
 * bulk ESS over `m` chains of `n` draws each, x[chain * n + i]. */
double diag_rhat(const double *x, int m, int n);
double diag_ess_bulk(const double *x, int m, int n);

#endif

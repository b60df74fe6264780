/*
 * models.c: the log densities, written with arenagrad ops, and the data
 * files they read (tests/data/posteriordb/NAME.data, written once by
 * scripts/posteriordb_prep.py).
 *
 * File format: "model KIND", optional "beta_prior_sd S" and
 * "sigma_prior flat|cauchy|normal SCALE" lines, "names q1 q2 ...",
 * "rows N C", then N rows of C numbers.
 *
 *  eight_schools (non-centred): rows are (y_j, sigma_j);
 *    q = (theta_trans[1..J], mu, log tau),
 *    log p = -|theta_trans|^2/2 - sum((y - mu - tau theta_trans) / sigma)^2 / 2
 *            - mu^2 / 50 - log(1 + tau^2 / 25) + log tau   (Jacobian of tau)
 *    reported: theta[j] = mu + tau theta_trans[j], mu, tau.
 *  linreg: rows are (y, x_1..x_d); y ~ normal(X beta, sigma), q = (beta, log sigma),
 *    log p = -n log sigma - |y - X beta|^2 / (2 sigma^2) + log sigma (Jacobian)
 *            + beta prior + sigma prior; reported: beta, sigma.
 *  logistic: rows are (y in {0, 1}, x_1..x_d); y ~ bernoulli_logit(X beta),
 *    log p = sum(y eta - softplus(eta)) + beta prior, with
 *    softplus(eta) = relu(eta) + log(1 + exp(-|eta|)) (no overflow).
 *  mixture2: rows are (y); y ~ theta normal(mu_1, sigma_1) + (1 - theta)
 *    normal(mu_2, sigma_2) with mu ordered, mu ~ normal(0, 2), sigma ~
 *    half-normal(0, 2), theta ~ beta(5, 5) (posteriordb's
 *    low_dim_gauss_mix); q = (mu_1, log(mu_2 - mu_1), log sigma, logit theta),
 *    log p = sum_n logsumexp_k(log w_k - log sigma_k - (y_n - mu_k)^2 / (2 sigma_k^2))
 *            - |mu|^2 / 8 - |sigma|^2 / 8 + 5 log theta + 5 log(1 - theta)
 *            + log(mu_2 - mu_1) + sum log sigma   (Jacobians; beta's 4 + logit's 1),
 *    with w = (theta, 1 - theta), log theta = log_sigmoid(logit theta);
 *    reported: mu[1], mu[2], sigma[1], sigma[2], theta.
 * Constants of the densities are dropped: NUTS needs log p up to a constant.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nuts.h"

void nuts_check(ag_context *ctx, ag_status st, const char *what) {
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "nuts: %s failed: %s: %s\n", what, ag_status_str(st),
                ag_context_last_error(ctx));
        exit(1);
    }
}
#define CALL(x) nuts_check(m->ctx, (x), #x)

static void die(const char *path, const char *msg) {
    fprintf(stderr, "nuts: %s: %s\n", path, msg);
    exit(1);
}

void model_load(model *m, const char *path) {
    memset(m, 0, sizeof *m);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(m->name, sizeof m->name, "%s", base);
    char *dot = strstr(m->name, ".data");
    if (dot) *dot = 0;
    FILE *f = fopen(path, "r");
    if (!f) die(path, "cannot open");
    char key[64];
    strcpy(m->sigma_prior, "flat");
    while (fscanf(f, "%63s", key) == 1) {
        if (!strcmp(key, "model")) {
            if (fscanf(f, "%31s", m->kind) != 1) die(path, "model: no kind");
        } else if (!strcmp(key, "beta_prior_sd")) {
            if (fscanf(f, "%lf", &m->beta_sd) != 1) die(path, "bad beta_prior_sd");
        } else if (!strcmp(key, "sigma_prior")) {
            if (fscanf(f, "%15s %lf", m->sigma_prior, &m->sigma_scale) != 2) die(path, "bad sigma_prior");
        } else if (!strcmp(key, "names")) {
            char line[4096];
            if (!fgets(line, sizeof line, f)) die(path, "bad names");
            for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) {
                if (m->n_out == NUTS_MAX_NAMES) die(path, "too many names");
                m->names[m->n_out] = malloc(strlen(t) + 1);
                strcpy(m->names[m->n_out++], t);
            }
        } else if (!strcmp(key, "rows")) {
            if (fscanf(f, "%d %d", &m->rows, &m->cols) != 2 || m->rows < 1 || m->cols < 1)
                die(path, "bad rows line");
            break;
        } else {
            die(path, "unknown key");
        }
    }
    int n = m->rows, c = m->cols;
    m->d = c - 1;
    m->y = malloc(sizeof(float) * n);
    m->x = malloc(sizeof(float) * n * (m->d > 0 ? m->d : 1));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < c; j++) {
            double v;
            if (fscanf(f, "%lf", &v) != 1) die(path, "short data");
            if (j == 0) m->y[i] = (float)v;
            else m->x[i * m->d + j - 1] = (float)v;
        }
    fclose(f);
    if (!strcmp(m->kind, "eight_schools")) {
        m->d = n;               /* schools */
        m->sigma_obs = m->x;    /* column 2 is sigma_j */
        m->dim = n + 2;
        if (m->n_out != n + 2) die(path, "eight_schools: names must be theta[1..J], mu, tau");
    } else if (!strcmp(m->kind, "linreg")) {
        m->dim = m->d + 1;
        if (m->n_out != m->dim) die(path, "linreg: names must be the coefficients and sigma");
    } else if (!strcmp(m->kind, "logistic")) {
        m->dim = m->d;
        if (m->n_out != m->dim) die(path, "logistic: names must be the coefficients");
    } else if (!strcmp(m->kind, "mixture2")) {
        m->dim = 5;
        if (m->n_out != 5) die(path, "mixture2: names must be mu[1..2], sigma[1..2], theta");
    } else {
        die(path, "unknown model kind");
    }
    if (m->dim > NUTS_MAX_NAMES) die(path, "too many parameters");
    nuts_check(NULL, ag_context_new(&m->ctx), "ag_context_new");
    size_t shape[1] = {(size_t)m->dim};
    CALL(ag_param_new(m->ctx, shape, 1, NULL, &m->q));
}

void model_free(model *m) {
    for (int i = 0; i < m->n_out; i++) free(m->names[i]);
    free(m->y);
    free(m->x);
    ag_context_free(&m->ctx);
}

/* a constant [n] (or [n, 1] when col) tensor */
static ag_tensor constant(model *m, const float *v, size_t n, size_t cols) {
    size_t shape[2] = {n, cols};
    ag_tensor t;
    CALL(ag_tensor_new(m->ctx, shape, cols ? 2 : 1, v, &t));
    return t;
}

static ag_tensor slice(model *m, ag_tensor x, size_t start, size_t len) {
    ag_tensor t;
    CALL(ag_slice(m->ctx, x, 0, start, len, &t));
    return t;
}

/* sum(v * v) * s */
static ag_tensor sumsq(model *m, ag_tensor v, float s) {
    ag_tensor sq, sum, out;
    CALL(ag_mul(m->ctx, v, v, &sq));
    CALL(ag_sum(m->ctx, sq, &sum));
    CALL(ag_scale(m->ctx, sum, s, &out));
    return out;
}

static ag_tensor add(model *m, ag_tensor a, ag_tensor b) {
    ag_tensor t;
    CALL(ag_add(m->ctx, a, b, &t));
    return t;
}

/* log(1 + e^{2 s} / c^2) for a half-Cauchy(0, c) on sigma = e^s */
static ag_tensor log1p_sq_over(model *m, ag_tensor s, float c, ag_tensor one) {
    ag_tensor e, r, t;
    CALL(ag_scale(m->ctx, s, 2.0f, &e));
    CALL(ag_exp(m->ctx, e, &r));
    CALL(ag_scale(m->ctx, r, 1.0f / (c * c), &e));
    t = add(m, e, one);
    CALL(ag_log(m->ctx, t, &r));
    return r;
}

static ag_tensor build_eight_schools(model *m, ag_tensor q, ag_tensor one) {
    size_t J = (size_t)m->d;
    ag_tensor tt = slice(m, q, 0, J), mu = slice(m, q, J, 1), ltau = slice(m, q, J + 1, 1);
    ag_tensor tau, theta, r, z, lp, t;
    CALL(ag_exp(m->ctx, ltau, &tau));
    CALL(ag_mul(m->ctx, tt, tau, &t));
    theta = add(m, t, mu);
    CALL(ag_sub(m->ctx, constant(m, m->y, J, 0), theta, &r));
    CALL(ag_div(m->ctx, r, constant(m, m->sigma_obs, J, 0), &z));
    lp = add(m, sumsq(m, z, -0.5f), sumsq(m, tt, -0.5f));
    lp = add(m, lp, sumsq(m, mu, -1.0f / 50.0f));
    CALL(ag_sub(m->ctx, lp, log1p_sq_over(m, ltau, 5.0f, one), &t));
    return add(m, t, ltau);
}

static ag_tensor beta_prior(model *m, ag_tensor lp, ag_tensor beta) {
    if (m->beta_sd <= 0) return lp;
    return add(m, lp, sumsq(m, beta, (float)(-0.5 / (m->beta_sd * m->beta_sd))));
}

static ag_tensor build_linreg(model *m, ag_tensor q, ag_tensor one) {
    size_t n = (size_t)m->rows, d = (size_t)m->d;
    ag_tensor beta = slice(m, q, 0, d), s = slice(m, q, d, 1);
    ag_tensor b2, mu, r, inv_var, t, lp;
    size_t col[2] = {d, 1};
    CALL(ag_reshape(m->ctx, beta, col, 2, &b2));
    CALL(ag_matmul(m->ctx, constant(m, m->x, n, d), b2, false, false, &mu));
    CALL(ag_sub(m->ctx, constant(m, m->y, n, 1), mu, &r));
    CALL(ag_scale(m->ctx, s, -2.0f, &t));
    CALL(ag_exp(m->ctx, t, &inv_var));
    CALL(ag_mul(m->ctx, sumsq(m, r, -0.5f), inv_var, &lp));
    CALL(ag_scale(m->ctx, s, (float)(1.0 - (double)n), &t)); /* -n log sigma + log sigma */
    lp = beta_prior(m, add(m, lp, t), beta);
    if (!strcmp(m->sigma_prior, "cauchy")) {
        CALL(ag_sub(m->ctx, lp, log1p_sq_over(m, s, (float)m->sigma_scale, one), &t));
        lp = t;
    } else if (!strcmp(m->sigma_prior, "normal")) {
        ag_tensor e;
        CALL(ag_scale(m->ctx, s, 2.0f, &t));
        CALL(ag_exp(m->ctx, t, &e));
        CALL(ag_scale(m->ctx, e, (float)(-0.5 / (m->sigma_scale * m->sigma_scale)), &t));
        lp = add(m, lp, t);
    }
    return lp;
}

static ag_tensor build_logistic(model *m, ag_tensor q, ag_tensor one) {
    size_t n = (size_t)m->rows, d = (size_t)m->d;
    ag_tensor b2, eta, a, na, e, l, rl, sp, yeta, t, lp;
    size_t col[2] = {d, 1};
    CALL(ag_reshape(m->ctx, q, col, 2, &b2));
    CALL(ag_matmul(m->ctx, constant(m, m->x, n, d), b2, false, false, &eta));
    CALL(ag_abs(m->ctx, eta, &a));
    CALL(ag_neg(m->ctx, a, &na));
    CALL(ag_exp(m->ctx, na, &e));
    CALL(ag_log(m->ctx, add(m, e, one), &l));
    CALL(ag_relu(m->ctx, eta, &rl));
    sp = add(m, rl, l);
    CALL(ag_mul(m->ctx, constant(m, m->y, n, 1), eta, &yeta));
    CALL(ag_sub(m->ctx, yeta, sp, &t));
    CALL(ag_sum(m->ctx, t, &lp));
    return beta_prior(m, lp, q);
}

static ag_tensor unary(model *m, ag_status (*f)(ag_context *, ag_tensor, ag_tensor *), ag_tensor x) {
    ag_tensor t;
    CALL(f(m->ctx, x, &t));
    return t;
}

static ag_tensor build_mixture2(model *m, ag_tensor q) {
    size_t n = (size_t)m->rows;
    ag_tensor mu1 = slice(m, q, 0, 1), gap = slice(m, q, 1, 1), ls = slice(m, q, 2, 2);
    ag_tensor lt = slice(m, q, 4, 1), t, r, z, lpk, lse, lp;
    ag_tensor pair[2];
    /* mu = (mu_1, mu_1 + e^gap): ordered by construction */
    pair[0] = mu1;
    pair[1] = add(m, mu1, unary(m, ag_exp, gap));
    ag_tensor mu, lw, sigma = unary(m, ag_exp, ls);
    CALL(ag_concat(m->ctx, pair, 2, 0, &mu));
    /* log w = (log theta, log(1 - theta)) = log_sigmoid(+-logit theta) */
    pair[0] = unary(m, ag_log_sigmoid, lt);
    pair[1] = unary(m, ag_log_sigmoid, unary(m, ag_neg, lt));
    CALL(ag_concat(m->ctx, pair, 2, 0, &lw));
    /* [n, 1] - [2] -> [n, 2]: each point against each component */
    CALL(ag_sub(m->ctx, constant(m, m->y, n, 1), mu, &r));
    CALL(ag_div(m->ctx, r, sigma, &z));
    CALL(ag_sub(m->ctx, lw, ls, &t));
    CALL(ag_mul(m->ctx, z, z, &r));
    CALL(ag_scale(m->ctx, r, -0.5f, &z));
    lpk = add(m, z, t);
    CALL(ag_logsumexp_axis(m->ctx, lpk, 1, false, &lse));
    CALL(ag_sum(m->ctx, lse, &lp));
    lp = add(m, lp, sumsq(m, mu, -1.0f / 8.0f));
    lp = add(m, lp, sumsq(m, sigma, -1.0f / 8.0f));
    CALL(ag_sum(m->ctx, lw, &t));
    CALL(ag_scale(m->ctx, t, 5.0f, &r));
    lp = add(m, lp, r);
    CALL(ag_sum(m->ctx, ls, &t));
    lp = add(m, lp, t);
    return add(m, lp, gap);
}

ag_tensor model_logp(model *m, ag_tensor q) {
    float onev = 1.0f;
    ag_tensor one = constant(m, &onev, 1, 0);
    if (!strcmp(m->kind, "eight_schools")) return build_eight_schools(m, q, one);
    if (!strcmp(m->kind, "linreg")) return build_linreg(m, q, one);
    if (!strcmp(m->kind, "mixture2")) return build_mixture2(m, q);
    return build_logistic(m, q, one);
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

void model_constrain(const model *m, const double *q, double *out) {
    if (!strcmp(m->kind, "eight_schools")) {
        int J = m->d;
        double mu = q[J], tau = exp(q[J + 1]);
        for (int j = 0; j < J; j++) out[j] = mu + tau * q[j];
        out[J] = mu;
        out[J + 1] = tau;
    } else if (!strcmp(m->kind, "linreg")) {
        for (int j = 0; j < m->d; j++) out[j] = q[j];
        out[m->d] = exp(q[m->d]);
    } else if (!strcmp(m->kind, "mixture2")) {
        out[0] = q[0];
        out[1] = q[0] + exp(q[1]);
        out[2] = exp(q[2]);
        out[3] = exp(q[3]);
        out[4] = 1.0 / (1.0 + exp(-q[4]));
    } else {
        for (int j = 0; j < m->d; j++) out[j] = q[j];
    }
}

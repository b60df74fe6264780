/*
 * models.c: the log densities, written with arenagrad ops, and the data
 * files they read (tests/data/posteriordb/NAME.data, written once by
 * scripts/posteriordb_prep.py). Each density is an ag_log_density_fn
 * (model_density) over the model's data, which stays read-only.
 *
 * File format: "model KIND", optional "beta_prior_sd S",
 * "sigma_prior flat|cauchy|normal SCALE", "lkj_eta ETA" and "sigma1 S"
 * lines, "names q1 q2 ...", "rows N C", then N rows of C numbers.
 *
 *  eight_schools (non-centred): rows are (y_j, sigma_j);
 *    q = (theta_trans[1..J], mu, log tau), tau = e^{log tau} (ag_constrain_lower),
 *    log p = -|theta_trans|^2/2 - sum((y - mu - tau theta_trans) / sigma)^2 / 2
 *            - mu^2 / 50 - log(1 + tau^2 / 25) + log tau   (Jacobian of tau)
 *    reported: theta[j] = mu + tau theta_trans[j], mu, tau.
 *  linreg: rows are (y, x_1..x_d); y ~ normal(X beta, sigma), q = (beta, log sigma),
 *    log p = -n log sigma - |y - X beta|^2 / (2 sigma^2) + log sigma (Jacobian)
 *            + beta prior + sigma prior; reported: beta, sigma. |y - X beta|^2
 *    = rss + |U (beta - bhat)|^2 (least squares and X'X = U'U, made once).
 *  logistic: rows are (y in {0, 1}, x_1..x_d); y ~ bernoulli_logit(X beta),
 *    log p = sum(y eta - softplus(eta)) + beta prior, eta = X beta; as
 *    y eta - softplus(eta) = log_sigmoid(+-eta) (+ where y = 1), it runs
 *    as sum(log_sigmoid(S beta)) with S = X, each row's sign flipped where
 *    y = 0 (made once, when the data is read): one product, one map and
 *    a sum per gradient instead of two more passes over the rows.
 *  mixture2: rows are (y); y ~ theta normal(mu_1, sigma_1) + (1 - theta)
 *    normal(mu_2, sigma_2) with mu ordered, mu ~ normal(0, 2), sigma ~
 *    half-normal(0, 2), theta ~ beta(5, 5) (posteriordb's
 *    low_dim_gauss_mix); q = (mu_1, log(mu_2 - mu_1), log sigma, logit theta),
 *    log p = sum_n logsumexp_k(log w_k - log sigma_k - (y_n - mu_k)^2 / (2 sigma_k^2))
 *            - |mu|^2 / 8 - |sigma|^2 / 8 + 4 log theta + 4 log(1 - theta)
 *            + log(mu_2 - mu_1) + Jacobians of sigma and theta,
 *    with w = (theta, 1 - theta), log theta = log_sigmoid(logit theta);
 *    reported: mu[1], mu[2], sigma[1], sigma[2], theta. Each term is a
 *    quadratic in y_n, so it runs from the rows (1, y, y^2) made once.
 *  gamma_iid: rows are (y > 0); y ~ gamma(alpha, beta) (shape, rate), alpha
 *    and beta ~ half-normal(0, 10); q = (log alpha, log beta),
 *    log p = sum(alpha log beta - lgamma(alpha) + (alpha - 1) log y - beta y)
 *            - (alpha^2 + beta^2) / 200 + Jacobians; reported: alpha, beta.
 *  beta_iid: rows are (y in (0, 1)); y ~ beta(a, b), a and b ~
 *    half-normal(0, 10); q = (log a, log b),
 *    log p = sum((a - 1) log y + (b - 1) log(1 - y)) - N lbeta(a, b)
 *            - (a^2 + b^2) / 200 + Jacobians; reported: a, b.
 *  mvn_lkj: rows are vectors y_n in R^K (K = columns, 2 to 4; no rows: the
 *    prior alone); y_n ~ multi_normal(0, Sigma), Sigma = diag(tau) Omega
 *    diag(tau), Omega = L L^T a correlation matrix with L ~
 *    lkj_corr_cholesky(eta) ("lkj_eta ETA"), tau ~ half-normal(0, s)
 *    ("sigma_prior normal S"). q = (log tau[1..K], u[1..K(K-1)/2]), L =
 *    ag_constrain_cholesky_corr(u) (Stan's cholesky_corr_constrain: each
 *    partial correlation z = tanh(u), L[i][j] = z_ij sqrt(1 - sum_{k<j}
 *    L[i][k]^2), L[i][i] the rest) with its log Jacobian.
 *    log p = -|L_Sigma^{-1} Y^T|^2 / 2 - N sum log diag(L_Sigma)
 *            + sum_{i>=2} (K - i + 2 eta - 2) log L[i][i] - |tau|^2 / (2 s^2)
 *            + Jacobians, with L_Sigma = diag(tau) L (ag_solve_lower);
 *    reported: tau[k], then Omega.i.j for i > j, row by row.
 *  hier_lkj: rows are groups (y_g in R^K, s_g): y_g ~ normal(theta_g, s_g I),
 *    theta_g = diag(tau) L z_g with z_g ~ normal(0, I) (non-centred:
 *    theta_g ~ multi_normal(0, Sigma)), tau, L and their priors as in
 *    mvn_lkj; q = (log tau, u, z_1, .., z_G), theta = Z L_Sigma^T;
 *    reported: tau[k], Omega.i.j, then theta.g.k group by group.
 *  arma11: rows are (y_t); err_t = y_t - mu - phi y_{t-1} - theta err_{t-1}
 *    (y_0 = mu, err_0 = 0), err ~ normal(0, sigma), mu ~ normal(0, 10),
 *    phi and theta ~ normal(0, 2), sigma ~ half-Cauchy(0, 2.5) (posteriordb's
 *    arma11). The recursion is linear, err_t = -theta err_{t-1} + c_t with
 *    c_t = y_t - mu - phi y_{t-1}: one ag_linear_recurrence.
 *    q = (mu, phi, theta, log sigma); reported: mu, phi, theta, sigma.
 *  garch11: rows are (y_t), "sigma1 S": y_t ~ normal(mu, sigma_t), sigma_1 = S,
 *    sigma_t^2 = alpha0 + alpha1 (y_{t-1} - mu)^2 + beta1 sigma_{t-1}^2, flat
 *    priors on alpha0 > 0, alpha1 in (0, 1), beta1 in (0, 1 - alpha1)
 *    (posteriordb's garch11). Linear in sigma^2: sigma_t^2 = beta1
 *    sigma_{t-1}^2 + a_t, as arma11's errors. q = (mu, log alpha0,
 *    logit alpha1, logit w) with beta1 = (1 - alpha1) w; reported: mu,
 *    alpha0, alpha1, beta1.
 * Constants of the densities are dropped: NUTS needs log p up to a constant.
 *
 * Every function here returns the first failing call's status, so an error
 * inside the density stops ag_nuts_run with that status.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nuts.h"

#define TRY(x)                                   \
    do {                                         \
        ag_status st_ = (x);                     \
        if (st_ != AG_STATUS_OK) return st_;     \
    } while (0)

static void die(const char *path, const char *msg) {
    fprintf(stderr, "nuts: %s: %s\n", path, msg);
    exit(1);
}

static char *copy_str(const char *s) {
    char *c = malloc(strlen(s) + 1);
    if (!c) die(s, "out of memory");
    strcpy(c, s);
    return c;
}

/* coordinate names: the reported names where a coordinate is one, else
 * the transform's, e.g. log_sigma */
static void name_coordinates(model *m) {
    char buf[96];
    for (int i = 0; i < m->dim; i++) {
        const char *n = i < m->n_out ? m->names[i] : "";
        if (!strcmp(m->kind, "eight_schools")) {
            if (i < m->d) snprintf(buf, sizeof buf, "theta_trans[%d]", i + 1);
            else snprintf(buf, sizeof buf, i == m->d ? "mu" : "log_tau");
        } else if (!strcmp(m->kind, "linreg")) {
            snprintf(buf, sizeof buf, i < m->d ? "%s" : "log_%s", n);
        } else if (!strcmp(m->kind, "mixture2")) {
            static const char *const c[5] = {"mu[1]", "log_mu_gap", "log_sigma[1]", "log_sigma[2]", "logit_theta"};
            snprintf(buf, sizeof buf, "%s", c[i]);
        } else if (!strcmp(m->kind, "arma11")) {
            snprintf(buf, sizeof buf, i < 3 ? "%s" : "log_%s", n);
        } else if (!strcmp(m->kind, "garch11")) {
            static const char *const c[4] = {"mu", "log_alpha0", "logit_alpha1", "logit_beta1_share"};
            snprintf(buf, sizeof buf, "%s", c[i]);
        } else if (!strcmp(m->kind, "gamma_iid") || !strcmp(m->kind, "beta_iid") ||
                   (strstr(m->kind, "_lkj") && i < m->d)) {
            snprintf(buf, sizeof buf, "log_%s", n);
        } else if (strstr(m->kind, "_lkj") && i < m->d + m->d * (m->d - 1) / 2) {
            snprintf(buf, sizeof buf, "u_%s", n); /* the partial correlation's */
        } else if (!strcmp(m->kind, "hier_lkj")) {
            snprintf(buf, sizeof buf, "z_%s", n); /* theta's standardised effect */
        } else {
            snprintf(buf, sizeof buf, "%s", n);
        }
        m->coord_names[i] = copy_str(buf);
    }
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
        } else if (!strcmp(key, "sigma1")) {
            if (fscanf(f, "%lf", &m->sigma1) != 1 || !(m->sigma1 > 0)) die(path, "bad sigma1");
        } else if (!strcmp(key, "lkj_eta")) {
            if (fscanf(f, "%lf", &m->lkj_eta) != 1 || !(m->lkj_eta > 0)) die(path, "bad lkj_eta");
        } else if (!strcmp(key, "names")) {
            char line[4096];
            if (!fgets(line, sizeof line, f)) die(path, "bad names");
            for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) {
                if (m->n_out == NUTS_MAX_NAMES) die(path, "too many names");
                m->names[m->n_out++] = copy_str(t);
            }
        } else if (!strcmp(key, "rows")) {
            /* the prior alone: no rows, for mvn_lkj */
            int least = strcmp(m->kind, "mvn_lkj") ? 1 : 0;
            if (fscanf(f, "%d %d", &m->rows, &m->cols) != 2 || m->rows < least || m->cols < 1)
                die(path, "bad rows line");
            break;
        } else {
            die(path, "unknown key");
        }
    }
    int n = m->rows, c = m->cols;
    m->d = c - 1;
    m->y = malloc(sizeof(float) * (n > 0 ? n : 1));
    m->x = malloc(sizeof(float) * (n > 0 ? n : 1) * (m->d > 0 ? m->d : 1));
    m->yt = malloc(sizeof(float) * (n > 0 ? n : 1) * c);
    if (!m->y || !m->x || !m->yt) die(path, "out of memory");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < c; j++) {
            double v;
            if (fscanf(f, "%lf", &v) != 1) die(path, "short data");
            if (j == 0) m->y[i] = (float)v;
            else m->x[i * m->d + j - 1] = (float)v;
            m->yt[j * n + i] = (float)v;
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
        for (int i = 0; i < n; i++)
            if (m->y[i] != 0 && m->y[i] != 1) die(path, "logistic: y must be 0 or 1");
    } else if (!strcmp(m->kind, "mixture2")) {
        m->dim = 5;
        if (m->n_out != 5) die(path, "mixture2: names must be mu[1..2], sigma[1..2], theta");
        /* the rows (1, y, y^2) over the points, their sums, then n zeros
         * (the likelihood's outcomes, below) */
        m->gram = calloc(4 * (size_t)n + 3, sizeof(float));
        if (!m->gram) die(path, "out of memory");
        double sy = 0, syy = 0;
        for (int i = 0; i < n; i++) {
            double v = m->y[i];
            m->gram[i] = 1.0f;
            m->gram[n + i] = (float)v;
            m->gram[2 * n + i] = (float)(v * v);
            sy += v;
            syy += v * v;
        }
        m->gram[3 * n] = (float)n;
        m->gram[3 * n + 1] = (float)sy;
        m->gram[3 * n + 2] = (float)syy;
    } else if (!strcmp(m->kind, "gamma_iid")) {
        m->dim = 2;
        if (m->n_out != 2 || c != 1) die(path, "gamma_iid: names must be alpha, beta; one column");
        m->x = realloc(m->x, sizeof(float) * n); /* log y: data, not a per-gradient op */
        if (!m->x) die(path, "out of memory");
        for (int i = 0; i < n; i++) {
            if (!(m->y[i] > 0)) die(path, "gamma_iid: data must be positive");
            m->x[i] = logf(m->y[i]); /* the float log ag_log runs */
        }
    } else if (!strcmp(m->kind, "beta_iid")) {
        m->dim = 2;
        if (m->n_out != 2 || c != 1) die(path, "beta_iid: names must be a, b; one column");
        m->x = realloc(m->x, sizeof(float) * 2 * (n > 0 ? n : 1)); /* [log y; log(1 - y)] */
        if (!m->x) die(path, "out of memory");
        for (int i = 0; i < n; i++) {
            if (!(m->y[i] > 0 && m->y[i] < 1)) die(path, "beta_iid: data must be in (0, 1)");
            m->x[i] = logf(m->y[i]); /* the float log ag_log runs */
            m->x[n + i] = (float)log1p(-(double)m->y[i]);
        }
    } else if (!strcmp(m->kind, "mvn_lkj")) {
        m->d = c; /* K */
        m->dim = c + c * (c - 1) / 2;
        if (c < 2 || c > 4) die(path, "mvn_lkj: 2 to 4 columns");
        if (m->n_out != m->dim) die(path, "mvn_lkj: names must be tau[1..K], then Omega.i.j for i > j");
        if (!(m->lkj_eta > 0) || strcmp(m->sigma_prior, "normal") || !(m->sigma_scale > 0))
            die(path, "mvn_lkj: needs lkj_eta and sigma_prior normal");
    } else if (!strcmp(m->kind, "arma11") || !strcmp(m->kind, "garch11")) {
        m->dim = 4;
        if (m->n_out != 4 || c != 1 || n < 2) die(path, "arma11, garch11: 4 names, one column, 2 rows or more");
        if (!strcmp(m->kind, "garch11") && !(m->sigma1 > 0)) die(path, "garch11: needs sigma1");
    } else if (!strcmp(m->kind, "hier_lkj")) {
        int K = c - 1;
        m->d = K;
        m->dim = K + K * (K - 1) / 2 + n * K;
        if (K < 2 || K > 4) die(path, "hier_lkj: 3 to 5 columns");
        if (m->n_out != m->dim)
            die(path, "hier_lkj: names must be tau[1..K], Omega.i.j for i > j, then theta.j.k group by group");
        if (!(m->lkj_eta > 0) || strcmp(m->sigma_prior, "normal") || !(m->sigma_scale > 0))
            die(path, "hier_lkj: needs lkj_eta and sigma_prior normal");
        m->obs = malloc(sizeof(float) * n * K);
        m->se = malloc(sizeof(float) * n);
        if (!m->obs || !m->se) die(path, "out of memory");
        for (int g = 0; g < n; g++) {
            for (int k = 0; k < K; k++) m->obs[g * K + k] = m->yt[k * n + g];
            m->se[g] = m->yt[K * n + g];
            if (!(m->se[g] > 0)) die(path, "hier_lkj: standard errors must be positive");
        }
    } else {
        die(path, "unknown model kind");
    }
    if (m->dim > NUTS_MAX_NAMES) die(path, "too many parameters");
    name_coordinates(m);
}

void model_free(model *m) {
    for (int i = 0; i < m->n_out; i++) free(m->names[i]);
    for (int i = 0; i < m->dim; i++) free(m->coord_names[i]);
    free(m->y);
    free(m->x);
    free(m->yt);
    free(m->obs);
    free(m->se);
    free(m->gram);
    ag_context_free(&m->ctx);
}

/* a constant [n] (or [n, cols] when cols) tensor */
static ag_status constant(ag_context *ctx, const float *v, size_t n, size_t cols, ag_tensor *out) {
    size_t shape[2] = {n, cols};
    return ag_tensor_new(ctx, shape, cols ? 2 : 1, v, out);
}

/* sum(v * v) * s */
static ag_status sumsq(ag_context *ctx, ag_tensor v, float s, ag_tensor *out) {
    ag_tensor sq, sum;
    TRY(ag_mul(ctx, v, v, &sq));
    TRY(ag_sum(ctx, sq, &sum));
    return ag_scale(ctx, sum, s, out);
}

/* *acc += t */
static ag_status accumulate(ag_context *ctx, ag_tensor *acc, ag_tensor t) {
    return ag_add(ctx, *acc, t, acc);
}

/* log(1 + (x / c)^2): minus a half-Cauchy(0, c)'s log density at x >= 0 */
static ag_status log1p_sq_over(ag_context *ctx, ag_tensor x, float c, ag_tensor *out) {
    ag_tensor t;
    TRY(sumsq(ctx, x, 1.0f / (c * c), &t));
    return ag_log1p(ctx, t, out);
}

static ag_status eight_schools(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t J = (size_t)m->d;
    ag_tensor tt, mu, ltau, tau, jac, theta, y, s, r, z, lp, t;
    TRY(ag_slice(ctx, q, 0, 0, J, &tt));
    TRY(ag_slice(ctx, q, 0, J, 1, &mu));
    TRY(ag_slice(ctx, q, 0, J + 1, 1, &ltau));
    TRY(ag_constrain_lower(ctx, ltau, 0.0f, &tau, &jac));
    TRY(ag_mul(ctx, tt, tau, &t));
    TRY(ag_add(ctx, t, mu, &theta));
    TRY(constant(ctx, m->y, J, 0, &y));
    TRY(constant(ctx, m->sigma_obs, J, 0, &s));
    TRY(ag_sub(ctx, y, theta, &r));
    TRY(ag_div(ctx, r, s, &z));
    TRY(sumsq(ctx, z, -0.5f, &lp));
    TRY(sumsq(ctx, tt, -0.5f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, mu, -1.0f / 50.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(log1p_sq_over(ctx, tau, 5.0f, &t));
    TRY(ag_sub(ctx, lp, t, &lp));
    return ag_add(ctx, lp, jac, out);
}

static ag_status beta_prior(ag_context *ctx, const model *m, ag_tensor beta, ag_tensor *lp) {
    if (m->beta_sd <= 0) return AG_STATUS_OK;
    ag_tensor t;
    TRY(sumsq(ctx, beta, (float)(-0.5 / (m->beta_sd * m->beta_sd)), &t));
    return accumulate(ctx, lp, t);
}

static ag_status linreg(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    static const float zero = 0.0f;
    size_t n = (size_t)m->rows, d = (size_t)m->d;
    ag_tensor beta, s, sigma, jac, xt, y, alpha, t, lp;
    TRY(ag_slice(ctx, q, 0, 0, d, &beta));
    TRY(ag_slice(ctx, q, 0, d, 1, &s));
    TRY(ag_constrain_lower(ctx, s, 0.0f, &sigma, &jac));
    /* X is given as X^T [d, n] (rows 1.. of yt): each column of X
     * contiguous, the layout the fused likelihood runs along in vector
     * registers. The intercept, where a model has one, is a column of 1s
     * in X, so alpha is 0. */
    TRY(constant(ctx, m->yt + n, d, n, &xt));
    TRY(constant(ctx, m->y, n, 0, &y));
    TRY(constant(ctx, &zero, 1, 0, &alpha));
    TRY(ag_normal_id_glm_lpdf(ctx, y, xt, true, alpha, beta, sigma, &lp));
    TRY(accumulate(ctx, &lp, jac));
    TRY(beta_prior(ctx, m, beta, &lp));
    if (!strcmp(m->sigma_prior, "cauchy")) {
        TRY(log1p_sq_over(ctx, sigma, (float)m->sigma_scale, &t));
        TRY(ag_sub(ctx, lp, t, &lp));
    } else if (!strcmp(m->sigma_prior, "normal")) {
        TRY(sumsq(ctx, sigma, (float)(-0.5 / (m->sigma_scale * m->sigma_scale)), &t));
        TRY(accumulate(ctx, &lp, t));
    }
    *out = lp;
    return AG_STATUS_OK;
}

static ag_status logistic(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    static const float zero = 0.0f;
    size_t n = (size_t)m->rows, d = (size_t)m->d;
    ag_tensor xt, y, alpha, lp;
    /* X^T [d, n], as linreg's; one op for the likelihood and its
     * gradient (a product, a log sigmoid and a sum took three, and an
     * exponential each way per row where this takes one) */
    TRY(constant(ctx, m->yt + n, d, n, &xt));
    TRY(constant(ctx, m->y, n, 0, &y));
    TRY(constant(ctx, &zero, 1, 0, &alpha));
    TRY(ag_bernoulli_logit_glm_lpmf(ctx, y, xt, true, alpha, q, &lp));
    TRY(beta_prior(ctx, m, q, &lp));
    *out = lp;
    return AG_STATUS_OK;
}

static ag_status mixture2(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t n = (size_t)m->rows;
    ag_tensor mu1, gap, ls, lt, sigma, jac_s, theta, jac_t, pair[2], mu, lw, y, r, lp, t;
    ag_tensor k2, km, abc[3], coef, c1, c2, dc, zeros, alpha;
    static const float zero = 0.0f;
    const size_t coef_shape[2] = {3, 2}, three = 3;
    TRY(ag_slice(ctx, q, 0, 0, 1, &mu1));
    TRY(ag_slice(ctx, q, 0, 1, 1, &gap));
    TRY(ag_slice(ctx, q, 0, 2, 2, &ls));
    TRY(ag_slice(ctx, q, 0, 4, 1, &lt));
    TRY(ag_constrain_lower(ctx, ls, 0.0f, &sigma, &jac_s));
    TRY(ag_constrain_interval(ctx, lt, 0.0f, 1.0f, &theta, &jac_t));
    /* mu = (mu_1, mu_1 + e^gap): ordered by construction */
    pair[0] = mu1;
    TRY(ag_exp(ctx, gap, &t));
    TRY(ag_add(ctx, mu1, t, &pair[1]));
    TRY(ag_concat(ctx, pair, 2, 0, &mu));
    /* log w = (log theta, log(1 - theta)) = log_sigmoid(+-logit theta) */
    TRY(ag_log_sigmoid(ctx, lt, &pair[0]));
    TRY(ag_neg(ctx, lt, &t));
    TRY(ag_log_sigmoid(ctx, t, &pair[1]));
    TRY(ag_concat(ctx, pair, 2, 0, &lw));
    /* Each component's term is a quadratic in y: p_k(y) = log w_k -
     * log sigma_k - K_k (y - mu_k)^2 = A_k + B_k y + C_k y^2, K = e^(-2 log
     * sigma) / 2, A = log w - log sigma - K mu^2, B = 2 K mu, C = -K; the
     * coefficients are made on [2] columns. logsumexp(p_1, p_2) = p_1 +
     * softplus(p_2 - p_1), and sum_n softplus(dc . (1, y_n, y_n^2)) is minus
     * the Bernoulli-logit GLM's log mass of outcomes 0 with coefficients dc:
     * one op over the points (one exponential each, the product fused), and
     * sum_n p_1(y_n) from the sums of 1, y, y^2. */
    TRY(ag_scale(ctx, ls, -2.0f, &t));
    TRY(ag_exp(ctx, t, &t));
    TRY(ag_scale(ctx, t, 0.5f, &k2));
    TRY(ag_mul(ctx, k2, mu, &km));
    TRY(ag_sub(ctx, lw, ls, &t));
    TRY(ag_mul(ctx, km, mu, &r));
    TRY(ag_sub(ctx, t, r, &abc[0]));
    TRY(ag_scale(ctx, km, 2.0f, &abc[1]));
    TRY(ag_neg(ctx, k2, &abc[2]));
    TRY(ag_concat(ctx, abc, 3, 0, &t));
    TRY(ag_reshape(ctx, t, coef_shape, 2, &coef)); /* rows (A, B, C), a column per component */
    TRY(ag_slice(ctx, coef, 1, 0, 1, &c1));
    TRY(ag_slice(ctx, coef, 1, 1, 1, &c2));
    TRY(ag_sub(ctx, c2, c1, &dc));
    TRY(ag_reshape(ctx, dc, &three, 1, &dc));
    TRY(constant(ctx, m->gram, 3, n, &y));
    TRY(constant(ctx, m->gram + 3 * n + 3, n, 0, &zeros));
    TRY(constant(ctx, &zero, 1, 0, &alpha));
    TRY(ag_bernoulli_logit_glm_lpmf(ctx, zeros, y, true, alpha, dc, &t));
    TRY(ag_neg(ctx, t, &lp)); /* sum_n softplus(p_2 - p_1) */
    /* sum_n p_1(y_n) = (sum 1, sum y, sum y^2) . c1: a dot of 3 (mul and
     * sum, run inline by a replay, where a BLAS call costs more than it) */
    TRY(constant(ctx, m->gram + 3 * n, 3, 0, &y));
    TRY(ag_reshape(ctx, c1, &three, 1, &t));
    TRY(ag_mul(ctx, y, t, &t));
    TRY(ag_sum(ctx, t, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, mu, -1.0f / 8.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, sigma, -1.0f / 8.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(ag_sum(ctx, lw, &t));
    TRY(ag_scale(ctx, t, 4.0f, &t)); /* beta(5, 5) */
    TRY(accumulate(ctx, &lp, t));
    TRY(accumulate(ctx, &lp, jac_s));
    TRY(accumulate(ctx, &lp, jac_t));
    return ag_add(ctx, lp, gap, out);
}

/* gamma_iid's and beta_iid's two positive parameters: pos = exp(q), its
 * log Jacobian jac, and its entries a and b. */
static ag_status positive_pair(ag_context *ctx, ag_tensor q, ag_tensor *pos, ag_tensor *jac, ag_tensor *a,
                               ag_tensor *b) {
    TRY(ag_constrain_lower(ctx, q, 0.0f, pos, jac));
    TRY(ag_slice(ctx, *pos, 0, 0, 1, a));
    return ag_slice(ctx, *pos, 0, 1, 1, b);
}

/* lp with positive_pair's normal(0, 10) priors and its Jacobian. */
static ag_status positive_pair_finish(ag_context *ctx, ag_tensor pos, ag_tensor jac, ag_tensor lp,
                                      ag_tensor *out) {
    ag_tensor t;
    TRY(sumsq(ctx, pos, -1.0f / 200.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    return ag_add(ctx, lp, jac, out);
}

static ag_status gamma_iid(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t n = (size_t)m->rows;
    ag_tensor pos, jac, alpha, beta, lbeta, y, logy, t, u, lp;
    TRY(positive_pair(ctx, q, &pos, &jac, &alpha, &beta));
    TRY(ag_slice(ctx, q, 0, 1, 1, &lbeta)); /* log beta */
    TRY(constant(ctx, m->y, n, 0, &y));
    TRY(constant(ctx, m->x, n, 0, &logy));
    /* per row: alpha log beta - lgamma(alpha) + (alpha - 1) log y - beta y */
    TRY(ag_mul(ctx, alpha, lbeta, &t));
    TRY(ag_lgamma(ctx, alpha, &u));
    TRY(ag_sub(ctx, t, u, &t));
    TRY(ag_scale(ctx, t, (float)n, &lp));
    TRY(ag_mul(ctx, logy, alpha, &t));
    TRY(ag_sub(ctx, t, logy, &t));
    TRY(ag_mul(ctx, y, beta, &u));
    TRY(ag_sub(ctx, t, u, &t));
    TRY(ag_sum(ctx, t, &u));
    TRY(accumulate(ctx, &lp, u));
    return positive_pair_finish(ctx, pos, jac, lp, out);
}

static ag_status beta_iid(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t n = (size_t)m->rows;
    ag_tensor pos, jac, a, b, logs, one, c, t, lp;
    float onev = 1.0f;
    TRY(positive_pair(ctx, q, &pos, &jac, &a, &b));
    /* sum((a - 1) log y + (b - 1) log(1 - y)) - N lbeta(a, b): the logs of
     * the data are data, [2, n], each row times its coefficient */
    const size_t logs_shape[2] = {2, n}, col[2] = {2, 1};
    TRY(ag_tensor_new(ctx, logs_shape, 2, m->x, &logs));
    TRY(constant(ctx, &onev, 1, 0, &one));
    TRY(ag_sub(ctx, pos, one, &c));
    TRY(ag_reshape(ctx, c, col, 2, &c));
    TRY(ag_mul(ctx, logs, c, &t));
    TRY(ag_sum(ctx, t, &lp));
    TRY(ag_lbeta(ctx, a, b, &t));
    TRY(ag_scale(ctx, t, -(float)n, &t));
    TRY(accumulate(ctx, &lp, t));
    return positive_pair_finish(ctx, pos, jac, lp, out);
}

/* L_Sigma = diag(tau) L, the Cholesky factor of Sigma, from q's first K
 * + K(K-1)/2 coordinates (log tau, then the correlations' unconstrained
 * ones), with the LKJ and half-normal priors and every Jacobian in *lp.
 * Ls NULL: the priors alone (no data reads L_Sigma, and a product nothing
 * reads would still run at every replay). */
static ag_status covariance_factor(ag_context *ctx, const model *m, ag_tensor q, int K, ag_tensor *Ls,
                                   ag_tensor *lp) {
    size_t pairs = (size_t)(K * (K - 1) / 2);
    ag_tensor ltau, tau, jac_tau, u, L, jac_L, t, tau_col;
    TRY(ag_slice(ctx, q, 0, 0, (size_t)K, &ltau));
    TRY(ag_slice(ctx, q, 0, (size_t)K, pairs, &u));
    TRY(ag_constrain_lower(ctx, ltau, 0.0f, &tau, &jac_tau));
    TRY(ag_constrain_cholesky_corr(ctx, u, &L, &jac_L));
    TRY(ag_add(ctx, jac_tau, jac_L, lp));
    /* L ~ lkj_corr_cholesky(eta): one op, reading L's diagonal */
    TRY(ag_lkj_corr_cholesky_lpdf(ctx, L, (float)m->lkj_eta, &t));
    TRY(accumulate(ctx, lp, t));
    TRY(sumsq(ctx, tau, (float)(-0.5 / (m->sigma_scale * m->sigma_scale)), &t));
    TRY(accumulate(ctx, lp, t));
    if (!Ls) return AG_STATUS_OK;
    size_t col[2] = {(size_t)K, 1};
    TRY(ag_reshape(ctx, tau, col, 2, &tau_col));
    return ag_mul(ctx, L, tau_col, Ls); /* diag(tau) L: row i times tau_i */
}

static ag_status mvn_lkj(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    int K = m->d;
    size_t n = (size_t)m->rows;
    ag_tensor lp, Ls, y, x, d, t;
    TRY(covariance_factor(ctx, m, q, K, n > 0 ? &Ls : NULL, &lp));
    if (n > 0) {
        TRY(constant(ctx, m->yt, (size_t)K, n, &y));
        TRY(ag_solve_lower(ctx, Ls, y, &x));
        TRY(sumsq(ctx, x, -0.5f, &t));
        TRY(accumulate(ctx, &lp, t));
        TRY(ag_diagonal(ctx, Ls, &d));
        TRY(ag_log(ctx, d, &d));
        TRY(ag_sum(ctx, d, &t));
        TRY(ag_scale(ctx, t, -(float)n, &t));
        TRY(accumulate(ctx, &lp, t));
    }
    *out = lp;
    return AG_STATUS_OK;
}

static ag_status hier_lkj(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    int K = m->d;
    size_t J = (size_t)m->rows, first = (size_t)(K + K * (K - 1) / 2);
    ag_tensor lp, Ls, zf, Z, theta, y, se, r, t;
    TRY(covariance_factor(ctx, m, q, K, &Ls, &lp));
    size_t shape[2] = {J, (size_t)K};
    TRY(ag_slice(ctx, q, 0, first, J * (size_t)K, &zf));
    TRY(ag_reshape(ctx, zf, shape, 2, &Z));
    TRY(sumsq(ctx, Z, -0.5f, &t)); /* z ~ normal(0, 1) */
    TRY(accumulate(ctx, &lp, t));
    TRY(ag_matmul(ctx, Z, Ls, false, true, &theta)); /* theta_j = L_Sigma z_j */
    TRY(constant(ctx, m->obs, J, (size_t)K, &y));
    TRY(constant(ctx, m->se, J, 1, &se));
    TRY(ag_sub(ctx, y, theta, &r));
    TRY(ag_div(ctx, r, se, &r));
    TRY(sumsq(ctx, r, -0.5f, &t));
    return ag_add(ctx, lp, t, out);
}

static ag_status arma11(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t n = (size_t)m->rows;
    ag_tensor mu, phi, theta, ls, sigma, jac, y, prev, pair[2], c, t, err, lp;
    TRY(ag_slice(ctx, q, 0, 0, 1, &mu));
    TRY(ag_slice(ctx, q, 0, 1, 1, &phi));
    TRY(ag_slice(ctx, q, 0, 2, 1, &theta));
    TRY(ag_slice(ctx, q, 0, 3, 1, &ls));
    TRY(ag_constrain_lower(ctx, ls, 0.0f, &sigma, &jac));
    /* c = y - mu - phi (mu, y_1, .., y_{T-1}) */
    TRY(constant(ctx, m->y, n, 0, &y));
    pair[0] = mu;
    TRY(ag_slice(ctx, y, 0, 0, n - 1, &pair[1]));
    TRY(ag_concat(ctx, pair, 2, 0, &prev));
    TRY(ag_mul(ctx, prev, phi, &t));
    TRY(ag_sub(ctx, y, t, &c));
    TRY(ag_sub(ctx, c, mu, &c));
    TRY(ag_neg(ctx, theta, &t));
    TRY(ag_linear_recurrence(ctx, t, c, &err));
    TRY(sumsq(ctx, err, -0.5f, &t));
    TRY(ag_mul(ctx, sigma, sigma, &lp));
    TRY(ag_div(ctx, t, lp, &lp));
    TRY(ag_scale(ctx, ls, -(float)n, &t)); /* -T log sigma */
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, mu, -0.5f / 100.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, phi, -0.5f / 4.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(sumsq(ctx, theta, -0.5f / 4.0f, &t));
    TRY(accumulate(ctx, &lp, t));
    TRY(log1p_sq_over(ctx, sigma, 2.5f, &t));
    TRY(ag_sub(ctx, lp, t, &lp));
    return ag_add(ctx, lp, jac, out);
}

static ag_status garch11(ag_context *ctx, const model *m, ag_tensor q, ag_tensor *out) {
    size_t n = (size_t)m->rows;
    float s1 = (float)(m->sigma1 * m->sigma1);
    ag_tensor mu, la0, ua1, uw, alpha0, alpha1, w, beta1, j0, j1, jw, rest, y, r, r2, pair[2], a, s2, t, lp;
    TRY(ag_slice(ctx, q, 0, 0, 1, &mu));
    TRY(ag_slice(ctx, q, 0, 1, 1, &la0));
    TRY(ag_slice(ctx, q, 0, 2, 1, &ua1));
    TRY(ag_slice(ctx, q, 0, 3, 1, &uw));
    TRY(ag_constrain_lower(ctx, la0, 0.0f, &alpha0, &j0));
    TRY(ag_constrain_interval(ctx, ua1, 0.0f, 1.0f, &alpha1, &j1));
    TRY(ag_constrain_interval(ctx, uw, 0.0f, 1.0f, &w, &jw));
    /* beta1 = (1 - alpha1) w: its Jacobian adds log(1 - alpha1) = log_sigmoid(-u) */
    TRY(ag_neg(ctx, ua1, &t));
    TRY(ag_log_sigmoid(ctx, t, &rest));
    TRY(ag_exp(ctx, rest, &t));
    TRY(ag_mul(ctx, t, w, &beta1));
    /* a = (sigma1^2, alpha0 + alpha1 (y_{t-1} - mu)^2 for t >= 2) */
    TRY(constant(ctx, m->y, n, 0, &y));
    TRY(ag_sub(ctx, y, mu, &r));
    TRY(ag_mul(ctx, r, r, &r2));
    TRY(ag_slice(ctx, r2, 0, 0, n - 1, &t));
    TRY(ag_mul(ctx, t, alpha1, &t));
    TRY(ag_add(ctx, t, alpha0, &pair[1]));
    TRY(constant(ctx, &s1, 1, 0, &pair[0]));
    TRY(ag_concat(ctx, pair, 2, 0, &a));
    TRY(ag_linear_recurrence(ctx, beta1, a, &s2)); /* sigma_t^2 */
    /* sum(-log sigma_t - (y_t - mu)^2 / (2 sigma_t^2)): one sum over the rows */
    TRY(ag_div(ctx, r2, s2, &t));
    TRY(ag_log(ctx, s2, &lp));
    TRY(ag_add(ctx, t, lp, &t));
    TRY(ag_sum(ctx, t, &lp));
    TRY(ag_scale(ctx, lp, -0.5f, &lp));
    TRY(accumulate(ctx, &lp, j0));
    TRY(accumulate(ctx, &lp, j1));
    TRY(accumulate(ctx, &lp, jw));
    return ag_add(ctx, lp, rest, out);
}

ag_status model_density(ag_context *ctx, ag_tensor q, void *user, ag_tensor *log_density) {
    const model *m = user;
    if (!strcmp(m->kind, "eight_schools")) return eight_schools(ctx, m, q, log_density);
    if (!strcmp(m->kind, "linreg")) return linreg(ctx, m, q, log_density);
    if (!strcmp(m->kind, "mixture2")) return mixture2(ctx, m, q, log_density);
    if (!strcmp(m->kind, "gamma_iid")) return gamma_iid(ctx, m, q, log_density);
    if (!strcmp(m->kind, "beta_iid")) return beta_iid(ctx, m, q, log_density);
    if (!strcmp(m->kind, "mvn_lkj")) return mvn_lkj(ctx, m, q, log_density);
    if (!strcmp(m->kind, "hier_lkj")) return hier_lkj(ctx, m, q, log_density);
    if (!strcmp(m->kind, "arma11")) return arma11(ctx, m, q, log_density);
    if (!strcmp(m->kind, "garch11")) return garch11(ctx, m, q, log_density);
    return logistic(ctx, m, q, log_density);
}

static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

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
        out[4] = sigmoid(q[4]);
    } else if (!strcmp(m->kind, "gamma_iid") || !strcmp(m->kind, "beta_iid")) {
        out[0] = exp(q[0]);
        out[1] = exp(q[1]);
    } else if (!strcmp(m->kind, "arma11")) {
        out[0] = q[0];
        out[1] = q[1];
        out[2] = q[2];
        out[3] = exp(q[3]);
    } else if (!strcmp(m->kind, "garch11")) {
        out[0] = q[0];
        out[1] = exp(q[1]);
        out[2] = sigmoid(q[2]);
        out[3] = sigmoid(-q[2]) * sigmoid(q[3]);
    } else if (!strcmp(m->kind, "mvn_lkj") || !strcmp(m->kind, "hier_lkj")) {
        int K = m->d, k = K;
        double L[4][4] = {{0}};
        for (int i = 0; i < K; i++) out[i] = exp(q[i]);
        L[0][0] = 1;
        for (int i = 1; i < K; i++) {
            double sum_sq = 0;
            for (int j = 0; j < i; j++) {
                double z = tanh(q[k++]);
                L[i][j] = z * sqrt(1 - sum_sq);
                sum_sq += L[i][j] * L[i][j];
            }
            L[i][i] = sqrt(1 - sum_sq);
        }
        int pair = K;
        for (int i = 1; i < K; i++)
            for (int j = 0; j < i; j++) {
                double omega = 0;
                for (int c = 0; c <= j; c++) omega += L[i][c] * L[j][c];
                out[pair++] = omega;
            }
        if (!strcmp(m->kind, "hier_lkj")) /* theta_j = diag(tau) L z_j */
            for (int g = 0; g < m->rows; g++)
                for (int i = 0; i < K; i++) {
                    double v = 0;
                    for (int c = 0; c <= i; c++) v += L[i][c] * q[k + g * K + c];
                    out[pair++] = out[i] * v;
                }
    } else {
        for (int j = 0; j < m->d; j++) out[j] = q[j];
    }
}

ag_status model_report(const double *position, void *user, double *reported) {
    model_constrain((const model *)user, position, reported);
    return AG_STATUS_OK;
}

void model_spec(model *m, bool fixed_graph, ag_model_spec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->struct_size = sizeof *spec;
    spec->dim = (size_t)m->dim;
    spec->log_density = model_density;
    spec->user = m;
    spec->fixed_graph = fixed_graph;
    spec->names = (const char *const *)m->coord_names;
    spec->n_reported = (size_t)m->n_out;
    spec->report = model_report;
    spec->reported_names = (const char *const *)m->names;
}

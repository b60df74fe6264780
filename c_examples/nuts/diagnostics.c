/*
 * diagnostics.c: rank-normalised split R-hat and bulk ESS (Vehtari,
 * Gelman, Simpson, Carpenter, Buerkner 2021, "Rank-normalization, folding,
 * and localization: an improved R-hat").
 *
 * Each chain is split in halves; all draws are replaced by the normal
 * scores of their pooled ranks, z = Phi^-1((r - 3/8) / (S + 1/4)) (average
 * ranks for ties). Bulk ESS is the ESS of the z's (autocorrelations with
 * Geyer's initial monotone sequence); R-hat is the larger of the split
 * R-hats of the z's and of the folded draws' z's (|x - median|).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nuts.h"

static const double *sort_base;
static int by_value(const void *a, const void *b) {
    double x = sort_base[*(const int *)a], y = sort_base[*(const int *)b];
    return (x > y) - (x < y);
}

/* Phi^-1(p) by bisection on erfc (80 halvings of [-40, 40]: exact to f64) */
static double norm_quantile(double p) {
    double lo = -40, hi = 40;
    for (int i = 0; i < 80; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* z-scores of the pooled ranks of x[0..S] */
static void rank_normalise(const double *x, int S, double *z) {
    int *idx = malloc(sizeof(int) * (size_t)S);
    for (int i = 0; i < S; i++) idx[i] = i;
    sort_base = x;
    qsort(idx, (size_t)S, sizeof(int), by_value);
    for (int i = 0; i < S;) {
        int j = i;
        while (j + 1 < S && x[idx[j + 1]] == x[idx[i]]) j++;
        double r = 0.5 * (i + j) + 1; /* average 1-based rank */
        double v = norm_quantile((r - 0.375) / (S + 0.25));
        for (int k = i; k <= j; k++) z[idx[k]] = v;
        i = j + 1;
    }
    free(idx);
}

/* copies the split chains (2m of n/2) of x into out, returns n/2 */
static int split(const double *x, int m, int n, double *out) {
    int h = n / 2;
    for (int c = 0; c < m; c++) {
        memcpy(out + (size_t)(2 * c) * h, x + (size_t)c * n, sizeof(double) * h);
        memcpy(out + (size_t)(2 * c + 1) * h, x + (size_t)c * n + (n - h), sizeof(double) * h);
    }
    return h;
}

static double rhat_plain(const double *x, int m, int n) {
    double W = 0, grand = 0, B = 0;
    double *means = malloc(sizeof(double) * m);
    for (int c = 0; c < m; c++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += x[c * n + i];
        means[c] = s / n;
        grand += means[c] / m;
        double v = 0;
        for (int i = 0; i < n; i++) v += (x[c * n + i] - means[c]) * (x[c * n + i] - means[c]);
        W += v / (n - 1) / m;
    }
    for (int c = 0; c < m; c++) B += (means[c] - grand) * (means[c] - grand) / (m - 1);
    free(means);
    double var_plus = (n - 1.0) / n * W + B;
    return sqrt(var_plus / W);
}

static double ess_plain(const double *x, int m, int n) {
    double *means = malloc(sizeof(double) * m);
    double mean_var = 0, grand = 0, B = 0;
    for (int c = 0; c < m; c++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += x[c * n + i];
        means[c] = s / n;
        grand += means[c] / m;
    }
    /* autocovariance of lag t averaged over chains (biased, / n) */
#define ACOV(t, out)                                                                           \
    do {                                                                                       \
        double acc_ = 0;                                                                       \
        for (int c_ = 0; c_ < m; c_++) {                                                       \
            const double *y_ = x + (size_t)c_ * n;                                             \
            double s_ = 0;                                                                     \
            for (int i_ = 0; i_ + (t) < n; i_++) s_ += (y_[i_] - means[c_]) * (y_[i_ + (t)] - means[c_]); \
            acc_ += s_ / n;                                                                    \
        }                                                                                      \
        (out) = acc_ / m;                                                                      \
    } while (0)
    double a0;
    ACOV(0, a0);
    mean_var = a0 * n / (n - 1.0);
    for (int c = 0; c < m; c++) B += (means[c] - grand) * (means[c] - grand) / (m - 1);
    double var_plus = mean_var * (n - 1.0) / n + B;
    double *rho = malloc(sizeof(double) * (size_t)(n + 2));
    double a1;
    ACOV(1, a1);
    rho[0] = 1;
    rho[1] = 1 - (mean_var - a1) / var_plus;
    int t = 0, len = 2;
    double even = rho[0], odd = rho[1];
    while (t < n - 5 && even + odd > 0) {
        t += 2;
        double ae, ao;
        ACOV(t, ae);
        ACOV(t + 1, ao);
        even = 1 - (mean_var - ae) / var_plus;
        odd = 1 - (mean_var - ao) / var_plus;
        if (even + odd >= 0) {
            rho[len++] = even;
            rho[len++] = odd;
        }
    }
#undef ACOV
    int max_t = len - 2;
    for (int k = 2; k <= max_t; k += 2) /* initial monotone sequence */
        if (rho[k] + rho[k + 1] > rho[k - 2] + rho[k - 1]) rho[k] = rho[k + 1] = 0.5 * (rho[k - 2] + rho[k - 1]);
    double tau = -1;
    for (int k = 0; k < len; k++) tau += 2 * rho[k];
    double S = (double)m * n;
    if (tau < 1 / log10(S)) tau = 1 / log10(S);
    free(rho);
    free(means);
    return S / tau;
}

double diag_ess_bulk(const double *x, int m, int n) {
    double *sp = malloc(sizeof(double) * (size_t)m * n), *z = malloc(sizeof(double) * (size_t)m * n);
    int h = split(x, m, n, sp);
    rank_normalise(sp, 2 * m * h, z);
    double e = ess_plain(z, 2 * m, h);
    free(sp);
    free(z);
    return e;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double diag_rhat(const double *x, int m, int n) {
    int S = m * n;
    double *sp = malloc(sizeof(double) * (size_t)S), *z = malloc(sizeof(double) * (size_t)S);
    int h = split(x, m, n, sp);
    int Sh = 2 * m * h;
    rank_normalise(sp, Sh, z);
    double bulk = rhat_plain(z, 2 * m, h);
    /* folded: |x - median| */
    double *sorted = malloc(sizeof(double) * (size_t)Sh);
    memcpy(sorted, sp, sizeof(double) * Sh);
    qsort(sorted, (size_t)Sh, sizeof(double), cmp_double);
    double med = Sh % 2 ? sorted[Sh / 2] : 0.5 * (sorted[Sh / 2 - 1] + sorted[Sh / 2]);
    for (int i = 0; i < Sh; i++) sp[i] = fabs(sp[i] - med);
    rank_normalise(sp, Sh, z);
    double tail = rhat_plain(z, 2 * m, h);
    free(sorted);
    free(sp);
    free(z);
    return bulk > tail ? bulk : tail;
}

/*
 * sampler.c: NUTS as Stan runs it, with its windowed warm-up.
 *
 * Transition: the trajectory doubles forwards or backwards at random up to
 * max_depth; within a subtree the next state is drawn by multinomial
 * sampling (weights e^{-H}), and at the top level by biased progressive
 * sampling (a new subtree replaces the sample with probability
 * min(1, w_new / w_old)). A subtree stops on the generalised U-turn
 * criterion, p#_minus . rho > 0 and p#_plus . rho > 0 with p# = M^-1 p and
 * rho the summed momenta, checked over each merged tree and, as Stan added,
 * across the two subtrees (the first subtree extended by the second's first
 * momentum, and the reverse). A leapfrog step whose energy error exceeds
 * 1000 is a divergence and ends the transition.
 *
 * Warm-up (Stan's defaults): dual averaging of log step size towards an
 * acceptance statistic of delta = 0.8 (gamma 0.05, kappa 0.75, t0 10, mu =
 * log(10 eps)); a fast window of 75 iterations, slow windows of 25, 50,
 * 100, ... (the last stretched to the terminal window) whose position
 * variances, regularised as (n / (n + 5)) var + 1e-3 (5 / (n + 5)), become
 * the diagonal inverse metric, after which the step size is re-initialised
 * and the dual averaging restarts; a terminal window of 50; the final step
 * size is exp(x_bar).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nuts.h"

void nuts_default_config(nuts_config *c) {
    c->chains = 4;
    c->warmup = 1000;
    c->draws = 1000;
    c->max_depth = 10;
    c->delta = 0.8;
    c->gamma = 0.05;
    c->kappa = 0.75;
    c->t0 = 10;
    c->init_buffer = 75;
    c->term_buffer = 50;
    c->base_window = 25;
    c->seed = 1234;
    c->quiet = false;
}

typedef struct { double *q, *p, *g, lp; } point;

/* workspace of one tree depth */
typedef struct {
    point prop_final;
    double *p_init_end, *ps_init_end, *rho_init, *p_final_beg, *ps_final_beg, *rho_final, *rho_ext;
} level;

typedef struct {
    model *m;
    int n;
    double *minv;    /* diagonal inverse metric */
    double eps;
    rng_t rng;
    point z;         /* current state of the integrator */
    bool divergent;
    int n_leapfrog;
    double sum_metro;
    level *lv;       /* [max_depth + 1] */
} sampler;

static double *vec(int n) { return calloc((size_t)n, sizeof(double)); }
static void point_init(point *z, int n) { z->q = vec(n); z->p = vec(n); z->g = vec(n); z->lp = 0; }
static void point_free(point *z) { free(z->q); free(z->p); free(z->g); }
static void point_copy(point *dst, const point *src, int n) {
    memcpy(dst->q, src->q, sizeof(double) * n);
    memcpy(dst->p, src->p, sizeof(double) * n);
    memcpy(dst->g, src->g, sizeof(double) * n);
    dst->lp = src->lp;
}

static double log_sum_exp(double a, double b) {
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    double m = a > b ? a : b;
    return m + log(exp(a - m) + exp(b - m));
}

static double hamiltonian(const sampler *s, const point *z) {
    double k = 0;
    for (int i = 0; i < s->n; i++) k += z->p[i] * z->p[i] * s->minv[i];
    return -z->lp + 0.5 * k;
}

static void sample_momentum(sampler *s, point *z) {
    for (int i = 0; i < s->n; i++) z->p[i] = rng_normal(&s->rng) / sqrt(s->minv[i]);
}

static void leapfrog(sampler *s, point *z, double eps) {
    int n = s->n;
    for (int i = 0; i < n; i++) z->p[i] += 0.5 * eps * z->g[i];
    for (int i = 0; i < n; i++) z->q[i] += eps * s->minv[i] * z->p[i];
    z->lp = model_logp_grad(s->m, z->q, z->g);
    for (int i = 0; i < n; i++) z->p[i] += 0.5 * eps * z->g[i];
}

static bool criterion(const sampler *s, const double *ps_minus, const double *ps_plus, const double *rho) {
    double a = 0, b = 0;
    for (int i = 0; i < s->n; i++) {
        a += ps_plus[i] * rho[i];
        b += ps_minus[i] * rho[i];
    }
    return a > 0 && b > 0;
}

static void sharp(const sampler *s, const double *p, double *out) {
    for (int i = 0; i < s->n; i++) out[i] = s->minv[i] * p[i];
}

static void add_to(int n, double *acc, const double *v) { for (int i = 0; i < n; i++) acc[i] += v[i]; }
static void sum2(int n, double *out, const double *a, const double *b) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* Extends the trajectory from s->z by 2^depth leapfrog steps in direction
 * sign; z_propose receives the subtree's multinomial sample; p#/p at both
 * ends and the summed momentum rho (added to) are returned. */
static bool build_tree(sampler *s, int depth, point *z_propose, double *ps_beg, double *ps_end, double *rho,
                       double *p_beg, double *p_end, double H0, double sign, double *log_sum_weight) {
    int n = s->n;
    if (depth == 0) {
        leapfrog(s, &s->z, sign * s->eps);
        s->n_leapfrog++;
        double h = hamiltonian(s, &s->z);
        if (isnan(h)) h = INFINITY;
        if (h - H0 > 1000) s->divergent = true;
        *log_sum_weight = log_sum_exp(*log_sum_weight, H0 - h);
        s->sum_metro += H0 - h > 0 ? 1 : exp(H0 - h);
        point_copy(z_propose, &s->z, n);
        sharp(s, s->z.p, ps_beg);
        memcpy(ps_end, ps_beg, sizeof(double) * n);
        add_to(n, rho, s->z.p);
        memcpy(p_beg, s->z.p, sizeof(double) * n);
        memcpy(p_end, p_beg, sizeof(double) * n);
        return !s->divergent;
    }
    level *L = &s->lv[depth];
    /* the first half */
    double lsw_init = -INFINITY;
    memset(L->rho_init, 0, sizeof(double) * n);
    if (!build_tree(s, depth - 1, z_propose, ps_beg, L->ps_init_end, L->rho_init, p_beg, L->p_init_end, H0, sign,
                    &lsw_init))
        return false;
    /* the second half */
    double lsw_final = -INFINITY;
    memset(L->rho_final, 0, sizeof(double) * n);
    if (!build_tree(s, depth - 1, &L->prop_final, L->ps_final_beg, ps_end, L->rho_final, L->p_final_beg, p_end, H0,
                    sign, &lsw_final))
        return false;
    /* multinomial sample from the merged subtree */
    double lsw_sub = log_sum_exp(lsw_init, lsw_final);
    *log_sum_weight = log_sum_exp(*log_sum_weight, lsw_sub);
    if (lsw_final > lsw_sub || rng_uniform(&s->rng) < exp(lsw_final - lsw_sub))
        point_copy(z_propose, &L->prop_final, n);
    sum2(n, L->rho_ext, L->rho_init, L->rho_final); /* rho of the subtree */
    add_to(n, rho, L->rho_ext);
    bool persist = criterion(s, ps_beg, ps_end, L->rho_ext);
    sum2(n, L->rho_ext, L->rho_init, L->p_final_beg);
    persist = persist && criterion(s, ps_beg, L->ps_final_beg, L->rho_ext);
    sum2(n, L->rho_ext, L->rho_final, L->p_init_end);
    persist = persist && criterion(s, L->ps_init_end, ps_end, L->rho_ext);
    return persist;
}

typedef struct { double accept_stat; int depth, n_leapfrog; bool divergent; } transition_info;

/* The top level of one NUTS transition from *cur (updated in place). */
static transition_info transition(sampler *s, point *cur, int max_depth, point *fwd, point *bck, point *sample,
                                  point *propose, double **tmp) {
    int n = s->n;
    double *ps_fb = tmp[0], *ps_ff = tmp[1], *ps_bf = tmp[2], *ps_bb = tmp[3];
    double *p_fb = tmp[4], *p_ff = tmp[5], *p_bf = tmp[6], *p_bb = tmp[7];
    double *rho = tmp[8], *rho_f = tmp[9], *rho_b = tmp[10], *rho_ext = tmp[11];
    sample_momentum(s, cur);
    point_copy(fwd, cur, n);
    point_copy(bck, cur, n);
    point_copy(sample, cur, n);
    sharp(s, cur->p, ps_fb);
    memcpy(ps_ff, ps_fb, sizeof(double) * n);
    memcpy(ps_bf, ps_fb, sizeof(double) * n);
    memcpy(ps_bb, ps_fb, sizeof(double) * n);
    memcpy(p_fb, cur->p, sizeof(double) * n);
    memcpy(p_ff, cur->p, sizeof(double) * n);
    memcpy(p_bf, cur->p, sizeof(double) * n);
    memcpy(p_bb, cur->p, sizeof(double) * n);
    memcpy(rho, cur->p, sizeof(double) * n);
    double lsw = 0, H0 = hamiltonian(s, cur);
    s->divergent = false;
    s->n_leapfrog = 0;
    s->sum_metro = 0;
    int depth = 0;
    while (depth < max_depth) {
        memset(rho_f, 0, sizeof(double) * n);
        memset(rho_b, 0, sizeof(double) * n);
        double lsw_sub = -INFINITY;
        bool valid;
        if (rng_uniform(&s->rng) > 0.5) {
            /* forwards: the old tree is the backward part */
            memcpy(rho_b, rho, sizeof(double) * n);
            memcpy(p_bf, p_fb, sizeof(double) * n);
            memcpy(ps_bf, ps_fb, sizeof(double) * n);
            point_copy(&s->z, fwd, n);
            valid = build_tree(s, depth, propose, ps_fb, ps_ff, rho_f, p_fb, p_ff, H0, 1, &lsw_sub);
            point_copy(fwd, &s->z, n);
        } else {
            memcpy(rho_f, rho, sizeof(double) * n);
            memcpy(p_fb, p_bf, sizeof(double) * n);
            memcpy(ps_fb, ps_bf, sizeof(double) * n);
            point_copy(&s->z, bck, n);
            valid = build_tree(s, depth, propose, ps_bf, ps_bb, rho_b, p_bf, p_bb, H0, -1, &lsw_sub);
            point_copy(bck, &s->z, n);
        }
        if (!valid) break;
        depth++;
        /* biased progressive sampling */
        if (lsw_sub > lsw || rng_uniform(&s->rng) < exp(lsw_sub - lsw)) point_copy(sample, propose, n);
        lsw = log_sum_exp(lsw, lsw_sub);
        sum2(n, rho, rho_b, rho_f);
        bool persist = criterion(s, ps_bb, ps_ff, rho);
        sum2(n, rho_ext, rho_b, p_fb);
        persist = persist && criterion(s, ps_bb, ps_fb, rho_ext);
        sum2(n, rho_ext, rho_f, p_bf);
        persist = persist && criterion(s, ps_bf, ps_ff, rho_ext);
        if (!persist) break;
    }
    point_copy(cur, sample, n);
    transition_info t = {s->n_leapfrog ? s->sum_metro / s->n_leapfrog : 0, depth, s->n_leapfrog, s->divergent};
    return t;
}

/* Stan's step-size heuristic: double or halve eps until one leapfrog step's
 * acceptance crosses 0.8. */
static void init_stepsize(sampler *s, point *cur, point *tmp) {
    int n = s->n;
    point_copy(tmp, cur, n);
    sample_momentum(s, tmp);
    double H0 = hamiltonian(s, tmp);
    leapfrog(s, tmp, s->eps);
    double h = hamiltonian(s, tmp);
    if (isnan(h)) h = INFINITY;
    int direction = H0 - h > log(0.8) ? 1 : -1;
    for (int it = 0; it < 200; it++) {
        point_copy(tmp, cur, n);
        sample_momentum(s, tmp);
        H0 = hamiltonian(s, tmp);
        leapfrog(s, tmp, s->eps);
        h = hamiltonian(s, tmp);
        if (isnan(h)) h = INFINITY;
        double dH = H0 - h;
        if (direction == 1 && !(dH > log(0.8))) break;
        if (direction == -1 && !(dH < log(0.8))) break;
        s->eps = direction == 1 ? 2 * s->eps : 0.5 * s->eps;
        if (s->eps > 1e7 || s->eps == 0) {
            fprintf(stderr, "nuts: %s: the step size heuristic failed (posterior improper?)\n", s->m->name);
            exit(1);
        }
    }
}

typedef struct { double mu, s_bar, x_bar; int counter; } dual_avg;

static void da_restart(dual_avg *d, double eps) { d->mu = log(10 * eps); d->s_bar = d->x_bar = 0; d->counter = 0; }

static double da_learn(dual_avg *d, const nuts_config *c, double accept) {
    d->counter++;
    if (accept > 1) accept = 1;
    double eta = 1.0 / (d->counter + c->t0);
    d->s_bar = (1 - eta) * d->s_bar + eta * (c->delta - accept);
    double x = d->mu - d->s_bar * sqrt((double)d->counter) / c->gamma;
    double x_eta = pow((double)d->counter, -c->kappa);
    d->x_bar = (1 - x_eta) * d->x_bar + x_eta * x;
    return exp(x);
}

void nuts_run_chain(model *m, const nuts_config *c, int chain, chain_out *out) {
    int n = m->dim;
    sampler s = {0};
    s.m = m;
    s.n = n;
    s.minv = vec(n);
    for (int i = 0; i < n; i++) s.minv[i] = 1;
    s.eps = 1;
    rng_seed(&s.rng, c->seed * 1000003ull + (uint64_t)chain);
    point_init(&s.z, n);
    s.lv = calloc((size_t)c->max_depth + 1, sizeof(level));
    for (int d = 0; d <= c->max_depth; d++) {
        level *L = &s.lv[d];
        point_init(&L->prop_final, n);
        L->p_init_end = vec(n); L->ps_init_end = vec(n); L->rho_init = vec(n);
        L->p_final_beg = vec(n); L->ps_final_beg = vec(n); L->rho_final = vec(n); L->rho_ext = vec(n);
    }
    point cur, fwd, bck, sample, propose;
    point_init(&cur, n); point_init(&fwd, n); point_init(&bck, n);
    point_init(&sample, n); point_init(&propose, n);
    double *tmp[12];
    for (int i = 0; i < 12; i++) tmp[i] = vec(n);
    /* initial point: uniform(-2, 2) on the unconstrained scale, as Stan */
    for (int attempt = 0;; attempt++) {
        for (int i = 0; i < n; i++) cur.q[i] = 4 * rng_uniform(&s.rng) - 2;
        cur.lp = model_logp_grad(m, cur.q, cur.g);
        if (isfinite(cur.lp)) break;
        if (attempt == 100) {
            fprintf(stderr, "nuts: %s: no finite initial point in 100 tries\n", m->name);
            exit(1);
        }
    }
    clock_t t_start = clock();
    init_stepsize(&s, &cur, &propose);
    dual_avg da;
    da_restart(&da, s.eps);
    /* windowed adaptation */
    int W = c->warmup, window_size = c->base_window, next_window = c->init_buffer + c->base_window - 1;
    double *wmean = vec(n), *wm2 = vec(n);
    int wcount = 0;
    int total = W + c->draws;
    memset(out, 0, sizeof *out);
    out->values = malloc(sizeof(double) * (size_t)c->draws * (size_t)m->n_out);
    out->lp = malloc(sizeof(double) * (size_t)c->draws);
    out->accept_stat = malloc(sizeof(double) * (size_t)c->draws);
    out->treedepth = malloc(sizeof(int) * (size_t)c->draws);
    out->n_leapfrog = malloc(sizeof(int) * (size_t)c->draws);
    out->divergent = malloc(sizeof(bool) * (size_t)c->draws);
    for (int it = 0; it < total; it++) {
        transition_info t = transition(&s, &cur, c->max_depth, &fwd, &bck, &sample, &propose, tmp);
        if (it < W) {
            s.eps = da_learn(&da, c, t.accept_stat);
            bool in_window = it >= c->init_buffer && it < W - c->term_buffer;
            if (in_window) { /* Welford */
                wcount++;
                for (int i = 0; i < n; i++) {
                    double d = cur.q[i] - wmean[i];
                    wmean[i] += d / wcount;
                    wm2[i] += d * (cur.q[i] - wmean[i]);
                }
            }
            if (it == next_window && in_window) {
                /* next window: doubled, stretched to the terminal buffer if
                 * the one after it would not fit */
                int end = W - c->term_buffer - 1;
                if (next_window != end) {
                    window_size *= 2;
                    next_window = it + window_size;
                    if (next_window != end && next_window + 2 * window_size >= W - c->term_buffer)
                        next_window = end;
                }
                double w = (double)wcount;
                for (int i = 0; i < n; i++) {
                    double var = wm2[i] / (w - 1);
                    s.minv[i] = (w / (w + 5.0)) * var + 1e-3 * (5.0 / (w + 5.0));
                    wmean[i] = wm2[i] = 0;
                }
                wcount = 0;
                init_stepsize(&s, &cur, &propose);
                da_restart(&da, s.eps);
            }
            if (it == W - 1) s.eps = exp(da.x_bar);
            if (!c->quiet && (it + 1) % 500 == 0)
                fprintf(stderr, "  chain %d: warm-up %d/%d, step size %.3g\n", chain + 1, it + 1, W, s.eps);
        } else {
            int k = it - W;
            model_constrain(m, cur.q, out->values + (size_t)k * m->n_out);
            out->lp[k] = cur.lp;
            out->accept_stat[k] = t.accept_stat;
            out->treedepth[k] = t.depth;
            out->n_leapfrog[k] = t.n_leapfrog;
            out->divergent[k] = t.divergent;
            out->divergences += t.divergent;
        }
    }
    out->seconds = (double)(clock() - t_start) / CLOCKS_PER_SEC;
    out->step_size = s.eps;
    out->inv_metric = s.minv;
    free(wmean); free(wm2);
    for (int i = 0; i < 12; i++) free(tmp[i]);
    point_free(&cur); point_free(&fwd); point_free(&bck); point_free(&sample); point_free(&propose);
    point_free(&s.z);
    for (int d = 0; d <= c->max_depth; d++) {
        level *L = &s.lv[d];
        point_free(&L->prop_final);
        free(L->p_init_end); free(L->ps_init_end); free(L->rho_init);
        free(L->p_final_beg); free(L->ps_final_beg); free(L->rho_final); free(L->rho_ext);
    }
    free(s.lv);
}

void chain_out_free(chain_out *o) {
    free(o->values); free(o->lp); free(o->accept_stat); free(o->treedepth); free(o->n_leapfrog);
    free(o->divergent); free(o->inv_metric);
}

/*
 * main.c: build/nuts, the command line (see README.md here).
 *
 *   nuts MODEL.data [--chains 4] [--warmup 1000] [--draws 1000] [--seed 1234]
 *        [--max-depth 10] [--csv FILE] [--check REF] [--quiet] [--no-capture]
 *   nuts MODEL.data --grad-bench N     time N gradient evaluations
 *   nuts MODEL.data --soak N           N gradient evaluations, RSS and arena flat
 *
 * The first gradient evaluation is captured and every later one replays it
 * (ag_replay, bit-identical to building the graph each time); --no-capture
 * builds the graph eagerly at every evaluation.
 *
 * --check REF compares with a posteriordb reference summary (quantity, mean,
 * sd, mcse_mean): each mean within 4 sqrt(mcse^2 + mcse_ref^2) + 0.05 sd_ref,
 * each sd within 10%; exit status 1 if any fails, or on R-hat > 1.05.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nuts.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return resident * 4; /* 4 KiB pages */
}

static int usage(void) {
    fprintf(stderr,
            "usage: nuts MODEL.data [--chains N] [--warmup N] [--draws N] [--seed N] [--max-depth N]\n"
            "            [--csv FILE] [--check REF] [--quiet] [--no-capture] | --grad-bench N | --soak N\n");
    return 2;
}

static int grad_bench(model *m, long n) {
    double *q = calloc((size_t)m->dim, sizeof(double)), *g = calloc((size_t)m->dim, sizeof(double));
    for (int i = 0; i < m->dim; i++) q[i] = 0.1 * (i % 3);
    for (int i = 0; i < 100; i++) model_logp_grad(m, q, g);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++) model_logp_grad(m, q, g);
        double us = (now() - t0) / n * 1e6;
        if (us < best) best = us;
    }
    printf("%s: %.2f us per log-density gradient (best of 5 x %ld, %d parameters, %d data rows)\n", m->name,
           best, n, m->dim, m->rows);
    free(q);
    free(g);
    return 0;
}

/* n gradient evaluations at moving positions; fails if RSS or the arena's
 * high-water mark grows after the first 1% */
static int soak(model *m, long n) {
    double *q = calloc((size_t)m->dim, sizeof(double)), *g = calloc((size_t)m->dim, sizeof(double));
    rng_t r;
    rng_seed(&r, 7);
    long warm = n / 100 > 1000 ? n / 100 : 1000;
    long rss0 = 0;
    ag_memory_stats_t f0 = {0}, f1;
    for (long i = 0; i < n + warm; i++) {
        for (int k = 0; k < m->dim; k++) q[k] = 0.5 * rng_normal(&r);
        model_logp_grad(m, q, g);
        if (i == warm - 1) {
            rss0 = rss_kib();
            nuts_check(m->ctx, ag_memory_stats(m->ctx, &f0), "ag_memory_stats");
        }
    }
    long rss1 = rss_kib();
    nuts_check(m->ctx, ag_memory_stats(m->ctx, &f1), "ag_memory_stats");
    printf("%s: %ld evaluations after %ld warm-up: RSS %ld -> %ld KiB, arena reserved %llu -> %llu bytes, "
           "high water %llu -> %llu, tape capacity %llu -> %llu\n",
           m->name, n, warm, rss0, rss1, (unsigned long long)f0.arena_reserved_bytes,
           (unsigned long long)f1.arena_reserved_bytes, (unsigned long long)f0.arena_high_water_bytes,
           (unsigned long long)f1.arena_high_water_bytes, (unsigned long long)f0.tape_capacity,
           (unsigned long long)f1.tape_capacity);
    free(q);
    free(g);
    bool flat = rss1 <= rss0 + 256 && f1.arena_reserved_bytes == f0.arena_reserved_bytes &&
                f1.arena_high_water_bytes == f0.arena_high_water_bytes && f1.tape_capacity == f0.tape_capacity;
    if (!flat) printf("soak: FAILED: memory grew\n");
    return flat ? 0 : 1;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    nuts_config c;
    nuts_default_config(&c);
    const char *csv = NULL, *check = NULL;
    long bench = 0, soak_n = 0;
    bool capture = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) { c.quiet = true; continue; }
        if (!strcmp(a, "--no-capture")) { capture = false; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--chains")) c.chains = atoi(v);
        else if (!strcmp(a, "--warmup")) c.warmup = atoi(v);
        else if (!strcmp(a, "--draws")) c.draws = atoi(v);
        else if (!strcmp(a, "--seed")) c.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-depth")) c.max_depth = atoi(v);
        else if (!strcmp(a, "--csv")) csv = v;
        else if (!strcmp(a, "--check")) check = v;
        else if (!strcmp(a, "--grad-bench")) bench = atol(v);
        else if (!strcmp(a, "--soak")) soak_n = atol(v);
        else return usage();
    }
    if (c.chains < 2 || c.draws < 20 || c.warmup < 150 || c.max_depth < 1 || c.max_depth > 20) {
        fprintf(stderr, "nuts: need --chains >= 2, --draws >= 20, --warmup >= 150, --max-depth in 1..20\n");
        return 2;
    }
    model m;
    model_load(&m, argv[1]);
    m.capture = capture;
    if (bench) return grad_bench(&m, bench);
    if (soak_n) return soak(&m, soak_n);

    int K = m.n_out, M = c.chains, N = c.draws;
    chain_out *ch = calloc((size_t)M, sizeof(chain_out));
    double t0 = now();
    for (int k = 0; k < M; k++) nuts_run_chain(&m, &c, k, &ch[k]);
    double secs = now() - t0;

    printf("%s: NUTS, %d chains x (%d warm-up + %d draws), seed %llu, %.1f s, %llu gradients (%.1f us each)\n",
           m.name, M, c.warmup, N, (unsigned long long)c.seed, secs, (unsigned long long)m.evals,
           secs / (double)m.evals * 1e6);
    int div = 0;
    for (int k = 0; k < M; k++) {
        double acc = 0, leap = 0;
        int maxd = 0;
        for (int i = 0; i < N; i++) {
            acc += ch[k].accept_stat[i];
            leap += ch[k].n_leapfrog[i];
            if (ch[k].treedepth[i] >= c.max_depth) maxd++;
        }
        div += ch[k].divergences;
        printf("  chain %d: step size %.4g, mean accept_stat %.3f, mean leapfrog steps %.1f, divergences %d, "
               "at max depth %d, %.1f s\n",
               k + 1, ch[k].step_size, acc / N, leap / N, ch[k].divergences, maxd, ch[k].seconds);
    }
    printf("  divergences after warm-up: %d of %d draws\n\n", div, M * N);

    /* summary */
    double *x = malloc(sizeof(double) * (size_t)M * N);
    double *mean = malloc(sizeof(double) * K), *sd = malloc(sizeof(double) * K), *mcse = malloc(sizeof(double) * K),
           *rhat = malloc(sizeof(double) * K);
    bool rhat_bad = false;
    printf("%-12s %11s %11s %11s %11s %11s %11s %8s %6s\n", "quantity", "mean", "sd", "mcse", "5%", "50%", "95%",
           "ess_bulk", "rhat");
    for (int q = 0; q < K; q++) {
        double s = 0, ss = 0;
        for (int k = 0; k < M; k++)
            for (int i = 0; i < N; i++) x[k * N + i] = ch[k].values[(size_t)i * K + q];
        for (int i = 0; i < M * N; i++) s += x[i];
        mean[q] = s / (M * N);
        for (int i = 0; i < M * N; i++) ss += (x[i] - mean[q]) * (x[i] - mean[q]);
        sd[q] = sqrt(ss / (M * N - 1));
        double ess = diag_ess_bulk(x, M, N);
        rhat[q] = diag_rhat(x, M, N);
        mcse[q] = sd[q] / sqrt(ess);
        if (rhat[q] > 1.05) rhat_bad = true;
        qsort(x, (size_t)M * N, sizeof(double), cmp_d);
        int S = M * N;
        printf("%-12s %11.4g %11.4g %11.3g %11.4g %11.4g %11.4g %8.0f %6.3f\n", m.names[q], mean[q], sd[q], mcse[q],
               x[(int)(0.05 * (S - 1))], x[(int)(0.5 * (S - 1))], x[(int)(0.95 * (S - 1))], ess, rhat[q]);
    }
    int fails = 0;
    if (check) {
        FILE *f = fopen(check, "r");
        if (!f) {
            fprintf(stderr, "nuts: cannot open %s\n", check);
            return 1;
        }
        char line[512];
        if (!fgets(line, sizeof line, f)) line[0] = 0; /* header */
        printf("\ncheck against %s: |mean - ref| <= 4 sqrt(mcse^2 + mcse_ref^2) + 0.05 sd_ref, |sd/sd_ref - 1| <= 0.1\n",
               check);
        printf("%-12s %11s %11s %11s %11s %11s %6s\n", "quantity", "ref mean", "ours", "tolerance", "ref sd", "our sd",
               "pass");
        int seen = 0;
        while (fgets(line, sizeof line, f)) {
            char name[64];
            double rm, rs, rmc;
            if (sscanf(line, "%63[^,],%lf,%lf,%lf", name, &rm, &rs, &rmc) != 4) continue;
            int q = -1;
            for (int k = 0; k < K; k++)
                if (!strcmp(m.names[k], name)) q = k;
            if (q < 0) {
                printf("%-12s not in the model\n", name);
                fails++;
                continue;
            }
            seen++;
            double tol = 4 * sqrt(mcse[q] * mcse[q] + rmc * rmc) + 0.05 * rs;
            bool ok = fabs(mean[q] - rm) <= tol && fabs(sd[q] / rs - 1) <= 0.1;
            fails += !ok;
            printf("%-12s %11.4g %11.4g %11.3g %11.4g %11.4g %6s\n", name, rm, mean[q], tol, rs, sd[q],
                   ok ? "yes" : "NO");
        }
        fclose(f);
        if (seen != K) {
            printf("reference covers %d of %d quantities\n", seen, K);
            fails++;
        }
        if (rhat_bad) {
            printf("an R-hat is above 1.05\n");
            fails++;
        }
        printf("%s: %s\n", m.name, fails ? "CHECK FAILED" : "check passed");
    }
    if (csv) {
        FILE *f = fopen(csv, "w");
        if (!f) {
            fprintf(stderr, "nuts: cannot write %s\n", csv);
            return 1;
        }
        fprintf(f, "chain,draw,lp__,accept_stat__,stepsize__,treedepth__,n_leapfrog__,divergent__");
        for (int q = 0; q < K; q++) fprintf(f, ",%s", m.names[q]);
        fprintf(f, "\n");
        for (int k = 0; k < M; k++)
            for (int i = 0; i < N; i++) {
                fprintf(f, "%d,%d,%.9g,%.4f,%.6g,%d,%d,%d", k + 1, i + 1, ch[k].lp[i], ch[k].accept_stat[i],
                        ch[k].step_size, ch[k].treedepth[i], ch[k].n_leapfrog[i], ch[k].divergent[i]);
                for (int q = 0; q < K; q++) fprintf(f, ",%.9g", ch[k].values[(size_t)i * K + q]);
                fprintf(f, "\n");
            }
        fclose(f);
        printf("draws written to %s\n", csv);
    }
    for (int k = 0; k < M; k++) chain_out_free(&ch[k]);
    free(ch); free(x); free(mean); free(sd); free(mcse); free(rhat);
    model_free(&m);
    return fails ? 1 : 0;
}

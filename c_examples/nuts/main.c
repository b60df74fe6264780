/*
 * main.c: build/nuts, the command line (see README.md here).
 *
 *   nuts MODEL.data [--chains 4] [--warmup 1000] [--draws 1000] [--seed 1234]
 *        [--max-depth 10] [--csv FILE] [--check REF] [--quiet] [--progress]
 *        [--sequential] [--no-capture]
 *   nuts MODEL.data --grad-bench N     time N gradient evaluations
 *   nuts MODEL.data --soak N           N gradient evaluations, RSS and arena flat
 *
 * The model's density (models.c) is sampled by the library: ag_sampler_new
 * then ag_nuts_run, the chains in parallel unless --sequential (the same
 * draws either way). The first gradient evaluation of each chain is
 * captured and replayed after (fixed_graph); --no-capture builds the graph
 * at every evaluation, the same draws bit for bit. The model's report map
 * (model_report) gives each draw's constrained quantities; the summary and
 * the CSV are theirs, ESS and R-hat included (ag_draws_summary_reported).
 *
 * Ctrl-C (SIGINT) asks the run to stop (ag_sampler_cancel, from the signal
 * handler: the library installs none); the draws made so far are then
 * summarised and written as usual, and the exit status is 130.
 *
 * --check REF compares with a posteriordb reference summary (quantity, mean,
 * sd, mcse_mean): each mean within 4 sqrt(mcse^2 + mcse_ref^2) + 0.05 sd_ref,
 * each sd within 10%; exit status 1 if any fails, or on R-hat > 1.05.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* sigaction, clock_gettime under -std=c11 */
#endif
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nuts.h"

#define SCALL_PROG "nuts"

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
            "            [--csv FILE] [--check REF] [--quiet] [--progress] [--sequential] [--no-capture]\n"
            "            | --grad-bench N | --soak N\n");
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

/* The sampler a SIGINT cancels: set before the handler is installed,
 * cleared after it is removed. */
static ag_sampler *volatile running_sampler;

static void on_sigint(int sig) {
    (void)sig;
    ag_sampler_cancel(running_sampler); /* one atomic store: async-signal-safe */
}

/* --progress: a line on stderr each time a chain passes another 10% of its
 * iterations (called from the chains' threads; stdio locks the stream). */
static void progress(void *user, uint32_t chain, uint32_t iteration, uint32_t total) {
    uint32_t warmup = *(const uint32_t *)user;
    if (iteration * 10ull / total == (iteration - 1) * 10ull / total) return;
    fprintf(stderr, "  chain %u: %3u%% (iteration %u of %u, %s)\n", chain + 1,
            (unsigned)(iteration * 100ull / total), iteration, total, iteration <= warmup ? "warm-up" : "sampling");
}

/* --check: the reference summary against ours; returns the failures */
static int check_ref(const model *m, const char *path, const ag_summary_row *qs, bool rhat_bad) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "nuts: cannot open %s\n", path);
        return 1;
    }
    int K = m->n_out, fails = 0, seen = 0;
    char line[512];
    if (!fgets(line, sizeof line, f)) line[0] = 0; /* header */
    printf("\ncheck against %s: |mean - ref| <= 4 sqrt(mcse^2 + mcse_ref^2) + 0.05 sd_ref, |sd/sd_ref - 1| <= 0.1\n",
           path);
    printf("%-12s %11s %11s %11s %11s %11s %6s\n", "quantity", "ref mean", "ours", "tolerance", "ref sd", "our sd",
           "pass");
    while (fgets(line, sizeof line, f)) {
        char name[64];
        double rm, rs, rmc;
        if (sscanf(line, "%63[^,],%lf,%lf,%lf", name, &rm, &rs, &rmc) != 4) continue;
        int q = -1;
        for (int k = 0; k < K; k++)
            if (!strcmp(m->names[k], name)) q = k;
        if (q < 0) {
            printf("%-12s not in the model\n", name);
            fails++;
            continue;
        }
        seen++;
        double tol = 4 * sqrt(qs[q].mcse_mean * qs[q].mcse_mean + rmc * rmc) + 0.05 * rs;
        bool ok = fabs(qs[q].mean - rm) <= tol && fabs(qs[q].sd / rs - 1) <= 0.1;
        fails += !ok;
        printf("%-12s %11.4g %11.4g %11.3g %11.4g %11.4g %6s\n", name, rm, qs[q].mean, tol, rs, qs[q].sd,
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
    printf("%s: %s\n", m->name, fails ? "CHECK FAILED" : "check passed");
    return fails;
}

static int write_csv(const model *m, const char *path, const ag_chain_draws *ch, int chains, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "nuts: cannot write %s\n", path);
        return 1;
    }
    int K = m->n_out;
    fprintf(f, "chain,draw,lp__,accept_stat__,stepsize__,treedepth__,n_leapfrog__,divergent__");
    for (int q = 0; q < K; q++) fprintf(f, ",%s", m->names[q]);
    fprintf(f, "\n");
    for (int c = 0; c < chains; c++)
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "%d,%zu,%.9g,%.4f,%.6g,%u,%u,%d", c + 1, i + 1, ch[c].lp[i], ch[c].accept_stat[i],
                    ch[c].step_size, ch[c].tree_depth[i], ch[c].n_leapfrog[i], ch[c].divergent[i]);
            for (int q = 0; q < K; q++) fprintf(f, ",%.9g", ch[c].reported[i * (size_t)K + (size_t)q]);
            fprintf(f, "\n");
        }
    fclose(f);
    printf("draws written to %s\n", path);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    ag_nuts_config c;
    SCALL(ag_nuts_config_default(&c));
    const char *csv = NULL, *check = NULL;
    long bench = 0, soak_n = 0;
    bool capture = true, show_progress = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) continue; /* nothing is printed while sampling unless --progress */
        if (!strcmp(a, "--progress")) { show_progress = true; continue; }
        if (!strcmp(a, "--sequential")) { c.parallel = false; continue; }
        if (!strcmp(a, "--no-capture")) { capture = false; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--chains")) c.chains = (uint32_t)atoi(v);
        else if (!strcmp(a, "--warmup")) c.warmup = (uint32_t)atoi(v);
        else if (!strcmp(a, "--draws")) c.draws = (uint32_t)atoi(v);
        else if (!strcmp(a, "--seed")) c.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-depth")) c.max_depth = (uint32_t)atoi(v);
        else if (!strcmp(a, "--csv")) csv = v;
        else if (!strcmp(a, "--check")) check = v;
        else if (!strcmp(a, "--grad-bench")) bench = atol(v);
        else if (!strcmp(a, "--soak")) soak_n = atol(v);
        else return usage();
    }
    if (c.chains < 2 || c.chains > 1024 || c.draws < 20 || c.draws > 10000000 || c.warmup < 150 ||
        c.warmup > 10000000 || c.max_depth < 1 || c.max_depth > 20) {
        fprintf(stderr, "nuts: need --chains in 2..1024, --draws >= 20, --warmup >= 150, --max-depth in 1..20\n");
        return 2;
    }
    model m;
    model_open(&m, argv[1]);
    m.capture = capture;
    if (bench) return grad_bench(&m, bench);
    if (soak_n) return soak(&m, soak_n);

    ag_model_spec spec;
    model_spec(&m, capture, &spec);
    ag_sampler *s;
    SCALL(ag_sampler_new(&spec, &s));
    uint32_t warmup = c.warmup;
    if (show_progress) {
        c.progress = progress;
        c.progress_user = &warmup;
    }

    running_sampler = s;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    ag_draws *draws;
    double t0 = now();
    ag_status st = ag_nuts_run(s, &c, &draws);
    double secs = now() - t0;
    sigaction(SIGINT, &old_sa, NULL);
    running_sampler = NULL;
    if (st != AG_STATUS_OK) sampler_fail(SCALL_PROG, "ag_nuts_run", st);

    ag_draws_info_t info;
    SCALL(ag_draws_info(draws, &info));
    int K = m.n_out, M = (int)info.chains;
    size_t N = info.draws;
    ag_chain_draws *ch = calloc((size_t)M, sizeof *ch);
    unsigned long long leapfrogs = 0;
    for (int k = 0; k < M; k++) {
        SCALL(ag_draws_chain(draws, (size_t)k, &ch[k]));
        for (size_t i = 0; i < N; i++) leapfrogs += ch[k].n_leapfrog[i];
    }
    printf("%s: NUTS, %d chains x (%u warm-up + %zu draws), seed %llu, %.3f s, %llu leapfrog steps after "
           "warm-up%s\n",
           m.name, M, c.warmup, N, (unsigned long long)c.seed, secs, leapfrogs,
           c.parallel ? "" : " (sequential)");
    if (info.cancelled)
        printf("  interrupted: %zu draws in every chain (of %u asked for)\n", N, c.draws);
    int div = 0;
    for (int k = 0; k < M && N > 0; k++) {
        double acc = 0, leap = 0;
        int maxd = 0, dk = 0;
        for (size_t i = 0; i < N; i++) {
            acc += ch[k].accept_stat[i];
            leap += ch[k].n_leapfrog[i];
            if (ch[k].tree_depth[i] >= c.max_depth) maxd++;
            dk += ch[k].divergent[i];
        }
        div += dk;
        printf("  chain %d: step size %.4g, mean accept_stat %.3f, mean leapfrog steps %.1f, divergences %d, "
               "at max depth %d\n",
               k + 1, ch[k].step_size, N ? acc / (double)N : 0.0, N ? leap / (double)N : 0.0, dk, maxd);
    }
    printf("  divergences after warm-up: %d of %zu draws\n\n", div, (size_t)M * N);

    int fails = 0;
    if (N < 4) {
        printf("too few draws to summarise\n");
    } else {
        ag_summary_row *qs = calloc((size_t)K, sizeof *qs);
        SCALL(ag_draws_summary_reported(draws, qs, (size_t)K));
        bool rhat_bad = false;
        printf("%-12s %11s %11s %11s %11s %11s %11s %8s %6s\n", "quantity", "mean", "sd", "mcse", "5%", "50%",
               "95%", "ess_bulk", "rhat");
        for (int q = 0; q < K; q++) {
            if (qs[q].rhat > 1.05) rhat_bad = true;
            printf("%-12s %11.4g %11.4g %11.3g %11.4g %11.4g %11.4g %8.0f %6.3f\n", m.names[q], qs[q].mean,
                   qs[q].sd, qs[q].mcse_mean, qs[q].q5, qs[q].q50, qs[q].q95, qs[q].ess_bulk, qs[q].rhat);
        }
        if (check) fails += check_ref(&m, check, qs, rhat_bad);
        free(qs);
    }
    if (csv) fails += write_csv(&m, csv, ch, M, N);
    free(ch);
    SCALL(ag_draws_free(draws));
    SCALL(ag_sampler_free(s));
    model_free(&m);
    if (info.cancelled) return 130;
    return fails ? 1 : 0;
}

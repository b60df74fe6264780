/*
 * gemm_candidates.c: two BLAS libraries side by side on the products of one
 * GPT training step (small and medium presets), as arenagrad makes them:
 * row-major, one BLAS thread per call, products of 4M+ multiply-adds with
 * 64+ rows as two row halves, the attention's per-head products.
 *
 * Usage: [GEMM_A_CORETYPE=family] gemm_candidates THREADS REPS LIB_A PREFIX_A LIB_B PREFIX_B
 * e.g. libopenblas.so.0 "" libscipy_openblas.so scipy_ (the prefix goes in
 * front of cblas_sgemm, openblas_set_num_threads, openblas_get_corename and
 * openblas_get_config; a library without them, such as MKL's libmkl_rt or
 * BLIS, gets its own thread setter if it has one). Each library is loaded with dlopen (RTLD_LOCAL), so
 * two OpenBLAS copies live in one process. The whole step's products are
 * timed REPS times, the two libraries alternating (and which goes first
 * alternating too); then each product shape alone. Prints medians, ranges
 * and the best of each, which is the fairer figure on a shared machine.
 * Run by scripts/gemm_candidates.sh (make bench-gemm).
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*set_threads_fn)(int);
typedef char *(*text_fn)(void);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, MAX_PRODUCTS = 64, MAX_REPS = 101 };

typedef struct product {
    int ta, tb, m, n, k, count;
} product;

typedef struct library {
    const char *path;
    sgemm_fn sgemm;
    set_threads_fn set_threads;
    text_fn corename, config;
} library;

static product products[MAX_PRODUCTS];
static int n_products;

/* One product made `count` times per step; as arenagrad's sgemm_on does,
 * 4M+ multiply-adds with 64+ rows go as two row halves. */
static void add(int ta, int tb, int m, int n, int k, int count) {
    if ((long)m * n * k >= (1L << 22) && m >= 64) {
        products[n_products++] = (product){ta, tb, m / 2, n, k, count};
        products[n_products++] = (product){ta, tb, m - m / 2, n, k, count};
    } else {
        products[n_products++] = (product){ta, tb, m, n, k, count};
    }
}

/* The products of one step of the GPT: L blocks of four linear layers
 * (forward, dX, dW), the attention's six per-head products, the tied
 * logits (forward, dX, dW). */
static void step_products(int L, int NH, int C, int T, int B, int V) {
    n_products = 0;
    int rows = B * T, hs = C / NH, heads = L * B * NH;
    const int lin[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    for (int i = 0; i < 4; i++) {
        int in = lin[i][0], out = lin[i][1];
        add(0, 0, rows, out, in, L); /* y = x W */
        add(0, 1, rows, in, out, L); /* dx = dy W^T */
        add(1, 0, in, out, rows, L); /* dW = x^T dy */
    }
    products[n_products++] = (product){0, 1, T, T, hs, heads}; /* scores q k^T */
    products[n_products++] = (product){0, 0, T, hs, T, heads}; /* out = p v */
    products[n_products++] = (product){0, 1, T, T, hs, heads}; /* dp = dy v^T */
    products[n_products++] = (product){1, 0, T, hs, T, heads}; /* dv = p^T dy */
    products[n_products++] = (product){0, 0, T, hs, T, heads}; /* dq = ds k */
    products[n_products++] = (product){1, 0, T, hs, T, heads}; /* dk = ds^T q */
    add(0, 1, rows, V, C, 1);                                  /* logits = x wte^T */
    add(0, 0, rows, C, V, 1);                                  /* dx = dlogits wte */
    add(1, 0, V, C, rows, 1);                                  /* dwte = dlogits^T x */
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *A, *B, *C;

/* Milliseconds for every product (only < 0) or product `only` alone. */
static double run(const library *lib, int only) {
    double t0 = now();
    for (int i = 0; i < n_products; i++) {
        if (only >= 0 && i != only) continue;
        product p = products[i];
        int lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n;
        for (int c = 0; c < p.count; c++) {
            lib->sgemm(ROW_MAJOR, p.ta ? TRANS : NO_TRANS, p.tb ? TRANS : NO_TRANS, p.m, p.n, p.k,
                       1.0f, A, lda, B, ldb, 0.0f, C, p.n);
        }
    }
    return (now() - t0) * 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* dlsym of prefix+name into a function pointer (memcpy: ISO C has no cast
 * from an object pointer to a function pointer). */
static int find(void *h, const char *prefix, const char *name, void *fn, size_t size) {
    char sym[128];
    snprintf(sym, sizeof sym, "%s%s", prefix, name);
    void *p = dlsym(h, sym);
    if (p == NULL) {
        fprintf(stderr, "gemm_candidates: %s not found\n", sym);
        return 0;
    }
    memcpy(fn, &p, size);
    return 1;
}

/* Like find, but quiet and optional: 0 if absent. */
static int find_optional(void *h, const char *name, void *fn, size_t size) {
    void *p = dlsym(h, name);
    if (p != NULL) memcpy(fn, &p, size);
    return p != NULL;
}

/* The library's thread setter and description: OpenBLAS's (with the
 * prefix), else MKL's or BLIS's thread setter and no description. */
static int load(library *lib, const char *path, const char *prefix) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "gemm_candidates: %s\n", dlerror());
        return 0;
    }
    lib->path = path;
    lib->set_threads = NULL;
    lib->corename = lib->config = NULL;
    if (!find(h, prefix, "cblas_sgemm", &lib->sgemm, sizeof lib->sgemm)) return 0;
    char sym[128];
    snprintf(sym, sizeof sym, "%sopenblas_set_num_threads", prefix);
    if (find_optional(h, sym, &lib->set_threads, sizeof lib->set_threads)) {
        return find(h, prefix, "openblas_get_corename", &lib->corename, sizeof lib->corename) &&
               find(h, prefix, "openblas_get_config", &lib->config, sizeof lib->config);
    }
    if (!find_optional(h, "MKL_Set_Num_Threads", &lib->set_threads, sizeof lib->set_threads))
        find_optional(h, "bli_thread_set_num_threads", &lib->set_threads, sizeof lib->set_threads);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s THREADS REPS LIB_A PREFIX_A LIB_B PREFIX_B\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]), reps = atoi(argv[2]);
    if (reps < 1 || reps > MAX_REPS) reps = 9;
    /* OpenBLAS reads OPENBLAS_CORETYPE when it loads: B picks its own
     * kernels, A gets GEMM_A_CORETYPE when set. */
    const char *core_a = getenv("GEMM_A_CORETYPE");
    unsetenv("OPENBLAS_CORETYPE");
    library libs[2];
    if (!load(&libs[1], argv[5], argv[6])) return 1;
    if (core_a != NULL && core_a[0] != '\0') setenv("OPENBLAS_CORETYPE", core_a, 1);
    if (!load(&libs[0], argv[3], argv[4])) return 1;
    for (int l = 0; l < 2; l++) {
        if (libs[l].set_threads != NULL) libs[l].set_threads(threads);
        printf("%c: %s: %s, kernels %s, %d BLAS thread(s)%s\n", 'A' + l, libs[l].path,
               libs[l].config ? libs[l].config() : "not OpenBLAS",
               libs[l].corename ? libs[l].corename() : "its own", threads,
               libs[l].set_threads ? "" : " (no thread setter found)");
    }
    size_t n = (size_t)2048 * 3072;
    A = malloc(n * sizeof *A);
    B = malloc(n * sizeof *B);
    C = malloc(n * sizeof *C);
    if (A == NULL || B == NULL || C == NULL) return 1;
    for (size_t i = 0; i < n; i++) {
        A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        C[i] = 0.0f;
    }
    static const struct {
        const char *name;
        int L, NH, C, T, B, V;
    } presets[] = {{"small", 4, 4, 128, 64, 16, 77}, {"medium", 6, 6, 192, 128, 16, 77}};
    static double total[2][MAX_REPS], one[2][MAX_REPS];
    for (int q = 0; q < 2; q++) {
        step_products(presets[q].L, presets[q].NH, presets[q].C, presets[q].T, presets[q].B,
                      presets[q].V);
        run(&libs[0], -1); /* warm-up */
        run(&libs[1], -1);
        for (int r = 0; r < reps; r++) {
            int first = r & 1;
            total[first][r] = run(&libs[first], -1);
            total[!first][r] = run(&libs[!first], -1);
        }
        printf("%s: every product of one step, ms over %d alternated runs\n", presets[q].name, reps);
        double best[2];
        for (int l = 0; l < 2; l++) {
            qsort(total[l], (size_t)reps, sizeof(double), by_value);
            best[l] = total[l][0];
            printf("  %c  median %8.2f  range %8.2f-%8.2f  best %8.2f\n", 'A' + l,
                   total[l][reps / 2], total[l][0], total[l][reps - 1], best[l]);
        }
        printf("  B / A: median %.3f  best %.3f\n", total[1][reps / 2] / total[0][reps / 2],
               best[1] / best[0]);
        printf("  per shape (best of %d, ms for all of that shape's calls):\n", reps);
        for (int i = 0; i < n_products; i++) {
            for (int r = 0; r < reps; r++) {
                one[0][r] = run(&libs[0], i);
                one[1][r] = run(&libs[1], i);
            }
            qsort(one[0], (size_t)reps, sizeof(double), by_value);
            qsort(one[1], (size_t)reps, sizeof(double), by_value);
            product p = products[i];
            printf("    %c%c m=%4d n=%4d k=%4d x%4d  A %8.3f  B %8.3f  B/A %.2f\n",
                   p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, p.count, one[0][0],
                   one[1][0], one[1][0] / one[0][0]);
        }
    }
    free(A);
    free(B);
    free(C);
    return 0;
}

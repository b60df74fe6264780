/*
 * test_cnn_parity.c: conv, pool and normalisation ops against PyTorch,
 * through the public header.
 *
 * tests/data/cnn_parity.txt (scripts/cnn_parity_fixtures.py, run once with
 * torch) holds, per case, float32 inputs and an upstream gradient gy, the
 * float64 output and input gradients of sum(y * gy), and PyTorch-float32's
 * own error on each of them. Each tensor of ours must satisfy
 *     max |ours - f64| <= 2 * max |torch32 - f64| + 4 ulp(max |f64|)
 * where ulp is float32's: within twice PyTorch's own float32 error, with
 * four ulps of slack for tensors PyTorch gets exactly right (a max pool).
 * The values are their bit patterns in hex, so they are read exactly; a
 * line that does not parse stops the test with its line number.
 *
 * Usage: test_cnn_parity [FIXTURE]   (default: the file above, from the
 * repository root)
 */
#define _POSIX_C_SOURCE 200809L /* getline, strtok_r */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>

#include "check.h"

#define PARITY_FILE "tests/data/cnn_parity.txt"
#define MAX_TENSORS 16
#define MAX_ARGS 24
/* CHECK_OK that also yields whether the call succeeded. */
#define OK(call) check_status_impl((call), AG_STATUS_OK, __FILE__, __LINE__, #call)

typedef struct fixture_tensor {
    char name[32];
    bool f64;
    size_t shape[AG_MAX_DIMS];
    size_t ndim;
    size_t numel;
    float *floats;     /* the values of an f32 tensor (else NULL) */
    double *doubles;   /* the values of an f64 tensor (else NULL) */
    double torch_err;   /* PyTorch-float32's max error, or -1 */
} fixture_tensor;

typedef struct fixture_case {
    char name[64];
    char op[32];
    char keys[MAX_ARGS][16];
    long values[MAX_ARGS];
    size_t nargs;
    fixture_tensor t[MAX_TENSORS];
    size_t nt;
} fixture_case;

/* The fixture being read: its path, the current line and its number. */
typedef struct fixture_reader {
    const char *path;
    FILE *f;
    char *line;
    size_t cap;
    size_t lineno;
} fixture_reader;

static long arg(const fixture_case *c, const char *key) {
    for (size_t i = 0; i < c->nargs; i++) {
        if (strcmp(c->keys[i], key) == 0) return c->values[i];
    }
    fprintf(stderr, "case %s: no argument %s\n", c->name, key);
    exit(2);
}

static fixture_tensor *find(fixture_case *c, const char *name) {
    for (size_t i = 0; i < c->nt; i++) {
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    }
    return NULL;
}

/* A float32 tensor's values, copied out (the caller frees them). */
static float *f32_values(const fixture_tensor *t) {
    float *v = malloc(t->numel * sizeof(float));
    if (v == NULL) abort();
    memcpy(v, t->floats, t->numel * sizeof(float));
    return v;
}

/* Stops the test: the fixture's line r->lineno is not what it must be
 * (tensor: the tensor whose values were being read, or NULL). */
_Noreturn static void malformed(const fixture_reader *r, const fixture_tensor *tensor, const char *why) {
    fprintf(stderr, "%s:%zu: %s%s%s\n", r->path, r->lineno, tensor != NULL ? tensor->name : "",
            tensor != NULL ? ": " : "", why);
    exit(2);
}

/* Reads the next line into r->line without its newline; false at the end. */
static bool next_line(fixture_reader *r) {
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) return false;
    r->lineno++;
    if (n > 0 && r->line[n - 1] == '\n') r->line[n - 1] = '\0';
    return true;
}

/* Reads t->numel values, each a hex word of exactly 8 (f32) or 16 (f64)
 * lowercase digits separated by single spaces, over as many lines as they
 * take; the last line holds no more than the tensor's remaining values. */
static void read_values(fixture_reader *r, fixture_tensor *t) {
    size_t digits = t->f64 ? 16 : 8;
    size_t i = 0;
    if (t->f64) {
        t->doubles = malloc((t->numel > 0 ? t->numel : 1) * sizeof(double));
        if (t->doubles == NULL) abort();
    } else {
        t->floats = malloc((t->numel > 0 ? t->numel : 1) * sizeof(float));
        if (t->floats == NULL) abort();
    }
    while (i < t->numel) {
        if (!next_line(r)) malformed(r, t, "the file ends inside a tensor's values");
        const char *p = r->line;
        for (;;) {
            size_t n = 0;
            while (isxdigit((unsigned char)p[n]) && !isupper((unsigned char)p[n])) n++;
            if (n != digits) {
                malformed(r, t, t->f64 ? "expected a value as 16 lowercase hex digits"
                                       : "expected a value as 8 lowercase hex digits");
            }
            if (i == t->numel) malformed(r, t, "more values than the tensor's shape holds");
            unsigned long long bits = strtoull(p, NULL, 16);
            if (t->f64) {
                memcpy(&t->doubles[i], &bits, sizeof(double));
            } else {
                uint32_t b32 = (uint32_t)bits;
                memcpy(&t->floats[i], &b32, sizeof(float));
            }
            i++;
            p += n;
            if (*p == '\0') break;
            if (*p != ' ') malformed(r, t, "values are separated by one space");
            p++;
        }
    }
}

static void free_case(fixture_case *c) {
    for (size_t i = 0; i < c->nt; i++) {
        free(c->t[i].floats);
        free(c->t[i].doubles);
    }
    memset(c, 0, sizeof *c);
}

/* Parses one case; false at the end of the file. */
static bool parse_case(fixture_reader *r, fixture_case *c) {
    free_case(c);
    if (!next_line(r)) return false;
    char *save = NULL, *tok = strtok_r(r->line, " ", &save);
    if (tok == NULL || strcmp(tok, "case") != 0) malformed(r, NULL, "expected \"case NAME OP KEY=VALUE ...\"");
    const char *name = strtok_r(NULL, " ", &save), *op = strtok_r(NULL, " ", &save);
    if (name == NULL || op == NULL) malformed(r, NULL, "expected \"case NAME OP KEY=VALUE ...\"");
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->op, sizeof c->op, "%s", op);
    while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
        char *eq = strchr(tok, '='), *end = NULL;
        if (eq == NULL || c->nargs == MAX_ARGS) malformed(r, NULL, "expected KEY=VALUE (at most 24)");
        *eq = '\0';
        snprintf(c->keys[c->nargs], sizeof c->keys[0], "%s", tok);
        c->values[c->nargs++] = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || *end != '\0') malformed(r, NULL, "an argument's value is not an integer");
    }
    while (next_line(r)) {
        if (strcmp(r->line, "end") == 0) return true;
        if (r->line[0] == 'e') {
            char tname[32];
            double err;
            if (sscanf(r->line, "e %31s %lf", tname, &err) != 2) malformed(r, NULL, "expected \"e NAME ERROR\"");
            fixture_tensor *t = find(c, tname);
            if (t == NULL) malformed(r, NULL, "an error for a tensor not read yet");
            t->torch_err = err;
            continue;
        }
        if (c->nt == MAX_TENSORS) malformed(r, NULL, "more than 16 tensors in a case");
        fixture_tensor *t = &c->t[c->nt++];
        char kind[4];
        int consumed = 0;
        if (sscanf(r->line, "t %31s %3s %zu%n", t->name, kind, &t->ndim, &consumed) != 3 || t->ndim > AG_MAX_DIMS ||
            (strcmp(kind, "f32") != 0 && strcmp(kind, "f64") != 0)) {
            malformed(r, NULL, "expected \"t NAME f32|f64 RANK D0 D1 ...\"");
        }
        const char *rest = r->line + consumed;
        t->numel = 1;
        for (size_t d = 0; d < t->ndim; d++) {
            char *end = NULL;
            t->shape[d] = strtoul(rest, &end, 10);
            if (end == rest) malformed(r, NULL, "fewer dimensions than the rank");
            rest = end;
            t->numel *= t->shape[d];
        }
        if (*rest != '\0') malformed(r, NULL, "more dimensions than the rank");
        t->f64 = strcmp(kind, "f64") == 0;
        t->torch_err = -1.0;
        read_values(r, t);
    }
    malformed(r, NULL, "the file ends inside a case (no \"end\")");
    return false;
}

/* float32's ulp at m (m > 0; the smallest normal's ulp below it). */
static double ulp32(double m) {
    if (!(m > 0.0)) return ldexp(1.0, -149);
    int e;
    frexp(m, &e);
    return ldexp(1.0, (e - 24) < -149 ? -149 : e - 24);
}

static double worst_ratio; /* the largest error / bound seen */
static double case_ratio;  /* the same, in the running case */

/* Checks ours against the f64 tensor `name` within the parity bound. */
static void check_tensor(fixture_case *c, const char *name, const float *ours) {
    fixture_tensor *ref = find(c, name);
    if (ref == NULL || ref->torch_err < 0.0) {
        fprintf(stderr, "case %s: no reference %s\n", c->name, name);
        CHECK(false);
        return;
    }
    double max_ref = 0.0, err = 0.0;
    for (size_t i = 0; i < ref->numel; i++) {
        double r = ref->doubles[i];
        max_ref = fmax(max_ref, fabs(r));
        double d = fabs((double)ours[i] - r);
        if (!(d <= err)) err = isnan(d) ? INFINITY : d;
    }
    double bound = 2.0 * ref->torch_err + 4.0 * ulp32(max_ref);
    if (err / bound > worst_ratio) worst_ratio = err / bound;
    if (err / bound > case_ratio) case_ratio = err / bound;
    if (!(err <= bound)) {
        fprintf(stderr, "case %s, %s: max |ours - f64| %.3g above the bound %.3g (torch32 %.3g, max %.3g)\n",
                c->name, name, err, bound, ref->torch_err, max_ref);
    }
    CHECK(err <= bound);
}

/* A parameter holding the fixture's float32 tensor `name`. */
static ag_tensor param_of(ag_context *ctx, fixture_case *c, const char *name) {
    fixture_tensor *t = find(c, name);
    float *v = f32_values(t);
    ag_tensor p = {0};
    CHECK_OK(ag_param_new(ctx, t->shape, t->ndim, v, &p));
    free(v);
    return p;
}

/* Reads the gradient of parameter p (numel floats) and checks it. */
static void check_grad(ag_context *ctx, fixture_case *c, ag_tensor p, const char *name) {
    fixture_tensor *ref = find(c, name);
    float *g = malloc(ref->numel * sizeof(float));
    if (g == NULL) abort();
    if (OK(ag_tensor_read_grad(ctx, p, g, ref->numel))) check_tensor(c, name, g);
    free(g);
}

/* Runs the op of case c forward on params, then backward from sum(y * gy),
 * and checks y and every gradient. */
static void run_case(fixture_case *c) {
    check_begin(c->name);
    ag_context *ctx = NULL;
    REQUIRE_OK(ag_context_new(&ctx));
    check_set_ctx(ctx);
    const char *op = c->op;
    bool has_w = find(c, "w") != NULL, has_b = find(c, "b") != NULL;
    uint32_t stats = AG_NO_STATS;
    if (strcmp(op, "batch_norm") == 0) {
        CHECK_OK(ag_batch_norm_stats_new(ctx, "bn", (size_t)arg(c, "C"), &stats));
        if (!arg(c, "training")) {
            float *m = f32_values(find(c, "running_mean")), *v = f32_values(find(c, "running_var"));
            CHECK_OK(ag_batch_norm_stats_write(ctx, stats, m, v, (size_t)arg(c, "C"), 0));
            free(m);
            free(v);
            CHECK_OK(ag_set_training(ctx, false));
        }
    }
    ag_tensor x = param_of(ctx, c, "x");
    ag_tensor w = has_w ? param_of(ctx, c, "w") : (ag_tensor){0};
    ag_tensor b = has_b ? param_of(ctx, c, "b") : (ag_tensor){0};
    ag_tensor y = {0};
    ag_status st = AG_STATUS_INVALID_ARGUMENT;
    if (strcmp(op, "conv2d") == 0) {
        st = ag_conv2d(ctx, x, w, has_b ? &b : NULL, (int32_t)arg(c, "sh"), (int32_t)arg(c, "sw"),
                       (int32_t)arg(c, "ph"), (int32_t)arg(c, "pw"), (int32_t)arg(c, "dh"), (int32_t)arg(c, "dw"),
                       (int32_t)arg(c, "groups"), &y);
    } else if (strcmp(op, "conv2d_relu") == 0) {
        st = ag_conv2d_relu(ctx, x, w, has_b ? &b : NULL, (int32_t)arg(c, "sh"), (int32_t)arg(c, "sw"),
                            (int32_t)arg(c, "ph"), (int32_t)arg(c, "pw"), (int32_t)arg(c, "dh"),
                            (int32_t)arg(c, "dw"), (int32_t)arg(c, "groups"), &y);
    } else if (strcmp(op, "conv1d") == 0) {
        st = ag_conv1d(ctx, x, w, has_b ? &b : NULL, (int32_t)arg(c, "s"), (int32_t)arg(c, "p"), (int32_t)arg(c, "d"),
                       (int32_t)arg(c, "groups"), &y);
    } else if (strcmp(op, "max_pool2d") == 0) {
        st = ag_max_pool2d(ctx, x, (int32_t)arg(c, "KH"), (int32_t)arg(c, "KW"), (int32_t)arg(c, "sh"),
                           (int32_t)arg(c, "sw"), (int32_t)arg(c, "ph"), (int32_t)arg(c, "pw"), arg(c, "ceil") != 0, &y);
    } else if (strcmp(op, "avg_pool2d") == 0) {
        st = ag_avg_pool2d(ctx, x, (int32_t)arg(c, "KH"), (int32_t)arg(c, "KW"), (int32_t)arg(c, "sh"),
                           (int32_t)arg(c, "sw"), (int32_t)arg(c, "ph"), (int32_t)arg(c, "pw"), arg(c, "ceil") != 0,
                           arg(c, "include_pad") != 0, &y);
    } else if (strcmp(op, "global_avg_pool2d") == 0) {
        st = ag_global_avg_pool2d(ctx, x, &y);
    } else if (strcmp(op, "batch_norm") == 0) {
        /* Without a weight or bias (absent from the case): NULL for it. */
        if (has_w && has_b)
            st = ag_batch_norm(ctx, x, w, b, stats, 0.1f, 1e-5f, &y);
        else
            st = ag_batch_norm_opt(ctx, x, has_w ? &w : NULL, has_b ? &b : NULL, stats, 0.1f, 1e-5f, &y);
    } else if (strcmp(op, "group_norm") == 0) {
        size_t groups = (size_t)arg(c, "groups");
        if (has_w && has_b)
            st = ag_group_norm(ctx, x, w, b, groups, 1e-5f, &y);
        else
            st = ag_group_norm_opt(ctx, x, has_w ? &w : NULL, has_b ? &b : NULL, groups, 1e-5f, &y);
    } else {
        fprintf(stderr, "cnn parity: unknown op %s\n", op);
    }
    if (!OK(st)) goto done;

    fixture_tensor *gy_t = find(c, "gy"), *y_ref = find(c, "y");
    size_t shape[AG_MAX_DIMS], ndim = 0, numel = 0;
    CHECK_OK(ag_tensor_shape(ctx, y, shape, &ndim));
    CHECK(ndim == y_ref->ndim && memcmp(shape, y_ref->shape, ndim * sizeof(size_t)) == 0);
    CHECK_OK(ag_tensor_numel(ctx, y, &numel));
    if (numel != y_ref->numel) goto done;
    float *yv = malloc(numel * sizeof(float));
    if (yv == NULL) abort();
    if (OK(ag_tensor_read(ctx, y, yv, numel))) check_tensor(c, "y", yv);
    free(yv);

    float *gyv = f32_values(gy_t);
    ag_tensor gy = {0}, prod = {0}, loss = {0};
    CHECK_OK(ag_tensor_new(ctx, gy_t->shape, gy_t->ndim, gyv, &gy));
    free(gyv);
    CHECK_OK(ag_mul(ctx, y, gy, &prod));
    CHECK_OK(ag_sum(ctx, prod, &loss));
    if (!OK(ag_backward(ctx, loss))) goto done;
    check_grad(ctx, c, x, "dx");
    if (has_w) check_grad(ctx, c, w, "dw");
    if (has_b) check_grad(ctx, c, b, "db");
    if (find(c, "running_mean") != NULL && arg(c, "training")) {
        size_t ch = (size_t)arg(c, "C");
        float *m = malloc(ch * sizeof(float)), *v = malloc(ch * sizeof(float));
        int64_t count = 0;
        if (m == NULL || v == NULL) abort();
        if (OK(ag_batch_norm_stats_read(ctx, stats, m, v, ch, &count))) {
            check_tensor(c, "running_mean", m);
            check_tensor(c, "running_var", v);
            CHECK(count == 1);
        }
        free(m);
        free(v);
    }
done:
    check_set_ctx(NULL);
    ag_context_free(&ctx);
}

int main(int argc, char **argv) {
    /* One thread: the values are the same bits at any thread count (the
     * thread-invariance tests check that), and no pool worker lives on to
     * exit, whose thread-local storage valgrind would count as lost. */
    if (ag_set_num_threads(1) != AG_STATUS_OK) return 1;
    fixture_reader r = {.path = argc > 1 ? argv[1] : PARITY_FILE};
    r.f = fopen(r.path, "r");
    if (r.f == NULL) {
        fprintf(stderr, "cannot open %s (run from the repository root)\n", r.path);
        return 1;
    }
    size_t cases = 0;
    fixture_case *c = calloc(1, sizeof *c);
    if (c == NULL) abort();
    printf("case: largest error / bound over its tensors\n");
    while (parse_case(&r, c)) {
        case_ratio = 0.0;
        run_case(c);
        printf("  %-32s %.3f\n", c->name, case_ratio);
        cases++;
    }
    check_begin("every case read");
    CHECK(cases >= 35 && !ferror(r.f));
    printf("cnn parity: %zu cases; worst error / bound %.3f\n", cases, worst_ratio);
    free_case(c);
    free(c);
    free(r.line);
    fclose(r.f);
    return check_summary();
}

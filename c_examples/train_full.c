/*
 * train_full: a character-level GPT trained from C through the arenagrad C API.
 *
 * Model (llm.c's train_gpt2.c / nanoGPT): token embedding wte [V, C] and
 * position embedding wpe [T, C]; L blocks of
 *     x = x + proj(attention(qkv(ln1(x))))
 *     x = x + fc2(gelu(fc(ln2(x))))
 * a final LayerNorm, logits = x @ wte^T (the output projection is tied to the
 * token embedding), mean cross-entropy. AdamW, gradient clipping at 1.0.
 *
 * Memory: every host buffer (token ids, targets, logits, step times) is
 * allocated before the training loop; the loop and the sampler never call
 * malloc. Activations live in the library's arena, recycled by ag_reset.
 *
 * Exit status: 0 done, 1 library error, 2 bad arguments or data,
 * 3 checkpoint refused (--resume), 4 arena limit too small (--arena-limit-mb).
 *
 * The last line of the output is one machine-readable summary:
 *   summary preset=P iters=N loss=X val_loss=Y ms_per_step=Z tok_per_s=W
 *           rss_warm_kb=A rss_end_kb=B arena_high_water_bytes=C params=D
 *
 * Build: make build/train_full. Run: build/train_full --help.
 * A fuzz harness can compile this file with -DTRAIN_FULL_NO_MAIN and call
 * parse_args, which does no I/O and never exits.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arenagrad.h"

enum {
    EXIT_LIBRARY = 1,
    EXIT_USAGE = 2,
    EXIT_CHECKPOINT = 3,
    EXIT_ARENA = 4,
};

#define LOSS_WINDOW 50   /* summary loss: mean of the last 50 steps */
#define WARMUP_STEPS 10  /* steps left out of the median step time */
#define MAX_ITERS 100000000L
#define MAX_BATCH 65536L
#define MAX_LAYERS 64
#define GRAD_CLIP 1.0f
#define TWO_PI 6.283185307179586

/* ------------------------------------------------------------------------ */
/* Configuration and argument parsing (no I/O, no exit: fuzzable)           */
/* ------------------------------------------------------------------------ */

struct preset {
    const char *name;
    int n_layer, n_head, n_embd, seq_len, batch;
};

static const struct preset PRESETS[] = {
    /* name      L  NH    C    T   B */
    {"tiny", 1, 2, 32, 32, 8},
    {"small", 4, 4, 128, 64, 16},
    {"medium", 6, 6, 192, 128, 16},
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

struct config {
    const char *preset;  /* a PRESETS name (static string) */
    int n_layer;         /* L */
    int n_head;          /* NH */
    int n_embd;          /* C */
    int seq_len;         /* T */
    int batch;           /* B */
    long iters;          /* total steps (a resumed run continues up to it) */
    float lr;
    uint64_t seed;
    long log_every;
    long eval_every;
    long eval_iters;
    long sample_chars;
    float temperature;
    const char *prompt;  /* NULL: start the sample from a newline */
    const char *data;    /* NULL: data/shakespeare.txt, else the tiny corpus */
    const char *save;    /* NULL: no checkpoints */
    const char *resume;  /* NULL: fresh start */
    long arena_limit_mb; /* 0: no cap */
    bool help;
};

int parse_args(int argc, char **argv, struct config *cfg, char *err, size_t errlen);

static const struct preset *find_preset(const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

/* Parses a decimal integer in [min, max]: no sign games, no trailing bytes. */
static bool parse_long(const char *flag, const char *s, long min, long max, long *out, char *err,
                       size_t errlen)
{
    const char *digits = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)digits[0])) {
        snprintf(err, errlen, "%s: '%s' is not an integer", flag, s);
        return false;
    }
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0') {
        snprintf(err, errlen, "%s: '%s' is not an integer (trailing '%s')", flag, s, end);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        if (min == 1 && (v < 1 || s[0] == '-'))
            snprintf(err, errlen, "%s: '%s' must be a positive count (at least 1)", flag, s);
        else
            snprintf(err, errlen, "%s: '%s' is out of range (%ld to %ld)", flag, s, min, max);
        return false;
    }
    *out = v;
    return true;
}

/* Parses a finite float > 0 (learning rate, temperature). */
static bool parse_positive_float(const char *flag, const char *s, float *out, char *err,
                                 size_t errlen)
{
    if (s[0] == '\0' || isspace((unsigned char)s[0])) {
        snprintf(err, errlen, "%s: '%s' is not a number", flag, s);
        return false;
    }
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s) {
        snprintf(err, errlen, "%s: '%s' is not a number", flag, s);
        return false;
    }
    if (*end != '\0') {
        snprintf(err, errlen, "%s: '%s' is not a number (trailing '%s')", flag, s, end);
        return false;
    }
    float f = (float)v;
    if (!isfinite(v) || !isfinite(f) || !(f > 0.0f)) {
        snprintf(err, errlen, "%s: '%s' must be a finite number greater than 0", flag, s);
        return false;
    }
    *out = f;
    return true;
}

static bool parse_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen)
{
    if (!isdigit((unsigned char)s[0])) {
        snprintf(err, errlen, "%s: '%s' is not a non-negative integer", flag, s);
        return false;
    }
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') {
        snprintf(err, errlen, "%s: '%s' is not an integer (trailing '%s')", flag, s, end);
        return false;
    }
    if (errno == ERANGE) {
        snprintf(err, errlen, "%s: '%s' is out of range (0 to %" PRIu64 ")", flag, s, UINT64_MAX);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

/*
 * Fills *cfg from argv. Returns 0 on success (cfg->help set for --help) or
 * EXIT_USAGE with a one-line message naming the flag and value in err.
 * Accepts "--flag value" and "--flag=value", and the short forms
 * "--tiny|--small|--medium [ITERS]". Does no I/O and never exits.
 */
int parse_args(int argc, char **argv, struct config *cfg, char *err, size_t errlen)
{
    char scratch[1];
    if (err == NULL || errlen == 0) {
        err = scratch;
        errlen = sizeof scratch;
    }
    err[0] = '\0';
    if (cfg == NULL) {
        snprintf(err, errlen, "internal: no config");
        return EXIT_USAGE;
    }
    memset(cfg, 0, sizeof *cfg);
    const struct preset *preset = &PRESETS[0];
    long batch = 0; /* 0: the preset's batch */
    cfg->iters = 2000;
    cfg->lr = 1e-3f;
    cfg->seed = 1337;
    cfg->log_every = 50;
    cfg->eval_every = 250;
    cfg->eval_iters = 10;
    cfg->sample_chars = 200;
    cfg->temperature = 1.0f;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv ? argv[i] : NULL;
        if (arg == NULL) {
            snprintf(err, errlen, "argument %d is NULL", i);
            return EXIT_USAGE;
        }
        /* Split "--flag=value". */
        size_t name_len = strlen(arg);
        const char *inline_val = NULL;
        if (strncmp(arg, "--", 2) == 0) {
            const char *eq = strchr(arg, '=');
            if (eq != NULL) {
                name_len = (size_t)(eq - arg);
                inline_val = eq + 1;
            }
        }
#define IS(flag) (name_len == strlen(flag) && strncmp(arg, flag, name_len) == 0)
        /* The value of a flag that takes one: inline, or the next argument. */
#define VALUE(flag, var)                                                      \
    do {                                                                      \
        if (inline_val != NULL) {                                             \
            var = inline_val;                                                 \
        } else if (i + 1 < argc && argv[i + 1] != NULL &&                     \
                   !(strncmp(argv[i + 1], "--", 2) == 0 && argv[i + 1][2])) { \
            var = argv[++i];                                                  \
        } else if (i + 1 < argc && argv[i + 1] != NULL) {                     \
            snprintf(err, errlen,                                             \
                     "%s: missing value (next is the option '%s'; use "       \
                     "%s=VALUE for a value starting with --)",                \
                     flag, argv[i + 1], flag);                                \
            return EXIT_USAGE;                                                \
        } else {                                                              \
            snprintf(err, errlen, "%s: missing value", flag);                 \
            return EXIT_USAGE;                                                \
        }                                                                     \
    } while (0)

        const char *v = NULL;
        if (IS("--help") || IS("-h")) {
            if (inline_val != NULL) {
                snprintf(err, errlen, "--help takes no value (got '%s')", arg);
                return EXIT_USAGE;
            }
            cfg->help = true;
            return 0;
        } else if (IS("--tiny") || IS("--small") || IS("--medium")) {
            /* Classic short form: "--small 5000" = preset small, 5000 steps. */
            char flag[16];
            snprintf(flag, sizeof flag, "%.*s", (int)name_len, arg);
            preset = find_preset(flag + 2);
            const char *next = (i + 1 < argc) ? argv[i + 1] : NULL;
            if (inline_val != NULL) {
                v = inline_val;
            } else if (next != NULL && (next[0] != '-' || isdigit((unsigned char)next[1]))) {
                v = argv[++i];
            }
            if (v != NULL && !parse_long(flag, v, 1, MAX_ITERS, &cfg->iters, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--preset")) {
            VALUE("--preset", v);
            preset = find_preset(v);
            if (preset == NULL) {
                snprintf(err, errlen, "--preset: unknown preset '%s' (choose tiny, small or medium)",
                         v);
                return EXIT_USAGE;
            }
        } else if (IS("--iters")) {
            VALUE("--iters", v);
            if (!parse_long("--iters", v, 1, MAX_ITERS, &cfg->iters, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--batch")) {
            VALUE("--batch", v);
            if (!parse_long("--batch", v, 1, MAX_BATCH, &batch, err, errlen)) return EXIT_USAGE;
        } else if (IS("--lr")) {
            VALUE("--lr", v);
            if (!parse_positive_float("--lr", v, &cfg->lr, err, errlen)) return EXIT_USAGE;
        } else if (IS("--seed")) {
            VALUE("--seed", v);
            if (!parse_u64("--seed", v, &cfg->seed, err, errlen)) return EXIT_USAGE;
        } else if (IS("--log-every")) {
            VALUE("--log-every", v);
            if (!parse_long("--log-every", v, 1, LONG_MAX, &cfg->log_every, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--eval-every")) {
            VALUE("--eval-every", v);
            if (!parse_long("--eval-every", v, 1, LONG_MAX, &cfg->eval_every, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--eval-iters")) {
            VALUE("--eval-iters", v);
            if (!parse_long("--eval-iters", v, 1, 1000000L, &cfg->eval_iters, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--sample-chars")) {
            VALUE("--sample-chars", v);
            if (!parse_long("--sample-chars", v, 1, MAX_ITERS, &cfg->sample_chars, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--temperature")) {
            VALUE("--temperature", v);
            if (!parse_positive_float("--temperature", v, &cfg->temperature, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--prompt")) {
            VALUE("--prompt", v);
            cfg->prompt = v;
        } else if (IS("--data") || IS("--save") || IS("--resume")) {
            char flag[16];
            snprintf(flag, sizeof flag, "%.*s", (int)name_len, arg);
            VALUE(flag, v);
            if (v[0] == '\0') {
                snprintf(err, errlen, "%s: empty path", flag);
                return EXIT_USAGE;
            }
            if (flag[2] == 'd') cfg->data = v;
            else if (flag[2] == 's') cfg->save = v;
            else cfg->resume = v;
        } else if (IS("--arena-limit-mb")) {
            VALUE("--arena-limit-mb", v);
            long max_mb = (long)((SIZE_MAX >> 20) < (size_t)LONG_MAX ? (SIZE_MAX >> 20) : LONG_MAX);
            if (!parse_long("--arena-limit-mb", v, 1, max_mb, &cfg->arena_limit_mb, err, errlen))
                return EXIT_USAGE;
        } else if (arg[0] == '-') {
            snprintf(err, errlen, "unknown option '%s'", arg);
            return EXIT_USAGE;
        } else {
            snprintf(err, errlen, "unexpected argument '%s'", arg);
            return EXIT_USAGE;
        }
#undef VALUE
#undef IS
    }

    cfg->preset = preset->name;
    cfg->n_layer = preset->n_layer;
    cfg->n_head = preset->n_head;
    cfg->n_embd = preset->n_embd;
    cfg->seq_len = preset->seq_len;
    cfg->batch = batch > 0 ? (int)batch : preset->batch;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: train_full [--preset tiny|small|medium] [--data PATH] [--iters N]\n"
            "                  [--batch B] [--lr F] [--seed S] [--log-every K]\n"
            "                  [--eval-every K] [--eval-iters K] [--sample-chars N]\n"
            "                  [--temperature F] [--prompt TEXT] [--save PATH]\n"
            "                  [--resume PATH] [--arena-limit-mb M] [--help]\n"
            "       train_full --tiny|--small|--medium [ITERS]\n"
            "\n"
            "Trains a character-level GPT (llm.c / nanoGPT architecture) with arenagrad.\n"
            "\n"
            "  --preset P         tiny (L=1 NH=2 C=32 T=32 B=8, default),\n"
            "                     small (L=4 NH=4 C=128 T=64 B=16),\n"
            "                     medium (L=6 NH=6 C=192 T=128 B=16)\n"
            "  --data PATH        training text (default data/shakespeare.txt, else\n"
            "                     ../shared/data/shakespeare_tiny.txt); vocabulary = its\n"
            "                     distinct bytes; first 90%% train, last 10%% validation\n"
            "  --iters N          total training steps (default 2000)\n"
            "  --batch B          sequences per step (default: the preset's)\n"
            "  --lr F             AdamW learning rate (default 1e-3)\n"
            "  --seed S           seed for init, batches, evaluation and sampling (1337)\n"
            "  --log-every K      progress line every K steps when not a terminal (50)\n"
            "  --eval-every K     validation loss and checkpoint every K steps (250)\n"
            "  --eval-iters K     validation batches per evaluation (10)\n"
            "  --sample-chars N   characters sampled after training (200)\n"
            "  --temperature F    sampling temperature, > 0 (1.0)\n"
            "  --prompt TEXT      start of the sample (default: a newline)\n"
            "  --save PATH        checkpoint every --eval-every steps and at the end\n"
            "  --resume PATH      continue a saved run up to --iters total steps\n"
            "  --arena-limit-mb M cap the activation arena at M MiB\n"
            "\n"
            "Exit status: 0 done, 1 library error, 2 bad arguments or data,\n"
            "3 checkpoint refused, 4 arena limit too small.\n"
            "The last line is a machine-readable 'summary key=value ...' line.\n");
}

/* ------------------------------------------------------------------------ */
/* Random numbers: splitmix64 (one 64-bit word of state, easy to checkpoint) */
/* ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Standard normal (Box-Muller; the second value is dropped for simplicity). */
static double rng_normal(uint64_t *s)
{
    double u1 = 1.0 - rng_uniform(s); /* (0, 1]: log is finite */
    double u2 = rng_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

/* Independent streams from one user seed. */
enum { STREAM_INIT = 1, STREAM_TRAIN = 2, STREAM_EVAL = 3, STREAM_SAMPLE = 4 };

static uint64_t derive_seed(uint64_t seed, uint64_t stream)
{
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull);
    return rng_next(&s);
}

/* ------------------------------------------------------------------------ */
/* Small helpers: time, RSS, formatting                                     */
/* ------------------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Resident set size in KiB from /proc/self/statm (open/read: no malloc). */
static long rss_kb(void)
{
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return -1;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    unsigned long size = 0, resident = 0;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2) return -1;
    long page = sysconf(_SC_PAGESIZE);
    return (long)resident * (page > 0 ? page / 1024 : 4);
}

static void format_duration(char *buf, size_t len, double ms)
{
    if (!(ms >= 0.0) || ms > 1e12) {
        snprintf(buf, len, "?");
        return;
    }
    long s = (long)(ms / 1000.0 + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
    else
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
}

/* In-place heapsort (glibc's qsort may malloc a merge buffer; this never does). */
static void sort_floats(float *a, size_t n)
{
    for (size_t end = n; end > 1; end--) {
        if (end == n) {
            for (size_t i = n / 2; i-- > 0;) {
                for (size_t r = i, c; (c = 2 * r + 1) < n; r = c) {
                    if (c + 1 < n && a[c + 1] > a[c]) c++;
                    if (!(a[c] > a[r])) break;
                    float t = a[r];
                    a[r] = a[c];
                    a[c] = t;
                }
            }
        }
        float t = a[0];
        a[0] = a[end - 1];
        a[end - 1] = t;
        for (size_t r = 0, c; (c = 2 * r + 1) < end - 1; r = c) {
            if (c + 1 < end - 1 && a[c + 1] > a[c]) c++;
            if (!(a[c] > a[r])) break;
            float u = a[r];
            a[r] = a[c];
            a[c] = u;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The model                                                                */
/* ------------------------------------------------------------------------ */

struct block {
    ag_tensor ln1_w, ln1_b; /* [C], [C] */
    ag_tensor w_qkv, b_qkv; /* [C, 3C], [3C] */
    ag_tensor w_proj, b_proj; /* [C, C], [C] */
    ag_tensor ln2_w, ln2_b; /* [C], [C] */
    ag_tensor w_fc, b_fc;   /* [C, 4C], [4C] */
    ag_tensor w_fc2, b_fc2; /* [4C, C], [C] */
};

struct model {
    int L, NH, C, T, V;
    ag_tensor wte;          /* [V, C], also the output projection */
    ag_tensor wpe;          /* [T, C] */
    ag_tensor lnf_w, lnf_b; /* [C], [C] */
    struct block blocks[MAX_LAYERS];
    size_t n_floats;        /* parameter floats */
    int32_t *pos_ids;       /* [T] = 0..T-1, for sequences shorter than T */
};

enum init_kind { INIT_NORMAL, INIT_ZERO, INIT_ONE };

/* Creates one parameter; `scratch` holds at least its element count. */
static ag_status new_param(ag_context *ctx, struct model *m, size_t d0, size_t d1,
                           enum init_kind kind, uint64_t *rng, float *scratch, ag_tensor *out)
{
    size_t shape[2] = {d0, d1};
    size_t ndim = d1 == 0 ? 1 : 2;
    size_t n = d0 * (d1 == 0 ? 1 : d1);
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case INIT_NORMAL: scratch[i] = (float)(0.02 * rng_normal(rng)); break;
        case INIT_ZERO: scratch[i] = 0.0f; break;
        case INIT_ONE: scratch[i] = 1.0f; break;
        }
    }
    m->n_floats += n;
    return ag_param_new(ctx, shape, ndim, scratch, out);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        ag_status st_ = (call);                                                                    \
        if (st_ != AG_STATUS_OK) return st_;                                                       \
    } while (0)

/* Creates every parameter in a fixed order (the checkpoint relies on it). */
static ag_status model_build(ag_context *ctx, struct model *m, uint64_t init_seed, float *scratch)
{
    uint64_t rng = init_seed;
    size_t C = (size_t)m->C;
    m->n_floats = 0;
    TRY(new_param(ctx, m, (size_t)m->V, C, INIT_NORMAL, &rng, scratch, &m->wte));
    TRY(new_param(ctx, m, (size_t)m->T, C, INIT_NORMAL, &rng, scratch, &m->wpe));
    for (int l = 0; l < m->L; l++) {
        struct block *b = &m->blocks[l];
        TRY(new_param(ctx, m, C, 0, INIT_ONE, &rng, scratch, &b->ln1_w));
        TRY(new_param(ctx, m, C, 0, INIT_ZERO, &rng, scratch, &b->ln1_b));
        TRY(new_param(ctx, m, C, 3 * C, INIT_NORMAL, &rng, scratch, &b->w_qkv));
        TRY(new_param(ctx, m, 3 * C, 0, INIT_ZERO, &rng, scratch, &b->b_qkv));
        TRY(new_param(ctx, m, C, C, INIT_NORMAL, &rng, scratch, &b->w_proj));
        TRY(new_param(ctx, m, C, 0, INIT_ZERO, &rng, scratch, &b->b_proj));
        TRY(new_param(ctx, m, C, 0, INIT_ONE, &rng, scratch, &b->ln2_w));
        TRY(new_param(ctx, m, C, 0, INIT_ZERO, &rng, scratch, &b->ln2_b));
        TRY(new_param(ctx, m, C, 4 * C, INIT_NORMAL, &rng, scratch, &b->w_fc));
        TRY(new_param(ctx, m, 4 * C, 0, INIT_ZERO, &rng, scratch, &b->b_fc));
        TRY(new_param(ctx, m, 4 * C, C, INIT_NORMAL, &rng, scratch, &b->w_fc2));
        TRY(new_param(ctx, m, C, 0, INIT_ZERO, &rng, scratch, &b->b_fc2));
    }
    TRY(new_param(ctx, m, C, 0, INIT_ONE, &rng, scratch, &m->lnf_w));
    TRY(new_param(ctx, m, C, 0, INIT_ZERO, &rng, scratch, &m->lnf_b));
    return AG_STATUS_OK;
}

/*
 * Forward pass over B sequences of t <= T tokens: ids [B*t] -> logits
 * [B*t, V]; with targets [B*t], also the mean cross-entropy loss [1].
 */
static ag_status model_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                               const int32_t *targets, size_t B, size_t t, ag_tensor *logits_out,
                               ag_tensor *loss_out)
{
    size_t C = (size_t)m->C;
    ag_tensor tok, x, h, a, pos, logits;
    TRY(ag_embedding(ctx, m->wte, ids, B * t, &tok));           /* [B*t, C] */
    size_t btc[3] = {B, t, C};
    TRY(ag_reshape(ctx, tok, btc, 3, &tok));                    /* [B, t, C] */
    if (t == (size_t)m->T) {
        pos = m->wpe;                                           /* [T, C] */
    } else {
        TRY(ag_embedding(ctx, m->wpe, m->pos_ids, t, &pos));    /* [t, C] rows 0..t-1 */
    }
    TRY(ag_add(ctx, tok, pos, &x));                             /* [B, t, C] broadcast */
    for (int l = 0; l < m->L; l++) {
        const struct block *b = &m->blocks[l];
        TRY(ag_layernorm(ctx, x, b->ln1_w, b->ln1_b, &h));      /* [B, t, C] */
        TRY(ag_linear(ctx, h, b->w_qkv, &b->b_qkv, &h));        /* [B, t, 3C] */
        TRY(ag_attention(ctx, h, (size_t)m->NH, &a));           /* [B, t, C] */
        TRY(ag_linear(ctx, a, b->w_proj, &b->b_proj, &a));      /* [B, t, C] */
        TRY(ag_add(ctx, x, a, &x));                             /* residual */
        TRY(ag_layernorm(ctx, x, b->ln2_w, b->ln2_b, &h));      /* [B, t, C] */
        TRY(ag_linear(ctx, h, b->w_fc, &b->b_fc, &h));          /* [B, t, 4C] */
        TRY(ag_gelu(ctx, h, &h));                               /* [B, t, 4C] */
        TRY(ag_linear(ctx, h, b->w_fc2, &b->b_fc2, &h));        /* [B, t, C] */
        TRY(ag_add(ctx, x, h, &x));                             /* residual */
    }
    TRY(ag_layernorm(ctx, x, m->lnf_w, m->lnf_b, &x));          /* [B, t, C] */
    size_t nc[2] = {B * t, C};
    TRY(ag_reshape(ctx, x, nc, 2, &x));                         /* [B*t, C] */
    TRY(ag_matmul(ctx, x, m->wte, false, true, &logits));       /* [B*t, V], tied */
    if (logits_out != NULL) *logits_out = logits;
    if (targets != NULL && loss_out != NULL)
        TRY(ag_cross_entropy(ctx, logits, targets, B * t, loss_out)); /* [1] */
    return AG_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Data                                                                     */
/* ------------------------------------------------------------------------ */

struct dataset {
    uint8_t *tokens; /* [n] token ids (byte -> vocabulary index) */
    size_t n, n_train, n_val;
    int V;
    uint8_t vocab[256];   /* id -> byte, sorted */
    int16_t id_of[256];   /* byte -> id, -1 if absent */
};

/* Reads the whole file; returns false with a message on failure. */
static bool load_data(const char *path, struct dataset *d, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        fclose(f);
        return false;
    }
    size_t n = (size_t)st.st_size;
    d->tokens = malloc(n > 0 ? n : 1);
    if (d->tokens == NULL) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes", path, n);
        fclose(f);
        return false;
    }
    size_t got = fread(d->tokens, 1, n, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || got != n) {
        snprintf(err, errlen, "%s: read error (%zu of %zu bytes)", path, got, n);
        return false;
    }
    d->n = n;
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++) seen[d->tokens[i]] = true;
    d->V = 0;
    for (int c = 0; c < 256; c++) {
        d->id_of[c] = -1;
        if (seen[c]) {
            d->id_of[c] = (int16_t)d->V;
            d->vocab[d->V++] = (uint8_t)c;
        }
    }
    for (size_t i = 0; i < n; i++) d->tokens[i] = (uint8_t)d->id_of[d->tokens[i]];
    d->n_train = n / 10 * 9 + (n % 10) * 9 / 10; /* floor(0.9 n) without overflow */
    d->n_val = n - d->n_train;
    return true;
}

/* B random windows of T+1 tokens from tokens[0..n]: ids and next-token targets. */
static void get_batch(const uint8_t *tokens, size_t n, size_t B, size_t T, uint64_t *rng,
                      int32_t *ids, int32_t *targets)
{
    size_t starts = n - T; /* window start in [0, n - T - 1] */
    for (size_t b = 0; b < B; b++) {
        size_t s = (size_t)(rng_next(rng) % starts);
        for (size_t t = 0; t < T; t++) {
            ids[b * T + t] = tokens[s + t];
            targets[b * T + t] = tokens[s + t + 1];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Checkpoint user blob (little-endian)                                     */
/* ------------------------------------------------------------------------ */

static const uint8_t BLOB_MAGIC[8] = {'A', 'G', 'T', 'R', 'A', 'I', 'N', '\0'};
#define BLOB_VERSION 1u
#define BLOB_HEADER (8 + 4 + 6 * 4 + 4 * 8) /* then V vocabulary bytes */
#define BLOB_MAX (BLOB_HEADER + 256)

struct train_state {
    uint64_t step;       /* steps done */
    uint64_t rng;        /* training batch RNG state */
    uint64_t seed;       /* the run's --seed (evaluation batches) */
    uint64_t sample_seed;
};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t blob_write(uint8_t *buf, const struct config *cfg, const struct dataset *d,
                         const struct train_state *s)
{
    uint8_t *p = buf;
    memcpy(p, BLOB_MAGIC, 8);
    p += 8;
    put_u32(p, BLOB_VERSION);
    p += 4;
    const uint32_t dims[6] = {(uint32_t)cfg->n_layer, (uint32_t)cfg->n_head,
                              (uint32_t)cfg->n_embd, (uint32_t)cfg->seq_len, (uint32_t)d->V,
                              (uint32_t)cfg->batch};
    for (int i = 0; i < 6; i++, p += 4) put_u32(p, dims[i]);
    put_u64(p, s->step);
    put_u64(p + 8, s->rng);
    put_u64(p + 16, s->seed);
    put_u64(p + 24, s->sample_seed);
    p += 32;
    memcpy(p, d->vocab, (size_t)d->V);
    p += d->V;
    return (size_t)(p - buf);
}

/* Checks a loaded blob against this run; fills *s or explains the mismatch. */
static bool blob_read(const uint8_t *buf, size_t len, const struct config *cfg,
                      const struct dataset *d, struct train_state *s, uint32_t *saved_batch,
                      char *err, size_t errlen)
{
    if (len < BLOB_HEADER || memcmp(buf, BLOB_MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a train_full checkpoint (user data of %zu bytes, bad magic)",
                 len);
        return false;
    }
    uint32_t version = get_u32(buf + 8);
    if (version != BLOB_VERSION) {
        snprintf(err, errlen, "train_full state version %u, this program reads %u", version,
                 BLOB_VERSION);
        return false;
    }
    static const char *const names[5] = {"L (layers)", "NH (heads)", "C (channels)",
                                         "T (context)", "V (vocabulary size)"};
    const uint32_t want[5] = {(uint32_t)cfg->n_layer, (uint32_t)cfg->n_head,
                              (uint32_t)cfg->n_embd, (uint32_t)cfg->seq_len, (uint32_t)d->V};
    for (int i = 0; i < 5; i++) {
        uint32_t have = get_u32(buf + 12 + 4 * i);
        if (have != want[i]) {
            snprintf(err, errlen,
                     "checkpoint has %s = %u but this run has %u (preset %s, data vocabulary)",
                     names[i], have, want[i], cfg->preset);
            return false;
        }
    }
    *saved_batch = get_u32(buf + 12 + 20);
    if (len != BLOB_HEADER + (size_t)d->V) {
        snprintf(err, errlen, "train_full state has %zu bytes, expected %zu", len,
                 (size_t)BLOB_HEADER + (size_t)d->V);
        return false;
    }
    const uint8_t *vocab = buf + BLOB_HEADER;
    for (int i = 0; i < d->V; i++) {
        if (vocab[i] != d->vocab[i]) {
            snprintf(err, errlen,
                     "vocabulary differs at id %d: checkpoint byte 0x%02x, data byte 0x%02x "
                     "(trained on another text?)",
                     i, vocab[i], d->vocab[i]);
            return false;
        }
    }
    const uint8_t *p = buf + 12 + 24;
    s->step = get_u64(p);
    s->rng = get_u64(p + 8);
    s->seed = get_u64(p + 16);
    s->sample_seed = get_u64(p + 24);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Training                                                                 */
/* ------------------------------------------------------------------------ */

struct trainer {
    ag_context *ctx;
    const struct config *cfg;
    struct dataset *data;
    struct model model;
    size_t B, T, V;
    int32_t *ids;      /* [B*T] */
    int32_t *targets;  /* [B*T] */
    float *logits;     /* [T*V]: one sampled sequence's logits */
    double *probs;     /* [V] */
    int32_t *window;   /* [T]: sampling context */
    float *step_ms;    /* [steps this run] */
    float *init_buf;   /* largest parameter, for initialisation */
    bool tty;          /* stdout is a terminal: one updating progress line */
    bool line_open;    /* that line is drawn and not yet ended */
};

/* Ends the terminal's progress line, if drawn, before other output. */
static void end_line(struct trainer *tr)
{
    if (tr->line_open) fputc('\n', stdout);
    tr->line_open = false;
}

/* Prints a failed call and returns the exit status it maps to. */
static int report(struct trainer *tr, const char *what, ag_status st)
{
    end_line(tr);
    fflush(stdout);
    if (st == AG_STATUS_OUT_OF_MEMORY && tr->cfg->arena_limit_mb == 0) {
        fprintf(stderr, "train_full: %s: the activation arena could not grow: %s\n", what,
                ag_context_last_error(tr->ctx));
        return EXIT_ARENA;
    }
    if (st == AG_STATUS_OUT_OF_MEMORY) {
        fprintf(stderr,
                "train_full: %s: the activation arena cap (--arena-limit-mb %ld) is too small "
                "for preset %s with batch %d: %s\n",
                what, tr->cfg->arena_limit_mb, tr->cfg->preset, tr->cfg->batch,
                ag_context_last_error(tr->ctx));
        return EXIT_ARENA;
    }
    fprintf(stderr, "train_full: %s failed: %s: %s\n", what, ag_status_str(st),
            ag_context_last_error(tr->ctx));
    return EXIT_LIBRARY;
}

/* Mean validation loss over eval_iters batches (same batches every time). */
static ag_status evaluate(struct trainer *tr, uint64_t seed, double *out)
{
    uint64_t rng = derive_seed(seed, STREAM_EVAL);
    const struct dataset *d = tr->data;
    double sum = 0.0;
    TRY(ag_set_grad_enabled(tr->ctx, false));
    for (long i = 0; i < tr->cfg->eval_iters; i++) {
        get_batch(d->tokens + d->n_train, d->n_val, tr->B, tr->T, &rng, tr->ids, tr->targets);
        ag_tensor loss;
        float v = 0.0f;
        TRY(ag_reset(tr->ctx));
        TRY(model_forward(tr->ctx, &tr->model, tr->ids, tr->targets, tr->B, tr->T, NULL, &loss));
        TRY(ag_tensor_item(tr->ctx, loss, &v));
        sum += v;
    }
    TRY(ag_reset(tr->ctx));
    TRY(ag_set_grad_enabled(tr->ctx, true));
    *out = sum / (double)tr->cfg->eval_iters;
    return AG_STATUS_OK;
}

/* Generates n characters after the prompt, written to stdout as they come. */
static ag_status sample(struct trainer *tr, uint64_t seed, const char *prompt, long n)
{
    const struct dataset *d = tr->data;
    uint64_t rng = seed;
    size_t len = 0, V = tr->V, T = tr->T;
    size_t plen = strlen(prompt);
    const char *p = plen > T ? prompt + (plen - T) : prompt;
    for (; *p != '\0'; p++) tr->window[len++] = d->id_of[(unsigned char)*p];
    fputs(prompt, stdout);
    TRY(ag_set_grad_enabled(tr->ctx, false));
    for (long i = 0; i < n; i++) {
        ag_tensor logits;
        TRY(ag_reset(tr->ctx));
        TRY(model_forward(tr->ctx, &tr->model, tr->window, NULL, 1, len, &logits, NULL));
        TRY(ag_tensor_read(tr->ctx, logits, tr->logits, len * V)); /* [len, V] */
        const float *row = tr->logits + (len - 1) * V;             /* last position */
        float max = row[0];
        for (size_t v = 1; v < V; v++) max = row[v] > max ? row[v] : max;
        double total = 0.0;
        for (size_t v = 0; v < V; v++) {
            tr->probs[v] = exp((double)(row[v] - max) / tr->cfg->temperature);
            total += tr->probs[v];
        }
        double u = rng_uniform(&rng) * total;
        size_t next = V - 1;
        for (size_t v = 0; v < V; v++) {
            u -= tr->probs[v];
            if (u < 0.0) {
                next = v;
                break;
            }
        }
        if (len == T) {
            memmove(tr->window, tr->window + 1, (T - 1) * sizeof *tr->window);
            len--;
        }
        tr->window[len++] = (int32_t)next;
        putchar(d->vocab[next]);
    }
    TRY(ag_reset(tr->ctx));
    TRY(ag_set_grad_enabled(tr->ctx, true));
    return AG_STATUS_OK;
}

/* Saves a checkpoint; returns 0 or an exit status. */
static int save(struct trainer *tr, const struct train_state *s)
{
    uint8_t blob[BLOB_MAX];
    size_t len = blob_write(blob, tr->cfg, tr->data, s);
    ag_status st = ag_checkpoint_save(tr->ctx, tr->cfg->save, blob, len);
    if (st != AG_STATUS_OK) return report(tr, "ag_checkpoint_save", st);
    end_line(tr);
    printf("checkpoint step=%" PRIu64 " saved %s\n", s->step, tr->cfg->save);
    fflush(stdout);
    return 0;
}

static int run(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    struct dataset *d = tr->data;
    ag_context *ctx = tr->ctx;
    ag_status st;

    /* Model and optimizer. */
    tr->model.L = cfg->n_layer;
    tr->model.NH = cfg->n_head;
    tr->model.C = cfg->n_embd;
    tr->model.T = cfg->seq_len;
    tr->model.V = d->V;
    for (size_t t = 0; t < tr->T; t++) tr->model.pos_ids[t] = (int32_t)t;
    st = model_build(ctx, &tr->model, derive_seed(cfg->seed, STREAM_INIT), tr->init_buf);
    if (st != AG_STATUS_OK) return report(tr, "creating the parameters", st);
    st = ag_optimizer_adamw(ctx, cfg->lr, 0.9f, 0.999f, 1e-8f, 0.0f);
    if (st != AG_STATUS_OK) return report(tr, "ag_optimizer_adamw", st);
    if (cfg->arena_limit_mb > 0) {
        st = ag_set_arena_limit(ctx, (size_t)cfg->arena_limit_mb << 20);
        if (st != AG_STATUS_OK) return report(tr, "ag_set_arena_limit", st);
    }

    struct train_state s = {
        .step = 0,
        .rng = derive_seed(cfg->seed, STREAM_TRAIN),
        .seed = cfg->seed,
        .sample_seed = derive_seed(cfg->seed, STREAM_SAMPLE),
    };
    if (cfg->resume != NULL) {
        uint8_t blob[BLOB_MAX];
        size_t len = 0;
        char why[256];
        uint32_t saved_batch = 0;
        st = ag_checkpoint_load(ctx, cfg->resume, blob, sizeof blob, &len);
        if (st != AG_STATUS_OK) {
            fflush(stdout);
            const char *why_lib = ag_context_last_error(ctx);
            fprintf(stderr, "train_full: --resume %s: checkpoint refused: %s\n", cfg->resume,
                    why_lib[0] != '\0' ? why_lib : ag_status_str(st));
            if (st == AG_STATUS_CHECKPOINT_MISMATCH)
                fprintf(stderr, "train_full: (was it saved with another --preset or data?)\n");
            return EXIT_CHECKPOINT;
        }
        if (!blob_read(blob, len, cfg, d, &s, &saved_batch, why, sizeof why)) {
            fflush(stdout);
            fprintf(stderr, "train_full: --resume %s: checkpoint refused: %s\n", cfg->resume, why);
            return EXIT_CHECKPOINT;
        }
        printf("resume: %s at step %" PRIu64 " (seed %" PRIu64 ")\n", cfg->resume, s.step, s.seed);
        if (saved_batch != (uint32_t)cfg->batch)
            printf("resume: note: saved with batch %u, continuing with batch %d\n", saved_batch,
                   cfg->batch);
        if (s.step >= (uint64_t)cfg->iters)
            printf("resume: already at step %" PRIu64 " >= --iters %ld, nothing to train\n",
                   s.step, cfg->iters);
    }
    printf("model: preset=%s L=%d NH=%d C=%d T=%d B=%d V=%d params=%zu (%.2f MiB of floats)\n",
           cfg->preset, cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->batch, d->V,
           tr->model.n_floats, (double)tr->model.n_floats * 4.0 / 1048576.0);
    printf("train: iters=%ld lr=%g AdamW(0.9, 0.999, eps 1e-8, wd 0) clip=%.1f seed=%" PRIu64
           " eval every %ld steps x %ld batches%s%s\n",
           cfg->iters, (double)cfg->lr, (double)GRAD_CLIP, s.seed, cfg->eval_every,
           cfg->eval_iters, cfg->save ? ", save to " : "", cfg->save ? cfg->save : "");
    fflush(stdout);

    /* Training loop: no malloc from here to the summary. */
    const uint64_t first = s.step;
    const uint64_t last = (uint64_t)cfg->iters > first ? (uint64_t)cfg->iters : first;
    const double tokens_per_step = (double)(tr->B * tr->T);
    float recent[LOSS_WINDOW];
    size_t n_recent = 0;
    size_t local = 0;
    double window_ms = 0.0, total_ms = 0.0, last_draw = 0.0;
    size_t window_steps = 0;
    long rss_warm = -1;
    double val_loss = NAN;
    uint64_t evaluated_at = UINT64_MAX, saved_at = UINT64_MAX;
    size_t skipped = 0;
    ag_memory_figures mem;
    const double t_start = now_ms();

    for (uint64_t step = first + 1; step <= last; step++) {
        double t0 = now_ms();
        get_batch(d->tokens, d->n_train, tr->B, tr->T, &s.rng, tr->ids, tr->targets);
        ag_tensor loss;
        float loss_value = 0.0f, norm = 0.0f;
        const char *what = "ag_reset";
        st = ag_reset(ctx);
        if (st == AG_STATUS_OK) {
            what = "forward";
            st = model_forward(ctx, &tr->model, tr->ids, tr->targets, tr->B, tr->T, NULL, &loss);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_tensor_item";
            st = ag_tensor_item(ctx, loss, &loss_value);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_backward";
            st = ag_backward(ctx, loss);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_clip_grad_norm";
            st = ag_clip_grad_norm(ctx, GRAD_CLIP, &norm);
            if (st == AG_STATUS_OK) {
                what = "ag_optimizer_step";
                st = ag_optimizer_step(ctx);
            }
            if (st == AG_STATUS_NON_FINITE) {
                /* The library skipped the update; parameters are unchanged. */
                end_line(tr);
                fflush(stdout);
                fprintf(stderr, "train_full: step %" PRIu64 ": %s: %s (update skipped)\n", step,
                        ag_status_str(st), ag_context_last_error(ctx));
                skipped++;
                st = AG_STATUS_OK;
            }
        }
        if (st == AG_STATUS_OK) {
            what = "ag_zero_grad";
            st = ag_zero_grad(ctx);
        }
        if (st != AG_STATUS_OK) {
            char where[64];
            snprintf(where, sizeof where, "step %" PRIu64 ": %s", step, what);
            return report(tr, where, st);
        }
        double ms = now_ms() - t0;
        s.step = step;

        tr->step_ms[local++] = (float)ms;
        recent[n_recent++ % LOSS_WINDOW] = loss_value;
        window_ms += ms;
        total_ms += ms;
        window_steps++;
        ag_memory_stats(ctx, &mem);

        if (local == WARMUP_STEPS) {
            rss_warm = rss_kb();
            end_line(tr);
            printf("memory step=%" PRIu64 " arena_high_water_bytes=%" PRIu64
                   " arena_reserved_bytes=%" PRIu64 " tape_capacity=%" PRIu64
                   " rss_kb=%ld\n",
                   step, mem.arena_high_water_bytes, mem.arena_reserved_bytes, mem.tape_capacity,
                   rss_warm);
            fflush(stdout);
        }

        const bool eval_now = step % (uint64_t)cfg->eval_every == 0 || step == last;
        const bool log_now = tr->tty ? (now_ms() - last_draw >= 100.0 || eval_now || local == 1)
                                     : (local == 1 || step % (uint64_t)cfg->log_every == 0 ||
                                        step == last);
        if (log_now) {
            double avg = window_ms / (double)window_steps;
            char eta[32];
            format_duration(eta, sizeof eta, (double)(last - step) * (total_ms / (double)local));
            printf("%sstep %" PRIu64 "/%" PRIu64 " loss %.6f | %.2f ms/step | %.0f tok/s | "
                   "eta %s | arena hw %.2f MiB%s",
                   tr->tty ? "\r\033[K" : "", step, last, (double)loss_value, avg,
                   tokens_per_step * 1000.0 / avg, eta,
                   (double)mem.arena_high_water_bytes / 1048576.0, tr->tty ? "" : "\n");
            fflush(stdout);
            tr->line_open = tr->tty;
            window_ms = 0.0;
            window_steps = 0;
            last_draw = now_ms();
        }

        if (eval_now) {
            double te = now_ms();
            st = evaluate(tr, s.seed, &val_loss);
            if (st != AG_STATUS_OK) return report(tr, "evaluation", st);
            evaluated_at = step;
            end_line(tr);
            printf("eval step %" PRIu64 " val_loss %.6f (%ld batches, %.0f ms)\n", step, val_loss,
                   cfg->eval_iters, now_ms() - te);
            fflush(stdout);
            if (cfg->save != NULL) {
                int rc = save(tr, &s);
                if (rc != 0) return rc;
                saved_at = step;
            }
        }
    }
    end_line(tr);
    const double train_ms = now_ms() - t_start;

    /* A run that trained nothing (resumed at --iters) still evaluates. */
    if (evaluated_at != s.step) {
        st = evaluate(tr, s.seed, &val_loss);
        if (st != AG_STATUS_OK) return report(tr, "evaluation", st);
        printf("eval step %" PRIu64 " val_loss %.6f (%ld batches)\n", s.step, val_loss,
               cfg->eval_iters);
    }
    if (cfg->save != NULL && saved_at != s.step) {
        int rc = save(tr, &s);
        if (rc != 0) return rc;
    }
    char wall[32];
    format_duration(wall, sizeof wall, train_ms);
    printf("done: %zu steps in %s (%.1f s)%s\n", local, wall, train_ms / 1000.0,
           skipped ? " (some updates skipped: non-finite gradients)" : "");

    /* Sample. */
    const char *prompt = cfg->prompt != NULL && cfg->prompt[0] != '\0' ? cfg->prompt : "\n";
    if (d->id_of['\n'] < 0 && prompt[0] == '\n' && prompt[1] == '\0') {
        static char first_byte[2];
        first_byte[0] = (char)d->vocab[0];
        prompt = first_byte;
    }
    printf("sample (%ld chars, temperature %g, seed %" PRIu64 "):\n", cfg->sample_chars,
           (double)cfg->temperature, s.sample_seed);
    printf("----\n");
    st = sample(tr, s.sample_seed, prompt, cfg->sample_chars);
    if (st != AG_STATUS_OK) return report(tr, "sampling", st);
    printf("\n----\n");

    /* Summary (the last line). */
    size_t n_loss = n_recent < LOSS_WINDOW ? n_recent : LOSS_WINDOW;
    double mean_loss = 0.0;
    for (size_t i = 0; i < n_loss; i++) mean_loss += recent[i];
    mean_loss = n_loss > 0 ? mean_loss / (double)n_loss : NAN;
    size_t skip = local / 2 < WARMUP_STEPS ? local / 2 : WARMUP_STEPS;
    double median = NAN;
    if (local > skip) {
        size_t n = local - skip;
        sort_floats(tr->step_ms + skip, n);
        median = n % 2 ? tr->step_ms[skip + n / 2]
                       : 0.5 * ((double)tr->step_ms[skip + n / 2 - 1] + tr->step_ms[skip + n / 2]);
    }
    long rss_end = rss_kb();
    if (rss_warm < 0) rss_warm = rss_end;
    ag_memory_stats(ctx, &mem);
    printf("summary preset=%s iters=%" PRIu64 " loss=%.6f val_loss=%.6f ms_per_step=%.4f "
           "tok_per_s=%.0f rss_warm_kb=%ld rss_end_kb=%ld arena_high_water_bytes=%" PRIu64
           " params=%zu\n",
           cfg->preset, s.step, mean_loss, val_loss, median,
           median > 0.0 ? tokens_per_step * 1000.0 / median : 0.0, rss_warm, rss_end,
           mem.arena_high_water_bytes, tr->model.n_floats);
    fflush(stdout);
    return 0;
}

#ifndef TRAIN_FULL_NO_MAIN
int main(int argc, char **argv)
{
    struct config cfg;
    char err[512];
    if (parse_args(argc, argv, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "train_full: %s\n(run 'train_full --help' for usage)\n", err);
        return EXIT_USAGE;
    }
    if (cfg.help) {
        usage(stdout);
        return 0;
    }

    /* Data: --data, else data/shakespeare.txt, else the tiny shared corpus. */
    static const char *const DEFAULT_DATA = "data/shakespeare.txt";
    static const char *const FALLBACK_DATA = "../shared/data/shakespeare_tiny.txt";
    const char *path = cfg.data;
    const char *origin = "--data";
    if (path == NULL) {
        path = DEFAULT_DATA;
        origin = "default";
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "train_full: %s not found (run 'make data'); using %s\n", DEFAULT_DATA,
                    FALLBACK_DATA);
            path = FALLBACK_DATA;
            origin = "fallback";
        }
    }
    struct dataset data;
    memset(&data, 0, sizeof data);
    if (!load_data(path, &data, err, sizeof err)) {
        fprintf(stderr, "train_full: --data: %s\n", err);
        free(data.tokens);
        return EXIT_USAGE;
    }
    size_t T = (size_t)cfg.seq_len;
    if (data.n_train < T + 1 || data.n_val < T + 1) {
        fprintf(stderr,
                "train_full: --data: %s has %zu bytes: too short for preset %s (T=%zu): the "
                "first 90%% (%zu bytes) and the last 10%% (%zu bytes) each need at least T+1 = "
                "%zu bytes\n",
                path, data.n, cfg.preset, T, data.n_train, data.n_val, T + 1);
        free(data.tokens);
        return EXIT_USAGE;
    }
    if (cfg.prompt != NULL) {
        for (const char *p = cfg.prompt; *p != '\0'; p++) {
            if (data.id_of[(unsigned char)*p] < 0) {
                fprintf(stderr,
                        "train_full: --prompt: byte 0x%02x ('%c') at offset %td is not in the "
                        "vocabulary of %s\n",
                        (unsigned char)*p, isprint((unsigned char)*p) ? *p : '?', p - cfg.prompt,
                        path);
                free(data.tokens);
                return EXIT_USAGE;
            }
        }
    }
    if (cfg.save != NULL) {
        /* Refuse an unwritable folder now rather than after training. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", cfg.save);
        char *slash = strrchr(dir, '/');
        if (slash == NULL) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        struct stat st;
        if (stat(cfg.save, &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, "train_full: --save: %s is a folder, not a file path\n", cfg.save);
            free(data.tokens);
            return EXIT_USAGE;
        }
        if (access(dir, W_OK) != 0) {
            fprintf(stderr, "train_full: --save: %s: folder '%s' is not writable: %s\n", cfg.save,
                    dir, strerror(errno));
            free(data.tokens);
            return EXIT_USAGE;
        }
    }
    printf("arenagrad %s | train_full\n", ag_version());
    printf("data: %s (%s) %zu bytes, V=%d distinct bytes, train %zu / val %zu\n", path, origin,
           data.n, data.V, data.n_train, data.n_val);

    /* Every host buffer, allocated once. */
    struct trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.cfg = &cfg;
    tr.data = &data;
    tr.B = (size_t)cfg.batch;
    tr.T = T;
    tr.V = (size_t)data.V;
    tr.tty = isatty(STDOUT_FILENO) != 0;
    size_t C = (size_t)cfg.n_embd;
    size_t biggest = 4 * C * C;
    if (tr.V * C > biggest) biggest = tr.V * C;
    if (T * C > biggest) biggest = T * C;
    size_t steps = (size_t)cfg.iters; /* upper bound on the steps of this run */
    tr.ids = malloc(tr.B * T * sizeof *tr.ids);
    tr.targets = malloc(tr.B * T * sizeof *tr.targets);
    tr.logits = malloc(T * tr.V * sizeof *tr.logits);
    tr.probs = malloc(tr.V * sizeof *tr.probs);
    tr.window = malloc(T * sizeof *tr.window);
    tr.step_ms = malloc(steps * sizeof *tr.step_ms);
    tr.init_buf = malloc(biggest * sizeof *tr.init_buf);
    tr.model.pos_ids = malloc(T * sizeof *tr.model.pos_ids);
    int rc;
    if (!tr.ids || !tr.targets || !tr.logits || !tr.probs || !tr.window || !tr.step_ms ||
        !tr.init_buf || !tr.model.pos_ids) {
        fprintf(stderr, "train_full: out of memory for host buffers\n");
        rc = EXIT_LIBRARY;
    } else {
        ag_status st = ag_context_new(&tr.ctx);
        if (st != AG_STATUS_OK) {
            fprintf(stderr, "train_full: ag_context_new failed: %s\n", ag_status_str(st));
            rc = EXIT_LIBRARY;
        } else {
            rc = run(&tr);
        }
    }
    ag_context_free(&tr.ctx);
    free(tr.ids);
    free(tr.targets);
    free(tr.logits);
    free(tr.probs);
    free(tr.window);
    free(tr.step_ms);
    free(tr.init_buf);
    free(tr.model.pos_ids);
    free(data.tokens);
    return rc;
}
#else
/* A harness that includes this file only calls parse_args; keep the rest used. */
void train_full_driver_unused(void);
void train_full_driver_unused(void)
{
    (void)run;
    (void)load_data;
    (void)usage;
}
#endif /* TRAIN_FULL_NO_MAIN */

/*
 * args.c: the command line of train_full.
 *
 * parse_args does no I/O and never exits, so a fuzz harness can compile this
 * unit alone and call it with arbitrary argv.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_full.h"

struct preset {
    const char *name;
    int n_layer, n_head, n_embd, seq_len, batch, vocab;
};

/* vocab 0: the characters' (the distinct bytes of the text). */
static const struct preset PRESETS[] = {
    /* name      L  NH    C     T  B      V */
    {"tiny", 1, 2, 32, 32, 8, 0},
    {"small", 4, 4, 128, 64, 16, 0},
    {"medium", 6, 6, 192, 128, 16, 0},
    {"gpt2", 12, 12, 768, 1024, 4, 50257}, /* GPT-2 small, 124M parameters */
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

static const struct preset *find_preset(const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

bool is_shard_pattern(const char *pattern)
{
    size_t n = strlen(pattern);
    return n >= 4 && strcmp(pattern + n - 4, ".bin") == 0;
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

/* Parses a finite float, > 0 (or >= 0 with allow_zero). */
static bool parse_float(const char *flag, const char *s, bool allow_zero, float *out, char *err,
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
    if (!isfinite(v) || !isfinite(f) || (allow_zero ? !(f >= 0.0f) : !(f > 0.0f))) {
        snprintf(err, errlen, "%s: '%s' must be a finite number %s 0", flag, s,
                 allow_zero ? "of at least" : "greater than");
        return false;
    }
    *out = f == 0.0f ? 0.0f : f; /* no -0 */
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
    bool min_lr_given = false;
    cfg->iters = 2000;
    cfg->accum = 1;
    cfg->overlap = true;
    cfg->bucket_kb = 1024;
    cfg->lr = 1e-3f;
    cfg->schedule = SCHEDULE_CONSTANT;
    cfg->seed = 1337;
    cfg->log_every = 50;
    cfg->eval_every = 250;
    cfg->eval_iters = 10;
    cfg->sample_chars = 200;
    cfg->tokenizer_dir = GPT2_TOKENIZER_DIR;
    cfg->temperature = 1.0f;
    cfg->recompute = -1;
    /* Model flags: 0 (or NAN) until given; the preset and --arch fill the rest. */
    cfg->given.rope_theta = NAN;
    cfg->given.norm_eps = NAN;

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
        /* A flag without a value refuses "--flag=x". */
#define NO_VALUE(flag)                                                        \
    do {                                                                      \
        if (inline_val != NULL) {                                             \
            snprintf(err, errlen, "%s takes no value (got '%s')", flag, arg); \
            return EXIT_USAGE;                                                \
        }                                                                     \
    } while (0)

        const char *v = NULL;
        if (IS("--help") || IS("-h")) {
            NO_VALUE("--help");
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
                snprintf(err, errlen,
                         "--preset: unknown preset '%s' (choose tiny, small, medium or gpt2)", v);
                return EXIT_USAGE;
            }
        } else if (IS("--arch")) {
            VALUE("--arch", v);
            if (strcmp(v, "gpt2") == 0) cfg->arch = ARCH_GPT2;
            else if (strcmp(v, "llama") == 0) cfg->arch = ARCH_LLAMA;
            else {
                snprintf(err, errlen, "--arch: unknown architecture '%s' (choose gpt2 or llama)",
                         v);
                return EXIT_USAGE;
            }
            cfg->given.arch = true;
        } else if (IS("--layers")) {
            VALUE("--layers", v);
            if (!parse_long("--layers", v, 1, MAX_LAYERS, &cfg->given.layers, err, errlen)) return EXIT_USAGE;
        } else if (IS("--heads")) {
            VALUE("--heads", v);
            if (!parse_long("--heads", v, 1, MAX_HEADS, &cfg->given.heads, err, errlen)) return EXIT_USAGE;
        } else if (IS("--kv-heads")) {
            VALUE("--kv-heads", v);
            if (!parse_long("--kv-heads", v, 1, MAX_HEADS, &cfg->given.kv_heads, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--embd")) {
            VALUE("--embd", v);
            if (!parse_long("--embd", v, 1, MAX_EMBD, &cfg->given.embd, err, errlen)) return EXIT_USAGE;
        } else if (IS("--ffn-hidden")) {
            VALUE("--ffn-hidden", v);
            if (!parse_long("--ffn-hidden", v, 1, MAX_FFN, &cfg->given.ffn, err, errlen)) return EXIT_USAGE;
        } else if (IS("--context")) {
            VALUE("--context", v);
            if (!parse_long("--context", v, 1, MAX_CONTEXT, &cfg->given.context, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--vocab")) {
            VALUE("--vocab", v);
            if (!parse_long("--vocab", v, 1, MAX_VOCAB, &cfg->given.vocab, err, errlen)) return EXIT_USAGE;
        } else if (IS("--rope-theta")) {
            VALUE("--rope-theta", v);
            if (!parse_float("--rope-theta", v, false, &cfg->given.rope_theta, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--norm-eps")) {
            VALUE("--norm-eps", v);
            if (!parse_float("--norm-eps", v, false, &cfg->given.norm_eps, err, errlen)) return EXIT_USAGE;
        } else if (IS("--tie-embeddings")) {
            NO_VALUE("--tie-embeddings");
            cfg->given.tie = true;
        } else if (IS("--iters")) {
            VALUE("--iters", v);
            if (!parse_long("--iters", v, 1, MAX_ITERS, &cfg->iters, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--batch")) {
            VALUE("--batch", v);
            if (!parse_long("--batch", v, 1, MAX_BATCH, &batch, err, errlen)) return EXIT_USAGE;
        } else if (IS("--accum")) {
            VALUE("--accum", v);
            if (!parse_long("--accum", v, 1, MAX_ACCUM, &cfg->accum, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--allreduce")) {
            VALUE("--allreduce", v);
            if (strcmp(v, "overlap") == 0) cfg->overlap = true;
            else if (strcmp(v, "blocking") == 0) cfg->overlap = false;
            else {
                snprintf(err, errlen,
                         "--allreduce: unknown mode '%s' (choose overlap or blocking)", v);
                return EXIT_USAGE;
            }
        } else if (IS("--bucket-kb")) {
            VALUE("--bucket-kb", v);
            if (!parse_long("--bucket-kb", v, 0, 1L << 20, &cfg->bucket_kb, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--zero")) {
            VALUE("--zero", v);
            if (!parse_long("--zero", v, 0, 1, &cfg->zero, err, errlen)) return EXIT_USAGE;
        } else if (IS("--lr")) {
            VALUE("--lr", v);
            if (!parse_float("--lr", v, false, &cfg->lr, err, errlen)) return EXIT_USAGE;
        } else if (IS("--min-lr")) {
            VALUE("--min-lr", v);
            if (!parse_float("--min-lr", v, true, &cfg->min_lr, err, errlen)) return EXIT_USAGE;
            min_lr_given = true;
        } else if (IS("--lr-schedule")) {
            VALUE("--lr-schedule", v);
            if (strcmp(v, "constant") == 0) cfg->schedule = SCHEDULE_CONSTANT;
            else if (strcmp(v, "cosine") == 0) cfg->schedule = SCHEDULE_COSINE;
            else if (strcmp(v, "linear") == 0) cfg->schedule = SCHEDULE_LINEAR;
            else {
                snprintf(err, errlen,
                         "--lr-schedule: unknown schedule '%s' (choose constant, cosine or "
                         "linear)",
                         v);
                return EXIT_USAGE;
            }
        } else if (IS("--warmup")) {
            VALUE("--warmup", v);
            if (!parse_long("--warmup", v, 0, MAX_ITERS, &cfg->warmup, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--decay-steps")) {
            VALUE("--decay-steps", v);
            if (!parse_long("--decay-steps", v, 1, MAX_ITERS, &cfg->decay_steps, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--seed")) {
            VALUE("--seed", v);
            if (!parse_u64("--seed", v, &cfg->seed, err, errlen)) return EXIT_USAGE;
            cfg->seed_given = true;
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
            if (!parse_long("--sample-chars", v, 0, MAX_ITERS, &cfg->sample_chars, err, errlen))
                return EXIT_USAGE;
            cfg->sample_chars_given = true;
        } else if (IS("--temperature")) {
            VALUE("--temperature", v);
            if (!parse_float("--temperature", v, false, &cfg->temperature, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--top-k")) {
            VALUE("--top-k", v);
            if (!parse_long("--top-k", v, 0, 256, &cfg->top_k, err, errlen)) return EXIT_USAGE;
        } else if (IS("--tokenizer")) {
            VALUE("--tokenizer", v);
            if (v[0] == '\0') {
                snprintf(err, errlen, "--tokenizer: empty path");
                return EXIT_USAGE;
            }
            if (strlen(v) >= PATH_CAP - 64) {
                snprintf(err, errlen, "--tokenizer: path longer than %d bytes", PATH_CAP - 64);
                return EXIT_USAGE;
            }
            cfg->tokenizer_dir = v;
            cfg->tokenizer_given = true;
        } else if (IS("--prompt")) {
            VALUE("--prompt", v);
            cfg->prompt = v;
        } else if (IS("--weight-decay")) {
            VALUE("--weight-decay", v);
            if (!parse_float("--weight-decay", v, true, &cfg->weight_decay, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--export") || IS("--init-from")) {
            const char *flag = IS("--export") ? "--export" : "--init-from";
            VALUE(flag, v);
            if (v[0] == '\0') {
                snprintf(err, errlen, "%s: empty path", flag);
                return EXIT_USAGE;
            }
            if (flag[2] == 'e') cfg->export_path = v;
            else cfg->init_from = v;
        } else if (IS("--sample-only")) {
            NO_VALUE("--sample-only");
            cfg->sample_only = true;
        } else if (IS("--score")) {
            NO_VALUE("--score");
            cfg->score = true;
        } else if (IS("--score-grads")) {
            VALUE("--score-grads", v);
            if (v[0] == '\0') {
                snprintf(err, errlen, "--score-grads: empty path");
                return EXIT_USAGE;
            }
            cfg->score_grads = v;
        } else if (IS("--no-capture")) {
            NO_VALUE("--no-capture");
            cfg->no_capture = true;
        } else if (IS("--data") || IS("--val") || IS("--save") || IS("--resume") ||
                   IS("--out")) {
            char flag[16];
            snprintf(flag, sizeof flag, "%.*s", (int)name_len, arg);
            VALUE(flag, v);
            if (v[0] == '\0') {
                snprintf(err, errlen, "%s: empty path", flag);
                return EXIT_USAGE;
            }
            if (strlen(v) >= PATH_CAP - 64) {
                snprintf(err, errlen, "%s: path longer than %d bytes", flag, PATH_CAP - 64);
                return EXIT_USAGE;
            }
            switch (flag[2]) {
            case 'd': cfg->data = v; break;
            case 'v': cfg->val = v; break;
            case 's': cfg->save = v; break;
            case 'r': cfg->resume = v; break;
            default: cfg->out = v; break;
            }
        } else if (IS("--arena-limit-mb")) {
            VALUE("--arena-limit-mb", v);
            long max_mb = (long)((SIZE_MAX >> 20) < (size_t)LONG_MAX ? (SIZE_MAX >> 20) : LONG_MAX);
            if (!parse_long("--arena-limit-mb", v, 1, max_mb, &cfg->arena_limit_mb, err, errlen))
                return EXIT_USAGE;
        } else if (IS("--recompute")) {
            VALUE("--recompute", v);
            if (strcmp(v, "none") == 0) cfg->recompute = (int)AG_RECOMPUTE_NONE;
            else if (strcmp(v, "all") == 0) cfg->recompute = (int)AG_RECOMPUTE_ALL;
            else if (strcmp(v, "auto") == 0) cfg->recompute = (int)AG_RECOMPUTE_AUTO;
            else {
                snprintf(err, errlen,
                         "--recompute: unknown policy '%s' (choose none, all or auto)", v);
                return EXIT_USAGE;
            }
        } else if (arg[0] == '-') {
            snprintf(err, errlen, "unknown option '%s'", arg);
            return EXIT_USAGE;
        } else {
            snprintf(err, errlen, "unexpected argument '%s'", arg);
            return EXIT_USAGE;
        }
#undef NO_VALUE
#undef VALUE
#undef IS
    }

    /* Combinations. */
    if (!min_lr_given) cfg->min_lr = cfg->lr / 10.0f;
    if (cfg->min_lr > cfg->lr) {
        snprintf(err, errlen, "--min-lr: %g is above --lr %g", (double)cfg->min_lr,
                 (double)cfg->lr);
        return EXIT_USAGE;
    }
    if (cfg->init_from != NULL && cfg->resume != NULL) {
        snprintf(err, errlen,
                 "--init-from and --resume both set the weights: use one (--resume also "
                 "restores the optimizer and the step)");
        return EXIT_USAGE;
    }
    const bool shards = cfg->data != NULL && is_shard_pattern(cfg->data);
    if (cfg->val != NULL && !is_shard_pattern(cfg->val)) {
        snprintf(err, errlen, "--val %s: validation token shards end in .bin", cfg->val);
        return EXIT_USAGE;
    }
    if (cfg->val != NULL && !shards) {
        snprintf(err, errlen,
                 "--val %s: validation shards go with training shards (--data PATTERN.bin); "
                 "character text validates on its last 10%%",
                 cfg->val);
        return EXIT_USAGE;
    }
    if (cfg->tokenizer_given && !shards) {
        snprintf(err, errlen,
                 "--tokenizer %s: the tokenizer goes with token shards (--data PATTERN.bin); "
                 "character text samples bytes",
                 cfg->tokenizer_dir);
        return EXIT_USAGE;
    }
    if (cfg->sample_only) {
        if (cfg->resume == NULL && cfg->init_from == NULL) {
            snprintf(err, errlen,
                     "--sample-only needs --resume CHECKPOINT or --init-from FILE (the model "
                     "to sample from)");
            return EXIT_USAGE;
        }
        if (cfg->out != NULL || cfg->save != NULL || cfg->export_path != NULL) {
            snprintf(err, errlen,
                     "--sample-only writes nothing but the sample on stdout: drop %s",
                     cfg->out != NULL ? "--out" : cfg->save != NULL ? "--save" : "--export");
            return EXIT_USAGE;
        }
    }

    if (cfg->score_grads != NULL && !cfg->score) {
        snprintf(err, errlen, "--score-grads needs --score (the gradients it writes are --score's)");
        return EXIT_USAGE;
    }
    if (cfg->score) {
        if (cfg->init_from == NULL) {
            snprintf(err, errlen,
                     "--score needs --init-from FILE or DIR (the model to score; a checkpoint's "
                     "weights: --export them first)");
            return EXIT_USAGE;
        }
        if (cfg->sample_only || cfg->out != NULL || cfg->save != NULL ||
            cfg->export_path != NULL) {
            snprintf(err, errlen, "--score prints its figures and writes nothing: drop %s",
                     cfg->sample_only ? "--sample-only"
                     : cfg->out != NULL ? "--out"
                     : cfg->save != NULL ? "--save"
                                          : "--export");
            return EXIT_USAGE;
        }
    }
    cfg->preset = preset->name;
    cfg->batch = batch > 0 ? (int)batch : preset->batch;
    return resolve_model(cfg, err, errlen);
}

/* The model's sizes: each flag given overrides the preset's value; then
   the combinations every block needs. */
int resolve_model(struct config *cfg, char *err, size_t errlen)
{
    const struct preset *preset = find_preset(cfg->preset);
    if (preset == NULL) preset = &PRESETS[0];
    const bool llama = cfg->arch == ARCH_LLAMA;
    const char *arch_name = llama ? "llama" : "gpt2";
    const long layers = cfg->given.layers, heads = cfg->given.heads;
    const long kv_heads = cfg->given.kv_heads, embd = cfg->given.embd, ffn = cfg->given.ffn;
    const long context = cfg->given.context, vocab = cfg->given.vocab;
    const float rope_theta = cfg->given.rope_theta, norm_eps = cfg->given.norm_eps;
    cfg->n_layer = layers > 0 ? (int)layers : preset->n_layer;
    cfg->n_head = heads > 0 ? (int)heads : preset->n_head;
    cfg->n_embd = embd > 0 ? (int)embd : preset->n_embd;
    cfg->seq_len = context > 0 ? (int)context : preset->seq_len;
    cfg->vocab = vocab > 0 ? (int)vocab : preset->vocab;
    cfg->vocab_given = vocab > 0;
    if (cfg->n_embd % cfg->n_head != 0) {
        snprintf(err, errlen,
                 "--embd %d is not divisible by --heads %d (each head takes --embd / --heads "
                 "of the width)",
                 cfg->n_embd, cfg->n_head);
        return EXIT_USAGE;
    }
    if (kv_heads > 0 && cfg->n_head % kv_heads != 0) {
        snprintf(err, errlen,
                 "--kv-heads %ld does not divide --heads %d (each key/value head serves "
                 "--heads / --kv-heads query heads)",
                 kv_heads, cfg->n_head);
        return EXIT_USAGE;
    }
    cfg->n_kv_head = kv_heads > 0 ? (int)kv_heads : cfg->n_head;
    if (!llama) {
        /* What GPT-2's block has no place for. */
        if (kv_heads > 0 && kv_heads != cfg->n_head) {
            snprintf(err, errlen,
                     "--kv-heads %ld: --arch %s has one key/value head per query head (--heads "
                     "%d); grouped-query attention needs --arch llama",
                     kv_heads, arch_name, cfg->n_head);
            return EXIT_USAGE;
        }
        if (!isnan(rope_theta)) {
            snprintf(err, errlen,
                     "--rope-theta %g: --arch %s has learned position embeddings, not RoPE; "
                     "use it with --arch llama",
                     (double)rope_theta, arch_name);
            return EXIT_USAGE;
        }
        if (!isnan(norm_eps) && norm_eps != 1e-5f) {
            snprintf(err, errlen,
                     "--norm-eps %g: --arch %s's LayerNorm has epsilon 1e-5; another one "
                     "needs --arch llama (RMSNorm)",
                     (double)norm_eps, arch_name);
            return EXIT_USAGE;
        }
        cfg->tie_embeddings = true; /* GPT-2's output projection is wte */
        cfg->ffn_hidden = ffn > 0 ? (int)ffn : 4 * cfg->n_embd;
        cfg->norm_eps = 1e-5f;
        cfg->rope_theta = 0.0f;
        return 0;
    }
    if ((cfg->n_embd / cfg->n_head) % 2 != 0) {
        snprintf(err, errlen,
                 "--embd %d / --heads %d = %d: RoPE (--arch llama) needs an even head size",
                 cfg->n_embd, cfg->n_head, cfg->n_embd / cfg->n_head);
        return EXIT_USAGE;
    }
    cfg->tie_embeddings = cfg->given.tie;
    /* Llama's SwiGLU width: 2/3 of 4C, rounded up to a multiple of 32. */
    cfg->ffn_hidden = ffn > 0 ? (int)ffn : (8 * cfg->n_embd / 3 + 31) / 32 * 32;
    cfg->rope_theta = isnan(rope_theta) ? 10000.0f : rope_theta;
    cfg->norm_eps = isnan(norm_eps) ? 1e-5f : norm_eps;
    return 0;
}

/* The parameters, their gradients and AdamW's two moments (16 bytes a
   float) must be addressable; the arena cap is checked by measuring a step
   (budget.c), which names the smallest cap that works. */
int check_model_size(const struct config *cfg, size_t V, char *err, size_t errlen)
{
    const double C = (double)cfg->n_embd, L = (double)cfg->n_layer, F = (double)cfg->ffn_hidden;
    const double kv = C / (double)cfg->n_head * (double)cfg->n_kv_head;
    const double qkvo = cfg->arch == ARCH_GPT2 ? 4.0 * C * C : 2.0 * C * C + 2.0 * C * kv;
    const double ffn_mats = cfg->arch == ARCH_GPT2 ? 2.0 * C * F : 3.0 * C * F;
    const double params = (double)V * C * (cfg->tie_embeddings ? 1.0 : 2.0) + L * (qkvo + ffn_mats);
    /* The largest tensor: the embedding, a feed-forward matrix or gpt2's fused qkv. */
    double largest = (double)V * C;
    if (F * C > largest) largest = F * C;
    if (cfg->arch == ARCH_GPT2 && 3.0 * C * C > largest) largest = 3.0 * C * C;
    if (largest > (double)INT32_MAX) {
        snprintf(err, errlen,
                 "--embd %d with --ffn-hidden %d and V=%zu makes a parameter of %.3g floats, "
                 "past a tensor's 2^31 - 1",
                 cfg->n_embd, cfg->ffn_hidden, V, largest);
        return EXIT_USAGE;
    }
    if (params * 16.0 > (double)SIZE_MAX / 2) {
        snprintf(err, errlen,
                 "the model has %.3g parameters (--layers %d --embd %d --ffn-hidden %d, V=%zu): "
                 "more than memory can address with their gradients and AdamW moments",
                 params, cfg->n_layer, cfg->n_embd, cfg->ffn_hidden, V);
        return EXIT_USAGE;
    }
    return 0;
}

void usage(FILE *f)
{
    fprintf(f,
            "usage: train_full [options]\n"
            "       train_full --tiny|--small|--medium [ITERS] [options]\n"
            "       train_full --sample-only --resume CHECKPOINT [sampling options]\n"
            "       train_full --sample-only --init-from FILE.safetensors [sampling options]\n"
            "\n"
            "Trains a character-level GPT (llm.c / nanoGPT architecture) with arenagrad.\n"
            "\n"
            "Model and data:\n"
            "  --preset P          tiny (L=1 NH=2 C=32 T=32 B=8, default),\n"
            "                      small (L=4 NH=4 C=128 T=64 B=16),\n"
            "                      medium (L=6 NH=6 C=192 T=128 B=16),\n"
            "                      gpt2 (L=12 NH=12 C=768 T=1024 B=4, V=50257 for token\n"
            "                      shards); the flags below override a preset's values\n"
            "  --arch A            gpt2 (default: LayerNorm, GELU, learned positions, tied\n"
            "                      output) or llama (RMSNorm, RoPE, grouped-query\n"
            "                      attention, SwiGLU)\n"
            "  --layers L          transformer blocks (1 to 64)\n"
            "  --heads NH          attention heads; they divide --embd\n"
            "  --kv-heads KV       key/value heads, dividing --heads (llama; NH)\n"
            "  --embd C            width\n"
            "  --ffn-hidden F      feed-forward width (gpt2: 4C; llama: 8C/3 rounded up to\n"
            "                      a multiple of 32)\n"
            "  --context T         sequence length\n"
            "  --vocab V           vocabulary of token shards (character text: its bytes)\n"
            "  --rope-theta F      llama: RoPE base (10000)\n"
            "  --norm-eps F        llama: RMSNorm epsilon (1e-5; gpt2's is 1e-5)\n"
            "  --tie-embeddings    llama: the output projection is the token embedding\n"
            "                      (gpt2 always ties it)\n"
            "  --data PATH         training text (default data/shakespeare.txt, else\n"
            "                      ../shared/data/shakespeare_tiny.txt); vocabulary = its\n"
            "                      distinct bytes; first 90%% train, last 10%% validation\n"
            "  --data PATTERN.bin  token shards in llm.c's format (a glob, quoted: several\n"
            "                      shards, e.g. 'data/x_train_*.bin'); ids below --vocab\n"
            "  --val PATTERN.bin   validation shards (default: --data's with _train_\n"
            "                      replaced by _val_)\n"
            "  --tokenizer DIR     GPT-2's encoder.json and vocab.bpe, to encode --prompt\n"
            "                      and decode samples from shards (default " GPT2_TOKENIZER_DIR ",\n"
            "                      make tokenizer-data)\n"
            "  --seed S            seed for init, batches, evaluation and sampling (1337)\n"
            "\n"
            "Optimisation (AdamW, gradients clipped at norm 1.0):\n"
            "  --iters N           total training steps (default 2000)\n"
            "  --batch B           sequences per micro-batch (default: the preset's)\n"
            "  --accum N           micro-batches per step: gradient accumulation, the same\n"
            "                      update as a batch of N x B (1)\n"
            "  --lr F              peak learning rate (1e-3)\n"
            "  --lr-schedule S     constant (default), cosine or linear decay from --lr\n"
            "                      to --min-lr at --decay-steps\n"
            "  --warmup N          linear warm-up over the first N steps (0)\n"
            "  --min-lr F          floor of the cosine and linear schedules (--lr / 10)\n"
            "  --decay-steps N     step at which the decay reaches --min-lr (--iters); set\n"
            "                      it to train in parts that match one longer run\n"
            "  --weight-decay W    AdamW decoupled weight decay of the matrices: the 2-D\n"
            "                      parameters (wte, wpe and the linear weights, as nanoGPT\n"
            "                      does), not biases or LayerNorm gains (0)\n"
            "  --arena-limit-mb M  cap the activation arena at M MiB\n"
            "  --recompute P       none, all or auto: which transformer blocks recompute\n"
            "                      their activations during backward instead of keeping\n"
            "                      them (auto: the fewest that fit under --arena-limit-mb;\n"
            "                      the default with a cap, else none)\n"
            "  --no-capture        build every step's graph eagerly (default: capture the\n"
            "                      first micro-batch, then replay it with new batches)\n"
            "\n");
    /* Two strings: C11 compilers need only take 4095 bytes in one. */
    fprintf(f,
            "Data-parallel (train_full_mpi under mpirun; no effect in one process):\n"
            "  --allreduce M       overlap (default): each bucket of gradients is all-reduced\n"
            "                      as soon as backward made it final, while backward goes\n"
            "                      on; blocking: one all-reduce after backward (same bits)\n"
            "  --bucket-kb K       smallest overlapped bucket, KiB (1024; 0: per parameter)\n"
            "  --zero 1            ZeRO stage 1: each rank keeps the AdamW moments of its\n"
            "                      slice of the parameters only and updates that slice;\n"
            "                      parameters are then all-gathered (same bits as 0)\n"
            "\n"
            "Run folder and checkpoints:\n"
            "  --out DIR           run folder: ckpt.bin (latest, written atomically at every\n"
            "                      evaluation and at the end), best.bin (best validation\n"
            "                      loss), log.csv, loss.svg (redrawn at every evaluation),\n"
            "                      sample.txt\n"
            "  --save PATH         the latest checkpoint goes to PATH instead\n"
            "  --resume PATH       continue a saved run up to --iters total steps; it keeps\n"
            "                      writing to PATH unless --save or --out say otherwise,\n"
            "                      and a PATH named ckpt.bin brings its run folder along\n"
            "  --log-every K       log.csv row (and progress line when not a terminal)\n"
            "                      every K steps (50)\n"
            "  --eval-every K      validation loss, checkpoint and plot every K steps (250)\n"
            "  --eval-iters K      validation batches per evaluation (10)\n"
            "\n"
            "Weights as safetensors (the names of transformers' GPT2LMHeadModel:\n"
            "transformer.wte.weight, transformer.h.0.attn.c_attn.weight [C, 3C], ...;\n"
            "weights [in, out] like GPT-2's Conv1D; the output projection is tied to wte;\n"
            "--arch llama: LlamaForCausalLM's, weights [out, in]; the byte vocabulary\n"
            "in the metadata, but --init-from needs the same --data):\n"
            "  --export PATH       write the parameters to PATH after training, and\n"
            "                      config.json beside it: --export DIR/model.safetensors\n"
            "                      makes DIR loadable by GPT2LMHeadModel.from_pretrained\n"
            "                      (llama: LlamaForCausalLM.from_pretrained)\n"
            "  --init-from PATH    start from PATH's parameters (not with --resume); with\n"
            "                      --sample-only, sample from them; PATH may be a folder\n"
            "                      (PATH/model.safetensors, else the shards its\n"
            "                      model.safetensors.index.json names; F16 and BF16 load\n"
            "                      as f32) or that index; llama: its config.json sets\n"
            "                      the model flags not given and must agree with the rest\n"
            "  --score             with --init-from: print the loss, gradient norm, loss\n"
            "                      after one plain SGD step (--lr) and logits of --data's\n"
            "                      first T + 1 tokens; train and write nothing\n"
            "  --score-grads FILE  with --score: also write every parameter's gradient\n"
            "                      (float32 safetensors, the parameters' names) to FILE\n"
            "\n"
            "Sampling:\n"
            "  --sample-only       sample from --resume's (or --init-from's) model to\n"
            "                      stdout; train nothing\n"
            "  --sample-chars N    UTF-8 characters sampled after training (200; 0: none);\n"
            "                      with token shards, tokens decoded by --tokenizer\n"
            "  --temperature F     sampling temperature, > 0 (1.0)\n"
            "  --top-k K           sample among the K likeliest bytes (tokens) only (0: all)\n"
            "  --prompt TEXT       start of the sample (default: a newline)\n"
            "\n"
            "Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves the checkpoint,\n"
            "log and plot, prints the summary and exits 130 (SIGINT) or 143 (SIGTERM);\n"
            "a second one exits at once.\n"
            "\n"
            "Exit status: 0 done, 1 library error, 2 bad arguments, data or paths,\n"
            "3 checkpoint refused, 4 arena limit too small, 5 training diverged (loss\n"
            "not finite, or above twice its first value and 3 more; the last checkpoint\n"
            "written before is kept), 6 a checkpoint or run-folder write failed,\n"
            "130/143 interrupted.\n"
            "The last line of a training run is a machine-readable 'summary key=value ...'\n"
            "line.\n");
}

/*
 * hf_config.c: --init-from's Hugging Face folder: which file to load, and
 * for --arch llama the model's sizes from the config.json beside it.
 *
 * A config.json that transformers writes (LlamaConfig.save_pretrained) or
 * that --export writes is read with a small JSON reader that knows the
 * members train_full needs: top-level numbers, strings and booleans, and
 * rope_theta either at the top (older transformers, --export) or inside
 * "rope_parameters" (transformers 5). Every other member is skipped. What
 * the llama blocks cannot compute the same way (another activation,
 * biases, RoPE scaling, a head size other than hidden / heads) is refused
 * with its name.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_full.h"

#define CONFIG_CAP (1L << 20) /* a config.json is a few hundred bytes */

/* The members read; a number NAN, a string "" or a flag -1 when absent. */
struct hf_llama {
    char model_type[32];
    char hidden_act[32];
    char rope_type[32];   /* rope_parameters.rope_type or rope_scaling's type */
    bool rope_scaling;    /* a rope_scaling object (not null) is present */
    double vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    double num_attention_heads, num_key_value_heads, max_position_embeddings;
    double head_dim, rms_norm_eps, rope_theta;
    int tie_word_embeddings, attention_bias, mlp_bias; /* 1, 0, or -1 */
};

struct reader {
    const char *p, *end;
};

static void skip_space(struct reader *r)
{
    while (r->p < r->end && isspace((unsigned char)*r->p)) r->p++;
}

/* A string's bytes (escapes kept as written: the members read have none)
   into out; p past the closing quote. */
static bool read_string(struct reader *r, char *out, size_t cap)
{
    if (r->p >= r->end || *r->p != '"') return false;
    size_t n = 0;
    for (r->p++; r->p < r->end && *r->p != '"'; r->p++) {
        if (*r->p == '\\' && r->p + 1 < r->end) {
            if (n + 1 < cap) out[n++] = *r->p;
            r->p++;
        }
        if (n + 1 < cap) out[n++] = *r->p;
    }
    if (cap > 0) out[n] = '\0';
    if (r->p >= r->end) return false;
    r->p++;
    return true;
}

static bool skip_value(struct reader *r, int depth);

/* Calls on_member for each "key": value of an object (p at its '{'); the
   callback reads or skips the value. */
typedef bool (*member_fn)(struct reader *r, const char *key, struct hf_llama *hf, int depth);

static bool read_object(struct reader *r, member_fn on_member, struct hf_llama *hf, int depth)
{
    if (depth > 32 || r->p >= r->end || *r->p != '{') return false;
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return true;
    }
    for (;;) {
        char key[64];
        skip_space(r);
        if (!read_string(r, key, sizeof key)) return false;
        skip_space(r);
        if (r->p >= r->end || *r->p != ':') return false;
        r->p++;
        skip_space(r);
        if (!on_member(r, key, hf, depth)) return false;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return true;
        }
        return false;
    }
}

static bool skip_member(struct reader *r, const char *key, struct hf_llama *hf, int depth)
{
    (void)key;
    (void)hf;
    return skip_value(r, depth + 1);
}

static bool skip_value(struct reader *r, int depth)
{
    if (depth > 32 || r->p >= r->end) return false;
    char c = *r->p;
    if (c == '{') return read_object(r, skip_member, NULL, depth);
    if (c == '"') {
        char scratch[1];
        return read_string(r, scratch, sizeof scratch);
    }
    if (c == '[') {
        r->p++;
        skip_space(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return true;
        }
        for (;;) {
            skip_space(r);
            if (!skip_value(r, depth + 1)) return false;
            skip_space(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
            } else if (r->p < r->end && *r->p == ']') {
                r->p++;
                return true;
            } else {
                return false;
            }
        }
    }
    /* A number, true, false or null: up to the next delimiter. */
    const char *start = r->p;
    while (r->p < r->end && !strchr(",}] \t\r\n", *r->p)) r->p++;
    return r->p > start;
}

/* A number (NAN for null); false for anything else. */
static bool read_number(struct reader *r, double *out)
{
    if (r->end - r->p >= 4 && strncmp(r->p, "null", 4) == 0) {
        r->p += 4;
        *out = NAN;
        return true;
    }
    char buf[64];
    size_t n = 0;
    while (r->p < r->end && n + 1 < sizeof buf && strchr("+-.0123456789eE", *r->p))
        buf[n++] = *r->p++;
    buf[n] = '\0';
    char *stop = NULL;
    errno = 0;
    *out = strtod(buf, &stop);
    return n > 0 && *stop == '\0' && errno == 0;
}

/* true or false as 1 or 0 (null: -1, absent). */
static bool read_bool(struct reader *r, int *out)
{
    static const char *const words[] = {"false", "true", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(r->end - r->p) >= n && strncmp(r->p, words[i], n) == 0) {
            r->p += n;
            *out = i == 2 ? -1 : i;
            return true;
        }
    }
    return false;
}

/* rope_parameters {"rope_theta": ..., "rope_type": ...} and rope_scaling
   {"rope_type" or "type": ...}. */
static bool rope_member(struct reader *r, const char *key, struct hf_llama *hf, int depth)
{
    if (strcmp(key, "rope_theta") == 0) return read_number(r, &hf->rope_theta);
    if (strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0)
        return read_string(r, hf->rope_type, sizeof hf->rope_type);
    return skip_value(r, depth + 1);
}

static bool top_member(struct reader *r, const char *key, struct hf_llama *hf, int depth)
{
    static const struct {
        const char *name;
        size_t offset;
    } numbers[] = {
#define N(field) {#field, offsetof(struct hf_llama, field)}
        N(vocab_size), N(hidden_size), N(intermediate_size), N(num_hidden_layers),
        N(num_attention_heads), N(num_key_value_heads), N(max_position_embeddings), N(head_dim),
        N(rms_norm_eps), N(rope_theta),
#undef N
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        if (strcmp(key, numbers[i].name) == 0)
            return read_number(r, (double *)((char *)hf + numbers[i].offset));
    if (strcmp(key, "model_type") == 0) return read_string(r, hf->model_type, sizeof hf->model_type);
    if (strcmp(key, "hidden_act") == 0) return read_string(r, hf->hidden_act, sizeof hf->hidden_act);
    if (strcmp(key, "tie_word_embeddings") == 0) return read_bool(r, &hf->tie_word_embeddings);
    if (strcmp(key, "attention_bias") == 0) return read_bool(r, &hf->attention_bias);
    if (strcmp(key, "mlp_bias") == 0) return read_bool(r, &hf->mlp_bias);
    if (strcmp(key, "rope_parameters") == 0 || strcmp(key, "rope_scaling") == 0) {
        if (r->end - r->p >= 4 && strncmp(r->p, "null", 4) == 0) {
            r->p += 4;
            return true;
        }
        if (key[5] == 's') hf->rope_scaling = true;
        return read_object(r, rope_member, hf, depth + 1);
    }
    return skip_value(r, depth + 1);
}

/* Reads `path` into *hf; false with a message (err) if it cannot. */
static bool read_config(const char *path, struct hf_llama *hf, char *err, size_t errlen)
{
    *hf = (struct hf_llama){
        .vocab_size = NAN, .hidden_size = NAN, .intermediate_size = NAN,
        .num_hidden_layers = NAN, .num_attention_heads = NAN, .num_key_value_heads = NAN,
        .max_position_embeddings = NAN, .head_dim = NAN, .rms_norm_eps = NAN,
        .rope_theta = NAN, .tie_word_embeddings = -1, .attention_bias = -1, .mlp_bias = -1,
    };
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return false;
    }
    char *text = malloc(CONFIG_CAP);
    size_t n = text != NULL ? fread(text, 1, CONFIG_CAP, f) : 0;
    bool too_big = n == CONFIG_CAP;
    bool read_failed = ferror(f) != 0;
    fclose(f);
    if (text == NULL || too_big || read_failed) {
        snprintf(err, errlen, "%s: %s", path,
                 text == NULL ? "out of memory" : too_big ? "larger than 1 MiB" : "read error");
        free(text);
        return false;
    }
    struct reader r = {text, text + n};
    skip_space(&r);
    bool ok = read_object(&r, top_member, hf, 0);
    skip_space(&r);
    ok = ok && r.p == r.end;
    if (!ok)
        snprintf(err, errlen, "%s: not a JSON object train_full can read (near byte %td)", path,
                 r.p - text);
    free(text);
    return ok;
}

/* A positive whole number of config.json, or NAN. */
static bool whole(double v, double max) { return v >= 1 && v <= max && v == floor(v); }

/* Sets `*flag` from config.json's `value` when the flag was not given
 * (*flag == 0), else checks they agree. */
static bool take_count(const char *cfg_path, const char *member, double value, double max,
                       const char *flag, long *given, long *out, char *err, size_t errlen)
{
    if (isnan(value)) {
        snprintf(err, errlen, "%s: no %s (the model's %s)", cfg_path, member, flag);
        return false;
    }
    if (!whole(value, max)) {
        snprintf(err, errlen, "%s: %s %g is not a count train_full takes (%s: 1 to %.0f)",
                 cfg_path, member, value, flag, max);
        return false;
    }
    if (*given != 0 && *given != (long)value) {
        snprintf(err, errlen, "%s: %s is %.0f, but %s %ld was given (drop %s: config.json sets it)",
                 cfg_path, member, value, flag, *given, flag);
        return false;
    }
    *out = (long)value;
    return true;
}

static bool take_float(const char *cfg_path, const char *member, double value,
                       const char *flag, float given, float *out, char *err, size_t errlen)
{
    const float v = (float)value;
    if (!(value > 0) || !isfinite(v)) {
        snprintf(err, errlen, "%s: %s %g: must be a finite number greater than 0", cfg_path,
                 member, value);
        return false;
    }
    if (!isnan(given) && given != v) {
        snprintf(err, errlen, "%s: %s is %g, but %s %g was given (drop %s: config.json sets it)",
                 cfg_path, member, value, flag, (double)given, flag);
        return false;
    }
    *out = v;
    return true;
}

/* The llama members train_full has no place for, refused by name. */
static bool supported(const char *cfg_path, const struct hf_llama *hf, char *err, size_t errlen)
{
    if (hf->hidden_act[0] != '\0' && strcmp(hf->hidden_act, "silu") != 0) {
        snprintf(err, errlen, "%s: hidden_act \"%s\": --arch llama's feed-forward is SwiGLU (silu)",
                 cfg_path, hf->hidden_act);
        return false;
    }
    if (hf->attention_bias == 1 || hf->mlp_bias == 1) {
        snprintf(err, errlen, "%s: %s is true: --arch llama's projections have no biases",
                 cfg_path, hf->attention_bias == 1 ? "attention_bias" : "mlp_bias");
        return false;
    }
    if (hf->rope_type[0] != '\0' && strcmp(hf->rope_type, "default") != 0) {
        snprintf(err, errlen,
                 "%s: rope_type \"%s\": --arch llama computes the default RoPE only (no "
                 "scaling)",
                 cfg_path, hf->rope_type);
        return false;
    }
    if (hf->rope_scaling && hf->rope_type[0] == '\0') {
        snprintf(err, errlen, "%s: rope_scaling: --arch llama computes the default RoPE only",
                 cfg_path);
        return false;
    }
    if (!isnan(hf->head_dim) && !isnan(hf->hidden_size) && !isnan(hf->num_attention_heads) &&
        hf->head_dim * hf->num_attention_heads != hf->hidden_size) {
        snprintf(err, errlen,
                 "%s: head_dim %g is not hidden_size %g / num_attention_heads %g: --arch "
                 "llama's heads split the width",
                 cfg_path, hf->head_dim, hf->hidden_size, hf->num_attention_heads);
        return false;
    }
    return true;
}

/* config.json's llama sizes into cfg (flags not given) or checked against
 * them (flags given); then the model is resolved again. */
static int apply_llama(struct config *cfg, const char *cfg_path, const struct hf_llama *hf,
                       char *err, size_t errlen)
{
    if (!supported(cfg_path, hf, err, errlen)) return EXIT_USAGE;
    long layers = 0, heads = 0, kv = 0, embd = 0, ffn = 0, context = 0, vocab = 0;
    /* LlamaConfig's defaults for the members it may leave out. */
    const double kv_heads = isnan(hf->num_key_value_heads) ? hf->num_attention_heads
                                                           : hf->num_key_value_heads;
    const double eps = isnan(hf->rms_norm_eps) ? 1e-6 : hf->rms_norm_eps;
    const double theta = isnan(hf->rope_theta) ? 10000.0 : hf->rope_theta;
    const bool tie = hf->tie_word_embeddings == 1;
    long no_flag = 0;
    float theta_f = 0.0f, eps_f = 0.0f;
    if (!take_count(cfg_path, "num_hidden_layers", hf->num_hidden_layers, MAX_LAYERS, "--layers",
                    &cfg->given.layers, &layers, err, errlen) ||
        !take_count(cfg_path, "num_attention_heads", hf->num_attention_heads, MAX_HEADS,
                    "--heads", &cfg->given.heads, &heads, err, errlen) ||
        !take_count(cfg_path, "num_key_value_heads", kv_heads, MAX_HEADS, "--kv-heads",
                    &cfg->given.kv_heads, &kv, err, errlen) ||
        !take_count(cfg_path, "hidden_size", hf->hidden_size, MAX_EMBD, "--embd",
                    &cfg->given.embd, &embd, err, errlen) ||
        !take_count(cfg_path, "intermediate_size", hf->intermediate_size, MAX_FFN,
                    "--ffn-hidden", &cfg->given.ffn, &ffn, err, errlen) ||
        !take_count(cfg_path, "vocab_size", hf->vocab_size, MAX_VOCAB, "--vocab", &no_flag,
                    &vocab, err, errlen) ||
        !take_count(cfg_path, "max_position_embeddings", hf->max_position_embeddings,
                    MAX_CONTEXT, "--context", &no_flag, &context, err, errlen) ||
        !take_float(cfg_path, "rope_theta", theta, "--rope-theta", cfg->given.rope_theta,
                    &theta_f, err, errlen) ||
        !take_float(cfg_path, "rms_norm_eps", eps, "--norm-eps", cfg->given.norm_eps, &eps_f,
                    err, errlen))
        return EXIT_USAGE;
    /* RoPE has no table to outgrow: a shorter --context than the model's
       positions is a shorter window of the same model. */
    if (cfg->given.context > context) {
        snprintf(err, errlen,
                 "%s: max_position_embeddings is %ld, but --context %ld was given (at most %ld)",
                 cfg_path, context, cfg->given.context, context);
        return EXIT_USAGE;
    }
    if (cfg->given.tie && !tie) {
        snprintf(err, errlen,
                 "%s: tie_word_embeddings is %s, but --tie-embeddings was given (drop it: the "
                 "file has its own lm_head.weight)",
                 cfg_path, hf->tie_word_embeddings == 0 ? "false" : "absent (false)");
        return EXIT_USAGE;
    }
    cfg->given.layers = layers;
    cfg->given.heads = heads;
    cfg->given.kv_heads = kv;
    cfg->given.embd = embd;
    cfg->given.ffn = ffn;
    if (cfg->given.context == 0) cfg->given.context = context;
    cfg->given.rope_theta = theta_f;
    cfg->given.norm_eps = eps_f;
    cfg->given.tie = tie;
    cfg->hf_vocab = (int)vocab;
    int rc = resolve_model(cfg, err, errlen);
    if (rc != 0) return rc;
    if (!cfg->vocab_given) cfg->vocab = (int)vocab; /* token shards' V */
    return 0;
}

/* The index transformers writes beside the shards of a sharded checkpoint. */
#define SHARD_INDEX "model.safetensors.index.json"

ag_status init_weights_load(ag_context *ctx, const char *path)
{
    size_t n = strlen(path), k = strlen(".index.json");
    if (n >= k && strcmp(path + n - k, ".index.json") == 0)
        return ag_safetensors_load_index(ctx, path);
    return ag_safetensors_load(ctx, path);
}

int init_from_config(struct config *cfg, char *file, char *err, size_t errlen)
{
    const char *from = cfg->init_from;
    if (from == NULL) return 0;
    struct stat st;
    char dir[PATH_CAP];
    if (stat(from, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (strlen(from) + sizeof "/" SHARD_INDEX > PATH_CAP) {
            snprintf(err, errlen, "--init-from: path longer than %d bytes", PATH_CAP - 40);
            return EXIT_USAGE;
        }
        snprintf(dir, sizeof dir, "%s", from);
        /* As transformers does: one model.safetensors if there is one, else
           the index of a sharded checkpoint. */
        path_join(file, dir, "model.safetensors");
        char index[PATH_CAP];
        path_join(index, dir, SHARD_INDEX);
        if (access(file, F_OK) != 0 && access(index, F_OK) == 0) memcpy(file, index, PATH_CAP);
    } else {
        if (strlen(from) >= PATH_CAP) {
            snprintf(err, errlen, "--init-from: path longer than %d bytes", PATH_CAP - 1);
            return EXIT_USAGE;
        }
        snprintf(file, PATH_CAP, "%s", from);
        dir_of(from, dir, sizeof dir);
    }
    cfg->init_from = file;
    char cfg_path[PATH_CAP + 16];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    if (access(cfg_path, F_OK) != 0) return 0; /* the tensors' shapes are still checked */
    struct hf_llama hf;
    char why[PATH_CAP + 160];
    if (!read_config(cfg_path, &hf, why, sizeof why)) {
        snprintf(err, errlen, "--init-from %s: %s", from, why);
        return EXIT_USAGE;
    }
    const bool llama = strcmp(hf.model_type, "llama") == 0;
    if (cfg->arch == ARCH_GPT2) {
        if (llama) {
            snprintf(err, errlen, "--init-from %s: %s describes a llama model: pass --arch llama",
                     from, cfg_path);
            return EXIT_USAGE;
        }
        return 0; /* GPT-2's sizes come from the flags, as before */
    }
    if (!llama) {
        snprintf(err, errlen,
                 "--init-from %s: %s has model_type \"%s\", not \"llama\" (--arch llama)", from,
                 cfg_path, hf.model_type);
        return EXIT_USAGE;
    }
    int rc = apply_llama(cfg, cfg_path, &hf, why, sizeof why);
    if (rc != 0) snprintf(err, errlen, "--init-from %s: %s", from, why);
    return rc;
}

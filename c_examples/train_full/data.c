/*
 * data.c: the corpus. The vocabulary is the set of distinct bytes of the
 * text; the first 90% trains, the last 10% validates.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_full.h"

/* Reads the whole file's bytes into d->tokens (d->n); false with a message. */
bool read_data(const char *path, struct dataset *d, char *err, size_t errlen)
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
    return true;
}

/* The vocabulary of d->tokens' bytes, the bytes turned into ids, the split. */
void index_data(struct dataset *d)
{
    const size_t n = d->n;
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
}

/* Reads and indexes the corpus; returns false with a message on failure. */
bool load_data(const char *path, struct dataset *d, char *err, size_t errlen)
{
    if (!read_data(path, d, err, errlen)) return false;
    index_data(d);
    return true;
}

/* B random windows of T+1 tokens from tokens[0..n]: ids and next-token targets. */
void get_batch(const uint8_t *tokens, size_t n, size_t B, size_t T, uint64_t *rng,
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

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks one shard's header; its token count and width in *count, *width. */
static bool shard_header(const char *path, FILE *f, size_t *count, size_t *width, char *err,
                         size_t errlen)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return false;
    }
    uint8_t h[SHARD_HEADER_INTS * 4];
    size_t size = (size_t)st.st_size;
    if (size < sizeof h || fread(h, 1, sizeof h, f) != sizeof h) {
        snprintf(err, errlen,
                 "%s: truncated header: the file has %zu bytes, a shard starts with %zu "
                 "(256 int32)",
                 path, size, sizeof h);
        return false;
    }
    const uint32_t magic = le32(h), version = le32(h + 4), n = le32(h + 8);
    if (magic != SHARD_MAGIC_U16 && magic != SHARD_MAGIC_U32) {
        snprintf(err, errlen,
                 "%s: offset 0: magic %u is not a token shard's (%d: uint16 tokens, %d: uint32 "
                 "tokens)",
                 path, magic, SHARD_MAGIC_U16, SHARD_MAGIC_U32);
        return false;
    }
    *width = magic == SHARD_MAGIC_U16 ? 2 : 4;
    const uint32_t want = magic == SHARD_MAGIC_U16 ? SHARD_VERSION_U16 : SHARD_VERSION_U32;
    if (version != want) {
        snprintf(err, errlen, "%s: offset 4: version %u, but magic %u goes with version %u", path,
                 version, magic, want);
        return false;
    }
    if (n > INT32_MAX || (size - sizeof h) != (size_t)n * *width) {
        snprintf(err, errlen,
                 "%s: offset 8: the header counts %u tokens (%zu bytes of uint%zu) but %zu "
                 "bytes follow the header%s",
                 path, n, (size_t)n * *width, *width * 8, size - sizeof h,
                 size - sizeof h < (size_t)n * *width ? " (truncated?)" : "");
        return false;
    }
    *count = n;
    return true;
}

/* Appends the tokens of every file matching pattern to d->tok at *at. */
static bool read_shard_set(const char *flag, const char *pattern, int V, struct dataset *d,
                           size_t *at, size_t *files, char *err, size_t errlen)
{
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        snprintf(err, errlen, "%s: no file matches '%s'", flag, pattern);
        if (rc != GLOB_NOMATCH) globfree(&g);
        return false;
    }
    bool ok = true;
    *files = g.gl_pathc;
    for (size_t i = 0; ok && i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            snprintf(err, errlen, "%s: %s: cannot open: %s", flag, path, strerror(errno));
            ok = false;
            break;
        }
        size_t count = 0, width = 0;
        char why[PATH_CAP + 256];
        ok = shard_header(path, f, &count, &width, why, sizeof why);
        if (!ok) {
            snprintf(err, errlen, "%s: %s", flag, why);
        } else {
            uint32_t *grown = realloc(d->tok, (*at + count + 1) * sizeof *d->tok);
            if (grown == NULL) {
                snprintf(err, errlen, "%s: %s: out of memory for %zu tokens", flag, path, count);
                ok = false;
            } else {
                d->tok = grown;
                uint8_t buf[4096];
                size_t done = 0;
                while (ok && done < count) {
                    size_t want = (count - done) * width;
                    if (want > sizeof buf) want = sizeof buf;
                    if (fread(buf, 1, want, f) != want) {
                        snprintf(err, errlen, "%s: %s: read error at offset %zu", flag, path,
                                 (size_t)SHARD_HEADER_INTS * 4 + done * width);
                        ok = false;
                        break;
                    }
                    for (size_t k = 0; k < want / width; k++, done++) {
                        const uint8_t *p = buf + k * width;
                        uint32_t id = width == 2 ? (uint32_t)(p[0] | p[1] << 8) : le32(p);
                        if (id >= (uint32_t)V) {
                            snprintf(err, errlen,
                                     "%s: %s: offset %zu (token %zu): id %u is not below the "
                                     "vocabulary size %d (--vocab)",
                                     flag, path, (size_t)SHARD_HEADER_INTS * 4 + done * width,
                                     done, id, V);
                            ok = false;
                            break;
                        }
                        d->tok[*at + done] = id;
                    }
                }
                *at += count;
            }
        }
        fclose(f);
    }
    globfree(&g);
    return ok;
}

bool load_shards(const char *train_pattern, const char *val_pattern, int V, struct dataset *d,
                 char *err, size_t errlen)
{
    d->shards = true;
    d->V = V;
    size_t at = 0;
    if (!read_shard_set("--data", train_pattern, V, d, &at, &d->n_train_files, err, errlen))
        return false;
    d->n_train = at;
    if (!read_shard_set("--val", val_pattern, V, d, &at, &d->n_val_files, err, errlen))
        return false;
    d->n_val = at - d->n_train;
    d->n = at;
    return true;
}

/* B random windows of T+1 tokens from tok[0..n]: ids and next-token targets. */
static void get_batch32(const uint32_t *tok, size_t n, size_t B, size_t T, uint64_t *rng,
                        int32_t *ids, int32_t *targets)
{
    size_t starts = n - T;
    for (size_t b = 0; b < B; b++) {
        size_t s = (size_t)(rng_next(rng) % starts);
        for (size_t t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)tok[s + t];
            targets[b * T + t] = (int32_t)tok[s + t + 1];
        }
    }
}

void dataset_batch(const struct dataset *d, bool validation, size_t B, size_t T, uint64_t *rng,
                   int32_t *ids, int32_t *targets)
{
    size_t first = validation ? d->n_train : 0;
    size_t n = validation ? d->n_val : d->n_train;
    if (d->shards)
        get_batch32(d->tok + first, n, B, T, rng, ids, targets);
    else
        get_batch(d->tokens + first, n, B, T, rng, ids, targets);
}

void free_data(struct dataset *d)
{
    free(d->tokens);
    free(d->tok);
    d->tokens = NULL;
    d->tok = NULL;
}

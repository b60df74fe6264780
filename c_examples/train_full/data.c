/*
 * data.c: the corpus. The vocabulary is the set of distinct bytes of the
 * text; the first 90% trains, the last 10% validates.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
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

/*
 * tokenize: text files to token shards in llm.c's format, through the
 * library's GPT-2 tokenizer (ag_tokenizer_open / ag_tokenizer_encode).
 *
 * Each input file is one document (or several, split on --split-on TEXT);
 * every document starts with the end-of-text token, as llm.c's shards do,
 * so documents are separated by it. The shards are PREFIX_000000.bin,
 * PREFIX_000001.bin, ... of at most --shard-tokens tokens each: a header of
 * 256 little-endian int32 (magic 20240520 and version 1 with uint16 tokens
 * when the vocabulary fits in 16 bits, else magic 20240801 and version 7
 * with uint32 tokens; then the token count), then the tokens.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/gpt2_tokenizer.h"
#include "arenagrad.h"

#define HEADER_INTS 256
#define DEFAULT_SHARD_TOKENS 100000000L

struct writer {
    const char *prefix;
    long shard_tokens;  /* tokens per shard at most */
    bool wide;          /* uint32 tokens */
    uint32_t *buf;      /* [shard_tokens]: the shard being filled */
    size_t n;           /* tokens in buf */
    int shards;         /* shards written */
    size_t total;
};

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes buf as the next shard (to a temporary name, then renamed). */
static bool flush_shard(struct writer *w)
{
    if (w->n == 0) return true;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s_%06d.bin", w->prefix, w->shards);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        fprintf(stderr, "tokenize: %s: cannot create: %s\n", tmp, strerror(errno));
        return false;
    }
    uint8_t header[HEADER_INTS * 4] = {0};
    put_le32(header, w->wide ? 20240801u : 20240520u);
    put_le32(header + 4, w->wide ? 7u : 1u);
    put_le32(header + 8, (uint32_t)w->n);
    bool ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    const size_t width = w->wide ? 4 : 2;
    uint8_t out[8192];
    for (size_t i = 0; ok && i < w->n;) {
        size_t k = 0;
        for (; i < w->n && k + width <= sizeof out; i++, k += width) {
            if (w->wide) put_le32(out + k, w->buf[i]);
            else {
                out[k] = (uint8_t)w->buf[i];
                out[k + 1] = (uint8_t)(w->buf[i] >> 8);
            }
        }
        ok = fwrite(out, 1, k, f) == k;
    }
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "tokenize: %s: write failed: %s\n", path, strerror(errno));
        remove(tmp);
        return false;
    }
    printf("%s: %zu tokens (uint%zu)\n", path, w->n, width * 8);
    w->total += w->n;
    w->shards++;
    w->n = 0;
    return true;
}

static bool emit(struct writer *w, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w->n == (size_t)w->shard_tokens && !flush_shard(w)) return false;
        w->buf[w->n++] = (uint32_t)ids[i];
    }
    return true;
}

/* The end-of-text token, then the document's tokens. */
static bool document(struct writer *w, ag_tokenizer *tok, int32_t eot, const uint8_t *text,
                     size_t len, int32_t **ids, size_t *cap, const char *path)
{
    size_t needed = 0;
    ag_status st = ag_tokenizer_encode(tok, text, len, false, *ids, *cap, &needed);
    if (st == AG_STATUS_BUFFER_TOO_SMALL) {
        free(*ids);
        *cap = needed;
        *ids = malloc(needed * sizeof **ids);
        if (*ids == NULL) {
            fprintf(stderr, "tokenize: %s: out of memory for %zu tokens\n", path, needed);
            return false;
        }
        st = ag_tokenizer_encode(tok, text, len, false, *ids, *cap, &needed);
    }
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "tokenize: %s: ag_tokenizer_encode: %s: %s\n", path, ag_status_str(st),
                ag_tokenizer_last_error());
        return false;
    }
    return emit(w, &eot, 1) && emit(w, *ids, needed);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "tokenize: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *grown = realloc(buf, cap * 2);
        if (grown == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || bad) {
        fprintf(stderr, "tokenize: %s: %s\n", path, bad ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenize [options] --out PREFIX FILE...\n"
            "\n"
            "Encodes text files with GPT-2's tokenizer into token shards in llm.c's\n"
            "format, PREFIX_000000.bin, PREFIX_000001.bin, ... (train_full --data):\n"
            "each document starts with the end-of-text token (50256).\n"
            "\n"
            "  --out PREFIX        shard path prefix, e.g. data/tiny_train\n"
            "  --vocab-json PATH   encoder.json (data/gpt2/encoder.json; make tokenizer-data)\n"
            "  --merges PATH       vocab.bpe (data/gpt2/vocab.bpe)\n"
            "  --split-on TEXT     split each file into documents at TEXT (dropped);\n"
            "                      default: one document per file\n"
            "  --shard-tokens N    tokens per shard at most (100000000)\n"
            "\n"
            "Tokens are uint16 (magic 20240520) when the vocabulary has at most 65536\n"
            "ids, else uint32 (magic 20240801). Exit status: 0 done, 1 a library call\n"
            "or a file failed, 2 bad arguments.\n");
}

int main(int argc, char **argv)
{
    const char *prefix = NULL, *vocab = GPT2_TOKENIZER_DIR "/" GPT2_VOCAB_JSON;
    const char *merges = GPT2_TOKENIZER_DIR "/" GPT2_MERGES;
    const char *split = NULL;
    long shard_tokens = DEFAULT_SHARD_TOKENS;
    int first_file = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = strcmp(a, "--out") == 0          ? &prefix
                            : strcmp(a, "--vocab-json") == 0 ? &vocab
                            : strcmp(a, "--merges") == 0     ? &merges
                            : strcmp(a, "--split-on") == 0   ? &split
                                                             : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (slot != NULL || strcmp(a, "--shard-tokens") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tokenize: %s: missing value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (slot != NULL) {
                if (v[0] == '\0') {
                    fprintf(stderr, "tokenize: %s: empty value\n", a);
                    return 2;
                }
                *slot = v;
            } else {
                char *end = NULL;
                errno = 0;
                shard_tokens = strtol(v, &end, 10);
                if (errno != 0 || *end != '\0' || end == v || shard_tokens < 1 ||
                    shard_tokens > INT32_MAX) {
                    fprintf(stderr, "tokenize: --shard-tokens: '%s' is not a count from 1 to %d\n",
                            v, INT32_MAX);
                    return 2;
                }
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "tokenize: unknown option '%s' (run 'tokenize --help')\n", a);
            return 2;
        } else {
            first_file = i;
            break;
        }
    }
    if (prefix == NULL || first_file >= argc) {
        fprintf(stderr, "tokenize: %s (run 'tokenize --help')\n",
                prefix == NULL ? "--out PREFIX is needed" : "no input file");
        return 2;
    }
    ag_tokenizer *tok = NULL;
    ag_status st = ag_tokenizer_open(vocab, merges, &tok);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "tokenize: ag_tokenizer_open: %s: %s (make tokenizer-data installs "
                        "%s)\n",
                ag_status_str(st), ag_tokenizer_last_error(), GPT2_TOKENIZER_DIR);
        return 1;
    }
    int32_t eot = 0;
    size_t vocab_size = 0;
    st = ag_tokenizer_end_of_text(tok, &eot);
    if (st == AG_STATUS_OK) st = ag_tokenizer_vocab_size(tok, &vocab_size);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "tokenize: %s\n", ag_tokenizer_last_error());
        ag_tokenizer_close(&tok);
        return 1;
    }
    struct writer w = {.prefix = prefix,
                       .shard_tokens = shard_tokens,
                       .wide = vocab_size > 65536,
                       .buf = malloc((size_t)shard_tokens * sizeof(uint32_t))};
    int32_t *ids = NULL;
    size_t cap = 0, docs = 0;
    bool ok = w.buf != NULL;
    if (!ok) fprintf(stderr, "tokenize: out of memory for a shard of %ld tokens\n", shard_tokens);
    for (int i = first_file; ok && i < argc; i++) {
        size_t len = 0;
        uint8_t *text = read_file(argv[i], &len);
        if (text == NULL) {
            ok = false;
            break;
        }
        size_t start = 0, seplen = split != NULL ? strlen(split) : 0;
        while (ok && start <= len) {
            size_t end = len;
            for (size_t k = start; seplen > 0 && k + seplen <= len; k++) {
                if (memcmp(text + k, split, seplen) == 0) {
                    end = k;
                    break;
                }
            }
            if (end > start) {
                ok = document(&w, tok, eot, text + start, end - start, &ids, &cap, argv[i]);
                docs++;
            }
            start = end + (end < len ? seplen : 1);
        }
        free(text);
    }
    ok = ok && flush_shard(&w);
    if (ok)
        printf("tokenize: %zu documents, %zu tokens in %d shards\n", docs, w.total, w.shards);
    free(ids);
    free(w.buf);
    ag_tokenizer_close(&tok);
    return ok ? 0 : 1;
}

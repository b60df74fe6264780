/*
 * sample.c: text generation, one token per forward pass over the last T
 * tokens: bytes of character text, or ids of token shards that GPT-2's
 * tokenizer decodes into bytes.
 *
 * Either way the bytes can stop in the middle of a multi-byte UTF-8
 * character, or form none (byte-level BPE tokens split characters too).
 * Bytes of an unfinished character are held back until it is complete;
 * invalid bytes are written as U+FFFD. With character text, a character still
 * unfinished when the count is reached gets up to three more bytes, and is
 * dropped if they do not finish it: the output is valid UTF-8 of exactly n
 * characters after the prompt. With token shards n counts tokens, and a
 * character their bytes leave unfinished is dropped. Sampling never calls
 * malloc: every buffer comes from the trainer.
 */
#include <math.h>
#include <string.h>

#include "train_full.h"

/* Length of the UTF-8 sequence a byte starts: 1, 2, 3, 4, or 0 if it cannot start one. */
static int utf8_length(uint8_t b)
{
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

struct emitter {
    FILE *out;
    struct outfile *copy;
    uint8_t pending[4]; /* an unfinished character */
    int have, need;
    long chars;
};

/*
 * Whether b can be the next byte of the pending character. The second byte's
 * range depends on the first (no overlong forms, surrogates or code points
 * above U+10FFFF), the others are 0x80..0xBF.
 */
static bool continues(const struct emitter *e, uint8_t b)
{
    uint8_t lo = 0x80, hi = 0xBF;
    if (e->have == 1) {
        switch (e->pending[0]) {
        case 0xE0: lo = 0xA0; break;
        case 0xED: hi = 0x9F; break;
        case 0xF0: lo = 0x90; break;
        case 0xF4: hi = 0x8F; break;
        default: break;
        }
    }
    return e->need > 0 && b >= lo && b <= hi;
}

static void emit(struct emitter *e, const uint8_t *p, size_t n)
{
    fwrite(p, 1, n, e->out);
    if (e->copy != NULL) out_write(e->copy, (const char *)p, n);
    e->chars++;
}

/*
 * Feeds one sampled byte: whole characters go out, bytes that cannot form
 * one go out as U+FFFD, so the text is always valid UTF-8. Returns false if
 * the byte was not used because it broke a pending character and that
 * reached `limit` characters.
 */
static bool feed(struct emitter *e, uint8_t b, long limit)
{
    if (e->need > 0) {
        if (continues(e, b)) {
            e->pending[e->have++] = b;
            if (e->have == e->need) {
                emit(e, e->pending, (size_t)e->have);
                e->have = e->need = 0;
            }
            return true;
        }
        emit(e, REPLACEMENT, sizeof REPLACEMENT); /* a broken character */
        e->have = e->need = 0;
        if (e->chars >= limit) return false;
    }
    int len = utf8_length(b);
    if (len == 1) {
        emit(e, &b, 1);
    } else if (len == 0) {
        emit(e, REPLACEMENT, sizeof REPLACEMENT); /* a byte that starts nothing */
    } else {
        e->pending[0] = b;
        e->have = 1;
        e->need = len;
    }
    return true;
}

/* Draws the next id (below tr->draw_V) from the last row of logits. */
static size_t draw(struct trainer *tr, const float *row, uint64_t *rng)
{
    const size_t V = tr->draw_V;
    float max = row[0];
    for (size_t v = 1; v < V; v++) max = row[v] > max ? row[v] : max;
    float threshold = -INFINITY;
    if (tr->cfg->top_k > 0 && (size_t)tr->cfg->top_k < V) {
        memcpy(tr->sorted, row, V * sizeof *row);
        sort_floats(tr->sorted, V);
        threshold = tr->sorted[V - (size_t)tr->cfg->top_k]; /* ties at it are kept */
    }
    double total = 0.0;
    for (size_t v = 0; v < V; v++) {
        tr->probs[v] =
            row[v] >= threshold ? exp((double)(row[v] - max) / tr->cfg->temperature) : 0.0;
        total += tr->probs[v];
    }
    double u = rng_uniform(rng) * total;
    size_t next = V;
    for (size_t v = 0; v < V; v++) {
        if (tr->probs[v] > 0.0) next = v; /* the last possible one, if rounding runs out */
        u -= tr->probs[v];
        if (u < 0.0 && tr->probs[v] > 0.0) return v;
    }
    return next < V ? next : V - 1;
}

/*
 * One forward pass over the window's `*len` ids: draws the next id into
 * `*next` and appends it, dropping the oldest id when the window holds T.
 */
static ag_status extend(struct trainer *tr, size_t *len, uint64_t *rng, size_t *next)
{
    const size_t V = tr->V, T = tr->T;
    ag_tensor logits;
    TRY(ag_reset(tr->ctx));
    TRY(model_forward(tr->ctx, &tr->model, tr->window, NULL, 1, *len, &logits, NULL));
    TRY(ag_tensor_read(tr->ctx, logits, tr->logits, *len * V)); /* [len, V] */
    *next = draw(tr, tr->logits + (*len - 1) * V, rng);         /* last position */
    if (*len == T) {
        memmove(tr->window, tr->window + 1, (T - 1) * sizeof *tr->window);
        (*len)--;
    }
    tr->window[(*len)++] = (int32_t)*next;
    return AG_STATUS_OK;
}

/* Character text: n characters, each drawn byte by byte. */
static ag_status sample_bytes(struct trainer *tr, uint64_t *rng, const char *prompt, long n,
                              struct emitter *e)
{
    const struct dataset *d = tr->data;
    size_t len = 0, T = tr->T;
    size_t plen = strlen(prompt);
    const char *p = plen > T ? prompt + (plen - T) : prompt;
    for (; *p != '\0'; p++) tr->window[len++] = d->id_of[(unsigned char)*p];
    long extra = 0; /* bytes drawn past n characters to finish the last one */
    while (g_stop_signal == 0 && (e->chars < n || (e->need > 0 && extra < 3))) {
        if (e->chars >= n) extra++;
        size_t next;
        TRY(extend(tr, &len, rng, &next));
        uint8_t byte = d->vocab[next];
        if (e->chars >= n && !continues(e, byte)) break; /* would not finish it */
        if (!feed(e, byte, n)) break;
    }
    return AG_STATUS_OK;
}

/* Says why a tokenizer call failed (its message names the ids or lengths). */
static ag_status tokenizer_failed(const char *call, ag_status st)
{
    fprintf(stderr, "train_full: sampling: %s: %s: %s\n", call, ag_status_str(st),
            ag_tokenizer_last_error());
    return st;
}

/* Token shards: n tokens after the prompt's, each decoded as it comes. */
static ag_status sample_tokens(struct trainer *tr, uint64_t *rng, const char *prompt, long n,
                               struct emitter *e, long *made)
{
    size_t count = 0, T = tr->T;
    ag_status st = ag_tokenizer_encode(tr->tok, (const uint8_t *)prompt, strlen(prompt), false,
                                       tr->prompt_ids, tr->prompt_cap, &count);
    if (st != AG_STATUS_OK) return tokenizer_failed("ag_tokenizer_encode", st);
    size_t first = count > T ? count - T : 0, len = 0;
    for (size_t i = first; i < count; i++) tr->window[len++] = tr->prompt_ids[i];
    for (*made = 0; *made < n && g_stop_signal == 0; (*made)++) {
        size_t next, got = 0;
        TRY(extend(tr, &len, rng, &next));
        int32_t id = (int32_t)next;
        st = ag_tokenizer_decode(tr->tok, &id, 1, tr->piece, tr->piece_cap, &got);
        if (st != AG_STATUS_OK) return tokenizer_failed("ag_tokenizer_decode", st);
        for (size_t i = 0; i < got; i++) feed(e, tr->piece[i], LONG_MAX);
    }
    return AG_STATUS_OK;
}

/*
 * Writes the prompt and then n UTF-8 characters (token shards: n tokens) to
 * `out` (and to `copy` when not NULL); *written receives the characters
 * (tokens) generated. Stops early, with nothing unfinished, when a stop
 * signal arrives.
 */
ag_status sample(struct trainer *tr, uint64_t seed, const char *prompt, long n, FILE *out,
                 struct outfile *copy, long *written)
{
    uint64_t rng = seed;
    fputs(prompt, out);
    if (copy != NULL) out_write(copy, prompt, strlen(prompt));
    struct emitter e = {.out = out, .copy = copy};
    long made = 0;
    TRY(ag_set_grad_enabled(tr->ctx, false));
    ag_status st = tr->data->shards ? sample_tokens(tr, &rng, prompt, n, &e, &made)
                                    : sample_bytes(tr, &rng, prompt, n, &e);
    /* An unfinished character at the end is dropped: e.pending is not written. */
    fflush(out);
    *written = tr->data->shards ? made : e.chars;
    if (st != AG_STATUS_OK) return st;
    TRY(ag_reset(tr->ctx));
    TRY(ag_set_grad_enabled(tr->ctx, true));
    return AG_STATUS_OK;
}

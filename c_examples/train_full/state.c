/*
 * state.c: train_full's part of a checkpoint, stored as the library's
 * opaque user bytes (little-endian):
 *
 *   magic "AGTRAIN\0", version u32,
 *   L, NH, C, T, V, batch (u32 each),
 *   accum, schedule, lr, min_lr (u32; floats as their bits), warmup, decay end (u64),
 *   step, batch RNG, seed, sample seed (u64),
 *   start loss, best validation loss (f64 bits), best step (u64),
 *   log row sums: loss, grad norm (f64 bits), steps (u64),
 *   recent losses: count (u64), LOSS_WINDOW floats,
 *   then the V vocabulary bytes.
 *
 * The dimensions and the vocabulary must match the run that loads it; the
 * settings only produce notes when they differ (a resumed run may change
 * them, at the price of bit-exactness).
 */
#include <string.h>

#include "train_full.h"

static const uint8_t MAGIC[8] = {'A', 'G', 'T', 'R', 'A', 'I', 'N', '\0'};
#define VERSION 2u
#define HEADER (8 + 4 + 6 * 4 + 4 * 4 + 2 * 8 + 4 * 8 + 3 * 8 + 3 * 8 + 8 + LOSS_WINDOW * 4)

_Static_assert(HEADER + 256 <= STATE_BLOB_MAX, "STATE_BLOB_MAX too small");

struct cursor {
    uint8_t *p;
    const uint8_t *r;
};

static void put_u32(struct cursor *c, uint32_t v)
{
    for (int i = 0; i < 4; i++) *c->p++ = (uint8_t)(v >> (8 * i));
}
static void put_u64(struct cursor *c, uint64_t v)
{
    for (int i = 0; i < 8; i++) *c->p++ = (uint8_t)(v >> (8 * i));
}
static void put_f32(struct cursor *c, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(c, v);
}
static void put_f64(struct cursor *c, double f)
{
    uint64_t v;
    memcpy(&v, &f, 8);
    put_u64(c, v);
}
static uint32_t get_u32(struct cursor *c)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)*c->r++ << (8 * i);
    return v;
}
static uint64_t get_u64(struct cursor *c)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)*c->r++ << (8 * i);
    return v;
}
static float get_f32(struct cursor *c)
{
    uint32_t v = get_u32(c);
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static double get_f64(struct cursor *c)
{
    uint64_t v = get_u64(c);
    double f;
    memcpy(&f, &v, 8);
    return f;
}

/* The byte vocabulary kept after the state (none for token shards). */
static size_t vocab_bytes(const struct dataset *d)
{
    return d->shards ? 0 : (size_t)d->V;
}

size_t state_write(uint8_t *buf, const struct config *cfg, const struct lr_schedule *sched,
                   const struct dataset *d, const struct train_state *s)
{
    struct cursor c = {.p = buf};
    memcpy(c.p, MAGIC, 8);
    c.p += 8;
    put_u32(&c, VERSION);
    const uint32_t dims[6] = {(uint32_t)cfg->n_layer, (uint32_t)cfg->n_head,
                              (uint32_t)cfg->n_embd, (uint32_t)cfg->seq_len, (uint32_t)d->V,
                              (uint32_t)cfg->batch};
    for (int i = 0; i < 6; i++) put_u32(&c, dims[i]);
    put_u32(&c, (uint32_t)cfg->accum);
    put_u32(&c, (uint32_t)sched->shape);
    put_f32(&c, (float)sched->peak); /* floats widened: exact */
    put_f32(&c, (float)sched->floor);
    put_u64(&c, sched->warmup);
    put_u64(&c, sched->decay_end);
    put_u64(&c, s->step);
    put_u64(&c, s->rng);
    put_u64(&c, s->seed);
    put_u64(&c, s->sample_seed);
    put_f64(&c, s->start_loss);
    put_f64(&c, s->best_val);
    put_u64(&c, s->best_step);
    put_f64(&c, s->row_loss);
    put_f64(&c, s->row_norm);
    put_u64(&c, s->row_steps);
    put_u64(&c, s->n_recent);
    for (int i = 0; i < LOSS_WINDOW; i++) put_f32(&c, s->recent[i]);
    memcpy(c.p, d->vocab, vocab_bytes(d));
    c.p += vocab_bytes(d);
    return (size_t)(c.p - buf);
}

/* Checks loaded user bytes against this run; fills *s and *saved or explains. */
bool state_read(const uint8_t *buf, size_t len, const struct config *cfg,
                const struct dataset *d, struct train_state *s, struct saved_settings *saved,
                char *err, size_t errlen)
{
    struct cursor c = {.r = buf};
    if (len < 12 || memcmp(buf, MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a train_full checkpoint (user data of %zu bytes, bad magic)",
                 len);
        return false;
    }
    c.r += 8;
    uint32_t version = get_u32(&c);
    if (version != VERSION) {
        snprintf(err, errlen, "train_full state version %u, this program reads %u", version,
                 VERSION);
        return false;
    }
    if (len < HEADER) {
        snprintf(err, errlen, "train_full state has %zu bytes, fewer than its %d-byte header",
                 len, HEADER);
        return false;
    }
    static const char *const names[5] = {"L (layers)", "NH (heads)", "C (channels)",
                                         "T (context)", "V (vocabulary size)"};
    const uint32_t want[5] = {(uint32_t)cfg->n_layer, (uint32_t)cfg->n_head,
                              (uint32_t)cfg->n_embd, (uint32_t)cfg->seq_len, (uint32_t)d->V};
    for (int i = 0; i < 5; i++) {
        uint32_t have = get_u32(&c);
        if (have != want[i]) {
            snprintf(err, errlen,
                     "checkpoint has %s = %u but this run has %u (preset %s, data vocabulary)",
                     names[i], have, want[i], cfg->preset);
            return false;
        }
    }
    if (len != HEADER + vocab_bytes(d)) {
        snprintf(err, errlen, "train_full state has %zu bytes, expected %zu", len,
                 (size_t)HEADER + vocab_bytes(d));
        return false;
    }
    saved->batch = get_u32(&c);
    saved->accum = get_u32(&c);
    saved->schedule = get_u32(&c);
    saved->lr = get_f32(&c);
    saved->min_lr = get_f32(&c);
    saved->warmup = get_u64(&c);
    saved->horizon = get_u64(&c);
    s->step = get_u64(&c);
    s->rng = get_u64(&c);
    s->seed = get_u64(&c);
    s->sample_seed = get_u64(&c);
    s->start_loss = get_f64(&c);
    s->best_val = get_f64(&c);
    s->best_step = get_u64(&c);
    s->row_loss = get_f64(&c);
    s->row_norm = get_f64(&c);
    s->row_steps = get_u64(&c);
    s->n_recent = get_u64(&c);
    for (int i = 0; i < LOSS_WINDOW; i++) s->recent[i] = get_f32(&c);
    const uint8_t *vocab = c.r;
    for (size_t i = 0; i < vocab_bytes(d); i++) {
        if (vocab[i] != d->vocab[i]) {
            snprintf(err, errlen,
                     "vocabulary differs at id %zu: checkpoint byte 0x%02x, data byte 0x%02x "
                     "(trained on another text?)",
                     i, vocab[i], d->vocab[i]);
            return false;
        }
    }
    return true;
}

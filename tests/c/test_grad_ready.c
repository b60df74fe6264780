/*
 * test_grad_ready.c: ag_set_grad_ready_callback from C. During ag_backward
 * the callback's ranges tile the gradient block exactly once, each holds
 * its final bits when reported (compared with ag_grads_buffer after
 * backward), the first comes before the walk ends (so a caller can overlap
 * its all-reduce), ticks come between ops, a call into the context from
 * inside the callback is refused with BUSY, accumulation reports again,
 * and a NULL callback removes it. Then ZeRO-1 checkpoints: two sharded
 * optimizers gather their moments (ag_optimizer_state_copy_out) and
 * ag_checkpoint_save_gathered writes the unsharded optimizer's file byte
 * for byte, which loads back into a shard.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

#define MAX_RANGES 16
#define MAX_FLOATS 64

struct seen {
    ag_context *ctx; /* to try a call from inside the callback */
    size_t first[MAX_RANGES], count[MAX_RANGES], ticks_before[MAX_RANGES];
    float values[MAX_RANGES][MAX_FLOATS];
    const float *block;
    size_t ranges, ticks, overflow;
    ag_status inner; /* what ag_zero_grad returned inside the callback */
};

static void on_ready(void *user_data, size_t first, size_t count)
{
    struct seen *s = user_data;
    if (count == 0) {
        s->ticks++;
        return;
    }
    if (s->ranges == MAX_RANGES || count > MAX_FLOATS) {
        s->overflow++;
        return;
    }
    size_t k = s->ranges++;
    s->first[k] = first;
    s->count[k] = count;
    s->ticks_before[k] = s->ticks;
    memcpy(s->values[k], s->block + first, count * sizeof(float));
    s->inner = ag_zero_grad(s->ctx);
}

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)((i * 2654435761u ^ seed) % 1000) / 1000.0f - 0.5f;
}

/* loss = sum((tanh(tanh(x w1 + b) w2) w1^T)^2): w1 read first and last. */
static ag_status forward(ag_context *c, ag_tensor w1, ag_tensor b, ag_tensor w2, unsigned seed,
                         ag_tensor *loss)
{
    float xv[8];
    fill(xv, 8, seed);
    ag_tensor x, h;
    ag_status st = ag_tensor_new(c, (const size_t[]){2, 4}, 2, xv, &x);
    if (st == AG_STATUS_OK) st = ag_matmul(c, x, w1, false, false, &h);
    if (st == AG_STATUS_OK) st = ag_add(c, h, b, &h);
    if (st == AG_STATUS_OK) st = ag_tanh(c, h, &h);
    if (st == AG_STATUS_OK) st = ag_matmul(c, h, w2, false, false, &h);
    if (st == AG_STATUS_OK) st = ag_tanh(c, h, &h);
    if (st == AG_STATUS_OK) st = ag_matmul(c, h, w1, false, true, &h);
    if (st == AG_STATUS_OK) st = ag_mul(c, h, h, &h);
    if (st == AG_STATUS_OK) st = ag_sum(c, h, loss);
    return st;
}

/* Every float reported exactly once, with the bits it ends with. */
static void check_ranges(const struct seen *s, const float *g, size_t n)
{
    int cover[MAX_FLOATS] = {0};
    CHECK(s->overflow == 0);
    for (size_t k = 0; k < s->ranges; k++) {
        REQUIRE(s->first[k] + s->count[k] <= n);
        for (size_t i = 0; i < s->count[k]; i++) cover[s->first[k] + i]++;
        CHECK(memcmp(s->values[k], g + s->first[k], s->count[k] * sizeof(float)) == 0);
    }
    for (size_t i = 0; i < n; i++) CHECK(cover[i] == 1);
}

static void test_grad_ready(void)
{
    check_begin("ag_set_grad_ready_callback");
    ag_context *c = NULL;
    REQUIRE(ag_context_new(&c) == AG_STATUS_OK);
    check_set_ctx(c);
    float w1v[16], bv[4], w2v[16];
    fill(w1v, 16, 1);
    fill(bv, 4, 2);
    fill(w2v, 16, 3);
    ag_tensor w1, b, w2;
    REQUIRE_OK(ag_param_new(c, (const size_t[]){4, 4}, 2, w1v, &w1));
    REQUIRE_OK(ag_param_new(c, (const size_t[]){1, 4}, 2, bv, &b));
    REQUIRE_OK(ag_param_new(c, (const size_t[]){4, 4}, 2, w2v, &w2));
    REQUIRE_OK(ag_optimizer_adamw(c, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f));
    float *g = NULL;
    size_t n = 0;
    REQUIRE_OK(ag_grads_buffer(c, &g, &n));
    REQUIRE(n == 36);

    static struct seen s;
    memset(&s, 0, sizeof s);
    s.ctx = c;
    s.block = g;
    /* 0 bytes: one bucket per parameter. */
    CHECK_OK(ag_set_grad_ready_callback(c, on_ready, &s, 0));
    for (unsigned micro = 0; micro < 2; micro++) { /* accumulation: no zero_grad between */
        s.ranges = s.ticks = 0;
        s.inner = AG_STATUS_OK;
        ag_tensor loss;
        CHECK_OK(ag_reset(c));
        REQUIRE_OK(forward(c, w1, b, w2, 10 + micro, &loss));
        CHECK_OK(ag_backward(c, loss));
        check_ranges(&s, g, n);
        CHECK(s.ranges == 3);
        CHECK(s.ticks > 0 && s.ticks_before[0] < s.ticks);
        CHECK(s.first[s.ranges - 1] == 0); /* w1, read by the first op, comes last */
        CHECK(s.inner == AG_STATUS_BUSY);
    }

    /* One big bucket: a single range, the whole block. */
    CHECK_OK(ag_zero_grad(c));
    CHECK_OK(ag_set_grad_ready_callback(c, on_ready, &s, 1u << 20));
    s.ranges = s.ticks = 0;
    ag_tensor loss;
    CHECK_OK(ag_reset(c));
    REQUIRE_OK(forward(c, w1, b, w2, 20, &loss));
    CHECK_OK(ag_backward(c, loss));
    check_ranges(&s, g, n);
    CHECK(s.ranges == 1 && s.first[0] == 0 && s.count[0] == n);

    /* Removed: nothing is called. */
    CHECK_OK(ag_set_grad_ready_callback(c, NULL, NULL, 0));
    s.ranges = s.ticks = 0;
    CHECK_OK(ag_reset(c));
    REQUIRE_OK(forward(c, w1, b, w2, 30, &loss));
    CHECK_OK(ag_backward(c, loss));
    CHECK(s.ranges == 0 && s.ticks == 0);

    CHECK_STATUS(ag_set_grad_ready_callback(NULL, on_ready, &s, 0), AG_STATUS_NULL_ARGUMENT);
    check_set_ctx(NULL);
    ag_context_free(&c);
}

/* A context with the three parameters and AdamW over floats first..first+count. */
static void zero_model(ag_context **out, size_t first, size_t count, ag_tensor p[3])
{
    ag_context *c = NULL;
    float w1v[16], bv[4], w2v[16];
    fill(w1v, 16, 1);
    fill(bv, 4, 2);
    fill(w2v, 16, 3);
    REQUIRE(ag_context_new(&c) == AG_STATUS_OK);
    *out = c;
    REQUIRE_OK(ag_param_new(c, (const size_t[]){4, 4}, 2, w1v, &p[0]));
    REQUIRE_OK(ag_param_new(c, (const size_t[]){1, 4}, 2, bv, &p[1]));
    REQUIRE_OK(ag_param_new(c, (const size_t[]){4, 4}, 2, w2v, &p[2]));
    REQUIRE_OK(ag_optimizer_shard(c, first, count));
    REQUIRE_OK(ag_optimizer_adamw(c, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f));
}

/* The file's bytes (0 when it cannot be read). */
static size_t read_all(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void test_zero_checkpoint(void)
{
    check_begin("ag_checkpoint_save_gathered");
    enum { N = 36, CUT = 18 }; /* w1 is 0..16, b 16..20: the cut is inside b */
    const size_t first[3] = {0, 0, CUT}, count[3] = {N, CUT, N - CUT};
    ag_context *c[3];
    ag_tensor p[3][3];
    for (int k = 0; k < 3; k++) zero_model(&c[k], first[k], count[k], p[k]);
    float params[N], moments[2 * N], whole[2 * N];
    for (unsigned step = 0; step < 3; step++) {
        for (int k = 0; k < 3; k++) {
            ag_tensor loss;
            CHECK_OK(ag_reset(c[k]));
            REQUIRE_OK(forward(c[k], p[k][0], p[k][1], p[k][2], 40 + step, &loss));
            CHECK_OK(ag_backward(c[k], loss));
            CHECK_OK(ag_optimizer_step(c[k]));
            CHECK_OK(ag_zero_grad(c[k]));
        }
        /* The shards exchange their updated slices. */
        CHECK_OK(ag_params_copy_out(c[1], 0, params, CUT));
        CHECK_OK(ag_params_copy_out(c[2], CUT, params + CUT, N - CUT));
        CHECK_OK(ag_params_copy_in(c[1], 0, params, N));
        CHECK_OK(ag_params_copy_in(c[2], 0, params, N));
    }
    for (unsigned which = 0; which < 2; which++) {
        CHECK_OK(ag_optimizer_state_copy_out(c[0], which, 0, whole + which * N, N));
        for (int k = 1; k < 3; k++)
            CHECK_OK(ag_optimizer_state_copy_out(c[k], which, first[k],
                                                 moments + which * N + first[k], count[k]));
    }
    CHECK(memcmp(moments, whole, sizeof whole) == 0);
    /* Outside the shard: refused, named, nothing written. */
    float probe[2] = {7.0f, 7.0f};
    check_set_ctx(c[2]);
    CHECK_STATUS(ag_optimizer_state_copy_out(c[2], 0, CUT - 1, probe, 2),
                 AG_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(ag_context_last_error(c[2]), "ag_optimizer_state_copy_out") != NULL);
    CHECK(probe[0] == 7.0f);
    check_set_ctx(NULL);

    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/test_zero_%d_whole.ckpt", (int)getpid());
    snprintf(b, sizeof b, "/tmp/test_zero_%d_gathered.ckpt", (int)getpid());
    const uint8_t user[3] = {1, 2, 3};
    CHECK_OK(ag_checkpoint_save(c[0], a, user, 3));
    CHECK_OK(ag_checkpoint_save_gathered(c[2], b, user, 3, moments, 2 * N));
    CHECK_STATUS(ag_checkpoint_save(c[2], b, user, 3), AG_STATUS_SEQUENCE);
    static unsigned char fa[1 << 14], fb[1 << 14];
    size_t na = read_all(a, fa, sizeof fa), nb = read_all(b, fb, sizeof fb);
    CHECK(na > 2 * N * 4 && na == nb && memcmp(fa, fb, na) == 0);

    /* Back into a fresh shard: its slice of both moments. */
    ag_tensor q[3];
    ag_context *d = NULL;
    zero_model(&d, CUT, N - CUT, q);
    uint8_t got[8];
    size_t got_len = 0;
    CHECK_OK(ag_checkpoint_load(d, a, got, sizeof got, &got_len));
    CHECK(got_len == 3 && memcmp(got, user, 3) == 0);
    float back[N - CUT];
    for (unsigned which = 0; which < 2; which++) {
        CHECK_OK(ag_optimizer_state_copy_out(d, which, CUT, back, N - CUT));
        CHECK(memcmp(back, whole + which * N + CUT, sizeof back) == 0);
    }
    remove(a);
    remove(b);
    ag_context_free(&d);
    for (int k = 0; k < 3; k++) ag_context_free(&c[k]);
}

int main(void)
{
    test_grad_ready();
    test_zero_checkpoint();
    return check_summary();
}

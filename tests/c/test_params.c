/*
 * test_params.c: named parameters from C. ag_param_new names its
 * parameters "param.<i>", ag_param_new_named takes a name; ag_param_count,
 * ag_param_at, ag_param_name and ag_tensor_shape list a model without a
 * table of the caller's own; duplicate names (automatic ones included) and
 * too small name buffers are refused with nothing written. ag_safetensors_save
 * and ag_safetensors_load round-trip the values bit for bit by name; a
 * truncated file, a missing parameter and another shape are refused with
 * their status and the values kept. A parameter whose weight decay is off is
 * left unchanged by decay (SGD and AdamW, zero gradient).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static void test_listing(void) {
    check_begin("listing");
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    ag_tensor w, b, auto1;
    CHECK_OK(ag_param_new_named(c, "fc.weight", (const size_t[]){3, 4}, 2, NULL, &w));
    CHECK_OK(ag_param_new(c, (const size_t[]){7}, 1, NULL, &auto1));
    CHECK_OK(ag_param_new_named(c, "fc.bias", (const size_t[]){4}, 1, NULL, &b));

    static const char *const want_name[] = {"fc.weight", "param.1", "fc.bias"};
    static const size_t want_nd[] = {2, 1, 1};
    static const size_t want_d0[] = {3, 7, 4};
    size_t n = 0;
    CHECK_OK(ag_param_count(c, &n));
    CHECK(n == 3);
    for (size_t i = 0; i < n; i++) {
        ag_tensor p;
        char name[AG_MAX_PARAM_NAME + 1];
        size_t len = 0, dims[AG_MAX_DIMS], nd = 0;
        CHECK_OK(ag_param_at(c, i, &p));
        CHECK_OK(ag_param_name(c, p, name, sizeof name, &len));
        CHECK_OK(ag_tensor_shape(c, p, dims, &nd));
        CHECK(strcmp(name, want_name[i]) == 0 && len == strlen(want_name[i]));
        CHECK(nd == want_nd[i] && dims[0] == want_d0[i]);
    }
    ag_tensor p = w;
    CHECK_ERR(c, ag_param_at(c, 3, &p), AG_STATUS_INVALID_ARGUMENT, "index 3", "count 3");
    CHECK(p.index == w.index && p.generation == w.generation);

    /* Length first, then a buffer of exactly that size plus the NUL. */
    size_t len = 0;
    CHECK_OK(ag_param_name(c, b, NULL, 0, &len));
    CHECK(len == 7);
    char small[8];
    memset(small, '#', sizeof small);
    size_t len2 = 99;
    CHECK_ERR(c, ag_param_name(c, b, small, len, &len2), AG_STATUS_INVALID_ARGUMENT,
              "ag_param_name", "`fc.bias`");
    CHECK(small[0] == '#' && len2 == 99);
    CHECK_OK(ag_param_name(c, b, small, len + 1, &len2));
    CHECK(strcmp(small, "fc.bias") == 0);

    ag_tensor d;
    CHECK_ERR(c, ag_param_new_named(c, "fc.bias", (const size_t[]){1}, 1, NULL, &d),
              AG_STATUS_INVALID_ARGUMENT, "`fc.bias`", "parameter 2");
    CHECK_ERR(c, ag_param_new_named(c, "param.1", (const size_t[]){1}, 1, NULL, &d),
              AG_STATUS_INVALID_ARGUMENT, "`param.1`", "parameter 1");
    CHECK_ERR(c, ag_param_new_named(c, "", (const size_t[]){1}, 1, NULL, &d),
              AG_STATUS_INVALID_ARGUMENT, "empty");
    CHECK_OK(ag_param_new_named(c, "param.4", (const size_t[]){1}, 1, NULL, &d)); /* index 3 */
    CHECK_ERR(c, ag_param_new(c, (const size_t[]){1}, 1, NULL, &d), AG_STATUS_INVALID_ARGUMENT,
              "`param.4`", "parameter 3");
    CHECK_OK(ag_param_count(c, &n));
    CHECK(n == 4);

    /* Activations have no name. */
    ag_tensor x;
    CHECK_OK(ag_tensor_new(c, (const size_t[]){1}, 1, (const float[]){1.0f}, &x));
    CHECK_ERR(c, ag_param_name(c, x, NULL, 0, &len), AG_STATUS_INVALID_ARGUMENT,
              "not a parameter");
    CHECK_OK(ag_context_free(&c));
}

static char g_path[256], g_cut[256];

/* A context with "a" [2, 3] and "b" [3] (created in the given order). */
static ag_context *two(int b_first, ag_tensor *a, ag_tensor *b, const float *va, const float *vb) {
    ag_context *c = NULL;
    if (ag_context_new(&c) != AG_STATUS_OK) return NULL;
    if (b_first) CHECK_OK(ag_param_new_named(c, "b", (const size_t[]){3}, 1, vb, b));
    CHECK_OK(ag_param_new_named(c, "a", (const size_t[]){2, 3}, 2, va, a));
    if (!b_first) CHECK_OK(ag_param_new_named(c, "b", (const size_t[]){3}, 1, vb, b));
    return c;
}

static void test_safetensors(void) {
    check_begin("safetensors");
    const float va[6] = {1.5f, -2.0f, 0.1f, 3e-39f, -0.0f, 1e30f}, vb[3] = {7.0f, 8.0f, 9.0f};
    ag_tensor a, b, a2, b2;
    ag_context *src = two(0, &a, &b, va, vb);
    ag_context *dst = two(1, &a2, &b2, NULL, NULL);
    REQUIRE(src != NULL && dst != NULL);
    check_set_ctx(src);
    CHECK_OK(ag_safetensors_save(src, g_path));
    check_set_ctx(dst);
    CHECK_OK(ag_safetensors_load(dst, g_path));
    float ga[6], gb[3];
    CHECK_OK(ag_tensor_read(dst, a2, ga, 6));
    CHECK_OK(ag_tensor_read(dst, b2, gb, 3));
    CHECK(memcmp(ga, va, sizeof va) == 0 && memcmp(gb, vb, sizeof vb) == 0);

    /* A truncated copy: refused, nothing changes. */
    FILE *in = fopen(g_path, "rb"), *out = fopen(g_cut, "wb");
    REQUIRE(in != NULL && out != NULL);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in);
    CHECK(n > 10 && fwrite(buf, 1, n - 5, out) == n - 5);
    fclose(in);
    fclose(out);
    const float zeros[6] = {0};
    CHECK_OK(ag_param_write(dst, a2, zeros, 6));
    CHECK_ERR(dst, ag_safetensors_load(dst, g_cut), AG_STATUS_CHECKPOINT_CORRUPT, "truncated");
    CHECK_OK(ag_tensor_read(dst, a2, ga, 6));
    CHECK(memcmp(ga, zeros, sizeof zeros) == 0);

    /* Another model: a missing parameter, another shape. */
    ag_context *one = NULL;
    REQUIRE_OK(ag_context_new(&one));
    ag_tensor t;
    CHECK_OK(ag_param_new_named(one, "a", (const size_t[]){2, 3}, 2, NULL, &t));
    CHECK_ERR(one, ag_safetensors_load(one, g_path), AG_STATUS_CHECKPOINT_MISMATCH, "`b`",
              "not a parameter");
    ag_context *other = NULL;
    REQUIRE_OK(ag_context_new(&other));
    CHECK_OK(ag_param_new_named(other, "a", (const size_t[]){3, 2}, 2, NULL, &t));
    CHECK_OK(ag_param_new_named(other, "b", (const size_t[]){3}, 1, NULL, &t));
    CHECK_ERR(other, ag_safetensors_load(other, g_path), AG_STATUS_CHECKPOINT_MISMATCH, "`a`",
              "[2,3] in the file, [3,2] in the model");
    CHECK_OK(ag_tensor_read(other, t, gb, 3));
    CHECK(gb[0] == 0.0f && gb[1] == 0.0f && gb[2] == 0.0f);
    CHECK_OK(ag_context_free(&src));
    CHECK_OK(ag_context_free(&dst));
    CHECK_OK(ag_context_free(&one));
    CHECK_OK(ag_context_free(&other));
}

static void test_weight_decay(void) {
    check_begin("weight decay");
    for (int adamw = 0; adamw < 2; adamw++) {
        const float v[6] = {1, -2, 3, -4, 5, -6}, vb[3] = {1, 2, 3};
        ag_tensor a, b;
        ag_context *c = two(0, &a, &b, v, vb);
        REQUIRE(c != NULL);
        check_set_ctx(c);
        CHECK_OK(ag_param_set_weight_decay(c, b, false));
        if (adamw) {
            CHECK_OK(ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f));
        } else {
            CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.0f, 0.5f));
        }
        ag_tensor sa, sb, s, loss;
        CHECK_OK(ag_sum(c, a, &sa));
        CHECK_OK(ag_sum(c, b, &sb));
        CHECK_OK(ag_add(c, sa, sb, &s));
        CHECK_OK(ag_scale(c, s, 0.0f, &loss)); /* zero gradients */
        CHECK_OK(ag_backward(c, loss));
        CHECK_OK(ag_optimizer_step(c));
        float ga[6], gb[3];
        CHECK_OK(ag_tensor_read(c, a, ga, 6));
        CHECK_OK(ag_tensor_read(c, b, gb, 3));
        CHECK(memcmp(gb, vb, sizeof vb) == 0);              /* decay off: unchanged */
        for (int i = 0; i < 6; i++) { /* on: p - lr * wd * p */
            CHECK(fabsf(ga[i] - v[i] * 0.95f) <= 1e-6f * fabsf(v[i]));
        }
        CHECK_OK(ag_context_free(&c));
    }
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0') tmp = "/tmp";
    snprintf(g_path, sizeof g_path, "%s/test_params.%ld.safetensors", tmp, (long)getpid());
    snprintf(g_cut, sizeof g_cut, "%s/test_params.%ld.cut", tmp, (long)getpid());
    test_listing();
    test_safetensors();
    test_weight_decay();
    remove(g_path);
    remove(g_cut);
    return check_summary();
}

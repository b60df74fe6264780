/*
 * test_init.c: ag_param_init from C. The same seed gives the same bits in
 * two contexts, a different seed or parameter different values; Kaiming
 * normal has the documented standard deviation (within 5 standard errors),
 * Xavier uniform stays inside its bound; bad kinds, arguments and shapes
 * are refused with the documented status and leave the values as they were.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define FAN_IN 256
#define FAN_OUT 128
#define N (FAN_IN * FAN_OUT)

static float a_vals[N], b_vals[N], c_vals[N];

/* A context with a bias [FAN_OUT] (index 0) and a weight [FAN_IN, FAN_OUT]. */
static ag_context *model(ag_tensor *bias, ag_tensor *w) {
    ag_context *ctx = NULL;
    if (ag_context_new(&ctx) != AG_STATUS_OK) return NULL;
    CHECK_OK(ag_param_new(ctx, (const size_t[]){FAN_OUT}, 1, NULL, bias));
    CHECK_OK(ag_param_new(ctx, (const size_t[]){FAN_IN, FAN_OUT}, 2, NULL, w));
    return ctx;
}

static void test_determinism_and_moments(void) {
    check_begin("determinism and moments");
    ag_tensor b1, w1, b2, w2;
    ag_context *c1 = model(&b1, &w1), *c2 = model(&b2, &w2);
    REQUIRE(c1 != NULL && c2 != NULL);
    check_set_ctx(c1);
    const float gain = sqrtf(2.0f);
    CHECK_OK(ag_param_init(c1, w1, AG_INIT_KAIMING_NORMAL, gain, 0.0f, 42));
    CHECK_OK(ag_param_init(c2, w2, AG_INIT_KAIMING_NORMAL, gain, 0.0f, 42));
    CHECK_OK(ag_tensor_read(c1, w1, a_vals, N));
    CHECK_OK(ag_tensor_read(c2, w2, b_vals, N));
    CHECK(memcmp(a_vals, b_vals, sizeof a_vals) == 0);

    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < N; i++) sum += a_vals[i];
    double mean = sum / N;
    for (int i = 0; i < N; i++) sq += (a_vals[i] - mean) * (a_vals[i] - mean);
    double std = sqrt(sq / (N - 1)), want = gain / sqrt((double)FAN_IN);
    printf("kaiming normal [%d, %d]: mean %.5f std %.5f (want %.5f)\n", FAN_IN, FAN_OUT, mean,
           std, want);
    CHECK(fabs(mean) <= 5.0 * want / sqrt((double)N));
    CHECK(fabs(std - want) <= 5.0 * want / sqrt(2.0 * N));

    /* Another seed: other values. */
    CHECK_OK(ag_param_init(c2, w2, AG_INIT_KAIMING_NORMAL, gain, 0.0f, 43));
    CHECK_OK(ag_tensor_read(c2, w2, c_vals, N));
    int same = 0;
    for (int i = 0; i < N; i++) same += a_vals[i] == c_vals[i];
    CHECK(same < 10);

    double bound = sqrt(6.0 / (FAN_IN + FAN_OUT));
    CHECK_OK(ag_param_init(c1, w1, AG_INIT_XAVIER_UNIFORM, 1.0f, 0.0f, 7));
    CHECK_OK(ag_tensor_read(c1, w1, a_vals, N));
    int outside = 0;
    for (int i = 0; i < N; i++) outside += fabs(a_vals[i]) > bound;
    CHECK(outside == 0);
    CHECK_OK(ag_context_free(&c1));
    CHECK_OK(ag_context_free(&c2));
}

static void test_bad_input(void) {
    check_begin("bad input");
    ag_tensor bias, w, act;
    ag_context *c = model(&bias, &w);
    REQUIRE(c != NULL);
    check_set_ctx(c);
    CHECK_OK(ag_param_init(c, w, AG_INIT_UNIFORM, -1.0f, 1.0f, 3));
    CHECK_OK(ag_tensor_read(c, w, a_vals, N));
    CHECK_ERR(c, ag_param_init(c, w, 99, 0.0f, 1.0f, 3), AG_STATUS_INVALID_ARGUMENT,
              "ag_param_init", "kind 99");
    CHECK_ERR(c, ag_param_init(c, w, AG_INIT_NORMAL, 0.0f, -0.5f, 3), AG_STATUS_INVALID_ARGUMENT,
              "param_init", "std = -0.5 must be >= 0");
    CHECK_ERR(c, ag_param_init(c, w, AG_INIT_UNIFORM, 1.0f, -1.0f, 3), AG_STATUS_INVALID_ARGUMENT,
              "low = 1 must be <= high = -1");
    CHECK_ERR(c, ag_param_init(c, w, AG_INIT_NORMAL, NAN, 1.0f, 3), AG_STATUS_INVALID_ARGUMENT,
              "mean = NaN");
    CHECK_ERR(c, ag_param_init(c, bias, AG_INIT_KAIMING_UNIFORM, 1.0f, 0.0f, 3),
              AG_STATUS_SHAPE_MISMATCH, "rank >= 2");
    CHECK_OK(ag_tensor_read(c, w, b_vals, N));
    CHECK(memcmp(a_vals, b_vals, sizeof a_vals) == 0);
    CHECK_OK(ag_tensor_new(c, (const size_t[]){2}, 1, (const float[]){1.0f, 2.0f}, &act));
    CHECK_ERR(c, ag_param_init(c, act, AG_INIT_ZEROS, 0.0f, 0.0f, 3), AG_STATUS_INVALID_ARGUMENT,
              "not a parameter");
    CHECK_OK(ag_reset(c));
    CHECK_STATUS(ag_param_init(c, act, AG_INIT_ZEROS, 0.0f, 0.0f, 3), AG_STATUS_STALE_HANDLE);
    CHECK_STATUS(ag_param_init(NULL, w, AG_INIT_ZEROS, 0.0f, 0.0f, 3), AG_STATUS_NULL_ARGUMENT);
    CHECK_OK(ag_context_free(&c));
}

int main(void) {
    test_determinism_and_moments();
    test_bad_input();
    return check_summary();
}

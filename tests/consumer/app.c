/*
 * A program that uses an installed arenagrad the way a user would: only
 * <arenagrad.h> and the flags pkg-config or CMake give. It checks the
 * version macros against the library it runs with, then fits y = 2x - 1
 * with one linear layer and SGD; it prints "consumer ok" and returns 0 when
 * the loss has fallen below a hundredth of its first value.
 */
#include <arenagrad.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                            \
    do {                                                                       \
        ag_status st_ = (call);                                                \
        if (st_ != AG_STATUS_OK) {                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, ag_status_str(st_),         \
                    ag_context_last_error(ctx));                               \
            return 1;                                                          \
        }                                                                      \
    } while (0)

int main(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", AG_VERSION_MAJOR, AG_VERSION_MINOR, AG_VERSION_PATCH);
    if (strcmp(want, ag_version()) != 0 || ag_version_number() != AG_VERSION_NUMBER) {
        fprintf(stderr, "header %s (%d) but library %s (%u)\n", want, AG_VERSION_NUMBER,
                ag_version(), (unsigned)ag_version_number());
        return 1;
    }

    ag_context *ctx = NULL;
    if (ag_context_new(&ctx) != AG_STATUS_OK) {
        fprintf(stderr, "ag_context_new failed\n");
        return 1;
    }
    enum { N = 8 };
    float xs[N], ys[N];
    for (int i = 0; i < N; i++) {
        xs[i] = (float)i / N - 0.5f;
        ys[i] = 2.0f * xs[i] - 1.0f;
    }
    size_t wshape[2] = {1, 1}, bshape[1] = {1}, xshape[2] = {N, 1};
    ag_tensor w, b;
    CHECK(ag_param_new(ctx, wshape, 2, NULL, &w));
    CHECK(ag_param_new(ctx, bshape, 1, NULL, &b));
    CHECK(ag_optimizer_sgd(ctx, 0.5f, 0.0f, 0.0f));
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 200; step++) {
        ag_tensor x, y, pred, diff, sq, loss;
        CHECK(ag_reset(ctx));
        CHECK(ag_tensor_new(ctx, xshape, 2, xs, &x));
        CHECK(ag_tensor_new(ctx, xshape, 2, ys, &y));
        CHECK(ag_linear(ctx, x, w, &b, &pred));
        CHECK(ag_sub(ctx, pred, y, &diff));
        CHECK(ag_mul(ctx, diff, diff, &sq));
        CHECK(ag_mean(ctx, sq, &loss));
        CHECK(ag_tensor_item(ctx, loss, &last));
        if (step == 0) first = last;
        CHECK(ag_backward(ctx, loss));
        CHECK(ag_optimizer_step(ctx));
        CHECK(ag_zero_grad(ctx));
    }
    CHECK(ag_context_free(&ctx));
    if (!(last < first / 100.0f)) {
        fprintf(stderr, "loss did not fall: %g -> %g\n", first, last);
        return 1;
    }
    printf("consumer ok: arenagrad %s, loss %.4g -> %.4g\n", ag_version(), first, last);
    return 0;
}

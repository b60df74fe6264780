/*
 * test_segments.c: every op of tests/c/ops.def inside a recomputed segment.
 *
 * For each AG_OP row, loss = sum(y0 * y0) + sum(y1 * y1) with
 * yk = 1.5 * op(sk * p...) over parameters p of the row's shapes, built in
 * one context plainly, then with each stretch inside a segment that
 * AG_RECOMPUTE_ALL recomputes (so the op's inputs and output live in the
 * scratch region, which the second segment overwrites, and backward must
 * replay what the op's backward reads). The loss and every
 * parameter gradient must be bit-identical: a wrong "what backward reads"
 * for any op (a replay skipped) changes them. Rows are read from ops.def,
 * so a new op is covered without editing this file.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "op_table.h"

#define MAXN 64

typedef struct run_result {
    float loss;
    float grad[3][MAXN];
} run_result;

/* One forward + backward of row `op` from the parameters `p`, with each of
 * the two stretches inside a recomputed segment or not. */
static bool run(ag_context *c, int op, const ag_tensor p[3], bool segment, run_result *r) {
    const op_info *info = &OPS[op];
    op_scratch s;
    op_scratch_init(&s);
    ag_tensor x[3] = {p[0], p[1], p[2]}, y, out[2], sq[2], part[2], loss;
    /* Two stretches of the same shapes: the second recomputed segment
     * reuses the first one's scratch offsets and overwrites its values, so
     * the first one's backward sees the right values only if its replay
     * restored them. */
    for (int k = 0; k < 2; k++) {
        if (segment && ag_segment_begin(c) != AG_STATUS_OK) return false;
        for (int i = 0; i < info->arity; i++) {
            if (ag_scale(c, p[i], k == 0 ? 0.5f : 0.75f, &x[i]) != AG_STATUS_OK) return false;
        }
        if (call_op(op, c, x, &y, &s) != AG_STATUS_OK) return false;
        if (ag_scale(c, y, 1.5f, &out[k]) != AG_STATUS_OK) return false;
        if (segment && ag_segment_end(c, out[k]) != AG_STATUS_OK) return false;
        if (ag_mul(c, out[k], out[k], &sq[k]) != AG_STATUS_OK ||
            ag_sum(c, sq[k], &part[k]) != AG_STATUS_OK)
            return false;
    }
    if (ag_add(c, part[0], part[1], &loss) != AG_STATUS_OK) return false;
    if (ag_tensor_item(c, loss, &r->loss) != AG_STATUS_OK) return false;
    if (ag_backward(c, loss) != AG_STATUS_OK) return false;
    for (int i = 0; i < info->arity; i++) {
        if (ag_tensor_read_grad(c, p[i], r->grad[i], op_numel(op, i)) != AG_STATUS_OK)
            return false;
    }
    return ag_zero_grad(c) == AG_STATUS_OK && ag_reset(c) == AG_STATUS_OK;
}

static void test_row(int op) {
    const op_info *info = &OPS[op];
    check_begin(info->fn);
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    ag_tensor p[3];
    for (int i = 0; i < info->arity; i++) {
        float init[MAXN];
        size_t n = op_numel(op, i);
        REQUIRE(n <= MAXN);
        /* Values in [0.3, 1.2]: inside every op's domain (log, sqrt). */
        for (size_t j = 0; j < n; j++) init[j] = 0.3f + 0.1f * (float)((j * 7 + (size_t)i) % 10);
        REQUIRE_OK(ag_param_new(c, info->shape[i].dims, info->shape[i].ndim, init, &p[i]));
    }
    run_result plain, again, seg;
    memset(&plain, 0, sizeof plain);
    memset(&again, 0, sizeof again);
    memset(&seg, 0, sizeof seg);
    CHECK(run(c, op, p, false, &plain));
    CHECK_OK(ag_set_recompute(c, AG_RECOMPUTE_ALL));
    CHECK(run(c, op, p, true, &seg));
    /* Twice: the second recomputed iteration reuses the warm scratch. */
    CHECK(run(c, op, p, true, &again));
    CHECK(memcmp(&plain.loss, &seg.loss, sizeof(float)) == 0);
    CHECK(memcmp(&plain, &seg, sizeof plain) == 0);
    CHECK(memcmp(&plain, &again, sizeof plain) == 0);
    if (memcmp(&plain, &seg, sizeof plain) != 0) {
        fprintf(stderr, "    %s: gradients differ inside a recomputed segment\n", info->fn);
    }
    CHECK_OK(ag_context_free(&c));
}

int main(void) {
    int rows = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        if (!OPS[op].is_op) continue;
        test_row(op);
        rows++;
    }
    printf("test_segments: %d ops, each inside a recomputed segment\n", rows);
    return check_summary();
}

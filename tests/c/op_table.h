/*
 * op_table.h: the rows of ops.def as C a test can iterate over.
 *
 *   OP_<name>          index of a row (OP_add, ..., OP_param_write), then
 *                      OP_COUNT
 *   OPS[op]            what a generic caller needs: C name, op name (the
 *                      prefix of its handle errors), arity, kind, valid
 *                      argument shapes
 *   call_op(op, c, t, out, s)
 *                      makes the row's call with tensor arguments t[0..arity]
 *                      and valid other arguments; out == NULL passes NULL for
 *                      the function's out-pointer (has_out rows)
 *   op_scratch_init(s), op_scratch_untouched(s)
 *                      fill the buffers for non-tensor results with a
 *                      pattern, and tell whether a call left them alone
 */
#ifndef AG_TESTS_OP_TABLE_H
#define AG_TESTS_OP_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arenagrad.h"

/* What argument 0 of a row must be for a valid call (see ops.def). */
enum { AG_NEED_ANY, AG_NEED_GRAD, AG_NEED_PARAM, AG_NEED_LOSS };

/* Results of the functions that return no tensor (name: ag_param_name's
 * buffer), and the data ag_param_write copies. */
typedef struct op_scratch {
    size_t dims[AG_MAX_DIMS];
    size_t ndim;
    size_t numel;
    float dst[8];
    float item;
    float src[8];
    char name[16];
    ag_step step;
    ag_tensor y;   /* a transform's value */
    ag_tensor jac; /* and its log-Jacobian */
} op_scratch;

static inline void op_scratch_init(op_scratch *s) {
    memset(s, 0xA5, sizeof *s);
    for (int i = 0; i < 8; i++) s->src[i] = 0.125f * (float)(i + 1);
}

/* True if nothing was written into s since op_scratch_init. */
static inline bool op_scratch_untouched(const op_scratch *s) {
    op_scratch fresh;
    op_scratch_init(&fresh);
    return memcmp(s, &fresh, sizeof fresh) == 0;
}

enum {
#define AG_OP(name, ...) OP_##name,
#define AG_HANDLE_FN(name, ...) OP_##name,
#include "ops.def"
#undef AG_OP
#undef AG_HANDLE_FN
    OP_COUNT
};

typedef struct op_shape {
    size_t ndim;
    size_t dims[AG_MAX_DIMS];
} op_shape;

typedef struct op_info {
    const char *fn;   /* the C function, "ag_<name>" */
    const char *name; /* "<name>": handle errors start with "<name>: " */
    int arity;        /* tensor arguments */
    bool is_op;       /* returns a new tensor through `out` */
    int need;         /* AG_NEED_*: what argument 0 must be */
    bool has_out;     /* has an out-pointer that can be passed NULL */
    op_shape shape[3];
} op_info;

#define AG_SHAPE_(...) {sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t), {__VA_ARGS__}}
#define AG_SHAPE(s) AG_SHAPE_ s

static const op_info OPS[OP_COUNT] = {
#define AG_OP(name, arity, s0, s1, s2, ...) \
    [OP_##name] = {"ag_" #name, #name, arity, true, AG_NEED_ANY, true, {AG_SHAPE(s0), AG_SHAPE(s1), AG_SHAPE(s2)}},
#define AG_HANDLE_FN(name, arity, need, has_out, s0, ...) \
    [OP_##name] = {"ag_" #name, #name, arity, false, need, has_out, {AG_SHAPE(s0), AG_SHAPE((1)), AG_SHAPE((1))}},
#include "ops.def"
#undef AG_OP
#undef AG_HANDLE_FN
};

/* A seed slot of this iteration holding `v`, for ag_dropout_seeded's row
 * (its seed is data, not a tensor argument the tables vary): an all-zero
 * handle when the context refuses the slot, so the op then reports the
 * context's own error. */
static inline ag_tensor op_seed(ag_context *c, uint64_t v) {
    ag_tensor s = {0, 0, 0};
    if (ag_input_new(c, (const size_t[]){4}, 1, &s) == AG_STATUS_OK) (void)ag_seed_write(c, s, v);
    return s;
}

/* Element count of a row's argument shape. */
static inline size_t op_numel(int op, int pos) {
    size_t n = 1;
    for (size_t i = 0; i < OPS[op].shape[pos].ndim; i++) n *= OPS[op].shape[pos].dims[i];
    return n;
}

static inline ag_status call_op(int op, ag_context *c, const ag_tensor t[3], ag_tensor *out,
                                op_scratch *s) {
#define AG_OUT(p) (out != NULL ? (p) : NULL)
    switch (op) {
#define AG_OP(name, arity, s0, s1, s2, ...) \
    case OP_##name: return __VA_ARGS__;
#define AG_HANDLE_FN(name, arity, need, has_out, s0, ...) \
    case OP_##name: return __VA_ARGS__;
#include "ops.def"
#undef AG_OP
#undef AG_HANDLE_FN
    default: break;
    }
#undef AG_OUT
    (void)s;
    return AG_STATUS_INVALID_ARGUMENT; /* not a row: a bug in the test */
}

#endif /* AG_TESTS_OP_TABLE_H */

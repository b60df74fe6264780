/*
 * test_api.c: every function of include/arenagrad.h called with bad input.
 *
 * Each bad call must return its documented status and leave a non-empty last
 * error naming the function (or op) and the shapes or values involved. Out
 * parameters must stay untouched on failure.
 *
 * "The context still works" is measured, not assumed: every bad call runs
 * inside run_cases(), which builds two identical contexts holding a tiny
 * fixed model (a control and a subject), replays the same valid calls on
 * both, makes the bad call on the subject only, then runs two training
 * iterations on both and requires bit-identical losses (memcmp of the floats)
 * and bit-identical parameters.
 *
 * Every check is strict. Among them: op outputs over the element cap
 * (2^31 - 1) give TOO_LARGE before allocating (case_output_too_large,
 * test_element_cap); every function names itself in handle errors, also
 * transpose and tensor_numel, which query shapes internally (test_handles);
 * a handle with context id 0 is INVALID_HANDLE (test_handles); context
 * tokens are never reused, so a freed context stays INVALID_CONTEXT after
 * new contexts are made (case_lifecycle); the checkpoint temporary file has
 * an unpredictable name (a file, symlink or FIFO planted at
 * "<path>.tmp.<pid>" is left alone) and is removed on failure
 * (case_checkpoint); checkpoint errors read "checkpoint_load: ...".
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "op_table.h"

#define SENTINEL_TENSOR ((ag_tensor){0xA5A5A5A5u, 0x5A5A5A5Au, 0xA5A5A5A55A5A5A5Aull})

static bool same_tensor(ag_tensor a, ag_tensor b) {
    return a.index == b.index && a.context == b.context && a.generation == b.generation;
}

/* ------------------------------------------------------------------------ */
/* The tiny fixed model: logits = tanh(x @ w + b), cross-entropy, AdamW.     */
/* ------------------------------------------------------------------------ */

#define M_ROWS 5
#define M_IN 4
#define M_OUT 3

typedef struct model {
    ag_tensor w; /* [M_IN, M_OUT] */
    ag_tensor b; /* [M_OUT] */
} model;

static const float M_X[M_ROWS * M_IN] = {
    0.5f, -1.2f, 0.3f, 0.8f, -0.7f, 0.1f, 1.1f, -0.4f, 0.9f, 0.6f,
    -0.2f, -1.0f, -0.3f, -0.8f, 0.4f, 0.7f, 1.2f, -0.5f, -0.9f, 0.2f,
};
static const int32_t M_Y[M_ROWS] = {0, 2, 1, 2, 0};
static const float M_W0[M_IN * M_OUT] = {
    0.10f, -0.20f, 0.30f, 0.05f, 0.40f, -0.10f, -0.30f, 0.20f, 0.15f, 0.25f, -0.05f, 0.10f,
};
static const float M_B0[M_OUT] = {0.01f, -0.02f, 0.03f};

static ag_status make_optimizer(ag_context *c) {
    return ag_optimizer_adamw(c, 0.05f, 0.9f, 0.999f, 1e-8f, 0.01f);
}

/* A context holding the model (and its optimizer when with_opt), or NULL. */
static ag_context *new_model(model *m, bool with_opt) {
    ag_context *c = NULL;
    ag_status st = ag_context_new(&c);
    CHECK_OK(st);
    if (st != AG_STATUS_OK) return NULL;
    check_set_ctx(c);
    st = ag_param_new(c, (const size_t[]){M_IN, M_OUT}, 2, M_W0, &m->w);
    if (st == AG_STATUS_OK) st = ag_param_new(c, (const size_t[]){M_OUT}, 1, M_B0, &m->b);
    if (st == AG_STATUS_OK && with_opt) st = make_optimizer(c);
    CHECK_OK(st);
    if (st != AG_STATUS_OK) {
        ag_context_free(&c);
        return NULL;
    }
    return c;
}

/* One training iteration: reset, forward, backward, step, zero_grad. */
static ag_status train_iter(ag_context *c, const model *m, float *loss) {
    ag_tensor x, h, t, l;
    ag_status st = ag_reset(c);
    if (st == AG_STATUS_OK) st = ag_tensor_new(c, (const size_t[]){M_ROWS, M_IN}, 2, M_X, &x);
    if (st == AG_STATUS_OK) st = ag_linear(c, x, m->w, &m->b, &h);
    if (st == AG_STATUS_OK) st = ag_tanh(c, h, &t);
    if (st == AG_STATUS_OK) st = ag_cross_entropy(c, t, M_Y, M_ROWS, &l);
    if (st == AG_STATUS_OK) st = ag_tensor_item(c, l, loss);
    if (st == AG_STATUS_OK) st = ag_backward(c, l);
    if (st == AG_STATUS_OK) st = ag_optimizer_step(c);
    if (st == AG_STATUS_OK) st = ag_zero_grad(c);
    return st;
}

/* Reads w and b into dst[0..M_IN*M_OUT + M_OUT]. */
static ag_status read_params(ag_context *c, const model *m, float *dst) {
    ag_status st = ag_tensor_read(c, m->w, dst, M_IN * M_OUT);
    if (st == AG_STATUS_OK) st = ag_tensor_read(c, m->b, dst + M_IN * M_OUT, M_OUT);
    return st;
}

/* Two iterations on both contexts: bit-identical losses and parameters. */
static void check_still_works(ag_context *ctrl, const model *mc, ag_context *subj,
                              const model *ms) {
    for (int i = 0; i < 2; i++) {
        float lc = -1.0f, ls = -2.0f;
        check_set_ctx(ctrl);
        CHECK_OK(train_iter(ctrl, mc, &lc));
        check_set_ctx(subj);
        CHECK_OK(train_iter(subj, ms, &ls));
        if (!check_record(memcmp(&lc, &ls, sizeof lc) == 0, __FILE__, __LINE__,
                          "loss after the bad call is bit-identical to the control's")) {
            fprintf(stderr, "    iteration %d: control %.9g, subject %.9g\n", i, (double)lc,
                    (double)ls);
        }
    }
    float pc[M_IN * M_OUT + M_OUT], ps[M_IN * M_OUT + M_OUT];
    memset(pc, 0, sizeof pc);
    memset(ps, 0xff, sizeof ps);
    CHECK_OK(read_params(ctrl, mc, pc));
    CHECK_OK(read_params(subj, ms, ps));
    CHECK(memcmp(pc, ps, sizeof pc) == 0);
}

/*
 * A case function makes the same valid calls on both contexts and the bad
 * call only when `bad`; it returns false when `sub` is past its last
 * sub-case (then it must not have made any call that matters).
 */
typedef bool (*case_fn)(ag_context *c, const model *m, bool bad, int sub);

static int cases_run;

static void run_cases(const char *name, case_fn f, bool with_opt) {
    static char label[128];
    for (int sub = 0;; sub++) {
        snprintf(label, sizeof label, "%s#%d", name, sub);
        check_begin(label);
        model mc, ms;
        ag_context *ctrl = new_model(&mc, with_opt);
        ag_context *subj = new_model(&ms, with_opt);
        if (ctrl == NULL || subj == NULL) {
            ag_context_free(&ctrl);
            ag_context_free(&subj);
            return;
        }
        if (with_opt) { /* a first iteration, so optimizer state is not trivial */
            float l;
            CHECK_OK(train_iter(ctrl, &mc, &l));
            CHECK_OK(train_iter(subj, &ms, &l));
        }
        check_set_ctx(ctrl);
        bool more = f(ctrl, &mc, false, sub);
        if (more) {
            check_set_ctx(subj);
            f(subj, &ms, true, sub);
            check_still_works(ctrl, &mc, subj, &ms);
            cases_run++;
        }
        CHECK_OK(ag_context_free(&ctrl));
        CHECK_OK(ag_context_free(&subj));
        check_set_ctx(NULL);
        if (!more) return;
    }
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Pattern data for activations: 4096 distinct small values. */
static float pattern[4096];

/* A constant activation of shape dims[0..ndim] filled from `pattern`. */
static ag_tensor mk(ag_context *c, size_t ndim, const size_t *dims) {
    ag_tensor t = {0, 0, 0};
    CHECK_OK(ag_tensor_new(c, dims, ndim, pattern, &t));
    return t;
}
#define MK(c, ...) \
    mk((c), sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t), (const size_t[]){__VA_ARGS__})

static bool write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static char g_dir[64];          /* temporary folder of this test */
static char g_ckpt_user[128];   /* the model, user bytes "hello" */
static char g_ckpt_other[128];  /* a model of other shapes */
static char g_ckpt_trained[128];/* the model after 3 more steps, user bytes "hello" */
static char g_garbage[128];     /* 100 bytes of garbage */

/* ------------------------------------------------------------------------ */
/* Functions that take a tensor handle: op_table.h (rows in ops.def)        */
/* ------------------------------------------------------------------------ */

/* Valid tensor arguments of row `op` on c, made the same way on the control
 * and the subject: activations of the row's shapes, the model's parameter w
 * where the row needs a parameter or a gradient (only bad handles and NULL
 * out-pointers are passed to those rows here, which fail before any length
 * check). */
static void valid_args(ag_context *c, const model *m, int op, ag_tensor t[3]) {
    for (int pos = 0; pos < 3; pos++) t[pos] = m->b;
    for (int pos = 0; pos < OPS[op].arity; pos++) {
        int need = pos == 0 ? OPS[op].need : AG_NEED_ANY;
        if (need == AG_NEED_PARAM || need == AG_NEED_GRAD) {
            t[pos] = m->w;
        } else {
            const op_shape *sh = &OPS[op].shape[pos];
            t[pos] = mk(c, sh->ndim, sh->dims);
        }
    }
}

/* Kinds of bad handle. */
enum {
    HK_FORGED_INDEX,       /* index 0xdeadbeef, this context, current generation */
    HK_FORGED_INDEX_PARAM, /* index 0xdeadbeef, this context, generation 0 */
    HK_FORGED_GEN_MAX,     /* parameter index, generation UINT64_MAX */
    HK_FUTURE_GEN,         /* activation index, generation current + 1 */
    HK_PARAM_INDEX_ACT_GEN,/* parameter index 0 with the current generation */
    HK_ACT_INDEX_GEN0,     /* activation index with generation 0 */
    HK_ZERO,               /* all-zero handle (context id 0 is never used) */
    HK_ZERO_CTX_PARAM,     /* a parameter's index and generation, context id 0 */
    HK_ZERO_CTX_ACT,       /* a live activation's index and generation, context id 0 */
    HK_ALL_ONES,           /* every bit set */
    HK_WRONG_CTX_PARAM,    /* a parameter of another context */
    HK_WRONG_CTX_ACT,      /* an activation of another context */
    HK_STALE,              /* an activation from before the last ag_reset */
    HK_NULL_OUT,           /* valid handles, NULL out-pointer */
    HK_COUNT
};
static const char *const HK_NAME[HK_COUNT] = {
    "forged index", "forged index (gen 0)", "generation UINT64_MAX", "future generation",
    "parameter index with activation generation", "activation index with generation 0",
    "all-zero handle", "parameter with context id 0", "activation with context id 0",
    "all-ones handle", "other context's parameter",
    "other context's activation", "stale activation", "NULL out-pointer",
};

static int g_op, g_pos, g_kind;

static bool case_handle(ag_context *c, const model *m, bool bad, int sub) {
    if (sub > 0) return false;
    const op_info *o = &OPS[g_op];
    CHECK_OK(ag_reset(c));
    ag_tensor old = MK(c, 2, 3);
    CHECK_OK(ag_reset(c));
    ag_tensor cur = MK(c, 2, 3); /* same table slot as `old`, newer generation */
    ag_tensor t[3];
    valid_args(c, m, g_op, t);
    if (!bad) return true;

    uint32_t id = m->w.context;
    ag_context *other = NULL;
    ag_tensor h = m->w;
    ag_status want = AG_STATUS_INVALID_HANDLE;
    const char *needle = "invalid tensor handle";
    switch (g_kind) {
    case HK_FORGED_INDEX: h = (ag_tensor){0xdeadbeefu, id, cur.generation}; break;
    case HK_FORGED_INDEX_PARAM: h = (ag_tensor){0xdeadbeefu, id, 0}; break;
    case HK_FORGED_GEN_MAX: h = (ag_tensor){m->w.index, id, UINT64_MAX}; break;
    case HK_FUTURE_GEN: h = (ag_tensor){cur.index, id, cur.generation + 1}; break;
    case HK_PARAM_INDEX_ACT_GEN: h = (ag_tensor){m->w.index, id, cur.generation}; break;
    case HK_ACT_INDEX_GEN0: h = (ag_tensor){cur.index, id, 0}; break;
    /* No context has id 0: a zeroed (or otherwise id-0) handle is malformed,
     * INVALID_HANDLE, not a handle of "context 0" (WRONG_CONTEXT). */
    case HK_ZERO: h = (ag_tensor){0, 0, 0}; break;
    case HK_ZERO_CTX_PARAM: h = (ag_tensor){m->w.index, 0, 0}; break;
    case HK_ZERO_CTX_ACT: h = (ag_tensor){cur.index, 0, cur.generation}; break;
    case HK_ALL_ONES:
        h = (ag_tensor){UINT32_MAX, UINT32_MAX, UINT64_MAX};
        want = AG_STATUS_WRONG_CONTEXT;
        needle = "belongs to context";
        break;
    case HK_WRONG_CTX_PARAM:
    case HK_WRONG_CTX_ACT: {
        model om;
        other = new_model(&om, false);
        check_set_ctx(c);
        if (other == NULL) return true;
        h = om.w;
        if (g_kind == HK_WRONG_CTX_ACT) h = MK(other, 2, 3);
        CHECK(h.context != id);
        want = AG_STATUS_WRONG_CONTEXT;
        needle = "belongs to context";
        break;
    }
    case HK_STALE:
        h = old;
        want = AG_STATUS_STALE_HANDLE;
        needle = "stale";
        CHECK(old.index == cur.index && old.generation < cur.generation);
        break;
    case HK_NULL_OUT:
        want = AG_STATUS_NULL_ARGUMENT;
        needle = "is NULL";
        break;
    default: break;
    }
    t[g_pos] = h;
    ag_tensor out = SENTINEL_TENSOR;
    op_scratch scratch;
    op_scratch_init(&scratch);
    ag_status st = call_op(g_op, c, t, g_kind == HK_NULL_OUT ? NULL : &out, &scratch);
    /* Handle errors name the called op first ("transpose: ...", never
     * "tensor_shape: ..." for another function); a NULL out-pointer names
     * the C function. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", g_kind == HK_NULL_OUT ? o->fn : o->name);
    bool ok = check_err_impl(c, st, want, (const char *const[]){prefix, needle, NULL}, __FILE__,
                             __LINE__, "bad handle");
    if (ok && g_kind != HK_NULL_OUT) {
        const char *msg = ag_context_last_error(c);
        ok = check_record(strncmp(msg, prefix, strlen(prefix)) == 0, __FILE__, __LINE__,
                          "the handle error starts with the op's name");
        if (!ok) fprintf(stderr, "    last error: \"%s\"\n", msg);
    }
    if (!ok) fprintf(stderr, "    %s, tensor argument %d: %s\n", o->fn, g_pos, HK_NAME[g_kind]);
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK(op_scratch_untouched(&scratch));
    if (other != NULL) CHECK_OK(ag_context_free(&other));
    check_set_ctx(c);
    return true;
}

static void test_handles(void) {
    for (g_op = 0; g_op < OP_COUNT; g_op++) {
        for (g_pos = 0; g_pos < OPS[g_op].arity; g_pos++) {
            for (g_kind = 0; g_kind < HK_COUNT; g_kind++) {
                if (g_kind == HK_NULL_OUT && (g_pos > 0 || !OPS[g_op].has_out)) continue;
                char name[96];
                snprintf(name, sizeof name, "handle %s arg %d %s", OPS[g_op].fn, g_pos,
                         HK_NAME[g_kind]);
                run_cases(name, case_handle, true);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* NULL context: every function                                             */
/* ------------------------------------------------------------------------ */

static void test_null_context(void) {
    check_begin("NULL context");
    check_set_ctx(NULL);
    const char *m = ag_context_last_error(NULL);
    CHECK(m != NULL && strlen(m) > 0 && strstr(m, "NULL") != NULL);

    ag_context *none = NULL;
    ag_tensor t = {0, 1, 0}, out = SENTINEL_TENSOR;
    float f[4] = {0};
    uint8_t u[4] = {0};
    size_t nd = 0;
    ag_memory_stats_t mf;
    const ag_status NA = AG_STATUS_NULL_ARGUMENT;
    CHECK_STATUS(ag_context_new(NULL), NA);
    CHECK_STATUS(ag_reset(none), NA);
    CHECK_STATUS(ag_set_grad_enabled(none, false), NA);
    CHECK_STATUS(ag_set_arena_limit(none, 1024), NA);
    CHECK_STATUS(ag_memory_stats(none, &mf), NA);
    CHECK_STATUS(ag_runtime_info(none, &(ag_runtime){0}), NA);
    CHECK_STATUS(ag_set_grad_ready_callback(none, NULL, NULL, 0), NA);
    CHECK_STATUS(ag_optimizer_shard(none, 0, 0), NA);
    CHECK_STATUS(ag_params_copy_out(none, 0, NULL, 0), NA);
    CHECK_STATUS(ag_params_copy_in(none, 0, NULL, 0), NA);
    CHECK_STATUS(ag_optimizer_state_copy_out(none, 0, 0, NULL, 0), NA);
    CHECK_STATUS(ag_optimizer_state_copy_in(none, 0, 0, NULL, 0), NA);
    CHECK_STATUS(ag_checkpoint_save_gathered(none, "x", NULL, 0, NULL, 0), NA);
    CHECK_STATUS(ag_param_new(none, (const size_t[]){2}, 1, NULL, &out), NA);
    CHECK_STATUS(ag_tensor_new(none, (const size_t[]){2}, 1, f, &out), NA);
    CHECK_STATUS(ag_zero_grad(none), NA);
    CHECK_STATUS(ag_optimizer_sgd(none, 0.1f, 0.0f, 0.0f), NA);
    CHECK_STATUS(ag_optimizer_adamw(none, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f), NA);
    CHECK_STATUS(ag_optimizer_set_lr(none, 0.1f), NA);
    CHECK_STATUS(ag_optimizer_step(none), NA);
    CHECK_STATUS(ag_clip_grad_norm(none, 1.0f, f), NA);
    CHECK_STATUS(ag_checkpoint_save(none, "x.ckpt", u, 4), NA);
    CHECK_STATUS(ag_checkpoint_load(none, "x.ckpt", u, 4, &nd), NA);
    CHECK_STATUS(ag_checkpoint_load_bytes(none, u, 4, u, 4, &nd), NA);
    CHECK_STATUS(ag_checkpoint_peek(none, "x.ckpt", u, 4, &nd), NA);
    CHECK_STATUS(ag_checkpoint_peek_bytes(none, u, 4, u, 4, &nd), NA);
    float *gp = NULL;
    CHECK_STATUS(ag_grads_len(none, &nd), NA);
    CHECK_STATUS(ag_grads_buffer(none, &gp, &nd), NA);
    CHECK_STATUS(ag_grads_copy_out(none, f, 4), NA);
    CHECK_STATUS(ag_grads_copy_in(none, f, 4), NA);
    CHECK(gp == NULL);
    CHECK_STATUS(ag_test_panic(none), NA);
    /* Every function that takes a tensor handle (ops.def). */
    ag_tensor ts[3] = {t, t, t};
    op_scratch scratch;
    op_scratch_init(&scratch);
    for (int op = 0; op < OP_COUNT; op++) {
        ag_status st = call_op(op, none, ts, &out, &scratch);
        if (!check_record(st == NA, __FILE__, __LINE__, "op with a NULL context")) {
            fprintf(stderr, "    %s returned %d (%s)\n", OPS[op].fn, st, ag_status_str(st));
        }
    }
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK(op_scratch_untouched(&scratch));
    CHECK(nd == 0);
}

/* ------------------------------------------------------------------------ */
/* NULL out-pointers and data pointers of the non-op functions              */
/* ------------------------------------------------------------------------ */

static bool case_null_ptrs(ag_context *c, const model *m, bool bad, int sub) {
    ag_tensor a = MK(c, 2, 3);
    ag_tensor out = SENTINEL_TENSOR;
    size_t dims[AG_MAX_DIMS] = {0}, nd = 0, ulen = 12345;
    float buf[16] = {0};
    uint8_t user[16] = {0};
    const ag_status NA = AG_STATUS_NULL_ARGUMENT;
    const size_t s23[2] = {2, 3};
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_memory_stats(c, NULL), NA, "ag_memory_stats", "`out`"); break;
    case 1:
        if (bad) CHECK_ERR(c, ag_tensor_shape(c, a, NULL, &nd), NA, "ag_tensor_shape", "`shape`");
        break;
    case 2:
        if (bad) CHECK_ERR(c, ag_tensor_shape(c, a, dims, NULL), NA, "ag_tensor_shape", "`ndim`");
        break;
    case 3: if (bad) CHECK_ERR(c, ag_tensor_numel(c, a, NULL), NA, "ag_tensor_numel", "`out`"); break;
    case 4: if (bad) CHECK_ERR(c, ag_tensor_read(c, a, NULL, 6), NA, "ag_tensor_read", "`dst`"); break;
    case 5:
        if (bad) CHECK_ERR(c, ag_tensor_read_grad(c, m->w, NULL, 12), NA, "ag_tensor_read_grad", "`dst`");
        break;
    case 6: if (bad) CHECK_ERR(c, ag_tensor_item(c, a, NULL), NA, "ag_tensor_item", "`out`"); break;
    case 7:
        CHECK_OK(ag_reset(c));
        if (bad) CHECK_ERR(c, ag_param_new(c, s23, 2, NULL, NULL), NA, "ag_param_new", "`out`");
        break;
    case 8:
        CHECK_OK(ag_reset(c));
        if (bad) CHECK_ERR(c, ag_param_new(c, NULL, 2, NULL, &out), NA, "ag_param_new", "`shape`");
        break;
    case 9: if (bad) CHECK_ERR(c, ag_tensor_new(c, s23, 2, buf, NULL), NA, "ag_tensor_new", "`out`"); break;
    case 10: if (bad) CHECK_ERR(c, ag_tensor_new(c, NULL, 2, buf, &out), NA, "ag_tensor_new", "`shape`"); break;
    case 11: if (bad) CHECK_ERR(c, ag_tensor_new(c, s23, 2, NULL, &out), NA, "ag_tensor_new", "`data`"); break;
    case 12:
        if (bad) CHECK_ERR(c, ag_param_write(c, m->w, NULL, M_IN * M_OUT), NA, "ag_param_write", "`data`");
        break;
    case 13:
        if (bad) CHECK_ERR(c, ag_embedding(c, m->w, NULL, 2, &out), NA, "ag_embedding", "`ids`");
        break;
    case 14:
        if (bad) CHECK_ERR(c, ag_cross_entropy(c, a, NULL, 2, &out), NA, "ag_cross_entropy", "`targets`");
        break;
    case 15: if (bad) CHECK_ERR(c, ag_reshape(c, a, NULL, 1, &out), NA, "ag_reshape", "`shape`"); break;
    case 16: if (bad) CHECK_ERR(c, ag_permute(c, a, NULL, 2, &out), NA, "ag_permute", "`perm`"); break;
    case 17: if (bad) CHECK_ERR(c, ag_checkpoint_save(c, NULL, user, 4), NA, "ag_checkpoint_save", "`path`"); break;
    case 18: {
        char path[160];
        snprintf(path, sizeof path, "%s/null_user.ckpt", g_dir);
        if (bad) {
            CHECK_ERR(c, ag_checkpoint_save(c, path, NULL, 4), NA, "ag_checkpoint_save", "`user`");
            CHECK(access(path, F_OK) != 0); /* nothing written */
        }
        break;
    }
    case 19:
        if (bad) CHECK_ERR(c, ag_checkpoint_load(c, NULL, user, 16, &ulen), NA, "ag_checkpoint_load", "`path`");
        break;
    case 20:
        if (bad) CHECK_ERR(c, ag_checkpoint_load(c, g_ckpt_trained, user, 16, NULL), NA, "ag_checkpoint_load", "`user_len`");
        break;
    case 21:
        if (bad) CHECK_ERR(c, ag_checkpoint_load_bytes(c, NULL, 10, user, 16, &ulen), NA, "ag_checkpoint_load_bytes", "`data`");
        break;
    case 22:
        if (bad) CHECK_ERR(c, ag_checkpoint_load_bytes(c, user, 16, user, 16, NULL), NA, "ag_checkpoint_load_bytes", "`user_len`");
        break;
    case 23: /* a valid checkpoint of another state, user bytes that have nowhere to go */
        if (bad) CHECK_ERR(c, ag_checkpoint_load(c, g_ckpt_trained, NULL, 16, &ulen), NA, "ag_checkpoint_load", "`user_out`");
        break;
    default: return false;
    }
    /* Out-parameters untouched. */
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    CHECK(nd == 0 && ulen == 12345);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Shape mismatches: both shapes in the message                             */
/* ------------------------------------------------------------------------ */

static bool case_shape_mismatch(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    ag_tensor o = SENTINEL_TENSOR;
    const ag_status SM = AG_STATUS_SHAPE_MISMATCH;
    switch (sub) {
    case 0: case 1: case 2: case 3: {
        ag_tensor a = MK(c, 3, 4), b = MK(c, 4, 3);
        if (!bad) break;
        static const int binary[4] = {OP_add, OP_sub, OP_mul, OP_div};
        ag_tensor t[3] = {a, b, a};
        op_scratch scratch;
        op_scratch_init(&scratch);
        ag_status st = call_op(binary[sub], c, t, &o, &scratch);
        CHECK_ERR(c, st, SM, OPS[binary[sub]].name, "cannot be broadcast", "[3,4] x [4,3]");
        break;
    }
    case 4: { /* trailing dimensions differ, leading ones broadcast */
        ag_tensor a = MK(c, 2, 1, 5), b = MK(c, 3, 4);
        if (bad) CHECK_ERR(c, ag_add(c, a, b, &o), SM, "add", "[2,1,5] x [3,4]");
        break;
    }
    case 5: {
        ag_tensor a = MK(c, 8, 32), b = MK(c, 16, 4);
        if (bad) CHECK_ERR(c, ag_matmul(c, a, b, false, false, &o), SM, "matmul: inner dimensions differ: [8,32] x [16,4]");
        break;
    }
    case 6: { /* the transpose flag makes it mismatch */
        ag_tensor a = MK(c, 8, 32), b = MK(c, 32, 4);
        if (bad) CHECK_ERR(c, ag_matmul(c, a, b, false, true, &o), SM, "matmul", "[8,32] x [32,4]");
        break;
    }
    case 7: {
        ag_tensor a = MK(c, 2, 8, 4), b = MK(c, 4, 4);
        if (bad) CHECK_ERR(c, ag_matmul(c, a, b, false, false, &o), SM, "matmul", "2-D", "[2,8,4] x [4,4]");
        break;
    }
    case 8: {
        ag_tensor a = MK(c, 2, 3, 4), b = MK(c, 2, 5, 6);
        if (bad) CHECK_ERR(c, ag_bmm(c, a, b, false, false, &o), SM, "bmm", "inner dimensions differ", "[2,3,4] x [2,5,6]");
        break;
    }
    case 9: {
        ag_tensor a = MK(c, 2, 3, 4), b = MK(c, 3, 4, 5);
        if (bad) CHECK_ERR(c, ag_bmm(c, a, b, false, false, &o), SM, "bmm", "batch", "[2,3,4] x [3,4,5]");
        break;
    }
    case 10: {
        ag_tensor a = MK(c, 3, 4), b = MK(c, 4, 5);
        if (bad) CHECK_ERR(c, ag_bmm(c, a, b, false, false, &o), SM, "bmm", "[3,4] x [4,5]");
        break;
    }
    case 11: {
        ag_tensor x = MK(c, 5, 3);
        if (bad) CHECK_ERR(c, ag_linear(c, x, m->w, &m->b, &o), SM, "linear", "[5,3] x [4,3]");
        break;
    }
    case 12: { /* bias of the wrong length: w is [4,3], bias [4] */
        ag_tensor x = MK(c, 5, 4), bias = MK(c, 4);
        if (bad) CHECK_ERR(c, ag_linear(c, x, m->w, &bias, &o), SM, "linear", "bias", "[4] x [4,3]");
        break;
    }
    case 13: { /* w must be 2-D */
        ag_tensor x = MK(c, 5, 3);
        if (bad) CHECK_ERR(c, ag_linear(c, x, m->b, NULL, &o), SM, "linear", "[5,3] x [3]");
        break;
    }
    case 14: { /* layernorm weight [C] for x [..., C] */
        ag_tensor x = MK(c, 2, 4);
        if (bad) CHECK_ERR(c, ag_layernorm(c, x, m->b, m->b, &o), SM, "layernorm", "weight", "[2,4] x [3]");
        break;
    }
    case 15: { /* layernorm bias */
        ag_tensor x = MK(c, 2, 3), w = MK(c, 3), b = MK(c, 1, 3);
        if (bad) CHECK_ERR(c, ag_layernorm(c, x, w, b, &o), SM, "layernorm", "bias", "[2,3] x [1,3]");
        break;
    }
    case 16: {
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_sum_axis(c, x, 2, false, &o), SM, "sum_axis", "axis 2", "[2,3]");
        break;
    }
    case 17: {
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_sum_axis(c, x, -3, true, &o), SM, "sum_axis", "axis -3", "[2,3]");
        break;
    }
    case 18: {
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_mean_axis(c, x, INT32_MIN, false, &o), SM, "mean_axis", "axis -2147483648", "[2,3]");
        break;
    }
    case 19: {
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_reshape(c, x, (const size_t[]){4, 2}, 2, &o), SM, "reshape", "element counts differ", "[2,3] x [4,2]");
        break;
    }
    case 20: {
        ag_tensor x = MK(c, 3);
        if (bad) CHECK_ERR(c, ag_softmax(c, x, true, 1.0f, &o), SM, "softmax", "causal", "[3]");
        break;
    }
    case 21: { /* causal needs Tq <= Tk */
        ag_tensor x = MK(c, 3, 2);
        if (bad) CHECK_ERR(c, ag_softmax(c, x, true, 1.0f, &o), SM, "softmax", "[3,2]");
        break;
    }
    case 22: {
        ag_tensor x = MK(c, 2, 3, 5);
        if (bad) CHECK_ERR(c, ag_attention(c, x, 1, &o), SM, "attention", "[B,T,3C]", "[2,3,5]");
        break;
    }
    case 23: {
        ag_tensor x = MK(c, 3, 6);
        if (bad) CHECK_ERR(c, ag_attention(c, x, 1, &o), SM, "attention", "[3,6]");
        break;
    }
    case 24: { /* embedding weight must be 2-D */
        if (bad) CHECK_ERR(c, ag_embedding(c, m->b, (const int32_t[]){0}, 1, &o), SM, "embedding", "[3]");
        break;
    }
    case 25: { /* one target per row */
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_cross_entropy(c, x, (const int32_t[]){0, 1, 2}, 3, &o), AG_STATUS_INVALID_ARGUMENT, "cross_entropy", "3 targets", "[2,3]");
        break;
    }
    case 26: {
        ag_tensor x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_logsumexp_axis(c, x, -3, true, &o), SM, "logsumexp_axis", "axis -3", "[2,3]");
        break;
    }
    case 27: { /* a mask that broadcasts with neither operand */
        ag_tensor cond = MK(c, 4), x = MK(c, 2, 3);
        if (bad) CHECK_ERR(c, ag_where(c, cond, x, x, &o), SM, "where", "[4]", "[2,3]");
        break;
    }
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Zero, too many and overflowing dimensions                                 */
/* ------------------------------------------------------------------------ */

static bool case_dims(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    ag_tensor o = SENTINEL_TENSOR;
    const ag_status SM = AG_STATUS_SHAPE_MISMATCH, TL = AG_STATUS_TOO_LARGE;
    const size_t huge[3] = {(size_t)1 << 20, (size_t)1 << 20, (size_t)1 << 20};
    const size_t over[2] = {SIZE_MAX, 2};
    const size_t cap1[2] = {(size_t)1 << 31, 2}; /* 2^32 elements */
    /* Exactly 2^31 elements: one past the cap of 2^31 - 1 (i32::MAX). */
    const size_t cap2[1] = {(size_t)1 << 31};
    const size_t cap3[2] = {65536, 32768};
    const size_t cap4[3] = {2, 1024, (size_t)1 << 20};
    const size_t seven[7] = {1, 1, 1, 1, 1, 1, 1};
    float d[8] = {0};
    CHECK_OK(ag_reset(c)); /* so ag_param_new would be allowed, were the shape valid */
    ag_tensor x = MK(c, 2, 3);
    (void)x;
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_tensor_new(c, (const size_t[]){2, 0}, 2, d, &o), SM, "ag_tensor_new", "zero", "[2, 0]"); break;
    case 1: if (bad) CHECK_ERR(c, ag_tensor_new(c, (const size_t[]){0}, 1, d, &o), SM, "ag_tensor_new", "zero"); break;
    case 2: if (bad) CHECK_ERR(c, ag_tensor_new(c, huge, 3, d, &o), TL, "ag_tensor_new", "too large", "[1048576, 1048576, 1048576]"); break;
    case 3: if (bad) CHECK_ERR(c, ag_tensor_new(c, over, 2, d, &o), TL, "ag_tensor_new", "too large"); break;
    case 4: if (bad) CHECK_ERR(c, ag_tensor_new(c, cap1, 2, d, &o), TL, "ag_tensor_new", "2147483648"); break;
    case 5: if (bad) CHECK_ERR(c, ag_tensor_new(c, (const size_t[]){2}, 0, d, &o), SM, "ag_tensor_new", "ndim 0"); break;
    case 6: if (bad) CHECK_ERR(c, ag_tensor_new(c, seven, 7, d, &o), SM, "ag_tensor_new", "ndim 7"); break;
    case 7: if (bad) CHECK_ERR(c, ag_tensor_new(c, seven, SIZE_MAX, d, &o), SM, "ag_tensor_new", "ndim"); break;
    case 8: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, (const size_t[]){3, 0}, 2, NULL, &o), SM, "ag_param_new", "zero"); break;
    case 9: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, huge, 3, NULL, &o), TL, "ag_param_new", "too large"); break;
    case 10: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, over, 2, NULL, &o), TL, "ag_param_new", "too large"); break;
    case 11: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, seven, 0, NULL, &o), SM, "ag_param_new", "ndim 0"); break;
    case 12: if (bad) CHECK_ERR(c, ag_reshape(c, x, huge, 3, &o), TL, "reshape", "too large"); break;
    case 13: if (bad) CHECK_ERR(c, ag_reshape(c, x, (const size_t[]){6, 0}, 2, &o), SM, "reshape", "zero"); break;
    case 14: if (bad) CHECK_ERR(c, ag_reshape(c, x, seven, 7, &o), SM, "ag_reshape", "ndim 7"); break;
    case 15: if (bad) CHECK_ERR(c, ag_reshape(c, x, seven, 0, &o), SM, "ag_reshape", "ndim 0"); break;
    case 16: if (bad) CHECK_ERR(c, ag_tensor_new(c, cap2, 1, d, &o), TL, "ag_tensor_new: too large", "[2147483648]", "2147483647"); break;
    case 17: if (bad) CHECK_ERR(c, ag_tensor_new(c, cap3, 2, d, &o), TL, "ag_tensor_new: too large", "[65536, 32768]", "2147483647"); break;
    case 18: if (bad) CHECK_ERR(c, ag_tensor_new(c, cap4, 3, d, &o), TL, "ag_tensor_new: too large", "[2, 1024, 1048576]"); break;
    case 19: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, cap2, 1, NULL, &o), TL, "ag_param_new: too large", "2147483647"); break;
    case 20: CHECK_OK(ag_reset(c)); if (bad) CHECK_ERR(c, ag_param_new(c, cap3, 2, NULL, &o), TL, "ag_param_new: too large", "[65536, 32768]"); break;
    case 21: if (bad) CHECK_ERR(c, ag_reshape(c, x, cap3, 2, &o), TL, "reshape", "too large", "[65536, 32768]"); break;
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/*
 * An op whose *output* would pass the element cap (2^31 - 1) must fail with
 * TOO_LARGE before allocating anything. No arena cap is set: the cap check
 * alone must stop the op (a missing check would try a 16 GiB allocation).
 * The figures of ag_memory_stats are identical before and after the call.
 */
#define OTL_ROWS 46341 /* attention: T^2 = 2147488281 > 2^31 - 1 */

static bool case_output_too_large(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    if (sub > 13) return false;
    ag_tensor o = SENTINEL_TENSOR;
    static float ones[65536];
    static float qkv_data[OTL_ROWS * 3];
    static int32_t zero_ids[32768];
    for (size_t i = 0; i < 65536; i++) ones[i] = 1.0f;
    for (size_t i = 0; i < OTL_ROWS * 3; i++) qkv_data[i] = 0.001f * (float)(i % 7);
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_set_arena_limit(c, 0));
    ag_tensor col = {0, 0, 0}, row = {0, 0, 0}, half = {0, 0, 0}, col3 = {0, 0, 0},
              row3 = {0, 0, 0}, tall = {0, 0, 0}, vec = {0, 0, 0}, qkv = {0, 0, 0};
    CHECK_OK(ag_tensor_new(c, (const size_t[]){65536, 1}, 2, ones, &col));
    CHECK_OK(ag_tensor_new(c, (const size_t[]){1, 65536}, 2, ones, &row));
    CHECK_OK(ag_tensor_new(c, (const size_t[]){1, 32768}, 2, ones, &half));
    CHECK_OK(ag_reshape(c, col, (const size_t[]){1, 65536, 1}, 3, &col3));
    CHECK_OK(ag_reshape(c, row, (const size_t[]){1, 1, 65536}, 3, &row3));
    CHECK_OK(ag_reshape(c, col, (const size_t[]){65536, 1, 1}, 3, &tall));
    CHECK_OK(ag_reshape(c, row, (const size_t[]){65536}, 1, &vec));
    CHECK_OK(ag_tensor_new(c, (const size_t[]){1, OTL_ROWS, 3}, 3, qkv_data, &qkv));
    if (!bad) return true;

    ag_memory_stats_t before, after;
    memset(&before, 0, sizeof before);
    memset(&after, 0xff, sizeof after);
    CHECK_OK(ag_memory_stats(c, &before));
    CHECK(before.arena_limit_bytes == 0); /* no cap: only the element cap can stop it */
    ag_status st;
    const char *name, *shape, *what;
    switch (sub) {
    case 0: st = ag_matmul(c, col, row, false, false, &o); name = "matmul"; shape = "[65536, 65536]"; what = "[65536,1] @ [1,65536]"; break;
    case 1: st = ag_matmul(c, row, row, true, false, &o); name = "matmul"; shape = "[65536, 65536]"; what = "[1,65536]^T @ [1,65536]"; break;
    case 2: st = ag_matmul(c, col, half, false, false, &o); name = "matmul"; shape = "[65536, 32768]"; what = "[65536,1] @ [1,32768] (2^31 elements)"; break;
    case 3: st = ag_add(c, col, row, &o); name = "add"; shape = "[65536, 65536]"; what = "[65536,1] + [1,65536]"; break;
    case 4: st = ag_sub(c, row, col, &o); name = "sub"; shape = "[65536, 65536]"; what = "[1,65536] - [65536,1]"; break;
    case 5: st = ag_mul(c, col, row, &o); name = "mul"; shape = "[65536, 65536]"; what = "[65536,1] * [1,65536]"; break;
    case 6: st = ag_div(c, col, half, &o); name = "div"; shape = "[65536, 32768]"; what = "[65536,1] / [1,32768] (2^31 elements)"; break;
    case 7: st = ag_add(c, tall, half, &o); name = "add"; shape = "[65536, 1, 32768]"; what = "[65536,1,1] + [1,32768]"; break;
    case 8: st = ag_bmm(c, col3, row3, false, false, &o); name = "bmm"; shape = "[1, 65536, 65536]"; what = "bmm [1,65536,1] @ [1,1,65536]"; break;
    case 9: st = ag_bmm(c, row3, row3, true, false, &o); name = "bmm"; shape = "[1, 65536, 65536]"; what = "bmm [1,1,65536]^T @ [1,1,65536]"; break;
    case 10: st = ag_linear(c, col, row, NULL, &o); name = "linear"; shape = "[65536, 65536]"; what = "linear [65536,1] x [1,65536]"; break;
    case 11: st = ag_linear(c, col, row, &vec, &o); name = "linear"; shape = "[65536, 65536]"; what = "linear [65536,1] x [1,65536] + [65536]"; break;
    case 12: st = ag_embedding(c, row, zero_ids, 32768, &o); name = "embedding"; shape = "[32768, 65536]"; what = "embedding of 32768 rows of [1,65536]"; break;
    default: st = ag_attention(c, qkv, 1, &o); name = "attention"; shape = "46341"; what = "attention scores [1,1,46341,46341]"; break;
    }
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: too large", name);
    if (!check_err_impl(c, st, AG_STATUS_TOO_LARGE,
                        (const char *const[]){prefix, shape, "2147483647", NULL}, __FILE__,
                        __LINE__, "output over the element cap")) {
        fprintf(stderr, "    %s\n", what);
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    /* Nothing was allocated or recorded. */
    CHECK_OK(ag_memory_stats(c, &after));
    if (!check_record(after.arena_used_bytes == before.arena_used_bytes &&
                          after.arena_reserved_bytes == before.arena_reserved_bytes &&
                          after.arena_high_water_bytes == before.arena_high_water_bytes &&
                          after.tape_len == before.tape_len &&
                          after.live_tensors == before.live_tensors,
                      __FILE__, __LINE__, "the refused op allocated and recorded nothing")) {
        fprintf(stderr, "    %s: arena used %llu -> %llu, reserved %llu -> %llu, tape %llu -> %llu, "
                "live %llu -> %llu\n", what,
                (unsigned long long)before.arena_used_bytes, (unsigned long long)after.arena_used_bytes,
                (unsigned long long)before.arena_reserved_bytes, (unsigned long long)after.arena_reserved_bytes,
                (unsigned long long)before.tape_len, (unsigned long long)after.tape_len,
                (unsigned long long)before.live_tensors, (unsigned long long)after.live_tensors);
    }
    /* The operands are intact and usable. */
    static float back[32768];
    memset(back, 0, sizeof back);
    CHECK_OK(ag_tensor_read(c, half, back, 32768));
    CHECK(memcmp(back, ones, sizeof back) == 0);
    return true;
}

/*
 * The element cap is exactly 2^31 - 1 (i32::MAX): a parameter of 2^31 - 1
 * elements passes the shape check (it fails only at the allocation, which
 * the test hook makes fail before any memory is touched), one of 2^31
 * elements is TOO_LARGE.
 */
static void test_element_cap(void) {
    check_begin("element cap is 2^31 - 1");
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    ag_tensor p = SENTINEL_TENSOR;
    uint64_t counted = 0;
    CHECK_OK(ag_test_fail_allocation(c, 1, true, &counted));
    CHECK_ERR(c, ag_param_new(c, (const size_t[]){(size_t)INT32_MAX}, 1, NULL, &p),
              AG_STATUS_ALLOCATION_FAILED, "param_new");
    CHECK_ERR(c, ag_param_new(c, (const size_t[]){(size_t)INT32_MAX + 1}, 1, NULL, &p),
              AG_STATUS_TOO_LARGE, "ag_param_new", "too large", "2147483647");
    CHECK_ERR(c, ag_param_new(c, (const size_t[]){1, 1, (size_t)INT32_MAX + 1}, 3, NULL, &p),
              AG_STATUS_TOO_LARGE, "ag_param_new", "too large");
    CHECK(same_tensor(p, SENTINEL_TENSOR));
    CHECK_OK(ag_test_fail_allocation(c, 0, false, &counted));
    ag_memory_stats_t mf;
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.param_count == 0 && mf.param_bytes == 0);
    /* Nothing half-made: a normal parameter and an optimizer still work. */
    CHECK_OK(ag_param_new(c, (const size_t[]){2, 2}, 2, NULL, &p));
    CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.0f, 0.0f));
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.param_count == 1);
    CHECK_OK(ag_context_free(&c));
    check_set_ctx(NULL);
}

/* ------------------------------------------------------------------------ */
/* Token ids and targets out of range                                       */
/* ------------------------------------------------------------------------ */

static bool case_index_range(ag_context *c, const model *m, bool bad, int sub) {
    /* m->w is [4,3]: as an embedding table V = 4; as logits [4,3]: V = 3. */
    ag_tensor o = SENTINEL_TENSOR;
    const ag_status IR = AG_STATUS_INDEX_OUT_OF_RANGE;
    ag_tensor logits = MK(c, 4, 3);
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_embedding(c, m->w, (const int32_t[]){0, 3, -1}, 3, &o), IR, "embedding", "index -1 at position 2", "[0, 4)"); break;
    case 1: if (bad) CHECK_ERR(c, ag_embedding(c, m->w, (const int32_t[]){4}, 1, &o), IR, "embedding", "index 4 at position 0", "[0, 4)"); break;
    case 2: if (bad) CHECK_ERR(c, ag_embedding(c, m->w, (const int32_t[]){1, INT32_MAX}, 2, &o), IR, "embedding", "index 2147483647 at position 1"); break;
    case 3: if (bad) CHECK_ERR(c, ag_embedding(c, m->w, (const int32_t[]){INT32_MIN}, 1, &o), IR, "embedding", "index -2147483648 at position 0"); break;
    case 4: if (bad) CHECK_ERR(c, ag_cross_entropy(c, logits, (const int32_t[]){0, 1, 2, -1}, 4, &o), IR, "cross_entropy", "index -1 at position 3", "[0, 3)"); break;
    case 5: if (bad) CHECK_ERR(c, ag_cross_entropy(c, logits, (const int32_t[]){3, 0, 0, 0}, 4, &o), IR, "cross_entropy", "index 3 at position 0", "[0, 3)"); break;
    case 6: if (bad) CHECK_ERR(c, ag_cross_entropy(c, logits, (const int32_t[]){0, INT32_MAX, 0, 0}, 4, &o), IR, "cross_entropy", "index 2147483647 at position 1"); break;
    case 7: /* no ids at all */
        if (bad) CHECK_ERR(c, ag_embedding(c, m->w, (const int32_t[]){0}, 0, &o), AG_STATUS_INVALID_ARGUMENT, "embedding", "no ids");
        break;
    case 8: /* a trainable loss whose targets are bad: gradients must not move */
        if (bad) {
            ag_tensor h = SENTINEL_TENSOR;
            ag_tensor x = MK(c, 5, 4);
            CHECK_OK(ag_linear(c, x, m->w, &m->b, &h));
            CHECK_ERR(c, ag_cross_entropy(c, h, (const int32_t[]){0, 1, 2, 3, 0}, 5, &o), IR, "cross_entropy", "index 3 at position 3");
        }
        break;
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Calls out of sequence, backward on a non-scalar                          */
/* ------------------------------------------------------------------------ */

/* Starts a new iteration (ag_reset) and builds the model's loss. */
static ag_tensor model_loss(ag_context *c, const model *m) {
    ag_tensor x = {0, 0, 0}, h = {0, 0, 0}, t = {0, 0, 0}, l = {0, 0, 0};
    CHECK_OK(ag_reset(c));
    CHECK_OK(ag_tensor_new(c, (const size_t[]){M_ROWS, M_IN}, 2, M_X, &x));
    CHECK_OK(ag_linear(c, x, m->w, &m->b, &h));
    CHECK_OK(ag_tanh(c, h, &t));
    CHECK_OK(ag_cross_entropy(c, t, M_Y, M_ROWS, &l));
    return l;
}

static bool case_sequence(ag_context *c, const model *m, bool bad, int sub) {
    ag_tensor o = SENTINEL_TENSOR;
    const ag_status SQ = AG_STATUS_SEQUENCE;
    float g[M_IN * M_OUT];
    switch (sub) {
    case 0: { /* backward on a non-scalar */
        ag_tensor x = MK(c, 5, 4), h = SENTINEL_TENSOR;
        CHECK_OK(ag_linear(c, x, m->w, &m->b, &h));
        if (bad) CHECK_ERR(c, ag_backward(c, h), AG_STATUS_NOT_SCALAR, "backward", "scalar", "[5,3]");
        break;
    }
    case 1: { /* backward on a one-element tensor of rank 3 is fine: not a bad call */
        ag_tensor l = model_loss(c, m), r = SENTINEL_TENSOR;
        CHECK_OK(ag_reshape(c, l, (const size_t[]){1, 1, 1}, 3, &r));
        CHECK_OK(ag_backward(c, r));
        CHECK_OK(ag_zero_grad(c));
        /* and the bad call: a parameter is not a scalar either */
        if (bad) CHECK_ERR(c, ag_backward(c, m->w), AG_STATUS_NOT_SCALAR, "backward", "[4,3]");
        break;
    }
    case 2: { /* backward twice */
        ag_tensor l = model_loss(c, m);
        CHECK_OK(ag_backward(c, l));
        if (bad) {
            float before[M_IN * M_OUT], after[M_IN * M_OUT];
            CHECK_OK(ag_tensor_read_grad(c, m->w, before, M_IN * M_OUT));
            CHECK_ERR(c, ag_backward(c, l), SQ, "backward", "already ran");
            CHECK_OK(ag_tensor_read_grad(c, m->w, after, M_IN * M_OUT));
            CHECK(memcmp(before, after, sizeof before) == 0); /* gradients did not double */
        }
        CHECK_OK(ag_optimizer_step(c));
        CHECK_OK(ag_zero_grad(c));
        break;
    }
    case 3: /* optimizer step without backward (the last iteration ended with zero_grad) */
        if (bad) CHECK_ERR(c, ag_optimizer_step(c), SQ, "optimizer_step", "ag_backward");
        break;
    case 4: { /* step twice after one backward */
        ag_tensor l = model_loss(c, m);
        CHECK_OK(ag_backward(c, l));
        CHECK_OK(ag_optimizer_step(c));
        if (bad) CHECK_ERR(c, ag_optimizer_step(c), SQ, "optimizer_step");
        CHECK_OK(ag_zero_grad(c));
        break;
    }
    case 5: { /* backward then zero_grad then step: nothing pending */
        ag_tensor l = model_loss(c, m);
        CHECK_OK(ag_backward(c, l));
        CHECK_OK(ag_zero_grad(c));
        if (bad) CHECK_ERR(c, ag_optimizer_step(c), SQ, "optimizer_step");
        break;
    }
    case 6: /* a parameter after activations of the iteration */
        (void)MK(c, 2);
        if (bad) CHECK_ERR(c, ag_param_new(c, (const size_t[]){2}, 1, NULL, &o), SQ, "param_new", "activation");
        break;
    case 7: /* a parameter after the optimizer */
        CHECK_OK(ag_reset(c));
        if (bad) CHECK_ERR(c, ag_param_new(c, (const size_t[]){2}, 1, NULL, &o), SQ, "param_new", "optimizer");
        break;
    case 8: /* a second optimizer */
        if (bad) {
            CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, 0.0f, 0.0f), SQ, "optimizer", "already");
            CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f), SQ, "optimizer", "already");
        }
        break;
    case 9: { /* the gradient of a constant */
        ag_tensor x = MK(c, 2, 3);
        float b[6];
        if (bad) CHECK_ERR(c, ag_tensor_read_grad(c, x, b, 6), SQ, "tensor_read_grad", "no gradient", "[2,3]");
        break;
    }
    case 10: { /* the gradient of an activation before backward */
        ag_tensor x = MK(c, 5, 4), h = SENTINEL_TENSOR;
        float b[15];
        CHECK_OK(ag_linear(c, x, m->w, &m->b, &h));
        if (bad) CHECK_ERR(c, ag_tensor_read_grad(c, h, b, 15), SQ, "tensor_read_grad", "[5,3]");
        break;
    }
    case 11: { /* a parameter's gradient is always readable: zeros here */
        CHECK_OK(ag_tensor_read_grad(c, m->w, g, M_IN * M_OUT));
        for (int i = 0; i < M_IN * M_OUT; i++) CHECK(g[i] == 0.0f);
        if (bad) CHECK_ERR(c, ag_tensor_read_grad(c, m->w, g, 3), AG_STATUS_INVALID_ARGUMENT, "tensor_read_grad", "[4,3]");
        break;
    }
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/* Sequence errors on a context without an optimizer. */
static bool case_sequence_no_opt(ag_context *c, const model *m, bool bad, int sub) {
    switch (sub) {
    case 0: {
        ag_tensor l = model_loss(c, m);
        CHECK_OK(ag_backward(c, l));
        if (bad) CHECK_ERR(c, ag_optimizer_step(c), AG_STATUS_SEQUENCE, "optimizer_step", "no optimizer");
        CHECK_OK(ag_zero_grad(c));
        break;
    }
    case 1: if (bad) CHECK_ERR(c, ag_optimizer_set_lr(c, 0.1f), AG_STATUS_SEQUENCE, "optimizer_set_lr", "no optimizer"); break;
    default: return false;
    }
    CHECK_OK(make_optimizer(c));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Non-finite gradients: the step is skipped, parameters bit-identical       */
/* ------------------------------------------------------------------------ */

static bool case_non_finite(ag_context *c, const model *m, bool bad, int sub) {
    if (sub > 3) return false;
    if (bad) {
        float bad_value = sub == 1 ? INFINITY : sub == 2 ? -INFINITY : NAN;
        float xs[M_ROWS * M_IN];
        memcpy(xs, M_X, sizeof xs);
        if (sub < 3) xs[6] = bad_value;
        ag_tensor x = SENTINEL_TENSOR, h = SENTINEL_TENSOR, l = SENTINEL_TENSOR;
        CHECK_OK(ag_reset(c));
        CHECK_OK(ag_tensor_new(c, (const size_t[]){M_ROWS, M_IN}, 2, xs, &x)); /* NaN is valid data */
        CHECK_OK(ag_linear(c, x, m->w, &m->b, &h));
        if (sub == 3) {
            /* Finite data, but the loss is log(0) = -inf, so its gradient is
             * inf * 0 = NaN: l = log(0 * sum(h)). */
            ag_tensor s = SENTINEL_TENSOR, z = SENTINEL_TENSOR;
            CHECK_OK(ag_sum(c, h, &s));
            CHECK_OK(ag_scale(c, s, 0.0f, &z));
            CHECK_OK(ag_log(c, z, &l));
            float v = 0;
            CHECK_OK(ag_tensor_item(c, l, &v));
            CHECK(isinf(v) && v < 0);
        } else {
            CHECK_OK(ag_sum(c, h, &l));
        }
        CHECK_OK(ag_backward(c, l));
        float before[M_IN * M_OUT + M_OUT], after[M_IN * M_OUT + M_OUT];
        float gbefore[M_IN * M_OUT], gafter[M_IN * M_OUT];
        CHECK_OK(read_params(c, m, before));
        CHECK_OK(ag_tensor_read_grad(c, m->w, gbefore, M_IN * M_OUT));
        bool any = false;
        for (int i = 0; i < M_IN * M_OUT; i++) any |= !isfinite(gbefore[i]);
        CHECK(any);
        float norm = 12345.0f;
        CHECK_ERR(c, ag_clip_grad_norm(c, 1.0f, &norm), AG_STATUS_NON_FINITE, "clip_grad_norm", "norm");
        CHECK(norm == 12345.0f);
        CHECK_OK(ag_tensor_read_grad(c, m->w, gafter, M_IN * M_OUT));
        CHECK(memcmp(gbefore, gafter, sizeof gbefore) == 0); /* nothing scaled */
        CHECK_ERR(c, ag_optimizer_step(c), AG_STATUS_NON_FINITE, "optimizer_step", "NaN or infinite", "skipped");
        CHECK_OK(read_params(c, m, after));
        CHECK(memcmp(before, after, sizeof before) == 0);
        /* A second attempt is refused the same way. */
        CHECK_STATUS(ag_optimizer_step(c), AG_STATUS_NON_FINITE);
    }
    /* Recovery, as a trainer does after NON_FINITE: drop the gradients. */
    CHECK_OK(ag_zero_grad(c));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Hyper-parameters                                                          */
/* ------------------------------------------------------------------------ */

static bool case_hyper(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    const ag_status IA = AG_STATUS_INVALID_ARGUMENT;
    const float nan = NAN, inf = INFINITY;
    if (sub > 23) return false;
    if (bad) {
        switch (sub) {
        case 0: CHECK_ERR(c, ag_optimizer_sgd(c, nan, 0.0f, 0.0f), IA, "optimizer", "lr", "NaN"); break;
        case 1: CHECK_ERR(c, ag_optimizer_sgd(c, 0.0f, 0.0f, 0.0f), IA, "optimizer", "lr = 0"); break;
        case 2: CHECK_ERR(c, ag_optimizer_sgd(c, -0.1f, 0.0f, 0.0f), IA, "optimizer", "lr = -0.1"); break;
        case 3: CHECK_ERR(c, ag_optimizer_sgd(c, inf, 0.0f, 0.0f), IA, "optimizer", "lr = inf"); break;
        case 4: CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, 1.0f, 0.0f), IA, "optimizer", "momentum = 1"); break;
        case 5: CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, -0.5f, 0.0f), IA, "optimizer", "momentum = -0.5"); break;
        case 6: CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, nan, 0.0f), IA, "optimizer", "momentum = NaN"); break;
        case 7: CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, 0.9f, -1.0f), IA, "optimizer", "weight_decay = -1"); break;
        case 8: CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, 0.9f, nan), IA, "optimizer", "weight_decay = NaN"); break;
        case 9: CHECK_ERR(c, ag_optimizer_adamw(c, nan, 0.9f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "lr = NaN"); break;
        case 10: CHECK_ERR(c, ag_optimizer_adamw(c, 0.0f, 0.9f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "lr = 0"); break;
        case 11: CHECK_ERR(c, ag_optimizer_adamw(c, -1.0f, 0.9f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "lr = -1"); break;
        case 12: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 1.0f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "beta1 = 1"); break;
        case 13: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, -0.1f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "beta1 = -0.1"); break;
        case 14: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, nan, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "beta1 = NaN"); break;
        case 15: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 1.0f, 1e-8f, 0.0f), IA, "optimizer", "beta2 = 1"); break;
        case 16: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, inf, 1e-8f, 0.0f), IA, "optimizer", "beta2 = inf"); break;
        case 17: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, 0.0f, 0.0f), IA, "optimizer", "eps = 0"); break;
        case 18: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, -1e-8f, 0.0f), IA, "optimizer", "eps"); break;
        case 19: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, nan, 0.0f), IA, "optimizer", "eps = NaN"); break;
        case 20: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, 1e-8f, nan), IA, "optimizer", "weight_decay = NaN"); break;
        case 21: CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.999f, 1e-8f, -0.5f), IA, "optimizer", "weight_decay = -0.5"); break;
        case 22: CHECK_ERR(c, ag_optimizer_adamw(c, inf, 0.9f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "lr = inf"); break;
        default: CHECK_ERR(c, ag_optimizer_adamw(c, -inf, 0.9f, 0.999f, 1e-8f, 0.0f), IA, "optimizer", "lr = -inf"); break;
        }
    }
    /* The failed call created nothing: a valid optimizer can still be made. */
    CHECK_OK(make_optimizer(c));
    return true;
}

/* No optimizer on a context without parameters. */
static void test_optimizer_without_params(void) {
    check_begin("optimizer without parameters");
    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    CHECK_ERR(c, ag_optimizer_sgd(c, 0.1f, 0.0f, 0.0f), AG_STATUS_SEQUENCE, "optimizer", "parameters");
    CHECK_ERR(c, ag_optimizer_adamw(c, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f), AG_STATUS_SEQUENCE, "optimizer", "parameters");
    /* ...and the context still takes parameters and an optimizer afterwards. */
    ag_tensor p = SENTINEL_TENSOR;
    CHECK_OK(ag_param_new(c, (const size_t[]){2}, 1, NULL, &p));
    CHECK_OK(ag_optimizer_sgd(c, 0.1f, 0.0f, 0.0f));
    CHECK_OK(ag_context_free(&c));
    check_set_ctx(NULL);
}

static bool case_lr_clip(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    const ag_status IA = AG_STATUS_INVALID_ARGUMENT;
    if (sub > 6) return false;
    /* Pending gradients, so clipping has something to (not) scale. */
    ag_tensor l = model_loss(c, m);
    CHECK_OK(ag_backward(c, l));
    float g0[M_IN * M_OUT], g1[M_IN * M_OUT];
    CHECK_OK(ag_tensor_read_grad(c, m->w, g0, M_IN * M_OUT));
    float norm = 777.0f;
    if (bad) {
        switch (sub) {
        case 0: CHECK_ERR(c, ag_optimizer_set_lr(c, NAN), IA, "optimizer_set_lr", "lr = NaN"); break;
        case 1: CHECK_ERR(c, ag_optimizer_set_lr(c, 0.0f), IA, "optimizer_set_lr", "lr = 0"); break;
        case 2: CHECK_ERR(c, ag_optimizer_set_lr(c, -0.5f), IA, "optimizer_set_lr", "lr = -0.5"); break;
        case 3: CHECK_ERR(c, ag_optimizer_set_lr(c, INFINITY), IA, "optimizer_set_lr", "lr = inf"); break;
        case 4: CHECK_ERR(c, ag_clip_grad_norm(c, 0.0f, &norm), IA, "clip_grad_norm", "max_norm = 0"); break;
        case 5: CHECK_ERR(c, ag_clip_grad_norm(c, NAN, &norm), IA, "clip_grad_norm", "max_norm = NaN"); break;
        default: CHECK_ERR(c, ag_clip_grad_norm(c, -1.0f, &norm), IA, "clip_grad_norm", "max_norm = -1"); break;
        }
        CHECK(norm == 777.0f);
        CHECK_OK(ag_tensor_read_grad(c, m->w, g1, M_IN * M_OUT));
        CHECK(memcmp(g0, g1, sizeof g0) == 0);
    }
    /* A valid clip with a huge bound changes nothing; NULL norm_out is allowed. */
    CHECK_OK(ag_clip_grad_norm(c, 1e30f, NULL));
    CHECK_OK(ag_optimizer_step(c));
    CHECK_OK(ag_zero_grad(c));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Arena cap                                                                 */
/* ------------------------------------------------------------------------ */

static bool case_arena_limit(ag_context *c, const model *m, bool bad, int sub) {
    if (sub > 2) return false;
    ag_memory_stats_t mf;
    if (sub == 0) { /* the very first op fails */
        if (bad) {
            CHECK_OK(ag_set_arena_limit(c, 64));
            CHECK_OK(ag_memory_stats(c, &mf));
            CHECK(mf.arena_limit_bytes == 64);
            float l = 0;
            ag_status st = train_iter(c, m, &l);
            CHECK_ERR(c, st, AG_STATUS_OUT_OF_MEMORY, "arena limit exceeded", "64-byte cap");
        }
    } else if (sub == 1) { /* forward fits, backward does not */
        ag_tensor l = model_loss(c, m);
        if (bad) {
            CHECK_OK(ag_memory_stats(c, &mf));
            CHECK_OK(ag_set_arena_limit(c, (size_t)mf.arena_used_bytes + 1));
            CHECK_ERR(c, ag_backward(c, l), AG_STATUS_OUT_OF_MEMORY, "backward", "arena limit exceeded");
            float g[M_IN * M_OUT];
            CHECK_OK(ag_tensor_read_grad(c, m->w, g, M_IN * M_OUT));
            for (int i = 0; i < M_IN * M_OUT; i++) CHECK(g[i] == 0.0f); /* nothing accumulated */
            CHECK_STATUS(ag_optimizer_step(c), AG_STATUS_SEQUENCE);  /* no backward happened */
        }
    } else { /* a mid-forward failure, then an op on the half-built graph */
        if (bad) {
            CHECK_OK(ag_reset(c));
            ag_tensor x = MK(c, 5, 4), h = SENTINEL_TENSOR;
            CHECK_OK(ag_memory_stats(c, &mf));
            CHECK_OK(ag_set_arena_limit(c, (size_t)mf.arena_used_bytes + 8));
            CHECK_ERR(c, ag_linear(c, x, m->w, &m->b, &h), AG_STATUS_OUT_OF_MEMORY, "linear", "arena limit exceeded");
            CHECK(same_tensor(h, SENTINEL_TENSOR));
            float v[20];
            CHECK_OK(ag_tensor_read(c, x, v, 20)); /* earlier activations still readable */
            CHECK(memcmp(v, pattern, sizeof v) == 0);
        }
    }
    /* Remove the cap; the next iteration (which starts with ag_reset) works. */
    CHECK_OK(ag_set_arena_limit(c, 0));
    CHECK_OK(ag_memory_stats(c, &mf));
    CHECK(mf.arena_limit_bytes == 0);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Other invalid arguments                                                   */
/* ------------------------------------------------------------------------ */

static bool case_invalid_args(ag_context *c, const model *m, bool bad, int sub) {
    ag_tensor o = SENTINEL_TENSOR;
    const ag_status IA = AG_STATUS_INVALID_ARGUMENT;
    ag_tensor a = MK(c, 2, 3);
    ag_tensor q = MK(c, 1, 2, 6); /* attention qkv: C = 2 */
    float b[16];
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_tensor_read(c, a, b, 5), IA, "tensor_read", "5", "[2,3]"); break;
    case 1: if (bad) CHECK_ERR(c, ag_tensor_read(c, a, b, 0), IA, "tensor_read", "[2,3]"); break;
    case 2: if (bad) CHECK_ERR(c, ag_tensor_item(c, a, b), IA, "tensor_item", "[2,3]"); break;
    case 3: if (bad) CHECK_ERR(c, ag_param_write(c, m->w, b, 11), IA, "param_write", "11", "[4,3]"); break;
    case 4: if (bad) CHECK_ERR(c, ag_param_write(c, m->w, NULL, 0), IA, "param_write", "[4,3]"); break;
    case 5: if (bad) CHECK_ERR(c, ag_param_write(c, a, b, 6), IA, "param_write", "not a parameter"); break;
    case 6: if (bad) CHECK_ERR(c, ag_permute(c, a, (const size_t[]){0, 0}, 2, &o), IA, "permute", "not a permutation", "[2,3]"); break;
    case 7: if (bad) CHECK_ERR(c, ag_permute(c, a, (const size_t[]){0, 2}, 2, &o), IA, "permute", "[0, 2]"); break;
    case 8: if (bad) CHECK_ERR(c, ag_permute(c, a, (const size_t[]){0}, 1, &o), IA, "permute", "[2,3]"); break;
    case 9: if (bad) CHECK_ERR(c, ag_permute(c, a, (const size_t[]){0, 1, 2, 3, 4, 5, 6}, 7, &o), IA, "ag_permute", "7"); break;
    case 10: if (bad) CHECK_ERR(c, ag_permute(c, a, NULL, 0, &o), IA, "permute", "[2,3]"); break;
    case 11: if (bad) CHECK_ERR(c, ag_transpose(c, a, 0, 2, &o), IA, "transpose", "0,2", "rank 2"); break;
    case 12: if (bad) CHECK_ERR(c, ag_transpose(c, a, SIZE_MAX, 0, &o), IA, "transpose", "rank 2"); break;
    case 13: if (bad) CHECK_ERR(c, ag_softmax(c, a, false, NAN, &o), IA, "softmax", "scale NaN"); break;
    case 14: if (bad) CHECK_ERR(c, ag_softmax(c, a, false, INFINITY, &o), IA, "softmax", "scale inf"); break;
    case 15: if (bad) CHECK_ERR(c, ag_attention(c, q, 0, &o), IA, "attention", "0 heads", "C = 2"); break;
    case 16: if (bad) CHECK_ERR(c, ag_attention(c, q, 3, &o), IA, "attention", "3 heads", "[1,2,6]"); break;
    case 17: if (bad) CHECK_ERR(c, ag_tensor_new(c, (const size_t[]){2, 3}, 2, b, NULL), AG_STATUS_NULL_ARGUMENT, "ag_tensor_new"); break;
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/* ag_dropout_seeded and ag_seed_write: what a bad seed or p gets. */
static bool case_seeded_dropout(ag_context *c, const model *m, bool bad, int sub) {
    ag_tensor o = SENTINEL_TENSOR, seed = SENTINEL_TENSOR, cseed = SENTINEL_TENSOR;
    const ag_status IA = AG_STATUS_INVALID_ARGUMENT;
    CHECK_OK(ag_reset(c));
    ag_tensor old = SENTINEL_TENSOR;
    CHECK_OK(ag_input_new(c, (const size_t[]){4}, 1, &old));
    CHECK_OK(ag_reset(c));
    ag_tensor x = MK(c, 2, 3);
    ag_tensor s3 = MK(c, 3);
    ag_tensor junk = MK(c, 4); /* pattern values: not 16-bit limbs */
    CHECK_OK(ag_input_new(c, (const size_t[]){4}, 1, &seed));
    CHECK_OK(ag_seed_write(c, seed, 0x0123456789abcdefull));
    CHECK_OK(ag_scale(c, seed, 1.0f, &cseed));
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 1.0f, seed, &o), IA, "dropout_seeded: p = 1", "[0, 1)"); break;
    case 1: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, NAN, seed, &o), IA, "dropout_seeded: p = NaN"); break;
    case 2: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, -0.5f, seed, &o), IA, "dropout_seeded: p = -0.5"); break;
    case 3: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 0.5f, s3, &o), AG_STATUS_SHAPE_MISMATCH, "dropout_seeded: seed has shape [3]", "(x [2,3])", "shape [4]"); break;
    case 4: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 0.5f, junk, &o), IA, "dropout_seeded: seed element 0", "16-bit limbs", "ag_seed_write"); break;
    case 5: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 0.5f, cseed, &o), IA, "dropout_seeded: seed", "computed or a parameter"); break;
    case 6: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 0.5f, old, &o), AG_STATUS_STALE_HANDLE, "dropout_seeded: ", "stale"); break;
    case 7: if (bad) CHECK_ERR(c, ag_dropout_seeded(c, x, 0.5f, seed, NULL), AG_STATUS_NULL_ARGUMENT, "ag_dropout_seeded", "`out`"); break;
    case 8: if (bad) CHECK_ERR(c, ag_seed_write(c, x, 7), IA, "seed_write: tensor", "[2,3]", "shape [4]"); break;
    case 9: if (bad) CHECK_ERR(c, ag_seed_write(c, m->w, 7), IA, "seed_write: tensor", "[4,3]"); break;
    case 10: if (bad) CHECK_ERR(c, ag_seed_write(c, cseed, 7), IA, "seed_write", "not an input slot"); break;
    case 11: if (bad) CHECK_ERR(c, ag_seed_write(c, old, 7), AG_STATUS_STALE_HANDLE, "seed_write: ", "stale"); break;
    default: return false;
    }
    CHECK(same_tensor(o, SENTINEL_TENSOR));
    return true;
}

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

/* Number of entries of folder `dir` whose name contains `needle` (-1 on error). */
static int count_entries(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

static bool read_small_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return true;
}

/*
 * The temporary file of a save does not have a predictable name such as
 * "<path>.tmp.<pid>": a regular file, a symlink (to a victim file) and a FIFO
 * planted at that name are left alone, the save neither follows nor blocks on
 * them, and the checkpoint lands at <path> (loading it back changes nothing:
 * it is this context's own state).
 */
static void check_planted_temp_names(ag_context *c) {
    static const char *const targets[3] = {"planted_file.ckpt", "planted_link.ckpt",
                                           "planted_fifo.ckpt"};
    char victim[192], path[192], tmp[224], buf[64];
    snprintf(victim, sizeof victim, "%s/victim.txt", g_dir);
    CHECK(write_file(victim, "victim", 6));
    alarm(120); /* backstop: a save stuck on the FIFO fails the test, never hangs it */
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, targets[i]);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        int reader = -1;
        if (i == 0) CHECK(write_file(tmp, "planted", 7));
        if (i == 1) CHECK(symlink(victim, tmp) == 0);
        if (i == 2) {
            CHECK(mkfifo(tmp, 0600) == 0);
            /* A reader, so that a save that wrongly opened the FIFO would
             * not block but fail (and be reported) instead. */
            reader = open(tmp, O_RDONLY | O_NONBLOCK);
            CHECK(reader >= 0);
        }
        CHECK_OK(ag_checkpoint_save(c, path, (const uint8_t *)"pl", 2));
        if (reader >= 0) {
            char junk[16];
            CHECK(read(reader, junk, sizeof junk) <= 0); /* nothing went into it */
            close(reader);
        }
        struct stat st;
        CHECK(lstat(tmp, &st) == 0);
        if (i == 0) CHECK(S_ISREG(st.st_mode) && read_small_file(tmp, buf, sizeof buf) && strcmp(buf, "planted") == 0);
        if (i == 1) CHECK(S_ISLNK(st.st_mode));
        if (i == 2) CHECK(S_ISFIFO(st.st_mode));
        CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
        uint8_t u[8] = {0};
        size_t ulen = 0;
        CHECK_OK(ag_checkpoint_load(c, path, u, sizeof u, &ulen));
        CHECK(ulen == 2 && memcmp(u, "pl", 2) == 0);
    }
    alarm(0);
    CHECK(read_small_file(victim, buf, sizeof buf) && strcmp(buf, "victim") == 0);
    /* Only the three planted names carry ".tmp.": nothing else left behind. */
    CHECK(count_entries(g_dir, ".tmp.") == 3);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, targets[i]);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        CHECK(unlink(tmp) == 0);
        CHECK(unlink(path) == 0);
    }
    CHECK(unlink(victim) == 0);
}

static bool case_checkpoint(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    uint8_t user[16];
    memset(user, 0xEE, sizeof user);
    size_t ulen = 999;
    char path[192];
    switch (sub) {
    case 0: if (bad) CHECK_ERR(c, ag_checkpoint_save(c, "", NULL, 0), AG_STATUS_INVALID_ARGUMENT, "ag_checkpoint_save", "empty"); break;
    case 1: if (bad) CHECK_ERR(c, ag_checkpoint_save(c, "bad\xff\xfe.ckpt", NULL, 0), AG_STATUS_INVALID_ARGUMENT, "ag_checkpoint_save", "UTF-8"); break;
    case 2:
        snprintf(path, sizeof path, "%s/missing/dir/x.ckpt", g_dir);
        if (bad) CHECK_ERR(c, ag_checkpoint_save(c, path, NULL, 0), AG_STATUS_IO, "checkpoint_save", "missing/dir/x.ckpt");
        break;
    case 3: /* the target is a folder: the rename fails, the temporary file goes */
        snprintf(path, sizeof path, "%s/adir", g_dir);
        if (bad) {
            CHECK(count_entries(g_dir, "adir.tmp.") == 0);
            CHECK_ERR(c, ag_checkpoint_save(c, path, NULL, 0), AG_STATUS_IO, "checkpoint_save", "adir");
            CHECK(count_entries(g_dir, "adir.tmp.") == 0);
            CHECK(count_entries(g_dir, ".tmp") == 0);
        }
        break;
    case 4: if (bad) CHECK_ERR(c, ag_checkpoint_load(c, "", user, 16, &ulen), AG_STATUS_INVALID_ARGUMENT, "ag_checkpoint_load", "empty"); break;
    case 5: if (bad) CHECK_ERR(c, ag_checkpoint_load(c, "\xc3\x28", user, 16, &ulen), AG_STATUS_INVALID_ARGUMENT, "ag_checkpoint_load", "UTF-8"); break;
    case 6:
        snprintf(path, sizeof path, "%s/does_not_exist.ckpt", g_dir);
        if (bad) CHECK_ERR(c, ag_checkpoint_load(c, path, user, 16, &ulen), AG_STATUS_IO, "checkpoint_load", "does_not_exist.ckpt");
        break;
    case 7: if (bad) CHECK_ERR(c, ag_checkpoint_load(c, g_garbage, user, 16, &ulen), AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: "); break;
    case 8: if (bad) CHECK_ERR(c, ag_checkpoint_load(c, g_ckpt_other, user, 16, &ulen), AG_STATUS_CHECKPOINT_MISMATCH, "checkpoint_load: checkpoint does not match the model: ", "parameter"); break;
    case 9: /* user bytes do not fit: all or nothing, so the parameters do not change */
        if (bad) CHECK_ERR(c, ag_checkpoint_load(c, g_ckpt_trained, user, 4, &ulen), AG_STATUS_INVALID_ARGUMENT, "ag_checkpoint_load", "4 bytes", "5");
        break;
    case 10: if (bad) CHECK_ERR(c, ag_checkpoint_load_bytes(c, user, 0, user, 16, &ulen), AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: ", "too short"); break;
    case 11: if (bad) CHECK_ERR(c, ag_checkpoint_load_bytes(c, user, 16, user, 16, &ulen), AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: "); break;
    case 12: if (bad) CHECK_ERR(c, ag_checkpoint_load_bytes(c, NULL, 0, user, 16, &ulen), AG_STATUS_CHECKPOINT_CORRUPT, "checkpoint_load: checkpoint corrupt: "); break;
    case 13: if (bad) CHECK_ERR(c, ag_checkpoint_save(c, "x.ckpt", NULL, SIZE_MAX), AG_STATUS_NULL_ARGUMENT, "ag_checkpoint_save", "`user`"); break;
    case 14: if (bad) check_planted_temp_names(c); break;
    default: return false;
    }
    if (bad) {
        CHECK(ulen == 999);
        for (int i = 0; i < 16; i++) CHECK(user[i] == 0xEE);
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Context lifecycle: free, double free, use after free, panics             */
/* ------------------------------------------------------------------------ */

/* Every call through a freed (or never made) context token is
 * INVALID_CONTEXT and writes no out-parameter. */
static void check_dead_context(ag_context *dead) {
    CHECK_STATUS(ag_reset(dead), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_zero_grad(dead), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_set_grad_enabled(dead, true), AG_STATUS_INVALID_CONTEXT);
    ag_memory_stats_t mf;
    memset(&mf, 0x77, sizeof mf);
    CHECK_STATUS(ag_memory_stats(dead, &mf), AG_STATUS_INVALID_CONTEXT);
    CHECK(mf.resets == 0x7777777777777777ull);
    ag_tensor t = {0, 1, 0}, out = SENTINEL_TENSOR;
    CHECK_STATUS(ag_tensor_new(dead, (const size_t[]){1}, 1, pattern, &out), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_param_new(dead, (const size_t[]){1}, 1, NULL, &out), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_add(dead, t, t, &out), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_optimizer_step(dead), AG_STATUS_INVALID_CONTEXT);
    CHECK_STATUS(ag_test_panic(dead), AG_STATUS_INVALID_CONTEXT);
    CHECK(same_tensor(out, SENTINEL_TENSOR));
    const char *msg = ag_context_last_error(dead);
    CHECK(msg != NULL && strstr(msg, "not live") != NULL);
}

#define TOKEN_ROUNDS 64

/* `dead` was freed; new contexts must never get its token (or each other's)
 * and calls through `dead` must never reach them. */
static void check_tokens_never_reused(ag_context *dead) {
    static ag_context *seen[2 * TOKEN_ROUNDS];
    int n_seen = 0, reused = 0;
    for (int round = 0; round < TOKEN_ROUNDS; round++) {
        ag_context *a = NULL, *b = NULL;
        CHECK_OK(ag_context_new(&a));
        CHECK_OK(ag_context_new(&b));
        if (a == NULL || b == NULL) {
            ag_context_free(&a);
            ag_context_free(&b);
            return;
        }
        for (int i = 0; i < n_seen; i++) reused += seen[i] == a || seen[i] == b;
        reused += a == dead || b == dead || a == b;
        seen[n_seen++] = a;
        seen[n_seen++] = b;
        /* Calls through the stale token fail and leave `a` alone: a gets a
         * parameter, the stale token gets INVALID_CONTEXT for everything. */
        ag_tensor p = SENTINEL_TENSOR;
        CHECK_OK(ag_param_new(a, (const size_t[]){3}, 1, M_B0, &p));
        if (round % 16 == 0) check_dead_context(dead);
        ag_context *copy = dead;
        CHECK_STATUS(ag_context_free(&copy), AG_STATUS_INVALID_CONTEXT);
        CHECK(copy == dead);
        /* The new contexts are intact: a still has its parameter, fresh
         * state, an empty last error. */
        ag_memory_stats_t mf;
        CHECK_OK(ag_memory_stats(a, &mf));
        CHECK(mf.param_count == 1 && mf.resets == 0);
        float v[3] = {0};
        CHECK_OK(ag_tensor_read(a, p, v, 3));
        CHECK(memcmp(v, M_B0, sizeof v) == 0);
        const char *e = ag_context_last_error(a);
        CHECK(e != NULL && e[0] == '\0');
        /* Free in alternating order so the allocator has every chance to
         * hand a freed context's memory to the next one. */
        if (round % 2 == 0) {
            CHECK_OK(ag_context_free(&a));
            CHECK_OK(ag_context_free(&b));
        } else {
            CHECK_OK(ag_context_free(&b));
            CHECK_OK(ag_context_free(&a));
        }
    }
    CHECK(reused == 0);
    /* Every token made above is dead now, and still distinguishable. */
    for (int i = 0; i < n_seen; i += 17) {
        ag_context *old = seen[i];
        CHECK_STATUS(ag_reset(old), AG_STATUS_INVALID_CONTEXT);
        CHECK_STATUS(ag_context_free(&old), AG_STATUS_INVALID_CONTEXT);
    }
}

/* The subject context is a bystander: its neighbour is freed twice, used
 * after free, or poisoned, and the subject must not notice. */
/* ------------------------------------------------------------------------ */
/* The gradient block: NULL pointers, wrong lengths, a freed context         */
/* ------------------------------------------------------------------------ */

#define M_GRADS (M_IN * M_OUT + M_OUT)

static bool case_grads(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    if (sub > 3) return false;
    float before[M_GRADS], after[M_GRADS], dst[M_GRADS + 1];
    size_t len = 0;
    CHECK_OK(ag_grads_len(c, &len));
    CHECK(len == M_GRADS);
    CHECK_OK(ag_grads_copy_out(c, before, M_GRADS));
    if (!bad) return true;
    for (size_t i = 0; i < M_GRADS + 1; i++) dst[i] = 7.0f;
    if (sub == 0) {
        float *p = NULL;
        size_t n = 12345;
        CHECK_ERR(c, ag_grads_buffer(c, NULL, &n), AG_STATUS_NULL_ARGUMENT, "ag_grads_buffer",
                  "ptr");
        CHECK_ERR(c, ag_grads_buffer(c, &p, NULL), AG_STATUS_NULL_ARGUMENT, "ag_grads_buffer",
                  "len");
        CHECK(p == NULL && n == 12345);
        CHECK_ERR(c, ag_grads_len(c, NULL), AG_STATUS_NULL_ARGUMENT, "ag_grads_len");
    } else if (sub == 1) {
        const size_t lens[] = {0, M_GRADS - 1, M_GRADS + 1, SIZE_MAX};
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            CHECK_ERR(c, ag_grads_copy_out(c, dst, lens[i]), AG_STATUS_INVALID_ARGUMENT,
                      "ag_grads_copy_out", "15 floats");
        }
        CHECK_ERR(c, ag_grads_copy_out(c, NULL, M_GRADS), AG_STATUS_NULL_ARGUMENT,
                  "ag_grads_copy_out", "dst");
        for (size_t i = 0; i < M_GRADS + 1; i++) CHECK(dst[i] == 7.0f);
    } else if (sub == 2) {
        const size_t lens[] = {0, M_GRADS - 1, M_GRADS + 1, SIZE_MAX};
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            CHECK_ERR(c, ag_grads_copy_in(c, dst, lens[i]), AG_STATUS_INVALID_ARGUMENT,
                      "ag_grads_copy_in", "15 floats");
        }
        CHECK_ERR(c, ag_grads_copy_in(c, NULL, M_GRADS), AG_STATUS_NULL_ARGUMENT,
                  "ag_grads_copy_in", "src");
    } else {
        /* A freed context with parameters: every call refused, nothing written. */
        ag_context *victim = NULL;
        model vm;
        CHECK_OK(ag_context_new(&victim));
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_IN, M_OUT}, 2, M_W0, &vm.w));
        float *p = NULL;
        size_t n = 0;
        CHECK_OK(ag_grads_buffer(victim, &p, &n));
        CHECK(p != NULL && n == M_IN * M_OUT);
        ag_context *copy = victim;
        CHECK_OK(ag_context_free(&victim));
        float *q = NULL;
        size_t k = 99;
        CHECK_STATUS(ag_grads_buffer(copy, &q, &k), AG_STATUS_INVALID_CONTEXT);
        CHECK_STATUS(ag_grads_len(copy, &k), AG_STATUS_INVALID_CONTEXT);
        CHECK_STATUS(ag_grads_copy_out(copy, dst, M_IN * M_OUT), AG_STATUS_INVALID_CONTEXT);
        CHECK_STATUS(ag_grads_copy_in(copy, dst, M_IN * M_OUT), AG_STATUS_INVALID_CONTEXT);
        CHECK(q == NULL && k == 99);
        for (size_t i = 0; i < M_GRADS + 1; i++) CHECK(dst[i] == 7.0f);
    }
    CHECK_OK(ag_grads_copy_out(c, after, M_GRADS));
    CHECK(memcmp(before, after, sizeof before) == 0); /* the refused calls changed nothing */
    return true;
}

static bool case_lifecycle(ag_context *c, const model *m, bool bad, int sub) {
    (void)m;
    if (sub > 3 || !bad) return sub <= 3;
    (void)c;
    ag_context *victim = NULL;
    ag_status st = ag_context_new(&victim);
    CHECK_OK(st);
    if (st != AG_STATUS_OK) return true;
    check_set_ctx(victim);
    if (sub == 0) {
        /* Double free through a copied pointer, then use after free. */
        const char *fresh = ag_context_last_error(victim);
        CHECK(fresh != NULL && fresh[0] == '\0'); /* empty: nothing failed yet */
        ag_context *copy = victim;
        CHECK_OK(ag_context_free(&victim));
        CHECK(victim == NULL);
        CHECK_STATUS(ag_context_free(&copy), AG_STATUS_INVALID_CONTEXT);
        CHECK(copy != NULL); /* not written on failure */
        check_dead_context(copy);
        /* A pointer that never was a context. */
        static int not_a_context;
        ag_context *forged = (ag_context *)(void *)&not_a_context;
        CHECK_STATUS(ag_reset(forged), AG_STATUS_INVALID_CONTEXT);
        CHECK_STATUS(ag_context_free(&forged), AG_STATUS_INVALID_CONTEXT);
        CHECK(strstr(ag_context_last_error(forged), "not live") != NULL);
        /* Freeing NULL, and through a pointer to NULL, is fine. */
        CHECK_OK(ag_context_free(NULL));
        ag_context *none = NULL;
        CHECK_OK(ag_context_free(&none));
        CHECK(none == NULL);
        /* Contexts are tokens that are never reused: after new contexts are
         * made (and freed, and made again) the stale copy is still dead, and
         * freeing it does not free any new context. */
        check_tokens_never_reused(copy);
    } else if (sub == 3) {
        /* A context freed while another one is alive, then many more made:
         * the stale token never comes back, even for a context of the same
         * size made right after the free (the allocator's favourite reuse). */
        model vm;
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_IN, M_OUT}, 2, M_W0, &vm.w));
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_OUT}, 1, M_B0, &vm.b));
        CHECK_OK(make_optimizer(victim));
        ag_context *stale = victim;
        CHECK_OK(ag_context_free(&victim));
        model nm;
        ag_context *next = new_model(&nm, true);
        check_set_ctx(next);
        CHECK(next != NULL && next != stale);
        check_dead_context(stale);
        /* The victim's parameter handles are foreign to the new context. */
        float v[M_IN * M_OUT];
        if (next != NULL) {
            CHECK(nm.w.context != vm.w.context);
            CHECK_ERR(next, ag_tensor_read(next, vm.w, v, M_IN * M_OUT), AG_STATUS_WRONG_CONTEXT, "tensor_read", "belongs to context");
            CHECK_STATUS(ag_context_free(&stale), AG_STATUS_INVALID_CONTEXT);
            float l = 0;
            CHECK_OK(train_iter(next, &nm, &l)); /* untouched by the stale calls */
            CHECK(isfinite(l));
            CHECK_OK(ag_context_free(&next));
        }
        check_set_ctx(c);
        return true;
    } else if (sub == 1) {
        /* Panic, then poison: every later call is POISONED, free still works. */
        model vm;
        ag_tensor o = SENTINEL_TENSOR;
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_IN, M_OUT}, 2, M_W0, &vm.w));
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_OUT}, 1, M_B0, &vm.b));
        CHECK_OK(make_optimizer(victim));
        CHECK_ERR(victim, ag_test_panic(victim), AG_STATUS_PANIC, "ag_test_panic", "panic", "poisoned");
        CHECK_ERR(victim, ag_reset(victim), AG_STATUS_POISONED, "ag_reset", "poisoned");
        CHECK_ERR(victim, ag_test_panic(victim), AG_STATUS_POISONED, "ag_test_panic", "poisoned");
        ag_memory_stats_t mf;
        CHECK_ERR(victim, ag_memory_stats(victim, &mf), AG_STATUS_POISONED, "ag_memory_stats");
        CHECK_ERR(victim, ag_tensor_new(victim, (const size_t[]){1}, 1, pattern, &o), AG_STATUS_POISONED, "ag_tensor_new");
        CHECK_ERR(victim, ag_add(victim, vm.w, vm.w, &o), AG_STATUS_POISONED, "ag_add");
        float v[12];
        CHECK_ERR(victim, ag_tensor_read(victim, vm.w, v, 12), AG_STATUS_POISONED, "ag_tensor_read");
        CHECK_ERR(victim, ag_zero_grad(victim), AG_STATUS_POISONED, "ag_zero_grad");
        CHECK_ERR(victim, ag_set_arena_limit(victim, 0), AG_STATUS_POISONED, "ag_set_arena_limit");
        CHECK_ERR(victim, ag_optimizer_step(victim), AG_STATUS_POISONED, "ag_optimizer_step");
        float l;
        CHECK_STATUS(train_iter(victim, &vm, &l), AG_STATUS_POISONED);
        CHECK(same_tensor(o, SENTINEL_TENSOR));
        /* Poisoning is reported before any argument check. */
        CHECK_STATUS(ag_memory_stats(victim, NULL), AG_STATUS_POISONED);
    } else {
        /* Freeing a context that holds parameters, activations, a graph and
         * optimizer state releases everything (valgrind/LSan check this). */
        model vm;
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_IN, M_OUT}, 2, M_W0, &vm.w));
        CHECK_OK(ag_param_new(victim, (const size_t[]){M_OUT}, 1, M_B0, &vm.b));
        CHECK_OK(make_optimizer(victim));
        float l;
        CHECK_OK(train_iter(victim, &vm, &l));
        ag_tensor loss = model_loss(victim, &vm);
        (void)loss; /* a recorded graph left un-backwarded */
    }
    CHECK_OK(ag_context_free(&victim));
    CHECK(victim == NULL);
    check_set_ctx(c);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Status names and version                                                  */
/* ------------------------------------------------------------------------ */

static void test_status_str(void) {
    check_begin("ag_status_str");
    const char *names[-AG_STATUS_BUFFER_TOO_SMALL + 1];
    for (int code = 0; code >= AG_STATUS_BUFFER_TOO_SMALL; code--) {
        const char *s = ag_status_str(code);
        names[-code] = s;
        CHECK(s != NULL && s[0] != '\0' && strcmp(s, "unknown status") != 0);
        for (int prev = 0; prev < -code; prev++) CHECK(strcmp(names[prev], s) != 0);
    }
    CHECK(strcmp(ag_status_str(AG_STATUS_OK), "ok") == 0);
    const ag_status unknown[] = {1, 2, AG_STATUS_BUFFER_TOO_SMALL - 1, -100, 1000, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = ag_status_str(unknown[i]);
        CHECK(s != NULL && strcmp(s, "unknown status") == 0);
    }
    /* Spot checks that the names match the constants. */
    CHECK(strstr(ag_status_str(AG_STATUS_STALE_HANDLE), "stale") != NULL);
    CHECK(strstr(ag_status_str(AG_STATUS_BUSY), "busy") != NULL);
    CHECK(strstr(ag_status_str(AG_STATUS_POISONED), "poisoned") != NULL);
    CHECK(strstr(ag_status_str(AG_STATUS_NULL_ARGUMENT), "NULL") != NULL);
    const char *v = ag_version();
    CHECK(v != NULL && v[0] >= '0' && v[0] <= '9' && strchr(v, '.') != NULL);
}

/* ag_runtime_info: every text field named and NUL-terminated, a thread
 * count of 1 or 2; a NULL `out` or context is refused, with a message that
 * names the function and the argument. */
static void test_runtime_info(void) {
    check_begin("ag_runtime_info");
    ag_context *c = NULL;
    REQUIRE(ag_context_new(&c) == AG_STATUS_OK);
    ag_runtime rt;
    memset(&rt, 0x7f, sizeof rt);
    CHECK_OK(ag_runtime_info(c, &rt));
    const char *fields[] = {rt.gemm_library, rt.gemm_version, rt.gemm_kernels,
                            rt.gemm_note,    rt.simd,         rt.cpu_isa};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        CHECK(memchr(fields[i], '\0', AG_RUNTIME_TEXT) != NULL);
    CHECK(rt.gemm_library[0] != '\0');
    CHECK(strcmp(rt.simd, "AVX-512") == 0 || strcmp(rt.simd, "AVX2+FMA") == 0 ||
          strcmp(rt.simd, "baseline") == 0);
    CHECK(rt.threads == 1 || rt.threads == 2);
    CHECK_ERR(c, ag_runtime_info(c, NULL), AG_STATUS_NULL_ARGUMENT, "ag_runtime_info", "`out`");
    CHECK_STATUS(ag_runtime_info(NULL, &rt), AG_STATUS_NULL_ARGUMENT);
    ag_context_free(&c);
}

/* The deprecated spellings (kept until 0.2) still work: the old function
 * forwards to the new one (failures name the new one), the old type name
 * is the same struct. The header marks both deprecated, hence the pragma:
 * this section is the one place that uses them on purpose. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void test_deprecated_aliases(void) {
    check_begin("deprecated aliases");
    ag_context *c = NULL;
    REQUIRE(ag_context_new(&c) == AG_STATUS_OK);
    CHECK_OK(ag_context_set_recompute(c, AG_RECOMPUTE_ALL));
    CHECK_ERR(c, ag_context_set_recompute(c, 7), AG_STATUS_INVALID_ARGUMENT, "set_recompute",
              "policy 7");
    CHECK(strstr(ag_context_last_error(c), "context_set") == NULL);
    CHECK_STATUS(ag_context_set_recompute(NULL, AG_RECOMPUTE_NONE), AG_STATUS_NULL_ARGUMENT);
    ag_memory_figures old;
    ag_memory_stats_t now;
    CHECK(sizeof old == sizeof now);
    CHECK_OK(ag_memory_stats(c, &old));
    CHECK_OK(ag_memory_stats(c, &now));
    CHECK(memcmp(&old, &now, sizeof now) == 0);
    ag_context_free(&c);
}
#pragma GCC diagnostic pop

/* ------------------------------------------------------------------------ */
/* Set-up: temporary folder and checkpoint files                            */
/* ------------------------------------------------------------------------ */

static void setup_files(void) {
    check_begin("setup");
    strcpy(g_dir, "/tmp/ag_test_api.XXXXXX");
    REQUIRE(mkdtemp(g_dir) != NULL);
    snprintf(g_ckpt_user, sizeof g_ckpt_user, "%s/user.ckpt", g_dir);
    snprintf(g_ckpt_other, sizeof g_ckpt_other, "%s/other.ckpt", g_dir);
    snprintf(g_ckpt_trained, sizeof g_ckpt_trained, "%s/trained.ckpt", g_dir);
    snprintf(g_garbage, sizeof g_garbage, "%s/garbage.ckpt", g_dir);
    uint8_t junk[100];
    for (int i = 0; i < 100; i++) junk[i] = (uint8_t)(i * 37 + 11);
    CHECK(write_file(g_garbage, junk, sizeof junk));
    char adir[160];
    snprintf(adir, sizeof adir, "%s/adir", g_dir);
    CHECK(mkdir(adir, 0700) == 0);

    model m;
    ag_context *c = new_model(&m, true);
    REQUIRE(c != NULL);
    CHECK_OK(ag_checkpoint_save(c, g_ckpt_user, (const uint8_t *)"hello", 5));
    float l;
    for (int i = 0; i < 4; i++) CHECK_OK(train_iter(c, &m, &l));
    CHECK_OK(ag_checkpoint_save(c, g_ckpt_trained, (const uint8_t *)"hello", 5));
    CHECK_OK(ag_context_free(&c));

    ag_context *o = NULL;
    REQUIRE_OK(ag_context_new(&o));
    ag_tensor p;
    CHECK_OK(ag_param_new(o, (const size_t[]){M_IN, M_OUT + 1}, 2, NULL, &p));
    CHECK_OK(ag_param_new(o, (const size_t[]){M_OUT + 1}, 1, NULL, &p));
    CHECK_OK(make_optimizer(o));
    CHECK_OK(ag_checkpoint_save(o, g_ckpt_other, NULL, 0));
    CHECK_OK(ag_context_free(&o));
}

static void remove_files(void) {
    DIR *d = opendir(g_dir);
    if (d == NULL) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(d);
    rmdir(g_dir);
}

int main(void) {
    for (size_t i = 0; i < sizeof pattern / sizeof pattern[0]; i++) {
        pattern[i] = 0.05f * (float)((int)(i % 13) - 6) + 0.01f * (float)(i % 7);
    }
    setup_files();
    test_status_str();
    test_runtime_info();
    test_deprecated_aliases();
    test_null_context();
    test_optimizer_without_params();
    run_cases("null pointers", case_null_ptrs, true);
    run_cases("shape mismatch", case_shape_mismatch, true);
    run_cases("dimensions", case_dims, true);
    run_cases("output too large", case_output_too_large, true);
    test_element_cap();
    run_cases("index range", case_index_range, true);
    run_cases("sequence", case_sequence, true);
    run_cases("sequence without optimizer", case_sequence_no_opt, false);
    run_cases("non-finite", case_non_finite, true);
    run_cases("hyper-parameters", case_hyper, false);
    run_cases("lr and clip", case_lr_clip, true);
    run_cases("arena limit", case_arena_limit, true);
    run_cases("invalid arguments", case_invalid_args, true);
    run_cases("seeded dropout", case_seeded_dropout, true);
    run_cases("checkpoint", case_checkpoint, true);
    run_cases("lifecycle", case_lifecycle, true);
    run_cases("gradient block", case_grads, true);
    test_handles();
    remove_files();
    printf("%d bad-call cases, each followed by a bit-exact comparison with a control context\n",
           cases_run);
    return check_summary();
}

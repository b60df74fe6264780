/*
 * model.c: a GPT-2-style model (llm.c's train_gpt2.c / nanoGPT).
 *
 * Token embedding wte [V, C] and position embedding wpe [T, C]; L blocks of
 *     x = x + proj(attention(qkv(ln1(x))))
 *     x = x + fc2(gelu(fc(ln2(x))))
 * a final LayerNorm, logits = x @ wte^T (the output projection is tied to the
 * token embedding), mean cross-entropy. Parameters carry GPT-2's names (qkv is
 * attn.c_attn, proj attn.c_proj, fc mlp.c_fc, fc2 mlp.c_proj), weights in the
 * [in, out] layout of GPT-2's Conv1D, which is ag_linear's.
 */
#include <stdio.h>

#include "train_full.h"

enum init_kind { INIT_NORMAL, INIT_ZERO, INIT_ONE };

/* Creates one parameter named `name` (GPT-2's names), with weight decay on
 * for matrices only (d1 > 0: embeddings and linear weights, as nanoGPT);
 * `scratch` holds at least its element count. */
static ag_status new_param(ag_context *ctx, struct model *m, const char *name, size_t d0,
                           size_t d1, enum init_kind kind, uint64_t *rng, float *scratch,
                           ag_tensor *out)
{
    size_t shape[2] = {d0, d1};
    size_t ndim = d1 == 0 ? 1 : 2;
    size_t n = d0 * (d1 == 0 ? 1 : d1);
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case INIT_NORMAL: scratch[i] = (float)(0.02 * rng_normal(rng)); break;
        case INIT_ZERO: scratch[i] = 0.0f; break;
        case INIT_ONE: scratch[i] = 1.0f; break;
        }
    }
    m->n_floats += n;
    TRY(ag_param_new_named(ctx, name, shape, ndim, scratch, out));
    return ag_param_set_weight_decay(ctx, *out, ndim == 2);
}

/* Creates block l's parameter "transformer.h.<l>.<part>". */
static ag_status block_param(ag_context *ctx, struct model *m, int l, const char *part, size_t d0,
                             size_t d1, enum init_kind kind, uint64_t *rng, float *scratch,
                             ag_tensor *out)
{
    char name[64];
    snprintf(name, sizeof name, "transformer.h.%d.%s", l, part);
    return new_param(ctx, m, name, d0, d1, kind, rng, scratch, out);
}

/* Creates every parameter in a fixed order (the checkpoint relies on it),
 * named as in transformers' GPT2LMHeadModel state dict (the safetensors
 * export and --init-from rely on them; lm_head.weight is wte, tied). */
ag_status model_build(ag_context *ctx, struct model *m, uint64_t init_seed, float *scratch)
{
    uint64_t rng = init_seed;
    size_t C = (size_t)m->C, F = (size_t)m->F;
    m->n_floats = 0;
    TRY(new_param(ctx, m, "transformer.wte.weight", (size_t)m->V, C, INIT_NORMAL, &rng, scratch, &m->wte));
    TRY(new_param(ctx, m, "transformer.wpe.weight", (size_t)m->T, C, INIT_NORMAL, &rng, scratch, &m->wpe));
    for (int l = 0; l < m->L; l++) {
        struct block *b = &m->blocks[l];
#define P(part, d0, d1, kind, out) \
    TRY(block_param(ctx, m, l, part, d0, d1, kind, &rng, scratch, out))
        P("ln_1.weight", C, 0, INIT_ONE, &b->ln1_w);
        P("ln_1.bias", C, 0, INIT_ZERO, &b->ln1_b);
        P("attn.c_attn.weight", C, 3 * C, INIT_NORMAL, &b->w_qkv);
        P("attn.c_attn.bias", 3 * C, 0, INIT_ZERO, &b->b_qkv);
        P("attn.c_proj.weight", C, C, INIT_NORMAL, &b->w_proj);
        P("attn.c_proj.bias", C, 0, INIT_ZERO, &b->b_proj);
        P("ln_2.weight", C, 0, INIT_ONE, &b->ln2_w);
        P("ln_2.bias", C, 0, INIT_ZERO, &b->ln2_b);
        P("mlp.c_fc.weight", C, F, INIT_NORMAL, &b->w_fc);
        P("mlp.c_fc.bias", F, 0, INIT_ZERO, &b->b_fc);
        P("mlp.c_proj.weight", F, C, INIT_NORMAL, &b->w_fc2);
        P("mlp.c_proj.bias", C, 0, INIT_ZERO, &b->b_fc2);
#undef P
    }
    TRY(new_param(ctx, m, "transformer.ln_f.weight", C, 0, INIT_ONE, &rng, scratch, &m->lnf_w));
    TRY(new_param(ctx, m, "transformer.ln_f.bias", C, 0, INIT_ZERO, &rng, scratch, &m->lnf_b));
    return AG_STATUS_OK;
}

/*
 * Forward pass over B sequences of t <= T tokens: ids [B*t] -> logits
 * [B*t, V]; with targets [B*t], also the mean cross-entropy loss [1].
 */
ag_status model_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                               const int32_t *targets, size_t B, size_t t, ag_tensor *logits_out,
                               ag_tensor *loss_out)
{
    size_t C = (size_t)m->C;
    ag_tensor tok, x, h, a, pos, logits;
    TRY(ag_embedding(ctx, m->wte, ids, B * t, &tok));           /* [B*t, C] */
    size_t btc[3] = {B, t, C};
    TRY(ag_reshape(ctx, tok, btc, 3, &tok));                    /* [B, t, C] */
    if (t == (size_t)m->T) {
        pos = m->wpe;                                           /* [T, C] */
    } else {
        TRY(ag_embedding(ctx, m->wpe, m->pos_ids, t, &pos));    /* [t, C] rows 0..t-1 */
    }
    TRY(ag_add(ctx, tok, pos, &x));                             /* [B, t, C] broadcast */
    for (int l = 0; l < m->L; l++) {
        const struct block *b = &m->blocks[l];
        TRY(ag_segment_begin(ctx));                             /* block = a segment */
        TRY(ag_layernorm(ctx, x, b->ln1_w, b->ln1_b, &h));      /* [B, t, C] */
        TRY(ag_linear(ctx, h, b->w_qkv, &b->b_qkv, &h));        /* [B, t, 3C] */
        TRY(ag_attention(ctx, h, (size_t)m->NH, &a));           /* [B, t, C] */
        TRY(ag_linear(ctx, a, b->w_proj, &b->b_proj, &a));      /* [B, t, C] */
        TRY(ag_add(ctx, x, a, &x));                             /* residual */
        TRY(ag_layernorm(ctx, x, b->ln2_w, b->ln2_b, &h));      /* [B, t, C] */
        TRY(ag_linear(ctx, h, b->w_fc, &b->b_fc, &h));          /* [B, t, F] */
        TRY(ag_gelu(ctx, h, &h));                               /* [B, t, F] */
        TRY(ag_linear(ctx, h, b->w_fc2, &b->b_fc2, &h));        /* [B, t, C] */
        TRY(ag_add(ctx, x, h, &x));                             /* residual */
        TRY(ag_segment_end(ctx, x));                            /* x: its one output */
    }
    TRY(ag_layernorm(ctx, x, m->lnf_w, m->lnf_b, &x));          /* [B, t, C] */
    size_t nc[2] = {B * t, C};
    TRY(ag_reshape(ctx, x, nc, 2, &x));                         /* [B*t, C] */
    TRY(ag_matmul(ctx, x, m->wte, false, true, &logits));       /* [B*t, V], tied */
    if (logits_out != NULL) *logits_out = logits;
    if (targets != NULL && loss_out != NULL)
        TRY(ag_cross_entropy(ctx, logits, targets, B * t, loss_out)); /* [1] */
    return AG_STATUS_OK;
}

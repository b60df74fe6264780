/*
 * model.c: a GPT-2-style model (llm.c's train_gpt2.c / nanoGPT), and with
 * --arch llama a Llama one (below).
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
static ag_status llama_build(ag_context *ctx, struct model *m, uint64_t init_seed,
                             float *scratch);

ag_status model_build(ag_context *ctx, struct model *m, uint64_t init_seed, float *scratch)
{
    if (m->arch == ARCH_LLAMA) return llama_build(ctx, m, init_seed, scratch);
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
static ag_status llama_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                               size_t B, size_t t, ag_tensor *logits);

ag_status model_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                               const int32_t *targets, size_t B, size_t t, ag_tensor *logits_out,
                               ag_tensor *loss_out)
{
    if (m->arch == ARCH_LLAMA) {
        ag_tensor logits;
        TRY(llama_forward(ctx, m, ids, B, t, &logits));
        if (logits_out != NULL) *logits_out = logits;
        if (targets != NULL && loss_out != NULL)
            TRY(ag_cross_entropy(ctx, logits, targets, B * t, loss_out));
        return AG_STATUS_OK;
    }
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

/* ------------------------------------------------------------------------ */
/* --arch llama                                                              */
/* ------------------------------------------------------------------------ */
/*
 * Token embedding only (no position embedding: RoPE turns q and k); L blocks
 *     x = x + o(attention(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = rmsnorm(x)
 *     x = x + down(silu(gate(n2)) * up(n2)),                  n2 = rmsnorm(x)
 * with grouped-query causal attention (ag_attention_gqa: KV key/value
 * heads, query head h reading head h / (NH / KV), scaled by 1/sqrt(D)), a
 * final RMSNorm, and logits through lm_head (or wte
 * with --tie-embeddings). Names and the [out, in] weight layout are those of
 * transformers' LlamaForCausalLM state dict.
 */

static ag_status llama_param(ag_context *ctx, struct model *m, int l, const char *part, size_t d0,
                             size_t d1, enum init_kind kind, uint64_t *rng, float *scratch,
                             ag_tensor *out)
{
    char name[80];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, part);
    return new_param(ctx, m, name, d0, d1, kind, rng, scratch, out);
}

/* Every parameter in the order of LlamaForCausalLM's state dict. */
static ag_status llama_build(ag_context *ctx, struct model *m, uint64_t init_seed, float *scratch)
{
    uint64_t rng = init_seed;
    const size_t C = (size_t)m->C, F = (size_t)m->F;
    const size_t kv_width = C / (size_t)m->NH * (size_t)m->KV;
    m->n_floats = 0;
    TRY(new_param(ctx, m, "model.embed_tokens.weight", (size_t)m->V, C, INIT_NORMAL, &rng, scratch,
                  &m->wte));
    for (int l = 0; l < m->L; l++) {
        struct block *b = &m->blocks[l];
#define P(part, d0, d1, kind, out) \
    TRY(llama_param(ctx, m, l, part, d0, d1, kind, &rng, scratch, out))
        P("self_attn.q_proj.weight", C, C, INIT_NORMAL, &b->wq);
        P("self_attn.k_proj.weight", kv_width, C, INIT_NORMAL, &b->wk);
        P("self_attn.v_proj.weight", kv_width, C, INIT_NORMAL, &b->wv);
        P("self_attn.o_proj.weight", C, C, INIT_NORMAL, &b->wo);
        P("mlp.gate_proj.weight", F, C, INIT_NORMAL, &b->w_gate);
        P("mlp.up_proj.weight", F, C, INIT_NORMAL, &b->w_up);
        P("mlp.down_proj.weight", C, F, INIT_NORMAL, &b->w_down);
        P("input_layernorm.weight", C, 0, INIT_ONE, &b->attn_norm);
        P("post_attention_layernorm.weight", C, 0, INIT_ONE, &b->ffn_norm);
#undef P
    }
    TRY(new_param(ctx, m, "model.norm.weight", C, 0, INIT_ONE, &rng, scratch, &m->norm_w));
    if (!m->tie)
        TRY(new_param(ctx, m, "lm_head.weight", (size_t)m->V, C, INIT_NORMAL, &rng, scratch,
                      &m->lm_head));
    return AG_STATUS_OK;
}

/* x [N, in] @ w^T for w [out, in] (nn.Linear's layout) -> [N, out]. */
static ag_status linear_t(ag_context *ctx, ag_tensor x, ag_tensor w, ag_tensor *out)
{
    return ag_matmul(ctx, x, w, false, true, out);
}

/* [B*t, heads*D] -> [B, heads, t, D], the layout of ag_rope and attention. */
static ag_status to_heads(ag_context *ctx, ag_tensor x, size_t B, size_t t, size_t heads,
                          size_t D, ag_tensor *out)
{
    const size_t bthd[4] = {B, t, heads, D};
    static const size_t swap_ht[4] = {0, 2, 1, 3};
    TRY(ag_reshape(ctx, x, bthd, 4, &x));
    return ag_permute(ctx, x, swap_ht, 4, out);
}

static ag_status llama_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                               size_t B, size_t t, ag_tensor *logits)
{
    const size_t C = (size_t)m->C, H = (size_t)m->NH, KV = (size_t)m->KV, D = C / H;
    const size_t N = B * t;
    static const size_t swap_ht[4] = {0, 2, 1, 3};
    const size_t nc[2] = {N, C};
    ag_tensor x, h, q, k, v, a, gate, up;
    TRY(ag_embedding(ctx, m->wte, ids, N, &x));                         /* [N, C] */
    for (int l = 0; l < m->L; l++) {
        const struct block *b = &m->blocks[l];
        TRY(ag_segment_begin(ctx));                                     /* block = a segment */
        TRY(ag_rmsnorm(ctx, x, b->attn_norm, m->norm_eps, &h));         /* [N, C] */
        TRY(linear_t(ctx, h, b->wq, &q));                               /* [N, H D] */
        TRY(linear_t(ctx, h, b->wk, &k));                               /* [N, KV D] */
        TRY(linear_t(ctx, h, b->wv, &v));                               /* [N, KV D] */
        TRY(to_heads(ctx, q, B, t, H, D, &q));                          /* [B, H, t, D] */
        TRY(to_heads(ctx, k, B, t, KV, D, &k));                         /* [B, KV, t, D] */
        TRY(to_heads(ctx, v, B, t, KV, D, &v));
        TRY(ag_rope(ctx, q, m->rope_theta, 0, &q));
        TRY(ag_rope(ctx, k, m->rope_theta, 0, &k));
        TRY(ag_attention_gqa(ctx, q, k, v, &a));                        /* [B, H, t, D] causal */
        TRY(ag_permute(ctx, a, swap_ht, 4, &a));                        /* [B, t, H, D] */
        TRY(ag_reshape(ctx, a, nc, 2, &a));                             /* [N, C] */
        TRY(linear_t(ctx, a, b->wo, &a));
        TRY(ag_add(ctx, x, a, &x));                                     /* residual */
        TRY(ag_rmsnorm(ctx, x, b->ffn_norm, m->norm_eps, &h));
        TRY(linear_t(ctx, h, b->w_gate, &gate));                        /* [N, F] */
        TRY(linear_t(ctx, h, b->w_up, &up));                            /* [N, F] */
        TRY(ag_swiglu(ctx, gate, up, &h));                              /* silu(gate) * up */
        TRY(linear_t(ctx, h, b->w_down, &h));                           /* [N, C] */
        TRY(ag_add(ctx, x, h, &x));                                     /* residual */
        TRY(ag_segment_end(ctx, x));                                    /* x: its one output */
    }
    TRY(ag_rmsnorm(ctx, x, m->norm_w, m->norm_eps, &x));                /* [N, C] */
    return ag_matmul(ctx, x, m->tie ? m->wte : m->lm_head, false, true, logits); /* [N, V] */
}

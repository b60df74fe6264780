/*
 * export.c: --export, a folder Hugging Face transformers loads as it is.
 *
 * The parameters are already named as GPT2LMHeadModel's state dict
 * (model.c), weights in Conv1D's [in, out] layout, or with --arch llama as
 * LlamaForCausalLM's, weights in nn.Linear's [out, in] layout, so the
 * library's safetensors writer gives the weights. This file adds what a
 * loader needs beside them: the byte vocabulary in the file's metadata
 * ("vocab_hex": two hex digits per id, id i = byte i of the string;
 * "format": "pt", which transformers checks) and config.json (GPT2Config
 * or LlamaConfig) in the same folder. A tied output projection
 * ("tie_word_embeddings": GPT-2 always, llama with --tie-embeddings) has no
 * lm_head.weight in the file.
 *
 * Llama's q_proj and k_proj need no permutation: ag_rope pairs element i
 * with i + D/2 of each head, as transformers' rotate_half does (Meta's
 * original checkpoints pair 2i with 2i + 1; transformers' conversion
 * script permutes those, and a folder it wrote is already in this layout).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_full.h"

/* Adds {"format":"pt","vocab_hex":...} as the file's __metadata__. The
 * tensors' offsets count from the end of the header, so they stay valid;
 * the header is padded with spaces to a multiple of 8 bytes. */
static bool add_metadata(const char *path, const struct dataset *d, size_t V, char *err,
                         size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return false;
    }
    uint8_t len8[8];
    uint64_t n = 0;
    bool ok = fread(len8, 1, 8, f) == 8;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    long size = 0;
    ok = ok && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 8 && n <= (uint64_t)size - 8;
    char *file = ok ? malloc((size_t)size + 1) : NULL;
    ok = file != NULL && fseek(f, 0, SEEK_SET) == 0 && fread(file, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    char *hdr = ok ? file + 8 : NULL;
    bool has_meta = false;
    if (ok) { /* search the header only */
        char after = hdr[n];
        hdr[n] = '\0';
        has_meta = strstr(hdr, "__metadata__") != NULL;
        hdr[n] = after;
    }
    if (!ok || n < 2 || hdr[0] != '{' || has_meta) {
        snprintf(err, errlen, "%s: unexpected safetensors header", path);
        free(file);
        return false;
    }
    char meta[64 + 2 * 256];
    int m = snprintf(meta, sizeof meta, "{\"__metadata__\":{\"format\":\"pt\",\"vocab_hex\":\"");
    /* Token shards' ids have no byte vocabulary here (the tokenizer's files do). */
    for (size_t i = 0; !d->shards && i < V; i++)
        m += snprintf(meta + m, sizeof meta - (size_t)m, "%02x", d->vocab[i]);
    m += snprintf(meta + m, sizeof meta - (size_t)m, "\"},");
    /* The old header without its '{', and its own trailing padding. */
    size_t rest = (size_t)n - 1;
    while (rest > 0 && hdr[rest] == ' ') rest--;
    rest++; /* through the closing '}' */
    size_t total = (size_t)m + rest - 1;
    size_t pad = (8 - total % 8) % 8;
    char *head = malloc(8 + (size_t)m + rest + pad);
    if (head == NULL) {
        free(file);
        snprintf(err, errlen, "out of memory");
        return false;
    }
    uint64_t hlen = total + pad;
    for (int i = 0; i < 8; i++) head[i] = (char)(hlen >> (8 * i) & 0xff);
    memcpy(head + 8, meta, (size_t)m);
    memcpy(head + 8 + m, hdr + 1, rest - 1);
    memset(head + 8 + m + rest - 1, ' ', pad);
    ok = write_replace(path, head, 8 + hlen, file + 8 + n, (size_t)size - 8 - (size_t)n, "", 0,
                       err, errlen);
    free(head);
    free(file);
    return ok;
}

/* config.json for GPT2Config, in the folder of `path`: the model as
 * model.c builds it (GELU tanh = "gelu_new", LayerNorm eps 1e-5, no
 * dropout, tied output projection). */
static bool write_config(const char *path, const struct model *md, char *err, size_t errlen)
{
    char cfg_path[PATH_CAP + 16];
    const char *slash = strrchr(path, '/');
    int dir = slash == NULL ? 0 : (int)(slash - path + 1);
    snprintf(cfg_path, sizeof cfg_path, "%.*sconfig.json", dir, path);
    char json[1024];
    int n = snprintf(json, sizeof json,
                     "{\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": %d,\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": 1e-05,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"use_cache\": true,\n"
                     "  \"bos_token_id\": null,\n"
                     "  \"eos_token_id\": null,\n"
                     "  \"torch_dtype\": \"float32\"\n"
                     "}\n",
                     md->V, md->T, md->T, md->C, md->L, md->NH, md->F);
    return write_replace(cfg_path, json, (size_t)n, "", 0, "", 0, err, errlen);
}

/* The shortest decimal of a float that reads back as the same float. */
static void format_float(char *buf, size_t len, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

/* config.json for LlamaConfig: the model as model.c's llama blocks build
 * it (SwiGLU with silu, no biases, default RoPE, no dropout). */
static bool write_llama_config(const char *path, const struct model *md, char *err,
                               size_t errlen)
{
    char cfg_path[PATH_CAP + 16];
    const char *slash = strrchr(path, '/');
    int dir = slash == NULL ? 0 : (int)(slash - path + 1);
    snprintf(cfg_path, sizeof cfg_path, "%.*sconfig.json", dir, path);
    char eps[32], theta[32];
    format_float(eps, sizeof eps, md->norm_eps);
    format_float(theta, sizeof theta, md->rope_theta);
    char json[1536];
    int n = snprintf(json, sizeof json,
                     "{\n"
                     "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                     "  \"model_type\": \"llama\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"rms_norm_eps\": %s,\n"
                     "  \"rope_theta\": %s,\n"
                     "  \"rope_scaling\": null,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"hidden_act\": \"silu\",\n"
                     "  \"attention_bias\": false,\n"
                     "  \"attention_dropout\": 0.0,\n"
                     "  \"mlp_bias\": false,\n"
                     "  \"pretraining_tp\": 1,\n"
                     "  \"use_cache\": true,\n"
                     "  \"bos_token_id\": null,\n"
                     "  \"eos_token_id\": null,\n"
                     "  \"pad_token_id\": null,\n"
                     "  \"torch_dtype\": \"float32\"\n"
                     "}\n",
                     md->V, md->C, md->F, md->L, md->NH, md->KV, md->C / md->NH, md->T, eps,
                     theta, md->tie ? "true" : "false");
    return write_replace(cfg_path, json, (size_t)n, "", 0, "", 0, err, errlen);
}

int export_model(struct trainer *tr, const char *path)
{
    char err[PATH_CAP + 128];
    ag_status st = ag_safetensors_save(tr->ctx, path);
    if (st != AG_STATUS_OK) {
        snprintf(err, sizeof err, "%s", ag_context_last_error(tr->ctx));
    } else if (add_metadata(path, tr->data, tr->V, err, sizeof err) &&
               (tr->model.arch == ARCH_LLAMA
                    ? write_llama_config(path, &tr->model, err, sizeof err)
                    : write_config(path, &tr->model, err, sizeof err))) {
        return 0;
    }
    fflush(stdout);
    fprintf(stderr, "train_full: --export %s: %s\n", path, err);
    return EXIT_IO;
}

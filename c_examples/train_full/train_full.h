/*
 * train_full: a character-level GPT trained from C through the arenagrad C API.
 * Private header shared by the units of the program:
 *
 *   args.c    command line: parse_args (no I/O, never exits: fuzzable) and usage
 *   data.c    corpus loading, vocabulary, random batches
 *   model.c   parameters and the forward pass
 *   state.c   the checkpoint's user bytes (step, RNG, schedule, history)
 *   train.c   the training loop: schedule, accumulation, evaluation, guard rails
 *   sample.c  text generation (temperature, top-k, whole UTF-8 characters)
 *   output.c  run folder: log.csv (its rows feed the loss plot)
 *   dist.c    data parallelism over MPI (-DAG_WITH_MPI), or one process
 *   main.c    signals, set-up of every buffer and path, then train or sample
 *
 * The helpers any trainer can use (RNG, clock, progress line and ETA, the
 * loss plot, run folder files, the learning-rate schedule, failed calls)
 * are in ../common/ (trainer.h). Only the public header arenagrad.h is
 * used from the library.
 */
#ifndef TRAIN_FULL_H
#define TRAIN_FULL_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/gpt2_tokenizer.h"
#include "../common/trainer.h"
#include "arenagrad.h"

/* Exit statuses: EXIT_LIBRARY .. EXIT_IO (trainer.h), and this one (also in
 * --help and the README). Signals: 128 + signal. */
enum {
    EXIT_STALLED = 124, /* train_full_mpi: no collective call completed in time (like timeout(1)) */
};

#define MAX_ITERS 100000000L
#define MAX_BATCH 65536L
#define MAX_ACCUM 4096L
#define MAX_LAYERS 64
#define GRAD_CLIP 1.0f
#define LOSS_WINDOW 50  /* summary loss: mean of the last 50 steps */
#define WARMUP_STEPS 10 /* steps left out of the median step time */

/* ------------------------------------------------------------------------ */
/* Configuration (args.c)                                                    */
/* ------------------------------------------------------------------------ */

/* The block architecture (--arch). */
enum arch { ARCH_GPT2, ARCH_LLAMA };

/* Largest sizes the model flags accept: products of them stay far from
   size_t's and int's limits. */
#define MAX_HEADS 4096L
#define MAX_EMBD 65536L
#define MAX_FFN (4L * MAX_EMBD)
#define MAX_CONTEXT 1048576L
#define MAX_VOCAB 16777216L

struct config {
    const char *preset;  /* a preset name (static string) */
    enum arch arch;      /* --arch: gpt2 (default) or llama */
    int n_layer;         /* L */
    int n_head;          /* NH */
    int n_kv_head;       /* KV: key/value heads (llama's grouped-query attention; NH for gpt2) */
    int n_embd;          /* C */
    int ffn_hidden;      /* F: the feed-forward width (gpt2: 4C by default) */
    int seq_len;         /* T */
    int vocab;           /* V of token shards (the preset's or --vocab); 0: none given */
    bool vocab_given;    /* --vocab was passed (character data then refuses it) */
    float rope_theta;    /* llama: RoPE base (10000) */
    float norm_eps;      /* llama: RMSNorm epsilon (1e-5); gpt2's LayerNorm has 1e-5 */
    bool tie_embeddings; /* the output projection is the token embedding (always for gpt2) */
    int batch;           /* B: sequences per micro-batch */
    long accum;          /* micro-batches per optimizer step */
    long iters;          /* total steps (a resumed run continues up to it) */
    float lr;            /* peak learning rate */
    float min_lr;        /* the schedule's floor */
    long warmup;         /* linear warm-up steps from lr/warmup to lr */
    long decay_steps;    /* the schedule reaches min_lr here; 0: at iters */
    enum schedule schedule;
    uint64_t seed;
    bool seed_given;     /* --seed was passed (--sample-only then reseeds the sampler) */
    long log_every;
    long eval_every;
    long eval_iters;
    long sample_chars;   /* UTF-8 characters (token shards: tokens) to sample; 0: none */
    bool sample_chars_given; /* --sample-chars was passed */
    float temperature;
    long top_k;          /* 0: sample from the whole vocabulary */
    const char *prompt;  /* NULL: start the sample from a newline */
    const char *data;    /* NULL: data/shakespeare.txt, else the tiny corpus */
    const char *val;     /* token shards for validation; NULL: --data's with _val_ */
    const char *tokenizer_dir; /* GPT-2's encoder.json and vocab.bpe, to sample from shards */
    bool tokenizer_given;      /* --tokenizer was passed */
    const char *out;     /* run folder, NULL: none */
    const char *save;    /* checkpoint path, NULL: from --out or --resume */
    const char *resume;  /* NULL: fresh start */
    const char *export_path; /* safetensors of the parameters after training, NULL: none */
    const char *init_from;   /* safetensors to start from (or sample from), NULL: none */
    float weight_decay;      /* AdamW decoupled decay of the 2-D parameters (0) */
    long arena_limit_mb; /* 0: no cap */
    int recompute;       /* AG_RECOMPUTE_*; -1: AUTO with --arena-limit-mb, else NONE */
    bool sample_only;
    bool score;          /* --score: loss, logits and gradient of --data's first T + 1 tokens */
    const char *score_grads; /* --score-grads: safetensors of every gradient --score took, NULL: none */
    bool no_capture;     /* --no-capture: build every micro-batch's graph eagerly */
    bool help;
    bool overlap;        /* MPI: all-reduce each gradient bucket during backward (default) */
    long bucket_kb;      /* MPI: smallest bucket of the overlapped all-reduce, KiB */
    long zero;           /* MPI: 1: each rank keeps AdamW moments of its slice only (ZeRO-1) */
    /* The model flags as given (0, NAN or false: not given), which a
       config.json beside --init-from may fill in (hf_config.c). */
    struct {
        bool arch, tie;
        long layers, heads, kv_heads, embd, ffn, context, vocab;
        float rope_theta, norm_eps;
    } given;
    int hf_vocab;        /* --init-from's config.json vocab_size; 0: none read */
};

int parse_args(int argc, char **argv, struct config *cfg, char *err, size_t errlen);
/* The model's sizes from the flags given (cfg->given) over the preset's;
   parse_args calls it, and hf_config.c again after config.json filled in
   the flags not given. EXIT_USAGE with a message naming the flags, else 0. */
int resolve_model(struct config *cfg, char *err, size_t errlen);
/* Once the vocabulary V is known: EXIT_USAGE with a message naming the flags
   if the model's parameters cannot be held, else 0. */
int check_model_size(const struct config *cfg, size_t V, char *err, size_t errlen);
void usage(FILE *f);

/* The random streams of a run (derive_seed), independent of each other. */
enum { STREAM_INIT = 1, STREAM_TRAIN = 2, STREAM_EVAL = 3, STREAM_SAMPLE = 4 };

/* ------------------------------------------------------------------------ */
/* Data (data.c)                                                             */
/* ------------------------------------------------------------------------ */

struct dataset {
    uint8_t *tokens; /* [n] token ids (byte -> vocabulary index) */
    size_t n, n_train, n_val;
    int V;
    uint8_t vocab[256]; /* id -> byte, sorted */
    int16_t id_of[256]; /* byte -> id, -1 if absent */
    /* Token shards (--data *.bin): no byte vocabulary; tok holds the
       training shards' tokens, then the validation shards', V is --vocab. */
    bool shards;
    uint32_t *tok;           /* [n_train + n_val] */
    size_t n_train_files, n_val_files;
};

/* llm.c's token shards: a header of 256 int32 (magic, version, token
   count), then the tokens, uint16 or uint32. */
#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 7

bool load_data(const char *path, struct dataset *d, char *err, size_t errlen);
bool read_data(const char *path, struct dataset *d, char *err, size_t errlen); /* bytes only */
void index_data(struct dataset *d); /* vocabulary, ids and split of the bytes read */
void get_batch(const uint8_t *tokens, size_t n, size_t B, size_t T, uint64_t *rng,
               int32_t *ids, int32_t *targets);
/* --data is token shards when its pattern ends in ".bin". */
bool is_shard_pattern(const char *pattern);
/* Reads the shards matching train_pattern and val_pattern (glob(3), sorted)
   with tokens below V into d; false with a message naming file and offset. */
bool load_shards(const char *train_pattern, const char *val_pattern, int V, struct dataset *d,
                 char *err, size_t errlen);
/* B random windows from the training (or validation) tokens of either kind. */
void dataset_batch(const struct dataset *d, bool validation, size_t B, size_t T, uint64_t *rng,
                   int32_t *ids, int32_t *targets);
void free_data(struct dataset *d);

/* ------------------------------------------------------------------------ */
/* Model (model.c)                                                           */
/* ------------------------------------------------------------------------ */

struct block {
    ag_tensor ln1_w, ln1_b;   /* [C], [C] */
    ag_tensor w_qkv, b_qkv;   /* [C, 3C], [3C] */
    ag_tensor w_proj, b_proj; /* [C, C], [C] */
    ag_tensor ln2_w, ln2_b;   /* [C], [C] */
    ag_tensor w_fc, b_fc;     /* [C, F], [F] (F = 4C by default) */
    ag_tensor w_fc2, b_fc2;   /* [F, C], [C] */
    /* --arch llama: weights [out, in] as Hugging Face's nn.Linear, no biases */
    ag_tensor attn_norm;      /* input_layernorm [C] */
    ag_tensor wq, wk, wv, wo; /* [C, C], [KV D, C], [KV D, C], [C, C] */
    ag_tensor ffn_norm;       /* post_attention_layernorm [C] */
    ag_tensor w_gate, w_up;   /* [F, C] */
    ag_tensor w_down;         /* [C, F] */
};

struct model {
    enum arch arch;
    int L, NH, KV, C, F, T, V;
    float rope_theta, norm_eps; /* llama */
    bool tie;                   /* llama: logits through wte (gpt2 always) */
    ag_tensor norm_w;           /* llama: model.norm [C] */
    ag_tensor lm_head;          /* llama, untied: [V, C] */
    ag_tensor wte;          /* [V, C], also the output projection when tied */
    ag_tensor wpe;          /* gpt2: [T, C] */
    ag_tensor lnf_w, lnf_b; /* [C], [C] */
    struct block blocks[MAX_LAYERS];
    size_t n_floats;  /* parameter floats */
    int32_t *pos_ids; /* [T] = 0..T-1, for sequences shorter than T */
};

ag_status model_build(ag_context *ctx, struct model *m, uint64_t init_seed, float *scratch);
ag_status model_forward(ag_context *ctx, const struct model *m, const int32_t *ids,
                        const int32_t *targets, size_t B, size_t t, ag_tensor *logits_out,
                        ag_tensor *loss_out);

#define TRY(call)                                                                                  \
    do {                                                                                           \
        ag_status st_ = (call);                                                                    \
        if (st_ != AG_STATUS_OK) return st_;                                                       \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Training state kept in the checkpoint's user bytes (state.c)              */
/* ------------------------------------------------------------------------ */

/*
 * Everything a resumed run needs to continue bit for bit as if it had never
 * stopped: the step, the batch RNG, the figures that feed the log, the
 * summary and the guard rails. The learning rate is a function of the step
 * and the flags, so the schedule position is the step itself.
 */
struct train_state {
    uint64_t step;        /* steps done */
    uint64_t rng;         /* training batch RNG state */
    uint64_t seed;        /* the run's --seed (evaluation batches) */
    uint64_t sample_seed; /* sampling RNG start */
    double start_loss;    /* loss of step 1 (guard rail), NAN before it */
    double best_val;      /* best validation loss so far (best.bin), INFINITY if none */
    uint64_t best_step;
    /* log.csv row in progress: sums since the last row */
    double row_loss, row_norm;
    uint64_t row_steps;
    /* the last LOSS_WINDOW step losses (summary) */
    float recent[LOSS_WINDOW];
    uint64_t n_recent;
};

/* What the checkpoint was saved with, for notes when a resume changes it. */
struct saved_settings {
    uint32_t batch, accum, schedule;
    float lr, min_lr;
    uint64_t warmup, horizon; /* horizon: the step the decay ends */
};

#define STATE_BLOB_MAX 1024
size_t state_write(uint8_t *buf, const struct config *cfg, const struct lr_schedule *sched,
                   const struct dataset *d, const struct train_state *s);
bool state_read(const uint8_t *buf, size_t len, const struct config *cfg,
                const struct dataset *d, struct train_state *s, struct saved_settings *saved,
                char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* Output (output.c)                                                         */
/* ------------------------------------------------------------------------ */

/* Files of a run folder, all built once before training. */
struct run_paths {
    bool folder;            /* a run folder is in use */
    char dir[PATH_CAP];
    char ckpt[PATH_CAP];    /* latest checkpoint ("" if none) */
    char best[PATH_CAP];    /* best validation loss ("" if none) */
    char log[PATH_CAP];
    char log_tmp[PATH_CAP];
    char svg[PATH_CAP];
    char svg_tmp[PATH_CAP];
    char sample[PATH_CAP];
};

struct log_row {
    uint64_t step;
    double lr, train_loss, val_loss, grad_norm, ms_per_step, tok_per_s;
    uint64_t arena_high_water;
};

struct run_log {
    struct outfile csv; /* log.csv, open for appending during the run */
    bool open;
    bool warned;        /* a write failure was reported once */
    struct series train, val;
};

bool log_start(struct run_log *lg, const struct run_paths *p, uint64_t resume_step, char *err,
               size_t errlen);
void log_append(struct run_log *lg, const struct log_row *r);
void log_finish(struct run_log *lg);

/* ------------------------------------------------------------------------ */
/* The trainer (train.c, sample.c)                                           */
/* ------------------------------------------------------------------------ */

struct trainer {
    ag_context *ctx;
    const struct config *cfg;
    struct dataset *data;
    struct model model;
    struct run_paths *paths;
    struct run_log *log;
    size_t B, T, V;
    int32_t *ids;     /* [B*T] */
    int32_t *targets; /* [B*T] */
    float *logits;    /* [T*V]: one sampled sequence's logits */
    double *probs;    /* [V] */
    float *sorted;    /* [V]: top-k threshold scratch */
    int32_t *window;  /* [T]: sampling context */
    size_t draw_V;    /* ids drawn are below it: V, or the tokenizer's size if smaller */
    /* Token shards: the tokenizer that decodes sampled ids (NULL: no sample),
       the prompt's ids and one token's bytes. */
    ag_tokenizer *tok;
    int32_t *prompt_ids; /* [prompt_cap]: a token has at least one byte */
    size_t prompt_cap;
    uint8_t *piece;      /* [piece_cap]: the longest token's bytes */
    size_t piece_cap;
    float *step_ms;   /* [steps this run] */
    float *init_buf;  /* largest parameter, for initialisation */
    struct lr_schedule schedule; /* from the configuration */
    struct progress progress;    /* the progress line (tty: stdout is a terminal) */
    struct reporter reporter;    /* failed calls: report_failure(&tr->reporter, ...) */
    FILE *info;       /* where progress and notes go (stderr for --sample-only) */
    ag_step step;     /* the captured micro-batch step (all zero until captured) */
    ag_tensor step_loss; /* its unscaled loss */
};

/* The first SIGINT or SIGTERM (0 if none), set by the handler in main.c. */
extern volatile sig_atomic_t g_stop_signal;

int run(struct trainer *tr);
/* --init-from DIR or FILE (hf_config.c): the safetensors file to load
 * (for a folder DIR/model.safetensors, or if it has none the index of a
 * sharded checkpoint, DIR/model.safetensors.index.json; written into
 * `file`, PATH_CAP bytes), and for --arch llama the model's sizes from config.json beside
 * it, if there is one: it sets each model flag not given and must agree
 * with each one given. 0, or EXIT_USAGE having said why. */
int init_from_config(struct config *cfg, char *file, char *err, size_t errlen);
/* Loads --init-from's weights: the shards an index (*.index.json) names,
 * through ag_safetensors_load_index, or one safetensors file. */
ag_status init_weights_load(ag_context *ctx, const char *path);
/* --score (score.c): prints loss, logits, gradient norm and the loss
 * after one SGD step of --data's first T + 1 tokens. 0 or an exit status. */
int score(struct trainer *tr);
/* --export: the safetensors file at path, with the vocabulary in its metadata,
 * and config.json beside it (export.c). 0 or EXIT_IO, having said why. */
int export_model(struct trainer *tr, const char *path);
int arena_budget(struct trainer *tr, uint64_t rng); /* budget.c */

/* Writes n UTF-8 characters (token shards: n tokens, decoded) after the
   prompt to `out` (and `copy` if not NULL). */
ag_status sample(struct trainer *tr, uint64_t seed, const char *prompt, long n, FILE *out,
                 struct outfile *copy, long *written);

/* ------------------------------------------------------------------------ */
/* Data parallelism (dist.c): MPI ranks with -DAG_WITH_MPI, else one process */
/* ------------------------------------------------------------------------ */

int dist_init(int *argc, char ***argv); /* 0, or an exit status */
int dist_finish(int rc);                /* ends MPI (aborting every rank on a local failure) */
int dist_rank(void);
int dist_world(void);
bool dist_root(void);                   /* rank 0: evaluates, logs, writes, samples */
int dist_check_config(const struct config *cfg); /* 0, or EXIT_USAGE */
/* Sums the gradients and the loss over the ranks and divides by their number. */
ag_status dist_average(ag_context *ctx, float *loss);
/* After the optimizer exists: registers the overlapped all-reduce. */
ag_status dist_after_optimizer(ag_context *ctx, const struct config *cfg);
/* Before each ag_backward: `last` is the step's last micro-batch (its
   buckets are all-reduced as backward makes them final). */
ag_status dist_before_backward(ag_context *ctx, bool last);
/* --zero 1: before the optimizer, shard it; after each step, all-gather the
   parameters; the AdamW state figures (every rank calls it). */
ag_status dist_before_optimizer(ag_context *ctx, const struct config *cfg);
ag_status dist_after_step(ag_context *ctx);
void dist_zero_report(FILE *f, ag_context *ctx);
/* --zero 1 with checkpoints: every rank calls dist_zero_gather before rank 0
   saves (it gathers the AdamW moments to rank 0); dist_checkpoint_save then
   writes the file the unsharded run writes. */
ag_status dist_zero_gather(ag_context *ctx, const struct config *cfg);
ag_status dist_checkpoint_save(ag_context *ctx, const char *path, const uint8_t *user,
                               size_t len);
int dist_stop_signal(void);             /* the first stop signal of any rank, on every rank */
void dist_barrier(void);
void dist_bcast_double(double *v);      /* rank 0's value to every rank */
/* --resume: rank 0 reads the file, every rank gets its bytes. */
ag_status dist_checkpoint_peek(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len);
ag_status dist_checkpoint_load(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len);
/* --data: rank 0 reads the file, every rank gets its bytes (load_data in
   one process). False on every rank if rank 0 failed (its message in err). */
bool dist_load_data(const char *path, struct dataset *d, char *err, size_t errlen);
/* --init-from: rank 0 loads the safetensors file, every rank gets the values. */
ag_status dist_safetensors_load(ag_context *ctx, const char *path);
void dist_report(FILE *f, double ms_per_step);
void dist_debug_export(ag_context *ctx);
void dist_watchdog_stop(void); /* after the loop: rank 0 alone evaluates, saves, samples */

#endif /* TRAIN_FULL_H */

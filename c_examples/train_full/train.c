/*
 * train.c: the training loop.
 *
 * One step: `accum` micro-batches, each reset -> forward -> backward of its
 * loss scaled by 1/accum (gradients add up to those of one accum x B
 * batch), then the clip, the learning rate of this step, the AdamW update
 * and zero_grad. The loop makes no malloc call: every host buffer is made
 * before it, log rows and the plot are formatted into fixed buffers.
 *
 * A resumed run continues bit for bit: the step, the batch RNG, the log row
 * in progress, the recent losses and the best validation loss come back from
 * the checkpoint, and the learning rate is a function of the step.
 *
 * Guard rails: a training loss that is not finite, or above twice the first
 * step's loss and 3 more, stops the run before that step's update; a
 * validation loss past the same limit stops it before the checkpoint of that
 * evaluation is written. Either way the checkpoint on disk is the last one
 * that passed (EXIT_DIVERGED).
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "train_full.h"

/*
 * Mean validation loss over eval_iters batches of accum x B sequences (the
 * same batches every time, and the same for any split of a batch into
 * micro-batches).
 */
static ag_status evaluate(struct trainer *tr, uint64_t seed, double *out)
{
    uint64_t rng = derive_seed(seed, STREAM_EVAL);
    const struct dataset *d = tr->data;
    const long n = tr->cfg->eval_iters * tr->cfg->accum;
    double sum = 0.0;
    TRY(ag_set_grad_enabled(tr->ctx, false));
    for (long i = 0; i < n; i++) {
        dataset_batch(d, true, tr->B, tr->T, &rng, tr->ids, tr->targets);
        ag_tensor loss;
        float v = 0.0f;
        TRY(ag_reset(tr->ctx));
        TRY(model_forward(tr->ctx, &tr->model, tr->ids, tr->targets, tr->B, tr->T, NULL, &loss));
        TRY(ag_tensor_item(tr->ctx, loss, &v));
        sum += v;
    }
    TRY(ag_reset(tr->ctx));
    TRY(ag_set_grad_enabled(tr->ctx, true));
    *out = sum / (double)n;
    return AG_STATUS_OK;
}

/* Saves a checkpoint to `path`; returns 0 or an exit status. */
static int save(struct trainer *tr, const struct train_state *s, const char *path,
                const char *what)
{
    uint8_t blob[STATE_BLOB_MAX];
    size_t len = state_write(blob, tr->cfg, &tr->schedule, tr->data, s);
    ag_status st = dist_checkpoint_save(tr->ctx, path, blob, len);
    if (st != AG_STATUS_OK) {
        char where[PATH_CAP + 64];
        snprintf(where, sizeof where, "step %" PRIu64 ": writing %s", s->step, path);
        int rc = report_failure(&tr->reporter, where, st);
        return rc == EXIT_LIBRARY ? EXIT_IO : rc;
    }
    progress_end_line(&tr->progress);
    fprintf(tr->info, "checkpoint step=%" PRIu64 " saved %s%s\n", s->step, path, what);
    fflush(tr->info);
    return 0;
}

/* Loss above which a run counts as diverged, from the first step's loss. */
static double loss_limit(double start)
{
    return isfinite(start) ? start + fmax(start, 3.0) : INFINITY;
}

static void plot_title(const struct trainer *tr, char *buf, size_t len)
{
    const struct config *cfg = tr->cfg;
    int n = snprintf(buf, len, "train_full %s (L=%d NH=%d C=%d T=%d) \u00b7 batch %d", cfg->preset,
                     cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->batch);
    if (n < 0 || (size_t)n >= len) return;
    if (cfg->accum > 1) n += snprintf(buf + n, len - (size_t)n, " x %ld accumulated", cfg->accum);
    if (n < 0 || (size_t)n >= len) return;
    snprintf(buf + n, len - (size_t)n, " \u00b7 lr %g %s", (double)cfg->lr,
             schedule_name(cfg->schedule));
}

static void redraw(struct trainer *tr)
{
    const struct run_paths *paths = tr->paths;
    if (!paths->folder) return;
    char title[160], err[PATH_CAP + 128];
    plot_title(tr, title, sizeof title);
    const struct plot plot = {
        .title = title,
        .y_label = "loss (cross-entropy, nats per byte)",
        .train = &tr->log->train,
        .val = &tr->log->val,
        .x_max = (uint64_t)tr->cfg->iters,
    };
    if (!plot_write(&plot, paths->svg, paths->svg_tmp, err, sizeof err)) {
        progress_end_line(&tr->progress);
        fflush(stdout);
        fprintf(stderr, "train_full: warning: loss plot not written: %s\n", err);
    }
}

/* Notes where a resumed run's settings differ from the checkpoint's. */
static void resume_notes(struct trainer *tr, const struct saved_settings *sv, uint64_t step)
{
    const struct config *cfg = tr->cfg;
    FILE *o = tr->info;
    if (sv->batch != (uint32_t)cfg->batch || sv->accum != (uint32_t)cfg->accum)
        fprintf(o, "resume: note: saved with batch %u x accum %u, continuing with %d x %ld\n",
                sv->batch, sv->accum, cfg->batch, cfg->accum);
    if (sv->schedule != (uint32_t)cfg->schedule || sv->lr != cfg->lr ||
        sv->min_lr != cfg->min_lr || sv->warmup != (uint64_t)cfg->warmup ||
        (cfg->schedule != SCHEDULE_CONSTANT && sv->horizon != tr->schedule.decay_end)) {
        const char *name = sv->schedule <= SCHEDULE_LINEAR ? schedule_name(sv->schedule) : "?";
        fprintf(o,
                "resume: note: the learning-rate schedule differs from the saved run's (%s, lr "
                "%g, min %g, warmup %" PRIu64 ", decay to step %" PRIu64 ")\n",
                name, (double)sv->lr, (double)sv->min_lr, sv->warmup, sv->horizon);
    }
    if (!cfg->sample_only)
        fprintf(o, "resume: learning rate at step %" PRIu64 ": %.6g (%s)\n", step + 1,
                lr_at(&tr->schedule, step + 1), schedule_name(cfg->schedule));
}

/* What --sample-chars counts: characters of text, or tokens of shards. */
static const char *sample_unit(const struct trainer *tr)
{
    return tr->data->shards ? "tokens" : "characters";
}

/* --sample-only: the sample on stdout, everything else on stderr. */
static int sample_only(struct trainer *tr, const struct train_state *s, const char *prompt)
{
    const struct config *cfg = tr->cfg;
    uint64_t seed = cfg->seed_given ? derive_seed(cfg->seed, STREAM_SAMPLE) : s->sample_seed;
    fprintf(stderr, "sample: %ld %s, temperature %g, top-k %ld, seed %" PRIu64 "\n",
            cfg->sample_chars, sample_unit(tr), (double)cfg->temperature, cfg->top_k, seed);
    long written = 0;
    ag_status st = sample(tr, seed, prompt, cfg->sample_chars, stdout, NULL, &written);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "sampling", st);
    fputc('\n', stdout);
    fflush(stdout);
    if (g_stop_signal != 0) {
        fprintf(stderr, "train_full: interrupted after %ld %s\n", written, sample_unit(tr));
        return 128 + g_stop_signal;
    }
    return 0;
}

enum outcome { DONE, INTERRUPTED, DIVERGED };

/*
 * What the named steps of run() share: the state a checkpoint keeps, where
 * the checkpoint file stands, and this process's figures. The loop's part
 * of it is plain numbers, so the loop stays free of malloc.
 */
struct run_state {
    struct train_state s;
    uint64_t saved_at;      /* step held by the checkpoint file, UINT64_MAX if none */
    const char *prompt;     /* sample prompt */
    uint64_t last;          /* the loop runs steps s.step + 1 .. last */
    double tokens_per_step; /* of the global batch */
    size_t local, skipped;  /* steps run by this process, updates skipped */
    /* the log.csv row in progress (the progress line keeps its own times) */
    double row_ms;
    size_t row_ms_steps;
    long rss_warm;          /* RSS after WARMUP_STEPS steps, -1 before */
    long anon_warm;         /* its anonymous part (see anon_kb) */
    double val_loss;        /* latest validation loss */
    uint64_t evaluated_at;  /* its step, UINT64_MAX if none */
    float bad_loss;         /* the loss that diverged */
    bool bad_is_val;        /* the validation loss diverged (after the update) */
    enum outcome outcome;
    ag_memory_stats_t mem;
    double train_ms;        /* wall time of the loop */
};

/* Parameters (fresh, or --init-from), the optimizer and the arena cap. */
static int setup(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    ag_context *ctx = tr->ctx;
    tr->model.arch = cfg->arch;
    tr->model.L = cfg->n_layer;
    tr->model.NH = cfg->n_head;
    tr->model.KV = cfg->n_kv_head;
    tr->model.rope_theta = cfg->rope_theta;
    tr->model.norm_eps = cfg->norm_eps;
    tr->model.tie = cfg->tie_embeddings;
    tr->model.C = cfg->n_embd;
    tr->model.F = cfg->ffn_hidden;
    tr->model.T = cfg->seq_len;
    tr->model.V = tr->data->V;
    for (size_t t = 0; t < tr->T; t++) tr->model.pos_ids[t] = (int32_t)t;
    ag_status st = model_build(ctx, &tr->model, derive_seed(cfg->seed, STREAM_INIT), tr->init_buf);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "creating the parameters", st);
    /* --init-from: the weights of a safetensors file (by name; all must
       match, or nothing changes). The optimizer starts fresh. */
    if (cfg->init_from != NULL) {
        st = dist_safetensors_load(ctx, cfg->init_from); /* read on rank 0 only */
        if (st != AG_STATUS_OK) {
            fflush(stdout);
            if (!dist_root()) return EXIT_CHECKPOINT; /* rank 0 says why */
            fprintf(stderr, "train_full: --init-from %s: refused: %s\n", cfg->init_from,
                    ag_context_last_error(ctx));
            if (st == AG_STATUS_CHECKPOINT_MISMATCH)
                fprintf(stderr, "train_full: (was it exported with another --preset or data?)\n");
            return EXIT_CHECKPOINT;
        }
        fprintf(tr->info, "init: parameters from %s\n", cfg->init_from);
    }
    st = dist_before_optimizer(ctx, cfg);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_optimizer_shard", st);
    if (cfg->score) {
        /* --score's one step: plain SGD, comparable with any framework's. */
        st = ag_optimizer_sgd(ctx, cfg->lr, 0.0f, 0.0f);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_optimizer_sgd", st);
        return 0;
    }
    /* The decay applies to the parameters model_build flagged: the matrices. */
    st = ag_optimizer_adamw(ctx, cfg->lr, 0.9f, 0.999f, 1e-8f, cfg->weight_decay);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_optimizer_adamw", st);
    st = dist_after_optimizer(ctx, cfg);
    if (st != AG_STATUS_OK)
        return report_failure(&tr->reporter, "the overlapped all-reduce's set-up", st);
    if (cfg->zero == 1) dist_zero_report(tr->info, ctx);
    if (cfg->arena_limit_mb > 0) {
        st = ag_set_arena_limit(ctx, (size_t)cfg->arena_limit_mb << 20);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_set_arena_limit", st);
    }
    return 0;
}

/* --resume: the checkpoint's parameters, optimizer state and train_state. */
static int resume(struct trainer *tr, struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    ag_context *ctx = tr->ctx;
    uint8_t blob[STATE_BLOB_MAX];
    size_t len = 0;
    char why[256];
    struct saved_settings saved;
    /* Peek first: a refused checkpoint changes nothing in the context. */
    ag_status st = dist_checkpoint_peek(ctx, cfg->resume, blob, sizeof blob, &len);
    bool ok = st == AG_STATUS_OK &&
              state_read(blob, len, cfg, tr->data, &r->s, &saved, why, sizeof why);
    if (st == AG_STATUS_OK && ok) st = dist_checkpoint_load(ctx, cfg->resume, blob, sizeof blob, &len);
    if (st != AG_STATUS_OK) {
        fflush(stdout);
        const char *why_lib = ag_context_last_error(ctx);
        fprintf(stderr, "train_full: --resume %s: checkpoint refused: %s\n", cfg->resume,
                why_lib[0] != '\0' ? why_lib : ag_status_str(st));
        if (st == AG_STATUS_CHECKPOINT_MISMATCH)
            fprintf(stderr, "train_full: (was it saved with another --preset or data?)\n");
        return EXIT_CHECKPOINT;
    }
    if (!ok) {
        fflush(stdout);
        fprintf(stderr, "train_full: --resume %s: checkpoint refused: %s\n", cfg->resume, why);
        return EXIT_CHECKPOINT;
    }
    const uint64_t step = r->s.step;
    fprintf(tr->info, "resume: %s at step %" PRIu64 " (seed %" PRIu64 ")\n", cfg->resume, step,
            r->s.seed);
    resume_notes(tr, &saved, step);
    if (step >= (uint64_t)cfg->iters && !cfg->sample_only)
        fprintf(tr->info, "resume: already at step %" PRIu64 " >= --iters %ld, nothing to train\n",
                step, cfg->iters);
    if (strcmp(tr->paths->ckpt, cfg->resume) == 0) r->saved_at = step;
    /* The learning rate the run stopped with, so that load + save is exact. */
    st = ag_optimizer_set_lr(ctx, (float)lr_at(&tr->schedule, step));
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_optimizer_set_lr", st);
    return 0;
}

/* Sample prompt: the user's, else a newline (else, for character text
   without one, the first vocabulary byte). */
static const char *sample_prompt(const struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    const struct dataset *d = tr->data;
    const char *prompt = cfg->prompt != NULL && cfg->prompt[0] != '\0' ? cfg->prompt : "\n";
    static char first_byte[2];
    if (!d->shards && d->id_of['\n'] < 0 && prompt[0] == '\n' && prompt[1] == '\0') {
        first_byte[0] = (char)d->vocab[0];
        prompt = first_byte;
    }
    return prompt;
}

/* The model, training and output lines before step 1; opens log.csv. */
static int banner(struct trainer *tr, const struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    const struct run_paths *paths = tr->paths;
    printf("model: preset=%s L=%d NH=%d C=%d T=%d B=%d V=%d params=%zu (%.2f MiB of floats)\n",
           cfg->preset, cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->batch,
           tr->data->V, tr->model.n_floats, (double)tr->model.n_floats * 4.0 / 1048576.0);
    if (cfg->arch == ARCH_LLAMA)
        printf("arch: llama KV=%d F=%d rope_theta=%g norm_eps=%g %s embeddings\n", cfg->n_kv_head,
               cfg->ffn_hidden, (double)cfg->rope_theta, (double)cfg->norm_eps,
               cfg->tie_embeddings ? "tied" : "untied");
    printf("train: iters=%ld batch=%d x accum %ld lr=%g %s", cfg->iters, cfg->batch, cfg->accum,
           (double)cfg->lr, schedule_name(cfg->schedule));
    if (cfg->schedule != SCHEDULE_CONSTANT)
        printf(" to %g at step %" PRIu64, (double)cfg->min_lr, tr->schedule.decay_end);
    if (cfg->warmup > 0) printf(" warmup=%ld", cfg->warmup);
    printf(" AdamW(0.9, 0.999, eps 1e-8, wd %g on matrices) clip=%.1f seed=%" PRIu64
           " eval every %ld steps x %ld batches\n",
           (double)cfg->weight_decay, (double)GRAD_CLIP, r->s.seed, cfg->eval_every,
           cfg->eval_iters);
    if (paths->ckpt[0] != '\0') printf("checkpoints: %s (latest)%s%s\n", paths->ckpt,
                                       paths->best[0] ? ", best validation loss: " : "",
                                       paths->best);
    else printf("checkpoints: none (use --out DIR or --save PATH to keep the run)\n");
    if (paths->folder) printf("run folder: %s (log.csv, loss.svg, sample.txt)\n", paths->dir);
    char err[PATH_CAP + 128];
    if (!log_start(tr->log, paths, r->s.step, err, sizeof err)) {
        fflush(stdout);
        fprintf(stderr, "train_full: %s\n", err);
        return EXIT_IO;
    }
    fflush(stdout);
    return 0;
}

/*
 * One optimizer step: accum micro-batches of forward and backward on this
 * rank's rows, the all-reduce, the divergence check, the clip and AdamW.
 * On failure, *what names the call. A diverged loss sets r->outcome and
 * returns OK before the update.
 */
static ag_status train_step(struct trainer *tr, struct run_state *r, uint64_t step,
                            float *loss_out, float *norm_out, const char **what)
{
    const struct config *cfg = tr->cfg;
    const struct dataset *d = tr->data;
    ag_context *ctx = tr->ctx;
    const float inv_accum = 1.0f / (float)cfg->accum;
    /* This rank's rows of every batch (all of them in one process). */
    const size_t rows = tr->B / (size_t)dist_world(), row0 = rows * (size_t)dist_rank();
    double loss_sum = 0.0;
    ag_status st = AG_STATUS_OK;
    *what = "ag_reset";
    for (long m = 0; m < cfg->accum && st == AG_STATUS_OK; m++) {
        dataset_batch(d, false, tr->B, tr->T, &r->s.rng, tr->ids, tr->targets);
        ag_tensor loss;
        float v = 0.0f;
        const bool capture = !cfg->no_capture;
        if (capture && tr->step.context != 0) {
            /* Replay the captured micro-batch on this batch: its id
             * buffers are the token ids (0) and the targets (1). */
            const size_t n = rows * tr->T;
            *what = "ag_input_write_ids";
            st = ag_input_write_ids(ctx, tr->step, 0, tr->ids + row0 * tr->T, n);
            if (st == AG_STATUS_OK)
                st = ag_input_write_ids(ctx, tr->step, 1, tr->targets + row0 * tr->T, n);
            if (st == AG_STATUS_OK) {
                /* The replay's backward reports gradient buckets as the
                 * eager one does: arm the overlapped all-reduce for it. */
                *what = "ag_grads_buffer";
                st = dist_before_backward(ctx, m == cfg->accum - 1);
            }
            if (st == AG_STATUS_OK) {
                *what = "ag_replay";
                st = ag_replay(ctx, tr->step);
            }
            if (st == AG_STATUS_OK) {
                *what = "ag_tensor_item";
                st = ag_tensor_item(ctx, tr->step_loss, &v);
            }
            loss_sum += v;
            continue;
        }
        *what = capture ? "ag_capture_begin" : "ag_reset";
        st = capture ? ag_capture_begin(ctx) : ag_reset(ctx);
        if (st == AG_STATUS_OK) {
            *what = "forward";
            st = model_forward(ctx, &tr->model, tr->ids + row0 * tr->T,
                               tr->targets + row0 * tr->T, rows, tr->T, NULL, &loss);
        }
        if (st == AG_STATUS_OK) {
            *what = "ag_tensor_item";
            st = ag_tensor_item(ctx, loss, &v);
        }
        ag_tensor scaled = loss;
        if (st == AG_STATUS_OK && cfg->accum > 1) {
            *what = "ag_scale";
            st = ag_scale(ctx, loss, inv_accum, &scaled);
        }
        if (st == AG_STATUS_OK) {
            *what = "ag_grads_buffer";
            st = dist_before_backward(ctx, m == cfg->accum - 1);
        }
        if (st == AG_STATUS_OK) {
            *what = "ag_backward";
            st = ag_backward(ctx, scaled);
        }
        if (st == AG_STATUS_OK && capture) {
            *what = "ag_capture_end";
            st = ag_capture_end(ctx, scaled, &tr->step);
            tr->step_loss = loss;
            /* The step keeps memory of its own; the eager arena, which
             * evaluation and sampling use, grows now rather than at the
             * first evaluation, so memory is flat from the first steps. */
            *what = "warming the evaluation arena";
            ag_tensor unused;
            if (st == AG_STATUS_OK) st = ag_set_grad_enabled(ctx, false);
            if (st == AG_STATUS_OK) st = ag_reset(ctx);
            if (st == AG_STATUS_OK)
                st = model_forward(ctx, &tr->model, tr->ids, tr->targets, tr->B, tr->T, NULL, &unused);
            if (st == AG_STATUS_OK) st = ag_reset(ctx);
            if (st == AG_STATUS_OK) st = ag_set_grad_enabled(ctx, true);
        }
        loss_sum += v;
    }
    float loss_value = (float)(loss_sum / (double)cfg->accum);
    *loss_out = loss_value;
    if (st == AG_STATUS_OK) {
        *what = "the gradient all-reduce";
        st = dist_average(ctx, &loss_value);
        *loss_out = loss_value;
    }
    if (st == AG_STATUS_OK) {
        struct train_state *s = &r->s;
        if (isnan(s->start_loss)) s->start_loss = loss_value;
        if (!isfinite(loss_value) || loss_value > loss_limit(s->start_loss)) {
            /* Stop before this step's update; keep the checkpoint as it is. */
            r->bad_loss = loss_value;
            r->outcome = DIVERGED;
            return AG_STATUS_OK;
        }
        *what = "ag_clip_grad_norm";
        st = ag_clip_grad_norm(ctx, GRAD_CLIP, norm_out);
        if (st == AG_STATUS_OK) {
            *what = "ag_optimizer_set_lr";
            st = ag_optimizer_set_lr(ctx, (float)lr_at(&tr->schedule, step));
        }
        if (st == AG_STATUS_OK) {
            *what = "ag_optimizer_step";
            st = ag_optimizer_step(ctx);
        }
        if (st == AG_STATUS_OK || st == AG_STATUS_NON_FINITE) {
            /* Every rank took (or skipped) the step on its slice alike. */
            ag_status gathered = dist_after_step(ctx);
            if (gathered != AG_STATUS_OK) {
                *what = "the parameter all-gather";
                st = gathered;
            }
        }
        if (st == AG_STATUS_NON_FINITE) {
            /* The library skipped the update; parameters are unchanged. */
            progress_end_line(&tr->progress);
            fflush(stdout);
            if (dist_root())
                fprintf(stderr, "train_full: step %" PRIu64 ": %s (update skipped)\n", step,
                        ag_context_last_error(ctx));
            r->skipped++;
            st = AG_STATUS_OK;
        }
    }
    if (st == AG_STATUS_OK) {
        *what = "ag_zero_grad";
        st = ag_zero_grad(ctx);
    }
    return st;
}

/* Keeps a finished step's figures; prints the memory line and progress. */
static void record_step(struct trainer *tr, struct run_state *r, uint64_t step, double lr,
                        float loss_value, float norm, double ms, bool eval_now)
{
    const struct config *cfg = tr->cfg;
    struct train_state *s = &r->s;
    s->step = step;
    tr->step_ms[r->local++] = (float)ms;
    s->recent[s->n_recent++ % LOSS_WINDOW] = loss_value;
    s->row_loss += loss_value;
    s->row_norm += norm;
    s->row_steps++;
    r->row_ms += ms;
    r->row_ms_steps++;
    progress_step(&tr->progress, ms);
    ag_memory_stats(tr->ctx, &r->mem);

    if (r->local == WARMUP_STEPS) {
        r->rss_warm = rss_kb();
        r->anon_warm = anon_kb();
        progress_end_line(&tr->progress);
        printf("memory step=%" PRIu64 " arena_high_water_bytes=%" PRIu64
               " arena_reserved_bytes=%" PRIu64 " tape_capacity=%" PRIu64 " rss_kb=%ld\n",
               step, r->mem.arena_high_water_bytes, r->mem.arena_reserved_bytes,
               r->mem.tape_capacity, r->rss_warm);
        fflush(stdout);
    }

    if (!progress_due(&tr->progress, step, r->last, cfg->log_every, eval_now)) return;
    const struct progress_line line = {
        .step = step,
        .last = r->last,
        .loss = loss_value,
        .lr = lr,
        .units_per_step = r->tokens_per_step,
        .unit = "tok",
        .arena_high_water = r->mem.arena_high_water_bytes,
    };
    progress_print(&tr->progress, &line);
}

/* The validation loss after `step` (rank 0 computes, every rank gets it). */
static int eval_step(struct trainer *tr, struct run_state *r, uint64_t step)
{
    double te = now_ms();
    ag_status st = AG_STATUS_OK;
    if (dist_root()) st = evaluate(tr, r->s.seed, &r->val_loss);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "evaluation", st);
    dist_bcast_double(&r->val_loss);
    r->evaluated_at = step;
    progress_end_line(&tr->progress);
    printf("eval step %" PRIu64 " val_loss %.6f (%ld batches, %.0f ms)\n", step, r->val_loss,
           tr->cfg->eval_iters, now_ms() - te);
    fflush(stdout);
    if (!isfinite(r->val_loss) || r->val_loss > loss_limit(r->s.start_loss)) {
        /* This step's update broke the model: do not save it. */
        r->bad_loss = (float)r->val_loss;
        r->bad_is_val = true;
        r->outcome = DIVERGED;
    }
    return 0;
}

/* Appends log.csv's row of the steps since the last one. */
static void log_step(struct trainer *tr, struct run_state *r, uint64_t step, double lr,
                     bool eval_now)
{
    struct train_state *s = &r->s;
    double row_avg_ms = r->row_ms / (double)r->row_ms_steps;
    struct log_row row = {
        .step = step,
        .lr = lr,
        .train_loss = s->row_loss / (double)s->row_steps,
        .val_loss = eval_now ? r->val_loss : NAN,
        .grad_norm = s->row_norm / (double)s->row_steps,
        .ms_per_step = row_avg_ms,
        .tok_per_s = r->tokens_per_step * 1000.0 / row_avg_ms,
        .arena_high_water = r->mem.arena_high_water_bytes,
    };
    log_append(tr->log, &row);
    s->row_loss = s->row_norm = 0.0;
    s->row_steps = 0;
    r->row_ms = 0.0;
    r->row_ms_steps = 0;
}

/* After an evaluation: best.bin if it improved, the latest checkpoint, the plot. */
static int checkpoint_step(struct trainer *tr, struct run_state *r, uint64_t step)
{
    const struct run_paths *paths = tr->paths;
    struct train_state *s = &r->s;
    ag_status st = dist_zero_gather(tr->ctx, tr->cfg); /* every rank, before rank 0 saves */
    if (st != AG_STATUS_OK)
        return report_failure(&tr->reporter, "gathering the optimizer state", st);
    bool best = r->val_loss < s->best_val;
    if (best) {
        s->best_val = r->val_loss;
        s->best_step = step;
    }
    if (best && paths->best[0] != '\0') {
        int rc = save(tr, s, paths->best, " (best validation loss so far)");
        if (rc != 0) return rc;
    }
    if (paths->ckpt[0] != '\0') {
        int rc = save(tr, s, paths->ckpt, "");
        if (rc != 0) return rc;
        r->saved_at = step;
    }
    dist_barrier(); /* every rank continues once the checkpoint is in place */
    redraw(tr);
    return 0;
}

/* The training loop: no malloc from here to the summary. */
static int train_loop(struct trainer *tr, struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    const uint64_t first = r->s.step;
    const double t_start = now_ms();
    for (uint64_t step = first + 1; step <= r->last; step++) {
        double t0 = now_ms();
        const double lr = lr_at(&tr->schedule, step);
        float loss_value = 0.0f, norm = 0.0f;
        const char *what = "ag_reset";
        ag_status st = train_step(tr, r, step, &loss_value, &norm, &what);
        if (st != AG_STATUS_OK) {
            char where[64];
            snprintf(where, sizeof where, "step %" PRIu64 ": %s", step, what);
            return report_failure(&tr->reporter, where, st);
        }
        if (r->outcome == DIVERGED) break;
        double ms = now_ms() - t0;

        const bool eval_now = step % (uint64_t)cfg->eval_every == 0 || step == r->last;
        /* Rows on a fixed grid (step 1, every log_every, evaluations), so a
           resumed run's log.csv continues exactly like an uninterrupted one. */
        const bool row_now = step % (uint64_t)cfg->log_every == 0 || eval_now || step == 1;
        record_step(tr, r, step, lr, loss_value, norm, ms, eval_now);
        if (eval_now) {
            int rc = eval_step(tr, r, step);
            if (rc != 0) return rc;
            if (r->outcome == DIVERGED) break;
        }
        if (row_now) log_step(tr, r, step, lr, eval_now);
        if (eval_now) {
            int rc = checkpoint_step(tr, r, step);
            if (rc != 0) return rc;
        }
        if (dist_stop_signal() != 0) {
            r->outcome = INTERRUPTED;
            break;
        }
    }
    progress_end_line(&tr->progress);
    /* The final checkpoint is rank 0's alone: gather the moments while every rank is here. */
    ag_status st = dist_zero_gather(tr->ctx, cfg);
    if (st != AG_STATUS_OK)
        return report_failure(&tr->reporter, "gathering the optimizer state", st);
    dist_watchdog_stop(); /* from here rank 0 works alone while the others finish */
    dist_debug_export(tr->ctx);
    r->train_ms = now_ms() - t_start;
    return 0;
}

/* Why the loop stopped early, on stderr (divergence) or stdout (a signal). */
static void stop_notes(struct trainer *tr, const struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    const struct train_state *s = &r->s;
    if (r->outcome == DIVERGED && dist_root()) {
        fflush(stdout);
        fprintf(stderr,
                "train_full: step %" PRIu64 ": training diverged: %s %g %s (first step: %.4f)%s\n",
                r->bad_is_val ? s->step : s->step + 1,
                r->bad_is_val ? "validation loss" : "loss", (double)r->bad_loss,
                isfinite(r->bad_loss) ? "is above twice the first step's loss plus 3"
                                      : "is not finite",
                s->start_loss,
                r->bad_is_val ? "; this step is not saved" : "; stopped before this step's update");
        if (r->saved_at != UINT64_MAX)
            fprintf(stderr, "train_full: the checkpoint %s is kept as it was, at step %" PRIu64
                            "\n",
                    tr->paths->ckpt, r->saved_at);
        fprintf(stderr, "train_full: try a lower --lr (now %g), or --warmup\n", (double)cfg->lr);
    } else if (r->outcome == INTERRUPTED) {
        printf("interrupted by %s at step %" PRIu64 "\n",
               g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", s->step);
    }
}

/* After the loop: the final validation loss and checkpoint, the plot, the log. */
static int save_final(struct trainer *tr, struct run_state *r)
{
    const struct run_paths *paths = tr->paths;
    /* The summary needs a validation loss of the final parameters. */
    if (r->outcome != DIVERGED && r->evaluated_at != r->s.step && dist_root()) {
        ag_status st = evaluate(tr, r->s.seed, &r->val_loss);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "evaluation", st);
        printf("eval step %" PRIu64 " val_loss %.6f (%ld batches)\n", r->s.step, r->val_loss,
               tr->cfg->eval_iters);
    }
    if (r->outcome != DIVERGED && paths->ckpt[0] != '\0' && r->saved_at != r->s.step) {
        int rc = save(tr, &r->s, paths->ckpt, "");
        if (rc != 0) return rc;
        r->saved_at = r->s.step;
    }
    if (r->local > 0) redraw(tr);
    log_finish(tr->log);
    return 0;
}

/* --export: the parameters as safetensors (rank 0). */
static int export_params(struct trainer *tr, const struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    if (r->outcome != DIVERGED && cfg->export_path != NULL && dist_root()) {
        int rc = export_model(tr, cfg->export_path); /* export.c */
        if (rc != 0) return rc;
        printf("exported: %s (safetensors, config.json beside it; step %" PRIu64 ")\n",
               cfg->export_path, r->s.step);
    }
    return 0;
}

/* The sample after a completed run (rank 0), also into sample.txt. */
static int sample_after(struct trainer *tr, struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    const struct run_paths *paths = tr->paths;
    static struct outfile copy;
    struct outfile *copyp = NULL;
    if (paths->folder) {
        if (out_open(&copy, paths->sample, false)) copyp = &copy;
        else
            fprintf(stderr, "train_full: warning: %s: cannot write: %s\n", paths->sample,
                    strerror(copy.err));
    }
    uint64_t seed = r->s.sample_seed;
    printf("sample (%ld %s, temperature %g, top-k %ld, seed %" PRIu64 "):\n",
           cfg->sample_chars, sample_unit(tr), (double)cfg->temperature, cfg->top_k, seed);
    printf("----\n");
    long written = 0;
    ag_status st = sample(tr, seed, r->prompt, cfg->sample_chars, stdout, copyp, &written);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "sampling", st);
    printf("\n----\n");
    if (copyp != NULL) {
        out_write(copyp, "\n", 1);
        if (out_close(copyp)) printf("sample saved to %s\n", paths->sample);
        else
            fprintf(stderr, "train_full: warning: %s: write failed: %s\n", paths->sample,
                    strerror(copyp->err));
    }
    if (g_stop_signal != 0) r->outcome = INTERRUPTED;
    return 0;
}

/* The summary line (the last one) and the run's exit status. */
static int summary(struct trainer *tr, struct run_state *r)
{
    const struct config *cfg = tr->cfg;
    const struct train_state *s = &r->s;
    size_t n_loss = s->n_recent < LOSS_WINDOW ? (size_t)s->n_recent : LOSS_WINDOW;
    double mean_loss = 0.0;
    for (size_t i = 0; i < n_loss; i++) mean_loss += s->recent[i];
    mean_loss = n_loss > 0 ? mean_loss / (double)n_loss : NAN;
    const size_t local = r->local;
    size_t skip = local / 2 < WARMUP_STEPS ? local / 2 : WARMUP_STEPS;
    double median = 0.0; /* no step timed (a resume already at --iters) */
    if (local > skip) {
        size_t n = local - skip;
        sort_floats(tr->step_ms + skip, n);
        median = n % 2 ? tr->step_ms[skip + n / 2]
                       : 0.5 * ((double)tr->step_ms[skip + n / 2 - 1] + tr->step_ms[skip + n / 2]);
    }
    long rss_end = rss_kb(), anon_end = anon_kb();
    long rss_warm = r->rss_warm < 0 ? rss_end : r->rss_warm;
    long anon_warm = r->rss_warm < 0 ? anon_end : r->anon_warm;
    ag_memory_stats(tr->ctx, &r->mem);
    dist_report(stdout, median);
    static const char *const status_names[] = {"done", "interrupted", "diverged"};
    printf("summary preset=%s iters=%" PRIu64 " loss=%.6f val_loss=%.6f ms_per_step=%.4f "
           "tok_per_s=%.0f rss_warm_kb=%ld rss_end_kb=%ld anon_warm_kb=%ld anon_end_kb=%ld "
           "arena_high_water_bytes=%" PRIu64 " params=%zu steps_run=%zu status=%s\n",
           cfg->preset, s->step, mean_loss, r->val_loss, median,
           median > 0.0 ? r->tokens_per_step * 1000.0 / median : 0.0, rss_warm, rss_end, anon_warm,
           anon_end, r->mem.arena_high_water_bytes, tr->model.n_floats, local, status_names[r->outcome]);
    fflush(stdout);
    if (r->outcome == DIVERGED) return EXIT_DIVERGED;
    if (r->outcome == INTERRUPTED) return 128 + g_stop_signal;
    return 0;
}

/*
 * A run, step by step: setup, resume, (or sample only), the arena budget,
 * banner, the loop, why it stopped, the final save and export, the sample,
 * the summary. Each returns 0 or the exit status that ends the run.
 */
int run(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    struct run_state r = {
        .s = {
            .rng = derive_seed(cfg->seed, STREAM_TRAIN),
            .seed = cfg->seed,
            .sample_seed = derive_seed(cfg->seed, STREAM_SAMPLE),
            .start_loss = NAN,
            .best_val = INFINITY,
        },
        .saved_at = UINT64_MAX,
        .rss_warm = -1,
        .anon_warm = -1,
        .val_loss = NAN,
        .evaluated_at = UINT64_MAX,
        .outcome = DONE,
    };
    tr->schedule = (struct lr_schedule){
        .shape = cfg->schedule,
        .peak = cfg->lr,
        .floor = cfg->min_lr,
        .warmup = (uint64_t)cfg->warmup,
        /* --decay-steps, else the end of the run */
        .decay_end = (uint64_t)(cfg->decay_steps > 0 ? cfg->decay_steps : cfg->iters),
    };
    tr->reporter.program = "train_full";
    tr->reporter.progress = &tr->progress;
    tr->reporter.ctx = tr->ctx;
    tr->reporter.arena_limit_mb = cfg->arena_limit_mb;
    snprintf(tr->reporter.setting, sizeof tr->reporter.setting, "preset %s with batch %d",
             cfg->preset, cfg->batch);

    int rc = setup(tr);
    if (rc == 0 && cfg->resume != NULL) rc = resume(tr, &r);
    if (rc != 0) return rc;
    if (cfg->score) return score(tr);
    r.prompt = sample_prompt(tr);
    if (cfg->sample_only) return sample_only(tr, &r.s, r.prompt);
    rc = arena_budget(tr, r.s.rng);
    if (rc == 0) rc = banner(tr, &r);
    if (rc != 0) return rc;

    r.last = (uint64_t)cfg->iters > r.s.step ? (uint64_t)cfg->iters : r.s.step;
    r.tokens_per_step = (double)(tr->B * tr->T) * (double)cfg->accum;
    rc = train_loop(tr, &r);
    if (rc != 0) return rc;
    stop_notes(tr, &r);
    rc = save_final(tr, &r);
    if (rc == 0) rc = export_params(tr, &r);
    if (rc != 0) return rc;
    char wall[32];
    format_duration(wall, sizeof wall, r.train_ms);
    printf("done: %zu steps in %s (%.1f s)%s\n", r.local, wall, r.train_ms / 1000.0,
           r.skipped ? " (some updates skipped: non-finite gradients)" : "");
    if (r.outcome == INTERRUPTED && r.saved_at == r.s.step)
        printf("resume with: --resume %s (and the same options)\n", tr->paths->ckpt);

    if (r.outcome == DONE && cfg->sample_chars > 0 && dist_root()) {
        rc = sample_after(tr, &r);
        if (rc != 0) return rc;
    }
    if (tr->paths->folder && r.local > 0)
        printf("loss curve: %s (open it in a browser)\n", tr->paths->svg);
    return summary(tr, &r);
}

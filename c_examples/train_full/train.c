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

#define PI 3.141592653589793

/* The step at which the decay reaches min_lr. */
uint64_t decay_horizon(const struct config *cfg)
{
    return (uint64_t)(cfg->decay_steps > 0 ? cfg->decay_steps : cfg->iters);
}

/* Learning rate of step `step` (1-based): warm-up, then the schedule. */
double lr_at(const struct config *cfg, uint64_t step)
{
    const double peak = cfg->lr, floor_lr = cfg->min_lr;
    const uint64_t warmup = (uint64_t)cfg->warmup, iters = decay_horizon(cfg);
    if (step == 0) step = 1;
    if (step <= warmup) return peak * (double)step / (double)warmup;
    if (cfg->schedule == SCHEDULE_CONSTANT) return peak;
    if (iters <= warmup) return floor_lr;
    double p = (double)(step - warmup) / (double)(iters - warmup);
    if (p > 1.0) p = 1.0;
    switch (cfg->schedule) {
    case SCHEDULE_COSINE: return floor_lr + 0.5 * (1.0 + cos(PI * p)) * (peak - floor_lr);
    case SCHEDULE_LINEAR: return peak - (peak - floor_lr) * p;
    case SCHEDULE_CONSTANT: break;
    }
    return peak;
}

/* Ends the terminal's progress line, if drawn, before other output. */
void end_line(struct trainer *tr)
{
    if (tr->line_open) fputc('\n', stdout);
    tr->line_open = false;
}

/* Prints a failed call and returns the exit status it maps to. */
int report(struct trainer *tr, const char *what, ag_status st)
{
    end_line(tr);
    fflush(stdout);
    const char *why = ag_context_last_error(tr->ctx);
    if (st == AG_STATUS_OUT_OF_MEMORY && tr->cfg->arena_limit_mb == 0) {
        fprintf(stderr, "train_full: %s: the activation arena could not grow: %s\n", what, why);
        return EXIT_ARENA;
    }
    if (st == AG_STATUS_OUT_OF_MEMORY) {
        fprintf(stderr,
                "train_full: %s: the activation arena cap (--arena-limit-mb %ld) is too small "
                "for preset %s with batch %d: %s\n",
                what, tr->cfg->arena_limit_mb, tr->cfg->preset, tr->cfg->batch, why);
        return EXIT_ARENA;
    }
    /* The library's message names the failure kind itself ("I/O error: ..."). */
    if (why[0] != '\0') fprintf(stderr, "train_full: %s failed: %s\n", what, why);
    else fprintf(stderr, "train_full: %s failed: %s\n", what, ag_status_str(st));
    return st == AG_STATUS_IO ? EXIT_IO : EXIT_LIBRARY;
}

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
        get_batch(d->tokens + d->n_train, d->n_val, tr->B, tr->T, &rng, tr->ids, tr->targets);
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
    size_t len = state_write(blob, tr->cfg, tr->data, s);
    ag_status st = ag_checkpoint_save(tr->ctx, path, blob, len);
    if (st != AG_STATUS_OK) {
        char where[PATH_CAP + 64];
        snprintf(where, sizeof where, "step %" PRIu64 ": writing %s", s->step, path);
        int rc = report(tr, where, st);
        return rc == EXIT_LIBRARY ? EXIT_IO : rc;
    }
    end_line(tr);
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
    char title[160], err[PATH_CAP + 128];
    plot_title(tr, title, sizeof title);
    if (!plot_write(tr->log, tr->paths, title, (uint64_t)tr->cfg->iters, err, sizeof err)) {
        end_line(tr);
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
        (cfg->schedule != SCHEDULE_CONSTANT && sv->horizon != decay_horizon(cfg))) {
        const char *name = sv->schedule <= SCHEDULE_LINEAR ? schedule_name(sv->schedule) : "?";
        fprintf(o,
                "resume: note: the learning-rate schedule differs from the saved run's (%s, lr "
                "%g, min %g, warmup %" PRIu64 ", decay to step %" PRIu64 ")\n",
                name, (double)sv->lr, (double)sv->min_lr, sv->warmup, sv->horizon);
    }
    if (!cfg->sample_only)
        fprintf(o, "resume: learning rate at step %" PRIu64 ": %.6g (%s)\n", step + 1,
                lr_at(cfg, step + 1), schedule_name(cfg->schedule));
}

/* --sample-only: the sample on stdout, everything else on stderr. */
static int sample_only(struct trainer *tr, const struct train_state *s, const char *prompt)
{
    const struct config *cfg = tr->cfg;
    uint64_t seed = cfg->seed_given ? derive_seed(cfg->seed, STREAM_SAMPLE) : s->sample_seed;
    fprintf(stderr, "sample: %ld characters, temperature %g, top-k %ld, seed %" PRIu64 "\n",
            cfg->sample_chars, (double)cfg->temperature, cfg->top_k, seed);
    long written = 0;
    ag_status st = sample(tr, seed, prompt, cfg->sample_chars, stdout, NULL, &written);
    if (st != AG_STATUS_OK) return report(tr, "sampling", st);
    fputc('\n', stdout);
    fflush(stdout);
    if (g_stop_signal != 0) {
        fprintf(stderr, "train_full: interrupted after %ld characters\n", written);
        return 128 + g_stop_signal;
    }
    return 0;
}

enum outcome { DONE, INTERRUPTED, DIVERGED };

int run(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    struct dataset *d = tr->data;
    struct run_paths *paths = tr->paths;
    ag_context *ctx = tr->ctx;
    ag_status st;

    /* Model and optimizer. */
    tr->model.L = cfg->n_layer;
    tr->model.NH = cfg->n_head;
    tr->model.C = cfg->n_embd;
    tr->model.T = cfg->seq_len;
    tr->model.V = d->V;
    for (size_t t = 0; t < tr->T; t++) tr->model.pos_ids[t] = (int32_t)t;
    st = model_build(ctx, &tr->model, derive_seed(cfg->seed, STREAM_INIT), tr->init_buf);
    if (st != AG_STATUS_OK) return report(tr, "creating the parameters", st);
    /* --init-from: the weights of a safetensors file (by name; all must
       match, or nothing changes). The optimizer starts fresh. */
    if (cfg->init_from != NULL) {
        st = ag_safetensors_load(ctx, cfg->init_from);
        if (st != AG_STATUS_OK) {
            fflush(stdout);
            fprintf(stderr, "train_full: --init-from %s: refused: %s\n", cfg->init_from,
                    ag_context_last_error(ctx));
            if (st == AG_STATUS_CHECKPOINT_MISMATCH)
                fprintf(stderr, "train_full: (was it exported with another --preset or data?)\n");
            return EXIT_CHECKPOINT;
        }
        fprintf(tr->info, "init: parameters from %s\n", cfg->init_from);
    }
    /* The decay applies to the parameters model_build flagged: the matrices. */
    st = ag_optimizer_adamw(ctx, cfg->lr, 0.9f, 0.999f, 1e-8f, cfg->weight_decay);
    if (st != AG_STATUS_OK) return report(tr, "ag_optimizer_adamw", st);
    if (cfg->arena_limit_mb > 0) {
        st = ag_set_arena_limit(ctx, (size_t)cfg->arena_limit_mb << 20);
        if (st != AG_STATUS_OK) return report(tr, "ag_set_arena_limit", st);
    }

    struct train_state s = {
        .rng = derive_seed(cfg->seed, STREAM_TRAIN),
        .seed = cfg->seed,
        .sample_seed = derive_seed(cfg->seed, STREAM_SAMPLE),
        .start_loss = NAN,
        .best_val = INFINITY,
    };
    uint64_t saved_at = UINT64_MAX; /* step held by the checkpoint file */
    if (cfg->resume != NULL) {
        uint8_t blob[STATE_BLOB_MAX];
        size_t len = 0;
        char why[256];
        struct saved_settings saved;
        /* Peek first: a refused checkpoint changes nothing in the context. */
        st = dist_checkpoint_peek(ctx, cfg->resume, blob, sizeof blob, &len);
        bool ok = st == AG_STATUS_OK &&
                  state_read(blob, len, cfg, d, &s, &saved, why, sizeof why);
        if (st == AG_STATUS_OK && ok)
            st = dist_checkpoint_load(ctx, cfg->resume, blob, sizeof blob, &len);
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
        fprintf(tr->info, "resume: %s at step %" PRIu64 " (seed %" PRIu64 ")\n", cfg->resume,
                s.step, s.seed);
        resume_notes(tr, &saved, s.step);
        if (s.step >= (uint64_t)cfg->iters && !cfg->sample_only)
            fprintf(tr->info,
                    "resume: already at step %" PRIu64 " >= --iters %ld, nothing to train\n",
                    s.step, cfg->iters);
        if (strcmp(paths->ckpt, cfg->resume) == 0) saved_at = s.step;
        /* The learning rate the run stopped with, so that load + save is exact. */
        st = ag_optimizer_set_lr(ctx, (float)lr_at(cfg, s.step));
        if (st != AG_STATUS_OK) return report(tr, "ag_optimizer_set_lr", st);
    }

    /* Sample prompt: the user's, else a newline (else the first vocabulary byte). */
    const char *prompt = cfg->prompt != NULL && cfg->prompt[0] != '\0' ? cfg->prompt : "\n";
    static char first_byte[2];
    if (d->id_of['\n'] < 0 && prompt[0] == '\n' && prompt[1] == '\0') {
        first_byte[0] = (char)d->vocab[0];
        prompt = first_byte;
    }
    if (cfg->sample_only) return sample_only(tr, &s, prompt);
    int budget_rc = arena_budget(tr, s.rng);
    if (budget_rc != 0) return budget_rc;

    printf("model: preset=%s L=%d NH=%d C=%d T=%d B=%d V=%d params=%zu (%.2f MiB of floats)\n",
           cfg->preset, cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->batch, d->V,
           tr->model.n_floats, (double)tr->model.n_floats * 4.0 / 1048576.0);
    printf("train: iters=%ld batch=%d x accum %ld lr=%g %s", cfg->iters, cfg->batch, cfg->accum,
           (double)cfg->lr, schedule_name(cfg->schedule));
    if (cfg->schedule != SCHEDULE_CONSTANT)
        printf(" to %g at step %" PRIu64, (double)cfg->min_lr, decay_horizon(cfg));
    if (cfg->warmup > 0) printf(" warmup=%ld", cfg->warmup);
    printf(" AdamW(0.9, 0.999, eps 1e-8, wd %g on matrices) clip=%.1f seed=%" PRIu64
           " eval every %ld steps x %ld batches\n",
           (double)cfg->weight_decay, (double)GRAD_CLIP, s.seed, cfg->eval_every,
           cfg->eval_iters);
    if (paths->ckpt[0] != '\0') printf("checkpoints: %s (latest)%s%s\n", paths->ckpt,
                                       paths->best[0] ? ", best validation loss: " : "",
                                       paths->best);
    else printf("checkpoints: none (use --out DIR or --save PATH to keep the run)\n");
    if (paths->folder) printf("run folder: %s (log.csv, loss.svg, sample.txt)\n", paths->dir);
    {
        char err[PATH_CAP + 128];
        if (!log_start(tr->log, paths, s.step, err, sizeof err)) {
            fflush(stdout);
            fprintf(stderr, "train_full: %s\n", err);
            return EXIT_IO;
        }
    }
    fflush(stdout);

    /* Training loop: no malloc from here to the summary. */
    const uint64_t first = s.step;
    const uint64_t last = (uint64_t)cfg->iters > first ? (uint64_t)cfg->iters : first;
    const double tokens_per_step = (double)(tr->B * tr->T) * (double)cfg->accum;
    const float inv_accum = 1.0f / (float)cfg->accum;
    /* This rank's rows of every batch (all of them in one process). */
    const size_t rows = tr->B / (size_t)dist_world(), row0 = rows * (size_t)dist_rank();
    size_t local = 0, skipped = 0;
    double window_ms = 0.0, total_ms = 0.0, last_draw = 0.0, row_ms = 0.0;
    size_t window_steps = 0, row_ms_steps = 0;
    long rss_warm = -1;
    double val_loss = NAN;
    uint64_t evaluated_at = UINT64_MAX;
    float bad_loss = 0.0f;
    bool bad_is_val = false; /* the validation loss diverged (after the update) */
    enum outcome outcome = DONE;
    ag_memory_figures mem;
    memset(&mem, 0, sizeof mem);
    const double t_start = now_ms();

    for (uint64_t step = first + 1; step <= last; step++) {
        double t0 = now_ms();
        const double lr = lr_at(cfg, step);
        double loss_sum = 0.0;
        float norm = 0.0f;
        const char *what = "ag_reset";
        st = AG_STATUS_OK;
        for (long m = 0; m < cfg->accum && st == AG_STATUS_OK; m++) {
            get_batch(d->tokens, d->n_train, tr->B, tr->T, &s.rng, tr->ids, tr->targets);
            ag_tensor loss;
            float v = 0.0f;
            what = "ag_reset";
            st = ag_reset(ctx);
            if (st == AG_STATUS_OK) {
                what = "forward";
                st = model_forward(ctx, &tr->model, tr->ids + row0 * tr->T,
                                   tr->targets + row0 * tr->T, rows, tr->T, NULL, &loss);
            }
            if (st == AG_STATUS_OK) {
                what = "ag_tensor_item";
                st = ag_tensor_item(ctx, loss, &v);
            }
            if (st == AG_STATUS_OK && cfg->accum > 1) {
                what = "ag_scale";
                st = ag_scale(ctx, loss, inv_accum, &loss);
            }
            if (st == AG_STATUS_OK) {
                what = "ag_backward";
                st = ag_backward(ctx, loss);
            }
            loss_sum += v;
        }
        float loss_value = (float)(loss_sum / (double)cfg->accum);
        if (st == AG_STATUS_OK) {
            what = "the gradient all-reduce";
            st = dist_average(ctx, &loss_value);
        }
        if (st == AG_STATUS_OK) {
            if (isnan(s.start_loss)) s.start_loss = loss_value;
            if (!isfinite(loss_value) || loss_value > loss_limit(s.start_loss)) {
                /* Stop before this step's update; keep the checkpoint as it is. */
                bad_loss = loss_value;
                outcome = DIVERGED;
                break;
            }
            what = "ag_clip_grad_norm";
            st = ag_clip_grad_norm(ctx, GRAD_CLIP, &norm);
            if (st == AG_STATUS_OK) {
                what = "ag_optimizer_set_lr";
                st = ag_optimizer_set_lr(ctx, (float)lr);
            }
            if (st == AG_STATUS_OK) {
                what = "ag_optimizer_step";
                st = ag_optimizer_step(ctx);
            }
            if (st == AG_STATUS_NON_FINITE) {
                /* The library skipped the update; parameters are unchanged. */
                end_line(tr);
                fflush(stdout);
                if (dist_root())
                    fprintf(stderr, "train_full: step %" PRIu64 ": %s (update skipped)\n", step,
                            ag_context_last_error(ctx));
                skipped++;
                st = AG_STATUS_OK;
            }
        }
        if (st == AG_STATUS_OK) {
            what = "ag_zero_grad";
            st = ag_zero_grad(ctx);
        }
        if (st != AG_STATUS_OK) {
            char where[64];
            snprintf(where, sizeof where, "step %" PRIu64 ": %s", step, what);
            return report(tr, where, st);
        }
        double ms = now_ms() - t0;
        s.step = step;

        tr->step_ms[local++] = (float)ms;
        s.recent[s.n_recent++ % LOSS_WINDOW] = loss_value;
        s.row_loss += loss_value;
        s.row_norm += norm;
        s.row_steps++;
        row_ms += ms;
        row_ms_steps++;
        window_ms += ms;
        total_ms += ms;
        window_steps++;
        ag_memory_stats(ctx, &mem);

        if (local == WARMUP_STEPS) {
            rss_warm = rss_kb();
            end_line(tr);
            printf("memory step=%" PRIu64 " arena_high_water_bytes=%" PRIu64
                   " arena_reserved_bytes=%" PRIu64 " tape_capacity=%" PRIu64 " rss_kb=%ld\n",
                   step, mem.arena_high_water_bytes, mem.arena_reserved_bytes, mem.tape_capacity,
                   rss_warm);
            fflush(stdout);
        }

        const bool eval_now = step % (uint64_t)cfg->eval_every == 0 || step == last;
        /* Rows on a fixed grid (step 1, every log_every, evaluations), so a
           resumed run's log.csv continues exactly like an uninterrupted one. */
        const bool row_now = step % (uint64_t)cfg->log_every == 0 || eval_now || step == 1;
        const bool log_now = tr->tty ? (now_ms() - last_draw >= 100.0 || eval_now || local == 1)
                                     : (local == 1 || step % (uint64_t)cfg->log_every == 0 ||
                                        step == last);
        if (log_now) {
            double avg = window_ms / (double)window_steps;
            char eta[32];
            format_duration(eta, sizeof eta, (double)(last - step) * (total_ms / (double)local));
            printf("%sstep %" PRIu64 "/%" PRIu64 " loss %.6f | lr %.2e | %.2f ms/step | "
                   "%.0f tok/s | eta %s | arena hw %.2f MiB%s",
                   tr->tty ? "\r\033[K" : "", step, last, (double)loss_value, lr, avg,
                   tokens_per_step * 1000.0 / avg, eta,
                   (double)mem.arena_high_water_bytes / 1048576.0, tr->tty ? "" : "\n");
            fflush(stdout);
            tr->line_open = tr->tty;
            window_ms = 0.0;
            window_steps = 0;
            last_draw = now_ms();
        }

        if (eval_now) {
            double te = now_ms();
            if (dist_root()) st = evaluate(tr, s.seed, &val_loss);
            if (st != AG_STATUS_OK) return report(tr, "evaluation", st);
            dist_bcast_double(&val_loss);
            evaluated_at = step;
            end_line(tr);
            printf("eval step %" PRIu64 " val_loss %.6f (%ld batches, %.0f ms)\n", step, val_loss,
                   cfg->eval_iters, now_ms() - te);
            fflush(stdout);
            if (!isfinite(val_loss) || val_loss > loss_limit(s.start_loss)) {
                /* This step's update broke the model: do not save it. */
                bad_loss = (float)val_loss;
                bad_is_val = true;
                outcome = DIVERGED;
                break;
            }
        }
        if (row_now) {
            double row_avg_ms = row_ms / (double)row_ms_steps;
            struct log_row r = {
                .step = step,
                .lr = lr,
                .train_loss = s.row_loss / (double)s.row_steps,
                .val_loss = eval_now ? val_loss : NAN,
                .grad_norm = s.row_norm / (double)s.row_steps,
                .ms_per_step = row_avg_ms,
                .tok_per_s = tokens_per_step * 1000.0 / row_avg_ms,
                .arena_high_water = mem.arena_high_water_bytes,
            };
            log_append(tr->log, &r);
            s.row_loss = s.row_norm = 0.0;
            s.row_steps = 0;
            row_ms = 0.0;
            row_ms_steps = 0;
        }
        if (eval_now) {
            bool best = val_loss < s.best_val;
            if (best) {
                s.best_val = val_loss;
                s.best_step = step;
            }
            if (best && paths->best[0] != '\0') {
                int rc = save(tr, &s, paths->best, " (best validation loss so far)");
                if (rc != 0) return rc;
            }
            if (paths->ckpt[0] != '\0') {
                int rc = save(tr, &s, paths->ckpt, "");
                if (rc != 0) return rc;
                saved_at = step;
            }
            dist_barrier(); /* every rank continues once the checkpoint is in place */
            redraw(tr);
        }
        if (dist_stop_signal() != 0) {
            outcome = INTERRUPTED;
            break;
        }
    }
    end_line(tr);
    dist_debug_export(ctx);
    const double train_ms = now_ms() - t_start;

    if (outcome == DIVERGED && dist_root()) {
        fflush(stdout);
        fprintf(stderr,
                "train_full: step %" PRIu64 ": training diverged: %s %g %s (first step: %.4f)%s\n",
                bad_is_val ? s.step : s.step + 1, bad_is_val ? "validation loss" : "loss",
                (double)bad_loss,
                isfinite(bad_loss) ? "is above twice the first step's loss plus 3"
                                   : "is not finite",
                s.start_loss,
                bad_is_val ? "; this step is not saved" : "; stopped before this step's update");
        if (saved_at != UINT64_MAX)
            fprintf(stderr, "train_full: the checkpoint %s is kept as it was, at step %" PRIu64
                            "\n",
                    paths->ckpt, saved_at);
        fprintf(stderr, "train_full: try a lower --lr (now %g), or --warmup\n", (double)cfg->lr);
    } else if (outcome == INTERRUPTED) {
        printf("interrupted by %s at step %" PRIu64 "\n",
               g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", s.step);
    }

    /* The summary needs a validation loss of the final parameters. */
    if (outcome != DIVERGED && evaluated_at != s.step && dist_root()) {
        st = evaluate(tr, s.seed, &val_loss);
        if (st != AG_STATUS_OK) return report(tr, "evaluation", st);
        printf("eval step %" PRIu64 " val_loss %.6f (%ld batches)\n", s.step, val_loss,
               cfg->eval_iters);
    }
    if (outcome != DIVERGED && paths->ckpt[0] != '\0' && saved_at != s.step) {
        int rc = save(tr, &s, paths->ckpt, "");
        if (rc != 0) return rc;
        saved_at = s.step;
    }
    if (local > 0) redraw(tr);
    log_finish(tr->log);
    if (outcome != DIVERGED && cfg->export_path != NULL && dist_root()) {
        int rc = export_model(tr, cfg->export_path); /* export.c */
        if (rc != 0) return rc;
        printf("exported: %s (safetensors, config.json beside it; step %" PRIu64 ")\n",
               cfg->export_path, s.step);
    }
    char wall[32];
    format_duration(wall, sizeof wall, train_ms);
    printf("done: %zu steps in %s (%.1f s)%s\n", local, wall, train_ms / 1000.0,
           skipped ? " (some updates skipped: non-finite gradients)" : "");
    if (outcome == INTERRUPTED && saved_at == s.step)
        printf("resume with: --resume %s (and the same options)\n", paths->ckpt);

    if (outcome == DONE && cfg->sample_chars > 0 && dist_root()) {
        static struct outfile copy;
        struct outfile *copyp = NULL;
        if (paths->folder) {
            if (out_open(&copy, paths->sample, false)) copyp = &copy;
            else
                fprintf(stderr, "train_full: warning: %s: cannot write: %s\n", paths->sample,
                        strerror(copy.err));
        }
        uint64_t seed = s.sample_seed;
        printf("sample (%ld characters, temperature %g, top-k %ld, seed %" PRIu64 "):\n",
               cfg->sample_chars, (double)cfg->temperature, cfg->top_k, seed);
        printf("----\n");
        long written = 0;
        st = sample(tr, seed, prompt, cfg->sample_chars, stdout, copyp, &written);
        if (st != AG_STATUS_OK) return report(tr, "sampling", st);
        printf("\n----\n");
        if (copyp != NULL) {
            out_write(copyp, "\n", 1);
            if (out_close(copyp)) printf("sample saved to %s\n", paths->sample);
            else
                fprintf(stderr, "train_full: warning: %s: write failed: %s\n", paths->sample,
                        strerror(copyp->err));
        }
        if (g_stop_signal != 0) outcome = INTERRUPTED;
    }
    if (paths->folder && local > 0) printf("loss curve: %s (open it in a browser)\n", paths->svg);

    /* Summary (the last line). */
    size_t n_loss = s.n_recent < LOSS_WINDOW ? (size_t)s.n_recent : LOSS_WINDOW;
    double mean_loss = 0.0;
    for (size_t i = 0; i < n_loss; i++) mean_loss += s.recent[i];
    mean_loss = n_loss > 0 ? mean_loss / (double)n_loss : NAN;
    size_t skip = local / 2 < WARMUP_STEPS ? local / 2 : WARMUP_STEPS;
    double median = 0.0; /* no step timed (a resume already at --iters) */
    if (local > skip) {
        size_t n = local - skip;
        sort_floats(tr->step_ms + skip, n);
        median = n % 2 ? tr->step_ms[skip + n / 2]
                       : 0.5 * ((double)tr->step_ms[skip + n / 2 - 1] + tr->step_ms[skip + n / 2]);
    }
    long rss_end = rss_kb();
    if (rss_warm < 0) rss_warm = rss_end;
    ag_memory_stats(ctx, &mem);
    dist_report(stdout, median);
    static const char *const status_names[] = {"done", "interrupted", "diverged"};
    printf("summary preset=%s iters=%" PRIu64 " loss=%.6f val_loss=%.6f ms_per_step=%.4f "
           "tok_per_s=%.0f rss_warm_kb=%ld rss_end_kb=%ld arena_high_water_bytes=%" PRIu64
           " params=%zu steps_run=%zu status=%s\n",
           cfg->preset, s.step, mean_loss, val_loss, median,
           median > 0.0 ? tokens_per_step * 1000.0 / median : 0.0, rss_warm, rss_end,
           mem.arena_high_water_bytes, tr->model.n_floats, local, status_names[outcome]);
    fflush(stdout);
    if (outcome == DIVERGED) return EXIT_DIVERGED;
    if (outcome == INTERRUPTED) return 128 + g_stop_signal;
    return 0;
}

/*
 * main.c: train the Fashion-MNIST classifier (see README.md).
 *
 * Every step has the same shapes (the last partial batch of an epoch is
 * dropped), so after the first step the arena is reused and a step calls
 * the C allocator zero times. Each epoch's order is a Fisher-Yates shuffle
 * drawn from the shuffle RNG; the checkpoint keeps that RNG's state as it
 * was before the epoch's shuffle, with the epoch and the batch reached, so
 * --resume rebuilds the same order and continues with the same bits.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/trainer.h"
#include "cnn.h"

#define PROGRAM "cnn"
#define SERIES_CAP 512
#define EVAL_BATCH 500
#define STATE_MAGIC 0x636e6e31u /* "cnn1" */
#define STATE_VERSION 1u

enum optimizer { OPT_ADAMW, OPT_SGD };

struct config {
    const char *data_dir, *out_dir;
    size_t epochs, subset, test_subset, batch, threads, log_every;
    uint64_t seed, stop_after;
    enum optimizer opt;
    double lr, min_lr, momentum, weight_decay;
    uint64_t warmup;
    enum schedule schedule;
    struct model_dims dims;
    bool resume, bench;
    double min_accuracy;
};

/* The run's position, stored in the checkpoint's user bytes (fixed-width
 * fields, so a checkpoint reads back on any build of this program). */
struct run_state {
    uint64_t magic, version;
    uint64_t seed, batch, subset, epochs; /* what the bits depend on */
    uint64_t c1, c2, hidden, optimizer;
    uint64_t epoch;      /* the epoch in progress (0-based) */
    uint64_t batch_done; /* batches of it already trained */
    uint64_t step;       /* steps trained in all */
    uint64_t epoch_rng;  /* the shuffle RNG before this epoch's shuffle */
    uint64_t rng;        /* the shuffle RNG now (the next epoch's start) */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROGRAM " [options]\n"
            "Trains a small convolutional network on Fashion-MNIST and prints the test\n"
            "accuracy and the confusion matrix.\n"
            "  --data DIR          the IDX files (default /usr/share/datasets/fashion-mnist)\n"
            "  --out DIR           run folder: checkpoint.bin, loss.svg (default runs/cnn)\n"
            "  --epochs N          (default 4)\n"
            "  --subset N          train on the first N training images (default all)\n"
            "  --test-subset N     evaluate on the first N test images (default all)\n"
            "  --batch N           mini-batch size (default 128)\n"
            "  --threads N         library threads (default: the library's)\n"
            "  --seed S            initialisation, shuffling and dropout (default 1)\n"
            "  --optimizer adamw|sgd  AdamW, or SGD with momentum (default adamw)\n"
            "  --lr X              peak learning rate (default 2e-3 adamw, 0.05 sgd)\n"
            "  --min-lr X          the decay's floor (default 1e-5)\n"
            "  --momentum X        SGD momentum (default 0.9)\n"
            "  --weight-decay X    (default 1e-4 adamw, 5e-4 sgd)\n"
            "  --schedule cosine|linear|constant  after warm-up (default cosine)\n"
            "  --warmup N          warm-up steps (default 100)\n"
            "  --channels C1,C2    conv channels (default 16,64)\n"
            "  --hidden H          fully connected width (default 128)\n"
            "  --dropout P         before the last layer (default 0.25)\n"
            "  --batch-norm        a batch norm between each conv and its relu\n"
            "  --log-every K       progress line every K steps when not a terminal (default 50)\n"
            "  --resume            continue from DIR/checkpoint.bin\n"
            "  --stop-after N      stop after global step N (checkpoint saved)\n"
            "  --min-accuracy A    exit 7 when the test accuracy is below A (0..1)\n"
            "  --bench             print cnn_epoch_ms (training steps only)\n"
            "Exit status: 0 done, 1 library error, 2 usage or data, 3 checkpoint refused,\n"
            "6 writing the run folder failed, 7 accuracy below --min-accuracy.\n");
}

static bool parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-') return false;
    *out = (size_t)v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool takes_value(const char *flag)
{
    static const char *const flags[] = {
        "--data",     "--out",      "--epochs",  "--subset",     "--test-subset", "--batch",
        "--threads",  "--log-every", "--seed",   "--stop-after", "--warmup",      "--hidden",
        "--channels", "--optimizer", "--schedule", "--lr",       "--min-lr",      "--momentum",
        "--weight-decay", "--dropout", "--min-accuracy",
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strcmp(flag, flags[i]) == 0) return true;
    return false;
}

/* Returns 0 to run, -1 after --help, EXIT_USAGE on a bad flag. */
static int parse_args(int argc, char **argv, struct config *c)
{
    *c = (struct config){
        .data_dir = "/usr/share/datasets/fashion-mnist",
        .out_dir = "runs/cnn",
        .epochs = 4,
        .batch = 128,
        .log_every = 50,
        .seed = 1,
        .opt = OPT_ADAMW,
        .lr = -1.0,
        .min_lr = 1e-5,
        .momentum = 0.9,
        .weight_decay = -1.0,
        .warmup = 100,
        .schedule = SCHEDULE_COSINE,
        .dims = {.c1 = 16, .c2 = 64, .hidden = 128, .dropout = 0.25f},
        .min_accuracy = -1.0,
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t n;
        double x;
        bool ok = true, takes = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if (strcmp(a, "--resume") == 0) {
            c->resume = true;
            takes = false;
        } else if (strcmp(a, "--bench") == 0) {
            c->bench = true;
            takes = false;
        } else if (strcmp(a, "--batch-norm") == 0) {
            c->dims.batch_norm = true;
            takes = false;
        } else if (!takes_value(a)) {
            fprintf(stderr, PROGRAM ": unknown flag %s (see --help)\n", a);
            return EXIT_USAGE;
        } else if (v == NULL) {
            fprintf(stderr, PROGRAM ": %s needs a value\n", a);
            return EXIT_USAGE;
        } else if (strcmp(a, "--data") == 0) {
            c->data_dir = v;
        } else if (strcmp(a, "--out") == 0) {
            c->out_dir = v;
        } else if (strcmp(a, "--epochs") == 0) {
            ok = parse_size(v, &c->epochs) && c->epochs > 0;
        } else if (strcmp(a, "--subset") == 0) {
            ok = parse_size(v, &c->subset);
        } else if (strcmp(a, "--test-subset") == 0) {
            ok = parse_size(v, &c->test_subset);
        } else if (strcmp(a, "--batch") == 0) {
            ok = parse_size(v, &c->batch) && c->batch > 0 && c->batch <= 65536;
        } else if (strcmp(a, "--threads") == 0) {
            ok = parse_size(v, &c->threads) && c->threads > 0;
        } else if (strcmp(a, "--log-every") == 0) {
            ok = parse_size(v, &c->log_every) && c->log_every > 0;
        } else if (strcmp(a, "--seed") == 0) {
            ok = parse_size(v, &n);
            c->seed = n;
        } else if (strcmp(a, "--stop-after") == 0) {
            ok = parse_size(v, &n) && n > 0;
            c->stop_after = n;
        } else if (strcmp(a, "--warmup") == 0) {
            ok = parse_size(v, &n);
            c->warmup = n;
        } else if (strcmp(a, "--hidden") == 0) {
            ok = parse_size(v, &c->dims.hidden) && c->dims.hidden > 0 && c->dims.hidden <= 65536;
        } else if (strcmp(a, "--channels") == 0) {
            char *end;
            unsigned long c1 = strtoul(v, &end, 10);
            unsigned long c2 = *end == ',' ? strtoul(end + 1, &end, 10) : 0;
            ok = *end == '\0' && c1 > 0 && c2 > 0 && c1 <= 4096 && c2 <= 4096;
            c->dims.c1 = c1;
            c->dims.c2 = c2;
        } else if (strcmp(a, "--optimizer") == 0) {
            ok = strcmp(v, "adamw") == 0 || strcmp(v, "sgd") == 0;
            c->opt = strcmp(v, "sgd") == 0 ? OPT_SGD : OPT_ADAMW;
        } else if (strcmp(a, "--schedule") == 0) {
            if (strcmp(v, "cosine") == 0) c->schedule = SCHEDULE_COSINE;
            else if (strcmp(v, "linear") == 0) c->schedule = SCHEDULE_LINEAR;
            else if (strcmp(v, "constant") == 0) c->schedule = SCHEDULE_CONSTANT;
            else ok = false;
        } else if (strcmp(a, "--lr") == 0) {
            ok = parse_double(v, &c->lr) && c->lr > 0;
        } else if (strcmp(a, "--min-lr") == 0) {
            ok = parse_double(v, &c->min_lr) && c->min_lr >= 0;
        } else if (strcmp(a, "--momentum") == 0) {
            ok = parse_double(v, &c->momentum) && c->momentum >= 0 && c->momentum < 1;
        } else if (strcmp(a, "--weight-decay") == 0) {
            ok = parse_double(v, &c->weight_decay) && c->weight_decay >= 0;
        } else if (strcmp(a, "--dropout") == 0) {
            ok = parse_double(v, &x) && x >= 0 && x < 1;
            c->dims.dropout = (float)x;
        } else if (strcmp(a, "--min-accuracy") == 0) {
            ok = parse_double(v, &c->min_accuracy) && c->min_accuracy >= 0 &&
                 c->min_accuracy <= 1;
        }
        if (!ok) {
            fprintf(stderr, PROGRAM ": bad value for %s: %s\n", a, v);
            return EXIT_USAGE;
        }
        if (takes) i++;
    }
    if (c->lr < 0) c->lr = c->opt == OPT_SGD ? 0.05 : 2e-3;
    if (c->weight_decay < 0) c->weight_decay = c->opt == OPT_SGD ? 5e-4 : 1e-4;
    return 0;
}

/* Everything the loop uses, allocated before it. */
struct trainer {
    const struct config *cfg;
    ag_context *ctx;
    struct model model;
    struct dataset train, test;
    size_t *order;
    float *batch_images;
    int32_t *batch_labels;
    float *logits;
    struct lr_schedule schedule;
    struct progress progress;
    struct reporter reporter;
    struct series train_curve, test_curve;
    char ckpt[PATH_CAP], svg[PATH_CAP], svg_tmp[PATH_CAP];
};

/* Fisher-Yates over the identity, so an epoch's order depends only on
 * the RNG state it starts from. */
static void shuffle(size_t *order, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rng_next(rng) % (uint64_t)(i + 1));
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static ag_status train_step(struct trainer *tr, uint64_t step, size_t first, float *loss_out)
{
    ag_context *ctx = tr->ctx;
    const size_t B = tr->cfg->batch;
    for (size_t i = 0; i < B; i++) {
        size_t k = tr->order[first + i];
        memcpy(tr->batch_images + i * IMG_PIXELS, tr->train.images + k * IMG_PIXELS,
               IMG_PIXELS * sizeof(float));
        tr->batch_labels[i] = tr->train.labels[k];
    }
    ag_tensor logits, loss;
    ag_status st = ag_reset(ctx);
    const uint64_t dropout_seed = derive_seed(derive_seed(tr->cfg->seed, 3), step);
    if (st == AG_STATUS_OK)
        st = model_forward(ctx, &tr->model, tr->batch_images, B, true, dropout_seed, &logits);
    if (st == AG_STATUS_OK) st = ag_cross_entropy(ctx, logits, tr->batch_labels, B, &loss);
    if (st == AG_STATUS_OK) st = ag_tensor_item(ctx, loss, loss_out);
    if (st == AG_STATUS_OK) st = ag_backward(ctx, loss);
    if (st == AG_STATUS_OK) st = ag_optimizer_set_lr(ctx, (float)lr_at(&tr->schedule, step));
    if (st == AG_STATUS_OK) st = ag_optimizer_step(ctx);
    if (st == AG_STATUS_OK) st = ag_zero_grad(ctx);
    return st;
}

/* Test loss and accuracy with gradients off; fills confusion[true][pred]. */
static ag_status evaluate(struct trainer *tr, double *loss_out, double *acc_out,
                          uint64_t confusion[N_CLASSES][N_CLASSES])
{
    ag_context *ctx = tr->ctx;
    const struct dataset *d = &tr->test;
    memset(confusion, 0, sizeof(uint64_t) * N_CLASSES * N_CLASSES);
    double loss_sum = 0.0;
    size_t correct = 0;
    ag_status st = ag_set_grad_enabled(ctx, false);
    for (size_t first = 0; st == AG_STATUS_OK && first < d->n; first += EVAL_BATCH) {
        size_t b = d->n - first < EVAL_BATCH ? d->n - first : EVAL_BATCH;
        ag_tensor logits, loss;
        float l = 0.0f;
        st = ag_reset(ctx);
        if (st == AG_STATUS_OK)
            st = model_forward(ctx, &tr->model, d->images + first * IMG_PIXELS, b, false, 0,
                               &logits);
        if (st == AG_STATUS_OK) st = ag_cross_entropy(ctx, logits, d->labels + first, b, &loss);
        if (st == AG_STATUS_OK) st = ag_tensor_item(ctx, loss, &l);
        if (st == AG_STATUS_OK) st = ag_tensor_read(ctx, logits, tr->logits, b * N_CLASSES);
        if (st != AG_STATUS_OK) break;
        loss_sum += (double)l * (double)b;
        for (size_t i = 0; i < b; i++) {
            const float *row = tr->logits + i * N_CLASSES;
            int best = 0;
            for (int c = 1; c < N_CLASSES; c++)
                if (row[c] > row[best]) best = c;
            int truth = d->labels[first + i];
            confusion[truth][best]++;
            correct += best == truth;
        }
    }
    ag_status reset = ag_reset(ctx);
    ag_status on = ag_set_grad_enabled(ctx, true);
    if (st == AG_STATUS_OK) st = reset != AG_STATUS_OK ? reset : on;
    *loss_out = loss_sum / (double)d->n;
    *acc_out = (double)correct / (double)d->n;
    return st;
}

static void print_confusion(uint64_t confusion[N_CLASSES][N_CLASSES])
{
    static const char *const names[N_CLASSES] = {"T-shirt", "Trouser", "Pullover", "Dress",
                                                 "Coat",    "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",     "Boot"};
    printf("confusion matrix (rows: true class, columns: predicted)\n%9s", "");
    for (int c = 0; c < N_CLASSES; c++) printf(" %5d", c);
    printf("  accuracy\n");
    for (int t = 0; t < N_CLASSES; t++) {
        uint64_t row = 0;
        for (int c = 0; c < N_CLASSES; c++) row += confusion[t][c];
        printf("%d %-8s", t, names[t]);
        for (int c = 0; c < N_CLASSES; c++) printf(" %5" PRIu64, confusion[t][c]);
        printf("  %6.2f%%\n", row > 0 ? 100.0 * (double)confusion[t][t] / (double)row : 0.0);
    }
}

static int save_checkpoint(struct trainer *tr, const struct run_state *s)
{
    ag_status st = ag_checkpoint_save(tr->ctx, tr->ckpt, (const uint8_t *)s, sizeof *s);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_checkpoint_save", st);
    return 0;
}

/* Loads DIR/checkpoint.bin; refuses one made with other settings. */
static int load_checkpoint(struct trainer *tr, struct run_state *s, const struct run_state *want)
{
    size_t len = 0;
    ag_status st = ag_checkpoint_peek(tr->ctx, tr->ckpt, (uint8_t *)s, sizeof *s, &len);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, PROGRAM ": --resume: %s: %s\n", tr->ckpt, ag_context_last_error(tr->ctx));
        return EXIT_CHECKPOINT;
    }
    if (len != sizeof *s || s->magic != STATE_MAGIC || s->version != STATE_VERSION) {
        fprintf(stderr, PROGRAM ": --resume: %s was not written by this program\n", tr->ckpt);
        return EXIT_CHECKPOINT;
    }
    if (s->seed != want->seed || s->batch != want->batch || s->subset != want->subset ||
        s->epochs != want->epochs || s->optimizer != want->optimizer) {
        fprintf(stderr,
                PROGRAM ": --resume: %s was made with seed %" PRIu64 ", batch %" PRIu64
                        ", %" PRIu64 " training images, %" PRIu64 " epochs, %s; this run "
                        "asks for seed %" PRIu64 ", batch %" PRIu64 ", %" PRIu64 ", %" PRIu64
                        ", %s\n",
                tr->ckpt, s->seed, s->batch, s->subset, s->epochs,
                s->optimizer == OPT_SGD ? "sgd" : "adamw", want->seed, want->batch,
                want->subset, want->epochs, want->optimizer == OPT_SGD ? "sgd" : "adamw");
        return EXIT_CHECKPOINT;
    }
    st = ag_checkpoint_load(tr->ctx, tr->ckpt, (uint8_t *)s, sizeof *s, &len);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, PROGRAM ": --resume: %s: %s\n", tr->ckpt, ag_context_last_error(tr->ctx));
        return EXIT_CHECKPOINT;
    }
    return 0;
}

static int write_plot(struct trainer *tr, uint64_t last_step)
{
    char err[256];
    const struct plot pl = {
        .title = "cnn: Fashion-MNIST",
        .y_label = "loss (cross-entropy, nats)",
        .train = &tr->train_curve,
        .val = &tr->test_curve,
        .x_max = last_step,
    };
    if (!plot_write(&pl, tr->svg, tr->svg_tmp, err, sizeof err)) {
        progress_end_line(&tr->progress);
        fprintf(stderr, PROGRAM ": %s\n", err);
        return EXIT_IO;
    }
    return 0;
}

static int run(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    ag_context *ctx = tr->ctx;
    ag_status st = model_create(ctx, &tr->model, &cfg->dims, derive_seed(cfg->seed, 1));
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "creating the parameters", st);
    if (cfg->opt == OPT_SGD)
        st = ag_optimizer_sgd(ctx, (float)cfg->lr, (float)cfg->momentum, (float)cfg->weight_decay);
    else st = ag_optimizer_adamw(ctx, (float)cfg->lr, 0.9f, 0.999f, 1e-8f, (float)cfg->weight_decay);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "creating the optimizer", st);

    const size_t per_epoch = tr->train.n / cfg->batch;
    const uint64_t total = (uint64_t)per_epoch * cfg->epochs;
    tr->schedule = (struct lr_schedule){
        .shape = cfg->schedule,
        .peak = cfg->lr,
        .floor = cfg->min_lr,
        .warmup = cfg->warmup < total ? cfg->warmup : total / 10,
        .decay_end = total,
    };
    struct run_state s = {
        .magic = STATE_MAGIC,
        .version = STATE_VERSION,
        .seed = cfg->seed,
        .batch = cfg->batch,
        .subset = tr->train.n,
        .epochs = cfg->epochs,
        .c1 = cfg->dims.c1,
        .c2 = cfg->dims.c2,
        .hidden = cfg->dims.hidden,
        .optimizer = cfg->opt,
        .rng = derive_seed(cfg->seed, 2),
    };
    if (cfg->resume) {
        const struct run_state want = s;
        int rc = load_checkpoint(tr, &s, &want);
        if (rc != 0) return rc;
        printf("resumed from %s at step %" PRIu64 " (epoch %" PRIu64 ", batch %" PRIu64
               " of %zu)\n",
               tr->ckpt, s.step, s.epoch + 1, s.batch_done, per_epoch);
        if (cfg->stop_after != 0 && cfg->stop_after <= s.step) {
            fprintf(stderr, PROGRAM ": --stop-after %" PRIu64 ": the run is at step %" PRIu64
                                    " already\n",
                    cfg->stop_after, s.step);
            return EXIT_USAGE;
        }
    }
    printf("%zu training images, %zu test images, batch %zu, %zu steps per epoch, %zu epochs, "
           "%s lr %g (%s, warm-up %" PRIu64 ")\n",
           tr->train.n, tr->test.n, cfg->batch, per_epoch, cfg->epochs,
           cfg->opt == OPT_SGD ? "SGD with momentum" : "AdamW", cfg->lr,
           schedule_name(cfg->schedule), tr->schedule.warmup);
    fflush(stdout);

    double acc = 0.0;
    bool evaluated = false;
    uint64_t confusion[N_CLASSES][N_CLASSES];
    while (s.epoch < cfg->epochs) {
        if (s.batch_done == 0) s.epoch_rng = s.rng;
        /* The order from the epoch's saved start: the same after a resume. */
        uint64_t rng = s.epoch_rng;
        shuffle(tr->order, tr->train.n, &rng);
        s.rng = rng;
        double epoch_ms = 0.0, loss_sum = 0.0;
        size_t epoch_steps = 0;
        bool stopped = false;
        while (s.batch_done < per_epoch) {
            const uint64_t step = s.step + 1;
            float loss = 0.0f;
            double t0 = now_ms();
            st = train_step(tr, step, s.batch_done * cfg->batch, &loss);
            double ms = now_ms() - t0;
            if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "a training step", st);
            if (!isfinite(loss)) {
                progress_end_line(&tr->progress);
                fprintf(stderr, PROGRAM ": step %" PRIu64 ": loss is %g\n", step, loss);
                return EXIT_DIVERGED;
            }
            s.step = step;
            s.batch_done++;
            epoch_ms += ms;
            loss_sum += loss;
            epoch_steps++;
            series_add(&tr->train_curve, (double)step, loss);
            progress_step(&tr->progress, ms);
            if (progress_due(&tr->progress, step, total, (long)cfg->log_every, false)) {
                ag_memory_stats_t mem = {0};
                ag_memory_stats(tr->ctx, &mem);
                const struct progress_line line = {
                    .step = step,
                    .last = total,
                    .loss = loss,
                    .lr = lr_at(&tr->schedule, step),
                    .units_per_step = (double)cfg->batch,
                    .unit = "img",
                    .arena_high_water = mem.arena_high_water_bytes,
                };
                progress_print(&tr->progress, &line);
            }
            if (cfg->stop_after != 0 && step >= cfg->stop_after) {
                stopped = true;
                break;
            }
        }
        if (s.batch_done == per_epoch) {
            s.epoch++;
            s.batch_done = 0;
        }
        int rc = save_checkpoint(tr, &s);
        if (rc != 0) return rc;
        progress_end_line(&tr->progress);
        if (epoch_steps > 0 && !stopped) {
            double test_loss;
            st = evaluate(tr, &test_loss, &acc, confusion);
            if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "evaluation", st);
            evaluated = true;
            series_add(&tr->test_curve, (double)s.step, test_loss);
            printf("epoch %" PRIu64 "/%zu: train loss %.4f, test loss %.4f, test accuracy "
                   "%.2f%%, %.1f s of training steps (%.1f ms/step)\n",
                   s.epoch, cfg->epochs, loss_sum / (double)epoch_steps, test_loss, 100.0 * acc,
                   epoch_ms / 1000.0, epoch_ms / (double)epoch_steps);
            /* A whole epoch from its first batch: steps only, no data or evaluation. */
            if (cfg->bench && epoch_steps == per_epoch) printf("cnn_epoch_ms %.0f\n", epoch_ms);
            /* After the evaluation too: `make cnn-long` checks these stay flat. */
            ag_memory_stats_t mem = {0};
            ag_memory_stats(tr->ctx, &mem);
            printf("memory epoch=%" PRIu64 " rss_kb=%ld anon_kb=%ld arena_high_water_bytes=%llu\n",
                   s.epoch, rss_kb(), anon_kb(), (unsigned long long)mem.arena_high_water_bytes);
            fflush(stdout);
            rc = write_plot(tr, total);
            if (rc != 0) return rc;
        }
        if (stopped) {
            printf("stopped after step %" PRIu64 " (--stop-after); %s holds the run\n", s.step,
                   tr->ckpt);
            return 0;
        }
    }
    if (!evaluated) {
        /* Resumed at the very end: evaluate what was loaded. */
        double test_loss;
        st = evaluate(tr, &test_loss, &acc, confusion);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "evaluation", st);
    }
    print_confusion(confusion);
    printf("test accuracy %.2f%% (%zu images)\n", 100.0 * acc, tr->test.n);
    if (cfg->min_accuracy >= 0 && acc < cfg->min_accuracy) {
        fprintf(stderr, PROGRAM ": test accuracy %.2f%% is below --min-accuracy %.2f%%\n",
                100.0 * acc, 100.0 * cfg->min_accuracy);
        return 7;
    }
    return 0;
}

/* Loads both splits and normalises them with the training set's figures. */
static int load_data(struct trainer *tr)
{
    const struct config *cfg = tr->cfg;
    char img[PATH_CAP], lbl[PATH_CAP], err[PATH_CAP + 256];
    path_join(img, cfg->data_dir, "train-images-idx3-ubyte.gz");
    path_join(lbl, cfg->data_dir, "train-labels-idx1-ubyte.gz");
    if (!dataset_load(&tr->train, img, lbl, cfg->subset, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return EXIT_USAGE;
    }
    path_join(img, cfg->data_dir, "t10k-images-idx3-ubyte.gz");
    path_join(lbl, cfg->data_dir, "t10k-labels-idx1-ubyte.gz");
    if (!dataset_load(&tr->test, img, lbl, cfg->test_subset, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return EXIT_USAGE;
    }
    if (tr->train.n < cfg->batch) {
        fprintf(stderr, PROGRAM ": %zu training images, fewer than one batch of %zu\n",
                tr->train.n, cfg->batch);
        return EXIT_USAGE;
    }
    float mean, std;
    dataset_stats(&tr->train, &mean, &std);
    dataset_normalise(&tr->train, mean, std);
    dataset_normalise(&tr->test, mean, std);
    printf("pixels normalised with the training set's mean %.4f and deviation %.4f\n", mean, std);
    return 0;
}

int main(int argc, char **argv)
{
    struct config cfg;
    int rc = parse_args(argc, argv, &cfg);
    if (rc != 0) return rc < 0 ? 0 : rc;
    static struct trainer tr;
    tr.cfg = &cfg;
    tr.progress.tty = isatty(STDOUT_FILENO) != 0;
    tr.reporter.program = PROGRAM;
    tr.reporter.progress = &tr.progress;
    char err[PATH_CAP + 256];
    if (!make_dirs(cfg.out_dir, err, sizeof err) ||
        !probe_dir(cfg.out_dir, PROGRAM, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": --out %s: %s\n", cfg.out_dir, err);
        return EXIT_USAGE;
    }
    path_join(tr.ckpt, cfg.out_dir, "checkpoint.bin");
    path_join(tr.svg, cfg.out_dir, "loss.svg");
    path_join(tr.svg_tmp, cfg.out_dir, "loss.svg.tmp");
    if (cfg.threads > 0 && ag_set_num_threads(cfg.threads) != AG_STATUS_OK) {
        fprintf(stderr, PROGRAM ": --threads %zu: too many\n", cfg.threads);
        return EXIT_USAGE;
    }
    rc = load_data(&tr);
    if (rc == 0) {
        tr.order = malloc(tr.train.n * sizeof *tr.order);
        tr.batch_images = malloc(cfg.batch * IMG_PIXELS * sizeof(float));
        tr.batch_labels = malloc(cfg.batch * sizeof(int32_t));
        tr.logits = malloc(EVAL_BATCH * N_CLASSES * sizeof(float));
        struct series *curves[2] = {&tr.train_curve, &tr.test_curve};
        for (int i = 0; i < 2; i++) {
            curves[i]->cap = SERIES_CAP;
            curves[i]->x = malloc(SERIES_CAP * sizeof(float));
            curves[i]->y = malloc(SERIES_CAP * sizeof(float));
        }
        if (!tr.order || !tr.batch_images || !tr.batch_labels || !tr.logits ||
            !tr.train_curve.x || !tr.train_curve.y || !tr.test_curve.x || !tr.test_curve.y) {
            fprintf(stderr, PROGRAM ": out of memory for host buffers\n");
            rc = EXIT_LIBRARY;
        } else if (ag_context_new(&tr.ctx) != AG_STATUS_OK) {
            fprintf(stderr, PROGRAM ": ag_context_new failed\n");
            rc = EXIT_LIBRARY;
        } else {
            tr.reporter.ctx = tr.ctx;
            rc = run(&tr);
            ag_context_free(&tr.ctx);
        }
        free(tr.order);
        free(tr.batch_images);
        free(tr.batch_labels);
        free(tr.logits);
        for (int i = 0; i < 2; i++) {
            free(curves[i]->x);
            free(curves[i]->y);
        }
    }
    dataset_free(&tr.train);
    dataset_free(&tr.test);
    return rc;
}

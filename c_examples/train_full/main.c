/*
 * main.c: train_full's entry point.
 *
 * Everything that can fail for a reason other than training is checked here,
 * before the first step: arguments, data, the prompt's bytes, and that every
 * folder the run will write to exists and takes a new file. Then every host
 * buffer is allocated once and the trainer runs (train.c) or samples.
 *
 * Signals: the first SIGINT or SIGTERM only sets a flag (async-signal-safe);
 * the loop finishes its step, saves and exits 128 + the signal. A second one
 * exits at once (a checkpoint being written is replaced atomically, so the
 * previous one survives).
 *
 * Build: make build/train_full. Run: build/train_full --help.
 * Over MPI (dist.c): make build/train_full_mpi, then
 * mpirun -np 2 build/train_full_mpi ... (README, section MPI).
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_full.h"

#define SERIES_CAP 2048 /* points per plotted curve */

volatile sig_atomic_t g_stop_signal = 0;

static void write_stderr(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

static void on_signal(int sig)
{
    if (g_stop_signal != 0) {
        write_stderr("\ntrain_full: second signal: exiting now\n");
        _exit(128 + sig);
    }
    g_stop_signal = sig;
    write_stderr("\ntrain_full: stopping after this step (send it again to quit at once)\n");
}

static bool install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* writes of a checkpoint are not cut short */
    return sigaction(SIGINT, &sa, NULL) == 0 && sigaction(SIGTERM, &sa, NULL) == 0;
}

/*
 * Decides where the run writes: --out DIR (a run folder), --save PATH (the
 * latest checkpoint), and --resume PATH, which keeps writing to PATH unless
 * one of the others says otherwise; a PATH named ckpt.bin brings its folder
 * along as the run folder.
 */
static int plan_outputs(const struct config *cfg, struct run_paths *p, FILE *info)
{
    char err[PATH_CAP + 128];
    memset(p, 0, sizeof *p);
    if (cfg->sample_only) return 0; /* writes nothing */
    const char *flag = "--out";
    if (cfg->out != NULL) {
        p->folder = true;
        snprintf(p->dir, sizeof p->dir, "%s", cfg->out);
    } else if (cfg->resume != NULL && cfg->save == NULL) {
        const char *base = strrchr(cfg->resume, '/');
        base = base != NULL ? base + 1 : cfg->resume;
        if (strcmp(base, "ckpt.bin") == 0) {
            p->folder = true;
            dir_of(cfg->resume, p->dir, sizeof p->dir);
            flag = "--resume";
            fprintf(info, "run folder: %s (the folder of --resume)\n", p->dir);
        }
    }
    if (p->folder) {
        size_t n = strlen(p->dir);
        while (n > 1 && p->dir[n - 1] == '/') p->dir[--n] = '\0';
        if (!make_dirs(p->dir, err, sizeof err) ||
            !probe_dir(p->dir, "train_full", err, sizeof err)) {
            fprintf(stderr, "train_full: %s: %s\n", flag, err);
            return EXIT_USAGE;
        }
        path_join(p->ckpt, p->dir, "ckpt.bin");
        path_join(p->best, p->dir, "best.bin");
        path_join(p->log, p->dir, "log.csv");
        path_join(p->log_tmp, p->dir, ".log.csv.tmp");
        path_join(p->svg, p->dir, "loss.svg");
        path_join(p->svg_tmp, p->dir, ".loss.svg.tmp");
        path_join(p->sample, p->dir, "sample.txt");
        const char *files[] = {p->ckpt, p->best, p->log, p->svg, p->sample};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            struct stat st;
            if (stat(files[i], &st) == 0 && S_ISDIR(st.st_mode)) {
                fprintf(stderr, "train_full: %s: %s is a folder, not a file path\n", flag,
                        files[i]);
                return EXIT_USAGE;
            }
        }
    }
    if (cfg->save != NULL) {
        flag = "--save";
        snprintf(p->ckpt, sizeof p->ckpt, "%s", cfg->save);
    } else if (!p->folder && cfg->resume != NULL) {
        flag = "--resume";
        snprintf(p->ckpt, sizeof p->ckpt, "%s", cfg->resume);
    }
    if (p->ckpt[0] != '\0' && !check_file_target(p->ckpt, "train_full", err, sizeof err)) {
        fprintf(stderr, "train_full: %s: %s\n", flag, err);
        return EXIT_USAGE;
    }
    return 0;
}

static void close_tokenizer(struct trainer *tr)
{
    ag_tokenizer_close(&tr->tok);
    free(tr->prompt_ids);
    free(tr->piece);
    tr->prompt_ids = NULL;
    tr->piece = NULL;
}

/*
 * Token shards with a sample to write: opens GPT-2's tokenizer from
 * --tokenizer DIR and sizes the sampler's buffers (the prompt's ids, the
 * longest token's bytes), so that sampling allocates nothing. A tokenizer
 * that cannot be opened ends the run (EXIT_USAGE) when --tokenizer, --prompt,
 * --sample-only or --sample-chars asked for it; otherwise the run trains
 * without a sample.
 */
static int open_tokenizer(struct config *cfg, struct trainer *tr, FILE *info)
{
    char vocab[PATH_CAP], merges[PATH_CAP];
    snprintf(vocab, sizeof vocab, "%s/%s", cfg->tokenizer_dir, GPT2_VOCAB_JSON);
    snprintf(merges, sizeof merges, "%s/%s", cfg->tokenizer_dir, GPT2_MERGES);
    ag_status st = ag_tokenizer_open(vocab, merges, &tr->tok);
    if (st != AG_STATUS_OK) {
        const bool asked = cfg->tokenizer_given || cfg->prompt != NULL || cfg->sample_only ||
                           cfg->sample_chars_given;
        if (!asked) {
            if (dist_root())
                fprintf(info,
                        "note: no sample: token shards decode with --tokenizer DIR (%s; make "
                        "tokenizer-data installs %s)\n",
                        ag_tokenizer_last_error(), GPT2_TOKENIZER_DIR);
            cfg->sample_chars = 0;
            return 0;
        }
        if (dist_root())
            fprintf(stderr,
                    "train_full: --tokenizer %s: sampling from token shards needs GPT-2's "
                    "tokenizer there (%s, %s): %s (make tokenizer-data installs %s)\n",
                    cfg->tokenizer_dir, GPT2_VOCAB_JSON, GPT2_MERGES, ag_tokenizer_last_error(),
                    GPT2_TOKENIZER_DIR);
        return EXIT_USAGE;
    }
    size_t tok_V = 0;
    st = ag_tokenizer_vocab_size(tr->tok, &tok_V);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "train_full: ag_tokenizer_vocab_size: %s\n", ag_tokenizer_last_error());
        close_tokenizer(tr);
        return EXIT_LIBRARY;
    }
    /* A model wider than the tokenizer (a padded --vocab) never draws the ids past it. */
    if (tok_V < tr->draw_V) tr->draw_V = tok_V;
    for (int32_t id = 0; (size_t)id < tr->draw_V; id++) {
        size_t bytes = 0;
        st = ag_tokenizer_decode(tr->tok, &id, 1, NULL, 0, &bytes);
        if (st != AG_STATUS_OK && st != AG_STATUS_BUFFER_TOO_SMALL) {
            fprintf(stderr, "train_full: ag_tokenizer_decode: %s\n", ag_tokenizer_last_error());
            close_tokenizer(tr);
            return EXIT_LIBRARY;
        }
        if (bytes > tr->piece_cap) tr->piece_cap = bytes;
    }
    const size_t prompt_len = cfg->prompt != NULL ? strlen(cfg->prompt) : 0;
    tr->prompt_cap = prompt_len > 0 ? prompt_len : 1; /* the default prompt is one byte */
    tr->prompt_ids = malloc(tr->prompt_cap * sizeof *tr->prompt_ids);
    tr->piece = malloc(tr->piece_cap > 0 ? tr->piece_cap : 1);
    if (tr->prompt_ids == NULL || tr->piece == NULL) {
        fprintf(stderr, "train_full: out of memory for the sampler's buffers\n");
        close_tokenizer(tr);
        return EXIT_LIBRARY;
    }
    /* The prompt run() samples after: --prompt, else a newline. */
    const char *text = prompt_len > 0 ? cfg->prompt : "\n";
    size_t count = 0;
    st = ag_tokenizer_encode(tr->tok, (const uint8_t *)text, strlen(text), false, tr->prompt_ids,
                             tr->prompt_cap, &count);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "train_full: --prompt: ag_tokenizer_encode: %s\n",
                ag_tokenizer_last_error());
        close_tokenizer(tr);
        return EXIT_LIBRARY;
    }
    for (size_t i = 0; i < count; i++) {
        const int32_t id = tr->prompt_ids[i];
        if ((size_t)id >= tr->draw_V) {
            close_tokenizer(tr);
            if (prompt_len == 0) { /* a vocabulary too small for GPT-2's newline */
                if (dist_root())
                    fprintf(info, "note: no sample: a newline is id %d, not below --vocab %zu; "
                                  "pass --prompt\n",
                            id, tr->draw_V);
                cfg->sample_chars = 0;
                return 0;
            }
            if (dist_root())
                fprintf(stderr, "train_full: --prompt: its token %zu is id %d, not below --vocab "
                                "%zu\n",
                        i, id, tr->draw_V);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* The validation pattern of token shards (--val, or --data's with _train_
   as _val_) and a vocabulary size; false with a message. */
static bool shard_paths(const struct config *cfg, char *val, size_t cap, char *err,
                        size_t errlen)
{
    if (cfg->vocab <= 0) {
        snprintf(err, errlen,
                 "--data %s: token shards need --vocab V, the tokenizer's size (50257 for "
                 "GPT-2's; --preset gpt2 sets it)",
                 cfg->data);
        return false;
    }
    if (cfg->val != NULL) {
        snprintf(val, cap, "%s", cfg->val);
        return true;
    }
    const char *at = strstr(cfg->data, "_train_");
    if (at == NULL) {
        snprintf(err, errlen,
                 "--data %s: no _train_ in the pattern to make the validation one from: pass "
                 "--val PATTERN",
                 cfg->data);
        return false;
    }
    snprintf(val, cap, "%.*s_val_%s", (int)(at - cfg->data), cfg->data, at + 7);
    return true;
}

static int train_main(int argc, char **argv)
{
    struct config cfg;
    char err[512];
    if (parse_args(argc, argv, &cfg, err, sizeof err) != 0) {
        if (dist_root())
            fprintf(stderr, "train_full: %s\n(run 'train_full --help' for usage)\n", err);
        return EXIT_USAGE;
    }
    if (cfg.help) {
        usage(stdout);
        return 0;
    }
    int rc = dist_check_config(&cfg);
    if (rc != 0) return rc;
    /* --init-from DIR: DIR/model.safetensors, and config.json's sizes. */
    static char init_file[PATH_CAP];
    rc = init_from_config(&cfg, init_file, err, sizeof err);
    if (rc != 0) {
        if (dist_root()) fprintf(stderr, "train_full: %s\n", err);
        return rc;
    }
    /* --sample-only keeps stdout for the sample alone, --score for its figures. */
    FILE *info = cfg.sample_only || cfg.score ? stderr : stdout;

    /* Data: --data, else data/shakespeare.txt, else the tiny shared corpus. */
    static const char *const DEFAULT_DATA = "data/shakespeare.txt";
    static const char *const FALLBACK_DATA = "../shared/data/shakespeare_tiny.txt";
    const char *path = cfg.data;
    const char *origin = "--data";
    if (path == NULL) {
        path = DEFAULT_DATA;
        origin = "default";
        if (access(path, R_OK) != 0) {
            if (dist_root())
                fprintf(stderr, "train_full: %s not found (run 'make data'); using %s\n",
                        DEFAULT_DATA, FALLBACK_DATA);
            path = FALLBACK_DATA;
            origin = "fallback";
        }
    }
    struct dataset data;
    memset(&data, 0, sizeof data);
    const bool shards = is_shard_pattern(path);
    char val_pattern[PATH_CAP];
    if (shards) {
        if (!shard_paths(&cfg, val_pattern, sizeof val_pattern, err, sizeof err) ||
            !load_shards(path, val_pattern, cfg.vocab, &data, err, sizeof err)) {
            if (dist_root()) fprintf(stderr, "train_full: %s\n", err);
            free_data(&data);
            return EXIT_USAGE;
        }
    } else if (!dist_load_data(path, &data, err, sizeof err)) {
        /* Under MPI, rank 0 read the file and sent its bytes to every rank. */
        if (dist_root()) fprintf(stderr, "train_full: --data: %s\n", err);
        free_data(&data);
        return EXIT_USAGE;
    }
    size_t T = (size_t)cfg.seq_len;
    if (shards && (data.n_train < T + 1 || data.n_val < T + 1)) {
        if (dist_root())
            fprintf(stderr,
                    "train_full: token shards too short for --context %zu: --data %s has %zu "
                    "tokens and --val %s %zu; each needs at least %zu\n",
                    T, path, data.n_train, val_pattern, data.n_val, T + 1);
        free_data(&data);
        return EXIT_USAGE;
    }
    if (data.n_train < T + 1 || data.n_val < T + 1) {
        if (dist_root())
            fprintf(stderr,
                    "train_full: --data: %s has %zu bytes: too short for preset %s (T=%zu): "
                    "the first 90%% (%zu bytes) and the last 10%% (%zu bytes) each need at "
                    "least T+1 = %zu bytes\n",
                    path, data.n, cfg.preset, T, data.n_train, data.n_val, T + 1);
        free_data(&data);
        return EXIT_USAGE;
    }
    if (cfg.vocab_given && !shards) {
        if (dist_root())
            fprintf(stderr,
                    "train_full: --vocab %d: the vocabulary of character data (%s) is its %d "
                    "distinct bytes; --vocab sizes the model for token shards\n",
                    cfg.vocab, path, data.V);
        free_data(&data);
        return EXIT_USAGE;
    }
    if (cfg.hf_vocab > 0 && cfg.hf_vocab != data.V) {
        if (dist_root())
            fprintf(stderr,
                    "train_full: --init-from %s: its config.json has vocab_size %d, but %s has "
                    "%s%d: the ids would not match%s\n",
                    cfg.init_from, cfg.hf_vocab, path, shards ? "--vocab " : "V=", data.V,
                    shards ? "" : " (character data's ids are its distinct bytes, sorted)");
        free_data(&data);
        return EXIT_USAGE;
    }
    if (check_model_size(&cfg, (size_t)data.V, err, sizeof err) != 0) {
        if (dist_root()) fprintf(stderr, "train_full: %s\n", err);
        free_data(&data);
        return EXIT_USAGE;
    }
    if (cfg.prompt != NULL && !shards) {
        for (const char *p = cfg.prompt; *p != '\0'; p++) {
            if (data.id_of[(unsigned char)*p] < 0) {
                if (dist_root())
                    fprintf(stderr,
                            "train_full: --prompt: byte 0x%02x ('%c') at offset %td is not in "
                            "the vocabulary of %s\n",
                            (unsigned char)*p, isprint((unsigned char)*p) ? *p : '?',
                            p - cfg.prompt, path);
                free_data(&data);
                return EXIT_USAGE;
            }
        }
    }
    static struct trainer tr;
    tr.draw_V = (size_t)data.V;
    if (shards && (cfg.sample_chars > 0 || cfg.sample_only)) {
        rc = open_tokenizer(&cfg, &tr, info);
        if (rc != 0) {
            free_data(&data);
            return rc;
        }
    }
    static struct run_paths paths; /* ~36 KiB of paths: static, not on the stack */
    /* Only rank 0 writes files: the other ranks' paths stay empty. */
    rc = dist_root() ? plan_outputs(&cfg, &paths, info) : 0;
    if (rc != 0) {
        close_tokenizer(&tr);
        free_data(&data);
        return rc;
    }
    if (!install_signals()) {
        fprintf(stderr, "train_full: cannot install the SIGINT/SIGTERM handler: %s\n",
                strerror(errno));
        close_tokenizer(&tr);
        free_data(&data);
        return EXIT_LIBRARY;
    }
    {
        /* One line: what runs underneath (a throwaway context asks). */
        ag_context *probe = NULL;
        ag_runtime rt;
        ag_thread_info th = {.size = sizeof th};
        static const char *const from[] = {"cores", "affinity mask", "cgroup quota",
                                           "AG_NUM_THREADS", "a call"};
        if (ag_context_new(&probe) == AG_STATUS_OK && ag_runtime_info(probe, &rt) == AG_STATUS_OK &&
            ag_thread_info_get(&th) == AG_STATUS_OK && th.source < 5)
            fprintf(info, "arenagrad %s | train_full | GEMM %s %s, %s kernels (%s) | element-wise %s | "
                    "%u threads (from %s; default %u)\n",
                    ag_version(), rt.gemm_library, rt.gemm_version, rt.gemm_kernels, rt.gemm_note,
                    rt.simd, th.threads, from[th.source], th.default_threads);
        else
            fprintf(info, "arenagrad %s | train_full\n", ag_version());
        if (probe != NULL) ag_context_free(&probe);
    }
    if (shards)
        fprintf(info,
                "data: token shards, train %s (%zu files, %zu tokens), val %s (%zu files, %zu "
                "tokens), V=%d\n",
                path, data.n_train_files, data.n_train, val_pattern, data.n_val_files, data.n_val,
                data.V);
    else
        fprintf(info, "data: %s (%s) %zu bytes, V=%d distinct bytes, train %zu / val %zu\n",
                path, origin, data.n, data.V, data.n_train, data.n_val);

    /* Every host buffer, allocated once. */
    static struct run_log log;
    tr.cfg = &cfg;
    tr.data = &data;
    tr.paths = &paths;
    tr.log = &log;
    tr.info = info;
    tr.B = (size_t)cfg.batch;
    tr.T = T;
    tr.V = (size_t)data.V;
    tr.progress.tty = !cfg.sample_only && isatty(STDOUT_FILENO) != 0;
    log.csv.fd = -1;
    size_t C = (size_t)cfg.n_embd;
    size_t biggest = (size_t)cfg.ffn_hidden * C;
    if (tr.V * C > biggest) biggest = tr.V * C;
    if (T * C > biggest) biggest = T * C;
    if (3 * C * C > biggest) biggest = 3 * C * C; /* gpt2's fused q, k, v */
    size_t steps = (size_t)cfg.iters; /* upper bound on the steps of this run */
    tr.ids = malloc(tr.B * T * sizeof *tr.ids);
    tr.targets = malloc(tr.B * T * sizeof *tr.targets);
    tr.logits = malloc(T * tr.V * sizeof *tr.logits);
    tr.probs = malloc(tr.V * sizeof *tr.probs);
    tr.sorted = malloc(tr.V * sizeof *tr.sorted);
    tr.window = malloc(T * sizeof *tr.window);
    tr.step_ms = malloc(steps * sizeof *tr.step_ms);
    tr.init_buf = malloc(biggest * sizeof *tr.init_buf);
    tr.model.pos_ids = malloc(T * sizeof *tr.model.pos_ids);
    struct series *curves[2] = {&log.train, &log.val};
    for (int i = 0; i < 2; i++) {
        curves[i]->cap = SERIES_CAP;
        curves[i]->x = malloc(SERIES_CAP * sizeof(float));
        curves[i]->y = malloc(SERIES_CAP * sizeof(float));
    }
    if (!tr.ids || !tr.targets || !tr.logits || !tr.probs || !tr.sorted || !tr.window ||
        !tr.step_ms || !tr.init_buf || !tr.model.pos_ids || !log.train.x || !log.train.y ||
        !log.val.x || !log.val.y) {
        fprintf(stderr, "train_full: out of memory for host buffers\n");
        rc = EXIT_LIBRARY;
    } else {
        ag_status st = ag_context_new(&tr.ctx);
        if (st != AG_STATUS_OK) {
            fprintf(stderr, "train_full: ag_context_new failed: %s\n", ag_status_str(st));
            rc = EXIT_LIBRARY;
        } else {
            rc = run(&tr);
        }
    }
    log_finish(&log);
    ag_context_free(&tr.ctx);
    free(tr.ids);
    free(tr.targets);
    free(tr.logits);
    free(tr.probs);
    free(tr.sorted);
    free(tr.window);
    free(tr.step_ms);
    free(tr.init_buf);
    free(tr.model.pos_ids);
    close_tokenizer(&tr);
    for (int i = 0; i < 2; i++) {
        free(curves[i]->x);
        free(curves[i]->y);
    }
    free_data(&data);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = dist_init(&argc, &argv);
    if (rc != 0) return rc;
    return dist_finish(train_main(argc, argv));
}

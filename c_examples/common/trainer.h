/*
 * common/: helpers any C trainer built on arenagrad can use (train_full is
 * the first). Nothing here knows the model or the data:
 *
 *   util.c      RNG, clock, resident memory, durations, sorting
 *   outfile.c   a write-only file with a fixed buffer (no malloc)
 *   runfiles.c  run folders: creating and probing them, file paths, files
 *               replaced atomically (a temporary file renamed over them),
 *               numbered checkpoints (keep the newest K, find the latest)
 *   schedule.c  the learning-rate schedule: warm-up, then constant, cosine
 *               or linear decay to a floor
 *   progress.c  the progress line with its ETA (one updating line on a
 *               terminal, one line per report otherwise)
 *   plot.c      loss curves with a bounded number of points, drawn as SVG
 *   report.c    a failed arenagrad call: its message and exit status
 *
 * Each file calls only files listed above it, so none calls back into one
 * that calls it (scripts/c_call_graph.py checks). Nothing here allocates,
 * so all of it may run inside a training loop (but for the numbered
 * checkpoints' folder scans). tests/check_common.c checks them.
 */
#ifndef TRAINER_H
#define TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "arenagrad.h"

/* Exit statuses shared by the trainers (also in their --help and READMEs).
 * Signals: 128 + signal. */
enum {
    EXIT_LIBRARY = 1,    /* an arenagrad call failed */
    EXIT_USAGE = 2,      /* bad arguments, data or output paths (nothing trained) */
    EXIT_CHECKPOINT = 3, /* --resume refused the checkpoint */
    EXIT_ARENA = 4,      /* the activation arena could not grow (--arena-limit-mb) */
    EXIT_DIVERGED = 5,   /* loss not finite or far above its start */
    EXIT_IO = 6,         /* writing a checkpoint or the run folder failed mid-run */
};

#define PATH_CAP 4096 /* longest path a trainer builds (run folder files) */

/* ------------------------------------------------------------------------ */
/* Utilities (util.c)                                                        */
/* ------------------------------------------------------------------------ */

uint64_t rng_next(uint64_t *s);
double rng_uniform(uint64_t *s);
double rng_normal(uint64_t *s);
/* Independent streams (a trainer numbers its own) from one user seed. */
uint64_t derive_seed(uint64_t seed, uint64_t stream);
double now_ms(void);
long rss_kb(void);
long anon_kb(void);
void format_duration(char *buf, size_t len, double ms);
void sort_floats(float *a, size_t n);

/* ------------------------------------------------------------------------ */
/* Buffered output without malloc (outfile.c)                                */
/* ------------------------------------------------------------------------ */

/* A write-only file with a fixed buffer: formatting and writing never malloc. */
struct outfile {
    int fd;
    bool failed; /* a write failed (errno in err) */
    int err;
    size_t len;
    char buf[8192];
};

bool out_open(struct outfile *f, const char *path, bool append);
void out_printf(struct outfile *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void out_write(struct outfile *f, const char *p, size_t n);
void out_flush(struct outfile *f); /* writes the buffer out now */
bool out_close(struct outfile *f); /* flushes; false if any write failed */

/* ------------------------------------------------------------------------ */
/* Run folders and atomic files (runfiles.c)                                 */
/* ------------------------------------------------------------------------ */

/* mkdir -p: creates every missing folder of `dir`. */
bool make_dirs(const char *dir, char *err, size_t errlen);
/* The folder part of a file path ("." for a bare name). */
void dir_of(const char *path, char *out, size_t len);
/* Creates and removes "<dir>/.<program>_probe.<pid>": the only sure test
 * that a folder takes new files. */
bool probe_dir(const char *dir, const char *program, char *err, size_t errlen);
/* A checkpoint path must be a file (not a folder) in a writable folder. */
bool check_file_target(const char *path, const char *program, char *err, size_t errlen);
/* out = "<dir>/<name>" (PATH_CAP bytes). */
void path_join(char *out, const char *dir, const char *name);
/* Closes `f`, written as `tmp`, and renames it over `path`, so a reader
 * sees the old file or the new one; on failure removes `tmp` and says why. */
bool out_commit(struct outfile *f, const char *tmp, const char *path, char *err,
                size_t errlen);
/* Writes the bytes a, b and c to `path` through "<path>.tmp" and a rename. */
bool write_replace(const char *path, const void *a, size_t na, const void *b, size_t nb,
                   const void *c, size_t nc, char *err, size_t errlen);

/* Numbered checkpoints of a run folder, "<dir>/<stem>-<step>.bin" with the
 * step in at least 8 digits. The library writes each one atomically; these
 * keep the newest few and find the one to resume from. Both read the folder
 * (opendir allocates): call them before the loop or at checkpoint time. */
void ckpt_path(char *out, const char *dir, const char *stem, uint64_t step);
/* The highest-step numbered checkpoint: true with its path and step; false
 * when there is none or the folder cannot be read (err says which). */
bool ckpt_latest(const char *dir, const char *stem, char *path, uint64_t *step, char *err,
                 size_t errlen);
/* Removes all but the `keep` highest-step numbered checkpoints. Returns how
 * many it removed, or -1 (err says why). */
long ckpt_keep_last(const char *dir, const char *stem, size_t keep, char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* Learning-rate schedule (schedule.c)                                       */
/* ------------------------------------------------------------------------ */

/* The values are stored in checkpoints: append only. */
enum schedule { SCHEDULE_CONSTANT, SCHEDULE_COSINE, SCHEDULE_LINEAR };

struct lr_schedule {
    enum schedule shape;
    double peak;        /* the learning rate after warm-up */
    double floor;       /* what the decay reaches */
    uint64_t warmup;    /* linear warm-up steps from peak/warmup to peak */
    uint64_t decay_end; /* the step at which the decay reaches the floor */
};

/* Learning rate of step `step` (1-based): warm-up, then the shape. */
double lr_at(const struct lr_schedule *s, uint64_t step);
const char *schedule_name(enum schedule s);

/* ------------------------------------------------------------------------ */
/* Progress line and ETA (progress.c)                                        */
/* ------------------------------------------------------------------------ */

struct progress {
    bool tty;         /* stdout is a terminal: one updating line */
    bool line_open;   /* that line is drawn and not yet ended */
    double last_draw; /* now_ms() when it was last drawn */
    /* steps since the last line, and all of this process's (the ETA) */
    double window_ms, total_ms;
    size_t window_steps, steps;
};

/* What one progress line shows. */
struct progress_line {
    uint64_t step, last;   /* this step and the run's last */
    double loss, lr;
    double units_per_step; /* tokens, images...: of the global batch */
    const char *unit;      /* their name per second: "tok", "img" */
    uint64_t arena_high_water;
};

/* Ends the terminal's progress line, if drawn, before other output. */
void progress_end_line(struct progress *p);
/* Counts a finished step of `ms` milliseconds. */
void progress_step(struct progress *p, double ms);
/* Whether a line is due after the latest step: on a terminal every 100 ms
 * (and at the first step and when `force`), otherwise at the first step,
 * every `every` steps and at the last one. */
bool progress_due(const struct progress *p, uint64_t step, uint64_t last, long every,
                  bool force);
/* Prints the line (the mean step time since the previous one, the ETA from
 * every step so far) and starts a new window. */
void progress_print(struct progress *p, const struct progress_line *l);

/* ------------------------------------------------------------------------ */
/* Loss curves and their SVG plot (plot.c)                                   */
/* ------------------------------------------------------------------------ */

/* A curve with a fixed number of points: when full, every other point goes. */
struct series {
    float *x, *y; /* [cap] kept points */
    size_t n, cap;
    uint64_t stride;  /* one point kept in `stride` offered (doubles when full) */
    uint64_t offered; /* points offered so far */
    float last_x, last_y; /* the latest point, drawn even when not kept */
};

void series_add(struct series *s, double x, double y);

/* What plot_write draws: a train and a validation curve against step. */
struct plot {
    const char *title;
    const char *y_label;         /* "loss (cross-entropy, nats per byte)" */
    const struct series *train;
    const struct series *val;    /* its latest and best value make the subtitle */
    uint64_t x_max;              /* the x axis reaches at least this step */
};

/* Draws the plot into `tmp`, then renames it over `path`. */
bool plot_write(const struct plot *pl, const char *path, const char *tmp, char *err,
                size_t errlen);

/* ------------------------------------------------------------------------ */
/* Failed calls (report.c)                                                   */
/* ------------------------------------------------------------------------ */

struct reporter {
    const char *program;        /* the prefix of every message */
    struct progress *progress;  /* its line is ended before a message */
    ag_context *ctx;            /* for the library's last error */
    long arena_limit_mb;        /* the arena cap, 0 if none */
    char setting[128];          /* what a capped arena was too small for */
};

/* Prints a failed call on stderr and returns the exit status it maps to. */
int report_failure(const struct reporter *r, const char *what, ag_status st);

#endif /* TRAINER_H */

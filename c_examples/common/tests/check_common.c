/*
 * check_common.c: checks of the trainer helpers that train_full's own
 * end-to-end tests do not reach (numbered checkpoints) and of the edges of
 * the others (run folders, atomic files, the schedule, curve thinning).
 * Run by scripts/test_examples.sh; prints one line per failed check and
 * exits 1 if any failed.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../trainer.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check_common: %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void touch(const char *dir, const char *name)
{
    char path[PATH_CAP];
    path_join(path, dir, name);
    FILE *f = fopen(path, "w");
    if (f != NULL) fclose(f);
}

static bool exists(const char *dir, const char *name)
{
    char path[PATH_CAP];
    path_join(path, dir, name);
    return access(path, F_OK) == 0;
}

static void check_checkpoints(const char *dir)
{
    char path[PATH_CAP], err[PATH_CAP + 128] = "";
    uint64_t step = 0;
    CHECK(!ckpt_latest(dir, "ckpt", path, &step, err, sizeof err) && strstr(err, "no ckpt-"),
          "an empty folder has no latest checkpoint (%s)", err);
    for (uint64_t s = 1; s <= 12; s++) {
        ckpt_path(path, dir, "ckpt", s);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "%s: %s", path, strerror(errno));
        if (f != NULL) fclose(f);
    }
    CHECK(exists(dir, "ckpt-00000007.bin"), "ckpt_path names the step in 8 digits");
    /* Not numbered checkpoints of stem "ckpt": never picked, never removed. */
    const char *others[] = {"ckpt-13.bin.tmp", "ckptx-99.bin", "ckpt-.bin", "other-50.bin",
                            "ckpt-99999999999999999999999.bin", "ckpt-1e3.bin", "best.bin"};
    const size_t n_others = sizeof others / sizeof others[0];
    for (size_t i = 0; i < n_others; i++) touch(dir, others[i]);
    touch(dir, "ckpt-100.bin"); /* fewer digits, highest step */
    CHECK(ckpt_latest(dir, "ckpt", path, &step, err, sizeof err) && step == 100 &&
              strcmp(strrchr(path, '/'), "/ckpt-100.bin") == 0,
          "latest is step 100 (got %llu, %s)", (unsigned long long)step, path);
    long removed = ckpt_keep_last(dir, "ckpt", 3, err, sizeof err);
    CHECK(removed == 10, "keeping 3 of 13 removes 10 (removed %ld: %s)", removed, err);
    CHECK(exists(dir, "ckpt-00000011.bin") && exists(dir, "ckpt-00000012.bin") &&
              exists(dir, "ckpt-100.bin") && !exists(dir, "ckpt-00000010.bin"),
          "the newest three are kept");
    for (size_t i = 0; i < n_others; i++)
        CHECK(exists(dir, others[i]), "%s is left alone", others[i]);
    removed = ckpt_keep_last(dir, "ckpt", 3, err, sizeof err);
    CHECK(removed == 0, "a second pass removes nothing (removed %ld)", removed);
    removed = ckpt_keep_last(dir, "ckpt", 0, err, sizeof err);
    CHECK(removed == 3 && !ckpt_latest(dir, "ckpt", path, &step, err, sizeof err),
          "keeping none removes all three (removed %ld)", removed);
    char missing[PATH_CAP];
    path_join(missing, dir, "no-such-folder");
    CHECK(ckpt_keep_last(missing, "ckpt", 1, err, sizeof err) == -1 &&
              strstr(err, "cannot read folder") != NULL,
          "a missing folder is an error (%s)", err);
}

static void check_run_folder(const char *dir)
{
    char nested[PATH_CAP], err[PATH_CAP + 128] = "";
    path_join(nested, dir, "a/b/c");
    CHECK(make_dirs(nested, err, sizeof err), "mkdir -p %s (%s)", nested, err);
    CHECK(probe_dir(nested, "check_common", err, sizeof err), "probe %s (%s)", nested, err);
    CHECK(!check_file_target(nested, "check_common", err, sizeof err) &&
              strstr(err, "is a folder") != NULL,
          "a folder is no checkpoint path (%s)", err);
    char out[PATH_CAP];
    dir_of("/x", out, sizeof out);
    CHECK(strcmp(out, "/") == 0, "dir_of(/x) = %s", out);
    dir_of("name", out, sizeof out);
    CHECK(strcmp(out, ".") == 0, "dir_of(name) = %s", out);
    dir_of("a/b/c.bin", out, sizeof out);
    CHECK(strcmp(out, "a/b") == 0, "dir_of(a/b/c.bin) = %s", out);

    /* Atomic files: the new content in place, no temporary left. */
    char path[PATH_CAP], tmp[PATH_CAP];
    path_join(path, nested, "f.txt");
    path_join(tmp, nested, ".f.txt.tmp");
    static struct outfile f;
    CHECK(out_open(&f, tmp, false), "open %s", tmp);
    out_printf(&f, "%d %s\n", 42, "lines");
    CHECK(out_commit(&f, tmp, path, err, sizeof err), "commit (%s)", err);
    char buf[64] = "";
    FILE *in = fopen(path, "r");
    if (in != NULL) {
        if (fgets(buf, sizeof buf, in) == NULL) buf[0] = '\0';
        fclose(in);
    }
    CHECK(strcmp(buf, "42 lines\n") == 0 && access(tmp, F_OK) != 0, "committed file: '%s'", buf);
    CHECK(write_replace(path, "ab", 2, "", 0, "c\n", 2, err, sizeof err), "replace (%s)", err);
    in = fopen(path, "r");
    buf[0] = '\0';
    if (in != NULL) {
        if (fgets(buf, sizeof buf, in) == NULL) buf[0] = '\0';
        fclose(in);
    }
    CHECK(strcmp(buf, "abc\n") == 0, "replaced file: '%s'", buf);
    /* A rename onto a folder fails: the temporary goes, the folder stays. */
    CHECK(out_open(&f, tmp, false), "open %s", tmp);
    CHECK(!out_commit(&f, tmp, nested, err, sizeof err) && access(tmp, F_OK) != 0,
          "a failed commit removes its temporary (%s)", err);
}

static void check_schedule(void)
{
    struct lr_schedule s = {SCHEDULE_COSINE, 1e-3, 1e-4, 10, 110};
    CHECK(lr_at(&s, 0) == lr_at(&s, 1) && lr_at(&s, 1) == 1e-4, "warm-up starts at peak/warmup");
    CHECK(lr_at(&s, 10) == 1e-3, "warm-up ends at the peak");
    CHECK(fabs(lr_at(&s, 60) - 5.5e-4) < 1e-15, "cosine halfway: %.17g", lr_at(&s, 60));
    CHECK(lr_at(&s, 110) == 1e-4 && lr_at(&s, 1000) == 1e-4, "cosine ends at the floor");
    s.shape = SCHEDULE_LINEAR;
    CHECK(fabs(lr_at(&s, 35) - 7.75e-4) < 1e-15, "linear quarter: %.17g", lr_at(&s, 35));
    s.shape = SCHEDULE_CONSTANT;
    CHECK(lr_at(&s, 1000) == 1e-3, "constant stays at the peak");
    s.decay_end = 5; /* decay over before the warm-up ends */
    s.shape = SCHEDULE_COSINE;
    CHECK(lr_at(&s, 11) == 1e-4, "a decay shorter than the warm-up gives the floor");
    CHECK(strcmp(schedule_name(SCHEDULE_LINEAR), "linear") == 0, "name");
}

static void check_series(void)
{
    float x[4], y[4];
    struct series s = {.x = x, .y = y, .cap = 4};
    for (int i = 1; i <= 10; i++) series_add(&s, i, 10.0 - i);
    CHECK(s.n <= s.cap && s.stride == 4 && s.offered == 10, "n %zu stride %llu", s.n,
          (unsigned long long)s.stride);
    CHECK(s.x[0] == 1.0f && s.x[1] == 5.0f && s.x[2] == 9.0f && s.n == 3,
          "every 4th point kept: %g %g %g (n %zu)", s.x[0], s.x[1], s.x[2], s.n);
    CHECK(s.last_x == 10.0f && s.last_y == 0.0f, "the latest point is kept aside");
}

int main(void)
{
    char dir[] = "/tmp/check_common.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "check_common: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    char ckdir[PATH_CAP], rundir[PATH_CAP], err[PATH_CAP + 128];
    path_join(ckdir, dir, "ck");
    path_join(rundir, dir, "run");
    if (!make_dirs(ckdir, err, sizeof err) || !make_dirs(rundir, err, sizeof err)) {
        fprintf(stderr, "check_common: %s\n", err);
        return 1;
    }
    check_checkpoints(ckdir);
    check_run_folder(rundir);
    check_schedule();
    check_series();
    char cmd[PATH_CAP + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "check_common: could not remove %s\n", dir);
    if (failures > 0) {
        fprintf(stderr, "check_common: %d checks failed\n", failures);
        return 1;
    }
    printf("check_common: numbered checkpoints, run folders, atomic files, schedule, curves: ok\n");
    return 0;
}

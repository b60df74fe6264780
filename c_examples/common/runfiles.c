/*
 * runfiles.c: the files of a run folder. Folders are created and probed
 * before the first step, so that a run never trains for an hour and then
 * fails to save; files a reader may open at any time (the log, the plot,
 * exports) are written to a temporary name and renamed over the old one.
 * Numbered checkpoints are kept to the newest few, the newest resumed.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer.h"

bool make_dirs(const char *dir, char *err, size_t errlen)
{
    char buf[PATH_CAP];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create folder '%s': %s", buf, strerror(errno));
            return false;
        }
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "'%s' is not a folder", dir);
        return false;
    }
    return true;
}

void dir_of(const char *path, char *out, size_t len)
{
    snprintf(out, len, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == NULL) snprintf(out, len, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

bool probe_dir(const char *dir, const char *program, char *err, size_t errlen)
{
    char probe[PATH_CAP + 64];
    snprintf(probe, sizeof probe, "%s/.%s_probe.%ld", dir, program, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "folder '%s' is not writable: %s", dir, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

bool check_file_target(const char *path, const char *program, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is a folder, not a file path", path);
        return false;
    }
    char dir[PATH_CAP];
    dir_of(path, dir, sizeof dir);
    return probe_dir(dir, program, err, errlen);
}

void path_join(char *out, const char *dir, const char *name)
{
    snprintf(out, PATH_CAP, "%s/%s", dir, name);
}

bool out_commit(struct outfile *f, const char *tmp, const char *path, char *err, size_t errlen)
{
    if (!out_close(f) || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(f->failed ? f->err : errno));
        unlink(tmp);
        return false;
    }
    return true;
}

bool write_replace(const char *path, const void *a, size_t na, const void *b, size_t nb,
                   const void *c, size_t nc, char *err, size_t errlen)
{
    char tmp[PATH_CAP + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        return false;
    }
    bool ok = fwrite(a, 1, na, f) == na && fwrite(b, 1, nb, f) == nb && fwrite(c, 1, nc, f) == nc;
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        remove(tmp);
        return false;
    }
    return true;
}

void ckpt_path(char *out, const char *dir, const char *stem, uint64_t step)
{
    snprintf(out, PATH_CAP, "%s/%s-%08" PRIu64 ".bin", dir, stem, step);
}

/* The step of "<stem>-<digits>.bin", or false for any other name. */
static bool ckpt_step(const char *name, const char *stem, uint64_t *step)
{
    size_t n = strlen(stem);
    if (strncmp(name, stem, n) != 0 || name[n] != '-') return false;
    const char *p = name + n + 1;
    uint64_t v = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0 || strcmp(p, ".bin") != 0) return false;
    *step = v;
    return true;
}

/* Counts the numbered checkpoints and finds the lowest and highest steps
 * and the paths of their files (PATH_CAP bytes each). */
static bool ckpt_scan(const char *dir, const char *stem, size_t *count, uint64_t *lo,
                      char *lo_path, uint64_t *hi, char *hi_path, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, errlen, "cannot read folder '%s': %s", dir, strerror(errno));
        return false;
    }
    *count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        uint64_t step;
        if (!ckpt_step(e->d_name, stem, &step)) continue;
        if (*count == 0 || step < *lo) {
            *lo = step;
            path_join(lo_path, dir, e->d_name);
        }
        if (*count == 0 || step > *hi) {
            *hi = step;
            path_join(hi_path, dir, e->d_name);
        }
        (*count)++;
    }
    closedir(d);
    return true;
}

bool ckpt_latest(const char *dir, const char *stem, char *path, uint64_t *step, char *err,
                 size_t errlen)
{
    size_t count = 0;
    uint64_t lo = 0;
    char lo_path[PATH_CAP];
    if (!ckpt_scan(dir, stem, &count, &lo, lo_path, step, path, err, errlen)) return false;
    if (count == 0) {
        snprintf(err, errlen, "no %s-<step>.bin in '%s'", stem, dir);
        return false;
    }
    return true;
}

long ckpt_keep_last(const char *dir, const char *stem, size_t keep, char *err, size_t errlen)
{
    char lo_path[PATH_CAP], hi_path[PATH_CAP];
    long removed = 0;
    for (;;) {
        size_t count = 0;
        uint64_t lo = 0, hi = 0;
        if (!ckpt_scan(dir, stem, &count, &lo, lo_path, &hi, hi_path, err, errlen)) return -1;
        if (count <= keep) return removed;
        if (unlink(lo_path) != 0) {
            snprintf(err, errlen, "cannot remove %s: %s", lo_path, strerror(errno));
            return -1;
        }
        removed++;
    }
}

/*
 * outfile.c: a write-only file descriptor with a fixed buffer, so that
 * formatting a log row or redrawing a plot during training never calls
 * malloc (stdio may).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

bool out_open(struct outfile *f, const char *path, bool append)
{
    f->len = 0;
    f->failed = false;
    f->err = 0;
    f->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (f->fd < 0) {
        f->failed = true;
        f->err = errno;
        return false;
    }
    return true;
}

void out_flush(struct outfile *f)
{
    size_t done = 0;
    while (!f->failed && done < f->len) {
        ssize_t n = write(f->fd, f->buf + done, f->len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            f->failed = true;
            f->err = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    f->len = 0;
}

void out_write(struct outfile *f, const char *p, size_t n)
{
    while (n > 0 && !f->failed) {
        size_t room = sizeof f->buf - f->len;
        size_t k = n < room ? n : room;
        memcpy(f->buf + f->len, p, k);
        f->len += k;
        p += k;
        n -= k;
        if (f->len == sizeof f->buf) out_flush(f);
    }
}

void out_printf(struct outfile *f, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    out_write(f, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

bool out_close(struct outfile *f)
{
    if (f->fd < 0) return !f->failed;
    out_flush(f);
    if (close(f->fd) != 0 && !f->failed) {
        f->failed = true;
        f->err = errno;
    }
    f->fd = -1;
    return !f->failed;
}

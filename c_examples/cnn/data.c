/*
 * data.c: IDX files (the MNIST family's format) through zlib, which reads
 * gzip-compressed and plain files alike. An IDX file is a big-endian
 * header (magic 2051 and n, rows, columns for images; magic 2049 and n for
 * labels) followed by one unsigned byte per pixel or label.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cnn.h"

#define IDX_IMAGES_MAGIC 2051u
#define IDX_LABELS_MAGIC 2049u

/* Reads exactly n bytes; false with a message when the file ends first. */
static bool read_exact(gzFile f, const char *path, void *dst, size_t n, const char *what,
                       char *err, size_t errlen)
{
    unsigned char *p = dst;
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f, p + got, (unsigned)want);
        if (r < 0) {
            int code = 0;
            const char *msg = gzerror(f, &code);
            snprintf(err, errlen, "%s: reading %s: %s", path, what, msg);
            return false;
        }
        if (r == 0) {
            snprintf(err, errlen, "%s: truncated: %zu of the %zu bytes of %s", path, got, n,
                     what);
            return false;
        }
        got += (size_t)r;
    }
    return true;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Opens an IDX file and reads its header: the magic must be `magic`, and
 * dims[0..ndim] receives the dimensions. */
static gzFile open_idx(const char *path, uint32_t magic, uint32_t *dims, size_t ndim,
                       char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open it", path);
        return NULL;
    }
    unsigned char head[16];
    if (!read_exact(f, path, head, 4 + 4 * ndim, "the header", err, errlen)) {
        gzclose(f);
        return NULL;
    }
    uint32_t got = be32(head);
    if (got != magic) {
        snprintf(err, errlen, "%s: magic number %u, expected %u (%s)", path, got, magic,
                 magic == IDX_IMAGES_MAGIC ? "an IDX images file" : "an IDX labels file");
        gzclose(f);
        return NULL;
    }
    for (size_t i = 0; i < ndim; i++) dims[i] = be32(head + 4 + 4 * i);
    return f;
}

bool dataset_load(struct dataset *d, const char *images_path, const char *labels_path,
                  size_t limit, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    uint32_t idims[3], ldims[1];
    gzFile fi = open_idx(images_path, IDX_IMAGES_MAGIC, idims, 3, err, errlen);
    if (fi == NULL) return false;
    gzFile fl = open_idx(labels_path, IDX_LABELS_MAGIC, ldims, 1, err, errlen);
    if (fl == NULL) {
        gzclose(fi);
        return false;
    }
    bool ok = false;
    unsigned char *raw = NULL;
    if (idims[1] != IMG_SIDE || idims[2] != IMG_SIDE) {
        snprintf(err, errlen, "%s: images are %ux%u, expected %dx%d", images_path, idims[1],
                 idims[2], IMG_SIDE, IMG_SIDE);
        goto out;
    }
    if (idims[0] != ldims[0]) {
        snprintf(err, errlen, "%s has %u images but %s has %u labels", images_path, idims[0],
                 labels_path, ldims[0]);
        goto out;
    }
    if (idims[0] == 0) {
        snprintf(err, errlen, "%s: no images", images_path);
        goto out;
    }
    size_t n = idims[0];
    if (limit > 0 && limit < n) n = limit;
    raw = malloc(n * IMG_PIXELS);
    d->images = malloc(n * IMG_PIXELS * sizeof *d->images);
    d->labels = malloc(n * sizeof *d->labels);
    if (raw == NULL || d->images == NULL || d->labels == NULL) {
        snprintf(err, errlen, "out of memory for %zu images", n);
        goto out;
    }
    if (!read_exact(fi, images_path, raw, n * IMG_PIXELS, "the pixels", err, errlen)) goto out;
    for (size_t i = 0; i < n * IMG_PIXELS; i++) d->images[i] = (float)raw[i] / 255.0f;
    if (!read_exact(fl, labels_path, raw, n, "the labels", err, errlen)) goto out;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] >= N_CLASSES) {
            snprintf(err, errlen, "%s: label %u of item %zu is out of range [0, %d)",
                     labels_path, raw[i], i, N_CLASSES);
            goto out;
        }
        d->labels[i] = raw[i];
    }
    d->n = n;
    ok = true;
out:
    free(raw);
    gzclose(fi);
    gzclose(fl);
    if (!ok) dataset_free(d);
    return ok;
}

void dataset_stats(const struct dataset *d, float *mean, float *std)
{
    const size_t count = d->n * IMG_PIXELS;
    double sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < count; i++) sum += d->images[i];
    const double mu = sum / (double)count;
    for (size_t i = 0; i < count; i++) {
        double dv = d->images[i] - mu;
        sq += dv * dv;
    }
    *mean = (float)mu;
    *std = (float)sqrt(sq / (double)count);
}

void dataset_normalise(struct dataset *d, float mean, float std)
{
    const float inv = std > 0.0f ? 1.0f / std : 1.0f;
    for (size_t i = 0; i < d->n * IMG_PIXELS; i++) d->images[i] = (d->images[i] - mean) * inv;
}

void dataset_free(struct dataset *d)
{
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

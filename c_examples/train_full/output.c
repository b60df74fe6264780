/*
 * output.c: the run folder's log.csv, whose rows also feed the loss curves
 * of loss.svg (common/plot.c).
 *
 * Writes go through `struct outfile` (a file descriptor and a fixed buffer):
 * formatting a row during training never calls malloc. Only log_start,
 * before the first step, reads an earlier log with stdio.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_full.h"

static const char CSV_HEADER[] =
    "step,lr,train_loss,val_loss,grad_norm,ms_per_step,tok_per_s,arena_high_water_bytes\n";

/* Parses one field of a CSV line at *p; an empty field is NAN. */
static double csv_field(const char **p, bool *ok)
{
    const char *s = *p;
    if (*s == ',' || *s == '\n' || *s == '\0') {
        if (*s == ',') (*p)++;
        return NAN;
    }
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || (*end != ',' && *end != '\n' && *end != '\0')) *ok = false;
    *p = *end == ',' ? end + 1 : end;
    return v;
}

/*
 * Starts log.csv. A fresh run writes the header. A resumed run keeps the rows
 * of an earlier log up to the resumed step (later ones belong to steps the
 * checkpoint does not hold and are trained again) and feeds them to the plot.
 */
bool log_start(struct run_log *lg, const struct run_paths *p, uint64_t resume_step, char *err,
               size_t errlen)
{
    lg->open = false;
    if (!p->folder) return true;
    struct outfile *f = &lg->csv;
    if (!out_open(f, p->log_tmp, false)) {
        snprintf(err, errlen, "%s: cannot write: %s", p->log_tmp, strerror(f->err));
        return false;
    }
    out_write(f, CSV_HEADER, sizeof CSV_HEADER - 1);
    size_t kept = 0;
    FILE *old = resume_step > 0 ? fopen(p->log, "r") : NULL;
    if (old != NULL) {
        char line[1024];
        bool header_ok = fgets(line, sizeof line, old) != NULL && strcmp(line, CSV_HEADER) == 0;
        while (header_ok && fgets(line, sizeof line, old) != NULL) {
            const char *q = line;
            bool ok = true;
            double v[8];
            for (int i = 0; i < 8; i++) v[i] = csv_field(&q, &ok);
            if (!ok || !(v[0] >= 1.0) || v[0] > (double)resume_step) continue;
            out_write(f, line, strlen(line));
            if (isfinite(v[2])) series_add(&lg->train, v[0], v[2]);
            if (isfinite(v[3])) series_add(&lg->val, v[0], v[3]);
            kept++;
        }
        fclose(old);
    }
    if (!out_commit(f, p->log_tmp, p->log, err, errlen)) return false;
    if (!out_open(f, p->log, true)) {
        snprintf(err, errlen, "%s: cannot append: %s", p->log, strerror(f->err));
        return false;
    }
    lg->open = true;
    if (resume_step > 0)
        printf("log: %s (%zu earlier rows kept, up to step %" PRIu64 ")\n", p->log, kept,
               resume_step);
    return true;
}

static void fmt_num(char *buf, size_t len, const char *fmt, double v)
{
    if (isnan(v)) buf[0] = '\0';
    else snprintf(buf, len, fmt, v);
}

/* Appends one row and writes it out at once (the file is always current). */
void log_append(struct run_log *lg, const struct log_row *r)
{
    if (isfinite(r->train_loss)) series_add(&lg->train, (double)r->step, r->train_loss);
    if (isfinite(r->val_loss)) series_add(&lg->val, (double)r->step, r->val_loss);
    if (!lg->open) return;
    char tl[32], vl[32], gn[32];
    fmt_num(tl, sizeof tl, "%.6f", r->train_loss);
    fmt_num(vl, sizeof vl, "%.6f", r->val_loss);
    fmt_num(gn, sizeof gn, "%.4f", r->grad_norm);
    out_printf(&lg->csv, "%" PRIu64 ",%.6g,%s,%s,%s,%.3f,%.0f,%" PRIu64 "\n", r->step, r->lr, tl,
               vl, gn, r->ms_per_step, r->tok_per_s, r->arena_high_water);
    out_flush(&lg->csv);
    if (lg->csv.failed && !lg->warned) {
        fflush(stdout);
        fprintf(stderr, "train_full: warning: log.csv: write failed: %s (logging stops)\n",
                strerror(lg->csv.err));
        lg->warned = true;
        lg->open = false;
    }
}

void log_finish(struct run_log *lg)
{
    if (lg->csv.fd >= 0 && lg->open) out_close(&lg->csv);
    lg->open = false;
}

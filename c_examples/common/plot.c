/*
 * plot.c: loss curves kept in a fixed number of points (a run of any length
 * plots in bounded memory and time) and their SVG drawing, written through
 * an outfile, so redrawing during training never calls malloc.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer.h"

void series_add(struct series *s, double x, double y)
{
    if (s->cap < 2) return;
    if (s->stride == 0) s->stride = 1;
    s->last_x = (float)x;
    s->last_y = (float)y;
    if (s->offered++ % s->stride != 0) return;
    if (s->n == s->cap) {
        /* Keep every other point and halve the rate from now on. */
        size_t k = 0;
        for (size_t i = 0; i < s->n; i += 2, k++) {
            s->x[k] = s->x[i];
            s->y[k] = s->y[i];
        }
        s->n = k;
        s->stride *= 2;
        if ((s->offered - 1) % s->stride != 0) return;
    }
    s->x[s->n] = (float)x;
    s->y[s->n] = (float)y;
    s->n++;
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving about `n` ticks. */
static double nice_step(double range, int n)
{
    if (!(range > 0.0)) return 1.0;
    double raw = range / n;
    double p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

/* A tick label without trailing zeros: 0.5, 1, 2.5, 1500, 12k. */
static void tick_label(char *buf, size_t len, double v, double step)
{
    if (fabs(v) < step * 1e-6) v = 0.0;
    if (fabs(v) >= 10000.0 && fmod(v, 1000.0) == 0.0) snprintf(buf, len, "%.0fk", v / 1000.0);
    else if (step >= 1.0) snprintf(buf, len, "%.0f", v);
    else if (step >= 0.1) snprintf(buf, len, "%.1f", v);
    else snprintf(buf, len, "%.2f", v);
}

#define W 760
#define H 440
#define ML 68 /* margins: left, right, top, bottom */
#define MR 24
#define MT 58
#define MB 54
#define TRAIN_COLOUR "#2563eb"
#define VAL_COLOUR "#ea580c"

struct frame {
    double x0, x1, y0, y1;
};

static double px(const struct frame *fr, double x)
{
    return ML + (x - fr->x0) / (fr->x1 - fr->x0) * (W - ML - MR);
}
static double py(const struct frame *fr, double y)
{
    return H - MB - (y - fr->y0) / (fr->y1 - fr->y0) * (H - MT - MB);
}

static void draw_curve(struct outfile *f, const struct frame *fr, const struct series *s,
                       const char *colour, double width, bool dots)
{
    size_t total = s->n + (s->offered > 0 && (s->n == 0 || s->x[s->n - 1] != s->last_x));
    if (total == 0) return;
    out_printf(f,
               "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
               "stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"",
               colour, width);
    for (size_t i = 0; i < total; i++) {
        double x = i < s->n ? s->x[i] : s->last_x, y = i < s->n ? s->y[i] : s->last_y;
        out_printf(f, "%s%.1f,%.1f", i ? " " : "", px(fr, x), py(fr, y));
    }
    out_printf(f, "\"/>\n");
    if (!dots) return;
    for (size_t i = 0; i < total; i++) {
        double x = i < s->n ? s->x[i] : s->last_x, y = i < s->n ? s->y[i] : s->last_y;
        out_printf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" fill=\"%s\" stroke=\"#fff\" "
                      "stroke-width=\"1\"/>\n",
                   px(fr, x), py(fr, y), colour);
    }
}

static void series_range(const struct series *s, double *lo, double *hi, double *xhi)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->y[i] < *lo) *lo = s->y[i];
        if (s->y[i] > *hi) *hi = s->y[i];
        if (s->x[i] > *xhi) *xhi = s->x[i];
    }
    if (s->offered > 0) {
        if (s->last_y < *lo) *lo = s->last_y;
        if (s->last_y > *hi) *hi = s->last_y;
        if (s->last_x > *xhi) *xhi = s->last_x;
    }
}

bool plot_write(const struct plot *pl, const char *path, const char *tmp, char *err,
                size_t errlen)
{
    static struct outfile f; /* 8 KiB buffer: not on the stack, not on the heap */
    const struct series *train = pl->train, *val = pl->val;
    const uint64_t x_max = pl->x_max;
    if (!out_open(&f, tmp, false)) {
        snprintf(err, errlen, "%s: cannot write: %s", tmp, strerror(f.err));
        return false;
    }
    double lo = INFINITY, hi = -INFINITY, xhi = 1.0;
    series_range(train, &lo, &hi, &xhi);
    series_range(val, &lo, &hi, &xhi);
    if (!(lo <= hi)) lo = 0.0, hi = 1.0;
    if (hi - lo < 0.1) lo -= 0.05, hi += 0.05;
    double ystep = nice_step(hi - lo, 6);
    struct frame fr = {0.0, (double)(x_max > xhi ? x_max : (uint64_t)xhi), 0.0, 0.0};
    fr.y0 = floor(lo / ystep) * ystep;
    fr.y1 = ceil(hi / ystep) * ystep;
    if (fr.y0 < 0.0 && lo >= 0.0) fr.y0 = 0.0;
    if (fr.y1 <= fr.y0) fr.y1 = fr.y0 + ystep;
    double xstep = nice_step(fr.x1 - fr.x0, 8);

    out_printf(&f,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" "
               "font-size=\"12\">\n",
               W, H, W, H);
    out_printf(&f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
    out_printf(&f,
               "<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\" "
               "fill=\"#111827\">%s</text>\n",
               ML, pl->title);
    /* Subtitle: the latest and best validation loss. */
    if (val->offered > 0) {
        double best = INFINITY, best_x = 0.0;
        for (size_t i = 0; i < val->n; i++)
            if (val->y[i] < best) best = val->y[i], best_x = val->x[i];
        if (val->last_y < best) best = val->last_y, best_x = val->last_x;
        out_printf(&f,
                   "<text x=\"%d\" y=\"42\" fill=\"#4b5563\">validation loss %.3f at step "
                   "%.0f (best %.3f at step %.0f)</text>\n",
                   ML, (double)val->last_y, (double)val->last_x, best, best_x);
    }
    /* Grid and tick labels. */
    out_printf(&f, "<g stroke=\"#e5e7eb\" stroke-width=\"1\">\n");
    for (double y = fr.y0; y <= fr.y1 + ystep * 1e-6; y += ystep)
        out_printf(&f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ML, py(&fr, y),
                   W - MR, py(&fr, y));
    for (double x = fr.x0; x <= fr.x1 + xstep * 1e-6; x += xstep)
        out_printf(&f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px(&fr, x), MT,
                   px(&fr, x), H - MB);
    out_printf(&f, "</g>\n<g fill=\"#4b5563\">\n");
    char label[32];
    for (double y = fr.y0; y <= fr.y1 + ystep * 1e-6; y += ystep) {
        tick_label(label, sizeof label, y, ystep);
        out_printf(&f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 8,
                   py(&fr, y) + 4.0, label);
    }
    for (double x = fr.x0; x <= fr.x1 + xstep * 1e-6; x += xstep) {
        tick_label(label, sizeof label, x, xstep);
        out_printf(&f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                   px(&fr, x), H - MB + 18, label);
    }
    out_printf(&f, "</g>\n");
    /* Axes and their labels. */
    out_printf(&f,
               "<path d=\"M%d %d V%d H%d\" fill=\"none\" stroke=\"#6b7280\" "
               "stroke-width=\"1\"/>\n",
               ML, MT, H - MB, W - MR);
    out_printf(&f,
               "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#111827\">step</text>\n",
               ML + (W - ML - MR) / 2, H - 14);
    out_printf(&f,
               "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\" "
               "fill=\"#111827\">%s</text>\n",
               MT + (H - MT - MB) / 2, pl->y_label);
    /* Curves, clipped to the plot area. */
    out_printf(&f,
               "<clipPath id=\"area\"><rect x=\"%d\" y=\"%d\" width=\"%d\" "
               "height=\"%d\"/></clipPath>\n<g clip-path=\"url(#area)\">\n",
               ML - 4, MT - 4, W - ML - MR + 8, H - MT - MB + 8);
    draw_curve(&f, &fr, train, TRAIN_COLOUR, 1.6, false);
    draw_curve(&f, &fr, val, VAL_COLOUR, 2.0, true);
    out_printf(&f, "</g>\n");
    /* Legend, top right inside the plot. */
    int lx = W - MR - 150, ly = MT + 10;
    out_printf(&f,
               "<rect x=\"%d\" y=\"%d\" width=\"142\" height=\"46\" rx=\"4\" fill=\"#ffffff\" "
               "fill-opacity=\"0.9\" stroke=\"#d1d5db\"/>\n",
               lx, ly);
    out_printf(&f,
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
               "stroke-width=\"2.5\"/>\n<text x=\"%d\" y=\"%d\" fill=\"#111827\">train "
               "loss</text>\n",
               lx + 10, ly + 15, lx + 34, ly + 15, TRAIN_COLOUR, lx + 42, ly + 19);
    out_printf(&f,
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
               "stroke-width=\"2.5\"/>\n<circle cx=\"%d\" cy=\"%d\" r=\"3.2\" fill=\"%s\"/>\n"
               "<text x=\"%d\" y=\"%d\" fill=\"#111827\">validation loss</text>\n",
               lx + 10, ly + 33, lx + 34, ly + 33, VAL_COLOUR, lx + 22, ly + 33, VAL_COLOUR,
               lx + 42, ly + 37);
    out_printf(&f, "</svg>\n");
    return out_commit(&f, tmp, path, err, errlen);
}

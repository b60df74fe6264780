/*
 * progress.c: the progress line. On a terminal it is one line redrawn in
 * place at most every 100 ms; in a log file one line per report, so that a
 * run's output is the same from one machine to the next except for times.
 */
#include <inttypes.h>
#include <stdio.h>

#include "trainer.h"

void progress_end_line(struct progress *p)
{
    if (p->line_open) fputc('\n', stdout);
    p->line_open = false;
}

void progress_step(struct progress *p, double ms)
{
    p->window_ms += ms;
    p->total_ms += ms;
    p->window_steps++;
    p->steps++;
}

bool progress_due(const struct progress *p, uint64_t step, uint64_t last, long every,
                  bool force)
{
    if (p->tty) return now_ms() - p->last_draw >= 100.0 || force || p->steps == 1;
    return p->steps == 1 || step % (uint64_t)every == 0 || step == last;
}

void progress_print(struct progress *p, const struct progress_line *l)
{
    double avg = p->window_ms / (double)p->window_steps;
    char eta[32];
    const double ms_per_step = p->total_ms / (double)p->steps;
    format_duration(eta, sizeof eta, (double)(l->last - l->step) * ms_per_step);
    printf("%sstep %" PRIu64 "/%" PRIu64 " loss %.6f | lr %.2e | %.2f ms/step | "
           "%.0f %s/s | eta %s | arena hw %.2f MiB%s",
           p->tty ? "\r\033[K" : "", l->step, l->last, l->loss, l->lr, avg,
           l->units_per_step * 1000.0 / avg, l->unit, eta,
           (double)l->arena_high_water / 1048576.0, p->tty ? "" : "\n");
    fflush(stdout);
    p->line_open = p->tty;
    p->window_ms = 0.0;
    p->window_steps = 0;
    p->last_draw = now_ms();
}
